"""What the TRSM tests share: a user's kernel that solves with the device API, and the check of a solution."""

from __future__ import annotations

import numpy as np

import blasdx as bx
from blasdx.reference import relative_error
from blasdx.reference.trsm import backward_error, condition_number, forward_bound, residual_bound, solve_reference

#: One block solves TRSM::batches_per_block systems of a batch stored tightly (leading dimensions
#: the descriptor's): load A and B, execute, store X over B. Blocks of up to 256 threads.
SOLVE_KERNEL = r"""
extern "C" __global__ void __launch_bounds__(256, 1)
solve(const TRSM::a_value_type* a, TRSM::b_value_type* b, TRSM::scalar_value_type alpha, int batch) {
    extern __shared__ __align__(16) unsigned char smem[];
    auto [sA, sB] = TRSM::slice_shared_memory(smem);
    const long long first = (long long)blockIdx.x * TRSM::batches_per_block;
    for (int g = 0; g < TRSM::batches_per_block && first + g < batch; ++g) {
        TRSM::load_a(a + (first + g) * TRSM::a_size, sA + g * TRSM::a_stride);
        TRSM::load_b(b + (first + g) * TRSM::b_size, sB + g * TRSM::b_stride);
    }
    TRSM::copy_wait();
    TRSM::execute(alpha, sA, sB);
    for (int g = 0; g < TRSM::batches_per_block && first + g < batch; ++g) {
        TRSM::store_b(sB + g * TRSM::b_stride, b + (first + g) * TRSM::b_size);
    }
}
"""


def check_solution(desc, system, b_host, x, alpha, what: str) -> None:
    """Backward error within 2 n u; forward error within 2 n u cond(A); alpha = 0 gives exact zeros."""
    if alpha == 0:
        assert np.all(x == 0), f"{what}: alpha = 0 must give zeros"
        return
    left = desc.side is bx.Side.left
    real, dim = desc.scalar_type, desc.a_dim[0]
    eta = backward_error(system.exact, x, b_host, left=left, alpha=alpha)
    assert eta <= residual_bound(real, dim), f"{what}: backward error {eta:.2e} > {residual_bound(real, dim):.2e}"
    ref = solve_reference(system.exact, b_host, left=left, lower=desc.fill_mode is bx.FillMode.lower, alpha=alpha)
    err, bound = relative_error(x, ref), forward_bound(real, dim, condition_number(system.exact))
    assert err <= bound, f"{what}: forward error {err:.2e} > {bound:.2e}"

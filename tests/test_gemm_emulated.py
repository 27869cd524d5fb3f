"""The block GEMM's CUDA-core (FFMA) path run on the CPU (tests/host_emulation.py), checked like the GPU tests.

f32 takes 16-byte runs of A and B where the layout allows (fma_tiling in block_gemm.cuh): these
cases cover 4 x 4 and 8 x 8 thread tiles, every arrangement, sizes that do not tile (rows and
columns past the edge, K not a multiple of the run), padded leading dimensions, beta (C read)
and the register API of a user's kernel. Operands carry NaN in their padding and shared memory
starts as NaN, so a read past an edge shows.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import blasdx as bx
from blasdx.codegen.gemm import generate
from blasdx.fusion.kernel import fused_source

from . import host_emulation as emu
from .gpu_support import stable_seed

pytestmark = pytest.mark.skipif(emu.compiler() is None, reason="needs g++ (C++20) to run kernel code on the host")

R, C = bx.row_major, bx.col_major
ORDERS = list(itertools.product((R, C), (R, C)))


def gemm(size, a_order, b_order, *ops, sm=80):
    desc = (bx.Size(*size) + bx.Precision(bx.float32) + bx.Function.MM + bx.Arrangement(a_order, b_order, R)
            + bx.SM(sm) + bx.Block() + bx.MaxAlignment)
    for op in ops:
        desc = desc + op
    return desc


def _operands(desc, batch, rng):
    m, n, k = desc.size
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, k, n)).astype(np.float32)
    c = rng.standard_normal((batch, m, n)).astype(np.float32)
    return a, b, c


def _expect(a, b, c, alpha, beta):
    return alpha * (a.astype(np.float64) @ b.astype(np.float64)) + beta * c.astype(np.float64)


def _check(got, want, k):
    err = np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want))))
    assert np.all(np.isfinite(got)), "non-finite results: a padded or out-of-range element was read"
    assert err < 1e-5 * max(1, k) ** 0.5 * 4, f"relative error {err}"


# (size, extra operators): 4 x 4 and 8 x 8 tiles, edges in M, N and K, several work items per thread
CASES = [
    ((64, 64, 64), ()),
    ((128, 128, 32), ()),  # 8 x 8 tiles
    ((100, 100, 100), ()),  # 8 x 8 tiles with edges; K % 4 == 0
    ((48, 80, 24), ()),
    ((37, 29, 19), ()),  # nothing tiles; K % 4 == 3
    ((64, 64, 64), (bx.Workload.compute_bound,)),  # 8 x 8, 64 threads
    ((48, 80, 24), (bx.Workload.compute_bound,)),
    ((128, 128, 32), (bx.BlockDim(64),)),  # several work items per thread
    ((40, 36, 10), (bx.LeadingDimension(45, 41, 36),)),  # odd leading dimensions: element reads
]


@pytest.mark.parametrize("orders", ORDERS, ids=lambda o: "".join(x.name[0] for x in o))
@pytest.mark.parametrize("size, extra", CASES, ids=[f"{'x'.join(map(str, s))}{''.join('-' + repr(op) for op in e)}"
                                                     for s, e in CASES])
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_batched_fma(size, extra, orders, beta, build_dir, tmp_path):
    a_order, b_order = orders
    desc = gemm(size, a_order, b_order, *extra)
    assert desc.instruction == "fma"
    m, n, k = size
    batch = 11  # not a multiple of the stages: the last block runs fewer problems
    rng = np.random.default_rng(stable_seed(size, orders))
    a, b, c = _operands(desc, batch, rng)
    lda, ldb, ldc = desc.leading_dimension
    a_buf = emu.storage(a, a_order is R, lda)
    b_buf = emu.storage(b, b_order is R, ldb)
    c_buf = emu.storage(c, True, ldc)
    stride_a, stride_b, stride_c = (lda * (m if a_order is R else k), ldb * (k if b_order is R else n), ldc * m)
    alpha = 1.5
    call = ("blasdx_batched_gemm(reinterpret_cast<const float*>(a.data()), reinterpret_cast<const float*>(b.data()), "
            f"reinterpret_cast<float*>(out.data()), {alpha}f, float(emulated_scalar(0)), {stride_a}LL, {stride_b}LL, "
            f"{stride_c}LL, {batch}LL)")  # beta at run time: one program for both betas
    exe = emu.build(generate(desc).source, call, "blasdx::smem", build_dir)
    grid = -(-batch // desc.plan.stages)  # a block runs `stages` consecutive problems; the last one fewer
    result = emu.run(exe, (grid, 1), desc.max_threads_per_block, desc.kernel_shared_memory_size, a_buf, b_buf,
                     c_buf, tmp_path, (beta,))
    got = emu.unstorage(result, batch, m, n, True, ldc)
    _check(got, _expect(a, b, c, alpha, beta), k)


REGISTER_KERNEL = r"""
__global__ void block_compute(const float* a, const float* b, float* c, int repeats) {
    extern __shared__ __align__(16) unsigned char smem[];
    auto [sA, sB] = GEMM::slice_shared_memory_ab(smem);
    GEMM::load_a(a, sA);
    GEMM::load_b(b, sB);
    GEMM::copy_wait();
    auto acc = GEMM::execute(sA, sB, blasdx::scale<float>{0.5f});
    for (int r = 1; r < repeats; ++r) GEMM::execute(sA, sB, acc, blasdx::scale<float>{0.5f});
    acc.store(c);
}
"""


@pytest.mark.parametrize("orders", ORDERS, ids=lambda o: "".join(x.name[0] for x in o))
@pytest.mark.parametrize("size, workload", [((64, 64, 64), bx.Workload.compute_bound),
                                            ((128, 64, 16), bx.Workload.memory_bound),
                                            ((100, 100, 20), bx.Workload.compute_bound)])
def test_register_api_fma(size, workload, orders, build_dir, tmp_path):
    a_order, b_order = orders
    m, n, k = size
    base = gemm(size, a_order, b_order, workload)
    desc = base + bx.LeadingDimension(*base.suggested_leading_dimension[:2], n)
    rng = np.random.default_rng(7)
    a, b, _ = _operands(desc, 1, rng)
    lda, ldb, _ = desc.leading_dimension
    a_buf = emu.storage(a, a_order is R, lda)
    b_buf = emu.storage(b, b_order is R, ldb)
    out = np.full(m * n, np.nan, np.float32)
    call = "block_compute(reinterpret_cast<const float*>(a.data()), reinterpret_cast<const float*>(b.data()), " \
           "reinterpret_cast<float*>(out.data()), 3)"
    exe = emu.build(fused_source(REGISTER_KERNEL, {"GEMM": desc}), call, "::smem", build_dir)
    result = emu.run(exe, (1, 1), desc.max_threads_per_block, desc.shared_memory_size_ab, a_buf, b_buf, out, tmp_path)
    _check(result.reshape(m, n), 3 * 0.5 * _expect(a, b, np.zeros((1, m, n)), 1.0, 0.0)[0], k)

"""A batched complex GEMM with a conjugate-transpose operand: C[b] = alpha * A[b]^H B[b] + beta * C[b].

    python examples/complex_gemm.py [--batch N] [--size S]

A[b] is stored K x M (row-major), so A^H is read as a column-major M x K matrix whose
elements are conjugated on their way from shared memory into the product by a load
transform functor (blasdx::conjugate): no conjugated copy of A is ever made. The kernel
uses the shared-memory API, with C staged in shared memory and stored in whole rows. It
checks a sample against a complex128 reference and prints its speed against PyTorch's
unfused equivalent (a conjugated copy of A, then a batched matmul) and, for reference,
against cuBLAS conjugating by itself.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

import blasdx as bx
from blasdx.reference import assert_close, tolerance

SOURCE = r"""
// c[b] = alpha * conj(a[b])^T b[b] + beta * c[b] for b = blockIdx.x; a[b] is K x M row-major
// (the column-major M x K that GEMM describes, before conjugation), b[b] K x N and c[b] M x N
// row-major. C is read only when beta != 0.
extern "C" __global__ void __launch_bounds__(GEMM::max_threads_per_block)
batched_conj_gemm(const GEMM::a_value_type* a, const GEMM::b_value_type* b, GEMM::c_value_type* c,
                  GEMM::scalar_value_type alpha, GEMM::scalar_value_type beta) {
    extern __shared__ __align__(16) unsigned char smem[];
    auto [sA, sB, sC] = GEMM::slice_shared_memory(smem);
    const long long problem = blockIdx.x;
    const bool read_c = beta.x != 0 || beta.y != 0;

    GEMM::load_a(a + problem * GEMM::a_size, sA);
    GEMM::load_b(b + problem * GEMM::b_size, sB);
    if (read_c) GEMM::load_c(c + problem * GEMM::c_size, sC);
    GEMM::copy_wait();

    GEMM::execute(alpha, sA, sB, beta, sC, blasdx::conjugate{}, blasdx::identity{});
    __syncthreads();
    GEMM::store_c(sC, c + problem * GEMM::c_size);
}
"""


def descriptor(sm: int, m: int, n: int, k: int, precision: bx.DType = bx.float32) -> bx.Descriptor:
    """complex M x N x K with A column-major (stored K x M) and B, C row-major."""
    return (
        bx.Size(m, n, k)
        + bx.Precision(precision)
        + bx.Type.complex
        + bx.Function.MM
        + bx.Arrangement(bx.col_major, bx.row_major, bx.row_major)
        + bx.MaxAlignment
        + bx.SM(sm)
        + bx.Block()
    )


def build(sm: int, m: int = 32, n: int = 32, k: int = 32, precision: bx.DType = bx.float32) -> bx.FusedKernel:
    """Compile the batched kernel for one size (cached)."""
    return bx.compile_kernel(SOURCE, "batched_conj_gemm", {"GEMM": descriptor(sm, m, n, k, precision)})


def run(kernel: bx.FusedKernel, a: Any, b: Any, c: Any, alpha: complex = 1, beta: complex = 0) -> None:
    """c = alpha * a^H b + beta * c for contiguous tensors a (B, K, M), b (B, K, N), c (B, M, N)."""
    kernel.launch(c.shape[0], (a, b, c, alpha, beta))


def reference(a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: complex, beta: complex) -> np.ndarray:
    """alpha * a^H b + beta * c in complex128 (beta == 0 ignores c)."""
    out = alpha * np.matmul(np.conj(np.swapaxes(a, -1, -2)).astype(np.complex128), b.astype(np.complex128))
    return out + beta * c.astype(np.complex128) if beta != 0 else out


def main() -> int:
    from gpu_device import batch_parser, torch_sm  # examples/ is on sys.path when run as a script
    from gpu_timing import print_speedups, time_ms

    parser = batch_parser(__doc__, "products", batch=65536, check=256)
    parser.add_argument("--size", type=int, default=32, help="M = N = K")
    args = parser.parse_args()

    import torch

    sm, s = torch_sm(), args.size
    kernel = build(sm or 90, s, s, s)
    if sm is None:
        print(f"no GPU: compiled {kernel} ({kernel.registers} registers); skipped the run")
        return 0
    print(kernel.gemms["GEMM"])
    print(f"kernel: {kernel.registers} registers, {kernel.shared_memory} B shared memory, block {kernel.block}")

    torch.manual_seed(0)
    a = torch.randn(args.batch, s, s, device="cuda", dtype=torch.complex64)  # K x M per problem
    b = torch.randn(args.batch, s, s, device="cuda", dtype=torch.complex64)
    c0 = torch.randn(args.batch, s, s, device="cuda", dtype=torch.complex64)
    pick = torch.randperm(args.batch)[: args.check].sort().values
    host = [t[pick].cpu().numpy() for t in (a, b, c0)]
    tol = tolerance(bx.float32, bx.float32, s)
    for alpha, beta in ((1, 0), (0.5 - 1j, 2 + 0.25j)):
        c = c0.clone()
        run(kernel, a, b, c, alpha, beta)
        torch.cuda.synchronize()
        assert_close(c[pick].cpu().numpy(), reference(*host, alpha, beta), tol, what=f"C (alpha={alpha}, beta={beta})")
    print(f"checked {len(pick)} problems against the complex128 reference, with and without beta: OK")

    c = torch.empty_like(c0)
    fused_ms, how = time_ms(lambda: run(kernel, a, b, c))
    unfused = time_ms(lambda: torch.matmul(torch.conj_physical(a).transpose(-1, -2), b))
    cublas = time_ms(lambda: torch.matmul(a.mH, b))
    moved = 3 * a.numel() * a.element_size()
    print(f"{args.batch} problems of {s}x{s}x{s} complex64, C = A^H B (GPU time per call, {how}):")
    print(f"  blasdx fused kernel                 {fused_ms:8.3f} ms  {moved / fused_ms / 1e6:6.0f} GB/s")
    print_speedups(fused_ms, 36, {"PyTorch conj copy + batched matmul": unfused,
                                  "cuBLAS conjugating itself (a.mH)": cublas})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A batched GEMM with its epilogue written in Python: a Numba-CUDA kernel calling a blasdx block GEMM.

    python examples/numba_gemm.py [--batch N] [--size S] [--quick]

Each block computes one ``out = gelu(A @ B + bias)`` in float16 from float16 operands: blasdx
copies A and B into shared memory and multiplies them on the tensor cores into C in shared
memory; the Python loop that follows adds the bias of each element's column, applies GELU and
writes float16 results to global memory, consecutive threads on consecutive elements. ``import blasdx.numba`` is all the
set-up: the GEMM's traits are compile-time constants in the kernel and its LTO-IR joins the
kernel's link on its own. Checked against a float64 reference.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

import blasdx as bx
import blasdx.numba
from blasdx.reference import assert_close, random_operand, tolerance


def make_kernel(GEMM: bx.Descriptor):
    from numba import cuda
    from numba.cuda.types import float16, float32

    zero, half, one, c0, c1 = float32(0.0), float32(0.5), float32(1.0), float32(0.7978845608028654), float32(0.044715)

    @cuda.jit(device=True, inline=True)
    def gelu(x):  # float32 throughout: Python float literals would make it float64
        return half * x * (one + math.tanh(c0 * (x + c1 * x * x * x)))

    m, n = GEMM.m, GEMM.n

    @cuda.jit
    def gemm_bias_gelu(a, b, bias, out):
        sA, sB, sC = GEMM.shared_memory()
        p = cuda.blockIdx.x
        GEMM.load_a(a[p], sA)       # A row-major: (M, K) per problem
        GEMM.load_b(b[p].T, sB)     # B column-major: stored as (N, K), read as its (K, N) transpose
        GEMM.copy_wait()
        GEMM.execute(one, sA, sB, zero, sC)
        cuda.syncthreads()
        o = out[p]
        for i in range(cuda.threadIdx.x, m * n, cuda.blockDim.x):  # the epilogue, in Python
            row, col = i // n, i % n
            o[row, col] = float16(gelu(sC[row, col] + bias[col]))

    return gemm_bias_gelu


def reference(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    x = a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64)
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


def main() -> int:
    from gpu_device import numba_sm, sized_parser  # examples/ is on sys.path

    args = sized_parser(__doc__, "quick", "a small batch (for tests)", batch=200_000, size=64).parse_args()
    batch, s = (2000 if args.quick else args.batch), args.size

    sm = numba_sm()
    GEMM = (bx.Size(s, s, s) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM
            + bx.Arrangement(bx.row_major, bx.col_major, bx.row_major) + bx.MaxAlignment
            + bx.SM(sm or 90) + bx.Block())
    print(GEMM)
    if sm is None:
        print("no GPU found: nothing to run (tests/test_numba.py compiles such kernels without one)")
        return 0

    from numba import cuda

    rng = np.random.default_rng(1)
    a = random_operand(bx.float16, (batch, s, s), rng)
    b = random_operand(bx.float16, (batch, s, s), rng).transpose(0, 2, 1)  # (K, N) views of (N, K) storage
    bias = random_operand(bx.float32, (s,), rng)
    da, db = cuda.to_device(a), cuda.to_device(np.ascontiguousarray(b.transpose(0, 2, 1)))
    dbias = cuda.to_device(bias)
    out = cuda.to_device(np.full((batch, s, s), np.nan, np.float16))
    start = time.perf_counter()
    kernel = make_kernel(GEMM)
    kernel[batch, GEMM.block_dim, 0, GEMM.shared_memory_size](da, db, dbias, out)
    cuda.synchronize()
    print(f"compiled and ran in {time.perf_counter() - start:.2f} s")
    begin, end = cuda.event(), cuda.event()
    begin.record()
    for _ in range(5):
        kernel[batch, GEMM.block_dim, 0, GEMM.shared_memory_size](da, db, dbias, out)
    end.record()
    end.synchronize()
    ms = cuda.event_elapsed_time(begin, end) / 5
    moved = a.nbytes + b.nbytes + batch * s * s * 2
    print(f"{batch} problems of {s}^3: {ms:.3f} ms, {moved / ms / 1e6:.0f} GB/s")
    got = out.copy_to_host()
    pick = rng.choice(batch, size=min(300, batch), replace=False)
    assert_close(got[pick], reference(a[pick], b[pick], bias), tolerance(bx.float16, bx.float16, s))
    print(f"checked {len(pick)} problems against the float64 reference: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Attention in one Numba-CUDA kernel: two blasdx GEMMs and a softmax written in Python, per (batch, head).

    python examples/numba_attention.py [--heads N] [--seq S] [--dim D] [--quick]

``O = softmax(Q K^T / sqrt(D)) V`` for short sequences, one block per head: the first GEMM
writes the scores S to shared memory, Python code takes the row softmax there and writes P in
float16 straight into the second GEMM's A buffer, and the second GEMM multiplies P by V. Both
GEMMs' buffers sit side by side in dynamic shared memory (the second at the first's
``shared_memory_size``). Checked against a float64 reference.
"""

from __future__ import annotations

import math
import sys

import numpy as np

import blasdx as bx
import blasdx.numba
from blasdx.reference import assert_close, random_operand, tolerance


def descriptors(seq: int, dim: int, sm: int) -> tuple[bx.Descriptor, bx.Descriptor]:
    """S = Q K^T (K stored (seq, dim): K^T is column-major) and O = P V (all row-major), on the same threads."""
    common = bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM + bx.SM(sm) + bx.Block() \
        + bx.MaxAlignment + bx.BlockDim(128)
    scores = bx.Size(seq, seq, dim) + bx.Arrangement(bx.row_major, bx.col_major, bx.row_major) + common
    output = bx.Size(seq, dim, seq) + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + common
    return scores, output


def make_kernel(S_GEMM: bx.Descriptor, O_GEMM: bx.Descriptor, scale: float):
    from numba import cuda
    from numba.cuda.types import float16, float32

    seq = S_GEMM.m
    zero, one = float32(0.0), float32(1.0)

    @cuda.jit
    def attention(q, k, v, out):
        sQ, sK, sS = S_GEMM.shared_memory()
        sP, sV, sO = O_GEMM.shared_memory(S_GEMM.shared_memory_size)
        h = cuda.blockIdx.x
        S_GEMM.load_a(q[h], sQ)
        S_GEMM.load_b(k[h].T, sK)     # K^T: the (dim, seq) transpose of K's (seq, dim) rows
        O_GEMM.load_b(v[h], sV)
        S_GEMM.copy_wait()
        S_GEMM.execute(scale, sQ, sK, 0.0, sS)
        cuda.syncthreads()
        for row in range(cuda.threadIdx.x, seq, cuda.blockDim.x):  # the row softmax, in Python
            top = sS[row, 0]
            for j in range(1, seq):
                top = max(top, sS[row, j])
            total = zero  # float32 throughout: Python float literals would make it float64
            for j in range(seq):
                e = math.exp(sS[row, j] - top)
                sS[row, j] = e
                total += e
            inverse = one / total
            for j in range(seq):
                sP[row, j] = float16(sS[row, j] * inverse)
        cuda.syncthreads()
        O_GEMM.execute(1.0, sP, sV, 0.0, sO)
        cuda.syncthreads()
        O_GEMM.store_c(sO, out[h])

    return attention


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """float64 attention with P rounded to float16 before the second product, as the kernel stores it."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return p.astype(np.float16).astype(np.float64) @ v


def main() -> int:
    from gpu_device import numba_sm, sized_parser  # examples/ is on sys.path

    args = sized_parser(__doc__, "quick", "fewer heads (for tests)", heads=4096, seq=64, dim=64).parse_args()
    heads = 256 if args.quick else args.heads

    sm = numba_sm()
    S_GEMM, O_GEMM = descriptors(args.seq, args.dim, sm or 90)
    print(S_GEMM, O_GEMM, sep="\n")
    if sm is None:
        print("no GPU found: nothing to run")
        return 0

    from numba import cuda

    rng = np.random.default_rng(3)
    q, k, v = (random_operand(bx.float16, (heads, args.seq, args.dim), rng) for _ in range(3))
    out = cuda.to_device(np.full((heads, args.seq, args.dim), np.nan, np.float32))
    kernel = make_kernel(S_GEMM, O_GEMM, 1.0 / math.sqrt(args.dim))
    shared = S_GEMM.shared_memory_size + O_GEMM.shared_memory_size
    kernel[heads, O_GEMM.block_dim, 0, shared](cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), out)
    cuda.synchronize()
    got = out.copy_to_host()
    # P is rounded to float16 in both; where the kernel's float32 softmax and the float64 one round an
    # element of P to neighbouring float16 values, the results differ by up to one float16 ulp of P (2^-11)
    assert_close(got, reference(q, k, v), tolerance(bx.float16, bx.float32, args.seq) + 2.0**-11)
    print(f"{heads} heads of seq {args.seq}, dim {args.dim}: checked against the float64 reference: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

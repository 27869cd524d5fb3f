"""FlashAttention-style forward in one Numba-CUDA kernel: blasdx GEMMs and an online softmax in Python.

    python examples/numba_flash_attention.py [--heads N] [--seq S ...] [--dim 64|128] [--causal]

``O = softmax(Q K^T / sqrt(D)) V`` for any sequence length S, causal or not, Q, K, V (heads, S, D)
float16, O float32. A block owns BLOCK_M = 64 queries of one head and walks the head's keys and
values BLOCK_N = 64 at a time: the tile is copied into shared memory (zero-filled past S), GEMM
``QK`` writes the scaled scores to shared memory, Python code takes the online softmax of each row
there (running maximum and sum in shared memory, keys past S or past the query masked) and writes
P in float16 straight into GEMM ``PV``'s A buffer, then the output accumulator, which stays in
registers for the whole head (``PV.accumulator()`` / ``PV.accumulate``), is rescaled row by row
(``PV.fragment_positions()``) and accumulates P V. At the end O is divided by the row sums and
stored. Checked against a float64 reference.

It is the same algorithm as examples/flash_attention.py without that kernel's machinery (mma.sync
GEMMs instead of wgmma, synchronous copies, the softmax one row per thread through shared memory
rather than in registers): a teaching step, not a competitor. Its time against the C++ kernel has
not been measured yet (the script prints its own).
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

import blasdx as bx
import blasdx.numba  # noqa: F401 - registers the descriptor's Numba types
from blasdx.reference import assert_close, random_operand, tolerance

BLOCK_M, BLOCK_N, THREADS = 64, 64, 128


def descriptors(dim: int, sm: int = 90) -> tuple[bx.Descriptor, bx.Descriptor]:
    """QK: (BLOCK_M x D)(D x BLOCK_N) scores (K^T column-major); PV: (BLOCK_M x BLOCK_N)(BLOCK_N x D)."""
    common = bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM + bx.SM(sm) + bx.Block() \
        + bx.MaxAlignment + bx.BlockDim(THREADS)
    qk = bx.Size(BLOCK_M, BLOCK_N, dim) + bx.Arrangement(bx.row_major, bx.col_major, bx.row_major) + common
    pv = bx.Size(BLOCK_M, dim, BLOCK_N) + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + common
    return qk, pv


def make_kernel(QK: bx.Descriptor, PV: bx.Descriptor, causal: bool):
    """The kernel for these descriptors (grid: query tiles x heads; QK.shared_memory_size +
    PV.shared_memory_size bytes of dynamic shared memory)."""
    from numba import cuda
    from numba.cuda.types import float16, float32

    dim = QK.k
    scale = 1.0 / math.sqrt(dim)
    zero, one, minus_inf = float32(0.0), float32(1.0), float32(-math.inf)

    @cuda.jit
    def flash_attention(q, k, v, out):
        sQ, sK, sS = QK.shared_memory()
        sP, sV, sO = PV.shared_memory(QK.shared_memory_size)
        row_max = cuda.shared.array(BLOCK_M, float32)  # running maximum of each query row
        row_sum = cuda.shared.array(BLOCK_M, float32)  # running sum of exp(score - maximum)
        shrink = cuda.shared.array(BLOCK_M, float32)   # how O's row shrinks for this tile
        h, q0, tid = cuda.blockIdx.y, cuda.blockIdx.x * BLOCK_M, cuda.threadIdx.x
        seq = q.shape[1]
        for i in range(tid, BLOCK_M * dim, THREADS):  # Q's tile, zeros past S
            r, c = i // dim, i % dim
            sQ[r, c] = q[h, q0 + r, c] if q0 + r < seq else float16(0.0)
        for r in range(tid, BLOCK_M, THREADS):
            row_max[r], row_sum[r] = minus_inf, zero
        out_acc = PV.accumulator()  # O, unnormalised, in registers
        rows, cols = PV.fragment_positions()
        last_key = min(seq, q0 + BLOCK_M) if causal else seq
        for k0 in range(0, last_key, BLOCK_N):
            cuda.syncthreads()  # every thread is done with the previous tile
            for i in range(tid, BLOCK_N * dim, THREADS):  # K^T and V tiles, zeros past S
                n, c = i // dim, i % dim
                inside = k0 + n < seq
                sK[c, n] = k[h, k0 + n, c] if inside else float16(0.0)
                sV[n, c] = v[h, k0 + n, c] if inside else float16(0.0)
            cuda.syncthreads()
            QK.execute(scale, sQ, sK, 0.0, sS)  # S = Q K^T / sqrt(D)
            cuda.syncthreads()
            for r in range(tid, BLOCK_M, THREADS):  # the online softmax of row r
                top = row_max[r]
                for n in range(BLOCK_N):
                    if k0 + n < seq and (not causal or k0 + n <= q0 + r):
                        top = max(top, sS[r, n])
                total = zero
                for n in range(BLOCK_N):
                    p = zero
                    if k0 + n < seq and (not causal or k0 + n <= q0 + r):
                        p = math.exp(sS[r, n] - top)
                    total += p
                    sP[r, n] = float16(p)  # P, the A of P V
                factor = math.exp(row_max[r] - top)  # 0 on the first tile (from -inf)
                shrink[r] = factor
                row_sum[r] = row_sum[r] * factor + total
                row_max[r] = top
            cuda.syncthreads()
            for i in range(PV.fragment_size):
                if rows[i] >= 0:
                    out_acc[i] *= shrink[rows[i]]
            PV.accumulate(sP, sV, out_acc)  # O += P V
        cuda.syncthreads()
        for i in range(PV.fragment_size):
            if rows[i] >= 0:
                out_acc[i] *= one / row_sum[rows[i]]
        PV.fragment_axpby(1.0, out_acc, 0.0, sO)
        cuda.syncthreads()
        for i in range(tid, BLOCK_M * dim, THREADS):
            r, c = i // dim, i % dim
            if q0 + r < seq:
                out[h, q0 + r, c] = sO[r, c]

    return flash_attention


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """Attention in float64 over the last two axes (causal: key j <= query i)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def run(heads: int, seq: int, dim: int, causal: bool, sm: int = 90) -> None:
    """One run on fresh random data (O poisoned first), checked against float64; prints the GPU time."""
    from numba import cuda

    QK, PV = descriptors(dim, sm)
    kernel = make_kernel(QK, PV, causal)
    rng = np.random.default_rng(seq * 10 + dim)
    q, k, v = (random_operand(bx.float16, (heads, seq, dim), rng) for _ in range(3))
    out = cuda.to_device(np.full((heads, seq, dim), np.nan, np.float32))
    args = (cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), out)
    launch = kernel[(-(-seq // BLOCK_M), heads), THREADS, 0, QK.shared_memory_size + PV.shared_memory_size]
    launch(*args)
    cuda.synchronize()
    # P is rounded to float16 before P V, as in every flash kernel: one rounding of the size of a
    # 16-bit result's (the table's allowance for a 16-bit C over S keys)
    assert_close(out.copy_to_host(), reference(q, k, v, causal), tolerance(bx.float16, bx.float16, seq), what="O")
    start, stop = cuda.event(), cuda.event()
    start.record()
    for _ in range(10):
        launch(*args)
    stop.record()
    stop.synchronize()
    ms = cuda.event_elapsed_time(start, stop) / 10
    print(f"{heads} heads, S={seq}, D={dim}, causal={causal}: checked against float64; {ms:.3f} ms per launch")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--seq", type=int, nargs="*", default=[1, 17, 1000])
    parser.add_argument("--dim", type=int, choices=(64, 128), default=64)
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args()
    try:
        from numba import cuda

        available = cuda.is_available()
    except Exception:  # noqa: BLE001 - no driver
        available = False
    if not available:
        print("no GPU found: nothing to run")
        return 0
    major, minor = cuda.get_current_device().compute_capability
    for seq in args.seq:
        run(args.heads, seq, args.dim, args.causal, 10 * major + minor)
    return 0


if __name__ == "__main__":
    sys.exit(main())

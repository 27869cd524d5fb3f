"""Small-head attention, softmax(Q K^T / sqrt(d)) V, as two chained block GEMMs in one kernel.

    python examples/fused_attention.py [--batch B] [--heads H] [--seq S] [--head-dim D]

One thread block per (batch, head): Q, K and V (S x D each, S <= 128, D = 64 or 128) are
copied to shared memory; GEMM ``QK`` leaves the scores in registers; they are written,
scaled, over Q and K once every warp is done with those; a softmax (one warp per row)
turns them into unnormalised probabilities P in place; GEMM ``PV`` multiplies P by V in
registers, each output row is divided by its softmax sum, and O is staged in shared memory
and stored in whole rows. Nothing but Q, K, V and O touches global memory. The script checks a sample of
heads against a float64 reference and prints its speed against PyTorch's unfused
attention (matmul, scale, softmax, matmul) and, for reference, its fused SDPA kernel.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

import blasdx as bx
from blasdx.reference import assert_close, tolerance

# SCORES_BYTES (a define from Python) is the region that holds Q and K, then the scores S,
# then the probabilities P, then the output O: the largest of them, rounded to 16 bytes.
SOURCE = r"""
constexpr int SEQ = QK::m, HEAD = QK::k;
constexpr int LDS = SEQ + 4;   // floats per score row in shared memory (the 4 spread the banks)
constexpr int O_LD = HEAD + 8;  // __half per staged output row
constexpr int WARPS = QK::max_threads_per_block / 32;
constexpr int ROWS = (SEQ + WARPS - 1) / WARPS;  // softmax rows per warp
constexpr int PER_LANE = (SEQ + 31) / 32;        // scores of a row per lane
static_assert(QK::max_threads_per_block == PV::max_threads_per_block, "both GEMMs run on the whole block");

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// q, k, v, o: (batch * heads, SEQ, HEAD) row-major; scale_log2 = log2(e) / sqrt(HEAD).
extern "C" __global__ void __launch_bounds__(QK::max_threads_per_block, 2)
fused_attention(const __half* q, const __half* k, const __half* v, __half* o, float scale_log2) {
    extern __shared__ __align__(16) unsigned char smem[];
    auto [sQ, sK] = QK::slice_shared_memory_ab(smem);           // Q, K^T: A and B of QK
    float* sS = reinterpret_cast<float*>(smem);                 // then the scores, over Q and K
    __half* sP = reinterpret_cast<__half*>(smem);               // then P, over the scores: A of PV
    __half* sV = reinterpret_cast<__half*>(smem + SCORES_BYTES);  // B of PV
    float* row_scale = reinterpret_cast<float*>(smem + SCORES_BYTES + (PV::b_size * 2 + 15) / 16 * 16);
    const long long offset = (long long)blockIdx.x * SEQ * HEAD;

    QK::load_a<HEAD>(q + offset, sQ);  // rows of HEAD elements in global memory, padded in shared
    QK::load_b<HEAD>(k + offset, sK);  // K as the column-major B = K^T
    PV::load_b<HEAD>(v + offset, sV);
    QK::copy_wait();

    auto scores = QK::execute(sQ, sK);
    __syncthreads();  // every warp is done with Q and K: the scores may overwrite them
    scores.for_each([&](int row, int col, float s) { sS[row * LDS + col] = s * scale_log2; });
    __syncthreads();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float minus_infinity = __int_as_float(0xff800000);
    float p[ROWS][PER_LANE], inverse_sum[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        const int row = warp + i * WARPS;
        float row_max = minus_infinity;
#pragma unroll
        for (int j = 0; j < PER_LANE; ++j) {
            const int col = lane + 32 * j;
            p[i][j] = row < SEQ && col < SEQ ? sS[row * LDS + col] : minus_infinity;
            row_max = fmaxf(row_max, p[i][j]);
        }
        row_max = warp_max(row_max);
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < PER_LANE; ++j) {
            p[i][j] = row < SEQ ? exp2f(p[i][j] - row_max) : 0.0f;
            sum += p[i][j];
        }
        inverse_sum[i] = 1.0f / warp_sum(sum);
    }
    __syncthreads();  // every score is read: P may overwrite them
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        const int row = warp + i * WARPS;
        if (row >= SEQ) continue;
#pragma unroll
        for (int j = 0; j < PER_LANE; ++j) {
            const int col = lane + 32 * j;
            if (col < SEQ) sP[row * PV::lda + col] = __float2half_rn(p[i][j]);
        }
        if (lane == 0) row_scale[row] = inverse_sum[i];
    }
    __syncthreads();

    auto out = PV::execute(sP, sV);
    out.transform([&](int row, int col, float x) { return x * row_scale[row]; });
    __syncthreads();  // every warp is done with P: O is staged over it, rounded once to __half
    __half* sO = sP;
    out.store(sO, O_LD);
    __syncthreads();
    PV::store_c<HEAD, O_LD>(sO, o + offset);  // whole rows, 16 bytes at a time
}
"""

THREADS = 256


def descriptors(sm: int, seq: int, head_dim: int) -> dict[str, bx.Descriptor]:
    """QK: (S x D) x (D x S) scores; PV: (S x S) x (S x D) output. f16 in, f32 accumulation, 256 threads each."""
    common = (
        bx.Precision(bx.float16, bx.float16, bx.float32)
        + bx.Type.real
        + bx.Function.MM
        + bx.MaxAlignment
        + bx.SM(sm)
        + bx.Block()
        + bx.BlockDim(THREADS)
    )
    pad = 8  # one 16-byte chunk per shared-memory row of f16 avoids bank conflicts in the fragment loads
    qk = (
        bx.Size(seq, seq, head_dim)
        + bx.Arrangement(bx.row_major, bx.col_major, bx.row_major)
        + bx.LeadingDimension(head_dim + pad, head_dim + pad, seq)
        + common
    )
    pv = (
        bx.Size(seq, head_dim, seq)
        + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major)
        + bx.LeadingDimension(seq + pad, head_dim + pad, head_dim)
        + common
    )
    return {"QK": qk, "PV": pv}


def _round16(nbytes: int) -> int:
    return -(-nbytes // 16) * 16


def layout(gemms: dict[str, bx.Descriptor]) -> tuple[int, int]:
    """(SCORES_BYTES, total dynamic shared memory) of the kernel's layout."""
    qk, pv = gemms["QK"], gemms["PV"]
    seq = qk.m
    scores = _round16(max(qk.shared_memory_size_ab, seq * (seq + 4) * 4, pv.a_size * 2))
    total = scores + _round16(pv.b_size * 2) + seq * 4
    return scores, total


def build(sm: int, seq: int = 128, head_dim: int = 64) -> bx.FusedKernel:
    """Compile the fused attention for one (sequence length, head dim); cached."""
    if not 1 <= seq <= 128:
        raise ValueError(f"seq={seq}: this example keeps a whole head in one block, so 1 <= seq <= 128")
    gemms = descriptors(sm, seq, head_dim)
    scores, total = layout(gemms)
    options = bx.CompileOptions(defines={"SCORES_BYTES": str(scores)})
    return bx.compile_kernel(SOURCE, "fused_attention", gemms, options=options, shared_memory=total)


def run(kernel: bx.FusedKernel, q: Any, k: Any, v: Any, o: Any) -> None:
    """o = softmax(q k^T / sqrt(d)) v for torch tensors of shape (batch, heads, S, D), f16, contiguous."""
    batch, heads, _, head_dim = q.shape
    scale_log2 = math.log2(math.e) / math.sqrt(head_dim)
    kernel.launch(batch * heads, (q, k, v, o, scale_log2))


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Attention in float64: softmax(q k^T / sqrt(d)) v over the last two axes."""
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    s = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.matmul(s / s.sum(axis=-1, keepdims=True), v)


def benchmark(sm: int, batch: int, heads: int, seq: int, head_dim: int, check: int) -> None:
    """Build, check against float64 and time one shape against PyTorch."""
    import torch
    import torch.nn.functional as F
    from gpu_timing import time_ms  # examples/ is on sys.path when run as a script

    kernel = build(sm, seq, head_dim)
    shape = (batch, heads, seq, head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    run(kernel, q, k, v, o)
    torch.cuda.synchronize()
    flat = lambda t: t.reshape(-1, seq, head_dim)  # noqa: E731
    pick = torch.randperm(batch * heads)[:check].sort().values
    ref = reference(*(flat(t)[pick].cpu().numpy() for t in (q, k, v)))
    assert_close(flat(o)[pick].cpu().numpy(), ref, tolerance(bx.float16, bx.float16, seq), what="O")

    scale = 1.0 / math.sqrt(head_dim)
    fused_ms, how = time_ms(lambda: run(kernel, q, k, v, o))
    unfused_ms, how_unfused = time_ms(
        lambda: torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * scale, -1), v)
    )
    sdpa_ms, how_sdpa = time_ms(lambda: F.scaled_dot_product_attention(q, k, v))
    print(
        f"B={batch} H={heads} S={seq} D={head_dim}: {kernel.registers} registers, {kernel.shared_memory} B shared; "
        f"checked {len(pick)} heads: OK (GPU time per call, {how})\n"
        f"  blasdx fused kernel                               {fused_ms:8.3f} ms\n"
        f"  PyTorch unfused (matmul, scale, softmax, matmul)  {unfused_ms:8.3f} ms ({how_unfused}) -> fused speedup "
        f"{unfused_ms / fused_ms:.2f}x\n"
        f"  PyTorch SDPA (its fused flash kernel)             {sdpa_ms:8.3f} ms ({how_sdpa}) -> fused speedup "
        f"{sdpa_ms / fused_ms:.2f}x"
    )


def main() -> int:
    from gpu_device import attention_parser  # examples/ is on sys.path when run as a script

    parser = attention_parser(__doc__, batch=128, heads=16, seq=[128, 100], head_dim=[64, 128],
                              seq_help="sequence lengths (<= 128)")
    parser.add_argument("--check", type=int, default=16, help="heads checked against the float64 reference")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        for seq in args.seq:
            for d in args.head_dim:
                kernel = build(90, seq, d)
                print(f"no GPU: compiled S={seq} D={d}: {kernel.registers} registers; skipped the run")
        return 0
    major, minor = torch.cuda.get_device_capability()
    torch.manual_seed(0)
    for seq in args.seq:
        for d in args.head_dim:
            benchmark(10 * major + minor, args.batch, args.heads, seq, d, args.check)
    return 0


if __name__ == "__main__":
    sys.exit(main())

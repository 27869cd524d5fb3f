"""FlashAttention-style forward, softmax(Q K^T / sqrt(d)) V, from two blasdx block GEMMs (sm_90a).

    python examples/flash_attention.py [--batch B] [--heads H] [--seq S ...] [--head-dim D ...] [--causal]

Q, K, V and O are (batch, heads, S, D) in PyTorch's layout, f16 or bf16, D = 64 or 128, any S.
A block owns BLOCK_M = 128 queries of one head (two warpgroups, 64 rows each) and streams the
head's keys and values through shared memory BLOCK_N at a time, two tiles in flight: while
tile j is multiplied, tile j + 1 is on its way (cp.async). Per tile, GEMM ``QK`` (wgmma) leaves
the scores in registers; the online softmax walks them by row (``blasdx::rows``), rescaling the
output accumulator as the running maximum grows; the probabilities, rounded to 16 bits in
place, are the register A of GEMM ``PV`` (``PV::a_registers``), so P never touches shared
memory. The last tiles of a head are zero-filled past S and masked. The script checks sampled
heads against a float64 reference and the whole output against PyTorch's SDPA, then times both.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import numpy as np

import blasdx as bx
from blasdx.reference import assert_close, tolerance

SOURCE = r"""
using T = QK::a_value_type;
#define MINUS_INFINITY __int_as_float(0xff800000)
constexpr int BLOCK_M = QK::m, BLOCK_N = QK::n, D = QK::k;
static_assert(PV::m == BLOCK_M && PV::k == BLOCK_N && PV::n == D, "P V multiplies the scores' tile by a V tile");
constexpr int K_BYTES = (QK::shared_b_bytes + 1023) / 1024 * 1024, V_BYTES = (PV::shared_b_bytes + 1023) / 1024 * 1024;
constexpr int O_LD = D + 8;  // staged output rows (the 8 spread the banks)
static_assert(QK::shared_b_offset + 2 * (K_BYTES + V_BYTES) + QK::shared_memory_slack == SHARED_BYTES, "layout");
static_assert(BLOCK_M * O_LD * 2 <= 2 * (K_BYTES + V_BYTES), "O is staged over the K/V stages");

// q, k, v, o: (batch * heads, seq, D); grid (query tiles, batch * heads); scale_log2 = log2(e) / sqrt(D).
extern "C" __global__ void __launch_bounds__(QK::max_threads_per_block, MIN_BLOCKS)
flash_attention(const QK::a_value_type* q, const QK::b_value_type* k, const PV::b_value_type* v, PV::a_value_type* o,
                int seq, float scale_log2) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const auto buffers = QK::slice_shared_memory_ab(smem);  // Q, then K0 V0 K1 V1
    T* sQ = buffers.a;
    unsigned char* stages = reinterpret_cast<unsigned char*>(buffers.b);
    auto sK = [&](int j) { return reinterpret_cast<T*>(stages + (j % 2) * (K_BYTES + V_BYTES)); };
    auto sV = [&](int j) { return reinterpret_cast<T*>(stages + (j % 2) * (K_BYTES + V_BYTES) + K_BYTES); };
    const int tile = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // causal: longest rows first
    const int q0 = tile * BLOCK_M;
    const long long head = (long long)blockIdx.y * seq * D;
    const int last_key = CAUSAL ? min(seq, q0 + BLOCK_M) : seq;
    const int tiles = (last_key + BLOCK_N - 1) / BLOCK_N;

    PV::accumulator out;  // O, unnormalised
    auto out_rows = blasdx::rows(out);
    constexpr int R = decltype(out_rows)::count;
    float row_max[R], row_sum[R];
    for (int r = 0; r < R; ++r) row_max[r] = MINUS_INFINITY, row_sum[r] = 0.0f;
    // The online softmax of one tile of scores, in place: masked, exponentiated against the running
    // maximum (P, unnormalised), the row sums carried on. The maximum moves only where a row's grows
    // past it by more than 8 in log2 units (P stays below 2^8), for all rows of a warp at once, so
    // most tiles leave O as it is; returns whether O's rows must shrink by rescale[r].
    auto softmax = [&](QK::accumulator& scores, int j, float (&rescale)[R]) {
        auto s = blasdx::rows(scores);
        const int k0 = j * BLOCK_N;
        if (k0 + BLOCK_N > seq || (CAUSAL && k0 + BLOCK_N > q0 + 1)) {  // keys past S, or past the query
            s.transform([&](int r, int col, float x) {
                return k0 + col < seq && (!CAUSAL || k0 + col <= q0 + s.row(r)) ? x : MINUS_INFINITY;
            });
        }
        float tile_max[R], shift[R], tile_sum[R];
        s.max(tile_max);
        bool grows = false;  // the first tile has a key for every row: it grows them all from -inf
        for (int r = 0; r < R; ++r) grows |= (tile_max[r] - row_max[r]) * scale_log2 > 8.0f;
        grows = __any_sync(0xffffffffu, grows);
        for (int r = 0; r < R; ++r) {
            const float new_max = grows ? fmaxf(row_max[r], tile_max[r]) : row_max[r];
            rescale[r] = exp2f((row_max[r] - new_max) * scale_log2);
            row_max[r] = new_max;
            shift[r] = new_max * scale_log2;
        }
        s.transform([&](int r, int, float x) { return exp2f(x * scale_log2 - shift[r]); });
        s.thread_reduce(tile_sum, 0.0f, [](float a, float b) { return a + b; });  // this thread's part
        for (int r = 0; r < R; ++r) row_sum[r] = row_sum[r] * rescale[r] + tile_sum[r];
        return grows;
    };
    auto k_tile = [&](int j) { return k + head + (long long)j * BLOCK_N * D; };
    auto v_tile = [&](int j) { return v + head + (long long)j * BLOCK_N * D; };

#if PIPELINED
    // Per tile j: Q K^T of tile j + 1 and P V of tile j are issued together; softmax(j + 1) runs while
    // P V j is on the tensor cores. Copies run ahead: K j + 2 and V j + 1 stream in during tile j.
    // (No branch around the asynchronous GEMMs inside the loop: ptxas would serialise them.)
    QK::load_a<D>(q + head + (long long)q0 * D, sQ, seq - q0);  // rows past S are zeros
    QK::load_b<D>(k_tile(0), sK(0), seq);
    QK::copy_commit();
    if (tiles > 1) QK::load_b<D>(k_tile(1), sK(1), seq - BLOCK_N);
    PV::load_b<D>(v_tile(0), sV(0), seq);
    QK::copy_commit();
    QK::copy_wait<1>();  // Q and K 0
    auto scores = QK::execute(sQ, sK(0));
    float rescale[R];
    softmax(scores, 0, rescale);  // O is still zero
    PV::a_registers p(scores);  // P rounded to T, in registers
    for (int j = 0; j + 1 < tiles; ++j) {
        QK::copy_wait<0>();  // K j + 1 and V j landed; every warpgroup is done with Q K^T j and P V j - 1
        scores.clear();
        QK::execute_async(sQ, sK(j + 1), scores);
        PV::execute_async(p, sV(j), out);  // O += P V
        if (j + 2 < tiles) QK::load_b<D>(k_tile(j + 2), sK(j + 2), seq - (j + 2) * BLOCK_N);  // over K j
        PV::load_b<D>(v_tile(j + 1), sV(j + 1), seq - (j + 1) * BLOCK_N);                     // over V j - 1
        QK::copy_commit();
        QK::wait<1>(scores);  // Q K^T j + 1 is done (groups complete in order), P V j runs on
        const bool shrink = softmax(scores, j + 1, rescale);
        PV::wait<0>(out, p);
        if (shrink) out_rows.transform([&](int r, int, float x) { return x * rescale[r]; });
        p = PV::a_registers(scores);
    }
    QK::copy_wait<0>();  // V of the last tile
    PV::execute(p, sV(tiles - 1), out);
#else
    QK::load_a<D>(q + head + (long long)q0 * D, sQ, seq - q0);  // rows past S are zeros
    QK::load_b<D>(k_tile(0), sK(0), seq);
    PV::load_b<D>(v_tile(0), sV(0), seq);
    QK::copy_commit();
    for (int j = 0; j < tiles; ++j) {
        QK::copy_wait<0>();  // tile j has landed and every warp is done with tile j - 1
        if (j + 1 < tiles) {  // tile j + 1 streams in over tile j - 1 while tile j is multiplied
            QK::load_b<D>(k_tile(j + 1), sK(j + 1), seq - (j + 1) * BLOCK_N);
            PV::load_b<D>(v_tile(j + 1), sV(j + 1), seq - (j + 1) * BLOCK_N);
            QK::copy_commit();
        }
        auto scores = QK::execute(sQ, sK(j));
        float rescale[R];
        if (softmax(scores, j, rescale)) out_rows.transform([&](int r, int, float x) { return x * rescale[r]; });
        PV::execute(PV::a_registers(scores), sV(j), out);  // O += P V, P rounded to T in registers
    }
#endif

    out_rows.all_reduce(row_sum, [](float a, float b) { return a + b; });
    for (int r = 0; r < R; ++r) row_sum[r] = 1.0f / row_sum[r];
    out_rows.transform([&](int r, int, float x) { return x * row_sum[r]; });
    __syncthreads();  // every warp is done with the stages: O is staged over them
    T* sO = sK(0);
    out.store(sO, O_LD);
    __syncthreads();
    PV::store_c<D, O_LD>(sO, o + head + (long long)q0 * D, seq - q0);  // whole rows, 16 bytes at a time
}
"""

BLOCK_M, BLOCK_N, THREADS = 128, 128, 256
DTYPES = {"float16": bx.float16, "bfloat16": bx.bfloat16}


def descriptors(head_dim: int, dtype: Any, block_n: int = BLOCK_N) -> dict[str, bx.Descriptor]:
    """QK: (BLOCK_M x D) x (D x BLOCK_N) scores; PV: (BLOCK_M x BLOCK_N) x (BLOCK_N x D), f32 sums, sm_90a."""
    common = (
        bx.Precision(dtype, dtype, bx.float32)
        + bx.Type.real
        + bx.Function.MM
        + bx.MaxAlignment
        + bx.SM(90, arch_specific=True)
        + bx.Block()
        + bx.BlockDim(THREADS)
    )
    qk = bx.Size(BLOCK_M, block_n, head_dim) + bx.Arrangement(bx.row_major, bx.col_major, bx.row_major) + common
    pv = bx.Size(BLOCK_M, head_dim, block_n) + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + common
    return {"QK": qk, "PV": pv}


def shared_bytes(head_dim: int, block_n: int = BLOCK_N) -> int:
    """Q's panels and two stages of K and V panels, each on a 1024-byte boundary, plus the slack to find one."""
    panel = lambda rows: -(-rows * head_dim * 2 // 1024) * 1024
    return 1008 + panel(BLOCK_M) + 2 * (panel(block_n) + panel(block_n))


def build(head_dim: int = 128, dtype: Any = bx.float16, causal: bool = False, pipelined: bool = True,
          block_n: int = BLOCK_N, min_blocks: int | None = None) -> bx.FusedKernel:
    """Compile the kernel for one head dim, element type and masking; cached. ``pipelined``: softmax of
    one tile overlaps P V of the one before (asynchronous wgmma), else each GEMM completes in turn.
    ``block_n``: keys per tile (64 or 128); ``min_blocks``: blocks per SM the registers must allow
    (default: 2 for D = 64 with 64 keys, whose 120 registers leave room for two, else 1)."""
    if head_dim not in (64, 128):
        raise ValueError(f"head_dim={head_dim}: this kernel takes 64 or 128")
    if block_n not in (64, 128):
        raise ValueError(f"block_n={block_n}: this kernel takes 64 or 128")
    if min_blocks is None:
        min_blocks = 2 if (head_dim, block_n) == (64, 64) else 1
    nbytes = shared_bytes(head_dim, block_n)
    defines = {"CAUSAL": "true" if causal else "false", "SHARED_BYTES": str(nbytes), "PIPELINED": str(int(pipelined)),
               "MIN_BLOCKS": str(min_blocks)}
    # fast math: exp2f is one MUFU.EX2 (no range fix-up), reciprocals approximate (2 ulp)
    options = bx.CompileOptions(defines=defines, fast_math=True)
    return bx.compile_kernel(SOURCE, "flash_attention", descriptors(head_dim, dtype, block_n), options=options,
                             shared_memory=nbytes)


def run(kernel: bx.FusedKernel, q: Any, k: Any, v: Any, o: Any) -> None:
    """o = softmax(q k^T / sqrt(d)) v for contiguous (batch, heads, S, D) tensors (causal as compiled).
    Shapes and layouts are checked here, element types by the launch, all before anything runs."""
    head_dim = kernel.gemms["QK"].k
    shape = tuple(q.shape)
    if len(shape) != 4 or shape[2] < 1 or shape[3] != head_dim:
        raise bx.ExecutionError(f"q: shape {shape}, expected (batch, heads, S >= 1, {head_dim}) for this kernel")
    for name, t in (("k", k), ("v", v), ("o", o)):
        if tuple(t.shape) != shape:
            raise bx.ExecutionError(f"{name}: shape {tuple(t.shape)}, expected {shape} (the shape of q)")
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        if not t.is_contiguous():
            raise bx.ExecutionError(f"{name}: strides {tuple(t.stride())}, expected a contiguous tensor")
    batch, heads, seq, _ = shape
    if batch * heads > 65535:
        raise bx.ExecutionError(f"q: batch x heads = {batch * heads}, at most 65535 (one grid row each)")
    scale_log2 = math.log2(math.e) / math.sqrt(head_dim)
    kernel.launch((-(-seq // BLOCK_M), batch * heads), (q, k, v, o, seq, scale_log2))


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """Attention in float64 over the last two axes (causal: key j <= query i)."""
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    s = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.matmul(s / s.sum(axis=-1, keepdims=True), v)


def tolerance_of(dtype: Any, seq: int) -> float:
    """Normwise relative tolerance of O: the table's for a 16-bit C of f32 sums over S (blasdx.reference).
    P is rounded to the input type before P V, as in every flash kernel: one more rounding of the
    same size as O's own, which the table's allowance for a 16-bit C covers."""
    return tolerance(dtype, dtype, seq)


def check(kernel: bx.FusedKernel, batch: int, heads: int, seq: int, head_dim: int, dtype: Any, causal: bool,
          sample: int = 4) -> float:
    """Run once on fresh random data (O poisoned with NaN first), compare `sample` heads with float64 and
    all of O with torch SDPA; returns the normwise relative difference from SDPA."""
    import torch
    import torch.nn.functional as F

    tdtype = getattr(torch, str(dtype))
    shape = (batch, heads, seq, head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=tdtype) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    run(kernel, q, k, v, o)
    torch.cuda.synchronize()
    flat = lambda t: t.reshape(-1, seq, head_dim)
    pick = torch.randperm(batch * heads)[:sample].sort().values
    tol = tolerance_of(dtype, seq)
    if sample:
        ref = reference(*(flat(t)[pick].float().cpu().numpy() for t in (q, k, v)), causal)
        assert_close(flat(o)[pick].float().cpu().numpy(), ref, tol, what="O")
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    # the normwise relative difference (as blasdx.reference.relative_error), on the GPU: O can be large
    got, want = o.double(), expected.double()
    finite = bool(torch.isfinite(got).all())
    diff = float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want)) if finite else math.inf
    if not diff <= 2 * tol:  # SDPA rounds P too: both sit within a rounding of the exact result
        raise AssertionError(f"O differs from torch SDPA by {diff:.2e} normwise (S={seq}, D={head_dim}, {dtype}, "
                             f"causal={causal})")
    return diff


def benchmark(batch: int, heads: int, seq: int, head_dim: int, dtype: Any, causal: bool) -> None:
    """Check, then time one shape against PyTorch's SDPA (GPU time from CUDA-graph replays)."""
    import torch
    import torch.nn.functional as F
    from gpu_timing import time_ms  # examples/ is on sys.path when run as a script

    kernel = build(head_dim, dtype, causal)
    diff = check(kernel, batch, heads, seq, head_dim, dtype, causal)
    tdtype = getattr(torch, str(dtype))
    q, k, v = (torch.randn((batch, heads, seq, head_dim), device="cuda", dtype=tdtype) for _ in range(3))
    o = torch.empty_like(q)
    ours, how = time_ms(lambda: run(kernel, q, k, v, o))
    sdpa, _ = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    flops = 4 * batch * heads * seq * seq * head_dim * (0.5 if causal else 1.0)
    print(
        f"B={batch} H={heads} S={seq} D={head_dim} {dtype} causal={causal}: {kernel.registers} registers, "
        f"|O - SDPA| / |SDPA| {diff:.1e}; blasdx {ours:.3f} ms ({flops / ours / 1e9:.0f} TFLOP/s), "
        f"SDPA {sdpa:.3f} ms -> {sdpa / ours:.2f}x ({how})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seq", type=int, nargs="*", default=[4096, 1000])
    parser.add_argument("--head-dim", type=int, nargs="*", default=[64, 128])
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float16")
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args()
    dtype = DTYPES[args.dtype]

    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        for d in args.head_dim:
            kernel = build(d, dtype, args.causal)
            print(f"no sm_90 GPU: compiled D={d}: {kernel.registers} registers, {kernel.local_memory} B spilled")
        return 0
    torch.manual_seed(0)
    for seq in args.seq:
        for d in args.head_dim:
            benchmark(args.batch, args.heads, seq, d, dtype, args.causal)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""FlashAttention-style forward, softmax(Q K^T / sqrt(d)) V, from two blasdx block GEMMs (sm_90a).

    python examples/flash_attention.py [--batch B] [--heads H] [--seq S ...] [--head-dim D ...] [--causal]
                                       [--dtype float16|bfloat16|float8_e4m3] [--pipeline overlap|stages|turns|serial]

Q, K, V and O are (batch, heads, S, D) in PyTorch's layout, f16 or bf16, D = 64 or 128, any S; or Q, K
and V in fp8 (e4m3) with per-tensor scales and O in f16 (or bf16): Q K^T runs on e4m3 wgmma, with the
scales of Q and K folded into the softmax's exponent scale and V's into its final division; V's tiles are
converted to f16 on their way into shared memory (8-bit wgmma reads B K-major only, and V is MN-major for
P V), so P V is the 16-bit kernel's. The fp8 timings are against SDPA on f16 inputs.
A block owns BLOCK_M = 128 queries of one head (two warpgroups, 64 rows each). The kernel below is
the attention logic; the machinery is the device API's: ``blasdx::kv_stream`` (kv_stream.cuh)
streams the head's keys and values through shared memory BLOCK_N at a time with cp.async, the next
tiles in flight while this one is multiplied, and issues Q K^T of the next tile and P V of this one
together (``execute_async``) so that the softmax runs under P V; ``blasdx::online_softmax``
(online_softmax.cuh) keeps the running row maxima and sums on the scores in registers and rescales
the output accumulator when a maximum grows. The probabilities, rounded to 16 bits in place, are the
register A of GEMM ``PV`` (``PV::a_registers``), so P never touches shared memory. The last tiles of
a head are zero-filled past S and masked. The stream's pipelining is one template parameter:
"overlap" (one block barrier per tile, the default for D = 64), "turns" (a full and a free barrier
per shared-memory stage, the two warpgroups taking turns at their GEMMs; the default for D = 128),
"stages" (the barriers without the turns) or "serial" (each GEMM completes in turn). The script
checks sampled heads against a float64 reference and the whole output against PyTorch's SDPA, then
times both.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

import blasdx as bx
from blasdx.base.dtypes import as_dtype
from blasdx.reference import assert_close, tolerance

SOURCE = r"""
#include "blasdx/kv_stream.cuh"
#include "blasdx/online_softmax.cuh"
using T = QK::a_value_type;   // Q and K
using TO = PV::a_value_type;  // O, P and V in P V
using TV = V_TYPE;            // V in global memory (fp8 V: converted to TO on its way into shared memory)
constexpr int BLOCK_M = QK::m, BLOCK_N = QK::n, D = QK::k;
using Stream = blasdx::kv_stream<QK, PV, blasdx::kv_pipelining(PIPELINE), TV>;  // K / V tiles through shared memory
static_assert(Stream::shared_memory_size == SHARED_BYTES, "the launch gives the stream's shared memory");

// q, k, v, o: (batch * heads, seq, D); grid (query tiles, batch * heads); scale_log2 = log2(e) / sqrt(D)
// (times the scales of fp8 Q and K); scale_v: the scale of fp8 V (unused unless V_SCALED).
extern "C" __global__ void __launch_bounds__(QK::max_threads_per_block, MIN_BLOCKS)
flash_attention(const T* q, const T* k, const TV* v, TO* o, int seq, float scale_log2, float scale_v) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const int q0 = (CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BLOCK_M;  // causal: longest rows first
    const long long head = (long long)blockIdx.y * seq * D;
    const int keys = CAUSAL ? min(seq, q0 + BLOCK_M) : seq;  // the keys this tile's queries see
    Stream stream(smem, q + head + (long long)q0 * D, seq - q0, k + head, v + head, seq, keys);  // Q, K 0 ... on their way
    blasdx::online_softmax<QK::accumulator> softmax(scale_log2);  // running row maxima and sums
    // S of key tile j -> P, unnormalised, in place (keys past S, or past the query, masked first);
    // returns whether O must shrink because the running maxima moved
    auto softmax_tile = [&](QK::accumulator& s, int j) {
        const int k0 = j * BLOCK_N;
        if (k0 + BLOCK_N > seq || (CAUSAL && k0 + BLOCK_N > q0 + 1)) {
            softmax.mask(s, [&](int row, int col) { return k0 + col < seq && (!CAUSAL || k0 + col <= q0 + row); });
        }
        return softmax.update(s);
    };

    PV::accumulator out;                  // O, unnormalised
    auto scores = stream.first_scores();  // S = Q K^T of key tile 0
    softmax_tile(scores, 0);              // O is still zero: nothing to rescale
    PV::a_registers p(scores);            // P rounded to T, in registers
    for (int j = 0; j + 1 < stream.tiles(); ++j) {
        stream.multiply(j, scores, p, out);  // S = Q K^T of tile j + 1 and O += P V of tile j, in flight together
        stream.wait_scores(j, scores);       // S is done; P V runs on under the softmax
        const bool shrink = softmax_tile(scores, j + 1);
        stream.wait_output(j, out, p);       // O += P V is done
        if (shrink) softmax.rescale(out);
        p = PV::a_registers(scores);
    }
    stream.multiply_last(p, out);  // O += P V of the last tile
    softmax.finish(out, V_SCALED ? scale_v : 1.0f);  // O / row sums (times V's scale)
    stream.store(out, o + head + (long long)q0 * D, seq - q0);  // whole rows, 16 bytes at a time
}
"""

BLOCK_M, BLOCK_N, THREADS = 128, 128, 256
DTYPES = {"float16": bx.float16, "bfloat16": bx.bfloat16, "float8_e4m3": bx.float8_e4m3}
OUT_DTYPES = {"float16": bx.float16, "bfloat16": bx.bfloat16}


def descriptors(head_dim: int, dtype: Any, block_n: int = BLOCK_N, out_dtype: Any = None) -> dict[str, bx.Descriptor]:
    """QK: (BLOCK_M x D) x (D x BLOCK_N) scores of dtype; PV: (BLOCK_M x BLOCK_N) x (BLOCK_N x D) of out_dtype
    (default dtype); f32 sums, sm_90a."""
    common = (
        bx.Type.real
        + bx.Function.MM
        + bx.MaxAlignment
        + bx.SM(90, arch_specific=True)
        + bx.Block()
        + bx.BlockDim(THREADS)
    )
    out_dtype = dtype if out_dtype is None else out_dtype
    qk = (bx.Size(BLOCK_M, block_n, head_dim) + bx.Arrangement(bx.row_major, bx.col_major, bx.row_major)
          + bx.Precision(dtype, dtype, bx.float32) + common)
    pv = (bx.Size(BLOCK_M, head_dim, block_n) + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major)
          + bx.Precision(out_dtype, out_dtype, bx.float32) + common)
    return {"QK": qk, "PV": pv}


def shared_bytes(head_dim: int, block_n: int = BLOCK_N, v_stages: int = 2, qk_bytes: int = 2) -> int:
    """Q's panels, two stages of K panels (qk_bytes per element: 1 for fp8) and v_stages of 16-bit V panels,
    each on a 1024-byte boundary, plus the slack to find one."""
    panel = lambda rows, size: -(-rows * head_dim * size // 1024) * 1024
    return 1008 + panel(BLOCK_M, qk_bytes) + 2 * panel(block_n, qk_bytes) + v_stages * panel(block_n, 2)


PIPELINES = {"serial": 0, "overlap": 1, "stages": 2, "turns": 3}


def build(head_dim: int = 128, dtype: Any = bx.float16, causal: bool = False, *, pipeline: str | None = None,
          block_n: int | None = None, min_blocks: int | None = None, out_dtype: Any = None) -> bx.FusedKernel:
    """Compile the kernel for one head dim, element type and masking; cached.

    ``dtype`` float16 or bfloat16 (Q, K, V and O), or float8_e4m3: Q, K and V in fp8 with per-tensor scales
    (``run(..., scales=...)``); Q K^T on e4m3 wgmma, V converted to ``out_dtype`` (float16 by default, or
    bfloat16: O's type, exact for every e4m3 value) as its tiles enter shared memory, P V on 16-bit wgmma
    (8-bit wgmma reads B K-major only, and V's rows are MN-major for P V).

    ``pipeline`` (default "turns" for D = 128, "overlap" for D = 64, the faster of each on an H200):
    "overlap" (Q K^T of the next tile and P V of this one asynchronous, the softmax under
    P V, one block barrier per tile), "stages" (the same with a full and a free barrier per shared-memory
    stage instead, so warpgroups may drift apart), "turns" (stages, and the two warpgroups take turns at
    issuing their GEMMs, one's softmax under the other's GEMMs) or "serial" (each GEMM completes in turn).
    ``block_n``: keys per tile (default 64 for D = 64, 128 for D = 128); ``min_blocks``: blocks per SM the
    registers must allow (default 2 for D = 64 with 64 keys, whose ~120 registers leave room, else 1).
    """
    if head_dim not in (64, 128):
        raise ValueError(f"head_dim={head_dim}: this kernel takes 64 or 128")
    pipeline = ("turns" if head_dim == 128 else "overlap") if pipeline is None else pipeline
    if pipeline not in PIPELINES:
        raise ValueError(f"pipeline={pipeline!r}: expected one of {sorted(PIPELINES)}")
    block_n = (64 if head_dim == 64 else 128) if block_n is None else block_n
    if block_n not in (64, 128):
        raise ValueError(f"block_n={block_n}: this kernel takes 64 or 128")
    if min_blocks is None:
        min_blocks = 2 if (head_dim, block_n) == (64, 64) else 1
    dtype, out_dtype = element_types(dtype, out_dtype)
    fp8 = dtype != out_dtype
    nbytes = shared_bytes(head_dim, block_n, 3 if pipeline in ("stages", "turns") else 2, 1 if fp8 else 2)
    defines = {"CAUSAL": "true" if causal else "false", "SHARED_BYTES": str(nbytes),
               "PIPELINE": str(PIPELINES[pipeline]), "MIN_BLOCKS": str(min_blocks),
               "V_TYPE": dtype.cpp if fp8 else "TO", "V_SCALED": "true" if fp8 else "false"}
    # fast math: exp2f is one MUFU.EX2 (no range fix-up), reciprocals approximate (2 ulp)
    options = bx.CompileOptions(defines=defines, fast_math=True)
    return bx.compile_kernel(SOURCE, "flash_attention", descriptors(head_dim, dtype, block_n, out_dtype),
                             options=options, shared_memory=nbytes)


def element_types(dtype: Any, out_dtype: Any) -> tuple[Any, Any]:
    """(Q / K / V type, O type), checked: 16-bit inputs give O of their type, fp8 ones f16 (default) or bf16."""
    dtype = as_dtype(dtype)
    if dtype not in DTYPES.values():
        raise ValueError(f"dtype={dtype}: expected one of {sorted(DTYPES)}")
    if dtype == bx.float8_e4m3:
        out_dtype = bx.float16 if out_dtype is None else as_dtype(out_dtype, argument="out_dtype")
        if out_dtype not in OUT_DTYPES.values():
            raise ValueError(f"out_dtype={out_dtype}: expected one of {sorted(OUT_DTYPES)}")
    elif out_dtype is not None and as_dtype(out_dtype, argument="out_dtype") != dtype:
        raise ValueError(f"out_dtype={out_dtype}: {dtype} inputs give O of their own type")
    return dtype, dtype if out_dtype is None else as_dtype(out_dtype, argument="out_dtype")


def run(kernel: bx.FusedKernel, q: Any, k: Any, v: Any, o: Any,
        scales: tuple[float, float, float] | None = None) -> None:
    """o = softmax(q k^T / sqrt(d)) v for contiguous (batch, heads, S, D) tensors (causal as compiled); an
    fp8 kernel's q, k and v stand for scales[i] times their fp8 values (per-tensor scales, required).
    Shapes, layouts and scales are checked here, element types by the launch, all before anything runs."""
    head_dim = kernel.gemms["QK"].k
    fp8 = kernel.gemms["QK"].precision[0] != kernel.gemms["PV"].precision[0]
    if fp8 != (scales is not None):
        raise bx.ExecutionError("scales: an fp8 kernel takes (scale_q, scale_k, scale_v), a 16-bit one none"
                                if fp8 or scales is None else "scales: a 16-bit kernel takes none")
    scales = (1.0, 1.0, 1.0) if scales is None else tuple(float(x) for x in scales)
    if len(scales) != 3 or not all(math.isfinite(x) and x > 0 for x in scales):
        raise bx.ExecutionError(f"scales: {scales}, expected three finite positive floats (scale_q, scale_k, scale_v)")
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
    scale_log2 = math.log2(math.e) / math.sqrt(head_dim) * scales[0] * scales[1]
    kernel.launch((-(-seq // BLOCK_M), batch * heads), (q, k, v, o, seq, scale_log2, scales[2]))


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """Attention in float64 over the last two axes (causal: key j <= query i)."""
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    s = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.matmul(s / s.sum(axis=-1, keepdims=True), v)


def tolerance_of(dtype: Any, seq: int, out_dtype: Any = None) -> float:
    """Normwise relative tolerance of O: the table's for a 16-bit C of f32 sums over S (blasdx.reference).
    P is rounded to the input type before P V, as in every flash kernel: one more rounding of the
    same size as O's own, which the table's allowance for a 16-bit C covers. fp8 inputs (compared on
    their dequantised values): the e4m3 products of Q K^T are exact in the f32 sums and V's e4m3 values
    exact in O's type, so P V is the 16-bit kernel's of O's type, P rounded to it: that type's tolerance."""
    dtype, out_dtype = element_types(dtype, out_dtype)
    return tolerance(out_dtype, out_dtype, seq)


def inputs(shape: tuple[int, ...], dtype: Any, out_dtype: Any = None) -> tuple[list[Any], tuple | None, list[Any]]:
    """Random Q, K, V on the GPU for the kernel, their per-tensor scales (fp8: amax / 448 each, None for
    16-bit) and the values they stand for in O's type (what SDPA and the float64 reference see)."""
    import torch

    dtype, out_dtype = element_types(dtype, out_dtype)
    tout = getattr(torch, str(out_dtype))
    if dtype == out_dtype:
        qkv = [torch.randn(shape, device="cuda", dtype=tout) for _ in range(3)]
        return qkv, None, qkv
    raw = [torch.randn(shape, device="cuda", dtype=torch.float32) for _ in range(3)]
    scales = tuple(float(t.abs().max()) / 448.0 for t in raw)
    qkv = [(t / sc).to(torch.float8_e4m3fn) for t, sc in zip(raw, scales)]
    return qkv, scales, [(t.float() * sc).to(tout) for t, sc in zip(qkv, scales)]


def dequantized(t: Any, pick: Any, scale: float | None) -> np.ndarray:
    """Heads `pick` of a (batch, heads, S, D) kernel input as float64 on the host: the values they stand for
    (scale times an fp8 value; fp8 heads picked as bytes, which every indexing kernel takes)."""
    import torch

    heads = t.reshape(-1, *t.shape[-2:])
    heads = heads[pick] if scale is None else heads.view(torch.uint8)[pick].view(t.dtype)
    return heads.double().cpu().numpy() * (1.0 if scale is None else scale)


def check(kernel: bx.FusedKernel, batch: int, heads: int, seq: int, head_dim: int, dtype: Any, causal: bool,
          sample: int = 4) -> float:
    """Run once on fresh random data (O poisoned with NaN first), compare `sample` heads with float64 and
    all of O with torch SDPA; returns the normwise relative difference from SDPA."""
    import torch
    import torch.nn.functional as F

    out_dtype = kernel.gemms["PV"].precision[0]
    (q, k, v), scales, values = inputs((batch, heads, seq, head_dim), dtype, out_dtype)
    o = torch.full_like(values[0], float("nan"))
    run(kernel, q, k, v, o, scales)
    torch.cuda.synchronize()
    flat = lambda t: t.reshape(-1, seq, head_dim)
    pick = torch.randperm(batch * heads)[:sample].sort().values
    tol = tolerance_of(dtype, seq, out_dtype)
    if sample:
        ref = reference(*(dequantized(t, pick, sc) for t, sc in zip((q, k, v), scales or (None,) * 3)), causal)
        assert_close(flat(o)[pick].float().cpu().numpy(), ref, tol, what="O")
    # SDPA on the inputs' values in O's type (fp8: rounded once more, well within the tolerance)
    expected = F.scaled_dot_product_attention(*values, is_causal=causal)
    # the normwise relative difference (as blasdx.reference.relative_error), on the GPU: O can be large
    got, want = o.double(), expected.double()
    finite = bool(torch.isfinite(got).all())
    diff = float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want)) if finite else math.inf
    if not diff <= 2 * tol:  # SDPA rounds P too: both sit within a rounding of the exact result
        raise AssertionError(f"O differs from torch SDPA by {diff:.2e} normwise (S={seq}, D={head_dim}, {dtype}, "
                             f"causal={causal})")
    return diff


def benchmark(batch: int, heads: int, seq: int, head_dim: int, dtype: Any, causal: bool, pipeline: str) -> None:
    """Check, then time one shape against PyTorch's SDPA (GPU time from CUDA-graph replays)."""
    import torch
    import torch.nn.functional as F
    from gpu_timing import time_ms  # examples/ is on sys.path when run as a script

    kernel = build(head_dim, dtype, causal, pipeline=pipeline)
    diff = check(kernel, batch, heads, seq, head_dim, dtype, causal)
    (q, k, v), scales, values = inputs((batch, heads, seq, head_dim), dtype)
    o = torch.empty_like(values[0])
    ours, how = time_ms(lambda: run(kernel, q, k, v, o, scales))
    sdpa, _ = time_ms(lambda: F.scaled_dot_product_attention(*values, is_causal=causal))
    flops = 4 * batch * heads * seq * seq * head_dim * (0.5 if causal else 1.0)
    print(
        f"B={batch} H={heads} S={seq} D={head_dim} {dtype} causal={causal}: {kernel.registers} registers, "
        f"|O - SDPA| / |SDPA| {diff:.1e}; blasdx {ours:.3f} ms ({flops / ours / 1e9:.0f} TFLOP/s), "
        f"SDPA{' on f16 inputs' if scales else ''} {sdpa:.3f} ms -> {sdpa / ours:.2f}x ({how})"
    )


def main() -> int:
    from gpu_device import attention_parser  # examples/ is on sys.path when run as a script

    parser = attention_parser(__doc__, batch=4, heads=16, seq=[4096, 1000], head_dim=[64, 128])
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float16")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--pipeline", choices=sorted(PIPELINES), default=None, help="default: per head dim")
    args = parser.parse_args()
    dtype = DTYPES[args.dtype]

    try:
        import torch
    except ImportError:  # compile only
        torch = None
    if torch is None or not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        for d in args.head_dim:
            kernel = build(d, dtype, args.causal, pipeline=args.pipeline)
            print(f"no sm_90 GPU: compiled D={d}: {kernel.registers} registers, {kernel.local_memory} B spilled")
        return 0
    torch.manual_seed(0)
    for seq in args.seq:
        for d in args.head_dim:
            benchmark(args.batch, args.heads, seq, d, dtype, args.causal, args.pipeline)
    return 0


if __name__ == "__main__":
    sys.exit(main())

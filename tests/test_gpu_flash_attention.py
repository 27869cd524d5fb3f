"""GPU correctness of examples/flash_attention.py (sm_90a on a compute capability 9.0 GPU) and of the
device-API pieces it is built from (row view, bounded copies, register A).

softmax(Q K^T / sqrt(d)) V for odd sequence lengths (1, 17, 129, 1000, 4097: one partial tile, a
second tile of one key, partial last query and key tiles, many full tiles and a one-row tail), head dims 64 and 128,
f16 and bf16, causal and not, on fresh random data with O poisoned (NaN) first: sampled heads
against the float64 reference within the reference table's tolerance, and all of O against
torch SDPA's result within twice that.
"""

from __future__ import annotations

import pytest

import blasdx as bx
from blasdx.reference import assert_close, tolerance

from . import attention_kernels as ak
from .gpu_support import gpu_sm
from .test_fusion import load_example

pytestmark = pytest.mark.gpu

fa = load_example("flash_attention")


@pytest.fixture(scope="module")
def hopper() -> None:
    if gpu_sm() != 90:
        pytest.skip("needs a compute capability 9.0 GPU (wgmma, sm_90a)")
    pytest.importorskip("torch")


CASES = [
    (seq, d, dtype, causal, pipeline)
    for seq in (1, 17, 129, 1000, 4097)
    for d in (64, 128)
    for dtype in (bx.float16, bx.bfloat16)
    for causal in (False, True)
    for pipeline in ("overlap", "stages", "turns")
    if (dtype == bx.float16 and pipeline != "turns" and (seq != 129 or d == 64 or pipeline == "stages"))
    or (dtype == bx.float16 and pipeline == "turns" and seq in (1, 17, 1000, 4097))
    or (dtype == bx.bfloat16 and seq in (17, 1000) and pipeline == ("turns" if d == 128 else "overlap"))
]


@pytest.mark.parametrize("seq,d,dtype,causal,pipeline", CASES, ids=lambda v: str(v))
def test_flash_attention(hopper, seq: int, d: int, dtype, causal: bool, pipeline: str) -> None:
    import torch

    torch.manual_seed(seq * 7 + d)
    kernel = fa.build(d, dtype, causal, pipeline=pipeline)
    assert kernel.local_memory == 0
    batch, heads = (2, 3) if seq < 4000 else (1, 2)
    diff = fa.check(kernel, batch, heads, seq, d, dtype, causal, sample=3)
    assert diff <= 2 * fa.tolerance_of(dtype, seq)


@pytest.mark.parametrize("d", [64, 128])
def test_flash_attention_other_key_tiles(hopper, d: int) -> None:
    """The key tile the default does not take (128 for D = 64, 64 for D = 128)."""
    kernel = fa.build(d, bx.float16, True, block_n=128 if d == 64 else 64)
    fa.check(kernel, 2, 2, 1000, d, bx.float16, True, sample=2)


@pytest.mark.parametrize("pipeline", ["overlap", "stages", "turns"])
def test_flash_attention_many_heads(hopper, pipeline: str) -> None:
    """A grid with many heads and query tiles: each block finds its own head and tile."""
    kernel = fa.build(64, bx.float16, True, pipeline=pipeline)
    fa.check(kernel, 4, 8, 513, 64, bx.float16, True, sample=6)


@pytest.mark.parametrize("seq,d,causal", [(17, 64, False), (1000, 128, True), (4097, 64, True), (300, 128, False)])
def test_flash_attention_without_pipelining(hopper, seq: int, d: int, causal: bool) -> None:
    """The kernel whose GEMMs complete one after the other (no asynchronous wgmma)."""
    kernel = fa.build(d, bx.float16, causal, pipeline="serial")
    fa.check(kernel, 1, 3, seq, d, bx.float16, causal, sample=2)


FP8_CASES = [(seq, d, causal) for seq in (1, 17, 1000, 4097) for d in (64, 128) for causal in (False, True)]


@pytest.mark.parametrize("seq,d,causal", FP8_CASES, ids=lambda v: str(v))
def test_flash_attention_fp8(hopper, seq: int, d: int, causal: bool) -> None:
    """fp8 Q, K, V with per-tensor scales (amax / 448), O in f16, the default pipeline: against float64 on the
    dequantised inputs and SDPA on their f16 values."""
    import torch

    torch.manual_seed(seq * 11 + d)
    kernel = fa.build(d, bx.float8_e4m3, causal)
    assert kernel.local_memory == 0
    batch, heads = (2, 3) if seq < 4000 else (1, 2)
    diff = fa.check(kernel, batch, heads, seq, d, bx.float8_e4m3, causal, sample=3)
    assert diff <= 2 * fa.tolerance_of(bx.float8_e4m3, seq)


@pytest.mark.parametrize("d,pipeline,out_dtype", [(64, "stages", bx.float16), (128, "serial", bx.float16),
                                                  (128, "overlap", bx.float16), (64, "turns", bx.bfloat16),
                                                  (128, "turns", bx.bfloat16)])
def test_flash_attention_fp8_variants(hopper, d: int, pipeline: str, out_dtype) -> None:
    """fp8 inputs through the other pipelines and into bf16 O (V converted to bf16, P V in bf16)."""
    import torch

    torch.manual_seed(d)
    kernel = fa.build(d, bx.float8_e4m3, True, pipeline=pipeline, out_dtype=out_dtype)
    fa.check(kernel, 1, 3, 1000, d, bx.float8_e4m3, True, sample=2)


def test_flash_attention_scales_checked(hopper) -> None:
    """An fp8 kernel needs three positive finite scales, a 16-bit one takes none; both refused before launch."""
    import torch

    fp8, f16 = fa.build(64, bx.float8_e4m3), fa.build(64, bx.float16)
    x = torch.zeros((1, 1, 8, 64), device="cuda", dtype=torch.float8_e4m3fn)
    o = torch.zeros((1, 1, 8, 64), device="cuda", dtype=torch.float16)
    with pytest.raises(bx.ExecutionError, match="scales: an fp8 kernel takes"):
        fa.run(fp8, x, x, x, o)
    with pytest.raises(bx.ExecutionError, match=r"scales: \(1.0, 0.0, 1.0\), expected three finite positive"):
        fa.run(fp8, x, x, x, o, (1.0, 0.0, 1.0))
    with pytest.raises(bx.ExecutionError, match="scales: a 16-bit kernel takes none"):
        fa.run(f16, o, o, o, o, (1.0, 1.0, 1.0))


# ---------------------------------------------------------------------------------------------
# the device-API pieces on their own (tests/attention_kernels.py)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [64, 37, 1])
@pytest.mark.parametrize("sm,size,threads", [(90, (64, 32, 64), 128), ((90, True), (128, 64, 64), 256)],
                         ids=["mma_sync", "wgmma"])
@pytest.mark.parametrize("stage_barrier", [False, True], ids=["copy_wait", "stage_barrier"])
def test_rows_and_bounded_copies(sm, size, threads, rows: int, stage_barrier: bool) -> None:
    """Row maxima / sums of C = A B through blasdx::rows, A loaded with only `rows` rows (the rest
    zero-filled), C / row sums stored for those rows only."""
    if gpu_sm() != 90:
        pytest.skip("needs a compute capability 9.0 GPU (the descriptors target sm_90 and sm_90a)")
    import numpy as np

    torch = pytest.importorskip("torch")
    desc = ak.row_stats_gemm(sm, size=size, threads=threads)
    kernel = ak.compile_row_stats(desc, stage_barrier)
    m, n, k = size
    torch.manual_seed(rows)
    a = torch.rand(m, k, device="cuda", dtype=torch.float16) + 0.1  # positive: row sums far from zero
    a[rows:] = float("nan")  # never read
    b = torch.rand(n, k, device="cuda", dtype=torch.float16) - 0.25  # column-major K x N
    a_in = a.clone()
    poison = -12345.0
    row_max = torch.full((m,), poison, device="cuda")
    row_sum = torch.full((m,), poison, device="cuda")
    c = torch.full((m, n), poison, device="cuda")
    kernel.launch(1, (a_in, b, row_max, row_sum, c, rows))
    torch.cuda.synchronize()
    full = np.zeros((m, k))
    full[:rows] = a[:rows].double().cpu().numpy()
    ref = full @ b.double().cpu().numpy().T
    got_max, got_sum, got_c = (t.double().cpu().numpy() for t in (row_max, row_sum, c))
    tol = tolerance(bx.float16, bx.float32, k)
    assert_close(got_max, ref.max(axis=1), tol, what="row maxima")  # zero rows past `rows`: max 0
    assert_close(got_sum, ref.sum(axis=1), tol, what="row sums", scale=np.abs(ref).sum(axis=1))
    assert_close(got_c[:rows], ref[:rows] / ref[:rows].sum(axis=1, keepdims=True), 10 * tol, what="C / row sums",
                 scale=np.abs(ref[:rows]) / np.abs(ref[:rows].sum(axis=1, keepdims=True)))
    assert np.all(got_c[rows:] == poison), "the bounded store wrote rows past `rows`"


@pytest.mark.parametrize("dtype", [bx.float16, bx.bfloat16])
@pytest.mark.parametrize("b2_order", [bx.row_major, bx.col_major], ids=["b2_row", "b2_col"])
def test_register_a_chain(hopper, dtype, b2_order) -> None:
    """O = round16(A B1) B2, the first accumulator becoming the second GEMM's register A."""
    import torch

    gemms = ak.chain_gemms(dtype, b2_order=b2_order)
    kernel = ak.compile_chain(gemms)
    g1, g2 = gemms["G1"], gemms["G2"]
    tdtype = getattr(torch, str(dtype))
    torch.manual_seed(7)
    a = torch.randn(g1.m, g1.k, device="cuda", dtype=tdtype)
    b1 = torch.randn(g1.n, g1.k, device="cuda", dtype=tdtype)  # column-major k1 x n1
    b2 = torch.randn(g2.k, g2.n, device="cuda", dtype=tdtype)
    b2_given = b2 if b2_order == bx.row_major else b2.t().contiguous()
    o = torch.full((g2.m, g2.n), float("nan"), device="cuda")
    kernel.launch(1, (a, b1, b2_given, o))
    torch.cuda.synchronize()
    s = (a.double() @ b1.double().t()).to(tdtype)  # the kernel rounds S once, as here (from f32 sums)
    ref = (s.double() @ b2.double()).cpu().numpy()
    assert_close(o.double().cpu().numpy(), ref, tolerance(dtype, dtype, g1.k), what="O")


@pytest.mark.parametrize("dtype", [bx.float16, bx.bfloat16])
def test_async_chain(hopper, dtype) -> None:
    """execute_async / wait with two groups in flight: the older (register A) and the newer (A B1 again)."""
    import torch

    gemms = ak.chain_gemms(dtype)
    kernel = ak.compile_chain(gemms, asynchronous=True)
    g1, g2 = gemms["G1"], gemms["G2"]
    tdtype = getattr(torch, str(dtype))
    torch.manual_seed(11)
    a = torch.randn(g1.m, g1.k, device="cuda", dtype=tdtype)
    b1 = torch.randn(g1.n, g1.k, device="cuda", dtype=tdtype)
    b2 = torch.randn(g2.k, g2.n, device="cuda", dtype=tdtype)
    o = torch.full((g2.m, g2.n), float("nan"), device="cuda")
    s2 = torch.full((g1.m, g1.n), float("nan"), device="cuda")
    kernel.launch(1, (a, b1, b2, o, s2))
    torch.cuda.synchronize()
    exact = a.double() @ b1.double().t()
    ref = (exact.to(tdtype).double() @ b2.double()).cpu().numpy()
    assert_close(o.double().cpu().numpy(), ref, tolerance(dtype, dtype, g1.k), what="O")
    assert_close(s2.double().cpu().numpy(), exact.cpu().numpy(), tolerance(dtype, bx.float32, g1.k), what="S2")


def _softmax64(s, keys: int, scale: float):
    """Row softmax of scale * s in float64 over the first `keys` columns (the rest: zero weight)."""
    import numpy as np

    x = s * scale
    x[:, keys:] = -np.inf
    p = np.exp(x - x.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("tiles,keys", [(1, 32), (1, 5), (4, 128), (5, 130)])
@pytest.mark.parametrize("sm,size,threads", [(90, (64, 32, 64), 128), ((90, True), (128, 64, 64), 256)],
                         ids=["mma_sync", "wgmma"])
def test_online_softmax(sm, size, threads, tiles: int, keys: int) -> None:
    """blasdx::online_softmax over `tiles` score tiles whose scores grow by 12 (log2 units) tile by tile,
    so that the maxima move and O is rescaled each time, keys past `keys` masked:
    O(r, c) = sum_j P(r, j n + c)."""
    if gpu_sm() != 90:
        pytest.skip("needs a compute capability 9.0 GPU (the descriptors target sm_90 and sm_90a)")
    import numpy as np

    torch = pytest.importorskip("torch")
    m, n, k = size
    keys = min(keys, tiles * n)
    kernel = ak.compile_online_softmax(ak.row_stats_gemm(sm, size=size, threads=threads))
    torch.manual_seed(tiles * 1000 + keys)
    a = torch.rand(m, k, device="cuda", dtype=torch.float16)
    a[:, 0] = 1.0
    b = torch.rand(tiles * n, k, device="cuda", dtype=torch.float16) - 0.5  # column-major k x (tiles n)
    b[:, 0] = 12.0 * (torch.arange(tiles * n, device="cuda") // n).half()   # + 12 per tile, exactly
    o = torch.full((m, n), float("nan"), device="cuda")
    scale_log2 = 1.0
    kernel.launch(1, (a, b, o, tiles, keys, scale_log2))
    torch.cuda.synchronize()
    a64, b64 = a.double().cpu().numpy(), b.double().cpu().numpy()
    ref = _softmax64(a64 @ b64.T, keys, scale_log2 * np.log(2.0)).reshape(m, tiles, n).sum(axis=1)
    # P = 2^(s - max): an error e in the f32 scores moves P by ln2 e relatively, in numerator and sum
    # alike; the sums themselves carry f32 rounding over the keys
    score_error = tolerance(bx.float16, bx.float32, k) * float((np.abs(a64) @ np.abs(b64).T).max())
    tol = 2 * np.log(2.0) * scale_log2 * score_error + tolerance(bx.float32, bx.float32, tiles * n)
    assert_close(o.double().cpu().numpy(), ref, tol, what="O")


@pytest.mark.parametrize("pipelining", ["serial", "overlap", "stages", "turns"])
@pytest.mark.parametrize("seq,q_rows", [(64, 128), (1000, 77), (129, 1)])
def test_kv_stream(hopper, pipelining: str, seq: int, q_rows: int) -> None:
    """blasdx::kv_stream with the plain online softmax: O = softmax(Q K^T) V for one tile of queries
    (q_rows of 128 stored), rows past q_rows of O left alone."""
    import numpy as np
    import torch

    gemms = ak.stream_gemms()
    kernel = ak.compile_kv_stream(gemms, pipelining)
    torch.manual_seed(seq + q_rows)
    q = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(seq, 64, device="cuda", dtype=torch.float16) for _ in range(2))
    o = torch.full((128, 64), float("nan"), device="cuda", dtype=torch.float16)
    scale_log2 = float(np.log2(np.e) / 8.0)
    kernel.launch(1, (q, k, v, o, q_rows, seq, scale_log2))
    torch.cuda.synchronize()
    p = _softmax64(q.double().cpu().numpy() @ k.double().cpu().numpy().T, seq, 1 / 8.0)
    ref = p @ v.double().cpu().numpy()
    got = o.double().cpu().numpy()
    assert_close(got[:q_rows], ref[:q_rows], tolerance(bx.float16, bx.float16, seq), what="O")
    assert np.isnan(got[q_rows:]).all(), "the stream stored rows past q_rows"

"""GPU correctness of bx.grouped_mm (sm_90 only) against a loop of float64 products per group.

Group counts 1-256, uniform, skewed (Zipf) and empty groups, M not a multiple of the tile,
operand layouts, the contiguous, batched and masked layouts, groups along K (2D x 2D), fp8 with per-row / per-column
and block scales, and CUDA-graph replay with new offsets written into the same array. Outputs
are poisoned (NaN) before every call; rows a masked call must not write stay NaN.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.base.errors import ExecutionError
from blasdx.reference import rounding, tolerance

from .gpu_support import require_gpu, torch_dtype

pytestmark = pytest.mark.gpu

BF16, F16, F32 = dt.bfloat16, dt.float16, dt.float32
E4M3, E5M2 = dt.float8_e4m3, dt.float8_e5m2


@pytest.fixture(scope="module")
def torch():
    if require_gpu() != 90:
        pytest.skip("grouped_mm runs on the Hopper engine (sm_90 GPUs)")
    import torch

    return torch


def sizes(groups: int, total: int, routing: str, seed: int) -> np.ndarray:
    """Rows per group summing to total: "uniform" (as even as can be), "zipf" (skewed), "empty" (every
    other group empty)."""
    rng = np.random.default_rng(seed)
    if routing == "uniform":
        weights = np.ones(groups)
    elif routing == "zipf":
        weights = 1.0 / np.arange(1, groups + 1) ** 1.2
        rng.shuffle(weights)
    else:
        weights = np.where(np.arange(groups) % 2 == 1, 1.0, 0.0) if groups > 1 else np.ones(1)
    counts = np.floor(weights / weights.sum() * total).astype(np.int64)
    counts[np.argmax(weights)] += total - counts.sum()
    return counts


def offsets(torch, counts: np.ndarray):
    return torch.tensor(np.cumsum(counts), dtype=torch.int32, device="cuda")


def operand(torch, shape, a: dt.DType, gen):
    return torch.randn(shape, device="cuda", generator=gen).to(torch_dtype(a))


def weights(torch, groups, k, n, a: dt.DType, gen, order: str):
    """w [G, K, N]: "KN" stored so (N contiguous), "NK" stored [G, N, K] and passed transposed."""
    if order == "KN":
        return operand(torch, (groups, k, n), a, gen)
    return operand(torch, (groups, n, k), a, gen).transpose(1, 2)


def reference(torch, x, w, counts, sx=None, sw=None):
    """[total, N] float64: rows of group g times w[g] (x scaled per row / w per column when given)."""
    out = torch.empty((x.shape[0], w.shape[2]), dtype=torch.float64, device="cuda")
    start = 0
    for g, rows in enumerate(counts.tolist()):
        xs = x[start:start + rows].double()
        wg = w[g].double()
        if sx is not None:
            xs = xs * sx[start:start + rows].double().reshape(-1, 1)
        if sw is not None:
            wg = wg * sw[g].double().reshape(1, -1)
        out[start:start + rows] = xs @ wg
        start += rows
    return out


def error(got, ref) -> float:
    got = got.double()
    if not bool(torch_isfinite(got)):
        return math.inf
    norm = float(ref.norm())
    return float((got - ref).norm()) / (norm if norm > 0 else 1.0)


def torch_isfinite(t):
    return t.isfinite().all()


# ---- 16-bit, contiguous --------------------------------------------------------------------------


@pytest.mark.parametrize(("groups", "total", "routing"), [
    (1, 1000, "uniform"), (8, 4000, "zipf"), (8, 3001, "empty"), (64, 5000, "zipf"), (256, 2048, "uniform"),
    (1500, 6000, "zipf"),
])
def test_bf16_contiguous(torch, groups, total, routing):
    gen = torch.Generator(device="cuda").manual_seed(groups * 7 + total)
    k, n = 520, 776  # K not a multiple of 64, N not of 128
    counts = sizes(groups, total, routing, groups)
    x = operand(torch, (total, k), BF16, gen)
    for order in ("NK", "KN"):
        w = weights(torch, groups, k, n, BF16, gen, order)
        out = torch.full((total, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        got = bx.grouped_mm(x, w, offsets(torch, counts), out=out)
        assert got is out
        err = error(out, reference(torch, x, w, counts))
        assert err <= tolerance(BF16, BF16, k), f"{groups} groups, {routing}, w {order}: {err:.3e}"


@pytest.mark.parametrize(("a", "c"), [(F16, F16), (F16, F32), (BF16, F32)])
def test_types_and_layouts(torch, a, c):
    gen = torch.Generator(device="cuda").manual_seed(5)
    groups, total, k, n = 6, 1504, 264, 392  # M-major x: total rows of 16 bytes
    counts = sizes(groups, total, "zipf", 3)
    x = operand(torch, (k, total), a, gen).t()  # M-major x
    w = weights(torch, groups, k, n, a, gen, "KN")
    got = bx.grouped_mm(x, w, offsets(torch, counts), out_dtype=c)
    assert got.dtype == torch_dtype(c) and got.shape == (total, n)
    assert error(got, reference(torch, x, w, counts)) <= tolerance(a, c, k)


def test_batched_and_masked(torch):
    gen = torch.Generator(device="cuda").manual_seed(11)
    groups, m, k, n = 10, 200, 328, 520
    x = operand(torch, (groups, m, k), BF16, gen)
    w = weights(torch, groups, k, n, BF16, gen, "NK")
    ref = torch.stack([x[g].double() @ w[g].double() for g in range(groups)])
    got = bx.grouped_mm(x, w)
    assert got.shape == (groups, m, n) and error(got, ref) <= tolerance(BF16, BF16, k)
    counts = np.array([0, 1, 64, 65, 200, 127, 128, 129, 3, 199])
    out = torch.full((groups, m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    bx.grouped_mm(x, w, counts=torch.tensor(counts, dtype=torch.int32, device="cuda"), out=out)
    for g, rows in enumerate(counts.tolist()):
        assert error(out[g, :rows], ref[g, :rows]) <= tolerance(BF16, BF16, k), f"group {g}"
        assert bool(out[g, rows:].isnan().all()), f"group {g}: rows past its count were written"


def test_masked_decode_shapes(torch):
    gen = torch.Generator(device="cuda").manual_seed(12)
    groups, m, k, n = 32, 48, 1024, 384
    x = operand(torch, (groups, m, k), BF16, gen)
    w = weights(torch, groups, k, n, BF16, gen, "NK")
    counts = torch.randint(0, m + 1, (groups,), generator=gen, device="cuda", dtype=torch.int32)
    out = torch.full((groups, m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    bx.grouped_mm(x, w, counts=counts, out=out)
    for g, rows in enumerate(counts.tolist()):
        ref = x[g, :rows].double() @ w[g].double()
        assert error(out[g, :rows], ref) <= tolerance(BF16, BF16, k)
        assert bool(out[g, rows:].isnan().all())


def test_graph_replay_with_new_offsets(torch):
    gen = torch.Generator(device="cuda").manual_seed(13)
    groups, total, k, n = 16, 3000, 256, 512
    x = operand(torch, (total, k), BF16, gen)
    w = weights(torch, groups, k, n, BF16, gen, "NK")
    first = sizes(groups, total, "uniform", 0)
    offs = offsets(torch, first)
    out = torch.full((total, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        bx.grouped_mm(x, w, offs, out=out)  # plan and compile outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            bx.grouped_mm(x, w, offs, out=out)
    for seed, routing in ((1, "zipf"), (2, "empty"), (3, "uniform")):
        counts = sizes(groups, total, routing, seed)
        offs.copy_(offsets(torch, counts))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert error(out, reference(torch, x, w, counts)) <= tolerance(BF16, BF16, k), routing


def test_groups_along_k_refused(torch):
    """The 2D x 2D form is refused before any launch (its K-padded path gave wrong results on the GPU)."""
    x = torch.randn((264, 500), device="cuda").bfloat16()
    w = torch.randn((500, 392), device="cuda").bfloat16()
    offs = torch.tensor([100, 500], dtype=torch.int32, device="cuda")
    with pytest.raises(ExecutionError, match=r"^x, w: the 2D x 2D form \(groups along K\) is not enabled"):
        bx.grouped_mm(x, w, offs)


@pytest.mark.parametrize("a", [BF16, E4M3])
def test_groups_along_n(torch, a):
    """x [G, M, K] with w [K, total_n] -> [M, total_n]: columns of group g are x[g] times w's same columns."""
    gen = torch.Generator(device="cuda").manual_seed(33)
    groups, m, k, total = 6, 200, 256, 1000
    counts = sizes(groups, total, "empty", 9)
    x = (2 * torch.randn((groups, m, k), device="cuda", generator=gen)).to(torch_dtype(a))
    w = (2 * torch.randn((k, total), device="cuda", generator=gen)).to(torch_dtype(a))
    out = torch.full((m, total), float("nan"), dtype=torch.float32, device="cuda")
    bx.grouped_mm(x, w, offsets(torch, counts), out=out, out_dtype=F32)
    start, ref = 0, torch.empty((m, total), dtype=torch.float64, device="cuda")
    for g, cols in enumerate(counts.tolist()):
        ref[:, start:start + cols] = x[g].double() @ w[:, start:start + cols].double()
        start += cols
    tol = fp8_tolerance(a, F32, k) if a == E4M3 else tolerance(a, F32, k)
    assert error(out, ref) <= tol


# ---- fp8 ---------------------------------------------------------------------------------------------


def fp8_tolerance(a, c, k):
    return tolerance(a, c, k, F32, "wgmma", 128)


@pytest.mark.parametrize("pair", [(E4M3, E4M3), (E5M2, E4M3)])
def test_fp8_row_and_column_scales(torch, pair):
    gen = torch.Generator(device="cuda").manual_seed(21)
    groups, total, k, n = 8, 2500, 1040, 640
    counts = sizes(groups, total, "zipf", 4)
    x = (2 * torch.randn((total, k), device="cuda", generator=gen)).to(torch_dtype(pair[0]))
    w = (2 * torch.randn((groups, n, k), device="cuda", generator=gen)).to(torch_dtype(pair[1])).transpose(1, 2)
    sx = torch.rand((total,), device="cuda", generator=gen) + 0.5
    sw = torch.rand((groups, n), device="cuda", generator=gen) + 0.5
    got = bx.grouped_mm(x, w, offsets(torch, counts), scale_x=sx, scale_w=sw)
    assert got.dtype == torch.bfloat16
    ref = reference(torch, x, w, counts, sx, sw)
    assert error(got, ref) <= fp8_tolerance(pair[0], BF16, k)


def test_fp8_layouts_repacked(torch):
    """fp8 x M-major and w N-major (wgmma reads K-major only): copied K-major at the call."""
    gen = torch.Generator(device="cuda").manual_seed(24)
    groups, total, k, n = 6, 1504, 528, 400
    counts = sizes(groups, total, "zipf", 8)
    x = (2 * torch.randn((k, total), device="cuda", generator=gen)).to(torch.float8_e4m3fn).t()
    w = (2 * torch.randn((groups, k, n), device="cuda", generator=gen)).to(torch.float8_e5m2)
    sx = torch.rand((total, 1), device="cuda", generator=gen) + 0.5
    got = bx.grouped_mm(x, w, offsets(torch, counts), scale_x=sx, out_dtype=F32)
    assert error(got, reference(torch, x, w, counts, sx)) <= fp8_tolerance(E4M3, F32, k)
    xm = (2 * torch.randn((groups, k, 80), device="cuda", generator=gen)).to(torch.float8_e4m3fn).transpose(1, 2)
    got = bx.grouped_mm(xm, w)  # batched, both copied
    ref = torch.stack([xm[g].double() @ w[g].double() for g in range(groups)])
    assert error(got, ref) <= fp8_tolerance(E4M3, BF16, k)


def _block_reference(x, w, counts, sx, sw, torch):
    """float64 of rows of group g times w[g], x dequantized per 1 x 128 block and w per 128 x 128 block."""
    total, k = x.shape
    xd = x.double() * sx.double().repeat_interleave(128, dim=1)[:, :k]
    out = torch.empty((total, w.shape[2]), dtype=torch.float64, device="cuda")
    start = 0
    for g, rows in enumerate(counts.tolist()):
        f = sw[g].double().repeat_interleave(128, dim=0)[:k].repeat_interleave(128, dim=1)[:, :w.shape[2]]
        out[start:start + rows] = xd[start:start + rows] @ (w[g].double() * f)
        start += rows
    return out


def _fp8_blocks(torch, gen, groups: int, total: int, k: int, n: int):
    """e4m3 x [total, K] and w [G, K, N] stored [G, N, K], their 1 x 128 and 128 x 128 block scales in [0.5, 1.5)."""
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    x = (2 * torch.randn((total, k), device="cuda", generator=gen)).to(torch.float8_e4m3fn)
    w = (2 * torch.randn((groups, n, k), device="cuda", generator=gen)).to(torch.float8_e4m3fn).transpose(1, 2)
    sx = torch.rand((total, kb), device="cuda", generator=gen) + 0.5
    sw = torch.rand((groups, kb, nb), device="cuda", generator=gen) + 0.5
    return x, w, sx, sw


@pytest.mark.parametrize("out_dtype", [BF16, F32])
def test_fp8_block_scales(torch, out_dtype):
    gen = torch.Generator(device="cuda").manual_seed(22)
    groups, total, k, n = 12, 3000, 1008, 520  # fp8 rows of K bytes: a multiple of 16
    counts = sizes(groups, total, "empty", 5)
    x, w, sx, sw = _fp8_blocks(torch, gen, groups, total, k, n)
    got = bx.grouped_mm(x, w, offsets(torch, counts), scale_x=sx, scale_w=sw, out_dtype=out_dtype)
    assert error(got, _block_reference(x, w, counts, sx, sw, torch)) <= fp8_tolerance(E4M3, out_dtype, k)


def test_fp8_masked_block_scales(torch):
    gen = torch.Generator(device="cuda").manual_seed(23)
    groups, m, k, n = 8, 96, 512, 384
    kb, nb = k // 128, n // 128
    x = (2 * torch.randn((groups, m, k), device="cuda", generator=gen)).to(torch.float8_e4m3fn)
    w = (2 * torch.randn((groups, n, k), device="cuda", generator=gen)).to(torch.float8_e4m3fn).transpose(1, 2)
    sx = torch.rand((groups, m, kb), device="cuda", generator=gen) + 0.5
    sw = torch.rand((groups, kb, nb), device="cuda", generator=gen) + 0.5
    counts = torch.tensor([0, 96, 1, 50, 64, 65, 95, 30], dtype=torch.int32, device="cuda")
    out = torch.full((groups, m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    bx.grouped_mm(x, w, counts=counts, scale_x=sx, scale_w=sw, out=out)
    for g, rows in enumerate(counts.tolist()):
        ref = _block_reference(x[g, :rows], w[g:g + 1], np.array([rows]), sx[g, :rows], sw[g:g + 1], torch)
        assert error(out[g, :rows], ref) <= fp8_tolerance(E4M3, BF16, k), f"group {g}"
        assert bool(out[g, rows:].isnan().all())


# ---- whole tiles stored by TMA ------------------------------------------------------------------------


@pytest.fixture
def staged():
    from blasdx.calls import grouped_mm as grouped

    grouped._CALLS.clear()
    before, grouped.STORE_BY_TMA = grouped.STORE_BY_TMA, True
    yield
    grouped.STORE_BY_TMA = before
    grouped._CALLS.clear()


def test_staged_store(torch, staged):
    """Tiles wholly inside a group through TMA, the ones crossing a group's end pair by pair."""
    gen = torch.Generator(device="cuda").manual_seed(41)
    groups, total, k, n = 12, 4000, 520, 776
    counts = sizes(groups, total, "zipf", 6)
    x = operand(torch, (total, k), BF16, gen)
    w = weights(torch, groups, k, n, BF16, gen, "NK")
    out = torch.full((total, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    bx.grouped_mm(x, w, offsets(torch, counts), out=out)
    assert error(out, reference(torch, x, w, counts)) <= tolerance(BF16, BF16, k)
    got = bx.grouped_mm(x, w, offsets(torch, counts), out_dtype=F32)  # a new result
    assert error(got, reference(torch, x, w, counts)) <= tolerance(BF16, F32, k)
    # masked: rows past a count stay unwritten
    m = 300
    xm = operand(torch, (groups, m, k), BF16, gen)
    cnt = np.array([0, 1, 64, 128, 129, 300, 256, 255, 3, 199, 200, 130])
    outm = torch.full((groups, m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    bx.grouped_mm(xm, w, counts=torch.tensor(cnt, dtype=torch.int32, device="cuda"), out=outm)
    for g, rows in enumerate(cnt.tolist()):
        ref = xm[g, :rows].double() @ w[g].double()
        assert error(outm[g, :rows], ref) <= tolerance(BF16, BF16, k), f"group {g}"
        assert bool(outm[g, rows:].isnan().all()), f"group {g}: rows past its count were written"


def test_staged_store_fp8(torch, staged):
    gen = torch.Generator(device="cuda").manual_seed(42)
    groups, total, k, n = 8, 2500, 1040, 640
    counts = sizes(groups, total, "empty", 7)
    x = (2 * torch.randn((total, k), device="cuda", generator=gen)).to(torch.float8_e4m3fn)
    w = (2 * torch.randn((groups, n, k), device="cuda", generator=gen)).to(torch.float8_e4m3fn).transpose(1, 2)
    sx = torch.rand((total,), device="cuda", generator=gen) + 0.5
    sw = torch.rand((groups, n), device="cuda", generator=gen) + 0.5
    got = bx.grouped_mm(x, w, offsets(torch, counts), scale_x=sx, scale_w=sw)
    assert error(got, reference(torch, x, w, counts, sx, sw)) <= fp8_tolerance(E4M3, BF16, k)


@pytest.mark.parametrize("n", [776, 777, 250])
def test_padded_out_is_never_written_past_n(torch, staged, n):
    """out a view of a larger array (rows of whole 16 bytes), contiguous and masked: every element of each
    group's product within its own bound, and the columns past N, the rows past the groups' and the rows
    past each count untouched. N of whole 16 bytes (776) is stored by TMA; other N pair by pair (a TMA
    store past N wrote the rest of the 16 bytes holding column N - 1)."""
    from blasdx.calls import grouped_mm as grouped

    from .hopper_support import check

    gen = torch.Generator(device="cuda").manual_seed(43 + n)
    groups, total, m, k = 6, 1500, 200, 264
    tol, eps = tolerance(BF16, BF16, k, F32, rounding_apart=True), rounding(BF16)
    pad = -n % 8 + 8  # at least one 16-byte granule past N
    counts = sizes(groups, total, "zipf", n)
    x = operand(torch, (total, k), BF16, gen)
    w = weights(torch, groups, k, n, BF16, gen, "NK")
    storage = torch.full((total + 2, n + pad), float("nan"), dtype=torch.bfloat16, device="cuda")
    bx.grouped_mm(x, w, offsets(torch, counts), out=storage[:total, :n])
    (call,) = grouped._CALLS.values()  # the fixture emptied the cache: this call's plan
    assert (call.plan.store_d is not None) == (n * 2 % 16 == 0), call.plan.describe()
    what = f"contiguous, N = {n}, {call.plan.describe()}"
    check(torch, storage[:total, :n], reference(torch, x, w, counts), reference(torch, x.abs(), w.abs(), counts), tol,
          what, eps)
    written = ~storage[:, n:].isnan()
    assert not written.any(), f"{what}: {int(written.sum())} padding elements written"
    assert bool(storage[total:].isnan().all()), f"{what}: rows past the last group written"

    xm = operand(torch, (groups, m, k), BF16, gen)
    cnt = np.array([0, 1, 64, 129, 200, 77])
    padded = torch.full((groups, m + 1, n + pad), float("nan"), dtype=torch.bfloat16, device="cuda")
    bx.grouped_mm(xm, w, counts=torch.tensor(cnt, dtype=torch.int32, device="cuda"), out=padded[:, :m, :n])
    what = f"masked, N = {n}"
    for g, rows in enumerate(cnt.tolist()):
        check(torch, padded[g, :rows, :n], xm[g, :rows].double() @ w[g].double(),
              xm[g, :rows].double().abs() @ w[g].double().abs(), tol, f"{what}, group {g}", eps)
        assert bool(padded[g, rows:].isnan().all()), f"{what}, group {g}: rows past its count or padding written"
        assert bool(padded[g, :rows, n:].isnan().all()), f"{what}, group {g}: columns past N written"


def test_clusters_of_one_group(torch):
    """A configuration with clusters of 2 (w's tile multicast to a pair of tile rows of one group)."""
    from blasdx.arrays import as_array
    from blasdx.calls import grouped_mm as grouped
    from blasdx.engine import grouped as engine
    from blasdx.engine import hopper

    gen = torch.Generator(device="cuda").manual_seed(43)
    groups, total, k, n = 10, 5000, 520, 776
    counts = sizes(groups, total, "zipf", 10)
    x = operand(torch, (total, k), BF16, gen)
    w = weights(torch, groups, k, n, BF16, gen, "NK")
    offs = offsets(torch, counts)
    vx, vw, voffs = as_array(x, "x"), as_array(w, "w"), as_array(offs, "offs")
    form = grouped.form_of(vx, vw, voffs, None)
    base = grouped._plan(vx, vw, form, BF16, grouped.Scale("none"), grouped.Scale("none"), 0).plan
    for staged in (False, True):
        config = hopper.replace(hopper.WIDE_CLUSTERS, bk=64, stages=3 if staged else 4)
        plan = engine.GroupedPlan(BF16, BF16, BF16, "contiguous", groups, total, n, k, base.route_a, base.route_b,
                                  (k, 0), (k, n * k), x.data_ptr(), w.data_ptr(), base.multiprocessors,
                                  config=config, d_layout=None, store_by_tma=staged)
        out = torch.full((total, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        plan.run(0, torch.cuda.current_stream().cuda_stream, x.data_ptr(), w.data_ptr(), offs.data_ptr(),
                 out.data_ptr(), (n, 1, 0))
        assert error(out, reference(torch, x, w, counts)) <= tolerance(BF16, BF16, k), f"staged {staged}"


@pytest.mark.parametrize("name", ["square", "medium"])
def test_fp8_block_scales_with_overlapped_promotion(torch, name):
    """promotion_overlap (the next stage multiplies while this one's products are added, times its block factors):
    1x128 / 128x128 block scales of x and w, empty and partial groups, K of 8 stages (the last partial)."""
    from blasdx.arrays import as_array
    from blasdx.calls import grouped_mm as grouped
    from blasdx.engine import grouped as engine
    from blasdx.engine import hopper

    gen = torch.Generator(device="cuda").manual_seed(47)
    groups, total, k, n = 12, 3000, 1008, 520
    counts = sizes(groups, total, "empty", 5)
    x, w, sx, sw = _fp8_blocks(torch, gen, groups, total, k, n)
    offs = offsets(torch, counts)
    vx, vw, voffs = as_array(x, "x"), as_array(w, "w"), as_array(offs, "offs")
    base = grouped._plan(vx, vw, grouped.form_of(vx, vw, voffs, None), BF16, grouped.Scale("none"),
                         grouped.Scale("none"), 0).plan
    config = hopper.replace(hopper.CONFIGS[name], bk=128, promotion=128, promotion_overlap=True)
    plan = engine.GroupedPlan(E4M3, E4M3, BF16, "contiguous", groups, total, n, k, base.route_a, base.route_b,
                              (k, 0), (k, n * k), x.data_ptr(), w.data_ptr(), base.multiprocessors, "block", "block",
                              config=config, d_layout=None)
    assert "promotions overlapped" in plan.describe(), plan.describe()
    out = torch.full((total, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    plan.run(0, torch.cuda.current_stream().cuda_stream, x.data_ptr(), w.data_ptr(), offs.data_ptr(), out.data_ptr(),
             (n, 1, 0), (sx.data_ptr(), sx.stride(0), sx.stride(1), 0),
             (sw.data_ptr(), sw.stride(1), sw.stride(2), sw.stride(0)))
    assert error(out, _block_reference(x, w, counts, sx, sw, torch)) <= fp8_tolerance(E4M3, BF16, k)


# ---- refusals on the device --------------------------------------------------------------------------


def test_offsets_checked_on_request(torch):
    x = torch.randn((100, 64), device="cuda").bfloat16()
    w = torch.randn((3, 64, 128), device="cuda").bfloat16()
    out = torch.full((100, 128), 7.0, device="cuda").bfloat16()
    for bad, match in (([10, 5, 100], "non-decreasing"), ([10, 50, 99], "last entry is 99")):
        offs = torch.tensor(bad, dtype=torch.int32, device="cuda")
        with pytest.raises(ExecutionError, match=match):
            bx.grouped_mm(x, w, offs, out=out, check_offsets=True)
    assert bool((out == 7.0).all()), "out was written"
    # unchecked, offsets out of order give empty groups: nothing outside the arrays is touched
    offs = torch.tensor([60, 20, 100], dtype=torch.int32, device="cuda")
    bx.grouped_mm(x, w, offs, out=out)
    torch.cuda.synchronize()
    ref = torch.cat([x[:60].double() @ w[0].double(), x[60:].double() @ w[2].double()])
    assert error(out, ref) <= tolerance(BF16, BF16, 64)

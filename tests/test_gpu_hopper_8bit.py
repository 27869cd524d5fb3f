"""GPU correctness of the Hopper engine's 8-bit paths (sm_90 only): int8 / uint8 -> int32 exact,
fp8 with f32 promotion (and fast accumulation, measured), and bx.scaled_mm.

* int8: every (x, y) pair, layouts, odd sizes, batches and broadcasts, split K, integer alpha /
  beta: the int32 result equals the exact product (float64 on the GPU is exact at these sizes).
* fp8: every pair and result type against the float64 product of the fp8 values, with
  reference.tolerance's promoted allowance; the error over K = 128 ... 16384, promoted (every
  32, 64, 128 K elements) and fast, is measured (written to $BLASDX_ACCURACY_JSON when set).
* scaled_mm: every scaling of x and y, layouts, result types, bias, split K, K = 0, against the
  float64 product of the dequantized inputs; bad scales raise before launch and leave out alone.
Outputs are poisoned (NaN, or a sentinel for int32) before every call.
"""

from __future__ import annotations

import json
import math
import os

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.calls.matmul import call_plan
from blasdx.engine import hopper
from blasdx.base.errors import ExecutionError
from blasdx.reference import rounding, tolerance

from .gpu_support import behind_a_delay, poisoned_new_tensors, side_stream, torch_dtype
from .hopper_support import (
    check,
    engine_call,
    hopper_torch,
    ordered,
    poisoned,
    reference,
    scaled_kernel,
)
from .hopper_support import operand as _operand

pytestmark = pytest.mark.gpu

INT8 = (dt.int8, dt.uint8)
FP8 = (dt.float8_e4m3, dt.float8_e5m2)
INT_PAIRS = [(a, b) for a in INT8 for b in INT8]
FP8_PAIRS = [(a, b) for a in FP8 for b in FP8]


@pytest.fixture(scope="module")
def torch():
    return hopper_torch()


def _engine(torch, x, y, acc, out, c: dt.DType, alpha=1, beta=1, config=None, splits=None, fast=False):
    """out = alpha * x @ y + beta * acc through the engine (any 8-bit pair); the plan."""
    return engine_call(torch, x, y, acc, out, c, alpha=alpha, beta=beta, config=config, splits=splits, fast=fast)


def _exact(torch, got, x, y, acc=None, alpha=1, beta=0, what=""):
    """Every element of ``got`` equal to alpha * x @ y + beta * acc (float64 on the GPU is exact here)."""
    ref, scale = reference(torch, x, y, acc, alpha, beta)
    check(torch, got, ref, scale, 0, what)


def _normwise(torch, got, ref) -> float:
    """||got - ref||_F / ||ref||_F (what the error-over-K measurement reports)."""
    out = got.to(torch.float64)
    scale = torch.linalg.norm(ref).item()
    return torch.linalg.norm(out - ref).item() / (scale if scale > 0 else 1.0)


# ---- int8 / uint8 -> int32: exact ----------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 17, 255, 1000, 4097])
@pytest.mark.parametrize("layout", ["RC", "CR"])
@pytest.mark.parametrize("pair", INT_PAIRS, ids=lambda p: f"{p[0].name}-{p[1].name}")
def test_int8_exact_every_pair(torch, pair, layout, size):
    a, b = pair
    gen = torch.Generator(device="cuda").manual_seed(size + 31 * INT_PAIRS.index(pair))
    m, n, k = size, size + (3 if size > 1 else 0), size + (5 if size > 1 else 0)
    x, y = _operand(torch, (m, k), a, gen, layout[0]), _operand(torch, (k, n), b, gen, layout[1])
    acc = torch.randint(-2**20, 2**20, (m, n), device="cuda", generator=gen, dtype=torch.int32)
    out = poisoned(torch, (m, n), dt.int32)
    engine = _engine(torch, x, y, acc, out, dt.int32, alpha=3, beta=-2)
    assert layout == "RC" or "repacked" in engine.describe(), engine.describe()  # 8-bit wgmma reads K-major
    _exact(torch, out, x, y, acc, 3, -2, f"{a.name} x {b.name} {layout} {m}x{n}x{k}")


@pytest.mark.parametrize("a", INT8, ids=lambda t: t.name)
def test_int8_matmul_and_mma_take_the_engine(torch, a):
    gen = torch.Generator(device="cuda").manual_seed(41)
    x, y = _operand(torch, (1000, 1536), a, gen), _operand(torch, (1536, 1200), a, gen, "C")
    with poisoned_new_tensors():  # the result matmul allocates starts as the largest int32
        got = bx.matmul(x, y)
    assert got.dtype == torch.int32
    plan = call_plan(x, y)
    assert plan.kind == "hopper", plan.describe()
    assert "IGMMA" in plan.kernel.compiled.sass()
    _exact(torch, got, x, y, what=f"matmul {a.name}")
    acc = torch.randint(-1000, 1000, (1000, 1200), device="cuda", generator=gen, dtype=torch.int32)
    before = acc.clone()
    bx.mma(x, y, acc, out=acc)
    _exact(torch, acc, x, y, before, 1, 1, f"mma {a.name} in place")


@pytest.mark.parametrize("broadcast", ["none", "x", "y"])
def test_int8_batches_and_broadcasts(torch, broadcast):
    gen = torch.Generator(device="cuda").manual_seed(43)
    batch, m, n, k = 5, 300, 200, 1000
    x = _operand(torch, (1 if broadcast == "x" else batch, m, k), dt.int8, gen)
    y = _operand(torch, (1 if broadcast == "y" else batch, k, n), dt.uint8, gen, "C")
    out = poisoned(torch, (batch, m, n), dt.int32)
    _engine(torch, x, y, None, out, dt.int32)
    _exact(torch, out, x, y, what=f"batch, broadcast {broadcast}")


@pytest.mark.parametrize("shape", [(16, 8192, 8192), (37, 1000, 9000), (259, 390, 4100)])
def test_int8_split_k(torch, shape):
    m, n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(m)
    x, y = _operand(torch, (m, k), dt.uint8, gen), _operand(torch, (k, n), dt.int8, gen, "C")
    acc = torch.randint(-9, 9, (m, n), device="cuda", generator=gen, dtype=torch.int32)
    out = poisoned(torch, (m, n), dt.int32)
    splits = None if m < 64 else 3
    config = None if splits is None else hopper.replace(hopper.PINGPONG, bk=128)
    engine = _engine(torch, x, y, acc, out, dt.int32, alpha=-1, beta=5, config=config, splits=splits)
    assert engine.splits > 1, engine.describe()
    _exact(torch, out, x, y, acc, -1, 5, f"{m}x{n}x{k}, {engine.splits} splits")


# ---- fp8: promoted into f32, every pair and result type -------------------------------------------


def _fp8_tolerance(a, c, k, promotion):
    """The promoted wgmma allowance, C's own rounding apart (checks pass rounding(c))."""
    return tolerance(a, c, max(k, 1), dt.float32, "wgmma", promotion, rounding_apart=True)


@pytest.mark.parametrize("size", [1, 17, 255, 1000])
@pytest.mark.parametrize("c", [dt.float16, dt.float32], ids=lambda t: t.name)
@pytest.mark.parametrize("pair", FP8_PAIRS, ids=lambda p: f"{p[0].name}-{p[1].name}")
def test_fp8_every_pair_promoted(torch, pair, c, size):
    a, b = pair
    gen = torch.Generator(device="cuda").manual_seed(size + 7 * FP8_PAIRS.index(pair))
    m, n, k = size, size + (3 if size > 1 else 0), size + (5 if size > 1 else 0)
    for layout in ("RC", "CR"):
        x, y = _operand(torch, (m, k), a, gen, layout[0]), _operand(torch, (k, n), b, gen, layout[1])
        acc = torch.randn((m, n), device="cuda", generator=gen).to(torch_dtype(c))
        out = poisoned(torch, (m, n), c)
        engine = _engine(torch, x, y, acc, out, c, alpha=0.5, beta=-1.0)
        assert engine.config.promotion == hopper.PROMOTION
        ref, scale = reference(torch, x, y, acc, 0.5, -1.0)
        check(torch, out, ref, scale, _fp8_tolerance(a, c, k, hopper.PROMOTION),
              f"{a.name} x {b.name} -> {c.name} {layout} {m}x{n}x{k}", rounding=rounding(c))


@pytest.mark.parametrize("a", FP8, ids=lambda t: t.name)
def test_fp8_matmul_promotes_unless_fast(torch, a):
    gen = torch.Generator(device="cuda").manual_seed(47)
    x, y = _operand(torch, (1024, 2048), a, gen), _operand(torch, (2048, 768), a, gen, "C")
    ref, scale = reference(torch, x, y)
    with poisoned_new_tensors():
        got = bx.matmul(x, y)
        fast = bx.matmul(x, y, fast_accumulation=True)
    plan = call_plan(x, y)
    assert plan.kind == "hopper" and plan.kernel.config.promotion == 128, plan.describe()
    check(torch, got, ref, scale, _fp8_tolerance(a, dt.float16, 2048, 128), f"matmul {a.name}",
          rounding=rounding(dt.float16))
    plan = call_plan(x, y, fast_accumulation=True)
    assert plan.kernel.config.promotion == 0, plan.describe()
    check(torch, fast, ref, scale, tolerance(a, dt.float16, 2048, dt.float32, "wgmma"), f"fast matmul {a.name}")


def test_fp8_batches_and_split_k(torch):
    gen = torch.Generator(device="cuda").manual_seed(53)
    x = _operand(torch, (4, 200, 1000), dt.float8_e4m3, gen)
    y = _operand(torch, (1, 1000, 300), dt.float8_e5m2, gen, "C")
    out = poisoned(torch, (4, 200, 300), dt.float32)
    _engine(torch, x, y, None, out, dt.float32, beta=0)
    ref, scale = reference(torch, x, y)
    check(torch, out, ref, scale, _fp8_tolerance(dt.float8_e4m3, dt.float32, 1000, 128), "batches",
          rounding=rounding(dt.float32))
    x, y = _operand(torch, (16, 8192), dt.float8_e4m3, gen), _operand(torch, (8192, 4096), dt.float8_e4m3, gen, "C")
    out = poisoned(torch, (16, 4096), dt.float16)
    engine = _engine(torch, x, y, None, out, dt.float16, beta=0)
    assert engine.splits > 1 and engine.config.promotion == 128, engine.describe()
    ref, scale = reference(torch, x, y)
    check(torch, out, ref, scale, _fp8_tolerance(dt.float8_e4m3, dt.float16, 8192, 128), "split K",
          rounding=rounding(dt.float16))


DEPTHS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]


def test_fp8_error_over_k_promoted_and_fast(torch):
    """Promotion keeps the error flat in K; fast accumulation's grows. Measured values are reported."""
    gen = torch.Generator(device="cuda").manual_seed(59)
    m = n = 512
    a, c = dt.float8_e4m3, dt.float32
    modes = {"promoted 32": 32, "promoted 64": 64, "promoted 128": 128, "fast": 0}
    errors: dict[str, dict[int, float]] = {mode: {} for mode in modes}
    for k in DEPTHS:
        x, y = _operand(torch, (m, k), a, gen), _operand(torch, (k, n), a, gen, "C")
        ref, scale = reference(torch, x, y)
        for mode, interval in modes.items():
            config = hopper.replace(hopper.SQUARE, bk=128, promotion=interval)
            out = poisoned(torch, (m, n), c)
            _engine(torch, x, y, None, out, c, beta=0, config=config, splits=1)
            tol = _fp8_tolerance(a, c, k, interval) if interval else tolerance(a, c, k, dt.float32, "wgmma")
            check(torch, out, ref, scale, tol, f"{mode} at K = {k}")
            errors[mode][k] = _normwise(torch, out, ref)
    path = os.environ.get("BLASDX_ACCURACY_JSON")
    if path:
        with open(path, "w") as f:
            json.dump({"shape": [m, n], "types": f"{a.name} -> {c.name}", "errors": errors}, f, indent=1)
    print("\nnormwise relative error of e4m3 -> f32, 512 x 512 x K:")
    for mode, row in errors.items():
        print(f"  {mode:13s} " + " ".join(f"{k}: {e:.2e}" for k, e in row.items()))
    for interval in (32, 64, 128):  # flat in K: the deepest no worse than twice the shallowest
        row = errors[f"promoted {interval}"]
        assert row[16384] <= 2 * row[128] + 1e-6, row
    assert errors["promoted 128"][16384] < errors["fast"][16384]
    assert errors["fast"][16384] > 4 * errors["fast"][128], "fast accumulation's error grows with K"


#: Overlapped promotion (promotion_overlap: the next stage multiplies while this one is added): the
#: configurations it runs on and K depths of 1, 2, 3 and 8 stages (odd and even counts end the two-stage loop
#: on either temporary; 1000 leaves a partial last stage), whole and split.
OVERLAPPED = [("square", 2), ("medium", 1)]
OVERLAP_DEPTHS = [128, 256, 384, 1000]


def _overlapped(name: str) -> hopper.EngineConfig:
    return hopper.replace(hopper.CONFIGS[name], bk=128, promotion=128, promotion_overlap=True)


@pytest.mark.parametrize("k", OVERLAP_DEPTHS)
@pytest.mark.parametrize(("name", "consumers"), OVERLAPPED, ids=[n for n, _ in OVERLAPPED])
def test_fp8_overlapped_promotion(torch, name, consumers, k):
    gen = torch.Generator(device="cuda").manual_seed(k + consumers)
    m, n = 300, 260
    x, y = _operand(torch, (m, k), dt.float8_e4m3, gen), _operand(torch, (k, n), dt.float8_e4m3, gen, "C")
    acc = _operand(torch, (m, n), dt.float16, gen)
    ref, scale = reference(torch, x, y, acc, 1.0, 1.0)
    for splits in (1, 3) if k >= 384 else (1,):
        out = poisoned(torch, (m, n), dt.float16)
        engine = _engine(torch, x, y, acc, out, dt.float16, config=_overlapped(name), splits=splits)
        assert "promotions overlapped" in engine.describe() and engine.splits == splits, engine.describe()
        check(torch, out, ref, scale, _fp8_tolerance(dt.float8_e4m3, dt.float16, k, 128),
              f"{name} overlapped, K = {k}, {splits} splits", rounding=rounding(dt.float16))


# ---- scaled_mm -------------------------------------------------------------------------------------------


def _scales(torch, shape, gen):
    """Positive f32 scales spread over 2^-3 .. 2^3 (so a wrong index or a missing factor shows)."""
    return torch.exp2(6 * torch.rand(shape, device="cuda", generator=gen) - 3)


def _scale_of(torch, mode, m, k, n, gen, is_x, order="R"):
    kb = math.ceil(k / 128)
    shape = {"tensor": (), "row": (m, 1), "column": (1, n), "block": (m, kb) if is_x else (kb, math.ceil(n / 128))}
    s = _scales(torch, shape[mode], gen)
    return ordered(s, order) if s.dim() == 2 else s


def _dequantized(torch, t, s, mode, is_x):
    """t (float64) times its scale expanded to t's shape."""
    t = t.to(torch.float64)
    s = s.to(torch.float64)
    if mode == "tensor":
        return t * s
    if mode in ("row", "column"):
        return t * s
    rows, cols = t.shape
    if is_x:  # (M, K / 128): each factor covers 128 K elements of a row
        return t * s.repeat_interleave(128, dim=1)[:, :cols]
    return t * s.repeat_interleave(128, dim=0)[:rows].repeat_interleave(128, dim=1)[:, :cols]


def _scaled_reference(torch, x, y, sx, sy, xm, ym, bias=None):
    """(dequantized x @ dequantized y + bias, |x'| @ |y'| + |bias|) in float64."""
    dx, dy = _dequantized(torch, x, sx, xm, True), _dequantized(torch, y, sy, ym, False)
    ref, scale = dx @ dy, dx.abs() @ dy.abs()
    if bias is not None:
        ref, scale = ref + bias.to(torch.float64), scale + bias.to(torch.float64).abs()
    return ref, scale


@pytest.mark.parametrize("out_dtype", [dt.float16, dt.bfloat16, dt.float32], ids=lambda t: t.name)
@pytest.mark.parametrize("y_mode", ["tensor", "column", "block"])
@pytest.mark.parametrize("x_mode", ["tensor", "row", "block"])
def test_scaled_mm_every_scaling(torch, x_mode, y_mode, out_dtype):
    gen = torch.Generator(device="cuda").manual_seed(61)
    m, n, k = 300, 520, 1000  # N and K not multiples of 128: partial scale blocks
    for layout, pair in (("RC", (dt.float8_e4m3, dt.float8_e4m3)), ("CR", (dt.float8_e5m2, dt.float8_e4m3))):
        x, y = _operand(torch, (m, k), pair[0], gen, layout[0]), _operand(torch, (k, n), pair[1], gen, layout[1])
        sx = _scale_of(torch, x_mode, m, k, n, gen, True, "C")  # column-major block scales (rows contiguous)
        sy = _scale_of(torch, y_mode, m, k, n, gen, False)
        bias = torch.randn(n, device="cuda", generator=gen).to(torch_dtype(out_dtype)) if layout == "RC" else None
        got = bx.scaled_mm(x, y, sx, sy, out_dtype=out_dtype, bias=bias)
        assert got.dtype == torch_dtype(out_dtype) and got.shape == (m, n)
        ref, scale = _scaled_reference(torch, x, y, sx, sy, x_mode, y_mode, bias)
        check(torch, got, ref, scale, _fp8_tolerance(pair[0], out_dtype, k, 128),
              f"x per {x_mode}, y per {y_mode}, {layout}, {out_dtype.name}", rounding=rounding(out_dtype))


@pytest.mark.parametrize(("name", "consumers"), OVERLAPPED, ids=[n for n, _ in OVERLAPPED])
def test_scaled_mm_block_scales_with_overlapped_promotion(torch, name, consumers):
    """Block scales (of one operand: both spill) and row / column scales with overlapped promotions: each stage's
    factors with its own products (a factor of the wrong stage shows: the scales spread over 2^-3 .. 2^3)."""
    from blasdx import arrays
    from blasdx.calls import scaled_mm as sm

    gen = torch.Generator(device="cuda").manual_seed(71 + consumers)
    m, n, k = 300, 520, 1000
    x, y = _operand(torch, (m, k), dt.float8_e4m3, gen), _operand(torch, (k, n), dt.float8_e4m3, gen, "C")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    handle = torch.cuda.current_stream().cuda_stream
    for x_mode, y_mode in (("block", "tensor"), ("tensor", "block"), ("row", "column")):
        sx = _scale_of(torch, x_mode, m, k, n, gen, True, "C")
        sy = _scale_of(torch, y_mode, m, k, n, gen, False)
        out = poisoned(torch, (m, n), dt.bfloat16)
        vx, vy, vout = arrays.as_array(x, "x"), arrays.as_array(y, "y"), arrays.as_array(out, "out")
        vsx, vsy = arrays.as_array(sx, "scale_x"), arrays.as_array(sy, "scale_y")
        mx, my = sm._check_operands(vx, vy)
        scale_x = sm.scaling_of(vsx, "scale_x", m, k, n, True)
        scale_y = sm.scaling_of(vsy, "scale_y", m, k, n, False)
        route_a = hopper.route("x", vx.dtype, vx.ptr, mx.row_major, mx.ld, mx.outer, 0, False)
        route_b = hopper.route("y", vy.dtype, vy.ptr, not my.row_major, my.ld, my.outer, 0, False)
        for splits in (1, 3):
            plan = sm.ScaledPlan(vx.dtype, vy.dtype, dt.bfloat16, m, n, k, route_a, route_b, mx.ld, my.ld, vx.ptr,
                                 vy.ptr, sms, (*hopper.result_strides(vout), vout.ptr), scale_x.mode, scale_y.mode,
                                 config=_overlapped(name), splits=splits)
            assert "promotions overlapped" in plan.describe(), plan.describe()
            out.fill_(float("nan"))
            plan.run(torch.cuda.current_device(), arrays.as_core_stream(None, handle), handle, vx, vy, vsx, vsy, None,
                     vout)
            ref, scale = _scaled_reference(torch, x, y, sx, sy, x_mode, y_mode)
            check(torch, out, ref, scale, _fp8_tolerance(dt.float8_e4m3, dt.bfloat16, k, 128),
                  f"{name} overlapped, x per {x_mode}, y per {y_mode}, {splits} splits",
                  rounding=rounding(dt.bfloat16))


def test_scaled_mm_split_k_fast_and_out(torch):
    gen = torch.Generator(device="cuda").manual_seed(67)
    m, n, k = 16, 4096, 8192  # decode: split K; the reduction adds the bias once
    x, y = _operand(torch, (m, k), dt.float8_e4m3, gen), _operand(torch, (k, n), dt.float8_e4m3, gen, "C")
    sx, sy = _scale_of(torch, "block", m, k, n, gen, True), _scale_of(torch, "block", m, k, n, gen, False)
    bias = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
    out = poisoned(torch, (m, n), dt.bfloat16)
    bx.scaled_mm(x, y, sx, sy, out_dtype=bx.bfloat16, bias=bias, out=out)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert hopper.choose_config(dt.float8_e4m3, m, n, k, 1, sms)[1] > 1  # the engine splits this K (its tests)
    ref, scale = _scaled_reference(torch, x, y, sx, sy, "block", "block", bias)
    check(torch, out, ref, scale, _fp8_tolerance(dt.float8_e4m3, dt.bfloat16, k, 128), "split K, bias added once",
          rounding=rounding(dt.bfloat16))
    # fast accumulation with epilogue scales, into a column-major out
    m = 1000
    x = _operand(torch, (m, k), dt.float8_e4m3, gen)
    sx, sy = _scale_of(torch, "row", m, k, n, gen, True), _scale_of(torch, "column", m, k, n, gen, False)
    out = poisoned(torch, (n, m), dt.float32).t()
    bx.scaled_mm(x, y, sx, sy, out_dtype=bx.float32, out=out, fast_accumulation=True)
    ref, scale = _scaled_reference(torch, x, y, sx, sy, "row", "column")
    check(torch, out, ref, scale, tolerance(dt.float8_e4m3, dt.float32, k, dt.float32, "wgmma"), "fast, column-major")


def test_scaled_mm_on_a_busy_stream(torch):
    """Warmed up, then on a busy side stream behind writes of new x and scales (gpu_support.behind_a_delay),
    with a new result and into out=: each call must read the values written just before it on that stream,
    and a copy queued after it there must see its result."""
    gen = torch.Generator(device="cuda").manual_seed(73)
    m, n, k = 300, 520, 1000
    x, fresh_x = (_operand(torch, (m, k), dt.float8_e4m3, gen) for _ in range(2))
    y = _operand(torch, (k, n), dt.float8_e4m3, gen, "C")
    sx, fresh_sx = (_scale_of(torch, "row", m, k, n, gen, True) for _ in range(2))
    sy, fresh_sy = (_scale_of(torch, "block", m, k, n, gen, False) for _ in range(2))
    out = poisoned(torch, (m, n), dt.float32)
    s = side_stream()
    torch.cuda.synchronize()  # made on the default stream, which the side stream does not wait for
    with torch.cuda.stream(s):  # warm-up: compiled, loaded, bound
        bx.scaled_mm(x, y, sx, sy, out_dtype=bx.bfloat16), bx.scaled_mm(x, y, sx, sy, out_dtype=bx.float32, out=out)
    s.synchronize()
    first_sy = sy.clone()  # what the first call reads: sy is rewritten after it
    with poisoned_new_tensors(), behind_a_delay(s, "scaled_mm on a side stream"):
        x.copy_(fresh_x)
        sx.copy_(fresh_sx)
        got = bx.scaled_mm(x, y, sx, sy, out_dtype=bx.bfloat16)
        got_copy = got.clone()
        sy.copy_(fresh_sy)
        bx.scaled_mm(x, y, sx, sy, out_dtype=bx.float32, out=out)
        out_copy = out.clone()
    ref, scale = _scaled_reference(torch, fresh_x, y, fresh_sx, first_sy, "row", "block")
    for what, t in (("new result", got), ("copy of the new result queued after the call", got_copy)):
        check(torch, t, ref, scale, _fp8_tolerance(dt.float8_e4m3, dt.bfloat16, k, 128), what,
              rounding=rounding(dt.bfloat16))
    ref, scale = _scaled_reference(torch, fresh_x, y, fresh_sx, fresh_sy, "row", "block")
    for what, t in (("out=", out), ("copy of out= queued after the call", out_copy)):
        check(torch, t, ref, scale, _fp8_tolerance(dt.float8_e4m3, dt.float32, k, 128), what,
              rounding=rounding(dt.float32))


def test_scaled_mm_k_zero_and_against_torch(torch):
    gen = torch.Generator(device="cuda").manual_seed(71)
    bias = torch.randn(96, device="cuda", generator=gen).to(torch.float16)
    x, y = torch.empty((40, 0), device="cuda").to(torch.float8_e4m3fn), torch.empty((0, 96), device="cuda").to(
        torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    got = bx.scaled_mm(x, y, one, one, bias=bias)
    assert torch.equal(got, bias.expand(40, 96))
    # per-tensor scales agree with torch._scaled_mm (cuBLASLt) on the same data
    x, y = _operand(torch, (512, 1024), dt.float8_e4m3, gen), _operand(torch, (1024, 768), dt.float8_e4m3, gen, "C")
    sx, sy = torch.tensor(0.25, device="cuda"), torch.tensor(3.0, device="cuda")
    ours = bx.scaled_mm(x, y, sx, sy, out_dtype=bx.bfloat16)
    theirs = torch._scaled_mm(x, y, scale_a=sx, scale_b=sy, out_dtype=torch.bfloat16)
    ref, scale = _scaled_reference(torch, x, y, sx, sy, "tensor", "tensor")
    check(torch, ours, ref, scale, _fp8_tolerance(dt.float8_e4m3, dt.bfloat16, 1024, 128), "scaled_mm",
          rounding=rounding(dt.bfloat16))
    check(torch, theirs, ref, scale, _fp8_tolerance(dt.float8_e4m3, dt.bfloat16, 1024, 128), "torch._scaled_mm",
          rounding=rounding(dt.bfloat16))


@pytest.mark.parametrize(("bad", "match"), [
    ({"scale_x": "half"}, r"^scale_x: scales are float32, not float16"),
    ({"scale_y": "vector"}, r"^scale_y: shape \(768,\) covers its operand in none"),
    ({"scale_x": "wrong blocks"}, r"^scale_x: shape \(256, 7\) covers"),
    ({"fast": True}, r"^fast_accumulation=True with block scales"),
])
def test_bad_scales_raise_before_launch_and_leave_out_alone(torch, bad, match):
    gen = torch.Generator(device="cuda").manual_seed(73)
    m, n, k = 256, 768, 1024
    x, y = _operand(torch, (m, k), dt.float8_e4m3, gen), _operand(torch, (k, n), dt.float8_e4m3, gen, "C")
    sx, sy = _scale_of(torch, "block", m, k, n, gen, True), _scale_of(torch, "block", m, k, n, gen, False)
    if bad.get("scale_x") == "half":
        sx = sx.half()
    if bad.get("scale_x") == "wrong blocks":
        sx = sx[:, :7]
    if bad.get("scale_y") == "vector":
        sy = _scales(torch, (n,), gen)
    out = torch.full((m, n), 7.0, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    with pytest.raises(ExecutionError, match=match):
        bx.scaled_mm(x, y, sx, sy, out=out, fast_accumulation=bad.get("fast", False))
    torch.cuda.synchronize()
    assert torch.equal(out, torch.full_like(out, 7.0)), "out was written"


# ---- the engine in a user's kernel (bx.DeviceGemm) for 8-bit types ---------------------------------

@pytest.mark.parametrize(("a", "b", "c", "fast"), [
    (dt.float8_e4m3, dt.float8_e5m2, dt.bfloat16, False), (dt.float8_e4m3, dt.float8_e4m3, dt.float32, True),
    (dt.uint8, dt.int8, dt.int32, False),
])
def test_device_gemm_eight_bit(torch, a, b, c, fast):
    gen = torch.Generator(device="cuda").manual_seed(79)
    batch, m, n, k = 2, 704, 520, 1040  # rows of A, B and D whole 16 bytes (the device API does not repack)
    dg = bx.DeviceGemm(a, c, bx.row_major, bx.col_major, hopper.replace(hopper.SQUARE, cluster=2), b=b,
                       fast_accumulation=fast)
    kernel = scaled_kernel(dg, a.integral)
    x, y = _operand(torch, (batch, m, k), a, gen), _operand(torch, (batch, k, n), b, gen, "C")
    d = poisoned(torch, (batch, m, n), c)
    s = 3 if a.integral else 0.25
    maps = (dg.tensor_map_a(x), dg.tensor_map_b(y), dg.tensor_map_d(d))
    kernel.launch(dg.grid(m, n, batch), (*maps, s, m, n, k, batch))
    torch.cuda.synchronize()
    ref, scale = reference(torch, x, y, alpha=s)
    tol = 0 if a.integral else tolerance(a, c, k, dt.float32, "wgmma", hopper.PROMOTION if not fast else None)
    check(torch, d, ref, scale, tol, f"DeviceGemm {a.name} x {b.name} -> {c.name}")

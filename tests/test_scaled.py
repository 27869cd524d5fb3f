"""bx.scaled_mm without a GPU: what each scale shape means, every refusal (typed, naming the
argument, before anything is allocated or launched), the engine plan it builds, and its
sm_90a kernels for every scaling of x and y (QGMMA, TMA, no local memory).

Arrays are ArrayViews with made-up device pointers; the device is faked.
"""

from __future__ import annotations

import math
import re

import pytest

import blasdx as bx
from blasdx.calls import matmul as array_gemm
from blasdx.engine import hopper
from blasdx.calls import scaled_mm as scaled
from blasdx.base import dtypes as dt
from blasdx.compile.cache import cached_compile
from blasdx.base.errors import DeviceError, ExecutionError

from .array_views import PTR, hopper_calls, views

E4M3, E5M2, F32 = dt.float8_e4m3, dt.float8_e5m2, dt.float32
M, N, K = 1000, 768, 1040  # 9 K blocks of 128, the last one partial


view, col = views(E4M3)


@pytest.fixture(autouse=True)
def fake_device(monkeypatch):
    """An sm_90 device with 132 SMs (tensor maps checked by the driver's rules); nothing launches."""
    with hopper_calls(monkeypatch, scaled._CALLS):
        yield


def operands(m=M, n=N, k=K):
    return view((m, k)), col((k, n))


# ---- what a scale's shape means -----------------------------------------------------------------

BLOCKS_K, BLOCKS_N = math.ceil(K / 128), math.ceil(N / 128)


@pytest.mark.parametrize(("shape", "strides", "is_x", "expected"), [
    ((), (), True, scaled.Scaling("tensor", 0, 0)),
    ((1,), (1,), False, scaled.Scaling("tensor", 0, 0)),
    ((1, 1), (1, 1), True, scaled.Scaling("tensor", 0, 0)),
    ((M, 1), (1, 1), True, scaled.Scaling("row", 1, 0)),
    ((M, BLOCKS_K), (1, M), True, scaled.Scaling("block", 1, M)),  # column-major: rows contiguous
    ((1, N), (N, 1), False, scaled.Scaling("column", 0, 1)),
    ((BLOCKS_K, BLOCKS_N), (BLOCKS_N, 1), False, scaled.Scaling("block", BLOCKS_N, 1)),
])
def test_scale_shapes(shape, strides, is_x, expected):
    v = view(shape, F32, strides)
    assert scaled.scaling_of(v, "s", M, K, N, is_x) == expected


def test_coinciding_readings_take_the_cheaper():
    """K <= 128: one K block, so (M, 1) is per row (epilogue) rather than per block (promotion)."""
    assert scaled.scaling_of(view((M, 1), F32), "scale_x", M, 100, N, True).mode == "row"
    assert scaled.scaling_of(view((1, 6), F32), "scale_y", M, 100, 700, False).mode == "block"
    assert scaled.scaling_of(view((1, 700), F32), "scale_y", M, 100, 700, False).mode == "column"


# ---- refusals: typed, naming the argument, before anything runs -----------------------------------

ONE = view((), F32)


@pytest.mark.parametrize(("change", "error", "match"), [
    ({"x": view((M, K), dt.float16)}, ExecutionError, r"^x: scaled_mm multiplies fp8 .* not float16"),
    ({"y": view((2, K, N))}, ExecutionError, r"^y: shape \(2, 1040, 768\): scaled_mm multiplies matrices"),
    ({"y": col((K + 1, N))}, ExecutionError, r"do not multiply \(K = 1040 vs 1041\)"),
    ({"scale_x": view((), dt.float16)}, ExecutionError, r"^scale_x: scales are float32, not float16"),
    ({"scale_y": view((N,), F32)}, ExecutionError,
     r"^scale_y: shape \(768,\) covers its operand in none of the supported ways: \(\) or \(1, 1\) per tensor, "
     r"\(1, 768\) per column, \(9, 6\) per 128 x 128 block"),
    ({"scale_x": view((M, 8), F32)}, ExecutionError,
     r"^scale_x: shape \(1000, 8\) covers .* \(1000, 1\) per row, \(1000, 9\) per 1 x 128 block"),
    ({"scale_x": view((1, N), F32)}, ExecutionError, r"^scale_x: shape \(1, 768\)"),
    ({"scale_y": view((M, 1), F32)}, ExecutionError, r"^scale_y: shape \(1000, 1\)"),
    ({"scale_x": view((M, 1), F32, (-1, 1))}, ExecutionError, r"^scale_x: negative strides"),
    ({"scale_x": view((M, BLOCKS_K), F32), "fast_accumulation": True}, ExecutionError,
     r"^fast_accumulation=True with block scales"),
    ({"fast_accumulation": 1}, ExecutionError, r"^fast_accumulation: expected True or False"),
    ({"out_dtype": dt.int32}, ExecutionError, r"^out_dtype: scaled_mm writes float16, bfloat16, float32, not int32"),
    ({"out_dtype": "float7"}, ExecutionError, r"^out_dtype: 'float7' is not an element type"),
    ({"bias": view((N,), F32)}, ExecutionError, r"^bias: expected shape \(768,\) of float16 \(out_dtype\)"),
    ({"bias": view((1, N), dt.float16)}, ExecutionError, r"^bias: expected shape \(768,\)"),
    ({"out": view((M, N), F32)}, ExecutionError, r"^out: expected shape \(1000, 768\) of float16"),
    ({"out": view((M, N), dt.float16, readonly=True)}, ExecutionError, r"^out: the array is read-only"),
    ({"out": view((M, N), dt.float16, ptr=PTR)}, ExecutionError, r"^out: its memory overlaps x's"),
])
def test_refusals_name_the_argument(change, error, match):
    x, y = operands()
    args = {"x": x, "y": y, "scale_x": ONE, "scale_y": ONE}
    args.update(change)
    kwargs = {key: args.pop(key) for key in list(args) if key not in ("x", "y", "scale_x", "scale_y")}
    with pytest.raises(error, match=match):
        bx.scaled_mm(args["x"], args["y"], args["scale_x"], args["scale_y"], **kwargs)
    assert not scaled._CALLS, "nothing was planned"


def test_host_scales_are_refused():
    import numpy as np

    x, y = operands()
    with pytest.raises(ExecutionError, match=r"^scale_y: .* is in host memory"):
        bx.scaled_mm(x, y, ONE, np.ones((), np.float32))


def test_other_gpus_are_refused(monkeypatch):
    monkeypatch.setattr(array_gemm, "_device_info", lambda device_id: array_gemm._DeviceInfo(89, 128))
    x, y = operands()
    with pytest.raises(DeviceError, match=r"runs on the Hopper engine \(sm_90: H100, H200\); device 0 is sm_89"):
        bx.scaled_mm(x, y, ONE, ONE)


# ---- the plan ----------------------------------------------------------------------------------------


def plan_of(x, y, sx, sy, c=dt.float16, fast=False, out=None):
    mx, my = scaled._check_operands(x, y)
    m, n, k = mx.rows, my.cols, mx.cols
    return scaled._plan(x, y, mx, my, scaled.scaling_of(sx, "scale_x", m, k, n, True),
                        scaled.scaling_of(sy, "scale_y", m, k, n, False), c, out, 0, fast).plan


def test_block_scales_promote_and_say_so():
    x, y = operands()
    p = plan_of(x, y, view((M, BLOCKS_K), F32), view((BLOCKS_K, BLOCKS_N), F32), dt.bfloat16)
    assert p.config.promotion == 128 and p.config.bk == 128
    assert p.describe().endswith("scales: x per block, y per block")
    assert ("D by TMA" in p.describe()) == (p.splits == 1), p.describe()  # split K ends in direct stores
    assert "static constexpr int x_scaling = 2, y_scaling = 2;" in p._gemm.source
    assert "using c_type = __nv_bfloat16;" in p._gemm.source and p._gemm.params.kinds == scaled._PARAMS


def test_fast_accumulation_with_epilogue_scales():
    x, y = view((M, K), E5M2), col((K, N), E4M3)
    p = plan_of(x, y, view((M, 1), F32), view((1, N), F32), dt.float32, fast=True)
    assert p.config.promotion == 0 and p.b == E4M3
    assert "static constexpr int x_scaling = 1, y_scaling = 1;" in p._gemm.source
    with pytest.raises(ValueError, match="block scales are applied at promotion"):
        plan_of(x, y, ONE, view((BLOCKS_K, BLOCKS_N), F32), fast=True)


def test_other_layouts_are_repacked_and_decode_shapes_split():
    x, y = col((M, K)), view((K, N))  # M-major x, N-major y
    p = plan_of(x, y, ONE, ONE)
    assert "x K-major (repacked: float8_e4m3 wgmma reads K-major operands only)" in p.describe()
    assert "y K-major (repacked" in p.describe()  # 8 tile rows: a copy of y beats transposing each tile
    p = plan_of(view((16, 8192)), col((8192, 4096)), view((16, 64), F32), view((64, 32), F32))
    assert p.splits > 1 and "D by direct stores" in p.describe() and p._reduce is not None


def test_k_zero_is_the_bias():
    p = plan_of(view((M, 0)), col((0, N)), ONE, ONE)
    assert p.describe() == "K = 0: D = bias (or zeros)"


@pytest.mark.slow
@pytest.mark.parametrize("x_mode", ["tensor", "row", "block"])
@pytest.mark.parametrize("y_mode", ["tensor", "column", "block"])
def test_scaled_kernels_compile(x_mode, y_mode):
    blocks = "block" in (x_mode, y_mode)
    for name, staged, c in (("wide clusters", True, dt.bfloat16), ("square", False, dt.float16)):
        config = hopper.replace(hopper.CONFIGS[name], bk=128, promotion=128 if blocks or staged else 0)
        source = scaled.scaled_source(E4M3, E5M2, c, config, True, True, staged, x_mode, y_mode)
        compiled = cached_compile(source, scaled.KERNEL_NAME, "sm_90a")
        sass = compiled.sass()
        assert compiled.local_memory == 0 and not re.search(r"\b(LDL|STL)\b", sass)
        assert "QGMMA" in sass and "UTMALDG" in sass and ("UTMASTG" in sass) == staged

"""The Hopper engine's f64 / f32 path without a GPU: plans, routes, tensor-map geometry (checked
by the driver-rule stand-in), split K, the CLI, and the sm_90a kernels' SASS (DMMA / FFMA,
TMA loads, register hand-over, no local memory) for every layout and configuration.
"""

from __future__ import annotations

import math
import re

import pytest

from blasdx.calls import matmul as array_gemm

from blasdx.engine import hopper

from blasdx.engine import wide as hopper_wide
from blasdx.base import dtypes as dt
from blasdx.compile.cache import cached_compile

from .test_hopper import PTR, SMS, col, plan, view

WIDE = [dt.float64, dt.float32]
LAYOUTS = ["RR", "RC", "CR", "CC"]


def _operands(a: dt.DType, layout: str, m: int, n: int, k: int):
    x = view((m, k), a) if layout[0] == "R" else col((m, k), a)
    y = view((k, n), a) if layout[1] == "R" else col((k, n), a)
    return x, y


# ---- plans and tensor maps ------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("a", WIDE, ids=lambda t: t.name)
def test_every_layout_is_read_in_place(encoder, a, layout):
    m, n, k = 1000, 600, 704  # rows of whole 16 bytes
    p = plan(*_operands(a, layout, m, n, k))
    assert p.kind == "hopper" and isinstance(p.kernel, hopper_wide.WidePlan), p.describe()
    text = p.kernel.describe()
    assert text.startswith("hopper DMMA+TMA" if a == dt.float64 else "hopper FFMA+TMA")
    assert "repacked" not in text and "D by direct stores" in text
    assert ("x K-major" in text) == (layout[0] == "R") and ("y K-major" in text) == (layout[1] == "C")
    map_a, map_b = encoder.calls  # no map of D
    size, bk = a.size, 128 // a.size
    config = p.kernel.config
    if layout[0] == "R":
        assert (map_a.dims, map_a.strides, map_a.box) == ((k, m, 1), (size * k, size * k * m), (bk, config.bm, 1))
    else:
        assert (map_a.dims, map_a.strides, map_a.box) == ((m, k, 1), (size * m, size * m * k), (bk, bk, 1))
    if layout[1] == "C":
        assert (map_b.dims, map_b.box) == ((k, n, 1), (bk, config.bn, 1))
    else:
        assert (map_b.dims, map_b.box) == ((n, k, 1), (bk, bk, 1))
    assert map_a.type_name == a.name and map_a.pointer == PTR and map_a.swizzle == 128


@pytest.mark.parametrize("a", WIDE, ids=lambda t: t.name)
def test_routes_repack_only_what_tma_cannot_describe(encoder, a):
    assert hopper_wide.route("y", a, PTR, False, 1024, 512, 0, False) == hopper.OperandRoute("y", False)
    r = hopper_wide.route("x", a, PTR + 4, True, 1024, 512, 0, False)
    assert r.k_major and r.repack == f"TMA needs a 16-byte aligned address, not {PTR + 4:#x}"
    odd = 1001
    p = plan(view((300, odd), a, strides=(odd + 2, 1)) if a.size == 4 else view((300, odd), a, strides=(odd, 1)),
             view((odd, 150), a))
    assert "x K-major (repacked: TMA needs row strides of whole 16 bytes" in p.describe()
    map_a = encoder.calls[0]
    padded = math.ceil(odd / (16 // a.size)) * (16 // a.size)
    assert map_a.dims == (odd, 300, 1) and map_a.strides[0] == a.size * padded and map_a.pointer == 256


def test_batches_and_broadcasts(encoder):
    p = plan(view((6, 256, 512), dt.float64), view((512, 384), dt.float64))
    assert p.kind == "hopper" and p.batch == 6
    map_a, map_b = encoder.calls
    assert map_a.dims == (512, 256, 6) and map_a.strides == (8 * 512, 8 * 512 * 256)
    assert map_b.dims == (384, 512, 1) and not p.kernel.operand_b.batched and p.kernel.operand_a.batched


@pytest.mark.parametrize(("shape", "splits"), [((4096, 4096, 4096), 1), ((8192, 8192, 8192), 1),
                                               ((1024, 1024, 4096), 2), ((2048, 2048, 2048), 1)])
@pytest.mark.parametrize("a", WIDE, ids=lambda t: t.name)
def test_config_and_splits(a, shape, splits):
    m, n, k = shape
    config, n_splits = hopper_wide.choose_config(a, m, n, k, 1, SMS)
    assert config == hopper_wide.CONFIGS[a.name], "products that fill the SMs keep 128 x 128 tiles"
    assert config.shared_memory(a.size) <= 232448 and config.threads == 384
    steps = math.ceil(k / config.bk(a.size))
    units = math.ceil(m / 128) * math.ceil(n / 128)
    expected = hopper.split_count(hopper_wide._SplitGeometry(config, a.size), m, n, k, 1, SMS)
    assert n_splits == expected == splits
    if units >= SMS:
        assert n_splits == 1
    else:
        assert n_splits * units <= SMS and math.ceil(steps / n_splits) >= hopper.MIN_STEPS_PER_SPLIT


# (shape, f64 tile, f32 tile with a K-major x, f32 tile with an MN-major x, splits): products whose 128 x 128
# tiles would leave most SMs idle take smaller ones (a blocked solve's 128-row leaves and updates, skinny rows)
SMALL_CASES = [
    ((128, 1024, 128), (64, 64), (64, 64), (128, 64), 1),     # 8 tiles of 128 x 128 on 132 SMs
    ((128, 2048, 128), (64, 64), (64, 64), (128, 64), 1),
    ((896, 1024, 128), (128, 64), (128, 64), (128, 64), 1),  # 56 tiles: 112 of 128 x 64
    ((16, 8192, 8192), (64, 128), (64, 128), (64, 128), 2),   # one 64-row tile of rows, split K
    ((128, 128, 65536), (64, 64), (64, 64), (128, 64), 16),
]


@pytest.mark.parametrize(("shape", "f64", "f32_k", "f32_mn", "splits"), SMALL_CASES)
def test_small_tiles_where_large_ones_leave_sms_idle(shape, f64, f32_k, f32_mn, splits, monkeypatch):
    m, n, k = shape
    for a, x_k_major, tile in ((dt.float64, True, f64), (dt.float64, False, f64), (dt.float32, True, f32_k),
                               (dt.float32, False, f32_mn)):
        config, n_splits = hopper_wide.choose_config(a, m, n, k, 1, SMS, x_k_major, False)
        assert (config.bm, config.bn) == tile and n_splits == splits, (a.name, x_k_major)
        assert hopper_wide.reads(a, config, x_k_major, False) and config.threads == 384
        assert n_splits == hopper.split_count(hopper_wide._SplitGeometry(config, a.size), m, n, k, 1, SMS)
    monkeypatch.setattr(hopper_wide, "SMALL_TILES", False)
    assert hopper_wide.choose_config(dt.float64, m, n, k, 1, SMS)[0] == hopper_wide.CONFIGS["float64"]


def test_small_tile_plans_describe_their_tile(encoder):
    p = plan(view((128, 128), dt.float32), view((128, 1024), dt.float32))  # x K-major, y MN-major
    assert "64x64 tiles, 16x32 per warp" in p.describe() and p.kernel.config.bm == 64
    assert encoder.calls[0].box == (32, 64, 1)  # A's box: one K stage of the tile's 64 rows
    p = plan(col((128, 128), dt.float32), view((128, 1024), dt.float32))  # an MN-major x: 32-row warp tiles
    assert "128x64 tiles, 32x32 per warp" in p.describe()


def test_split_plans_describe_and_reduce(encoder):
    p = plan(view((16, 8192), dt.float64), view((8192, 8192), dt.float64))
    assert p.kernel.splits == 2 and "2 K splits" in p.describe()
    source = p.kernel._reduce.source
    assert "splitk_c_type = double" in source and "splitk_acc_type = double" in source  # kernels/splitk_reduce.cu


def test_unserved_types_say_what_the_engine_runs(encoder):
    x, y = view((4096, 4096), dt.float16), view((4096, 4096), dt.float16)
    mx, my = array_gemm._matrix(x, "x"), array_gemm._matrix(y, "y")
    engine, reason = array_gemm._engine_plan(x, y, mx, my, dt.bfloat16, 4096, 4096, 4096, 1,
                                             array_gemm._DeviceInfo(90, SMS))
    assert engine is None and "the Hopper engine runs" in reason
    assert "float64 -> float64" in reason and "float32 -> float32" in reason and "int8 -> int32" in reason
    p = plan(view((4096, 4096), dt.float64), view((4096, 4096), dt.float64), sm=80)
    assert p.kind == "tiled" and "needs sm_90" in p.reason


def test_parameter_blocks_take_the_result_type():
    gemm, reduce = hopper_wide._params(dt.float64)
    assert gemm[:2] == ("map", "map") and gemm[-2:] == ("f64", "f64") and reduce[-2:] == ("f64", "f64")
    assert len(gemm) == 20 and hopper_wide._params(dt.float32)[0][-1] == "f32"


def test_describe_call_and_cli(capsys):
    from blasdx.__main__ import main

    text = hopper_wide.describe_call(dt.float64, dt.float64, 8192, 8192, 8192, b_row_major=False)
    assert text == ("hopper DMMA+TMA, 128x128 tiles, 64x32 per warp, 6 stages, group 8, 1 K split, D by direct "
                    "stores, x K-major, y K-major")
    assert main(["matmul", "float32", "4096x4096x4096", "--layout", "CR"]) == 0
    out = capsys.readouterr().out
    assert "hopper FFMA+TMA" in out and "x MN-major, y MN-major" in out
    with pytest.raises(ValueError, match="the wide path runs"):
        hopper_wide.describe_call(dt.float16, dt.float16, 64, 64, 64)


# ---- the kernels compile for sm_90a with the intended instructions ---------------------------------


def _instructions(sass: str) -> set[str]:
    return set(re.findall(r"\b(DMMA|FFMA|HGMMA|UTMALDG|USETMAXREG|SYNCS|LDL|STL|LDS)\b", sass))


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("a", WIDE, ids=lambda t: t.name)
def test_wide_kernels_compile_without_spills(a, layout):
    config = hopper_wide.CONFIGS[a.name]
    source = hopper_wide.wide_source(a, config, layout[0] == "R", layout[1] == "C")
    compiled = cached_compile(source, hopper_wide.KERNEL_NAME, "sm_90a")
    sass = compiled.sass()
    ops = _instructions(sass)
    unit = "DMMA" if a == dt.float64 else "FFMA"
    assert {unit, "UTMALDG", "USETMAXREG", "SYNCS", "LDS"} <= ops and "HGMMA" not in ops
    assert not ops & {"LDL", "STL"} and compiled.local_memory == 0
    assert compiled.registers <= 168, "the register cap at entry of 384 threads, before the hand-over"
    if a == dt.float64:
        assert "DMMA.16x8x8" in sass
    # every fragment comes from a 16-byte shared-memory load
    loads = re.findall(r"\bLDS(\.\w+)*\b", sass)
    assert loads and all(".128" in "".join(x) for x in loads)


@pytest.mark.slow
@pytest.mark.parametrize("a", WIDE, ids=lambda t: t.name)
def test_sweep_configs_compile(a):
    for name, config in hopper_wide.sweep_configs(a).items():
        for a_k, b_k in ((True, True), (False, False)):
            compiled = cached_compile(hopper_wide.wide_source(a, config, a_k, b_k), hopper_wide.KERNEL_NAME, "sm_90a")
            assert compiled.local_memory == 0, name
            if config.cluster > 1:
                assert "UTMALDG.3D.MULTICAST" in compiled.sass()


@pytest.mark.slow
@pytest.mark.parametrize("a", WIDE, ids=lambda t: t.name)
def test_small_tiles_compile_for_every_layout_they_read(a):
    unit = "DMMA" if a == dt.float64 else "FFMA"
    for config, _ in hopper_wide.SMALL[a.name]:
        for layout in LAYOUTS:
            a_k, b_k = layout[0] == "R", layout[1] == "C"
            if not hopper_wide.reads(a, config, a_k, b_k):
                continue
            compiled = cached_compile(hopper_wide.wide_source(a, config, a_k, b_k), hopper_wide.KERNEL_NAME, "sm_90a")
            ops = _instructions(compiled.sass())
            assert {unit, "UTMALDG", "USETMAXREG", "LDS"} <= ops, (config, layout)
            assert not ops & {"LDL", "STL"} and compiled.local_memory == 0, (config, layout)
    assert not hopper_wide.reads(dt.float32, hopper_wide.SMALL["float32"][2][0], False, True)


@pytest.mark.parametrize("c", WIDE, ids=lambda t: t.name)
def test_split_reduce_compiles(c):
    reduce = cached_compile(hopper.reduce_source(c), hopper.REDUCE_NAME, "sm_90")
    assert reduce.local_memory == 0

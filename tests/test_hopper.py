"""The Hopper engine without a GPU: configuration rule, split K, operand routes, tensor-map
geometry (checked against the driver's rules by a stand-in), plan reasons, the parameter
block, and the sm_90a kernels' SASS (wgmma, TMA, register hand-over, no local memory).
"""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blasdx.calls import matmul as array_gemm

from blasdx.launch import cuda_driver

from blasdx.engine import hopper
from blasdx.base import dtypes as dt
from blasdx.compile.cache import cached_compile

from .array_views import PTR, views


SMS = 132


view, col = views(dt.float16)


def plan(x, y, acc=None, sm=90):
    result = acc.dtype if acc is not None else array_gemm.RESULT_TYPES[x.dtype]
    return array_gemm.plan_call(x, y, acc, result, array_gemm._DeviceInfo(sm, SMS), 0)


# ---- the configuration rule -----------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "config", "splits", "changes"), [
    ((8192, 8192, 8192), "wide clusters", 1, {}),  # 2048 wide tiles (15 waves), 128 K steps
    ((4096, 4096, 4096), "wide", 1, {}),  # 1024 ping-pong tiles, 512 wide ones: 97% of their rounds alike
    ((2048, 2048, 2048), "wide", 1, {}),
    ((3072, 3072, 3072), "wide 192", 1, {}),  # 384 tiles of 128 x 192 fill 3 rounds (97%), 576 ping-pong 87%
    ((1024, 1024, 1024), "pingpong", 1, {}),  # 16 K steps: too shallow to split (9.6 us whole, 14.7 in 2)
    ((1024, 1024, 2048), "pingpong", 1, {}),  # 64 tiles: 48% of the SMs, the largest share
    ((512, 512, 512), "pingpong", 1, {}),
    ((512, 2112, 7168), "wide 192", 3, {}),  # 44 tiles in three splits of 38 K steps: 132 units
    ((512, 6144, 4096), "wide 192", 1, {}),  # 128 tiles, 97% of a round (128 x 128: 192 tiles, 73% of 2)
    ((2048, 2112, 7168), "pingpong", 1, {}),  # 272 tiles use 69% of 3 rounds, 176 of 128 x 192 67% of 2
    ((16, 8192, 8192), "decode", 1, {}),  # swapped: 128 tiles of 64 weight rows x 16 occupy the SMs, K whole
    ((16, 4096, 4096), "decode", 1, {}),  # 64 tiles: over a third of the SMs, K whole
    ((16, 2112, 7168), "decode", 4, {}),  # 33 tiles: balanced splits
    ((33, 8192, 8192), "decode", 1, {"bn": 64, "stages": hopper.DECODE_64_STAGES}),  # 33-64 rows: a 64-wide N tile
    # rows a multiple of 64 whose 64-row tiles fit one wave and fill it better: those tiles, x as A, K whole
    ((64, 4096, 14336), "whole rows 64", 1, {}),
    ((64, 4096, 4096), "whole rows 64", 1, {}),  # 128 tiles of 64 x 32 against 64 decode tiles
    ((64, 2112, 7168), "decode", 4, {"bn": 64, "stages": hopper.DECODE_64_STAGES}),  # 33 tiles in 4 splits fill more
    # past a wave of decode tiles, the largest tile whose waves are used as well
    ((16, 32768, 512), "decode", 1, {"bm": 128, "consumers": 2, "stages": hopper.DECODE_PAIR_STAGES}),
    ((32, 10240, 8192), "decode", 1, {"bm": 128, "bn": 32, "consumers": 2, "stages": hopper.DECODE_PAIR_STAGES - 1}),
    ((16, 24576, 1536), "decode", 1, {}),  # 384 tiles use 2.9 waves; 192 of 128 rows only 1.45
    ((64, 14336, 4096), "medium", 1, {}),  # 224 decode tiles, 112 medium ones: the same 85% of 2 waves
    ((64, 32768, 512), "narrow", 1, {}),
    ((64, 57344, 8192), "decode", 1, {"bn": 64, "stages": hopper.DECODE_64_STAGES}),  # 896 tiles: 97% of 7 waves
    ((128, 4096, 4096), "whole rows", 1, {}),  # 128 tiles of 64 x 64 against 64 medium ones
    ((128, 4096, 14336), "whole rows", 1, {}),  # against medium's 64 tiles in 2 splits: the same use, K whole
    ((256, 2112, 7168), "whole rows", 1, {}),  # 132 tiles against 68 medium ones
    ((96, 4096, 4096), "medium", 1, {}),  # rows that leave a 64-row tile half empty keep the class's choice
    ((128, 6144, 4096), "medium", 1, {}),  # 192 tiles of 64 x 64 would take two waves
    ((128, 2112, 7168), "medium", 3, {}),  # 34 tiles, 112 K steps: 3 splits of 38 (102 units)
    ((192, 2112, 7168), "medium", 2, {}),  # 51 tiles: 2 splits keep one unit per SM
    ((128, 1536, 7168), "medium", 3, {}),  # 24 tiles: 4 splits would be 28 steps deep
    ((128, 2048, 2048), "whole rows", 1, {}),  # 64 tiles of 64 x 64 against 32 medium ones (32 K steps: whole)
    ((192, 2048, 2048), "whole rows", 1, {}),  # 96 tiles of 64 x 64 against 48 medium ones
    ((160, 2048, 2048), "medium", 1, {}),  # 32 K steps: too shallow to split
    ((256, 4096, 4096), "medium", 1, {}),
    ((128, 10240, 8192), "pingpong", 1, {}),  # 80 ping-pong tiles use one round as well as 160 medium ones two
    ((128, 8192, 28672), "medium", 1, {}),
    ((128, 28672, 4096), "wide", 1, {}),  # 224 ping-pong tiles fill the SMs: no longer medium; 112 wide ones as well
    ((8192, 8192, 512), "pingpong", 1, {}),  # short K: epilogues under products beat clusters
])
def test_config_rule(shape, config, splits, changes):
    m, n, k = shape
    chosen, n_splits = hopper.choose_config(dt.bfloat16, m, n, k, 1, SMS)
    assert chosen == hopper.replace(hopper.CONFIGS[config], bk=64, **changes)
    assert n_splits == splits


def test_scaled_plans_never_swap():
    chosen, _ = hopper.choose_config(dt.bfloat16, 16, 8192, 8192, 1, SMS, swap=False)
    assert chosen == hopper.replace(hopper.NARROW, bk=64)


@pytest.mark.parametrize(("a", "bk"), [(dt.float16, 64), (dt.bfloat16, 64), (dt.tfloat32, 32)])
def test_k_step_is_one_swizzle_row(a, bk):
    assert hopper.choose_config(a, 4096, 4096, 4096, 1, SMS)[0].bk == bk


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 70000), batch=st.integers(1, 40),
       sms=st.sampled_from([1, 8, 78, 114, 132]))
def test_splits_are_never_empty_and_fit_the_gpu(m, n, k, batch, sms):
    config, splits = hopper.choose_config(dt.float16, m, n, k, batch, sms)
    steps = math.ceil(k / config.bk)
    assert 1 <= splits <= hopper.MAX_SPLITS
    chunk = math.ceil(steps / splits)
    assert (splits - 1) * chunk < steps, "the last split has K steps"
    if splits > 1:  # worth it by the estimate, each split deep enough
        assert chunk >= hopper.MIN_STEPS_PER_FIXUP_SPLIT
    assert config.shared_memory(2) <= 232448
    assert hopper.choose_config(dt.tfloat32, m, n, k, batch, sms)[0].shared_memory(4) <= 232448


# ---- operand routes and tensor-map geometry ----------------------------------------------------------


def test_routes_say_why_an_operand_is_repacked():
    assert hopper.route("x", dt.float16, PTR, True, 1024, 512, 0, False) == hopper.OperandRoute("x", True)
    assert hopper.route("y", dt.float16, PTR, False, 1024, 512, 0, False) == hopper.OperandRoute("y", False)
    r = hopper.route("y", dt.tfloat32, PTR, False, 1024, 512, 0, False)
    assert r.k_major and r.repack == "tfloat32 wgmma reads K-major operands only"
    r = hopper.route("x", dt.float16, PTR + 2, True, 1024, 512, 0, False)
    assert r.repack == f"TMA needs a 16-byte aligned address, not {PTR + 2:#x}"
    r = hopper.route("x", dt.bfloat16, PTR, True, 1001, 512, 0, False)
    assert r.repack == "TMA needs row strides of whole 16 bytes, not 1001 x 2 bytes"
    assert hopper.route("x", dt.bfloat16, PTR, True, 1001, 1, 0, False).repack is None  # one row: no stride
    r = hopper.route("x", dt.bfloat16, PTR, True, 1024, 512, 1001, True)
    assert r.repack == "TMA needs batch strides of whole 16 bytes, not 1001 x 2 bytes"


@pytest.mark.parametrize("layout", ["RR", "RC", "CR", "CC"])
def test_tensor_maps_of_every_layout(encoder, layout):
    m, n, k = 4000, 2400, 704  # rows of 8000, 4800, 1408 bytes: whole 16 bytes; 608 tiles (4.6 waves), whole
    x = view((m, k)) if layout[0] == "R" else col((m, k))
    y = view((k, n)) if layout[1] == "R" else col((k, n))
    p = plan(x, y)
    assert p.kind == "hopper" and "repacked" not in p.describe()
    config = p.kernel.config
    map_a, map_b, map_d = encoder.calls
    assert (map_d.dims, map_d.strides, map_d.box) == ((n, m, 1), (2 * n, 2 * n * m), (64, 64, 1))  # f16 D
    if layout[0] == "R":  # K-major A: rows of K, one box {bk, bm}
        assert (map_a.dims, map_a.strides, map_a.box) == ((k, m, 1), (2 * k, 2 * k * m), (64, config.bm, 1))
    else:  # M-major A: rows of M, boxes {64, bk}
        assert (map_a.dims, map_a.strides, map_a.box) == ((m, k, 1), (2 * m, 2 * m * k), (64, 64, 1))
    if layout[1] == "C":
        assert (map_b.dims, map_b.strides, map_b.box) == ((k, n, 1), (2 * k, 2 * k * n), (64, config.bn, 1))
    else:
        assert (map_b.dims, map_b.strides, map_b.box) == ((n, k, 1), (2 * n, 2 * n * k), (64, 64, 1))
    assert map_a.pointer == PTR and map_a.swizzle == 128


def test_tensor_maps_of_batches_and_broadcasts(encoder):
    p = plan(view((6, 1024, 512), dt.bfloat16), view((512, 1536), dt.bfloat16))  # 576 tiles: whole
    assert p.kind == "hopper" and p.batch == 6
    map_a, map_b, map_d = encoder.calls
    assert map_d.dims == (1536, 1024, 6) and map_d.strides == (4 * 1536, 4 * 1536 * 1024)
    assert map_a.dims == (512, 1024, 6) and map_a.strides == (1024, 1024 * 1024)
    assert map_b.dims == (1536, 512, 1)  # broadcast: one problem, any valid batch stride
    assert p.kernel.operand_a.batched and not p.kernel.operand_b.batched


def test_repacked_operands_are_k_major_and_padded(encoder):
    p = plan(view((300, 201), dt.float16, strides=(203, 1)), view((201, 150), dt.float16))
    assert "x K-major (repacked: TMA needs row strides of whole 16 bytes, not 203 x 2 bytes)" in p.describe()
    map_a = encoder.calls[0]
    assert map_a.dims == (201, 300, 1) and map_a.strides == (2 * 208, 2 * 208 * 300) and map_a.pointer == 256
    encoder.calls.clear()
    p = plan(view((8192, 960), dt.tfloat32), view((960, 800), dt.tfloat32))  # row-major B is N-major; deep M
    assert "y K-major (repacked: tfloat32 wgmma reads K-major operands only)" in p.describe()
    assert encoder.calls[1].dims == (960, 800, 1) and encoder.calls[1].box == (32, p.kernel.config.bn, 1)


def test_plans_say_why_the_engine_is_not_taken(encoder):
    assert "the wgmma engine needs sm_90 (this GPU is sm_80)" in plan(view((4096, 4096)), view((4096, 4096)),
                                                                       sm=80).describe()
    p = plan(view((64, 0)), view((0, 64)), view((64, 64), dt.float32))
    assert p.kind == "tiled" and p.reason == "K = 0: nothing to multiply"


def test_d_is_stored_by_tma_when_row_major_on_16_bytes(encoder):
    p = plan(view((2048, 2048)), view((2048, 2048)))  # 256 tiles: not split
    assert "D by TMA" in p.describe() and p.kernel.store_d.box == (64, 64, 1)  # f16 D: 64 columns per chunk
    p = plan(view((2048, 2048)), view((2048, 2048)), view((2048, 2048), dt.float32))  # mma into a new result
    assert "D by TMA" in p.describe()
    out = view((512, 512), dt.float32, strides=(1, 512))  # column-major D: direct stores
    p = array_gemm.plan_call(view((512, 512)), view((512, 512)), view((512, 512), dt.float32), dt.float32,
                             array_gemm._DeviceInfo(90, SMS), 0, out)
    assert "D by direct stores" in p.describe()
    assert "D by direct stores" in plan(view((500, 17)), view((17, 17))).describe()  # 34-byte rows
    assert "3 K splits, D by direct stores" in plan(view((512, 7168)), view((7168, 2112))).describe()
    for c, n in ((dt.float16, 257), (dt.float32, 257), (dt.float32, 258)):  # padded rows of 16 bytes, N is not
        padded = view((333, n), c, strides=(n + (-n * c.size % 16 + 16) // c.size, 1))
        x, y = view((333, 1000)), col((1000, n))
        engine, reason = array_gemm._engine_plan(x, y, array_gemm._matrix(x, "x"), array_gemm._matrix(y, "y"), c, 333,
                                                 n, 1000, 1, array_gemm._DeviceInfo(90, SMS), padded, splits=1)
        assert engine.splits == 1 and engine.store_d is None and "D by direct stores" in engine.describe(), reason
    assert hopper._store_geometry(dt.float16, 333, 264, 1, (272, 1, 0, PTR)).dims == (264, 333, 1)


def test_whole_row_tiles_widen_for_mn_major_weights(encoder):
    """64 rows x 4096 x 4096 takes 64 x 32 tiles on weights stored [N, K]; weights stored [K, N] are read in whole
    64-wide panels, so the same rule's tile widens to 64 x 64 (and the describer says what the plan runs)."""
    nk = plan(view((64, 4096)), col((4096, 4096))).kernel
    kn = plan(view((64, 4096)), view((4096, 4096))).kernel
    assert nk.config == hopper.replace(hopper.WHOLE_ROWS_64, bk=64) and not nk.swapped
    assert kn.config == hopper.replace(hopper.WHOLE_ROWS, bk=64) and not kn.route_b.k_major
    described = hopper.describe_call(dt.bfloat16, dt.float32, 64, 4096, 4096, 1, True, True, SMS)
    assert "64x64x64" in described, described
    x, y = view((64, 4096)), view((4096, 4096))
    with pytest.raises(ValueError, match="whole 64-wide panels"):  # asked for by name, the tile is refused
        array_gemm._engine_plan(x, y, array_gemm._matrix(x, "x"), array_gemm._matrix(y, "y"), dt.float32, 64, 4096,
                                4096, 1, array_gemm._DeviceInfo(90, SMS), config=hopper.WHOLE_ROWS_64)
    # 16-bit results of a 32-wide tile are half the TMA store's 128-byte chunk: stored directly
    half = plan(view((64, 4096), dt.float16), col((4096, 4096), dt.float16)).kernel
    assert half.config.bn == 32 and half.store_d is None and "D by direct stores" in half.describe()
    assert "D by direct stores" in hopper.describe_call(dt.float16, dt.float16, 64, 4096, 4096, 1, True, False, SMS)
    source = hopper.gemm_source(dt.float16, dt.float16, half.config, True, True, store_by_tma=False)
    assert cached_compile(source, hopper.KERNEL_NAME, "sm_90a").local_memory == 0


def test_decode_plans_compute_the_transposed_product(encoder):
    x, y = view((16, 4096)), col((4096, 4096))  # weights stored [N, K], read transposed
    engine = plan(x, y).kernel
    assert engine.swapped and (engine.m, engine.n) == (4096, 16) and engine.config.bn == 16
    assert (engine.route_a.argument, engine.route_b.argument) == ("y", "x") and engine.route_a.k_major
    assert "A and B swapped" in engine.describe() and "D by direct stores" in engine.describe()
    out = view((16, 4096), dt.float32)  # the kernel's rows are D's columns: strides swap, pointers swap
    params = engine.scalars(None, out, 1.0, 0.0)
    assert params[:3] == (4096, 16, 4096) and params[10:13] == (1, 4096, 0)
    assert plan(view((17, 4096)), col((4096, 4096))).kernel.config.bn == 32
    assert plan(view((33, 4096)), col((4096, 4096))).kernel.config.bn == 64
    assert not plan(view((65, 4096)), col((4096, 4096))).kernel.swapped
    # x column-major: the swapped B tile would be MN-major and 16 wide, which TMA panels cannot hold
    assert not plan(col((16, 4096)), col((4096, 4096))).kernel.swapped
    with pytest.raises(ValueError, match="x is not row-major"):
        x_col = col((16, 4096))
        array_gemm._engine_plan(x_col, y, array_gemm._matrix(x_col, "x"), array_gemm._matrix(y, "y"),
                                dt.float32, 16, 4096, 4096, 1, array_gemm._DeviceInfo(90, SMS),
                                config=hopper.replace(hopper.DECODE, bk=64))


def test_tma_refusal_falls_back_to_the_multi_block_kernel(monkeypatch):
    def refuse(*args, **kwargs):
        raise array_gemm.ExecutionError("cuTensorMapEncodeTiled refused: CUDA_ERROR_INVALID_VALUE")

    monkeypatch.setattr(cuda_driver, "encode_tiled", refuse)
    array_gemm._CALLS.clear()
    p = plan(view((4096, 4096)), view((4096, 4096)))
    assert p.kind == "tiled" and p.reason.startswith("TMA: cuTensorMapEncodeTiled refused")


# ---- the launch's parameter block ---------------------------------------------------------------------


def test_parameter_block_points_at_its_slots():
    import ctypes

    block = cuda_driver.ParameterBlock(("map", "u64", "i32", "f32"))
    tmap = cuda_driver.TensorMap()
    assert tmap.address % 64 == 0
    block.set_map(0, tmap)
    block.set(1, 0xDEAD0000)
    block.set(2, -7)
    block.set(3, 0.5)
    assert block.pointers[0] == tmap.address
    assert ctypes.c_uint64.from_address(block.pointers[1]).value == 0xDEAD0000
    assert ctypes.c_int32.from_address(block.pointers[2]).value == -7
    assert ctypes.c_float.from_address(block.pointers[3]).value == 0.5
    assert len(hopper._GEMM_PARAMS) == 22 and hopper._GEMM_PARAMS[:3] == ("map", "map", "map")


# ---- the kernels compile for sm_90a and use the intended instructions ---------------------------------

EIGHT_BIT = (dt.float8_e4m3, dt.float8_e5m2, dt.int8, dt.uint8)
COMBINATIONS = [
    (a, a, c, ak, bk)
    for a, c in sorted(hopper.SERVED, key=lambda p: (p[0].name, p[1].name))
    for ak, bk in ((True, True), (True, False), (False, True), (False, False))
    if a.size == 2 or (ak and bk)
] + [  # the mixed 8-bit pairs (8-bit wgmma reads K-major operands only)
    (a, b, c, True, True)
    for a in EIGHT_BIT for b in EIGHT_BIT for c in (dt.float16, dt.float32, dt.int32)
    if a != b and hopper.serves(a, c, b=b)
]
#: The tensor-core opcode of each input family (SASS): HGMMA 16-bit and tf32, QGMMA fp8, IGMMA 8-bit integers.
OPCODE = {1: "QGMMA", 2: "HGMMA", 4: "HGMMA"}


def _opcode(a: dt.DType) -> str:
    return "IGMMA" if a.integral else OPCODE[a.size]


def _instructions(sass: str) -> set[str]:
    return set(re.findall(r"\b(HGMMA|QGMMA|IGMMA|UTMALDG|UTMASTG|USETMAXREG|SYNCS|LDL|STL)\b", sass))


@pytest.mark.slow
@pytest.mark.parametrize(("a", "b", "c", "a_k_major", "b_k_major"), COMBINATIONS,
                         ids=lambda v: v.name if isinstance(v, dt.DType) else ("K" if v else "MN"))
def test_engine_compiles_with_wgmma_tma_and_no_spills(a, b, c, a_k_major, b_k_major):
    config = hopper.choose_config(a, 4096, 4096, 4096, 1, SMS, promotion=hopper.promotion_of(a))[0]
    source = hopper.gemm_source(a, c, config, a_k_major, b_k_major, store_by_tma=True, b=b)
    compiled = cached_compile(source, hopper.KERNEL_NAME, "sm_90a")
    sass = compiled.sass()
    ops = _instructions(sass)
    assert {_opcode(a), "UTMALDG", "UTMASTG", "USETMAXREG", "SYNCS"} <= ops
    assert not ops & {"LDL", "STL"} and compiled.local_memory == 0
    assert compiled.registers <= 168, "the register cap at entry of 384 threads, before the hand-over"
    assert "serialized" not in (compiled.log or ""), "ptxas serialised the wgmmas (accumulators read in flight)"
    if a.size == 1:  # the instruction's operand types, in SASS's spelling
        names = {"float8_e4m3": "E4M3", "float8_e5m2": "E5M2", "int8": "S8", "uint8": "U8"}
        assert f".{names[a.name]}.{names[b.name]}" in sass


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n, c in hopper.CONFIGS.items() if not c.split_tf32))
def test_every_config_compiles(name):
    config = hopper.replace(hopper.CONFIGS[name], bk=64)
    swapped = config.swap_ab  # A is the weights (here MN-major), B the few rows of x, K-major
    b_k_major = swapped or config.bn < 64  # an MN-major B is whole 64-wide panels (hopper.b_panels_fit)
    source = hopper.gemm_source(dt.bfloat16, dt.float32, config, not swapped, b_k_major)
    compiled = cached_compile(source, hopper.KERNEL_NAME, "sm_90a")
    sass = compiled.sass()
    assert compiled.local_memory == 0 and "HGMMA" in sass and "UTMASTG" not in sass  # direct stores
    width = {"wide": 256, "square": 128, "narrow": 256, "pingpong": 128, "wide clusters": 256, "decode": 16,
             "medium": 128, "wide 192": 192, "whole rows 64": 32, "whole rows": 64}[name]
    assert f"HGMMA.64x{width}x16.F32.BF16" in sass


@pytest.mark.slow
@pytest.mark.parametrize(("a_k_major", "b_k_major"), [(True, True), (False, False)])
def test_clusters_multicast_b_and_free_stages_in_both_blocks(a_k_major, b_k_major):
    config = hopper.replace(hopper.WIDE, bk=64, cluster=2)
    source = hopper.gemm_source(dt.bfloat16, dt.float32, config, a_k_major, b_k_major, store_by_tma=True)
    compiled = cached_compile(source, hopper.KERNEL_NAME, "sm_90a")
    sass = compiled.sass()
    assert compiled.local_memory == 0
    assert "UTMALDG.3D.MULTICAST" in sass and "UCGABAR_WAIT" in sass  # multicast loads, the cluster barrier
    assert "MEMBAR.ALL.GPU" in sass and sass.count("MEMBAR.ALL.GPU") == 1  # only the start-up cluster sync


def test_cluster_geometry(encoder):
    """Clusters split B's K-major box between the blocks and count work in pairs of tile rows."""
    x, y = view((1000, 512), dt.bfloat16), col((512, 768), dt.bfloat16)
    config = hopper.replace(hopper.WIDE, cluster=2)
    mx, my = array_gemm._matrix(x, "x"), array_gemm._matrix(y, "y")
    engine, _ = array_gemm._engine_plan(x, y, mx, my, dt.float32, 1000, 768, 512, 1, array_gemm._DeviceInfo(90, SMS),
                                        None, config, 1)
    assert encoder.calls[1].box == (64, 128, 1)  # half of the 256 rows of B per block
    assert engine.tiles == 4 * 3 and engine.grid == (2 * 12, 1, 1)  # ceil(8 / 2) row pairs x 3 columns
    assert "clusters of 2" in engine.describe()


@pytest.mark.parametrize("c", [dt.float16, dt.bfloat16, dt.float32])
def test_split_reduce_and_repack_compile(c):
    reduce = cached_compile(hopper.reduce_source(c), hopper.REDUCE_NAME, "sm_90")
    assert reduce.local_memory == 0
    for size in (2, 4):
        repack = cached_compile(hopper.repack_source(size), hopper.REPACK_NAME, "sm_90")
        assert repack.local_memory == 0 and repack.shared_memory == 32 * 33 * size


def test_describe_call_and_cli(capsys):
    from blasdx.__main__ import main

    text = hopper.describe_call(dt.bfloat16, dt.float32, 8192, 8192, 8192)
    assert text.startswith("hopper wgmma+TMA, 128x256x64, 4 stages, 2 consumers, group 8, clusters of 2, 1 K split")
    assert "D by TMA, x K-major, y MN-major" in text
    assert main(["matmul", "tf32", "16x8192x8192"]) == 0
    out = capsys.readouterr().out
    assert "K splits" in out and "y MN-major (transposed in shared memory)" in out
    assert main(["matmul", "int8", "4096x4096x4096"]) == 0
    assert "hopper wgmma+TMA" in capsys.readouterr().out
    with pytest.raises(ValueError, match="the engine runs bfloat16 -> bfloat16, bfloat16 -> float32"):
        hopper.describe_call(dt.float16, dt.bfloat16, 64, 64, 64)
    assert main(["matmul", "float16", "64x64"]) == 2


# ---- 8-bit types: pairs, fp8 promotion, int32 results ---------------------------------------------


def test_eight_bit_pairs_and_promotion_rule():
    assert hopper.serves(dt.float8_e4m3, dt.float16, b=dt.float8_e5m2)
    assert hopper.serves(dt.int8, dt.int32, b=dt.uint8) and hopper.serves(dt.uint8, dt.int32)
    assert not hopper.serves(dt.float8_e4m3, dt.float32, b=dt.int8) and not hopper.serves(dt.int8, dt.float32)
    assert not hopper.serves(dt.float8_e4m3, dt.bfloat16)  # matmul's table: fp8 -> f16 | f32
    assert hopper.promotion_of(dt.float8_e4m3) == hopper.promotion_of(dt.float8_e5m2) == 128
    assert hopper.promotion_of(dt.float8_e4m3, fast_accumulation=True) == 0
    assert hopper.promotion_of(dt.int8) == hopper.promotion_of(dt.bfloat16) == 0
    e4m3 = dt.float8_e4m3
    # fp8 takes wide tiles (promoting consumers wait for their products: both multiply each stage)
    assert hopper.choose_config(e4m3, 8192, 8192, 8192, 1, SMS, promotion=128)[0] == hopper.replace(
        hopper.WIDE_CLUSTERS, bk=128, promotion=128)
    assert hopper.choose_config(e4m3, 4096, 4096, 4096, 1, SMS, promotion=128)[0] == hopper.replace(
        hopper.WIDE, bk=128, promotion=128)
    assert hopper.choose_config(e4m3, 16, 8192, 8192, 1, SMS, promotion=128) == (  # decode: swapped, promoted
        hopper.replace(hopper.DECODE, bk=128, promotion=128), 1)
    assert hopper.choose_config(e4m3, 16, 8192, 8192, 1, SMS, promotion=128, swap=False) == (  # scaled_mm's plans
        hopper.replace(hopper.NARROW, bk=128, promotion=128), 4)
    assert hopper.choose_config(e4m3, 4096, 4096, 4096, 1, SMS)[0] == hopper.replace(hopper.WIDE, bk=128)
    assert hopper.choose_config(dt.int8, 4096, 4096, 4096, 1, SMS)[0] == hopper.replace(hopper.PINGPONG, bk=128)
    assert "f32 promotion every 128 K" in str(hopper.choose_config(e4m3, 4096, 4096, 4096, 1, SMS, promotion=128)[0])


def test_fp8_plans_promote_unless_fast(encoder):
    x, y = view((4096, 2048), dt.float8_e4m3), col((2048, 3072), dt.float8_e4m3)
    p = plan(x, y)
    assert p.kind == "hopper" and p.kernel.config.promotion == 128, p.describe()
    assert "f32 promotion every 128 K" in p.describe() and "repacked" not in p.describe()
    map_a, map_b, map_d = encoder.calls
    assert map_a.box == (128, 128, 1) and map_a.dims == (2048, 4096, 1)  # 128 fp8 of K per 128-byte row
    assert map_b.box == (128, 256, 1) and map_b.dims == (2048, 3072, 1)  # 128 x 256 tiles
    assert map_d.dims == (3072, 4096, 1) and map_d.box == (64, 64, 1)  # f16 result
    fast = array_gemm.plan_call(x, y, None, dt.float16, array_gemm._DeviceInfo(90, SMS), 0, fast_accumulation=True)
    assert fast.kind == "hopper" and fast.kernel.config.promotion == 0 and "promotion" not in fast.describe()
    p = plan(view((4096, 2048), dt.float8_e5m2), view((2048, 3072), dt.float8_e5m2))  # row-major y is N-major
    assert "y K-major (repacked: float8_e5m2 wgmma reads K-major operands only)" in p.describe()


def test_int8_plans_take_int32_scalars(encoder):
    p = plan(view((4096, 4096), dt.int8), col((4096, 4096), dt.int8))
    assert p.kind == "hopper" and p.kernel.c == dt.int32 and "D by TMA" in p.describe()
    assert encoder.calls[2].type_name == "int32" and encoder.calls[2].box == (32, 64, 1)
    assert p.kernel._gemm.params.kinds[-2:] == ("i32", "i32")  # alpha, beta
    assert "using acc_type = int;" in p.kernel._gemm.source
    assert hopper.scalar(3, dt.int32) == 3 and isinstance(hopper.scalar(2.0, dt.int32), int)
    assert hopper.scalar(2, dt.float32) == 2.0
    with pytest.raises(ValueError, match="alpha / beta of an integer result are integers, not 0.5"):
        hopper.scalar(0.5, dt.int32)
    split = plan(view((128, 16384), dt.uint8), col((16384, 256), dt.int8), view((128, 256), dt.int32))
    assert split.kernel.splits > 1 and split.kernel._reduce.params.kinds[-2:] == ("i32", "i32")
    assert "using splitk_acc_type = int;" in split.kernel._reduce.source


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (512, 2112, 7168), (16, 8192, 8192), (8192, 8192, 8192)],
                         ids=lambda s: "x".join(map(str, s)))
def test_bf16_results_sum_in_f32_and_store_bf16(encoder, shape):
    """bfloat16 -> bfloat16 (matmul's out_dtype, an mma of a bf16 acc): f32 sums, the D map, the direct or TMA
    store and the split-K finish of bf16 elements; every kernel of the plan compiles without spills."""
    m, n, k = shape
    p = array_gemm.plan_call(view((m, k), dt.bfloat16), col((k, n), dt.bfloat16), None, dt.bfloat16,
                             array_gemm._DeviceInfo(90, SMS), 0)
    assert p.kind == "hopper" and p.kernel.c == dt.bfloat16, p.reason
    gemm = p.kernel._gemm.source
    assert "using c_type = __nv_bfloat16;" in gemm and "using acc_type = float;" in gemm
    kernels = [(gemm, hopper.KERNEL_NAME)]
    if p.kernel.splits > 1:
        assert "using splitk_c_type = __nv_bfloat16;" in p.kernel._reduce.source
        kernels.append((p.kernel._reduce.source, "blasdx_splitk_reduce"))
    if len(encoder.calls) == 3:  # D stored by TMA: a map of bf16 elements, 128 bytes of a row per box row
        assert encoder.calls[2].type_name == "bfloat16" and encoder.calls[2].box[0] == 64
    for source, name in kernels:
        compiled = cached_compile(source, name, "sm_90a")
        assert compiled.local_memory == 0


@pytest.mark.slow
@pytest.mark.parametrize("interval", hopper.PROMOTION_INTERVALS)
@pytest.mark.parametrize("name", ["wide clusters", "wide", "square", "narrow"])
def test_promoted_configs_compile_without_spills(name, interval):
    """The configurations the rule promotes with, at every interval: QGMMA into a 64 x 128 temporary, no spills."""
    config = hopper.replace(hopper.CONFIGS[name], bk=128, promotion=interval)
    for staged in (True, False):
        source = hopper.gemm_source(dt.float8_e5m2, dt.float16, config, True, True, staged, dt.float8_e4m3)
        compiled = cached_compile(source, hopper.KERNEL_NAME, "sm_90a")
        sass = compiled.sass()
        assert compiled.local_memory == 0 and "LDL" not in sass and "STL" not in sass
        assert "QGMMA.64x128x32.F32.E5M2.E4M3" in sass and "UTMALDG" in sass
        atoms = config.bm // config.consumers // 64 if not config.pingpong else config.bm // 64
        assert sass.count("QGMMA") == atoms * (config.bn // 128) * 4  # 4 K steps of 32 per stage


def _overlapped(name: str) -> hopper.EngineConfig:
    return hopper.replace(hopper.CONFIGS[name], bk=128, promotion=128, promotion_overlap=True)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["gemm", "scaled x blocks", "grouped block"])
@pytest.mark.parametrize("name", ["square", "medium"])
def test_overlapped_promotion_adds_while_the_next_stage_multiplies(name, kernel):
    """promotion_overlap: in the consumer's stage loop (two stages a pass) the additions of one stage's products
    come after the next stage's QGMMAs and before the wait for them, no wgmma is serialised, nothing spills."""
    from blasdx.calls import scaled_mm
    from blasdx.engine import grouped

    config = _overlapped(name)
    a, c = dt.float8_e4m3, dt.bfloat16
    if kernel == "gemm":
        compiled = cached_compile(hopper.gemm_source(a, c, config, True, True, True), hopper.KERNEL_NAME, "sm_90a")
    elif kernel == "scaled x blocks":
        source = scaled_mm.scaled_source(a, a, c, config, True, True, True, "block", "tensor")
        compiled = cached_compile(source, scaled_mm.KERNEL_NAME, "sm_90a")
    else:
        source = grouped.grouped_source(a, a, c, config, True, True, "block", "block", store_by_tma=True)
        compiled = cached_compile(source, grouped.KERNEL_NAME, "sm_90a")
    assert compiled.local_memory == 0 and "serialized" not in (compiled.log or ""), compiled.log
    from .test_k_loop_sass import _sass_loops

    sass_loops = _sass_loops()
    loops = [body for _, _, body in sass_loops.loops(sass_loops.instructions(compiled.sass()))
             if sum(op.startswith("QGMMA") for op in body) == 8]
    assert loops, "a stage loop of two stages' QGMMAs"
    body = min(loops, key=len)
    issued = [i for i, op in enumerate(body) if op.startswith("QGMMA")]
    waits = [i for i, op in enumerate(body) if op == "WARPGROUP.DEPBAR.LE"]
    adds = [i for i, op in enumerate(body) if op in ("FADD", "FFMA")]
    assert len(waits) == 2 and len(adds) >= 2 * 64
    # ptxas places the additions itself: in at least one of the pass's two stages, at least 48 of the 64 come
    # after a group's first QGMMA and before its wait (measured 56-64; the other stage 0-64)
    overlapping = [len([i for i in adds if first < i < wait]) for first, wait in ((issued[0], waits[0]),
                                                                                  (issued[4], waits[1]))]
    assert max(overlapping) >= 48, f"additions between a group's issue and its wait: {overlapping}"


@pytest.mark.parametrize(("base", "changes"), [("wide", {}), ("pingpong", {}), ("square", {"promotion": 64}),
                                               ("decode", {})])
def test_overlapped_promotion_runs_on_one_chunk_a_consumer(encoder, base, changes):
    config = hopper.replace(hopper.CONFIGS[base], **{"bk": 128, "promotion": 128, "promotion_overlap": True, **changes})
    assert config.overlap_problem() is not None
    with pytest.raises(ValueError, match="overlapped promotion takes fp8 promoted once a stage"):
        hopper.EnginePlan(dt.float8_e4m3, dt.float16, 4096, 4096, 4096, 1,
                          hopper.OperandRoute("x", True), hopper.OperandRoute("y", True), 4096, 4096, 1, 1, 0, 0,
                          PTR, PTR, SMS, config=config, splits=1)
    from blasdx.engine import grouped

    with pytest.raises(ValueError, match="overlapped promotion takes fp8 promoted once a stage"):
        grouped.GroupedPlan(dt.float8_e4m3, dt.float8_e4m3, dt.bfloat16, "contiguous", 8, 4096, 1024, 1024,
                            hopper.OperandRoute("x", True), hopper.OperandRoute("w", True), (1024, 0),
                            (1024, 1024 * 1024), PTR, PTR, SMS, "block", "block", config=config)
    assert _overlapped("square").overlap_problem() is None and _overlapped("medium").overlap_problem() is None
    assert "promotions overlapped" in str(_overlapped("square"))


def test_overlapped_promotion_takes_one_operands_block_scales_in_scaled_mm():
    from blasdx.calls import scaled_mm

    route = hopper.OperandRoute
    with pytest.raises(ValueError, match="overlapped promotion with block scales of x and y"):
        scaled_mm.ScaledPlan(dt.float8_e4m3, dt.float8_e4m3, dt.bfloat16, 1024, 1024, 1024, route("x", True),
                             route("y", True), 1024, 1024, PTR, PTR, SMS, None, "block", "block",
                             config=_overlapped("square"))


def test_split_reduce_compiles_for_int32():
    reduce = cached_compile(hopper.reduce_source(dt.int32), hopper.REDUCE_NAME, "sm_90")
    assert reduce.local_memory == 0
    assert cached_compile(hopper.repack_source(1), hopper.REPACK_NAME, "sm_90").shared_memory == 32 * 33


@pytest.mark.parametrize(("steps", "asked", "run"), [(64, 12, 11), (64, 16, 16), (64, 3, 3), (5, 4, 3), (1, 8, 1),
                                                     (64, 1, 1)])
def test_asked_splits_leave_no_split_without_k_steps(encoder, steps, asked, run):
    """12 splits of 64 K steps are chunks of 6 with the last one empty (such a launch never returned with
    ping-pong tiles): the plan runs the 11 that the chunks make."""
    assert hopper.nonempty_splits(steps, asked) == run
    k = 64 * steps  # 16-bit: 64 K elements a step
    x, y = view((128, k)), col((k, 4096))
    engine, reason = array_gemm._engine_plan(x, y, array_gemm._matrix(x, "x"), array_gemm._matrix(y, "y"),
                                             dt.float32, 128, 4096, k, 1, array_gemm._DeviceInfo(90, SMS),
                                             config=hopper.replace(hopper.PINGPONG, bk=64), splits=asked)
    assert engine is not None and engine.splits == run, reason

"""bx.grouped_mm without a GPU: the forms the operands state, what each scale shape means, every
refusal (typed, naming the argument, before anything is planned or launched), the plans and
tensor maps, and the sm_90a kernels (HGMMA / QGMMA, TMA loads, no local memory).

Arrays are ArrayViews with made-up device pointers; the device is faked.
"""

from __future__ import annotations

import math
import re

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.arrays import ArrayView
from blasdx.calls import grouped_mm as grouped
from blasdx.calls import matmul as array_gemm
from blasdx.compile.cache import cached_compile
from blasdx.engine import grouped as engine
from blasdx.engine import hopper
from blasdx.base.errors import DeviceError, ExecutionError

from .array_views import PTR, hopper_calls, views

BF16, F16, F32, I32 = dt.bfloat16, dt.float16, dt.float32, dt.int32
E4M3, E5M2 = dt.float8_e4m3, dt.float8_e5m2
G, T, K, N = 8, 3000, 1040, 776  # 9 K blocks of 128, the last one partial; N not a multiple of 128


view = views(BF16)[0]


def w_nk(groups=G, k=K, n=N, dtype=BF16, ptr=PTR + 2**30) -> ArrayView:
    """w [G, K, N] stored [G, N, K] (K-major per group)."""
    return view((groups, k, n), dtype, (n * k, 1, k), ptr)


OFFS = view((G,), I32, ptr=PTR + 2**31)


@pytest.fixture(autouse=True)
def fake_device(monkeypatch):
    """An sm_90 device with 132 SMs (tensor maps checked by the driver's rules); nothing launches."""
    monkeypatch.setattr(grouped, "STORE_BY_TMA", False)  # the plans below store pair by pair unless a test says
    with hopper_calls(monkeypatch, grouped._CALLS) as encoder:
        yield encoder


# ---- forms and scales ------------------------------------------------------------------------------------


def test_forms():
    assert grouped.form_of(view((T, K)), w_nk(), OFFS, None) == grouped.Form("contiguous", G, T, N, K, (T, N))
    assert grouped.form_of(view((G, 64, K)), w_nk(), None, None) == grouped.Form("masked", G, 64, N, K, (G, 64, N))
    assert grouped.form_of(view((G, 64, K)), w_nk(), None, OFFS).layout == "masked"


KB, NB = math.ceil(K / 128), math.ceil(N / 128)
CONTIGUOUS = grouped.Form("contiguous", G, T, N, K, (T, N))
MASKED = grouped.Form("masked", G, 96, N, K, (G, 96, N))


@pytest.mark.parametrize(("shape", "strides", "form", "is_x", "expected"), [
    ((T,), (1,), CONTIGUOUS, True, grouped.Scale("row", 1)),
    ((T, 1), (1, 1), CONTIGUOUS, True, grouped.Scale("row", 1)),
    ((T, KB), (1, T), CONTIGUOUS, True, grouped.Scale("block", 1, T)),
    ((G, 96), (96, 1), MASKED, True, grouped.Scale("row", 1, 0, 96)),
    ((G, 96, KB), (96 * KB, KB, 1), MASKED, True, grouped.Scale("block", KB, 1, 96 * KB)),
    ((G, N), (N, 1), CONTIGUOUS, False, grouped.Scale("column", 0, 1, N)),
    ((G, 1, N), (N, N, 1), MASKED, False, grouped.Scale("column", 0, 1, N)),
    ((G, KB, NB), (KB * NB, NB, 1), CONTIGUOUS, False, grouped.Scale("block", NB, 1, KB * NB)),
])
def test_scale_shapes(shape, strides, form, is_x, expected):
    assert grouped.scale_of(view(shape, F32, strides), "s", form, is_x) == expected


# ---- refusals: typed, naming the argument, before anything runs -----------------------------------------


@pytest.mark.parametrize(("change", "match"), [
    ({"x": view((T, K), dt.float32)}, (r"^x: grouped_mm multiplies float16, bfloat16, float8_e4m3 or float8_e5m2, "
                                        r"not float32")),
    ({"w": w_nk(dtype=F16)}, r"^w: float16 does not match x's bfloat16"),
    ({"x": view((G, 64, K)), "w": view((K + 1, N))},
     r"^x: shape \(8, 64, 1040\) and w: shape \(1041, 776\) do not multiply"),
    ({"x": view((G, 64, K)), "w": view((K, N)), "offs": None}, r"^offs: x \[G, M, K\] with w \[K, total_n\] needs offs"),
    ({"x": view((G, 64, K)), "w": view((K, N)), "counts": OFFS},
     r"^counts: the 3D x 2D form \(groups along N\) takes none"),
    ({"x": view((G, 64, K)), "w": view((K, N)), "out": view((N, 64), ptr=PTR + 2**32)},
     r"^out: expected shape \(64, 776\) of bfloat16 \(out_dtype\), got \(776, 64\)"),
    ({"w": view((2, 3, K, N))}, r"^w: shape \(2, 3, 1040, 776\): grouped_mm takes w as \[G, K, N\]"),
    ({"w": view((K + 1, N))}, r"^x: shape \(3000, 1040\) and w: shape \(1041, 776\) do not multiply"),
    ({"w": view((K, N)), "counts": OFFS}, r"^counts: the 2D x 2D form \(groups along K\) takes offs"),
    ({"w": view((K, N)), "offs": None}, r"^offs: x \[M, total_k\] with w \[total_k, N\] needs offs"),
    ({"w": w_nk(groups=0)}, r"^w: shape has 0 groups"),
    ({"x": view((T, K + 1))}, r"^x: shape \(3000, 1041\) and w: shape \(8, 1040, 776\) do not multiply"),
    ({"x": view((T,))}, r"^x: shape \(3000,\) has rank 1"),
    ({"offs": None}, r"^offs: x \[total, K\] with w \[G, K, N\] needs offs"),
    ({"offs": view((G,), dt.float32)}, r"^offs: expected int32, got float32; pass offs.int\(\)"),
    ({"offs": view((G + 1,), I32)}, r"^offs: expected shape \(8,\) \(one entry per group of w\), got \(9,\)"),
    ({"offs": view((G,), I32, (2,))}, r"^offs: expected a contiguous array, got stride 2"),
    ({"counts": OFFS}, r"^counts: the masked layout takes x as \[G, max_m, K\]"),
    ({"x": view((G, 64, K)), "offs": OFFS}, r"^offs: x \[G, M, K\] with w \[G, K, N\] is batched"),
    ({"x": view((G + 1, 64, K)), "offs": None}, r"^x: shape \(9, 64, 1040\) does not match w"),
    ({"x": view((G, 64, K)), "offs": None, "counts": view((G,), dt.int8)}, r"^counts: expected int32, got int8"),
    ({"scale_x": view((T,), F32)}, r"^scale_x: scales are for fp8 inputs; bfloat16 products take none"),
    ({"out_dtype": dt.int32}, r"^out_dtype: grouped_mm writes float16, bfloat16, float32, not int32"),
    ({"out_dtype": "float7"}, r"^out_dtype: 'float7' is not an element type"),
    ({"out": view((T, N), dt.float64, ptr=PTR + 2**32)},
     r"^out: grouped_mm writes float16, bfloat16, float32, not float64"),
    ({"out": view((T, N), F32), "out_dtype": BF16}, (r"^out: expected shape \(3000, 776\) of bfloat16 \(out_dtype\), got \(3000, 776\) of "
                                  r"float32")),
    ({"out": view((T, N), readonly=True, ptr=PTR + 2**32)}, r"^out: the array is read-only"),
    ({"out": view((T, N), ptr=PTR)}, r"^out: its memory overlaps x's"),
    ({"check_offsets": 1}, r"^check_offsets: expected True or False"),
])
def test_refusals_name_the_argument(change, match):
    args = {"x": view((T, K)), "w": w_nk(), "offs": OFFS}
    args.update(change)
    with pytest.raises(ExecutionError, match=match):
        bx.grouped_mm(args.pop("x"), args.pop("w"), args.pop("offs"), **args)
    assert not grouped._CALLS, "nothing was planned"


FP8_X = view((T, K), E4M3)
FP8_W = w_nk(dtype=E4M3)


@pytest.mark.parametrize(("change", "match"), [
    ({"w": w_nk(dtype=BF16)}, r"^w: bfloat16 with fp8 x"),
    ({"scale_x": view((T,), dt.float16)}, r"^scale_x: scales are float32, not float16"),
    ({"scale_x": view((T, 8), F32)}, (r"^scale_x: shape \(3000, 8\) covers its operand in none of the supported ways: "
                                      r"\(3000,\) or \(3000, 1\) per row, \(3000, 9\) per 1 x 128 block")),
    ({"scale_w": view((N,), F32)}, (r"^scale_w: shape \(776,\) covers .* \(8, 776\) or \(8, 1, 776\) per column, "
                                    r"\(8, 9, 7\) per 128 x 128 block")),
    ({"scale_w": view((G, N), F32, (-N, 1))}, r"^scale_w: negative strides"),
    ({"w": view((K, N), E4M3, ptr=PTR + 2**30)}, (r"^x: the 2D x 2D form \(groups along K\) takes float16 or "
                                                  r"bfloat16, not float8_e4m3")),
])
def test_fp8_refusals(change, match):
    args = {"x": FP8_X, "w": FP8_W, "offs": OFFS}
    args.update(change)
    with pytest.raises(ExecutionError, match=match):
        bx.grouped_mm(args.pop("x"), args.pop("w"), args.pop("offs"), **args)


def test_other_gpus_are_refused(monkeypatch):
    monkeypatch.setattr(array_gemm, "_device_info", lambda device_id: array_gemm._DeviceInfo(89, 128))
    with pytest.raises(DeviceError, match=r"runs on the Hopper engine \(sm_90: H100, H200\); device 0 is sm_89"):
        bx.grouped_mm(view((T, K)), w_nk(), OFFS)


def test_too_many_groups():
    """The group table shares the block's shared memory with the stages: 12 bytes a group."""
    form = grouped.Form("contiguous", 3000, T, 128, 64, (T, 128))
    with pytest.raises(ExecutionError, match=r"^3000 groups: the group table and the 64x256x64, 5 stages, .* tiles' "
                                             r"stages take more than the 232448 bytes .* at most 2206 groups"):
        grouped._plan(view((T, 64)), w_nk(3000, 64, 128), form, BF16, grouped.Scale("none"), grouped.Scale("none"), 0)
    p = grouped._plan(view((T, 64)), w_nk(2206, 64, 128), form._replace(groups=2206), BF16, grouped.Scale("none"),
                      grouped.Scale("none"), 0).plan
    assert p._gemm.shared_memory == hopper.NARROW.shared_memory(2) + engine.table_bytes(2206) <= 232448


# ---- plans ------------------------------------------------------------------------------------------------


NONE = grouped.Scale("none")


def plan_of(x, w, form, c=BF16, sx=NONE, sw=NONE):
    return grouped._plan(x, w, form, c, sx, sw, 0).plan


def test_contiguous_plan_and_maps(fake_device):
    p = plan_of(view((T, K)), w_nk(), CONTIGUOUS)
    assert p.config == hopper.replace(hopper.WIDE, bk=64)
    assert p.describe() == ("hopper grouped wgmma+TMA, contiguous groups, 128x256x64, 4 stages, 2 consumers, "
                            "group 8, D by direct stores, x K-major, w K-major")
    a, b = fake_device.calls[-2:]
    assert (a.dims, a.box) == ((K, T, 1), (64, 128, 1))  # x: one [total, K] map, rows by offset
    assert (b.dims, b.strides, b.box) == ((K, N, G), (2 * K, 2 * K * N), (64, 256, 1))  # w: a problem per group
    assert p.grid == (132, 1, 1) and not p.operand_a.batched and p.operand_b.batched and p.row_align == 1
    # an M-major x: its TMA boxes start on 16 bytes along M, so tiles start on 8-row boundaries
    assert plan_of(view((T, K), strides=(1, T)), w_nk(), CONTIGUOUS).row_align == 8
    src = p.source
    assert "using scheduler = blasdx::hopper::GroupScheduler<bm, bn, bk, group_m, cluster_m>;" in src
    assert p._gemm.shared_memory == p.config.shared_memory(2) + engine.table_bytes(G) and engine.table_bytes(G) == 112
    assert "static constexpr int x_scaling = 0, y_scaling = 0;" in src


def test_masked_plan_and_small_groups(fake_device):
    w = view((G, K, N))  # N-major w, as stored [G, K, N]
    p = plan_of(view((G, 48, K)), w, grouped.Form("masked", G, 48, N, K, (G, 48, N)), F32)
    assert p.config == hopper.replace(hopper.NARROW, bk=64) and "w MN-major" in p.describe()
    a, b = fake_device.calls[-2:]
    assert (a.dims, a.strides) == ((K, 48, G), (2 * K, 2 * K * 48)) and p.operand_a.batched
    assert (b.dims, b.box) == ((N, K, G), (64, 64, 1))
    assert p.grid == (G * 4, 1, 1)  # fewer units (8 groups x 4 tiles of 256 columns) than SMs: no idle blocks
    # decode-sized groups in the contiguous layout take narrow tiles too
    assert plan_of(view((200, K)), w_nk(), grouped.Form("contiguous", G, 200, N, K, (200, N))).config.bm == 64


def test_fp8_plan():
    sx, sw = grouped.Scale("block", KB, 1), grouped.Scale("block", NB, 1, KB * NB)
    p = plan_of(FP8_X, FP8_W, CONTIGUOUS, BF16, sx, sw)
    assert p.config == hopper.replace(hopper.WIDE, bk=128, promotion=128)
    assert p.describe().endswith("scales: x per block, w per block")
    assert "static constexpr int x_scaling = 2, y_scaling = 2;" in p.source
    p = plan_of(view((T, K), E5M2), FP8_W, CONTIGUOUS, F32, grouped.Scale("row", 1), grouped.Scale("column", 0, 1, N))
    assert "static constexpr int x_scaling = 1, y_scaling = 1;" in p.source and p.b == E4M3


def test_groups_along_k_plan(fake_device):
    x = view((300, K), strides=(1, 300))  # [M, total_k] M-major: dY^T of a [total_k, M] gradient
    w = view((K, N))
    form = grouped.form_of(x, w, OFFS, None)
    assert form == grouped.Form("along_k", G, 300, N, K, (G, 300, N))
    p = plan_of(x, w, form)
    kp = (math.ceil(K / 64) + G) * 64  # every group's K range rounded up to whole steps fits
    assert p.k_padded == kp and p._pad is not None and "KGroupScheduler" in p.source
    a, b = fake_device.calls[-2:]
    assert (a.dims, a.strides, a.pointer) == ((kp, 300, 1), (2 * kp, 2 * kp * 300), 256)  # the padded copies
    assert (b.dims, b.box) == ((kp, N, 1), (64, 256, 1)) and not p.operand_b.batched
    assert p.grid == (96, 1, 1)  # 8 groups x 3 x 4 tiles


def test_staged_store_plans(fake_device, monkeypatch):
    monkeypatch.setattr(grouped, "STORE_BY_TMA", True)
    p = plan_of(view((T, K)), w_nk(), CONTIGUOUS)
    assert p.config.stages == 4 and p._gemm.shared_memory == 230512 + engine.table_bytes(G) <= 232448
    assert "whole tiles of D by TMA" in p.describe() and "store_by_tma = true;" in p.source
    d = fake_device.calls[-1]
    assert (d.dims, d.box, d.pointer) == ((N, T, 1), (64, 64, 1), 256)  # one [total, N] matrix, a new result
    many = plan_of(view((40000, K)), w_nk(200), CONTIGUOUS._replace(groups=200, rows=40000, out_shape=(40000, N)))
    assert many.config.stages == 3, "4 stages, the staging buffers and a table of 200 groups do not fit"
    p = plan_of(view((G, 48, K)), w_nk(), grouped.Form("masked", G, 48, N, K, (G, 48, N)), F32)
    d = fake_device.calls[-1]
    assert (d.dims, d.strides, d.box) == ((N, 48, G), (4 * N, 4 * N * 48), (32, 64, 1)) and p.config.stages == 5
    out = view((T, N), strides=(N + 1, 1), ptr=PTR + 2**32)  # rows of 1554 bytes: TMA cannot write them
    p = grouped._plan(view((T, K)), w_nk(), CONTIGUOUS, BF16, NONE, NONE, 0, (N + 1, 1, 0, out.ptr)).plan
    assert p.store_d is None and "D by direct stores" in p.describe() and p.config.stages == 4


def test_operands_tma_cannot_read_are_repacked(fake_device):
    p = plan_of(view((T, K), E4M3), view((G, K, N), E4M3), CONTIGUOUS)  # fp8 w N-major: wgmma reads K-major only
    assert "w K-major (repacked: float8_e4m3 wgmma reads K-major operands only)" in p.describe()
    assert p._repack is not None and p.route_a.repack is None
    b = fake_device.calls[-1]
    assert (b.pointer, b.dims, b.strides) == (256, (K, N, G), (K, K * N))  # the K-major copy, scratch at a call
    p = plan_of(view((T, K), ptr=PTR + 8), w_nk(), CONTIGUOUS)
    assert "x K-major (repacked: TMA needs a 16-byte aligned address" in p.describe()


def test_groups_along_n_run_transposed(monkeypatch):
    """x [G, M, K] with w [K, total_n]: the contiguous form of w^T and x[g]^T into out^T."""
    planned = []

    class Planned(Exception):
        pass

    def plan(*args):
        planned.append(args)
        raise Planned

    monkeypatch.setattr(grouped, "_plan", plan)
    with pytest.raises(Planned):
        bx.grouped_mm(view((G, 64, K)), view((K, N)), OFFS)
    vx, vw, form, *_, d_layout = planned[0]
    assert form == grouped.Form("contiguous", G, N, 64, K, (N, 64)) and d_layout == (1, N, 0, 0)
    assert (vx.shape, vx.strides) == ((N, K), (1, N)) and (vw.shape, vw.strides) == ((G, K, 64), (64 * K, 1, K))


def test_k_zero_maps_a_placeholder(fake_device):
    p = plan_of(view((T, 0)), w_nk(k=0), grouped.Form("contiguous", G, T, N, 0, (T, N)))
    assert all(call.pointer == 256 for call in fake_device.calls[-2:]) and p.k == 0


# ---- kernels ----------------------------------------------------------------------------------------------


def _checked(source: str, opcode: str, staged: bool = False) -> None:
    compiled = cached_compile(source, engine.KERNEL_NAME, "sm_90a")
    sass = compiled.sass()
    assert compiled.local_memory == 0 and not re.search(r"\b(LDL|STL)\b", sass), "spills"
    assert opcode in sass and "UTMALDG" in sass and ("UTMASTG" in sass) == staged


@pytest.mark.slow
@pytest.mark.parametrize(("name", "a_k_major", "b_k_major", "c"), [
    ("pingpong", True, True, BF16), ("pingpong", False, False, F32), ("narrow", True, False, F16),
])
def test_16bit_kernels_compile(name, a_k_major, b_k_major, c):
    config = hopper.replace(hopper.CONFIGS[name], bk=64)
    _checked(engine.grouped_source(BF16 if c != F16 else F16, BF16 if c != F16 else F16, c, config, a_k_major,
                                   b_k_major), "HGMMA")


@pytest.mark.slow
@pytest.mark.parametrize(("a", "name", "x_mode", "y_mode"), [
    (BF16, "pingpong", "none", "none"), (E4M3, "wide", "block", "column"), (F16, "narrow", "none", "none"),
])
def test_staged_kernels_compile(a, name, x_mode, y_mode):
    config = hopper.replace(hopper.CONFIGS[name], bk=128 // a.size, promotion=128 if a.size == 1 else 0)
    _checked(engine.grouped_source(a, a, BF16, config, True, True, x_mode, y_mode, store_by_tma=True),
             "QGMMA" if a.size == 1 else "HGMMA", staged=True)


@pytest.mark.slow
def test_cluster_kernel_compiles():
    config = hopper.replace(hopper.WIDE_CLUSTERS, bk=64)
    _checked(engine.grouped_source(BF16, BF16, BF16, config, True, True), "HGMMA")


def test_cluster_plan(fake_device):
    config = hopper.replace(hopper.WIDE_CLUSTERS, bk=64)
    p = engine.GroupedPlan(BF16, BF16, BF16, "contiguous", G, T, N, K, hopper.OperandRoute("x", True),
                           hopper.OperandRoute("w", True), (K, 0), (K, N * K), PTR, PTR + 2**30, 132, config=config)
    b = fake_device.calls[-1]
    assert b.box == (64, 128, 1), "each block of the pair loads half of w's tile"
    assert p.grid[0] % 2 == 0 and not p._grid_checked and "cluster_m = 2" in p.source
    with pytest.raises(ValueError, match="groups along K run without clusters"):
        engine.GroupedPlan(BF16, BF16, BF16, "along_k", G, 300, N, K, hopper.OperandRoute("x", True),
                           hopper.OperandRoute("w", True), (0, 0), (0, 0), PTR, PTR, 132, config=config)


@pytest.mark.slow
def test_groups_along_k_kernels_compile():
    config = hopper.replace(hopper.PINGPONG, bk=64)
    _checked(engine.grouped_source(BF16, BF16, F32, config, True, True, along_k=True), "HGMMA")
    pad = cached_compile(engine.pad_source(2, 64), engine.PAD_NAME, "sm_90")
    assert pad.local_memory == 0


@pytest.mark.slow
@pytest.mark.parametrize(("name", "x_mode", "y_mode"), [
    ("wide", "block", "block"), ("wide", "row", "column"), ("narrow", "block", "column"), ("narrow", "none", "none"),
])
def test_fp8_kernels_compile(name, x_mode, y_mode):
    config = hopper.replace(hopper.CONFIGS[name], bk=128, promotion=128)
    _checked(engine.grouped_source(E4M3, E5M2, BF16, config, True, True, x_mode, y_mode), "QGMMA")

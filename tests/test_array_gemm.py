"""bx.matmul / bx.mma without a GPU: the result-type table, every rule's error, and the descriptor
(or multi-block kernel) each call builds from shapes, strides, dtypes and pointer alignment.

Arrays are ArrayViews with made-up device pointers and the device is faked: every check
runs before anything is allocated or launched, so these never touch a GPU.
"""

from __future__ import annotations

import re

import pytest

import blasdx as bx
from blasdx.calls import matmul as array_gemm
from blasdx.base import dtypes as dt
from blasdx.base.errors import DeviceError, ExecutionError

from .array_views import PTR, hopper_calls, views

view, col = views(dt.float16)


@pytest.fixture(autouse=True)
def fake_device(monkeypatch):
    """An sm_90 device with 132 SMs (tensor maps checked by the driver's rules); nothing launches."""
    with hopper_calls(monkeypatch, array_gemm._CALLS):
        yield


def plan(x, y, acc=None, result=None, sm=90, sms=132, out=None, allow_block=True, fast=False):
    if result is None:
        result = acc.dtype if acc is not None else array_gemm.RESULT_TYPES[x.dtype]
    return array_gemm.plan_call(x, y, acc, result, array_gemm._DeviceInfo(sm, sms), 0, out, allow_block, fast)


# ---- the result-type table ----------------------------------------------------------------------


def test_result_types_are_the_tile_libraries_table():
    expected = {
        "int8": "int32", "uint8": "int32", "float8_e4m3": "float16", "float8_e5m2": "float16", "float16": "float16",
        "bfloat16": "float32", "tfloat32": "float32", "float32": "float32", "float64": "float64",
    }
    assert {a.name: c.name for a, c in array_gemm.RESULT_TYPES.items()} == expected
    for a, c in array_gemm.RESULT_TYPES.items():  # every row has a kernel
        assert dt.find_combination(a, a, c, False) is not None


@pytest.mark.parametrize("a", list(array_gemm.RESULT_TYPES), ids=lambda d: d.name)
def test_matmul_plan_has_the_result_type(a):
    p = plan(view((8, 16), a), view((16, 4), a))
    assert p.dtype == array_gemm.RESULT_TYPES[a] and p.shape == (8, 4)
    assert p.desc.precision == (a, a, array_gemm.RESULT_TYPES[a])


def test_matmul_refuses_a_dtype_and_points_to_out_dtype():
    with pytest.raises(ExecutionError, match=r"dtype=.*names its result type out_dtype=.*float16 -> float16"):
        bx.matmul(view((2, 4)), view((4, 2)), dtype="float32")


@pytest.mark.parametrize(("a", "c"), [(dt.bfloat16, dt.bfloat16), (dt.bfloat16, dt.float32), (dt.float16, dt.float32),
                                      (dt.float8_e4m3, dt.float32), (dt.int8, dt.int32)], ids=str)
def test_matmul_out_dtype_picks_a_row_of_the_table(a, c):
    p = plan(view((8, 16), a), view((16, 4), a), result=array_gemm.result_type(a, c))
    assert p.dtype == c and p.desc.precision == (a, a, c)


@pytest.mark.parametrize(("a", "out_dtype", "expected"), [
    (dt.bfloat16, dt.float16, r"out_dtype: bfloat16 inputs give float32 or bfloat16, not float16"),
    (dt.float16, "bfloat16", r"out_dtype: float16 inputs give float16 or float32, not bfloat16"),
    (dt.float32, "float64", r"out_dtype: float32 inputs give float32, not float64"),
    (dt.float16, "no-such-type", r"out_dtype: 'no-such-type' is not an element type blasdx knows"),
], ids=lambda v: getattr(v, "name", None) or str(v)[:12])
def test_matmul_refuses_an_out_dtype_outside_the_table(a, out_dtype, expected):
    with pytest.raises(ExecutionError, match=expected):
        bx.matmul(view((2, 4), a), view((4, 2), a), out_dtype=out_dtype, stream=0)


def test_matmul_refuses_an_unknown_input_type():
    with pytest.raises(ExecutionError, match=r"x: matmul takes int8, uint8, .* not int32"):
        bx.matmul(view((2, 4), dt.int32), view((4, 2), dt.int32), stream=0)


# ---- the rules ----------------------------------------------------------------------------------


def test_rank_rule():
    with pytest.raises(ExecutionError, match=r'x: shape \(4,\) has rank 1; \(rule: "x, y and acc are matrices'):
        bx.matmul(view((4,)), view((4, 2)), stream=0)
    with pytest.raises(ExecutionError, match=r"y: shape \(1, 1, 4, 2\) has rank 4"):
        bx.matmul(view((2, 4)), view((1, 1, 4, 2)), stream=0)


def test_inner_dimension_rule():
    with pytest.raises(ExecutionError, match=r"do not multiply \(K = 4 vs 5\); \(rule: \"x is \[\.\.\., M, K\]"):
        bx.matmul(view((2, 4)), view((5, 2)), stream=0)


def test_batch_rule_quotes_a_equals_c_or_one():
    with pytest.raises(ExecutionError, match=r"batch 3 and y: batch 2 do not broadcast.*A = C or A = 1"):
        bx.matmul(view((3, 2, 4)), view((2, 4, 2)), stream=0)
    with pytest.raises(ExecutionError, match=r"x: batch 3 does not match acc's batch 2.*A = C or A = 1"):
        bx.mma(view((3, 2, 4)), view((4, 2)), view((2, 2, 2), dt.float32), stream=0)


def test_batches_broadcast():
    assert plan(view((1, 2, 4)), view((5, 4, 2))).shape == (5, 2, 2)
    assert plan(view((5, 2, 4)), view((4, 2))).shape == (5, 2, 2)
    assert plan(view((2, 4)), view((4, 2))).shape == (2, 2)
    assert plan(view((1, 2, 4)), view((1, 4, 2)), view((7, 2, 2), dt.float32)).shape == (7, 2, 2)


def test_acc_fixes_shape_and_batch():
    with pytest.raises(ExecutionError, match=r"acc: shape \(2, 3\) does not hold x @ y of M x N = 2 x 2"):
        bx.mma(view((2, 4)), view((4, 2)), view((2, 3), dt.float32), stream=0)
    with pytest.raises(ExecutionError, match=r"x: rank 3 \(batch 2\) but acc has rank 2"):
        bx.mma(view((2, 2, 4)), view((4, 2)), view((2, 2), dt.float32), stream=0)


def test_same_dtype_rule_no_promotion():
    with pytest.raises(ExecutionError, match=r"x: float16 and y: bfloat16 differ; \(rule: \"x and y have the same"):
        bx.matmul(view((2, 4)), view((4, 2), dt.bfloat16), stream=0)


def test_unsupported_combination_lists_the_rows():
    with pytest.raises(ExecutionError, match=r"bfloat16 x bfloat16 \+ float16 is not supported.*float16 x float16 "
                                             r"-> float16 \(sm_75\+\).*int8 x int8 -> int32"):
        bx.mma(view((2, 4), dt.bfloat16), view((4, 2), dt.bfloat16), view((2, 2), dt.float16), stream=0)


def test_fast_accumulation_only_for_fp8():
    with pytest.raises(ExecutionError, match=r"fast_accumulation=True with float16 inputs; \(rule: \"fast_acc"):
        bx.mma(view((2, 4)), view((4, 2)), view((2, 2), dt.float32), fast_accumulation=True, stream=0)
    with pytest.raises(ExecutionError, match=r"fast_accumulation: expected True or False"):
        bx.mma(view((2, 4)), view((4, 2)), view((2, 2), dt.float32), fast_accumulation=1, stream=0)


def test_fast_accumulation_selects_the_tensor_core_accumulator_on_sm90():
    x, y = view((64, 128), dt.float8_e4m3), col((128, 32), dt.float8_e4m3)
    acc = view((64, 32), dt.float32)
    fast = plan(x, y, acc, fast=True)
    assert fast.desc.arch == "sm_90a" and fast.desc.instruction.startswith("wgmma")
    slow = plan(x, y, acc)
    assert slow.desc.arch == "sm_90" and slow.desc.instruction == "mma.sync.m16n8k32"
    assert plan(x, y, acc, fast=True, sm=89).desc.arch == "sm_89"  # no effect elsewhere
    # a row-major y is transposed into K-major panels on its way into shared memory: wgmma still
    assert plan(x, view((128, 32), dt.float8_e4m3), acc, fast=True).desc.instruction.startswith("wgmma")


def test_strides_must_be_row_or_column_major():
    with pytest.raises(ExecutionError, match=r"x: element strides \(8, 2\) .* neither row-major"):
        bx.matmul(view((2, 4), strides=(8, 2)), view((4, 2)), stream=0)
    with pytest.raises(ExecutionError, match=r"negative strides"):
        bx.matmul(view((2, 4), strides=(-4, 1)), view((4, 2)), stream=0)


def test_out_must_match_acc():
    with pytest.raises(ExecutionError, match=r"out: shape \(2, 2\) and type float16 do not match the result's "
                                             r"\(2, 2\) float32"):
        bx.mma(view((2, 4)), view((4, 2)), view((2, 2), dt.float32, ptr=PTR + 4096),
               out=view((2, 2), dt.float16, ptr=PTR + 8192), stream=0)


def test_out_must_not_overlap_the_inputs():
    x = view((64, 64))
    with pytest.raises(ExecutionError, match=r"out: its memory overlaps x's"):
        bx.mma(x, view((64, 64), ptr=PTR + 65536), view((64, 64), ptr=PTR + 2 * 65536), out=view((64, 64)),
               stream=0)


def test_fp8_needs_sm89():
    with pytest.raises(DeviceError, match=r"float8_e4m3 x float8_e4m3 -> float16 \(sm_89\+\) needs compute "
                                          r"capability 8\.9 or newer; device 0 is 8\.0"):
        plan(view((2, 32), dt.float8_e4m3), view((32, 2), dt.float8_e4m3), sm=80)


def test_tf32_marks_float32_arrays_only():
    with pytest.raises(ExecutionError, match=r"x: blasdx.tf32\(\) marks float32 arrays, but this one holds float16"):
        bx.matmul(bx.tf32(view((2, 4))), bx.tf32(view((4, 2))), stream=0)
    with pytest.raises(ExecutionError, match=r"x: tfloat32 and y: float32 differ"):
        bx.matmul(bx.tf32(view((2, 4), dt.float32)), view((4, 2), dt.float32), stream=0)


# ---- the descriptor each call builds --------------------------------------------------------------


def test_layouts_and_leading_dimensions_come_from_the_strides():
    x = view((10, 20, 30), dt.float16, strides=(20 * 40, 40, 1))  # row-major, ld 40
    y = col((10, 30, 12), dt.float16)  # column-major, ld 30
    p = plan(x, y, view((10, 20, 12), dt.float32), sms=8)
    assert p.kind == "block"
    d = p.desc
    assert d.size == (20, 12, 30)
    assert d.precision == (dt.float16, dt.float16, dt.float32)
    assert (d.arrangement.a, d.arrangement.b, d.arrangement.c) == (bx.row_major, bx.col_major, bx.row_major)
    assert d.leading_dimension == (40, 30, 12)
    assert d.sm == 90 and d.arch == "sm_90"


def test_alignment_comes_from_pointers_and_batch_strides():
    assert plan(view((2, 4)), view((4, 2))).desc.alignment == (16, 16, 16)
    assert plan(view((2, 4), ptr=PTR + 2), view((4, 2), ptr=PTR + 8)).desc.alignment == (2, 8, 16)
    batched = view((3, 4, 6), strides=(26, 6, 1))  # 52-byte batch stride: 4-byte aligned problems
    assert plan(batched, view((6, 2))).desc.alignment[0] == 4


def test_in_place_mma_describes_acc_layout():
    acc = col((20, 12), dt.float32)
    p = plan(view((20, 30)), view((30, 12)), acc, out=acc)
    assert p.desc.arrangement.c is bx.col_major and p.desc.leading_dimension[2] == 20


def test_big_problems_tile_over_a_grid():
    assert plan(view((4096, 4096)), col((4096, 4096))).kind == "hopper"  # sm_90: the wgmma engine
    p = plan(view((4096, 4096)), col((4096, 4096)), sm=80)
    assert p.kind == "tiled"
    assert p.kernel.desc.size == (128, 128, 32) and p.kernel.threads == 128  # f16 -> f16: the measured best
    bf = plan(view((4096, 4096), dt.bfloat16), col((4096, 4096), dt.bfloat16), sm=80)
    assert bf.kernel.desc.size == (128, 128, 64) and bf.kernel.threads == 256 and bf.kernel.stages == 3
    assert p.kernel.grid(4096, 4096, 1) == (32 * 32, 1, 1)
    assert p.kernel.desc.arrangement.b is bx.col_major


def test_one_block_per_problem_when_the_batch_fills_the_gpu():
    many = plan(view((132, 200, 200)), view((200, 200)))
    few = plan(view((4, 200, 200)), view((200, 200)), sm=80)
    assert many.kind == "block" and many.desc.size == (200, 200, 200)
    assert few.kind == "tiled"  # 4 tiles per problem spread 4 problems over 16 blocks
    assert plan(view((4, 200, 200)), view((200, 200))).kind == "hopper"
    assert plan(view((1, 64, 64)), view((64, 64))).kind == "block"  # one tile per problem anyway


def test_tiled_copy_width_follows_alignment():
    p = plan(view((1000, 1000), ptr=PTR + 2), view((1000, 1000)), sm=80)
    assert (p.kernel.vec_a, p.kernel.vec_b) == (2, 16)
    p = plan(view((1000, 1000), strides=(1004, 1)), view((1000, 1000)), sm=80)
    assert p.kernel.vec_a == 8  # 2008-byte rows


def test_mma_that_reads_acc_and_writes_out_can_stay_multi_block():
    p = plan(view((8, 8)), view((8, 8)), view((8, 8), dt.float32), allow_block=False, sm=80)
    assert p.kind == "tiled"
    assert plan(view((8, 8)), view((8, 8)), view((8, 8), dt.float32), allow_block=False).kind == "hopper"


def test_empty_shapes_plan_without_a_kernel_build():
    p = plan(view((0, 4)), view((4, 3)))
    assert p.shape == (0, 3)
    p = plan(view((5, 0)), view((0, 3)), view((5, 3), dt.float32))
    assert p.kind == "tiled" and p.k == 0  # K = 0: the result is acc


# ---- the multi-block kernels compile for every input type --------------------------------------------

#: matmul's default result per input type, and bf16 -> bf16 (out_dtype): f32 sums stored as bf16
TILED_TYPES = [*array_gemm.RESULT_TYPES.items(), (dt.bfloat16, dt.bfloat16)]
TILED_CASES = [
    (a, c, sm, a_row, b_row)
    for a, c in TILED_TYPES
    for sm in (75, 80, 89, 90)
    if dt.find_combination(a, a, c, False).min_sm <= sm
    for a_row, b_row in ((True, True), (False, False))
]
TILED_OPCODES = {"float16": "HMMA", "bfloat16": "HMMA", "tfloat32": "HMMA", "float32": "FFMA", "float64": "DMMA",
                 "int8": "IMMA", "uint8": "IMMA", "float8_e4m3": "QMMA|HMMA", "float8_e5m2": "QMMA|HMMA"}


@pytest.mark.slow
@pytest.mark.parametrize("a,c,sm,a_row,b_row", TILED_CASES,
                         ids=[f"{a.name}-{c.name}-sm{sm}-{'R' if r else 'C'}{'R' if s else 'C'}"
                              for a, c, sm, r, s in TILED_CASES])
def test_tiled_kernels_compile_without_spills(a, c, sm, a_row, b_row, tmp_path, monkeypatch):
    from blasdx.calls import tiled

    monkeypatch.setenv("BLASDX_CACHE_DIR", str(tmp_path))
    kernel = tiled.tiled_kernel(a, a, c, a_row, b_row, 4096, 4096, sm, 16, 4 if a.size <= 4 else 8)
    compiled = kernel.compile()
    assert compiled.local_memory == 0, f"{kernel.desc!r} spills"
    assert compiled.registers <= 65536 // kernel.threads
    sass = compiled.sass()
    expected = TILED_OPCODES[a.name]
    if a == dt.float64 and sm < 80:
        expected = "DFMA"
    if a in (dt.float16,) and sm < 80:
        expected = "HMMA"
    assert re.search(rf"\b({expected})\b", sass), f"{kernel.desc!r}: no {expected}"
    assert not re.search(r"\b(LDL|STL)\b", sass)
    if sm >= 80 and a.size <= 4:
        assert "LDGSTS" in sass, "16-byte copies go through cp.async"

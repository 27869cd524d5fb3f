"""Description and execution operators: argument checks, values, repr, pickling."""

from __future__ import annotations

import copy
import pickle
import re
import warnings

import ml_dtypes
import numpy as np
import pytest

import blasdx as bx
from blasdx.describe import operators as ops


def _tm(a, b):
    """TransposeMode without the deprecation warning (the warning has its own tests)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return bx.TransposeMode(a, b)


# ---------------------------------------------------------------------------------------------- Size


@pytest.mark.parametrize("args", [(1, 1, 1), (64, 64, 64), (17, 9, 5), (1, 1024, 3), (np.int64(3), np.int32(4), 5)])
def test_size_accepts_positive_integers(args):
    s = bx.Size(*args)
    assert (s.m, s.n, s.k) == tuple(int(a) for a in args)
    assert all(type(v) is int for v in (s.m, s.n, s.k))


@pytest.mark.parametrize(
    "args, words",
    [
        ((0, 1, 1), "Size: m must be a positive integer, got 0"),
        ((1, -4, 1), "Size: n must be a positive integer, got -4"),
        ((1, 1, 0), "Size: k must be a positive integer, got 0"),
        ((1.5, 1, 1), "Size: m must be a positive integer, got 1.5"),
        ((64.0, 1, 1), "Size: m must be a positive integer, got 64.0"),
        (("64", 1, 1), "Size: m must be a positive integer, got '64'"),
        ((True, 1, 1), "Size: m must be a positive integer, got True"),
        ((1, None, 1), "Size: n must be a positive integer, got None"),
    ],
)
def test_size_rejects(args, words):
    with pytest.raises(bx.DescriptorError, match=re.escape(words)):
        bx.Size(*args)


def test_size_of_two_extents_is_a_trsm_size():
    """Size(M, N) (no K) describes a TRSM; a GEMM refuses it at + (tests/test_trsm.py pins the TRSM side)."""
    s = bx.Size(64, 32)
    assert (s.m, s.n, s.k) == (64, 32, None)
    assert repr(s) == "Size(64, 32)"
    with pytest.raises(bx.DescriptorError, match=re.escape("Size(64, 32) and Function.MM: a GEMM needs Size(M, N, K)")):
        s + bx.Function.MM
    with pytest.raises(TypeError):
        bx.Size(64)  # type: ignore[call-arg]


# ---------------------------------------------------------------------------------------------- Precision


@pytest.mark.parametrize(
    "args, expected",
    [
        ((bx.float16,), (bx.float16, bx.float16, bx.float16)),
        ((bx.float16, None, bx.float32), (bx.float16, bx.float16, bx.float32)),
        ((bx.float16, bx.float16, bx.float32), (bx.float16, bx.float16, bx.float32)),
        (("float16", "float16", "float32"), (bx.float16, bx.float16, bx.float32)),
        (("bf16", "bf16", "f32"), (bx.bfloat16, bx.bfloat16, bx.float32)),
        ((ml_dtypes.bfloat16, ml_dtypes.bfloat16, np.float32), (bx.bfloat16, bx.bfloat16, bx.float32)),
        ((np.float16,), (bx.float16, bx.float16, bx.float16)),
        ((np.dtype("float64"),), (bx.float64, bx.float64, bx.float64)),
        ((np.float32,), (bx.float32, bx.float32, bx.float32)),
        (("tf32", "tf32", "float32"), (bx.tfloat32, bx.tfloat32, bx.float32)),
        ((ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, np.float16), (bx.float8_e4m3, bx.float8_e5m2, bx.float16)),
        ((ml_dtypes.float8_e4m3fn, None, "float32"), (bx.float8_e4m3, bx.float8_e4m3, bx.float32)),
        (("e5m2", "e4m3", "f32"), (bx.float8_e5m2, bx.float8_e4m3, bx.float32)),
        ((np.int8, np.uint8, np.int32), (bx.int8, bx.uint8, bx.int32)),
        ((bx.uint8, None, bx.int32), (bx.uint8, bx.uint8, bx.int32)),
    ],
)
def test_precision_accepts(args, expected):
    p = bx.Precision(*args)
    assert (p.a, p.b, p.c) == expected
    assert all(isinstance(t, bx.DType) for t in (p.a, p.b, p.c))


def test_precision_keywords():
    assert bx.Precision(bx.float16, c=bx.float32) == bx.Precision(bx.float16, bx.float16, bx.float32)
    assert bx.Precision(a="int8", b="uint8", c="int32") == bx.Precision(bx.int8, bx.uint8, bx.int32)


def test_precision_equality_by_meaning():
    assert bx.Precision(bx.float16) == bx.Precision(bx.float16, bx.float16, bx.float16)
    assert bx.Precision("half") == bx.Precision(np.float16, "f16", bx.float16)
    assert hash(bx.Precision("half")) == hash(bx.Precision(np.float16, "f16", bx.float16))
    assert bx.Precision(bx.float16) != bx.Precision(bx.float16, bx.float16, bx.float32)
    assert bx.Precision(bx.tfloat32, bx.tfloat32, bx.float32) != bx.Precision(bx.float32)


@pytest.mark.parametrize(
    "args, first, second",
    [
        ((bx.int8, bx.float16, bx.int32), "int8", "float16"),
        ((bx.float16, bx.int8, bx.float32), "float16", "int8"),
        (("uint8", "bf16", "f32"), "uint8", "bfloat16"),
        ((bx.float16, bx.float16, bx.int32), "float16", "int32"),
        ((bx.int8, bx.int8, bx.float32), "int8", "float32"),
        ((bx.float8_e4m3, bx.float8_e4m3, bx.int32), "float8_e4m3", "int32"),
        ((bx.int8, None, bx.float16), "int8", "float16"),
    ],
)
def test_precision_integral_floating_mix(args, first, second):
    with pytest.raises(bx.DescriptorError, match=f"Precision: .*{first} \\((integral|floating point)\\).*{second}") as info:
        bx.Precision(*args)
    assert not isinstance(info.value, bx.UnsupportedError)  # malformed, not merely unsupported
    assert "integral" in str(info.value) or "must be floating point" in str(info.value)


@pytest.mark.parametrize(
    "args, shown",
    [
        ((bx.float16, bx.bfloat16, bx.float32), "Precision(float16, bfloat16, float32)"),
        ((bx.bfloat16, bx.bfloat16, bx.float16), "Precision(bfloat16, bfloat16, float16)"),
        ((bx.tfloat32,), "Precision(tfloat32, tfloat32, tfloat32)"),
        ((bx.int8,), "Precision(int8, int8, int8)"),
        ((bx.int32,), "Precision(int32, int32, int32)"),
        ((bx.float32, bx.float32, bx.float16), "Precision(float32, float32, float16)"),
        ((bx.float64, bx.float64, bx.float32), "Precision(float64, float64, float32)"),
        ((bx.float8_e4m3,), "Precision(float8_e4m3, float8_e4m3, float8_e4m3)"),
        ((bx.float8_e4m3, bx.float8_e4m3, bx.bfloat16), "Precision(float8_e4m3, float8_e4m3, bfloat16)"),
        ((bx.float16, bx.float32, bx.float32), "Precision(float16, float32, float32)"),
    ],
)
def test_precision_unsupported_lists_rows(args, shown):
    with pytest.raises(bx.UnsupportedError, match=re.escape(shown) + " is not a supported") as info:
        bx.Precision(*args)
    text = str(info.value)
    # the whole table, real and complex, so the user can pick one
    for row in (
        "float16 x float16 -> float32 (sm_75+)",
        "bfloat16 x bfloat16 -> float32 (sm_80+)",
        "tfloat32 x tfloat32 -> float32 (sm_80+)",
        "float8_e4m3 x float8_e5m2 -> float16 (sm_89+)",
        "uint8 x uint8 -> int32 (sm_80+)",
        "complex float64 x float64 -> float64 (sm_75+)",
    ):
        assert row in text


@pytest.mark.parametrize(
    "args, words",
    [
        (("bogus",), "Precision: a: 'bogus' is not an element type blasdx knows"),
        ((bx.float16, "bogus"), "Precision: b: 'bogus' is not an element type"),
        ((bx.float16, None, "bogus"), "Precision: c: 'bogus' is not an element type"),
        (("complex64",), "Precision: a: .*complex.*Type.complex"),
        ((np.complex128,), "Precision: a: .*complex.*Type.complex"),
        ((ml_dtypes.float8_e4m3,), "Precision: a: .*float8_e4m3fn"),
        ((None,), "Precision: a: None is not an element type"),
        ((np.int64,), "Precision: a: .*not an element type"),
    ],
)
def test_precision_rejects_unknown_types(args, words):
    with pytest.raises(bx.DescriptorError, match=words):
        bx.Precision(*args)


def test_precision_rejects_a_complex_dtype():
    from blasdx.base.dtypes import complex_of

    with pytest.raises(bx.DescriptorError, match="real part type \\(float32\\) and add Type.complex"):
        bx.Precision(complex_of(bx.float32))


# ---------------------------------------------------------------------------------------------- Type, Function


def test_type_and_function_values():
    assert [t.name for t in bx.Type] == ["real", "complex"]
    assert [f.name for f in bx.Function] == ["MM", "TRSM"]
    assert repr(bx.Type.real) == "Type.real"
    assert repr(bx.Type.complex) == "Type.complex"
    assert repr(bx.Function.MM) == "Function.MM"


# ---------------------------------------------------------------------------------------------- Arrangement


def test_layout_names_and_aliases():
    assert bx.row_major is ops.Layout.row_major and bx.col_major is ops.Layout.col_major
    # cuBLASDx: left_layout is column-major (CuTe's LayoutLeft), right_layout is row-major
    assert bx.left_layout is bx.col_major
    assert bx.right_layout is bx.row_major


@pytest.mark.parametrize(
    "args, expected",
    [
        ((bx.row_major,), (bx.row_major, bx.col_major, bx.col_major)),
        ((bx.col_major,), (bx.col_major, bx.col_major, bx.col_major)),
        ((bx.row_major, bx.row_major), (bx.row_major, bx.row_major, bx.col_major)),
        ((bx.col_major, bx.row_major, bx.row_major), (bx.col_major, bx.row_major, bx.row_major)),
        ((bx.left_layout, bx.right_layout, bx.left_layout), (bx.col_major, bx.row_major, bx.col_major)),
        (("row_major", "col_major", "row_major"), (bx.row_major, bx.col_major, bx.row_major)),
        (("ROW-MAJOR", "col", "row"), (bx.row_major, bx.col_major, bx.row_major)),
        (("left_layout", "right_layout"), (bx.col_major, bx.row_major, bx.col_major)),
    ],
)
def test_arrangement_accepts(args, expected):
    arr = bx.Arrangement(*args)
    assert (arr.a, arr.b, arr.c) == expected


@pytest.mark.parametrize(
    "args, words",
    [
        (("diagonal",), "Arrangement: a must be row_major or col_major, got 'diagonal'"),
        ((bx.row_major, 1), "Arrangement: b must be row_major or col_major, got 1"),
        ((bx.row_major, bx.col_major, None), "Arrangement: c must be row_major or col_major, got None"),
        ((bx.Transpose.N,), "Arrangement: a must be row_major or col_major"),
    ],
)
def test_arrangement_rejects(args, words):
    with pytest.raises(bx.DescriptorError, match=re.escape(words)):
        bx.Arrangement(*args)


def test_arrangement_repr_and_equality():
    assert repr(bx.Arrangement(bx.row_major)) == "Arrangement(row_major, col_major, col_major)"
    assert bx.Arrangement(bx.row_major) == bx.Arrangement("row_major", "col_major", "col_major")
    assert bx.Arrangement(bx.row_major) != bx.Arrangement(bx.col_major)


# ---------------------------------------------------------------------------------------------- TransposeMode


def test_transpose_mode_warns():
    with pytest.warns(DeprecationWarning, match="TransposeMode is deprecated; use Arrangement") as record:
        bx.TransposeMode(bx.Transpose.N, bx.Transpose.T)
    assert record[0].filename == __file__  # points at the caller, not at blasdx


T, N, C = bx.Transpose.T, bx.Transpose.N, bx.Transpose.C
R, K = bx.row_major, bx.col_major


@pytest.mark.parametrize(
    "a, b, arrangement, conjugate",
    [
        (N, N, (K, K, K), (False, False)),
        (T, N, (R, K, K), (False, False)),
        (N, T, (K, R, K), (False, False)),
        (T, T, (R, R, K), (False, False)),
        (C, N, (R, K, K), (True, False)),
        (N, C, (K, R, K), (False, True)),
        (C, C, (R, R, K), (True, True)),
        (C, T, (R, R, K), (True, False)),
        ("N", "T", (K, R, K), (False, False)),
        ("conj_transposed", "non_transposed", (R, K, K), (True, False)),
    ],
)
def test_transpose_mode_maps_to_arrangement(a, b, arrangement, conjugate):
    tm = _tm(a, b)
    arr = tm.as_arrangement()
    assert isinstance(arr, bx.Arrangement)
    assert (arr.a, arr.b, arr.c) == arrangement
    assert tm.conjugate == conjugate


@pytest.mark.parametrize("args, which", [(("X", "N"), "a"), ((N, "row_major"), "b"), ((bx.row_major, N), "a")])
def test_transpose_mode_rejects(args, which):
    with pytest.raises(bx.DescriptorError, match=f"TransposeMode: {which} must be N, T or C"):
        _tm(*args)


def test_transpose_mode_repr():
    assert repr(_tm(N, C)) == "TransposeMode(Transpose.N, Transpose.C)"


# ---------------------------------------------------------------------------------------------- LeadingDimension


def test_leading_dimension_accepts():
    ld = bx.LeadingDimension(64, np.int64(80), 1)
    assert (ld.lda, ld.ldb, ld.ldc) == (64, 80, 1)
    assert repr(ld) == "LeadingDimension(64, 80, 1)"


@pytest.mark.parametrize(
    "args, words",
    [
        ((0, 1, 1), "LeadingDimension: lda must be a positive integer, got 0"),
        ((1, -1, 1), "LeadingDimension: ldb must be a positive integer, got -1"),
        ((1, 1, 2.0), "LeadingDimension: ldc must be a positive integer, got 2.0"),
    ],
)
def test_leading_dimension_rejects(args, words):
    with pytest.raises(bx.DescriptorError, match=re.escape(words)):
        bx.LeadingDimension(*args)


# ---------------------------------------------------------------------------------------------- Alignment


@pytest.mark.parametrize("args", [(1, 1, 1), (2, 4, 8), (16, 16, 16), (16, 1, 2)])
def test_alignment_accepts_powers_of_two(args):
    al = bx.Alignment(*args)
    assert (al.a, al.b, al.c) == args


@pytest.mark.parametrize(
    "args, words",
    [
        ((3, 4, 4), "Alignment: a must be a power of two no larger than 16 bytes, got 3"),
        ((4, 12, 4), "Alignment: b must be a power of two no larger than 16 bytes, got 12"),
        ((4, 4, 32), "Alignment: c must be a power of two no larger than 16 bytes, got 32"),
        ((4, 4, 6), "Alignment: c must be a power of two"),
        ((0, 4, 4), "Alignment: a must be a positive integer, got 0"),
        ((4, -8, 4), "Alignment: b must be a positive integer, got -8"),
    ],
)
def test_alignment_rejects(args, words):
    with pytest.raises(bx.DescriptorError, match=re.escape(words)):
        bx.Alignment(*args)


def test_max_alignment():
    assert bx.MaxAlignment == bx.Alignment(16, 16, 16)
    assert (bx.MaxAlignment.a, bx.MaxAlignment.b, bx.MaxAlignment.c) == (16, 16, 16)
    assert repr(bx.MaxAlignment) == "MaxAlignment"
    assert repr(bx.Alignment(16, 16, 16)) == "MaxAlignment"
    assert repr(bx.Alignment(16, 8, 4)) == "Alignment(16, 8, 4)"


# ---------------------------------------------------------------------------------------------- SM


@pytest.mark.parametrize(
    "cc, expected",
    [
        (75, 75), (80, 80), (86, 86), (87, 87), (89, 89), (90, 90), (100, 100), (120, 120),
        (750, 75), (800, 80), (860, 86), (870, 87), (890, 89), (900, 90), (1000, 100), (1200, 120),
        (np.int32(90), 90),
    ],
)
def test_sm_accepts(cc, expected):
    sm = bx.SM(cc)
    assert sm.cc == expected
    assert sm.arch == f"sm_{expected}"
    assert sm == bx.SM(expected)
    assert repr(sm) == f"SM({expected})"


@pytest.mark.parametrize("cc", [70, 72, 61, 91, 101, 110, 121, 905, 910, 1001, 1209, 1005, 7500, 9000, 999])
def test_sm_rejects_unknown_architectures(cc):
    with pytest.raises(bx.DescriptorError, match=rf"SM: {cc} is not a supported architecture; expected one of "
                                                  r"75, 80, 86, 87, 89, 90, 100, 120, or the same times ten "
                                                  r"\(SM\(900\) is SM\(90\)\)$"):
        bx.SM(cc)


@pytest.mark.parametrize("cc", [0, -90, 9.0, "90", None, True])
def test_sm_rejects_non_integers(cc):
    with pytest.raises(bx.DescriptorError, match="SM: cc must be a positive integer"):
        bx.SM(cc)


@pytest.mark.parametrize("cc, arch", [(90, "sm_90a"), (900, "sm_90a"), (100, "sm_100a"), (1200, "sm_120a")])
def test_sm_arch_specific(cc, arch):
    sm = bx.SM(cc, arch_specific=True)
    assert sm.arch == arch
    assert sm != bx.SM(cc)
    assert repr(sm) == f"SM({sm.cc}, arch_specific=True)"


@pytest.mark.parametrize("cc", [75, 80, 86, 87, 89, 800, 890])
def test_sm_arch_specific_only_for_90_100_120(cc):
    with pytest.raises(bx.DescriptorError, match="arch_specific=True exists only for SM 90, 100, 120, not"):
        bx.SM(cc, arch_specific=True)


@pytest.mark.parametrize("flag", [1, "yes", None])
def test_sm_arch_specific_must_be_bool(flag):
    with pytest.raises(bx.DescriptorError, match="SM: arch_specific must be True or False"):
        bx.SM(90, arch_specific=flag)


# ---------------------------------------------------------------------------------------------- Block, BlockDim


def test_block():
    assert bx.Block() == bx.Block()
    assert hash(bx.Block()) == hash(bx.Block())
    assert repr(bx.Block()) == "Block()"


@pytest.mark.parametrize(
    "args, dims, threads",
    [
        ((32,), (32, 1, 1), 32),
        ((128,), (128, 1, 1), 128),
        ((1024,), (1024, 1, 1), 1024),
        ((16, 2), (16, 2, 1), 32),
        ((32, 32), (32, 32, 1), 1024),
        ((8, 4, 2), (8, 4, 2), 64),
        ((1, 32), (1, 32, 1), 32),
        ((1, 1, 64), (1, 1, 64), 64),
        ((2, 8, 64), (2, 8, 64), 1024),
    ],
)
def test_block_dim_accepts(args, dims, threads):
    bd = bx.BlockDim(*args)
    assert bd.as_tuple() == dims
    assert bd.threads == threads


@pytest.mark.parametrize(
    "args, words",
    [
        ((0,), "BlockDim: x must be a positive integer, got 0"),
        ((32, 0), "BlockDim: y must be a positive integer, got 0"),
        ((32, 1, -1), "BlockDim: z must be a positive integer, got -1"),
        ((2048,), "BlockDim: x must be at most 1024, got 2048"),
        ((1, 1025), "BlockDim: y must be at most 1024, got 1025"),
        ((16,), "BlockDim: x*y*z must be between 32 and 1024 threads, got 16*1*1 = 16"),
        ((1,), "between 32 and 1024 threads, got 1*1*1 = 1"),
        ((32, 32, 2), "between 32 and 1024 threads, got 32*32*2 = 2048"),
        ((64, 32), "got 64*32*1 = 2048"),
        ((1, 1, 128), "BlockDim: z must be at most 64, got 128"),  # CUDA: blockDim.z <= 64
        ((1, 1, 65), "BlockDim: z must be at most 64, got 65"),
    ],
)
def test_block_dim_rejects(args, words):
    with pytest.raises(bx.DescriptorError, match=re.escape(words)):
        bx.BlockDim(*args)


def test_block_dim_repr_and_equality():
    assert repr(bx.BlockDim(128)) == "BlockDim(128)"
    assert repr(bx.BlockDim(64, 2)) == "BlockDim(64, 2, 1)"
    assert repr(bx.BlockDim(8, 4, 2)) == "BlockDim(8, 4, 2)"
    assert bx.BlockDim(128) == bx.BlockDim(128, 1, 1)
    assert bx.BlockDim(128) != bx.BlockDim(64, 2)


# ---------------------------------------------------------------------------------------------- all operators

ALL_OPERATORS = [
    bx.Size(64, 32, 16),
    bx.Precision(bx.bfloat16, bx.bfloat16, bx.float32),
    bx.Precision(bx.float8_e4m3, bx.float8_e5m2, bx.float16),
    bx.Type.real,
    bx.Type.complex,
    bx.Function.MM,
    bx.Arrangement(bx.col_major, bx.row_major, bx.row_major),
    _tm(T, C),
    bx.LeadingDimension(72, 40, 64),
    bx.Alignment(16, 8, 4),
    bx.MaxAlignment,
    bx.SM(900),
    bx.SM(100, arch_specific=True),
    bx.Block(),
    bx.BlockDim(64, 2),
]
OP_IDS = [repr(op) for op in ALL_OPERATORS]


@pytest.mark.parametrize("op", ALL_OPERATORS, ids=OP_IDS)
def test_operators_pickle(op):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rebuilding a TransposeMode must not warn again
        back = pickle.loads(pickle.dumps(op))
    assert back == op
    assert hash(back) == hash(op)
    assert repr(back) == repr(op)
    assert copy.deepcopy(op) == op


@pytest.mark.parametrize("op", [op for op in ALL_OPERATORS if not isinstance(op, (bx.Type, bx.Function))], ids=repr)
def test_operators_are_frozen(op):
    field = next(iter(vars(op)), "anything")
    with pytest.raises(AttributeError):
        setattr(op, field, 1)
    with pytest.raises(AttributeError):
        op.brand_new = 1


@pytest.mark.parametrize("op", ALL_OPERATORS, ids=OP_IDS)
def test_operators_are_hashable_values(op):
    assert {op: 1}[op] == 1
    assert op == op


def test_operators_of_different_kinds_differ():
    assert len(set(ALL_OPERATORS)) == len(ALL_OPERATORS)

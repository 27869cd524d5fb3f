"""Descriptor algebra: composition, cross-operator rules, validation, value semantics, properties."""

from __future__ import annotations

import copy
import itertools
import pickle
import re
import warnings
from functools import reduce

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import blasdx as bx
from blasdx.base import dtypes as dt

R, K = bx.row_major, bx.col_major
F16, BF16, TF32, F32, F64 = bx.float16, bx.bfloat16, bx.tfloat32, bx.float32, bx.float64
E4, E5, I8, U8, I32 = bx.float8_e4m3, bx.float8_e5m2, bx.int8, bx.uint8, bx.int32


def _tm(a, b):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return bx.TransposeMode(a, b)


def total(*operators):
    """Left fold with +."""
    return reduce(lambda x, y: x + y, operators)


def gemm(*extra, size=(64, 64, 64), precision=(F16, F16, F32), sm=80):
    return total(bx.Size(*size), bx.Precision(*precision), bx.Function.MM, bx.SM(sm), bx.Block(), *extra)


# ---------------------------------------------------------------------------------------------- composition

def test_op_plus_op_is_a_descriptor():
    d = bx.Size(8, 8, 8) + bx.SM(80)
    assert isinstance(d, bx.Descriptor)
    assert d.operators == (bx.Size(8, 8, 8), bx.SM(80))


@pytest.mark.parametrize(
    "build",
    [
        lambda: bx.Size(8, 8, 8) + bx.Function.MM,  # op + enum member
        lambda: bx.Function.MM + bx.Size(8, 8, 8),  # enum member + op
        lambda: bx.Type.real + bx.Function.MM,  # enum + enum
        lambda: (bx.Size(8, 8, 8) + bx.SM(80)) + bx.Block(),  # desc + op
        lambda: bx.Block() + (bx.Size(8, 8, 8) + bx.SM(80)),  # op + desc
        lambda: (bx.Size(8, 8, 8) + bx.SM(80)) + (bx.Block() + bx.Function.MM),  # desc + desc
        lambda: bx.Descriptor() + bx.Size(8, 8, 8),
        lambda: bx.Size(8, 8, 8) + bx.Descriptor(),
    ],
)
def test_every_pairing_composes(build):
    assert isinstance(build(), bx.Descriptor)


def test_empty_descriptor():
    d = bx.Descriptor()
    assert d.operators == ()
    assert repr(d) == "Descriptor()"
    assert d + bx.Descriptor() == d
    assert not d.is_complete


def test_adding_empty_descriptor_is_identity():
    d = gemm()
    assert d + bx.Descriptor() == d
    assert bx.Descriptor() + d == d
    assert repr(d + bx.Descriptor()) == repr(d)


FULL = [
    bx.Size(32, 16, 8),
    bx.Precision(BF16, BF16, F32),
    bx.Type.real,
    bx.Function.MM,
    bx.Arrangement(K, R, R),
    bx.LeadingDimension(40, 24, 16),
    bx.Alignment(16, 16, 4),
    bx.SM(90),
    bx.Block(),
    bx.BlockDim(64),
]


def test_order_free_over_all_permutations_of_a_sample():
    reference = total(*FULL)
    # every rotation and both directions, plus a few shuffles: same value, same repr
    orders = [FULL[i:] + FULL[:i] for i in range(len(FULL))] + [FULL[::-1]]
    orders += [list(p) for p in itertools.islice(itertools.permutations(FULL[:5]), 30)]
    for order in orders:
        ops = order if len(order) == len(FULL) else order + FULL[5:]
        d = total(*ops)
        assert d == reference
        assert repr(d) == repr(reference)
        assert d.operators == reference.operators


def test_associative_on_a_sample():
    a, b, c = total(*FULL[:3]), total(*FULL[3:6]), total(*FULL[6:])
    assert (a + b) + c == a + (b + c)
    assert repr((a + b) + c) == repr(a + (b + c))


def test_canonical_repr():
    d = bx.Block() + bx.SM(90) + bx.Function.MM + bx.Precision(BF16, BF16, F32) + bx.Size(64, 64, 64)
    assert repr(d) == "Size(64, 64, 64) + Precision(bfloat16, bfloat16, float32) + Function.MM + SM(90) + Block()"
    everything = total(*reversed(FULL))
    assert repr(everything) == (
        "Size(32, 16, 8) + Precision(bfloat16, bfloat16, float32) + Type.real + Function.MM"
        " + Arrangement(col_major, row_major, row_major) + LeadingDimension(40, 24, 16) + Alignment(16, 16, 4)"
        " + SM(90) + Block() + BlockDim(64)"
    )
    assert repr(bx.Size(1, 2, 3) + bx.MaxAlignment + bx.SM(900, arch_specific=True)) == (
        "Size(1, 2, 3) + MaxAlignment + SM(90, arch_specific=True)"
    )


DUPLICATES = [
    (bx.Size(64, 64, 64), bx.Size(32, 32, 32)),
    (bx.Size(64, 64, 64), bx.Size(64, 64, 64)),
    (bx.Precision(F16), bx.Precision(F16, F16, F32)),
    (bx.Type.real, bx.Type.complex),
    (bx.Type.real, bx.Type.real),
    (bx.Function.MM, bx.Function.MM),
    (bx.Arrangement(R), bx.Arrangement(K)),
    (_tm("N", "N"), _tm("T", "N")),
    (bx.LeadingDimension(64, 64, 64), bx.LeadingDimension(72, 72, 72)),
    (bx.Alignment(2, 2, 2), bx.MaxAlignment),
    (bx.SM(80), bx.SM(90)),
    (bx.SM(90), bx.SM(90, arch_specific=True)),
    (bx.Block(), bx.Block()),
    (bx.BlockDim(64), bx.BlockDim(128)),
]


@pytest.mark.parametrize("first, second", DUPLICATES, ids=[f"{a!r}|{b!r}" for a, b in DUPLICATES])
@pytest.mark.parametrize("how", ["op+op", "desc+op", "op+desc", "desc+desc"])
def test_duplicate_operator_names_both(first, second, how):
    kind = type(first).__name__
    pattern = f"{re.escape(repr(first))} and {re.escape(repr(second))}: a descriptor takes one {kind} operator"
    other = bx.Size(1, 1, 1) if not isinstance(first, bx.Size) else bx.SM(80)
    with pytest.raises(bx.DescriptorError, match=pattern):
        if how == "op+op":
            first + second
        elif how == "desc+op":
            (first + other) + second
        elif how == "op+desc":
            first + (second + other)
        else:
            (first + other) + (bx.Block() + second if not isinstance(second, bx.Block) else second + bx.Function.MM)


@pytest.mark.parametrize("tm_first", [False, True])
def test_arrangement_with_transpose_mode_names_both(tm_first):
    arr, tm = bx.Arrangement(R), _tm("T", "N")
    pattern = re.escape(f"{arr!r} and {tm!r}") + ": Arrangement and the deprecated TransposeMode"
    with pytest.raises(bx.DescriptorError, match=pattern):
        (tm + bx.Size(8, 8, 8)) + arr if tm_first else (arr + bx.Size(8, 8, 8)) + tm


@pytest.mark.parametrize(
    "thing",
    [1, 0, 1.5, "Size", None, [bx.Size(1, 1, 1)], (bx.SM(80),), bx.row_major, bx.float16, bx.Transpose.N, object()],
    ids=lambda t: type(t).__name__,
)
def test_adding_a_non_operator_is_a_type_error(thing):
    for build in (
        lambda: bx.Size(8, 8, 8) + thing,
        lambda: thing + bx.Size(8, 8, 8),
        lambda: bx.Function.MM + thing,
        lambda: thing + bx.Type.complex,
        lambda: gemm() + thing,
        lambda: thing + gemm(),
    ):
        with pytest.raises(TypeError):
            build()
    with pytest.raises(TypeError, match="cannot add .* to a blasdx descriptor; expected an operator"):
        bx.Size(8, 8, 8) + thing


def test_sum_from_an_empty_descriptor():
    assert sum([bx.Size(8, 8, 8), bx.SM(80), bx.Function.MM], bx.Descriptor()) == (
        bx.Size(8, 8, 8) + bx.SM(80) + bx.Function.MM
    )


# ---------------------------------------------------------------------------------------------- leading dimension


# size (M, N, K) = (32, 16, 8): lda >= K=8 row-major A, >= M=32 col-major A;
# ldb >= N=16 row-major B, >= K=8 col-major B; ldc >= N=16 row-major C, >= M=32 col-major C
S = bx.Size(32, 16, 8)


@pytest.mark.parametrize(
    "arrangement, ld, words",
    [
        ((K, K, K), (31, 8, 32), "lda=31 is smaller than M=32, the minimum for col_major A"),
        ((R, K, K), (7, 8, 32), "lda=7 is smaller than K=8, the minimum for row_major A"),
        ((R, K, K), (8, 7, 32), "ldb=7 is smaller than K=8, the minimum for col_major B"),
        ((R, R, K), (8, 15, 32), "ldb=15 is smaller than N=16, the minimum for row_major B"),
        ((R, K, K), (8, 8, 16), "ldc=16 is smaller than M=32, the minimum for col_major C"),
        ((R, K, R), (8, 8, 15), "ldc=15 is smaller than N=16, the minimum for row_major C"),
    ],
)
def test_leading_dimension_minimum_with_explicit_arrangement_raises_at_plus(arrangement, ld, words):
    with pytest.raises(bx.DescriptorError, match=re.escape("LeadingDimension: " + words)):
        S + bx.Arrangement(*arrangement) + bx.LeadingDimension(*ld)
    with pytest.raises(bx.DescriptorError, match=re.escape(words)):  # the other order
        bx.LeadingDimension(*ld) + bx.Arrangement(*arrangement) + S


@pytest.mark.parametrize(
    "arrangement, ld",
    [
        ((K, K, K), (32, 8, 32)),
        ((R, K, K), (8, 8, 32)),
        ((R, R, R), (8, 16, 16)),
        ((K, R, R), (32, 16, 16)),
        ((R, K, K), (100, 100, 100)),
    ],
)
def test_leading_dimension_at_minimum_is_fine(arrangement, ld):
    d = S + bx.Arrangement(*arrangement) + bx.LeadingDimension(*ld) + bx.Function.MM + bx.SM(80)
    assert d.validate() is d
    assert d.leading_dimension == ld


def test_transpose_mode_makes_the_arrangement_explicit():
    # TransposeMode(N, N) is column-major A: lda >= M = 32 is certain at +
    with pytest.raises(bx.DescriptorError, match="lda=8 is smaller than M=32, the minimum for col_major A"):
        S + _tm("N", "N") + bx.LeadingDimension(8, 8, 32)


@pytest.mark.parametrize(
    "ld, words",
    [
        ((7, 8, 32), "lda=7 is smaller than both K=8 (row_major A) and M=32 (col_major A)"),
        ((8, 7, 32), "ldb=7 is smaller than both N=16 (row_major B) and K=8 (col_major B)"),
        ((8, 8, 15), "ldc=15 is smaller than both N=16 (row_major C) and M=32 (col_major C)"),
    ],
)
def test_leading_dimension_below_both_minimums_raises_at_plus(ld, words):
    with pytest.raises(bx.DescriptorError, match=re.escape(words)):
        S + bx.LeadingDimension(*ld)


def test_leading_dimension_that_fits_one_order_waits_for_validate():
    # ldc=16 fits a row-major C (N=16) but the default C is column-major (needs M=32)
    d = S + bx.LeadingDimension(8, 8, 16) + bx.Function.MM + bx.SM(80)
    assert not d.is_supported
    with pytest.raises(bx.DescriptorError, match="ldc=16 is smaller than M=32, the minimum for col_major C"):
        d.validate()
    # the same, with the order that makes it valid
    fixed = d + bx.Arrangement(R, K, R)
    assert fixed.validate() is fixed
    # and lda=10 fits the default row-major A (K=8) but not a column-major one (M=32)
    d2 = S + bx.LeadingDimension(10, 8, 32) + bx.Function.MM + bx.SM(80)
    assert d2.validate() is d2
    with pytest.raises(bx.DescriptorError, match="lda=10 is smaller than M=32"):
        d2 + bx.Arrangement(K)


def test_leading_dimension_without_size_waits():
    d = bx.LeadingDimension(1, 1, 1) + bx.SM(80)  # nothing to compare with yet
    with pytest.raises(bx.DescriptorError, match="lda=1 is smaller than both"):
        d + S


# ---------------------------------------------------------------------------------------------- alignment


@pytest.mark.parametrize(
    "operators, words",
    [
        ((bx.Precision(F32), bx.Alignment(2, 4, 4)), "a=2 bytes is not a multiple of the float32 element size (4 bytes)"),
        ((bx.Precision(F64), bx.Alignment(8, 4, 8)), "b=4 bytes is not a multiple of the float64 element size (8 bytes)"),
        ((bx.Precision(F16, F16, F32), bx.Alignment(2, 2, 2)),
         "c=2 bytes is not a multiple of the float32 element size (4 bytes)"),
        ((bx.Precision(I8, I8, I32), bx.Alignment(1, 1, 2)), "c=2 bytes is not a multiple of the int32 element size"),
        ((bx.Precision(F32), bx.Type.complex, bx.Alignment(4, 8, 8)),
         "a=4 bytes is not a multiple of the complex float32 element size (8 bytes)"),
        ((bx.Precision(F64), bx.Type.complex, bx.Alignment(16, 8, 16)),
         "b=8 bytes is not a multiple of the complex float64 element size (16 bytes)"),
        ((bx.Precision(F16), bx.Type.complex, bx.Alignment(4, 4, 2)),
         "c=2 bytes is not a multiple of the complex float16 element size (4 bytes)"),
    ],
)
def test_alignment_must_be_a_multiple_of_the_element(operators, words):
    with pytest.raises(bx.DescriptorError, match=re.escape("Alignment: " + words)):
        total(*operators)
    with pytest.raises(bx.DescriptorError, match=re.escape(words)):
        total(*reversed(operators))


@pytest.mark.parametrize(
    "operators",
    [
        (bx.Precision(F32), bx.Alignment(4, 8, 16)),
        (bx.Precision(E4, E5, F16), bx.Alignment(1, 1, 2)),
        (bx.Precision(F64), bx.Type.complex, bx.MaxAlignment),
        (bx.Precision(F16), bx.Type.complex, bx.Alignment(4, 8, 4)),
        (bx.Precision(F16), bx.Alignment(2, 2, 2), bx.Type.real),
    ],
)
def test_alignment_multiples_are_fine(operators):
    d = total(bx.Size(16, 16, 16), bx.Function.MM, bx.SM(89), *operators)
    assert d.validate() is d


def test_alignment_without_type_assumes_real_elements():
    # Without Type, real is the default: a real-sized alignment must not be refused at +
    # because a complex element would need more.
    d = bx.Precision(F16) + bx.Alignment(2, 2, 2) + bx.SM(80)
    assert d.alignment == (2, 2, 2)
    full = d + bx.Size(16, 16, 16) + bx.Function.MM
    assert full.validate() is full
    with pytest.raises(bx.DescriptorError, match="complex float16 element size"):
        d + bx.Type.complex


def test_alignment_without_precision_is_checked_by_validate():
    d = bx.Size(8, 8, 8) + bx.Alignment(2, 2, 2) + bx.Function.MM + bx.SM(80)  # float32 by default
    with pytest.raises(bx.DescriptorError, match=re.escape("a=2 bytes is not a multiple of the float32 element size")):
        d.validate()
    assert not d.is_supported


# ---------------------------------------------------------------------------------------------- type x SM


SM_RULES = [
    # (precision, type, sm, supported)
    ((F16, F16, F16), bx.Type.real, 75, True),
    ((F16, F16, F32), bx.Type.real, 75, True),
    ((F64, F64, F64), bx.Type.real, 75, True),
    ((F32, F32, F32), bx.Type.real, 75, True),
    ((F16, F16, F16), bx.Type.complex, 75, True),
    ((F64, F64, F64), bx.Type.complex, 75, True),
    ((BF16, BF16, F32), bx.Type.real, 75, False),
    ((BF16, BF16, F32), bx.Type.real, 80, True),
    ((TF32, TF32, F32), bx.Type.real, 75, False),
    ((TF32, TF32, F32), bx.Type.real, 86, True),
    ((I8, I8, I32), bx.Type.real, 75, False),
    ((I8, U8, I32), bx.Type.real, 80, True),
    ((U8, U8, I32), bx.Type.real, 87, True),
    ((E4, E4, F32), bx.Type.real, 75, False),
    ((E4, E5, F16), bx.Type.real, 80, False),
    ((E5, E4, F32), bx.Type.real, 86, False),
    ((E5, E5, F16), bx.Type.real, 87, False),
    ((E4, E4, F32), bx.Type.real, 89, True),
    ((E5, E4, F16), bx.Type.real, 90, True),
    ((E4, E5, F32), bx.Type.real, 120, True),
]


@pytest.mark.parametrize("precision, kind, sm, supported", SM_RULES)
def test_type_combination_per_sm(precision, kind, sm, supported):
    p = bx.Precision(*precision)
    if supported:
        d = gemm(kind, size=(16, 16, 32), precision=precision, sm=sm)
        assert d.validate() is d and d.is_supported
        return
    a, b, c = (t.name for t in precision)
    # certain at +: with and without Type, in either order
    for build in (lambda: p + bx.SM(sm), lambda: bx.SM(sm) + p, lambda: p + kind + bx.SM(sm)):
        with pytest.raises(bx.UnsupportedError) as info:
            build()
        text = str(info.value)
        assert f"{a} x {b} -> {c} needs sm_" in text
        assert f"Supported on sm_{sm}:" in text
        assert "float16 x float16 -> float32 (sm_75+)" in text  # lists what does run there
        assert "float8_e4m3 x float8_e4m3 -> float32 (sm_89+)" not in text or sm >= 89


@pytest.mark.parametrize(
    "precision, min_sm",
    [((BF16, BF16, F32), 80), ((TF32, TF32, F32), 80), ((I8, I8, I32), 80), ((E4, E4, F16), 89)],
)
def test_unsupported_sm_message_names_the_minimum(precision, min_sm):
    with pytest.raises(bx.UnsupportedError, match=f"needs sm_{min_sm} or newer. Supported on sm_75:"):
        bx.Precision(*precision) + bx.SM(75)


@pytest.mark.parametrize(
    "precision",
    [(BF16, BF16, F32), (TF32, TF32, F32), (I8, I8, I32), (E4, E4, F32), (U8, I8, I32)],
)
def test_no_complex_form_raises_at_plus(precision):
    a, b, c = (t.name for t in precision)
    with pytest.raises(bx.UnsupportedError, match=f"no complex {a} x {b} -> {c} GEMM. Supported complex combinations"):
        bx.Precision(*precision) + bx.Type.complex
    with pytest.raises(bx.UnsupportedError, match="Supported complex combinations:\n  complex float16"):
        bx.Type.complex + bx.Precision(*precision)


def test_combination_without_precision_is_float32():
    d = bx.Size(8, 8, 8) + bx.Function.MM + bx.SM(75)
    assert d.precision == (F32, F32, F32)
    assert d.validate() is d


# ---------------------------------------------------------------------------------------------- shared memory


@pytest.mark.parametrize(
    "size, precision, sm, needed, available",
    [
        # float32 128x128x128 on sm_75: A and B are 128*128*4 = 65536 bytes each (padding dropped)
        ((128, 128, 128), (F32, F32, F32), 75, 131072, 65536),
        # float64 128x128x64 on sm_86: A 128*64*8 = 65536, B 64*128*8 = 65536
        ((128, 128, 64), (F64, F64, F64), 86, 131072, 101376),
    ],
)
def test_shared_memory_fit_is_checked_by_validate(size, precision, sm, needed, available):
    d = gemm(size=size, precision=precision, sm=sm)  # no error at +: it depends on the kernel
    assert not d.is_supported
    with pytest.raises(bx.UnsupportedError, match=f"needs {needed} bytes of shared memory.*sm_{sm} has {available}"):
        d.validate()


def test_shared_memory_fit_depends_on_the_sm():
    d = gemm(size=(128, 128, 64), precision=(F64, F64, F64), sm=80)  # 163 KiB on sm_80
    assert d.validate() is d


# ---------------------------------------------------------------------------------------------- completeness


@pytest.mark.parametrize(
    "operators, complete, execution",
    [
        ((bx.Size(8, 8, 8), bx.Function.MM, bx.SM(80)), True, False),
        ((bx.Size(8, 8, 8), bx.Function.MM, bx.SM(80), bx.Block()), True, True),
        ((bx.Size(8, 8, 8), bx.Function.MM, bx.Block()), False, False),
        ((bx.Size(8, 8, 8), bx.SM(80), bx.Block()), False, False),
        ((bx.Function.MM, bx.SM(80), bx.Block()), False, False),
        ((bx.Size(8, 8, 8), bx.Function.MM, bx.SM(80), bx.BlockDim(64)), True, False),
    ],
)
def test_completeness(operators, complete, execution):
    d = total(*operators)
    assert d.is_complete is complete
    assert d.is_complete_execution is execution


@pytest.mark.parametrize(
    "operators, missing",
    [
        ((bx.Block(),), "missing Size, Function, SM"),
        ((bx.Size(8, 8, 8), bx.Block()), "missing Function, SM"),
        ((bx.Size(8, 8, 8), bx.Function.MM), "missing SM"),
        ((bx.SM(80), bx.Function.MM), "missing Size"),
    ],
)
def test_validate_incomplete(operators, missing):
    d = total(*operators) if len(operators) > 1 else bx.Descriptor(operators)
    assert not d.is_supported
    with pytest.raises(bx.DescriptorError, match=f"incomplete descriptor: {missing} .*needs Size, Function and SM") as info:
        d.validate()
    assert not isinstance(info.value, bx.UnsupportedError)


def test_validate_returns_self_and_block_is_optional_for_validity():
    d = bx.Size(8, 8, 8) + bx.Function.MM + bx.SM(80)
    assert d.validate() is d
    assert d.is_supported
    e = d + bx.Block()
    assert e.validate() is e


@pytest.mark.parametrize("trait", ["m", "size", "a_size", "a_dim", "shared_memory_size", "leading_dimension"])
def test_size_traits_without_size_raise(trait):
    with pytest.raises(bx.DescriptorError, match=r"^(size|m): this descriptor has no Size operator"):
        getattr(bx.SM(80) + bx.Function.MM, trait)


@pytest.mark.parametrize("trait", ["sm", "instruction", "suggested_block_dim", "block_dim", "suggested_leading_dimension"])
def test_sm_traits_without_sm_raise(trait):
    with pytest.raises(bx.DescriptorError, match="has no SM operator"):
        getattr(bx.Size(8, 8, 8) + bx.Function.MM, trait)


def test_function_trait_without_function_raises():
    with pytest.raises(bx.DescriptorError, match="function: this descriptor has no Function operator"):
        (bx.Size(8, 8, 8) + bx.SM(80)).function


# ---------------------------------------------------------------------------------------------- value semantics


def test_frozen():
    d = gemm()
    with pytest.raises(AttributeError, match="immutable"):
        d.foo = 1
    with pytest.raises(AttributeError, match="immutable"):
        d._ops = ()
    with pytest.raises(AttributeError):
        d.m = 3
    with pytest.raises(AttributeError):
        del d._ops
    assert d.m == 64


EQUAL_BY_MEANING = [
    lambda: (gemm(), gemm(bx.Arrangement(R, K, K))),
    lambda: (gemm(), gemm(bx.Type.real)),
    lambda: (gemm(), gemm(bx.LeadingDimension(64, 64, 64))),
    lambda: (gemm(), gemm(bx.Alignment(2, 2, 4))),
    lambda: (gemm(), gemm(bx.BlockDim(128))),  # the suggested block
    lambda: (gemm(), gemm(bx.BlockDim(128, 1, 1))),
    lambda: (gemm(sm=90), gemm(sm=900)),
    lambda: (gemm(precision=(F16,)), gemm(precision=(F16, F16, F16))),
    lambda: (gemm(precision=(F16,)), gemm(precision=("half", "f16", "float16"))),
    lambda: (bx.Size(8, 8, 8) + bx.Function.MM, bx.Size(8, 8, 8) + bx.Function.MM + bx.Precision(F32)),
    lambda: (gemm(bx.Arrangement(K, K, K)), gemm(_tm("N", "N"))),
    lambda: (gemm(bx.Arrangement(R, R, K)), gemm(_tm("T", "T"))),
    lambda: (gemm(bx.Arrangement(R, R, K)), gemm(_tm("C", "C"))),  # conjugation means nothing for real values
    lambda: (gemm(bx.Type.complex), gemm(bx.Type.complex, bx.Alignment(4, 4, 8))),
]


@pytest.mark.parametrize("pair", EQUAL_BY_MEANING, ids=[str(i) for i in range(len(EQUAL_BY_MEANING))])
def test_equal_by_meaning(pair):
    first, second = pair()
    assert first == second
    assert hash(first) == hash(second)
    assert len({first, second}) == 1


DIFFERENT = [
    lambda: (gemm(), gemm(size=(64, 64, 32))),
    lambda: (gemm(), gemm(precision=(F16, F16, F16))),
    lambda: (gemm(), gemm(bx.Type.complex)),
    lambda: (gemm(), gemm(bx.Arrangement(K))),
    lambda: (gemm(), gemm(bx.LeadingDimension(72, 64, 64))),
    lambda: (gemm(), gemm(bx.MaxAlignment)),
    lambda: (gemm(), gemm(bx.BlockDim(64, 2))),
    lambda: (gemm(), gemm(bx.BlockDim(256))),
    lambda: (gemm(sm=90), gemm(sm=80)),
    lambda: (gemm(sm=90), total(bx.Size(64, 64, 64), bx.Precision(F16, F16, F32), bx.Function.MM,
                              bx.SM(90, arch_specific=True), bx.Block())),
    lambda: (gemm(), gemm().operators[0] + gemm().operators[1] + bx.Function.MM + bx.SM(80)),  # no Block
    lambda: (gemm(bx.Type.complex, _tm("C", "N")), gemm(bx.Type.complex, _tm("T", "N"))),  # conjugated A
    lambda: (gemm(bx.Type.complex, _tm("T", "C")), gemm(bx.Type.complex, bx.Arrangement(R, R, K))),
]


@pytest.mark.parametrize("pair", DIFFERENT, ids=[str(i) for i in range(len(DIFFERENT))])
def test_different_meaning_is_not_equal(pair):
    first, second = pair()
    assert first != second
    assert len({first, second}) == 2


def test_not_equal_to_other_things():
    assert gemm() != "Size(64, 64, 64)"
    assert gemm() != bx.Size(64, 64, 64)
    assert (bx.Size(64, 64, 64) + bx.Descriptor()) != bx.Size(64, 64, 64)


def test_conjugate_trait():
    assert gemm(bx.Type.complex, _tm("C", "T")).conjugate == (True, False)
    assert gemm(bx.Type.complex, _tm("N", "C")).conjugate == (False, True)
    assert gemm(bx.Type.real, _tm("C", "C")).conjugate == (False, False)
    assert gemm(bx.Type.complex, bx.Arrangement(R, R)).conjugate == (False, False)


PICKLED = [
    lambda: gemm(),
    lambda: gemm(bx.Type.complex, _tm("C", "N"), bx.MaxAlignment, bx.BlockDim(64, 2)),
    lambda: total(*FULL),
    lambda: bx.Size(3, 5, 7) + bx.Precision(E4, E5, F16),
    lambda: bx.Descriptor(),
    lambda: bx.SM(1200, arch_specific=True) + bx.Block(),
]


def _unpickled(d: bx.Descriptor) -> bx.Descriptor:
    """``d`` through pickle (no warning allowed), checked equal to ``d`` in value, hash and repr."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = pickle.loads(pickle.dumps(d))
    assert back == d
    assert hash(back) == hash(d)
    assert repr(back) == repr(d)
    return back


@pytest.mark.parametrize("build", PICKLED, ids=[str(i) for i in range(len(PICKLED))])
def test_pickle_round_trip(build):
    d = build()
    _unpickled(d)
    assert copy.deepcopy(d) == d and copy.copy(d) == d


def test_str_describes_a_supported_descriptor():
    text = str(gemm())
    lines = text.splitlines()
    assert lines[0] == repr(gemm())
    assert "64x64x64 real float16 x float16 -> float32" in text
    assert "arrangement row_major/col_major/col_major" in text
    assert "instruction mma.sync.m16n8k16" in text
    assert "suggested_block_dim (128, 1, 1)" in text
    assert "shared_memory_size 32768 B" in text


def test_str_of_an_unsupported_descriptor_says_why():
    text = str(bx.Size(8, 8, 8) + bx.SM(80))
    assert text.startswith("Size(8, 8, 8) + SM(80)")
    assert "not ready: incomplete descriptor: missing Function" in text


# ---------------------------------------------------------------------------------------------- properties

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ROWS = [(r.a, r.b, r.c) for r in dt.COMBINATIONS]
sizes = st.builds(bx.Size, st.integers(1, 96), st.integers(1, 96), st.integers(1, 96))
precisions = st.sampled_from(ROWS).map(lambda abc: bx.Precision(*abc))
types = st.sampled_from([bx.Type.real, bx.Type.complex])
layouts = st.sampled_from([R, K])
arrangements = st.builds(bx.Arrangement, layouts, layouts, layouts)
transpose_modes = st.builds(_tm, st.sampled_from("NTC"), st.sampled_from("NTC"))
lds = st.builds(bx.LeadingDimension, st.integers(1, 200), st.integers(1, 200), st.integers(1, 200))
powers = st.sampled_from([1, 2, 4, 8, 16])
alignments = st.builds(bx.Alignment, powers, powers, powers)
sms = st.one_of(
    st.sampled_from([75, 80, 86, 87, 89, 90, 100, 120, 800, 900]).map(bx.SM),
    st.sampled_from([90, 100, 120]).map(lambda cc: bx.SM(cc, arch_specific=True)),
)
block_dims = st.tuples(st.integers(1, 64), st.integers(1, 8), st.integers(1, 4)).filter(
    lambda t: 32 <= t[0] * t[1] * t[2] <= 1024
).map(lambda t: bx.BlockDim(*t))

KIND_STRATEGIES = [
    sizes, precisions, types, st.just(bx.Function.MM), arrangements, transpose_modes, lds, alignments, sms,
    st.just(bx.Block()), block_dims,
]


@st.composite
def operator_sets(draw, min_size=2, eighths=4):
    """A random subset of operator kinds (each kind in with probability eighths/8, TransposeMode 1/8;
    at most one of each), one random value each, in random order."""
    chosen = [
        kind for kind in KIND_STRATEGIES
        if (draw(st.integers(0, 7)) == 5 if kind is transpose_modes else draw(st.integers(0, 7)) < eighths)
    ]
    assume(len(chosen) >= min_size)
    operators = [draw(kind) for kind in chosen]
    size = next((o for o in operators if isinstance(o, bx.Size)), None)
    if size is not None and lds in chosen and draw(st.integers(0, 3)):
        # mostly leading dimensions that suit either order (what users write)
        pad = st.integers(0, 16)
        operators[chosen.index(lds)] = bx.LeadingDimension(
            max(size.m, size.k) + draw(pad), max(size.k, size.n) + draw(pad), max(size.m, size.n) + draw(pad)
        )
    precision = next((o for o in operators if isinstance(o, bx.Precision)), None)
    if precision is not None and alignments in chosen and draw(st.integers(0, 3)):
        # mostly alignments that suit the real element sizes (what users write)
        fitting = [draw(st.sampled_from([x for x in (1, 2, 4, 8, 16) if x % t.size == 0]))
                   for t in (precision.a, precision.b, precision.c)]
        operators[chosen.index(alignments)] = bx.Alignment(*fitting)
    return draw(st.permutations(operators))


def outcome(build):
    """('ok', descriptor) or ('error', None); any exception other than DescriptorError escapes."""
    try:
        return "ok", build()
    except bx.DescriptorError:
        return "error", None


def same_outcome(x, y):
    assert x[0] == y[0], (x, y)
    if x[0] == "ok":
        assert x[1] == y[1]
        assert hash(x[1]) == hash(y[1])
        assert repr(x[1]) == repr(y[1])


@SETTINGS
@given(operator_sets(), st.randoms(use_true_random=False))
def test_property_order_free(operators, rnd):
    shuffled = list(operators)
    rnd.shuffle(shuffled)
    same_outcome(outcome(lambda: total(*operators)), outcome(lambda: total(*shuffled)))
    same_outcome(outcome(lambda: total(*operators)), outcome(lambda: bx.Descriptor(reversed(operators))))


@SETTINGS
@given(operator_sets(min_size=3), st.data())
def test_property_associative(operators, data):
    i = data.draw(st.integers(1, len(operators) - 2))
    j = data.draw(st.integers(i + 1, len(operators) - 1))
    first, second, third = operators[:i], operators[i:j], operators[j:]

    def group(ops):
        return bx.Descriptor(ops) if len(ops) == 1 else total(*ops)

    left = outcome(lambda: (group(first) + group(second)) + group(third))
    right = outcome(lambda: group(first) + (group(second) + group(third)))
    same_outcome(left, right)
    same_outcome(left, outcome(lambda: bx.Descriptor(operators)))


@SETTINGS
@given(operator_sets(min_size=1, eighths=6))
def test_property_errors_at_plus_are_certain(operators):
    """An error at + must hold whatever is added later: so if a descriptor builds, every
    descriptor with one operator less builds too (adding an operator never removes an error)."""
    kind, _ = outcome(lambda: bx.Descriptor(operators))
    if kind == "error":
        return
    for i in range(len(operators)):
        fewer = operators[:i] + operators[i + 1:]
        try:
            bx.Descriptor(fewer)
        except bx.DescriptorError as exc:
            raise AssertionError(f"{fewer} raises {exc!r} but adding {operators[i]!r} builds") from None


@SETTINGS
@given(operator_sets(min_size=1))
def test_property_pickle_round_trip(operators):
    kind, d = outcome(lambda: bx.Descriptor(operators))
    if kind == "error":
        return
    assert _unpickled(d).is_supported == d.is_supported


@SETTINGS
@given(operator_sets(min_size=1))
def test_property_explicit_defaults_are_equal(operators):
    """A valid descriptor equals (and hashes as) itself with every default written out."""
    kind, d = outcome(lambda: bx.Descriptor(operators + [bx.Function.MM] * (bx.Function.MM not in operators)))
    if kind == "error" or not (d.has(bx.Size) and d.has(bx.SM)) or not d.is_supported:
        return
    explicit = list(d.operators)
    if not d.has(bx.Precision):
        explicit.append(bx.Precision(F32))
    if not d.has(bx.Type):
        explicit.append(bx.Type.real)
    if not d.has(bx.Arrangement) and not d.has(bx.TransposeMode):
        explicit.append(bx.Arrangement(R, K, K))
    if not d.has(bx.LeadingDimension):
        explicit.append(bx.LeadingDimension(*d.leading_dimension))
    if not d.has(bx.Alignment):
        explicit.append(bx.Alignment(*d.alignment))
    if not d.has(bx.BlockDim):
        explicit.append(bx.BlockDim(*d.suggested_block_dim))
    e = bx.Descriptor(explicit)
    assert e.validate() is e
    assert e == d
    assert hash(e) == hash(d)
    # and the x10 spelling of the SM changes nothing
    sm = d.operators[[type(o) for o in d.operators].index(bx.SM)]
    x10 = bx.Descriptor([o for o in d.operators if not isinstance(o, bx.SM)] + [bx.SM(sm.cc * 10, sm.arch_specific)])
    assert x10 == d and hash(x10) == hash(d)


raw_dtypes = st.sampled_from(list(dt.REAL_DTYPES))


@st.composite
def raw_descriptions(draw):
    """Operators to build from raw values, some of them out of range, in random order: (callable, args)."""
    builders = []
    if draw(st.booleans()):
        builders.append((bx.Size, draw(st.tuples(*[st.integers(1, 300)] * 3))))
    if draw(st.booleans()):
        if draw(st.integers(0, 3)):
            abc = draw(st.sampled_from(ROWS))
        else:
            abc = draw(st.tuples(raw_dtypes, raw_dtypes, raw_dtypes))
        builders.append((bx.Precision, abc))
    if draw(st.booleans()):
        builders.append((lambda t: t, (draw(types),)))
    if draw(st.integers(0, 4)):
        builders.append((lambda f: f, (bx.Function.MM,)))
    if draw(st.booleans()):
        builders.append((bx.Arrangement, draw(st.tuples(layouts, layouts, layouts))))
    elif draw(st.integers(0, 5)) == 0:
        builders.append((_tm, draw(st.tuples(st.sampled_from("NTC"), st.sampled_from("NTC")))))
    if draw(st.booleans()):
        builders.append((bx.LeadingDimension, draw(st.tuples(*[st.integers(1, 320)] * 3))))
    if draw(st.booleans()):
        builders.append((bx.Alignment, draw(st.tuples(*[st.sampled_from([1, 2, 4, 8, 16, 3, 32])] * 3))))
    if draw(st.integers(0, 4)):
        cc = draw(st.sampled_from([75, 80, 86, 87, 89, 90, 100, 120, 750, 900, 1000, 1200, 70, 95, 1001]))
        builders.append((bx.SM, (cc, draw(st.booleans()))))
    if draw(st.booleans()):
        builders.append((bx.Block, ()))
    if draw(st.booleans()):
        builders.append((bx.BlockDim, draw(st.tuples(st.integers(1, 1100), st.integers(1, 40), st.integers(1, 70)))))
    return draw(st.permutations(builders))


@SETTINGS
@given(raw_descriptions())
def test_property_validate_or_descriptor_error(builders):
    """Whatever the operators, the outcome is a valid descriptor or a DescriptorError, nothing else."""
    try:
        d = bx.Descriptor()
        for build, args in builders:
            d = d + build(*args)
    except bx.DescriptorError:
        return
    try:
        d.validate()
    except bx.DescriptorError as exc:
        assert not d.is_supported
        assert str(exc)
        str(d)
        return
    assert d.is_supported and d.is_complete
    # a valid descriptor answers every trait
    str(d)
    hash(d)
    threads = d.max_threads_per_block
    assert 32 <= threads <= 1024
    assert d.instruction
    assert d.shared_memory_size >= d.shared_memory_size_ab > 0
    lda, ldb, ldc = d.suggested_leading_dimension
    assert (lda, ldb, ldc) >= (0, 0, 0)
    assert d.suggested_smem_layout_a.shape == (d.m, d.k)
    assert d.suggested_smem_layout_b.shape == (d.k, d.n)
    assert d.suggested_smem_layout_c.shape == (d.m, d.n)
    assert d.scalar_type in (F32, F64, I32)

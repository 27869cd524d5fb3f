"""The type table: names, C++ types, sizes, host dtypes, accepted spellings, supported rows."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt

# name, C++ type, bytes, integral, host numpy dtype -- written out, not read from the module
TYPE_TABLE = [
    (bx.float16, "float16", "__half", 2, False, np.dtype(np.float16)),
    (bx.bfloat16, "bfloat16", "__nv_bfloat16", 2, False, np.dtype(ml_dtypes.bfloat16)),
    (bx.tfloat32, "tfloat32", "float", 4, False, np.dtype(np.float32)),
    (bx.float32, "float32", "float", 4, False, np.dtype(np.float32)),
    (bx.float64, "float64", "double", 8, False, np.dtype(np.float64)),
    (bx.float8_e4m3, "float8_e4m3", "__nv_fp8_e4m3", 1, False, np.dtype(ml_dtypes.float8_e4m3fn)),
    (bx.float8_e5m2, "float8_e5m2", "__nv_fp8_e5m2", 1, False, np.dtype(ml_dtypes.float8_e5m2)),
    (bx.int8, "int8", "signed char", 1, True, np.dtype(np.int8)),
    (bx.uint8, "uint8", "unsigned char", 1, True, np.dtype(np.uint8)),
    (bx.int32, "int32", "int", 4, True, np.dtype(np.int32)),
]


@pytest.mark.parametrize("dtype, name, cpp, size, integral, host", TYPE_TABLE, ids=[r[1] for r in TYPE_TABLE])
def test_type_table(dtype, name, cpp, size, integral, host):
    assert dtype.name == name
    assert dtype.cpp == cpp
    assert dtype.size == size
    assert dtype.integral is integral
    assert dtype.is_complex is False
    assert dtype.host_dtype == host
    assert repr(dtype) == name and str(dtype) == name


def test_real_dtypes_are_exactly_the_public_ones():
    assert {d.name for d in dt.REAL_DTYPES} == {r[1] for r in TYPE_TABLE}


def test_tfloat32_is_not_float32():
    # same C++ storage and host dtype, but a different element type (tensor-core rounding)
    assert bx.tfloat32 != bx.float32
    assert dt.as_dtype("tf32") is not dt.as_dtype("float32")


@pytest.mark.parametrize(
    "real, name, cpp, size",
    [
        (bx.float16, "complex32", "blasdx::complex<__half>", 4),
        (bx.float32, "complex64", "blasdx::complex<float>", 8),
        (bx.float64, "complex128", "blasdx::complex<double>", 16),
    ],
)
def test_complex_of(real, name, cpp, size):
    c = dt.complex_of(real)
    assert (c.name, c.cpp, c.size, c.is_complex, c.real_name) == (name, cpp, size, True, real.name)
    assert c.host_dtype.itemsize == size
    assert c == dt.complex_of(real)  # a value: built twice, equal


def test_complex_host_dtypes():
    assert dt.complex_of(bx.float32).host_dtype == np.dtype(np.complex64)
    assert dt.complex_of(bx.float64).host_dtype == np.dtype(np.complex128)


@pytest.mark.parametrize("real", [bx.bfloat16, bx.tfloat32, bx.float8_e4m3, bx.int8, bx.int32])
def test_complex_of_other_types_raises(real):
    with pytest.raises(ValueError, match=f"no complex {real.name}.*float16, float32 or float64"):
        dt.complex_of(real)


# every spelling the type table accepts, by the type it means
SPELLINGS_OF = {
    bx.float16: (bx.float16, "float16", "FLOAT16", " float16 ", "f16", "fp16", "half", np.float16,
                 np.dtype("float16")),
    bx.bfloat16: ("bfloat16", "bf16", ml_dtypes.bfloat16, np.dtype(ml_dtypes.bfloat16)),
    bx.tfloat32: ("tfloat32", "tf32"),
    bx.float32: ("float32", "f32", "single", np.float32),
    bx.float64: ("float64", "double", np.float64, float),  # numpy reads the Python float as float64
    bx.float8_e4m3: ("float8_e4m3", "float8_e4m3fn", "e4m3", ml_dtypes.float8_e4m3fn),
    bx.float8_e5m2: ("float8_e5m2", "e5m2", ml_dtypes.float8_e5m2),
    bx.int8: ("int8", "s8", np.int8),
    bx.uint8: ("uint8", "u8", np.uint8),
    bx.int32: ("int32", "s32", np.int32),
}
SPELLINGS = [(value, expected) for expected, values in SPELLINGS_OF.items() for value in values]


@pytest.mark.parametrize("value, expected", SPELLINGS, ids=[repr(v) for v, _ in SPELLINGS])
def test_as_dtype_spellings(value, expected):
    assert dt.as_dtype(value) is expected


@pytest.mark.parametrize(
    "value, words",
    [
        ("float128", "not an element type blasdx knows"),
        ("bogus", "not an element type blasdx knows.*float16"),
        (np.int64, "not an element type"),
        (int, "not an element type"),  # numpy reads int as int64, which has no GEMM here
        (object(), "not an element type"),
        (None, "not an element type"),
        ("complex64", "complex.*Type.complex"),
        (np.complex64, "complex.*Type.complex"),
        (dt.complex_of(bx.float32), "real part type \\(float32\\).*Type.complex"),
        (ml_dtypes.float8_e4m3fnuz, "not an element type"),
    ],
    ids=["float128", "bogus", "np.int64", "int", "object", "None", "complex64", "np.complex64", "complex DType", "e4m3fnuz"],
)
def test_as_dtype_rejects(value, words):
    with pytest.raises(TypeError, match=words):
        dt.as_dtype(value, argument="here")


def test_as_dtype_names_the_argument():
    with pytest.raises(TypeError, match="^Precision: b: "):
        dt.as_dtype("bogus", argument="Precision: b")


def test_ieee_float8_e4m3_is_not_cuda_e4m3():
    # ml_dtypes.float8_e4m3 is the IEEE-style format (with infinities, max 240); CUDA's
    # __nv_fp8_e4m3 is float8_e4m3fn (no infinities, max 448). The same bits mean different
    # numbers, so the numpy type must not be taken for blasdx's float8_e4m3.
    assert ml_dtypes.finfo(ml_dtypes.float8_e4m3).max != ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        dt.as_dtype(ml_dtypes.float8_e4m3)


# The supported (A, B -> C) rows, written out from the design: (a, b, c, complex, min_sm, accumulator)
F16, BF16, TF32, F32, F64 = bx.float16, bx.bfloat16, bx.tfloat32, bx.float32, bx.float64
E4, E5, I8, U8, I32 = bx.float8_e4m3, bx.float8_e5m2, bx.int8, bx.uint8, bx.int32
EXPECTED_ROWS = {
    (F16, F16, F16, False, 75, F16),
    (F16, F16, F32, False, 75, F32),
    (BF16, BF16, F32, False, 80, F32),
    (BF16, BF16, BF16, False, 80, F32),
    (TF32, TF32, F32, False, 80, F32),
    (F32, F32, F32, False, 75, F32),
    (F64, F64, F64, False, 75, F64),
    (E4, E4, F16, False, 89, F32),
    (E4, E4, F32, False, 89, F32),
    (E4, E5, F16, False, 89, F32),
    (E4, E5, F32, False, 89, F32),
    (E5, E4, F16, False, 89, F32),
    (E5, E4, F32, False, 89, F32),
    (E5, E5, F16, False, 89, F32),
    (E5, E5, F32, False, 89, F32),
    (I8, I8, I32, False, 80, I32),
    (I8, U8, I32, False, 80, I32),
    (U8, I8, I32, False, 80, I32),
    (U8, U8, I32, False, 80, I32),
    (F16, F16, F16, True, 75, F16),
    (F16, F16, F32, True, 75, F32),
    (F32, F32, F32, True, 75, F32),
    (F64, F64, F64, True, 75, F64),
}


def test_combination_table_is_the_designed_one():
    got = {(r.a, r.b, r.c, r.is_complex, r.min_sm, r.accumulator) for r in dt.COMBINATIONS}
    assert got == EXPECTED_ROWS
    assert len(dt.COMBINATIONS) == len(EXPECTED_ROWS)  # no duplicates


@pytest.mark.parametrize("row", sorted(EXPECTED_ROWS, key=repr), ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}-{'c' if r[3] else 'r'}")
def test_find_combination_finds_every_row(row):
    a, b, c, cplx, min_sm, acc = row
    found = dt.find_combination(a, b, c, cplx)
    assert found is not None
    assert (found.min_sm, found.accumulator) == (min_sm, acc)


@pytest.mark.parametrize(
    "a, b, c, cplx",
    [
        (BF16, BF16, F16, False),
        (BF16, BF16, F32, True),
        (F16, BF16, F32, False),
        (F32, F32, F16, False),
        (F64, F64, F32, False),
        (TF32, TF32, TF32, False),
        (TF32, TF32, F32, True),
        (I8, I8, I8, False),
        (I8, I8, I32, True),
        (E4, E4, BF16, False),
        (E4, E4, F32, True),
        (I32, I32, I32, False),
    ],
)
def test_find_combination_none(a, b, c, cplx):
    assert dt.find_combination(a, b, c, cplx) is None


@pytest.mark.parametrize(
    "a, b, c, cplx, scalar",
    [
        (F16, F16, F16, False, F32),  # f16 C still scales in f32
        (F16, F16, F32, False, F32),
        (BF16, BF16, F32, False, F32),
        (TF32, TF32, F32, False, F32),
        (F64, F64, F64, False, F64),
        (F64, F64, F64, True, F64),
        (E4, E5, F16, False, F32),
        (I8, U8, I32, False, I32),
    ],
)
def test_scalar_type_of_rows(a, b, c, cplx, scalar):
    assert dt.find_combination(a, b, c, cplx).scalar is scalar


def test_describe():
    assert dt.find_combination(BF16, BF16, F32, False).describe() == "bfloat16 x bfloat16 -> float32 (sm_80+)"
    assert dt.find_combination(F64, F64, F64, True).describe() == "complex float64 x float64 -> float64 (sm_75+)"


def test_supported_rows_filters():
    everything = dt.supported_rows()
    assert len(everything) == 23
    on75 = dt.supported_rows(75)
    assert len(on75) == 8  # real f16->f16, f16->f32, f32, f64 and the four complex rows
    assert "float16 x float16 -> float16 (sm_75+)" in on75
    assert not any("bfloat16" in r or "float8" in r or "int8" in r or "tfloat32" in r for r in on75)
    on80 = dt.supported_rows(80)
    assert "bfloat16 x bfloat16 -> float32 (sm_80+)" in on80 and "uint8 x int8 -> int32 (sm_80+)" in on80
    assert not any("float8" in r for r in on80)
    assert len(on80) == 23 - 8
    on89 = dt.supported_rows(89)
    assert "float8_e5m2 x float8_e4m3 -> float16 (sm_89+)" in on89
    assert len(on89) == 23
    cplx = dt.supported_rows(is_complex=True)
    assert len(cplx) == 4 and all(r.startswith("complex ") for r in cplx)
    real = dt.supported_rows(is_complex=False)
    assert len(real) == 19 and not any(r.startswith("complex") for r in real)


@pytest.mark.parametrize(
    "a, b, c, sm, family",
    [
        (F16, F16, F32, 75, "mma.sync.m16n8k8"),
        (F16, F16, F16, 75, "mma.sync.m16n8k8"),
        (F16, F16, F32, 80, "mma.sync.m16n8k16"),
        (F16, F16, F16, 86, "mma.sync.m16n8k16"),
        (BF16, BF16, F32, 80, "mma.sync.m16n8k16"),
        (BF16, BF16, F32, 89, "mma.sync.m16n8k16"),
        (TF32, TF32, F32, 80, "mma.sync.m16n8k8"),
        (TF32, TF32, F32, 87, "mma.sync.m16n8k8"),
        (I8, I8, I32, 80, "mma.sync.m16n8k32"),
        (U8, I8, I32, 86, "mma.sync.m16n8k32"),
        (E4, E5, F16, 89, "mma.sync.m16n8k32"),
        (E5, E5, F32, 89, "mma.sync.m16n8k32"),
        (F64, F64, F64, 75, "fma"),
        (F64, F64, F64, 80, "mma.sync.m8n8k4"),
        (F64, F64, F64, 89, "mma.sync.m8n8k4"),
        (F64, F64, F64, 90, "mma.sync.m16n8k8"),  # the sm_90 DMMA shape, twice m8n8k4's rate on Hopper
        (F64, F64, F64, 100, "mma.sync.m16n8k8"),
        (F32, F32, F32, 75, "fma"),
        (F32, F32, F32, 80, "fma"),
        (F32, F32, F32, 89, "fma"),
    ],
)
def test_mma_family(a, b, c, sm, family):
    assert dt.mma_family(a, b, c, sm) == family

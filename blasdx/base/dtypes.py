"""The type table: every precision blasdx knows, and which (A, B, C) combinations run where.

One table answers all type questions (C++ name, size, host dtype, integral or not, the
tensor-core instruction family per architecture) so that no other module hard-codes them.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

__all__ = [
    "DType",
    "float16",
    "bfloat16",
    "tfloat32",
    "float32",
    "float64",
    "float8_e4m3",
    "float8_e5m2",
    "int8",
    "uint8",
    "int32",
    "REAL_DTYPES",
    "Combination",
    "COMBINATIONS",
    "as_dtype",
    "complex_of",
    "find_combination",
    "supported_rows",
    "mma_family",
]


@dataclass(frozen=True)
class DType:
    """One element type: its blasdx name, C++ type, size in bytes and host numpy dtype.

    ``host`` is the numpy scalar type that holds it on the host, or its ``"module:name"``
    (``"ml_dtypes:bfloat16"``), imported when :attr:`numpy` is first read: describing a
    GEMM needs neither numpy nor ml_dtypes, so importing blasdx does not load them.
    """

    name: str
    cpp: str
    size: int
    host: Any = field(compare=False, hash=False, repr=False)
    integral: bool = False
    is_complex: bool = False
    real_name: str = ""

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    @property
    def numpy(self) -> Any:
        """The host numpy scalar type (``numpy.float16``, ``ml_dtypes.bfloat16``, ...); None when there is none."""
        host = self.host
        if isinstance(host, str):
            module, _, name = host.partition(":")
            host = getattr(importlib.import_module(module), name, None)
            object.__setattr__(self, "host", host)
        return host

    @property
    def host_dtype(self) -> np.dtype:
        """The numpy dtype that holds this type on the host (float32 for tfloat32)."""
        import numpy

        return numpy.dtype(self.numpy)


float16 = DType("float16", "__half", 2, "numpy:float16")
bfloat16 = DType("bfloat16", "__nv_bfloat16", 2, "ml_dtypes:bfloat16")
tfloat32 = DType("tfloat32", "float", 4, "numpy:float32")
float32 = DType("float32", "float", 4, "numpy:float32")
float64 = DType("float64", "double", 8, "numpy:float64")
float8_e4m3 = DType("float8_e4m3", "__nv_fp8_e4m3", 1, "ml_dtypes:float8_e4m3fn")
float8_e5m2 = DType("float8_e5m2", "__nv_fp8_e5m2", 1, "ml_dtypes:float8_e5m2")
int8 = DType("int8", "signed char", 1, "numpy:int8", integral=True)
uint8 = DType("uint8", "unsigned char", 1, "numpy:uint8", integral=True)
int32 = DType("int32", "int", 4, "numpy:int32", integral=True)

REAL_DTYPES: tuple[DType, ...] = (
    float16, bfloat16, tfloat32, float32, float64, float8_e4m3, float8_e5m2, int8, uint8, int32,
)
_BY_NAME = {d.name: d for d in REAL_DTYPES}

# Names other libraries use for the same types (numpy, ml_dtypes, torch, common short forms).
_ALIASES = {
    "half": float16, "f16": float16, "fp16": float16,
    "bf16": bfloat16,
    "tf32": tfloat32,
    "single": float32, "f32": float32, "fp32": float32,
    "double": float64, "f64": float64, "fp64": float64,
    "float8_e4m3fn": float8_e4m3, "e4m3": float8_e4m3, "fp8_e4m3": float8_e4m3,
    "e5m2": float8_e5m2, "fp8_e5m2": float8_e5m2,
    "int": int32, "s8": int8, "u8": uint8, "s32": int32,
}

# complex element types, made from a real one by Type.complex
_COMPLEX_NUMPY = {"float16": "ml_dtypes:complex32", "float32": "numpy:complex64", "float64": "numpy:complex128"}
_COMPLEX_NAMES = {"float16": "complex32", "float32": "complex64", "float64": "complex128"}


def complex_of(real: DType) -> DType:
    """The complex element type whose parts are ``real`` (interleaved real, imaginary)."""
    if real.name not in _COMPLEX_NAMES:
        raise ValueError(f"there is no complex {real.name} in blasdx; complex parts are float16, float32 or float64")
    return DType(
        _COMPLEX_NAMES[real.name],
        f"blasdx::complex<{real.cpp}>",
        2 * real.size,
        _COMPLEX_NUMPY[real.name],
        is_complex=True,
        real_name=real.name,
    )


def as_dtype(value: Any, *, argument: str = "dtype") -> DType:
    """Normalise anything that names a real element type (DType, string, numpy, ml_dtypes, torch)."""
    if isinstance(value, DType):
        if value.is_complex:
            raise TypeError(f"{argument}: give the real part type ({value.real_name}) and add Type.complex")
        return value
    name = None
    host = None
    if isinstance(value, str):
        name = value
    elif value is not None:  # np.dtype(None) is float64: None names no type
        text = str(value)
        if text.startswith("torch."):
            name = text[len("torch."):]
        elif "numpy" in sys.modules:  # a numpy / ml_dtypes type implies numpy is loaded
            try:
                host = sys.modules["numpy"].dtype(value)
                name = host.name
            except TypeError:
                name = None
    if name is not None:
        key = name.strip().lower()
        found = _BY_NAME.get(key) or _ALIASES.get(key)
        if found is not None and host is not None and host != found.host_dtype:
            # e.g. ml_dtypes.float8_e4m3 (IEEE-style, with infinities) is not CUDA's e4m3 (e4m3fn)
            raise TypeError(
                f"{argument}: {value!r} is a different format from blasdx's {found.name} "
                f"({found.cpp}, host dtype {found.host_dtype.name}); use {found.host_dtype.name}"
            )
        if found is not None:
            return found
        if key.startswith("complex"):
            raise TypeError(
                f"{argument}: {value!r} is complex; give the real part type (e.g. float32) and add Type.complex"
            )
    allowed = ", ".join(d.name for d in REAL_DTYPES)
    raise TypeError(f"{argument}: {value!r} is not an element type blasdx knows; expected one of {allowed}")


@dataclass(frozen=True)
class Combination:
    """A supported (A, B -> C) row: the lowest SM that runs it and the accumulator type."""

    a: DType
    b: DType
    c: DType
    is_complex: bool
    min_sm: int
    accumulator: DType

    @property
    def scalar(self) -> DType:
        """Type of alpha and beta (per part for complex): int32 for integer C, float64 for
        float64 C, float32 otherwise (f16/bf16 C scale in f32 to keep alpha exact)."""
        if self.c.integral:
            return int32
        return float64 if self.c == float64 else float32

    def describe(self) -> str:
        kind = "complex " if self.is_complex else ""
        return f"{kind}{self.a.name} x {self.b.name} -> {self.c.name} (sm_{self.min_sm}+)"


def _rows() -> tuple[Combination, ...]:
    rows = [
        Combination(float16, float16, float16, False, 75, float16),
        Combination(float16, float16, float32, False, 75, float32),
        Combination(bfloat16, bfloat16, float32, False, 80, float32),
        # f32 sums rounded once to bf16 (what torch.matmul and cuBLAS give for bf16): no bf16 accumulator exists
        Combination(bfloat16, bfloat16, bfloat16, False, 80, float32),
        Combination(tfloat32, tfloat32, float32, False, 80, float32),
        Combination(float32, float32, float32, False, 75, float32),
        Combination(float64, float64, float64, False, 75, float64),
    ]
    for a in (float8_e4m3, float8_e5m2):
        for b in (float8_e4m3, float8_e5m2):
            for c in (float16, float32):
                # fp8 accumulates in fp32 whatever C is: the f16 accumulator loses too much over K
                rows.append(Combination(a, b, c, False, 89, float32))
    for a in (int8, uint8):
        for b in (int8, uint8):
            rows.append(Combination(a, b, int32, False, 80, int32))
    rows += [
        Combination(float16, float16, float16, True, 75, float16),
        Combination(float16, float16, float32, True, 75, float32),
        Combination(float32, float32, float32, True, 75, float32),
        Combination(float64, float64, float64, True, 75, float64),
    ]
    return tuple(rows)


COMBINATIONS: tuple[Combination, ...] = _rows()


def find_combination(a: DType, b: DType, c: DType, is_complex: bool) -> Combination | None:
    """The table row for (a, b, c), or None when blasdx has no kernel for it on any SM."""
    for row in COMBINATIONS:
        if (row.a, row.b, row.c, row.is_complex) == (a, b, c, is_complex):
            return row
    return None


def supported_rows(sm: int | None = None, is_complex: bool | None = None) -> list[str]:
    """Readable rows of the table, optionally those that run on ``sm`` or of one kind."""
    return [
        row.describe()
        for row in COMBINATIONS
        if (sm is None or row.min_sm <= sm) and (is_complex is None or row.is_complex == is_complex)
    ]


def mma_family(a: DType, b: DType, c: DType, sm: int) -> str:
    """The warp-level instruction family that multiplies (a, b) on ``sm``; ``"fma"`` when none.

    Families are PTX names: ``mma.sync.m16n8k16`` (f16/bf16 on sm_80+), ``mma.sync.m16n8k8``
    (f16 on sm_75, tf32), ``mma.sync.m16n8k32`` (8-bit integers, fp8 on sm_89+),
    ``mma.sync.m8n8k4`` (f64, DMMA on sm_80 / sm_89), ``mma.sync.m16n8k8`` (f64 on sm_90+: the
    m16n8 DMMA shapes run at about twice m8n8k4's rate on Hopper: block compute f64 32^3 went
    from 32 to 57 TFLOP/s on an H100, and m16n8k8 fills its fragment registers in pairs from
    16-byte loads). f32 has no tensor-core form that keeps its precision, so it runs on the CUDA
    cores (FFMA), as does f64 on sm_75.
    """
    if a in (float16, bfloat16):
        return "mma.sync.m16n8k16" if sm >= 80 else "mma.sync.m16n8k8"
    if a == tfloat32:
        return "mma.sync.m16n8k8"
    if a in (int8, uint8, float8_e4m3, float8_e5m2):
        return "mma.sync.m16n8k32"
    if a == float64 and sm >= 90:
        return "mma.sync.m16n8k8"
    if a == float64 and sm >= 80:
        return "mma.sync.m8n8k4"
    return "fma"

"""Description and execution operators: small frozen values that compose with ``+``.

Each operator checks its own arguments when it is built, so a malformed value never
reaches a descriptor. Composition rules between operators live in ``descriptor.py``.
"""

from __future__ import annotations

import enum
import operator
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from ..base import dtypes as _dt
from ..base.errors import DescriptorError, UnsupportedError

__all__ = [
    "Operator",
    "Size",
    "Precision",
    "Type",
    "Function",
    "Layout",
    "row_major",
    "col_major",
    "left_layout",
    "right_layout",
    "Arrangement",
    "Transpose",
    "N",
    "T",
    "C",
    "TransposeMode",
    "LeadingDimension",
    "Alignment",
    "MaxAlignment",
    "SM",
    "SUPPORTED_SMS",
    "Block",
    "BlockDim",
    "Workload",
    "MantissaBits",
    "RequiredMantissaBits",
    "Side",
    "FillMode",
    "Diag",
    "BatchesPerBlock",
    "TRSM_OPERATORS",
]

SUPPORTED_SMS = (75, 80, 86, 87, 89, 90, 100, 120)
_ARCH_SPECIFIC_SMS = (90, 100, 120)
MAX_ALIGNMENT = 16


_COMPOSITION: list[Callable[[Any, Any], Any]] = []


def register_composition(compose: Callable[[Any, Any], Any]) -> None:
    """Called once by blasdx.describe.descriptor, where the composition rules live: ``a + b`` is ``compose(a, b)``.

    The descriptor is built from operators, so this module cannot import it; the
    descriptor module hands its ``compose`` over instead when it is imported (which
    importing blasdx always does).
    """
    _COMPOSITION[:] = [compose]


def _compose(left: Any, right: Any) -> Any:
    if not _COMPOSITION:  # pragma: no cover - blasdx/__init__ imports the descriptor first
        raise RuntimeError("blasdx.describe.descriptor is not imported, so operators cannot be composed yet")
    return _COMPOSITION[0](left, right)


class _Composable:
    """Mixin giving ``+`` to operators (and enum members)."""

    __slots__ = ()

    def __add__(self, other: Any) -> Any:
        return _compose(self, other)

    def __radd__(self, other: Any) -> Any:
        return _compose(other, self)


class _QualifiedRepr:
    """Mixin of enums whose ``repr`` is the member as code names it: ``Class.member``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


class Operator(_Composable):
    """Base of every description and execution operator."""

    __slots__ = ()


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) and not hasattr(value, "__index__"):
        raise DescriptorError(f"{what} must be a positive integer, got {value!r}")
    value = operator.index(value)
    if value <= 0:
        raise DescriptorError(f"{what} must be a positive integer, got {value}")
    return value


class _Extents(Operator):
    """Base of the operators of positive integers whose last may be left out (None: Size's K, LeadingDimension's ldc):
    each checked once, and the repr written as the call that made it."""

    __slots__ = ()

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            value = getattr(self, f.name)
            if value is not None or f.default is not None:
                object.__setattr__(self, f.name, _positive_int(value, f"{type(self).__name__}: {f.name}"))

    def __repr__(self) -> str:
        values = (getattr(self, f.name) for f in fields(self))  # type: ignore[arg-type]
        return f"{type(self).__name__}({', '.join(str(v) for v in values if v is not None)})"


@dataclass(frozen=True, repr=False)
class Size(_Extents):
    """Problem size: for MM, C is m x n, A is m x k, B is k x n; for TRSM, ``Size(m, n)`` with B m x n."""

    m: int
    n: int
    k: int | None = None


@dataclass(frozen=True, repr=False, init=False)
class Precision(Operator):
    """Element types of A, B and C; B and C default to A."""

    a: _dt.DType
    b: _dt.DType
    c: _dt.DType

    def __init__(self, a: Any, b: Any = None, c: Any = None) -> None:
        try:
            ta = _dt.as_dtype(a, argument="Precision: a")
            tb = ta if b is None else _dt.as_dtype(b, argument="Precision: b")
            tc = ta if c is None else _dt.as_dtype(c, argument="Precision: c")
        except TypeError as exc:
            raise DescriptorError(str(exc)) from None
        if ta.integral != tb.integral:
            raise DescriptorError(
                f"Precision: A is {ta.name} ({'integral' if ta.integral else 'floating point'}) but B is "
                f"{tb.name} ({'integral' if tb.integral else 'floating point'}); A and B must both be integral "
                "or both floating point"
            )
        if ta.integral != tc.integral:
            raise DescriptorError(
                f"Precision: A and B are {ta.name} x {tb.name} "
                f"({'integral' if ta.integral else 'floating point'}) but C is {tc.name}; "
                f"{'integer products accumulate into int32' if ta.integral else 'C must be floating point too'}"
            )
        if not any(_dt.find_combination(ta, tb, tc, cplx) for cplx in (False, True)):
            rows = "\n  ".join(_dt.supported_rows())
            raise UnsupportedError(
                f"Precision({ta.name}, {tb.name}, {tc.name}) is not a supported (A, B, C) combination. "
                f"Supported:\n  {rows}"
            )
        object.__setattr__(self, "a", ta)
        object.__setattr__(self, "b", tb)
        object.__setattr__(self, "c", tc)

    def __repr__(self) -> str:
        return f"Precision({self.a.name}, {self.b.name}, {self.c.name})"

    def __reduce__(self) -> Any:
        return (Precision, (self.a.name, self.b.name, self.c.name))


class Type(_Composable, _QualifiedRepr, enum.Enum):
    """Real or complex elements; complex values are interleaved (real, imaginary) pairs."""

    real = "real"
    complex = "complex"


class Function(_Composable, _QualifiedRepr, enum.Enum):
    """The operation; MM is C = alpha * A @ B + beta * C, TRSM solves A X = alpha B or X A = alpha B in place."""

    MM = "MM"
    TRSM = "TRSM"


class Layout(enum.Enum):
    """Storage order of one matrix."""

    row_major = "row_major"
    col_major = "col_major"

    def __repr__(self) -> str:
        return self.name


row_major = Layout.row_major
col_major = Layout.col_major
left_layout = col_major  # cuBLASDx's names for the same orders (CuTe's LayoutLeft is column-major)
right_layout = row_major


def _layout(value: Any, what: str) -> Layout:
    if isinstance(value, Layout):
        return value
    if isinstance(value, str):
        key = value.lower().replace("-", "_")
        aliases = {"left_layout": col_major, "right_layout": row_major, "row": row_major, "col": col_major}
        if key in Layout.__members__:
            return Layout[key]
        if key in aliases:
            return aliases[key]
    raise DescriptorError(f"{what} must be row_major or col_major, got {value!r}")


@dataclass(frozen=True, repr=False, init=False)
class Arrangement(Operator):
    """Storage order of A, B and C (in global memory and in the shared-memory API)."""

    a: Layout
    b: Layout
    c: Layout

    def __init__(self, a: Any, b: Any = col_major, c: Any = col_major) -> None:
        object.__setattr__(self, "a", _layout(a, "Arrangement: a"))
        object.__setattr__(self, "b", _layout(b, "Arrangement: b"))
        object.__setattr__(self, "c", _layout(c, "Arrangement: c"))

    def __repr__(self) -> str:
        return f"Arrangement({self.a!r}, {self.b!r}, {self.c!r})"

    def __reduce__(self) -> Any:
        return (Arrangement, (self.a.name, self.b.name, self.c.name))


DEFAULT_ARRANGEMENT = Arrangement(row_major, col_major, col_major)


class Transpose(_QualifiedRepr, enum.Enum):
    """cuBLAS-style operand modes of the deprecated TransposeMode operator."""

    N = "non_transposed"
    T = "transposed"
    C = "conj_transposed"


N, T, C = Transpose.N, Transpose.T, Transpose.C


def _transpose(value: Any, what: str) -> Transpose:
    if isinstance(value, Transpose):
        return value
    if isinstance(value, str):
        for mode in Transpose:
            if value in (mode.name, mode.value):
                return mode
    raise DescriptorError(f"{what} must be N, T or C (Transpose), got {value!r}")


@dataclass(frozen=True, repr=False, init=False)
class TransposeMode(Operator):
    """Deprecated: ``TransposeMode(a, b)``; use Arrangement. C means transposed and conjugated."""

    a: Transpose
    b: Transpose

    def __init__(self, a: Any, b: Any) -> None:
        warnings.warn(
            "TransposeMode is deprecated; use Arrangement (N -> col_major, T/C -> row_major)",
            DeprecationWarning,
            stacklevel=2,
        )
        object.__setattr__(self, "a", _transpose(a, "TransposeMode: a"))
        object.__setattr__(self, "b", _transpose(b, "TransposeMode: b"))

    def as_arrangement(self) -> Arrangement:
        """The equivalent Arrangement: N is column-major, T and C are row-major; C stays column-major."""
        order = {Transpose.N: col_major, Transpose.T: row_major, Transpose.C: row_major}
        return Arrangement(order[self.a], order[self.b], col_major)

    @property
    def conjugate(self) -> tuple[bool, bool]:
        """Whether A and B are conjugated when loaded."""
        return self.a is Transpose.C, self.b is Transpose.C

    def __repr__(self) -> str:
        return f"TransposeMode({self.a!r}, {self.b!r})"

    def __reduce__(self) -> Any:
        return (_transpose_mode_quiet, (self.a.name, self.b.name))


def _transpose_mode_quiet(a: str, b: str) -> TransposeMode:
    """Rebuild a TransposeMode without warning again (pickle)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return TransposeMode(a, b)


@dataclass(frozen=True, repr=False)
class LeadingDimension(_Extents):
    """Leading dimensions (elements between consecutive columns, or rows for row-major).

    ``ldc`` may be left out: a GEMM then keeps C tight, and a TRSM (which has no C) takes
    ``LeadingDimension(lda, ldb)``.
    """

    lda: int
    ldb: int
    ldc: int | None = None


@dataclass(frozen=True, repr=False)
class Alignment(Operator):
    """Guaranteed byte alignment of the A, B and C pointers (powers of two, at most 16)."""

    a: int
    b: int
    c: int

    def __post_init__(self) -> None:
        for name in ("a", "b", "c"):
            value = _positive_int(getattr(self, name), f"Alignment: {name}")
            if value & (value - 1) or value > MAX_ALIGNMENT:
                raise DescriptorError(
                    f"Alignment: {name} must be a power of two no larger than {MAX_ALIGNMENT} bytes, got {value}"
                )
            object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        if (self.a, self.b, self.c) == (MAX_ALIGNMENT,) * 3:
            return "MaxAlignment"
        return f"Alignment({self.a}, {self.b}, {self.c})"


MaxAlignment = Alignment(MAX_ALIGNMENT, MAX_ALIGNMENT, MAX_ALIGNMENT)


@dataclass(frozen=True, repr=False)
class SM(Operator):
    """Target architecture: ``SM(90)`` or ``SM(900)``; ``arch_specific=True`` targets sm_90a."""

    cc: int
    arch_specific: bool = False

    def __post_init__(self) -> None:
        cc = _positive_int(self.cc, "SM: cc")
        if cc >= 700 and cc % 10 == 0 and cc // 10 in SUPPORTED_SMS:  # x10 form: 900 -> 90, 1000 -> 100
            cc //= 10
        if cc not in SUPPORTED_SMS:
            listed = ", ".join(str(s) for s in SUPPORTED_SMS)
            raise DescriptorError(
                f"SM: {self.cc} is not a supported architecture; expected one of {listed}, "
                f"or the same times ten (SM(900) is SM(90))"
            )
        if not isinstance(self.arch_specific, bool):
            raise DescriptorError(f"SM: arch_specific must be True or False, got {self.arch_specific!r}")
        if self.arch_specific and cc not in _ARCH_SPECIFIC_SMS:
            listed = ", ".join(str(s) for s in _ARCH_SPECIFIC_SMS)
            raise DescriptorError(f"SM: arch_specific=True exists only for SM {listed}, not {cc}")
        object.__setattr__(self, "cc", cc)

    @property
    def arch(self) -> str:
        """The NVRTC target name, e.g. ``sm_90a``."""
        return f"sm_{self.cc}{'a' if self.arch_specific else ''}"

    def __repr__(self) -> str:
        return f"SM({self.cc}{', arch_specific=True' if self.arch_specific else ''})"


@dataclass(frozen=True, repr=False)
class Block(Operator):
    """Execution operator: the GEMM runs cooperatively on one CUDA thread block."""

    def __repr__(self) -> str:
        return "Block()"


@dataclass(frozen=True, repr=False)
class BlockDim(Operator):
    """Threads of the block; x and y 1..1024, z 1..64 (CUDA's limits), 32..1024 threads in all."""

    x: int
    y: int = 1
    z: int = 1

    def __post_init__(self) -> None:
        for name, limit in (("x", 1024), ("y", 1024), ("z", 64)):
            value = _positive_int(getattr(self, name), f"BlockDim: {name}")
            if value > limit:
                raise DescriptorError(f"BlockDim: {name} must be at most {limit}, got {value}")
            object.__setattr__(self, name, value)
        if not 32 <= self.threads <= 1024:
            raise DescriptorError(
                f"BlockDim: x*y*z must be between 32 and 1024 threads, got {self.x}*{self.y}*{self.z} = {self.threads}"
            )

    @property
    def threads(self) -> int:
        return self.x * self.y * self.z

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.x, self.y, self.z)

    def __repr__(self) -> str:
        if (self.y, self.z) == (1, 1):
            return f"BlockDim({self.x})"
        return f"BlockDim({self.x}, {self.y}, {self.z})"


class Workload(_Composable, _QualifiedRepr, enum.Enum):
    """What the block GEMM is for, which decides the suggested block size and tiling.

    ``memory_bound`` (the default): each problem comes from global memory, is multiplied
    once and stored, as ``execute()`` does for a batch: more warps keep more loads in
    flight. ``compute_bound``: the operands stay in shared memory and the GEMM runs many
    times on them (fusion): fewer threads with larger warp (or thread) tiles read each
    fragment for more products, and more blocks fit on an SM. BlockDim still overrides
    the suggestion.
    """

    memory_bound = "memory_bound"
    compute_bound = "compute_bound"


@dataclass(frozen=True, repr=False)
class MantissaBits(Operator):
    """Mantissa bits (stored, without the implicit one) the products must keep: a minimum.

    The descriptor runs the cheapest scheme that keeps them (``Descriptor.scheme``,
    blasdx.engine.emulation): float32 inputs with 11-23 bits as three tf32 products of split
    operands (3xtf32), with 1-10 as one tf32 product, on mma.sync (sm_80 and newer); other
    types keep their own products, and asking for more bits than a type has is refused.
    cuBLASDx calls it RequiredMantissaBits.
    """

    bits: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "bits", _positive_int(self.bits, "MantissaBits: bits"))

    def __repr__(self) -> str:
        return f"MantissaBits({self.bits})"


RequiredMantissaBits = MantissaBits  # cuBLASDx's name for the same operator


# ---------------------------------------------------------------------------------------------- TRSM


class Side(_Composable, _QualifiedRepr, enum.Enum):
    """TRSM: where A stands; ``left`` solves A X = alpha B (A is M x M), ``right`` X A = alpha B (A is N x N)."""

    left = "left"
    right = "right"


class FillMode(_Composable, _QualifiedRepr, enum.Enum):
    """TRSM: which triangle of A holds the matrix; the other one is never read."""

    lower = "lower"
    upper = "upper"


class Diag(_Composable, _QualifiedRepr, enum.Enum):
    """TRSM: ``unit`` takes A's diagonal as ones (and never reads it), ``non_unit`` divides by it."""

    unit = "unit"
    non_unit = "non_unit"


@dataclass(frozen=True, repr=False)
class BatchesPerBlock(Operator):
    """TRSM: independent systems one thread block solves side by side (each on its own threads)."""

    batches: int

    def __post_init__(self) -> None:
        value = _positive_int(self.batches, "BatchesPerBlock: batches")
        if value > 1024:
            raise DescriptorError(f"BatchesPerBlock: batches must be at most 1024 (one thread each), got {value}")
        object.__setattr__(self, "batches", value)

    def __repr__(self) -> str:
        return f"BatchesPerBlock({self.batches})"


#: Operators that describe a triangular solve and apply to Function.TRSM only.
TRSM_OPERATORS: tuple[type, ...] = (Side, FillMode, Diag, BatchesPerBlock)

"""Descriptor: a frozen set of operators that validates itself and answers every trait.

``+`` of operators and descriptors is order-free and associative. Rules whose outcome is
already certain from the operators given (a duplicate, a leading dimension too small for
either order, a type combination no SM runs) raise at ``+``; rules that depend on the
resolved kernel (shared-memory fit) or on operators still missing are checked by
``validate()`` and reported by ``is_supported``, so candidates can be compared without
``try``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..base import dtypes as _dt
from ..base.errors import DescriptorError, ExecutionError, UnsupportedError
from ..plan import heuristics as _h
from . import operators as _operators
from . import schemes as _schemes
from . import backend as _backend  # execute's launcher, put in place on the first call
from .backend import runtime as _runtime  # source / compile / execute: the one way up
from .operators import (
    DEFAULT_ARRANGEMENT, SM, TRSM_OPERATORS, Alignment, Arrangement, BatchesPerBlock, Block, BlockDim, Diag,
    FillMode, Function, LeadingDimension, MantissaBits, Operator, Precision, Side, Size, TransposeMode, Type,
    Workload, row_major,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..compile.compiled import CompiledKernel
    from ..compile.lto import Ltoir

__all__ = ["Descriptor"]

_ORDER: tuple[type, ...] = (
    Size, Precision, Type, Function, Side, FillMode, Diag, Arrangement, TransposeMode, LeadingDimension, Alignment,
    SM, Block, BlockDim, Workload, MantissaBits, BatchesPerBlock,
)
_DEFAULT_PRECISION = Precision(_dt.float32)


def _category(op: Any) -> type:
    for kind in _ORDER:
        if isinstance(op, kind):
            return kind
    raise TypeError(f"cannot add {op!r} ({type(op).__name__}) to a blasdx descriptor; expected an operator")


def _operators_of(value: Any) -> tuple[Any, ...]:
    if isinstance(value, Descriptor):
        return value._ops
    if isinstance(value, (Operator, Type, Function, Side, FillMode, Diag, Workload)):
        return (value,)
    raise TypeError(f"cannot add {value!r} ({type(value).__name__}) to a blasdx descriptor; expected an operator")


#: The Descriptor subclass of each Function other than MM (filled by the module defining it:
#: blasdx.describe.trsm registers TrsmDescriptor when the package loads), so that this layer imports
#: nothing that builds on it.
FUNCTION_CLASSES: dict[Any, type] = {}


class Descriptor:
    """An immutable block-GEMM description; build it with ``+`` of operators."""

    __slots__ = ("_ops", "_by_kind", "__dict__")

    #: The matrices whose per-matrix traits (element_sizes, alignment, leading_dimension) it has: A, B, C.
    _MATRICES = 3

    def __new__(cls, operators: Iterable[Any] = ()) -> Descriptor:
        """A description with Function.TRSM is a :class:`blasdx.describe.trsm.TrsmDescriptor` (its traits differ)."""
        if cls is Descriptor and isinstance(operators, (tuple, list)):
            for function, subclass in FUNCTION_CLASSES.items():
                if function in operators:
                    cls = subclass
        return object.__new__(cls)

    def __init__(self, operators: Iterable[Any] = ()) -> None:
        by_kind: dict[type, Any] = {}
        for op in operators:
            kind = _category(op)
            if kind in by_kind:
                raise DescriptorError(
                    f"{by_kind[kind]!r} and {op!r}: a descriptor takes one {kind.__name__} operator"
                )
            by_kind[kind] = op
        if Arrangement in by_kind and TransposeMode in by_kind:
            raise DescriptorError(
                f"{by_kind[Arrangement]!r} and {by_kind[TransposeMode]!r}: Arrangement and the deprecated "
                "TransposeMode describe the same thing; use Arrangement only"
            )
        object.__setattr__(self, "_by_kind", by_kind)
        object.__setattr__(self, "_ops", tuple(by_kind[k] for k in _ORDER if k in by_kind))
        self._check_certain_rules()

    # -- composition -----------------------------------------------------------------------

    @classmethod
    def compose(cls, left: Any, right: Any) -> Descriptor:
        """``left + right`` for any mix of operators and descriptors."""
        return cls(_operators_of(left) + _operators_of(right))

    def __add__(self, other: Any) -> Descriptor:
        try:
            return Descriptor.compose(self, other)
        except TypeError:
            return NotImplemented

    def __radd__(self, other: Any) -> Descriptor:
        try:
            return Descriptor.compose(other, self)
        except TypeError:
            return NotImplemented

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a blasdx Descriptor is immutable; build a new one with + (tried to set {name})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("a blasdx Descriptor is immutable")

    def _get(self, kind: type) -> Any:
        return self._by_kind.get(kind)

    def has(self, kind: type) -> bool:
        """Whether the operator ``kind`` was given explicitly."""
        return kind in self._by_kind

    @property
    def operators(self) -> tuple[Any, ...]:
        """The operators given, in canonical order."""
        return self._ops

    # -- value semantics ----------------------------------------------------------------------

    @cached_property
    def _key(self) -> tuple[Any, ...]:
        """What the descriptor means, with every default resolved: the basis of == and hash."""
        size = self._get(Size)
        return (
            size,
            tuple(self._get(kind) for kind in TRSM_OPERATORS),
            self._precision,
            self.type,
            self._get(Function),
            self.arrangement,
            self.conjugate,
            self.leading_dimension if size and size.k is not None else self._get(LeadingDimension),
            self.alignment,
            self._get(SM),
            self.has(Block),
            self.block_dim if self._plannable else self._get(BlockDim),
            self.workload,
            self._get(MantissaBits),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Descriptor):
            return NotImplemented
        return self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __reduce__(self) -> Any:
        return (_rebuild, (self._ops,))

    def __repr__(self) -> str:
        return " + ".join(repr(op) for op in self._ops) if self._ops else "Descriptor()"

    def __str__(self) -> str:
        lines = [repr(self)]
        if self.is_supported:
            lines.extend(self._summary())
        else:
            try:
                self.validate()
            except DescriptorError as exc:
                lines.append(f"  (not ready: {str(exc).splitlines()[0]})")
        return "\n".join(lines)

    def _summary(self) -> tuple[str, str]:
        """str()'s lines under repr() for a supported description: the problem, then the kernel's choices."""
        return (
            (f"  {self.m}x{self.n}x{self.k} {self.type.name} "
             f"{self.a_value_type} x {self.b_value_type} -> {self.c_value_type}, "
             f"arrangement {self.arrangement.a.name}/{self.arrangement.b.name}/{self.arrangement.c.name}"),
            (f"  instruction {self.instruction}, suggested_block_dim {self.suggested_block_dim}, "
             f"shared_memory_size {self.shared_memory_size} B"),
        )

    # -- resolved operators -----------------------------------------------------------------

    def _need(self, kind: type, trait: str) -> Any:
        op = self._get(kind)
        if op is None:
            raise DescriptorError(f"{trait}: this descriptor has no {kind.__name__} operator ({self!r})")
        return op

    @property
    def _precision(self) -> Precision:
        return self._get(Precision) or _DEFAULT_PRECISION

    @property
    def size(self) -> tuple[int, ...]:
        """(M, N, K); (M, N) for a Size without K (a TRSM's)."""
        s = self._need(Size, "size")
        return (s.m, s.n) if s.k is None else (s.m, s.n, s.k)

    @property
    def m(self) -> int:
        """M: rows of A and C."""
        return self._need(Size, "m").m

    @property
    def n(self) -> int:
        """N: columns of B and C."""
        return self._need(Size, "n").n

    @property
    def k(self) -> int:
        """K: columns of A, rows of B (the summed extent)."""
        return self._gemm_size("k").k

    def _gemm_size(self, trait: str) -> Size:
        """The Size operator, which must have K (a GEMM's); DescriptorError for Size(M, N)."""
        s = self._need(Size, trait)
        if s.k is None:
            raise DescriptorError(
                f"{trait}: {s!r} has no K; a GEMM needs Size(M, N, K) (Size(M, N) describes a Function.TRSM)"
            )
        return s

    @property
    def precision(self) -> tuple[_dt.DType, _dt.DType, _dt.DType]:
        """(A, B, C) element types of the real parts; float32 when no Precision was given."""
        p = self._precision
        return (p.a, p.b, p.c)

    @property
    def type(self) -> Type:
        """Type.real unless Type.complex was given."""
        return self._get(Type) or Type.real

    @property
    def is_complex(self) -> bool:
        """Whether the values are complex (Type.complex)."""
        return self.type is Type.complex

    def _value_type(self, real: _dt.DType) -> _dt.DType:
        """``real``, or its complex type for a complex descriptor."""
        return _dt.complex_of(real) if self.is_complex else real

    @property
    def a_value_type(self) -> _dt.DType:
        """Element type of A: Precision's a, complex for Type.complex."""
        return self._value_type(self._precision.a)

    @property
    def b_value_type(self) -> _dt.DType:
        """Element type of B: Precision's b, complex for Type.complex."""
        return self._value_type(self._precision.b)

    @property
    def c_value_type(self) -> _dt.DType:
        """Element type of C: Precision's c, complex for Type.complex."""
        return self._value_type(self._precision.c)

    @property
    def scalar_type(self) -> _dt.DType:
        """Type of alpha and beta (each part, for complex): float32, float64 or int32."""
        a, b, c = self.precision
        row = _dt.find_combination(a, b, c, self.is_complex)
        if row is None:
            self._check_combination()
        return row.scalar

    @property
    def accumulator_type(self) -> _dt.DType:
        """Type the products are summed in (each part, for complex)."""
        a, b, c = self.precision
        row = _dt.find_combination(a, b, c, self.is_complex)
        if row is None:
            self._check_combination()
        return row.accumulator

    @property
    def mantissa_bits(self) -> int | None:
        """The mantissa bits MantissaBits asks the products to keep; None when it is not given."""
        op = self._get(MantissaBits)
        return op.bits if op is not None else None

    @property
    def scheme(self) -> _schemes.Scheme:
        """How the products are formed (blasdx.describe.schemes.Scheme): ``name`` ("native", "tf32",
        "3xtf32"), ``products`` (tensor-core products per product) and the mantissa bits kept.

        The cheapest scheme that keeps MantissaBits (:func:`blasdx.describe.schemes.resolve_block`):
        float32 asking for 11-23 bits runs 3xtf32 on mma.sync, 1-10 bits tf32 (sm_80 and
        newer; FFMA before, which keeps every bit); other types, float64 included, keep their
        own products. Without MantissaBits, the type's own products.
        """
        a, b, _ = self.precision
        sm = self._get(SM)
        try:
            scheme = _schemes.resolve_block(a, self.mantissa_bits, sm.cc if sm else None)
            if b != a:  # mixed fp8 / 8-bit integers: B must keep the bits too
                _schemes.resolve_block(b, self.mantissa_bits, sm.cc if sm else None)
        except ExecutionError as exc:
            raise DescriptorError(
                f"{self._get(MantissaBits)!r} and {self._precision!r}: "
                + str(exc).split(": ", 1)[1].replace("leave mantissa_bits unset", "leave MantissaBits out")
            ) from None
        return scheme

    @property
    def function(self) -> Function:
        """The Function operator given (Function.MM or Function.TRSM)."""
        return self._need(Function, "function")

    @property
    def arrangement(self) -> Arrangement:
        """Explicit Arrangement, the one TransposeMode implies, or (row, col, col)."""
        if self.has(Arrangement):
            return self._get(Arrangement)
        if self.has(TransposeMode):
            return self._get(TransposeMode).as_arrangement()
        return DEFAULT_ARRANGEMENT

    @property
    def conjugate(self) -> tuple[bool, bool]:
        """Whether A and B are conjugated on load (TransposeMode C on a complex GEMM)."""
        if self.has(TransposeMode) and self.is_complex:
            return self._get(TransposeMode).conjugate
        return (False, False)

    @property
    def a_dim(self) -> tuple[int, int]:
        """Logical extents of A: (M, K)."""
        return (self.m, self.k)

    @property
    def b_dim(self) -> tuple[int, int]:
        """Logical extents of B: (K, N)."""
        return (self.k, self.n)

    @property
    def c_dim(self) -> tuple[int, int]:
        """Logical extents of C: (M, N)."""
        return (self.m, self.n)

    @property
    def _min_leading_dimension(self) -> tuple[int, int, int]:
        """Tight leading dimensions implied by the size and the arrangement."""
        p = self._problem_shape()
        return (p.a_inner, p.b_inner, p.c_inner)

    @property
    def leading_dimension(self) -> tuple[int, ...]:
        """(lda, ldb, ldc): explicit, else tight (M or K for A, and so on, by arrangement); a TRSM's (lda, ldb)."""
        tight = self._min_leading_dimension
        ld = self._get(LeadingDimension)
        if ld is None:
            return tight
        return tuple(t if given is None else given for given, t in zip((ld.lda, ld.ldb, ld.ldc), tight))

    @property
    def lda(self) -> int:
        """Leading dimension of A (elements between its rows or columns, by arrangement)."""
        return self.leading_dimension[0]

    @property
    def ldb(self) -> int:
        """Leading dimension of B (elements between its rows or columns, by arrangement)."""
        return self.leading_dimension[1]

    @property
    def ldc(self) -> int:
        """Leading dimension of C (elements between its rows or columns, by arrangement)."""
        return self.leading_dimension[2]

    @property
    def element_sizes(self) -> tuple[int, ...]:
        """Bytes of one A, B and C element (complex counts both parts); a TRSM's A and B."""
        p = self._precision
        return tuple(self._value_type(t).size for t in (p.a, p.b, p.c)[: self._MATRICES])

    @property
    def alignment(self) -> tuple[int, ...]:
        """Byte alignment of the A, B, C pointers (a TRSM's A and B): explicit, else one element."""
        al = self._get(Alignment)
        if al is not None:
            return (al.a, al.b, al.c)[: self._MATRICES]
        return self.element_sizes

    @property
    def suggested_alignment(self) -> tuple[int, ...]:
        """16 bytes each: what the widest copies need (MaxAlignment)."""
        return (16,) * self._MATRICES

    @property
    def sm(self) -> int:
        """The SM operator's compute capability, e.g. 90 (``arch`` says whether it is sm_90a)."""
        return self._need(SM, "sm").cc

    @property
    def arch(self) -> str:
        """NVRTC target, e.g. ``sm_80`` or ``sm_90a``."""
        return self._need(SM, "arch").arch

    @property
    def a_size(self) -> int:
        """Elements A occupies with its leading dimension (lda * K for column-major A)."""
        p = self._problem_shape()
        return self.lda * p.a_outer

    @property
    def b_size(self) -> int:
        """Elements B occupies with its leading dimension."""
        p = self._problem_shape()
        return self.ldb * p.b_outer

    @property
    def c_size(self) -> int:
        """Elements C occupies with its leading dimension."""
        p = self._problem_shape()
        return self.ldc * p.c_outer

    @property
    def shared_memory_size(self) -> int:
        """Bytes of A, B and C in shared memory with the descriptor's leading dimensions.

        This is what the shared-memory API (``execute(alpha, sA, sB, beta, sC)``) needs;
        each buffer starts on a 16-byte boundary. On wgmma plans (sm_90a) A and B are dense
        swizzled panels on 1024-byte boundaries, plus the bytes that aligning a 16-byte
        aligned block to 1024 may skip (see :meth:`_device_ab_bytes`).
        """
        _, _, sc = self.element_sizes
        return _h.round_up(self._device_ab_bytes(), _h.SMEM_BUFFER_ALIGNMENT) + self.c_size * sc

    @property
    def shared_memory_size_ab(self) -> int:
        """Bytes of A and B only: what the register-accumulator API needs."""
        return self._device_ab_bytes()

    def _device_ab_bytes(self) -> int:
        """Bytes of A then B as the device API (api.cuh ``Gemm``) places them."""
        sa, sb, _ = self.element_sizes
        if self._plannable and self.plan.is_wgmma:
            align = _h.WGMMA_SMEM_ALIGNMENT
            a_bytes, b_bytes = self.m * self.k * sa, self.k * self.n * sb
            return align - _h.SMEM_BUFFER_ALIGNMENT + _h.round_up(a_bytes, align) + b_bytes
        return _h.round_up(self.a_size * sa, _h.SMEM_BUFFER_ALIGNMENT) + self.b_size * sb

    @property
    def suggested_leading_dimension(self) -> tuple[int, int, int]:
        """Padded leading dimensions that avoid bank conflicts, when A + B + C still fit."""
        p = self._problem_shape()
        sa, sb, sc = self.element_sizes
        padded = (
            _h.padded_leading_dimension(p.a_inner, sa),
            _h.b_leading_dimension(p),
            _h.padded_leading_dimension(p.c_inner, sc),
        )
        align = _h.SMEM_BUFFER_ALIGNMENT
        need = (
            _h.round_up(padded[0] * p.a_outer * sa, align)
            + _h.round_up(padded[1] * p.b_outer * sb, align)
            + padded[2] * p.c_outer * sc
        )
        if need <= _h.MAX_SHARED_MEMORY[self.sm]:
            return padded
        return (p.a_inner, p.b_inner, p.c_inner)

    # -- resolved kernel ---------------------------------------------------------------------------

    def _problem_shape(self) -> _h.Problem:
        s = self._gemm_size("size")
        a, b, c = self.precision
        arr = self.arrangement
        sm = self._get(SM)
        return _h.Problem(
            s.m, s.n, s.k, a, b, c, self.is_complex,
            arr.a is row_major, arr.b is row_major, arr.c is row_major,
            sm.cc if sm else 0,
            sm.arch_specific if sm else False,
            self.workload is Workload.compute_bound,
            self.scheme.name,
        )

    @property
    def _plannable(self) -> bool:
        return self.has(Size) and self._get(Size).k is not None and self.has(SM) and self._combination_ok()

    def _combination_ok(self) -> bool:
        a, b, c = self.precision
        row = _dt.find_combination(a, b, c, self.is_complex)
        return row is not None and (not self.has(SM) or row.min_sm <= self.sm)

    @cached_property
    def plan(self) -> _h.KernelPlan:
        """The resolved block GEMM (instruction, tiling, threads, shared-memory layouts)."""
        self._need(Size, "plan")
        self._need(SM, "plan")
        self._check_combination()
        bd = self._get(BlockDim)
        return _h.plan_kernel(self._problem_shape(), bd.threads if bd else None)

    @property
    def instruction(self) -> str:
        """The instruction the batched kernel uses, e.g. ``mma.sync.m16n8k16``, ``wgmma.m64n128k16`` or ``fma``."""
        return self.plan.instruction

    @property
    def workload(self) -> Workload:
        """Workload when given, else ``Workload.memory_bound`` (what ``execute()`` of a batch is)."""
        return self._get(Workload) or Workload.memory_bound

    @property
    def suggested_block_dim(self) -> tuple[int, int, int]:
        """Threads blasdx suggests for this GEMM and its Workload (memory-bound batches by default)."""
        self._need(Size, "suggested_block_dim")
        self._need(SM, "suggested_block_dim")
        self._check_combination()
        return (_h.plan_kernel(self._problem_shape()).threads, 1, 1)

    @property
    def block_dim(self) -> tuple[int, int, int]:
        """BlockDim when given, else ``suggested_block_dim``."""
        bd = self._get(BlockDim)
        return bd.as_tuple() if bd else self.suggested_block_dim

    @property
    def max_threads_per_block(self) -> int:
        """Threads of ``block_dim`` (x * y * z): what a launch of the kernel must give."""
        x, y, z = self.block_dim
        return x * y * z

    @property
    def suggested_smem_layout_a(self) -> _h.SmemLayout:
        """A's shared-memory layout in blasdx's kernel (shape, strides, swizzle): free of bank conflicts."""
        return self.plan.smem_a

    @property
    def suggested_smem_layout_b(self) -> _h.SmemLayout:
        """B's shared-memory layout in blasdx's kernel (shape, strides, swizzle): free of bank conflicts."""
        return self.plan.smem_b

    @property
    def suggested_smem_layout_c(self) -> _h.SmemLayout:
        """C's shared-memory layout with the suggested ldc, in C's arrangement."""
        p = self._problem_shape()
        ldc = self.suggested_leading_dimension[2]
        return _h.SmemLayout((p.m, p.n), (ldc, 1) if p.c_row_major else (1, ldc))

    @property
    def kernel_shared_memory_size(self) -> int:
        """Dynamic shared memory of blasdx's own batched kernel (A and B, and C when it is staged)."""
        return self.plan.shared_memory

    # -- completeness and validation ------------------------------------------------------------------

    @property
    def is_complete(self) -> bool:
        """Size, Function and SM are given (a complete description)."""
        return all(self.has(k) for k in (Size, Function, SM))

    @property
    def is_complete_execution(self) -> bool:
        """A complete description with the Block execution operator."""
        return self.is_complete and self.has(Block)

    @property
    def is_supported(self) -> bool:
        """Whether ``validate()`` passes: complete, a supported type on this SM, and it fits."""
        try:
            self.validate()
        except DescriptorError:
            return False
        return True

    def _check_complete(self) -> None:
        """DescriptorError unless Size, Function and SM were given (validate's first check)."""
        missing = [k.__name__ for k in (Size, Function, SM) if not self.has(k)]
        if missing:
            raise DescriptorError(
                f"incomplete descriptor: missing {', '.join(missing)} ({self!r}); a description needs Size, "
                "Function and SM"
            )

    def validate(self) -> Descriptor:
        """Raise the first problem found (DescriptorError / UnsupportedError); return self."""
        self._check_complete()
        self._check_certain_rules(assume_defaults=True)
        self._check_combination()
        need = self.kernel_shared_memory_size
        have = _h.MAX_SHARED_MEMORY[self.sm]
        if need > have:
            raise UnsupportedError(
                f"{self!r} needs {need} bytes of shared memory for A and B but sm_{self.sm} has {have} per block; "
                "reduce Size (M*K + K*N elements) or split K over several calls"
            )
        threads = self.max_threads_per_block
        if threads > _h.MAX_THREADS_PER_BLOCK:
            raise UnsupportedError(f"BlockDim: {threads} threads exceed {_h.MAX_THREADS_PER_BLOCK} per block")
        return self

    def _check_combination(self, type_: Type | None = None) -> None:
        """Raise UnsupportedError unless (A, B, C) runs as ``type_`` (default: this Type) on this SM."""
        a, b, c = self.precision
        type_ = type_ or self.type
        is_complex = type_ is Type.complex
        row = _dt.find_combination(a, b, c, is_complex)
        kind = type_.name
        if row is None:
            rows = "\n  ".join(_dt.supported_rows(is_complex=is_complex))
            raise UnsupportedError(
                f"{self._precision!r} + Type.{kind}: no {kind} {a.name} x {b.name} -> {c.name} GEMM. "
                f"Supported {kind} combinations:\n  {rows}"
            )
        if self.has(SM) and row.min_sm > self.sm:
            rows = "\n  ".join(_dt.supported_rows(self.sm))
            raise UnsupportedError(
                f"{self._precision!r} + {self._get(SM)!r}: {kind} {a.name} x {b.name} -> {c.name} needs "
                f"sm_{row.min_sm} or newer. Supported on sm_{self.sm}:\n  {rows}"
            )

    def _check_certain_rules(self, assume_defaults: bool = False) -> None:
        """Cross-operator rules. At ``+`` only what the explicit operators make certain."""
        self._check_function_operators()
        # type combination on this SM (for every Type still possible)
        if self.has(Precision) and (self.has(SM) or self.has(Type) or assume_defaults):
            types = [self.type] if (self.has(Type) or assume_defaults) else [Type.real, Type.complex]
            failures = []
            for t in types:
                try:
                    self._check_combination(t)
                except UnsupportedError as exc:
                    failures.append(exc)
            if len(failures) == len(types):
                raise failures[0]
        self._check_leading_dimension(assume_defaults)
        self._check_alignment(assume_defaults)
        if self.has(MantissaBits) and (self.has(Precision) or assume_defaults):
            self.scheme  # noqa: B018 - raises DescriptorError when the type cannot keep the bits

    def _check_function_operators(self) -> None:
        """TRSM's operators (Side, FillMode, Diag, BatchesPerBlock) and Size(M, N) do not describe a GEMM."""
        function = self._get(Function)
        if function is Function.TRSM:  # a TRSM reaches here only when built from a one-shot iterator
            raise DescriptorError("Function.TRSM: build the descriptor with + (or from a tuple of operators)")
        if function is not Function.MM:
            return
        for kind in TRSM_OPERATORS:
            if self.has(kind):
                raise DescriptorError(
                    f"{self._get(kind)!r} and Function.MM: {kind.__name__} describes a triangular solve and "
                    "applies to Function.TRSM only"
                )
        size = self._get(Size)
        if size is not None and size.k is None:
            raise DescriptorError(
                f"{size!r} and Function.MM: a GEMM needs Size(M, N, K); Size(M, N) describes a Function.TRSM"
            )

    def _check_leading_dimension(self, assume_defaults: bool) -> None:
        ld, size = self._get(LeadingDimension), self._get(Size)
        if ld is None or size is None or size.k is None:
            return
        arr = self.arrangement
        known = self.has(Arrangement) or self.has(TransposeMode) or assume_defaults
        # matrix, its ld, its order, the minimum (name, value) when row-major and when column-major
        rules = (
            ("lda", "A", ld.lda, arr.a, ("K", size.k), ("M", size.m)),
            ("ldb", "B", ld.ldb, arr.b, ("N", size.n), ("K", size.k)),
            ("ldc", "C", ld.ldc, arr.c, ("N", size.n), ("M", size.m)),
        )
        for name, matrix, value, layout, row_min, col_min in rules:
            if value is None:  # LeadingDimension(lda, ldb): C tight
                continue
            if known:
                what, minimum = row_min if layout is row_major else col_min
                if value < minimum:
                    raise DescriptorError(
                        f"LeadingDimension: {name}={value} is smaller than {what}={minimum}, the minimum for "
                        f"{layout.name} {matrix} in {size!r}"
                    )
            elif value < min(row_min[1], col_min[1]):
                raise DescriptorError(
                    f"LeadingDimension: {name}={value} is smaller than both {row_min[0]}={row_min[1]} (row_major "
                    f"{matrix}) and {col_min[0]}={col_min[1]} (col_major {matrix}) of {size!r}"
                )

    def _check_alignment(self, assume_defaults: bool) -> None:
        al = self._get(Alignment)
        if al is None:
            return
        if not (self.has(Precision) or assume_defaults):
            return
        # a complex element is twice as wide; without Type the real (weaker) rule is certain
        scale = 2 if (self.is_complex and (self.has(Type) or assume_defaults)) else 1
        p = self._precision
        for name, value, dtype in (("a", al.a, p.a), ("b", al.b, p.b), ("c", al.c, p.c)):
            element = dtype.size * scale
            if value % element:
                kind = "complex " if scale == 2 else ""
                raise DescriptorError(
                    f"Alignment: {name}={value} bytes is not a multiple of the {kind}{dtype.name} element size "
                    f"({element} bytes)"
                )

    # -- kernels ---------------------------------------------------------------------------------------------

    def source(self) -> str:
        """The CUDA C++ that blasdx compiles for this descriptor (deterministic)."""
        return _runtime().source(self)

    def compile(self) -> CompiledKernel:
        """Compile (or fetch from the cache) the batched block-GEMM kernel of this descriptor."""
        return _runtime().compile(self)

    def ltoir(self, options: Any = None) -> Ltoir:
        """LTO-IR of this GEMM's extern "C" entry points (``.data``, ``.arch``, ``.symbols``,
        ``.declarations``), for linking into kernels of other JITs (docs/numba.md)."""
        return _runtime().ltoir(self, options)

    def execute(self, a: Any, b: Any, c: Any, *, alpha: Any = 1, beta: Any = 0, stream: Any = None) -> Any:
        """``C = alpha * A @ B + beta * C`` in place on device arrays; one block per problem."""
        return _backend.execute(self, a, b, c, alpha=alpha, beta=beta, stream=stream)


_operators.register_composition(Descriptor.compose)


def _rebuild(ops: tuple[Any, ...]) -> Descriptor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return Descriptor(ops)

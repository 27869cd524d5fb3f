"""TrsmDescriptor: a description with ``Function.TRSM`` (block-level triangular solve), its rules and traits.

``Size(M, N) + Function.TRSM + Side.left`` solves ``A X = alpha B`` for X with B M x N and
A M x M; ``Side.right`` solves ``X A = alpha B`` with A N x N. X overwrites B. FillMode
says which triangle of A holds it (the other is never read), Diag whether its diagonal is
taken as ones (and never read). Defaults, as in cuBLASDx: Side.left, FillMode.lower,
Diag.non_unit. ``Descriptor.compose`` builds this class whenever Function.TRSM is among the
operators; everything the GEMM descriptor knows that a TRSM shares (Precision, Type,
Arrangement of A and B, LeadingDimension(lda, ldb), Alignment of A and B, SM, Block,
BlockDim) reads the same, and what it has no meaning for (K, C) raises DescriptorError.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from ..base import dtypes as _dt
from ..base.errors import DescriptorError, UnsupportedError
from ..plan import heuristics as _h
from ..plan import trsm as _plan
from .backend import runtime
from .descriptor import FUNCTION_CLASSES, Descriptor
from .operators import (
    SM, Alignment, Arrangement, BatchesPerBlock, Block, BlockDim, Diag, FillMode, Function, LeadingDimension,
    MantissaBits, Precision, Side, Size, TransposeMode, Type, col_major, row_major,
)

__all__ = ["TrsmDescriptor", "solve_description", "supported_types"]


def supported_types() -> str:
    """The TRSM type table, for messages."""
    names = ", ".join(t.name for t in _plan.TRSM_TYPES)
    return f"{names} (real or complex), computed in their own precision"


def solve_description(size: Size, real: _dt.DType, is_complex: bool, flags: tuple[bool, bool, bool],
                      row_major_ab: tuple[bool, bool], ld: tuple[int, int], alignment: tuple[int, int, int],
                      sm: int) -> Descriptor:
    """The block TRSM of one call's operands, with ``flags`` (lower, left, unit): what the array calls
    ask for, one spelling for the whole-solve and the blocked solver's leaves."""
    lower, left, unit = flags
    a_row, b_row = row_major_ab
    return (
        size + Precision(real) + (Type.complex if is_complex else Type.real) + Function.TRSM
        + (Side.left if left else Side.right) + (FillMode.lower if lower else FillMode.upper)
        + (Diag.unit if unit else Diag.non_unit)
        + Arrangement(row_major if a_row else col_major, row_major if b_row else col_major)
        + LeadingDimension(*ld) + Alignment(*alignment) + SM(sm) + Block()
    )


def _check_at_least(name: str, value: int, size: Size, known: tuple[int, str, str] | None,
                    either: tuple[tuple[int, str, str], tuple[int, str, str]]) -> None:
    """A leading dimension at least its minimum: ``known`` (extent, its letter, why) when the operators
    decide it, else the smaller of ``either`` (extent, letter, the operator that would choose it)."""
    if known is not None:
        extent, letter, why = known
        if value < extent:
            raise DescriptorError(
                f"LeadingDimension: {name}={value} is smaller than {letter}={extent}, {why} in {size!r}"
            )
    elif value < min(extent for extent, _, _ in either):
        (e1, l1, w1), (e2, l2, w2) = either
        raise DescriptorError(
            f"LeadingDimension: {name}={value} is smaller than both {l1}={e1} ({w1}) and {l2}={e2} ({w2}) of {size!r}"
        )


def _no_c_trait(trait: str) -> property:
    """A C trait of the GEMM descriptor, which a TRSM answers with DescriptorError (it has no C)."""

    def fail(self: Any) -> Any:
        raise DescriptorError(f"{trait}: a TRSM has no C matrix; B holds the solution (b_dim, b_value_type, ldb ...)")

    return property(fail, doc="A TRSM has no C: DescriptorError.")


class TrsmDescriptor(Descriptor):
    """A block-level triangular solve; built by ``+`` whenever the operators include Function.TRSM."""

    __slots__ = ()

    #: A and B: a TRSM has no C.
    _MATRICES = 2

    # -- value semantics ----------------------------------------------------------------------

    @cached_property
    def _key(self) -> tuple[Any, ...]:
        """What the solve means, every default resolved: the basis of == and hash."""
        size = self._get(Size)
        return (
            "TRSM",
            size,
            self.side,
            self.fill_mode,
            self.diag,
            self._precision,
            self.type,
            self.arrangement.a,
            self.arrangement.b,
            self.leading_dimension if size else self._get(LeadingDimension),
            self.alignment,
            self._get(SM),
            self.has(Block),
            self._get(BatchesPerBlock),
            self._get(BlockDim),
        )

    def _summary(self) -> tuple[str, str]:
        """str()'s lines under repr(): the solve, then the kernel's choices."""
        return (
            (f"  TRSM {self.side.name} {self.fill_mode.name} {self.diag.name}: B {self.m}x{self.n}, "
             f"A {self.a_dim[0]}x{self.a_dim[1]}, {self.type.name} {self.b_value_type}, arrangement "
             f"{self.arrangement.a.name}/{self.arrangement.b.name}"),
            (f"  instruction {self.instruction}, suggested_block_dim {self.suggested_block_dim}, "
             f"batches_per_block {self.batches_per_block}, shared_memory_size {self.shared_memory_size} B"),
        )

    # -- the TRSM operators -------------------------------------------------------------------

    @property
    def side(self) -> Side:
        """Side.left (A X = alpha B) unless Side.right was given."""
        return self._get(Side) or Side.left

    @property
    def fill_mode(self) -> FillMode:
        """FillMode.lower unless FillMode.upper was given."""
        return self._get(FillMode) or FillMode.lower

    @property
    def diag(self) -> Diag:
        """Diag.non_unit unless Diag.unit was given."""
        return self._get(Diag) or Diag.non_unit

    @property
    def batches_per_block(self) -> int:
        """Systems one block solves: BatchesPerBlock when given, else the plan's choice."""
        bpb = self._get(BatchesPerBlock)
        return bpb.batches if bpb is not None else self.plan.batches

    @property
    def suggested_batches_per_block(self) -> int:
        """Systems per block that fill the block's warps within a quarter of the SM's shared memory."""
        p = self._trsm_problem()
        return _plan.suggested_batches(p, _plan.suggested_group_threads(p))

    # -- sizes ----------------------------------------------------------------------------------

    @property
    def size(self) -> tuple[int, int]:
        """(M, N): B is M x N."""
        s = self._need(Size, "size")
        return (s.m, s.n)

    @property
    def k(self) -> int:
        """A TRSM has no K: DescriptorError (Size(M, N) gives B's extents)."""
        raise DescriptorError("k: a TRSM has no K; Size(M, N) gives B's extents and A is M x M (left) or N x N")

    @property
    def _dim(self) -> int:
        """Extent of the square A."""
        return self.m if self.side is Side.left else self.n

    @property
    def a_dim(self) -> tuple[int, int]:
        """(M, M) on the left, (N, N) on the right."""
        return (self._dim, self._dim)

    @property
    def b_dim(self) -> tuple[int, int]:
        """Extents of B (and of the solution X that overwrites it): (M, N)."""
        return (self.m, self.n)

    c_dim = _no_c_trait("c_dim")

    c_value_type = _no_c_trait("c_value_type")

    @property
    def scalar_type(self) -> _dt.DType:
        """Type of alpha (each part, for complex): the element type, which is also the compute type."""
        return self._trsm_type()

    @property
    def accumulator_type(self) -> _dt.DType:
        """Type the solve computes in (each part): the element type."""
        return self._trsm_type()

    @property
    def _min_leading_dimension(self) -> tuple[int, int]:
        """Tight (lda, ldb): A's extent, and N or M by B's order."""
        b_inner = self.n if self.arrangement.b is row_major else self.m
        return (self._dim, b_inner)

    ldc = _no_c_trait("ldc")

    @property
    def a_size(self) -> int:
        """Elements A spans with its leading dimension."""
        return self.lda * self._dim

    @property
    def b_size(self) -> int:
        """Elements B spans with its leading dimension."""
        b_outer = self.m if self.arrangement.b is row_major else self.n
        return self.ldb * b_outer

    c_size = _no_c_trait("c_size")

    @property
    def shared_memory_size(self) -> int:
        """Bytes the device API needs: batches_per_block A's, then as many B's, each on a 16-byte boundary."""
        sa, sb = self.element_sizes
        align = _h.SMEM_BUFFER_ALIGNMENT
        return self.batches_per_block * (_h.round_up(self.a_size * sa, align) + _h.round_up(self.b_size * sb, align))

    @property
    def shared_memory_size_ab(self) -> int:
        """A GEMM trait: DescriptorError (a TRSM's shared_memory_size holds A and B)."""
        raise DescriptorError("shared_memory_size_ab: a GEMM trait; a TRSM needs shared_memory_size (A and B)")

    @property
    def suggested_leading_dimension(self) -> tuple[int, int]:
        """Padded (lda, ldb) free of bank conflicts: the batched kernel's own layout."""
        return (self.plan.smem_a.leading_dimension, self.plan.smem_b.leading_dimension)

    suggested_smem_layout_c = _no_c_trait("suggested_smem_layout_c")

    # -- the resolved solve ---------------------------------------------------------------------

    def _trsm_type(self) -> _dt.DType:
        """The one element type of A and B (the real part), checked against the TRSM table."""
        self._check_precision()
        return self._precision.a

    def _trsm_problem(self) -> _plan.TrsmProblem:
        s = self._need(Size, "size")
        arr = self.arrangement
        return _plan.TrsmProblem(
            s.m, s.n, self._trsm_type(), self.is_complex, self.side is Side.left, self.fill_mode is FillMode.lower,
            self.diag is Diag.unit, arr.a is row_major, arr.b is row_major, self._need(SM, "plan").cc,
        )

    @cached_property
    def plan(self) -> _plan.TrsmPlan:
        """Panels, threads per problem, batches per block, shared-memory layouts, update GEMMs."""
        self._check_certain_rules(assume_defaults=True)
        p = self._trsm_problem()
        bd, bpb = self._get(BlockDim), self._get(BatchesPerBlock)
        self._check_threads(p, bd.threads if bd else None, bpb.batches if bpb else None)
        return _plan.plan_trsm(p, bd.threads if bd else None, bpb.batches if bpb else None)

    @property
    def instruction(self) -> str:
        """The update GEMMs' instruction: ``fma``, or f64 DMMA (``mma.sync.m16n8k8`` on sm_90+, else ``m8n8k4``)."""
        return self.plan.instruction

    @property
    def suggested_block_dim(self) -> tuple[int, int, int]:
        """Suggested threads per problem times the batches per block (BatchesPerBlock, else suggested)."""
        p = self._trsm_problem()
        group = _plan.suggested_group_threads(p)
        bpb = self._get(BatchesPerBlock)
        return (group * (bpb.batches if bpb else _plan.suggested_batches(p, group)), 1, 1)

    @property
    def kernel_shared_memory_size(self) -> int:
        """Dynamic shared memory of blasdx's batched kernel (reciprocals of the diagonal, A and B per problem)."""
        return self.plan.shared_memory

    # -- validation -----------------------------------------------------------------------------

    def validate(self) -> TrsmDescriptor:
        """Raise the first problem found (DescriptorError / UnsupportedError); return self."""
        self._check_complete()
        plan = self.plan  # checks the operators and the threads
        need, have = plan.shared_memory, _h.MAX_SHARED_MEMORY[self.sm]
        if need > have:
            per = need // plan.batches
            raise UnsupportedError(
                f"{self!r} needs {need} bytes of shared memory ({plan.batches} x {per} for A, B and the "
                f"reciprocals of A's diagonal) but sm_{self.sm} has {have} per block; reduce Size or "
                "BatchesPerBlock (bx.solve_triangular splits independent right-hand sides over blocks)"
            )
        return self

    def _check_threads(self, p: _plan.TrsmProblem, threads: int | None, batches: int | None) -> None:
        """Threads split evenly into problems, whole warps reach the update GEMMs, at most 1024."""
        if threads is not None:
            groups = batches or 1
            if threads % groups:
                raise UnsupportedError(
                    f"BlockDim: {threads} threads do not split evenly into {groups} problems "
                    f"({self._get(BatchesPerBlock)!r}); give a multiple of {groups} threads"
                )
            group = threads // groups
            if _plan.needs_update(p) and group % 32:
                raise UnsupportedError(
                    f"BlockDim: {group} threads per problem; a TRSM with A {p.dim} x {p.dim} (more than "
                    f"{_plan.PANEL} unknowns) runs block GEMMs on whole warps, so give each problem a multiple "
                    "of 32 threads"
                )
        else:
            group = _plan.suggested_group_threads(p)
            if batches is not None and group * batches > _h.MAX_THREADS_PER_BLOCK:
                raise UnsupportedError(
                    f"BatchesPerBlock: {batches} problems x {group} threads each = {group * batches} threads, more "
                    f"than {_h.MAX_THREADS_PER_BLOCK} per block; ask for at most "
                    f"{_h.MAX_THREADS_PER_BLOCK // group} batches"
                )

    def _check_combination(self, type_: Type | None = None) -> None:
        self._check_precision()

    def _check_precision(self) -> None:
        """A and B share one type from the TRSM table (C, which a TRSM has not, repeats it or is left out)."""
        p = self._get(Precision)
        if p is None:
            return
        if not (p.a == p.b == p.c):
            raise DescriptorError(
                f"{p!r} and Function.TRSM: a TRSM solves in place, so A and B share one type; give "
                f"Precision({p.a.name})"
            )
        if p.a not in _plan.TRSM_TYPES:
            raise UnsupportedError(f"{p!r} and Function.TRSM: no {p.a.name} TRSM; supported: {supported_types()}")

    def _check_certain_rules(self, assume_defaults: bool = False) -> None:
        """What the operators given make certain (all of it at validate(), defaults assumed)."""
        size = self._get(Size)
        if size is not None and size.k is not None:
            raise DescriptorError(
                f"{size!r} and Function.TRSM: a TRSM takes Size(M, N) (B is M x N; A is M x M with Side.left, "
                "N x N with Side.right)"
            )
        if self.has(TransposeMode):
            raise DescriptorError(
                f"{self._get(TransposeMode)!r} and Function.TRSM: TransposeMode describes GEMM operands; give "
                "the storage order of A and B with Arrangement"
            )
        if self.has(MantissaBits):
            raise DescriptorError(
                f"{self._get(MantissaBits)!r} and Function.TRSM: MantissaBits chooses how GEMM products are formed "
                "and applies to Function.MM only"
            )
        self._check_precision()
        ld = self._get(LeadingDimension)
        if ld is not None:
            self._check_trsm_leading_dimension(ld, size, assume_defaults)
        self._check_trsm_alignment(assume_defaults)

    def _check_trsm_leading_dimension(self, ld: LeadingDimension, size: Size | None, assume_defaults: bool) -> None:
        if ld.ldc is not None:
            raise DescriptorError(
                f"{ld!r} and Function.TRSM: a TRSM has no C; give LeadingDimension(lda, ldb)"
            )
        if size is None:
            return
        side_known = self.has(Side) or assume_defaults
        order_known = self.has(Arrangement) or assume_defaults
        left = self.side is Side.left
        side = (size.m, "M") if left else (size.n, "N")
        _check_at_least("lda", ld.lda, size, (*side, f"the extent of the square A of {self.side!r}") if side_known
                        else None, ((size.m, "M", "Side.left"), (size.n, "N", "Side.right")))
        row = self.arrangement.b is row_major
        order = (size.n, "N") if row else (size.m, "M")
        _check_at_least("ldb", ld.ldb, size, (*order, f"the minimum for {'row_major' if row else 'col_major'} B")
                        if order_known else None, ((size.n, "N", "row_major B"), (size.m, "M", "col_major B")))

    def _check_trsm_alignment(self, assume_defaults: bool) -> None:
        al = self._get(Alignment)
        if al is None or not (self.has(Precision) or assume_defaults):
            return
        scale = 2 if (self.is_complex and (self.has(Type) or assume_defaults)) else 1
        element = self._precision.a.size * scale
        for name, value in (("a", al.a), ("b", al.b)):
            if value % element:
                kind = "complex " if scale == 2 else ""
                raise DescriptorError(
                    f"Alignment: {name}={value} bytes is not a multiple of the {kind}{self._precision.a.name} "
                    f"element size ({element} bytes)"
                )

    # -- running --------------------------------------------------------------------------------

    def execute(self, a: Any, b: Any, *, alpha: Any = 1, stream: Any = None) -> Any:  # type: ignore[override]
        """Solve in place on device arrays: ``B = alpha A^-1 B`` (left) or ``alpha B A^-1`` (right); returns ``b``."""
        return runtime().execute_trsm(self, a, b, alpha=alpha, stream=stream)




FUNCTION_CLASSES[Function.TRSM] = TrsmDescriptor

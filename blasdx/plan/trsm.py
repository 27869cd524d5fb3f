"""How a block-level triangular solve is carried out: panels, threads, batches per block, layouts.

The solve runs on panels of ``panel`` unknowns: each panel's small triangle is solved by
substitution, one thread per right-hand side, and the unknowns found are removed from the
equations still to solve with a block GEMM (``BlockGemm``, the GEMM engine's own code, so
f64 updates run on DMMA). :func:`plan_trsm` takes plain values and returns a
:class:`TrsmPlan`; each rule says why it is what it is and ``tests/test_trsm_plan.py``
pins the results.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from ..base import dtypes as _dt
from . import heuristics as _h

__all__ = [
    "TRSM_TYPES",
    "PANEL",
    "TrsmProblem",
    "UpdateStep",
    "TrsmPlan",
    "needs_update",
    "panel_steps",
    "plan_trsm",
    "smem_layouts",
    "suggested_group_threads",
    "suggested_batches",
]

#: Element types a TRSM runs (real, or the parts of complex values); each is also its compute type.
TRSM_TYPES: tuple[_dt.DType, ...] = (_dt.float32, _dt.float64)

#: Unknowns per panel. Substitution inside a panel is sequential per right-hand side (a
#: dependency chain of ``panel`` steps, ``panel**2 / 2`` FMAs) while the update after it is a
#: GEMM of depth ``panel`` spread over every thread. 16 keeps the chain short and the GEMM deep
#: enough to reuse its operands (four K steps of an m8n8k4 DMMA, sixteen FMAs per loaded value
#: pair on the CUDA-core path); a 64-unknown solve on 64 threads does 4 x 136 chained FMAs plus
#: 768 parallel ones per thread with 16, against 2 x 528 plus 512 with 32.
PANEL = 16

#: Threads of one problem at most, and the threads a suggested block aims for.
_MAX_GROUP_THREADS = 256
_TARGET_BLOCK_THREADS = 128
_THREADS_PER_SM = 512


@dataclass(frozen=True)
class TrsmProblem:
    """The facts of a TRSM descriptor every rule needs: B is m x n, A is dim x dim."""

    m: int
    n: int
    dtype: _dt.DType  # A and B (the real part for complex)
    is_complex: bool
    left: bool
    lower: bool
    unit_diagonal: bool
    a_row_major: bool
    b_row_major: bool
    sm: int

    @property
    def dim(self) -> int:
        """Extent of the square A: M on the left, N on the right."""
        return self.m if self.left else self.n

    @property
    def width(self) -> int:
        """Independent right-hand sides: B's columns on the left, its rows on the right."""
        return self.n if self.left else self.m

    @property
    def forward(self) -> bool:
        """Whether unknowns are found first to last (left-lower, right-upper) or last to first."""
        return self.left == self.lower

    @property
    def element_size(self) -> int:
        return self.dtype.size * (2 if self.is_complex else 1)

    @property
    def b_inner(self) -> int:
        return self.n if self.b_row_major else self.m

    @property
    def b_outer(self) -> int:
        return self.m if self.b_row_major else self.n


@dataclass(frozen=True)
class UpdateStep:
    """After panel ``index``: the trailing equations [r0, r0 + rn) lose the panel's unknowns [p0, p0 + pb).

    As a GEMM (``m`` x ``n``, depth ``pb``): on the left B[r0:, :] -= A[r0:, p0:] B[p0:, :]; on
    the right B[:, r0:] -= B[:, p0:] A[p0:, r0:]. ``gemm`` is the warp-level GEMM plan of it.
    """

    index: int
    p0: int
    pb: int
    r0: int
    rn: int
    m: int
    n: int
    gemm: _h.KernelPlan


@dataclass(frozen=True)
class TrsmPlan:
    """The resolved solve: what codegen instantiates and the traits report."""

    panel: int
    panels: int
    group_threads: int  # threads per problem
    batches: int  # problems per block
    smem_a: _h.SmemLayout  # one A in the batched kernel (padded like the GEMM's operands)
    smem_b: _h.SmemLayout
    inv_offset: int  # bytes: reciprocals of A's diagonal, one set per problem (0 bytes when unit)
    a_offset: int
    a_stride: int  # bytes from one problem's A to the next
    b_offset: int
    b_stride: int
    shared_memory: int  # dynamic shared memory of the batched kernel
    updates: tuple[UpdateStep, ...]

    @property
    def threads(self) -> int:
        return self.group_threads * self.batches

    @property
    def instruction(self) -> str:
        """The update GEMMs' instruction family; ``fma`` when the solve is one panel of substitution."""
        return self.updates[0].gemm.instruction if self.updates else "fma"


def panel_steps(dim: int, panel: int, forward: bool) -> list[tuple[int, int, int, int]]:
    """(p0, pb, r0, rn) of every panel in solving order, the same rule as ``BlockTrsm::step`` in trsm.cuh."""
    steps = []
    for index in range(ceil(dim / panel)):
        if forward:
            p0 = index * panel
            p1 = min(dim, p0 + panel)
            steps.append((p0, p1 - p0, p1, dim - p1))
        else:
            p1 = dim - index * panel
            p0 = max(0, p1 - panel)
            steps.append((p0, p1 - p0, 0, p0))
    return steps


def needs_update(p: TrsmProblem) -> bool:
    """Whether the solve has more than one panel, i.e. runs block GEMMs (which need whole warps)."""
    return p.dim > PANEL


def suggested_group_threads(p: TrsmProblem) -> int:
    """Threads per problem: one per right-hand side, in whole warps when GEMM updates run.

    Substitution gives each thread one right-hand side, so more threads than ``width``
    would idle there; the GEMM updates (``dim > PANEL``) run ``mma.sync`` on whole warps, so
    those groups round up to 32, and grow until the blocks that fit one SM's shared memory
    hold 512 threads together (16 warps to hide the latency of shared memory and barriers:
    a 128 x 128 f32 solve, one block per SM, gets 256 threads rather than 128). At most 256,
    beyond which a block gains nothing but barrier cost (the GEMM engine's rule); wider
    problems give each thread several right-hand sides.
    """
    if not needs_update(p):
        return min(_MAX_GROUP_THREADS, p.width)
    group = max(32, min(_MAX_GROUP_THREADS, _h.round_up(p.width, 32)))
    blocks_per_sm = max(1, _h.MAX_SHARED_MEMORY[p.sm] // _problem_bytes(p, *smem_layouts(p)))
    wanted = _h.round_up(ceil(_THREADS_PER_SM / blocks_per_sm), 32)
    return min(_MAX_GROUP_THREADS, max(group, wanted))


def _problem_bytes(p: TrsmProblem, smem_a: _h.SmemLayout, smem_b: _h.SmemLayout) -> int:
    """Shared memory of one problem in the batched kernel: reciprocals of the diagonal, A, B."""
    size = p.element_size
    inv = 0 if p.unit_diagonal else _h.round_up(p.dim * size, _h.SMEM_BUFFER_ALIGNMENT)
    a = _h.round_up(smem_a.cosize * size, _h.SMEM_BUFFER_ALIGNMENT)
    b = _h.round_up(smem_b.cosize * size, _h.SMEM_BUFFER_ALIGNMENT)
    return inv + a + b


def suggested_batches(p: TrsmProblem, group_threads: int) -> int:
    """Problems per block: enough to reach 128 threads, within a quarter of the SM's shared memory.

    Small systems leave a one-problem block mostly idle (a 16 x 16 solve keeps 16 threads
    busy); several per block fill whole warps and share the block's launch and barriers,
    while the shared-memory cap (at most 48 KB) still lets four such blocks share an SM.
    """
    smem_a, smem_b = smem_layouts(p)
    budget = min(48 * 1024, _h.MAX_SHARED_MEMORY[p.sm] // 4)
    by_memory = max(1, budget // _problem_bytes(p, smem_a, smem_b))
    return max(1, min(_TARGET_BLOCK_THREADS // group_threads, by_memory))


def smem_layouts(p: TrsmProblem, max_bytes: int | None = None) -> tuple[_h.SmemLayout, _h.SmemLayout]:
    """A and B in the batched kernel's shared memory: their global orders, padded while it fits.

    The padding is the GEMM's (one 16-byte chunk when a row is an even number of chunks), for
    the same reason: eight rows read together by the update GEMM's fragments, and the panel's
    runs of one right-hand side read by neighbouring threads, fall on distinct banks.
    """
    size = p.element_size

    def layout(rows: int, cols: int, row_major: bool, ld: int) -> _h.SmemLayout:
        return _h.SmemLayout((rows, cols), (ld, 1) if row_major else (1, ld))

    lda = _h.padded_leading_dimension(p.dim, size)
    ldb = _h.padded_leading_dimension(p.b_inner, size)
    padded = (layout(p.dim, p.dim, p.a_row_major, lda), layout(p.m, p.n, p.b_row_major, ldb))
    if max_bytes is None or _problem_bytes(p, *padded) <= max_bytes:
        return padded
    return (layout(p.dim, p.dim, p.a_row_major, p.dim), layout(p.m, p.n, p.b_row_major, p.b_inner))


def _update_steps(p: TrsmProblem, group_threads: int) -> tuple[UpdateStep, ...]:
    """The GEMM after every panel but the last, planned by the GEMM engine's own rules."""
    steps = []
    for index, (p0, pb, r0, rn) in enumerate(panel_steps(p.dim, PANEL, p.forward)):
        if rn == 0:
            continue
        m, n = (rn, p.width) if p.left else (p.width, rn)
        # left: A[r0:, p0:] (A's order) x B[p0:, :] (B's); right: B[:, p0:] (B's) x A[p0:, r0:] (A's)
        a_row, b_row = (p.a_row_major, p.b_row_major) if p.left else (p.b_row_major, p.a_row_major)
        problem = _h.Problem(m, n, pb, p.dtype, p.dtype, p.dtype, p.is_complex, a_row, b_row, True, p.sm)
        steps.append(UpdateStep(index, p0, pb, r0, rn, m, n, _h.plan_warp_level(problem, group_threads)))
    return tuple(steps)


def plan_trsm(p: TrsmProblem, threads: int | None = None, batches: int | None = None) -> TrsmPlan:
    """Resolve the solve of ``p``; ``threads`` (BlockDim) and ``batches`` (BatchesPerBlock) override.

    With BlockDim and no BatchesPerBlock the block solves one problem on all its threads.
    The caller (the descriptor) checks that the threads split evenly and whole warps reach
    the GEMM updates; this function only resolves.
    """
    if batches is None:
        batches = 1 if threads is not None else suggested_batches(p, suggested_group_threads(p))
    group = threads // batches if threads is not None else suggested_group_threads(p)
    group = max(1, group)
    smem_a, smem_b = smem_layouts(p, _h.MAX_SHARED_MEMORY[p.sm] // batches)
    size = p.element_size
    inv = 0 if p.unit_diagonal else _h.round_up(p.dim * size, _h.SMEM_BUFFER_ALIGNMENT)
    a_stride = _h.round_up(smem_a.cosize * size, _h.SMEM_BUFFER_ALIGNMENT)
    b_stride = _h.round_up(smem_b.cosize * size, _h.SMEM_BUFFER_ALIGNMENT)
    a_offset = batches * inv
    b_offset = a_offset + batches * a_stride
    return TrsmPlan(
        panel=PANEL,
        panels=ceil(p.dim / PANEL),
        group_threads=group,
        batches=batches,
        smem_a=smem_a,
        smem_b=smem_b,
        inv_offset=0,
        a_offset=a_offset,
        a_stride=a_stride,
        b_offset=b_offset,
        b_stride=b_stride,
        shared_memory=b_offset + batches * b_stride,
        updates=_update_steps(p, group),
    )

"""Every choice blasdx makes for the user, in one place: instruction, tiling, block size, layouts.

The functions here take plain values (sizes, dtypes, SM) and return plain values, so the
descriptor can ask them without the heuristics knowing about descriptors. Each rule says
why it is what it is; ``tests/test_heuristics.py`` pins the results.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil

from ..base import dtypes as _dt

__all__ = [
    "MAX_SHARED_MEMORY",
    "MAX_THREADS_PER_BLOCK",
    "SMEM_BUFFER_ALIGNMENT",
    "WGMMA_SMEM_ALIGNMENT",
    "Problem",
    "KernelPlan",
    "SmemLayout",
    "accumulator_bytes_per_thread",
    "atom_shape",
    "c_over_ab_layout",
    "padded_leading_dimension",
    "b_leading_dimension",
    "wgmma_k_major",
    "wgmma_tile_n",
    "plan_kernel",
    "vector_bytes",
    "round_up",
]

#: Largest dynamic shared memory one block may opt into, per SM (bytes; CUDA programming guide).
MAX_SHARED_MEMORY = {
    75: 64 * 1024,
    80: 163 * 1024,
    86: 99 * 1024,
    87: 163 * 1024,
    89: 99 * 1024,
    90: 227 * 1024,
    100: 227 * 1024,
    120: 99 * 1024,
}
MAX_THREADS_PER_BLOCK = 1024

#: Each shared-memory buffer (A, B, C) starts on a 16-byte boundary so that 16-byte copies work.
SMEM_BUFFER_ALIGNMENT = 16
#: Swizzled panels of the batched warp-level path start on 128-byte boundaries (batched_panels).
PANEL_ALIGNMENT = 128

#: Swizzled wgmma panels start on 1024-byte boundaries: the 128B swizzle repeats every 1024
#: bytes and wgmma applies it to absolute shared-memory addresses.
WGMMA_SMEM_ALIGNMENT = 1024

#: Accumulator bytes one thread may hold in registers per warp tile; beyond this the
#: compiler starts spilling once fragments and addresses are counted (64 registers).
_ACCUMULATOR_BYTES_PER_THREAD = 256
#: The device API's register accumulator limit per thread (api.cuh MAX_ACCUMULATOR_BYTES): what a
#: compute-bound warp tile of up to 64 x 64 may hold (``_wide_warp_tile``, one tile per warp) and
#: what a batched block taking K in chunks keeps across them (``k_chunk_fits``).
_REGISTER_ACCUMULATOR_BYTES = 512


def round_up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


@dataclass(frozen=True)
class Problem:
    """The facts of a descriptor that every heuristic needs, as plain values."""

    m: int
    n: int
    k: int
    a: _dt.DType
    b: _dt.DType
    c: _dt.DType
    is_complex: bool
    a_row_major: bool
    b_row_major: bool
    c_row_major: bool
    sm: int
    arch_specific: bool = False  # sm_90a: the architecture-specific instructions (wgmma) may be used
    compute_bound: bool = False  # Workload.compute_bound: operands reused from shared memory (fusion)
    scheme: str = "native"  # how products are formed (blasdx.engine.emulation): "tf32" / "3xtf32" for float32 inputs

    def element_size(self, dtype: _dt.DType) -> int:
        return dtype.size * (2 if self.is_complex else 1)

    @property
    def a_inner(self) -> int:
        """Contiguous extent of A: K for row-major A (M x K), M for column-major."""
        return self.k if self.a_row_major else self.m

    @property
    def a_outer(self) -> int:
        return self.m if self.a_row_major else self.k

    @property
    def b_inner(self) -> int:
        return self.n if self.b_row_major else self.k

    @property
    def b_outer(self) -> int:
        return self.k if self.b_row_major else self.n

    @property
    def c_inner(self) -> int:
        return self.n if self.c_row_major else self.m

    @property
    def c_outer(self) -> int:
        return self.m if self.c_row_major else self.n


@dataclass(frozen=True)
class SmemLayout:
    """A matrix in shared memory: logical (rows, cols), element strides of (row, col), swizzle.

    Swizzled layouts (wgmma) cut the contiguous dimension into panels as wide as the swizzle
    (``"128B"``, ``"64B"`` or ``"32B"``): ``strides`` are those inside one panel, whose rows
    hold its 16-byte chunks XOR-ed with the row bits, and ``panel_stride`` is the distance in
    elements from one panel to the next (0 when there is one panel, or no swizzle).
    """

    shape: tuple[int, int]
    strides: tuple[int, int]
    swizzle: str | None = None
    panel_stride: int = 0

    @property
    def leading_dimension(self) -> int:
        return max(self.strides)

    @property
    def swizzle_bytes(self) -> int:
        """Bytes per swizzled panel row (0 when not swizzled)."""
        return int(self.swizzle[:-1]) if self.swizzle else 0

    def index(self, row: int, col: int) -> int:
        """Offset in elements of element (row, col); the device API's ``a_index`` / ``b_index``.

        Swizzled: the panel of the contiguous index, then the row of the panel and the
        position in it, whose 16-byte chunk is XOR-ed with bits 7.. of the byte offset.
        """
        if not self.swizzle:
            return row * self.strides[0] + col * self.strides[1]
        width = self.leading_dimension  # elements per panel row
        element = self.swizzle_bytes // width
        row_major = self.strides[1] == 1
        outer, inner = (row, col) if row_major else (col, row)
        offset = (outer * width + inner % width) * element
        offset ^= ((offset >> 7) & (self.swizzle_bytes // 16 - 1)) << 4
        return (inner // width) * self.panel_stride + offset // element

    @property
    def cosize(self) -> int:
        """Elements spanned, i.e. what the buffer must hold (swizzled panels are dense)."""
        rows, cols = self.shape
        if self.swizzle:
            return rows * cols
        return (rows - 1) * self.strides[0] + (cols - 1) * self.strides[1] + 1


def atom_shape(family: str) -> tuple[int, int, int]:
    """(M, N, K) of one instruction of ``family``; FMA works on single elements."""
    if family == "fma":
        return (1, 1, 1)
    shape = family.rsplit(".", 1)[-1]  # e.g. m16n8k16
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


def padded_leading_dimension(inner: int, element_size: int) -> int:
    """Leading dimension that keeps 16-byte rows and avoids shared-memory bank conflicts.

    Rows whose size is an even number of 16-byte chunks (32, 64, 128 ... bytes) put row i
    and row i + 2 (or + 8) on the same banks, so an 8-row fragment load (ldmatrix, or eight
    lanes each reading one row) serialises. The row is rounded up to whole 16-byte chunks
    (so that ldmatrix and 16-byte reads can take any row, e.g. 100 f16 values: 200 -> 208
    bytes) and given one more chunk when the count is even: an odd stride visits all eight
    chunk positions of a 128-byte bank line. Rows under 64 bytes that are not whole chunks
    stay as they are. Copies into such rows use narrower pieces where
    the global rows are not whole chunks (``vector_bytes``).
    """
    row_bytes = inner * element_size
    if element_size > 16 or 16 % element_size or (row_bytes % 16 and row_bytes < 64):
        return inner  # short rows that are not whole chunks: rounding up would cost more than it saves
    chunks = -(-row_bytes // 16)
    if chunks % 2 == 0:
        chunks += 1
    return chunks * 16 // element_size


def reads_b_in_runs(p: Problem) -> bool:
    """Whether the block GEMM reads B in runs of adjacent columns (block_gemm.cuh's grouped B
    order): real 8-bit B stored N-contiguous on the warp-level path (mma.sync.m16n8k32)."""
    if not p.b_row_major or p.is_complex or p.b.size != 1 or wgmma_tile_n(p) is not None:
        return False
    return warp_level_family(p) == "mma.sync.m16n8k32"


def run_leading_dimension(inner: int) -> int:
    """Leading dimension (bytes) of 8-bit B rows read in runs (``reads_b_in_runs``): a warp's
    4-byte reads span K rows 4t (t = lane % 4), which fall on four different quarters of the
    128-byte bank line when a row is an odd number of 8-byte steps; the odd-chunk rule of
    ``padded_leading_dimension`` would put two of them on the same banks."""
    row = round_up(inner, 8)
    return row + 8 if (row // 8) % 2 == 0 else row


def reads_b_by_k_rows(p: Problem) -> bool:
    """Whether the block GEMM reads B one 4-byte element per lane, four K rows at a time: real
    tf32 B (or float32 B of the tf32 schemes) stored N-contiguous, on mma.sync.m16n8k8."""
    return (p.b_row_major and not p.is_complex and p.b.size == 4 and wgmma_tile_n(p) is None
            and warp_level_family(p) == "mma.sync.m16n8k8")


def k_row_leading_dimension(inner: int) -> int:
    """Leading dimension (elements) of 4-byte rows read by ``reads_b_by_k_rows``: a warp's loads
    cover 8 adjacent columns (32 bytes) of K rows t = 0..3, which fall on the four quarters of
    the 128-byte bank line when a row is 32 or 96 bytes past a multiple of 128 (8 or 24 elements
    past a multiple of 32), whole 16-byte chunks. The odd-chunk rule puts rows 16 bytes apart
    (modulo the line): every load meets two-way conflicts."""
    ld = round_up(inner, 4)
    while ld % 32 not in (8, 24):
        ld += 4
    return ld


def b_leading_dimension(p: Problem) -> int:
    """The padded leading dimension of B in shared memory (one of the rules above).

    The run rule serves compute-bound use (``Workload.compute_bound``), where B is read many
    times; a memory-bound batch reads it once, and there the odd-chunk rule's whole 16-byte rows
    keep the copies from global memory 16 bytes wide (the runs then meet 2-way conflicts).
    Compute-bound N-contiguous tf32 B takes ``k_row_leading_dimension`` (block compute on an H200:
    32^3 0.62 -> 0.92x cuBLASDx, 64^3 and 128x128x64 +7%); the memory-bound batch measured 2%
    slower with it (within the spread, but in every tf32 size), so it keeps the odd-chunk rule."""
    if reads_b_in_runs(p) and p.compute_bound:
        return run_leading_dimension(p.b_inner)
    if reads_b_by_k_rows(p) and p.compute_bound:
        return k_row_leading_dimension(p.b_inner)
    return padded_leading_dimension(p.b_inner, p.element_size(p.b))


def vector_bytes(alignment: int, element_size: int, *extents_in_elements: int) -> int:
    """Widest copy (bytes, <= 16) that ``alignment`` allows and that divides every extent."""
    width = min(alignment, 16)
    while width > element_size and any((e * element_size) % width for e in extents_in_elements):
        width //= 2
    return max(width, element_size) if element_size <= 16 else element_size


@dataclass(frozen=True)
class KernelPlan:
    """How the block GEMM is carried out: what codegen instantiates and the traits report."""

    instruction: str  # PTX family, e.g. "mma.sync.m16n8k16", "wgmma.m64n128k16", or "fma"
    atom: tuple[int, int, int]
    warp_tile: tuple[int, int]  # instructions per warp along (M, N); (1, 1) for fma and wgmma
    thread_tile: tuple[int, int]  # elements per thread along (M, N) on the fma path
    threads: int
    smem_a: SmemLayout
    smem_b: SmemLayout
    smem_c: SmemLayout | None = None  # where C is staged for coalesced stores, when it is
    smem_c_over_ab: SmemLayout | None = None  # C staged over the consumed A and B (offset 0), when smem_c is None
    min_blocks: int = 1  # blocks per SM the register allocation must allow (__launch_bounds__)
    smem_b_offset: int = 0  # bytes from the start of dynamic shared memory
    smem_c_offset: int = 0
    shared_memory: int = 0  # dynamic shared memory of the batched kernel, bytes
    warpgroup_n: int = 0  # wgmma: columns of C per 64-row warpgroup tile; 0 on the warp-level paths
    warp_level: KernelPlan | None = None  # wgmma: the mma.sync plan behind the device API's load transforms
    stages: int = 1  # batched kernel: consecutive problems per block, each with its own A/B buffer
    stage_bytes: int = 0  # bytes from one problem's A/B buffer to the next (A, B, and C when staged over them)
    k_unroll: int = 1  # mma.sync K steps unrolled per pass of a warp tile's K loop (k_loop_unroll)
    k_chunk: int = 0  # batched kernel: K elements per copy group, each multiplied as it lands; 0: K at once
    batched_panels: tuple[int, int] = (0, 0)  # batched kernel: A, B in swizzled panels this wide (bytes); 0: smem_a/b
    dmma_transposed: bool = False  # f64 m16n8k8 issued on C^T = B^T A^T (dmma_transposed), B read 16 bytes at a time
    dmma_k4: bool = False  # the transposed order's K steps as two m16n8k4 each (DMMA_TRANSPOSED_K4)

    @property
    def is_mma(self) -> bool:
        return self.instruction != "fma"

    @property
    def is_wgmma(self) -> bool:
        return self.warpgroup_n > 0


def _mma_warp_tile(p: Problem, family: str, threads: int | None = None) -> tuple[int, int]:
    """Instructions per warp along M and N: :func:`_wide_warp_tile` where it applies, else
    :func:`_budget_warp_tile`'s."""
    base = _budget_warp_tile(p, family)
    wide = _wide_warp_tile(p, family, threads, base)
    return wide if wide is not None else base


def _wide_warp_tile(p: Problem, family: str, threads: int | None, base: tuple[int, int]) -> tuple[int, int] | None:
    """Compute-bound real 16-bit, tf32 and f64 products: warp tiles with twice the accumulator
    (up to 64 x 64 with f32 sums) where the block keeps four to eight of them, one per warp; None
    where that does not hold, the tile is no larger than ``base`` (the budget tile), or ``threads``
    gives fewer warps than tiles.

    Larger tiles read each fragment for more MMAs; fewer than four warps per block left too few
    to hide the rest (block compute on an H200, 256 -> 512 bytes: tf32 100^3 0.93 -> 1.06x
    cuBLASDx, 128x128x64 1.27 -> 1.50x; f16->f32 100^3 1.21 -> 1.46x; where the tiles fell to
    two warps per block, f64 64^3 went 0.95 -> 0.73x and f16->f16 100^3 1.30 -> 1.19x).
    """
    if not p.compute_bound or p.is_complex or p.scheme == "3xtf32" or atom_shape(family)[2] == 32:
        return None
    fm, fn = _budget_warp_tile(p, family, _REGISTER_ACCUMULATOR_BYTES)
    am, an, _ = atom_shape(family)
    tiles = ceil(p.m / (fm * am)) * ceil(p.n / (fn * an))
    if not 4 <= tiles <= 8 or (threads is not None and threads < 32 * tiles):
        return None
    return (fm, fn) if fm * fn > base[0] * base[1] else None


def _budget_warp_tile(p: Problem, family: str, budget: int | None = None) -> tuple[int, int]:
    """Instructions per warp along M and N within ``budget`` accumulator bytes per thread (by
    default ``_ACCUMULATOR_BYTES_PER_THREAD``, halved for memory-bound f64 on m16n8k8).

    A warp tile large enough to reuse each fragment several times (up to 64 x 64 elements)
    but with its accumulator within the budget per thread, and small
    enough that the block has at least four warp tiles to spread over its warps: small
    problems are memory bound and want more warps issuing loads, not bigger tiles. Compute-
    bound use (``Workload.compute_bound``) asks for two: operands already in shared memory
    are read once per fragment, so larger warp tiles (fewer fragment loads per MMA) and
    smaller blocks (more of them per SM) win, as cuBLASDx's 64-thread blocks do at 32^3.

    Memory-bound f64 on the sm_90 DMMA shape (m16n8k8) takes half that accumulator: its
    fragments are doubles too, and 2 x 4 tiles (64 accumulator registers) came to 125-146
    registers, two 192-thread blocks per SM at 48x80x24 where m8n8k4's 3 x 4 tiles had 86.
    """
    am, an, _ = atom_shape(family)
    acc_bytes = accumulator_bytes(p)
    if p.scheme == "3xtf32":  # each step's three products are summed apart first (mma_3xtf32.cuh): twice the registers
        acc_bytes *= 2
    if budget is None:
        budget = _ACCUMULATOR_BYTES_PER_THREAD
        if p.a == _dt.float64 and am == 16 and not p.compute_bound:
            budget //= 2
    fm = max(1, min(64, round_up(p.m, am)) // am)
    fn = max(1, min(64, round_up(p.n, an)) // an)

    def acc_per_thread(fm_: int, fn_: int) -> int:
        return fm_ * am * fn_ * an * acc_bytes // 32

    def tiles(fm_: int, fn_: int) -> int:
        return ceil(p.m / (fm_ * am)) * ceil(p.n / (fn_ * an))

    min_tiles = 2 if p.compute_bound else 4
    while acc_per_thread(fm, fn) > budget or (tiles(fm, fn) < min_tiles and fm * fn > 1):
        # shrink the longer side (in elements) first, keeping the tile near square
        if fm > 1 and (fm * am >= fn * an or fn == 1):
            fm = (fm + 1) // 2
        elif fn > 1:
            fn = (fn + 1) // 2
        else:
            break
    if p.compute_bound:
        atoms_m, atoms_n = ceil(p.m / am), ceil(p.n / an)
        even_n = fn % 2 == 0 and p.b.size == 1 and p.b_row_major  # 8-bit B read in runs of 2 or 4 pieces
        # fewer, larger tiles along N where the accumulator allows and two tiles remain: halving
        # skips counts in between (80 columns: 8 -> 4 pieces, 3 tiles, where 5 + 5 fit)
        while fn < atoms_n:
            wider = _balanced(ceil(atoms_n / (ceil(atoms_n / fn) - 1)), atoms_n, even=even_n)
            if acc_per_thread(fm, wider) > budget or tiles(fm, wider) < min_tiles:
                break
            fn = wider
        fm = _balanced(fm, atoms_m)
        fn = min(fn, _balanced(fn, atoms_n, even=even_n))
    return fm, fn


def _balanced(pieces: int, atoms: int, even: bool = False) -> int:
    """The fewest pieces per warp tile that cover ``atoms`` in as many tiles as ``pieces`` do, so
    that the tiles are near equal (80 columns in 8-wide atoms: 5 + 5 rather than 8 + 2). A
    compute-bound block has one tile per warp, and its slowest warp sets the time. ``even``
    rounds up to an even count."""
    tiles = ceil(atoms / pieces)
    fewest = ceil(atoms / tiles)
    return fewest + 1 if even and fewest % 2 else fewest


def _fma_thread_tile(p: Problem) -> tuple[int, int]:
    """Elements per thread on the CUDA-core path: 4 x 4 or 8 x 8 for 4-byte types, fewer for wider ones.

    Sixteen accumulators per thread give each shared-memory load four uses. Where 4 x 4 tiles
    would leave threads with several work items (more than 256 of them, or, compute-bound,
    enough 8 x 8 tiles for a warp), 8 x 8 tiles read each 16-byte run of A or B once for 8
    rows or columns instead: the FFMA (not LDS) becomes the limit. Memory-bound real blocks on
    sm_90 that 4 x 4 tiles would give 129-256 threads take 4 x 8 tiles and half the threads:
    batched 48x80x24 on an H200 (2026-11-27, alternating twice in one process) 3178-3204 ->
    3620-3624 GB/s, 0.87-0.88 -> 0.98-0.99x cuBLASDx; 64^3 within the spread (2842-2887 ->
    2724-2934 GB/s). Complex and f64 values are wider, so fewer.
    """
    size = p.element_size(p.c)
    if size <= 4:
        small = ceil(p.m / 4) * ceil(p.n / 4)
        large = ceil(p.m / 8) * ceil(p.n / 8)
        big = large >= 32 if p.compute_bound else small > 256
        tm = tn = 8 if big and min(p.m, p.n) >= 8 else 4
        if not p.compute_bound and p.sm == 90 and not p.is_complex and tm == 4 and 128 < small <= 256 and p.n >= 8:
            tn = 8  # memory bound: 4 x 8 tiles, half the threads (see the docstring)
    elif size == 8:
        tm, tn = 4, 2
    else:
        tm = tn = 2
    return min(tm, p.m), min(tn, p.n)


def _suggested_threads(p: Problem, family: str, warp_tile: tuple[int, int], thread_tile: tuple[int, int]) -> int:
    """One warp per warp tile, up to 8 warps (256 threads); FMA: one thread per thread tile.

    256 threads is where a block of this kind stops gaining: more threads add barrier cost
    and registers per SM while a small problem has no more independent work to share out.
    """
    if family == "fma":
        tm, tn = thread_tile
        work = ceil(p.m / tm) * ceil(p.n / tn)
        return max(32, min(256, round_up(work, 32)))
    am, an, _ = atom_shape(family)
    fm, fn = warp_tile
    tiles = ceil(p.m / (fm * am)) * ceil(p.n / (fn * an))
    return 32 * max(1, min(8, tiles))


def kernel_smem_layouts(p: Problem, max_bytes: int) -> tuple[SmemLayout, SmemLayout]:
    """Shared-memory layouts of A and B in the block GEMM: the global order, padded when it fits.

    Keeping the global order lets every copy move 16 contiguous bytes; the fragment loads
    read either order. Padding (``padded_leading_dimension``) is dropped when it would not
    fit in shared memory.
    """

    def layout(rows: int, cols: int, row_major: bool, ld: int) -> SmemLayout:
        return SmemLayout((rows, cols), (ld, 1) if row_major else (1, ld))

    sa, sb = p.element_size(p.a), p.element_size(p.b)
    lda = padded_leading_dimension(p.a_inner, sa)
    ldb = b_leading_dimension(p)
    need = round_up(lda * p.a_outer * sa, SMEM_BUFFER_ALIGNMENT) + ldb * p.b_outer * sb
    if need > max_bytes:
        lda, ldb = p.a_inner, p.b_inner
    return (
        layout(p.m, p.k, p.a_row_major, lda),
        layout(p.k, p.n, p.b_row_major, ldb),
    )


def staged_c_layout(p: Problem, ab_bytes: int, max_bytes: int) -> SmemLayout | None:
    """Shared-memory layout C is staged in before it is stored, or None to store from registers.

    Fragments hold scattered elements (two adjacent columns of eight rows per lane), so
    storing them directly writes 2-8 bytes per lane at strided addresses; f16 C reached
    40% of the copy bandwidth that way on an H200 while f64 C (8-byte stores) reached 80%.
    Staging C in shared memory (padded like A and B) lets the block write whole rows with
    the widest copies. It costs shared memory, so it is used only while A + B + C still
    leave room for two blocks per SM.
    """
    size = p.element_size(p.c)
    ld = padded_leading_dimension(p.c_inner, size)
    need = round_up(ab_bytes, SMEM_BUFFER_ALIGNMENT) + ld * p.c_outer * size
    if 2 * need > max_bytes:
        return None
    return SmemLayout((p.m, p.n), (ld, 1) if p.c_row_major else (1, ld))


def accumulator_bytes_per_thread(p: Problem, plan: KernelPlan) -> int:
    """Bytes of accumulator one thread holds when it keeps every tile it owns in registers.

    The same count as the device API's register accumulator (``fragment_shape`` in
    block_gemm.cuh, ``warpgroup_fragment_shape`` in warpgroup_gemm.cuh): tiles per warp (or
    warpgroup, or work items per thread on the FMA path) times one tile's registers.
    """
    acc = accumulator_bytes(p)
    if plan.is_wgmma:
        tiles = (p.m // 64) * (p.n // plan.warpgroup_n)
        return ceil(tiles / (plan.threads // 128)) * plan.warpgroup_n // 2 * acc
    if plan.is_mma:
        am, an, _ = plan.atom
        fm, fn = plan.warp_tile
        tiles = ceil(p.m / (fm * am)) * ceil(p.n / (fn * an))
        return ceil(tiles / max(1, plan.threads // 32)) * fm * fn * (am * an // 32) * acc
    tm, tn = plan.thread_tile
    work = ceil(p.m / tm) * ceil(p.n / tn)
    return ceil(work / plan.threads) * tm * tn * acc


def c_over_ab_layout(p: Problem, plan: KernelPlan, ab_bytes: int, grow: bool = False) -> SmemLayout | None:
    """Layout of C staged over the consumed A and B buffers (offset 0), or None.

    The block computes its whole product into registers first, synchronises (nobody reads A
    or B any more), writes alpha * acc from offset 0 and stores whole rows, as the staged path
    does, in max(A + B, C) bytes of shared memory instead of A + B + C. It first served where A
    + B + C left no room for two blocks per SM: scattered fragment stores had run at 59-75% of
    copy bandwidth there (H100: f16->f32 and bf16->f32 128^3, tf32 at 128x128x64, 128^3 and
    100^3, f32 at 128-wide). With ``grow`` (``_epilogue`` says where), C may be larger than A +
    B, the block's shared memory growing to C's.

    Taken when the whole accumulator of a thread stays within ``_ACCUMULATOR_BYTES_PER_THREAD``
    (what one warp tile may hold anyway, below the device API's 512-byte register accumulator
    limit), so the kernel needs no more registers than it had and does not spill: the padded C
    where it fits (in A + B, or with ``grow`` in the SM's shared memory), else the unpadded C
    where that fits in A + B, as A and B drop their padding.
    """
    if accumulator_bytes_per_thread(p, plan) > _ACCUMULATOR_BYTES_PER_THREAD:
        return None
    size = p.element_size(p.c)
    padded = padded_leading_dimension(p.c_inner, size)
    for ld in (padded, p.c_inner) if padded != p.c_inner else (padded,):
        layout = SmemLayout((p.m, p.n), (ld, 1) if p.c_row_major else (1, ld))
        bytes_c = layout.cosize * size
        if bytes_c <= ab_bytes or (grow and ld == padded and bytes_c <= MAX_SHARED_MEMORY[p.sm]):
            return layout
    return None


def _epilogue(p: Problem, plan: KernelPlan, ab_bytes: int) -> KernelPlan:
    """``plan`` (built without C staging) with C staged beside A and B (``staged_c_layout``), or
    over them (``c_over_ab_layout``), or stored from registers; shared memory and the blocks
    per SM that __launch_bounds__ asks for follow.

    8-bit mma.sync plans stage C over A and B first. Batched problems are memory bound, and the
    blocks resident per SM are what overlaps one block's loads and stores with another's:
    Nsight Compute on an H200 (2026-11-26) found int8 100^3 at 2 blocks per SM by shared memory
    (62.4 KB, C beside) where cuBLASDx (C over A and B, 40 KB) ran 4, moving 41% of DRAM
    bandwidth against 54%. C over A and B took int8 / e4m3 48x80x24 from 2563 / 2514 to 2979 /
    2840 GB/s. For the other types it lost (16-bit 100^3 -9 to -11%, f16->f16 48x80x24 -6%,
    f64 48x80x24 -4%: the whole product then waits in registers for one barrier before any of
    C is written), so they keep C beside A and B where two blocks still fit.
    """
    def finish(plan_: KernelPlan, stage: int, c_bytes: int) -> KernelPlan:
        panels = batched_panels(p, plan_)
        alignment = WGMMA_SMEM_ALIGNMENT if plan_.is_wgmma else SMEM_BUFFER_ALIGNMENT
        if panels != (0, 0):  # dense A, then B, each from a 128-byte boundary (batched_panels)
            plan_ = replace(plan_, batched_panels=panels, smem_b_offset=p.m * p.k * p.element_size(p.a))
            alignment = PANEL_ALIGNMENT
        stride = round_up(stage, alignment)
        stages = batched_stages(p, plan_, stride, c_bytes)
        buffers = (stages - 1) * stride + stage  # the last problem's A/B (or C over them) unpadded
        c_offset = round_up(buffers, SMEM_BUFFER_ALIGNMENT) if c_bytes else 0
        total = c_offset + c_bytes if c_bytes else buffers + _b_overread_bytes(p, plan_)  # B may end the block
        done = replace(plan_, stages=stages, stage_bytes=stride, smem_c_offset=c_offset, shared_memory=total,
                       min_blocks=_min_blocks_per_sm(p, plan_.instruction, plan_.threads, total, plan_.warp_tile))
        return replace(done, k_chunk=batched_k_chunk(p, done))

    def with_c_over(over: SmemLayout) -> KernelPlan:
        return finish(replace(plan, smem_c_over_ab=over), max(ab_bytes, over.cosize * p.element_size(p.c)), 0)

    if plan.instruction == "mma.sync.m16n8k32":
        over = c_over_ab_layout(p, plan, ab_bytes, grow=True)
        if over is not None:
            return with_c_over(over)
    smem_c = staged_c_layout(p, ab_bytes, MAX_SHARED_MEMORY[p.sm])
    if smem_c is not None:
        return finish(replace(plan, smem_c=smem_c), ab_bytes, smem_c.cosize * p.element_size(p.c))
    over = c_over_ab_layout(p, plan, ab_bytes)
    return with_c_over(over) if over is not None else finish(plan, ab_bytes, 0)


def batched_panels(p: Problem, plan: KernelPlan) -> tuple[int, int]:
    """Panel widths (bytes) of A and B where the batched kernel copies them into swizzled panels
    instead of the padded rows of ``smem_a`` and ``smem_b``, else (0, 0).

    Taken where a row of A or B is shorter than a 128-byte line and ``panel_widths`` allows
    panels. A line's 8 pieces then land in two padded rows whose banks overlap: Nsight Compute on
    an H200 (2026-11-27, f16->f16 32^3, rows of 64 bytes padded to 80) counted 15 shared-memory
    wavefronts per cp.async instruction against the 4 of cuBLASDx's swizzled layout, and the
    block's wait for its operands took the difference (long-scoreboard stall samples at its
    barrier 4110 against 3523). Panels keep a line's pieces in distinct banks and ldmatrix reads
    them conflict free: batched benchmark, alternating in one process, f16->f16 32^3 0.91-0.92
    -> 0.97-0.99x cuBLASDx, f16->f32 and bf16->f32 0.95-0.97 -> 1.00-1.01x. Staging f16 C (its
    64-byte rows, read back 2-way conflicted) in panels as well lost what A and B gained there
    (0.97-0.98 -> 0.89-0.94x), so C keeps its padded rows. A line's pieces must also land in one
    128-byte segment of shared memory: B's panels at A's padded end (2544 bytes, f16 32^3) still
    took 3x the ideal wavefronts, so panel plans place B right after A's dense panels and keep
    every problem's buffers on 128-byte boundaries (:data:`PANEL_ALIGNMENT`).
    """
    if min(p.a_inner * p.a.size, p.b_inner * p.b.size) >= 128:
        return (0, 0)
    return panel_widths(p, plan)


def panel_widths(p: Problem, plan: KernelPlan) -> tuple[int, int]:
    """Widths of swizzled panels (bytes) that A and B of a warp-level 16-bit mma.sync plan can be
    read from with ldmatrix (whole 8-row atoms, rows a whole number of 32-byte panels), else (0, 0)."""
    if not plan.is_mma or plan.is_wgmma or p.is_complex or p.a.size != 2 or p.b.size != 2:
        return (0, 0)
    if p.m % 8 or p.n % 8 or p.k % 8:
        return (0, 0)
    a_bytes, b_bytes = p.a_inner * p.a.size, p.b_inner * p.b.size
    if a_bytes % 32 or b_bytes % 32:
        return (0, 0)
    return (_panel_bytes(a_bytes), _panel_bytes(b_bytes))


def _b_overread_bytes(p: Problem, plan: KernelPlan) -> int:
    """Bytes a fragment read may reach past B's last element: a row whose bytes are not a whole
    number of 16-byte chunks is read up to the end of its last chunk (what lies past K is zeroed
    in registers). A's reach lands in B, and C staged beside B covers B's; where B ends the
    batched kernel's shared memory it gets this room (compute-sanitizer flagged int8 128x8x100,
    B K-contiguous with rows of 100 bytes, C over A and B). wgmma panels are dense: none."""
    if plan.is_wgmma:
        return 0
    return -(p.b_inner * p.element_size(p.b)) % 16


#: Problems a batched block runs when its C outweighs its A and B (``batched_stages``).
_STAGES = 2


def loads_asynchronously(p: Problem, plan: KernelPlan) -> bool:
    """Whether the batched kernel's copies of A and B into shared memory are cp.async (sm_80+),
    which can be left in flight; 8-bit operands transposed into wgmma panels pass through registers."""
    if p.sm < 80:
        return False
    if plan.is_wgmma:
        a_k_major, b_k_major = wgmma_k_major(p)
        return a_k_major == p.a_row_major and b_k_major == (not p.b_row_major)
    return True


def batched_stages(p: Problem, plan: KernelPlan, stage_bytes: int, c_bytes: int) -> int:
    """Consecutive problems one batched block runs, each with its own A/B buffer of ``stage_bytes``:
    all their copies are issued at once, so the next problem's operands arrive while one is
    multiplied and its C stored.

    Two where C has more bytes than A and B together, the copies are asynchronous and two blocks
    still fit per SM; else one. Measured on an H200 (2026-11-26, batched benchmark, one against two
    and four stages): 48x80x24, whose C outweighs its operands for every type, gained 3-22% (f32
    2404 -> 2926 GB/s, f64 3210 -> 3755); int8 / e4m3 32^3 and 100^3 (int32 / f32 C) 10-25%;
    where A and B weigh as much as C or more (16-bit 100^3, 64^3, 32^3) two stages lost up to 20%
    (the larger blocks fit fewer per SM); four stages gained nothing over two.
    """
    if not loads_asynchronously(p, plan):
        return 1
    ab_bytes = p.m * p.k * p.element_size(p.a) + p.k * p.n * p.element_size(p.b)
    if p.m * p.n * p.element_size(p.c) <= ab_bytes:
        return 1
    stages = _STAGES
    while stages > 1 and 2 * (stages * stage_bytes + c_bytes) > MAX_SHARED_MEMORY[p.sm]:
        stages -= 1
    return stages


def k_chunk_fits(p: Problem, plan: KernelPlan, chunk: int) -> bool:
    """Whether the batched kernel can copy and multiply K in chunks of ``chunk`` elements: a
    warp-level plan of one problem per block with asynchronous copies into padded rows (not
    ``batched_panels``), whose accumulator stays
    in registers (the chunks' products add up there), every chunk a whole number of MMA steps
    starting on a 16-byte boundary of A and B in shared memory (in global memory the copy width
    divides the leading dimension, so every chunk starts where its vectors may)."""
    if plan.is_wgmma or plan.stages != 1 or not 0 < chunk < p.k or not loads_asynchronously(p, plan):
        return False
    if plan.batched_panels != (0, 0):  # chunks start at K offsets of padded rows
        return False
    if accumulator_bytes_per_thread(p, plan) > _REGISTER_ACCUMULATOR_BYTES:
        return False
    if plan.is_mma and chunk % plan.atom[2]:
        return False
    a_step = 1 if p.a_row_major else plan.smem_a.leading_dimension  # elements from one K index to the next
    b_step = plan.smem_b.leading_dimension if p.b_row_major else 1
    return chunk * a_step * p.element_size(p.a) % 16 == 0 and chunk * b_step * p.element_size(p.b) % 16 == 0


def batched_k_chunk(p: Problem, plan: KernelPlan) -> int:
    """K elements per copy group of the batched kernel (``KernelPlan.k_chunk``), or 0: all of K
    in one group.

    A block copies A and B as :data:`_K_CHUNKS` groups along K and multiplies each as it lands,
    the later ones still in flight, where that was measured to pay: float32 operands on CUDA cores
    with M and N of 128 or more (four chunks), tf32 / 3xtf32 blocks that run alone on their SM
    for shared memory, and single-pass tf32 blocks two of which fill it (two). Batched benchmark on
    an H200 (2026-11-26, one, two and four chunks alternating in one process, against cuBLASDx): f32
    128x128x64 1.06 -> 1.25-1.28x (four), tf32 128^3 0.89-0.91 -> 1.00-1.02x, 3xtf32 128^3 +6%;
    f32 128^3 unchanged; 2026-11-27, C staged in runs: tf32 100^3 (two blocks of 80 KB) 1.01-1.02
    -> 1.04x, 3xtf32 100^3 -13%. Elsewhere it lost:
    16-bit 100^3 0.88 -> 0.66-0.69x (f16->f16), f64 128x128x64 1.80 -> 1.53x (every tile's
    accumulator then lives in registers at once: 89 -> 190 registers), 3xtf32 128x128x64 -25%,
    32^3 and 64^3 2-6%.
    """
    if p.is_complex or p.element_size(p.a) != 4 or p.element_size(p.b) != 4:
        return 0
    if not plan.is_mma:
        parts = _K_CHUNKS["fma"] if p.m >= 128 and p.n >= 128 else 0
    else:
        fits = blocks_by_shared_memory(p, plan.shared_memory)
        parts = _K_CHUNKS["mma"] if fits == 1 or (fits == 2 and p.scheme != "3xtf32") else 0
    if not parts:
        return 0
    chunk = round_up(-(-p.k // parts), 16)
    return chunk if k_chunk_fits(p, plan, chunk) else 0


#: K chunks of a batched block where :func:`batched_k_chunk` takes them, by path.
_K_CHUNKS = {"fma": 4, "mma": 2}


def accumulator_bytes(p: Problem) -> int:
    """Bytes of one accumulator element of the problem's types (both parts of a complex one)."""
    return _dt.find_combination(p.a, p.b, p.c, p.is_complex).accumulator.size * (2 if p.is_complex else 1)


def blocks_by_shared_memory(p: Problem, shared_memory: int) -> int:
    """Blocks of ``shared_memory`` dynamic bytes that fit on one SM (each also takes 1 KB the
    driver reserves per block)."""
    return (MAX_SHARED_MEMORY[p.sm] + 1024) // (shared_memory + 1024)


#: Registers of one SM (every architecture blasdx targets).
_REGISTERS_PER_SM = 65536
_THREADS_PER_SM = 2048  # sm_90 (sm_86 / sm_89: 1536, more than the register floors below leave)


def _min_blocks_per_sm(
    p: Problem, family: str, threads: int, shared_memory: int, warp_tile: tuple[int, int] = (1, 1)
) -> int:
    """2 for real 16-bit, integer 8-bit and tf32 tensor-core blocks and wgmma blocks of 256 threads,
    what shared memory allows for memory-bound float32 FFMA blocks on sm_90, else 1 (the compiler's choice).

    Left alone, the compiler gives a 256-thread f16/bf16 block of a 128-wide problem 166
    registers, so one block fits per SM and nothing overlaps its load, compute and store.
    Asking for two blocks caps it at 128 registers without spilling (f16 128^3 on an H200:
    1945 -> 2337 GB/s). Harder caps spill (64 registers: 376 B of local memory, 1101
    GB/s). int8 100^3 went from 117 to 129 registers when its K loop was unrolled, one block
    per SM instead of two: 0.74 -> 0.48x cuBLASDx in the batched benchmark on an H200; tf32
    128x128x64 took 140 (0.71x). fp8 (converted to f16 on sm_90) and complex fragments spill
    at 128, so they keep 1. Where a shape spills under the cap anyway (some int8 ones do, by
    8-24 bytes), cache.compile_descriptor compiles it again without the cap.
    wgmma keeps only its accumulator (at most 64 registers) in registers, so it fits too.
    3xtf32 (high and low parts of every fragment) takes the cap where shared memory holds three
    blocks: 128x128x64 compiles to 125 registers under it, without spilling; left alone it sat
    on the boundary (128 registers, then 134 once C's beta path changed), and at 134 (one block
    per SM) ran 2404 -> 1734 GB/s on an H200 (Nsight Compute: 12.5% against 25% occupancy).
    Where shared memory holds exactly two (100^3 at 256 threads) the cap spills, and
    _alone_for_registers halves the block instead.

    Memory-bound float32 FFMA blocks on sm_90 ask for as many blocks as shared memory and the
    SM's threads allow, down to 64 registers: the compiler left alone gives 69-71 (48x80x24 and
    64^3: three blocks of 256 where shared memory holds four or five); capped, 63-64 without
    spilling, four blocks. Batched benchmark on an H200 (2026-11-26, alternating twice in one
    process): 48x80x24 2897-2903 -> 3060-3120 GB/s, 64^3 2620-2728 -> 2799-2866, the other
    sizes +1 to +5%. The same rule for the mma.sync plans left them within the spread, but for
    e4m3 100^3 (-19%). (Those two sizes now run 4 x 8 tiles on 128 threads, _fma_thread_tile:
    five and four blocks, 94-96 registers.)

    Memory-bound wgmma blocks of 256 threads with f16 sums (f16->f16) ask for three where shared
    memory holds three: 128x128x64 compiles to 75 registers for it (87 left to a cap of 128),
    and ran 3293-3534 -> 3704-3875 GB/s, 0.88-0.94 -> 1.01-1.03x cuBLASDx (H200, alternating
    twice in one process). With f32 sums ptxas refuses a cap of 85 (wgmma needs 90 there).
    Memory-bound 8-bit mma.sync blocks between 128 and 256 threads (192 for 48x80x24, two
    problems per block) ask for what shared memory allows down to 56 registers: 64 -> 56, five
    -> six blocks per SM, e4m3 48x80x24 0.97 -> 1.01x and int8 1.03-1.05 -> 1.06-1.08x.

    16-bit blocks between 128 and 256 threads (192 for 48x80x24) ask for the blocks per SM that a
    cap of the accumulator's registers plus 40 allows, as far as shared memory allows them:
    ldmatrix at the edges took f16->f32 48x80x24 from 63 to 87 registers, 3 blocks of 192
    threads per SM; a cap of 72 holds 4 without spilling (64 spills 40 bytes).
    """
    sixteen_bit = family in ("mma.sync.m16n8k16", "mma.sync.m16n8k8") and p.a.size == 2 and not p.is_complex
    fits = blocks_by_shared_memory(p, shared_memory)
    memory_bound = not p.compute_bound
    if family == "fma" and p.a == p.b == _dt.float32 and not p.is_complex and memory_bound and p.sm == 90:
        return _blocks_within(fits, threads, 64)
    if sixteen_bit and 128 < threads < 256:
        am, an, _ = atom_shape(family)
        acc_registers = warp_tile[0] * warp_tile[1] * am * an // 32 * accumulator_bytes(p) // 4
        return _blocks_within(fits, threads, acc_registers + 40)
    eight_bit = family == "mma.sync.m16n8k32" and not p.is_complex
    if eight_bit and 128 < threads < 256 and memory_bound and p.sm == 90:
        return _blocks_within(fits, threads, 56)
    wgmma = family.startswith("wgmma.")
    if wgmma and threads == 256 and memory_bound and accumulator_bytes(p) == 2:
        return _blocks_within(fits, threads, 85)  # three blocks of 256
    integer_8bit = eight_bit and p.a.integral
    tf32 = family == "mma.sync.m16n8k8" and p.a == _dt.tfloat32 and p.scheme == "native" and not p.is_complex
    three_xtf32 = family == "mma.sync.m16n8k8" and p.scheme == "3xtf32" and not p.is_complex and fits >= 3
    capped = sixteen_bit or integer_8bit or tf32 or three_xtf32 or wgmma
    return _blocks_within(fits, threads, 128) if capped and threads == 256 else 1


def _blocks_within(fits: int, threads: int, registers: int) -> int:
    """Blocks per SM that shared memory (``fits``), the SM's threads and a floor of ``registers``
    per thread all allow; at least 1."""
    return max(1, min(fits, _THREADS_PER_SM // threads, _REGISTERS_PER_SM // (threads * registers)))


def plan_kernel(p: Problem, threads: int | None = None) -> KernelPlan:
    """Resolve the block GEMM for ``p``; ``threads`` (from BlockDim) overrides the suggestion.

    sm_90a problems that :func:`wgmma_tile_n` accepts run on wgmma; everything else on the
    warp-level path (mma.sync or FMA) of :func:`plan_warp_level`.
    """
    tile_n = wgmma_tile_n(p, threads)
    if tile_n is not None:
        return _plan_wgmma(p, tile_n, threads)
    return plan_warp_level(p, threads)


def warp_level_family(p: Problem) -> str:
    """The warp-level instruction family: the types' own (``dtypes.mma_family``), or tf32's
    ``mma.sync.m16n8k8`` for float32 inputs that the "tf32" or "3xtf32" scheme multiplies."""
    if p.scheme in ("tf32", "3xtf32"):
        return _dt.mma_family(_dt.tfloat32, _dt.tfloat32, p.c, p.sm)
    return _dt.mma_family(p.a, p.b, p.c, p.sm)


def plan_warp_level(p: Problem, threads: int | None = None) -> KernelPlan:
    """The block GEMM on mma.sync (or FMA): warps own warp tiles, operands in padded layouts;
    with the suggested block size, halved where :func:`_alone_for_registers` says so."""
    plan = _plan_warp_level(p, threads)
    if threads is None and _alone_for_registers(p, plan):
        return _plan_warp_level(p, plan.threads // 2)
    return plan


def _alone_for_registers(p: Problem, plan: KernelPlan) -> bool:
    """Whether a memory-bound fp8 or 3xtf32 mma.sync block of 256 threads runs alone on its SM for
    registers while shared memory has room for two: then 128 threads (two blocks in flight).

    Their fragments need more than 128 registers per thread at 256 threads (e4m3 100^3, B
    converted to f16 on sm_90: 171; 3xtf32 100^3: 133), and a cap of 128 spills, so one such
    block holds the SM. Batched benchmark on an H200 (2026-11-26, alternating in one process):
    e4m3 100^3 0.88-0.90 -> 1.08x cuBLASDx, 3xtf32 100^3 1327-1359 -> 1636-1670 GB/s. Where
    shared memory holds the block alone anyway (3xtf32 128^3) 128 threads lost 25%, and where it
    would hold three (3xtf32 128x128x64, C then stored from registers) 10%. Only sm_90 was
    measured (and only there is fp8 converted), so only sm_90 takes it.
    """
    fp8 = p.a in (_dt.float8_e4m3, _dt.float8_e5m2) or p.b in (_dt.float8_e4m3, _dt.float8_e5m2)
    if not (fp8 or p.scheme == "3xtf32") or p.compute_bound or p.is_complex or not plan.is_mma or p.sm < 90:
        return False
    fits = blocks_by_shared_memory(p, plan.shared_memory)
    return plan.threads == 256 and plan.min_blocks == 1 and fits == 2


def _plan_warp_level(p: Problem, threads: int | None) -> KernelPlan:
    """:func:`plan_warp_level` for a given (or the suggested) block size."""
    family = warp_level_family(p)
    atom = atom_shape(family)
    warp_tile = _mma_warp_tile(p, family, threads) if family != "fma" else (1, 1)
    thread_tile = _fma_thread_tile(p) if family == "fma" else (1, 1)
    threads = threads or _suggested_threads(p, family, warp_tile, thread_tile)
    smem_a, smem_b = kernel_smem_layouts(p, MAX_SHARED_MEMORY[p.sm])
    b_offset = round_up(smem_a.cosize * p.element_size(p.a), SMEM_BUFFER_ALIGNMENT)
    ab_bytes = b_offset + smem_b.cosize * p.element_size(p.b)
    plan = KernelPlan(
        instruction=family,
        atom=atom,
        warp_tile=warp_tile,
        thread_tile=thread_tile,
        threads=threads,
        smem_a=smem_a,
        smem_b=smem_b,
        smem_c=None,
        min_blocks=_min_blocks_per_sm(p, family, threads, ab_bytes, warp_tile),
        smem_b_offset=b_offset,
        smem_c_offset=0,
        shared_memory=ab_bytes,
        k_unroll=k_loop_unroll(p, family),
        dmma_transposed=dmma_transposed(p, family, warp_tile, threads),
        dmma_k4=DMMA_TRANSPOSED_K4 and dmma_transposed(p, family, warp_tile, threads),
    )
    return _epilogue(p, plan, ab_bytes)


#: The largest block whose compute-bound f64 products of row-major A and B take
#: :func:`dmma_transposed`'s order; 0: none. A benchmark that times the orders against each other in
#: one process sets it before it makes each descriptor (a plan reads it once, when it is made).
DMMA_TRANSPOSED_THREADS = 128
#: Whether the transposed order issues each K step as two m16n8k4 DMMAs (the shape nvmath.device's f64
#: 64^3 GEMM runs) on the same registers instead of one m16n8k8. Measured (H200, 2026-11-28, f64 64^3 block
#: compute in one Numba kernel, benchmarks/numba_f64_orders.py, median of 7 rounds): m16n8k4 63.0 TFLOP/s,
#: m16n8k8 60.6, the atom's order 59.9, nvmath.device 60.3.
DMMA_TRANSPOSED_K4 = True


def dmma_transposed(p: Problem, family: str, warp_tile: tuple[int, int], threads: int) -> bool:
    """Whether the f64 m16n8k8 block GEMM issues each DMMA on the transposed product C^T = B^T A^T
    (block_gemm.cuh's tile_order): compute-bound real f64 with K-contiguous A and N-contiguous B,
    warp tiles of an even number of pieces along N that tile C exactly, and whole K steps.

    In the atom's own order an N-contiguous B fragment is two doubles of one column at K 2t and
    2t + 1, rows apart: two 8-byte reads, and A's rows take four more per piece (f64 64^3 at 128
    threads: 128 LDS.64 per 64 DMMA, 2-way conflicts on A). Transposed, B is the instruction's A
    (columns 2g and 2g + 1 of one K row are its rows g and g + 8: one 16-byte read) and A its B
    (K 2t and 2t + 1 of one row: one 16-byte read): 64 LDS.128 per 64 DMMA, free of conflicts in
    the odd-chunk rows. Each lane then holds C in column pairs of neighbouring pieces and row
    pairs 2t, 2t + 1, so epilogues store element by element: memory-bound batches keep the
    atom's order (their C stores are 16 bytes wide). Blocks of more than 128 threads already read
    A 16 bytes at a time (block_gemm.cuh) and are unmeasured in this order, so they keep theirs.
    """
    if threads > DMMA_TRANSPOSED_THREADS or family != "mma.sync.m16n8k8" or p.a != _dt.float64 or p.b != _dt.float64:
        return False
    if not p.compute_bound or p.is_complex or not p.a_row_major or not p.b_row_major or p.scheme != "native":
        return False
    am, an, ak = atom_shape(family)
    wm, wn = warp_tile[0] * am, warp_tile[1] * an
    return warp_tile[1] % 2 == 0 and p.m % wm == 0 and p.n % wn == 0 and p.k % ak == 0


def k_loop_unroll(p: Problem, family: str) -> int:
    """mma.sync K steps per pass of a warp tile's K loop (the whole steps; a K tail is apart).

    Two steps or fewer always unroll. Memory-bound use keeps longer K a loop: its kernels wait
    on global memory, and unrolled steps keep their fragments live at once (batched on an H200:
    f64 64^3 0.95 -> 0.70x cuBLASDx fully unrolled, int8 100^3 0.85 -> 0.61x four steps at a
    time). Compute-bound real products overlap one step's shared-memory reads with another's
    MMAs, as cuBLASDx's fully unrolled K does (block compute on an H200, rolled -> unrolled:
    tf32 32^3 0.92 -> 1.01x, 64^3 0.94 -> 1.03x, 48x80x24 0.82 -> 0.88x; f64 100^3 1.01 ->
    1.11x; 16-bit 100^3 1.15-1.18 -> 1.21-1.36x). tf32 beyond eight steps unrolls four at a
    time (100^3 whole: 233 registers, one block per SM, 0.66x; four: 0.80x). 8-bit steps stay
    rolled (e4m3 100^3 unrolled: 1.19 -> 0.85-0.97x, its B converted to f16 on sm_90), as do
    complex and 3xtf32 products (their fragments take two to three times the registers).
    """
    if family == "fma":
        return 1
    _, _, atom_k = atom_shape(family)
    steps = max(1, p.k // atom_k)
    if steps <= 2:
        return steps
    if not p.compute_bound or atom_k == 32 or p.is_complex or p.scheme == "3xtf32":
        return 1
    tf32 = family == "mma.sync.m16n8k8" and (p.a == _dt.tfloat32 or p.scheme == "tf32")
    limit = 8 if tf32 else 16
    return steps if steps <= limit else 4


# ---------------------------------------------------------------------------------------------- wgmma (sm_90a)

#: (A, B) input types wgmma runs here, and the accumulator types it may use with them.
_WGMMA_INPUTS = {
    (_dt.float16, _dt.float16): (_dt.float16, _dt.float32),
    (_dt.bfloat16, _dt.bfloat16): (_dt.float32,),
    **{(a, b): (_dt.float32,) for a in (_dt.float8_e4m3, _dt.float8_e5m2) for b in (_dt.float8_e4m3, _dt.float8_e5m2)},
    **{(a, b): (_dt.int32,) for a in (_dt.int8, _dt.uint8) for b in (_dt.int8, _dt.uint8)},
}
#: Bytes of K one wgmma instruction reads per row (k16 for 16-bit, k32 for 8-bit types).
_WGMMA_K_BYTES = 32
#: Warpgroups a suggested wgmma block has at most (256 threads, like the warp-level rule).
_WGMMA_MAX_GROUPS = 2


def wgmma_k_major(p: Problem) -> tuple[bool, bool]:
    """Whether A and B sit K-major in the wgmma panels: in their global order for 16-bit types
    (whose instructions transpose), always for 8-bit ones (fp8 and s8/u8 instructions read K-major
    only, so column-major A and row-major B are transposed on their way into shared memory)."""
    eight_bit = p.a.size == 1
    return p.a_row_major or eight_bit, not p.b_row_major or eight_bit


def wgmma_tile_n(p: Problem, threads: int | None = None) -> int | None:
    """Columns of C per warpgroup tile when the block GEMM can run on wgmma, else None.

    wgmma is chosen exactly when: the target is sm_90a; the GEMM is real with f16/bf16 inputs
    (-> f16 or f32 accumulation), e4m3/e5m2 inputs (-> f32) or s8/u8 inputs (-> s32); M is a
    multiple of 64, N a multiple of 8 up to 256 and K a multiple of the instruction's K (16, or
    32 for 8-bit types); N-major B in shared memory (row-major 16-bit B) has N a multiple of 16
    (its panels are at least 32 bytes wide); and the block, when BlockDim fixes it, is whole
    warpgroups (a multiple of 128 threads). 8-bit operands in any arrangement qualify: those
    that are not K-major are transposed into K-major panels (``wgmma_k_major``), which costs
    byte permutes on the way in and nothing in the product.

    The tile is 64 rows by the widest divisor of N whose accumulator stays within 256 bytes
    per thread (128 columns of f32 or s32, 256 of f16), like the warp-level rule; N-major B
    takes divisors that are multiples of 16.
    """
    if not (p.sm == 90 and p.arch_specific) or p.is_complex:
        return None
    row = _dt.find_combination(p.a, p.b, p.c, p.is_complex)
    if row is None or row.accumulator not in _WGMMA_INPUTS.get((p.a, p.b), ()):
        return None
    if threads is not None and threads % 128:
        return None
    if p.m % 64 or p.n % 8 or p.n > 256 or (p.k * p.a.size) % _WGMMA_K_BYTES:
        return None
    step = 8 if wgmma_k_major(p)[1] else 16
    widest = _ACCUMULATOR_BYTES_PER_THREAD * 128 // (64 * row.accumulator.size)
    tiles = [w for w in range(step, min(widest, p.n) + 1, step) if p.n % w == 0]
    return max(tiles) if tiles else None


def _panel_bytes(extent_bytes: int) -> int:
    """Widest swizzle (128, 64 or 32 bytes) that divides a contiguous extent."""
    return next(w for w in (128, 64, 32) if extent_bytes % w == 0)


def _panel_layout(rows: int, cols: int, row_major: bool, element_size: int, panel_bytes: int) -> SmemLayout:
    """Swizzled panels of a rows x cols operand kept in its global order."""
    width = panel_bytes // element_size
    outer = rows if row_major else cols
    inner = cols if row_major else rows
    return SmemLayout(
        (rows, cols),
        (width, 1) if row_major else (1, width),
        swizzle=f"{panel_bytes}B",
        panel_stride=outer * width if inner > width else 0,
    )


def wgmma_smem_layouts(p: Problem, tile_n: int) -> tuple[SmemLayout, SmemLayout]:
    """Shared-memory layouts of A and B on the wgmma path: swizzled panels, K-major or in the global order.

    K-major operands (row-major A, column-major B, and every 8-bit operand: ``wgmma_k_major``)
    take the widest swizzle that divides a row of K. M-major A takes 128-byte panels (64 rows
    of 16-bit values: what one instruction reads). N-major B takes panels no wider than the
    narrowest instruction of a tile (tiles are issued as power-of-two widths), at most 128 bytes.
    """
    a_bytes, b_bytes = p.a.size, p.b.size
    a_k_major, b_k_major = wgmma_k_major(p)
    pa = _panel_bytes(p.k * a_bytes) if a_k_major else 128
    narrowest = tile_n & -tile_n
    pb = _panel_bytes(p.k * b_bytes) if b_k_major else min(128, narrowest * b_bytes)
    return (_panel_layout(p.m, p.k, a_k_major, a_bytes, pa), _panel_layout(p.k, p.n, not b_k_major, b_bytes, pb))


def wgmma_instruction(p: Problem, tile_n: int) -> str:
    """The widest wgmma a tile issues: a tile ``tile_n`` wide runs as its power-of-two parts."""
    width = 1 << (tile_n.bit_length() - 1)
    return f"wgmma.m64n{width}k{_WGMMA_K_BYTES // p.a.size}"


def _plan_wgmma(p: Problem, tile_n: int, threads: int | None) -> KernelPlan:
    """The wgmma block GEMM: one warpgroup per 64 x tile_n tile, A and B in swizzled panels.

    A and B start on 1024-byte boundaries (the 128B swizzle pattern repeats every 1024 bytes
    and wgmma swizzles absolute addresses); C is staged as on the warp-level path.
    """
    tiles = (p.m // 64) * (p.n // tile_n)
    threads = threads or 128 * min(_WGMMA_MAX_GROUPS, tiles)
    smem_a, smem_b = wgmma_smem_layouts(p, tile_n)
    b_offset = round_up(smem_a.cosize * p.a.size, WGMMA_SMEM_ALIGNMENT)
    ab_bytes = b_offset + smem_b.cosize * p.b.size
    instruction = wgmma_instruction(p, tile_n)
    plan = KernelPlan(
        instruction=instruction,
        atom=atom_shape(instruction),
        warp_tile=(1, 1),
        thread_tile=(1, 1),
        threads=threads,
        smem_a=smem_a,
        smem_b=smem_b,
        smem_c=None,
        min_blocks=_min_blocks_per_sm(p, instruction, threads, ab_bytes),
        smem_b_offset=b_offset,
        smem_c_offset=0,
        shared_memory=ab_bytes,
        warpgroup_n=tile_n,
        warp_level=plan_warp_level(p, threads),
    )
    return _epilogue(p, plan, ab_bytes)

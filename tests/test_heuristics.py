"""Heuristics: pinned results of each documented rule, and properties over random problems."""

from __future__ import annotations

from dataclasses import replace
from math import ceil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.codegen import gemm as codegen
from blasdx.plan import heuristics as h
from blasdx.describe.operators import SUPPORTED_SMS

F16, BF16, TF32, F32, F64 = bx.float16, bx.bfloat16, bx.tfloat32, bx.float32, bx.float64
E4, E5, I8, U8, I32 = bx.float8_e4m3, bx.float8_e5m2, bx.int8, bx.uint8, bx.int32


def problem(m, n, k, a, b=None, c=None, *, cplx=False, arr=(True, False, False), sm=80):
    return h.Problem(m, n, k, a, b or a, c or a, cplx, *arr, sm)


def test_max_shared_memory_per_sm():
    kib = 1024
    assert h.MAX_SHARED_MEMORY == {
        75: 64 * kib, 80: 163 * kib, 86: 99 * kib, 87: 163 * kib, 89: 99 * kib, 90: 227 * kib, 100: 227 * kib,
        120: 99 * kib,
    }
    assert set(h.MAX_SHARED_MEMORY) == set(SUPPORTED_SMS)
    assert h.MAX_THREADS_PER_BLOCK == 1024
    assert h.SMEM_BUFFER_ALIGNMENT == 16


@pytest.mark.parametrize("value, multiple, expected", [(0, 16, 0), (1, 16, 16), (16, 16, 16), (17, 16, 32), (340, 16, 352), (5, 1, 5)])
def test_round_up(value, multiple, expected):
    assert h.round_up(value, multiple) == expected


@pytest.mark.parametrize(
    "inner, element, expected",
    [
        (64, 2, 72),  # 128 B rows -> + 16 B = 8 halves
        (32, 1, 48),  # 32 B -> + 16 int8
        (64, 4, 68),  # 256 B -> + 4 floats
        (8, 4, 12),  # 32 B -> + 4
        (8, 8, 10),  # 64 B -> + 2 doubles
        (2, 16, 3),  # 32 B of complex128 -> + 1
        (48, 2, 56),  # 96 B = 3 * 32 -> + 8
        (16, 1, 16),  # 16 B: an odd number of 16-byte chunks already
        (24, 2, 24),  # 48 B: odd chunks
        (12, 4, 12),  # 48 B
        (1, 16, 1),  # 16 B
        (5, 4, 5),  # 20 B: short and not whole chunks, left alone
        (7, 1, 7),
        (17, 4, 20),  # 68 B -> 5 chunks
        (3, 2, 3),
        (100, 2, 104),  # 200 B -> 13 chunks: 100^3 f16 takes ldmatrix
        (100, 1, 112),  # 100 B -> 7 chunks
        (24, 1, 24),  # 24 B: short
        (72, 1, 80),  # 72 B -> 5 chunks
    ],
)
def test_padded_leading_dimension(inner, element, expected):
    assert h.padded_leading_dimension(inner, element) == expected


@given(st.integers(1, 4096), st.sampled_from([1, 2, 4, 8, 16]))
@settings(max_examples=200, deadline=None)
def test_padded_leading_dimension_properties(inner, element):
    padded = h.padded_leading_dimension(inner, element)
    row = inner * element
    assert padded >= inner
    if row % 16 and row < 64:
        assert padded == inner
        return
    assert (padded * element) % 32 == 16  # a whole, odd number of 16-byte chunks
    assert (padded - inner) * element < 32  # at most one chunk more than rounding up needs
    if row % 32 == 16:
        assert padded == inner  # already odd: left alone
    assert h.padded_leading_dimension(inner, element) == padded  # deterministic


@given(st.integers(1, 4096))
@settings(max_examples=200, deadline=None)
def test_run_leading_dimension_puts_four_rows_on_four_bank_quarters(inner):
    ld = h.run_leading_dimension(inner)
    assert inner <= ld < inner + 16 and ld % 8 == 0
    # a warp's 4-byte reads at column 4g (g = 0..7) of rows 4t (t = 0..3): 32 distinct banks
    banks = {((4 * t * ld + 4 * g) // 4) % 32 for t in range(4) for g in range(8)}
    assert len(banks) == 32


@pytest.mark.parametrize("b, c, scheme, b_row_major, compute_bound, expected", [
    (dt.int8, dt.int32, "native", True, True, 104),         # 8-bit B read in runs: 104 bytes, 8 mod 32
    (dt.float8_e4m3, dt.float32, "native", True, True, 104),
    (dt.int8, dt.int32, "native", True, False, 112),        # read once (memory-bound): 16-byte rows, 7 chunks
    (dt.float8_e4m3, dt.float32, "native", True, False, 112),
    (dt.int8, dt.int32, "native", False, True, 112),        # K-contiguous 8-bit B takes ldmatrix: 7 chunks
    (dt.tfloat32, dt.float32, "native", True, True, 104),   # tf32 B by K rows: 416 bytes, 32 mod 128
    (dt.float32, dt.float32, "3xtf32", True, True, 104),
    (dt.tfloat32, dt.float32, "native", True, False, 100),  # read once (memory-bound): the odd-chunk rule
    (dt.tfloat32, dt.float32, "native", False, True, 100),  # K-contiguous tf32 B takes ldmatrix: 25 chunks
])
def test_b_leading_dimension_follows_how_b_is_read(b, c, scheme, b_row_major, compute_bound, expected):
    p = h.Problem(100, 100, 100, b, b, c, False, True, b_row_major, True, 90, scheme=scheme,
                  compute_bound=compute_bound)
    assert h.b_leading_dimension(p) == expected


@pytest.mark.parametrize(
    "alignment, element, extents, expected",
    [
        (16, 2, (64,), 16),
        (16, 2, (64, 32), 16),
        (16, 2, (4,), 8),  # 8-byte rows
        (16, 2, (3,), 2),  # 6-byte rows: only single elements
        (16, 2, (64, 6), 4),  # 12-byte rows limit everything
        (8, 4, (64,), 8),
        (4, 4, (64,), 4),
        (2, 4, (64,), 4),  # never narrower than one element
        (16, 1, (3,), 1),
        (16, 1, (48,), 16),
        (16, 8, (2,), 16),
        (16, 8, (1,), 8),
        (16, 16, (1,), 16),
        (1, 1, (64,), 1),
        (16, 4, (), 16),
    ],
)
def test_vector_bytes(alignment, element, extents, expected):
    assert h.vector_bytes(alignment, element, *extents) == expected


@pytest.mark.parametrize(
    "family, shape",
    [
        ("fma", (1, 1, 1)),
        ("mma.sync.m16n8k16", (16, 8, 16)),
        ("mma.sync.m16n8k8", (16, 8, 8)),
        ("mma.sync.m16n8k32", (16, 8, 32)),
        ("mma.sync.m8n8k4", (8, 8, 4)),
        ("wgmma.m64n128k16", (64, 128, 16)),
    ],
)
def test_atom_shape(family, shape):
    assert h.atom_shape(family) == shape


def test_problem_extents():
    # 32x16x8, A column-major, B row-major, C row-major
    p = problem(32, 16, 8, F32, arr=(False, True, True))
    assert (p.a_inner, p.a_outer) == (32, 8)
    assert (p.b_inner, p.b_outer) == (16, 8)
    assert (p.c_inner, p.c_outer) == (16, 32)
    q = problem(32, 16, 8, F32, arr=(True, False, False))
    assert (q.a_inner, q.a_outer) == (8, 32)
    assert (q.b_inner, q.b_outer) == (8, 16)
    assert (q.c_inner, q.c_outer) == (32, 16)
    assert problem(1, 1, 1, F64, cplx=True).element_size(F64) == 16
    assert problem(1, 1, 1, F64).element_size(F64) == 8


def test_smem_layout():
    row = h.SmemLayout((64, 64), (72, 1))
    assert row.leading_dimension == 72
    assert row.cosize == 63 * 72 + 63 + 1
    col = h.SmemLayout((3, 5), (1, 3))
    assert col.leading_dimension == 3
    assert col.cosize == 15
    assert row.swizzle is None


# (problem, instruction, atom, warp_tile, thread_tile, threads): worked out by hand.
# mma: warp tile starts at min(64, M) x min(64, N) elements, halves the longer side while the
# accumulator exceeds 256 bytes per thread or the block has fewer than four warp tiles
# (unless already one atom); one warp per warp tile, at most 8 warps.
# fma: 4x4 (4-byte C), 4x2 (8-byte C), 2x2 (16-byte C) per thread, 32..256 threads.
PLANS = [
    # 64x64 f32 acc: 4x8 (512 B) -> 2x8 (256 B, 2 tiles) -> 2x4 (4 tiles)
    (problem(64, 64, 64, F16, F16, F32), "mma.sync.m16n8k16", (16, 8, 16), (2, 4), (1, 1), 128),
    # f16 accumulator: 4x8 is 256 B already; 1 tile -> 2x8 -> 2x4
    (problem(64, 64, 64, F16, F16, F16), "mma.sync.m16n8k16", (16, 8, 16), (2, 4), (1, 1), 128),
    (problem(64, 64, 64, F16, F16, F32, sm=75), "mma.sync.m16n8k8", (16, 8, 8), (2, 4), (1, 1), 128),
    # 128x128: 2x8 (32x64) gives 4*2 = 8 tiles -> 8 warps
    (problem(128, 128, 32, F16, F16, F32), "mma.sync.m16n8k16", (16, 8, 16), (2, 8), (1, 1), 256),
    (problem(128, 128, 32, BF16, BF16, F32, sm=90), "mma.sync.m16n8k16", (16, 8, 16), (2, 8), (1, 1), 256),
    # 256x256 f16 acc: 4x8 (64x64, 256 B), 16 tiles -> capped at 8 warps
    (problem(256, 256, 16, F16, F16, F16), "mma.sync.m16n8k16", (16, 8, 16), (4, 8), (1, 1), 256),
    # 16x16: 1x2 -> 1x1 (2 tiles, one atom)
    (problem(16, 16, 16, F16, F16, F32), "mma.sync.m16n8k16", (16, 8, 16), (1, 1), (1, 1), 64),
    # 17x9: 2x2 -> 1x2 -> 1x1 -> 2*2 = 4 tiles
    (problem(17, 9, 5, F16, F16, F32), "mma.sync.m16n8k16", (16, 8, 16), (1, 1), (1, 1), 128),
    (problem(64, 64, 64, I8, I8, I32), "mma.sync.m16n8k32", (16, 8, 32), (2, 4), (1, 1), 128),
    (problem(128, 128, 64, E4, E5, F16, sm=89), "mma.sync.m16n8k32", (16, 8, 32), (2, 8), (1, 1), 256),
    (problem(64, 32, 16, TF32, TF32, F32, sm=87), "mma.sync.m16n8k8", (16, 8, 8), (1, 4), (1, 1), 128),
    # f64 DMMA 8x8: 8x8 atoms (1024 B) -> 4x8 -> 4x4 (256 B), 4 tiles
    (problem(64, 64, 64, F64), "mma.sync.m8n8k4", (8, 8, 4), (4, 4), (1, 1), 128),
    (problem(8, 8, 8, F64, cplx=True), "mma.sync.m8n8k4", (8, 8, 4), (1, 1), (1, 1), 32),
    # sm_90 DMMA 16x8x8, memory-bound: half the accumulator (128 B): 4x8 -> 2x8 -> 2x4 -> 1x4 (16x32), 8 tiles
    (problem(64, 64, 64, F64, sm=90), "mma.sync.m16n8k8", (16, 8, 8), (1, 4), (1, 1), 256),
    # compute-bound keeps 256 B: 2x4 (32x32), 4 tiles
    (h.Problem(64, 64, 64, F64, F64, F64, False, True, False, False, 90, compute_bound=True), "mma.sync.m16n8k8",
     (16, 8, 8), (2, 4), (1, 1), 128),
    # 100^3: 1x4 tiles, 7 x 4 = 28 of them -> 8 warps
    (problem(100, 100, 100, F64, sm=90), "mma.sync.m16n8k8", (16, 8, 8), (1, 4), (1, 1), 256),
    # fma paths
    (problem(64, 64, 64, F32), "fma", (1, 1, 1), (1, 1), (4, 4), 256),  # 16*16 = 256 threads
    # memory bound on sm_90: 4 x 4 tiles would give 129-256 threads -> 4 x 8 tiles, half the threads
    (problem(48, 80, 24, F32, sm=90), "fma", (1, 1, 1), (1, 1), (4, 8), 128),  # 12*10 = 120 -> 128
    (problem(64, 64, 64, F32, sm=90), "fma", (1, 1, 1), (1, 1), (4, 8), 128),
    (problem(32, 32, 32, F32, sm=90), "fma", (1, 1, 1), (1, 1), (4, 4), 64),  # 64 threads already
    (problem(8, 8, 8, F32), "fma", (1, 1, 1), (1, 1), (4, 4), 32),  # 4 threads of work -> one warp
    (problem(40, 40, 8, F32), "fma", (1, 1, 1), (1, 1), (4, 4), 128),  # 100 -> 128
    (problem(3, 2, 9, F32), "fma", (1, 1, 1), (1, 1), (3, 2), 32),  # tile clipped to the problem
    (problem(64, 64, 64, F64, sm=75), "fma", (1, 1, 1), (1, 1), (4, 2), 256),  # 16*32 = 512 -> 256
    (problem(8, 8, 8, F32, cplx=True), "fma", (1, 1, 1), (1, 1), (4, 2), 32),
    (problem(16, 16, 16, F64, cplx=True, sm=75), "fma", (1, 1, 1), (1, 1), (2, 2), 64),  # 8*8 = 64
]


@pytest.mark.parametrize("p, instruction, atom, warp_tile, thread_tile, threads", PLANS)
def test_plan_kernel(p, instruction, atom, warp_tile, thread_tile, threads):
    plan = h.plan_kernel(p)
    assert plan.instruction == instruction
    assert plan.atom == atom
    assert plan.warp_tile == warp_tile
    assert plan.thread_tile == thread_tile
    assert plan.threads == threads
    assert plan.is_mma is (instruction != "fma")
    assert h.plan_kernel(p) == plan  # deterministic


def test_plan_kernel_threads_override():
    p = problem(64, 64, 64, F16, F16, F32)
    plan = h.plan_kernel(p, threads=64)
    assert plan.threads == 64
    assert plan.warp_tile == h.plan_kernel(p).warp_tile  # the tiling does not depend on the block


def test_kernel_smem_layouts_pad_when_they_fit():
    p = problem(64, 64, 64, F16, F16, F32)  # A row-major, B column-major
    a, b = h.plan_kernel(p).smem_a, h.plan_kernel(p).smem_b
    assert (a.shape, a.strides) == ((64, 64), (72, 1))
    assert (b.shape, b.strides) == ((64, 64), (1, 72))
    # padded A + B: 72*64*2 = 9216 B each = 18432; the limit is inclusive
    assert h.kernel_smem_layouts(p, 18432)[0].strides == (72, 1)
    assert h.kernel_smem_layouts(p, 18431)[0].strides == (64, 1)
    assert h.kernel_smem_layouts(p, 18431)[1].strides == (1, 64)


def test_kernel_smem_layouts_drop_padding_when_too_big():
    # f32 128^3 on sm_75: padded 132*128*4 * 2 = 135168 B > 64 KiB -> tight
    p = problem(128, 128, 128, F32, sm=75, arr=(False, True, False))
    plan = h.plan_kernel(p)
    assert (plan.smem_a.shape, plan.smem_a.strides) == ((128, 128), (1, 128))
    assert (plan.smem_b.shape, plan.smem_b.strides) == ((128, 128), (128, 1))


# ---------------------------------------------------------------------------------------------- properties

ROWS = list(dt.COMBINATIONS)


@st.composite
def problems(draw):
    row = draw(st.sampled_from(ROWS))
    sm = draw(st.sampled_from([s for s in SUPPORTED_SMS if s >= row.min_sm]))
    m, n, k = (draw(st.integers(1, 300)) for _ in range(3))
    arr = draw(st.tuples(st.booleans(), st.booleans(), st.booleans()))
    return h.Problem(m, n, k, row.a, row.b, row.c, row.is_complex, *arr, sm), row


@given(problems())
@settings(max_examples=200, deadline=None)
def test_plan_properties(pr):
    p, row = pr
    plan = h.plan_kernel(p)
    assert plan == h.plan_kernel(p)  # deterministic
    # suggested threads: whole warps, 1 to 8 of them
    assert 32 <= plan.threads <= 256 and plan.threads % 32 == 0
    assert plan.instruction == dt.mma_family(p.a, p.b, p.c, p.sm)
    if plan.is_mma:
        am, an, _ = plan.atom
        fm, fn = plan.warp_tile
        assert fm >= 1 and fn >= 1 and plan.thread_tile == (1, 1)
        # a warp tile is at most 64 x 64 elements and never much larger than the problem
        assert fm * am <= 64 and fn * an <= 64
        assert fm * am < p.m + am and fn * an < p.n + an
        # accumulator bytes per thread stay within 256 (64 registers)
        acc = row.accumulator.size * (2 if p.is_complex else 1)
        assert fm * am * fn * an * acc // 32 <= 256
        # fewer than four warp tiles only when the tile is a single atom
        tiles = ceil(p.m / (fm * am)) * ceil(p.n / (fn * an))
        if tiles < 4:
            assert (fm, fn) == (1, 1)
        halved = h._alone_for_registers(p, h._plan_warp_level(p, None))  # two blocks of 128 instead of one of 256
        assert plan.threads == 32 * min(8, tiles) // (2 if halved else 1)
    else:
        assert plan.atom == (1, 1, 1) and plan.warp_tile == (1, 1)
        tm, tn = plan.thread_tile
        # 4 x 4 (8 x 8 where 4 x 4 tiles would outnumber 256 threads; 4 x 8 for memory-bound real blocks
        # on sm_90 that 4 x 4 tiles would give 129-256 threads) for 4-byte values, smaller for wider ones
        small = ceil(p.m / 4) * ceil(p.n / 4)
        big = 8 if p.element_size(p.c) <= 4 and small > 256 else 4
        halves = p.element_size(p.c) <= 4 and not p.is_complex and p.sm == 90 and 128 < small <= 256
        assert 1 <= tm <= min(big, p.m) and 1 <= tn <= min(8 if halves else big, p.n)
    # layouts keep the global order, hold the whole matrix and fit in shared memory
    for layout, rows, cols, row_major, inner in (
        (plan.smem_a, p.m, p.k, p.a_row_major, p.a_inner),
        (plan.smem_b, p.k, p.n, p.b_row_major, p.b_inner),
    ):
        assert layout.shape == (rows, cols)
        ld = layout.leading_dimension
        assert layout.strides == ((ld, 1) if row_major else (1, ld))
        padded = h.padded_leading_dimension(p.a_inner, p.element_size(p.a)) if layout is plan.smem_a else h.b_leading_dimension(p)
        assert ld in (inner, padded)
        assert ld >= inner


@given(problems())
@settings(max_examples=100, deadline=None)
def test_threads_do_not_change_the_layouts(pr):
    p, _ = pr
    assert h.plan_kernel(p, threads=1024).smem_a == h.plan_kernel(p).smem_a
    assert h.plan_kernel(p, threads=1024).threads == 1024


def _plan(size, a, c, sm=90, c_row_major=False):
    from blasdx.plan.heuristics import Problem, plan_kernel

    m, n, k = size
    return plan_kernel(Problem(m, n, k, a, a, c, False, True, False, c_row_major, sm))


def test_c_is_staged_with_padded_rows_after_a_and_b():
    # 64^3 f16 -> f32: A spans 63 padded rows of 72 halves plus one of 64 = 4600 halves =
    # 9200 B, B the same; C column-major, rows of 64 floats (256 B) padded by 16 B to 68:
    # 63 * 68 + 64 = 4348 floats = 17392 B.
    plan = _plan((64, 64, 64), bx.float16, bx.float32)
    assert plan.smem_c is not None
    assert plan.smem_c.strides == (1, 68)
    assert plan.smem_b_offset == 9200
    assert plan.smem_c_offset == 18400
    assert plan.shared_memory == 18400 + 17392


def test_c_is_not_staged_when_two_blocks_would_not_fit():
    # 128^3 f16 -> f32: A + B = 2 * (127 * 136 + 128) * 2 = 69600 B, C = (127 * 132 + 128) * 4
    # = 67568 B; twice their sum (274336 B) exceeds sm_90's 232448 B: C goes out from registers.
    plan = _plan((128, 128, 128), bx.float16, bx.float32)
    assert plan.smem_c is None
    assert plan.smem_c_offset == 0
    assert plan.shared_memory == 69600


@pytest.mark.parametrize(
    "size,a,c,expected",
    [
        ((128, 128, 64), bx.float16, bx.float32, 2),  # 256 threads, 16-bit, A+B+C 103 KB: two fit
        ((128, 128, 128), bx.bfloat16, bx.float32, 2),  # 256 threads, C not staged, 68 KB
        ((64, 64, 64), bx.float16, bx.float32, 1),  # 128 threads: the compiler's choice
        ((128, 128, 64), bx.int8, bx.int32, 2),  # integer 8-bit fits a 128 cap (where not, see test_compile_matrix)
        ((128, 128, 64), bx.float8_e4m3, bx.float32, 1),  # fp8 fragments (f16 after conversion) spill under it
        ((128, 128, 64), bx.tfloat32, bx.float32, 2),  # tf32: 140 registers left alone, 128 without spilling
        ((128, 128, 64), bx.float64, bx.float64, 1),  # not a 16-bit instruction
        # memory-bound f32 FFMA on sm_90: what shared memory and threads allow, down to 64 registers
        ((48, 80, 24), bx.float32, bx.float32, 5),  # 4 x 8 tiles, 128 threads: 5 blocks of 44 KB
        ((64, 64, 64), bx.float32, bx.float32, 4),
        ((32, 32, 32), bx.float32, bx.float32, 15),
        # memory-bound 8-bit mma.sync at 192 threads: what shared memory allows, down to 56 registers
        ((48, 80, 24), bx.int8, bx.int32, 6),
        ((48, 80, 24), bx.float8_e4m3, bx.float32, 6),
        # 192 threads of 2x4 f32 accumulators (32 registers): a cap of 72 registers, 4 blocks per SM
        ((48, 80, 24), bx.float16, bx.float32, 4),
        ((48, 80, 24), bx.float16, bx.float16, 6),  # 16 accumulator registers: a cap of 56
    ],
)
def test_min_blocks_per_sm(size, a, c, expected):
    plan = _plan(size, a, c)
    assert plan.min_blocks == expected, plan


# ---- C staged over the consumed A and B -------------------------------------------------------

#: Descriptors whose C does not fit beside A and B for two blocks per SM but fits over them,
#: with the whole accumulator in registers: (size, A, C, sm_90a).
C_OVER_AB = [
    ((128, 128, 128), F16, F32, False),
    ((128, 128, 128), F16, F32, True),  # wgmma: 64 KiB of panels hold the unpadded C exactly
    ((128, 128, 128), BF16, F32, False),
    ((128, 128, 128), BF16, F32, True),
    ((128, 128, 64), TF32, F32, False),
    ((128, 128, 128), TF32, F32, False),
    ((100, 100, 100), TF32, F32, False),
    ((128, 128, 128), F32, F32, False),  # FFMA
]


def _plan90(size, a, c, arch_specific=False, arr=(True, False, False)):
    return h.plan_kernel(h.Problem(*size, a, a, c, False, *arr, 90, arch_specific))


@pytest.mark.parametrize("arr", [(True, False, False), (False, False, False), (True, True, True)])
@pytest.mark.parametrize("size,a,c,arch_specific", C_OVER_AB)
def test_c_is_staged_over_a_and_b(size, a, c, arch_specific, arr):
    plan = _plan90(size, a, c, arch_specific, arr)
    p = h.Problem(*size, a, a, c, False, *arr, 90, arch_specific)
    layout = plan.smem_c_over_ab
    assert plan.smem_c is None and layout is not None
    assert plan.is_wgmma == arch_specific
    assert layout.shape == size[:2]
    assert layout.cosize * c.size <= plan.shared_memory  # over A and B, no more shared memory
    assert h.accumulator_bytes_per_thread(p, plan) <= 256
    c_inner = p.c_inner
    assert layout.leading_dimension in (h.padded_leading_dimension(c_inner, c.size), c_inner)


def test_c_over_ab_keeps_the_padding_when_it_fits():
    # 128^3 f16 -> f32 on mma.sync: A + B = 69600 B hold the padded C (127 * 132 + 128) * 4 = 67568 B
    plan = _plan90((128, 128, 128), F16, F32)
    assert plan.smem_c_over_ab.strides == (1, 132)
    assert plan.shared_memory == 69600
    # wgmma: dense panels of 65536 B hold only the unpadded C (65536 B)
    plan = _plan90((128, 128, 128), F16, F32, True)
    assert plan.smem_c_over_ab.strides == (1, 128)
    assert plan.shared_memory == 65536


@pytest.mark.parametrize(
    "size,a,c,arch_specific",
    [
        ((64, 64, 64), F16, F32, False),  # staged after A and B
        ((100, 100, 100), F16, F32, False),
        ((100, 100, 100), F16, F16, False),
        ((128, 128, 128), E4, F32, True),  # wgmma: C beside A and B
        ((256, 256, 32), F16, F32, False),  # accumulator of 1 KiB per thread
        ((256, 256, 64), F64, F64, False),  # C larger than A and B
    ],
)
def test_c_over_ab_only_where_it_fits(size, a, c, arch_specific):
    plan = _plan90(size, a, c, arch_specific)
    assert plan.smem_c_over_ab is None


@pytest.mark.parametrize("size, a, c, expected_smem", [
    ((100, 100, 100), I8, I32, 40000),   # C (99 * 100 + 100) * 4 B: more than A + B (22.4 KB); beside them 62400
    ((48, 80, 24), I8, I32, 16624),      # C column-major, 48 floats padded to 52: 79 * 52 + 48 = 4156 floats
    ((48, 80, 24), E4, F32, 16624),
    ((128, 128, 128), I8, I32, 67568),   # A + B (36.9 KB) < padded C (127 * 132 + 128) * 4 B
])
def test_8bit_mma_sync_stages_c_over_a_and_b(size, a, c, expected_smem):
    """8-bit mma.sync plans write C over the consumed A and B, in max(A + B, C) bytes of shared
    memory per problem (more blocks per SM for a memory-bound batch), rather than beside them."""
    plan = _plan90(size, a, c)
    assert plan.instruction == "mma.sync.m16n8k32"
    assert plan.smem_c is None and plan.smem_c_over_ab is not None
    assert plan.stage_bytes == expected_smem
    assert 0 <= plan.shared_memory - plan.stages * expected_smem < 16  # B's last chunk (_b_overread_bytes)


@pytest.mark.parametrize("size, b_order, a, c", [
    ((128, 8, 100), bx.col_major, I8, I32),     # B rows of 100 bytes end the block (C over A and B)
    ((100, 100, 100), bx.row_major, I8, I32),
    ((48, 80, 24), bx.col_major, E4, F32),      # rows of 24 bytes
    ((64, 64, 64), bx.col_major, F64, F64),     # whole chunks (test_descriptor: sm_75 64^3 f64 still fits)
])
def test_last_b_row_is_readable_to_its_16_byte_chunk_end(size, b_order, a, c):
    """Fragment reads take whole 16-byte chunks of a K row; where B ends the batched kernel's
    shared memory, its last row's last chunk lies inside the block."""
    m, n, k = size
    p = h.Problem(m, n, k, a, a, c, False, True, b_order is bx.row_major, False, 90)
    plan = h.plan_kernel(p)
    ld = max(plan.smem_b.strides)
    inner_bytes = p.b_inner * a.size
    last_row_end = plan.smem_b_offset + ((p.b_outer - 1) * ld + p.b_inner) * a.size
    chunk_end = last_row_end - inner_bytes + -(-inner_bytes // 16) * 16
    assert plan.shared_memory >= chunk_end + (plan.stages - 1) * plan.stage_bytes


@pytest.mark.parametrize("size, a, c, stages", [
    ((48, 80, 24), F16, F16, 2),      # C 7680 B > A + B 6144 B
    ((48, 80, 24), F64, F64, 2),
    ((32, 32, 32), I8, I32, 2),       # int32 C is twice A + B
    ((100, 100, 100), E4, F32, 2),
    ((32, 32, 32), F16, F32, 1),      # C as large as A + B
    ((100, 100, 100), F16, F16, 1),   # C half of A + B
    ((64, 64, 64), F32, F32, 1),
    ((128, 128, 128), I8, I32, 1),    # two of max(A + B, C) = 66 KB would leave one block per SM
])
def test_two_problems_per_block_where_c_outweighs_a_and_b(size, a, c, stages):
    """The batched kernel runs two consecutive problems per block (the second one's copies in flight
    while the first is multiplied) where C has more bytes than A and B and two blocks still fit."""
    plan = _plan90(size, a, c)
    assert plan.stages == stages
    assert plan.stage_bytes % 16 == 0
    if plan.smem_c is not None:  # C beside every problem's A and B, after the last of them
        assert plan.smem_c_offset > (stages - 1) * plan.stage_bytes + plan.smem_b_offset
        assert plan.shared_memory == plan.smem_c_offset + plan.smem_c.cosize * c.size
    if stages > 1:
        assert 2 * plan.shared_memory <= h.MAX_SHARED_MEMORY[90]


@pytest.mark.parametrize("n, ld", [(32, 40), (64, 72), (80, 88), (100, 104), (128, 136), (8, 8), (20, 24)])
def test_tf32_b_rows_read_by_k_rows_fall_on_four_quarters_of_the_bank_line(n, ld):
    """N-contiguous tf32 B is read one element per lane from K rows t = 0..3 (8 columns each): rows
    32 or 96 bytes past a multiple of 128 put them on distinct banks, in whole 16-byte chunks
    (compute-bound plans, which read B many times)."""
    p = h.Problem(48, n, 24, TF32, TF32, F32, False, True, True, True, 90, compute_bound=True)
    assert h.reads_b_by_k_rows(p)
    assert h.b_leading_dimension(p) == ld
    banks = {(t * ld + g) % 32 for t in range(4) for g in range(8)}
    assert len(banks) == 32 and ld * 4 % 16 == 0


def test_one_problem_per_block_without_async_copies():
    """sm_75 copies through registers (no cp.async): nothing would be in flight, so one problem per block."""
    p = h.Problem(48, 80, 24, F16, F16, F16, False, True, True, True, 75)
    assert h.plan_kernel(p).stages == 1


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 256), st.integers(1, 256), st.integers(1, 256),
    st.sampled_from([(F16, F32), (F16, F16), (TF32, F32), (F32, F32), (F64, F64), (I8, I32)]),
    st.booleans(), st.sampled_from([80, 90]),
)
def test_c_over_ab_properties(m, n, k, types, cplx, sm):
    a, c = types
    if cplx and a in (I8, TF32):
        cplx = False
    p = h.Problem(m, n, k, a, a, c, cplx, True, False, False, sm)
    if dt.find_combination(a, a, c, cplx) is None:
        return
    plan = h.plan_kernel(p)
    layout = plan.smem_c_over_ab
    if layout is None:
        return
    assert plan.smem_c is None and plan.smem_c_offset == 0
    assert layout.cosize * p.element_size(c) <= plan.shared_memory
    assert h.accumulator_bytes_per_thread(p, plan) <= 256


@pytest.mark.parametrize("size, a, c, b_row_major, expected", [
    ((48, 80, 24), bx.float16, bx.float16, False, (3, 5)),   # 10 atoms along N: 5 + 5, not 8 + 2
    ((48, 80, 24), bx.float16, bx.float32, False, (3, 5)),   # f32 accumulators: 5 + 5 fit, not 4 + 4 + 2
    ((48, 80, 24), bx.int8, bx.int32, True, (3, 4)),         # even FN: 6 + 4 would pass the accumulator limit
    ((100, 100, 100), bx.float16, bx.float32, False, (4, 7)),  # 13 atoms: 7 + 6, not 8 + 5 (wide: 4 warps)
    ((32, 32, 32), bx.float16, bx.float32, False, (1, 4)),   # already even
    ((100, 100, 100), bx.int8, bx.int32, True, (2, 8)),      # B read in runs keeps FN even: 8 + 5, not 7 + 6
])
def test_compute_bound_warp_tiles_are_balanced(size, a, c, b_row_major, expected):
    """Compute-bound blocks run one warp tile per warp; the tiles along M and N are made near
    equal, since the warp with the largest tile sets the time, and along N as few as the
    accumulator limit allows (halving the tile skips counts in between)."""
    p = h.Problem(*size, a, a, c, False, True, b_row_major, False, 90, compute_bound=True)
    plan = h.plan_kernel(p)
    assert plan.instruction.startswith("mma.sync") and plan.warp_tile == expected, plan


I8, E4M3 = bx.int8, bx.float8_e4m3
R, C = bx.row_major, bx.col_major


@pytest.mark.parametrize("size, a, c, sm, compute_bound, is_complex, scheme, expected", [
    ((64, 64, 64), TF32, F32, 90, True, False, "native", 8),       # eight k8 steps: whole
    ((128, 128, 128), TF32, F32, 90, True, False, "native", 4),    # sixteen: four at a time
    ((100, 100, 100), TF32, F32, 90, True, False, "native", 4),    # twelve and a tail
    ((64, 64, 64), F32, F32, 90, True, False, "tf32", 8),          # float32 rounded to tf32: the same
    ((64, 64, 64), F32, F32, 90, True, False, "3xtf32", 1),        # twice the registers: rolled
    ((100, 100, 100), F64, F64, 90, True, False, "native", 12),    # DMMA m16n8k8
    ((100, 100, 100), F64, F64, 80, True, False, "native", 4),     # m8n8k4: 25 steps
    ((100, 100, 100), F16, F16, 90, True, False, "native", 6),
    ((100, 100, 100), F16, F16, 90, False, False, "native", 1),    # memory bound: rolled
    ((64, 64, 64), TF32, F32, 90, False, False, "native", 1),
    ((100, 100, 100), I8, bx.int32, 90, True, False, "native", 1),  # 8-bit: rolled
    ((100, 100, 100), E4M3, F32, 90, True, False, "native", 1),
    ((64, 64, 64), F64, F64, 90, True, True, "native", 1),         # complex: rolled
    ((32, 32, 32), F16, F32, 90, False, False, "native", 2),       # two steps always unroll
    ((48, 80, 8), F64, F64, 90, False, False, "native", 1),
])
def test_k_loop_unrolls_for_compute_bound_real_products(size, a, c, sm, compute_bound, is_complex, scheme, expected):
    """Compute-bound real products unroll their K loop (tf32 past eight steps four at a time);
    memory-bound, 8-bit, complex and 3xtf32 ones keep it rolled beyond two steps."""
    p = h.Problem(*size, a, a, c, is_complex, True, True, True, sm, compute_bound=compute_bound, scheme=scheme)
    family = h.warp_level_family(p)
    assert h.k_loop_unroll(p, family) == expected


def test_k_unroll_reaches_the_generated_config():
    desc = (bx.Size(64, 64, 64) + bx.Precision(TF32, TF32, F32) + bx.Function.MM + bx.SM(90) + bx.Block()
            + bx.Workload.compute_bound)
    assert desc.plan.k_unroll == 8
    assert "static constexpr int k_unroll = 8;" in codegen.generate(desc).source


@pytest.mark.parametrize("size, arr, compute_bound, cplx, threads, expected", [
    ((64, 64, 64), (R, R, R), True, False, None, True),    # the block-compute case: 128 threads, 32 x 32 tiles
    ((32, 32, 32), (R, R, C), True, False, None, True),    # any C
    ((64, 32, 16), (R, R, R), True, False, None, True),
    ((64, 64, 64), (R, R, R), False, False, None, False),  # memory bound: 16-byte C stores of the atom's order
    ((64, 64, 64), (R, C, R), True, False, None, False),   # K-contiguous B reads 16 bytes in the atom's order
    ((64, 64, 64), (C, R, R), True, False, None, False),   # M-contiguous A
    ((64, 64, 64), (R, R, R), True, True, None, False),    # complex
    ((100, 100, 100), (R, R, R), True, False, None, False),  # warp tiles past C
    ((48, 80, 24), (R, R, R), True, False, None, False),
    ((128, 128, 64), (R, R, R), True, False, None, False),  # 256 threads: unmeasured, the atom's order
    ((64, 64, 64), (R, R, R), True, False, 256, False),
])
def test_compute_bound_f64_of_row_major_a_and_b_takes_the_transposed_order(size, arr, compute_bound, cplx, threads,
                                                                           expected):
    """heuristics.dmma_transposed: f64 DMMA blocks of up to 128 threads on real row-major A and B, whose warp
    tiles (an even count of pieces along N) tile C and whose K is whole steps; the config says so only then."""
    desc = (bx.Size(*size) + bx.Precision(F64) + bx.Function.MM + bx.Arrangement(*arr) + bx.SM(90) + bx.Block()
            + (bx.Type.complex if cplx else bx.Type.real))
    desc = desc + bx.Workload.compute_bound if compute_bound else desc
    desc = desc + bx.BlockDim(threads) if threads else desc
    assert desc.plan.dmma_transposed is expected, desc.plan
    assert ("static constexpr bool dmma_transposed = true;" in codegen.generate(desc).source) is expected


def test_the_transposed_f64_order_can_be_switched_off_or_to_m16n8k4():
    """DMMA_TRANSPOSED_THREADS = 0 (what a benchmark of the orders sets) plans the atom's order;
    DMMA_TRANSPOSED_K4 the transposed order's K steps as two m16n8k4 each (the default; off: one m16n8k8)."""
    desc = lambda: (bx.Size(64, 64, 64) + bx.Precision(F64) + bx.Function.MM + bx.Arrangement(R, R, R) + bx.SM(90)
                    + bx.Block() + bx.Workload.compute_bound)
    saved = h.DMMA_TRANSPOSED_THREADS, h.DMMA_TRANSPOSED_K4
    try:
        h.DMMA_TRANSPOSED_THREADS = 0
        assert not desc().plan.dmma_transposed
        assert not desc().plan.dmma_k4  # only the transposed order has it
        h.DMMA_TRANSPOSED_THREADS = saved[0]
        h.DMMA_TRANSPOSED_K4 = False
        k8 = desc()
        assert k8.plan.dmma_transposed and not k8.plan.dmma_k4
        assert "dmma_k4" not in codegen.generate(k8).source
    finally:
        h.DMMA_TRANSPOSED_THREADS, h.DMMA_TRANSPOSED_K4 = saved
    default = desc()
    assert default.plan.dmma_transposed and default.plan.dmma_k4
    assert "static constexpr bool dmma_k4 = true;" in codegen.generate(default).source


@pytest.mark.parametrize("size, a, c, compute_bound, threads, expected, warps", [
    ((100, 100, 100), TF32, F32, True, None, (4, 7), 4),      # wide: 64 x 56 tiles on four warps
    ((128, 128, 64), TF32, F32, True, None, (4, 8), 4),
    ((100, 100, 100), F16, F32, True, None, (4, 7), 4),
    ((128, 128, 64), F64, F64, True, None, (2, 8), 8),
    ((64, 64, 64), F64, F64, True, None, (2, 4), 4),          # wide would leave two warps: kept
    ((100, 100, 100), F16, F16, True, None, (4, 7), 4),       # wide would leave two warps: kept
    ((32, 32, 32), TF32, F32, True, None, (1, 4), 2),         # no larger tile: kept
    ((100, 100, 100), TF32, F32, True, 64, (2, 7), 2),        # BlockDim(64): fewer warps than wide tiles
    ((100, 100, 100), TF32, F32, False, None, (2, 8), 8),     # memory bound: 256-byte tiles
])
def test_compute_bound_wide_warp_tiles_keep_four_to_eight_warps(size, a, c, compute_bound, threads, expected, warps):
    """Compute-bound real products take warp tiles of up to 512 accumulator bytes per thread
    where four to eight of them (one per warp) cover C, else the 256-byte tiles."""
    p = h.Problem(*size, a, a, c, False, True, True, True, 90, compute_bound=compute_bound)
    plan = h.plan_warp_level(p, threads)
    assert plan.warp_tile == expected, plan
    assert plan.threads == (threads or 32 * warps)
    if threads is None:  # the suggested block: one tile per warp, within the register accumulator's limit
        assert h.accumulator_bytes_per_thread(p, plan) <= 512


@pytest.mark.parametrize("size, a, scheme, arch_specific, chunk", [
    ((128, 128, 64), F32, "native", False, 16),     # float32 on CUDA cores, 128-wide: four chunks
    ((128, 128, 128), F32, "native", False, 32),
    ((128, 128, 128), TF32, "native", False, 64),   # alone on its SM for shared memory: two chunks
    ((128, 128, 128), F32, "3xtf32", False, 64),
    ((128, 128, 64), TF32, "native", False, 0),     # three blocks fit per SM
    ((100, 100, 100), TF32, "native", False, 64),   # two blocks of 80 KB per SM: two chunks
    ((100, 100, 100), F32, "3xtf32", False, 0),     # measured to lose 13% there
    ((128, 128, 64), F32, "3xtf32", False, 0),      # measured to lose 25%
    ((100, 100, 100), F32, "native", False, 0),     # narrower than 128
    ((128, 128, 64), F64, "native", False, 0),      # measured to lose (every tile's accumulator live at once)
    ((100, 100, 100), F16, "native", False, 0),     # measured to lose
    ((128, 128, 128), F16, "native", True, 0),      # wgmma
])
def test_batched_k_chunks_where_they_were_measured_to_pay(size, a, scheme, arch_specific, chunk):
    """The batched kernel copies K in chunks, multiplying each as it lands, for float32 on CUDA
    cores 128 and more wide (four chunks), tf32 / 3xtf32 blocks alone on their SM and tf32
    blocks two of which fill it (two)."""
    c = F64 if a is F64 else (F16 if a is F16 else F32)
    p = h.Problem(*size, a, a, c, False, True, True, True, 90, arch_specific, scheme=scheme)
    plan = h.plan_kernel(p)
    assert plan.k_chunk == chunk
    if chunk:
        assert h.k_chunk_fits(p, plan, chunk)


def test_k_chunk_reaches_the_generated_config():
    def desc(size):
        return (bx.Size(*size) + bx.Precision(F32, F32, F32) + bx.Type.real + bx.Function.MM
                + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + bx.SM(90) + bx.Block())

    assert "static constexpr int k_chunk = 16;" in codegen.generate(desc((128, 128, 64))).source
    whole = desc((64, 64, 64))
    assert "static constexpr int k_chunk = 64;" in codegen.generate(whole).source  # all of K: one group


def test_k_chunks_need_one_problem_per_block_whole_mma_steps_and_aligned_starts():
    p = h.Problem(128, 128, 128, TF32, TF32, F32, False, True, True, True, 90)
    plan = h.plan_kernel(p)
    assert h.k_chunk_fits(p, plan, 64) and h.k_chunk_fits(p, plan, 8)
    assert not h.k_chunk_fits(p, plan, 4)              # half an m16n8k8 step
    assert not h.k_chunk_fits(p, plan, 128)            # all of K: one chunk
    assert not h.k_chunk_fits(p, replace(plan, stages=2), 64)
    assert not h.k_chunk_fits(p, replace(plan, batched_panels=(64, 64)), 64)  # chunks address padded rows
    wgmma = h.Problem(128, 128, 128, F16, F16, F32, False, True, True, True, 90, True)
    assert h.plan_kernel(wgmma).is_wgmma and not h.k_chunk_fits(wgmma, h.plan_kernel(wgmma), 64)
    sm75 = replace(p, sm=75, a=F16, b=F16)             # no cp.async: nothing is left in flight
    assert not h.k_chunk_fits(sm75, h.plan_kernel(sm75), 32)
    f64_rows = h.Problem(40, 40, 40, F64, F64, F64, False, False, True, True, 90)  # K-outer rows of 40 doubles
    plan64 = h.plan_kernel(f64_rows)
    assert all(h.k_chunk_fits(f64_rows, plan64, c) == (c * max(plan64.smem_a.strides) * 8 % 16 == 0
                                                       and c * max(plan64.smem_b.strides) * 8 % 16 == 0)
               for c in (8, 16, 24, 32))


@pytest.mark.parametrize("c, min_blocks", [(bx.float16, 3), (bx.float32, 2)], ids=["f16-sums", "f32-sums"])
def test_wgmma_blocks_with_f16_sums_ask_for_three_per_sm(c, min_blocks):
    """128x128x64 on wgmma (256 threads, shared memory for three): f16 sums fit 85 registers, f32 sums
    keep two blocks (ptxas needs 90 registers for their wgmma)."""
    p = h.Problem(128, 128, 64, bx.float16, bx.float16, c, False, True, False, False, 90, True)
    plan = h.plan_kernel(p)
    assert plan.is_wgmma and plan.threads == 256 and plan.min_blocks == min_blocks, plan
    assert h.plan_kernel(replace(p, compute_bound=True)).min_blocks == 2  # fusion's plans keep the cap of two


@pytest.mark.parametrize("size, min_blocks", [
    ((128, 128, 64), 2),    # shared memory holds three blocks of 256: the 128-register cap, 125 without spilling
    ((128, 128, 128), 1),   # shared memory holds one
    ((100, 100, 100), 1),   # halved to 128 threads instead (the cap spills at 256)
])
def test_3xtf32_blocks_of_256_threads_are_capped_where_shared_memory_holds_three(size, min_blocks):
    p = h.Problem(*size, F32, F32, F32, False, True, True, True, 90, scheme="3xtf32")
    assert h.plan_kernel(p).min_blocks == min_blocks


@pytest.mark.parametrize("size, a, scheme, sm, threads", [
    ((100, 100, 100), E4, "native", 90, 128),     # 171 registers at 256 threads: alone; shared memory fits two
    ((100, 100, 100), F32, "3xtf32", 90, 128),
    ((128, 128, 128), F32, "3xtf32", 90, 256),    # shared memory holds one block anyway
    ((128, 128, 64), F32, "3xtf32", 90, 256),     # three would fit: measured to lose
    ((100, 100, 100), I8, "native", 90, 256),     # capped at 128 registers: two blocks of 256
    ((100, 100, 100), E4, "native", 89, 256),     # not measured off sm_90
    ((100, 100, 100), TF32, "native", 90, 256),
])
def test_register_bound_blocks_are_halved_where_two_then_fit(size, a, scheme, sm, threads):
    """Memory-bound fp8 and 3xtf32 mma.sync blocks of 256 threads, alone on their SM for registers
    while shared memory fits two, are suggested at 128 threads (two blocks in flight)."""
    c = I32 if a is I8 else F32
    p = h.Problem(*size, a, a, c, False, True, True, True, sm, scheme=scheme)
    assert h.plan_kernel(p).threads == threads
    assert h.plan_kernel(p, 256).threads == 256                        # BlockDim decides
    fused = replace(p, compute_bound=True)                            # fusion's plans keep their own rule
    assert not h._alone_for_registers(fused, h._plan_warp_level(fused, 256))


@pytest.mark.parametrize("size, a, c, arch_specific, panels", [
    ((32, 32, 32), F16, F16, True, (64, 64)),       # 64-byte rows: a 128-byte line spans two
    ((32, 32, 32), F16, F32, True, (64, 64)),
    ((32, 32, 32), BF16, F32, False, (64, 64)),
    ((64, 32, 128), F16, F16, False, (128, 64)),    # B's rows short; A's 256-byte rows in two panels
    ((64, 64, 64), F16, F32, False, (0, 0)),        # rows of 128 bytes: no line spans two
    ((48, 80, 24), F16, F16, True, (0, 0)),         # A's 48-byte rows: no 32-byte panels
    ((100, 100, 100), F16, F16, True, (0, 0)),      # 200-byte rows
    ((128, 128, 64), F16, F16, True, (0, 0)),       # wgmma: panels of its own
    ((32, 16, 32), TF32, F32, False, (0, 0)),       # ldmatrix panels are for 16-bit operands
    ((32, 16, 32), F32, F32, False, (0, 0)),        # CUDA cores
])
def test_batched_panels_where_rows_are_shorter_than_a_line(size, a, c, arch_specific, panels):
    """The batched kernel keeps 16-bit A and B of mma.sync plans in swizzled panels where one of
    their rows is shorter than a 128-byte line and a panel layout exists (rows a whole number of
    32-byte panels, 8-row atoms)."""
    p = h.Problem(*size, a, a, c, False, True, True, True, 90, arch_specific)
    plan = h.plan_kernel(p)
    assert plan.batched_panels == panels
    if panels != (0, 0):  # dense panels, A then B, each problem's from a 128-byte boundary
        m, n, k = size
        assert plan.smem_b_offset == m * k * a.size and plan.stage_bytes % h.PANEL_ALIGNMENT == 0
        end_b = plan.smem_b_offset + k * n * a.size
        assert end_b <= (plan.smem_c_offset if plan.smem_c else plan.shared_memory)


def test_batched_panels_reach_the_generated_config():
    def desc(m):
        return (bx.Size(m, 32, 32) + bx.Precision(F16, F16, F16) + bx.Type.real + bx.Function.MM
                + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + bx.SM(80) + bx.Block())

    src = codegen.generate(desc(32)).source
    assert "static constexpr bool batched_panels = true;" in src
    assert "static constexpr int a_panel_bytes = 64, b_panel_bytes = 64;" in src
    assert "static constexpr bool batched_panels = false;" in codegen.generate(desc(33)).source

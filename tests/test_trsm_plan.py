"""The TRSM plan's rules (blasdx.plan.trsm), pinned: panels, threads, batches, layouts, update GEMMs."""

from __future__ import annotations

import pytest

from blasdx.base import dtypes as dt
from blasdx.plan import heuristics as h
from blasdx.plan import trsm as tp


def problem(m, n, dtype=dt.float32, *, is_complex=False, left=True, lower=True, unit=False, a_row=True, b_row=False,
            sm=90):
    return tp.TrsmProblem(m, n, dtype, is_complex, left, lower, unit, a_row, b_row, sm)


def test_panel_steps_forward_and_backward():
    assert tp.panel_steps(40, 16, True) == [(0, 16, 16, 24), (16, 16, 32, 8), (32, 8, 40, 0)]
    assert tp.panel_steps(40, 16, False) == [(24, 16, 0, 24), (8, 16, 0, 8), (0, 8, 0, 0)]
    assert tp.panel_steps(16, 16, True) == [(0, 16, 16, 0)]
    assert tp.panel_steps(1, 16, False) == [(0, 1, 0, 0)]


@pytest.mark.parametrize(
    "left, lower, forward", [(True, True, True), (True, False, False), (False, True, False), (False, False, True)]
)
def test_direction(left, lower, forward):
    assert problem(8, 8, left=left, lower=lower).forward is forward


@pytest.mark.parametrize(
    "p, threads",
    [
        (problem(16, 16), 16),  # one panel: one thread per right-hand side
        (problem(12, 5), 5),
        (problem(16, 400), 256),  # at most 256; threads take several sides
        (problem(32, 32), 32),  # updates: whole warps
        (problem(64, 64), 96),  # six blocks fit an SM: 512 / 6 -> 96
        (problem(128, 128), 256),  # one block per SM: 256
        (problem(128, 64, dt.float64), 256),
        (problem(40, 3, left=False), 40),  # right: B's 40 rows are the sides; A is 3 x 3, one panel
    ],
    ids=lambda v: getattr(v, "m", v),
)
def test_group_threads(p, threads):
    assert tp.suggested_group_threads(p) == threads


def test_batches_fill_the_block_within_a_quarter_of_shared_memory():
    assert tp.suggested_batches(problem(16, 16), 16) == 8  # 128 threads
    assert tp.suggested_batches(problem(12, 1, dt.float64), 1) == 32  # 48 KB / 1520 B per problem
    assert tp.suggested_batches(problem(64, 64), 96) == 1
    assert tp.suggested_batches(problem(16, 16, sm=75), 16) == 6  # a quarter of 64 KB / 2592 B per problem


def test_layouts_are_padded_like_the_gemms_until_they_do_not_fit():
    a, b = tp.smem_layouts(problem(64, 32))
    assert a.strides == (68, 1) and b.strides == (1, 68)  # row-major A, column-major B (64 rows)
    a, b = tp.smem_layouts(problem(20, 20))
    assert a.strides == (20, 1) and b.strides == (1, 20)  # 80-byte rows: an odd number of 16-byte pieces
    a, b = tp.smem_layouts(problem(128, 128, dt.float64), max_bytes=h.MAX_SHARED_MEMORY[90])
    assert a.strides == (128, 1) and b.strides == (1, 128)  # padded would not fit


def test_plan_layout_and_updates():
    plan = tp.plan_trsm(problem(40, 24, dt.float64, sm=80))
    # 22 KB a problem: seven blocks fit an SM, so 512 / 7 -> 96 threads rather than 32
    assert (plan.panel, plan.panels, plan.group_threads, plan.batches) == (16, 3, 96, 1)
    plan = tp.plan_trsm(problem(40, 24, dt.float64, sm=80), batches=4)
    assert plan.threads == 4 * 96
    inv = 40 * 8
    assert (plan.inv_offset, plan.a_offset) == (0, 4 * inv)
    assert plan.a_stride == plan.smem_a.cosize * 8 and plan.b_offset == plan.a_offset + 4 * plan.a_stride
    assert plan.shared_memory == plan.b_offset + 4 * plan.b_stride
    assert [(u.index, u.m, u.n, u.pb, u.r0) for u in plan.updates] == [(0, 24, 24, 16, 16), (1, 8, 24, 16, 32)]
    assert plan.instruction == "mma.sync.m8n8k4"
    right = tp.plan_trsm(problem(40, 24, left=False, lower=True))
    assert [(u.index, u.m, u.n, u.p0, u.rn) for u in right.updates] == [(0, 40, 8, 8, 8)]  # backward: [8, 24) first
    assert right.instruction == "fma"


def test_plan_follows_block_dim_and_batches():
    plan = tp.plan_trsm(problem(24, 20), threads=96, batches=3)
    assert (plan.group_threads, plan.batches) == (32, 3)
    assert tp.plan_trsm(problem(24, 20), threads=64).batches == 1
    assert tp.plan_trsm(problem(24, 20), batches=5).group_threads == tp.suggested_group_threads(problem(24, 20))


def test_unit_diagonal_needs_no_reciprocals():
    plan = tp.plan_trsm(problem(16, 16, unit=True))
    assert plan.a_offset == 0

"""bx.tune's host side: what runs before any GPU work (its timing events, its argument checks)."""

import pytest

import blasdx as bx
from blasdx.calls import tune as _tune
from blasdx.base.errors import ExecutionError


def test_timing_events_are_options_the_installed_cuda_core_takes():
    options = _tune.timing_event_options()
    assert options.timing_enabled is True


@pytest.mark.parametrize("repeats", [0, -1, 2.5])
def test_bad_repeats_raise_before_anything_runs(repeats):
    with pytest.raises(ExecutionError, match="repeats"):
        bx.tune(None, None, repeats=repeats)


def test_unknown_candidate_names_the_argument():
    with pytest.raises(ExecutionError, match="candidates"):
        bx.tune(None, None, candidates=[("no such configuration", {})])


@pytest.mark.parametrize("steps", [1, 3, 4, 7, 8, 31, 64, 100, 128, 1000])
def test_split_counts_leave_no_split_empty_or_shallow(steps):
    """Every split count tried covers the K steps in that many non-empty chunks of at least
    MIN_STEPS_PER_FIXUP_SPLIT steps (ping-pong tiles in 12 splits of 64 K steps, the last one
    empty, never returned on the GPU)."""
    counts = _tune.split_counts(steps)
    assert counts[0] == 1
    for splits in counts[1:]:
        chunk = -(-steps // splits)
        assert chunk >= _tune._hopper.MIN_STEPS_PER_FIXUP_SPLIT
        assert (splits - 1) * chunk < steps  # the last split starts before the end: none is empty
    assert 12 not in _tune.split_counts(64) and {2, 4, 8, 16} <= set(_tune.split_counts(64))


def test_an_out_dtype_outside_the_inputs_row_is_refused_before_anything_runs():
    from blasdx.base import dtypes as dt

    from .array_views import views

    view, _ = views(dt.bfloat16)
    with pytest.raises(ExecutionError, match="out_dtype: bfloat16 inputs give float32 or bfloat16, not float16"):
        bx.tune(view((64, 64)), view((64, 64)), out_dtype="float16", stream=0)

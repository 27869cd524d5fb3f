"""bx.tune's host side: what runs before any GPU work (its timing events, its argument checks)."""

import pytest

import blasdx as bx
from blasdx.calls import tune as _tune
from blasdx.errors import ExecutionError


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

"""bx.tune on the GPU: candidates timed and checked, the fastest kept, later calls of that kind taking it
with correct results.
"""

from __future__ import annotations

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.calls import matmul as array_gemm
from blasdx.engine import tuning
from blasdx.reference import tolerance

from .hopper_support import hopper_torch

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch():
    return hopper_torch()


def _tuned_and_taken(torch, table, x, y, candidates, allowed: float, out_dtype=None) -> None:
    """bx.tune of x @ y over ``candidates``: every candidate timed, the winner kept (or none, when the rule won),
    later bx.matmul plans of that kind taking it, their result within ``allowed`` of the float64 product."""
    array_gemm._CALLS.clear()
    found = bx.tune(x, y, out_dtype=out_dtype, candidates=candidates, repeats=5)
    assert len(found.timings) > len(candidates) and found.best_ms <= found.rule_ms and found.speedup >= 1.0
    assert all(ms > 0 for _, ms in found.timings)
    assert found.best in {text for text, _ in found.timings}
    entries = list(table._load().values())
    assert (found.best == found.rule) == (not entries), (found.best, entries)
    got = bx.matmul(x, y, out_dtype=out_dtype)
    shape = (x.shape[0], y.shape[1])
    plan = next(p for p in reversed(list(array_gemm._CALLS.values())) if p.shape == shape)
    assert plan.kernel.describe() == found.best, (plan.describe(), found.best)
    ref = x.double() @ y.double()
    assert ((got.double() - ref).norm() / ref.norm()).item() <= allowed


def test_tune_keeps_the_fastest_and_calls_take_it(torch, tmp_path, monkeypatch):
    table = tuning.TunedConfigs(tmp_path)
    monkeypatch.setattr(tuning, "TUNED", table)
    gen = torch.Generator(device="cuda").manual_seed(8)
    x = torch.randn(96, 3072, device="cuda", generator=gen).to(torch.bfloat16)
    w = torch.randn(1536, 3072, device="cuda", generator=gen).to(torch.bfloat16).t()  # a linear layer's weight
    _tuned_and_taken(torch, table, x, w, [("narrow", {"bn": 128, "stages": 8}), ("pingpong", {})],
                     tolerance(dt.bfloat16, dt.float32, 3072, dt.float32))


def test_tune_of_a_bf16_result_is_taken_by_calls_of_that_result(torch, tmp_path, monkeypatch):
    """bf16 -> bf16 (matmul's out_dtype): tuned and taken under its own key."""
    table = tuning.TunedConfigs(tmp_path)
    monkeypatch.setattr(tuning, "TUNED", table)
    gen = torch.Generator(device="cuda").manual_seed(10)
    x = torch.randn(96, 3072, device="cuda", generator=gen).to(torch.bfloat16)
    w = torch.randn(1536, 3072, device="cuda", generator=gen).to(torch.bfloat16).t()
    _tuned_and_taken(torch, table, x, w, [("narrow", {"bn": 128, "stages": 8}), ("pingpong", {})],
                     tolerance(dt.bfloat16, dt.bfloat16, 3072, dt.float32), out_dtype=bx.bfloat16)
    assert all("->bfloat16|" in text for text in table._load())


@pytest.mark.parametrize("a", [dt.float64, dt.float32], ids=lambda t: t.name)
def test_tune_times_the_wide_path_and_calls_take_it(torch, a, tmp_path, monkeypatch):
    """float64 / float32 (DMMA / FFMA tiles): the wide path's candidates timed and checked, the fastest kept and
    taken by later calls."""
    table = tuning.TunedConfigs(tmp_path)
    monkeypatch.setattr(tuning, "TUNED", table)
    dtype = torch.float64 if a == dt.float64 else torch.float32
    gen = torch.Generator(device="cuda").manual_seed(9)
    x = torch.randn(128, 1024, device="cuda", generator=gen, dtype=dtype)
    y = torch.randn(1024, 1000, device="cuda", generator=gen, dtype=dtype)
    _tuned_and_taken(torch, table, x, y, [("128x128", {}), ("64x64", {}), ("128x64", {})], tolerance(a, a, 1024, a))


def test_tune_refuses_what_the_engine_does_not_run(torch):
    x = torch.ones(64, 64, device="cuda", dtype=torch.complex64)
    with pytest.raises(bx.ExecutionError, match="tune times the Hopper engine's configurations"):
        bx.tune(x, x)

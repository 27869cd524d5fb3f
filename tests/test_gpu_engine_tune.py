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


def test_tune_keeps_the_fastest_and_calls_take_it(torch, tmp_path, monkeypatch):
    table = tuning.TunedConfigs(tmp_path)
    monkeypatch.setattr(tuning, "TUNED", table)
    array_gemm._CALLS.clear()
    gen = torch.Generator(device="cuda").manual_seed(8)
    x = torch.randn(96, 3072, device="cuda", generator=gen).to(torch.bfloat16)
    w = torch.randn(1536, 3072, device="cuda", generator=gen).to(torch.bfloat16).t()  # a linear layer's weight
    found = bx.tune(x, w, candidates=[("narrow", {"bn": 128, "stages": 8}), ("pingpong", {})], repeats=5)
    assert len(found.timings) > 4 and found.best_ms <= found.rule_ms and found.speedup >= 1.0
    assert all(ms > 0 for _, ms in found.timings)
    entries = list(table._load().values())
    assert (found.best == found.rule) == (not entries), (found.best, entries)
    got = bx.matmul(x, w)
    plan = next(p for p in reversed(list(array_gemm._CALLS.values())) if p.shape == (96, 1536))
    assert plan.kernel.describe() == found.best, (plan.describe(), found.best)
    ref = x.double() @ w.double()
    err = ((got.double() - ref).norm() / ref.norm()).item()
    assert err <= tolerance(dt.bfloat16, dt.float32, 3072, dt.float32)
    assert found.best in {text for text, _ in found.timings}


def test_tune_refuses_what_the_engine_does_not_run(torch):
    x = torch.ones(64, 64, device="cuda", dtype=torch.float64)
    with pytest.raises(bx.ExecutionError, match="tune times the Hopper engine's wgmma configurations"):
        bx.tune(x, x)

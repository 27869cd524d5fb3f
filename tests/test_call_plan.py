"""calls.matmul.call_plan: the plan of one given call, computed from its arguments without a GPU.

Arrays are ArrayViews with made-up device pointers on a faked sm_90 device (as in
test_array_gemm.py); the plan must be the one the call's own planning gives, whatever the call
cache holds, and asking must leave that cache alone.
"""

from __future__ import annotations

import pytest

from blasdx.base import dtypes as dt
from blasdx.calls import matmul as array_gemm
from blasdx.calls.matmul import call_plan

from .array_views import fake_hopper, views


view, col = views(dt.float16)


@pytest.fixture(autouse=True)
def fake_device(monkeypatch):
    fake_hopper(monkeypatch)


def test_matmul_plan_of_the_call_and_not_of_the_newest_cached_one():
    big = call_plan(view((2048, 1024), dt.bfloat16), col((1024, 2048), dt.bfloat16))
    small = call_plan(view((64, 32, 32)), view((64, 32, 32)))
    assert big.kind == "hopper" and big.shape == (2048, 2048) and big.dtype == dt.float32, big.describe()
    assert small.kind == "block" and small.shape == (64, 32, 32) and small.dtype == dt.float16, small.describe()
    again = call_plan(view((2048, 1024), dt.bfloat16), col((1024, 2048), dt.bfloat16))
    assert again.describe() == big.describe()


def test_mma_plan_follows_out_and_the_options():
    x, y = view((300, 520), dt.float32), col((520, 200), dt.float32)
    acc = view((300, 200), dt.float32)
    split = call_plan(x, y, acc, out=view((300, 200), dt.float32, ptr=0x7F0000100000), mantissa_bits=21)  # what the engine's 3xtf32 keeps
    assert split.scheme.name == "3xtf32", split.describe()
    native = call_plan(x, y, acc)
    assert native.scheme.name == "native", native.describe()
    fp8 = call_plan(view((1024, 2048), dt.float8_e4m3), col((2048, 768), dt.float8_e4m3), fast_accumulation=True)
    assert fp8.kind == "hopper" and fp8.kernel.config.promotion == 0, fp8.describe()


def test_asking_leaves_the_call_cache_alone():
    before = dict(array_gemm._CALLS)
    call_plan(view((128, 64)), view((64, 96)))
    assert array_gemm._CALLS == before

"""bx.tune's table without a GPU: the key, the file (atomic, versioned, corrupt-safe) and plans taking a
tuned configuration over the rule's.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.calls import matmul as array_gemm
from blasdx.engine import hopper, tuning, wide

from .array_views import PTR, views

SMS = 132


view = views(dt.bfloat16)[0]


def key(m=128, n=1024, k=2048) -> tuning.TuneKey:
    route = hopper.route("x", dt.bfloat16, PTR, True, k, m, 0, False)
    return tuning.key_of(dt.bfloat16, dt.bfloat16, dt.float32, m, n, k, 1, SMS, route,
                         hopper.route("y", dt.bfloat16, PTR, False, n, k, 0, False), 0)


def test_keys_name_the_gpu_types_shape_and_routes():
    assert key().text() == "sm90x132|bfloat16xbfloat16->float32|1x128x1024x2048|K/MN|p0"
    tf32 = hopper.route("y", dt.tfloat32, PTR, False, 1024, 2048, 0, False)
    text = tuning.key_of(dt.tfloat32, dt.tfloat32, dt.float32, 16, 1024, 2048, 1, SMS, tf32, tf32, 0).text()
    assert "|K-repacked/K-repacked|" in text  # the routes as given: tf32 MN-major is read K-major after a repack


def test_table_round_trip_and_bad_files(encoder, tmp_path):
    table = tuning.TunedConfigs(tmp_path)
    assert table.get(key()) is None
    config = hopper.replace(hopper.NARROW, bk=64, bn=128, stages=8)
    table.put(key(), dataclasses.asdict(config), 4, 0.0123)
    assert tuning.TunedConfigs(tmp_path).get(key()) == (dataclasses.asdict(config), 4)  # a new process reads the file
    data = json.loads((tmp_path / tuning.TUNED_FILE).read_text())
    assert data["version"] == 1 and data["entries"][key().text()]["splits"] == 4
    assert not list(tmp_path.glob(".tuned-*"))  # no temporary file left
    (tmp_path / tuning.TUNED_FILE).write_text("{not json")
    assert tuning.TunedConfigs(tmp_path).get(key()) is None  # unreadable: as if nothing were tuned
    (tmp_path / tuning.TUNED_FILE).write_text(json.dumps({"version": 1, "entries": {key().text(): {
        "config": {"bm": 64, "no_such_field": 1}, "splits": 2}}}))
    assert tuning.TunedConfigs(tmp_path).get(key()) == ({"bm": 64, "no_such_field": 1}, 2)
    x, y = view((128, 2048)), view((2048, 1024))
    array_gemm._CALLS.clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tuning, "TUNED", tuning.TunedConfigs(tmp_path))
        plan = array_gemm.plan_call(x, y, None, dt.float32, array_gemm._DeviceInfo(90, SMS), 0)
    assert plan.kernel.config == hopper.choose_config(dt.bfloat16, 128, 1024, 2048, 1, SMS)[0]  # another version's


def test_plans_take_a_tuned_configuration(encoder, tmp_path, monkeypatch):
    table = tuning.TunedConfigs(tmp_path)
    monkeypatch.setattr(tuning, "TUNED", table)
    x, y = view((128, 2048)), view((2048, 1024))
    rule = array_gemm.plan_call(x, y, None, dt.float32, array_gemm._DeviceInfo(90, SMS), 0)
    tuned = hopper.replace(hopper.PINGPONG, bk=64, stages=5)  # not what the rule picks (the medium tile)
    assert rule.kernel.config != tuned
    table.put(key(), dataclasses.asdict(tuned), 3, 0.01)
    array_gemm._CALLS.clear()
    plan = array_gemm.plan_call(x, y, None, dt.float32, array_gemm._DeviceInfo(90, SMS), 0)
    assert plan.kernel.config == tuned and plan.kernel.splits == 3, plan.describe()
    other = array_gemm.plan_call(view((256, 2048)), y, None, dt.float32, array_gemm._DeviceInfo(90, SMS), 0)
    assert other.kernel.config == rule.kernel.config  # another shape: the rule


def test_wide_plans_take_a_tuned_configuration_that_reads_their_layouts(encoder, tmp_path, monkeypatch):
    """float64 / float32 plans (the DMMA / FFMA path) take what bx.tune kept for their kind, unless its warp tiles do
    not read the operands' layouts or its fields are another version's."""
    table = tuning.TunedConfigs(tmp_path)
    monkeypatch.setattr(tuning, "TUNED", table)
    device = array_gemm._DeviceInfo(90, SMS)
    for a in (dt.float64, dt.float32):
        x, y = views(a)[0]((1024, 1024)), views(a)[0]((1024, 1024))  # row-major: x K-major, y MN-major
        rule = array_gemm.plan_call(x, y, None, a, device, 0).kernel
        assert isinstance(rule, wide.WidePlan) and rule.config == wide.CONFIGS[a.name]
        key_of = tuning.key_of(a, a, a, 1024, 1024, 1024, 1, SMS, *rule.routes_given, 0)
        tuned = wide.tune_candidates(a)["64x128"]
        table.put(key_of, dataclasses.asdict(tuned), 2, 0.01)
        array_gemm._CALLS.clear()
        plan = array_gemm.plan_call(x, y, None, a, device, 0).kernel
        assert plan.config == tuned and plan.splits == 2, plan.describe()
        table.put(key_of, {"bm": 64, "no_such_field": 1}, 2, 0.01)  # another version's fields: the rule
        array_gemm._CALLS.clear()
        assert array_gemm.plan_call(x, y, None, a, device, 0).kernel.config == rule.config
    y = views(dt.float32)[0]((1024, 1024))
    xt = views(dt.float32)[1]((1024, 1024))  # column-major x: MN-major, which 16-row warp tiles do not read
    array_gemm._CALLS.clear()
    rule = array_gemm.plan_call(xt, y, None, dt.float32, device, 0).kernel
    narrow = wide.tune_candidates(dt.float32)["64x64"]
    assert not wide.reads(dt.float32, narrow, False, False)
    table.put(tuning.key_of(dt.float32, dt.float32, dt.float32, 1024, 1024, 1024, 1, SMS, *rule.routes_given, 0),
              dataclasses.asdict(narrow), 1, 0.01)
    array_gemm._CALLS.clear()
    assert array_gemm.plan_call(xt, y, None, dt.float32, device, 0).kernel.config == rule.config


def test_wide_tune_candidates():
    from blasdx.calls import tune

    with pytest.raises(bx.ExecutionError, match=r"candidates: \('64x64', \{'consumers': 2\}\)"):
        tune._candidate(dt.float64, True, "64x64", {"consumers": 2})  # an engine field the wide tiles lack
    assert tune._candidate(dt.float32, True, "128x64", {"stages": 4}).stages == 4
    for a in (dt.float64, dt.float32):
        found = wide.tune_candidates(a)
        assert found["128x128"] == wide.CONFIGS[a.name] and found["128x128 clusters"].cluster == 2
        assert {(c.bm, c.bn) for c in found.values()} == {(128, 128), (128, 64), (64, 128), (64, 64)}
        assert all(c.threads == 384 for c in found.values())


def test_tune_checks_its_arguments():
    with pytest.raises(bx.ExecutionError, match="repeats: expected a positive int, got 0"):
        bx.tune(None, None, repeats=0)
    with pytest.raises(bx.ExecutionError, match=r"candidates: expected \(name, changes\) pairs"):
        bx.tune(None, None, candidates=[("no such", {})])

"""Device handling without a GPU: contexts made current and restored, stream devices, loads per device,
precompile for several devices, bx.mma on another device. A fake two-GPU driver stands in for CUDA.
"""

from __future__ import annotations

import threading
import types

import pytest

import blasdx as bx
from blasdx.calls import matmul as array_gemm
from blasdx.compile import compiled
from blasdx.launch import devices
from blasdx.run import execute as ex
from blasdx.base import dtypes as dt
from blasdx.arrays.view import ArrayView
from blasdx.base.errors import DeviceError, ExecutionError

from .fake_driver import FakeCore, install

GEMM = bx.Size(16, 16, 16) + bx.Precision(bx.float32) + bx.Function.MM + bx.SM(80) + bx.Block()


@pytest.fixture()
def gpu(monkeypatch):
    return install(monkeypatch)


# ---------------------------------------------------------------------------------------------
# enter / leave
# ---------------------------------------------------------------------------------------------


def test_enter_on_the_current_device_changes_nothing(gpu):
    assert devices.enter(0) is None
    assert gpu.stack() == [gpu.primary[0]] and not any(c.startswith("push") for c in gpu.calls)


def test_enter_another_device_pushes_its_primary_context_and_leave_restores(gpu):
    token = devices.enter(1)
    assert gpu.current() == 1 and devices.current_device_id() == 1
    assert devices.enter(1) is None  # nested: already current
    devices.leave(token)
    assert gpu.stack() == [gpu.primary[0]] and gpu.current() == 0


def test_enter_without_a_current_context_leaves_none_behind(gpu):
    gpu.make_current(None)
    assert devices.current_device_id() is None
    token = devices.enter(1)
    assert gpu.current() == 1
    devices.leave(token)
    assert gpu.stack() == []


def test_primary_contexts_are_retained_once(gpu):
    for _ in range(5):
        devices.leave(devices.enter(1))
    assert gpu.retained == {1: 1}


def test_a_device_that_does_not_exist(gpu):
    with pytest.raises(DeviceError, match=r"device 5 does not exist: the driver sees 2 GPU\(s\)"):
        devices.enter(5)
    assert gpu.current() == 0


def test_on_device_restores_after_an_exception(gpu):
    with pytest.raises(KeyError):
        with devices.on_device(1):
            assert gpu.current() == 1
            raise KeyError("inside")
    assert gpu.current() == 0 and len(gpu.stack()) == 1


def test_contexts_are_per_thread(gpu):
    seen = []

    def other():
        gpu.make_current(1)
        with devices.on_device(0):
            seen.append(gpu.current())
        seen.append(gpu.current())

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == [0, 1] and gpu.current() == 0


# ---------------------------------------------------------------------------------------------
# which device a stream belongs to
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("handle", [0, 1, 2])
def test_default_streams_belong_to_every_device(gpu, handle):
    assert devices.stream_device_id(handle, handle) is None


def test_library_streams_answer_from_their_attributes(gpu):
    assert devices.stream_device_id(types.SimpleNamespace(cuda_stream=0x10, device_index=1), 0x10) == 1  # torch
    assert devices.stream_device_id(types.SimpleNamespace(ptr=0x20, device_id=0), 0x20) == 0  # CuPy
    assert "cuStreamGetDevice" not in gpu.calls


def test_other_streams_ask_the_driver(gpu):
    gpu.stream(0x30, 1)
    assert devices.stream_device_id(0x30, 0x30) == 1
    assert devices.stream_device_id(types.SimpleNamespace(ptr=0x30, device_id=-1), 0x30) == 1  # CuPy: unknown
    with pytest.raises(ExecutionError, match=r"stream: the CUDA driver does not know stream handle 0x40"):
        devices.stream_device_id(0x40, 0x40)


# ---------------------------------------------------------------------------------------------
# kernels load once per device, with that device current
# ---------------------------------------------------------------------------------------------


def test_compiled_kernel_loads_once_per_device_with_the_device_current(gpu, monkeypatch):
    loads, opt_ins = [], []
    monkeypatch.setattr(compiled, "_load", lambda cubin, name, device: loads.append((device, gpu.current()))
                        or ("code", f"kernel on {device}"))
    monkeypatch.setattr(compiled, "_opt_in_dynamic_shared_memory",
                        lambda kernel, device, nbytes, owner: opt_ins.append((device, nbytes, gpu.current())))
    kernel = GEMM.compile()
    assert kernel.kernel(device_id=1) == "kernel on 1"
    assert kernel.kernel(device_id=1, dynamic_shared_memory=64 * 1024) == "kernel on 1"
    assert kernel.kernel(device_id=1, dynamic_shared_memory=50 * 1024) == "kernel on 1"  # less than granted
    assert kernel.kernel() == "kernel on 0"  # None: the current device
    assert loads == [(1, 1), (0, 0)] and opt_ins == [(1, 64 * 1024, 1)]
    assert kernel.loaded_devices() == (0, 1) and gpu.current() == 0
    with pytest.raises(ValueError, match="device_id=-1: expected a device ordinal"):
        kernel.kernel(device_id=-1)


# ---------------------------------------------------------------------------------------------
# precompile for several devices
# ---------------------------------------------------------------------------------------------


def test_precompile_loads_every_kernel_on_every_device(gpu):
    other = bx.Size(8, 8, 8) + bx.Precision(bx.float64) + bx.Function.MM + bx.SM(80) + bx.Block()
    kernels = bx.precompile([GEMM, other], devices=[0, 1], workers=2)
    assert [k.kernel_name for k in kernels] == ["blasdx_batched_gemm"] * 2
    for desc in (GEMM, other):
        assert sorted(ex.plan_for(desc)._devices) == [0, 1]
    assert gpu.current() == 0 and gpu.launches == []
    bx.precompile([GEMM], devices="all")


def test_precompile_reports_a_device_that_cannot_run_the_kernel(gpu, monkeypatch):
    monkeypatch.setattr(FakeCore, "compute_capability", (7, 5))
    with pytest.raises(DeviceError, match=r"(?s)precompile: 1 of 1 descriptors failed:.*newer than the GPU: device 0"):
        bx.precompile([GEMM], devices=[0])


@pytest.mark.parametrize(
    "value, error, match",
    [
        ("some", ValueError, r"devices='some'; expected 'all', device ordinals or None"),
        ([True], ValueError, r"devices=\[True\]; expected ordinals"),
        ([0, -1], ValueError, r"devices=\[0, -1\]; expected ordinals"),
        (3, ValueError, r"devices=3; expected 'all'"),
        ([0, 2, 7], DeviceError, r"precompile: devices \[2, 7\] do not exist; the driver sees 2 GPU\(s\)"),
    ],
)
def test_precompile_checks_devices_before_compiling(gpu, value, error, match):
    from blasdx.compile import cache

    cache.stats.reset()
    with pytest.raises(error, match=match):
        bx.precompile([GEMM], devices=value)
    assert cache.stats.as_dict()["compiles"] == 0


# ---------------------------------------------------------------------------------------------
# bx.mma into a given out, on another device than the current one
# ---------------------------------------------------------------------------------------------

BASE = {0: 0x7E00_0000_0000, 1: 0x7D00_0000_0000}


def matrix(rows, cols, dtype, device, offset):
    return ArrayView(BASE[device] + offset, (rows, cols), (cols, 1), dtype, device, False, None)


def test_mma_runs_on_the_arrays_device(gpu, monkeypatch):
    monkeypatch.setattr(array_gemm, "_device_info", lambda device_id: array_gemm._DeviceInfo(80, 108))
    array_gemm._CALLS.clear()
    x, y = matrix(16, 16, dt.float32, 1, 0), matrix(16, 16, dt.float32, 1, 1 << 20)
    acc = matrix(16, 16, dt.float32, 1, 2 << 20)
    assert bx.mma(x, y, acc, out=acc) is acc  # in place: the one-block kernel, no copy
    [launch] = gpu.launches
    assert launch.device == 1 and launch.slots[:3] == (x.ptr, y.ptr, acc.ptr) and gpu.current() == 0
    array_gemm._CALLS.clear()


def test_mma_refuses_mixed_devices_and_foreign_streams(gpu, monkeypatch):
    monkeypatch.setattr(array_gemm, "_device_info", lambda device_id: array_gemm._DeviceInfo(80, 108))
    array_gemm._CALLS.clear()
    x, y = matrix(16, 16, dt.float32, 1, 0), matrix(16, 16, dt.float32, 0, 1 << 20)
    acc = matrix(16, 16, dt.float32, 1, 2 << 20)
    with pytest.raises(ExecutionError, match=r"arrays on different devices \(x on device 1, y on device 0, acc on"):
        bx.mma(x, y, acc, out=acc)
    y = matrix(16, 16, dt.float32, 1, 1 << 20)
    gpu.stream(0x50, 0)
    with pytest.raises(ExecutionError, match=r"stream: handle 0x50 belongs to device 0 but the arrays are on device 1"):
        bx.mma(x, y, acc, out=acc, stream=0x50)
    assert gpu.launches == [] and gpu.current() == 0
    array_gemm._CALLS.clear()

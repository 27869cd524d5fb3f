"""Without a GPU: every entry point raises bx.DeviceError, and only after the arguments are checked.

A driver whose ``cuInit`` fails as cuda.pathfinder does when libcuda is missing stands in
for a machine without a GPU (on a GPU machine too).
"""

from __future__ import annotations

import numpy as np
import pytest

import blasdx as bx
from blasdx.launch import devices

MISSING = '"cuda" is an NVIDIA driver library and can only be found via system search'


class NoDriver:
    """cuda.bindings.driver on a machine without the NVIDIA driver: cuInit cannot load libcuda."""

    def cuInit(self, flags: int):  # noqa: N802 - the driver's name
        raise RuntimeError(MISSING)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(devices, "_DRIVER", [NoDriver()])
    monkeypatch.setattr(devices, "_DRIVER_READY", [])
    monkeypatch.setattr(devices, "_PRIMARY", {})


class Fake:
    """A device array by __cuda_array_interface__ (C-contiguous) at a made-up address."""

    def __init__(self, shape, dtype, ptr=0x7F10_0000_0000):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": np.dtype(dtype).str, "data": (ptr, False),
                                         "strides": None, "version": 3, "stream": None}


def gemm():
    return bx.Size(64, 32, 16) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM + bx.SM(80) \
        + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + bx.Block()


@pytest.mark.parametrize("device", [None, 0, 3])
def test_to_device_is_a_device_error(no_gpu, device):
    with pytest.raises(bx.DeviceError, match="blasdx needs a CUDA GPU and driver: .*NVIDIA driver library"):
        bx.to_device(np.zeros((4, 4), np.float32), device)


def test_to_device_checks_its_arguments_first(no_gpu):
    with pytest.raises(bx.ExecutionError, match="device: 'cuda:0' is not a GPU"):
        bx.to_device(np.zeros((4, 4), np.float32), "cuda:0")
    with pytest.raises(bx.ExecutionError, match="dtype <U1 cannot be copied"):
        bx.to_device(np.array(["a"]))


def test_from_device_is_a_device_error(no_gpu):
    with pytest.raises(bx.DeviceError, match="needs a CUDA GPU"):
        bx.from_device(Fake((4, 4), np.float32))


def test_execute_checks_arguments_before_the_device(no_gpu):
    a, b, c = Fake((64, 16), np.float16), Fake((16, 32), np.float16, 0x7F20_0000_0000), \
        Fake((64, 32), np.float32, 0x7F30_0000_0000)
    with pytest.raises(bx.ExecutionError, match=r"a: shape \(64, 15\) does not match A"):
        gemm().execute(Fake((64, 15), np.float16), b, c)
    with pytest.raises(bx.ExecutionError, match="c: dtype float16 does not match C's type float32"):
        gemm().execute(a, b, Fake((64, 32), np.float16, 0x7F30_0000_0000))
    with pytest.raises(bx.DeviceError, match="blasdx needs a CUDA GPU and driver"):
        gemm().execute(a, b, c)


def test_array_calls_check_arguments_before_the_device(no_gpu):
    x, y = Fake((64, 16), np.float16), Fake((16, 32), np.float16, 0x7F20_0000_0000)
    with pytest.raises(bx.ExecutionError, match=r"x: shape \(64, 15\) and y: shape \(16, 32\) do not multiply"):
        bx.matmul(Fake((64, 15), np.float16), y)
    with pytest.raises(bx.ExecutionError, match="x: float16 and y: float32 differ"):
        bx.matmul(x, Fake((16, 32), np.float32, 0x7F20_0000_0000))
    with pytest.raises(bx.ExecutionError, match=r"acc: shape \(64, 31\) does not hold x @ y"):
        bx.mma(x, y, Fake((64, 31), np.float32, 0x7F30_0000_0000))
    with pytest.raises(bx.DeviceError, match="blasdx needs a CUDA GPU and driver"):
        bx.matmul(x, y)

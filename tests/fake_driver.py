"""A stand-in for ``cuda.bindings.driver`` so that device handling runs without a GPU.

It keeps what the real driver keeps and the tests need to look at: a number of devices,
one primary context each, a context stack per thread, streams that belong to a device,
device pointers that belong to a device, and every launch with the device whose context
ran it (the stream's, or the current one for the default streams) and its parameters
read back from the packed buffer. Calls return tuples whose first item is the result
code, like cuda.bindings.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, NamedTuple


class CUresult(int):
    """A result code with the driver's name (``err.name``)."""

    names = {0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 3: "CUDA_ERROR_NOT_INITIALIZED",
             101: "CUDA_ERROR_INVALID_DEVICE", 201: "CUDA_ERROR_INVALID_CONTEXT", 400: "CUDA_ERROR_INVALID_HANDLE"}

    @property
    def name(self) -> str:
        return self.names.get(int(self), f"CUresult({int(self)})")


SUCCESS, INVALID_VALUE, NOT_INITIALIZED = CUresult(0), CUresult(1), CUresult(3)
INVALID_DEVICE, INVALID_CONTEXT, INVALID_HANDLE = CUresult(101), CUresult(201), CUresult(400)


class _Handle(int):
    """CUdevice / CUstream / CUfunction / CUcontext: an int the code may wrap and unwrap."""

    def __new__(cls, value: Any = 0) -> _Handle:
        return super().__new__(cls, int(value))

    def getPtr(self) -> int:  # noqa: N802 - cuda.bindings' name
        return int(self)


class CUdevice(_Handle):
    pass


class CUstream(_Handle):
    pass


class CUfunction(_Handle):
    pass


class CUcontext(_Handle):
    pass


class CUpointer_attribute:  # noqa: N801 - cuda.bindings' name
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9


class Launch(NamedTuple):
    """One recorded cuLaunchKernel: the device that ran it and what it was given."""

    function: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_memory: int
    stream: int
    device: int
    slots: tuple[int, ...]  # each 8-byte parameter slot as an unsigned int

    def float32(self, index: int) -> float:
        return ctypes.c_float.from_buffer_copy(self.slots[index].to_bytes(8, "little")[:4]).value

    def float64(self, index: int) -> float:
        return ctypes.c_double.from_buffer_copy(self.slots[index].to_bytes(8, "little")).value

    def int64(self, index: int) -> int:
        return ctypes.c_int64(self.slots[index]).value


class FakeDriver:
    """``devices`` GPUs; ``streams`` maps stream handles to devices; ``memory`` maps pointer ranges to devices."""

    CUdevice = CUdevice
    CUstream = CUstream
    CUfunction = CUfunction
    CUcontext = CUcontext
    CUpointer_attribute = CUpointer_attribute

    def __init__(self, devices: int = 2) -> None:
        self.devices = devices
        self.initialised = False
        self.primary = {d: CUcontext(0xC0_0000 + d) for d in range(devices)}
        self.retained: dict[int, int] = {}
        self.streams: dict[int, int] = {}
        self.memory: list[tuple[int, int, int]] = []  # (low, high, device)
        self.params: dict[int, int] = {}  # function -> parameter count (what the cubin would say)
        self.launches: list[Launch] = []
        self.calls: list[str] = []
        self._local = threading.local()

    # -- set-up by the tests ------------------------------------------------------------------

    def allocate(self, low: int, size: int, device: int) -> int:
        """Declare ``[low, low + size)`` device memory of ``device``; returns ``low``."""
        self.memory.append((low, low + size, device))
        return low

    def stream(self, handle: int, device: int) -> int:
        """Declare a stream ``handle`` created on ``device``."""
        self.streams[handle] = device
        return handle

    def stack(self) -> list[CUcontext]:
        """The calling thread's context stack (last = current)."""
        try:
            return self._local.stack
        except AttributeError:
            self._local.stack = []
            return self._local.stack

    def make_current(self, device: int | None) -> None:
        """What cudaSetDevice does: the top of the stack becomes the device's primary context (None: empty)."""
        stack = self.stack()
        if device is None:
            stack.clear()
        elif stack:
            stack[-1] = self.primary[device]
        else:
            stack.append(self.primary[device])

    def current(self) -> int | None:
        stack = self.stack()
        if not stack:
            return None
        return next(d for d, c in self.primary.items() if c == stack[-1])

    # -- the driver API -----------------------------------------------------------------------

    def cuInit(self, flags: int) -> tuple[CUresult]:  # noqa: N802
        self.initialised = True
        return (SUCCESS,)

    def cuDeviceGetCount(self) -> tuple[CUresult, int]:  # noqa: N802
        return (SUCCESS, self.devices) if self.initialised else (NOT_INITIALIZED, 0)

    def cuCtxGetDevice(self) -> tuple[CUresult, CUdevice]:  # noqa: N802
        self.calls.append("cuCtxGetDevice")
        device = self.current()
        return (INVALID_CONTEXT, CUdevice(0)) if device is None else (SUCCESS, CUdevice(device))

    def cuDevicePrimaryCtxRetain(self, device: Any) -> tuple[CUresult, CUcontext]:  # noqa: N802
        device = int(device)
        if not 0 <= device < self.devices:
            return (INVALID_DEVICE, CUcontext(0))
        self.retained[device] = self.retained.get(device, 0) + 1
        return (SUCCESS, self.primary[device])

    def cuCtxPushCurrent(self, context: Any) -> tuple[CUresult]:  # noqa: N802
        self.calls.append(f"push {self._device_of_context(context)}")
        self.stack().append(CUcontext(context))
        return (SUCCESS,)

    def cuCtxPopCurrent(self) -> tuple[CUresult, CUcontext]:  # noqa: N802
        stack = self.stack()
        if not stack:
            return (INVALID_CONTEXT, CUcontext(0))
        self.calls.append(f"pop {self._device_of_context(stack[-1])}")
        return (SUCCESS, stack.pop())

    def cuPointerGetAttribute(self, attribute: int, pointer: int) -> tuple[CUresult, int]:  # noqa: N802
        for low, high, device in self.memory:
            if low <= int(pointer) < high:
                return (SUCCESS, device)
        return (INVALID_VALUE, 0)

    def cuStreamGetDevice(self, stream: Any) -> tuple[CUresult, CUdevice]:  # noqa: N802
        self.calls.append("cuStreamGetDevice")
        device = self.streams.get(int(stream))
        return (INVALID_HANDLE, CUdevice(0)) if device is None else (SUCCESS, CUdevice(device))

    def cuLaunchKernel(  # noqa: N802
        self, f: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, smem: int, stream: Any, params: int,
        extra: Any,
    ) -> tuple[CUresult]:
        handle = int(stream)
        if handle in (0, 1, 2):  # the default streams of the current context
            device = self.current()
            if device is None:
                return (INVALID_CONTEXT,)
        else:
            device = self.streams.get(handle)
            if device is None:
                return (INVALID_HANDLE,)
        count = self.params.get(int(f), 0)
        pointers = (ctypes.c_void_p * max(count, 1)).from_address(params)
        slots = tuple(ctypes.c_uint64.from_address(pointers[i]).value for i in range(count))
        self.launches.append(Launch(int(f), (gx, gy, gz), (bx, by, bz), smem, handle, device, slots))
        return (SUCCESS,)

    def _device_of_context(self, context: Any) -> int:
        return next(d for d, c in self.primary.items() if c == int(context))


class FakeKernel:
    """What ``CompiledKernel.kernel`` returns, as far as a launch needs: a handle."""

    def __init__(self, driver: FakeDriver, handle: int, parameters: int) -> None:
        self.handle = CUfunction(handle)
        driver.params[handle] = parameters


class FakeCore:
    """The pieces of cuda.core that a device plan asks for: a device's compute capability and LaunchConfig."""

    compute_capability = (8, 0)

    class Device:
        name = "fake GPU"

        def __init__(self, device_id=None):
            self.device_id = device_id
            self.compute_capability = FakeCore.compute_capability

    @staticmethod
    def LaunchConfig(grid, block, shmem_size):  # noqa: N802 - cuda.core's name
        return ("config", grid[0])


class FakeStream:
    """A cuda.core Stream stand-in that records the producer streams it is made to wait for."""

    def __init__(self, handle: int, driver: FakeDriver) -> None:
        self.handle = handle
        self._driver = driver

    def wait(self, other: FakeStream) -> None:
        self._driver.waits.append((other.handle, self._driver.current()))


def install(monkeypatch: Any, devices: int = 2, current: int | None = 0) -> FakeDriver:
    """Make a FakeDriver blasdx's driver for one test; execute plans load fake kernels, streams record waits.

    Undone by ``monkeypatch`` at the end of the test (blasdx's per-process device caches too).
    """
    from blasdx.launch import devices as bx_devices
    from blasdx.run import execute
    from blasdx.launch import cuda_driver
    from blasdx.arrays import streams

    fake = FakeDriver(devices)
    fake.waits = []
    monkeypatch.setattr(bx_devices, "_DRIVER", [fake])
    monkeypatch.setattr(bx_devices, "_DRIVER_READY", [])
    monkeypatch.setattr(bx_devices, "_PRIMARY", {})
    monkeypatch.setattr(cuda_driver, "_STREAMS", {})
    monkeypatch.setattr(execute, "_cuda_core", lambda: FakeCore)
    handles = iter(range(0xF000, 0xFF00))
    # the parameter count a cubin of batched_gemm.cu declares: a, b, c, 2 or 4 scalars, 3 batch strides, the count
    monkeypatch.setattr(
        execute, "_load_kernel", lambda desc, smem, device: FakeKernel(fake, next(handles), 9 + 2 * desc.is_complex)
    )
    monkeypatch.setattr(execute, "as_core_stream", lambda stream, handle: FakeStream(handle, fake))
    monkeypatch.setattr(streams, "core_stream", lambda handle: FakeStream(handle, fake))
    monkeypatch.setattr(execute, "_PLANS", {})
    monkeypatch.setattr(execute, "_PLANS_BY_ID", {})
    fake.cuInit(0)
    fake.make_current(current)
    return fake

"""Starting kernels: a pre-packed launch for blasdx's own kernels, cuda.core's launch for the user's.

``cuda.core.launch`` converts every argument on every call (a type dispatch per Python
object) and rebuilds the launch configuration. blasdx's own kernels have parameter lists
fixed by their plan, so a :class:`PackedLaunch` lays them out once — a buffer with one
8-byte slot per parameter and the array of pointers to the slots that the driver reads —
and a launch writes the values with one ``struct.pack_into`` and makes one
``cuLaunchKernel`` call. Each thread packs into buffers of its own, so threads launching
the same kernel (one per GPU, say) never share one; the driver copies the parameters
before ``cuLaunchKernel`` returns, so a buffer is free again as soon as it does.

Slot kinds (one letter per parameter): ``P`` a device pointer, ``i`` int32, ``q`` int64,
``f`` float32, ``d`` float64. The launch runs in the current context: callers make the
operands' device current first (:func:`blasdx.launch.devices.enter`).
"""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import Any

from ..errors import DeviceError
from . import devices as _devices

__all__ = ["PackedLaunch", "SLOT_FORMATS", "core_launch", "stream_object"]

#: struct format of each slot kind, padded to 8 bytes.
SLOT_FORMATS = {"P": "Q", "q": "q", "d": "d", "i": "i4x", "f": "f4x"}
_SLOT_BYTES = 8

_STREAMS: dict[int, Any] = {}


def stream_object(handle: int) -> Any:
    """The driver ``CUstream`` of ``handle`` (memoised: building one per launch costs more than the look-up)."""
    found = _STREAMS.get(handle)
    if found is None:
        if len(_STREAMS) > 256:
            _STREAMS.clear()
        found = _STREAMS[handle] = _devices.driver().CUstream(handle)
    return found


class _Buffers:
    """One thread's parameter block of a PackedLaunch: the slots and the pointer array the driver reads."""

    __slots__ = ("data", "pointers", "address")

    def __init__(self, count: int) -> None:
        self.data = (ctypes.c_uint64 * max(count, 1))()
        base = ctypes.addressof(self.data)
        self.pointers = (ctypes.c_void_p * max(count, 1))(*(base + _SLOT_BYTES * i for i in range(count)))
        self.address = ctypes.addressof(self.pointers)


class PackedLaunch:
    """One loaded kernel with a fixed parameter list: ``launch(grid_x, grid_y, stream_handle, *values)``."""

    __slots__ = ("name", "slots", "block", "shared_memory", "_function", "_struct", "_local", "_driver")

    def __init__(
        self, kernel: Any, slots: str, block: tuple[int, int, int], shared_memory: int, name: str = ""
    ) -> None:
        unknown = sorted(set(slots) - set(SLOT_FORMATS))
        if unknown:
            raise ValueError(
                f"slots={slots!r}: unknown slot kinds {unknown}; expected letters of {''.join(SLOT_FORMATS)}"
            )
        drv = _devices.driver()
        self.name = name
        self.slots = slots
        self.block = tuple(int(v) for v in block)
        self.shared_memory = int(shared_memory)
        self._function = drv.CUfunction(int(kernel.handle))
        self._struct = struct.Struct("<" + "".join(SLOT_FORMATS[s] for s in slots))
        self._local = threading.local()
        self._driver = drv

    def buffers(self) -> _Buffers:
        """The calling thread's parameter block (made on its first launch)."""
        try:
            return self._local.buffers
        except AttributeError:
            found = self._local.buffers = _Buffers(len(self.slots))
            return found

    def launch(self, grid_x: int, grid_y: int, stream: int, *values: Any) -> None:
        """Pack ``values`` (one per slot) and launch on ``grid_x`` x ``grid_y`` blocks on stream handle ``stream``."""
        try:
            buffers = self._local.buffers
        except AttributeError:
            buffers = self.buffers()
        self._struct.pack_into(buffers.data, 0, *values)
        bx, by, bz = self.block
        found = _STREAMS.get(stream)
        (err,) = self._driver.cuLaunchKernel(
            self._function, grid_x, grid_y, 1, bx, by, bz, self.shared_memory,
            found if found is not None else stream_object(stream), buffers.address, 0,
        )
        if err:
            raise DeviceError(
                f"launching {self.name or 'the kernel'} on grid ({grid_x}, {grid_y}, 1), block {self.block}, "
                f"{self.shared_memory} B of shared memory failed: {getattr(err, 'name', err)}"
            )


def core_launch(stream: Any, config: Any, kernel: Any, *args: Any) -> None:
    """``cuda.core.launch(stream, config, kernel, *args)``: for kernels whose parameters the user typed (fusion)."""
    launch = _CORE_LAUNCH[0] if _CORE_LAUNCH else _load_core_launch()
    launch(stream, config, kernel, *args)


_CORE_LAUNCH: list[Any] = []


def _load_core_launch() -> Any:
    """cuda.core.launch, imported on first use."""
    from . import cuda_modules

    _CORE_LAUNCH[:] = [cuda_modules.core().launch]
    return _CORE_LAUNCH[0]

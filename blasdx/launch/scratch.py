"""Device scratch for one call's kernels (split-K partial sums, repacked operands), safe in CUDA graphs.

Outside a capture, scratch comes from a pool kept per (device, stream, use) and reused
call after call: work on one stream runs in order, so the buffer the previous call's
kernels used is free for the next call's. A buffer that is too small is freed
stream-ordered and replaced by a larger one.

While the call's stream is capturing a CUDA graph, the pool is left alone: its buffers
outlive the graph (a replay would write memory that a later eager call on that stream,
or a regrowth that frees it, also owns), and allocating into the pool during a capture
would keep an address the graph owns after the graph is gone. Instead each buffer is
allocated on the capturing stream and freed on it after the call's last kernel, so the
graph holds an allocation node and a free node of its own and nothing of the capture
stays in blasdx. Use::

    with call_scratch(device_id, stream) as scratch:
        workspace = scratch.get("splits", nbytes)
        ... launch the kernels that use it on ``stream`` ...

The caller has the device's context current (allocations come from its stream-ordered
pool, or the graph's).
"""

from __future__ import annotations

import threading
from typing import Any

from ..base.errors import DeviceError
from . import cuda_driver as _driver

__all__ = ["ScratchPool", "CallScratch", "call_scratch", "POOL"]


class ScratchPool:
    """Buffers kept per (device, stream, use), for calls on streams that are not capturing."""

    LIMIT = 32  # buffers kept per device; the oldest is freed beyond this

    def __init__(self) -> None:
        self._buffers: dict[tuple[int, int, str], tuple[int, int]] = {}  # -> (address, bytes)
        self._lock = threading.Lock()
        #: Counts the buffers given back: an address got from the pool stays its (device, stream, use) buffer
        #: while this is unchanged (callers may keep it instead of asking again).
        self.generation = 0

    def get(self, device_id: int, stream: int, use: str, nbytes: int, zero: bool = False) -> int:
        """The address of at least ``nbytes`` of device memory for ``use`` on ``stream`` (not capturing);
        ``zero``: zeroed when allocated (the kernels that use such a buffer leave it zero when they are done)."""
        key = (device_id, stream, use)
        found = self._buffers.get(key)
        if found is not None and found[1] >= nbytes:
            return found[0]
        with self._lock:
            found = self._buffers.get(key)
            if found is not None:
                if found[1] >= nbytes:
                    return found[0]
                self.generation += 1
                _driver.free_async(self._buffers.pop(key)[0], stream)
            mine = [k for k in self._buffers if k[0] == device_id]  # this device's context is the current one
            for old in mine[: max(0, len(mine) - self.LIMIT + 1)]:
                self.generation += 1
                address, _ = self._buffers.pop(old)
                try:
                    _driver.free_async(address, old[1])
                except DeviceError:  # that stream is gone: the pool keeps the bytes until the device resets
                    pass
            size = max(256, 1 << (nbytes - 1).bit_length())  # powers of two: few regrowths
            address = _driver.allocate_async(size, stream)
            if zero:
                _driver.zero_async(address, size // 4, stream)
            self._buffers[key] = (address, size)
            return address

    def held(self, device_id: int | None = None) -> dict[tuple[int, int, str], tuple[int, int]]:
        """The buffers kept now (all devices, or one): (device, stream, use) -> (address, bytes)."""
        return {k: v for k, v in self._buffers.items() if device_id is None or k[0] == device_id}


#: The process's pool (one per process: a buffer belongs to a device and stream, not to a plan).
POOL = ScratchPool()


class CallScratch:
    """The scratch of one call on one stream: from :data:`POOL`, or, while capturing, the call's own.

    A context manager: on exit the buffers a capturing call allocated are freed on the
    stream, ordered after the kernels the call enqueued (the graph's free nodes).
    """

    __slots__ = ("device_id", "stream", "capturing", "_owned")

    def __init__(self, device_id: int, stream: int, capturing: bool) -> None:
        self.device_id = device_id
        self.stream = stream
        self.capturing = capturing
        self._owned: list[int] = []

    def get(self, use: str, nbytes: int, zero: bool = False) -> int:
        """The address of at least ``nbytes`` of device memory for ``use`` during this call (``zero``: as
        :meth:`ScratchPool.get`'s; a capturing call's own buffer is zeroed by the graph at every replay)."""
        if not self.capturing:
            return POOL.get(self.device_id, self.stream, use, nbytes, zero)
        size = max(256, (nbytes + 3) // 4 * 4)
        address = _driver.allocate_async(size, self.stream)
        if zero:
            _driver.zero_async(address, size // 4, self.stream)
        self._owned.append(address)
        return address

    def __enter__(self) -> CallScratch:
        return self

    def __exit__(self, *exc: Any) -> None:
        owned, self._owned = self._owned, []
        for address in owned:
            _driver.free_async(address, self.stream)


def call_scratch(device_id: int, stream: int) -> CallScratch:
    """The scratch of a call on ``stream`` of ``device_id`` (current); asks the driver whether it is capturing."""
    return CallScratch(device_id, stream, _driver.is_capturing(stream))

"""Device -> host copies of an array view (the work of ``from_device`` and ``DeviceArray.get``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..launch import devices as _devices
from .streams import as_core_stream, wait_for_producers
from .view import ArrayView, host_dtype

__all__ = ["to_host"]


def to_host(view: ArrayView, stream: Any, handle: int) -> np.ndarray:
    """Copy the elements of ``view`` into a new numpy array on stream ``handle`` (``stream``: what the user gave).

    The copy runs after the producer's pending work, with the array's device current, and
    is finished when this returns. A padded or strided array comes back compact, in the
    same memory order.
    """
    npd = host_dtype(view.dtype, "array")
    if view.size == 0:
        return np.empty(view.shape, npd)
    device_id = view.device_id if view.device_id is not None else 0
    if stream is not None:
        _devices.check_stream_device(stream, handle, device_id, "the array is")
    with _devices.on_device(device_id):
        return _copy(view, npd, stream, handle)


def _copy(view: ArrayView, npd: np.dtype, stream: Any, handle: int) -> np.ndarray:
    """The copy itself, in the current context."""
    driver = _devices.driver()
    consumer = as_core_stream(stream, handle)
    wait_for_producers(consumer, handle, (view.stream,))
    low, high = view.span
    nbytes = high - low
    host = np.empty(nbytes, np.uint8)
    _devices.check(driver.cuMemcpyDtoHAsync(host.ctypes.data, low, nbytes, consumer.handle), "cuMemcpyDtoHAsync")
    consumer.sync()
    itemsize = npd.itemsize
    out = np.ndarray(
        view.shape, npd, buffer=host, offset=view.ptr - low, strides=tuple(s * itemsize for s in view.strides)
    )
    if nbytes == view.size * itemsize and out.flags.c_contiguous | out.flags.f_contiguous:
        return out
    return out.copy(order="K")

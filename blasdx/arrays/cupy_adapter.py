"""The CuPy adapter: a ``cupy.ndarray`` read through its attributes, without a DLPack capsule.

blasdx never imports CuPy: the adapter is chosen when cupy is already loaded and the
object is one of its arrays. The producer stream is CuPy's current stream on the array's
device (CuPy keeps one current stream per device and thread).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ..base.dtypes import DType
from .streams import default_stream_handle
from .view import ArrayView, byte_strides_to_elements, new_view, numpy_dtype

__all__ = ["cupy_current_stream", "from_cupy"]


def from_cupy(x: Any, argument: str, stream: int | None, known: dict[int, int] | None = None) -> ArrayView:
    """cupy.ndarray through its attributes: the producer stream is CuPy's current one on its device.

    ``known`` is shared by the arrays of one call; CuPy's streams go under ``~device``
    (torch's under ``device``), so each library's question is asked once per device.
    """
    key = (x.dtype, x.strides)
    found = _CUPY_LAYOUTS.get(key)
    if found is None:
        dtype = numpy_dtype(key[0])
        found = (dtype, byte_strides_to_elements(key[1], dtype.size, argument))
        if len(_CUPY_LAYOUTS) > 256:
            _CUPY_LAYOUTS.clear()
        _CUPY_LAYOUTS[key] = found
    dtype, strides = found
    data = x.data
    device = data.device_id
    producer = None if known is None else known.get(~device)
    if producer is None:
        current = _CUPY_STREAM[0] if _CUPY_STREAM else _cupy_stream_function()
        producer = current(device).ptr or default_stream_handle()
        if known is not None:
            known[~device] = producer
    return new_view(ArrayView, (data.ptr, x.shape, strides, dtype, device, False, x, producer))


_CUPY_STREAM: list[Callable[[int], Any]] = []
_CUPY_LAYOUTS: dict[tuple[Any, tuple[int, ...]], tuple[DType, tuple[int, ...]]] = {}


def _cupy_stream_function() -> Callable[[int], Any]:
    """cupy.cuda.get_current_stream (it takes the device), looked up once."""
    _CUPY_STREAM.append(sys.modules["cupy"].cuda.get_current_stream)
    return _CUPY_STREAM[0]


def cupy_current_stream(device: int, known: dict[int, int] | None = None) -> int:
    """Handle of CuPy's current stream on ``device`` (null stream 0 -> the default stream); noted in ``known``."""
    current = _CUPY_STREAM[0] if _CUPY_STREAM else _cupy_stream_function()
    handle = current(device).ptr or default_stream_handle()
    if known is not None:
        known[~device] = handle
    return handle

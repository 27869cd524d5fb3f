"""The cuda.core adapter: ``StridedMemoryView`` objects are arrays; a bare ``Buffer`` is refused.

A StridedMemoryView already ordered the producer's work when it was made, so it brings
no producer stream. A ``Buffer`` is untyped bytes with no shape: it must be wrapped with
:meth:`blasdx.arrays.device_array.DeviceArray.from_buffer` first.
"""

from __future__ import annotations

from typing import Any

from ..base.errors import ExecutionError
from .view import HOST_HINT, ArrayView, array_dtype, c_strides

__all__ = ["from_strided_memory_view", "reject_buffer"]


def from_strided_memory_view(view: Any, argument: str, stream: int | None, known: Any = None) -> ArrayView:
    """A cuda.core StridedMemoryView (its constructor already ordered the streams)."""
    if not view.is_device_accessible:
        raise ExecutionError(f"{argument}: StridedMemoryView is in host memory; {HOST_HINT}")
    dtype = array_dtype(view.dtype)
    shape = tuple(view.shape)
    strides = tuple(view.strides) if view.strides is not None else c_strides(shape)
    ptr = int(view.ptr)
    return ArrayView(ptr, shape, strides, dtype, int(view.device_id), bool(view.readonly), view, None)


def reject_buffer(obj: Any, argument: str, stream: int | None, known: Any = None) -> ArrayView:
    """A cuda.core Buffer is not an array: say how to wrap it."""
    raise ExecutionError(
        f"{argument}: a cuda.core Buffer is untyped bytes ({getattr(obj, 'size', '?')} B) with no shape; wrap it "
        "as a matrix with blasdx.arrays.DeviceArray.from_buffer(buffer, shape, dtype, strides) (or "
        "cuda.core.utils.StridedMemoryView.from_buffer)"
    )

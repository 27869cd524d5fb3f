"""The array-view core: any device array reduced to a small frozen :class:`ArrayView`.

An ArrayView holds what a launch needs (pointer, shape, strides in elements, blasdx
:class:`~blasdx.base.dtypes.DType`, device, read-only flag, the owner that keeps the memory
alive and the producer's stream). The adapters that read each library's arrays into one
live beside this module (``array_torch``, ``array_cupy``, ``array_cuda_core``, ``dlpack``,
``cai``, ``device_array``); :func:`blasdx.arrays.as_array` picks the adapter of a type.
Here: the view, byte spans and strides, and the element-type names every adapter maps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ..base import dtypes as _dt
from ..base.dtypes import DType
from ..base.errors import HOST_HINT, ExecutionError

__all__ = [
    "ArrayView",
    "HOST_HINT",
    "array_dtype",
    "byte_span",
    "byte_strides_to_elements",
    "c_strides",
    "describe",
    "foreign_dtype",
    "host_dtype",
    "new_view",
    "numpy_dtype",
]

#: What an error about an array in host memory suggests.


# ---------------------------------------------------------------------------------------------
# element types
# ---------------------------------------------------------------------------------------------

# array element types blasdx computes with, by the names numpy / ml_dtypes / torch / DLPack use
_ARRAY_TYPES: dict[str, DType] = {
    "float16": _dt.float16,
    "half": _dt.float16,
    "bfloat16": _dt.bfloat16,
    "float32": _dt.float32,
    "float": _dt.float32,
    "float64": _dt.float64,
    "double": _dt.float64,
    "float8_e4m3fn": _dt.float8_e4m3,
    "float8_e4m3": _dt.float8_e4m3,
    "float8_e5m2": _dt.float8_e5m2,
    "int8": _dt.int8,
    "uint8": _dt.uint8,
    "int32": _dt.int32,
    "complex32": _dt.complex_of(_dt.float16),
    "chalf": _dt.complex_of(_dt.float16),
    "complex64": _dt.complex_of(_dt.float32),
    "cfloat": _dt.complex_of(_dt.float32),
    "complex128": _dt.complex_of(_dt.float64),
    "cdouble": _dt.complex_of(_dt.float64),
}
_FOREIGN: dict[tuple[str, int], DType] = {}


def foreign_dtype(name: str, size: int) -> DType:
    """A DType for an element type blasdx has no kernel for (int64, bool, ...): named in errors only."""
    key = (name, size)
    found = _FOREIGN.get(key)
    if found is None:
        try:
            host = np.dtype(name).type if np.dtype(name).itemsize == size else None
        except (TypeError, ValueError):
            host = None
        found = _FOREIGN[key] = DType(name, "", size, host)
    return found


def array_dtype(value: Any, itemsize: int | None = None) -> DType:
    """The blasdx DType of an array's element type (numpy / ml_dtypes / torch dtype or its name).

    ``complex64`` maps to the complex DType with float32 parts, ``complex128`` to float64
    parts, ``torch.complex32`` / ``ml_dtypes.complex32`` to float16 parts; ``float8_e4m3fn``
    to ``float8_e4m3``. Types blasdx has no kernel for come back as a DType that equals none
    of blasdx's (so a dtype check fails with the type's own name).
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        name = value
    else:
        text = str(value)
        if text.startswith("torch."):
            name = text[len("torch."):]
            if itemsize is None:
                itemsize = getattr(value, "itemsize", None)
        else:
            npd = np.dtype(value)
            name, itemsize = npd.name, npd.itemsize
    found = _ARRAY_TYPES.get(name)
    if found is not None:
        return found
    if itemsize is None:
        try:
            itemsize = np.dtype(name).itemsize
        except TypeError:
            itemsize = 0
    return foreign_dtype(name, int(itemsize))


_NUMPY_TYPES: dict[Any, DType] = {}


def numpy_dtype(npd: np.dtype) -> DType:
    """array_dtype for a numpy dtype, memoised (the CuPy fast path)."""
    found = _NUMPY_TYPES.get(npd)
    if found is None:
        found = _NUMPY_TYPES[npd] = array_dtype(npd)
    return found


def host_dtype(dtype: DType, argument: str) -> np.dtype:
    """The numpy dtype that holds ``dtype`` on the host."""
    if dtype.numpy is None:
        raise ExecutionError(f"{argument}: element type {dtype.name} has no numpy equivalent to copy it into")
    return np.dtype(dtype.numpy)



def describe(obj: Any) -> str:
    """``numpy.ndarray of shape (2, 3)``-style description for messages."""
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    shape = getattr(obj, "shape", None)
    return f"{kind} of shape {tuple(shape)}" if isinstance(shape, tuple) else kind


# ---------------------------------------------------------------------------------------------
# the view
# ---------------------------------------------------------------------------------------------


class ArrayView(NamedTuple):
    """A device array reduced to what a launch needs; frozen, and keeps ``owner`` alive.

    ``strides`` are in elements (a complex element is one element); ``stream`` is the
    producer's stream handle the consumer must order after, or None. ``low``/``high`` is
    the byte range ``[low, high)`` the elements touch (for overlap checks).
    """

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: DType
    device_id: int | None
    readonly: bool
    owner: Any
    stream: int | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.size

    @property
    def span(self) -> tuple[int, int]:
        """(low, high): the byte range the elements touch; empty arrays touch nothing."""
        return byte_span(self.ptr, self.shape, self.strides, self.dtype.size)

    @property
    def low(self) -> int:
        return self.span[0]

    @property
    def high(self) -> int:
        return self.span[1]

    @property
    def nbytes(self) -> int:
        """Bytes of the span the elements touch (padding included)."""
        low, high = self.span
        return high - low

    @property
    def size(self) -> int:
        return math.prod(self.shape)


new_view = tuple.__new__  # ArrayView without NamedTuple's Python-level __new__ (hot path)


def byte_span(ptr: int, shape: Sequence[int], strides: Sequence[int], itemsize: int) -> tuple[int, int]:
    """Byte range [low, high) touched by a strided array (empty arrays touch nothing)."""
    low = high = ptr
    for n, s in zip(shape, strides):
        if n == 0:
            return ptr, ptr
        step = (n - 1) * s * itemsize
        if step >= 0:
            high += step
        else:
            low += step
    return low, high + itemsize


def c_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """C-contiguous strides in elements."""
    out = []
    acc = 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def byte_strides_to_elements(strides: Sequence[int], itemsize: int, argument: str) -> tuple[int, ...]:
    """Byte strides -> element strides; a stride that is not a whole number of elements is an error."""
    out = []
    for s in strides:
        q, r = divmod(int(s), itemsize)
        if r:
            raise ExecutionError(
                f"{argument}: byte strides {tuple(strides)} are not multiples of the element size ({itemsize} B); "
                "blasdx needs element-aligned strides"
            )
        out.append(q)
    return tuple(out)

"""blasdx's own device array: a typed, strided view of cuda.core memory that exports DLPack and CAI v3.

:func:`to_device` copies a host array into cuda.core memory and returns a
:class:`DeviceArray`, which exports ``__dlpack__`` / ``__dlpack_device__`` (typed: bf16,
fp8 and complex keep their type) and ``__cuda_array_interface__`` (bf16/fp8 have no CAI
type string: they appear as ``<V2`` / ``|V1`` there; use DLPack for them).
:func:`from_blasdx` is its adapter (the view is made once, with the array).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..base.errors import ExecutionError
from ..launch import devices as _devices
from ..launch.devices import as_device, check
from .dlpack import KDL_CUDA, dl_code_of, make_capsule
from .host_copy import to_host
from .streams import (
    LEGACY_STREAM,
    as_core_stream,
    canonical,
    core_stream,
    default_stream_handle,
    stream_handle,
)
from .view import ArrayView, array_dtype, byte_span, byte_strides_to_elements, c_strides

__all__ = ["DeviceArray", "from_blasdx", "to_device"]


class DeviceArray:
    """A typed, strided array over cuda.core device memory; exports DLPack and CAI v3.

    Made by :func:`to_device` or :meth:`from_buffer`. ``strides`` are in bytes (numpy and
    CuPy convention). ``DeviceArray`` keeps its Buffer alive; when blasdx writes into it on a
    stream, that stream is recorded and every consumer (DLPack, CAI, :func:`from_device`,
    a later ``execute`` on another stream) orders itself after it.
    """

    __slots__ = ("_buffer", "_shape", "_strides", "_dtype", "_device_id", "_ptr", "_stream", "_view", "_key",
                 "__weakref__")

    def __init__(
        self,
        buffer: Any,
        shape: Sequence[int],
        dtype: Any,
        strides: Sequence[int] | None = None,
        *,
        offset: int = 0,
        device_id: int | None = None,
    ) -> None:
        npd = np.dtype(dtype)
        shape = tuple(int(n) for n in shape)
        if any(n < 0 for n in shape):
            raise ValueError(f"shape: {shape} has a negative extent")
        itemsize = npd.itemsize
        if strides is None:
            strides = tuple(s * itemsize for s in c_strides(shape))
        strides = tuple(int(s) for s in strides)
        if len(strides) != len(shape):
            raise ValueError(f"strides: {strides} has {len(strides)} entries for shape {shape}")
        base = int(buffer) if isinstance(buffer, int) else int(buffer.handle)
        ptr = base + int(offset)
        element_strides = byte_strides_to_elements(strides, itemsize, "strides")
        low, high = byte_span(ptr, shape, element_strides, itemsize)
        size = getattr(buffer, "size", None)
        if size is not None and high > low and (low < base or high > base + int(size)):
            raise ValueError(
                f"shape {shape} with strides {strides} and offset {offset} reaches bytes [{low - base}, {high - base}) "
                f"of a {size}-byte buffer"
            )
        if device_id is None:
            device_id = getattr(buffer, "device_id", None)
        self._buffer = buffer
        self._shape = shape
        self._strides = strides
        self._dtype = npd
        self._device_id = device_id
        self._ptr = ptr
        self._stream: int | None = None
        self._view = ArrayView(ptr, shape, element_strides, array_dtype(npd), device_id, False, self, None)
        # what the array is, for the calls' hot path (blasdx.arrays.keys): fixed for its life. The class closes it
        # so that no key of another library's array equals it (NumPy's dtypes equal their names)
        self._key = (self._view.dtype.name, shape, element_strides, device_id, DeviceArray)

    @classmethod
    def from_buffer(
        cls, buffer: Any, shape: Sequence[int], dtype: Any, strides: Sequence[int] | None = None, *, offset: int = 0
    ) -> DeviceArray:
        """View a cuda.core Buffer as an array of ``shape`` and ``dtype``; strides in bytes, C order by default."""
        return cls(buffer, shape, dtype, strides, offset=offset)

    # -- numpy-like attributes -----------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in bytes."""
        return self._strides

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return math.prod(self._shape)

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def ptr(self) -> int:
        """Device address of the first element."""
        return self._ptr

    @property
    def device_id(self) -> int | None:
        return self._device_id

    @property
    def buffer(self) -> Any:
        """The cuda.core Buffer that owns the memory."""
        return self._buffer

    @property
    def stream(self) -> int | None:
        """Handle of the stream whose pending work writes this array (None: nothing pending)."""
        return self._stream

    def _set_stream(self, handle: int | None) -> None:
        """Record that work on ``handle`` writes this array (consumers order after it)."""
        if handle != self._stream:
            self._stream = handle
            self._view = self._view._replace(stream=handle)

    def get(self, *, stream: Any = None) -> np.ndarray:
        """Copy to a numpy array (like ``cupy.ndarray.get``)."""
        handle = default_stream_handle() if stream is None else stream_handle(stream)
        return to_host(self._view, stream, handle)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self._shape[0]

    def __repr__(self) -> str:
        return (
            f"DeviceArray(shape={self._shape}, dtype={self._dtype}, strides={self._strides}, "
            f"device={self._device_id})"
        )

    # -- exports -------------------------------------------------------------------------------

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CAI v3; ``stream`` is the stream with pending writes (consumers wait on it), or None."""
        itemsize = self.itemsize
        contiguous = self._strides == tuple(s * itemsize for s in c_strides(self._shape))
        return {
            "shape": self._shape,
            "typestr": self._dtype.str,
            "descr": [("", self._dtype.str)],
            "data": (self._ptr, False),
            "strides": None if contiguous else self._strides,
            "version": 3,
            "stream": self._stream,
        }

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, self._device_id or 0)

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule of this array; the consumer's ``stream`` is made to wait for pending writes."""
        if copy:
            raise BufferError("blasdx DeviceArray exports without copying; copy=True is not supported")
        if dl_device is not None and tuple(int(v) for v in dl_device) != self.__dlpack_device__():
            raise BufferError(f"DeviceArray is on {self.__dlpack_device__()}, not on the requested {tuple(dl_device)}")
        if self._stream is not None and stream != -1:
            consumer = LEGACY_STREAM if stream is None else canonical(int(stream))
            if consumer != self._stream:
                with _devices.on_device(self._device_id or 0):  # the default streams are this device's
                    core_stream(consumer).wait(core_stream(self._stream))
        versioned = max_version is not None and int(max_version[0]) >= 1
        itemsize = self.itemsize
        return make_capsule(
            self._ptr,
            self._shape,
            byte_strides_to_elements(self._strides, itemsize, "strides"),
            dl_code_of(self._dtype),
            self.__dlpack_device__(),
            self,
            versioned=versioned,
        )


def from_blasdx(obj: DeviceArray, argument: str, stream: int | None, known: Any = None) -> ArrayView:
    """The adapter of blasdx's own arrays: the view made with the array."""
    return obj._view


# ---------------------------------------------------------------------------------------------
# host -> device
# ---------------------------------------------------------------------------------------------


def _host_span(host: np.ndarray) -> int:
    """Bytes from the first to the end of the last element of a host array with non-negative strides."""
    if host.size == 0:
        return 0
    return sum((n - 1) * s for n, s in zip(host.shape, host.strides)) + host.itemsize


def to_device(array: Any, device: Any = None, *, stream: Any = None) -> DeviceArray:
    """Copy a host array (numpy, ml_dtypes, anything ``np.asarray`` takes) into a new DeviceArray.

    Shape, dtype and strides are kept (a Fortran-ordered or padded array stays so on the
    GPU; arrays with negative strides are made C-contiguous first). ``device`` is None
    (the current device), an ordinal or a cuda.core Device; it is current for the copy and
    what was current before is current again afterwards. ``stream`` must be one of that
    device. The copy is finished when this returns.
    """
    host = np.asarray(array)
    if host.dtype.hasobject or host.dtype.fields is not None or host.dtype.kind in "OSUMm":
        raise ExecutionError(f"array: dtype {host.dtype} cannot be copied to the GPU; expected a numeric dtype")
    if not host.dtype.isnative:
        host = host.astype(host.dtype.newbyteorder("="))
    if any(s < 0 for s in host.strides):
        host = np.ascontiguousarray(host)
    span = _host_span(host)
    dev = as_device(device)
    device_id = int(dev.device_id)
    handle = None if stream is None else stream_handle(stream)
    if handle is not None:
        _devices.check_stream_device(stream, handle, device_id, "the copy goes")
    with _devices.on_device(device_id):
        driver = _devices.driver()
        s = dev.default_stream if handle is None else as_core_stream(stream, handle)
        buffer = _devices.core_device(device_id).allocate(max(span, 1), stream=s)
        if span:
            check(driver.cuMemcpyHtoDAsync(int(buffer.handle), host.ctypes.data, span, s.handle), "cuMemcpyHtoDAsync")
        s.sync()
    return DeviceArray(buffer, host.shape, host.dtype, host.strides, device_id=device_id)

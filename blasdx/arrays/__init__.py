"""Device-array interop in one namespace: any GPU array -> a small frozen view, streams, copies.

blasdx takes arrays from CuPy, PyTorch, numba, JAX, cuda.core or anything that speaks
DLPack or ``__cuda_array_interface__`` (CAI v3), and never imports those libraries
itself. :func:`as_array` turns one into an :class:`~blasdx.arrays.view.ArrayView` through
the adapter of its type, picked once per type: blasdx ``DeviceArray``
(:mod:`blasdx.arrays.device_array`); ``torch.Tensor`` and ``cupy.ndarray`` read through their
attributes (:mod:`blasdx.arrays.torch_adapter`, :mod:`blasdx.arrays.cupy_adapter`; the library's current
stream is the producer stream); a cuda.core ``StridedMemoryView``
(:mod:`blasdx.arrays.cuda_core_adapter`); DLPack (:mod:`blasdx.arrays.dlpack`: ``__dlpack__(stream=consumer)``,
the producer orders its work before the consumer stream); CAI v3 (:mod:`blasdx.arrays.cai`: the
``stream`` field, when given, is waited on before the kernel runs). A ``cuda.core.Buffer``
is untyped bytes and so is refused.

Why blasdx parses the protocols itself rather than through ``cuda.core.utils.StridedMemoryView``:
the view's ``dtype`` goes through numpy/ml_dtypes and cannot name ``complex32``; its
constructor synchronises at construction (one event per array per call), and its API
moved between cuda.core 1.2.0 and 1.2.2. Parsing here costs a few hundred nanoseconds per
array on the fast paths and behaves the same on every cuda.core 1.2.x.

Streams (:mod:`blasdx.arrays.streams`, :func:`resolve_stream`): ``None`` is the current stream of
the array library the arrays come from (``torch.cuda.current_stream()``,
``cupy.cuda.get_current_stream()``), else the default stream. :func:`to_device` and
:func:`from_device` copy between host and device. Every name other modules imported from
here before the adapters had modules of their own is still here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..base.errors import ExecutionError
from ..launch import cuda_modules as _cuda
from ..launch.devices import (
    as_device,
    check,
    current_device_id,
    ensure_driver,
    pointer_device_id,
)
from .cai import cai_dtype, from_cai
from .cuda_core_adapter import from_strided_memory_view, reject_buffer
from .cupy_adapter import _CUPY_LAYOUTS, _CUPY_STREAM, cupy_current_stream, from_cupy
from .device_array import DeviceArray, from_blasdx, to_device
from .dlpack import (
    _LIVE,
    KDL_CPU,
    KDL_CUDA,
    KDL_CUDA_HOST,
    KDL_CUDA_MANAGED,
    CapsuleInfo,
    dl_code_of,
    dl_dtype,
    from_dlpack,
    make_capsule,
    read_capsule,
)
from .host_copy import to_host
from .keys import library_of_type
from .streams import (
    _DEFAULT_STREAM,
    LEGACY_STREAM,
    PER_THREAD_STREAM,
    as_core_stream,
    canonical,
    core_stream,
    default_stream_handle,
    stream_handle,
    wait_for_producers,
)
from .torch_adapter import _TORCH_STREAM, _TORCH_TYPES, from_torch, torch_current_stream
from .view import (
    HOST_HINT,
    ArrayView,
    array_dtype,
    byte_span,
    byte_strides_to_elements,
    c_strides,
    describe,
    host_dtype,
    new_view,
    numpy_dtype,
)

__all__ = [
    "ArrayView",
    "CapsuleInfo",
    "DeviceArray",
    "KDL_CPU",
    "KDL_CUDA",
    "KDL_CUDA_HOST",
    "KDL_CUDA_MANAGED",
    "LEGACY_STREAM",
    "PER_THREAD_STREAM",
    "array_dtype",
    "as_array",
    "as_core_stream",
    "core_stream",
    "current_device_id",
    "default_stream_handle",
    "from_device",
    "make_capsule",
    "pointer_device_id",
    "read_capsule",
    "resolve_stream",
    "stream_handle",
    "to_device",
    "wait_for_producers",
]

# the names these had while they lived in this module
_span = byte_span
_new_view = new_view
_c_strides = c_strides
_byte_strides_to_elements = byte_strides_to_elements
_numpy_dtype = numpy_dtype
_host_dtype = host_dtype
_describe = describe
_HOST_HINT = HOST_HINT
_canonical = canonical
_check = check
_as_device = as_device
_ensure_driver = ensure_driver
_dl_dtype = dl_dtype
_dl_code_of = dl_code_of
_cai_dtype = cai_dtype
_from_blasdx = from_blasdx
_from_torch = from_torch
_from_cupy = from_cupy
_from_cai = from_cai
_from_dlpack = from_dlpack
_from_smv = from_strided_memory_view
_torch_current_stream = torch_current_stream
_cupy_current_stream = cupy_current_stream
_KEEP = (_CUPY_LAYOUTS, _CUPY_STREAM, _TORCH_STREAM, _TORCH_TYPES, _LIVE, _DEFAULT_STREAM)  # same objects


# ---------------------------------------------------------------------------------------------
# choosing the adapter
# ---------------------------------------------------------------------------------------------


def as_array(
    obj: Any, argument: str = "array", *, stream: int | None = None, known: dict[int, int] | None = None
) -> ArrayView:
    """The :class:`ArrayView` of a device array; ExecutionError naming ``argument`` when it is not one.

    ``stream`` is the consumer stream handle: DLPack producers order their work before it.
    ``known`` is shared by the arrays of one call: the libraries' current streams asked
    during it (see :func:`resolve_stream`).
    """
    adapter = _ADAPTERS.get(type(obj))
    if adapter is None:
        adapter = _adapter_for(obj)
        _ADAPTERS[type(obj)] = adapter
    return adapter(obj, argument, stream, known)


_Adapter = Callable[[Any, str, "int | None", Any], ArrayView]  # (array, argument, stream, known)
_ADAPTERS: dict[type, _Adapter] = {}


def _adapter_for(obj: Any) -> _Adapter:
    """Pick the protocol for ``type(obj)`` once; the choice is cached per type."""
    if isinstance(obj, DeviceArray):
        return from_blasdx
    if isinstance(obj, ArrayView):
        return _from_view
    library = library_of_type(type(obj))
    if library is not None:
        return from_torch if library == "torch" else from_cupy
    if type(obj).__module__.startswith("cuda.core"):  # a cuda.core object implies cuda.core is imported
        core = _cuda.core()
        smv = getattr(core.utils, "StridedMemoryView", None)
        if smv is not None and isinstance(obj, smv):
            return from_strided_memory_view
        if isinstance(obj, core.Buffer):
            return reject_buffer
    if isinstance(obj, np.ndarray) or isinstance(obj, np.generic):
        return _reject_host
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return from_dlpack
    if hasattr(obj, "__cuda_array_interface__"):
        return from_cai
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array__"):
        return _reject_host
    return _reject_unknown


def _reject_host(obj: Any, argument: str, stream: int | None, known: Any = None) -> ArrayView:
    raise ExecutionError(f"{argument}: {describe(obj)} is in host memory; {HOST_HINT}")


def _reject_unknown(obj: Any, argument: str, stream: int | None, known: Any = None) -> ArrayView:
    raise ExecutionError(
        f"{argument}: {describe(obj)} is not a device array; expected a CuPy array, a PyTorch CUDA tensor, a "
        "blasdx DeviceArray (bx.to_device) or any object with __dlpack__ or __cuda_array_interface__"
    )


def _from_view(view: ArrayView, argument: str, stream: int | None, known: Any = None) -> ArrayView:
    """An ArrayView already read (bx.matmul hands its views to execute without reading the arrays twice)."""
    return view


# ---------------------------------------------------------------------------------------------
# streams of the arrays' library, and copies back to the host
# ---------------------------------------------------------------------------------------------


def resolve_stream(
    stream: Any, arrays: Sequence[Any] = (), argument: str = "stream", known: dict[int, int] | None = None
) -> int:
    """Handle of the stream to run on: ``stream``, or for None the current stream of the arrays' library.

    The first array from PyTorch or CuPy decides (pass the output first): its library's
    current stream on that array's device. Arrays from neither run on the default stream
    (of the context current at the launch: the arrays' device's). The library stream asked
    for is noted in ``known``, so that reading the arrays of the same call
    (``as_array(..., known=known)``) does not ask again: within one call it cannot change.
    """
    if stream is not None:
        return stream_handle(stream, argument)
    for obj in arrays:
        adapter = _ADAPTERS.get(type(obj))
        if adapter is from_torch and obj.is_cuda:  # the hot path: a type seen before
            return torch_current_stream(obj.get_device(), known)
        if adapter is from_cupy:
            return cupy_current_stream(obj.data.device_id, known)
        if adapter is not None:
            continue
        library = _library_of(obj)
        if library == "torch":
            return torch_current_stream(obj.get_device(), known)
        if library == "cupy":
            return cupy_current_stream(obj.data.device_id, known)
    return default_stream_handle()


_LIBRARIES = {from_torch: "torch", from_cupy: "cupy"}


def _library_of(obj: Any) -> str | None:
    """'torch' / 'cupy' for their arrays (without importing either), else None."""
    adapter = _ADAPTERS.get(type(obj))
    library = library_of_type(type(obj)) if adapter is None else _LIBRARIES.get(adapter)
    if library == "torch":
        return "torch" if obj.is_cuda else None
    return library


def from_device(array: Any, *, stream: Any = None) -> np.ndarray:
    """Copy any device array (DeviceArray, CuPy, PyTorch, DLPack, CAI) into a new numpy array.

    The copy runs on ``stream`` (None: the array library's current stream, else the
    default stream) after the producer's pending work and is finished when this returns.
    A padded or strided array comes back compact, in the same memory order.
    """
    handle = resolve_stream(stream, (array,))
    view = as_array(array, "array", stream=handle)
    return to_host(view, stream, handle)

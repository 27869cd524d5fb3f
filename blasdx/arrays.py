"""Device-array interop: any GPU array -> a small frozen view; streams; host <-> device copies.

blasdx takes arrays from CuPy, PyTorch, numba, JAX, cuda.core or anything that speaks
DLPack or ``__cuda_array_interface__`` (CAI v3), and never imports those libraries
itself. :func:`as_array` turns one into an :class:`ArrayView` (pointer, shape, strides in
elements, :class:`~blasdx.dtypes.DType`, device, read-only flag, byte span, the owner that
keeps the memory alive and the producer's stream).

Why blasdx parses the protocols itself rather than through ``cuda.core.utils.StridedMemoryView``:
the view's ``dtype`` goes through numpy/ml_dtypes and cannot name ``complex32``; its
constructor synchronises at construction (one event per array per call), and its API
moved between cuda.core 1.2.0 and 1.2.2. Parsing here costs a few hundred nanoseconds per
array on the fast paths (blasdx's own arrays, PyTorch tensors, CuPy arrays read through
their attributes) and behaves the same on every cuda.core 1.2.x. ``StridedMemoryView``
objects themselves are accepted as arrays.

Protocols, in order of preference: blasdx ``DeviceArray``; ``torch.Tensor`` and
``cupy.ndarray`` (attributes; the library's current stream is the producer stream); a
``StridedMemoryView``; DLPack (``__dlpack__(stream=consumer)``, the producer orders its
work before the consumer stream); CAI v3 (the ``stream`` field, when given, is waited on
by the launch stream before the kernel runs). A ``cuda.core.Buffer`` is untyped bytes and
so is refused: wrap it with :meth:`DeviceArray.from_buffer` (shape, dtype, strides).

Streams (:func:`stream_handle`, :func:`resolve_stream`): ``None`` is the current stream of
the array library the arrays come from (``torch.cuda.current_stream()``,
``cupy.cuda.get_current_stream()``), else the default stream (legacy, or per-thread when
``CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM`` is set, as in cuda.core); a cuda.core
``Stream``; anything with ``__cuda_stream__``; a CuPy (``.ptr``) or PyTorch
(``.cuda_stream``) stream; a driver ``CUstream``; or an int handle.

:func:`to_device` copies a host array into cuda.core memory and returns a
:class:`DeviceArray`, which exports ``__dlpack__`` / ``__dlpack_device__`` (typed: bf16,
fp8 and complex keep their type) and ``__cuda_array_interface__`` (bf16/fp8 have no CAI
type string: they appear as ``<V2`` / ``|V1`` there; use DLPack for them).
:func:`from_device` copies any device array back to a numpy array.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from . import dtypes as _dt
from .dtypes import DType
from .errors import DeviceError, ExecutionError

__all__ = [
    "ArrayView",
    "DeviceArray",
    "as_array",
    "array_dtype",
    "stream_handle",
    "resolve_stream",
    "default_stream_handle",
    "core_stream",
    "pointer_device_id",
    "to_device",
    "from_device",
    "KDL_CPU",
    "KDL_CUDA",
    "KDL_CUDA_HOST",
    "KDL_CUDA_MANAGED",
]

# DLPack device types (dlpack.h DLDeviceType)
KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13
_HOST_DEVICE_TYPES = {KDL_CPU: "host memory", KDL_CUDA_HOST: "pinned host memory"}

# CUDA's special stream handles (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD)
LEGACY_STREAM = 1
PER_THREAD_STREAM = 2

_HOST_HINT = "move it to the GPU (bx.to_device(x), cupy.asarray(x) or torch.as_tensor(x, device='cuda'))"


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


def _foreign_dtype(name: str, size: int) -> DType:
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
    return _foreign_dtype(name, int(itemsize))


_NUMPY_TYPES: dict[Any, DType] = {}


def _numpy_dtype(npd: np.dtype) -> DType:
    """array_dtype for a numpy dtype, memoised (the CuPy fast path)."""
    found = _NUMPY_TYPES.get(npd)
    if found is None:
        found = _NUMPY_TYPES[npd] = array_dtype(npd)
    return found


def _host_dtype(dtype: DType, argument: str) -> np.dtype:
    """The numpy dtype that holds ``dtype`` on the host."""
    if dtype.numpy is None:
        raise ExecutionError(f"{argument}: element type {dtype.name} has no numpy equivalent to copy it into")
    return np.dtype(dtype.numpy)


# DLPack (code, bits) <-> names
_DL_NAMES: dict[tuple[int, int], str] = {
    (0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
    (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
    (2, 16): "float16", (2, 32): "float32", (2, 64): "float64",
    (4, 16): "bfloat16",
    (5, 32): "complex32", (5, 64): "complex64", (5, 128): "complex128",
    (6, 8): "bool",
    (7, 8): "float8_e3m4", (8, 8): "float8_e4m3", (9, 8): "float8_e4m3b11fnuz", (10, 8): "float8_e4m3fn",
    (11, 8): "float8_e4m3fnuz", (12, 8): "float8_e5m2", (13, 8): "float8_e5m2fnuz", (14, 8): "float8_e8m0fnu",
}
# kDLFloat8_e4m3 (8) is the IEEE-like e4m3 with infinities, not e4m3fn: not blasdx's float8_e4m3
_DL_NAMES_STRICT = {k: v for k, v in _DL_NAMES.items() if k != (8, 8)}
_DL_CODES: dict[str, tuple[int, int]] = {v: k for k, v in _DL_NAMES_STRICT.items()}


def _dl_dtype(code: int, bits: int, lanes: int, argument: str) -> DType:
    """The DType of a DLPack (code, bits, lanes) triple."""
    if lanes != 1:
        raise ExecutionError(f"{argument}: DLPack vector element type ({code}, {bits}, lanes={lanes}) is not supported")
    name = _DL_NAMES.get((code, bits))
    if name is None:
        return _foreign_dtype(f"dlpack(code={code}, bits={bits})", (bits + 7) // 8)
    if (code, bits) == (8, 8):
        return _foreign_dtype("float8_e4m3 (IEEE, with infinities)", 1)
    return array_dtype(name, (bits + 7) // 8)


def _dl_code_of(npd: np.dtype) -> tuple[int, int]:
    """DLPack (code, bits) for a numpy dtype (ml_dtypes included)."""
    found = _DL_CODES.get(npd.name)
    if found is not None:
        return found
    kind_codes = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
    if npd.kind in kind_codes and npd.fields is None:
        return (kind_codes[npd.kind], 8 * npd.itemsize)
    raise BufferError(f"dtype {npd} has no DLPack type code")


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
        return _span(self.ptr, self.shape, self.strides, self.dtype.size)

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


_new_view = tuple.__new__  # ArrayView without NamedTuple's Python-level __new__ (hot path)


def _span(ptr: int, shape: Sequence[int], strides: Sequence[int], itemsize: int) -> tuple[int, int]:
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


def _c_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """C-contiguous strides in elements."""
    out = []
    acc = 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def _byte_strides_to_elements(strides: Sequence[int], itemsize: int, argument: str) -> tuple[int, ...]:
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


def as_array(obj: Any, argument: str = "array", *, stream: int | None = None) -> ArrayView:
    """The :class:`ArrayView` of a device array; ExecutionError naming ``argument`` when it is not one.

    ``stream`` is the consumer stream handle: DLPack producers order their work before it.
    """
    adapter = _ADAPTERS.get(type(obj))
    if adapter is None:
        adapter = _adapter_for(obj)
        _ADAPTERS[type(obj)] = adapter
    return adapter(obj, argument, stream)


def _describe(obj: Any) -> str:
    """``numpy.ndarray of shape (2, 3)``-style description for messages."""
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    shape = getattr(obj, "shape", None)
    return f"{kind} of shape {tuple(shape)}" if isinstance(shape, tuple) else kind


# -- adapters ------------------------------------------------------------------------------------

_Adapter = Callable[[Any, str, "int | None"], ArrayView]
_ADAPTERS: dict[type, _Adapter] = {}


def _adapter_for(obj: Any) -> _Adapter:
    """Pick the protocol for ``type(obj)`` once; the choice is cached per type."""
    if isinstance(obj, DeviceArray):
        return _from_blasdx
    if isinstance(obj, ArrayView):
        return _from_view
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _from_torch
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(obj, cupy.ndarray):
        return _from_cupy
    core = _cuda_core()
    if core is not None:
        smv = _strided_memory_view_type()
        if smv is not None and isinstance(obj, smv):
            return _from_smv
        if isinstance(obj, core.Buffer):
            return _reject_buffer
    if isinstance(obj, np.ndarray) or isinstance(obj, np.generic):
        return _reject_host
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array__"):
        return _reject_host
    return _reject_unknown


def _reject_host(obj: Any, argument: str, stream: int | None) -> ArrayView:
    raise ExecutionError(f"{argument}: {_describe(obj)} is in host memory; {_HOST_HINT}")


def _reject_unknown(obj: Any, argument: str, stream: int | None) -> ArrayView:
    raise ExecutionError(
        f"{argument}: {_describe(obj)} is not a device array; expected a CuPy array, a PyTorch CUDA tensor, a "
        "blasdx DeviceArray (bx.to_device) or any object with __dlpack__ or __cuda_array_interface__"
    )


def _reject_buffer(obj: Any, argument: str, stream: int | None) -> ArrayView:
    raise ExecutionError(
        f"{argument}: a cuda.core Buffer is untyped bytes ({getattr(obj, 'size', '?')} B) with no shape; wrap it "
        "as a matrix with blasdx.arrays.DeviceArray.from_buffer(buffer, shape, dtype, strides) (or "
        "cuda.core.utils.StridedMemoryView.from_buffer)"
    )


def _from_blasdx(obj: DeviceArray, argument: str, stream: int | None) -> ArrayView:
    return obj._view


def _from_view(view: ArrayView, argument: str, stream: int | None) -> ArrayView:
    """An ArrayView already read (bx.matmul hands its views to execute without reading the arrays twice)."""
    return view


def _from_torch(t: Any, argument: str, stream: int | None) -> ArrayView:
    """torch.Tensor through its attributes (no DLPack capsule): the producer stream is torch's current one."""
    device = t.get_device()  # -1 for CPU tensors
    if device < 0 or not t.is_cuda:
        where = t.device.type
        if where == "cpu":
            raise ExecutionError(f"{argument}: torch.Tensor of shape {tuple(t.shape)} is in host memory; {_HOST_HINT}")
        raise ExecutionError(f"{argument}: torch.Tensor is on device type {where!r}; blasdx needs a CUDA tensor")
    dtype = _TORCH_TYPES.get(t.dtype)
    if dtype is None:
        dtype = _TORCH_TYPES[t.dtype] = array_dtype(t.dtype, t.element_size())
    if dtype.is_complex and (t.is_conj() or t.is_neg()):
        raise ExecutionError(
            f"{argument}: torch.Tensor has a pending conjugation/negation bit (a lazy .conj() view); its memory "
            "holds the unconjugated values. Call .resolve_conj() / .resolve_neg() first"
        )
    raw = _TORCH_STREAM[0] if _TORCH_STREAM else _torch_stream_function()
    producer = raw(device) or default_stream_handle()
    return _new_view(ArrayView, (t.data_ptr(), t.shape, t.stride(), dtype, device, False, t, producer))


_TORCH_TYPES: dict[Any, DType] = {}
_TORCH_STREAM: list[Callable[[int], int]] = []


def _torch_stream_function() -> Callable[[int], int]:
    """torch's raw current-stream query (``torch._C._cuda_getCurrentRawStream``), or a public fallback."""
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:  # pragma: no cover - older torch
        def raw(device: int) -> int:
            return torch.cuda.current_stream(device).cuda_stream
    _TORCH_STREAM.append(raw)
    return raw


def _torch_current_stream(device: int) -> int:
    """Raw handle of torch's current stream on ``device`` (0, the default stream, -> legacy)."""
    raw = _TORCH_STREAM[0] if _TORCH_STREAM else _torch_stream_function()
    return raw(device) or default_stream_handle()


def _from_cupy(x: Any, argument: str, stream: int | None) -> ArrayView:
    """cupy.ndarray through its attributes: the producer stream is CuPy's current one."""
    key = (x.dtype, x.strides)
    found = _CUPY_LAYOUTS.get(key)
    if found is None:
        dtype = _numpy_dtype(key[0])
        found = (dtype, _byte_strides_to_elements(key[1], dtype.size, argument))
        if len(_CUPY_LAYOUTS) > 256:
            _CUPY_LAYOUTS.clear()
        _CUPY_LAYOUTS[key] = found
    dtype, strides = found
    data = x.data
    current = _CUPY_STREAM[0] if _CUPY_STREAM else _cupy_stream_function()
    producer = current().ptr or default_stream_handle()
    return _new_view(ArrayView, (data.ptr, x.shape, strides, dtype, data.device_id, False, x, producer))


_CUPY_STREAM: list[Callable[[], Any]] = []
_CUPY_LAYOUTS: dict[tuple[Any, tuple[int, ...]], tuple[DType, tuple[int, ...]]] = {}


def _cupy_stream_function() -> Callable[[], Any]:
    """cupy.cuda.get_current_stream, looked up once."""
    _CUPY_STREAM.append(sys.modules["cupy"].cuda.get_current_stream)
    return _CUPY_STREAM[0]


def _cupy_current_stream() -> int:
    """Handle of CuPy's current stream (its null stream is 0 -> the default stream)."""
    current = _CUPY_STREAM[0] if _CUPY_STREAM else _cupy_stream_function()
    return current().ptr or default_stream_handle()


def _from_smv(view: Any, argument: str, stream: int | None) -> ArrayView:
    """A cuda.core StridedMemoryView (its constructor already ordered the streams)."""
    if not view.is_device_accessible:
        raise ExecutionError(f"{argument}: StridedMemoryView is in host memory; {_HOST_HINT}")
    dtype = array_dtype(view.dtype)
    shape = tuple(view.shape)
    strides = tuple(view.strides) if view.strides is not None else _c_strides(shape)
    ptr = int(view.ptr)
    return ArrayView(ptr, shape, strides, dtype, int(view.device_id), bool(view.readonly), view, None)


def _from_cai(obj: Any, argument: str, stream: int | None) -> ArrayView:
    """__cuda_array_interface__ v3; the device comes from the driver (CAI does not carry it)."""
    try:
        cai = obj.__cuda_array_interface__
        shape = tuple(int(n) for n in cai["shape"])
        typestr = cai["typestr"]
        ptr, readonly = cai["data"]
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ExecutionError(f"{argument}: malformed __cuda_array_interface__ ({exc!r})") from None
    if cai.get("mask") is not None:
        raise ExecutionError(f"{argument}: masked arrays (__cuda_array_interface__ 'mask') are not supported")
    dtype = _cai_dtype(typestr, argument)
    ptr = int(ptr or 0)
    strides_b = cai.get("strides")
    if strides_b is None:
        strides = _c_strides(shape)
    else:
        strides = _byte_strides_to_elements(strides_b, dtype.size, argument)
    producer = cai.get("stream") if cai.get("version", 3) >= 3 else None
    if producer is not None:
        producer = _canonical(int(producer))
    device = pointer_device_id(ptr, argument) if ptr and 0 not in shape else None
    return ArrayView(ptr, shape, strides, dtype, device, bool(readonly), obj, producer)


def _cai_dtype(typestr: str, argument: str) -> DType:
    """DType of a CAI typestr; untyped ``V`` (bf16/fp8 exports) and foreign byte orders are errors."""
    try:
        npd = np.dtype(typestr)
    except TypeError:
        raise ExecutionError(f"{argument}: __cuda_array_interface__ typestr {typestr!r} is not a numpy type") from None
    if npd.kind == "V":
        raise ExecutionError(
            f"{argument}: __cuda_array_interface__ typestr {typestr!r} is an untyped {npd.itemsize}-byte element "
            "(bfloat16 and fp8 have no CAI type); pass the array through DLPack instead (CuPy, PyTorch and "
            "bx.to_device arrays do that by themselves)"
        )
    if not npd.isnative:
        raise ExecutionError(f"{argument}: element type {typestr!r} is not in the machine's byte order")
    return _numpy_dtype(npd)


def pointer_device_id(ptr: int, argument: str = "array") -> int:
    """The ordinal of the GPU that holds ``ptr`` (driver pointer attribute); CAI has no device field."""
    from cuda.bindings import driver

    _ensure_driver()
    attribute = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    err, value = driver.cuPointerGetAttribute(attribute, ptr)
    if int(err) != 0:
        raise ExecutionError(
            f"{argument}: the CUDA driver does not know pointer {ptr:#x} ({getattr(err, 'name', err)}); "
            f"it is not device memory. {_HOST_HINT[0].upper()}{_HOST_HINT[1:]}"
        )
    return int(value)


def _from_dlpack(obj: Any, argument: str, stream: int | None) -> ArrayView:
    """DLPack: ask the producer for a capsule ordered before ``stream`` and read it (kept as the owner)."""
    try:
        device_type, device_id = obj.__dlpack_device__()
    except Exception as exc:
        raise ExecutionError(f"{argument}: __dlpack_device__() failed: {exc}") from None
    device_type, device_id = int(device_type), int(device_id)
    if device_type in _HOST_DEVICE_TYPES:
        raise ExecutionError(
            f"{argument}: {_describe(obj)} is in {_HOST_DEVICE_TYPES[device_type]}; {_HOST_HINT}"
        )
    if device_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
        raise ExecutionError(
            f"{argument}: {_describe(obj)} is on DLPack device type {device_type}; blasdx needs CUDA memory (2)"
        )
    consumer = None if stream is None else (stream or default_stream_handle())
    try:
        try:
            capsule = obj.__dlpack__(stream=consumer, max_version=(1, 0))
        except TypeError:
            capsule = obj.__dlpack__(stream=consumer)
    except BufferError as exc:
        raise ExecutionError(f"{argument}: the array refused DLPack export: {exc}") from None
    info = read_capsule(capsule, argument)
    dtype = _dl_dtype(info.code, info.bits, info.lanes, argument)
    return ArrayView(info.ptr, info.shape, info.strides, dtype, info.device_id, info.readonly, (obj, capsule), None)


# ---------------------------------------------------------------------------------------------
# DLPack through ctypes (no compiled extension)
# ---------------------------------------------------------------------------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_LEGACY_NAME = b"dltensor"
_VERSIONED_NAME = b"dltensor_versioned"
_READ_ONLY_FLAG = 1

# private prototypes (never touch ctypes.pythonapi's shared function objects' argtypes)
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)
# raw-pointer variants for the capsule destructor, which must not take a reference to the dying capsule
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


class CapsuleInfo(NamedTuple):
    """What a DLPack capsule describes."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    code: int
    bits: int
    lanes: int
    device_type: int
    device_id: int
    readonly: bool
    versioned: bool


def read_capsule(capsule: Any, argument: str = "array") -> CapsuleInfo:
    """Read a DLPack capsule (legacy or versioned) without consuming it.

    The capsule stays unconsumed, so its own destructor releases the producer's tensor
    when the capsule is collected; whoever reads the pointer keeps the capsule alive.
    """
    if _capsule_is_valid(capsule, _VERSIONED_NAME):
        managed = _DLManagedTensorVersioned.from_address(_capsule_get_pointer(capsule, _VERSIONED_NAME))
        if managed.version.major > 1:
            version = f"{managed.version.major}.{managed.version.minor}"
            raise ExecutionError(f"{argument}: DLPack {version} is newer than 1.x, which blasdx reads")
        tensor = managed.dl_tensor
        readonly = bool(managed.flags & _READ_ONLY_FLAG)
        versioned = True
    elif _capsule_is_valid(capsule, _LEGACY_NAME):
        managed = _DLManagedTensor.from_address(_capsule_get_pointer(capsule, _LEGACY_NAME))
        tensor = managed.dl_tensor
        readonly = False
        versioned = False
    else:
        raise ExecutionError(f"{argument}: __dlpack__() did not return an unconsumed DLPack capsule")
    ndim = tensor.ndim
    shape = tuple(tensor.shape[i] for i in range(ndim))
    strides = tuple(tensor.strides[i] for i in range(ndim)) if tensor.strides else _c_strides(shape)
    ptr = (tensor.data or 0) + tensor.byte_offset
    dt = tensor.dtype
    return CapsuleInfo(
        ptr, shape, strides, dt.code, dt.bits, dt.lanes, tensor.device.device_type, tensor.device.device_id,
        readonly, versioned,
    )


# exported tensors alive until their consumer calls the deleter: address -> (struct, arrays, owner)
_LIVE: dict[int, tuple[Any, ...]] = {}


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _deleter(address: int) -> None:  # pragma: no cover - called from C
    try:
        _LIVE.pop(address, None)
    except Exception:  # interpreter shutdown
        pass


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule: int) -> None:  # pragma: no cover - called from C
    """Fallback destructor; cannot preserve an exception in flight (see _destructor_address)."""
    try:
        for name in (_VERSIONED_NAME, _LEGACY_NAME):
            if _raw_is_valid(capsule, name):  # still unconsumed: nobody took ownership
                _LIVE.pop(_raw_get_pointer(capsule, name), None)
                return
    except Exception:  # interpreter shutdown
        pass


_DELETER_ADDRESS = ctypes.cast(_deleter, ctypes.c_void_p).value
_capsule_get_destructor = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object)(
    ("PyCapsule_GetDestructor", ctypes.pythonapi)
)
_DESTRUCTORS: dict[bool, int] = {}


def _destructor_address(versioned: bool) -> int:
    """Address of a C capsule destructor that follows the DLPack spec, borrowed from numpy.

    An unconsumed capsule must call its tensor's deleter when collected, possibly while
    an exception is in flight (a consumer that failed after taking the capsule). A Python
    (ctypes) destructor would clobber that exception; numpy's C destructor saves and
    restores it around ``managed->deleter(managed)``, which is all it does, so blasdx
    uses it for its own capsules. Without it (old numpy) the ctypes fallback is used.
    """
    found = _DESTRUCTORS.get(versioned)
    if found is None:
        found = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value
        try:
            probe = np.empty(0, np.uint8)
            capsule = probe.__dlpack__(max_version=(1, 0)) if versioned else probe.__dlpack__()
            name = _VERSIONED_NAME if versioned else _LEGACY_NAME
            if _capsule_is_valid(capsule, name):
                found = _capsule_get_destructor(capsule) or found
        except Exception:  # pragma: no cover - numpy without (versioned) DLPack export
            pass
        _DESTRUCTORS[versioned] = found
    return found


def make_capsule(
    ptr: int,
    shape: Sequence[int],
    strides: Sequence[int],
    dl_dtype: tuple[int, int],
    device: tuple[int, int],
    owner: Any,
    *,
    versioned: bool,
    readonly: bool = False,
) -> Any:
    """A DLPack capsule (``dltensor`` or ``dltensor_versioned``) over ``ptr``; ``owner`` lives until it is deleted.

    Strides are in elements. The consumer renames the capsule and calls the deleter when
    done; an unconsumed capsule releases ``owner`` when it is collected.
    """
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    if versioned:
        managed: Any = _DLManagedTensorVersioned()
        fp8 = dl_dtype[0] >= 7 and dl_dtype[0] <= 14
        managed.version.major, managed.version.minor = 1, (1 if fp8 else 0)
        managed.flags = _READ_ONLY_FLAG if readonly else 0
    else:
        managed = _DLManagedTensor()
    tensor = managed.dl_tensor
    tensor.data = ptr or None
    tensor.device.device_type, tensor.device.device_id = device
    tensor.ndim = ndim
    tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes = dl_dtype[0], dl_dtype[1], 1
    tensor.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    tensor.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    tensor.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _DELETER_ADDRESS
    address = ctypes.addressof(managed)
    _LIVE[address] = (managed, shape_arr, strides_arr, owner)
    name = _VERSIONED_NAME if versioned else _LEGACY_NAME
    return _capsule_new(address, name, _destructor_address(versioned))


# ---------------------------------------------------------------------------------------------
# streams
# ---------------------------------------------------------------------------------------------


_DEFAULT_STREAM: list[int] = []


def default_stream_handle() -> int:
    """The handle of cuda.core's default stream: per-thread when CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM is set.

    Read once, like cuda.core does; ``_DEFAULT_STREAM.clear()`` makes it read again.
    """
    if _DEFAULT_STREAM:
        return _DEFAULT_STREAM[0]
    value = os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0")
    try:
        per_thread = int(value) != 0
    except ValueError:
        per_thread = value.strip() != ""
    _DEFAULT_STREAM.append(PER_THREAD_STREAM if per_thread else LEGACY_STREAM)
    return _DEFAULT_STREAM[0]


def _canonical(handle: int) -> int:
    """Stream handle with 0 (the null stream) spelled as the default stream's special handle."""
    return handle or default_stream_handle()


def stream_handle(stream: Any, argument: str = "stream") -> int:
    """The CUDA stream handle (int) of anything that names a stream (not None; see :func:`resolve_stream`)."""
    if isinstance(stream, bool):
        raise ExecutionError(f"{argument}: {stream!r} is not a stream")
    if isinstance(stream, (int, np.integer)):
        if stream < 0:
            raise ExecutionError(
                f"{argument}: stream handle {int(stream)} is negative; expected a cudaStream_t address"
            )
        return _canonical(int(stream))
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        try:
            info = protocol() if callable(protocol) else protocol
            version, handle = info
        except Exception as exc:
            raise ExecutionError(f"{argument}: __cuda_stream__ of {type(stream).__name__} failed: {exc}") from None
        return _canonical(int(handle))
    for attribute in ("cuda_stream", "ptr"):  # PyTorch, CuPy
        value = getattr(stream, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return _canonical(value)
    if hasattr(stream, "getPtr"):  # cuda.bindings CUstream
        return _canonical(int(stream.getPtr()))
    raise ExecutionError(
        f"{argument}: {stream!r} ({type(stream).__name__}) is not a stream; expected None, a cuda.core Stream, an "
        "object with __cuda_stream__, a CuPy or PyTorch stream, or an int cudaStream_t handle"
    )


def resolve_stream(stream: Any, arrays: Sequence[Any] = (), argument: str = "stream") -> int:
    """Handle of the stream to run on: ``stream``, or for None the current stream of the arrays' library.

    The first array from PyTorch or CuPy decides (pass the output first); arrays from
    neither run on the default stream.
    """
    if stream is not None:
        return stream_handle(stream, argument)
    for obj in arrays:
        if type(obj) is DeviceArray:
            continue
        library = _library_of(obj)
        if library == "torch":
            return _torch_current_stream(obj.get_device())
        if library == "cupy":
            return _cupy_current_stream()
    return _DEFAULT_STREAM[0] if _DEFAULT_STREAM else default_stream_handle()


def _library_of(obj: Any) -> str | None:
    """'torch' / 'cupy' for their arrays (without importing either), else None."""
    adapter = _ADAPTERS.get(type(obj))
    if adapter is None:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            adapter = _from_torch
        else:
            cupy = sys.modules.get("cupy")
            if cupy is not None and isinstance(obj, cupy.ndarray):
                adapter = _from_cupy
    if adapter is _from_torch:
        return "torch" if obj.is_cuda else None
    if adapter is _from_cupy:
        return "cupy"
    return None


_CORE_STREAMS: dict[int, Any] = {}


def core_stream(handle: int) -> Any:
    """A cuda.core Stream for ``handle`` (memoised; the default streams map to cuda.core's own)."""
    found = _CORE_STREAMS.get(handle)
    if found is not None:
        return found
    import cuda.core as core

    if handle == LEGACY_STREAM and hasattr(core, "LEGACY_DEFAULT_STREAM"):
        found = core.LEGACY_DEFAULT_STREAM
    elif handle == PER_THREAD_STREAM and hasattr(core, "PER_THREAD_DEFAULT_STREAM"):
        found = core.PER_THREAD_DEFAULT_STREAM
    else:
        found = core.Stream.from_handle(handle)
    if len(_CORE_STREAMS) > 256:
        _CORE_STREAMS.clear()
    _CORE_STREAMS[handle] = found
    return found


def as_core_stream(stream: Any, handle: int) -> Any:
    """``stream`` itself when it is a cuda.core Stream, else the memoised wrapper of ``handle``."""
    core = _cuda_core()
    if core is not None and isinstance(stream, core.Stream):
        return stream
    return core_stream(handle)


def wait_for_producers(consumer: Any, consumer_handle: int, producers: Sequence[int | None]) -> None:
    """Make ``consumer`` wait for each producer stream that is another stream (CAI v3 rule)."""
    for producer in producers:
        if producer is not None and producer != consumer_handle:
            consumer.wait(core_stream(producer))


# ---------------------------------------------------------------------------------------------
# cuda.core and driver helpers
# ---------------------------------------------------------------------------------------------

_CORE: list[Any] = []


def _cuda_core() -> Any:
    """The cuda.core module, or None when it cannot be imported."""
    if not _CORE:
        try:
            import cuda.core as core
        except Exception:  # pragma: no cover - cuda-core is a dependency
            core = None
        _CORE.append(core)
    return _CORE[0]


_SMV: list[Any] = []


def _strided_memory_view_type() -> Any:
    """cuda.core.utils.StridedMemoryView, when this cuda.core has it."""
    if not _SMV:
        try:
            from cuda.core.utils import StridedMemoryView
        except Exception:  # pragma: no cover
            StridedMemoryView = None  # noqa: N806
        _SMV.append(StridedMemoryView)
    return _SMV[0]


_DRIVER_READY: list[bool] = []


def _ensure_driver() -> None:
    """cuInit through cuda.core (once); DeviceError when there is no usable driver/GPU."""
    if _DRIVER_READY:
        return
    try:
        from cuda.core import Device

        Device()
    except Exception as exc:
        raise DeviceError(f"blasdx needs a CUDA GPU and driver: {exc}") from exc
    _DRIVER_READY.append(True)


def _check(result: Any, what: str) -> Any:
    """Raise DeviceError when a cuda.bindings call failed; return its value(s)."""
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise DeviceError(f"{what} failed: {getattr(err, 'name', err)}")
    if isinstance(result, tuple):
        return result[1] if len(result) == 2 else result[1:]
    return None


def _as_device(device: Any) -> Any:
    """A cuda.core Device from None (current), an ordinal, a Device, a CuPy device or a torch.device."""
    from cuda.core import Device

    if device is None or isinstance(device, Device):
        return Device() if device is None else device
    if isinstance(device, (int, np.integer)) and not isinstance(device, bool):
        return Device(int(device))
    if getattr(device, "type", None) == "cuda":  # torch.device
        return Device(device.index or 0)
    if isinstance(getattr(device, "id", None), int):  # cupy.cuda.Device
        return Device(device.id)
    raise ExecutionError(f"device: {device!r} is not a GPU; expected None, an ordinal, or a cuda.core Device")


def current_device_id() -> int | None:
    """Ordinal of the device of the current CUDA context, or None when no context is current."""
    from cuda.bindings import driver

    err, dev = driver.cuCtxGetDevice()
    if int(err) != 0:
        return None
    return int(dev)


# ---------------------------------------------------------------------------------------------
# blasdx's own device array
# ---------------------------------------------------------------------------------------------


class DeviceArray:
    """A typed, strided array over cuda.core device memory; exports DLPack and CAI v3.

    Made by :func:`to_device` or :meth:`from_buffer`. ``strides`` are in bytes (numpy and
    CuPy convention). ``DeviceArray`` keeps its Buffer alive; when blasdx writes into it on a
    stream, that stream is recorded and every consumer (DLPack, CAI, :func:`from_device`,
    a later ``execute`` on another stream) orders itself after it.
    """

    __slots__ = ("_buffer", "_shape", "_strides", "_dtype", "_device_id", "_ptr", "_stream", "_view", "__weakref__")

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
            strides = tuple(s * itemsize for s in _c_strides(shape))
        strides = tuple(int(s) for s in strides)
        if len(strides) != len(shape):
            raise ValueError(f"strides: {strides} has {len(strides)} entries for shape {shape}")
        base = int(buffer) if isinstance(buffer, int) else int(buffer.handle)
        ptr = base + int(offset)
        element_strides = _byte_strides_to_elements(strides, itemsize, "strides")
        low, high = _span(ptr, shape, element_strides, itemsize)
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
        return from_device(self, stream=stream)

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
        contiguous = self._strides == tuple(s * itemsize for s in _c_strides(self._shape))
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
            consumer = LEGACY_STREAM if stream is None else _canonical(int(stream))
            if consumer != self._stream:
                core_stream(consumer).wait(core_stream(self._stream))
        versioned = max_version is not None and int(max_version[0]) >= 1
        itemsize = self.itemsize
        return make_capsule(
            self._ptr,
            self._shape,
            _byte_strides_to_elements(self._strides, itemsize, "strides"),
            _dl_code_of(self._dtype),
            self.__dlpack_device__(),
            self,
            versioned=versioned,
        )


# ---------------------------------------------------------------------------------------------
# host <-> device
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
    (the current device), an ordinal or a cuda.core Device; the current device is restored
    afterwards. The copy is finished when this returns.
    """
    host = np.asarray(array)
    if host.dtype.hasobject or host.dtype.fields is not None or host.dtype.kind in "OSUMm":
        raise ExecutionError(f"array: dtype {host.dtype} cannot be copied to the GPU; expected a numeric dtype")
    if not host.dtype.isnative:
        host = host.astype(host.dtype.newbyteorder("="))
    if any(s < 0 for s in host.strides):
        host = np.ascontiguousarray(host)
    span = _host_span(host)
    dev = _as_device(device)
    previous = current_device_id()
    dev.set_current()
    try:
        from cuda.bindings import driver

        s = dev.default_stream if stream is None else as_core_stream(stream, stream_handle(stream))
        buffer = dev.allocate(max(span, 1), stream=s)
        if span:
            _check(driver.cuMemcpyHtoDAsync(int(buffer.handle), host.ctypes.data, span, s.handle), "cuMemcpyHtoDAsync")
        s.sync()
    finally:
        if previous is not None and previous != dev.device_id:
            _as_device(previous).set_current()
    return DeviceArray(buffer, host.shape, host.dtype, host.strides, device_id=dev.device_id)


def from_device(array: Any, *, stream: Any = None) -> np.ndarray:
    """Copy any device array (DeviceArray, CuPy, PyTorch, DLPack, CAI) into a new numpy array.

    The copy runs on ``stream`` (None: the array library's current stream, else the
    default stream) after the producer's pending work and is finished when this returns.
    A padded or strided array comes back compact, in the same memory order.
    """
    handle = resolve_stream(stream, (array,))
    view = as_array(array, "array", stream=handle)
    npd = _host_dtype(view.dtype, "array")
    if view.size == 0:
        return np.empty(view.shape, npd)
    from cuda.bindings import driver

    consumer = as_core_stream(stream, handle)
    wait_for_producers(consumer, handle, (view.stream,))
    low, high = view.span
    nbytes = high - low
    host = np.empty(nbytes, np.uint8)
    _check(driver.cuMemcpyDtoHAsync(host.ctypes.data, low, nbytes, consumer.handle), "cuMemcpyDtoHAsync")
    consumer.sync()
    itemsize = npd.itemsize
    out = np.ndarray(
        view.shape, npd, buffer=host, offset=view.ptr - low, strides=tuple(s * itemsize for s in view.strides)
    )
    if nbytes == view.size * itemsize and out.flags.c_contiguous | out.flags.f_contiguous:
        return out
    return out.copy(order="K")

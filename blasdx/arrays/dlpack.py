"""DLPack: reading and making capsules through ctypes (no compiled extension), and the DLPack adapter.

:func:`read_capsule` reads a legacy or versioned capsule without consuming it;
:func:`make_capsule` builds one over a device pointer (what ``DeviceArray.__dlpack__``
exports, typed: bf16, fp8 and complex keep their type). :func:`from_dlpack` is the
adapter of any array with ``__dlpack__`` / ``__dlpack_device__``: it asks the producer
for a capsule ordered before the consumer stream and keeps the capsule as the owner.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ..base.dtypes import DType
from ..base.errors import ExecutionError
from .streams import default_stream_handle
from .view import HOST_HINT, ArrayView, array_dtype, c_strides, describe, foreign_dtype

__all__ = [
    "CapsuleInfo",
    "KDL_CPU",
    "KDL_CUDA",
    "KDL_CUDA_HOST",
    "KDL_CUDA_MANAGED",
    "dl_code_of",
    "dl_dtype",
    "from_dlpack",
    "make_capsule",
    "read_capsule",
]

# DLPack device types (dlpack.h DLDeviceType)
KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13
_HOST_DEVICE_TYPES = {KDL_CPU: "host memory", KDL_CUDA_HOST: "pinned host memory"}



# ---------------------------------------------------------------------------------------------
# element types
# ---------------------------------------------------------------------------------------------

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


def dl_dtype(code: int, bits: int, lanes: int, argument: str) -> DType:
    """The DType of a DLPack (code, bits, lanes) triple."""
    if lanes != 1:
        raise ExecutionError(f"{argument}: DLPack vector element type ({code}, {bits}, lanes={lanes}) is not supported")
    name = _DL_NAMES.get((code, bits))
    if name is None:
        return foreign_dtype(f"dlpack(code={code}, bits={bits})", (bits + 7) // 8)
    if (code, bits) == (8, 8):
        return foreign_dtype("float8_e4m3 (IEEE, with infinities)", 1)
    return array_dtype(name, (bits + 7) // 8)


def dl_code_of(npd: np.dtype) -> tuple[int, int]:
    """DLPack (code, bits) for a numpy dtype (ml_dtypes included)."""
    found = _DL_CODES.get(npd.name)
    if found is not None:
        return found
    kind_codes = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
    if npd.kind in kind_codes and npd.fields is None:
        return (kind_codes[npd.kind], 8 * npd.itemsize)
    raise BufferError(f"dtype {npd} has no DLPack type code")



# ---------------------------------------------------------------------------------------------
# the adapter
# ---------------------------------------------------------------------------------------------


def from_dlpack(obj: Any, argument: str, stream: int | None, known: Any = None) -> ArrayView:
    """DLPack: ask the producer for a capsule ordered before ``stream`` and read it (kept as the owner)."""
    try:
        device_type, device_id = obj.__dlpack_device__()
    except Exception as exc:
        raise ExecutionError(f"{argument}: __dlpack_device__() failed: {exc}") from None
    device_type, device_id = int(device_type), int(device_id)
    if device_type in _HOST_DEVICE_TYPES:
        raise ExecutionError(
            f"{argument}: {describe(obj)} is in {_HOST_DEVICE_TYPES[device_type]}; {HOST_HINT}"
        )
    if device_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
        raise ExecutionError(
            f"{argument}: {describe(obj)} is on DLPack device type {device_type}; blasdx needs CUDA memory (2)"
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
    dtype = dl_dtype(info.code, info.bits, info.lanes, argument)
    return ArrayView(info.ptr, info.shape, info.strides, dtype, info.device_id, info.readonly, (obj, capsule), None)


# ---------------------------------------------------------------------------------------------
# capsules through ctypes
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
    strides = tuple(tensor.strides[i] for i in range(ndim)) if tensor.strides else c_strides(shape)
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

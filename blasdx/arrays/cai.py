"""The ``__cuda_array_interface__`` (CAI v3) adapter: numba, older CuPy, anything that exports CAI.

CAI carries no device, so the pointer's device comes from the driver; its ``stream``
field, when given, is a producer stream the launch stream waits on before the kernel
runs. bfloat16 and fp8 have no CAI type string (they export as untyped ``V``): such
arrays are refused with a pointer to DLPack.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.dtypes import DType
from ..base.errors import ExecutionError
from ..launch import devices as _devices
from .streams import canonical
from .view import ArrayView, byte_strides_to_elements, c_strides, numpy_dtype

__all__ = ["cai_dtype", "from_cai"]


def from_cai(obj: Any, argument: str, stream: int | None, known: Any = None) -> ArrayView:
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
    dtype = cai_dtype(typestr, argument)
    ptr = int(ptr or 0)
    strides_b = cai.get("strides")
    if strides_b is None:
        strides = c_strides(shape)
    else:
        strides = byte_strides_to_elements(strides_b, dtype.size, argument)
    producer = cai.get("stream") if cai.get("version", 3) >= 3 else None
    if producer is not None:
        producer = canonical(int(producer))
    device = _devices.pointer_device_id(ptr, argument) if ptr and 0 not in shape else None
    return ArrayView(ptr, shape, strides, dtype, device, bool(readonly), obj, producer)


def cai_dtype(typestr: str, argument: str) -> DType:
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
    return numpy_dtype(npd)

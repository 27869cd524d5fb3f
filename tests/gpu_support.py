"""Helpers of the GPU tests: device detection and strided torch operands built from host data."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

import blasdx as bx
from blasdx import dtypes as dt


@functools.cache
def gpu_sm() -> int | None:
    """Compute capability of device 0 as 90, 80, ...; None without a usable GPU."""
    try:
        from cuda.core import Device, system

        if system.get_num_devices() < 1:
            return None
        major, minor = Device(0).compute_capability
        return major * 10 + minor
    except Exception:  # no driver, no device
        return None


def require_gpu() -> int:
    sm = gpu_sm()
    if sm is None:
        pytest.skip("needs an NVIDIA GPU")
    return sm


def torch_dtype(value: dt.DType):
    """The torch dtype holding ``value`` (tf32 lives in float32)."""
    import torch

    return {
        "float16": torch.float16, "bfloat16": torch.bfloat16, "tfloat32": torch.float32, "float32": torch.float32,
        "float64": torch.float64, "float8_e4m3": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
        "int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32,
        "complex32": torch.complex32, "complex64": torch.complex64, "complex128": torch.complex128,
    }[value.name]


_SAME_SIZE_INT = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64, 16: np.complex128}


def host_to_torch(host: np.ndarray, value: dt.DType):
    """A CUDA tensor holding exactly ``host`` (bit-for-bit, through an integer view)."""
    import torch

    if host.dtype.kind in "fiu" and host.dtype.name in ("float16", "float32", "float64", "int8", "uint8", "int32"):
        return torch.from_numpy(np.ascontiguousarray(host)).cuda()
    if host.dtype.kind == "c" and host.dtype.itemsize in (8, 16):
        return torch.from_numpy(np.ascontiguousarray(host)).cuda()
    raw = np.ascontiguousarray(host).view(_SAME_SIZE_INT[host.dtype.itemsize])
    if raw.dtype == np.uint8:
        return torch.from_numpy(raw).cuda().view(torch_dtype(value))
    return torch.from_numpy(raw).cuda().view(torch_dtype(value))


def torch_to_host(tensor, value: dt.DType) -> np.ndarray:
    """Copy a CUDA tensor back to numpy in blasdx's host dtype for ``value``."""
    import torch

    t = tensor.detach().contiguous().cpu()
    if value.name in ("float16", "float32", "float64", "int8", "uint8", "int32", "tfloat32", "complex64", "complex128"):
        return t.numpy()
    size = t.element_size()
    raw = t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]).numpy()
    return raw.view(value.host_dtype)


def strided_operand(host: np.ndarray, value: dt.DType, row_major: bool, ld: int):
    """A (batch, rows, cols) CUDA view of ``host`` in the given order with leading dimension ``ld``.

    The storage is (batch, rows, ld) for row-major and (batch, cols, ld) for column-major;
    the padding between ``cols`` (or ``rows``) and ``ld`` holds a sentinel, never zeros.
    """
    import torch

    batch, rows, cols = host.shape
    inner, outer = (cols, rows) if row_major else (rows, cols)
    data = host if row_major else np.swapaxes(host, 1, 2)
    padded = np.empty((batch, outer, ld), dtype=host.dtype)
    padded[...] = data[:, :1, :1]  # any value from the data: padding must never be read as a result
    padded[:, :, :inner] = data
    storage = host_to_torch(padded, value)
    view = storage[:, :, :inner]
    return view if row_major else view.transpose(1, 2)


def gemm_descriptor(row: dt.Combination, size, sm: int, arrangement=None, **extra) -> bx.Descriptor:
    desc = (
        bx.Size(*size)
        + bx.Precision(row.a, row.b, row.c)
        + (bx.Type.complex if row.is_complex else bx.Type.real)
        + bx.Function.MM
        + bx.SM(sm)
        + bx.Block()
    )
    if arrangement is not None:
        desc = desc + bx.Arrangement(*arrangement)
    for op in extra.values():
        desc = desc + op
    return desc


def value_type(dtype: dt.DType, is_complex: bool) -> dt.DType:
    return dt.complex_of(dtype) if is_complex else dtype


def largest_square(row: dt.Combination, sm: int) -> int:
    """Largest s (a multiple of 8) with s x s x s of this combination fitting one block."""
    best = 8
    for s in range(8, 513, 8):
        if gemm_descriptor(row, (s, s, s), sm).is_supported:
            best = s
        else:
            break
    return best


def poison(value: dt.DType) -> float | int:
    """A value C is filled with when beta = 0: NaN for floats, a sentinel for integers."""
    return 12345 if value.integral else float("nan")


def ml_complex32():
    return ml_dtypes.complex32

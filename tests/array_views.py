"""Device-array views for the CPU tests of the array calls: nothing is allocated, only described,
and an sm_90 device that launches nothing.

``view`` is C-contiguous unless strides (in elements) are given; ``col`` is column-major (a
matrix or a batch of them). A module takes the pair with its usual element type as the default:
``view, col = views(dt.float16)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest

from blasdx.base import dtypes as dt
from blasdx.arrays import ArrayView
from blasdx.calls import matmul as array_gemm
from blasdx.launch import cuda_driver

from .tma_rules import FakeEncoder

PTR = 0x7F0000000000  # 256-byte aligned, like every allocator's


def dense(shape, dtype: dt.DType, strides=None, ptr: int = PTR, device: int = 0, readonly: bool = False) -> ArrayView:
    """A view of ``shape`` at ``ptr``; C-contiguous strides (elements, a zero extent counted as one) unless given."""
    if strides is None:
        strides, acc = [], 1
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= max(n, 1)
    return ArrayView(ptr, tuple(shape), tuple(strides), dtype, device, readonly, None)


def column_major(shape, dtype: dt.DType, ptr: int = PTR) -> ArrayView:
    """A column-major matrix, or a batch of them (each column-major, one after the other)."""
    rows, cols = shape[-2:]
    strides = (1, rows) if len(shape) == 2 else (rows * cols, 1, rows)
    return dense(shape, dtype, strides, ptr)


def views(default: dt.DType) -> tuple[Callable[..., ArrayView], Callable[..., ArrayView]]:
    """``view`` and ``col`` whose element type is ``default`` unless a call names another."""

    def view(shape, dtype: dt.DType = default, strides=None, ptr: int = PTR, device: int = 0,
             readonly: bool = False) -> ArrayView:
        return dense(shape, dtype, strides, ptr, device, readonly)

    def col(shape, dtype: dt.DType = default, ptr: int = PTR) -> ArrayView:
        return column_major(shape, dtype, ptr)

    return view, col


def fake_hopper(monkeypatch: pytest.MonkeyPatch) -> FakeEncoder:
    """Make device 0 an sm_90 GPU of 132 SMs whose tensor maps the driver's rules check; returns the encoder."""
    encoder = FakeEncoder()
    monkeypatch.setattr(array_gemm, "_device_info", lambda device_id: array_gemm._DeviceInfo(90, 132))
    monkeypatch.setattr(cuda_driver, "encode_tiled", encoder)
    return encoder


@contextlib.contextmanager
def hopper_calls(monkeypatch: pytest.MonkeyPatch, calls: dict) -> Iterator[FakeEncoder]:
    """:func:`fake_hopper` for the span of the block, with ``calls`` (a call module's remembered plans) empty
    on entry and on exit, so that no plan of another test stands in."""
    encoder = fake_hopper(monkeypatch)
    calls.clear()
    yield encoder
    calls.clear()

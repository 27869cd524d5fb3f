"""The PyTorch adapter: a CUDA ``torch.Tensor`` read through its attributes, without a DLPack capsule.

blasdx never imports torch: the adapter is chosen when torch is already loaded and the
object is a tensor. The producer stream is torch's current stream on the tensor's device.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ..base.dtypes import DType
from ..base.errors import ExecutionError
from .streams import default_stream_handle
from .view import HOST_HINT, ArrayView, array_dtype, new_view

__all__ = ["from_torch", "torch_current_stream"]


def from_torch(t: Any, argument: str, stream: int | None, known: dict[int, int] | None = None) -> ArrayView:
    """torch.Tensor through its attributes (no DLPack capsule): the producer stream is torch's current one.

    ``known`` maps devices to torch's current stream there, as already asked during this
    call (arrays read together share one dict, so the question is asked once per device).
    """
    device = t.get_device()  # -1 for CPU tensors
    if device < 0 or not t.is_cuda:
        where = t.device.type
        if where == "cpu":
            raise ExecutionError(f"{argument}: torch.Tensor of shape {tuple(t.shape)} is in host memory; {HOST_HINT}")
        raise ExecutionError(f"{argument}: torch.Tensor is on device type {where!r}; blasdx needs a CUDA tensor")
    dtype = _TORCH_TYPES.get(t.dtype)
    if dtype is None:
        dtype = _TORCH_TYPES[t.dtype] = array_dtype(t.dtype, t.element_size())
        if not dtype.is_complex:
            _TORCH_REAL.add(t.dtype)
    if t.is_neg() or (dtype.is_complex and t.is_conj()):  # a real tensor too: the .imag of a .conj() view
        raise ExecutionError(
            f"{argument}: torch.Tensor has a pending conjugation/negation bit (a lazy .conj() view, or the .imag of "
            "one); its memory holds the values before it. Call .resolve_conj() / .resolve_neg() first"
        )
    producer = None if known is None else known.get(device)
    if producer is None:
        raw = _TORCH_STREAM[0] if _TORCH_STREAM else _torch_stream_function()
        producer = raw(device) or default_stream_handle()
        if known is not None:
            known[device] = producer
    return new_view(ArrayView, (t.data_ptr(), t.shape, t.stride(), dtype, device, False, t, producer))


_TORCH_TYPES: dict[Any, DType] = {}
#: The torch dtypes of _TORCH_TYPES that are not complex: tensors of these have a hot-path key (blasdx.arrays.keys).
_TORCH_REAL: set[Any] = set()
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


def torch_current_stream(device: int, known: dict[int, int] | None = None) -> int:
    """Raw handle of torch's current stream on ``device`` (0, the default stream, -> legacy); noted in ``known``."""
    raw = _TORCH_STREAM[0] if _TORCH_STREAM else _torch_stream_function()
    handle = raw(device) or default_stream_handle()
    if known is not None:
        known[device] = handle
    return handle

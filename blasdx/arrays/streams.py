"""CUDA streams as blasdx takes them: handles, cuda.core wrappers, and ordering after producers.

A stream argument is ``None`` (the array library's current stream, see
:func:`blasdx.arrays.resolve_stream`), a cuda.core ``Stream``, anything with
``__cuda_stream__``, a CuPy (``.ptr``) or PyTorch (``.cuda_stream``) stream, a driver
``CUstream`` or an int handle. :func:`stream_handle` turns any of them into the int
handle; the null stream is spelled as the default stream's special handle (legacy, or
per-thread when ``CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM`` is set, as in cuda.core).
The special handles name the default stream *of the current context*, so a launch on
them must run with its device's context current (:mod:`blasdx.launch.devices`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..base.errors import ExecutionError
from ..launch import cuda_modules as _cuda

__all__ = [
    "LEGACY_STREAM",
    "PER_THREAD_STREAM",
    "as_core_stream",
    "canonical",
    "core_stream",
    "default_stream_handle",
    "is_default_stream",
    "stream_handle",
    "wait_for_producers",
]

# CUDA's special stream handles (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD)
LEGACY_STREAM = 1
PER_THREAD_STREAM = 2


def is_default_stream(handle: int) -> bool:
    """Whether ``handle`` names a default stream of the current context (legacy or per-thread)."""
    return handle == LEGACY_STREAM or handle == PER_THREAD_STREAM


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


def canonical(handle: int) -> int:
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
        return canonical(int(stream))
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        try:
            info = protocol() if callable(protocol) else protocol
            version, handle = info
        except Exception as exc:
            raise ExecutionError(f"{argument}: __cuda_stream__ of {type(stream).__name__} failed: {exc}") from None
        return canonical(int(handle))
    for attribute in ("cuda_stream", "ptr"):  # PyTorch, CuPy
        value = getattr(stream, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return canonical(value)
    if hasattr(stream, "getPtr"):  # cuda.bindings CUstream
        return canonical(int(stream.getPtr()))
    raise ExecutionError(
        f"{argument}: {stream!r} ({type(stream).__name__}) is not a stream; expected None, a cuda.core Stream, an "
        "object with __cuda_stream__, a CuPy or PyTorch stream, or an int cudaStream_t handle"
    )


_CORE_STREAMS: dict[int, Any] = {}


def core_stream(handle: int) -> Any:
    """A cuda.core Stream for ``handle`` (memoised; the default streams map to cuda.core's own)."""
    found = _CORE_STREAMS.get(handle)
    if found is not None:
        return found
    core = _cuda.core()
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
    if isinstance(stream, _cuda.core().Stream):
        return stream
    return core_stream(handle)


def wait_for_producers(consumer: Any, consumer_handle: int, producers: Sequence[int | None]) -> None:
    """Make ``consumer`` wait for each producer stream that is another stream (CAI v3 rule)."""
    for producer in producers:
        if producer is not None and producer != consumer_handle:
            consumer.wait(core_stream(producer))

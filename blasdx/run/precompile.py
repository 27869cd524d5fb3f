"""Compile many descriptors at once on a thread pool (NVRTC releases the GIL).

Use it at start-up or in a build step, so the first ``execute`` of each GEMM finds its
kernel in the cache; with ``devices`` it is also loaded on those GPUs, so the first
``execute`` on each of them launches at once::

    kernels = bx.precompile([GEMM_A, GEMM_B, GEMM_C], workers=8, devices="all")
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, Any

from ..base.errors import BlasdxError, DeviceError

if TYPE_CHECKING:  # pragma: no cover
    from ..compile.compiled import CompiledKernel
    from ..compile.nvrtc import CompileOptions
    from ..describe.descriptor import Descriptor

__all__ = ["precompile"]

#: Lists at least this long show progress on an interactive stderr when ``progress`` is None.
PROGRESS_THRESHOLD = 8


class _Progress:
    """A one-line ``done/total`` counter on a stream, redrawn in place."""

    def __init__(self, total: int, stream: IO[str] | None) -> None:
        self.total = total
        self.stream = stream
        self.done = 0
        self.failed = 0
        self.start = time.perf_counter()
        self.lock = threading.Lock()

    def step(self, ok: bool) -> None:
        """Count one finished descriptor and redraw."""
        with self.lock:
            self.done += 1
            self.failed += not ok
            if self.stream is not None:
                failed = f", {self.failed} failed" if self.failed else ""
                elapsed = time.perf_counter() - self.start
                self.stream.write(f"\rblasdx precompile: {self.done}/{self.total}{failed} ({elapsed:.1f} s)")
                if self.done == self.total:
                    self.stream.write("\n")
                self.stream.flush()


def _progress_stream(progress: bool | None, count: int) -> IO[str] | None:
    """stderr when asked, or when it is a terminal and the list is long; else None."""
    if progress is None:
        progress = count >= PROGRESS_THRESHOLD and sys.stderr is not None and sys.stderr.isatty()
    return sys.stderr if progress else None


def compile_descriptor(desc: Descriptor, options: CompileOptions | None) -> CompiledKernel:
    """One descriptor through both cache levels (the cache is imported on first use: importing blasdx stays light)."""
    from ..compile.cache import compile_descriptor as compile_one
    from ..compile.nvrtc import DEFAULT_OPTIONS

    return compile_one(desc, DEFAULT_OPTIONS if options is None else options)


def load_on_device(desc: Descriptor, compiled: CompiledKernel, device_id: int, options: CompileOptions | None) -> None:
    """Load ``compiled`` on ``device_id`` (DeviceError when that device cannot run it).

    With the default options the kernel is the one ``execute`` launches, so that device's
    execute plan is made; kernels of other options are loaded on the device as they are.
    """
    from ..compile.nvrtc import DEFAULT_OPTIONS
    from . import execute

    default = options is None or options == DEFAULT_OPTIONS
    execute.load_on_device(desc, device_id, None if default else compiled)


def _device_list(devices: Iterable[int] | str | None) -> tuple[int, ...]:
    """The ordinals ``devices`` names, checked before anything is compiled."""
    if devices is None:
        return ()
    from ..launch.devices import device_count

    if isinstance(devices, str):
        if devices != "all":
            raise ValueError(f"precompile: devices={devices!r}; expected 'all', device ordinals or None")
        count = device_count()
        if count == 0:
            raise DeviceError("precompile: devices='all' but there is no usable GPU")
        return tuple(range(count))
    try:
        listed = tuple(devices)
    except TypeError:
        raise ValueError(f"precompile: devices={devices!r}; expected 'all', device ordinals or None") from None
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in listed):
        raise ValueError(f"precompile: devices={devices!r}; expected ordinals (ints >= 0), 'all' or None")
    count = device_count()
    missing = sorted({d for d in listed if d >= count})
    if missing:
        raise DeviceError(f"precompile: devices {missing} do not exist; the driver sees {count} GPU(s)")
    return tuple(dict.fromkeys(listed))


def _default_workers(count: int) -> int:
    """One thread per core, at most one per descriptor."""
    return max(1, min(count, os.cpu_count() or 1, 32))


def precompile(
    descriptors: Iterable[Descriptor],
    *,
    workers: int | None = None,
    options: CompileOptions | None = None,
    devices: Iterable[int] | str | None = None,
    progress: bool | None = None,
    return_exceptions: bool = False,
) -> list[Any]:
    """Compile every descriptor (through the cache) in parallel; results in input order.

    Args:
        descriptors: complete descriptors (each is validated first).
        workers: threads; default one per CPU core.
        options: compile options for all of them (None: the defaults).
        devices: GPUs to load every kernel on (and check it runs there): ordinals, ``"all"``
            for every visible GPU, or None to compile only (no GPU needed). With the default
            options this is what the first ``execute`` on each device would do.
        progress: draw ``done/total`` on stderr; None = only for long lists on a terminal.
        return_exceptions: put each failure's exception in its slot instead of raising.

    Raises:
        BlasdxError (or the common type of all failures, e.g. CompileError): when any
        descriptor failed and ``return_exceptions`` is False; the message lists each
        failure by index and descriptor, and ``.failures`` holds
        ``(index, descriptor, exception)``. Every descriptor is attempted before raising.
    """
    items = list(descriptors)
    if workers is None:
        workers = _default_workers(len(items))
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"precompile: workers={workers!r}; expected an int >= 1")
    targets = _device_list(devices)
    meter = _Progress(len(items), _progress_stream(progress, len(items)))

    def one(desc: Descriptor) -> CompiledKernel | BaseException:
        try:
            result: CompiledKernel | BaseException = compile_descriptor(desc, options)
            for device_id in targets:
                load_on_device(desc, result, device_id, options)
        except Exception as exc:  # reported per descriptor below
            result = exc
        meter.step(not isinstance(result, BaseException))
        return result

    if not items:
        return []
    from concurrent.futures import ThreadPoolExecutor

    from ..compile.nvrtc import load_nvrtc

    if workers > 1 and len(items) > 1:
        load_nvrtc()  # import cuda.core's compiler pieces here, before the workers race to import them
    with ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix="blasdx-compile") as pool:
        results = list(pool.map(one, items))
    if return_exceptions:
        return results
    failures = [(i, d, r) for i, (d, r) in enumerate(zip(items, results)) if isinstance(r, BaseException)]
    if failures:
        raise _summary_error(failures, len(items))
    return results


def _summary_error(failures: list[tuple[int, Any, BaseException]], total: int) -> BaseException:
    """One exception naming every failed descriptor; the common type of the failures when there is one."""
    lines = [f"precompile: {len(failures)} of {total} descriptors failed:"]
    for index, desc, exc in failures:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        saved = getattr(exc, "saved_to", None)
        lines.append(f"  [{index}] {desc!r}: {type(exc).__name__}: {first}" + (f" (saved to {saved})" if saved else ""))
    kinds = {type(exc) for _, _, exc in failures}
    kind = kinds.pop() if len(kinds) == 1 else BlasdxError
    try:
        error = kind("\n".join(lines))
    except TypeError:  # an exception type with a different constructor
        error = BlasdxError("\n".join(lines))
    error.failures = failures  # type: ignore[attr-defined]
    error.__cause__ = failures[0][2]
    return error

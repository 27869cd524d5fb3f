"""A compiled kernel: its cubin, what it uses, and the cuda.core Kernel loaded from it.

Everything here works without a GPU except :meth:`CompiledKernel.kernel`, which loads
the cubin once per device (with that device current, whichever was current before) and
opts the kernel in to more than 48 KB of dynamic shared memory there.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..base.errors import DeviceError
from ..launch import cuda_modules as _cuda
from ..launch import devices as _devices
from . import host_launch as _host_launch
from .cubin import ResourceUsage, run_cuobjdump

__all__ = ["CompiledKernel", "DEFAULT_DYNAMIC_SHARED_MEMORY_LIMIT", "Forward"]

T = TypeVar("T")

#: Bytes of dynamic shared memory a kernel may use without opting in.
DEFAULT_DYNAMIC_SHARED_MEMORY_LIMIT = 48 * 1024


class _LoadState:
    """Per-object mutable state: per device, the loaded module and kernel and the shared memory opted in."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loaded: dict[int, tuple[Any, Any]] = {}  # device -> (ObjectCode, Kernel)
        self.kernels: dict[int, Any] = {}  # device -> Kernel (the hot path's look-up)
        self.dynamic_smem: dict[int, int] = {}
        self.sass: str | None = None

    def __reduce__(self) -> Any:
        return (_LoadState, ())


class Forward(Generic[T]):
    """A read-only attribute read off a member under the same name (``registers = Forward[int]("compiled", doc)``):
    the figures a wrapper shows of the kernel it wraps, one line each."""

    def __init__(self, member: str, doc: str) -> None:
        self.member, self.name, self.__doc__ = member, "", doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]  # read off the class: the descriptor itself (help, docs)
        return getattr(getattr(obj, self.member), self.name)  # type: ignore[no-any-return]

    def __set__(self, obj: Any, value: Any) -> None:
        raise AttributeError(f"{self.name} is read-only: it is {self.member}.{self.name}")


@dataclass(frozen=True, eq=False)
class CompiledKernel:
    """A compiled kernel: the cubin, what it uses, and a lazily loaded ``cuda.core.Kernel``.

    Build one with :func:`blasdx.compile.cache.cached_compile` (or, uncached, :func:`blasdx.compile.nvrtc.compile_source`). Nothing
    here needs a GPU except :meth:`kernel`.
    """

    cubin: bytes
    kernel_name: str
    arch: str
    source: str
    resources: ResourceUsage
    log: str = ""
    _state: _LoadState = field(default_factory=_LoadState, init=False, repr=False, compare=False)

    registers = Forward[int]("resources", "Registers per thread.")
    shared_memory = Forward[int]("resources", "Static shared memory in bytes (dynamic: a launch parameter).")
    local_memory = Forward[int]("resources", "Stack bytes per thread (spills, local arrays); 0 for a healthy GEMM.")

    def __repr__(self) -> str:
        r = self.resources
        return (
            f"CompiledKernel({self.kernel_name!r}, {self.arch}, {len(self.cubin)} B cubin, registers={r.registers}, "
            f"shared_memory={r.shared_memory}, local_memory={r.local_memory})"
        )

    def sass(self) -> str:
        """The SASS of the cubin, from ``cuobjdump -sass`` (needs nvidia-cuda-cuobjdump)."""
        with self._state.lock:
            if self._state.sass is None:
                self._state.sass = run_cuobjdump(self.cubin, "-sass")
            return self._state.sass

    def kernel(self, *, dynamic_shared_memory: int = 0, device_id: int | None = None) -> Any:
        """The ``cuda.core.Kernel`` loaded on ``device_id``, opted in to ``dynamic_shared_memory`` bytes.

        ``device_id`` None is the current device (device 0, made current, when none is).
        Each device loads the cubin once, with that device current (what was current is
        restored after); the opt-in (needed above 48 KB) is set once per device and raised
        when a later call asks for more. The returned kernel launches on that device only.
        """
        if not isinstance(dynamic_shared_memory, int) or dynamic_shared_memory < 0:
            raise ValueError(f"dynamic_shared_memory={dynamic_shared_memory!r}: expected bytes as an int >= 0")
        if device_id is None:
            device_id = _current_device_id()
        elif not isinstance(device_id, int) or isinstance(device_id, bool) or device_id < 0:
            raise ValueError(f"device_id={device_id!r}: expected a device ordinal (an int >= 0) or None")
        state = self._state
        found = state.kernels.get(device_id)
        if found is not None and dynamic_shared_memory <= state.dynamic_smem.get(
            device_id, DEFAULT_DYNAMIC_SHARED_MEMORY_LIMIT
        ):
            return found  # the launch hot path: no driver call
        with _devices.on_device(device_id), state.lock:
            if device_id not in state.loaded:
                state.loaded[device_id] = _load(self.cubin, self.kernel_name, device_id)
            kernel = state.loaded[device_id][1]
            granted = state.dynamic_smem.get(device_id, DEFAULT_DYNAMIC_SHARED_MEMORY_LIMIT)
            if dynamic_shared_memory > granted:
                _opt_in_dynamic_shared_memory(kernel, device_id, dynamic_shared_memory, self)
                state.dynamic_smem[device_id] = dynamic_shared_memory
            state.kernels[device_id] = kernel
            return kernel

    def loaded_devices(self) -> tuple[int, ...]:
        """The devices this kernel has been loaded on, in order."""
        return tuple(sorted(self._state.loaded))


def _current_device_id() -> int:
    """The current device's ordinal; with no current context, device 0 made current (DeviceError without a GPU)."""
    try:
        current = _devices.current_device_id()
    except Exception as exc:
        raise DeviceError(f"loading a kernel needs a CUDA GPU and driver: {exc}") from exc
    if current is not None:
        return current
    try:
        device = _cuda.core().Device()
        device.set_current()
        return int(device.device_id)
    except Exception as exc:
        raise DeviceError(f"loading a kernel needs a CUDA GPU and driver: {exc}") from exc


def _load(cubin: bytes, kernel_name: str, device_id: int) -> tuple[Any, Any]:
    """Load the cubin on the current device, ``device_id``, and look up the kernel (ObjectCode -> Kernel)."""
    _host_launch.install()  # before the kernel's first launch: blasdx's launches go through the C call
    try:
        code = _cuda.core().ObjectCode.from_cubin(cubin)
        return code, code.get_kernel(kernel_name)
    except Exception as exc:
        raise DeviceError(f"could not load kernel {kernel_name!r} on device {device_id}: {exc}") from exc


def _opt_in_dynamic_shared_memory(kernel: Any, device_id: int, nbytes: int, compiled: CompiledKernel) -> None:
    """Set the kernel's maximum dynamic shared memory on ``device_id`` (cuKernel or cuFunc API, as its handle is)."""
    driver = _devices.driver()
    device = _cuda.core().Device(device_id)
    limit = _optin_limit(device)
    static = compiled.shared_memory
    if limit is not None and nbytes + static > limit:
        raise DeviceError(
            f"dynamic_shared_memory={nbytes} B (+{static} B static) exceeds the {limit} B per block that "
            f"device {device_id} allows; reduce the tile (Size) or use a GPU with more shared memory"
        )
    attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    handle = kernel.handle
    if isinstance(handle, driver.CUkernel):
        result = driver.cuKernelSetAttribute(attribute, nbytes, handle, driver.CUdevice(device_id))
    else:
        result = driver.cuFuncSetAttribute(handle, attribute, nbytes)
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise DeviceError(f"setting max dynamic shared memory of {compiled.kernel_name} to {nbytes} B failed: {err}")


def _optin_limit(device: Any) -> int | None:
    """The opt-in shared memory per block of ``device``, when cuda.core exposes it."""
    try:
        return int(device.properties.max_shared_memory_per_block_optin)
    except Exception:  # pragma: no cover - older cuda.core
        return None

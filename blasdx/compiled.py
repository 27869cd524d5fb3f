"""A compiled kernel: its cubin, what it uses, and the cuda.core Kernel loaded from it.

Everything here works without a GPU except :meth:`CompiledKernel.kernel`, which loads
the cubin (once) and opts the kernel in to more than 48 KB of dynamic shared memory per
device.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from . import cuda_modules as _cuda
from .cubin import ResourceUsage, run_cuobjdump
from .errors import DeviceError

__all__ = ["CompiledKernel", "DEFAULT_DYNAMIC_SHARED_MEMORY_LIMIT"]

#: Bytes of dynamic shared memory a kernel may use without opting in.
DEFAULT_DYNAMIC_SHARED_MEMORY_LIMIT = 48 * 1024


class _LoadState:
    """Per-object mutable state: the loaded module and the opt-in set per device."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.object_code: Any = None
        self.kernel: Any = None
        self.dynamic_smem: dict[int, int] = {}
        self.sass: str | None = None

    def __reduce__(self) -> Any:
        return (_LoadState, ())


@dataclass(frozen=True, eq=False)
class CompiledKernel:
    """A compiled kernel: the cubin, what it uses, and a lazily loaded ``cuda.core.Kernel``.

    Build one with :func:`blasdx.nvrtc_driver.compile_source` or :func:`blasdx.cache.cached_compile`. Nothing
    here needs a GPU except :meth:`kernel`.
    """

    cubin: bytes
    kernel_name: str
    arch: str
    source: str
    resources: ResourceUsage
    log: str = ""
    _state: _LoadState = field(default_factory=_LoadState, init=False, repr=False, compare=False)

    @property
    def registers(self) -> int:
        """Registers per thread."""
        return self.resources.registers

    @property
    def shared_memory(self) -> int:
        """Static shared memory in bytes (dynamic shared memory is a launch parameter)."""
        return self.resources.shared_memory

    @property
    def local_memory(self) -> int:
        """Local memory (stack: spills, local arrays) in bytes per thread; 0 for a healthy GEMM."""
        return self.resources.local_memory

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

    def kernel(self, *, dynamic_shared_memory: int = 0) -> Any:
        """The ``cuda.core.Kernel`` on the current device, opted in to ``dynamic_shared_memory`` bytes.

        Loading happens once; the opt-in (needed above 48 KB) is set once per device and
        raised when a later call asks for more.
        """
        if not isinstance(dynamic_shared_memory, int) or dynamic_shared_memory < 0:
            raise ValueError(f"dynamic_shared_memory={dynamic_shared_memory!r}: expected bytes as an int >= 0")
        state = self._state
        loaded = state.kernel
        if loaded is not None and dynamic_shared_memory <= DEFAULT_DYNAMIC_SHARED_MEMORY_LIMIT:
            return loaded  # the launch hot path: no driver call
        device = _current_device()
        with state.lock:
            if state.kernel is None:
                state.object_code, state.kernel = _load(self.cubin, self.kernel_name)
            granted = state.dynamic_smem.get(device.device_id, DEFAULT_DYNAMIC_SHARED_MEMORY_LIMIT)
            if dynamic_shared_memory > granted:
                _opt_in_dynamic_shared_memory(state.kernel, device, dynamic_shared_memory, self)
                state.dynamic_smem[device.device_id] = dynamic_shared_memory
            return state.kernel


def _current_device() -> Any:
    """The current ``cuda.core.Device`` (made current), or DeviceError when there is no usable GPU."""
    try:
        device = _cuda.core().Device()
        device.set_current()
        return device
    except Exception as exc:
        raise DeviceError(f"loading a kernel needs a CUDA GPU and driver: {exc}") from exc


def _load(cubin: bytes, kernel_name: str) -> tuple[Any, Any]:
    """Load the cubin and look up the kernel (cuda.core ObjectCode -> Kernel)."""
    try:
        code = _cuda.core().ObjectCode.from_cubin(cubin)
        return code, code.get_kernel(kernel_name)
    except Exception as exc:
        raise DeviceError(f"could not load kernel {kernel_name!r} on the current device: {exc}") from exc


def _opt_in_dynamic_shared_memory(kernel: Any, device: Any, nbytes: int, compiled: CompiledKernel) -> None:
    """Set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (cuKernel or cuFunc API, whichever the handle is)."""
    driver = _cuda.driver()
    limit = _optin_limit(device)
    static = compiled.shared_memory
    if limit is not None and nbytes + static > limit:
        raise DeviceError(
            f"dynamic_shared_memory={nbytes} B (+{static} B static) exceeds the {limit} B per block that "
            f"device {device.device_id} allows; reduce the tile (Size) or use a GPU with more shared memory"
        )
    attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    handle = kernel.handle
    if isinstance(handle, driver.CUkernel):
        result = driver.cuKernelSetAttribute(attribute, nbytes, handle, driver.CUdevice(device.device_id))
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

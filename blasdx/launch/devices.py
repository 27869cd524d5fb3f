"""Devices and contexts: which GPU a call runs on, and making that GPU current for the call.

A kernel launched on a default stream (legacy or per-thread) runs in the context that is
current on the calling thread, and cuda.core's events and stream-ordered allocations use
that context too. A call whose operands live on device 1 while device 0 is current must
therefore switch, or device 1's pointers are used in device 0's context: an illegal
address that leaves the process unusable. :func:`enter` makes the operands' device
current for the length of a call — its primary context, the one the CUDA runtime,
PyTorch and CuPy use — and :func:`leave` restores what was current. When a context of
the right device is already current (the common case) :func:`enter` costs one driver
query and changes nothing.

Everything here reaches the driver through ``cuda.bindings.driver`` (:func:`driver`);
tests without a GPU replace that module with a fake one.
"""

from __future__ import annotations

import numbers
import threading
from typing import Any

from ..base.errors import HOST_HINT, DeviceError, ExecutionError
from . import cuda_modules as _cuda

__all__ = [
    "as_device",
    "check",
    "check_stream_device",
    "current",
    "current_device_id",
    "device_count",
    "driver",
    "ensure_driver",
    "enter",
    "leave",
    "on_device",
    "pointer_device_id",
    "primary_context",
    "stream_device_id",
]

_DRIVER: list[Any] = []
_DRIVER_READY: list[bool] = []
_PRIMARY: dict[int, Any] = {}
_PRIMARY_LOCK = threading.Lock()


def driver() -> Any:
    """The driver API module (``cuda.bindings.driver``), imported once."""
    if _DRIVER:
        return _DRIVER[0]
    found = _cuda.driver()
    _DRIVER.append(found)
    return found


def _use_driver(module: Any) -> None:
    """Make ``module`` the driver API of this process (tests pass a fake); forget the cached contexts."""
    _DRIVER[:] = [module]
    _DRIVER_READY.clear()
    _PRIMARY.clear()


def _failed(err: Any) -> bool:
    """Whether a CUresult is an error (anything but CUDA_SUCCESS, which is 0)."""
    return int(err) != 0


def check(result: Any, what: str) -> Any:
    """Raise DeviceError when a cuda.bindings call failed; return its value(s)."""
    err = result[0] if isinstance(result, tuple) else result
    if _failed(err):
        raise DeviceError(f"{what} failed: {getattr(err, 'name', err)}")
    if isinstance(result, tuple):
        return result[1] if len(result) == 2 else result[1:]
    return None


def ensure_driver() -> None:
    """``cuInit`` once; DeviceError when there is no usable driver or GPU."""
    if _DRIVER_READY:
        return
    try:
        check(driver().cuInit(0), "cuInit")
    except Exception as exc:  # no GPU, or no libcuda at all
        raise DeviceError(f"blasdx needs a CUDA GPU and driver: {exc}") from exc
    _DRIVER_READY.append(True)


def device_count() -> int:
    """How many GPUs the driver sees (0 without a driver)."""
    try:
        ensure_driver()
    except DeviceError:
        return 0
    return int(check(driver().cuDeviceGetCount(), "cuDeviceGetCount"))


def current_device_id() -> int | None:
    """Ordinal of the device of the current CUDA context, or None when no context is current.

    DeviceError when there is no usable driver or GPU.
    """
    ensure_driver()
    err, dev = driver().cuCtxGetDevice()
    if _failed(err):
        return None
    return int(dev)


def primary_context(device_id: int) -> Any:
    """The primary context of ``device_id``, retained once for the life of the process."""
    found = _PRIMARY.get(device_id)
    if found is not None:
        return found
    ensure_driver()
    drv = driver()
    with _PRIMARY_LOCK:
        found = _PRIMARY.get(device_id)
        if found is None:
            count = int(check(drv.cuDeviceGetCount(), "cuDeviceGetCount"))
            if not 0 <= device_id < count:
                raise DeviceError(f"device {device_id} does not exist: the driver sees {count} GPU(s)")
            found = check(drv.cuDevicePrimaryCtxRetain(drv.CUdevice(device_id)), f"retaining device {device_id}")
            _PRIMARY[device_id] = found
    return found


def enter(device_id: int) -> Any:
    """Make ``device_id`` current unless a context of it already is; pass the result to :func:`leave`.

    Pushes the device's primary context on the calling thread's context stack, so that
    :func:`leave` pops it and whatever was current before (or nothing) is current again.
    Returns None when nothing was pushed.
    """
    if not _DRIVER_READY:
        ensure_driver()  # DeviceError without a usable driver or GPU
    drv = _DRIVER[0]
    err, dev = drv.cuCtxGetDevice()
    if not err and int(dev) == device_id:  # CUDA_SUCCESS is 0
        return None
    context = _PRIMARY.get(device_id)
    if context is None:
        context = primary_context(device_id)
    (err,) = drv.cuCtxPushCurrent(context)
    if _failed(err):
        raise DeviceError(f"making device {device_id} current failed: {getattr(err, 'name', err)}")
    return context


def leave(token: Any) -> None:
    """Undo :func:`enter`: pop the context it pushed (nothing when it pushed none)."""
    if token is not None:
        check(driver().cuCtxPopCurrent(), "restoring the previous CUDA context")


class _Exit:
    """The exit of a call's ``with current(...)``: pop the context it pushed, or nothing when it pushed none."""

    __slots__ = ("pops",)

    def __init__(self, pops: bool) -> None:
        self.pops = pops

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        if self.pops:
            leave(self)


_POP, _STAY = _Exit(True), _Exit(False)


def current(device_id: int) -> _Exit:
    """``with current(device_id):`` — a call's body with ``device_id`` current, as :func:`enter` / :func:`leave`.

    Enters on the call (not on ``with``) and returns a stateless exit, one object per case: one driver
    query and no allocation. For full call paths; a ``with`` costs about 0.2 us more than an inline
    ``try`` / ``finally``, so the bound hot paths keep :func:`enter` / :func:`leave`.
    """
    return _STAY if enter(device_id) is None else _POP


_CORE_READY = threading.local()


def core_device(device_id: int) -> Any:
    """The cuda.core Device of ``device_id``, ready for cuda.core's own calls (allocate) in this thread.

    cuda.core refuses work on a Device that was never ``set_current()`` in the thread, even
    with its context current; call this with ``device_id`` current (after :func:`enter`),
    so that setting it current changes nothing but cuda.core's record.
    """
    device = _cuda.core().Device(device_id)
    ready = getattr(_CORE_READY, "ids", None)
    if ready is None:
        ready = _CORE_READY.ids = set()
    if device_id not in ready:
        device.set_current()
        ready.add(device_id)
    return device


class on_device:  # noqa: N801 - used like a function: ``with on_device(1): ...``
    """``with on_device(device_id):`` — :func:`enter` on entry, :func:`leave` on exit (for paths off the hot one)."""

    __slots__ = ("device_id", "_token")

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self._token: Any = None

    def __enter__(self) -> int:
        self._token = enter(self.device_id)
        return self.device_id

    def __exit__(self, *exc: Any) -> None:
        leave(self._token)


def pointer_device_id(ptr: int, argument: str = "array") -> int | None:
    """The ordinal of the GPU that holds ``ptr`` (driver pointer attribute); CAI has no device field.

    None when there is no usable driver: reading an array does not need one, so a call checks
    its arguments first and reports the missing GPU when it looks its device up.
    """
    if not _DRIVER_READY:
        try:
            ensure_driver()
        except DeviceError:
            return None
    drv = driver()
    attribute = drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    err, value = drv.cuPointerGetAttribute(attribute, ptr)
    if _failed(err):
        raise ExecutionError(
            f"{argument}: the CUDA driver does not know pointer {ptr:#x} ({getattr(err, 'name', err)}); "
            f"it is not device memory. {HOST_HINT[0].upper()}{HOST_HINT[1:]}"
        )
    return int(value)


def stream_device_id(stream: Any, handle: int, argument: str = "stream") -> int | None:
    """The device whose context owns the stream ``handle``; None for the default streams (any device's).

    ``stream`` is what the user passed (its library's attribute answers without a driver
    call: PyTorch's ``device_index``, CuPy's ``device_id``, cuda.core's ``device``);
    anything else is asked of the driver.
    """
    if handle == 0 or handle == 1 or handle == 2:  # null, legacy and per-thread default streams
        return None
    index = getattr(stream, "device_index", None)  # torch.cuda.Stream / ExternalStream
    if isinstance(index, int) and not isinstance(index, bool) and index >= 0:
        return index
    index = getattr(stream, "device_id", None)  # cupy.cuda.Stream (-1: not known)
    if isinstance(index, int) and not isinstance(index, bool) and index >= 0:
        return index
    core = _cuda.core()
    if isinstance(stream, core.Stream):
        return int(stream.device.device_id)
    return _driver_stream_device(handle, argument)


def check_stream_device(stream: Any, handle: int, device_id: int, holder: str = "the arrays are") -> None:
    """ExecutionError unless the stream the user passed belongs to ``device_id`` (default streams always do).

    ``holder`` names what lives on ``device_id`` in the message ("the arrays are", "the copy goes").
    """
    owner = stream_device_id(stream, handle)
    if owner is not None and owner != device_id:
        what = f"handle {handle:#x}" if isinstance(stream, numbers.Integral) else repr(stream)
        raise ExecutionError(
            f"stream: {what} belongs to device {owner} but {holder} on device {device_id}; a kernel or copy runs "
            f"on its arrays' device, so pass a stream of device {device_id} (or None: the current stream of the "
            "arrays' library there)"
        )


def _driver_stream_device(handle: int, argument: str) -> int:
    """Ask the driver which device the stream ``handle`` belongs to."""
    ensure_driver()
    drv = driver()
    stream = drv.CUstream(handle)
    get_device = getattr(drv, "cuStreamGetDevice", None)
    if get_device is not None:
        err, dev = get_device(stream)
        if _failed(err):
            raise ExecutionError(
                f"{argument}: the CUDA driver does not know stream handle {handle:#x} ({getattr(err, 'name', err)})"
            )
        return int(dev)
    err, context = drv.cuStreamGetCtx(stream)
    if _failed(err):
        raise ExecutionError(
            f"{argument}: the CUDA driver does not know stream handle {handle:#x} ({getattr(err, 'name', err)})"
        )
    check(drv.cuCtxPushCurrent(context), "reading a stream's device")
    try:
        return int(check(drv.cuCtxGetDevice(), "reading a stream's device"))
    finally:
        check(drv.cuCtxPopCurrent(), "restoring the previous CUDA context")


def as_device(device: Any) -> Any:
    """A cuda.core Device from None (current), an ordinal, a Device, a CuPy device or a torch.device.

    ExecutionError for anything else; DeviceError when there is no usable driver or GPU, or
    no such device (checked before cuda.core is asked, which would fail on its own terms).
    """
    if device is None:
        ordinal = None
    elif isinstance(device, numbers.Integral) and not isinstance(device, bool):
        ordinal = int(device)
    elif getattr(device, "type", None) == "cuda":  # torch.device
        ordinal = device.index or 0
    elif isinstance(getattr(device, "id", None), int):  # cupy.cuda.Device
        ordinal = device.id
    elif type(device).__module__.startswith("cuda.core") and hasattr(device, "device_id"):
        return device  # a cuda.core Device: it exists, so the driver does
    else:
        raise ExecutionError(f"device: {device!r} is not a GPU; expected None, an ordinal, or a cuda.core Device")
    ensure_driver()
    if ordinal is not None:
        count = int(check(driver().cuDeviceGetCount(), "cuDeviceGetCount"))
        if not 0 <= ordinal < count:
            raise DeviceError(f"device {ordinal} does not exist: the driver sees {count} GPU(s)")
    try:
        core = _cuda.core()
        return core.Device() if ordinal is None else core.Device(ordinal)
    except Exception as exc:  # cuda.core's own failures (its driver library, an unusable device)
        raise DeviceError(f"blasdx needs a CUDA GPU and driver: cuda.core cannot open device "
                          f"{'(current)' if ordinal is None else ordinal}: {exc}") from exc

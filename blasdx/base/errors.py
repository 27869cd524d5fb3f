"""The exception hierarchy of blasdx: every error a user can act on has its own type."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

__all__ = [
    "BlasdxError",
    "DescriptorError",
    "UnsupportedError",
    "CompileError",
    "ExecutionError",
    "DeviceError",
]


class BlasdxError(Exception):
    """Base class of every error raised by blasdx."""


class DescriptorError(BlasdxError, ValueError):
    """A description operator or a composition of them is malformed."""


class UnsupportedError(DescriptorError):
    """The description is well formed but no blasdx kernel implements it (type, SM, size)."""


class CompileError(BlasdxError):
    """NVRTC (or header discovery) failed; carries the compiler log and the generated source."""

    def __init__(self, message: str, *, log: str = "", source: str = "", saved_to: Path | None = None):
        self.log = log
        self.source = source
        self.saved_to = saved_to
        text = message
        if log:
            text += "\n--- NVRTC log ---\n" + log.strip()
        if saved_to is not None:
            text += f"\n(source and log saved to {saved_to})"
        super().__init__(text)


class ExecutionError(BlasdxError, ValueError):
    """Arguments of a launch do not match the descriptor; raised before anything is launched."""


class DeviceError(BlasdxError, RuntimeError):
    """No usable GPU, a driver that is too old, or a device the kernel was not built for."""


#: What an error about host memory tells the user to do.
HOST_HINT = "move it to the GPU (bx.to_device(x), cupy.asarray(x) or torch.as_tensor(x, device='cuda'))"

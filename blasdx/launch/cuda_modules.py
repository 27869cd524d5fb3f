"""The cuda-python modules blasdx uses, imported on first use and under one lock.

Importing ``cuda.core`` costs tens of milliseconds and loads NVRTC and the driver
bindings, which most calls never need (a descriptor's traits, a disk-cache hit), so no
blasdx module imports them at its top. And cuda.core's compiled submodules import each
other: two threads importing different pieces of it at once (``bx.precompile`` workers)
could each find the other's module half-initialised and fail with an ImportError. Every
blasdx use of cuda-python goes through the functions here, which import under one
process-wide lock, so a module is either fully imported or being imported by one thread.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType

__all__ = ["core", "driver", "nvrtc", "pathfinder", "load"]

_LOCK = threading.RLock()
_LOADED: dict[str, ModuleType] = {}


def load(name: str) -> ModuleType:
    """``importlib.import_module(name)`` for a cuda-python module, serialised with every other such import."""
    found = _LOADED.get(name)
    if found is not None:
        return found
    with _LOCK:
        found = _LOADED.get(name)
        if found is None:
            found = _LOADED[name] = importlib.import_module(name)
        return found


def core() -> ModuleType:
    """``cuda.core`` (Program, ObjectCode, Device, LaunchConfig, launch, Stream ...)."""
    return load("cuda.core")


def driver() -> ModuleType:
    """``cuda.bindings.driver``: the CUDA driver API (contexts, pointers, launches)."""
    return load("cuda.bindings.driver")


def nvrtc() -> ModuleType:
    """``cuda.bindings.nvrtc``: loads the NVRTC library on first use."""
    return load("cuda.bindings.nvrtc")


def pathfinder() -> ModuleType:
    """``cuda.pathfinder``: where the CUDA wheels put headers, libraries and tools."""
    return load("cuda.pathfinder")

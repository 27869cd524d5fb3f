"""blasdx's launch call in C (host_launch.c), built once per machine with the system's C compiler.

cuda.bindings turns each argument of ``cuLaunchKernel`` into an object on every call, which is
most of a launch's host time from Python; one C call taking plain integers costs a fraction of
it. The library is compiled like the kernels are, once, and kept beside them in the cache
folder (the build is atomic, so processes that build at once leave one good file). Where there
is no C compiler, no Python headers, no disk cache, or ``BLASDX_HOST_LAUNCH=0``, launches stay on
cuda.bindings and :func:`status` says why; nothing else changes.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from ..launch import cuda_driver as _driver
from ..launch import devices as _devices
from . import location as _location

__all__ = ["SOURCE", "build", "install", "status"]

#: The C source of the launch call.
SOURCE = Path(__file__).with_name("host_launch.c")
#: The driver functions the launch call takes, by their versioned names.
_ENTRY_POINTS = ("cuLaunchKernel", "cuCtxPushCurrent", "cuCtxPopCurrent", "cuCtxGetDevice")
_MODULE_NAME = "_blasdx_host_launch"

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}  # "done": True once install() has decided; "status": its text


def _enabled() -> bool:
    return os.environ.get("BLASDX_HOST_LAUNCH", "1").strip().lower() not in ("0", "false", "no", "off")


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def build(folder: Path) -> Path:
    """The launch call's shared library in ``folder``, compiled unless an equal build is there.

    Raises OSError or subprocess.CalledProcessError (with the compiler's output) when it cannot be built.
    """
    compiler = _compiler()
    if compiler is None:
        raise OSError("no C compiler (cc, gcc or clang; or $CC)")
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        raise OSError(f"no Python headers (Python.h) in {include}")
    source = SOURCE.read_bytes()
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    tag = hashlib.sha256(source + f"\n{sys.version}\n{suffix}\n{compiler}".encode()).hexdigest()[:16]
    target = folder / f"host_launch-{tag}{suffix}"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".host_launch-", suffix=suffix, dir=folder)
    os.close(handle)
    try:
        subprocess.run([compiler, "-O2", "-shared", "-fPIC", f"-I{include}", str(SOURCE), "-o", temporary],
                       check=True, capture_output=True, text=True, timeout=120)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return target


def _load(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(_MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, path, loader=loader)
    if spec is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _entry_points(drv: Any) -> tuple[int, ...]:
    """The driver functions' addresses as cuda.bindings resolves them (same default-stream setting)."""
    per_thread = os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0").strip() not in ("", "0")
    flags = drv.CUdriverProcAddress_flags
    flag = flags.CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM if per_thread else flags.CU_GET_PROC_ADDRESS_DEFAULT
    addresses = []
    for name in _ENTRY_POINTS:
        err, address, _found = drv.cuGetProcAddress(name.encode(), 12000, flag)
        if int(err) or not address:
            raise OSError(f"the driver has no {name} ({getattr(err, 'name', err)})")
        addresses.append(int(address))
    return tuple(addresses)


def install() -> None:
    """Launch through the C call from now on, building it first where needed; once per process (cheap after)."""
    if _STATE.get("done"):
        return
    with _LOCK:
        if _STATE.get("done"):
            return
        _STATE["status"] = _install()
        _STATE["done"] = True


def _install() -> str:
    if not _enabled():
        return "off (BLASDX_HOST_LAUNCH=0)"
    drv = _devices.driver()
    if getattr(drv, "__name__", "") != "cuda.bindings.driver" or not hasattr(drv, "cuGetProcAddress"):
        return "off (the driver module is not cuda.bindings')"
    if not _location.cache_enabled():
        return "off (no disk cache to keep the built library in)"
    try:
        module = _load(build(_location.cache_dir() / "host"))
        module.set_entry_points(*_entry_points(drv))
    except subprocess.CalledProcessError as exc:
        return f"off (the C compiler failed: {(exc.stderr or exc.stdout or '').strip()[:400]})"
    except (OSError, ImportError, subprocess.SubprocessError) as exc:
        return f"off ({exc})"
    _driver.use_host_launch(module)
    return "on"


def status() -> str:
    """How blasdx launches its kernels: "on" (the C call), "off (why)", or "not decided" before the first load."""
    return _STATE.get("status", "not decided")

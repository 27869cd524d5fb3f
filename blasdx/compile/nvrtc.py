"""The NVRTC driver: CUDA C++ -> cubin through ``cuda.core``, without a GPU.

:func:`compile_source` runs NVRTC once and returns a :class:`~blasdx.compile.compiled.CompiledKernel`;
a failure carries the NVRTC log and the source, saved to a file whose path is in the
error, and points at the offending line. :class:`CompileOptions` is the one options
object of this stage (``program_options`` makes the flags).

Set ``BLASDX_DUMP=1`` (or ``BLASDX_DUMP=<folder>``) to write every compiled source, its
PTX and its SASS to numbered files (``./blasdx_dump`` by default).

This module never caches cubins: :mod:`blasdx.compile.cache` asks the store first and calls it on a miss.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import os
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..base.errors import CompileError
from ..launch import cuda_modules as _cuda
from .compiled import CompiledKernel
from .cubin import resource_usage
from .headers import HeaderDir, KernelTree, include_dirs_for, kernel_tree

__all__ = [
    "CompileOptions",
    "CompilerStats",
    "DEFAULT_OPTIONS",
    "check_arch",
    "check_kernel_name",
    "compile_source",
    "kernel_of",
    "load_nvrtc",
    "nvrtc_identity",
    "nvrtc_version",
    "program_name",
    "stats",
]

_ARCH = re.compile(r"^sm_(\d{2,3})([af]?)$")


# ---------------------------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------------------------


class CompilerStats:
    """Counters that let tests assert what happened (e.g. "no NVRTC on a disk hit")."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.nvrtc_calls = 0

    def count_nvrtc(self) -> None:
        """Record one NVRTC compilation (cubin or PTX)."""
        with self._lock:
            self.nvrtc_calls += 1

    def reset(self) -> None:
        """Zero every counter."""
        with self._lock:
            self.nvrtc_calls = 0

    def __repr__(self) -> str:
        return f"CompilerStats(nvrtc_calls={self.nvrtc_calls})"


#: Process-wide compiler counters.
stats = CompilerStats()


# ---------------------------------------------------------------------------------------------
# options
# ---------------------------------------------------------------------------------------------


def _as_defines(value: Any) -> tuple[tuple[str, str], ...]:
    """Normalise ``defines`` (a mapping, or names / (name, value) pairs) to sorted pairs."""
    items = value.items() if isinstance(value, Mapping) else value
    out = []
    for item in items:
        if isinstance(item, str):
            out.append((item, "1"))
        elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
            out.append((item[0], str(item[1])))
        else:
            raise ValueError(f"CompileOptions: defines entry {item!r} must be 'NAME' or ('NAME', value)")
    return tuple(sorted(out))


@dataclass(frozen=True)
class CompileOptions:
    """NVRTC settings for one compile; every field optional. ``program_options`` makes the flags.

    Attributes:
        std: C++ dialect, ``"c++17"`` (what the templates need) or ``"c++20"``.
        lineinfo: emit line information (for Nsight Compute / compute-sanitizer).
        debug: device debug info (``-G``); slow code, for debugging only.
        fast_math: ``--use_fast_math``.
        max_registers: cap on registers per thread (``--maxrregcount``); may cause spills.
        defines: macros, ``{"NAME": "value"}`` or ``("NAME", ...)``; stored sorted.
        include_dirs: extra directories searched after the kernels folder (user headers of
            a fused kernel). Their content is *not* part of the cache key.
        ptxas_options: flags passed through to ptxas, e.g. ``("-O2",)``.
    """

    std: str = "c++17"
    lineinfo: bool = False
    debug: bool = False
    fast_math: bool = False
    max_registers: int | None = None
    defines: tuple[tuple[str, str], ...] = ()
    include_dirs: tuple[str, ...] = ()
    ptxas_options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.std not in ("c++17", "c++20"):
            raise ValueError(f"CompileOptions: std={self.std!r}; expected 'c++17' or 'c++20'")
        if self.max_registers is not None and (
            not isinstance(self.max_registers, int) or not 16 <= self.max_registers <= 255
        ):
            raise ValueError(f"CompileOptions: max_registers={self.max_registers!r}; expected an int in 16..255")
        object.__setattr__(self, "defines", _as_defines(self.defines))
        object.__setattr__(self, "include_dirs", tuple(str(d) for d in self.include_dirs))
        object.__setattr__(self, "ptxas_options", tuple(str(o) for o in self.ptxas_options))

    def program_options(self, *, arch: str, name: str, include_dirs: Sequence[str | Path]) -> Any:
        """The ``cuda.core.ProgramOptions`` for this compile: the one place flags are made."""
        kwargs: dict[str, Any] = {
            "name": name,
            "arch": arch,
            "std": self.std,
            "include_path": [str(d) for d in include_dirs] + list(self.include_dirs),
        }
        if self.lineinfo:
            kwargs["lineinfo"] = True
        if self.debug:
            kwargs["debug"] = True
        if self.fast_math:
            kwargs["use_fast_math"] = True
        if self.max_registers is not None:
            kwargs["max_register_count"] = self.max_registers
        if self.defines:
            kwargs["define_macro"] = [(k, v) for k, v in self.defines]
        if self.ptxas_options:
            kwargs["ptxas_options"] = list(self.ptxas_options)
        return _cuda.core().ProgramOptions(**kwargs)

    def cache_token(self) -> str:
        """A stable text of every field, for cache keys."""
        return repr(self)


DEFAULT_OPTIONS = CompileOptions()


def check_arch(arch: str) -> str:
    """Return ``arch`` if it is an NVRTC real target such as ``sm_80`` / ``sm_90a``."""
    if not isinstance(arch, str) or not _ARCH.match(arch):
        raise ValueError(f"arch={arch!r}: expected an NVRTC real target such as 'sm_80' or 'sm_90a'")
    return arch


def check_kernel_name(kernel_name: str) -> str:
    """Return ``kernel_name`` if it is a C identifier (the extern "C" __global__ name)."""
    if not isinstance(kernel_name, str) or not re.match(r"^[A-Za-z_]\w*$", kernel_name):
        raise ValueError(f"kernel_name={kernel_name!r}: expected the C identifier of an extern \"C\" __global__")
    return kernel_name


@lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library in use; part of every cache key."""
    err, major, minor = _cuda.nvrtc().nvrtcVersion()
    if int(err) != 0:  # pragma: no cover - only with a broken NVRTC
        raise CompileError(f"nvrtcVersion failed ({err}); is the NVRTC wheel (cuda-toolkit[nvrtc]) installed?")
    return (int(major), int(minor))


def load_nvrtc() -> None:
    """Import cuda.core's Program / ProgramOptions and load NVRTC now, in the calling thread.

    ``bx.precompile`` calls it before starting its workers, so that they find every
    module imported instead of importing cuda.core's pieces at the same time.
    """
    core = _cuda.core()
    _ = (core.Program, core.ProgramOptions)
    nvrtc_version()


#: Wheels that decide a cubin besides its source: NVRTC, the CUDA headers, cuda.core (which makes the flags).
IDENTITY_DISTRIBUTIONS = (
    "nvidia_cuda_nvrtc", "nvidia_cuda_cccl", "nvidia_cuda_runtime", "nvidia_cuda_crt", "cuda_core",
)


@lru_cache(maxsize=1)
def nvrtc_identity() -> str:
    """What names the compiler of a cubin in cache keys, found without loading NVRTC.

    The installed versions of the NVRTC, CUDA-header and cuda-core wheels, read from the
    names of their ``*.dist-info`` folders beside the ``nvidia`` package: a directory
    listing, where loading NVRTC to ask its version costs tens of milliseconds (and
    ``importlib.metadata`` as much again). Without an NVRTC wheel, NVRTC comes from a CUDA
    toolkit and is asked for its version.
    """
    found = _wheel_versions(IDENTITY_DISTRIBUTIONS)
    if "nvidia_cuda_nvrtc" in found:
        return " ".join(f"{name} {found[name]}" for name in IDENTITY_DISTRIBUTIONS if name in found)
    return "nvrtc {}.{}".format(*nvrtc_version())


def _wheel_versions(names: Sequence[str]) -> dict[str, str]:
    """{distribution: version} for those of ``names`` installed beside the ``nvidia`` namespace package."""
    spec = importlib.util.find_spec("nvidia")
    folders = {Path(p).parent for p in (spec.submodule_search_locations or [])} if spec else set()
    found: dict[str, str] = {}
    for folder in sorted(folders):
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            if entry.endswith(".dist-info"):
                name, _, version = entry[: -len(".dist-info")].partition("-")
                if name.lower() in names and name.lower() not in found:
                    found[name.lower()] = version
    return found


# ---------------------------------------------------------------------------------------------
# compiling
# ---------------------------------------------------------------------------------------------

_ERROR_LINE = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?:catastrophic )?error[^:]*: (?P<message>.*)$", re.M)
_dump_counter = itertools.count(1)


class _LogSink:
    """Collects what NVRTC writes to ``logs=`` (warnings of a successful compile)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> None:
        """Take a piece of the log."""
        self.parts.append(text)

    @property
    def text(self) -> str:
        """The whole log, without NUL bytes."""
        return "".join(self.parts).replace("\x00", "").strip()


def program_name(kernel_name: str) -> str:
    """The name NVRTC gives the source in its log: ``<kernel_name>.cu``."""
    return f"{kernel_name}.cu"


class _NvrtcFailed(Exception):
    """NVRTC rejected the source; carries cuda.core's message (which holds the log)."""


def _nvrtc(source: str, target: str, options: Any) -> tuple[bytes | str, str]:
    """One NVRTC run through cuda.core; returns (code, log). Counted in ``stats``."""
    stats.count_nvrtc()
    sink = _LogSink()
    program = _cuda.core().Program(source, "c++", options)
    try:
        code = program.compile(target, logs=sink).code
    except Exception as exc:
        message = str(exc)
        # drop the Program before raising: a traceback keeping it alive until the cyclic
        # GC makes cuda.core's Program.__dealloc__ fail noisily
        _close(program)
        program = None
        raise _NvrtcFailed(message) from None
    _close(program)
    return code, sink.text


def _close(program: Any) -> None:
    """Release the NVRTC program now (``close`` where this cuda.core has it)."""
    close = getattr(program, "close", None)
    if close is not None:
        close()


def _ptx(source: str, options: Any) -> str:
    """PTX of ``source``. cuda.core's PTX path asks the driver for its version, so call NVRTC directly."""
    as_bytes = getattr(options, "as_bytes", None)
    if as_bytes is None:  # pragma: no cover - older cuda.core: its own path (needs a driver)
        code, _ = _nvrtc(source, "ptx", options)
        return code if isinstance(code, str) else bytes(code).decode()
    nvrtc = _cuda.nvrtc()
    stats.count_nvrtc()
    flags = list(as_bytes("nvrtc"))
    _, program = nvrtc.nvrtcCreateProgram(source.encode(), options.name.encode(), 0, [], [])
    try:
        (err,) = nvrtc.nvrtcCompileProgram(program, len(flags), flags)
        if int(err) != 0:
            raise _NvrtcFailed(f"PTX compile failed: {err}")
        _, size = nvrtc.nvrtcGetPTXSize(program)
        buffer = b" " * size
        nvrtc.nvrtcGetPTX(program, buffer)
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return buffer.rstrip(b"\0").decode()


def _log_of(exc: BaseException) -> str:
    """The NVRTC log inside a cuda.core NVRTCError message."""
    text = str(exc).replace("\x00", "")
    marker = "compilation log:"
    return text.split(marker, 1)[1].strip() if marker in text else text.strip()


def _first_error(log: str, source: str, name: str) -> str:
    """``file:line: message`` of the first error, with the offending source line."""
    match = _ERROR_LINE.search(log)
    if match is None:
        return ""
    file, line = match["file"], int(match["line"])
    where = f"{file}:{line}: {match['message'].strip()}"
    lines = source.splitlines() if file == name else _read_lines(file)
    if 0 < line <= len(lines):
        where += f"\n  {line:5d} | {lines[line - 1]}"
    return where


def _read_lines(path: str) -> list[str]:
    """Lines of a header named in the log, or none if it cannot be read."""
    try:
        return Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return []


def _save_failure(
    directory: Path | None, source: str, log: str, kernel_name: str, arch: str, flags: str
) -> Path | None:
    """Write source + log to ``<dir>/<kernel>-<arch>-<hash>.cu``; the log is a trailing comment so lines match."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    import tempfile

    for folder in (directory, Path(tempfile.gettempdir()) / "blasdx-failed"):
        if folder is None:
            continue
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{kernel_name}-{arch}-{digest}.cu"
            comment = log.replace("*/", "* /")
            path.write_text(f"{source}\n\n/* NVRTC failed for {arch}\n{flags}\n\n{comment}\n*/\n")
            return path
        except OSError:
            continue
    return None  # pragma: no cover - no writable folder at all


def _dump_folder() -> Path | None:
    """Folder named by BLASDX_DUMP (``1`` -> ./blasdx_dump), or None when dumping is off."""
    value = os.environ.get("BLASDX_DUMP", "")
    if value in ("", "0"):
        return None
    return Path("blasdx_dump" if value == "1" else value)


def _dump(folder: Path, compiled: CompiledKernel, options: CompileOptions, include: Sequence[Path]) -> None:
    """Write numbered ``.cu``, ``.ptx`` and ``.sass`` of a fresh compile (BLASDX_DUMP)."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"{os.getpid()}-{next(_dump_counter):04d}-{compiled.kernel_name}-{compiled.arch}"
    Path(f"{stem}.cu").write_text(compiled.source)
    virtual = compiled.arch.replace("sm_", "compute_")
    ptx_options = options.program_options(arch=virtual, name=program_name(compiled.kernel_name), include_dirs=include)
    try:
        Path(f"{stem}.ptx").write_text(_ptx(compiled.source, ptx_options))
    except Exception as exc:  # a dump must never break the compile it documents
        Path(f"{stem}.ptx").write_text(f"// PTX unavailable: {exc}\n")
    try:
        Path(f"{stem}.sass").write_text(compiled.sass())
    except CompileError as exc:
        Path(f"{stem}.sass").write_text(f"// {exc}\n")
    print(f"blasdx: dumped {compiled.kernel_name} ({compiled.arch}) to {stem}.cu/.ptx/.sass", file=sys.stderr)


def compile_source(
    source: str,
    kernel_name: str,
    arch: str,
    options: CompileOptions = DEFAULT_OPTIONS,
    *,
    header_search: Sequence[HeaderDir] | None = None,
    kernels: Path | None = None,
    tree: KernelTree | None = None,
    failed_dir: Path | None = None,
) -> CompiledKernel:
    """Compile ``source`` with NVRTC to a cubin for ``arch`` (no cache, no GPU).

    Args:
        source: CUDA C++ defining ``extern "C" __global__ void <kernel_name>(...)``.
        kernel_name: the kernel to report on; it must be in the cubin.
        arch: NVRTC real target, ``sm_80`` / ``sm_90a`` ...
        options: compile settings.
        header_search: directories to look for CUDA headers in (default
            :func:`default_header_search`); pass ``()`` to simulate none.
        kernels: folder with ``blasdx/*.cuh`` put first on the include path (default
            :func:`kernels_dir`).
        tree: that folder as the caller has already read it (:func:`kernel_tree`), so it
            is not listed again; ``kernels`` is then ignored.
        failed_dir: where a failing source and its log are saved (default: a temp folder).

    Raises:
        CompileError: headers missing, NVRTC failed (``.log``, ``.source``, ``.saved_to``),
            or the kernel is not in the cubin.
    """
    check_arch(arch)
    check_kernel_name(kernel_name)
    if not isinstance(source, str):
        raise TypeError(f"source: expected CUDA C++ as str, got {type(source).__name__}")
    tree = kernel_tree(kernels) if tree is None else tree
    include = [tree.root, *include_dirs_for([source, *tree.texts], header_search, tree.folders)]
    name = program_name(kernel_name)
    program_options = options.program_options(arch=arch, name=name, include_dirs=include)
    try:
        cubin, log = _nvrtc(source, "cubin", program_options)
    except Exception as exc:
        raise _compile_error(exc, source, kernel_name, arch, include, options, failed_dir) from None
    compiled = kernel_of(bytes(cubin), kernel_name, arch, source, log)
    folder = _dump_folder()
    if folder is not None:
        _dump(folder, compiled, options, include)
    return compiled

def kernel_of(cubin: bytes, kernel_name: str, arch: str, source: str, log: str = "") -> CompiledKernel:
    """The kernel ``kernel_name`` of a cubin NVRTC made from ``source`` (any of the kernels the source defines).

    Raises:
        CompileError: the cubin has no kernel of that name.
    """
    try:
        resources = resource_usage(cubin, kernel_name)
    except ValueError as exc:
        raise CompileError(
            f"{exc}; is {kernel_name} declared extern \"C\" __global__ in the source?", source=source
        ) from None
    return CompiledKernel(cubin, kernel_name, arch, source, resources, log)


def _compile_error(
    exc: BaseException,
    source: str,
    kernel_name: str,
    arch: str,
    include: Sequence[Path],
    options: CompileOptions,
    failed_dir: Path | None,
) -> CompileError:
    """A CompileError with the log, the source, the saved file and the first error line."""
    log = _log_of(exc)
    flags = f"options: {options.cache_token()}\ninclude path: {', '.join(str(p) for p in include)}"
    saved = _save_failure(failed_dir, source, log, kernel_name, arch, flags)
    first = _first_error(log, source, program_name(kernel_name))
    message = f"NVRTC could not compile {kernel_name} for {arch}"
    if first:
        message += f"\n{first}"
    return CompileError(message, log=log, source=source, saved_to=saved)

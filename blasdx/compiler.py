"""CUDA C++ -> cubin with NVRTC (through ``cuda.core``), without a GPU.

Four jobs, each a few small functions:

* **header discovery** — find the CUDA headers a source needs (``cuda_fp16.h`` ...,
  ``crt/mma.h``, ``cuda/std/...``) in the pip wheels first, then a CUDA toolkit;
  a missing one is a :class:`~blasdx.errors.CompileError` naming every directory
  searched and the pip package that ships it;
* **compilation** — :func:`compile_source` runs NVRTC once and returns a
  :class:`CompiledKernel`; a failure carries the NVRTC log and the source, saved to
  a file whose path is in the error, and points at the offending line;
* **resource usage** — :func:`resource_usage` reads registers, static shared memory
  and the per-thread stack (spills, local arrays) straight from the cubin's ELF
  sections, the figures the driver and ``cuobjdump -res-usage`` report;
* **tools** — :meth:`CompiledKernel.sass` runs ``cuobjdump`` from the
  ``nvidia-cuda-cuobjdump`` wheel; :meth:`CompiledKernel.kernel` loads the cubin on
  the current GPU (lazily: everything else here works without one).

Set ``BLASDX_DUMP=1`` (or ``BLASDX_DUMP=<folder>``) to write every compiled source,
its PTX and its SASS to numbered files (``./blasdx_dump`` by default).

Caching lives one level up, in :mod:`blasdx.cache`; this module never caches cubins.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from .errors import CompileError, DeviceError

__all__ = [
    "CompileOptions",
    "CompiledKernel",
    "HeaderDir",
    "ResourceUsage",
    "compile_source",
    "default_header_search",
    "find_cuobjdump",
    "include_dirs_for",
    "kernel_tree",
    "kernels_dir",
    "nvrtc_version",
    "resource_usage",
    "stats",
]

#: Bytes of dynamic shared memory a kernel may use without opting in.
DEFAULT_DYNAMIC_SHARED_MEMORY_LIMIT = 48 * 1024

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
        from cuda.core import ProgramOptions

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
        return ProgramOptions(**kwargs)

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
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    if int(err) != 0:  # pragma: no cover - only with a broken NVRTC
        raise CompileError(f"nvrtcVersion failed ({err}); is the NVRTC wheel (cuda-toolkit[nvrtc]) installed?")
    return (int(major), int(minor))


# ---------------------------------------------------------------------------------------------
# the kernels folder
# ---------------------------------------------------------------------------------------------


def kernels_dir() -> Path:
    """The folder holding ``blasdx/*.cuh``: ``blasdx/kernels`` when installed, ``<repo>/kernels`` in a checkout."""
    package = Path(__file__).resolve().parent
    for candidate in (package / "kernels", package.parent / "kernels"):
        if (candidate / "blasdx").is_dir():
            return candidate
    spec = importlib.util.find_spec("blasdx.kernels")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "blasdx").is_dir():
            return Path(location)
    raise CompileError(
        "blasdx's CUDA templates (kernels/blasdx/*.cuh) are missing: looked in "
        f"{package / 'kernels'} and {package.parent / 'kernels'}; reinstall blasdx"
    )


# ---------------------------------------------------------------------------------------------
# header discovery
# ---------------------------------------------------------------------------------------------

_PACKAGES = {
    "cudart": 'cuda-toolkit[cudart] (nvidia-cuda-runtime): pip install "cuda-toolkit[cudart]"',
    "crt": 'nvidia-cuda-crt: pip install "cuda-toolkit[crt]"',
    "cccl": 'nvidia-cuda-cccl: pip install "cuda-toolkit[cccl]"',
}
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)
_CUDART_EXTRA = frozenset({"mma.h", "device_types.h", "builtin_types.h", "driver_types.h", "channel_descriptor.h"})


@dataclass(frozen=True)
class HeaderDir:
    """One directory of the header search path and who proposed it (for error messages)."""

    path: Path
    origin: str

    def __str__(self) -> str:
        return f"{self.path} ({self.origin})"


def header_family(name: str) -> str | None:
    """Which pip package family ships the CUDA header ``name``; None for anything else."""
    if name.startswith("crt/"):
        return "crt"
    if name.startswith(("cuda/", "nv/", "cub/", "thrust/")):
        return "cccl"
    if name in _CUDART_EXTRA or (
        name.startswith(("cuda_", "vector_", "cooperative_groups", "sm_")) and name.endswith((".h", ".hpp"))
    ):
        return "cudart"
    return None


def _implied_headers(name: str) -> tuple[tuple[str, bool], ...]:
    """Headers that ``name`` pulls in, as (header, required): ``mma.h`` needs ``crt/mma.h``."""
    if name == "mma.h":
        return (("crt/mma.h", True),)
    if header_family(name) == "cudart":
        return (("nv/target", False),)  # NVRTC has a built-in copy; use the wheel's when present
    return ()


def _pathfinder_dirs() -> list[HeaderDir]:
    """Header folders cuda.pathfinder finds (pip wheels, conda, CUDA_HOME), when it can."""
    try:
        import cuda.pathfinder as pathfinder
    except ImportError:  # pragma: no cover - cuda-pathfinder is a dependency
        return []
    find = getattr(pathfinder, "find_nvidia_header_directory", None)
    if find is None:  # pragma: no cover - very old cuda-pathfinder
        return []
    out = []
    for libname in ("cudart", "nvrtc", "crt", "cccl"):
        try:
            found = find(libname)
        except Exception:  # unknown libname in this version, or nothing installed
            continue
        if found:
            out.append(HeaderDir(Path(found), f"cuda.pathfinder {libname}"))
    return out


def _toolkit_dirs(root: str | Path, origin: str) -> list[HeaderDir]:
    """``<root>/include`` and ``<root>/include/cccl`` of a CUDA toolkit."""
    include = Path(root) / "include"
    return [HeaderDir(include, origin), HeaderDir(include / "cccl", origin)]


def default_header_search() -> tuple[HeaderDir, ...]:
    """Where headers are looked for, in order: cuda.pathfinder, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda."""
    candidates = _pathfinder_dirs()
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates += _toolkit_dirs(os.environ[var], f"${var}")
    candidates += _toolkit_dirs("/usr/local/cuda", "default toolkit location")
    seen: set[Path] = set()
    unique = []
    for c in candidates:
        key = c.path.resolve() if c.path.exists() else c.path
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return tuple(unique)


@lru_cache(maxsize=4096)
def _has_header(directory: Path, name: str) -> bool:
    """Whether ``directory/name`` is a file (memoised: header folders do not change under us)."""
    return (directory / name).is_file()


def needed_headers(texts: Iterable[str], local_dirs: Sequence[Path] = ()) -> dict[str, bool]:
    """CUDA headers the texts include (and what those imply) -> whether each is required."""
    needed: dict[str, bool] = {}
    for text in texts:
        for name in _INCLUDE.findall(text):
            if header_family(name) is None or any(_has_header(d, name) for d in local_dirs):
                continue
            needed[name] = True
            for implied, required in _implied_headers(name):
                needed[implied] = needed.get(implied, False) or required
    return needed


def include_dirs_for(
    texts: Iterable[str], search: Sequence[HeaderDir] | None = None, local_dirs: Sequence[Path] = ()
) -> list[Path]:
    """Directories that supply the CUDA headers ``texts`` include, in search order.

    Each header is taken from the first directory that has it; every directory that
    supplies one is returned. A required header found nowhere raises CompileError.
    """
    search = default_header_search() if search is None else tuple(search)
    needed = needed_headers(texts, local_dirs)
    chosen: list[Path] = []
    missing = []
    for name, required in sorted(needed.items()):
        home = next((d.path for d in search if _has_header(d.path, name)), None)
        if home is None:
            if required:
                missing.append(name)
        elif home not in chosen:
            chosen.append(home)
    if missing:
        raise CompileError(_missing_headers_message(missing, search))
    order = {d.path: i for i, d in enumerate(search)}
    return sorted(chosen, key=order.__getitem__)


def _missing_headers_message(missing: Sequence[str], search: Sequence[HeaderDir]) -> str:
    """Which headers are missing, where we looked, and which pip package ships each."""
    lines = ["CUDA headers not found, so NVRTC cannot compile this source:"]
    for name in missing:
        lines.append(f"  {name}: install {_PACKAGES[header_family(name) or 'cudart']}")
    lines.append("Searched, in order:")
    lines += [f"  {d}" for d in search] or ["  (no directories: cuda.pathfinder found none, CUDA_HOME is unset)"]
    lines.append("Install the packages named above, or set CUDA_HOME to a CUDA toolkit that has them.")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# resource usage from the cubin (ELF)
# ---------------------------------------------------------------------------------------------

# EIATTR codes of NVIDIA's .nv.info sections (as printed by `cuobjdump -elf`)
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_MIN_STACK_SIZE = 0x12
_EIATTR_MAX_STACK_SIZE = 0x23
_EIATTR_REGCOUNT = 0x2F
_EIATTR_MAX_THREADS = 0x05
_EIATTR_REQNTID = 0x10
_EIFMT_SVAL = 4
#: Shared memory the system reserves per block on sm_80+ (cudaDevAttrReservedSharedMemoryPerBlock).
_RESERVED_SHARED_MEMORY = 1024


@dataclass(frozen=True)
class ResourceUsage:
    """What one kernel of a cubin uses, as ``cuobjdump -res-usage`` reports it.

    Attributes:
        registers: registers per thread.
        shared_memory: static shared memory in bytes (``__shared__`` arrays), as the driver
            reports it (``CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES``). Dynamic shared memory is a
            launch parameter and not in here.
        local_memory: stack bytes per thread: register spills and local arrays. A GEMM
            kernel should have 0.
        frame_size: the kernel's own stack frame (``local_memory`` adds callees).
        constant_memory: bytes of constant bank 0 (kernel parameters and driver data).
        max_threads: ``__launch_bounds__`` / ``__maxnthreads__`` if the kernel declares one.
        reserved_shared_memory: the system-reserved shared memory (1 KB) that ptxas lays
            out at the start of the kernel's shared window on sm_90+ when the kernel uses
            it. ``cuobjdump``'s SHARED is ``shared_memory + reserved_shared_memory``; the
            driver leaves it out, since every block on sm_80+ has it reserved anyway.
    """

    registers: int
    shared_memory: int
    local_memory: int
    frame_size: int = 0
    constant_memory: int = 0
    max_threads: int | None = None
    reserved_shared_memory: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (for the on-disk cache and JSON output)."""
        return {
            "registers": self.registers,
            "shared_memory": self.shared_memory,
            "local_memory": self.local_memory,
            "frame_size": self.frame_size,
            "constant_memory": self.constant_memory,
            "max_threads": self.max_threads,
            "reserved_shared_memory": self.reserved_shared_memory,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResourceUsage:
        """Inverse of ``as_dict``."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class _Section:
    """The fields of an ELF section header that the parser needs."""
    name: str
    type: int
    flags: int
    offset: int
    size: int
    info: int


def _elf_sections(image: bytes) -> list[_Section]:
    """Section headers of a 64-bit little-endian ELF (what NVRTC emits as cubin)."""
    if image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
        raise ValueError("cubin: not a 64-bit little-endian ELF image (a fatbin or PTX?)")
    shoff, = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
    strtab_off, strtab_size = raw[shstrndx][4], raw[shstrndx][5]
    names = image[strtab_off : strtab_off + strtab_size]

    def name_at(offset: int) -> str:
        return names[offset : names.index(b"\0", offset)].decode()

    return [_Section(name_at(r[0]), r[1], r[2], r[4], r[5], r[7]) for r in raw]


def _elf_symbols(image: bytes, sections: Sequence[_Section]) -> list[str]:
    """Symbol names by index from .symtab."""
    symtab = next((s for s in sections if s.name == ".symtab"), None)
    strtab = next((s for s in sections if s.name == ".strtab"), None)
    if symtab is None or strtab is None:
        return []
    strings = image[strtab.offset : strtab.offset + strtab.size]
    out = []
    for off in range(symtab.offset, symtab.offset + symtab.size, 24):
        name_off, = struct.unpack_from("<I", image, off)
        out.append(strings[name_off : strings.index(b"\0", name_off)].decode())
    return out


def _eiattrs(data: bytes) -> Iterable[tuple[int, int, bytes]]:
    """(format, attribute, payload) of each .nv.info entry."""
    pos = 0
    while pos + 4 <= len(data):
        fmt, attr, value = struct.unpack_from("<BBH", data, pos)
        if fmt == _EIFMT_SVAL:
            yield fmt, attr, data[pos + 4 : pos + 4 + value]
            pos += 4 + value
        else:
            yield fmt, attr, data[pos + 2 : pos + 4]
            pos += 4


def kernel_names(cubin: bytes) -> list[str]:
    """Names of the kernels (``.text.<name>`` sections) in a cubin."""
    return [s.name[len(".text."):] for s in _elf_sections(cubin) if s.name.startswith(".text.")]


def resource_usage(cubin: bytes, kernel_name: str) -> ResourceUsage:
    """Registers, static shared, stack of ``kernel_name`` read from the cubin's ELF, no GPU needed."""
    sections = _elf_sections(cubin)
    by_name = {s.name: s for s in sections}
    text = by_name.get(f".text.{kernel_name}")
    if text is None:
        found = ", ".join(kernel_names(cubin)) or "none"
        raise ValueError(f"kernel_name={kernel_name!r} is not in the cubin (kernels in it: {found})")
    symbols = _elf_symbols(cubin, sections)
    values: dict[int, int] = {}
    info = by_name.get(".nv.info")
    if info is not None:  # global table: (symbol index, value) per kernel
        for fmt, attr, payload in _eiattrs(cubin[info.offset : info.offset + info.size]):
            if fmt == _EIFMT_SVAL and len(payload) == 8:
                sym, value = struct.unpack("<II", payload)
                if sym < len(symbols) and symbols[sym] == kernel_name:
                    values[attr] = value
    max_threads = None
    own = by_name.get(f".nv.info.{kernel_name}")
    if own is not None:
        for fmt, attr, payload in _eiattrs(cubin[own.offset : own.offset + own.size]):
            if attr in (_EIATTR_MAX_THREADS, _EIATTR_REQNTID) and fmt == _EIFMT_SVAL and len(payload) == 12:
                x, y, z = struct.unpack("<III", payload)
                max_threads = x * y * z
    shared = by_name.get(f".nv.shared.{kernel_name}")
    shared_size = shared.size if shared else 0
    # ptxas puts the reserved window first in the kernel's shared section when it is used
    uses_reserved = any(name.startswith(".nv.shared.reserved.") for name in by_name)
    reserved = _RESERVED_SHARED_MEMORY if uses_reserved and shared_size >= _RESERVED_SHARED_MEMORY else 0
    const = by_name.get(f".nv.constant0.{kernel_name}")
    frame = values.get(_EIATTR_FRAME_SIZE, 0)
    stack = values.get(_EIATTR_MIN_STACK_SIZE, values.get(_EIATTR_MAX_STACK_SIZE, frame))
    return ResourceUsage(
        registers=values.get(_EIATTR_REGCOUNT, (text.flags >> 24) & 0xFF),
        shared_memory=shared_size - reserved,
        local_memory=stack,
        frame_size=frame,
        constant_memory=const.size if const else 0,
        max_threads=max_threads,
        reserved_shared_memory=reserved,
    )


# ---------------------------------------------------------------------------------------------
# cuobjdump
# ---------------------------------------------------------------------------------------------


def _wheel_bin_dirs() -> list[Path]:
    """``bin`` folders of the nvidia-* wheels (CUDA 13 and CUDA 12 layouts)."""
    spec = importlib.util.find_spec("nvidia")
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    return [r / sub / "bin" for r in roots for sub in ("cu13", "cu12", "cuda_cuobjdump")]


def find_cuobjdump() -> str:
    """Path of ``cuobjdump``: cuda.pathfinder, the wheel's bin, $CUDA_HOME/bin, then PATH."""
    exe = "cuobjdump.exe" if sys.platform == "win32" else "cuobjdump"
    try:
        import cuda.pathfinder as pathfinder

        find = getattr(pathfinder, "find_nvidia_binary_utility", None)
        found = find("cuobjdump") if find else None
        if found:
            return str(found)
    except Exception:
        pass
    folders = _wheel_bin_dirs()
    folders += [Path(os.environ[v]) / "bin" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    for folder in folders:
        if (folder / exe).is_file():
            return str(folder / exe)
    on_path = shutil.which(exe)
    if on_path:
        return on_path
    raise CompileError(
        "cuobjdump not found (needed for SASS): looked in cuda.pathfinder, the nvidia wheels' bin folders, "
        '$CUDA_HOME/bin and PATH; install it with: pip install nvidia-cuda-cuobjdump'
    )


def run_cuobjdump(cubin: bytes, *flags: str) -> str:
    """Run ``cuobjdump <flags> <cubin>`` and return its output."""
    tool = find_cuobjdump()
    with tempfile.TemporaryDirectory(prefix="blasdx-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        done = subprocess.run([tool, *flags, str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        raise CompileError(f"cuobjdump {' '.join(flags)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


# ---------------------------------------------------------------------------------------------
# the compiled kernel
# ---------------------------------------------------------------------------------------------


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

    Build one with :func:`compile_source` or :func:`blasdx.cache.cached_compile`. Nothing
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
        from cuda.core import Device

        device = Device()
        device.set_current()
        return device
    except Exception as exc:
        raise DeviceError(f"loading a kernel needs a CUDA GPU and driver: {exc}") from exc


def _load(cubin: bytes, kernel_name: str) -> tuple[Any, Any]:
    """Load the cubin and look up the kernel (cuda.core ObjectCode -> Kernel)."""
    from cuda.core import ObjectCode

    try:
        code = ObjectCode.from_cubin(cubin)
        return code, code.get_kernel(kernel_name)
    except Exception as exc:
        raise DeviceError(f"could not load kernel {kernel_name!r} on the current device: {exc}") from exc


def _opt_in_dynamic_shared_memory(kernel: Any, device: Any, nbytes: int, compiled: CompiledKernel) -> None:
    """Set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (cuKernel or cuFunc API, whichever the handle is)."""
    from cuda.bindings import driver

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
    from cuda.core import Program

    stats.count_nvrtc()
    sink = _LogSink()
    program = Program(source, "c++", options)
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
    from cuda.bindings import nvrtc

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
        failed_dir: where a failing source and its log are saved (default: a temp folder).

    Raises:
        CompileError: headers missing, NVRTC failed (``.log``, ``.source``, ``.saved_to``),
            or the kernel is not in the cubin.
    """
    check_arch(arch)
    check_kernel_name(kernel_name)
    if not isinstance(source, str):
        raise TypeError(f"source: expected CUDA C++ as str, got {type(source).__name__}")
    tree = kernel_tree(kernels)
    include = [tree.root, *include_dirs_for([source, *tree.texts], header_search, tree.folders)]
    name = program_name(kernel_name)
    program_options = options.program_options(arch=arch, name=name, include_dirs=include)
    try:
        cubin, log = _nvrtc(source, "cubin", program_options)
    except Exception as exc:
        raise _compile_error(exc, source, kernel_name, arch, include, options, failed_dir) from None
    cubin = bytes(cubin)
    try:
        resources = resource_usage(cubin, kernel_name)
    except ValueError as exc:
        raise CompileError(
            f"{exc}; is {kernel_name} declared extern \"C\" __global__ in the source?", source=source
        ) from None
    compiled = CompiledKernel(cubin, kernel_name, arch, source, resources, log)
    folder = _dump_folder()
    if folder is not None:
        _dump(folder, compiled, options, include)
    return compiled


@dataclass(frozen=True)
class KernelTree:
    """A snapshot of the kernels folder: content digest (for cache keys) and header texts."""

    root: Path
    digest: str
    texts: tuple[str, ...]
    folders: tuple[Path, ...]


_HEADER_SUFFIXES = (".cuh", ".cu", ".h", ".hpp", ".inl")
_trees: dict[Path, tuple[tuple[Any, ...], KernelTree]] = {}


def kernel_tree(root: Path | None = None) -> KernelTree:
    """Digest and texts of every file under ``root`` (default :func:`kernels_dir`), memoised on their stat."""
    root = kernels_dir() if root is None else Path(root)
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    signature = tuple((p, *_stat(p)) for p in files)
    cached = _trees.get(root)
    if cached is not None and cached[0] == signature:
        return cached[1]
    digest = hashlib.sha256()
    texts = []
    for p in files:
        data = p.read_bytes()
        digest.update(f"{p.relative_to(root).as_posix()}\0{len(data)}\0".encode() + data)
        if p.suffix in _HEADER_SUFFIXES:
            texts.append(data.decode(errors="replace"))
    folders = (root, *sorted({p.parent for p in files} - {root}))
    tree = KernelTree(root, digest.hexdigest(), tuple(texts), folders)
    _trees[root] = (signature, tree)
    return tree


def _stat(path: Path) -> tuple[int, int]:
    """(mtime_ns, size): what tells a changed file from an unchanged one."""
    st = path.stat()
    return (st.st_mtime_ns, st.st_size)


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

"""What a cubin holds, read without a GPU: resource usage from its ELF, SASS from cuobjdump.

* :func:`resource_usage` reads registers, static shared memory and the per-thread stack
  (spills, local arrays) straight from the cubin's ELF sections, the figures the driver
  and ``cuobjdump -res-usage`` report;
* :func:`run_cuobjdump` runs ``cuobjdump`` from the ``nvidia-cuda-cuobjdump`` wheel (SASS).
"""

from __future__ import annotations

import importlib.util
import os
import struct
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CompileError
from ..launch import cuda_modules as _cuda

__all__ = ["ResourceUsage", "find_cuobjdump", "kernel_names", "resource_usage", "run_cuobjdump"]


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
        pathfinder = _cuda.pathfinder()
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
    import shutil

    on_path = shutil.which(exe)
    if on_path:
        return on_path
    raise CompileError(
        "cuobjdump not found (needed for SASS): looked in cuda.pathfinder, the nvidia wheels' bin folders, "
        '$CUDA_HOME/bin and PATH; install it with: pip install nvidia-cuda-cuobjdump'
    )


def run_cuobjdump(cubin: bytes, *flags: str) -> str:
    """Run ``cuobjdump <flags> <cubin>`` and return its output."""
    import subprocess
    import tempfile

    tool = find_cuobjdump()
    with tempfile.TemporaryDirectory(prefix="blasdx-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        done = subprocess.run([tool, *flags, str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        raise CompileError(f"cuobjdump {' '.join(flags)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout

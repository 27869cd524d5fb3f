"""What a cubin holds, read without a GPU: resource usage from its ELF, SASS from cuobjdump.

* :func:`resource_usage` reads registers, static shared memory and the per-thread stack
  (spills, local arrays) straight from the cubin's ELF sections, the figures the driver
  and ``cuobjdump -res-usage`` report;
* :func:`run_cuobjdump` runs ``cuobjdump`` from the ``nvidia-cuda-cuobjdump`` wheel (SASS);
* :func:`prefetch_sass` disassembles many cubins with one ``cuobjdump -sass`` run per architecture
  (each run pays some 0.3-0.6 CPU-s of disassembler start-up, whatever the size of the cubin), for
  the ``run_cuobjdump(cubin, "-sass")`` calls that follow.
"""

from __future__ import annotations

import importlib.util
import os
import re
import struct
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.errors import CompileError
from ..launch import cuda_modules as _cuda

__all__ = ["ResourceUsage", "find_cuobjdump", "kernel_names", "prefetch_sass", "resource_usage", "run_cuobjdump",
           "sass_of_cubins"]


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
    """Run ``cuobjdump <flags> <cubin>`` and return its output (``-sass`` of a prefetched cubin: that text, once)."""
    if flags == ("-sass",):
        with _prefetched_lock:
            text = _prefetched.pop(cubin, None)
        if text is not None:
            return text
    return _cuobjdump_file(cubin, flags)


def _cuobjdump_file(image: bytes, flags: Sequence[str]) -> str:
    """``cuobjdump <flags>`` of one ELF image written to a temporary file."""
    import subprocess
    import tempfile

    tool = find_cuobjdump()
    with tempfile.TemporaryDirectory(prefix="blasdx-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(image)
        done = subprocess.run([tool, *flags, str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        raise CompileError(f"cuobjdump {' '.join(flags)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


# ---------------------------------------------------------------------------------------------
# SASS of many cubins per cuobjdump run
# ---------------------------------------------------------------------------------------------

#: SASS made by prefetch_sass, by cubin, until run_cuobjdump(cubin, "-sass") takes it.
_prefetched: dict[bytes, str] = {}
_prefetched_lock = __import__("threading").Lock()
_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_SHT_SYMTAB, _SHT_STRTAB, _SHT_RELA, _SHT_NOBITS, _SHT_REL = 2, 3, 4, 8, 9
_SHF_INFO_LINK = 0x40
_FUNCTION = "\t\tFunction : "


def prefetch_sass(cubins: Iterable[bytes], *, batch: int = 64) -> None:
    """Disassemble ``cubins`` now, a cuobjdump run per architecture and ``batch`` cubins, for the
    ``run_cuobjdump(cubin, "-sass")`` (``CompiledKernel.sass()``) of each that follows."""
    todo = list(dict.fromkeys(c for c in cubins if c not in _prefetched))
    texts = sass_of_cubins(todo, batch=batch)
    with _prefetched_lock:
        _prefetched.update(zip(todo, texts))


def sass_of_cubins(cubins: Sequence[bytes], *, batch: int = 64) -> list[str]:
    """``cuobjdump -sass`` of each cubin, the same text, from one run per architecture and ``batch`` cubins.

    The cubins of one architecture go into one ELF image (their sections side by side, the
    symbol tables joined); cuobjdump lists its functions in order, each as it would alone,
    but for a ``__<n>`` that it adds to a name already seen, which is taken off again.
    """
    out: list[str | None] = [None] * len(cubins)
    groups: dict[int, list[int]] = {}
    for i, cubin in enumerate(cubins):
        groups.setdefault(_architecture(cubin), []).append(i)
    for members in groups.values():
        for start in range(0, len(members), batch):
            part = members[start:start + batch]
            if len(part) == 1:
                out[part[0]] = _cuobjdump_file(cubins[part[0]], ("-sass",))
                continue
            merged = _cuobjdump_file(_joined_elf([cubins[i] for i in part]), ("-sass",))
            for i, text in zip(part, _split_sass(merged, [kernel_names(cubins[i]) for i in part])):
                out[i] = text
    return [text for text in out if text is not None]


def _architecture(cubin: bytes) -> tuple[Any, ...]:
    """What cuobjdump prints of a cubin's target: the ELF identification, type, machine and flags,
    and the ``.nv.compat`` section (which tells sm_90a from sm_90)."""
    header = _ELF_HEADER.unpack_from(cubin, 0)
    compat = [cubin[s.offset:s.offset + s.size] for s in _elf_sections(cubin) if s.name == ".nv.compat"]
    return (*header[:4], header[7], *compat)


def _split_sass(merged: str, names: Sequence[Sequence[str]]) -> list[str]:
    """The joined image's SASS cut back into each cubin's, given each cubin's function names in order.

    cuobjdump pads every instruction to the longest instruction of its output (the encodings
    start at one column): each cubin's text gets the padding of its own longest instruction back.
    """
    head, *blocks = merged.split(_FUNCTION)
    if len(blocks) != sum(len(n) for n in names):
        raise CompileError(f"cuobjdump -sass of joined cubins: {len(blocks)} functions, expected "
                           f"{sum(len(n) for n in names)}")
    widest = _widest_instruction(merged)
    texts, at = [], 0
    for own in names:
        parts = [head]
        for name in own:
            block = blocks[at]
            at += 1
            shown, rest = block.split("\n", 1)
            suffix = shown[len(name):]
            if not shown.startswith(name) or (suffix and not (suffix[:2] == "__" and suffix[2:].isdigit())):
                raise CompileError(f"cuobjdump -sass of joined cubins: function {shown!r} where {name!r} was expected")
            parts.append(f"{_FUNCTION}{name}\n{rest}")
        text = "".join(parts)
        texts.append(_ENCODING.sub(lambda m, cut=widest - _widest_instruction(text): m.group(1)[cut:] + "/* 0x", text))
    return texts


#: The padding before an instruction's encoding ("/* 0x...") in cuobjdump -sass.
_ENCODING = re.compile(r"( +)/\* 0x")
#: An instruction line: address, then the instruction up to the padding before its encoding.
_INSTRUCTION_TEXT = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(\S.*?) +/\* 0x", re.MULTILINE)


def _widest_instruction(sass: str) -> int:
    """Width of the widest instruction line (address digits, then predicate to ``;``) in cuobjdump -sass output."""
    return max((len(m.group(1)) + len(m.group(2)) for m in _INSTRUCTION_TEXT.finditer(sass)), default=0)


def _joined_elf(cubins: Sequence[bytes]) -> bytes:
    """One ELF image holding the sections of all ``cubins`` (one architecture): indices renumbered,
    symbol tables and string tables joined, the header of the first."""
    shstrtab, strtab = bytearray(b"\0"), bytearray(b"\0")

    def add(table: bytearray, text: bytes) -> int:
        table.extend(text + b"\0")
        return len(table) - len(text) - 1

    symbols = [bytes(_SYMBOL.size)]
    kept: list[tuple[list[int], bytes]] = []
    next_index = 4  # 0 null, 1 .shstrtab, 2 .strtab, 3 .symtab
    for cubin in cubins:
        header = _ELF_HEADER.unpack_from(cubin, 0)
        raw = [list(_SECTION.unpack_from(cubin, header[6] + i * header[11])) for i in range(header[12])]
        names = raw[header[13]]
        symtab = next(i for i, r in enumerate(raw) if r[1] == _SHT_SYMTAB)
        strings = cubin[raw[raw[symtab][6]][4]:][:raw[raw[symtab][6]][5]]
        own = [i for i in range(1, len(raw)) if i != symtab and i != header[13] and i != raw[symtab][6]]
        index = {i: next_index + k for k, i in enumerate(own)} | {symtab: 3}
        next_index += len(own)
        first_symbol = len(symbols)
        table = cubin[raw[symtab][4]:][:raw[symtab][5]]
        for at in range(_SYMBOL.size, len(table), _SYMBOL.size):
            name, info, other, shndx, value, size = _SYMBOL.unpack_from(table, at)
            shndx = index.get(shndx, 0) if 0 < shndx < 0xFF00 else shndx
            symbols.append(_SYMBOL.pack(add(strtab, strings[name:strings.index(b"\0", name)]), info, other, shndx,
                                        value, size))
        for i in own:
            section = list(raw[i])
            name_at = cubin[names[4] + section[0]:]
            data = b"" if section[1] == _SHT_NOBITS else cubin[section[4]:section[4] + section[5]]
            section[0] = add(shstrtab, name_at[:name_at.index(b"\0")])
            section[6] = index.get(section[6], 0)
            if section[1] in (_SHT_REL, _SHT_RELA) or section[2] & _SHF_INFO_LINK:
                section[7] = index.get(section[7], 0)
            if section[1] in (_SHT_REL, _SHT_RELA):  # relocations name symbols of the joined table
                entry = 24 if section[1] == _SHT_RELA else 16
                moved = bytearray(data)
                for at in range(0, len(moved), entry):
                    info, = struct.unpack_from("<Q", moved, at + 8)
                    symbol = (info >> 32) - 1 + first_symbol if info >> 32 else 0
                    struct.pack_into("<Q", moved, at + 8, (symbol << 32) | (info & 0xFFFFFFFF))
                data = bytes(moved)
            kept.append((section, data))
    symbol_bytes = b"".join(symbols)
    fixed = [([add(shstrtab, b".shstrtab"), _SHT_STRTAB, 0, 0, 0, 0, 0, 0, 1, 0], b""),
             ([add(shstrtab, b".strtab"), _SHT_STRTAB, 0, 0, 0, len(strtab), 0, 0, 1, 0], bytes(strtab)),
             ([add(shstrtab, b".symtab"), _SHT_SYMTAB, 0, 0, 0, len(symbol_bytes), 2, len(symbols), 8, _SYMBOL.size],
              symbol_bytes)]
    fixed[0] = (fixed[0][0], bytes(shstrtab))
    fixed[0][0][5] = len(shstrtab)
    image = bytearray(_ELF_HEADER.size)
    headers = [bytes(_SECTION.size)]
    for section, data in fixed + kept:
        image.extend(bytes(-len(image) % max(section[8], 1)))
        section[4] = len(image)
        image.extend(data)
        headers.append(_SECTION.pack(*section))
    image.extend(bytes(-len(image) % 8))
    header = list(_ELF_HEADER.unpack_from(cubins[0], 0))
    header[5], header[6], header[9], header[10], header[12], header[13] = 0, len(image), 0, 0, len(headers), 1
    image[:_ELF_HEADER.size] = _ELF_HEADER.pack(*header)
    return bytes(image + b"".join(headers))

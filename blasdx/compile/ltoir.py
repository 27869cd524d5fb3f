"""CUDA C++ -> LTO-IR (NVRTC ``-dlto -rdc``), cached on disk beside the cubins.

LTO-IR is what another JIT links a blasdx GEMM into its own kernel with (Numba through
nvJitLink, cuda.core's ``Linker``): NVVM's intermediate form, optimised across the call at
link time so that the entry points inline into the caller. :func:`compile_ltoir` runs NVRTC
once per key and keeps the result in memory and on disk, keyed exactly like cubins
(:func:`blasdx.compile.cache.cache_key`: source, kernels folder, compiler wheels, options,
arch) with an ``ltoir`` mark. Entries are ``<key>.ltoir`` files in the cache folder: a small
JSON header, the LTO-IR, and a sha256 of both; written to a temporary file and published
with ``os.replace``, deleted and rebuilt when corrupt.

The cubins that another JIT links from a kernel and blasdx's LTO-IR are kept too
(:func:`find_linked` / :func:`keep_linked`, ``<key>.nvjl`` files): nvJitLink's link-time
optimisation of the inlined GEMM is most of a warm Numba build, and its result is decided by
the inputs the caller hashes into the key (:func:`linked_key`) and by the linker's version.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import cache as _cache
from . import nvrtc as _nvrtc
from . import store as _store
from .headers import include_dirs_for, kernel_tree
from .lto import Ltoir
from .nvrtc import DEFAULT_OPTIONS, CompileOptions

if TYPE_CHECKING:  # pragma: no cover
    from ..describe.descriptor import Descriptor

__all__ = ["LinkedCache", "Ltoir", "LtoirCache", "compile_ltoir", "descriptor_ltoir", "find_linked", "keep_linked",
           "linked_key", "ltoir_key"]

_MAGIC = b"BLASDXL1"
_SUFFIX = ".ltoir"


def ltoir_key(source: str, name: str, arch: str, options: CompileOptions = DEFAULT_OPTIONS) -> str:
    """The cache key of LTO-IR: the cubin key of the same compile, marked as LTO-IR."""
    return hashlib.sha256(b"ltoir\n" + _cache.cache_key(source, name, arch, options).encode()).hexdigest()


class LtoirCache(_store.EntryFiles[tuple[bytes, dict[str, Any]]]):
    """LTO-IR entries under ``root``: ``<root>/<key[:2]>/<key>.ltoir``, written atomically."""

    suffix = _SUFFIX
    magic = _MAGIC
    size_field = "size"

    def _fields(self, value: Ltoir) -> tuple[dict[str, Any], bytes]:
        """Arch, name and log; the LTO-IR."""
        return {"arch": value.arch, "name": value.name, "log": value.log}, value.data

    def _value(self, header: dict[str, Any], payload: bytes) -> tuple[bytes, dict[str, Any]]:
        """(LTO-IR, header)."""
        return payload, header

    def clear(self) -> int:
        """Delete every LTO-IR entry; returns how many."""
        return sum(_store._unlink(path) for path in self.entries())


_memory: dict[str, Ltoir] = {}
_guard = threading.Lock()
_locks: dict[str, threading.Lock] = {}


def _lock_for(key: str) -> threading.Lock:
    with _guard:
        return _locks.setdefault(key, threading.Lock())


def compile_ltoir(source: str, name: str, arch: str, options: CompileOptions = DEFAULT_OPTIONS) -> Ltoir:
    """LTO-IR of ``source`` for ``arch`` through the memory and disk caches; NVRTC only on a full miss.

    Raises:
        CompileError: NVRTC rejected the source (the log, the source and the saved file with it).
    """
    _nvrtc.check_arch(arch)
    _nvrtc.check_kernel_name(name)
    key = ltoir_key(source, name, arch, options)
    hit = _memory.get(key)
    if hit is not None:
        _store.stats.count("memory_hits")
        return hit
    with _lock_for(key):
        hit = _memory.get(key)
        if hit is None:
            hit = _memory[key] = _from_disk_or_compile(key, source, name, arch, options)
        else:
            _store.stats.count("memory_hits")
        return hit


def _from_disk_or_compile(key: str, source: str, name: str, arch: str, options: CompileOptions) -> Ltoir:
    disk = LtoirCache(_cache.cache_dir()) if _cache.cache_enabled() else None
    found = disk.get(key) if disk else None
    if found is not None:
        _store.stats.count("disk_hits")
        data, header = found
        return Ltoir(data, header["arch"], header["name"], source, header["log"])
    _cache.stats.compiles += 1
    ltoir = _nvrtc_ltoir(source, name, arch, options, disk.root / "failed" if disk else None)
    if disk:
        disk.put(key, ltoir)
    return ltoir


def _nvrtc_ltoir(source: str, name: str, arch: str, options: CompileOptions, failed: Path | None) -> Ltoir:
    """One NVRTC run with ``-dlto -rdc``."""
    tree = kernel_tree()
    include = [tree.root, *include_dirs_for([source, *tree.texts], None, tree.folders)]
    program_options = options.program_options(arch=arch, name=_nvrtc.program_name(name), include_dirs=include)
    program_options.relocatable_device_code = True
    program_options.link_time_optimization = True
    try:
        code, log = _nvrtc._nvrtc(source, "ltoir", program_options)
    except Exception as exc:  # noqa: BLE001 - cuda.core's NVRTC error carries the log
        raise _nvrtc._compile_error(exc, source, name, arch, include, options, failed) from None
    return Ltoir(bytes(code), arch, name, source, log)


_by_descriptor: dict[tuple[Any, CompileOptions], Ltoir] = {}


def descriptor_ltoir(desc: Descriptor, options: CompileOptions = DEFAULT_OPTIONS) -> Ltoir:
    """The LTO-IR of a block-GEMM descriptor's entry points (:mod:`blasdx.codegen.ltoir`), cached.

    Equal descriptors give the same object within a process.
    """
    hit = _by_descriptor.get((desc, options))
    if hit is not None:
        return hit
    from ..codegen import ltoir as _codegen

    generated = _codegen.generate(desc)
    plain = compile_ltoir(generated.source, generated.symbols["execute"], generated.arch, options)
    result = replace(plain, name=generated.symbols["execute"].rsplit("_", 1)[0], symbols=dict(generated.symbols),
                     declarations=generated.declarations, fragment_size=generated.fragment_size)
    _by_descriptor[(desc, options)] = result
    return result


# ---------------------------------------------------------------------------------------------
# cubins linked from LTO-IR by another JIT
# ---------------------------------------------------------------------------------------------

#: Wheels that decide a linked cubin besides its inputs: NVVM (the caller's LTO-IR), nvJitLink, the JIT.
LINKER_DISTRIBUTIONS = ("nvidia_nvjitlink", "nvidia_nvvm", "cuda_core", "cuda_bindings", "numba_cuda")


class LinkedCache(_store.EntryFiles[tuple[bytes, str]]):
    """Linked cubins under ``root``: ``<root>/<key[:2]>/<key>.nvjl``, written atomically."""

    suffix = ".nvjl"
    magic = b"BLASDXJ1"
    size_field = "size"

    def _fields(self, value: tuple[bytes, str]) -> tuple[dict[str, Any], bytes]:
        """The kernel's name in the cubin; the cubin."""
        cubin, entry = value
        return {"entry": entry}, cubin

    def _value(self, header: dict[str, Any], payload: bytes) -> tuple[bytes, str]:
        """(cubin, kernel name)."""
        return payload, str(header["entry"])


def linker_identity() -> str | None:
    """The NVVM, nvJitLink and JIT that decide a linked cubin: wheel versions, or for NVVM / nvJitLink
    installed outside wheels (a CUDA toolkit) the library file cuda.pathfinder loads, named by path, size
    and modification time. None when one of them cannot be found (then linked cubins are not kept)."""
    found = _nvrtc._wheel_versions(LINKER_DISTRIBUTIONS)
    parts = []
    for name in LINKER_DISTRIBUTIONS:
        if name in found:
            parts.append(f"{name} {found[name]}")
        elif name in _LINKER_LIBRARIES:
            library = _library_file_identity(_LINKER_LIBRARIES[name])
            if library is None:
                return None
            parts.append(library)
    return " ".join(parts)


#: the shared library of each linker distribution, as cuda.pathfinder names it
_LINKER_LIBRARIES = {"nvidia_nvjitlink": "nvJitLink", "nvidia_nvvm": "nvvm"}


def _library_file_identity(library: str) -> str | None:
    """'<library> <path> <size> <mtime ns>' of the file cuda.pathfinder loads for ``library`` (the one
    cuda.bindings and Numba use), None when it finds none."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        path = load_nvidia_dynamic_lib(library).abs_path
        status = Path(path).stat()
    except Exception:  # noqa: BLE001 - not found or not loadable: no identity, no kept links
        return None
    return f"{library} {path} {status.st_size} {status.st_mtime_ns}"


def linked_key(parts: Iterable[bytes], identity: str) -> str:
    """sha256 (hex) of a link: every input and option the caller names (each length-prefixed, in order) and
    the linker's identity."""
    h = hashlib.sha256(b"linked\n" + identity.encode() + b"\n")
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _linked_disk() -> LinkedCache | None:
    return LinkedCache(_cache.cache_dir()) if _cache.cache_enabled() else None


def find_linked(key: str) -> tuple[bytes, str] | None:
    """(cubin, kernel name) of a link kept on disk, or None."""
    disk = _linked_disk()
    found = disk.get(key) if disk else None
    if found is not None:
        _store.stats.count("disk_hits")
    return found


def keep_linked(key: str, cubin: bytes, entry: str) -> None:
    """Keep a linked cubin whose kernel is named ``entry`` (nothing when the disk cache is off)."""
    disk = _linked_disk()
    if disk:
        disk.put(key, (cubin, entry))

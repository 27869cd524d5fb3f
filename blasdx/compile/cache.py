"""Two-level kernel cache: an in-process dict, then cubins on disk.

* **In process**: ``Descriptor -> CompiledKernel`` (the descriptor is a hashable value)
  and ``key -> CompiledKernel`` for any source. A second ``compile`` of an equal
  descriptor returns the very same object.
* **On disk**: one file per key under :func:`cache_dir` holding the cubin *and* its
  resource usage, so a disk hit runs no NVRTC. The key is the sha256 of the generated
  source, the content of every file under the kernels folder, the NVRTC version, the
  compile options, the arch, the kernel name, the blasdx version and the installed NVRTC,
  CUDA-header and cuda-core wheels (read without loading NVRTC: a disk hit never loads it).

Environment:
    ``BLASDX_CACHE_DIR``  where entries live (default ``$XDG_CACHE_HOME/blasdx`` or
                          ``~/.cache/blasdx``);
    ``BLASDX_CACHE=0``    no disk cache at all (nothing is read or written).

Writes go to a temporary file in the entry's own folder and are published with
``os.replace``, so readers never see half an entry and concurrent writers of one key
(threads or processes) leave exactly one valid file. Each entry ends with a sha256 of
everything before it: a truncated or corrupt file is detected, deleted and rebuilt.
Threads of one process compiling the same key wait on a per-key lock, so NVRTC runs
once; separate processes may both compile (no lock files to go stale), and the last
``os.replace`` wins with identical content.

Why not ``cuda.core``'s ``Program.compile(cache=...)`` / ``FileStreamProgramCache``?
It refuses ``include_path`` without an ``extra_digest`` (blasdx always has one: the
kernels folder), stores bare cubin bytes (blasdx keeps resource usage and the NVRTC
log beside them so a hit needs neither NVRTC nor ELF parsing, and a checksum for
truncation), and is absent from cuda.core releases before 1.0. The scheme here is the
same (atomic replace) in ~150 lines.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
import sys
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import headers as _headers
from . import nvrtc as _nvrtc
from .compiled import CompiledKernel
from .cubin import ResourceUsage
from .nvrtc import DEFAULT_OPTIONS, CompileOptions

if TYPE_CHECKING:  # pragma: no cover
    from ..describe.descriptor import Descriptor

__all__ = [
    "CacheInfo",
    "CacheStats",
    "DiskCache",
    "cache_dir",
    "cache_enabled",
    "cache_info",
    "cache_key",
    "cached_compile",
    "clear_cache",
    "compile_descriptor",
    "stats",
]



def _warn(message: str, *args: Any) -> None:
    """A warning on the "blasdx" logger (logging is imported only when there is something to say)."""
    import logging

    logging.getLogger("blasdx").warning(message, *args)

_SCHEMA = 1
_MAGIC = b"BLASDXK1"
_SUFFIX = ".bdx"
_DIGEST = 32  # bytes of the trailing sha256


# ---------------------------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------------------------


class CacheStats:
    """Hits, misses and writes since start (or ``reset``); ``nvrtc_calls`` comes from the compiler."""

    _FIELDS = ("memory_hits", "disk_hits", "compiles", "disk_writes", "corrupt_entries")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Zero the cache counters (and the compiler's NVRTC counter)."""
        with self._lock:
            for name in self._FIELDS:
                setattr(self, name, 0)
        _nvrtc.stats.reset()

    def count(self, name: str) -> None:
        """Add one to counter ``name``."""
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    @property
    def nvrtc_calls(self) -> int:
        """NVRTC compilations in this process (from :data:`blasdx.compile.nvrtc.stats`)."""
        return _nvrtc.stats.nvrtc_calls

    def as_dict(self) -> dict[str, int]:
        """All counters, for printing and JSON."""
        return {**{name: getattr(self, name) for name in self._FIELDS}, "nvrtc_calls": self.nvrtc_calls}

    def __repr__(self) -> str:
        return "CacheStats(" + ", ".join(f"{k}={v}" for k, v in self.as_dict().items()) + ")"


#: Process-wide cache counters.
stats = CacheStats()


# ---------------------------------------------------------------------------------------------
# location and key
# ---------------------------------------------------------------------------------------------


def cache_enabled() -> bool:
    """False when ``BLASDX_CACHE`` is 0/false/no/off: no disk cache."""
    return os.environ.get("BLASDX_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """``$BLASDX_CACHE_DIR``, else the user cache dir (``$XDG_CACHE_HOME`` or ``~/.cache``) + ``blasdx``."""
    explicit = os.environ.get("BLASDX_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "blasdx" / "cache"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "blasdx"


@lru_cache(maxsize=1)
def _blasdx_version() -> str:
    """blasdx's version (read lazily: this module may load while the package initialises)."""
    package = sys.modules.get("blasdx")
    return str(getattr(package, "__version__", "unknown"))


def cache_key(
    source: str,
    kernel_name: str,
    arch: str,
    options: CompileOptions = DEFAULT_OPTIONS,
    *,
    kernels: Path | None = None,
) -> str:
    """sha256 (hex) of everything that decides the cubin."""
    parts = (
        f"blasdx-cache-schema {_SCHEMA}",
        f"blasdx {_blasdx_version()}",
        f"compiler {_nvrtc.nvrtc_identity()}",
        f"arch {arch}",
        f"kernel {kernel_name}",
        f"options {options.cache_token()}",
        f"kernels {_headers.kernel_tree(kernels).digest}",
    )
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() + b"\n")
    digest.update(source.encode())
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# disk
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    """What a disk entry holds besides the source (which the caller already has)."""

    cubin: bytes
    kernel_name: str
    arch: str
    resources: ResourceUsage
    log: str


class DiskCache:
    """Cubin entries under ``root``: ``<root>/<key[:2]>/<key>.bdx``, written atomically."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path_for(self, key: str) -> Path:
        """The file of ``key``."""
        return self.root / key[:2] / f"{key}{_SUFFIX}"

    def get(self, key: str) -> _Entry | None:
        """The entry of ``key``, or None if absent; a corrupt entry is deleted and reported as absent."""
        path = self.path_for(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            return _decode(data, key)
        except (ValueError, KeyError, TypeError, struct.error) as exc:
            stats.count("corrupt_entries")
            _warn("blasdx cache: discarding corrupt entry %s (%s); it will be rebuilt", path, exc)
            _unlink(path)
            return None

    def put(self, key: str, compiled: CompiledKernel) -> Path | None:
        """Write the entry of ``key`` (temp file + os.replace); None if the folder is not writable."""
        path = self.path_for(key)
        data = _encode(key, compiled)
        import tempfile

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:16]}-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.replace(tmp, path)
            except BaseException:
                _unlink(Path(tmp))
                raise
        except OSError as exc:
            _warn("blasdx cache: cannot write %s (%s); continuing without disk cache", path, exc)
            return None
        stats.count("disk_writes")
        return path

    def entries(self) -> list[Path]:
        """Every entry file."""
        return sorted(self.root.glob(f"??/*{_SUFFIX}")) if self.root.is_dir() else []

    def clear(self) -> int:
        """Delete every entry (cubins and LTO-IR), leftover temp file and the ``failed`` folder; returns
        entries removed."""
        removed = 0
        for path in self.entries():
            removed += _unlink(path)
        for path in self.root.glob("??/*.ltoir") if self.root.is_dir() else []:  # blasdx.compile.ltoir's
            removed += _unlink(path)
        for tmp in self.root.glob("??/.*.tmp") if self.root.is_dir() else []:
            _unlink(tmp)
        import shutil

        shutil.rmtree(self.root / "failed", ignore_errors=True)
        return removed


def _encode(key: str, compiled: CompiledKernel) -> bytes:
    """MAGIC, header length, JSON header, cubin, sha256 of all of it."""
    header = json.dumps(
        {
            "schema": _SCHEMA,
            "key": key,
            "kernel_name": compiled.kernel_name,
            "arch": compiled.arch,
            "resources": compiled.resources.as_dict(),
            "log": compiled.log,
            "cubin_size": len(compiled.cubin),
        },
        sort_keys=True,
    ).encode()
    body = _MAGIC + struct.pack("<I", len(header)) + header + compiled.cubin
    return body + hashlib.sha256(body).digest()


def _decode(data: bytes, key: str) -> _Entry:
    """Inverse of ``_encode``; ValueError when anything does not add up."""
    if len(data) < len(_MAGIC) + 4 + _DIGEST or not data.startswith(_MAGIC):
        raise ValueError("bad magic or truncated")
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        raise ValueError("checksum mismatch")
    (size,) = struct.unpack_from("<I", body, len(_MAGIC))
    start = len(_MAGIC) + 4
    header = json.loads(body[start : start + size])
    cubin = body[start + size :]
    if header["schema"] != _SCHEMA or header["key"] != key or header["cubin_size"] != len(cubin):
        raise ValueError("header does not match the entry")
    resources = ResourceUsage.from_dict(header["resources"])
    return _Entry(cubin, header["kernel_name"], header["arch"], resources, header["log"])


def _unlink(path: Path) -> int:
    """Remove ``path`` if it exists; 1 if it did."""
    try:
        path.unlink()
        return 1
    except OSError:
        return 0


def _disk() -> DiskCache | None:
    """The disk cache in effect now (environment read on every call), or None when disabled."""
    return DiskCache(cache_dir()) if cache_enabled() else None


# ---------------------------------------------------------------------------------------------
# the two levels
# ---------------------------------------------------------------------------------------------

_by_key: dict[str, CompiledKernel] = {}
_by_descriptor: dict[CompileOptions, dict[Any, CompiledKernel]] = {}
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock_for(key: str) -> threading.Lock:
    """The lock that serialises compiles of one key within this process."""
    with _locks_guard:
        lock = _locks.get(key)
        if lock is None:
            lock = _locks[key] = threading.Lock()
        return lock


def cached_compile(
    source: str,
    kernel_name: str,
    arch: str,
    options: CompileOptions = DEFAULT_OPTIONS,
    *,
    kernels: Path | None = None,
) -> CompiledKernel:
    """Compile ``source`` for ``arch`` through both cache levels; NVRTC runs only on a full miss.

    ``kernels`` is the templates folder that is on the include path and in the key
    (default :func:`blasdx.compile.headers.kernels_dir`). User headers named in
    ``options.include_dirs`` are not hashed: change the source or clear the cache when
    they change.
    """
    _nvrtc.check_arch(arch)
    _nvrtc.check_kernel_name(kernel_name)
    if not isinstance(options, CompileOptions):
        raise TypeError(f"options: expected blasdx CompileOptions, got {type(options).__name__}")
    key = cache_key(source, kernel_name, arch, options, kernels=kernels)
    hit = _by_key.get(key)
    if hit is not None:
        stats.count("memory_hits")
        return hit
    with _lock_for(key):
        hit = _by_key.get(key)
        if hit is not None:
            stats.count("memory_hits")
            return hit
        compiled = _from_disk_or_compile(key, source, kernel_name, arch, options, kernels)
        _by_key[key] = compiled
        return compiled


def _from_disk_or_compile(
    key: str, source: str, kernel_name: str, arch: str, options: CompileOptions, kernels: Path | None
) -> CompiledKernel:
    """Level two: read the disk entry, else run NVRTC and write one."""
    disk = _disk()
    entry = disk.get(key) if disk else None
    if entry is not None:
        stats.count("disk_hits")
        return CompiledKernel(entry.cubin, entry.kernel_name, entry.arch, source, entry.resources, entry.log)
    stats.count("compiles")
    failed = disk.root / "failed" if disk else None
    compiled = _nvrtc.compile_source(source, kernel_name, arch, options, kernels=kernels, failed_dir=failed)
    if disk:
        disk.put(key, compiled)
    return compiled


#: The batched kernel's macro for the blocks per SM that __launch_bounds__ asks registers for
#: (kernels/batched_gemm.cu); compile_descriptor sets it to 1 where the plan's cap spills.
MIN_BLOCKS_DEFINE = "BLASDX_MIN_BLOCKS_PER_SM"


def compile_descriptor(desc: Descriptor, options: CompileOptions = DEFAULT_OPTIONS) -> CompiledKernel:
    """The compiled batched block-GEMM kernel of ``desc``: validate, generate, then the cache.

    Equal descriptors give the same :class:`CompiledKernel` object within a process.
    """
    per_options = _by_descriptor.get(options)
    if per_options is not None:
        hit = per_options.get(desc)
        if hit is not None:
            stats.count("memory_hits")
            return hit
    from ..codegen.sources import generate

    desc.validate()
    generated = generate(desc)
    compiled = cached_compile(generated.source, generated.kernel_name, generated.arch, options)
    if compiled.local_memory and desc.plan.min_blocks > 1 and MIN_BLOCKS_DEFINE not in dict(options.defines):
        # The plan's register cap (blocks per SM in __launch_bounds__) spilled for this shape:
        # the compiler's own register choice serves better than local-memory traffic.
        relaxed = dataclasses.replace(options, defines=dict(options.defines) | {MIN_BLOCKS_DEFINE: "1"})
        compiled = cached_compile(generated.source, generated.kernel_name, generated.arch, relaxed)
    _by_descriptor.setdefault(options, {})[desc] = compiled
    return compiled


# ---------------------------------------------------------------------------------------------
# inspection and maintenance
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheInfo:
    """What ``python -m blasdx cache info`` prints."""

    path: Path
    enabled: bool
    entries: int
    size_bytes: int
    failed_sources: int
    in_memory: int

    def __str__(self) -> str:
        state = "enabled" if self.enabled else "disabled (BLASDX_CACHE=0)"
        return (
            f"cache directory: {self.path}\n"
            f"disk cache:      {state}\n"
            f"entries:         {self.entries} ({self.size_bytes / 1024:.1f} KiB)\n"
            f"failed sources:  {self.failed_sources} (in {self.path / 'failed'})\n"
            f"in memory:       {self.in_memory} kernels in this process"
        )


def cache_info() -> CacheInfo:
    """Location, state and size of the disk cache."""
    disk = DiskCache(cache_dir())
    entries = disk.entries()
    failed = disk.root / "failed"
    return CacheInfo(
        path=disk.root,
        enabled=cache_enabled(),
        entries=len(entries),
        size_bytes=sum(p.stat().st_size for p in entries),
        failed_sources=len(list(failed.glob("*.cu"))) if failed.is_dir() else 0,
        in_memory=len(_by_key),
    )


def clear_memory_cache() -> None:
    """Forget every kernel held in this process (the disk cache is untouched)."""
    _by_key.clear()
    _by_descriptor.clear()


def clear_cache(*, memory: bool = True, disk: bool = True) -> int:
    """Empty the in-process cache and/or the disk cache; returns the disk entries removed."""
    if memory:
        clear_memory_cache()
    return DiskCache(cache_dir()).clear() if disk else 0

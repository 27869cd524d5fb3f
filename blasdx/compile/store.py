"""The kernel store: compiled kernels kept in process and as files on disk, by key.

A store, not a compiler: it never generates source or runs NVRTC, and it does not decide
what a key hashes (:func:`blasdx.compile.cache.cache_key` does). It answers "have you got
this key?" and keeps what it is given.

* **In process**: ``key -> CompiledKernel`` for any source; ``program key -> CompiledKernel``
  (the cubin of a source, whichever of its kernels was asked for first), so that the other
  kernels of one source need no second compile; and ``(options, descriptor) ->
  CompiledKernel`` so that a second ``compile()`` of an equal descriptor returns the very
  same object without hashing its source again.
* **On disk**: one file per key, ``<root>/<key[:2]>/<key>.bdx``, holding the cubin *and*
  its resource usage and NVRTC log, so a disk hit needs neither NVRTC nor ELF parsing.

Writes go to a temporary file in the entry's own folder and are published with
``os.replace``, so readers never see half an entry and concurrent writers of one key
(threads or processes) leave exactly one valid file. Each entry ends with a sha256 of
everything before it: a truncated or corrupt file is detected, deleted and reported as
absent (the caller rebuilds it). :func:`lock_for` gives the per-key lock with which the
threads of one process wait for one compile of a key.

Environment:
    ``BLASDX_CACHE_DIR``  where entries live (default ``$XDG_CACHE_HOME/blasdx`` or
                          ``~/.cache/blasdx``);
    ``BLASDX_CACHE=0``    no disk level at all (nothing is read or written).

Why not ``cuda.core``'s ``Program.compile(cache=...)`` / ``FileStreamProgramCache``?
It refuses ``include_path`` without an ``extra_digest`` (blasdx always has one: the
kernels folder), stores bare cubin bytes (blasdx keeps resource usage and the NVRTC
log beside them, and a checksum for truncation), and is absent from cuda.core releases
before 1.0. The scheme here is the same (atomic replace).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from .compiled import CompiledKernel
from .cubin import ResourceUsage
from .location import cache_dir, cache_enabled

__all__ = [
    "CacheInfo",
    "DiskCache",
    "EntryFiles",
    "StoreStats",
    "cache_dir",
    "cache_enabled",
    "cache_info",
    "clear",
    "clear_memory",
    "digest",
    "disk",
    "failed_dir",
    "find",
    "find_descriptor",
    "find_program",
    "keep",
    "keep_descriptor",
    "keep_program",
    "lock_for",
    "stats",
]

_SCHEMA = 1
_MAGIC = b"BLASDXK1"
_SUFFIX = ".bdx"
_DIGEST = 32  # bytes of the trailing sha256
T = TypeVar("T")


def _warn(message: str, *args: Any) -> None:
    """A warning on the "blasdx" logger (logging is imported only when there is something to say)."""
    import logging

    logging.getLogger("blasdx").warning(message, *args)


# ---------------------------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------------------------


class StoreStats:
    """What the store saw since start (or ``reset``): hits of each level, disk writes, corrupt entries."""

    FIELDS = ("memory_hits", "disk_hits", "disk_writes", "corrupt_entries")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Zero every counter."""
        with self._lock:
            for name in self.FIELDS:
                setattr(self, name, 0)

    def count(self, name: str) -> None:
        """Add one to counter ``name``."""
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)


#: Process-wide store counters.
stats = StoreStats()


# ---------------------------------------------------------------------------------------------
# location and key
# ---------------------------------------------------------------------------------------------


def digest(parts: Iterable[str], source: str) -> str:
    """The key of an entry: sha256 (hex) of the store's schema, ``parts`` (one a line) and ``source``."""
    hasher = hashlib.sha256(f"blasdx-cache-schema {_SCHEMA}\n".encode())
    for part in parts:
        hasher.update(part.encode() + b"\n")
    hasher.update(source.encode())
    return hasher.hexdigest()


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


class EntryFiles(Generic[T]):
    """Entries of one kind under ``root``: ``<root>/<key[:2]>/<key><suffix>``, each the magic, a JSON header
    and a payload ended by a sha256 of all of it, written atomically (the cubins here, LTO-IR beside them)."""

    suffix: ClassVar[str]
    magic: ClassVar[bytes]
    size_field: ClassVar[str]  # the header field that holds the payload's length

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path_for(self, key: str) -> Path:
        """The file of ``key``."""
        return self.root / key[:2] / f"{key}{self.suffix}"

    def _fields(self, value: Any) -> tuple[dict[str, Any], bytes]:
        """The header fields (besides the key and the size) and the payload of ``value``."""
        raise NotImplementedError

    def _value(self, header: dict[str, Any], payload: bytes) -> T:
        """Inverse of ``_fields``; ValueError when the header is not of this kind."""
        raise NotImplementedError

    def get(self, key: str) -> T | None:
        """The entry of ``key``, or None if absent; a corrupt entry is deleted and reported as absent."""
        path = self.path_for(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            return self._value(*_decode(data, key, self.magic, self.size_field))
        except (ValueError, KeyError, TypeError, struct.error) as exc:
            stats.count("corrupt_entries")
            _warn("blasdx cache: discarding corrupt entry %s (%s); it will be rebuilt", path, exc)
            _unlink(path)
            return None

    def put(self, key: str, value: Any) -> Path | None:
        """Write the entry of ``key`` (temp file + os.replace); None if the folder is not writable."""
        path = self.path_for(key)
        fields, payload = self._fields(value)
        data = _encode(self.magic, {**fields, "key": key, self.size_field: len(payload)}, payload)
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
        return sorted(self.root.glob(f"??/*{self.suffix}")) if self.root.is_dir() else []


class DiskCache(EntryFiles[_Entry]):
    """Cubin entries under ``root``: ``<root>/<key[:2]>/<key>.bdx``, written atomically."""

    suffix = _SUFFIX
    magic = _MAGIC
    size_field = "cubin_size"

    def _fields(self, value: CompiledKernel) -> tuple[dict[str, Any], bytes]:
        """Schema, kernel name, arch, resource usage and log; the cubin."""
        header = {"schema": _SCHEMA, "kernel_name": value.kernel_name, "arch": value.arch,
                  "resources": value.resources.as_dict(), "log": value.log}
        return header, value.cubin

    def _value(self, header: dict[str, Any], payload: bytes) -> _Entry:
        """The entry of a header of this schema."""
        if header["schema"] != _SCHEMA:
            raise ValueError("header does not match the entry")
        resources = ResourceUsage.from_dict(header["resources"])
        return _Entry(payload, header["kernel_name"], header["arch"], resources, header["log"])

    def clear(self) -> int:
        """Delete every entry (cubins and LTO-IR), leftover temp file and the ``failed`` folder; returns
        entries removed."""
        removed = 0
        for path in self.entries():
            removed += _unlink(path)
        for pattern in ("??/*.ltoir", "??/*.nvjl"):  # blasdx.compile.ltoir's LTO-IR and linked cubins
            for path in self.root.glob(pattern) if self.root.is_dir() else []:
                removed += _unlink(path)
        for tmp in self.root.glob("??/.*.tmp") if self.root.is_dir() else []:
            _unlink(tmp)
        import shutil

        shutil.rmtree(self.root / "failed", ignore_errors=True)
        return removed


def _encode(magic: bytes, header: dict[str, Any], payload: bytes) -> bytes:
    """``magic``, header length, JSON header, payload, sha256 of all of it."""
    text = json.dumps(header, sort_keys=True).encode()
    body = magic + struct.pack("<I", len(text)) + text + payload
    return body + hashlib.sha256(body).digest()


def _decode(data: bytes, key: str, magic: bytes, size_field: str) -> tuple[dict[str, Any], bytes]:
    """Inverse of ``_encode`` for the entry of ``key``; ValueError when anything does not add up."""
    if len(data) < len(magic) + 4 + _DIGEST or not data.startswith(magic):
        raise ValueError("bad magic or truncated")
    body, checksum = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(body).digest() != checksum:
        raise ValueError("checksum mismatch")
    (size,) = struct.unpack_from("<I", body, len(magic))
    start = len(magic) + 4
    header = json.loads(body[start : start + size])
    payload = body[start + size :]
    if header["key"] != key or header[size_field] != len(payload):
        raise ValueError("header does not match the entry")
    return header, payload


def _unlink(path: Path) -> int:
    """Remove ``path`` if it exists; 1 if it did."""
    try:
        path.unlink()
        return 1
    except OSError:
        return 0


def disk() -> DiskCache | None:
    """The disk level in effect now (environment read on every call), or None when disabled."""
    return DiskCache(cache_dir()) if cache_enabled() else None


def failed_dir() -> Path | None:
    """Where sources that NVRTC rejected are kept beside the entries (None without a disk level)."""
    level = disk()
    return level.root / "failed" if level else None


# ---------------------------------------------------------------------------------------------
# the two levels
# ---------------------------------------------------------------------------------------------

_by_key: dict[str, CompiledKernel] = {}
_by_program: dict[str, CompiledKernel] = {}
_by_descriptor: dict[Any, dict[Any, CompiledKernel]] = {}
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def lock_for(key: str) -> threading.Lock:
    """The lock that serialises the look-up and compile of one key within this process."""
    with _locks_guard:
        lock = _locks.get(key)
        if lock is None:
            lock = _locks[key] = threading.Lock()
        return lock


def find(key: str, source: str | None = None) -> CompiledKernel | None:
    """The kernel of ``key`` from memory, else (given its ``source``) from disk, remembered in memory; else None.

    Without ``source`` only the memory level is asked (a disk entry does not hold the source).
    """
    hit = _by_key.get(key)
    if hit is not None:
        stats.count("memory_hits")
        return hit
    level = disk() if source is not None else None
    entry = level.get(key) if level else None
    if entry is None:
        return None
    stats.count("disk_hits")
    compiled = CompiledKernel(entry.cubin, entry.kernel_name, entry.arch, source or "", entry.resources, entry.log)
    _by_key[key] = compiled
    return compiled


def keep(key: str, compiled: CompiledKernel) -> None:
    """Keep a freshly compiled kernel under ``key``: in memory, and on disk when the disk level is on."""
    level = disk()
    if level:
        level.put(key, compiled)
    _by_key[key] = compiled


def find_program(key: str) -> CompiledKernel | None:
    """A kernel of the program (source, arch, options, kernels folder) of ``key`` compiled in this process, or None.

    Its cubin holds every kernel of the source, so another kernel of the same source is read
    from it instead of compiling the source again.
    """
    return _by_program.get(key)


def keep_program(key: str, compiled: CompiledKernel) -> None:
    """Remember the cubin of a freshly compiled program under its key."""
    _by_program[key] = compiled


def find_descriptor(options: Any, desc: Any) -> CompiledKernel | None:
    """The kernel compiled for ``desc`` with ``options`` in this process, or None."""
    hit = _by_descriptor.get(options, {}).get(desc)
    if hit is not None:
        stats.count("memory_hits")
    return hit


def keep_descriptor(options: Any, desc: Any, compiled: CompiledKernel) -> None:
    """Remember the kernel of ``desc`` with ``options``, so that equal descriptors skip codegen."""
    _by_descriptor.setdefault(options, {})[desc] = compiled


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
    """Location, state and size of the disk level, and the kernels held in memory."""
    level = DiskCache(cache_dir())
    entries = level.entries()
    failed = level.root / "failed"
    return CacheInfo(
        path=level.root,
        enabled=cache_enabled(),
        entries=len(entries),
        size_bytes=sum(p.stat().st_size for p in entries),
        failed_sources=len(list(failed.glob("*.cu"))) if failed.is_dir() else 0,
        in_memory=len(_by_key),
    )


def clear_memory() -> None:
    """Forget every kernel held in this process (the disk level is untouched)."""
    _by_key.clear()
    _by_program.clear()
    _by_descriptor.clear()


def clear(*, memory: bool = True, disk: bool = True) -> int:
    """Empty the memory level and/or the disk level; returns the disk entries removed."""
    if memory:
        clear_memory()
    return DiskCache(cache_dir()).clear() if disk else 0

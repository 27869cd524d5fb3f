"""The compile step: source -> key -> the store for a hit, NVRTC for a miss, once each.

Every kernel blasdx runs goes through :func:`cached_compile` (and a descriptor through
:func:`compile_descriptor`, which first asks the code generator for its source). The step
reads as one straight line:

1. the **key**: sha256 of the source, the content of every file under the kernels folder,
   the compile options, the arch, the kernel name, the blasdx version and the installed
   NVRTC, CUDA-header and cuda-core wheels (read without loading NVRTC: a disk hit never
   loads it);
2. the **store** (:mod:`blasdx.compile.store`: in process, then on disk) for a hit;
3. on a miss, **NVRTC** (:func:`blasdx.compile.nvrtc.compile_source`), and the result back
   to the store. The cubin holds every kernel of the source, so asking for another kernel of
   a source compiled in this process reads it from that cubin instead of compiling again.

Threads of one process compiling the same source wait on a per-source lock, so NVRTC runs once;
separate processes may both compile (no lock files to go stale), and the store's atomic
``os.replace`` leaves one valid entry. The store's environment variables
(``BLASDX_CACHE_DIR``, ``BLASDX_CACHE=0``) and maintenance (:func:`cache_info`,
:func:`clear_cache`) are named here too, so ``blasdx.compile.cache`` is the one place to ask.
"""

from __future__ import annotations

import dataclasses
import sys
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from . import headers as _headers
from . import nvrtc as _nvrtc
from . import store as _store
from .compiled import CompiledKernel
from .nvrtc import DEFAULT_OPTIONS, CompileOptions
from .store import CacheInfo, DiskCache, cache_dir, cache_enabled, cache_info

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
    "clear_memory_cache",
    "compile_descriptor",
    "stats",
]


class CacheStats:
    """What the compile step did since start (or ``reset``): the store's hits and writes, compiles, NVRTC runs.

    ``memory_hits``, ``disk_hits``, ``disk_writes`` and ``corrupt_entries`` are the store's
    counters (:data:`blasdx.compile.store.stats`), ``compiles`` the misses this step sent to
    NVRTC, ``nvrtc_calls`` every NVRTC run of the process (:data:`blasdx.compile.nvrtc.stats`).
    """

    _FIELDS = (*_store.StoreStats.FIELDS, "compiles")

    def __init__(self) -> None:
        self.compiles = 0

    def reset(self) -> None:
        """Zero every counter: the store's, this step's and NVRTC's."""
        _store.stats.reset()
        _nvrtc.stats.reset()
        self.compiles = 0

    def count(self, name: str) -> None:
        """Add one to counter ``name``: the store's own, or ``compiles`` (the LTO-IR step counts here too)."""
        if name in _store.StoreStats.FIELDS:
            _store.stats.count(name)
        elif name == "compiles":
            self.compiles += 1
        else:
            raise AttributeError(name)

    def __getattr__(self, name: str) -> int:
        if name in _store.StoreStats.FIELDS:
            return int(getattr(_store.stats, name))
        raise AttributeError(name)

    @property
    def nvrtc_calls(self) -> int:
        """NVRTC compilations in this process."""
        return _nvrtc.stats.nvrtc_calls

    def as_dict(self) -> dict[str, int]:
        """All counters, for printing and JSON."""
        return {**{name: getattr(self, name) for name in self._FIELDS}, "nvrtc_calls": self.nvrtc_calls}

    def __repr__(self) -> str:
        return "CacheStats(" + ", ".join(f"{k}={v}" for k, v in self.as_dict().items()) + ")"


#: Process-wide counters of the compile step.
stats = CacheStats()


@lru_cache(maxsize=1)
def _blasdx_version() -> str:
    """blasdx's version (read lazily: this module may load while the package initialises)."""
    package = sys.modules.get("blasdx")
    return str(getattr(package, "__version__", "unknown"))


def _key(source: str, kernel_name: str, arch: str, options: CompileOptions, tree: _headers.KernelTree) -> str:
    """The store's key of one compile, given the kernels folder already read."""
    parts = (
        f"blasdx {_blasdx_version()}",
        f"compiler {_nvrtc.nvrtc_identity()}",
        f"arch {arch}",
        f"kernel {kernel_name}",
        f"options {options.cache_token()}",
        f"kernels {tree.digest}",
    )
    return _store.digest(parts, source)


def cache_key(source: str, kernel_name: str, arch: str, options: CompileOptions = DEFAULT_OPTIONS, *,
              kernels: Path | None = None) -> str:
    """sha256 (hex) of everything that decides the cubin."""
    return _key(source, kernel_name, arch, options, _headers.kernel_tree(kernels))


def cached_compile(source: str, kernel_name: str, arch: str, options: CompileOptions = DEFAULT_OPTIONS, *,
                   kernels: Path | None = None) -> CompiledKernel:
    """Compile ``source`` for ``arch``: the store's kernel when it has the key, else NVRTC's, then kept.

    ``kernels`` is the templates folder that is on the include path and in the key
    (default :func:`blasdx.compile.headers.kernels_dir`). User headers named in
    ``options.include_dirs`` are not hashed: change the source or clear the cache when
    they change.
    """
    _nvrtc.check_arch(arch)
    _nvrtc.check_kernel_name(kernel_name)
    if not isinstance(options, CompileOptions):
        raise TypeError(f"options: expected blasdx CompileOptions, got {type(options).__name__}")
    tree = _headers.kernel_tree(kernels)
    key = _key(source, kernel_name, arch, options, tree)
    hit = _store.find(key)
    if hit is not None:
        return hit
    program = _key(source, "", arch, options, tree)  # the cubin, whichever of its kernels is asked for
    with _store.lock_for(program):
        hit = _store.find(key, source)
        if hit is not None:
            return hit
        sibling = _store.find_program(program)
        if sibling is not None:  # another kernel of this source: read from the cubin already made
            compiled = _nvrtc.kernel_of(sibling.cubin, kernel_name, arch, source, sibling.log)
        else:
            stats.compiles += 1
            failed = _store.failed_dir()
            compiled = _nvrtc.compile_source(source, kernel_name, arch, options, tree=tree, failed_dir=failed)
            _store.keep_program(program, compiled)
        _store.keep(key, compiled)
        return compiled


#: The batched kernel's macro for the blocks per SM that __launch_bounds__ asks registers for
#: (kernels/batched_gemm.cu); compile_descriptor sets it to 1 where the plan's cap spills.
MIN_BLOCKS_DEFINE = "BLASDX_MIN_BLOCKS_PER_SM"


def compile_descriptor(desc: Descriptor, options: CompileOptions = DEFAULT_OPTIONS) -> CompiledKernel:
    """The compiled batched kernel of ``desc``: validate, the code generator's source, then :func:`cached_compile`.

    Equal descriptors give the same :class:`CompiledKernel` object within a process.
    """
    hit = _store.find_descriptor(options, desc)
    if hit is not None:
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
    _store.keep_descriptor(options, desc, compiled)
    return compiled


def clear_memory_cache() -> None:
    """Forget every kernel held in this process (the disk cache is untouched)."""
    _store.clear_memory()


def clear_cache(*, memory: bool = True, disk: bool = True) -> int:
    """Empty the in-process cache and/or the disk cache; returns the disk entries removed."""
    return _store.clear(memory=memory, disk=disk)


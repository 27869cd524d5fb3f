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
from collections.abc import Sequence
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
    "compile_descriptors",
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


#: Kernels per NVRTC program in :func:`compile_descriptors`: this many share one parse of the headers.
#: The parse is 0.1-0.15 CPU-s of a matrix kernel's 0.5-0.9 (NVVM and ptxas take the rest), and programs
#: of many larger kernels compiled no faster than one program each: samples of 24-27 kernels of the
#: compile matrix took 8.5-10.1 CPU-s against 11.7 (sm_75), 18.5-21.0 against 22.3 (sm_89), 17.4 against
#: 18.5 (sm_90) in programs of 4-12.
KERNELS_PER_PROGRAM = 6


def compile_descriptors(descs: Sequence[Descriptor], options: CompileOptions = DEFAULT_OPTIONS, *,
                        per_program: int = KERNELS_PER_PROGRAM, workers: int = 1) -> list[CompiledKernel]:
    """The batched GEMM kernels of many descriptors, several per NVRTC program (each through the cache).

    For checking many kernels at once (resources, SASS): kernel ``i`` of a program is
    :func:`compile_descriptor`'s template instantiation under the name ``blasdx_batched_gemm_<i>``
    (:func:`blasdx.codegen.gemm.generate_many`) in a cubin that holds its program's other kernels
    too (read one kernel's SASS with ``cuobjdump -fun``). A kernel that spills under its plan's
    register cap is :func:`compile_descriptor`'s own (compiled alone without the cap), as
    ``execute`` would run it. Descriptors with a TRSM function (and every descriptor when ``options``
    define the register cap's macro) go to :func:`compile_descriptor`.
    Equal descriptors share one kernel; results in input order.
    """
    from concurrent.futures import ThreadPoolExecutor

    from ..codegen import gemm as _gemm
    from ..describe.operators import Function

    if per_program < 1 or workers < 1:
        raise ValueError(f"compile_descriptors: per_program={per_program}, workers={workers}; expected >= 1")
    unique = list(dict.fromkeys(descs))
    groups: dict[object, list[Descriptor]] = {}
    alone: list[Descriptor] = []
    capped = MIN_BLOCKS_DEFINE in dict(options.defines)  # the caller's cap applies to one kernel per source
    for desc in unique:
        if desc.validate().function is Function.TRSM or capped:
            alone.append(desc)
        else:
            groups.setdefault(_gemm.program_group(desc), []).append(desc)
    programs = [members[i:i + per_program] for members in groups.values() for i in range(0, len(members), per_program)]
    if workers > 1:
        _nvrtc.load_nvrtc()  # cuda.core's compiler pieces imported here, before the threads race to import them

    def program(members: list[Descriptor]) -> list[CompiledKernel]:
        source, names = _gemm.generate_many(members)
        arch = members[0].arch
        first = cached_compile(source, names[0], arch, options)  # the program's one entry in the store
        kernels = [first, *(_nvrtc.kernel_of(first.cubin, name, arch, source, first.log) for name in names[1:])]
        return [compile_descriptor(desc, options) if kernel.local_memory and desc.plan.min_blocks > 1 else kernel
                for desc, kernel in zip(members, kernels)]

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="blasdx-compile") as pool:
        done = list(pool.map(program, programs))
        by_desc = dict(zip(alone, pool.map(lambda d: compile_descriptor(d, options), alone)))
    for members, kernels in zip(programs, done):
        by_desc.update(zip(members, kernels))
    return [by_desc[desc] for desc in descs]


def clear_memory_cache() -> None:
    """Forget every kernel held in this process (the disk cache is untouched)."""
    _store.clear_memory()


def clear_cache(*, memory: bool = True, disk: bool = True) -> int:
    """Empty the in-process cache and/or the disk cache; returns the disk entries removed."""
    return _store.clear(memory=memory, disk=disk)


"""CUDA C++ -> cubin: the compile step, NVRTC, the kernel store, and what a cubin holds.

The work lives in modules with one job each: :mod:`blasdx.compile.cache` (the compile step:
source -> key -> the store for a hit, NVRTC for a miss), :mod:`blasdx.compile.store` (kernels
kept in process and on disk, atomically), :mod:`blasdx.compile.headers` (the kernels folder
and CUDA header discovery), :mod:`blasdx.compile.nvrtc` (options, NVRTC, compile errors),
:mod:`blasdx.compile.cubin` (resource usage from the ELF, SASS through cuobjdump) and
:mod:`blasdx.compile.compiled` (the compiled kernel and its loading). Code that imports from
``blasdx.compile`` finds the names of the last four here.
"""

from __future__ import annotations

from .compiled import DEFAULT_DYNAMIC_SHARED_MEMORY_LIMIT, CompiledKernel
from .cubin import (
    ResourceUsage,
    find_cuobjdump,
    kernel_names,
    resource_usage,
    run_cuobjdump,
)
from .headers import (
    HeaderDir,
    KernelTree,
    default_header_search,
    header_family,
    include_dirs_for,
    kernel_tree,
    kernels_dir,
    needed_headers,
)
from .nvrtc import (
    DEFAULT_OPTIONS,
    CompileOptions,
    CompilerStats,
    check_arch,
    check_kernel_name,
    compile_source,
    nvrtc_identity,
    nvrtc_version,
    program_name,
    stats,
)

__all__ = [
    "CompileOptions",
    "CompiledKernel",
    "CompilerStats",
    "DEFAULT_DYNAMIC_SHARED_MEMORY_LIMIT",
    "DEFAULT_OPTIONS",
    "HeaderDir",
    "KernelTree",
    "ResourceUsage",
    "check_arch",
    "check_kernel_name",
    "compile_source",
    "default_header_search",
    "find_cuobjdump",
    "header_family",
    "include_dirs_for",
    "kernel_names",
    "kernel_tree",
    "kernels_dir",
    "needed_headers",
    "nvrtc_identity",
    "nvrtc_version",
    "program_name",
    "resource_usage",
    "run_cuobjdump",
    "stats",
]

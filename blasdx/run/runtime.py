"""What a descriptor does beyond describing a GEMM: its CUDA source, its compiled kernel, its launch.

:class:`~blasdx.describe.descriptor.Descriptor` is a value layer: it reaches this module
through :mod:`blasdx.describe.backend`, which the package root wires at import. This module brings the code generator and the kernel cache with it
(so the first ``compile()`` of a process, a disk hit, costs milliseconds and no import of
NVRTC), and the launcher only on the first launch. None of them imports the descriptor,
so data flows one way (operators -> descriptor -> codegen -> compiler/cache -> execute)
with no import circle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..codegen import sources as _sources
from ..compile import cache as _cache

if TYPE_CHECKING:  # pragma: no cover
    from ..compile.compiled import CompiledKernel
    from ..compile.lto import Ltoir
    from ..describe.descriptor import Descriptor

__all__ = ["compile", "execute", "execute_trsm", "ltoir", "source"]


def source(desc: Descriptor) -> str:
    """The CUDA C++ that blasdx compiles for ``desc`` (deterministic)."""
    return _sources.generate(desc).source


def compile(desc: Descriptor) -> CompiledKernel:  # noqa: A001 - the descriptor's method of this name
    """Compile (or fetch from the cache) the batched block-GEMM kernel of ``desc``."""
    return _cache.compile_descriptor(desc)


def ltoir(desc: Descriptor, options: Any = None) -> Ltoir:
    """LTO-IR of the descriptor's extern "C" entry points, for other JITs (cached like cubins)."""
    from ..compile import ltoir as _ltoir

    return _ltoir.descriptor_ltoir(desc) if options is None else _ltoir.descriptor_ltoir(desc, options)


def execute(desc: Descriptor, a: Any, b: Any, c: Any, *, alpha: Any = 1, beta: Any = 0, stream: Any = None) -> Any:
    """``C = alpha * A @ B + beta * C`` in place on device arrays (:func:`blasdx.run.execute.execute`).

    The first call imports the launcher and puts it in this function's place, so later
    calls of ``runtime.execute`` go straight to it.
    """
    from .execute import execute as launcher

    globals()["execute"] = launcher
    return launcher(desc, a, b, c, alpha=alpha, beta=beta, stream=stream)


def execute_trsm(desc: Any, a: Any, b: Any, *, alpha: Any = 1, stream: Any = None) -> Any:
    """Solve in place on device arrays (:func:`blasdx.run.trsm.execute`), importing the launcher on first use."""
    from .trsm import execute as launcher

    globals()["execute_trsm"] = launcher
    return launcher(desc, a, b, alpha=alpha, stream=stream)

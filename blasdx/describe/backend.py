"""The descriptor's way up: the runtime that turns a description into source, kernels and launches.

The value layer imports nothing above the plans, yet ``Descriptor.compile()`` must reach the
code generator, the cache and the launcher. The package root (which sits above every layer)
installs a loader here at import; a descriptor asks :func:`runtime` for the runtime on its
first compile or launch, so ``import blasdx`` and describing GEMMs load no compile machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from ..compile.compiled import CompiledKernel
    from ..compile.lto import Ltoir

__all__ = ["Runtime", "execute", "install", "runtime"]


class Runtime(Protocol):
    """What a descriptor needs from the layers above it (:mod:`blasdx.run.runtime` provides it)."""

    def source(self, desc: Any) -> str: ...

    def compile(self, desc: Any) -> CompiledKernel: ...

    def ltoir(self, desc: Any, options: Any) -> Ltoir: ...

    def execute(self, desc: Any, a: Any, b: Any, c: Any, *, alpha: Any, beta: Any, stream: Any) -> Any: ...

    def execute_trsm(self, desc: Any, a: Any, b: Any, *, alpha: Any, stream: Any) -> Any: ...


_loader: Callable[[], Runtime] | None = None
_runtime: Runtime | None = None


def install(loader: Callable[[], Runtime]) -> None:
    """Say how to load the runtime (called once, by the package root)."""
    global _loader, _runtime, execute
    _loader, _runtime, execute = loader, None, _first_execute


def runtime() -> Runtime:
    """The runtime, loaded on first use."""
    global _runtime
    if _runtime is None:
        if _loader is None:  # pragma: no cover - the package root installs it before any descriptor exists
            raise RuntimeError("blasdx's runtime is not installed; import blasdx first")
        _runtime = _loader()
    return _runtime


def _first_execute(desc: Any, a: Any, b: Any, c: Any, *, alpha: Any, beta: Any, stream: Any) -> Any:
    """The runtime's execute; the first call loads it and puts the launcher in :data:`execute`'s place, so that a
    descriptor's execute() reaches the launcher in one call (it is the hottest call of the block API)."""
    global execute
    found = runtime()
    result = found.execute(desc, a, b, c, alpha=alpha, beta=beta, stream=stream)
    execute = found.execute  # the launcher itself once the runtime has imported it
    return result


#: What ``Descriptor.execute`` calls: ``execute(desc, a, b, c, alpha=, beta=, stream=)``.
execute: Callable[..., Any] = _first_execute

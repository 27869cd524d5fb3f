"""LTO-IR as a value: the bytes, the architecture and, for a descriptor, its entry points.

Kept apart from :mod:`blasdx.compile.ltoir` (which compiles and caches) so that the descriptor
can name the type without importing the compiler.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Ltoir"]


@dataclass(frozen=True, eq=False)
class Ltoir:
    """LTO-IR of a source for one architecture.

    Attributes:
        data: the LTO-IR bytes (what ``nvJitLinkAddData(..., NVJITLINK_INPUT_LTOIR)`` or
            ``cuda.core.ObjectCode.from_ltoir`` take).
        arch: the real target it was compiled for (``sm_90a``): link into a kernel for that arch.
        name: a name for linker messages.
        source: the CUDA C++ it came from.
        log: NVRTC's warnings, if any.
        symbols: a descriptor's entry points, ``{role: C name}`` (``execute``, ``load_a``, ...);
            empty for other sources.
        declarations: their C prototypes, to paste before code that calls them.
        fragment_size: accumulator values per thread of the register API (0: no register API).
    """

    data: bytes
    arch: str
    name: str
    source: str
    log: str = ""
    symbols: dict[str, str] = field(default_factory=dict)
    declarations: str = ""
    fragment_size: int = 0

    def __repr__(self) -> str:
        return f"Ltoir(name={self.name!r}, arch={self.arch!r}, {len(self.data)} bytes)"

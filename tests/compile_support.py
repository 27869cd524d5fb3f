"""SASS of one kernel of a cubin that holds several (blasdx.compile.cache.compile_descriptors' programs).

``cuobjdump -sass -fun NAME`` disassembles that kernel alone, not every kernel of its program.
"""

from __future__ import annotations

import re

from blasdx.compile.compiled import CompiledKernel
from blasdx.compile.cubin import run_cuobjdump

#: The line that opens a kernel's section in cuobjdump's SASS listing.
_FUNCTION = re.compile(r"^\s*Function : (\S+)\s*$", re.MULTILINE)


def sections(listing: str) -> dict[str, str]:
    """cuobjdump SASS listing -> {kernel name: its section (from its Function line to the next one)}."""
    starts = list(_FUNCTION.finditer(listing))
    ends = [m.start() for m in starts[1:]] + [len(listing)]
    return {m.group(1): listing[m.start():end] for m, end in zip(starts, ends)}


def kernel_sass(kernel: CompiledKernel) -> str:
    """The SASS of ``kernel`` alone (its section of its cubin's listing)."""
    found = sections(run_cuobjdump(kernel.cubin, "-sass", "-fun", kernel.kernel_name))
    if list(found) != [kernel.kernel_name]:
        raise KeyError(f"cuobjdump listed {sorted(found)} for {kernel.kernel_name}")
    return found[kernel.kernel_name]

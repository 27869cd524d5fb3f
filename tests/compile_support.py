"""SASS of one kernel of a cubin that holds several (blasdx.compile.cache.compile_descriptors' programs).

``cuobjdump -sass`` runs once per cubin; each kernel's section is cut from that listing, so the
kernels of one program cost one disassembly between them.
"""

from __future__ import annotations

import hashlib
import re
import threading

from blasdx.compile.compiled import CompiledKernel
from blasdx.compile.cubin import run_cuobjdump

_listings: dict[str, dict[str, str]] = {}
_lock = threading.Lock()

#: The line that opens a kernel's section in cuobjdump's SASS listing.
_FUNCTION = re.compile(r"^\s*Function : (\S+)\s*$", re.MULTILINE)


def sections(listing: str) -> dict[str, str]:
    """cuobjdump SASS listing -> {kernel name: its section (from its Function line to the next one)}."""
    starts = list(_FUNCTION.finditer(listing))
    ends = [m.start() for m in starts[1:]] + [len(listing)]
    return {m.group(1): listing[m.start():end] for m, end in zip(starts, ends)}


def kernel_sass(kernel: CompiledKernel) -> str:
    """The SASS of ``kernel`` alone (its section of its cubin's listing)."""
    digest = hashlib.sha256(kernel.cubin).hexdigest()
    with _lock:
        found = _listings.get(digest)
    if found is None:
        found = sections(run_cuobjdump(kernel.cubin, "-sass"))
        with _lock:
            _listings[digest] = found
    if kernel.kernel_name not in found:
        raise KeyError(f"{kernel.kernel_name} not in the SASS of its cubin ({sorted(found)})")
    return found[kernel.kernel_name]

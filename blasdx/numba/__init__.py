"""blasdx GEMMs inside Numba-CUDA kernels (``pip install blasdx[numba]``).

Importing this package teaches Numba-CUDA the descriptor: use one in a ``@cuda.jit`` kernel
and its traits are compile-time constants and its methods call blasdx's block GEMM, whose
LTO-IR the call adds to the kernel's link (no ``link=``)::

    import blasdx as bx
    import blasdx.numba  # noqa: F401 - registers the descriptor's Numba types
    from numba import cuda

    GEMM = bx.Size(64, 64, 64) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM \\
        + bx.SM(90) + bx.Block()

    @cuda.jit
    def kernel(a, b, c):
        sA, sB, sC = GEMM.shared_memory()           # views into dynamic shared memory
        p = cuda.blockIdx.x
        GEMM.load_a(a[p], sA)
        GEMM.load_b(b[p], sB)
        GEMM.copy_wait()
        GEMM.execute(1.0, sA, sB, 0.0, sC)
        cuda.syncthreads()
        GEMM.store_c(sC, c[p])

    kernel[batch, GEMM.block_dim, 0, GEMM.shared_memory_size](a, b, c)

See docs/numba.md for the methods, the register API and the rules the typing enforces.
"""

from __future__ import annotations

from ..fusion import numba_lowering as _lowering  # noqa: F401 - registers the lowering
from ..fusion.numba_types import CONSTANTS, METHODS, Fragment, GemmType, SharedBuffer

__all__ = ["CONSTANTS", "METHODS", "Fragment", "GemmType", "SharedBuffer", "as_bits"]


def as_bits(host):
    """``host`` (a NumPy array) as a Numba device array holds it: bfloat16 as uint16 bits and fp8 as uint8
    bits (NumPy has no such types that Numba knows), any other type unchanged; pass the result to
    ``cuda.to_device``."""
    if host.dtype.name == "bfloat16":
        return host.view("uint16")
    if host.dtype.itemsize == 1 and host.dtype.kind not in "iu":
        return host.view("uint8")
    return host


def _init_extension() -> None:
    """Numba's ``numba_extensions`` entry point: importing this package registers everything."""

"""The schemes of products (value layer): what a mantissa requirement costs, and the block GEMM's rules.

``Scheme`` and the bits each type keeps are shared with blasdx.engine.emulation, which resolves the
array calls' ``mantissa_bits=`` (Hopper engine schemes included); :func:`resolve_block` is
what a descriptor with ``MantissaBits`` runs. It lives here, below the descriptor, so that
describing a GEMM loads nothing of the engines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..base import dtypes as _dt
from ..base.errors import ExecutionError

__all__ = ["Scheme", "NATIVE_BITS", "TF32_BITS", "BLOCK_SCHEMES", "resolve_block", "native_scheme",
           "check_requirement"]

#: Mantissa bits (stored, without the implicit one) each input type's own products keep.
NATIVE_BITS = {
    _dt.float64: 52, _dt.float32: 23, _dt.tfloat32: 10, _dt.float16: 10, _dt.bfloat16: 7,
    _dt.float8_e4m3: 3, _dt.float8_e5m2: 2,
}
TF32_BITS = 10


@dataclass(frozen=True)
class Scheme:
    """How the products are formed: ``name`` ("native", "tf32", "3xtf32", "ozaki"), tensor-core
    products per product, and the mantissa bits the scheme keeps."""

    name: str
    products: int
    mantissa_bits: int

    def __str__(self) -> str:
        if self.name == "native":
            return f"native products ({self.mantissa_bits} mantissa bits)"
        return f"{self.name} ({self.products} product{'s' if self.products > 1 else ''}, {self.mantissa_bits} bits)"


#: Schemes the block-level GEMM (kernels/blasdx/block_gemm.cuh) runs, and the SM each needs
#: (tf32 mma.sync: sm_80).
BLOCK_SCHEMES = {"native": 0, "tf32": 80, "3xtf32": 80}


def resolve_block(dtype: _dt.DType, mantissa_bits: int | None, sm: int | None) -> Scheme:
    """The cheapest scheme a block-level GEMM of ``dtype`` inputs on ``sm`` runs that keeps ``mantissa_bits``.

    float32: up to 10 bits one tf32 product, up to 23 three tf32 products of split operands
    (3xtf32, kernels/blasdx/mma_3xtf32.cuh), both on sm_80 and newer; before sm_80 FFMA, which
    keeps every bit. Every other type keeps its own products (float64: DMMA; the block GEMM has
    no float64 emulation). More bits than a type keeps, or any for integers, raise
    ExecutionError with the rule, as blasdx.engine.emulation.resolve does.
    """
    if mantissa_bits is None:
        return native_scheme(dtype)
    native = check_requirement(dtype, mantissa_bits)
    if dtype == _dt.float32 and (sm is None or sm >= BLOCK_SCHEMES["3xtf32"]):
        return Scheme("tf32", 1, TF32_BITS) if mantissa_bits <= TF32_BITS else Scheme("3xtf32", 3, native)
    return Scheme("native", 1, native)


def native_scheme(dtype: _dt.DType) -> Scheme:
    """The type's own products (integers: 0 bits, they are exact)."""
    return Scheme("native", 1, NATIVE_BITS.get(dtype, 0))


def check_requirement(dtype: _dt.DType, mantissa_bits: Any) -> int:
    """The bits ``dtype``'s own products keep, once ``mantissa_bits`` is known to be a requirement they can
    meet by some scheme: a positive int, not for integers, at most the type's own (ExecutionError otherwise)."""
    if isinstance(mantissa_bits, bool) or not isinstance(mantissa_bits, int) or mantissa_bits < 1:
        raise ExecutionError(f"mantissa_bits: expected a positive int or None, got {mantissa_bits!r}")
    native = NATIVE_BITS.get(dtype)
    if native is None:  # integers are exact
        raise ExecutionError(f"mantissa_bits: {dtype.name} products are exact integers; leave mantissa_bits unset")
    if mantissa_bits > native:
        raise ExecutionError(
            f"mantissa_bits: {dtype.name} inputs keep at most {native} mantissa bits; {mantissa_bits} were asked for"
        )
    return native

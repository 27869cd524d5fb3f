"""Precision a GEMM must keep, and the tensor-core scheme that keeps it.

A call may state the mantissa bits its products must keep (``mantissa_bits=`` of
``bx.matmul`` / ``bx.mma``). The bits are a minimum: the scheme is the cheapest one that
keeps at least that many.

* float32 inputs: up to 10 bits, one tf32 product (as ``bx.tf32``); up to 23 bits (all of
  float32's), three tf32 products of operands split into high and low parts
  (``3xtf32``: a_hi b_hi + a_hi b_lo + a_lo b_hi, f32 sums; kernels/blasdx/hopper/precision.cuh).
  It runs on the Hopper engine; where the engine does not run, the native float32 kernel
  keeps the bits at CUDA-core speed.
* other types: their own products keep their own mantissa; asking for more is refused.

The block-level GEMM (a descriptor with ``MantissaBits``) runs the schemes of
:func:`resolve_block`: tf32 and 3xtf32 on mma.sync for float32 on sm_80 and newer
(kernels/blasdx/mma_3xtf32.cuh), native products for everything else.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import dtypes as _dt
from .errors import ExecutionError

__all__ = ["Scheme", "NATIVE_BITS", "BLOCK_SCHEMES", "resolve", "resolve_block"]

#: Mantissa bits (stored, without the implicit one) each input type's own products keep.
NATIVE_BITS = {
    _dt.float64: 52, _dt.float32: 23, _dt.tfloat32: 10, _dt.float16: 10, _dt.bfloat16: 7,
    _dt.float8_e4m3: 3, _dt.float8_e5m2: 2,
}
TF32_BITS = 10


@dataclass(frozen=True)
class Scheme:
    """How the products are formed: ``name`` ("native", "tf32", "3xtf32"), tensor-core products per
    product, and the mantissa bits the scheme keeps."""

    name: str
    products: int
    mantissa_bits: int

    def __str__(self) -> str:
        if self.name == "native":
            return f"native products ({self.mantissa_bits} mantissa bits)"
        return f"{self.name} ({self.products} product{'s' if self.products > 1 else ''}, {self.mantissa_bits} bits)"


def resolve(dtype: _dt.DType, mantissa_bits: int | None) -> Scheme:
    """The scheme for inputs of ``dtype`` that keeps at least ``mantissa_bits`` (None: the type's own)."""
    native = NATIVE_BITS.get(dtype)
    if mantissa_bits is None:
        return Scheme("native", 1, native if native is not None else 0)
    if isinstance(mantissa_bits, bool) or not isinstance(mantissa_bits, int) or mantissa_bits < 1:
        raise ExecutionError(f"mantissa_bits: expected a positive int or None, got {mantissa_bits!r}")
    if native is None:  # integers are exact
        raise ExecutionError(f"mantissa_bits: {dtype.name} products are exact integers; leave mantissa_bits unset")
    if dtype == _dt.float32:
        if mantissa_bits <= TF32_BITS:
            return Scheme("tf32", 1, TF32_BITS)
        if mantissa_bits <= native:
            return Scheme("3xtf32", 3, native)
    elif mantissa_bits <= native:
        return Scheme("native", 1, native)
    raise ExecutionError(
        f"mantissa_bits: {dtype.name} inputs keep at most {native} mantissa bits; {mantissa_bits} were asked for"
    )


#: Schemes the block-level GEMM (kernels/blasdx/block_gemm.cuh) runs: mma.sync tf32 needs sm_80.
BLOCK_SCHEMES = {"native": 0, "tf32": 80, "3xtf32": 80}


def resolve_block(dtype: _dt.DType, mantissa_bits: int | None, sm: int | None) -> Scheme:
    """The scheme a block-level GEMM of ``dtype`` inputs on ``sm`` runs to keep ``mantissa_bits``.

    The rules (and errors) of :func:`resolve`; where the block GEMM does not run the scheme
    :func:`resolve` names (tf32 parts before sm_80, or array-call emulations that have no
    block-level kernel, such as float64 on int8 slices), the type's own products run, which
    keep every bit it has (float64: DMMA, float32 before sm_80: FFMA).
    """
    scheme = resolve(dtype, mantissa_bits)
    needs = BLOCK_SCHEMES.get(scheme.name)
    if needs is None or (sm is not None and sm < needs):
        return resolve(dtype, None)
    return scheme

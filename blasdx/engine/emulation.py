"""Precision a GEMM must keep, and the tensor-core scheme that keeps it.

A call may state the mantissa bits its products must keep (``mantissa_bits=`` of
``bx.matmul`` / ``bx.mma``). The bits are a minimum: the scheme is the cheapest one that
keeps at least that many.

* float32 inputs: up to 10 bits, one tf32 product (as ``bx.tf32``); up to 23 bits (all of
  float32's), three tf32 products of operands split into high and low parts
  (``3xtf32``: a_hi b_hi + a_hi b_lo + a_lo b_hi, f32 sums; kernels/blasdx/split_tf32.cuh).
  The parts keep 21 bits of each operand (hi and lo rounded to tf32: at most 2^-22 |x| is
  lost). The one-block kernel adds each 8-deep step's products into f32 registers with
  rounded adds and keeps float32's accuracy. The Hopper engine lets the tensor cores sum a
  stretch of K before the CUDA cores add it into f32 registers (a promotion), and the tensor
  cores' f32 sums truncate. Promoted every 2 stages (64 K: twelve truncating sums of the
  large terms) the error is about 3.7e-7 (2^-21.4) whatever K, 1.3-3.3x torch float32's for
  K <= 4096 (H200): that keeps :data:`ENGINE_3XTF32_BITS` bits. Promoted every stage, with
  each stage's small terms summed before its large ones (four truncating sums of large terms
  a promotion), it is within 1.5x of torch float32's from K = 64 on (0.87-1.34x at 64-16384,
  H200); below that depth the parts' own floor (about 7.5e-8) and the few sums that round
  make up most of the error and native float32 (FFMA) keeps the bits instead. The plan says
  which runs (:func:`engine_scheme`).
* float64 inputs: 1-52 bits run as exact int8 products of scaled residues on the Hopper
  engine (``ozaki``, blasdx.engine.ozaki): the bits are kept relative to the largest element of each
  row of x / column of y, and the number of int8 products grows with the bits and with K.
  Where the engine does not run (or for batches), float64 DMMA keeps every bit.
* other types: their own products keep their own mantissa; asking for more is refused.

The block-level GEMM (a descriptor with ``MantissaBits``) has its own, shorter list
(blasdx.describe.schemes.resolve_block): tf32 and 3xtf32 on mma.sync for float32, native otherwise.
"""

from __future__ import annotations

from ..base import dtypes as _dt
from ..describe.schemes import (
    NATIVE_BITS,
    TF32_BITS,
    Scheme,
    check_requirement,
    native_scheme,
)
from .ozaki import MAX_K, residues_for

__all__ = ["ENGINE_3XTF32_BITS", "ENGINE_3XTF32_FULL_MIN_K", "NATIVE_BITS", "Scheme", "engine_scheme", "resolve"]

#: Mantissa bits the Hopper engine's 3xtf32 keeps when promoted every 2 stages (see the module's text).
ENGINE_3XTF32_BITS = 21
#: Depth from which the engine's 3xtf32 promoted every stage keeps float32's accuracy; shorter
#: products asking for more than ENGINE_3XTF32_BITS run native float32 products.
ENGINE_3XTF32_FULL_MIN_K = 64


def resolve(dtype: _dt.DType, mantissa_bits: int | None, k: int | None = None) -> Scheme:
    """The scheme for inputs of ``dtype`` that keeps at least ``mantissa_bits`` (None: the type's own).

    ``k`` (the product's depth) fixes the number of int8 products of the float64 scheme; without
    it the count is that of the deepest K the scheme runs (blasdx.engine.ozaki.MAX_K).
    """
    if mantissa_bits is None:
        return native_scheme(dtype)
    native = check_requirement(dtype, mantissa_bits)
    if dtype == _dt.float32:
        if mantissa_bits <= TF32_BITS:
            return Scheme("tf32", 1, TF32_BITS)
        # 21 bits (promoted every 2 stages on the engine), or all 23 (every stage, or the one-block kernel)
        return Scheme("3xtf32", 3, ENGINE_3XTF32_BITS if mantissa_bits <= ENGINE_3XTF32_BITS else native)
    if dtype == _dt.float64:
        depth = MAX_K if k is None else min(max(k, 1), MAX_K)
        return Scheme("ozaki", residues_for(mantissa_bits, depth).count, mantissa_bits)
    return Scheme("native", 1, native)


def engine_scheme(scheme: Scheme, k: int) -> str | None:
    """The Hopper engine's scheme (blasdx.engine.hopper.SPLIT_CONFIGS) that keeps the bits of ``scheme`` (a
    "3xtf32" one) in a product ``k`` deep: "3xtf32" (promoted every 2 stages) for up to ENGINE_3XTF32_BITS
    bits, "3xtf32-23" (every stage) for more from ENGINE_3XTF32_FULL_MIN_K deep; None where neither does."""
    if scheme.name != "3xtf32":
        return None
    if scheme.mantissa_bits <= ENGINE_3XTF32_BITS:
        return "3xtf32"
    return "3xtf32-23" if k >= ENGINE_3XTF32_FULL_MIN_K else None

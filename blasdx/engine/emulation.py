"""Precision a GEMM must keep, and the tensor-core scheme that keeps it.

A call may state the mantissa bits its products must keep (``mantissa_bits=`` of
``bx.matmul`` / ``bx.mma``). The bits are a minimum: the scheme is the cheapest one that
keeps at least that many.

* float32 inputs: up to 10 bits, one tf32 product (as ``bx.tf32``); up to 23 bits (all of
  float32's), three tf32 products of operands split into high and low parts
  (``3xtf32``: a_hi b_hi + a_hi b_lo + a_lo b_hi, f32 sums; kernels/blasdx/split_tf32.cuh).
  The parts keep 21 bits of each operand (hi and lo rounded to tf32: at most 2^-22 |x| is
  lost). The one-block kernel adds each 8-deep step's products into f32 registers with
  rounded adds and keeps float32's accuracy; the Hopper engine lets the tensor cores sum two
  32-deep stages before it rounds, and their f32 sums truncate, which costs about two bits
  (measured on H200: a normwise error of 3.7e-7, about 2^-21.4, flat in K, against 0.6-3.2e-7
  for torch float32 at K = 16-16384). So the engine runs 3xtf32 for at most
  :data:`ENGINE_3XTF32_BITS` bits and native float32 (FFMA) for more, and the plan says so;
  where the engine does not run, the native float32 kernel keeps the bits at CUDA-core speed.
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

__all__ = ["ENGINE_3XTF32_BITS", "NATIVE_BITS", "Scheme", "engine_runs_3xtf32", "resolve"]

#: Mantissa bits the Hopper engine's 3xtf32 keeps (see the module's text); asked for more, the engine
#: runs native float32 products.
ENGINE_3XTF32_BITS = 21


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
        # what every path of the scheme keeps: 21 bits, or all 23 where only the one-block kernel runs it
        return Scheme("3xtf32", 3, ENGINE_3XTF32_BITS if mantissa_bits <= ENGINE_3XTF32_BITS else native)
    if dtype == _dt.float64:
        depth = MAX_K if k is None else min(max(k, 1), MAX_K)
        return Scheme("ozaki", residues_for(mantissa_bits, depth).count, mantissa_bits)
    return Scheme("native", 1, native)


def engine_runs_3xtf32(scheme: Scheme) -> bool:
    """Whether the Hopper engine's 3xtf32 keeps the bits ``scheme`` (a "3xtf32" one) promises."""
    return scheme.name == "3xtf32" and scheme.mantissa_bits <= ENGINE_3XTF32_BITS

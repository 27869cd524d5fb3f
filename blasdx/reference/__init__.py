"""Host references every correctness check compares with, and the tolerance table (``tolerance``): ``gemm``
for products, ``trsm`` for triangular solves. The GEMM reference's names answer here too (``blasdx.reference``)."""

from __future__ import annotations

from .gemm import (
    FP8_WGMMA_FRACTION_BITS,
    FP8_WGMMA_GROUP,
    MARGINS,
    assert_close,
    assert_gemm_close,
    fp8_wgmma_allowance,
    fp8_wgmma_sum,
    gemm_scale,
    ozaki_bound,
    random_operand,
    reference_gemm,
    relative_error,
    rounding,
    to_float64,
    tolerance,
)

__all__ = [
    "FP8_WGMMA_FRACTION_BITS",
    "FP8_WGMMA_GROUP",
    "MARGINS",
    "assert_close",
    "assert_gemm_close",
    "fp8_wgmma_allowance",
    "fp8_wgmma_sum",
    "gemm_scale",
    "ozaki_bound",
    "random_operand",
    "reference_gemm",
    "relative_error",
    "rounding",
    "to_float64",
    "tolerance",
]

"""Host references every correctness check compares with, and the tolerance table (``tolerance``): ``gemm``
for products, ``trsm`` for triangular solves. The GEMM reference's names answer here too (``blasdx.reference``)."""

from __future__ import annotations

from . import gemm as _gemm
from .gemm import *  # noqa: F403 - the names of _gemm.__all__

__all__ = list(_gemm.__all__)

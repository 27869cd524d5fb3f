"""The generated kernel source of any descriptor: the batched GEMM or the batched TRSM.

One dispatch on the descriptor's Function, so that neither generator imports the other
or the descriptor classes (codegen for Function.MM, trsm_codegen for Function.TRSM).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..describe.operators import Function
from . import gemm as _codegen
from . import trsm as _trsm_codegen

if TYPE_CHECKING:
    from ..describe.descriptor import Descriptor

__all__ = ["generate"]


def generate(desc: Descriptor) -> _codegen.GeneratedSource:
    """The batched kernel of a validated descriptor, with its name and target."""
    if desc.function is Function.TRSM:
        return _trsm_codegen.generate(desc)
    return _codegen.generate(desc)

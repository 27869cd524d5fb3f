"""blasdx: cuBLASDx-style block-level GEMM for Python, generated as CUDA C++ and compiled with NVRTC.

Importing blasdx loads the value layer only (operators, the descriptor, types, errors);
the compile, launch and array machinery loads when one of its names is first used, so
``import blasdx`` stays cheap for code that only describes GEMMs.
"""

from __future__ import annotations

import importlib
from typing import Any

from .descriptor import Descriptor
from .dtypes import (
    DType,
    bfloat16,
    float8_e4m3,
    float8_e5m2,
    float16,
    float32,
    float64,
    int8,
    int32,
    tfloat32,
    uint8,
)
from .errors import BlasdxError, CompileError, DescriptorError, DeviceError, ExecutionError, UnsupportedError
from .operators import (
    SM,
    Alignment,
    Arrangement,
    Block,
    BlockDim,
    Function,
    LeadingDimension,
    MantissaBits,
    MaxAlignment,
    Precision,
    RequiredMantissaBits,
    Size,
    Transpose,
    TransposeMode,
    Type,
    Workload,
    col_major,
    left_layout,
    right_layout,
    row_major,
)
from .operators import BatchesPerBlock, Diag, FillMode, Side
from .precompile import precompile
from .trsm import TrsmDescriptor

__version__ = "0.1.0"

#: Public names whose modules load on first use: name -> module.
_LAZY = {
    "CompiledKernel": "compiled",
    "CompileOptions": "nvrtc_driver",
    "to_device": "arrays",
    "from_device": "arrays",
    "compile_kernel": "fusion",
    "header": "fusion",
    "FusedKernel": "fusion",
    "FusionHeader": "fusion",
    "matmul": "array_gemm",
    "mma": "array_gemm",
    "tf32": "array_gemm",
    "scaled_mm": "scaled",
    "solve_triangular": "array_trsm",
    "DeviceGemm": "device_gemm",
}

__all__ = [
    "Descriptor", "DeviceGemm", "DType",
    "bfloat16", "float8_e4m3", "float8_e5m2", "float16", "float32", "float64", "int8", "int32", "tfloat32", "uint8",
    "BlasdxError", "CompileError", "DescriptorError", "DeviceError", "ExecutionError", "UnsupportedError",
    "SM", "Alignment", "Arrangement", "Block", "BlockDim", "Workload", "Function", "LeadingDimension", "MaxAlignment",
    "MantissaBits", "RequiredMantissaBits",
    "Precision", "Size", "Transpose", "TransposeMode", "Type", "col_major", "left_layout", "right_layout", "row_major",
    "CompiledKernel", "CompileOptions", "precompile",
    "to_device", "from_device",
    "compile_kernel", "header", "FusedKernel", "FusionHeader",
    "matmul", "mma", "tf32", "scaled_mm", "solve_triangular",
    "Side", "FillMode", "Diag", "BatchesPerBlock", "TrsmDescriptor",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """Load the module of a public name on first use (PEP 562) and keep the name here."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'blasdx' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

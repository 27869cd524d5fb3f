"""blasdx: cuBLASDx-style block-level GEMM for Python, generated as CUDA C++ and compiled with NVRTC.

Importing blasdx loads the value layer only (operators, the descriptor, types, errors);
the compile, launch and array machinery loads when one of its names is first used, so
``import blasdx`` stays cheap for code that only describes GEMMs.
"""

from __future__ import annotations

import importlib
from typing import Any

from .describe import backend as _backend
from .describe.descriptor import Descriptor
from .describe.operators import (
    SM,
    Alignment,
    Arrangement,
    BatchesPerBlock,
    Block,
    BlockDim,
    Diag,
    FillMode,
    Function,
    LeadingDimension,
    MantissaBits,
    MaxAlignment,
    Precision,
    RequiredMantissaBits,
    Side,
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
from .describe.trsm import TrsmDescriptor
from .base.dtypes import (
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
from .base.errors import (
    BlasdxError,
    CompileError,
    DescriptorError,
    DeviceError,
    ExecutionError,
    UnsupportedError,
)
from .run.precompile import precompile

__version__ = "0.1.0"

# The descriptor reaches compile and launch through this loader (the value layer imports nothing above it).
_backend.install(lambda: importlib.import_module(".run.runtime", __name__))

#: Public names whose modules load on first use: name -> module.
_LAZY = {
    "CompiledKernel": "compile.compiled",
    "CompileOptions": "compile.nvrtc",
    "to_device": "arrays",
    "from_device": "arrays",
    "compile_kernel": "fusion.kernel",
    "header": "fusion.kernel",
    "FusedKernel": "fusion.kernel",
    "FusionHeader": "fusion.kernel",
    "matmul": "calls.matmul",
    "mma": "calls.matmul",
    "tf32": "calls.matmul",
    "scaled_mm": "calls.scaled_mm",
    "grouped_mm": "calls.grouped_mm",
    "tune": "calls.tune",
    "solve_triangular": "calls.solve_triangular",
    "DeviceGemm": "engine.device_gemm",
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
    "matmul", "mma", "tf32", "scaled_mm", "tune", "solve_triangular",
    "grouped_mm",
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

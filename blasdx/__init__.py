"""blasdx: cuBLASDx-style block-level GEMM for Python, generated as CUDA C++ and compiled with NVRTC."""

from .arrays import from_device, to_device
from .compiled import CompiledKernel
from .nvrtc_driver import CompileOptions
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
from .fusion import FusedKernel, FusionHeader, compile_kernel, header
from .array_gemm import matmul, mma, tf32
from .operators import (
    SM,
    Alignment,
    Arrangement,
    Block,
    BlockDim,
    Function,
    LeadingDimension,
    MaxAlignment,
    Precision,
    Size,
    Transpose,
    TransposeMode,
    Type,
    col_major,
    left_layout,
    right_layout,
    row_major,
)
from .precompile import precompile

__version__ = "0.1.0"

__all__ = [
    "Descriptor", "DType",
    "bfloat16", "float8_e4m3", "float8_e5m2", "float16", "float32", "float64", "int8", "int32", "tfloat32", "uint8",
    "BlasdxError", "CompileError", "DescriptorError", "DeviceError", "ExecutionError", "UnsupportedError",
    "SM", "Alignment", "Arrangement", "Block", "BlockDim", "Function", "LeadingDimension", "MaxAlignment",
    "Precision", "Size", "Transpose", "TransposeMode", "Type", "col_major", "left_layout", "right_layout", "row_major",
    "CompiledKernel", "CompileOptions", "precompile",
    "to_device", "from_device",
    "compile_kernel", "header", "FusedKernel", "FusionHeader",
    "matmul", "mma", "tf32",
    "__version__",
]

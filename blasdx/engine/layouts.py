"""Moving operands between layouts on the device: strided copies and complex-to-real expansion.

Two memory-bound kernels that let the real GEMMs serve more calls:

* :func:`copy` -- ``dst = src`` for batches of matrices of any element size (1 to 16 bytes:
  complex128 included) from any element strides into a row-major destination with its own
  leading dimension (kernels/repack.cu); a column-major destination is the transposed copy.
  The blocked triangular solve copies B into its result with it, and complex products pack
  an operand whose parts do not run along K.
* :func:`expand` -- a complex K x N matrix B as the real 2K x 2N matrix ``[[re, im], [-im, re]]``
  per element (kernels/complex_expand.cu), column-major, so that a complex A read as the real
  M x 2K matrix of its interleaved parts times it gives the complex product read as the real
  M x 2N matrix of its interleaved parts (blasdx.calls.complex_matmul).
"""

from __future__ import annotations

import math
from typing import Any

from .. import dtypes as _dt
from .hopper import _Kernel

__all__ = ["COPY_NAME", "EXPAND_NAME", "copy", "copy_source", "expand", "expand_source"]

COPY_NAME = "blasdx_repack"
EXPAND_NAME = "blasdx_complex_expand"
_ELEMENT_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long", 16: "uint4"}
_PART_TYPES = {"float32": "float", "float64": "double"}
_PARAMS = ("u64", "u64", "i32", "i32", "i64", "i64", "i64", "i64", "i64", "i32")
_MAX_GRID = 65535
_KERNELS: dict[tuple[str, Any, int], _Kernel] = {}


def copy_source(itemsize: int) -> str:
    """kernels/repack.cu for elements of ``itemsize`` bytes (16: complex128)."""
    return f'using repack_type = {_ELEMENT_TYPES[itemsize]};\n#include "repack.cu"\n'


def expand_source(part: _dt.DType) -> str:
    """kernels/complex_expand.cu for complex elements whose parts are ``part`` (float32 or float64)."""
    return f'using part_type = {_PART_TYPES[part.name]};\n#include "complex_expand.cu"\n'


def _kernel(kind: str, key: Any, sm: int) -> _Kernel:
    """The kernel of ``kind`` for ``key`` (item size or part type), compiled for sm_``sm`` at first use."""
    found = _KERNELS.get((kind, key, sm))
    if found is None:
        source, name = (copy_source(key), COPY_NAME) if kind == "copy" else (expand_source(key), EXPAND_NAME)
        found = _KERNELS[(kind, key, sm)] = _Kernel(source, name, f"sm_{sm}", _PARAMS)
    return found


def _launch(kernel: _Kernel, device_id: int, stream: int, src: int, dst: int, rows: int, cols: int,
            src_strides: tuple[int, int, int], dst_ld: int, dst_batch: int, batch: int) -> None:
    if rows == 0 or cols == 0 or batch == 0:
        return
    grid = (math.ceil(cols / 32), math.ceil(rows / 32), min(batch, _MAX_GRID))
    if grid[1] > _MAX_GRID:
        raise ValueError(f"{rows} rows exceed the {_MAX_GRID * 32} a layout kernel covers")
    with kernel.params.lock:
        kernel.fill((src, dst, rows, cols, *src_strides, dst_ld, dst_batch, batch))
        kernel.launch(device_id, grid, (32, 8, 1), stream)


def copy(device_id: int, sm: int, stream: int, itemsize: int, src: int, dst: int, rows: int, cols: int,
         src_strides: tuple[int, int, int], dst_strides: tuple[int, int, int], batch: int) -> None:
    """``dst = src`` for ``batch`` rows x cols matrices; strides (row, column, batch) in elements.

    One of dst's row / column strides must be 1 (the other is its leading dimension); src's may
    be anything (a batch stride of 0 broadcasts one matrix). Runs on ``stream`` with the
    device's context current.
    """
    s_row, s_col, s_batch = src_strides
    d_row, d_col, d_batch = dst_strides
    if d_col != 1 and cols > 1:  # a column-major destination: copy the transposed matrices
        rows, cols, s_row, s_col, d_row = cols, rows, s_col, s_row, d_col
    _launch(_kernel("copy", itemsize, sm), device_id, stream, src, dst, rows, cols, (s_row, s_col, s_batch),
            max(d_row, 1), d_batch, batch)


def expand(device_id: int, sm: int, stream: int, part: _dt.DType, src: int, dst: int, rows: int, cols: int,
           src_strides: tuple[int, int, int], dst_ld: int, dst_batch: int, batch: int) -> None:
    """The real 2 rows x 2 cols column-major expansion of complex ``src`` (strides in complex elements).

    ``dst_ld`` (>= 2 rows) and ``dst_batch`` are in real elements.
    """
    _launch(_kernel("expand", part, sm), device_id, stream, src, dst, rows, cols, src_strides, dst_ld, dst_batch, batch)

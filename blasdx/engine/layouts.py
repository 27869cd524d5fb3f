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

from ..base import dtypes as _dt
from .hopper import _Kernel

__all__ = ["COMBINE_NAME", "COPY_NAME", "EXPAND_NAME", "PLANES_NAME", "combine", "copy", "copy_source", "expand",
           "expand_source", "planes", "planes_source"]

COPY_NAME = "blasdx_repack"
EXPAND_NAME = "blasdx_complex_expand"
PLANES_NAME = "blasdx_complex_planes"
COMBINE_NAME = "blasdx_complex_combine"
_ELEMENT_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long", 16: "uint4"}
_PART_TYPES = {"float32": "float", "float64": "double"}
_PARAMS = ("u64", "u64", "i32", "i32", "i64", "i64", "i64", "i64", "i64", "i32")
_PLANES_PARAMS = ("u64", "u64", "i32", "i32", "i64", "i64", "i64", "i64", "i64", "i64", "i32")
_COMBINE_PARAMS = ("u64", "u64", "i32", "i32", "i64", "i64", "i64", "i64", "i64", "i64", "i32")
_SCALARS = {"float32": "f32", "float64": "f64"}
_MAX_GRID = 65535
_KERNELS: dict[tuple[str, Any, int], _Kernel] = {}


def copy_source(itemsize: int) -> str:
    """kernels/repack.cu for elements of ``itemsize`` bytes (16: complex128)."""
    return f'using repack_type = {_ELEMENT_TYPES[itemsize]};\n#include "repack.cu"\n'


def expand_source(part: _dt.DType) -> str:
    """kernels/complex_expand.cu for complex elements whose parts are ``part`` (float32 or float64)."""
    return f'using part_type = {_PART_TYPES[part.name]};\n#include "complex_expand.cu"\n'


def planes_source(part: _dt.DType) -> str:
    """kernels/complex_planes.cu (both kernels) for parts of type ``part`` (float32 or float64)."""
    return f'using part_type = {_PART_TYPES[part.name]};\n#include "complex_planes.cu"\n'


def _kernel(kind: str, key: Any, sm: int) -> _Kernel:
    """The kernel of ``kind`` for ``key`` (item size or part type), compiled for sm_``sm`` at first use."""
    found = _KERNELS.get((kind, key, sm))
    if found is None:
        arch = f"sm_{sm}"
        if kind == "copy":
            found = _Kernel(copy_source(key), COPY_NAME, arch, _PARAMS)
        elif kind == "expand":
            found = _Kernel(expand_source(key), EXPAND_NAME, arch, _PARAMS)
        elif kind == "planes":
            found = _Kernel(planes_source(key), PLANES_NAME, arch, _PLANES_PARAMS)
        else:
            scalar = _SCALARS[key.name]
            found = _Kernel(planes_source(key), COMBINE_NAME, arch, _COMBINE_PARAMS + (scalar, scalar))
        _KERNELS[(kind, key, sm)] = found
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


def planes(device_id: int, sm: int, stream: int, part: _dt.DType, src: int, dst: int, rows: int, cols: int,
           src_strides: tuple[int, int, int], dst_strides: tuple[int, int, int], plane: int, batch: int) -> None:
    """The planes re, im, re + im of complex ``src`` (strides in complex elements), ``plane`` real elements apart.

    One of dst's (row, column) strides must be 1, the other is its leading dimension (a
    column-major destination is the transposed copy); dst's batch stride in real elements.
    """
    s_row, s_col, s_batch = src_strides
    d_row, d_col, d_batch = dst_strides
    if d_col != 1 and cols > 1:
        rows, cols, s_row, s_col, d_row = cols, rows, s_col, s_row, d_col
    if rows == 0 or cols == 0 or batch == 0:
        return
    kernel = _kernel("planes", part, sm)
    grid = (math.ceil(cols / 32), math.ceil(rows / 32), min(batch, _MAX_GRID))
    with kernel.params.lock:
        kernel.fill((src, dst, rows, cols, s_row, s_col, s_batch, max(d_row, 1), d_batch, plane, batch))
        kernel.launch(device_id, grid, (32, 8, 1), stream)


def combine(device_id: int, sm: int, stream: int, part: _dt.DType, t: int, d: int, rows: int, cols: int,
            ld_t: int, t_batch: int, plane: int, d_strides: tuple[int, int, int], batch: int, alpha: float,
            beta: float, multiprocessors: int) -> None:
    """D = alpha ((T1 - T2) + i (T3 - T1 - T2)) + beta D; T row-major planes, D's strides in complex elements."""
    total = rows * cols * batch
    if total == 0:
        return
    kernel = _kernel("combine", part, sm)
    grid = (max(1, min(math.ceil(total / 256), 16 * multiprocessors)), 1, 1)
    with kernel.params.lock:
        kernel.fill((t, d, rows, cols, ld_t, t_batch, plane, *d_strides, batch, float(alpha), float(beta)))
        kernel.launch(device_id, grid, (256, 1, 1), stream)

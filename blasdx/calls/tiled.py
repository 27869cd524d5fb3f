"""Multi-block GEMM for sizes beyond one block: tile choice, generated source, compile, launch.

One thread block computes one BM x BN tile of ``D = alpha * A @ B + beta * C`` and walks K
in BK steps (kernels/tiled_gemm.cu), the block GEMM's register API doing the arithmetic.
Sizes, leading dimensions and strides are runtime arguments, so one kernel serves every
shape with the same types, A/B arrangements and copy widths: a handful of kernels cover
all calls. The tile of a type is a descriptor (:func:`tile_descriptor`), so the block
GEMM, its shared-memory layout and its checks are the ones every other path uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base import dtypes as _dt
from ..compile.cache import cached_compile
from ..describe.descriptor import Descriptor
from ..describe.operators import (
    SM,
    Alignment,
    Arrangement,
    Block,
    BlockDim,
    Function,
    LeadingDimension,
    Precision,
    Size,
    col_major,
    row_major,
)
from ..fusion import kernel as _fusion

__all__ = ["KERNEL_NAME", "TileShape", "TiledKernel", "tile_shape", "tile_descriptor", "tiled_kernel", "copy_width"]

#: The ``extern "C"`` entry point of kernels/tiled_gemm.cu.
KERNEL_NAME = "blasdx_tiled_gemm"
#: Problems per launch along grid y; a block loops over the rest.
MAX_GRID_Y = 65535


@dataclass(frozen=True)
class TileShape:
    """The output tile one block computes (m x n), the K step (k) and the block's threads."""

    m: int
    n: int
    k: int
    threads: int
    stages: int = 3


# Tile shapes measured with ``benchmarks/matmul.py --sweep`` (4096^3, H100, 2026-11-22;
# TFLOP/s of the chosen shape against the runner-up):
#   f16 -> f16       128 x 128 x 32, 128 threads   190 (256 threads: 136, 128 x 256 x 32: 180)
#   other 16-bit     128 x 128 x 64, 256 threads   bf16 133 (x 32: 129; 128 threads: 121)
#   tf32             128 x 128 x 32, 256 threads   53 (x 16: 47)
#   f32 (FFMA)        64 x  64 x 16, 256 threads   23 (x 32 and 128 x 128 alike)
#   f64               64 x  64 x 32, 128 threads   19 (x 16: 18)
#   int8 / uint8     128 x 128 x 64, 256 threads   131 (x 32: 114)
# fp8 keeps K steps of 32: at 64 its row-major A spilled. Three cp.async stages beat two
# (f16: 136 vs 120) and four add nothing. Results of at most 64 rows or columns take 64-wide
# tiles so that small problems still spread over the SMs.
_TILES: dict[str, tuple[int, int, int, int]] = {
    "f16->f16": (128, 128, 32, 128),
    "16-bit": (128, 128, 64, 256),
    "tfloat32": (128, 128, 32, 256),
    "float32": (64, 64, 16, 256),
    "float64": (64, 64, 32, 128),
    "8-bit int": (128, 128, 64, 256),
    "fp8": (128, 128, 32, 256),
}


def _family(a: _dt.DType, c: _dt.DType, sm: int) -> str:
    if a == _dt.float16 and c == _dt.float16:
        return "f16->f16"
    if a.size == 2:
        return "16-bit"
    if a in (_dt.int8, _dt.uint8):
        return "8-bit int"
    if a.size == 1:
        return "fp8"
    if a == _dt.float64 and sm >= 80:
        return "float64"
    if a == _dt.tfloat32:
        return "tfloat32"
    return "float32"  # FFMA: f32, and f64 before sm_80 (DFMA)


def tile_shape(a: _dt.DType, m: int, n: int, sm: int, c: _dt.DType | None = None) -> TileShape:
    """The measured tile for inputs of type ``a`` (result ``c``) and an M x N result."""
    stages = 3 if sm >= 80 else 2  # without cp.async (sm_75) a third stage only costs shared memory
    bm, bn, bk, threads = _TILES[_family(a, c if c is not None else RESULT_OF.get(a, a), sm)]
    if sm < 80 and a.size == 2:
        bk = 32  # two 128 x 64 stages would exceed sm_75's 64 KB
    shrunk = (bm > 64 and m <= 64) or (bn > 64 and n <= 64)
    if shrunk:
        bm, bn, threads = min(bm, 64) if m <= 64 else bm, min(bn, 64) if n <= 64 else bn, min(threads, 128)
    return TileShape(bm, bn, bk, threads, stages)


#: The result type a multi-block call of each input type produces when none is given.
RESULT_OF = {_dt.float8_e4m3: _dt.float16, _dt.float8_e5m2: _dt.float16, _dt.float16: _dt.float16}


def tile_descriptor(
    a: _dt.DType, b: _dt.DType, c: _dt.DType, a_row_major: bool, b_row_major: bool, tile: TileShape, sm: int
) -> Descriptor:
    """The block GEMM of one tile: its padded shared-memory leading dimensions are the suggested ones."""
    layout = (row_major if a_row_major else col_major, row_major if b_row_major else col_major, row_major)
    base = (
        Size(tile.m, tile.n, tile.k)
        + Precision(a, b, c)
        + Function.MM
        + Arrangement(*layout)
        + Alignment(16, 16, 16)
        + SM(sm)
        + Block()
        + BlockDim(tile.threads)
    )
    lda, ldb, _ = base.suggested_leading_dimension
    ldc = tile.n
    return base + LeadingDimension(lda, ldb, ldc)


def copy_width(ptr: int, itemsize: int, ld: int, outer: int, batch_stride: int, batch: int) -> int:
    """Widest global->shared copy (bytes, <= 16) that every row start of every problem allows."""
    width = 16
    terms = [ptr]
    if outer > 1:
        terms.append(ld * itemsize)
    if batch > 1:
        terms.append(batch_stride * itemsize)
    for term in terms:
        while width > itemsize and term % width:
            width //= 2
    return max(width, itemsize)


def _stage_bytes(desc: Descriptor) -> int:
    """One A + B stage as laid out by Gemm::slice_shared_memory_ab, rounded up to 16 bytes."""
    a_bytes = desc.a_size * desc.a_value_type.size
    b_offset = (a_bytes + 15) // 16 * 16
    return (b_offset + desc.b_size * desc.b_value_type.size + 15) // 16 * 16


def generate(desc: Descriptor, vec_a: int, vec_b: int, stages: int = 3) -> str:
    """kernels/tiled_gemm.cu instantiated for one tile descriptor, the two copy widths and the stage count."""
    return "\n".join(
        [
            _fusion.prelude({"TILE": desc}),
            f"#define BLASDX_TILED_VEC_A {vec_a}",
            f"#define BLASDX_TILED_VEC_B {vec_b}",
            f"#define BLASDX_TILED_STAGE_BYTES {_stage_bytes(desc)}",
            f"#define BLASDX_TILED_STAGES {stages}",
            '#include "tiled_gemm.cu"',
            "",
        ]
    )


class TiledKernel:
    """The multi-block kernel of one (tile descriptor, copy widths): compiled once, launched per call."""

    __slots__ = (
        "desc", "vec_a", "vec_b", "stages", "source", "shared_memory", "threads", "_compiled", "_configs", "_scalar",
        "_packed",
    )

    def __init__(self, desc: Descriptor, vec_a: int, vec_b: int, stages: int = 3) -> None:
        self.desc = desc
        self.vec_a = vec_a
        self.vec_b = vec_b
        self.stages = stages
        self.source = generate(desc, vec_a, vec_b, stages)
        self.shared_memory = stages * _stage_bytes(desc)
        self.threads = desc.max_threads_per_block
        self._compiled: Any = None
        self._configs: dict[tuple[int, int], Any] = {}
        self._scalar = {"float32": np.float32, "float64": np.float64, "int32": np.int32}[desc.scalar_type.name]
        self._packed: dict[int, Any] = {}

    def compile(self) -> Any:
        """The CompiledKernel (through both cache levels)."""
        if self._compiled is None:
            self._compiled = cached_compile(self.source, KERNEL_NAME, self.desc.arch)
        return self._compiled

    def grid(self, m: int, n: int, batch: int) -> tuple[int, int, int]:
        """(output tiles, problems along y, 1)."""
        tiles = math.ceil(m / self.desc.size[0]) * math.ceil(n / self.desc.size[1])
        return (tiles, min(batch, MAX_GRID_Y), 1)

    def config(self, m: int, n: int, batch: int) -> Any:
        """The LaunchConfig of an M x N result with ``batch`` problems, memoised."""
        grid = self.grid(m, n, batch)
        key = grid[:2]
        found = self._configs.get(key)
        if found is None:
            from cuda.core import LaunchConfig

            if len(self._configs) > 256:
                self._configs.clear()
            found = self._configs[key] = LaunchConfig(
                grid=grid, block=(self.threads, 1, 1), shmem_size=self.shared_memory
            )
        return found

    def kernel(self) -> Any:
        """The loaded cuda.core Kernel on the current device (shared memory opted in)."""
        return self.compile().kernel(dynamic_shared_memory=self.shared_memory)

    def packed(self, device_id: int) -> Any:
        """The kernel loaded on ``device_id`` with its parameter block laid out (once per device).

        Launch with ``packed(d).launch(*grid(m, n, batch)[:2], stream_handle, *arguments)``, the
        arguments in the order of kernels/tiled_gemm.cu, with device ``d`` current.
        """
        found = self._packed.get(device_id)
        if found is None:
            from ..launch.cuda_driver import PackedLaunch

            kernel = self.compile().kernel(dynamic_shared_memory=self.shared_memory, device_id=device_id)
            scalar = {"float32": "f", "float64": "d", "int32": "i"}[self.desc.scalar_type.name]
            slots = "PPPP" + "iii" + "qq" + "qqqq" + "qqqq" + "i" + scalar * 2
            found = self._packed[device_id] = PackedLaunch(
                kernel, slots, (self.threads, 1, 1), self.shared_memory, name=KERNEL_NAME
            )
        return found

    def scalar(self, value: float) -> Any:
        """alpha / beta in the kernel's scalar type."""
        return self._scalar(value)


_KERNELS: dict[tuple[Any, ...], TiledKernel] = {}


def tiled_kernel(
    a: _dt.DType,
    b: _dt.DType,
    c: _dt.DType,
    a_row_major: bool,
    b_row_major: bool,
    m: int,
    n: int,
    sm: int,
    vec_a: int,
    vec_b: int,
) -> TiledKernel:
    """The (memoised) multi-block kernel for these types, arrangements, result size class and copy widths."""
    tile = tile_shape(a, m, n, sm, c)
    key = (a, b, c, a_row_major, b_row_major, tile, sm, vec_a, vec_b)
    found = _KERNELS.get(key)
    if found is None:
        desc = tile_descriptor(a, b, c, a_row_major, b_row_major, tile, sm)
        found = _KERNELS[key] = TiledKernel(desc, vec_a, vec_b, tile.stages)
    return found

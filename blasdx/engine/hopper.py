"""The Hopper engine's host side: tile configuration, how operands reach TMA, compile, launch.

On an sm_90 GPU, ``bx.matmul`` / ``bx.mma`` run the types wgmma serves (f16 -> f16 | f32,
bf16 -> f32, tf32 -> f32, e4m3 / e5m2 -> f16 | f32, int8 / uint8 -> int32, and f32 -> f32 at
float32 accuracy as three tf32 products when a call asks for it: blasdx.engine.emulation) through
kernels/hopper_gemm.cu: TMA loads into a stage ring,
warp-specialised wgmma consumers, a persistent grid, and split K when the output has too
few tiles to fill the GPU (stream-K, the last tiles' K steps shared evenly by all blocks,
blasdx.engine.streamk, is built but measured slower: bx.tune tries it, the rule does not,
STREAM_K_BY_RULE). This module decides
everything a call needs from the operands' shapes, strides and pointers (:class:`EnginePlan`),
once per kind of call:

* the tile configuration and the number of K splits or stream-K waves (:func:`choose_config`, the
  one rule);
* each operand's route (:class:`OperandRoute`): read in place by TMA, or first repacked
  into a K-major scratch copy (kernels/repack.cu) when TMA cannot describe it (a row or
  batch stride that is not a multiple of 16 bytes) or the instruction cannot read its
  layout (8-bit and tf32 wgmma read K-major operands only);
* for fp8, how often the tensor core's partial sums are promoted into f32 registers
  (:data:`PROMOTION`; ``fast_accumulation`` keeps the whole sum in the tensor core);
* the tensor maps (encoded once, re-pointed per call) and the launch parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..base import dtypes as _dt
from ..compile.cache import cached_compile
from ..compile.compiled import Forward
from ..launch import cuda_driver as _driver
from ..launch import scratch as _scratch
from . import streamk as _streamk

__all__ = [
    "SERVED", "EngineConfig", "OperandRoute", "EnginePlan", "choose_config", "split_count", "serves", "route",
    "gemm_source", "describe_call", "KERNEL_NAME",
]

KERNEL_NAME = "blasdx_hopper_gemm"
REDUCE_NAME = "blasdx_splitk_reduce"
REPACK_NAME = "blasdx_repack"
ARCH = "sm_90a"

#: (input, result) type pairs the engine runs; other types take the multi-block mma.sync kernel.
#: 8-bit inputs may mix (e4m3 x e5m2, int8 x uint8): the table of blasdx.base.dtypes decides.
SERVED = {
    (_dt.float16, _dt.float16), (_dt.float16, _dt.float32), (_dt.bfloat16, _dt.float32), (_dt.bfloat16, _dt.bfloat16),
    (_dt.tfloat32, _dt.float32),
    (_dt.float8_e4m3, _dt.float16), (_dt.float8_e4m3, _dt.float32), (_dt.float8_e5m2, _dt.float16),
    (_dt.float8_e5m2, _dt.float32), (_dt.int8, _dt.int32), (_dt.uint8, _dt.int32),
}
#: Emulated schemes the engine runs: scheme name -> (input, result) type pairs. "3xtf32" promotes the
#: tensor cores' sums every 2 stages, "3xtf32-23" every stage (blasdx.engine.emulation says what each keeps).
EMULATED_SERVED = {"3xtf32": {(_dt.float32, _dt.float32)}, "3xtf32-23": {(_dt.float32, _dt.float32)}}
_FP8 = (_dt.float8_e4m3, _dt.float8_e5m2)
_MMA_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16", "tfloat32": "blasdx::tf32", "float32": "blasdx::tf32",
              "float8_e4m3": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2", "int8": "signed char",
              "uint8": "unsigned char"}
_STORAGE_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16", "tfloat32": "float", "float32": "float",
                  "float8_e4m3": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2", "int8": "signed char",
                  "uint8": "unsigned char", "int32": "int", "float64": "double"}

#: fp8: K elements whose products the tensor core sums before they are added into f32
#: registers (one 128-byte stage of K, the DeepSeek-V3 scheme). The tensor core's fp8 sums keep
#: about 14 significant bits (docs/index.md); promoting bounds how many such additions pile up.
PROMOTION = 128
#: Promotion intervals the kernel supports: whole instruction K steps that divide a stage.
PROMOTION_INTERVALS = (32, 64, 128)
_UNSIGNED = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_SWIZZLE = 128  # bytes: one stage row of K (K-major) or one 64-element panel row (MN-major)
_SCRATCH_ALIGNMENT = 256  # scratch allocations start on 256 bytes; maps of repacked operands are encoded at it


def serves(a: _dt.DType, c: _dt.DType, scheme: str = "native", b: _dt.DType | None = None) -> bool:
    """Whether the engine runs inputs of type ``a`` (and ``b``, default ``a``) with results of type ``c`` by
    ``scheme`` (blasdx.engine.emulation)."""
    if scheme != "native":
        return (b is None or b == a) and (a, c) in EMULATED_SERVED.get(scheme, ())
    b = a if b is None else b
    if (a, c) not in SERVED or (b, c) not in SERVED:
        return False
    return a == b or _dt.find_combination(a, b, c, False) is not None


def promotion_of(a: _dt.DType, fast_accumulation: bool = False) -> int:
    """The promotion interval of inputs of type ``a``: PROMOTION for fp8 (0 with fast accumulation), else 0."""
    return PROMOTION if a in _FP8 and not fast_accumulation else 0


# ---------------------------------------------------------------------------------------------
# tile configurations and the rule that picks one
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineConfig:
    """One tile configuration: the block's output tile, K step, ring depth, consumers, raster group."""

    bm: int
    bn: int
    bk: int
    stages: int
    consumers: int
    group_m: int = 8
    cluster: int = 1  # blocks per cluster along M, sharing B's tile by TMA multicast
    pingpong: bool = False  # consumers take whole tiles in turn (one's epilogue overlaps the other's products)
    promotion: int = 0  # fp8: K elements summed by the tensor core between additions into f32 registers; 0: never
    split_tf32: bool = False  # float32 operands split into tf32 parts in each stage (three products)
    promote_stages: int = 1  # with the split: stages the tensor cores sum between promotions
    transpose_b: bool = False  # B (tf32 / 8-bit, MN-major) transposed in shared memory (transpose.cuh)
    swap_ab: bool = False  # D^T = B^T A^T: the long N side fills the wgmma's M, the few rows of M its N (decode)
    stream_k: bool = False  # the last tiles' K steps shared by all blocks; the launch's splits are its waves
    promotion_overlap: bool = False  # fp8 promoted once a stage: the next stage multiplies while this one is added

    @property
    def threads(self) -> int:
        """Producer warpgroup plus consumers (plus a rewriting warpgroup with the tf32 split or B transposed)."""
        return 128 * (1 + self.consumers + (1 if self.split_tf32 or self.transpose_b else 0))

    def tiles(self, m: int, n: int, batch: int = 1) -> int:
        """Output tiles of ``batch`` M x N products (the rule's unit of work before K splits and clusters)."""
        return batch * math.ceil(m / self.bm) * math.ceil(n / self.bn)

    def stage_bytes(self, itemsize: int) -> int:
        """A stage's operands; twice that with the tf32 split (high parts, then low parts); B's raw tile
        beside them when B is transposed."""
        raw = self.bn * self.bk * itemsize if self.transpose_b else 0
        return (self.bm + self.bn) * self.bk * itemsize * (2 if self.split_tf32 else 1) + raw

    def shared_memory(self, itemsize: int, staged_store: bool = False) -> int:
        """Dynamic shared memory (gemm.cuh): alignment slack, the stages, the epilogue's staging, barriers."""
        staging = self.consumers * STAGING_BYTES if staged_store else 0
        return 1024 + self.stages * self.stage_bytes(itemsize) + staging + ring_bytes(self.stages)

    def __str__(self) -> str:
        consumers = "1 consumer" if self.consumers == 1 else f"{self.consumers} consumers"
        cluster = f", clusters of {self.cluster}" if self.cluster > 1 else ""
        pingpong = ", ping-pong" if self.pingpong else ""
        promotion = f", f32 promotion every {self.promotion} K" if self.promotion else ""
        split = f", 3xtf32 split, promoted every {self.promote_stages} stages" if self.split_tf32 else ""
        transpose = ", B transposed in shared memory" if self.transpose_b else ""
        swap = ", A and B swapped (D^T = B^T A^T)" if self.swap_ab else ""
        stream_k = ", stream-K" if self.stream_k else ""
        overlap = ", promotions overlapped" if self.promotion_overlap else ""
        return (f"{self.bm}x{self.bn}x{self.bk}, {self.stages} stages, {consumers}{pingpong}, group {self.group_m}"
                f"{cluster}{promotion}{overlap}{split}{transpose}{swap}{stream_k}")

    def overlap_problem(self) -> str | None:
        """Why ``promotion_overlap`` cannot run on this configuration (None when it can, or is off): one promotion
        a stage, one 64-row slice and at most 128 columns a consumer (gemm.cuh's multiply_overlapped)."""
        if not self.promotion_overlap:
            return None
        rows = self.bm if self.pingpong else self.bm // self.consumers
        if self.promotion != self.bk or rows != 64 or self.bn > 128 or self.swap_ab or self.transpose_b:
            return (f"overlapped promotion takes fp8 promoted once a stage (promotion = bk) on consumer tiles of 64 "
                    f"rows and at most 128 columns, K-major operands; not {self}")
        return None


def ring_bytes(stages: int) -> int:
    """sizeof(Ring<stages>) of pipeline.cuh: full, empty and split barriers per stage, two turn barriers."""
    return 3 * 8 * stages + 16


# Configurations per output shape class (K step: 128 bytes of the input type).
#   wide:     128 x 256 tiles, 2 consumers of 64 x 256 (128 f32 accumulators each), 4 stages;
#             in clusters of 2 (B multicast) for long products over many tiles.
#   pingpong: 128 x 128 tiles, 2 consumers taking whole tiles in turn, 6 stages: one
#             consumer's epilogue runs under the other's products.
#   narrow:   64 x 256 tiles, 1 consumer, 5 stages: outputs of at most 64 rows (decode shapes).
#   square:   128 x 128 tiles shared by 2 consumers (kept for sweeps; ping-pong beats it).
# Measured with benchmarks/matmul.py --engine-sweep (bf16, H100, 2026-11-22, TFLOP/s):
#   8192^3:       wide + clusters 747, wide 725, pingpong 724, narrow 698, square 586
#   4096^3:       pingpong 670, wide 657, wide + clusters 650, narrow 610, square 597
#   2048^3:       pingpong 405, wide 385, square 385, narrow 384 (host launch cost included)
#   8192^2 x 512: pingpong 428-434, wide 401, wide + clusters 387
WIDE = EngineConfig(128, 256, 64, 4, 2)
SQUARE = EngineConfig(128, 128, 64, 6, 2)
NARROW = EngineConfig(64, 256, 64, 5, 1)
PINGPONG = EngineConfig(128, 128, 64, 6, 2, pingpong=True)
WIDE_CLUSTERS = EngineConfig(128, 256, 64, 4, 2, cluster=2)
# 128 x 192 tiles (16-bit inputs; 2 consumers of 64 x 192, 96 f32 accumulators each; 40 KB stages): fewer tiles than
# 128 x 128 where those would leave a last wave mostly empty. The 16-bit rule (:func:`wave_config`) weighs the three
# by how well their rounds fill the SMs. Measured (H200, bf16 nk, CUDA-graph replay, us; ping-pong / 128 x 192 /
# 128 x 256, whole unless split; torch): 512x6144x4096 45.3 / 37.1 / 44.4 (36.2); 384x6144x4096 50.3 / 39.0 / 44.2
# (33.0); 1024x2112x7168 77.8 / 55.8 / 71.8 (44.3); 512x2112x7168 39.1 (3 splits) / 34.6 (3) / 70.6 (24.4);
# 512x4096x4096 25.9 / 33.9 / 43.1 (23.8); 512x57344x8192 707.0 / 786.5 / 646.7 (634.1); 2048x28672x4096 744.3 /
# 773.7 / 661.1 (621.3); 2048x8192x28672 1475.9 / 1546.0 / 1371.8 (1427.8); 512x32768x512 37.6 / 43.5 / 39.8 (31.8).
# Over 32 shapes of 384-8192 rows the rule's choice geomeans 0.93x torch, the former ping-pong rule 0.87x.
WIDE_192 = EngineConfig(128, 192, 64, 4, 2)
# The 3xtf32 split doubles a stage (low parts beside the high ones): 128 x 128 x 32 f32
# tiles take 64 KB a stage, so 3 stages; each stage carries three times the products, summed
# apart and added into the accumulator per stage (gemm.cuh, multiply_promoted), which takes
# two more accumulators per consumer: 64 x 128 each (the square tile shared by 2 consumers).
SPLIT_SQUARE = EngineConfig(128, 128, 32, 3, 2, split_tf32=True, promote_stages=2)
# Promoted every stage: four truncating tf32 sums of the high parts between two rounded adds
# instead of twelve (docs/performance.md, float32 at float32 accuracy); about 10% slower.
SPLIT_SQUARE_P1 = replace(SPLIT_SQUARE, promote_stages=1)
#: The engine's 3xtf32 schemes and their configurations.
SPLIT_CONFIGS = {"3xtf32": SPLIT_SQUARE, "3xtf32-23": SPLIT_SQUARE_P1}
# Decode (at most SWAP_MAX_M rows of a row-major x, weights read in place): the product is computed transposed,
# D^T = y^T x^T, so the weights fill 64-row wgmma tiles and the few rows of x a 16-, 32- or 64-wide N; a stage is mostly
# weights (10 KB at bn = 16), so 12 stages keep enough bytes in flight for the memory-bound stream, and
# 64-row tiles give twice the tiles of 128-row ones (fewer K splits to fill the SMs).
# Measured (H200, bf16, GPU time by CUDA-graph replay, us; torch.matmul beside), M x N x K:
#   16x4096x4096:  64-row/12 stages 10.4 (2 splits), 128-row/10 stages/2 consumers 10.4 (4); torch 9.1
#   16x6144x4096:  64-row 14.9 (1), 128-row 15.8 (1), 17.4 (2); torch 14.1
#   16x28672x4096: 64-row 63.0 (1), 128-row 59.8 (1); torch 57.1
#   16x7168x16384: 64-row 59.3 (1), 128-row 60.2 (1); torch 65.2
#   16x2112x7168:  64-row 9.7 (4), 128-row 10.7 (4); torch 10.4
#   Before the swap (64 x 256 tiles, x as A): 16x4096x4096 16.6, 16x6144x4096 19.9.
DECODE = EngineConfig(64, 16, 64, 12, 1, swap_ab=True)
#: The most output rows the decode configuration takes (its N tile: M rounded up to 16, 32 or 64) ...
SWAP_MAX_M = 64
#: ... with fewer stages at the 64-wide N tile (its stages are twice as large) ...
DECODE_64_STAGES = 10
#: ... and at least this many columns (the swapped M: whole tiles of weights).
SWAP_MIN_N = 256
# Past one wave of decode tiles (16-bit inputs), a larger tile over the same wave count loads each stage for more
# products: rows up to 16 or 32 take 128 weight rows on two consumers, 33 to 64 rows take x as A in `medium` or
# `narrow` tiles. Measured (H200, bf16 nk, CUDA-graph replay, us; 64-row decode tiles / the larger tile; torch):
#   16x10240x8192 53.8 / 47.5 (128 rows); 16x32768x512 9.8 / 7.8; 16x14336x4096 33.3 / 32.3; 16x28672x4096 63.3 / 60.6;
#   16x24576x1536 22.3 / 23.0 (384 tiles, 2.9 waves; 128 rows: 1.45) and 16x57344x8192 228.5 / 229.1 stay decode;
#   64x10240x8192 58.7 / 47.0 (medium); 64x14336x4096 36.3 / 33.4 (medium); 64x28672x4096 68.9 / 63.4 (narrow);
#   64x32768x512 13.6 / 9.3 (narrow); 64x24576x1536 24.6 / 25.7 and 64x57344x8192 236.2 / 241.2 stay decode.
#: Stages of the 128-row decode tile (two consumers) at an N tile of 16 (18 KB a stage); one fewer at 32 (20 KB),
#: so that a TMA-stored result's staging fits beside them.
DECODE_PAIR_STAGES = 10
#: A larger tile is taken while its rounds are used at most this much less than the best candidate's.
WAVE_USE_SLACK = 0.01
#: :func:`wave_config` counts a K-split launch's use this much less (the partial sums' traffic).
SPLIT_USE_PENALTY = 0.1
# Medium (65 to MEDIUM_MAX_M rows, while ping-pong's 128 x 128 tiles would not fill the SMs once): 64 x 128
# tiles, one consumer, 8 stages. Measured (H200, bf16, CUDA-graph replay, us):
#   128x4096x4096: medium 14.0 (1 split), ping-pong 19.2 (4 splits); torch 13.3
#   256x4096x4096: medium 14.7 (1), ping-pong 26.2 (2); torch 15.3
#   128x4096x14336: medium 39.7 (2), 43.5 (1), ping-pong 43.9 (4); torch 37.7
#   128x28672x4096 (224 ping-pong tiles): ping-pong 69.2, wide 67.2; torch 67.4
# Where ping-pong tiles use the SMs' rounds as well as medium ones (16-bit), they are taken instead:
#   128x10240x8192 (160 medium tiles, 80 ping-pong ones: 61% of 2 rounds, of 1): medium 67.8, ping-pong 51.2; torch 46.9
#   128x14336x4096 (224 / 112: 85%): medium 38.5, ping-pong 37.2; torch 33.9; 192x6144x4096: 30.0 / 30.3 (torch 23.4)
MEDIUM = EngineConfig(64, 128, 64, 8, 1)
MEDIUM_MAX_M = 256
#: Medium tiles split K into as many splits as keep one unit per SM at most, each split at least this many
#: K steps deep (:func:`split_count`). Measured (H200, bf16 unless named, CUDA-graph replay, us, unsplit
#: against splits): shallow splits lose (128x4096x4096, 64 steps: 14.0-14.9 / 15.3 in 2; 96x4096x4096
#: 15.5 / 17.2 (2); e4m3 128x4096x4096, 32 steps: 13.2 / 14.4 (2); 128x2048x2048 8.8 / 11.2 (2)), deep ones
#: win as far as the SMs take them (128x2112x7168, 34 tiles: 21.0 / 17.5 (2), 15.7 (3); 96x2112x7168 22.7 /
#: 16.5 (3); 192x2112x7168 21.4 / 19.2 (2); 128x1536x7168 21.0 / 15.2 (3), 14.7 (4); 256x1024x7168 21.3 /
#: 15.5 (3), 14.6 (4); 128x4096x14336 43.5 / 39.7-40.0 (2); tf32 128x4096x4096, 128 steps: 28.6 / 27.8 (2)).
MEDIUM_MIN_STEPS_PER_SPLIT = 36
# Whole 64-row tiles (16-bit): rows a multiple of 64 up to MEDIUM_MAX_M take 64-row tiles with x as A, K whole, where
# those tiles fit one wave and use it at least as well as the class's own choice (its tiles times its splits):
# 64 x 32 at 64 rows (against `decode`), 64 x 64 from 128 rows (against `medium`). Measured (H200, bf16 nk,
# CUDA-graph replay, us; the class's choice / the whole 64-row tile; torch): 64x4096x4096 12.0 / 11.3 (8.9);
# 64x4096x14336 36.7 / 34.2 (37.2); 128x4096x4096 14.2 / 12.3 (13.2); 128x4096x14336 40.8 in 2 splits / 37.9
# (37.4); 256x2112x7168 27.5 / 23.7 (19.0). Kept where the tiles exceed a wave (128x6144x4096 17.8 / 23.2;
# 128x8192x8192 39.2 / 44.6) or fill it less (64x2112x7168 13.7 in 4 splits / 17.5; 128x2112x7168 17.2 in 3 /
# 19.0); rows that leave part of a tile empty lose (96x4096x4096 15.0 / 17.1; 48x4096x4096 12.0 / 13.1).
WHOLE_ROWS_64 = EngineConfig(64, 32, 64, 12, 1)
WHOLE_ROWS = EngineConfig(64, 64, 64, 10, 1)
CONFIGS = {"wide": WIDE, "square": SQUARE, "narrow": NARROW, "pingpong": PINGPONG, "wide clusters": WIDE_CLUSTERS,
           "wide 192": WIDE_192,
           "split square": SPLIT_SQUARE, "split square p1": SPLIT_SQUARE_P1,
           "split square p4": replace(SPLIT_SQUARE, promote_stages=4), "decode": DECODE, "medium": MEDIUM,
           "whole rows 64": WHOLE_ROWS_64, "whole rows": WHOLE_ROWS}

# Measured with benchmarks/scaled_mm.py --sweep (H100, 2026-11-23, TFLOP/s; e4m3 -> f16 promoted
# every 128 K / fast, int8 -> int32; two runs, the second's figures, the first's where they differ):
#   8192^3 promoted: wide + clusters 1109, wide 1061, square 984, pingpong 782
#   4096^3 promoted: wide 1200, wide + clusters 1156, square 1100, pingpong 802
#   8192^3 fast:     wide + clusters 1227, wide 1176, pingpong 1150, square 1076
#   4096^3 fast:     wide 1266-1279, pingpong 1189-1275, wide + clusters 1248, square 1181
#   int8 8192^3:     wide 1284, pingpong 1272, wide + clusters 1252; 4096^3: pingpong 1288, wide 1243

#: wide tiles in clusters from this many waves of tiles over the SMs, each at least this deep in K.
CLUSTER_WAVES = 8
CLUSTER_MIN_K_STEPS = 32

#: Shared memory per consumer of the TMA-store epilogue: two chunks of 64 rows x 128 bytes.
STAGING_BYTES = 2 * 64 * 128

#: A split covers at least this many K steps (fewer would cost more in partial sums than it gains).
MIN_STEPS_PER_SPLIT = 16
MAX_SPLITS = 16


def decodes(m: int, n: int) -> bool:
    """Whether the rule computes an M x N product transposed (:data:`DECODE`): M <= SWAP_MAX_M and N at least
    SWAP_MIN_N (the swapped M: whole tiles of weights)."""
    return m <= SWAP_MAX_M and n >= SWAP_MIN_N


def choose_config(a: _dt.DType, m: int, n: int, k: int, batch: int, multiprocessors: int,
                  scheme: str = "native", promotion: int = 0, swap: bool = True,
                  stream_k: bool = False) -> tuple[EngineConfig, int]:
    """The tile configuration and K split count of an M x N x K product with ``batch`` problems.

    The 3xtf32 schemes take `split square` (promoted every 2 stages, "3xtf32") or `split square p1` (every
    stage, "3xtf32-23"). Otherwise outputs of at most SWAP_MAX_M rows are computed
    transposed (:func:`decode_config`: `decode` or, past a wave of its tiles, a larger one), or take `narrow` where the caller
    keeps x and y in place; up to MEDIUM_MAX_M rows, while `pingpong` tiles would not fill the SMs once,
    `medium` (K split up to one unit per SM with deep splits, :func:`split_count`); long products with
    many `wide` tiles (at least CLUSTER_WAVES per SM, CLUSTER_MIN_K_STEPS deep) take `wide` in clusters of 2; other
    16-bit products the tile of :func:`wave_config`; the rest `pingpong`, or `wide`
    for fp8: a promoting consumer (``promotion`` K elements, see PROMOTION) waits for its
    products before it adds them up, so both consumers had better multiply the same stage and
    fill each other's waits (ping-pong consumers take turns), and fp8's narrow results make
    ping-pong's hidden epilogue worth less than wide tiles' B reuse, promoted or not (the
    fp8 figures beside the configurations). Then :func:`balanced_splits` (`decode`:
    :func:`memory_bound_splits`), and with ``stream_k`` (plans of kernels/hopper_gemm.cu) stream-K instead of
    those splits where it is worth it (:func:`stream_k_or_splits`; for `medium` only where the tiles would
    be split).
    """
    bk = _SWIZZLE // a.size
    wide_tiles = WIDE.tiles(m, n, batch)
    if scheme in SPLIT_CONFIGS:
        config = SPLIT_CONFIGS[scheme]
    elif swap and decodes(m, n):
        return decode_config(a, m, n, k, batch, multiprocessors, bk, promotion)
    elif m <= 64:
        config = NARROW
    elif m <= MEDIUM_MAX_M and PINGPONG.tiles(m, n, batch) < multiprocessors and scheme == "native":
        config = replace(MEDIUM, bk=bk, promotion=promotion)
        if a.size == 2 and (wave_use(PINGPONG.tiles(m, n, batch), multiprocessors)
                            >= wave_use(MEDIUM.tiles(m, n, batch), multiprocessors) - WAVE_USE_SLACK):
            config = replace(PINGPONG, bk=bk)  # as much of the SMs in half the tiles (MEDIUM's figures)
        splits = split_count(config, m, n, k, batch, multiprocessors, MEDIUM_MIN_STEPS_PER_SPLIT)
        if config.bm == MEDIUM.bm:
            whole = whole_rows(a, m, n, batch, multiprocessors, bk, config.tiles(m, n, batch) * splits)
            if whole is not None:
                return whole, 1
        if stream_k and splits > 1:
            return stream_k_or_splits(config, splits, m, n, k, batch, multiprocessors)
        return config, splits
    elif wide_tiles >= CLUSTER_WAVES * multiprocessors and math.ceil(k / bk) >= CLUSTER_MIN_K_STEPS:
        config = WIDE_CLUSTERS
    elif a.size == 2 and scheme == "native":
        config, splits = wave_config(m, n, k, batch, multiprocessors, bk)
        return stream_k_or_splits(config, splits, m, n, k, batch, multiprocessors) if stream_k else (config, splits)
    else:
        config = WIDE if a in _FP8 else PINGPONG
    config = replace(config, bk=bk, promotion=promotion)
    splits = balanced_splits(config, m, n, k, batch, multiprocessors)
    return stream_k_or_splits(config, splits, m, n, k, batch, multiprocessors) if stream_k else (config, splits)


def wave_config(m: int, n: int, k: int, batch: int, multiprocessors: int, bk: int) -> tuple[EngineConfig, int]:
    """The tile of a 16-bit product outside the decode, medium and cluster classes: of `pingpong` (128 x 128),
    `wide 192` and `wide` (128 x 256), each K split as :func:`split_count` would with MEDIUM_MIN_STEPS_PER_SPLIT (up
    to a unit per SM), the widest whose rounds are used within WAVE_USE_SLACK of the best, a split launch's use
    counted SPLIT_USE_PENALTY less (its partial sums). Under CLUSTER_MIN_K_STEPS K steps `pingpong` alone (its
    epilogue under the other consumer's products; whole: H200, bf16, us, 1024^3 9.6 whole / 14.7 in 2 splits,
    512x32768x512 37.6 / 128 x 256 39.8)."""
    options = []
    short = math.ceil(k / bk) < CLUSTER_MIN_K_STEPS
    for config in (PINGPONG,) if short else (PINGPONG, WIDE_192, WIDE):
        config = replace(config, bk=bk)
        splits = split_count(config, m, n, k, batch, multiprocessors, MEDIUM_MIN_STEPS_PER_SPLIT)
        tiles = config.tiles(m, n, batch)
        use = wave_use(tiles * splits, multiprocessors) * (1 - SPLIT_USE_PENALTY * (splits > 1))
        options.append((config, splits, use))
    best = max(use for _, _, use in options)
    return next((config, splits) for config, splits, use in reversed(options) if use >= best - WAVE_USE_SLACK)


#: B's MN-major tile is transposed in shared memory (instead of repacking B in global memory) when
#: the output has at most this many tile rows: each tile row transposes all of B again, while a
#: repack copies B once, so deep M favours the repack.
TRANSPOSE_MAX_TILE_ROWS = 4  # measured (H200, tf32 / e4m3 x 4096^2): 16 tile rows took 2-2.5x the K-major time
#: The most shared memory a Hopper block can have (227 KB).
MAX_SHARED = 232448


def fit_transposed(config: EngineConfig, itemsize: int, staged_store: bool) -> EngineConfig:
    """``config`` with B transposed in shared memory: 128-wide N tiles (the raw tile doubles B's bytes),
    as many stages as fit (at most 8), no cluster where B's tile is fewer panels than blocks."""
    config = replace(config, transpose_b=True, bn=min(config.bn, 128))
    panels = config.bn * itemsize // _SWIZZLE
    if config.cluster > 1 and panels % config.cluster:
        config = replace(config, cluster=1)
    stages = 8
    while stages > 2 and replace(config, stages=stages).shared_memory(itemsize, staged_store) > MAX_SHARED:
        stages -= 1
    return replace(config, stages=stages)


def place_transposition(config: EngineConfig, splits: int, route_b: OperandRoute, b: _dt.DType, m: int, n: int,
                        k: int, batch: int, multiprocessors: int, staged_store: bool,
                        forced: bool | None = None, stream_k: bool = False) -> tuple[EngineConfig, int, OperandRoute]:
    """Whether B, repacked only for the instruction, is transposed in shared memory instead: the
    configuration, splits and B's route after the choice.

    ``forced`` (a configuration's ``transpose_b`` given by the caller) overrides the rule: at most
    TRANSPOSE_MAX_TILE_ROWS tile rows. The splits are recounted for the new tile unless forced (and with
    ``stream_k``, stream-K weighed again as :func:`choose_config` does).
    """
    wanted = forced if forced is not None else math.ceil(m / config.bm) <= TRANSPOSE_MAX_TILE_ROWS
    if wanted and route_b.transposable and not config.split_tf32 and argument_b_transposable(b):
        route_b = OperandRoute(route_b.argument, False, transpose=True)
        config = fit_transposed(config, b.size, staged_store and splits == 1)
        if forced is None:
            config = replace(config, stream_k=False)
            splits = balanced_splits(config, m, n, k, batch, multiprocessors)
            if stream_k:
                config, splits = stream_k_or_splits(config, splits, m, n, k, batch, multiprocessors)
            config = fit_transposed(config, b.size, staged_store and splits == 1 and not config.stream_k)
        return config, splits, route_b
    return (replace(config, transpose_b=False) if config.transpose_b else config), splits, route_b


#: The wgmma engine's splits finish inside the GEMM (splitk.cuh): a split's partial sums cost about this
#: many of its K steps (written by each split, read back by the last one, through L2) ...
SPLIT_COST_STEPS = 2
#: ... and each split covers at least this many K steps.
MIN_STEPS_PER_FIXUP_SPLIT = 4
#: A split count is taken over fewer splits only when its estimate is this much lower.
SPLIT_GAIN = 0.8


def balanced_splits(config: EngineConfig, m: int, n: int, k: int, batch: int, multiprocessors: int) -> int:
    """K splits that balance the work over the SMs: the count whose estimated time is lowest.

    The persistent grid runs ceil(units / SMs) rounds of units (units: tiles x splits, of
    clusters), each ceil(steps / splits) K steps long plus, when split, SPLIT_COST_STEPS for the
    exchange of partial sums. Too few tiles leave SMs idle, a last partial round wastes the
    rest of a wave (wave quantisation): splits fill both. Each split is at least
    MIN_STEPS_PER_FIXUP_SPLIT deep; a count replaces a smaller one only when its estimate is
    below SPLIT_GAIN times the smaller one's.
    """
    steps = math.ceil(k / config.bk)

    def estimate(splits: int) -> int:
        return split_estimate(config, splits, m, n, k, batch, multiprocessors)

    best, best_cost = 1, estimate(1)
    for splits in range(2, MAX_SPLITS + 1):
        chunk = math.ceil(steps / splits)
        if chunk < MIN_STEPS_PER_FIXUP_SPLIT:
            break
        if math.ceil(steps / chunk) != splits:  # the same chunks as a smaller count
            continue
        cost = estimate(splits)
        if cost < SPLIT_GAIN * best_cost:
            best, best_cost = splits, cost
    return best


def split_estimate(config: EngineConfig, splits: int, m: int, n: int, k: int, batch: int,
                   multiprocessors: int) -> int:
    """The time of a launch in ``splits`` K splits, in K steps (:func:`balanced_splits`'s estimate): its rounds of
    units times a unit's K steps, plus SPLIT_COST_STEPS when split."""
    slots = max(1, multiprocessors // config.cluster)
    tiles = batch * math.ceil(math.ceil(m / config.bm) / config.cluster) * math.ceil(n / config.bn)
    steps = math.ceil(k / config.bk)
    chunk = math.ceil(steps / splits)
    return math.ceil(tiles * math.ceil(steps / chunk) / slots) * (chunk + (SPLIT_COST_STEPS if splits > 1 else 0))


#: Stream-K (kernels/blasdx/hopper/scheduler.cuh) replaces the rule's splits where its estimate is below this
#: fraction of theirs ...
STREAM_K_GAIN = 0.97
#: Whether plans take stream-K where the rule's estimate says so. Off: on an H200 (2026-11-27, GPU time by
#: CUDA-graph replay, bf16) the shapes the estimate picks ran slower in stream-K than the same shapes had run
#: in the rule's splits (512x2112x7168 0.49x torch against 0.57-0.72x, 512x6144x4096 0.53x against 0.61x,
#: 2048x2112x7168 0.69x), so stream-K stays a bx.tune candidate until its fixups' cost is measured and modelled.
STREAM_K_BY_RULE = False
#: ... for outputs of at most this many waves of tiles over the SMs (deeper ones lose at most a last partial
#: wave of many, which the estimate's few per cent do not outweigh the partial sums' traffic for) ...
STREAM_K_MAX_WAVES = 4
#: ... sharing the last partial wave and one whole wave before it (more waves only add tiles with partial sums).
STREAM_K_WAVES = _streamk.MIN_WAVES


def stream_k_eligible(config: EngineConfig) -> bool:
    """Whether ``config`` may run stream-K: the ping-pong and medium tiles without clusters, tf32 split, swap or
    fp8-sized wide tiles (those classes' rules stay as measured)."""
    medium = (config.bm, config.bn, config.consumers) == (MEDIUM.bm, MEDIUM.bn, MEDIUM.consumers)
    return ((config.pingpong or medium) and config.cluster == 1 and not config.split_tf32 and not config.swap_ab)


def stream_k_estimate(config: EngineConfig, m: int, n: int, k: int, batch: int, multiprocessors: int,
                      waves: int = STREAM_K_WAVES) -> int:
    """The time of a stream-K launch in K steps (blasdx.engine.streamk.estimate: each piece that shares a tile
    costs SPLIT_COST_STEPS, as a split does)."""
    tiles = config.tiles(m, n, batch)
    return _streamk.estimate(tiles, math.ceil(k / config.bk), multiprocessors, waves, SPLIT_COST_STEPS)


def stream_k_or_splits(config: EngineConfig, splits: int, m: int, n: int, k: int, batch: int,
                       multiprocessors: int) -> tuple[EngineConfig, int]:
    """``config`` with ``splits`` K splits, or in stream-K over STREAM_K_WAVES waves where that is worth it: an
    eligible configuration (:func:`stream_k_eligible`), K > 0, at most STREAM_K_MAX_WAVES waves of tiles, and a
    stream-K estimate below STREAM_K_GAIN times the splits' (wave quantisation: 2048x2112x7168's 272 tiles
    run 3 rounds of 112 K steps unsplit, 235 in stream-K; 512x2112x7168's 68 tiles 80 in 3 splits, 62)."""
    tiles = config.tiles(m, n, batch)
    if (not stream_k_eligible(config) or k <= 0 or multiprocessors <= 0
            or tiles > STREAM_K_MAX_WAVES * multiprocessors):
        return config, splits
    current = split_estimate(config, splits, m, n, k, batch, multiprocessors)
    if stream_k_estimate(config, m, n, k, batch, multiprocessors) < STREAM_K_GAIN * current:
        return replace(config, stream_k=True), STREAM_K_WAVES
    return config, splits


def nonempty_splits(steps: int, splits: int) -> int:
    """The split count that cuts ``steps`` K steps into the chunks ``splits`` would, none of them empty (12
    splits of 64 steps are chunks of 6: 11 splits; a split without K steps never returned with ping-pong tiles)."""
    if splits <= 1 or steps <= 0:
        return 1
    return math.ceil(steps / math.ceil(steps / splits))


def memory_bound_splits(config: EngineConfig, m: int, n: int, k: int, batch: int, multiprocessors: int,
                        share: int = 2) -> int:
    """K splits of the memory-bound `decode` class: none once the tiles occupy 1 / ``share`` of the SMs
    (the weights stream at full bandwidth from there, and a split's exchange of partial sums only adds
    traffic: 128x4096x4096 ran 14.0 us unsplit, 15.4 us in 2 splits), else :func:`balanced_splits`. 16-bit
    inputs take a third (H200, bf16, us, whole / 2 splits: 64x4096x4096 12.0 / 13.2, 16x4096x14336 33.4 / 35.7,
    16x4096x4096 10.7 / 11.0 (64 tiles); 16x2112x7168, 33 tiles: 16.4 whole, 10.5 in 4); others half."""
    tiles = config.tiles(m, n, batch)
    return 1 if share * tiles > multiprocessors else balanced_splits(config, m, n, k, batch, multiprocessors)


def wave_use(tiles: int, multiprocessors: int) -> float:
    """The share of its rounds' block slots that ``tiles`` one-block-per-SM tiles occupy."""
    return tiles / (math.ceil(tiles / multiprocessors) * multiprocessors)


def decode_config(a: _dt.DType, m: int, n: int, k: int, batch: int, multiprocessors: int, bk: int,
                  promotion: int) -> tuple[EngineConfig, int]:
    """The tile and K splits of a product of at most SWAP_MAX_M rows: `decode` (swapped, N tile the rows rounded
    up to 16, 32 or 64) with :func:`memory_bound_splits`, or, for 16-bit inputs past one wave of decode tiles, the
    largest tile whose waves are used within WAVE_USE_SLACK of the best (rows up to 32: 128 weight rows on two
    consumers; 33 to 64: `medium` or `narrow`, x as A), whole."""
    bn = 16 if m <= 16 else 32 if m <= 32 else 64
    decode = replace(DECODE, bn=bn, bk=bk, promotion=promotion,
                     stages=DECODE.stages if bn < 64 else DECODE_64_STAGES)
    if a.size == 2 and decode.tiles(n, m, batch) > multiprocessors:
        larger = ([replace(decode, bm=128, consumers=2, stages=DECODE_PAIR_STAGES - bn // 32)] if bn < 64 else
                  [replace(MEDIUM, bk=bk, promotion=promotion), replace(NARROW, bk=bk, promotion=promotion)])

        def use(config: EngineConfig) -> float:
            rows, columns = (n, m) if config.swap_ab else (m, n)
            return wave_use(config.tiles(rows, columns, batch), multiprocessors)

        best = max(use(config) for config in [decode, *larger])
        return next((c for c in reversed(larger) if use(c) >= best - WAVE_USE_SLACK), decode), 1
    splits = memory_bound_splits(decode, n, m, k, batch, multiprocessors, 3 if a.size == 2 else 2)
    whole = whole_rows(a, m, n, batch, multiprocessors, bk, decode.tiles(n, m, batch) * splits)
    return (whole, 1) if whole is not None else (decode, splits)


def b_panels_fit(config: EngineConfig, b_k_major: bool) -> EngineConfig:
    """``config``, or WHOLE_ROWS where an MN-major B (its stages are whole 64-wide panels) meets WHOLE_ROWS_64's
    32-wide N tile."""
    if config.bn < 64 and not config.swap_ab and not b_k_major:
        return replace(WHOLE_ROWS, bk=config.bk, promotion=config.promotion)
    return config


def whole_rows(a: _dt.DType, m: int, n: int, batch: int, multiprocessors: int, bk: int,
               units: int) -> EngineConfig | None:
    """The whole 64-row tile (WHOLE_ROWS_64 at 64 rows, WHOLE_ROWS up to MEDIUM_MAX_M) of a 16-bit product whose
    rows are a multiple of 64, where its tiles fit one wave and use it at least as well as ``units`` work units
    (the class's choice: tiles times splits) would; else None."""
    if a.size != 2 or m % 64 or m > MEDIUM_MAX_M:
        return None
    config = replace(WHOLE_ROWS_64 if m == 64 else WHOLE_ROWS, bk=bk)
    tiles = config.tiles(m, n, batch)
    if tiles > multiprocessors or wave_use(tiles, multiprocessors) < wave_use(units, multiprocessors) - WAVE_USE_SLACK:
        return None
    return config


def split_count(config: EngineConfig, m: int, n: int, k: int, batch: int, multiprocessors: int,
                min_steps: int = MIN_STEPS_PER_SPLIT) -> int:
    """K splits that bring the work units up to the SM count (at most one per SM), each at least ``min_steps``
    deep, none left empty: the wide path's rule (its splits are added up by a second kernel) and, with
    MEDIUM_MIN_STEPS_PER_SPLIT, the `medium` class's."""
    units = batch * math.ceil(m / config.bm) * math.ceil(n / config.bn)  # config: any object with bm, bn, bk
    steps = math.ceil(k / config.bk)
    return nonempty_splits(steps, min(multiprocessors // max(units, 1), steps // min_steps, MAX_SPLITS))


# ---------------------------------------------------------------------------------------------
# operands
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OperandRoute:
    """How one operand reaches the kernel.

    ``k_major``: the layout the kernel reads (K contiguous). ``repack``: None when TMA reads
    the array in place, else why it is first copied into a K-major scratch array.
    ``transposable``: the repack is only for the instruction (TMA reads the array in place), so
    the kernel may instead transpose its tiles in shared memory. ``transpose``: it does (TMA
    reads the MN-major array in place, the kernel rewrites each tile K-major).
    """

    argument: str
    k_major: bool
    repack: str | None = None
    transposable: bool = False
    transpose: bool = False


def route(argument: str, dtype: _dt.DType, ptr: int, k_major: bool, ld: int, outer: int, batch_stride: int,
          batched: bool) -> OperandRoute:
    """The route of an operand: ``k_major`` its own layout, ``ld`` / ``batch_stride`` in elements."""
    size = dtype.size
    if not k_major and dtype.size != 2:
        reads = route(argument, _dt.float16, ptr, False, ld * size // 2, outer, batch_stride * size // 2, batched)
        return OperandRoute(argument, True, f"{dtype.name} wgmma reads K-major operands only",
                            transposable=reads.repack is None and (ld * size) % 2 == 0
                            and (batch_stride * size) % 2 == 0)
    if ptr % 16:
        return OperandRoute(argument, True, f"TMA needs a 16-byte aligned address, not {ptr:#x}")
    if outer > 1 and (ld * size) % 16:
        return OperandRoute(argument, True, f"TMA needs row strides of whole 16 bytes, not {ld} x {size} bytes")
    if batched and (batch_stride * size) % 16:
        return OperandRoute(
            argument, True, f"TMA needs batch strides of whole 16 bytes, not {batch_stride} x {size} bytes"
        )
    return OperandRoute(argument, k_major)


def argument_b_transposable(dtype: _dt.DType) -> bool:
    """Whether the kernels transpose MN-major B tiles of ``dtype`` in shared memory (4-byte and 1-byte types)."""
    return dtype.size in (1, 4)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class _Operand:
    """One operand as the tensor map sees it: extents and byte strides, innermost first."""

    dims: tuple[int, int, int]
    strides: tuple[int, int]
    box: tuple[int, int, int]
    batched: bool


def _operand(route_: OperandRoute, dtype: _dt.DType, rows: int, k: int, ld: int, batch: int, batch_stride: int,
             tile_rows: int, bk: int) -> _Operand:
    """The tensor map geometry of an operand of ``rows`` (M or N) x K per problem.

    ``tile_rows`` is the M or N extent one K-major box covers (a whole tile, or a cluster
    block's part of B). A repacked operand is K-major with rows padded to 16 bytes,
    problems back to back.
    """
    size = dtype.size
    batched = batch > 1
    if route_.repack is not None:
        ld = _round_up(k, 16 // size)
        batch_stride = rows * ld
    inner, outer = (k, rows) if route_.k_major else (rows, k)
    row_bytes = ld * size if outer > 1 else _round_up(max(inner * size, 16), 16)
    if batched:
        batch_bytes = batch_stride * size
    else:
        batch_bytes = _round_up(max(outer * row_bytes, 16), 16)
    box = (bk, tile_rows, 1) if route_.k_major else (_SWIZZLE // size, bk, 1)
    return _Operand((inner, outer, batch if batched else 1), (row_bytes, batch_bytes), box, batched)


# ---------------------------------------------------------------------------------------------
# sources
# ---------------------------------------------------------------------------------------------


def config_members(a: _dt.DType, b: _dt.DType, config: EngineConfig, a_k_major: bool, b_k_major: bool) -> list[str]:
    """The members of gemm.cuh's Cfg struct (types, tile, layouts, promotion) as lines of C++."""
    return [
        f"    using a_type = {_STORAGE_TYPES[a.name]};",
        f"    using b_type = {_STORAGE_TYPES[b.name]};",
        f"    using a_mma = {_MMA_TYPES[a.name]};",
        f"    using b_mma = {_MMA_TYPES[b.name]};",
        f"    static constexpr int bm = {config.bm}, bn = {config.bn}, bk = {config.bk};",
        f"    static constexpr int stages = {config.stages}, consumers = {config.consumers}, "
        f"group_m = {config.group_m}, cluster_m = {config.cluster};",
        f"    static constexpr bool pingpong = {str(config.pingpong).lower()};",
        f"    static constexpr bool a_k_major = {str(a_k_major).lower()}, b_k_major = {str(b_k_major).lower()};",
        f"    static constexpr int promotion = {config.promotion};",
        *([f"    static constexpr bool split_tf32 = true; static constexpr int promote_stages = "
           f"{config.promote_stages};"] if config.split_tf32 else []),
        *(["    static constexpr bool b_transpose = true;"] if config.transpose_b else []),
        *(["    static constexpr bool stream_k = true;"] if config.stream_k else []),
        *(["    static constexpr bool promotion_overlap = true;"] if config.promotion_overlap else []),
    ]


def type_headers(a: _dt.DType, b: _dt.DType) -> list[str]:
    """The includes the element types need (cuda_fp8.h only for fp8: it is large)."""
    lines = ['#include "blasdx/types.cuh"']
    if a in _FP8 or b in _FP8:
        lines.append('#include "blasdx/fp8.cuh"')
    return lines


def gemm_source(a: _dt.DType, c: _dt.DType, config: EngineConfig, a_k_major: bool, b_k_major: bool,
                store_by_tma: bool = False, b: _dt.DType | None = None, kernel_file: str = "hopper_gemm.cu") -> str:
    """kernels/hopper_gemm.cu instantiated for the input and result types, layouts, tile and store path
    (``kernel_file``: another entry point on the same configuration, such as ozaki's residue GEMM)."""
    b = a if b is None else b
    return "\n".join([
        *type_headers(a, b),
        "struct HopperConfig {",
        *config_members(a, b, config, a_k_major, b_k_major),
        f"    using c_type = {_STORAGE_TYPES[c.name]};",
        f"    using acc_type = {accumulator_type(c)};",
        f"    static constexpr bool store_by_tma = {str(store_by_tma).lower()};",
        "};",
        f'#include "{kernel_file}"',
        "",
    ])


def reduce_source(c: _dt.DType) -> str:
    """kernels/splitk_reduce.cu for results of type ``c``."""
    return (f'#include "blasdx/types.cuh"\nusing splitk_c_type = {_STORAGE_TYPES[c.name]};\n'
            f'using splitk_acc_type = {accumulator_type(c)};\n#include "splitk_reduce.cu"\n')


def accumulator_type(c: _dt.DType) -> str:
    """The C++ type the kernels accumulate results of type ``c`` in: int for int32 (exact), double for
    float64 (the wide path), else float."""
    if c.integral:
        return "int"
    return "double" if c == _dt.float64 else "float"


def repack_source(itemsize: int) -> str:
    """kernels/repack.cu for elements of ``itemsize`` bytes."""
    return f'using repack_type = {_UNSIGNED[itemsize]};\n#include "repack.cu"\n'


# ---------------------------------------------------------------------------------------------
# the plan of one kind of call
# ---------------------------------------------------------------------------------------------

_GEMM_PARAMS = ("map", "map", "map", "u64", "u64", "u64", "u64", "i32", "i32", "i32", "i32", "i32", "i32", "i32",
                "i64", "i64", "i64", "i64", "i64", "i64", "f32", "f32")
_REDUCE_PARAMS = ("u64", "u64", "u64", "i32", "i32", "i32", "i32", "i64", "i64", "i64", "i64", "i64", "i64", "f32",
                  "f32")
_REPACK_PARAMS = ("u64", "u64", "i32", "i32", "i64", "i64", "i64", "i64", "i64", "i32")


def _scalar_kinds(kinds: tuple[str, ...], c: _dt.DType) -> tuple[str, ...]:
    """A parameter list whose last two (alpha, beta) take C's scalar type: int32 for integer C."""
    return kinds[:-2] + ("i32", "i32") if c.integral else kinds


def scalar(value: Any, c: _dt.DType) -> Any:
    """alpha or beta as the kernels of result type ``c`` take it (dtypes.Combination.scalar): int for int32 C."""
    if not c.integral:
        return float(value)
    if int(value) != value:
        raise ValueError(f"alpha / beta of an integer result are integers, not {value!r}")
    return int(value)
_MAX_GRID_Z = 65535


class _Kernel:
    """A kernel source with its parameter block; compiled on first use, its CUfunction kept per device."""

    __slots__ = ("source", "name", "arch", "shared_memory", "params", "functions", "handles", "_compiled")

    def __init__(self, source: str, name: str, arch: str, params: tuple[str, ...], shared_memory: int = 0) -> None:
        self.source, self.name, self.arch = source, name, arch
        self.shared_memory = shared_memory
        self.params = _driver.ParameterBlock(params)
        self.functions: dict[int, Any] = {}  # device -> CUfunction (blasdx.launch.cuda_driver.function_of)
        self.handles: dict[int, int] = {}  # device -> CUkernel address
        self._compiled: Any = None

    @property
    def compiled(self) -> Any:
        """The CompiledKernel (through both cache levels)."""
        if self._compiled is None:
            self._compiled = cached_compile(self.source, self.name, self.arch)
        return self._compiled

    def function(self, device_id: int) -> Any:
        """The CUfunction, loaded and opted in to its shared memory on ``device_id`` (current)."""
        found = self.functions.get(device_id)
        if found is None:
            handle = self.handles[device_id] = self._load(device_id)
            found = self.functions[device_id] = _driver.function_of(handle)
        return found

    def _load(self, device_id: int) -> int:
        """The CUkernel address of the compiled kernel on ``device_id``, opted in to its shared memory."""
        return int(self.compiled.kernel(dynamic_shared_memory=self.shared_memory, device_id=device_id).handle)

    def fill(self, values: tuple[Any, ...]) -> None:
        """Set every scalar parameter (None: a map, set by the caller)."""
        self.params.fill(values)

    def launch(self, device_id: int, grid: tuple[int, int, int], block: tuple[int, int, int], stream: int,
               cluster: int = 1) -> None:
        """Launch with the parameters as filled (the caller holds the block's lock)."""
        function = self.functions.get(device_id)
        if function is None:
            function = self.function(device_id)
        _driver.launch(function, grid, block, self.shared_memory, stream, self.params, cluster,
                       self.handles.get(device_id))


def _stream_k_units(config: EngineConfig, waves: int, tiles: int, k: int, multiprocessors: int) -> int:
    """The work units of a stream-K launch (StreamKScheduler) on a block per SM; ValueError where the
    configuration, its waves or the shape cannot run stream-K."""
    if config.cluster != 1 or config.split_tf32 or config.swap_ab:
        raise ValueError(f"configuration {config} cannot run stream-K (clusters, the tf32 split or a swap)")
    if waves < _streamk.MIN_WAVES:
        raise ValueError(f"stream-K takes its splits as waves, at least {_streamk.MIN_WAVES}, not {waves}")
    if k <= 0 or multiprocessors <= 0:
        raise ValueError(f"stream-K needs K > 0 and SMs, not K = {k} on {multiprocessors}")
    d = _streamk.decomposition(tiles, math.ceil(k / config.bk), multiprocessors, waves)
    if d.iterations >= 2**31:
        raise ValueError(f"{d.iterations} stream-K iterations exceed the scheduler's 32-bit range")
    return d.units


class EnginePlan:
    """What every call of one kind (types, shapes, strides, alignments, device) runs on the engine."""

    #: Whether the plan computes D^T = B^T A^T (:data:`DECODE`; plans of other engines built on this one never do).
    swapped: bool = False
    #: Whether :meth:`scalars` / :meth:`launch` run this plan on pointers (plans of other kernels built on this
    #: one, with their own parameters, run on views through ``run``).
    on_pointers: bool = True
    #: Whether the rule may swap (plans whose kernel reads per-row and per-column data of x and y, such as
    #: scales, keep them in place).
    swaps: bool = True

    @property
    def streams_k(self) -> bool:
        """Whether the rule may choose stream-K: for the engine's own kernel (kernels/hopper_gemm.cu, run on
        pointers); plans of other kernels built on this one keep their rule until their GPU tests cover it."""
        return self.on_pointers and STREAM_K_BY_RULE

    def __init__(self, a: _dt.DType, c: _dt.DType, m: int, n: int, k: int, batch: int, route_a: OperandRoute,
                 route_b: OperandRoute, lda: int, ldb: int, batch_a: int, batch_b: int, batch_stride_a: int,
                 batch_stride_b: int, ptr_a: int, ptr_b: int, multiprocessors: int,
                 d_layout: tuple[int, int, int, int] | None = None, config: EngineConfig | None = None,
                 splits: int | None = None, scheme: str = "native", b: _dt.DType | None = None,
                 fast_accumulation: bool = False) -> None:
        """Choose and check (kernels compile at the first run); ExecutionError when TMA refuses an operand.

        ``ptr_a`` / ``ptr_b`` are this call's addresses: the tensor maps are encoded now
        (later calls only re-point them), so a tensor TMA cannot describe is found before
        anything runs. ``d_layout`` is D's (row, column, batch) element strides and address
        (None: a new C-contiguous result); a row-major D whose rows and problems start on 16
        bytes is stored with TMA. ``config`` / ``splits`` override the rule (benchmark sweeps; the
        config's ``promotion`` is then used as given). ``b`` is B's type (default ``a``: 8-bit
        types may mix); ``fast_accumulation`` keeps fp8 sums in the tensor core (no promotion).
        ``scheme`` is the products' scheme (blasdx.engine.emulation): "3xtf32" splits float32 operands.
        """
        b = a if b is None else b
        self.a, self.b, self.c = a, b, c
        self.m, self.n, self.k, self.batch = m, n, k, batch
        self.route_a, self.route_b = route_a, route_b
        self.routes_given = (route_a, route_b)  # before B's transposition is placed (bx.tune's key)
        promotion = promotion_of(a, fast_accumulation)
        chosen, chosen_splits = choose_config(a, m, n, k, batch, multiprocessors, scheme, promotion, self.swaps,
                                              self.streams_k)
        if config is None and splits is None and scheme == "native":  # a configuration bx.tune kept wins
            from .tuning import TUNED, key_of

            tuned = TUNED.get(key_of(a, b, c, m, n, k, batch, multiprocessors, route_a, route_b, promotion))
            if tuned is not None:
                try:
                    config, splits = EngineConfig(**tuned[0]), tuned[1]
                except TypeError:  # fields of another version of EngineConfig: the rule
                    pass
        if config is None and splits is not None and chosen.stream_k:  # K splits asked for: the rule's tile, split
            chosen = replace(chosen, stream_k=False)
        self.config = config or chosen
        self.splits = splits if splits is not None else (chosen_splits if config is None else 1)
        if not self.config.stream_k:  # splits asked for may leave the last one without K steps
            self.splits = nonempty_splits(math.ceil(k / self.config.bk), self.splits)
        if self.config.swap_ab:
            refused = swap_refused(a, b, route_a, route_b)
            if refused and config is not None:
                raise ValueError(f"configuration {self.config} does not run these operands: {refused}")
            if refused:  # the rule's decode tile does not take these operands: the rule without the swap
                self.config, self.splits = choose_config(a, m, n, k, batch, multiprocessors, scheme, promotion,
                                                         swap=False, stream_k=self.streams_k)
            else:  # from here on the plan computes D^T = B^T A^T: every A / B / row / column quantity swaps
                a, b, m, n, route_a, route_b = b, a, n, m, route_b, route_a
                lda, ldb, batch_a, batch_b, ptr_a, ptr_b = ldb, lda, batch_b, batch_a, ptr_b, ptr_a
                batch_stride_a, batch_stride_b = batch_stride_b, batch_stride_a
                self.a, self.b, self.m, self.n, self.route_a = a, b, m, n, route_a
                if d_layout is None:
                    d_layout = (n, 1, m * n if batch > 1 else 0, 0)
                d_layout = (d_layout[1], d_layout[0], d_layout[2], d_layout[3])
        fitted = b_panels_fit(self.config, route_b.k_major)
        if fitted is not self.config:
            if config is not None:
                raise ValueError(f"configuration {self.config} does not run these operands: an MN-major B is read "
                                 "in whole 64-wide panels, wider than its N tile")
            self.config = fitted
        self.swapped = self.config.swap_ab
        staged_guess = d_layout is None or _store_geometry(c, m, n, batch, d_layout) is not None
        self.config, self.splits, route_b = place_transposition(
            self.config, self.splits, route_b, b, m, n, k, batch, multiprocessors, staged_guess,
            None if config is None else config.transpose_b, self.streams_k)
        self.route_b = route_b
        if self.config.split_tf32 != (scheme in SPLIT_CONFIGS):
            raise ValueError(f"configuration {self.config} does not run the {scheme} scheme")
        if self.config.bn == 192 and (a.size != 2 or self.config.promotion or self.config.transpose_b):
            raise ValueError(f"configuration {self.config}: 192-wide tiles take 16-bit inputs as loaded")
        overlap = self.config.overlap_problem()
        if overlap is not None:
            raise ValueError(overlap)
        self.multiprocessors = multiprocessors
        self.operand_a = _operand(route_a, a, m, k, lda, batch_a, batch_stride_a, self.config.bm, self.config.bk)
        cluster = self.config.cluster
        self.operand_b = _operand(route_b, b, n, k, ldb, batch_b, batch_stride_b, self.config.bn // cluster,
                                  self.config.bk)
        self.tiles = math.ceil(math.ceil(m / self.config.bm) / cluster) * math.ceil(n / self.config.bn)
        self.units = batch * self.splits * self.tiles  # of clusters
        if self.config.stream_k:
            self.units = _stream_k_units(self.config, self.splits, batch * self.tiles, k, multiprocessors)
        if self.units >= 2**31:
            raise ValueError(f"{self.units} work units exceed the scheduler's 32-bit range")
        # clusters: as many as run at once, read off the device at the first run (an SM's pair may be missing);
        # stream-K shares its iterations among a block per SM
        self.grid = (cluster * max(1, min(self.units, multiprocessors // cluster)), 1, 1)
        if self.config.stream_k:
            self.grid = (multiprocessors, 1, 1)
        self._grid_checked = cluster == 1
        if d_layout is None:
            d_layout = (n, 1, m * n if batch > 1 else 0, 0)
        self.store_d = (_store_geometry(c, m, n, batch, d_layout)
                        if self.splits == 1 and stores_whole_chunks(self.config, c) else None)
        staged = self.store_d is not None
        self._gemm = self._gemm_kernel(staged)
        self._reduce = (_Kernel(reduce_source(c), REDUCE_NAME, "sm_90", _scalar_kinds(_REDUCE_PARAMS, c))
                        if self.splits > 1 else None)
        needs_repack = route_a.repack is not None or route_b.repack is not None
        self._repack = _Kernel(repack_source(a.size), REPACK_NAME, "sm_90", _REPACK_PARAMS) if needs_repack else None
        self._maps = [
            _driver.encode_tiled(t.name, ptr if r.repack is None else _SCRATCH_ALIGNMENT, op.dims, op.strides, op.box,
                                 _SWIZZLE)
            for t, ptr, r, op in ((a, ptr_a, route_a, self.operand_a), (b, ptr_b, route_b, self.operand_b))
        ]
        self._scalars: Any = None  # the strides, alpha and beta the GEMM's parameters hold
        self._mapped = [ptr if r.repack is None else _SCRATCH_ALIGNMENT
                        for ptr, r in ((ptr_a, route_a), (ptr_b, route_b))]
        if staged:
            ptr_d = d_layout[3] or _SCRATCH_ALIGNMENT  # a new result's address is not known yet
            op = self.store_d
            self._maps.append(_driver.encode_tiled(c.name, ptr_d, op.dims, op.strides, op.box, _SWIZZLE))
            self._mapped.append(ptr_d)
        params = self._gemm.params  # the maps are set once; their bytes change in place
        for i, tmap in enumerate((self._maps[0], self._maps[1], self._maps[2] if staged else self._maps[0])):
            params.set_map(i, tmap)
        # per call only the pointers change: C, D, split sums, counters (slots 3-6) in one write, the scalars
        # (slots 7-21) in another when a call's layouts or alpha / beta differ from the last call's
        self._pack_pointers, self._pointers_offset = params.packer(3, 4)
        self._pack_scalars, self._scalars_offset = params.packer(7, len(params.kinds) - 7)
        self._block = (self.config.threads, 1, 1)
        cfg = self.config
        tiles_m = math.ceil(math.ceil(m / cfg.bm) / cfg.cluster) * cfg.cluster
        tiles = batch * tiles_m * math.ceil(n / cfg.bn)
        # split K: each split's f32 / int32 sums of whole tiles; stream-K: the tiles' sums, added up in place;
        # and one counter per tile, consumer and warp (kernels/blasdx/hopper/splitk.cuh). The counters (and
        # stream-K's sums) are zero between launches.
        parts = 1 if cfg.stream_k else max(1, self.splits)
        # (bytes of the sums, of the counters): two pool buffers, as split K leaves partial sums behind and so
        # shares no buffer with zeroed ones; stream-K's sums have their own zeroed buffer
        self._split_bytes = (4 * tiles * cfg.bm * cfg.bn * parts, 4 * tiles * (1 if cfg.pingpong else cfg.consumers) * 4)
        self._sums_use = "stream-K sums" if cfg.stream_k else "split sums"
        # the buffers of the last split call: (stream, pool, its generation, device, sums, counters)
        self._pooled: tuple[Any, ...] = (None, None, -1, -1, 0, 0)

    def _gemm_kernel(self, staged: bool) -> _Kernel:
        """kernels/hopper_gemm.cu for this plan (``staged``: D stored by TMA)."""
        source = gemm_source(self.a, self.c, self.config, self.route_a.k_major, self.route_b.k_major, staged, self.b)
        return _Kernel(source, KERNEL_NAME, ARCH, _scalar_kinds(_GEMM_PARAMS, self.c),
                       self.config.shared_memory(self.a.size, staged))

    def __repr__(self) -> str:
        return f"EnginePlan({self.describe()})"

    def describe(self) -> str:
        """The path and what it chose: tile, stages, splits, operand routes, how D is stored."""
        return _describe(self.config, self.splits, self.route_a, self.route_b, self.store_d is not None)

    compiled = Forward[Any]("_gemm", "The GEMM's CompiledKernel (SASS, registers, spills).")

    # -- per call -------------------------------------------------------------------------------

    def run(self, device_id: int, stream_core: Any, stream: int, a: Any, b: Any, c: Any, d: Any, alpha: float,
            beta: float) -> None:
        """D = alpha * A B + beta * C on ``stream``: A, B, C, D are ArrayViews (C None: beta is 0).

        alpha and beta are of C's scalar type (int32 for an integer C; :func:`scalar`).
        Scratch (repacked operands, split-K partial sums) is the call's: safe in a CUDA graph
        capture (blasdx.launch.scratch).
        """
        scalars = self.scalars(c, d, alpha, beta)
        self.launch(device_id, stream, a.ptr, b.ptr, 0 if c is None else c.ptr, d.ptr, scalars, a, b)

    def scalars(self, c: Any, d: Any, alpha: float, beta: float) -> tuple[Any, ...]:
        """The GEMM's parameters after its pointers for results laid out as the views ``c`` (None: no C, beta
        0) and ``d``, as :meth:`launch` takes them (a call bound to its layouts computes them once)."""
        if c is None:
            beta = 0
        c_strides = (0, 0, 0) if c is None else result_strides(c)
        d_strides = result_strides(d)
        if self.swapped:  # the kernel's rows are the result's columns
            c_strides = (c_strides[1], c_strides[0], c_strides[2])
            d_strides = (d_strides[1], d_strides[0], d_strides[2])
        return (self.m, self.n, self.k, self.batch, int(self.operand_a.batched), int(self.operand_b.batched),
                self.splits, *c_strides, *d_strides, scalar(alpha, self.c), scalar(beta, self.c))

    @property
    def repacks(self) -> bool:
        """Whether an operand is repacked before the GEMM (its launch needs the operand's view)."""
        return self.route_a.repack is not None or self.route_b.repack is not None

    def launch(self, device_id: int, stream: int, a_ptr: int, b_ptr: int, c_ptr: int, d_ptr: int,
               scalars: tuple[Any, ...], a: Any = None, b: Any = None) -> None:
        """One call on pointers (the device current): ``scalars`` from :meth:`scalars`; ``a`` / ``b`` the operands'
        views, needed only where :attr:`repacks`. With :attr:`swapped` the kernel reads y as A and x as B."""
        if self.swapped:
            a_ptr, b_ptr, a, b = b_ptr, a_ptr, b, a
        if not self.needs_scratch:
            self._launch_gemm(device_id, stream, a_ptr, b_ptr, c_ptr, d_ptr, 0, 0, scalars)
            return
        if self._repack is None and not _driver.is_capturing(stream):  # split sums alone, from the pool
            pool = _scratch.POOL
            pooled = self._pooled  # the last call's buffers, while the pool has given none back since
            if pooled[0] == stream and pooled[1] is pool and pooled[2] == pool.generation and pooled[3] == device_id:
                workspace, counters = pooled[4], pooled[5]
            else:
                generation = pool.generation  # before the look-ups: a buffer given back meanwhile is not kept
                workspace = pool.get(device_id, stream, self._sums_use, self._split_bytes[0], self.config.stream_k)
                counters = pool.get(device_id, stream, "split counters", self._split_bytes[1], True)
                self._pooled = (stream, pool, generation, device_id, workspace, counters)
            self._launch_gemm(device_id, stream, a_ptr, b_ptr, c_ptr, d_ptr, workspace, counters, scalars)
            return
        with _scratch.call_scratch(device_id, stream) as scratch:
            a_ptr, b_ptr, workspace, counters = self.prepare(device_id, scratch, stream, a_ptr, b_ptr, a, b)
            self._launch_gemm(device_id, stream, a_ptr, b_ptr, c_ptr, d_ptr, workspace, counters, scalars)

    def prepare(self, device_id: int, scratch: Any, stream: int, a_ptr: int, b_ptr: int, a: Any,
                b: Any) -> tuple[int, int, int, int]:
        """The addresses TMA reads A and B from (repacked first where the routes say, from the views ``a`` /
        ``b``), the split sums and the split counters (0 without splits), all from the call's ``scratch``."""
        if self.route_a.repack is not None:
            a_ptr = self._prepare(a, self.route_a, self.operand_a, self.m, "a", device_id, scratch, stream)
        if self.route_b.repack is not None:
            b_ptr = self._prepare(b, self.route_b, self.operand_b, self.n, "b", device_id, scratch, stream)
        workspace = counters = 0
        if self.splits > 1:  # the counters (and stream-K's sums) zero between launches (splitk.cuh)
            workspace = scratch.get(self._sums_use, self._split_bytes[0], zero=self.config.stream_k)
            counters = scratch.get("split counters", self._split_bytes[1], zero=True)
        return a_ptr, b_ptr, workspace, counters

    def _launch_gemm(self, device_id: int, stream: int, a_ptr: int, b_ptr: int, c_ptr: int, d_ptr: int,
                     workspace: int, counters: int, scalars: tuple[Any, ...]) -> None:
        """Point the maps, write the parameters that changed and launch the GEMM."""
        gemm = self._gemm
        params = gemm.params
        with params.lock:
            self._point_maps(a_ptr, b_ptr, d_ptr)
            if scalars is not self._scalars and scalars != self._scalars:
                self._pack_scalars(params.data, self._scalars_offset, *scalars)
            self._scalars = scalars
            self._pack_pointers(params.data, self._pointers_offset, c_ptr, d_ptr, workspace, counters)
            if not self._grid_checked:
                self._fit_grid(device_id)
            function = gemm.functions.get(device_id)
            if function is None:
                function = gemm.function(device_id)
            _driver.launch(function, self.grid, self._block, gemm.shared_memory, stream, params, self.config.cluster,
                           gemm.handles.get(device_id))

    @property
    def needs_scratch(self) -> bool:
        """Whether a call takes device scratch: a repacked operand or split-K partial sums."""
        return self.splits > 1 or self.route_a.repack is not None or self.route_b.repack is not None

    def _fit_grid(self, device_id: int) -> None:
        """A persistent grid of clusters no larger than the device runs at once."""
        cluster = self.config.cluster
        fits = _driver.max_active_clusters(self._gemm.function(device_id), (self.config.threads, 1, 1),
                                           self._gemm.shared_memory, cluster)
        if fits:
            self.grid = (cluster * max(1, min(self.units, fits)), 1, 1)
        self._grid_checked = True

    def _point_maps(self, a_ptr: int, b_ptr: int, d_ptr: int) -> None:
        """Point the tensor maps at this call's operands (under the GEMM's lock; only those whose address changed).

        Without a TMA store, D's parameter takes A's map (the kernel does not read it).
        """
        maps, mapped = self._maps, self._mapped
        if a_ptr != mapped[0]:
            maps[0].replace_address(a_ptr)
            mapped[0] = a_ptr
        if b_ptr != mapped[1]:
            maps[1].replace_address(b_ptr)
            mapped[1] = b_ptr
        if len(maps) > 2 and d_ptr != mapped[2]:
            maps[2].replace_address(d_ptr)
            mapped[2] = d_ptr

    def _prepare(self, view: Any, route_: OperandRoute, op: _Operand, rows: int, slot: str, device_id: int,
                 scratch: Any, stream: int) -> int:
        """The address TMA reads the operand from: the array itself, or its K-major repacked copy."""
        if route_.repack is None:
            return view.ptr
        k, size = self.k, (self.a if slot == "a" else self.b).size
        problems = op.dims[2]
        target = scratch.get(slot, op.strides[1] * problems)
        shape, strides = tuple(view.shape), tuple(view.strides)
        row_stride, col_stride = strides[-2:]
        source_batch = strides[0] if len(shape) == 3 and shape[0] > 1 else 0
        # repacked rows are M (A: rows of x) or N (B: columns of y) and run along K
        src_row, src_col = (row_stride, col_stride) if route_.argument == "x" else (col_stride, row_stride)
        grid = (math.ceil(k / 32), math.ceil(rows / 32), min(problems, _MAX_GRID_Z))
        with self._repack.params.lock:
            self._repack.fill((view.ptr, target, rows, k, src_row, src_col, source_batch, op.strides[0] // size,
                               op.strides[1] // size, problems))
            self._repack.launch(device_id, grid, (32, 8, 1), stream)
        return target


def point_maps(params: Any, maps: list, mapped: list[int], pointers: tuple[int, ...]) -> bool:
    """Point tensor maps at this call's ``pointers`` (a driver call only where an address changed; ``mapped``
    keeps them) and, unless they hold them already, make maps 0 and 1 the kernel's first two parameters;
    whether the parameters took the maps anew (the caller then binds any others)."""
    for i, ptr in enumerate(pointers):
        if ptr != mapped[i]:
            maps[i].replace_address(ptr)
            mapped[i] = ptr
    if params.maps.get(0) is maps[0]:
        return False
    params.set_map(0, maps[0])
    params.set_map(1, maps[1])
    return True


def reduce_splits(kernel: _Kernel, device_id: int, stream: int, workspace: int, splits: int, c_ptr: int,
                  c_strides: tuple[int, int, int], d_ptr: int, d_strides: tuple[int, int, int], m: int, n: int,
                  batch: int, multiprocessors: int, alpha: Any, beta: Any) -> None:
    """kernels/splitk_reduce.cu: D = alpha * (the splits' partial sums) + beta * C (no splits: beta * C)."""
    total = batch * m * n
    grid = (max(1, min(math.ceil(total / 256), 8 * multiprocessors)), 1, 1)
    with kernel.params.lock:
        kernel.fill((workspace, c_ptr, d_ptr, m, n, batch, splits, *c_strides, *d_strides, alpha, beta))
        kernel.launch(device_id, grid, (256, 1, 1), stream)


#: The process's scratch pool (blasdx.launch.scratch), under the name the engine modules used.
_SCRATCH = _scratch.POOL


class _NoScratch:
    """The scratch of a call that takes none: nothing to ask the driver, nothing to free."""

    def get(self, use: str, nbytes: int) -> int:  # pragma: no cover - plans without scratch never ask
        raise AssertionError(f"a plan without scratch asked for {nbytes} bytes of {use}")

    def __enter__(self) -> _NoScratch:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


_NO_SCRATCH = _NoScratch()


def swap_refused(a: _dt.DType, b: _dt.DType, route_a: OperandRoute, route_b: OperandRoute) -> str | None:
    """Why x and y cannot be swapped into B and A (:data:`DECODE`), or None: x^T becomes B, whose narrow tile
    TMA loads K-major only (x row-major), neither operand may need a repack (read in place: 8-bit and tf32
    y K-major), and both are of one type."""
    if a != b:
        return "the swapped tile takes operands of one type"
    if not route_a.k_major:
        return "x is not row-major (the swapped B tile is K-major only)"
    if route_a.repack is not None or route_b.repack is not None:
        return "an operand is repacked"
    return None


def _describe(config: EngineConfig, splits: int, route_a: OperandRoute, route_b: OperandRoute, tma_store: bool) -> str:
    shared = f"over the last {splits} waves of tiles" if config.stream_k else f"{splits} K split{'s' * (splits > 1)}"
    text = f"hopper wgmma+TMA, {config}, {shared}"
    text += ", D by TMA" if tma_store else ", D by direct stores"
    for r in (route_a, route_b):
        layout = "K-major" if r.k_major else "MN-major"
        text += f", {r.argument} {layout}" + (f" (repacked: {r.repack})" if r.repack else "")
        text += " (transposed in shared memory)" if r.transpose else ""
    return text


def describe_call(a: _dt.DType, c: _dt.DType, m: int, n: int, k: int, batch: int = 1, a_row_major: bool = True,
                  b_row_major: bool = True, multiprocessors: int = 132, fast_accumulation: bool = False,
                  scheme: str = "native") -> str:
    """What the engine runs for contiguous operands of these types, shape and layouts (no GPU needed).

    The same rule and routes as :class:`EnginePlan`, for operands at 256-byte aligned
    addresses with a new C-contiguous result (``python -m blasdx matmul``).
    """
    if not serves(a, c, scheme):
        raise ValueError(f"the engine runs {', '.join(f'{x.name} -> {y.name}' for x, y in sorted(SERVED, key=str))}"
                         f" (and float32 -> float32 as 3xtf32); not {a.name} -> {c.name} ({scheme})")
    config, splits = choose_config(a, m, n, k, batch, multiprocessors, scheme, promotion_of(a, fast_accumulation),
                                   stream_k=STREAM_K_BY_RULE)
    route_a = route("x", a, _SCRATCH_ALIGNMENT, a_row_major, k if a_row_major else m, m if a_row_major else k,
                    m * k, batch > 1)
    route_b = route("y", a, _SCRATCH_ALIGNMENT, not b_row_major, n if b_row_major else k, k if b_row_major else n,
                    k * n, batch > 1)
    if config.swap_ab:
        if swap_refused(a, a, route_a, route_b) is None:  # described as the plan runs it: D^T = y^T x^T
            return _describe(config, splits, route_b, route_a, False)  # x K-major: nothing to transpose
        config, splits = choose_config(a, m, n, k, batch, multiprocessors, scheme, config.promotion, swap=False,
                                       stream_k=STREAM_K_BY_RULE)
    config = b_panels_fit(config, route_b.k_major)
    geometry = _store_geometry(c, m, n, batch, (n, 1, m * n if batch > 1 else 0, 0))
    config, splits, route_b = place_transposition(config, splits, route_b, a, m, n, k, batch, multiprocessors,
                                                  geometry is not None, stream_k=STREAM_K_BY_RULE)
    store = splits == 1 and geometry is not None and stores_whole_chunks(config, c)
    return _describe(config, splits, route_a, route_b, store)


def stores_whole_chunks(config: EngineConfig, c: _dt.DType) -> bool:
    """Whether the TMA-store epilogue can take the tile: it stages D in chunks of 128 bytes of a row (a 32-wide
    tile of 16-bit results is half a chunk: stored directly)."""
    return (config.bn * c.size) % 128 == 0


def _store_geometry(c: _dt.DType, m: int, n: int, batch: int, d_layout: tuple[int, int, int, int]) -> _Operand | None:
    """D's tensor map for the TMA-store epilogue, or None when D is not row-major with 16-byte rows and problems,
    or when a row's N elements do not end on 16 bytes.

    The map's extents are D's logical N x M x batch, yet a TMA store past N writes the whole 16 bytes
    that hold column N - 1 (seen on an H200: zeros over columns N to the next 16 bytes of a padded D),
    so only rows of whole 16 bytes leave the caller's padding alone; the others are stored pair by pair.
    """
    row, col, batch_stride, ptr = d_layout
    size = c.size
    if col != 1 or ptr % 16 or (n * size) % 16 or (m > 1 and (row * size) % 16) or (
            batch > 1 and (batch_stride * size) % 16):
        return None
    row_bytes = row * size if m > 1 else _round_up(max(n * size, 16), 16)
    batched = batch > 1
    batch_bytes = batch_stride * size if batched else _round_up(max(m * row_bytes, 16), 16)
    return _Operand((n, m, batch), (row_bytes, batch_bytes), (_SWIZZLE // size, 64, 1), batched)


def result_strides(view: Any) -> tuple[int, int, int]:
    """(row, column, batch) element strides of a result-shaped view (batch 0 when it does not vary)."""
    rs, cs = view.strides[-2:]
    bs = view.strides[0] if len(view.shape) == 3 and view.shape[0] > 1 else 0
    return rs, cs, bs

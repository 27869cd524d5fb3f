"""GPU correctness of the wgmma path (sm_90a descriptors on a compute capability 9.0 GPU).

Every combination wgmma runs (f16 -> f16 | f32, bf16 -> f32, e4m3/e5m2 -> f16 | f32, s8/u8
in every pair -> s32), every arrangement the path reads (all eight for 16-bit inputs; for 8-bit
inputs, which are transposed into K-major panels where they are not K-major, each order of A,
of B and of C), at 64^3, 128x128x64, 128^3 and 64x256x32, against the float64 reference (int8:
exact) with C poisoned when beta = 0 and several alpha/beta pairs; then the odd corners of the
path (tiles issued as several instructions, warpgroups looping over tiles, copies narrower than
16 bytes, padded leading dimensions, odd and broadcast batches) and sizes that must fall back to
mma.sync on the same target.
"""

from __future__ import annotations

import itertools

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt

from .gpu_support import C, R, require_gpu, stable_seed
from .test_gpu_gemm import run_gemm

pytestmark = pytest.mark.gpu

F16, BF16, F32 = bx.float16, bx.bfloat16, bx.float32
E4, E5 = bx.float8_e4m3, bx.float8_e5m2
I8, U8, I32 = bx.int8, bx.uint8, bx.int32
FP8 = (E4, E5)
SIXTEEN_BIT = [(F16, F16, F16), (F16, F16, F32), (BF16, BF16, F32), (BF16, BF16, BF16)]
EIGHT_BIT = [(a, b, c) for a in FP8 for b in FP8 for c in (F16, F32)] + [(a, b, I32) for a in (I8, U8)
                                                                          for b in (I8, U8)]
#: K-major A and B as read; N-major B, M-major A, both (transposed on the way in); each C order.
EIGHT_BIT_ARRANGEMENTS = [(R, C, C), (R, R, R), (C, R, C), (C, C, R)]
SIZES = [(64, 64, 64), (128, 128, 64), (128, 128, 128), (64, 256, 32)]
SCALARS = [(1.0, 0.0), (-1.5, 0.5), (0.5, 1.0)]
INT_SCALARS = [(1, 0), (-2, 3), (3, 1)]


def gemm(size, types, arr, *extra) -> bx.Descriptor:
    desc = (bx.Size(*size) + bx.Precision(*types) + bx.Function.MM + bx.Arrangement(*arr)
            + bx.SM(90, arch_specific=True) + bx.Block())
    for op in extra:
        desc = desc + op
    return desc


def _main_cases():
    for types in SIXTEEN_BIT:
        for arr in itertools.product((R, C), repeat=3):
            for size in SIZES:
                yield types, arr, size
    for types in EIGHT_BIT:
        for arr in EIGHT_BIT_ARRANGEMENTS:
            for size in SIZES:
                yield types, arr, size


def _id(types, arr, size, extra=()) -> str:
    a, b, c = types
    tail = "-".join(type(op).__name__ for op in extra)
    return (f"{a.name}x{b.name}-{c.name}-{''.join(x.name[0] for x in arr)}-{'x'.join(map(str, size))}"
            + (f"-{tail}" if tail else ""))


MAIN = list(_main_cases())

# (types, arrangement, size, extra operators): corners of the wgmma path.
CORNERS = [
    ((F16, F16, F32), (R, C, C), (64, 96, 48), ()),  # tile 96 = m64n64 + m64n32, 32B panels
    ((F16, F16, F32), (R, R, C), (64, 48, 16), ()),  # N-major B, tile 48 = 32 + 16, 32B B panels
    ((BF16, BF16, F32), (C, R, R), (64, 80, 32), ()),  # N-major B, 80 = 64 + 16
    ((F16, F16, F32), (R, C, C), (256, 256, 16), ()),  # 8 tiles over 2 warpgroups
    ((F16, F16, F16), (C, C, R), (192, 64, 64), (bx.BlockDim(384),)),  # 3 warpgroups
    ((F16, F16, F32), (R, C, C), (128, 128, 64), (bx.BlockDim(128),)),  # one warpgroup, 2 tiles
    ((F16, F16, F32), (C, R, C), (64, 64, 64), (bx.BlockDim(64, 2),)),  # 2-D block
    ((BF16, BF16, F32), (R, C, C), (128, 128, 64), (bx.MaxAlignment,)),  # 16-byte copies
    ((F16, F16, F32), (C, R, R), (64, 128, 64), (bx.MaxAlignment, bx.LeadingDimension(72, 136, 136))),
    ((E4, E5, F32), (R, C, C), (128, 8, 32), ()),  # m64n8k32
    ((E5, E4, F16), (R, C, C), (64, 64, 96), (bx.MaxAlignment,)),  # 32B panels of fp8
    ((E4, E4, F32), (R, C, R), (64, 256, 64), (bx.MaxAlignment,)),
    ((E4, E5, F32), (R, R, R), (128, 8, 32), ()),  # m64n8k32, B 8 bytes wide transposed
    ((I8, U8, I32), (R, R, C), (64, 24, 32), (bx.MaxAlignment,)),  # 24 = m64n16 + m64n8, 8-byte pieces
    ((U8, U8, I32), (C, R, C), (64, 64, 64), ()),  # default alignment: 1-byte pieces transposed
    ((E5, E4, F16), (C, R, R), (64, 48, 64), (bx.Alignment(2, 2, 2),)),  # 2-byte pieces
    ((I8, I8, I32), (C, R, C), (64, 128, 64), (bx.MaxAlignment, bx.LeadingDimension(80, 144, 72))),  # padded
    ((I8, I8, I32), (R, R, R), (128, 128, 64), (bx.MaxAlignment, bx.BlockDim(128))),  # 2 pieces a thread
    ((U8, I8, I32), (C, R, R), (192, 64, 64), (bx.MaxAlignment, bx.BlockDim(384))),  # 3 warpgroups
    ((E4, E4, F32), (C, C, C), (128, 128, 32), (bx.MaxAlignment,)),  # 32B panels transposed
]

# Sizes and arrangements that keep mma.sync on sm_90a.
FALLBACKS = [
    ((F16, F16, F32), (R, C, C), (17, 33, 9), ()),
    ((F16, F16, F32), (R, C, C), (64, 64, 8), ()),
    ((BF16, BF16, F32), (C, R, C), (32, 64, 64), ()),
    ((F16, F16, F16), (R, R, C), (64, 24, 16), ()),
    ((F16, F16, F32), (R, C, C), (64, 264, 16), ()),
    ((F16, F16, F32), (R, C, C), (64, 64, 64), (bx.BlockDim(96),)),
    ((E4, E4, F32), (R, R, R), (64, 64, 48), ()),  # K not a multiple of 32
    ((I8, I8, I32), (R, R, R), (32, 64, 64), ()),  # M not a multiple of 64
    ((U8, I8, I32), (C, R, C), (100, 100, 100), (bx.MaxAlignment,)),
]

ALL = [(t, a, s, ()) for t, a, s in MAIN] + CORNERS + FALLBACKS


@pytest.fixture(scope="module")
def compiled():
    """Compile every descriptor of the module up front, in parallel; skip off compute capability 9.0."""
    sm = require_gpu()
    if sm != 90:
        pytest.skip(f"sm_90a code runs only on compute capability 9.0 devices, this one is {sm // 10}.{sm % 10}")
    descs = {case: gemm(case[2], case[0], case[1], *case[3]) for case in ALL}
    bx.precompile(list(descs.values()), workers=16)
    return descs


def _check(desc: bx.Descriptor, types, instruction: str) -> None:
    row = dt.find_combination(*types, False)
    for alpha, beta in INT_SCALARS if row.c.integral else SCALARS:
        run_gemm(desc, row, alpha, beta, stable_seed(repr(desc), alpha, beta), instruction=instruction)


@pytest.mark.parametrize("types,arr,size", MAIN, ids=[_id(*case) for case in MAIN])
def test_every_wgmma_combination(compiled, types, arr, size):
    desc = compiled[(types, arr, size, ())]
    assert desc.instruction.startswith("wgmma."), desc.instruction
    _check(desc, types, "wgmma")


@pytest.mark.parametrize("types,arr,size,extra", CORNERS, ids=[_id(*case) for case in CORNERS])
def test_wgmma_corners(compiled, types, arr, size, extra):
    desc = compiled[(types, arr, size, extra)]
    assert desc.instruction.startswith("wgmma."), desc.instruction
    _check(desc, types, "wgmma")


@pytest.mark.parametrize("types,arr,size,extra", FALLBACKS, ids=[_id(*case) for case in FALLBACKS])
def test_ineligible_sizes_fall_back_to_mma_sync(compiled, types, arr, size, extra):
    desc = compiled[(types, arr, size, extra)]
    assert desc.instruction.startswith("mma.sync."), desc.instruction
    _check(desc, types, "mma.sync")


@pytest.mark.parametrize("a_batch,b_batch", [(1, 4), (4, 1), (4, 4)])
def test_wgmma_batches_and_broadcast(compiled, a_batch, b_batch):
    types = (F16, F16, F32)
    desc = compiled[(types, (R, C, C), (128, 128, 64), ())]
    row = dt.find_combination(*types, False)
    run_gemm(desc, row, -1.5, 0.5, 21, batch=4, a_batch=a_batch, b_batch=b_batch, instruction="wgmma")
    run_gemm(desc, row, 1.0, 0.0, 22, batch=1000, instruction="wgmma")


ODD_BATCHES = [((I8, I8, I32), (R, R, R), (128, 128, 128)), ((E4, E4, F32), (R, R, R), (128, 128, 64)),
               ((U8, I8, I32), (C, R, C), (64, 64, 64))]


@pytest.mark.parametrize("types,arr,size", ODD_BATCHES, ids=[_id(*case) for case in ODD_BATCHES])
def test_8bit_odd_and_broadcast_batches(compiled, types, arr, size):
    """The benchmarks' layouts (B transposed on the way in) over odd batch counts and broadcasts."""
    desc = compiled[(types, arr, size, ())]
    row = dt.find_combination(*types, False)
    alpha, beta = INT_SCALARS[1] if row.c.integral else SCALARS[1]
    run_gemm(desc, row, alpha, beta, 31, batch=5, a_batch=1, instruction="wgmma")
    run_gemm(desc, row, alpha, beta, 32, batch=7, b_batch=1, instruction="wgmma")
    run_gemm(desc, row, INT_SCALARS[0][0] if row.c.integral else 1.0, 0, 33, batch=999, instruction="wgmma")

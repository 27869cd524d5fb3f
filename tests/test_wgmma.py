"""wgmma on sm_90a (CPU, no GPU): when the plan chooses it, what the plan and config say, the
swizzle arithmetic of the panels, and that the kernels compile to HGMMA / QGMMA / IGMMA without
spills.

The eligibility rule is restated here on its own (``eligible``), not read from blasdx.
"""

from __future__ import annotations

import itertools
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blasdx as bx
from blasdx import compile as cc
from blasdx.compile import cubin as cubins
from blasdx.base import dtypes as dt
from blasdx.plan import heuristics as h

R, C = bx.row_major, bx.col_major
F16, BF16, F32, TF32, F64 = bx.float16, bx.bfloat16, bx.float32, bx.tfloat32, bx.float64
E4, E5, I8, U8, I32 = bx.float8_e4m3, bx.float8_e5m2, bx.int8, bx.uint8, bx.int32
FP8 = (E4, E5)
INT8 = (I8, U8)
SIXTEEN_BIT_ROWS = [(F16, F16, F16), (F16, F16, F32), (BF16, BF16, F32), (BF16, BF16, BF16)]
FP8_ROWS = [(a, b, c) for a in FP8 for b in FP8 for c in (F16, F32)]
INT8_ROWS = [(a, b, I32) for a in INT8 for b in INT8]
WGMMA_ROWS = SIXTEEN_BIT_ROWS + FP8_ROWS + INT8_ROWS
SIZES = [(64, 64, 64), (128, 128, 64), (128, 128, 128), (64, 256, 32)]


def gemm(size, a, b, c, arr=(R, C, C), *extra, arch_specific=True) -> bx.Descriptor:
    desc = (bx.Size(*size) + bx.Precision(a, b, c) + bx.Function.MM + bx.Arrangement(*arr)
            + bx.SM(90, arch_specific=arch_specific) + bx.Block())
    for op in extra:
        desc = desc + op
    return desc


def eligible(m, n, k, a, b, c, a_row_major, b_row_major, threads=None, is_complex=False) -> bool:
    """The rule of the task, written out: sizes tile, types and arrangements wgmma reads, whole warpgroups."""
    if is_complex or (threads is not None and threads % 128):
        return False
    if (a, b, c) in SIXTEEN_BIT_ROWS:
        k_step = 16
        if b_row_major and n % 16:  # N-major B panels are at least 32 bytes wide
            return False
    elif (a in FP8 and b in FP8 and c in (F16, F32)) or (a in INT8 and b in INT8 and c == I32):
        k_step = 32  # any arrangement: operands that are not K-major are transposed into K-major panels
    else:
        return False
    return m % 64 == 0 and n % 8 == 0 and n <= 256 and k % k_step == 0


def problem(m, n, k, a, b, c, a_row_major=True, b_row_major=False, arch_specific=True, is_complex=False):
    return h.Problem(m, n, k, a, b, c, is_complex, a_row_major, b_row_major, False, 90, arch_specific)


# ---------------------------------------------------------------------------------------------- the plan


# (problem, instruction, warpgroup tile columns, threads): worked out by hand. f32 accumulators
# allow 128 columns per warpgroup tile (64 registers), f16 ones 256; one warpgroup per tile,
# at most two warpgroups suggested.
PLANS = [
    (problem(64, 64, 64, F16, F16, F32), "wgmma.m64n64k16", 64, 128),
    (problem(128, 128, 64, F16, F16, F32), "wgmma.m64n128k16", 128, 256),
    (problem(128, 128, 128, BF16, BF16, F32, False, True), "wgmma.m64n128k16", 128, 256),
    (problem(64, 256, 32, F16, F16, F32), "wgmma.m64n128k16", 128, 256),  # 2 tiles of 128
    (problem(64, 256, 32, F16, F16, F16), "wgmma.m64n256k16", 256, 128),  # f16: one tile of 256
    (problem(64, 96, 48, F16, F16, F32), "wgmma.m64n64k16", 96, 128),  # 96 = 64 + 32
    (problem(64, 48, 16, F16, F16, F32, True, True), "wgmma.m64n32k16", 48, 128),  # N-major: 32 + 16
    (problem(256, 256, 16, F16, F16, F32), "wgmma.m64n128k16", 128, 256),  # 8 tiles, 2 warpgroups
    (problem(64, 64, 64, E4, E5, F16), "wgmma.m64n64k32", 64, 128),
    (problem(128, 8, 32, E5, E5, F32), "wgmma.m64n8k32", 8, 256),
    (problem(128, 128, 128, I8, I8, I32, True, True), "wgmma.m64n128k32", 128, 256),  # s32: 128 columns
    (problem(64, 64, 64, U8, I8, I32, False, False), "wgmma.m64n64k32", 64, 128),
    (problem(128, 128, 64, E4, E4, F32, True, True), "wgmma.m64n128k32", 128, 256),  # N-major B transposed
    (problem(64, 24, 32, I8, U8, I32, True, True), "wgmma.m64n16k32", 24, 128),  # K-major in smem: step 8
]


@pytest.mark.parametrize("p, instruction, tile_n, threads", PLANS)
def test_wgmma_plan(p, instruction, tile_n, threads):
    plan = h.plan_kernel(p)
    assert (plan.instruction, plan.warpgroup_n, plan.threads) == (instruction, tile_n, threads)
    assert plan.is_wgmma and plan.is_mma and plan.warp_tile == (1, 1)
    assert plan.atom == h.atom_shape(instruction)
    # the device API keeps the warp-level plan of the same block
    assert plan.warp_level == h.plan_warp_level(p, threads)
    assert plan.warp_level.instruction.startswith("mma.sync.")


def test_panels_layouts_and_offsets():
    # 128^3 f16, A column-major (M-major: 128B panels of 64 rows), B row-major (N-major: the
    # narrowest instruction is the whole 128-wide tile -> 128B panels); B starts at 32 KiB.
    plan = h.plan_kernel(problem(128, 128, 128, F16, F16, F32, False, True))
    assert (plan.smem_a.strides, plan.smem_a.swizzle, plan.smem_a.panel_stride) == ((1, 64), "128B", 128 * 64)
    assert (plan.smem_b.strides, plan.smem_b.swizzle, plan.smem_b.panel_stride) == ((64, 1), "128B", 128 * 64)
    assert plan.smem_b_offset == 128 * 128 * 2
    assert plan.smem_c is None  # 64 KiB + a 67.5 KiB C twice would not fit
    assert plan.shared_memory == 2 * 128 * 128 * 2
    assert plan.min_blocks == 2
    # K = 48 f16 (96 B rows): 32B panels for K-major A and B, 3 of them
    plan = h.plan_kernel(problem(64, 96, 48, F16, F16, F32))
    assert (plan.smem_a.swizzle, plan.smem_a.panel_stride, plan.smem_a.cosize) == ("32B", 64 * 16, 64 * 48)
    assert (plan.smem_b.swizzle, plan.smem_b.panel_stride) == ("32B", 96 * 16)
    # A and B start on 1024-byte boundaries: 64 * 48 * 2 = 6144
    assert plan.smem_b_offset == 6144
    # fp8, K = 64 bytes: 64B panels
    plan = h.plan_kernel(problem(64, 64, 64, E4, E4, F32))
    assert (plan.smem_a.swizzle, plan.smem_b.swizzle) == ("64B", "64B")
    # 8-bit operands sit K-major whatever their arrangement: M-major A and N-major B are
    # transposed into K-major panels (int8 128x128x64: 64B panels, rows of 64 K bytes)
    plan = h.plan_kernel(problem(128, 128, 64, I8, I8, I32, False, True))
    assert (plan.smem_a.strides, plan.smem_a.swizzle, plan.smem_a.panel_stride) == ((64, 1), "64B", 0)
    assert (plan.smem_b.strides, plan.smem_b.swizzle, plan.smem_b.panel_stride) == ((1, 64), "64B", 0)
    assert plan.smem_b_offset == 128 * 64 and plan.smem_b.index(3, 5) == 5 * 64 + 3 ^ (((5 * 64) >> 7) & 3) << 4
    assert h.wgmma_k_major(problem(64, 64, 64, F16, F16, F32, False, True)) == (False, False)
    assert h.wgmma_k_major(problem(64, 64, 64, U8, U8, I32, False, True)) == (True, True)


def test_block_dim_must_be_whole_warpgroups():
    p = problem(128, 128, 64, F16, F16, F32)
    assert h.plan_kernel(p, threads=384).is_wgmma
    assert h.plan_kernel(p, threads=384).threads == 384
    assert h.plan_kernel(p, threads=128).is_wgmma
    for threads in (32, 96, 160, 192):
        plan = h.plan_kernel(p, threads=threads)
        assert not plan.is_wgmma and plan == h.plan_warp_level(p, threads)


FALLBACKS = [
    problem(17, 33, 9, F16, F16, F32),  # nothing tiles
    problem(64, 64, 8, F16, F16, F32),  # K not a multiple of 16
    problem(32, 64, 64, F16, F16, F32),  # M not a multiple of 64
    problem(64, 60, 64, F16, F16, F32),  # N not a multiple of 8
    problem(64, 264, 16, F16, F16, F16),  # N above 256
    problem(64, 24, 16, F16, F16, F32, True, True),  # N-major B needs N a multiple of 16
    problem(64, 64, 48, E4, E4, F32),  # fp8 K not a multiple of 32
    problem(64, 64, 48, I8, U8, I32, True, True),  # int8 K not a multiple of 32
    problem(32, 64, 64, I8, I8, I32),  # M not a multiple of 64
    problem(64, 64, 64, TF32, TF32, F32),  # not a wgmma type here
    problem(64, 64, 64, F64, F64, F64),
    problem(64, 64, 64, F32, F32, F32),
    problem(64, 64, 64, F16, F16, F32, is_complex=True),
    problem(64, 64, 64, F16, F16, F32, arch_specific=False),  # sm_90 without "a"
]


@pytest.mark.parametrize("p", FALLBACKS)
def test_ineligible_problems_keep_the_warp_level_plan(p):
    assert h.wgmma_tile_n(p) is None
    assert h.plan_kernel(p) == h.plan_warp_level(p)


@st.composite
def sm90_problems(draw):
    row = draw(st.sampled_from([r for r in dt.COMBINATIONS if r.min_sm <= 90]))
    sizes = st.one_of(st.integers(1, 300), st.integers(1, 5).map(lambda i: 64 * i), st.integers(1, 40).map(lambda i: 8 * i))
    m, n, k = draw(sizes), draw(sizes), draw(sizes)
    a_row, b_row = draw(st.booleans()), draw(st.booleans())
    threads = draw(st.one_of(st.none(), st.integers(1, 8).map(lambda w: 32 * w)))
    return h.Problem(m, n, k, row.a, row.b, row.c, row.is_complex, a_row, b_row, draw(st.booleans()), 90,
                     draw(st.booleans())), threads


@given(sm90_problems())
@settings(max_examples=300, deadline=None)
def test_wgmma_is_chosen_exactly_when_eligible(case):
    p, threads = case
    plan = h.plan_kernel(p, threads)
    expected = p.arch_specific and eligible(p.m, p.n, p.k, p.a, p.b, p.c, p.a_row_major, p.b_row_major, threads,
                                            p.is_complex)
    assert plan.is_wgmma is expected, (p, threads, plan.instruction)
    if not expected:
        assert plan == h.plan_warp_level(p, threads)
        return
    assert plan.threads % 128 == 0 and (threads is None or plan.threads == threads)
    assert p.n % plan.warpgroup_n == 0 and plan.warpgroup_n % 8 == 0
    acc = dt.find_combination(p.a, p.b, p.c, False).accumulator.size
    assert plan.warpgroup_n * acc // 2 <= 256  # accumulator bytes per thread
    assert plan.smem_b_offset % 1024 == 0
    assert plan.smem_a.cosize == p.m * p.k and plan.smem_b.cosize == p.k * p.n


def test_non_arch_specific_plans_are_unchanged():
    """sm_90 (no "a") and every other SM plan exactly as the warp-level rule always did."""
    for sm in (80, 89, 90):
        for a, b, c in WGMMA_ROWS:
            p = h.Problem(128, 128, 64, a, b, c, False, True, False, False, sm)
            assert h.plan_kernel(p) == h.plan_warp_level(p)


def test_traits_and_config_of_a_wgmma_descriptor():
    desc = gemm((128, 128, 64), F16, F16, F32, (C, R, C))
    assert desc.instruction == "wgmma.m64n128k16"
    assert desc.suggested_block_dim == (256, 1, 1)
    assert desc.suggested_smem_layout_a.swizzle == "128B"
    source = desc.source()
    assert "static constexpr bool use_wgmma = true;" in source
    assert "static constexpr int wgmma_n = 128;" in source
    assert "static constexpr int a_panel_bytes = 128, b_panel_bytes = 128;" in source
    # the mma.sync atom stays: the device API reads the panels with it under load transforms
    assert "using atom = blasdx::mma_m16n8k16<__half, __half, float>;" in source
    plain = gemm((128, 128, 64), F16, F16, F32, (C, R, C), arch_specific=False).source()
    assert "static constexpr bool use_wgmma = false;" in plain and "wgmma_n" not in plain


# ---------------------------------------------------------------------------------------------- swizzle arithmetic

SWIZZLE_CHECKS = r"""
#include "blasdx/wgmma.cuh"
using blasdx::wgmma::panels;
using blasdx::wgmma::swizzle;
// 128B: 16-byte chunk c of row r moves to c ^ (r % 8)
static_assert(swizzle<128>(3 * 128 + 1 * 16) == 3 * 128 + 2 * 16, "row 3, chunk 1 -> chunk 2");
static_assert(swizzle<128>(9 * 128 + 0 * 16 + 6) == 9 * 128 + 1 * 16 + 6, "row 9 is row 1 of the next atom");
static_assert(swizzle<128>(7 * 128 + 7 * 16) == 7 * 128, "row 7, chunk 7 -> chunk 0");
// 64B: chunk c of row r moves to c ^ ((r / 2) % 4)
static_assert(swizzle<64>(1 * 64 + 1 * 16) == 1 * 64 + 1 * 16, "rows 0 and 1 keep their order");
static_assert(swizzle<64>(2 * 64) == 2 * 64 + 1 * 16, "row 2, chunk 0 -> chunk 1");
static_assert(swizzle<64>(7 * 64 + 1 * 16) == 7 * 64 + 2 * 16, "row 7, chunk 1 -> chunk 2");
// 32B: chunk c of row r moves to c ^ ((r / 4) % 2)
static_assert(swizzle<32>(3 * 32) == 3 * 32, "rows 0..3 keep their order");
static_assert(swizzle<32>(4 * 32 + 16) == 4 * 32, "row 4, chunk 1 -> chunk 0");
// f16 64 x 128 (K-major, two 128B panels of 64 columns): element (5, 70) is in panel 1,
// row 5, byte 12 of chunk 0 -> chunk 0 ^ 5 = 5
static_assert(panels<__half, 64, 128, 128>::offset(5, 70) == 64 * 128 + 5 * 128 + 5 * 16 + 12, "panel offset");
static_assert(panels<__half, 64, 128, 128>::BYTES == 64 * 128 * 2, "panels are dense");
static_assert(panels<unsigned char, 32, 64, 64>::offset(3, 33) == 3 * 64 + (2 ^ 1) * 16 + 1, "8-bit, 64B");
extern "C" __global__ void swizzle_checks() {}
"""


def test_swizzle_arithmetic_compiles():
    kernel = cc.compile_source(SWIZZLE_CHECKS, "swizzle_checks", "sm_90a")
    assert kernel.arch == "sm_90a"


# ---------------------------------------------------------------------------------------------- compiled kernels


def _compile_cases():
    for a, b, c in SIXTEEN_BIT_ROWS:
        for arr in itertools.product((R, C), repeat=2):
            for size in SIZES:
                yield (a, b, c), (*arr, C), size
        yield (a, b, c), (C, R, R), (128, 128, 64)  # row-major C
    for a, b, c in FP8_ROWS + INT8_ROWS:
        for size in SIZES:
            yield (a, b, c), (R, C, C), size
            yield (a, b, c), (R, R, R), size  # N-major B transposed on the way in
        for arr in ((C, C, R), (C, R, C)):  # M-major A transposed too
            yield (a, b, c), arr, (64, 64, 64)


def _case_id(case) -> str:
    (a, b, c), arr, size = case
    return f"{a.name}x{b.name}-{c.name}-{''.join(x.name[0] for x in arr)}-{'x'.join(map(str, size))}"


COMPILE_CASES = list(_compile_cases())
FALLBACK_DESCRIPTORS = {
    "17x33x9": gemm((17, 33, 9), F16, F16, F32),
    "k8": gemm((64, 64, 8), F16, F16, F32),
    "m32": gemm((32, 64, 64), BF16, BF16, F32),
    "n-major-24": gemm((64, 24, 16), F16, F16, F32, (R, R, C)),
    "threads-96": gemm((64, 64, 64), F16, F16, F32, (R, C, C), bx.BlockDim(96)),
    "int8-m32": gemm((32, 64, 64), I8, I8, I32, (R, R, R)),
    "fp8-k48": gemm((64, 64, 48), E4, E4, F32, (R, R, R)),
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Every wgmma case and the fallbacks, compiled in parallel into a private cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BLASDX_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        descs = [gemm(size, *row, arr) for row, arr, size in COMPILE_CASES] + list(FALLBACK_DESCRIPTORS.values())
        kernels = bx.precompile(descs, workers=os.cpu_count() or 2)
        cubins.prefetch_sass(kernel.cubin for kernel in kernels)  # the SASS tests': one cuobjdump run
        yield dict(zip(descs, kernels))


@pytest.mark.slow
@pytest.mark.parametrize("case", COMPILE_CASES, ids=_case_id)
def test_wgmma_kernels_compile_to_gmma_without_spills(compiled, case):
    row, arr, size = case
    desc = gemm(size, *row, arr)
    assert desc.instruction.startswith("wgmma.m64n"), desc.instruction
    kernel = compiled[desc]
    assert kernel.arch == "sm_90a"
    assert kernel.local_memory == 0, f"{desc!r} spills {kernel.local_memory} B per thread"
    threads = desc.max_threads_per_block
    cap = 65536 // (threads * desc.plan.min_blocks)
    assert 0 < kernel.registers <= min(255, cap), kernel
    sass = kernel.sass()
    opcode = "QGMMA" if row[0] in FP8 else "IGMMA" if row[0] in INT8 else "HGMMA"
    width = desc.plan.atom[1]
    assert re.search(rf"\b{opcode}\.64x{width}x{desc.plan.atom[2]}\b", sass), f"{desc!r}: no {opcode} in the SASS"
    assert not re.search(r"\b(HMMA|IMMA|QMMA|LDL|STL)\b", sass), f"{desc!r}: mma.sync or local memory in the SASS"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FALLBACK_DESCRIPTORS))
def test_ineligible_sm90a_descriptors_compile_to_mma_sync(compiled, name):
    desc = FALLBACK_DESCRIPTORS[name]
    assert desc.instruction.startswith("mma.sync."), desc.instruction
    sass = compiled[desc].sass()
    # fp8 mma.sync runs as HMMA on sm_90 (tests/test_compile_matrix.py), int8 as IMMA
    opcode = "IMMA" if desc.precision[0] in INT8 else "HMMA"
    assert re.search(rf"\b{opcode}\b", sass) and not re.search(r"\b[HQI]GMMA\b", sass)
    assert not re.search(r"\b(LDL|STL)\b", sass)


def test_fusion_api_with_load_transforms():
    """With a transform of A (scaled) the device APIs of a wgmma descriptor keep wgmma with A in
    registers; with one of B too they run mma.sync (tests/test_wgmma_fusion.py and
    tests/test_wgmma_register_a.py cover the forms)."""
    from .test_fusion import TYPE_KERNELS

    desc = gemm((64, 64, 64), F16, F16, F32, (R, C, C), bx.MaxAlignment)
    assert desc.instruction == "wgmma.m64n64k16"
    scale = "blasdx::scale<GEMM::scalar_type>{2}"
    register_a = r"\bHGMMA\.64x64x16\.F32 R\d+, R\d+, gdesc\["
    for b_op, expected in (("blasdx::conjugate{}", register_a), (scale, r"\bHMMA\b")):
        source = TYPE_KERNELS.replace("A_OP", scale).replace("B_OP", b_op)
        for name in ("register_api", "shared_api"):
            kernel = bx.compile_kernel(source, name, {"GEMM": desc})
            assert kernel.arch == "sm_90a"
            sass = kernel.compiled.sass()
            assert re.search(expected, sass) and kernel.compiled.local_memory == 0, (b_op, name)

"""The block GEMM's K loop in SASS (CPU, no GPU): what the tensor-core path runs per K step.

* Sizes that the atoms do not divide (100^3) test bounds only where a step can cross them: the
  whole K steps of the tiles inside C carry no K or edge tests, so the loop of the
  block-compute benchmark stays near cuBLASDx's instructions per MMA (benchmarks/sass_loops.py).
* A 16-bit K tail that fits in half an m16n8k16 step runs one m16n8k8 (K = 24 costs 1.5 steps).
* tf32 fragments reach the tensor core as loaded (no rounding instructions).
* f64 DMMA fragments are loaded into the instruction's register order (no register moves).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.compile import cubin as cubins

_BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
#: Every test reads the SASS of a kernel of its own (some 80 compiles): the file goes to a worker early.
pytestmark = pytest.mark.slow


def _sass_loops():
    """benchmarks/sass_loops.py (the hot-loop counter the performance notes quote)."""
    sys.path.insert(0, str(_BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location("sass_loops", _BENCHMARKS / "sass_loops.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(_BENCHMARKS))


@pytest.fixture(scope="module")
def ahead():
    """The file's kernels compiled together (in parallel) and their SASS disassembled together, a
    cuobjdump run per architecture instead of one per kernel; the tests then find both ready."""
    from concurrent.futures import ThreadPoolExecutor

    block_compute = _sass_loops().block_compute
    blocks = [block_compute.block_descriptor(name, (100, 100, 100), 90, True) for name in ODD_LOOP_BOUNDS]
    blocks += [block_compute.block_descriptor("tf32->f32", size, sm, sm == 90) for size in TF32_SIZES for sm in TF32_SMS]
    blocks += [block_compute.block_descriptor(name, size, 90, True) for name, size, _ in UNROLLED]
    made = [kernel.compiled for kernel in map(block_compute.compile_blasdx, blocks[:1])]
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        made += [kernel.compiled for kernel in pool.map(block_compute.compile_blasdx, blocks[1:])]
    tails = [_mma_sync(size, a, c, order, sm) for size, _ in K_TAILS for a, c in K_TAIL_TYPES for order in ORDERS
             for sm in K_TAIL_SMS]
    made += bx.precompile(tails, workers=os.cpu_count() or 2)
    cubins.prefetch_sass(kernel.cubin for kernel in made)


#: Instructions per MMA allowed in the hot loop of the 100^3 block-compute kernel (sm_90a). Before
#: the K tail was peeled and the edge tests confined to edge tiles these were 7.8-12.8.
ODD_LOOP_BOUNDS = {
    "f16->f32": 2.5, "bf16->f32": 2.5, "f16->f16": 2.5, "tf32->f32": 3.0, "int8->int32": 5.5, "e4m3->f32": 7.0,
}


@pytest.mark.parametrize("name", list(ODD_LOOP_BOUNDS))
def test_odd_size_k_loop_carries_no_bounds_tests(ahead, name):
    mix = _sass_loops().blasdx_mix(name, (100, 100, 100))
    assert "error" not in mix, mix
    assert mix["instructions_per_mma"] <= ODD_LOOP_BOUNDS[name], mix


@pytest.mark.parametrize("a_order", [bx.row_major, bx.col_major], ids=["A-rows", "A-columns"])
@pytest.mark.parametrize("size", [(64, 64, 64), (32, 32, 32)], ids=lambda s: "x".join(map(str, s)))
def test_f64_dmma_fragments_land_in_the_instruction_registers(size, a_order):
    """sm_90's DMMA takes A as four doubles in consecutive registers, rows g and g + 8 at one K
    before the next K. In blocks of up to 128 threads a K-contiguous A is read 8 bytes at a time
    straight into that order: one 16-byte read of a row's two K values put them two registers
    apart, and the compiler moved every group into place anew (46 moves per 8 DMMA, 10.3
    instructions per MMA at 64^3)."""
    sass_loops = _sass_loops()
    desc = (bx.Size(*size) + bx.Precision(dt.float64) + bx.Function.MM + bx.Arrangement(a_order, bx.row_major)
            + bx.MaxAlignment + bx.SM(90, arch_specific=True) + bx.Block() + bx.Workload.compute_bound)
    desc = desc + bx.LeadingDimension(*desc.suggested_leading_dimension)
    kernel = sass_loops.block_compute.compile_blasdx(desc)
    mix = sass_loops.loop_mix(sass_loops.hot_loop(sass_loops.instructions(kernel.compiled.sass())))
    assert desc.plan.threads <= 128
    assert mix["mma_opcode"].startswith("DMMA"), mix
    assert mix["moves"] == 0, mix
    assert mix["instructions_per_mma"] <= 8.0, mix


@pytest.mark.parametrize("size", [(64, 64, 64), (32, 32, 32)], ids=lambda s: "x".join(map(str, s)))
def test_transposed_f64_order_reads_each_dmma_operand_pair_with_one_16_byte_load(size):
    """Compute-bound f64 on row-major A and B issues each DMMA on C^T = B^T A^T (heuristics.dmma_transposed):
    16-byte reads only, at most one per DMMA (64^3: 64 LDS.128 per 64 DMMA, against 128 LDS.64 in the atom's
    order; 32^3 unrolls four repeats and reads some fragments once for them), no moves."""
    sass_loops = _sass_loops()
    desc = (bx.Size(*size) + bx.Precision(dt.float64) + bx.Function.MM + bx.Arrangement(bx.row_major, bx.row_major)
            + bx.MaxAlignment + bx.SM(90, arch_specific=True) + bx.Block() + bx.Workload.compute_bound)
    desc = desc + bx.LeadingDimension(*desc.suggested_leading_dimension)
    assert desc.plan.dmma_transposed
    sass = sass_loops.block_compute.compile_blasdx(desc).compiled.sass()
    mix = sass_loops.loop_mix(sass_loops.hot_loop(sass_loops.instructions(sass)))
    assert mix["mma_opcode"].startswith("DMMA") and "DMMA.16x8x4" in sass, mix  # two m16n8k4 per K step
    assert set(mix["loads"]) == {"LDS.128"} and mix["loads"]["LDS.128"] <= mix["mma"], mix
    assert mix["moves"] == 0, mix
    assert not re.search(r"\b(STL|LDL)\b", sass), "local memory"


def test_transposed_f64_order_as_m16n8k8_reads_the_same_16_byte_pairs():
    """With DMMA_TRANSPOSED_K4 off, each K step of the transposed order is one m16n8k8 on the same 16-byte
    reads (the default issues two m16n8k4): half the DMMAs, no moves, no local memory."""
    from blasdx.plan import heuristics

    sass_loops = _sass_loops()
    saved = heuristics.DMMA_TRANSPOSED_K4
    try:
        heuristics.DMMA_TRANSPOSED_K4 = False
        desc = (bx.Size(64, 64, 64) + bx.Precision(dt.float64) + bx.Function.MM
                + bx.Arrangement(bx.row_major, bx.row_major) + bx.MaxAlignment + bx.SM(90, arch_specific=True)
                + bx.Block() + bx.Workload.compute_bound)
        desc = desc + bx.LeadingDimension(*desc.suggested_leading_dimension)
        assert desc.plan.dmma_transposed and not desc.plan.dmma_k4
    finally:
        heuristics.DMMA_TRANSPOSED_K4 = saved
    sass = sass_loops.block_compute.compile_blasdx(desc).compiled.sass()
    mix = sass_loops.loop_mix(sass_loops.hot_loop(sass_loops.instructions(sass)))
    assert "DMMA.16x8x8" in sass and "DMMA.16x8x4" not in sass
    assert mix["loads"] == {"LDS.128": mix["mma"]} and mix["moves"] == 0, mix
    assert not re.search(r"\b(STL|LDL)\b", sass), "local memory"


@pytest.mark.parametrize("name", ["f16->f32", "f16->f16", "bf16->f32"])
def test_repeated_gemm_on_the_whole_block_unrolls_without_thread_checks(name):
    """compile_kernel launches its block, so a GEMM on all of the block's threads needs no check
    that skips threads beyond it. Without that branch the compiler unrolls the benchmark's repeat
    loop and reads the fragments of repeats on unchanged shared memory once; with it (the compile
    for a larger block) the loop is one GEMM reading every fragment (8 HMMA per 6 LDSM at 32^3)."""
    sass_loops = _sass_loops()
    desc = sass_loops.block_compute.block_descriptor(name, (32, 32, 32), 90, True)
    kernel = sass_loops.block_compute.compile_blasdx(desc)
    threads = desc.max_threads_per_block
    assert kernel.block == (threads, 1, 1)

    def mix(compiled):
        return sass_loops.loop_mix(sass_loops.hot_loop(sass_loops.instructions(compiled.sass())))

    promised, checked = mix(kernel.compiled), mix(kernel.compiled_for((threads + 32, 1, 1)))
    assert promised["mma"] == 4 * checked["mma"] == 32, (promised, checked)
    assert promised["loads_per_mma"] <= 0.25 < checked["loads_per_mma"], (promised, checked)
    assert promised["instructions_per_mma"] <= 1.5, promised


def _mma_sync(size, a, c, order, sm) -> bx.Descriptor:
    return (bx.Size(*size) + bx.Precision(a, a, c) + bx.Type.real + bx.Function.MM
            + bx.Arrangement(order[0], order[1], bx.col_major) + bx.SM(sm) + bx.Block())


ORDERS = [(bx.row_major, bx.col_major), (bx.col_major, bx.row_major)]
K_TAIL_SMS = [80, 90]
K_TAIL_TYPES = [(dt.float16, dt.float32), (dt.bfloat16, dt.float32), (dt.float16, dt.float16)]
K_TAILS = [((48, 80, 24), True), ((33, 40, 40), True), ((64, 64, 100), True), ((48, 80, 32), False),
           ((100, 100, 90), False)]


@pytest.mark.parametrize("sm", K_TAIL_SMS)
@pytest.mark.parametrize("order", ORDERS, ids=["rc", "cr"])
@pytest.mark.parametrize("a, c", K_TAIL_TYPES, ids=["f16-f32", "bf16-f32", "f16-f16"])
@pytest.mark.parametrize("size, half_step", K_TAILS,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_16bit_k_tail_runs_a_half_step(ahead, size, half_step, a, c, order, sm):
    """K % 16 in 1..8 ends with m16n8k8 (HMMA.1688); otherwise only m16n8k16 runs (K % 16 = 10
    takes a whole step with its K past the end zeroed)."""
    desc = _mma_sync(size, a, c, order, sm)
    assert desc.instruction == "mma.sync.m16n8k16", desc.instruction
    sass = desc.compile().sass()
    assert re.search(r"\bHMMA\.16816\b", sass)
    assert bool(re.search(r"\bHMMA\.1688\b", sass)) == half_step


TF32_SMS = [80, 89, 90]
TF32_SIZES = [(64, 64, 64), (48, 80, 24), (100, 100, 100)]


@pytest.mark.parametrize("sm", TF32_SMS)
@pytest.mark.parametrize("size", TF32_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_tf32_fragments_reach_the_tensor_core_as_loaded(ahead, size, sm):
    """tf32 operands go from shared memory to the MMA unchanged (the tensor core reads each
    float's upper 19 bits): no conversion per fragment element, so the compute-bound loop runs
    at most 2.5 instructions per MMA (3.5-4.6 when every element was rounded first)."""
    sass_loops = _sass_loops()
    desc = sass_loops.block_compute.block_descriptor("tf32->f32", size, sm, sm == 90)
    kernel = sass_loops.block_compute.compile_blasdx(desc)
    sass = kernel.compiled.sass()
    assert not re.search(r"\bF2FP\.TF32", sass)
    mix = sass_loops.loop_mix(sass_loops.hot_loop(sass_loops.instructions(sass)))
    assert mix["mma_opcode"] == "HMMA.1688.F32.TF32", mix
    assert mix["instructions_per_mma"] <= 2.5, mix


UNROLLED = [("tf32->f32", (64, 64, 64), 8), ("f64", (100, 100, 100), 12), ("f16->f16", (100, 100, 100), 6)]


@pytest.mark.parametrize("name, size, steps", UNROLLED,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_compute_bound_k_loop_is_unrolled(ahead, name, size, steps):
    """Compute-bound real products run all their K steps in one pass of the hot loop (the
    warp tile's MMAs times the whole steps), as cuBLASDx's unrolled K does."""
    sass_loops = _sass_loops()
    desc = sass_loops.block_compute.block_descriptor(name, size, 90, True)
    fm, fn = desc.plan.warp_level.warp_tile if desc.plan.warp_level else desc.plan.warp_tile
    assert desc.instruction.startswith("mma.sync"), desc.instruction
    mix = sass_loops.blasdx_mix(name, size)
    assert mix["mma"] >= steps * fm * fn, (mix, fm, fn)

"""CPU tests of the fusion pieces behind examples/flash_attention.py and of the example's kernel.

NVRTC compiles for any architecture without a GPU, and cuobjdump reads the SASS: the row view,
the bounded (zero-filling) copies with their commit / wait groups, and the register-A chain of two
wgmma GEMMs compile for sm_80 (mma.sync) and sm_90a (wgmma) to the intended instructions (HMMA /
HGMMA, LDGSTS) without local memory; misuse stops at compile time with a message that says what
to change.
"""

from __future__ import annotations

import collections
import re

import pytest

import blasdx as bx

from .attention_kernels import (
    chain_gemms,
    compile_chain,
    compile_kv_stream,
    compile_online_softmax,
    compile_row_stats,
    row_stats_gemm,
    stream_gemms,
)
from .test_fusion import load_example

fa = load_example("flash_attention")


def opcodes(sass: str, name: str) -> int:
    return len(re.findall(rf"\b{name}\b", sass))


def no_local_memory(kernel: bx.FusedKernel) -> None:
    sass = kernel.compiled.sass()
    assert kernel.local_memory == 0
    assert opcodes(sass, "LDL") == 0 and opcodes(sass, "STL") == 0


@pytest.mark.parametrize("d,dtype,causal", [(64, bx.float16, False), (64, bx.float16, True),
                                            (128, bx.float16, False), (128, bx.bfloat16, True)])
@pytest.mark.parametrize("pipeline", ["overlap", "stages", "turns"])
def test_example_kernel_compiles_to_wgmma(d, dtype, causal, pipeline) -> None:
    kernel = fa.build(d, dtype, causal, pipeline=pipeline)
    sass = kernel.compiled.sass()
    no_local_memory(kernel)
    block_n = kernel.gemms["QK"].n
    assert block_n == (64 if d == 64 else 128)
    # Q K^T: D / 16 steps of m64n<keys>k16, in the prologue and in the loop; P V: keys / 16 steps of
    # m64n<D>k16 with A in registers, in the loop and in the last tile's tail
    shapes = collections.Counter(re.findall(r"\bHGMMA\.(64x\d+x16)", sass))
    expected = collections.Counter({f"64x{block_n}x16": 2 * (d // 16)})
    expected[f"64x{d}x16"] += 2 * (block_n // 16)
    assert shapes == expected
    assert opcodes(sass, "LDGSTS") > 0  # K / V tiles stream in with cp.async
    assert "serialized" not in kernel.compiled.log  # the asynchronous wgmma groups overlap
    stages = 2 if pipeline == "overlap" else 3
    assert kernel.shared_memory == fa.shared_bytes(d, block_n, stages) <= 227 * 1024
    if pipeline != "overlap":  # per-stage barriers: copies arrive on mbarriers, readers wait on their phases
        assert "ARRIVES.LDGSTSBAR" in sass and "SYNCS.PHASECHK" in sass
    if pipeline == "turns":  # warpgroups hand each other the GEMMs through named barriers
        assert "BAR.ARV" in sass
        # after the loop warpgroup 0 hands warpgroup 1 one last turn (barrier 2), so that each has
        # executed as many bar.sync as bar.arrive: racecheck orders warps by blocking barriers passed
        assert re.search(r"BAR\.ARV 0x2, 0x100\b", sass) and re.search(r"BAR\.SYNC\S* 0x2, 0x100\b", sass)


@pytest.mark.parametrize("d,causal,pipeline,out_dtype", [
    (64, False, None, bx.float16), (128, True, None, bx.float16), (64, True, "stages", bx.float16),
    (128, False, "serial", bx.float16), (128, True, "overlap", bx.bfloat16),
])
def test_example_fp8_kernel_compiles_to_qgmma(d, causal, pipeline, out_dtype) -> None:
    kernel = fa.build(d, bx.float8_e4m3, causal, pipeline=pipeline, out_dtype=out_dtype)
    sass = kernel.compiled.sass()
    no_local_memory(kernel)
    assert 0 < kernel.registers <= 255
    block_n = kernel.gemms["QK"].n
    # Q K^T on e4m3 wgmma: D / 32 steps of m64n<keys>k32, in the prologue and in the loop; P V on 16-bit
    # wgmma as in the 16-bit kernel: keys / 16 steps of m64n<D>k16 with A in registers, in the loop and the tail
    assert collections.Counter(re.findall(r"\bQGMMA\.(64x\d+x32)", sass)) == {f"64x{block_n}x32": 2 * (d // 32)}
    assert collections.Counter(re.findall(r"\bHGMMA\.(64x\d+x16)", sass)) == {f"64x{d}x16": 2 * (block_n // 16)}
    assert re.search(r"\bQGMMA\.64x\d+x32\.F32\.E4M3\.E4M3\b", sass)
    # P V in O's type (f16: no suffix, bf16: .BF16); V unpacked from e4m3 pairs to f16 pairs (bf16: then rounded)
    assert re.search(rf"\bHGMMA\.64x{d}x16\.F32{'' if out_dtype == bx.float16 else '.BF16'}\s", sass)
    assert "F2FP.F16.E4M3.UNPACK_B" in sass
    assert opcodes(sass, "LDGSTS") > 0  # Q and K stream in with cp.async
    assert "STS.128" in sass            # V: 8 fp8 values to 8 16-bit ones per 16-byte store
    assert "serialized" not in kernel.compiled.log
    stages = 2 if (pipeline or ("turns" if d == 128 else "overlap")) in ("overlap", "serial") else 3
    assert kernel.shared_memory == fa.shared_bytes(d, block_n, stages, 1) <= 227 * 1024


def test_example_fp8_rejects_bad_types() -> None:
    with pytest.raises(ValueError, match="dtype=float32: expected one of"):
        fa.build(64, bx.float32)
    with pytest.raises(ValueError, match="out_dtype=float32: expected one of"):
        fa.build(64, bx.float8_e4m3, out_dtype=bx.float32)
    with pytest.raises(ValueError, match="out_dtype=bfloat16: float16 inputs give O of their own type"):
        fa.build(64, bx.float16, out_dtype=bx.bfloat16)
    assert fa.tolerance_of(bx.float8_e4m3, 1000) == fa.tolerance_of(bx.float16, 1000)
    assert fa.tolerance_of(bx.float8_e4m3, 1000, bx.bfloat16) == fa.tolerance_of(bx.bfloat16, 1000)


@pytest.mark.parametrize("d", [64, 128])
def test_example_kernel_without_pipelining(d) -> None:
    kernel = fa.build(d, bx.float16, True, pipeline="serial")
    sass = kernel.compiled.sass()
    no_local_memory(kernel)
    block_n = kernel.gemms["QK"].n
    # the same steps as the pipelined kernels (Q K^T of tile 0 first, P V of the last tile after the loop),
    # each GEMM complete before the next
    shapes = collections.Counter(re.findall(r"\bHGMMA\.(64x\d+x16)", sass))
    expected = collections.Counter({f"64x{block_n}x16": 2 * (d // 16)})
    expected[f"64x{d}x16"] += 2 * (block_n // 16)
    assert shapes == expected
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" not in sass  # never a wait that leaves a group in flight


def test_example_rejects_bad_options() -> None:
    with pytest.raises(ValueError, match="head_dim=96: this kernel takes 64 or 128"):
        fa.build(96)
    with pytest.raises(ValueError, match="block_n=32: this kernel takes 64 or 128"):
        fa.build(64, block_n=32)
    with pytest.raises(ValueError, match=r"pipeline='fast': expected one of \['overlap', 'serial', 'stages', 'turns'\]"):
        fa.build(64, pipeline="fast")


@pytest.mark.parametrize("sm,size,threads,mma", [
    (80, (64, 32, 64), 128, "HMMA"),
    (90, (64, 32, 64), 128, "HMMA"),
    ((90, True), (128, 64, 64), 256, "HGMMA"),
])
@pytest.mark.parametrize("stage_barrier", [False, True])
def test_row_view_and_bounded_copies_compile(sm, size, threads, mma, stage_barrier) -> None:
    kernel = compile_row_stats(row_stats_gemm(sm, size=size, threads=threads), stage_barrier)
    sass = kernel.compiled.sass()
    no_local_memory(kernel)
    assert opcodes(sass, mma) > 0 or re.search(rf"\b{mma}\.", sass)
    assert opcodes(sass, "LDGSTS") > 0  # bounded loads stay asynchronous (zero-fill by source size)
    assert "SHFL.BFLY" in sass          # row reductions across the quad
    if stage_barrier:  # the copies arrive on the mbarrier, the threads wait on its phase (try_wait, sm_90)
        assert "ARRIVES.LDGSTSBAR" in sass
        assert ("SYNCS.PHASECHK" in sass) == (sm != 80)


@pytest.mark.parametrize("dtype", [bx.float16, bx.bfloat16])
@pytest.mark.parametrize("b2_order", [bx.row_major, bx.col_major])
def test_register_a_chain_compiles_to_wgmma(dtype, b2_order) -> None:
    kernel = compile_chain(chain_gemms(dtype, b2_order=b2_order))
    sass = kernel.compiled.sass()
    no_local_memory(kernel)
    # G1: 64 / 16 steps of m64n64k16 from shared memory; G2: 64 / 16 steps of m64n128k16, A in registers
    assert len(re.findall(r"\bHGMMA\.64x64x16", sass)) == 4
    assert len(re.findall(r"\bHGMMA\.64x128x16", sass)) == 4
    # P never goes through shared memory: converted to 16-bit pairs in registers (F2FP), no shared
    # stores (the operands arrive by LDGSTS) and no fragment loads
    assert "F2FP" in sass
    assert opcodes(sass, "STS") == 0 and "LDSM" not in sass


def test_async_chain_compiles_without_serialisation() -> None:
    kernel = compile_chain(chain_gemms(), asynchronous=True)
    sass = kernel.compiled.sass()
    no_local_memory(kernel)
    assert len(re.findall(r"\bHGMMA\.64x64x16", sass)) == 8  # A B1 twice
    assert len(re.findall(r"\bHGMMA\.64x128x16", sass)) == 4
    assert "serialized" not in kernel.compiled.log


def test_rows_needs_whole_rows_in_a_warp() -> None:
    desc = row_stats_gemm(80, size=(64, 64, 64), threads=128)  # 2 x 4 atom warp tiles: 32 of 64 columns
    with pytest.raises(bx.CompileError, match="every row of C inside one warp"):
        compile_row_stats(desc)


def test_register_a_needs_wgmma() -> None:
    source = r"""
    extern "C" __global__ void k(float* o) {
        G1::accumulator s;
        G2::accumulator out;
        G2::execute(G2::a_registers(s), nullptr, out);
        out.store(o);
    }"""
    common = (bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Type.real + bx.Function.MM + bx.SM(80)
              + bx.Block() + bx.BlockDim(128))
    gemms = {"G1": bx.Size(64, 32, 64) + common, "G2": bx.Size(64, 32, 32) + common}
    with pytest.raises(bx.CompileError, match="A from registers runs on wgmma"):
        bx.compile_kernel(source, "k", gemms)


class _Tensor:
    """What run() reads of a tensor: shape, strides, contiguity."""

    def __init__(self, shape, contiguous=True):
        self.shape = shape
        self._contiguous = contiguous

    def is_contiguous(self) -> bool:
        return self._contiguous

    def stride(self):
        return (1,) * len(self.shape)


@pytest.mark.parametrize("q,k,message", [
    ((2, 3, 17, 32), (2, 3, 17, 32), r"q: shape \(2, 3, 17, 32\), expected \(batch, heads, S >= 1, 64\)"),
    ((2, 3, 0, 64), (2, 3, 0, 64), r"q: shape \(2, 3, 0, 64\), expected \(batch, heads, S >= 1, 64\)"),
    ((2, 3, 17, 64), (2, 3, 18, 64), r"k: shape \(2, 3, 18, 64\), expected \(2, 3, 17, 64\) \(the shape of q\)"),
    ((300, 300, 1, 64), (300, 300, 1, 64), r"q: batch x heads = 90000, at most 65535"),
])
def test_run_checks_shapes_before_launch(q, k, message) -> None:
    kernel = fa.build(64)
    with pytest.raises(bx.ExecutionError, match=message):
        fa.run(kernel, _Tensor(q), _Tensor(k), _Tensor(q), _Tensor(q))


def test_run_needs_contiguous_tensors() -> None:
    kernel = fa.build(64)
    shape = (1, 2, 5, 64)
    with pytest.raises(bx.ExecutionError, match=r"v: strides \(1, 1, 1, 1\), expected a contiguous tensor"):
        fa.run(kernel, _Tensor(shape), _Tensor(shape), _Tensor(shape, contiguous=False), _Tensor(shape))


@pytest.mark.parametrize("sm", [75, 80, 86, 90])
def test_register_a_overloads_leave_other_plans_alone(sm) -> None:
    """execute(sA, sB, acc) and the shared-memory execute of a warp-level plan compile with the
    register-A and asynchronous overloads in scope (they must not instantiate register_a)."""
    source = r"""
    extern "C" __global__ void k(const GEMM::a_value_type* a, const GEMM::b_value_type* b, float* c) {
        extern __shared__ __align__(16) unsigned char smem[];
        auto [sA, sB, sC] = GEMM::slice_shared_memory(smem);
        GEMM::load_a(a, sA);
        GEMM::load_b(b, sB);
        GEMM::copy_wait();
        GEMM::accumulator acc;
        GEMM::execute(sA, sB, acc);
        auto acc2 = GEMM::execute(sA, sB);
        GEMM::execute(1.0f, sA, sB, 0.0f, sC);
        acc.store(c);
        acc2.store(c);
    }"""
    desc = (bx.Size(32, 32, 32) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Type.real
            + bx.Function.MM + bx.SM(sm) + bx.Block())
    kernel = bx.compile_kernel(source, "k", {"GEMM": desc})
    assert kernel.local_memory == 0


@pytest.mark.parametrize("sm,size,threads,mma", [
    (80, (64, 32, 64), 128, "HMMA"),
    ((90, True), (128, 64, 64), 256, "HGMMA"),
])
def test_online_softmax_compiles(sm, size, threads, mma) -> None:
    kernel = compile_online_softmax(row_stats_gemm(sm, size=size, threads=threads))
    sass = kernel.compiled.sass()
    no_local_memory(kernel)
    assert opcodes(sass, mma) > 0 or re.search(rf"\b{mma}\.", sass)
    assert "MUFU.EX2" in sass   # P = 2^(s * scale_log2 - shift)
    assert "VOTE.ANY" in sass   # one vote per warp on whether the maxima move
    assert "SHFL.BFLY" in sass  # tile maxima and the final sums across the quad


def test_online_softmax_needs_matching_rows() -> None:
    source = r"""
    #include "blasdx/online_softmax.cuh"
    extern "C" __global__ void k(float* o) {
        A::accumulator s;
        B::accumulator out;
        blasdx::online_softmax<A::accumulator> softmax(1.0f);
        softmax.finish(out);
        out.store(o);
    }"""
    a = row_stats_gemm((90, True), size=(128, 64, 64), threads=256)  # one 64-row tile per warpgroup: 2 slots
    b = row_stats_gemm((90, True), size=(256, 64, 64), threads=256)  # two tiles per warpgroup: 4 slots
    with pytest.raises(bx.CompileError, match="O has this softmax's row slots"):
        bx.compile_kernel(source, "k", {"A": a, "B": b})


@pytest.mark.parametrize("pipelining", ["serial", "overlap", "stages", "turns"])
def test_kv_stream_compiles(pipelining) -> None:
    gemms = stream_gemms()
    kernel = compile_kv_stream(gemms, pipelining)
    sass = kernel.compiled.sass()
    no_local_memory(kernel)
    assert len(re.findall(r"\bHGMMA\.64x64x16", sass)) == 2 * (64 // 16) * 2  # Q K^T and P V, first / loop / last
    assert opcodes(sass, "LDGSTS") > 0
    assert "serialized" not in kernel.compiled.log
    assert ("SYNCS.PHASECHK" in sass) == (pipelining in ("stages", "turns"))
    assert ("BAR.ARV" in sass) == (pipelining == "turns")


def test_kv_stream_needs_wgmma() -> None:
    source = r"""
    #include "blasdx/kv_stream.cuh"
    extern "C" __global__ void k(const QK::a_value_type* q, QK::a_value_type* o, int seq) {
        extern __shared__ __align__(1024) unsigned char smem[];
        blasdx::kv_stream<QK, PV, blasdx::kv_pipelining::overlap> stream(smem, q, seq, q, q, seq, seq);
        PV::accumulator out;
        stream.store(out, o, seq);
    }"""
    common = (bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Type.real + bx.Function.MM + bx.SM(90)
              + bx.Block() + bx.BlockDim(128))
    gemms = {"QK": bx.Size(64, 32, 64) + bx.Arrangement(bx.row_major, bx.col_major, bx.row_major) + common,
             "PV": bx.Size(64, 64, 32) + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + common}
    with pytest.raises(bx.CompileError, match="the K / V stream runs on wgmma"):
        bx.compile_kernel(source, "k", gemms)

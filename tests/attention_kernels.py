"""Kernels of the fusion pieces that attention needs, shared by the CPU and GPU tests.

* ROW_STATS (any tensor-core plan whose tiles span N): C = A B with A streamed in through a
  bounded load (rows past ``rows`` zero-filled) in two committed groups (or awaited through a
  blasdx::stage_barrier), the row maxima and sums
  of C through ``blasdx::rows``, C divided by its row sums and stored through a bounded store.
* CHAIN (sm_90a): O = round16(A B1) B2 with the first product's accumulator turned into the
  second GEMM's register A (``G2::a_registers``), never leaving registers.
* CHAIN_ASYNC (sm_90a): the same through execute_async / wait, with two groups in flight: P B2
  (register A) issued before a second A B1, wait<1> for the first, wait<0> for the second
  (stored to S2, which must equal A B1).
* ONLINE_SOFTMAX (any tensor-core plan whose tiles span N): the scores S_j = A B_j of ``tiles``
  column tiles of B, streamed in one after another, through ``blasdx::online_softmax`` (keys past
  ``keys`` masked): O = sum_j P_j, elementwise, with P = softmax(scale * [S_0 | S_1 | ...]) row-wise,
  i.e. O(r, c) = sum_j P(r, j * n + c): what update / rescale / finish leave when O's "V" is a
  stack of identities.
* KV_STREAM (sm_90a): ``blasdx::kv_stream`` with a plain (unscaled, unmasked) online softmax:
  O = softmax(Q K^T) V for one tile of queries over ``seq`` keys, each pipelining.
"""

from __future__ import annotations

import blasdx as bx

ROW_STATS = r"""
extern "C" __global__ void __launch_bounds__(GEMM::max_threads_per_block, 1)
row_stats(const GEMM::a_value_type* a, const GEMM::b_value_type* b, float* row_max, float* row_sum, float* c,
          int rows) {
    extern __shared__ __align__(16) unsigned char smem[];
    auto [sA, sB, sC] = GEMM::slice_shared_memory(smem);
#if STAGE_BARRIER  // the copies arrive on an mbarrier, which every thread waits on
    __shared__ blasdx::stage_barrier full;
    if (threadIdx.x == 0) full.init(GEMM::max_threads_per_block);
    __syncthreads();
    GEMM::load_a<GEMM::k>(a, sA, rows);
    GEMM::load_b<GEMM::k>(b, sB, GEMM::n);
    full.arrive_after_copies();
    full.wait(0);
    GEMM::shared_fence();
#else
    GEMM::load_a<GEMM::k>(a, sA, rows);       // rows past `rows` are zeros
    GEMM::copy_commit();
    GEMM::load_b<GEMM::k>(b, sB, GEMM::n);
    GEMM::copy_commit();
    GEMM::copy_wait<1>();                     // A has landed
    GEMM::copy_wait<0>();                     // B too
#endif
    auto acc = GEMM::execute(sA, sB);
    auto view = blasdx::rows(acc);
    constexpr int R = decltype(view)::count;
    float m[R], s[R];
    view.max(m);
    view.sum(s);
    view.for_each([&](int r, int col, float) {
        if (col == 0) row_max[view.row(r)] = m[r], row_sum[view.row(r)] = s[r];
    });
    view.transform([&](int r, int, float v) { return v / s[r]; });
    acc.store(sC);
    __syncthreads();
    GEMM::store_c<GEMM::n>(sC, c, rows);      // rows past `rows` stay as they were
}
"""

#: The chain kernels' start: A, B1 and B2 loaded into shared memory (B2's panels 1024-byte aligned after B1).
_CHAIN_LOAD = r"""
    extern __shared__ __align__(16) unsigned char smem[];
    auto [sA, sB1] = G1::slice_shared_memory_ab(smem);
    unsigned char* end = reinterpret_cast<unsigned char*>(sB1) + G1::shared_b_bytes;
    T* sB2 = reinterpret_cast<T*>(end + (1024 - blasdx::shared_address(end) % 1024) % 1024);  // G2's B panels
    G1::load_a<G1::a_inner>(a, sA);
    G1::load_b<G1::b_inner>(b1, sB1);
    G2::load_b<G2::b_inner>(b2, sB2);  // tight rows: N for row-major B, K for column-major
    G1::copy_wait();
"""

CHAIN = r"""
using T = G1::a_value_type;
extern "C" __global__ void __launch_bounds__(G1::max_threads_per_block, 1)
chain(const T* a, const T* b1, const T* b2, float* o) {""" + _CHAIN_LOAD + r"""    auto s = G1::execute(sA, sB1);
    G2::accumulator out;
    G2::execute(G2::a_registers(s), sB2, out);
    out.store(o);
}
"""


CHAIN_ASYNC = r"""
using T = G1::a_value_type;
extern "C" __global__ void __launch_bounds__(G1::max_threads_per_block, 1)
chain(const T* a, const T* b1, const T* b2, float* o, float* s2_out) {""" + _CHAIN_LOAD + r"""    G1::accumulator s;
    G1::execute_async(sA, sB1, s);
    G1::wait<0>(s);
    G2::a_registers p(s);
    G2::accumulator out;
    G1::accumulator s2;
    G2::execute_async(p, sB2, out);  // older group
    G1::execute_async(sA, sB1, s2);  // newer group
    G2::wait<1>(out, p);             // the older one is done
    out.store(o);
    G1::wait<0>(s2);
    s2.store(s2_out);
}
"""


ONLINE_SOFTMAX = r"""
#include "blasdx/online_softmax.cuh"
extern "C" __global__ void __launch_bounds__(GEMM::max_threads_per_block, 1)
online_softmax(const GEMM::a_value_type* a, const GEMM::b_value_type* b, float* o, int tiles, int keys,
               float scale_log2) {
    extern __shared__ __align__(16) unsigned char smem[];
    auto [sA, sB] = GEMM::slice_shared_memory_ab(smem);
    GEMM::load_a<GEMM::k>(a, sA, GEMM::m);
    GEMM::accumulator out;
    blasdx::online_softmax<GEMM::accumulator> softmax(scale_log2);
    for (int j = 0; j < tiles; ++j) {
        GEMM::load_b<GEMM::k>(b + (long long)j * GEMM::n * GEMM::k, sB, GEMM::n);  // B: column-major k x (tiles n)
        GEMM::copy_commit();
        GEMM::copy_wait<0>();
        auto s = GEMM::execute(sA, sB);
        const int k0 = j * GEMM::n;
        if (k0 + GEMM::n > keys) softmax.mask(s, [&](int, int col) { return k0 + col < keys; });
        if (softmax.update(s)) softmax.rescale(out);
#pragma unroll
        for (int i = 0; i < out.size; ++i) out.set(i, out.get(i) + s.get(i));  // O += P (the same elements)
        __syncthreads();  // every warp is done with sB
    }
    softmax.finish(out);
    out.store(o);
}
"""

KV_STREAM = r"""
#include "blasdx/kv_stream.cuh"
#include "blasdx/online_softmax.cuh"
using T = QK::a_value_type;
using Stream = blasdx::kv_stream<QK, PV, blasdx::kv_pipelining(PIPELINE)>;
extern "C" __global__ void __launch_bounds__(QK::max_threads_per_block, 1)
kv_stream(const T* q, const T* k, const T* v, T* o, int q_rows, int seq, float scale_log2) {
    extern __shared__ __align__(1024) unsigned char smem[];
    Stream stream(smem, q, q_rows, k, v, seq, seq);
    blasdx::online_softmax<QK::accumulator> softmax(scale_log2);
    auto step = [&](QK::accumulator& s, int j) {
        const int k0 = j * QK::n;
        if (k0 + QK::n > seq) softmax.mask(s, [&](int, int col) { return k0 + col < seq; });
        return softmax.update(s);
    };
    PV::accumulator out;
    auto scores = stream.first_scores();
    step(scores, 0);
    PV::a_registers p(scores);
    for (int j = 0; j + 1 < stream.tiles(); ++j) {
        stream.multiply(j, scores, p, out);
        stream.wait_scores(j, scores);
        const bool shrink = step(scores, j + 1);
        stream.wait_output(j, out, p);
        if (shrink) softmax.rescale(out);
        p = PV::a_registers(scores);
    }
    stream.multiply_last(p, out);
    softmax.finish(out);
    stream.store(out, o, q_rows);
}
"""

PIPELININGS = {"serial": 0, "overlap": 1, "stages": 2, "turns": 3}


def row_stats_gemm(sm: int | tuple[int, bool], dtype=bx.float16, size=(64, 32, 64), threads=128) -> bx.Descriptor:
    """Row-major A, column-major B (like Q K^T), f32 sums; a plan whose tiles span N."""
    arch = bx.SM(*sm) if isinstance(sm, tuple) else bx.SM(sm)
    return (bx.Size(*size) + bx.Precision(dtype, dtype, bx.float32) + bx.Type.real + bx.Function.MM
            + bx.Arrangement(bx.row_major, bx.col_major, bx.row_major) + bx.MaxAlignment + arch + bx.Block()
            + bx.BlockDim(threads))


def chain_gemms(dtype=bx.float16, m: int = 128, n1: int = 64, k1: int = 64, n2: int = 128,
                b2_order=bx.row_major) -> dict[str, bx.Descriptor]:
    """G1: (m x k1)(k1 x n1) like Q K^T; G2: (m x n1)(n1 x n2) like P V; sm_90a, 256 threads."""
    common = (bx.Precision(dtype, dtype, bx.float32) + bx.Type.real + bx.Function.MM + bx.MaxAlignment
              + bx.SM(90, arch_specific=True) + bx.Block() + bx.BlockDim(256))
    g1 = bx.Size(m, n1, k1) + bx.Arrangement(bx.row_major, bx.col_major, bx.row_major) + common
    g2 = bx.Size(m, n2, n1) + bx.Arrangement(bx.row_major, b2_order, bx.row_major) + common
    return {"G1": g1, "G2": g2}


def chain_shared_bytes(gemms: dict[str, bx.Descriptor]) -> int:
    """G1's A and B, then G2's B panels on the next 1024-byte boundary (the kernel finds it)."""
    g2 = gemms["G2"]
    b2 = g2.n * g2.k * 2  # 16-bit
    return gemms["G1"].shared_memory_size_ab + 1024 + b2


def compile_row_stats(desc: bx.Descriptor, stage_barrier: bool = False) -> bx.FusedKernel:
    """ROW_STATS; with ``stage_barrier`` the copies are awaited through a blasdx::stage_barrier."""
    options = bx.CompileOptions(defines={"STAGE_BARRIER": str(int(stage_barrier))})
    return bx.compile_kernel(ROW_STATS, "row_stats", {"GEMM": desc}, options=options)


def compile_chain(gemms: dict[str, bx.Descriptor], asynchronous: bool = False) -> bx.FusedKernel:
    return bx.compile_kernel(CHAIN_ASYNC if asynchronous else CHAIN, "chain", gemms,
                             shared_memory=chain_shared_bytes(gemms))


def compile_online_softmax(desc: bx.Descriptor) -> bx.FusedKernel:
    """ONLINE_SOFTMAX for one descriptor (A row-major m x k, B column-major k x n per tile)."""
    return bx.compile_kernel(ONLINE_SOFTMAX, "online_softmax", {"GEMM": desc}, shared_memory=desc.shared_memory_size_ab)


def stream_gemms(d: int = 64, block_n: int = 64, dtype=bx.float16) -> dict[str, bx.Descriptor]:
    """QK: (128 x d)(d x block_n), PV: (128 x block_n)(block_n x d), as the flash-attention example's."""
    chain = chain_gemms(dtype, m=128, n1=block_n, k1=d, n2=d)
    return {"QK": chain["G1"], "PV": chain["G2"]}


def stream_shared_bytes(gemms: dict[str, bx.Descriptor], pipelining: str) -> int:
    """Q, two K stages and two (three with barriers) V stages, 1024-byte aligned, plus the slack."""
    qk = gemms["QK"]
    panel = lambda rows: -(-rows * qk.k * 2 // 1024) * 1024
    v_stages = 3 if pipelining in ("stages", "turns") else 2
    return 1008 + panel(qk.m) + 2 * panel(qk.n) + v_stages * panel(qk.n)


def compile_kv_stream(gemms: dict[str, bx.Descriptor], pipelining: str) -> bx.FusedKernel:
    """KV_STREAM for stream_gemms() and the named pipelining."""
    options = bx.CompileOptions(defines={"PIPELINE": str(PIPELININGS[pipelining])}, fast_math=True)
    return bx.compile_kernel(KV_STREAM, "kv_stream", gemms, options=options,
                             shared_memory=stream_shared_bytes(gemms, pipelining))

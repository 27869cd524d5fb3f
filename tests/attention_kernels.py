"""Kernels of the fusion pieces that attention needs, shared by the CPU and GPU tests.

* ROW_STATS (any tensor-core plan whose tiles span N): C = A B with A streamed in through a
  bounded load (rows past ``rows`` zero-filled) in two committed groups, the row maxima and sums
  of C through ``blasdx::rows``, C divided by its row sums and stored through a bounded store.
* CHAIN (sm_90a): O = round16(A B1) B2 with the first product's accumulator turned into the
  second GEMM's register A (``G2::a_registers``), never leaving registers.
* CHAIN_ASYNC (sm_90a): the same through execute_async / wait, with two groups in flight: P B2
  (register A) issued before a second A B1, wait<1> for the first, wait<0> for the second
  (stored to S2, which must equal A B1).
"""

from __future__ import annotations

import blasdx as bx

ROW_STATS = r"""
extern "C" __global__ void __launch_bounds__(GEMM::max_threads_per_block, 1)
row_stats(const GEMM::a_value_type* a, const GEMM::b_value_type* b, float* row_max, float* row_sum, float* c,
          int rows) {
    extern __shared__ __align__(16) unsigned char smem[];
    auto [sA, sB, sC] = GEMM::slice_shared_memory(smem);
    GEMM::load_a<GEMM::k>(a, sA, rows);       // rows past `rows` are zeros
    GEMM::copy_commit();
    GEMM::load_b<GEMM::k>(b, sB, GEMM::n);
    GEMM::copy_commit();
    GEMM::copy_wait<1>();                     // A has landed
    GEMM::copy_wait<0>();                     // B too
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

CHAIN = r"""
using T = G1::a_value_type;
extern "C" __global__ void __launch_bounds__(G1::max_threads_per_block, 1)
chain(const T* a, const T* b1, const T* b2, float* o) {
    extern __shared__ __align__(16) unsigned char smem[];
    auto [sA, sB1] = G1::slice_shared_memory_ab(smem);
    unsigned char* end = reinterpret_cast<unsigned char*>(sB1) + G1::shared_b_bytes;
    T* sB2 = reinterpret_cast<T*>(end + (1024 - blasdx::shared_address(end) % 1024) % 1024);  // G2's B panels
    G1::load_a<G1::k>(a, sA);
    G1::load_b<G1::k>(b1, sB1);
    G2::load_b<G2::n>(b2, sB2);
    G1::copy_wait();
    auto s = G1::execute(sA, sB1);
    G2::accumulator out;
    G2::execute(G2::a_registers(s), sB2, out);
    out.store(o);
}
"""


CHAIN_ASYNC = r"""
using T = G1::a_value_type;
extern "C" __global__ void __launch_bounds__(G1::max_threads_per_block, 1)
chain(const T* a, const T* b1, const T* b2, float* o, float* s2_out) {
    extern __shared__ __align__(16) unsigned char smem[];
    auto [sA, sB1] = G1::slice_shared_memory_ab(smem);
    unsigned char* end = reinterpret_cast<unsigned char*>(sB1) + G1::shared_b_bytes;
    T* sB2 = reinterpret_cast<T*>(end + (1024 - blasdx::shared_address(end) % 1024) % 1024);  // G2's B panels
    G1::load_a<G1::k>(a, sA);
    G1::load_b<G1::k>(b1, sB1);
    G2::load_b<G2::n>(b2, sB2);
    G1::copy_wait();
    G1::accumulator s;
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


def compile_row_stats(desc: bx.Descriptor) -> bx.FusedKernel:
    return bx.compile_kernel(ROW_STATS, "row_stats", {"GEMM": desc})


def compile_chain(gemms: dict[str, bx.Descriptor], asynchronous: bool = False) -> bx.FusedKernel:
    return bx.compile_kernel(CHAIN_ASYNC if asynchronous else CHAIN, "chain", gemms,
                             shared_memory=chain_shared_bytes(gemms))

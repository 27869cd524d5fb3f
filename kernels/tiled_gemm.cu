// Multi-block GEMM: D = alpha * A B + beta * C for matrices of any size, batched.
//
// Expects the generated prelude of one descriptor named TILE (blasdx.fusion.prelude): the
// block tile BM x BN x BK, its types, A/B arrangements and shared-memory leading dimensions.
// Also expects BLASDX_TILED_VEC_A / _VEC_B (bytes per global->shared copy, what the
// pointers, leading dimensions and batch strides allow), BLASDX_TILED_STAGE_BYTES (one
// A + B stage) and BLASDX_TILED_STAGES. Each block owns one BM x BN tile of D and walks K
// in BK steps through STAGES shared-memory stages: while the block GEMM (register API)
// multiplies step s, cp.async fills the stages of the next STAGES - 1 steps, and one
// barrier per step both publishes step s and frees the stage step s - 1 used. Tiles past
// the edges of M, N or K are zero-filled, so the block GEMM
// itself never predicates; the epilogue stores only the elements inside D, with runtime
// strides, so C and D may have any layout (and may be the same array).
#include "blasdx/api.cuh"

namespace blasdx {
namespace tiled {

using G = TILE;
using TA = G::a_value_type;
using TB = G::b_value_type;
using TC = G::c_value_type;
using S = G::scalar_type;
constexpr int THREADS = G::max_threads_per_block;
constexpr int STAGE_BYTES = BLASDX_TILED_STAGE_BYTES;
constexpr int STAGES = BLASDX_TILED_STAGES;
static_assert(STAGES >= 2, "the next K step loads while this one multiplies");
static_assert(STAGE_BYTES >= G::shared_memory_size_ab && STAGE_BYTES % 16 == 0,
              "a stage holds the A and B tiles and keeps the next one 16-byte aligned");
static_assert(!G::is_complex, "the multi-block kernel runs real GEMMs");

// cp.async group bookkeeping (no-ops where copies are synchronous).
__device__ __forceinline__ void commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int PENDING> __device__ __forceinline__ void wait_pending() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
#endif
}

// One OUTER x INNER tile (storage order) of a global matrix with runtime leading dimension
// ld into shared memory (leading dimension LDS). outer_left / inner_left: how much of the
// tile lies inside the matrix; the rest is written as zeros.
template <class T, int OUTER, int INNER, int LDS, int VEC_BYTES>
__device__ __forceinline__ void load_tile(T* dst, const T* src, i64 ld, int outer_left, int inner_left, int tid) {
    static_assert(VEC_BYTES % int(sizeof(T)) == 0 && (INNER * int(sizeof(T))) % VEC_BYTES == 0,
                  "copies must tile the rows");
    constexpr int V = VEC_BYTES / int(sizeof(T));
    using Piece = typename vector_of<VEC_BYTES>::type;
    using Elem = typename vector_of<int(sizeof(T))>::type;
    for_each_piece<OUTER, INNER, V, THREADS>(tid, [&](int r, int c) {
        T* to = dst + r * LDS + c;
        const T* from = src + i64(r) * ld + c;
        if (r < outer_left && c + V <= inner_left) {
            copy_to_shared<VEC_BYTES>(to, from);
        } else if (r < outer_left && c < inner_left) {  // the piece straddles the edge
#pragma unroll
            for (int e = 0; e < V; ++e) {
                reinterpret_cast<Elem*>(to)[e] = c + e < inner_left ? reinterpret_cast<const Elem*>(from)[e] : Elem{};
            }
        } else {
            *reinterpret_cast<Piece*>(to) = Piece{};
        }
    });
}

// An operand's tile of K step k0 at M (or N) offset mn0 of an mn x k operand: rows of mn0 .. along
// K (K_INNER: row-major A, column-major B), or rows of k0 .. along M (N).
template <class T, int OUTER, int INNER, int LDS, int VEC_BYTES, bool K_INNER>
__device__ __forceinline__ void load_operand(T* dst, const T* src, i64 ld, int mn, int k, int mn0, int k0, int tid) {
    if constexpr (K_INNER) {
        load_tile<T, OUTER, INNER, LDS, VEC_BYTES>(dst, src + i64(mn0) * ld + k0, ld, mn - mn0, k - k0, tid);
    } else {
        load_tile<T, OUTER, INNER, LDS, VEC_BYTES>(dst, src + i64(k0) * ld + mn0, ld, k - k0, mn - mn0, tid);
    }
}

// The A and B tiles of K step k0 for the output tile at (m0, n0).
__device__ __forceinline__ void load_stage(unsigned char* stage, const TA* a, const TB* b, int m, int n, int k,
                                           i64 lda, i64 ldb, int m0, int n0, int k0, int tid) {
    auto bufs = G::slice_shared_memory_ab(stage);
    load_operand<TA, G::a_outer, G::a_inner, G::lda, BLASDX_TILED_VEC_A, G::a_row_major>(bufs.a, a, lda, m, k, m0, k0,
                                                                                           tid);
    load_operand<TB, G::b_outer, G::b_inner, G::ldb, BLASDX_TILED_VEC_B, !G::b_row_major>(bufs.b, b, ldb, n, k, n0, k0,
                                                                                            tid);
}

}  // namespace tiled
}  // namespace blasdx

// grid.x: output tiles (M tiles fastest, so neighbouring blocks share B's columns);
// grid.y: problems, each block looping over problems y, y + gridDim.y, ...
// Strides are in elements; a batch stride of 0 broadcasts that operand.
extern "C" __global__ void __launch_bounds__(blasdx::tiled::THREADS, 1)
    blasdx_tiled_gemm(const blasdx::tiled::TA* __restrict__ a, const blasdx::tiled::TB* __restrict__ b,
                      const blasdx::tiled::TC* c, blasdx::tiled::TC* d, int m, int n, int k, blasdx::i64 lda,
                      blasdx::i64 ldb, blasdx::i64 c_row_stride, blasdx::i64 c_col_stride, blasdx::i64 d_row_stride,
                      blasdx::i64 d_col_stride, blasdx::i64 batch_stride_a, blasdx::i64 batch_stride_b,
                      blasdx::i64 batch_stride_c, blasdx::i64 batch_stride_d, int batch, blasdx::tiled::S alpha,
                      blasdx::tiled::S beta) {
    using namespace blasdx;
    using namespace blasdx::tiled;
    extern __shared__ __align__(16) unsigned char smem[];
    const int tid = detail::thread_id();
    const int tiles_m = (m + G::m - 1) / G::m;
    const int m0 = int(blockIdx.x % tiles_m) * G::m, n0 = int(blockIdx.x / tiles_m) * G::n;
    const int steps = (k + G::k - 1) / G::k;
    const bool read_c = !detail::is_zero(beta);

    for (int p = blockIdx.y; p < batch; p += gridDim.y) {
        const TA* pa = a + p * batch_stride_a;
        const TB* pb = b + p * batch_stride_b;
        typename G::accumulator acc;
        for (int i = 0; i < STAGES - 1; ++i) {  // prologue: the first STAGES - 1 steps in flight
            if (i < steps) load_stage(smem + i * STAGE_BYTES, pa, pb, m, n, k, lda, ldb, m0, n0, i * G::k, tid);
            commit();
        }
        for (int s = 0; s < steps; ++s) {
            wait_pending<STAGES - 2>();  // step s has landed (for this thread) ...
            __syncthreads();             // ... for every thread, and step s - 1's stage is free
            const int next = s + STAGES - 1;
            if (next < steps) {
                load_stage(smem + (next % STAGES) * STAGE_BYTES, pa, pb, m, n, k, lda, ldb, m0, n0, next * G::k, tid);
            }
            commit();
            auto bufs = G::slice_shared_memory_ab(smem + (s % STAGES) * STAGE_BYTES);
            G::execute(bufs.a, bufs.b, acc);
        }
        __syncthreads();  // the next problem's prologue overwrites the stages
        const TC* pc = c + p * batch_stride_c;
        TC* pd = d + p * batch_stride_d;
        acc.for_each([&](int r, int col, typename G::accumulator::value_type v) {
            const int row = m0 + r, column = n0 + col;
            if (row < m && column < n) {
                S value = alpha * detail::widen_to<S>(v);
                if (read_c) value += beta * detail::widen_to<S>(pc[row * c_row_stride + column * c_col_stride]);
                pd[row * d_row_stride + column * d_col_stride] = detail::narrow_from<S, TC>(value);
            }
        });
    }
}

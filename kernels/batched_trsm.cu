// Batched block TRSM: each block solves Cfg::batches problems, X_p = alpha A_p^-1 B_p (left) or
// alpha B_p A_p^-1 (right), reading B_p from b and writing X_p to out (the same array for an
// in-place solve).
//
// Expects `blasdx_trsm_config` (generated) and BLASDX_COMPLEX (0 or 1). Group g of the block's
// threads takes problem blockIdx.x * batches + g: it copies the triangle of A that the solve
// reads and all of B into shared memory (16-byte cp.async where alignment allows), computes the
// reciprocals of A's diagonal from global memory meanwhile, solves (trsm.cuh) and copies X out
// in out's order. A batch stride of 0 for A shares one A: group 0 loads it for the block.
// blockIdx.y picks a chunk of independent right-hand sides (chunk_b / chunk_out elements
// apart), so that a wide B can be split over blocks. alpha == 0 writes zeros and reads nothing.
#include "blasdx/trsm.cuh"

namespace blasdx {

using Cfg = blasdx_trsm_config;
using TRSM = BlockTrsm<Cfg>;
using T = Cfg::value_type;
using SV = TRSM::scalar_value_type;

// X (shared, B's order and smem_ldb) -> out (out's order, ldo), by the group's threads.
__device__ __forceinline__ void store_solution(T* out, const T* sB, int lt) {
    constexpr int B_OUTER = Cfg::b_row_major ? Cfg::m : Cfg::n, B_INNER = Cfg::b_row_major ? Cfg::n : Cfg::m;
    if constexpr (Cfg::out_row_major == Cfg::b_row_major) {
        copy_matrix_to_global<T, B_OUTER, B_INNER, Cfg::smem_ldb, Cfg::ldo, Cfg::copy_bytes_out, Cfg::group_threads>(
            out, sB, lt);
    } else {  // the other order: consecutive threads write consecutive elements of out
        constexpr int O_OUTER = Cfg::out_row_major ? Cfg::m : Cfg::n, O_INNER = Cfg::out_row_major ? Cfg::n : Cfg::m;
        for (int i = lt; i < O_OUTER * O_INNER; i += Cfg::group_threads) {
            const int o = i / O_INNER, j = i - o * O_INNER;  // out(o, j) is sB(j, o) in B's order
            out[i64(o) * Cfg::ldo + j] = sB[j * Cfg::smem_ldb + o];
        }
    }
}

__device__ __forceinline__ void batched_trsm(const T* a, const T* b, T* out, SV alpha, i64 stride_a, i64 stride_b,
                                             i64 stride_out, i64 chunk_b, i64 chunk_out, int batch) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int g = tid / Cfg::group_threads, lt = tid % Cfg::group_threads;
    const i64 problem = i64(blockIdx.x) * Cfg::batches + g;
    const bool active = g < Cfg::batches && problem < batch;
    const int slot = stride_a == 0 ? 0 : g;  // a shared A lives in the first slot
    auto* sA = reinterpret_cast<T*>(smem + Cfg::smem_a_offset + slot * Cfg::smem_a_stride);
    auto* sB = reinterpret_cast<T*>(smem + Cfg::smem_b_offset + g * Cfg::smem_b_stride);
    auto* inv = reinterpret_cast<T*>(smem + Cfg::smem_inv_offset) + slot * TRSM::dim;
    const bool zero = trsm_detail::is_zero(alpha);
    const T* b_in = b + problem * stride_b + blockIdx.y * chunk_b;
    out += problem * stride_out + blockIdx.y * chunk_out;
    a += problem * stride_a;

    if (active && !zero) {
        if (slot == g) {  // this group's own A, or the shared one for group 0
            copy_triangle_to_shared<T, Cfg::a_row_major, Cfg::lower, TRSM::dim, Cfg::lda, Cfg::smem_lda,
                                    Cfg::copy_bytes_a, Cfg::group_threads>(sA, a, lt);
            if constexpr (!Cfg::unit_diagonal) {
                for (int i = lt; i < TRSM::dim; i += Cfg::group_threads) {
                    inv[i] = trsm_detail::reciprocal(a[i64(i) * Cfg::lda + i]);
                }
            }
        }
        constexpr int B_OUTER = Cfg::b_row_major ? Cfg::m : Cfg::n, B_INNER = Cfg::b_row_major ? Cfg::n : Cfg::m;
        copy_matrix_to_shared<T, B_OUTER, B_INNER, Cfg::ldb, Cfg::smem_ldb, Cfg::copy_bytes_b, Cfg::group_threads>(
            sB, b_in, lt);
    }
    copy_wait_all();
    __syncthreads();
    if (zero) {
        if (active) {
            for (int i = lt; i < Cfg::smem_b_stride / int(sizeof(T)); i += Cfg::group_threads) sB[i] = T{};
        }
        __syncthreads();
    } else {
        TRSM::solve<Cfg::smem_lda, Cfg::smem_ldb>(sA, sB, lt, active, alpha, TRSM::stored_reciprocal{inv});
    }
    if (active) store_solution(out, sB, lt);
}

}  // namespace blasdx

#if BLASDX_COMPLEX
extern "C" __global__ void __launch_bounds__(blasdx_trsm_config::threads, 1)
    blasdx_batched_trsm(const blasdx::T* a, const blasdx::T* b, blasdx::T* out,
                        blasdx_trsm_config::scalar_type alpha_re, blasdx_trsm_config::scalar_type alpha_im,
                        blasdx::i64 stride_a, blasdx::i64 stride_b,
                        blasdx::i64 stride_out, blasdx::i64 chunk_b, blasdx::i64 chunk_out, int batch) {
    blasdx::batched_trsm(a, b, out, blasdx::SV{alpha_re, alpha_im}, stride_a, stride_b, stride_out, chunk_b,
                         chunk_out, batch);
}
#else
extern "C" __global__ void __launch_bounds__(blasdx_trsm_config::threads, 1)
    blasdx_batched_trsm(const blasdx::T* a, const blasdx::T* b, blasdx::T* out, blasdx_trsm_config::scalar_type alpha,
                        blasdx::i64 stride_a, blasdx::i64 stride_b, blasdx::i64 stride_out, blasdx::i64 chunk_b,
                        blasdx::i64 chunk_out, int batch) {
    blasdx::batched_trsm(a, b, out, alpha, stride_a, stride_b, stride_out, chunk_b, chunk_out, batch);
}
#endif

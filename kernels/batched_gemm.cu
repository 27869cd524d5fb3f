// Batched block GEMM: one thread block per problem, C_p = alpha * A_p B_p + beta * C_p.
//
// Expects `blasdx_config` (generated) and BLASDX_COMPLEX (0 or 1) to be defined. A and B
// are copied to shared memory in their global order (16-byte copies where alignment
// allows), the block GEMM accumulates in registers. With beta == 0, results are staged in
// shared memory and stored in whole rows (when the plan has room for C, or, with
// stage_c_over_ab, over A and B once the whole product is in registers); otherwise each
// element is scaled and stored straight to global memory. C is read only when beta != 0,
// so NaN in C stays out.
//
// Plans with use_wgmma (sm_90a) copy A and B into swizzled panels instead (8-bit operands
// that are not K-major transposed on the way) and multiply with WarpgroupGemm; everything
// else is the same.
#include "blasdx/block_gemm.cuh"
#include "blasdx/copy.cuh"
#include "blasdx/warpgroup_gemm.cuh"
#include "blasdx/api.cuh"

// Blocks per SM the register allocation must leave room for (__launch_bounds__): the
// plan's choice, or BLASDX_MIN_BLOCKS_PER_SM when an experiment defines it.
#ifndef BLASDX_MIN_BLOCKS_PER_SM
#define BLASDX_MIN_BLOCKS_PER_SM blasdx_config::min_blocks_per_sm
#endif

namespace blasdx {

using GEMM = BlockGemm<blasdx_config>;
using Cfg = blasdx_config;
using S = Cfg::scalar_type;
using V = GEMM::value_type;

// alpha * acc + beta * c in the scalar type, rounded once to C's type.
template <class T>
__device__ __forceinline__ void scale_store(T* dst, S alpha, S beta, bool read_c, V acc) {
    S r = alpha * convert<S>::from(acc);
    if (read_c) r += beta * convert<S>::from(*dst);
    *dst = convert<S>::template to<T>(r);
}
template <class T, class Acc>
__device__ __forceinline__ void scale_store(complex<T>* dst, complex<S> alpha, complex<S> beta, bool read_c,
                                            Acc acc) {
    const S ar = convert<S>::from(acc.x), ai = convert<S>::from(acc.y);
    S re = alpha.x * ar - alpha.y * ai;
    S im = alpha.x * ai + alpha.y * ar;
    if (read_c) {
        const S cr = convert<S>::from(dst->x), ci = convert<S>::from(dst->y);
        re += beta.x * cr - beta.y * ci;
        im += beta.x * ci + beta.y * cr;
    }
    dst->x = convert<S>::template to<T>(re);
    dst->y = convert<S>::template to<T>(im);
}

// A and B of one problem from global into shared memory, in the layout the block GEMM reads.
template <class C>
__device__ __forceinline__ void load_operands(unsigned char* smem, const typename C::a_type* a,
                                              const typename C::b_type* b, int tid) {
    if constexpr (C::use_wgmma) {  // swizzled panels (8-bit: K-major, transposed where needed), read by wgmma
        using WG = WarpgroupGemm<C>;
        WG::template load_a<C::lda, C::copy_bytes_a>(reinterpret_cast<typename C::a_type*>(smem), a, tid);
        WG::template load_b<C::ldb, C::copy_bytes_b>(reinterpret_cast<typename C::b_type*>(smem + C::smem_b_offset), b,
                                                     tid);
        copy_wait_all();
        wgmma::proxy_fence();
    } else {
        copy_matrix_to_shared<typename C::a_type, C::a_outer, C::a_inner, C::lda, C::smem_lda, C::copy_bytes_a,
                              C::threads>(reinterpret_cast<typename C::a_type*>(smem), a, tid);
        copy_matrix_to_shared<typename C::b_type, C::b_outer, C::b_inner, C::ldb, C::smem_ldb, C::copy_bytes_b,
                              C::threads>(reinterpret_cast<typename C::b_type*>(smem + C::smem_b_offset), b, tid);
        copy_wait_all();
    }
}

// A * B from shared memory, every result element to epi(row, col, value).
template <class C, class Epilogue>
__device__ __forceinline__ void multiply(const typename C::a_type* sA, const typename C::b_type* sB, int tid,
                                         Epilogue& epi) {
    if constexpr (C::use_wgmma) {
        WarpgroupGemm<C>::run(sA, sB, tid, epi);
    } else {
        BlockGemm<C>::template run<C::smem_lda, C::smem_ldb>(sA, sB, tid, epi);
    }
}

// alpha * A B staged over A and B, then stored in whole rows: every tile this thread owns is
// accumulated in registers (the device API's accumulator, dispatched as its register execute),
// the block waits until nobody reads A or B, and C goes into shared memory from offset 0.
template <class C, class Scalar>
__device__ __forceinline__ void store_over_operands(typename C::c_type* c, unsigned char* smem,
                                                    const typename C::a_type* sA, const typename C::b_type* sB,
                                                    int tid, Scalar alpha) {
    accumulator<C> acc;
    if constexpr (C::use_wgmma) {
        WarpgroupGemm<C>::accumulate(acc.fragment(), sA, sB, acc.thread());
    } else {
        BlockGemm<C>::template accumulate<C::smem_lda, C::smem_ldb>(acc.fragment(), sA, sB, acc.thread(),
                                                                    identity{}, identity{});
    }
    __syncthreads();
    auto* sC = reinterpret_cast<typename C::c_type*>(smem);
    acc.for_each([&](int row, int col, const typename accumulator<C>::value_type& value) {
        scale_store(sC + (C::c_row_major ? row * C::smem_ldc + col : row + col * C::smem_ldc), alpha, Scalar{}, false,
                    value);
    });
    __syncthreads();
    copy_matrix_to_global<typename C::c_type, C::c_outer, C::c_inner, C::smem_ldc, C::ldc, C::copy_bytes_c,
                          C::threads>(c, sC, tid);
}

// Swizzled panels repeat every 1024 bytes and wgmma swizzles absolute shared addresses.
constexpr int SMEM_ALIGNMENT = Cfg::use_wgmma ? 1024 : 16;

template <class Scalar>
__device__ __forceinline__ void batched_gemm(const Cfg::a_type* __restrict__ a, const Cfg::b_type* __restrict__ b,
                                             Cfg::c_type* __restrict__ c, Scalar alpha, Scalar beta, i64 stride_a,
                                             i64 stride_b, i64 stride_c, bool read_c) {
    extern __shared__ __align__(SMEM_ALIGNMENT) unsigned char smem[];
    if constexpr (Cfg::use_wgmma) {
        if (shared_address(smem) % SMEM_ALIGNMENT != 0) __trap();  // would read garbage silently
    }
    auto* sA = reinterpret_cast<Cfg::a_type*>(smem);
    auto* sB = reinterpret_cast<Cfg::b_type*>(smem + Cfg::smem_b_offset);
    const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const i64 problem = blockIdx.x;
    a += problem * stride_a;
    b += problem * stride_b;
    c += problem * stride_c;

    load_operands<Cfg>(smem, a, b, tid);
    __syncthreads();

    if constexpr (Cfg::stage_c) {
        if (!read_c) {  // stage alpha * A B in shared memory, then store whole rows
            auto* sC = reinterpret_cast<Cfg::c_type*>(smem + Cfg::smem_c_offset);
            auto stage = [&](int row, int col, V value) {
                scale_store(sC + (Cfg::c_row_major ? row * Cfg::smem_ldc + col : row + col * Cfg::smem_ldc), alpha,
                            beta, false, value);
            };
            multiply<Cfg>(sA, sB, tid, stage);
            __syncthreads();
            copy_matrix_to_global<Cfg::c_type, Cfg::c_outer, Cfg::c_inner, Cfg::smem_ldc, Cfg::ldc, Cfg::copy_bytes_c,
                                  Cfg::threads>(c, sC, tid);
            return;
        }
    }
    if constexpr (Cfg::stage_c_over_ab) {
        if (!read_c) {
            store_over_operands<Cfg>(c, smem, sA, sB, tid, alpha);
            return;
        }
    }
    auto epilogue = [&](int row, int col, V value) {
        Cfg::c_type* dst = c + (Cfg::c_row_major ? i64(row) * Cfg::ldc + col : row + i64(col) * Cfg::ldc);
        scale_store(dst, alpha, beta, read_c, value);
    };
    multiply<Cfg>(sA, sB, tid, epilogue);
}

}  // namespace blasdx

#if BLASDX_COMPLEX
extern "C" __global__ void __launch_bounds__(blasdx_config::threads, BLASDX_MIN_BLOCKS_PER_SM)
    blasdx_batched_gemm(const blasdx_config::a_type* a, const blasdx_config::b_type* b, blasdx_config::c_type* c,
                        blasdx::S alpha_re, blasdx::S alpha_im, blasdx::S beta_re, blasdx::S beta_im,
                        blasdx::i64 stride_a, blasdx::i64 stride_b, blasdx::i64 stride_c) {
    const bool read_c = beta_re != blasdx::S(0) || beta_im != blasdx::S(0);
    blasdx::batched_gemm(a, b, c, blasdx::complex<blasdx::S>{alpha_re, alpha_im},
                         blasdx::complex<blasdx::S>{beta_re, beta_im}, stride_a, stride_b, stride_c, read_c);
}
#else
extern "C" __global__ void __launch_bounds__(blasdx_config::threads, BLASDX_MIN_BLOCKS_PER_SM)
    blasdx_batched_gemm(const blasdx_config::a_type* a, const blasdx_config::b_type* b, blasdx_config::c_type* c,
                        blasdx::S alpha, blasdx::S beta, blasdx::i64 stride_a, blasdx::i64 stride_b,
                        blasdx::i64 stride_c) {
    blasdx::batched_gemm(a, b, c, alpha, beta, stride_a, stride_b, stride_c, beta != blasdx::S(0));
}
#endif

// Batched block GEMM: C_p = alpha * A_p B_p + beta * C_p, each problem multiplied by one thread block.
//
// Expects `blasdx_config` (generated) and BLASDX_COMPLEX (0 or 1) to be defined. A and B
// are copied to shared memory in their global order (16-byte copies where alignment
// allows), the block GEMM accumulates in registers. Results are staged in shared memory and
// stored in whole rows when the plan has room for C (beside A and B, or, with stage_c_over_ab,
// over them once the whole product is in registers); with beta != 0, C is first loaded there in
// whole rows too. Plans without that room scale and store each element straight to global
// memory. C is read only when beta != 0, so NaN in C stays out.
//
// A block runs Cfg::stages consecutive problems (the grid is the batch divided by that,
// rounded up), each with its own A/B buffer: the copies of a later problem's A and B are in
// flight while an earlier one is multiplied and stored (batched_gemm below).
//
// A block of one problem whose plan splits K (Cfg::k_chunk < k) issues its copies as one group
// per K chunk and multiplies each chunk as soon as it has landed, the later ones still in flight
// (multiply_in_k_chunks): where such a block runs alone on its SM, nothing else would overlap its
// load and its products.
//
// Plans with use_wgmma (sm_90a) copy A and B into swizzled panels instead (8-bit operands
// that are not K-major transposed on the way) and multiply with WarpgroupGemm; everything
// else is the same. Warp-level plans with batched_panels copy them into such panels too (rows
// shorter than a 128-byte line), which their ldmatrix reads take as they are.
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

// Leading-dimension arguments of A and B in the batched kernel's shared memory: PANELS where the
// plan copies them into swizzled panels (Cfg::batched_panels), else smem_a's and smem_b's.
template <class C> constexpr int batched_lda = C::batched_panels ? PANELS : C::smem_lda;
template <class C> constexpr int batched_ldb = C::batched_panels ? PANELS : C::smem_ldb;

// Start copying A and B of one problem from global memory into a stage of shared memory, in the
// layout the block GEMM reads (cp.async where it can; the caller commits, waits and syncs).
template <class C>
__device__ __forceinline__ void copy_operands(unsigned char* stage, const typename C::a_type* a,
                                              const typename C::b_type* b, int tid) {
    if constexpr (C::use_wgmma) {  // swizzled panels (8-bit: K-major, transposed where needed), read by wgmma
        using WG = WarpgroupGemm<C>;
        WG::template load_a<C::lda, C::copy_bytes_a>(reinterpret_cast<typename C::a_type*>(stage), a, tid);
        WG::template load_b<C::ldb, C::copy_bytes_b>(reinterpret_cast<typename C::b_type*>(stage + C::smem_b_offset),
                                                     b, tid);
    } else if constexpr (C::batched_panels) {  // a 128-byte line's pieces land in distinct banks (heuristics)
        wgmma::copy_to_panels<typename C::a_type, C::a_outer, C::a_inner, C::lda, C::a_panel_bytes, C::copy_bytes_a,
                              C::threads>(stage, a, tid);
        wgmma::copy_to_panels<typename C::b_type, C::b_outer, C::b_inner, C::ldb, C::b_panel_bytes, C::copy_bytes_b,
                              C::threads>(stage + C::smem_b_offset, b, tid);
    } else {
        copy_matrix_to_shared<typename C::a_type, C::a_outer, C::a_inner, C::lda, C::smem_lda, C::copy_bytes_a,
                              C::threads>(reinterpret_cast<typename C::a_type*>(stage), a, tid);
        copy_matrix_to_shared<typename C::b_type, C::b_outer, C::b_inner, C::ldb, C::smem_ldb, C::copy_bytes_b,
                              C::threads>(reinterpret_cast<typename C::b_type*>(stage + C::smem_b_offset), b, tid);
    }
}

// A * B from shared memory, every result element to epi(row, col, value).
template <class C, class Epilogue>
__device__ __forceinline__ void multiply(const typename C::a_type* sA, const typename C::b_type* sB, int tid,
                                         Epilogue& epi) {
    if constexpr (C::use_wgmma) {
        WarpgroupGemm<C>::run(sA, sB, tid, epi);
    } else {
        BlockGemm<C>::template run<batched_lda<C>, batched_ldb<C>>(sA, sB, tid, epi);
    }
}

// C of one problem into its staging area sC in whole rows (as C is stored), landed and visible to
// the block on return: beta * C is then read from shared memory, element by element as the
// product is written there, instead of by scattered loads from global memory.
template <class C>
__device__ __forceinline__ void load_c(typename C::c_type* sC, const typename C::c_type* c, int tid) {
    copy_matrix_to_shared<typename C::c_type, C::c_outer, C::c_inner, C::ldc, C::smem_ldc, C::copy_bytes_c,
                          C::threads, false>(sC, c, tid);  // consecutive pieces, as C's store (copy.cuh)
    copy_wait_all();
    __syncthreads();
}

// Element (row, col) of C staged in shared memory at sC.
template <class C>
__device__ __forceinline__ typename C::c_type* staged_element(typename C::c_type* sC, int row, int col) {
    return sC + (C::c_row_major ? row * C::smem_ldc + col : row + col * C::smem_ldc);
}

// Elements per store of a run of RUN adjacent columns of C staged with leading dimension LD: the
// widest power of two that divides the run, keeps every row's runs aligned and moves <= 16 bytes.
template <class T, int RUN, int LD> __host__ __device__ constexpr int run_store_width() {
    int w = RUN;
    while (w > 1 && (w * int(sizeof(T)) > 16 || (LD * int(sizeof(T))) % (w * int(sizeof(T))) != 0)) w /= 2;
    return w;
}

// The epilogue that writes alpha * acc (+ beta * the staged C with READ_C) into C staged at sC:
// element by element, or a run of a lane's adjacent columns (c_runs) with vector stores. Element
// by element, an odd-size tile (whose edge tests keep the compiler from pairing stores) wrote
// int32 and f32 C 4 bytes and f16 C 2 bytes at a time, 3.5-way bank conflicts among them
// (Nsight Compute, int8 100^3: 5.3 M shared-store wavefronts against cuBLASDx's 3.3 M).
template <class C, bool READ_C, class Scalar>
struct stage_into {
    using T = typename C::c_type;
    static constexpr bool takes_runs = C::c_row_major;  // adjacent columns adjacent in sC
    T* sC;
    Scalar alpha, beta;

    template <class Value> __device__ __forceinline__ void operator()(int row, int col, const Value& value) const {
        scale_store(staged_element<C>(sC, row, col), alpha, beta, READ_C, value);
    }

    template <class Value, int RUN> __device__ __forceinline__ void run(int row, int col, const Value (&v)[RUN]) const {
        constexpr int W = run_store_width<T, RUN, C::smem_ldc>();
        using Bits = typename vector_of<W * int(sizeof(T))>::type;
        T* dst = staged_element<C>(sC, row, col);
#pragma unroll
        for (int s = 0; s < RUN; s += W) {
            T old[W], out[W];
            if constexpr (READ_C) {
                const Bits in = *reinterpret_cast<const Bits*>(dst + s);
                memcpy(old, &in, sizeof(in));
            }
#pragma unroll
            for (int w = 0; w < W; ++w) {
                S r = alpha * convert<S>::from(v[s + w]);
                if constexpr (READ_C) r += beta * convert<S>::from(old[w]);
                out[w] = convert<S>::template to<T>(r);
            }
            Bits bits;
            memcpy(&bits, out, sizeof(bits));
            *reinterpret_cast<Bits*>(dst + s) = bits;
        }
    }
};

// Whether the register accumulator of C holds runs of adjacent columns: warp-level tensor-core
// tiles of real C (c_runs).
template <class C> __host__ __device__ constexpr bool holds_runs() {
    if constexpr (C::use_mma && !C::use_wgmma) {
        return c_runs<C>::works;
    } else {
        return false;
    }
}

// sC = alpha * acc (+ beta * sC with READ_C), for every element the accumulator holds: tensor-core
// tiles in runs of adjacent columns (stage_into), everything else element by element.
template <bool READ_C, class C, class Scalar>
__device__ __forceinline__ void stage_accumulator(const accumulator<C>& acc, typename C::c_type* sC, Scalar alpha,
                                                  Scalar beta) {
    stage_into<C, READ_C, Scalar> epi{sC, alpha, beta};
    if constexpr (holds_runs<C>() && decltype(epi)::takes_runs) {
        using shape = fragment_shape<C>;
        const int tid = acc.thread();
        if (!shape::active(tid)) return;
#pragma unroll
        for (int t = 0; t < shape::ITEMS; ++t) {
            if (!shape::item_exists(tid, t)) continue;
            c_runs<C>::template visit<shape::FULL_M, shape::FULL_N>(acc.fragment().regs[t][0], shape::m0(tid, t),
                                                                    shape::n0(tid, t), tid % 32, epi);
        }
    } else {
        acc.for_each([&](int row, int col, const typename accumulator<C>::value_type& value) { epi(row, col, value); });
    }
}

// A product held in registers (acc) to C: staged in shared memory and stored in whole rows when the
// plan stages C (beside A and B at smem + smem_c_offset, or over this problem's A and B at stage once
// the block is done reading them; with read_c, C is loaded there first), else each element scaled
// and stored straight to global memory.
template <class C, class Scalar>
__device__ __forceinline__ void store_accumulator(const accumulator<C>& acc, typename C::c_type* c, unsigned char* smem,
                                                  unsigned char* stage, int tid, Scalar alpha, Scalar beta,
                                                  bool read_c) {
    using value_type = typename accumulator<C>::value_type;
    if constexpr (C::stage_c || C::stage_c_over_ab) {
        typename C::c_type* sC;
        if constexpr (C::stage_c) {
            sC = reinterpret_cast<typename C::c_type*>(smem + C::smem_c_offset);
        } else {
            __syncthreads();  // nobody reads A or B any more
            sC = reinterpret_cast<typename C::c_type*>(stage);
        }
        if (read_c) {
            load_c<C>(sC, c, tid);
            stage_accumulator<true>(acc, sC, alpha, beta);
        } else {
            stage_accumulator<false>(acc, sC, alpha, Scalar{});
        }
        __syncthreads();
        copy_matrix_to_global<typename C::c_type, C::c_outer, C::c_inner, C::smem_ldc, C::ldc, C::copy_bytes_c,
                              C::threads>(c, sC, tid);
        return;
    }
    acc.for_each([&](int row, int col, const value_type& value) {
        typename C::c_type* dst = c + (C::c_row_major ? i64(row) * C::ldc + col : row + i64(col) * C::ldc);
        scale_store(dst, alpha, beta, read_c, value);
    });
}

// alpha * A B (+ beta * C) staged over A and B, then stored in whole rows: every tile this thread owns
// is accumulated in registers (the device API's accumulator, dispatched as its register execute),
// the block waits until nobody reads A or B, and C goes into shared memory from offset 0.
template <class C, bool READ_C, class Scalar>
__device__ __forceinline__ void store_over_operands(typename C::c_type* c, unsigned char* stage,
                                                    const typename C::a_type* sA, const typename C::b_type* sB,
                                                    int tid, Scalar alpha, Scalar beta) {
    static_assert(C::stage_c_over_ab && !C::stage_c, "C goes over this problem's A and B");
    accumulator<C> acc;
    if constexpr (C::use_wgmma) {
        WarpgroupGemm<C>::accumulate(acc.fragment(), sA, sB, acc.thread());
    } else {
        BlockGemm<C>::template accumulate<batched_lda<C>, batched_ldb<C>>(acc.fragment(), sA, sB, acc.thread(),
                                                                          identity{}, identity{});
    }
    store_accumulator<C>(acc, c, stage, stage, tid, alpha, beta, READ_C);
}

// ---- K in chunks (Cfg::k_chunk < k): one block's copies land chunk by chunk, multiplied as they do ----
//
// A block whose A and B fill most of an SM's shared memory runs alone or nearly so, and nothing
// overlaps its load with its products. Its copies are issued as one group per K chunk, and the
// product over a chunk starts as soon as that chunk has landed, while the later ones are in flight.

// The block GEMM over K indices [K0, K0 + KC) only: the same configuration with k = KC, run on
// A and B pointers moved to K0 (the fragment shape depends on M and N alone).
template <class C, int KC> struct k_chunk_cfg : C {
    static constexpr int k = KC;
};

template <class C> constexpr int k_chunks = (C::k + C::k_chunk - 1) / C::k_chunk;
template <class C, int I> constexpr int chunk_size = I + 1 < k_chunks<C> ? C::k_chunk : C::k - I * C::k_chunk;

// Element offset of K index k0 in A or B, in shared (SMEM) or global memory.
template <class C, bool SMEM> __host__ __device__ constexpr int a_k_offset(int k0) {
    return C::a_row_major ? k0 : k0 * (SMEM ? C::smem_lda : C::lda);
}
template <class C, bool SMEM> __host__ __device__ constexpr int b_k_offset(int k0) {
    return C::b_row_major ? k0 * (SMEM ? C::smem_ldb : C::ldb) : k0;
}

// Issue the copies of chunks I, I + 1, ... of A and B, one commit group per chunk.
template <class C, int I>
__device__ __forceinline__ void copy_k_chunks(unsigned char* stage, const typename C::a_type* a,
                                              const typename C::b_type* b, int tid) {
    using TA = typename C::a_type;
    using TB = typename C::b_type;
    constexpr int K0 = I * C::k_chunk, KC = chunk_size<C, I>;
    static_assert(a_k_offset<C, true>(K0) * int(sizeof(TA)) % 16 == 0 &&
                      b_k_offset<C, true>(K0) * int(sizeof(TB)) % 16 == 0,
                  "every K chunk starts on a 16-byte boundary in shared memory (heuristics.k_chunk_fits)");
    constexpr int A_OUTER = C::a_row_major ? C::a_outer : KC, A_INNER = C::a_row_major ? KC : C::a_inner;
    constexpr int B_OUTER = C::b_row_major ? KC : C::b_outer, B_INNER = C::b_row_major ? C::b_inner : KC;
    copy_matrix_to_shared<TA, A_OUTER, A_INNER, C::lda, C::smem_lda, C::copy_bytes_a, C::threads>(
        reinterpret_cast<TA*>(stage) + a_k_offset<C, true>(K0), a + a_k_offset<C, false>(K0), tid);
    copy_matrix_to_shared<TB, B_OUTER, B_INNER, C::ldb, C::smem_ldb, C::copy_bytes_b, C::threads>(
        reinterpret_cast<TB*>(stage + C::smem_b_offset) + b_k_offset<C, true>(K0), b + b_k_offset<C, false>(K0), tid);
    copy_commit();
    if constexpr (I + 1 < k_chunks<C>) copy_k_chunks<C, I + 1>(stage, a, b, tid);
}

// acc += A B over chunk I once its copies have landed, then over the chunks after it.
template <class C, int I>
__device__ __forceinline__ void multiply_k_chunks(accumulator<C>& acc, const unsigned char* stage) {
    constexpr int K0 = I * C::k_chunk;
    copy_wait<k_chunks<C> - 1 - I>();
    __syncthreads();
    const auto* sA = reinterpret_cast<const typename C::a_type*>(stage) + a_k_offset<C, true>(K0);
    const auto* sB = reinterpret_cast<const typename C::b_type*>(stage + C::smem_b_offset) + b_k_offset<C, true>(K0);
    BlockGemm<k_chunk_cfg<C, chunk_size<C, I>>>::template accumulate<C::smem_lda, C::smem_ldb>(
        acc.fragment(), sA, sB, acc.thread(), identity{}, identity{});
    if constexpr (I + 1 < k_chunks<C>) multiply_k_chunks<C, I + 1>(acc, stage);
}

// One problem, its K in chunks: every chunk's copies issued, each multiplied as it lands, C stored.
template <class C, class Scalar>
__device__ __forceinline__ void multiply_in_k_chunks(const typename C::a_type* a, const typename C::b_type* b,
                                                     typename C::c_type* c, unsigned char* smem, int tid,
                                                     Scalar alpha, Scalar beta, bool read_c) {
    static_assert(C::stages == 1 && !C::use_wgmma && !C::batched_panels,
                  "K chunks are for one problem per block, warp-level GEMM, padded rows");
    copy_k_chunks<C, 0>(smem, a, b, tid);
    accumulator<C> acc;
    multiply_k_chunks<C, 0>(acc, smem);
    store_accumulator<C>(acc, c, smem, smem, tid, alpha, beta, read_c);
}

// Swizzled panels repeat every 1024 bytes and wgmma swizzles absolute shared addresses.
constexpr int SMEM_ALIGNMENT = Cfg::use_wgmma ? 1024 : 16;

// sC = alpha * A B (+ beta * sC with READ_C), each element as the block GEMM produces it.
template <bool READ_C, class Scalar>
__device__ __forceinline__ void multiply_into_staged_c(const Cfg::a_type* sA, const Cfg::b_type* sB, Cfg::c_type* sC,
                                                       int tid, Scalar alpha, Scalar beta) {
    stage_into<Cfg, READ_C, Scalar> stage_value{sC, alpha, beta};
    multiply<Cfg>(sA, sB, tid, stage_value);
}

// One problem whose A and B sit stage_offset bytes into shared memory: C = alpha * A B (+ beta * C
// when read_c), staged in shared memory and stored in whole rows where the plan allows.
template <class Scalar>
__device__ __forceinline__ void multiply_and_store(Cfg::c_type* __restrict__ c, int stage_offset, int tid,
                                                   Scalar alpha, Scalar beta, bool read_c) {
    extern __shared__ __align__(SMEM_ALIGNMENT) unsigned char smem[];
    unsigned char* stage = smem + stage_offset;
    auto* sA = reinterpret_cast<Cfg::a_type*>(stage);
    auto* sB = reinterpret_cast<Cfg::b_type*>(stage + Cfg::smem_b_offset);
    if constexpr (Cfg::stage_c) {  // stage alpha * A B (+ beta * C, C loaded there first), then store whole rows
        auto* sC = reinterpret_cast<Cfg::c_type*>(smem + Cfg::smem_c_offset);
        if (read_c) {
            load_c<Cfg>(sC, c, tid);
            multiply_into_staged_c<true>(sA, sB, sC, tid, alpha, beta);
        } else {  // its own product: a runtime read_c per element cost beta == 0 8% (f16->f16 100^3)
            multiply_into_staged_c<false>(sA, sB, sC, tid, alpha, Scalar{});
        }
        __syncthreads();
        copy_matrix_to_global<Cfg::c_type, Cfg::c_outer, Cfg::c_inner, Cfg::smem_ldc, Cfg::ldc, Cfg::copy_bytes_c,
                              Cfg::threads>(c, sC, tid);
        return;
    }
    if constexpr (Cfg::stage_c_over_ab) {
        // a product of its own for each, as with C beside A and B (one product with read_c decided
        // per element cost f16->f16 100^3 8% at beta 0 there)
        if (read_c) {
            store_over_operands<Cfg, true>(c, stage, sA, sB, tid, alpha, beta);
        } else {
            store_over_operands<Cfg, false>(c, stage, sA, sB, tid, alpha, Scalar{});
        }
        return;
    }
    auto epilogue = [&](int row, int col, V value) {
        Cfg::c_type* dst = c + (Cfg::c_row_major ? i64(row) * Cfg::ldc + col : row + i64(col) * Cfg::ldc);
        scale_store(dst, alpha, beta, read_c, value);
    };
    multiply<Cfg>(sA, sB, tid, epilogue);
}

// Problems blockIdx.x * stages ... + stages - 1 of `problems`, each with its own A/B buffer of
// Cfg::stage_bytes. Every copy is issued first, so later problems' operands arrive while earlier
// ones are multiplied and stored: a block keeps memory busy by itself instead of relying only on
// other blocks of its SM. (The problems are unrolled, not looped over: in a loop NVVM keeps far
// more live, int8 48x80x24 60 -> 114-140 registers.)
template <class Scalar>
__device__ __forceinline__ void batched_gemm(const Cfg::a_type* __restrict__ a, const Cfg::b_type* __restrict__ b,
                                             Cfg::c_type* __restrict__ c, Scalar alpha, Scalar beta, i64 stride_a,
                                             i64 stride_b, i64 stride_c, i64 problems, bool read_c) {
    extern __shared__ __align__(SMEM_ALIGNMENT) unsigned char smem[];
    if constexpr (Cfg::use_wgmma) {
        if (shared_address(smem) % SMEM_ALIGNMENT != 0) __trap();  // would read garbage silently
    }
    constexpr int STAGES = Cfg::stages;
    const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    if constexpr (k_chunks<Cfg> > 1) {
        const i64 problem = blockIdx.x;
        multiply_in_k_chunks<Cfg>(a + problem * stride_a, b + problem * stride_b, c + problem * stride_c, smem, tid,
                                  alpha, beta, read_c);
        return;
    } else if constexpr (STAGES == 1) {
        const i64 problem = blockIdx.x;
        copy_operands<Cfg>(smem, a + problem * stride_a, b + problem * stride_b, tid);
        copy_wait_all();
        if constexpr (Cfg::use_wgmma) wgmma::proxy_fence();
        __syncthreads();
        multiply_and_store(c + problem * stride_c, 0, tid, alpha, beta, read_c);
        return;
    }
    const i64 first = i64(blockIdx.x) * STAGES;
#pragma unroll
    for (int i = 0; i < STAGES; ++i) {
        if (first + i < problems) {
            copy_operands<Cfg>(smem + i * Cfg::stage_bytes, a + (first + i) * stride_a, b + (first + i) * stride_b,
                               tid);
        }
        copy_commit();
    }
#pragma unroll
    for (int i = 0; i < STAGES; ++i) {
        if (first + i >= problems) break;
        copy_wait_at_most<STAGES - 1>(STAGES - 1 - i);  // problem i's copies have landed
        if constexpr (Cfg::use_wgmma) wgmma::proxy_fence();
        __syncthreads();
        multiply_and_store(c + (first + i) * stride_c, i * Cfg::stage_bytes, tid, alpha, beta, read_c);
    }
}

}  // namespace blasdx

#if BLASDX_COMPLEX
extern "C" __global__ void __launch_bounds__(blasdx_config::threads, BLASDX_MIN_BLOCKS_PER_SM)
    blasdx_batched_gemm(const blasdx_config::a_type* a, const blasdx_config::b_type* b, blasdx_config::c_type* c,
                        blasdx::S alpha_re, blasdx::S alpha_im, blasdx::S beta_re, blasdx::S beta_im,
                        blasdx::i64 stride_a, blasdx::i64 stride_b, blasdx::i64 stride_c, blasdx::i64 problems) {
    const bool read_c = beta_re != blasdx::S(0) || beta_im != blasdx::S(0);
    blasdx::batched_gemm(a, b, c, blasdx::complex<blasdx::S>{alpha_re, alpha_im},
                         blasdx::complex<blasdx::S>{beta_re, beta_im}, stride_a, stride_b, stride_c, problems, read_c);
}
#else
extern "C" __global__ void __launch_bounds__(blasdx_config::threads, BLASDX_MIN_BLOCKS_PER_SM)
    blasdx_batched_gemm(const blasdx_config::a_type* a, const blasdx_config::b_type* b, blasdx_config::c_type* c,
                        blasdx::S alpha, blasdx::S beta, blasdx::i64 stride_a, blasdx::i64 stride_b,
                        blasdx::i64 stride_c, blasdx::i64 problems) {
    blasdx::batched_gemm(a, b, c, alpha, beta, stride_a, stride_b, stride_c, problems, beta != blasdx::S(0));
}
#endif

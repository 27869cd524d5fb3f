// The bodies of a descriptor's extern "C" entry points (blasdx.codegen.ltoir writes the
// wrappers): the device API of api.cuh behind a plain pointer ABI, so that code compiled by
// another front end (Numba, any JIT that links LTO-IR) can call a blasdx GEMM.
//
// A register accumulator cannot cross a C call, so the register API works on a fragment in
// memory: an array of fragment_size accumulator values per thread (a local array of the
// caller). Each entry loads the fragment into the accumulator, works, and writes it back;
// once nvJitLink inlines the call (LTO), the copies fold away and the fragment stays in
// registers as long as the caller indexes it with constants.
//
// Scalars (alpha, beta) travel by value as scalar_type; a complex scalar as its two parts.
#pragma once

#include "api.cuh"

namespace blasdx {
namespace entry {

template <class G> using scalar_t = typename G::scalar_type;
template <class G> using fragment_value_t = typename G::accumulator::value_type;

// alpha / beta of G from their parts (the imaginary part is ignored for real GEMMs).
template <class G>
__device__ __forceinline__ typename G::scalar_value_type scalar_of(scalar_t<G> re, scalar_t<G> im) {
    if constexpr (G::is_complex) {
        return {re, im};
    } else {
        (void)im;
        return re;
    }
}

// sC = alpha * A B + beta * sC with sA, sB, sC in shared memory (GEMM::execute).
template <class G>
__device__ __forceinline__ void execute(scalar_t<G> alpha_re, scalar_t<G> alpha_im, const void* a, const void* b,
                                        scalar_t<G> beta_re, scalar_t<G> beta_im, void* c) {
    G::execute(scalar_of<G>(alpha_re, alpha_im), static_cast<const typename G::a_value_type*>(a),
               static_cast<const typename G::b_value_type*>(b), scalar_of<G>(beta_re, beta_im),
               static_cast<typename G::c_value_type*>(c));
}

// sA, sB, sC inside a block of shared_memory_size bytes (16-byte aligned; swizzled plans find
// their 1024-byte boundary inside it).
template <class G> __device__ __forceinline__ void slice_shared_memory(void* smem, void** a, void** b, void** c) {
    const auto buffers = G::slice_shared_memory(smem);
    *a = buffers.a;
    *b = buffers.b;
    *c = buffers.c;
}

// Global -> shared copies of a matrix stored densely in the descriptor's arrangement (leading
// dimension = its inner extent), into the suggested shared layout; asynchronous on sm_80+.
template <class G> __device__ __forceinline__ void load_a(const void* g, void* s) {
    G::template load_a<G::a_inner>(static_cast<const typename G::a_value_type*>(g),
                                   static_cast<typename G::a_value_type*>(s));
}
template <class G> __device__ __forceinline__ void load_b(const void* g, void* s) {
    G::template load_b<G::b_inner>(static_cast<const typename G::b_value_type*>(g),
                                   static_cast<typename G::b_value_type*>(s));
}
template <class G> __device__ __forceinline__ void load_c(const void* g, void* s) {
    G::template load_c<G::c_inner, G::ldc>(static_cast<const typename G::c_value_type*>(g),
                                           static_cast<typename G::c_value_type*>(s));
}
// Shared -> global (synchronous); call it after a __syncthreads() that follows the GEMM.
template <class G> __device__ __forceinline__ void store_c(const void* s, void* g) {
    G::template store_c<G::c_inner, G::ldc>(static_cast<const typename G::c_value_type*>(s),
                                            static_cast<typename G::c_value_type*>(g));
}

// -- the register API on a fragment in memory

template <class G>
__device__ __forceinline__ void fragment_load(typename G::accumulator& acc, const fragment_value_t<G>* f) {
#pragma unroll
    for (int i = 0; i < G::accumulator::size; ++i) acc.set(i, f[i]);
}
template <class G>
__device__ __forceinline__ void fragment_store(const typename G::accumulator& acc, fragment_value_t<G>* f) {
#pragma unroll
    for (int i = 0; i < G::accumulator::size; ++i) f[i] = acc.get(i);
}

// fragment += A B, A and B in shared memory.
template <class G> __device__ __forceinline__ void accumulate(const void* a, const void* b, void* fragment) {
    auto* f = static_cast<fragment_value_t<G>*>(fragment);
    typename G::accumulator acc;
    fragment_load<G>(acc, f);
    G::execute(static_cast<const typename G::a_value_type*>(a), static_cast<const typename G::b_value_type*>(b), acc);
    fragment_store<G>(acc, f);
}

// C = alpha * fragment + beta * C, C in C's arrangement with leading dimension ld (global or
// shared memory); C is not read when beta == 0.
template <class G>
__device__ __forceinline__ void fragment_axpby(const void* fragment, scalar_t<G> alpha_re, scalar_t<G> alpha_im,
                                               scalar_t<G> beta_re, scalar_t<G> beta_im, void* c, int ld) {
    typename G::accumulator acc;
    fragment_load<G>(acc, static_cast<const fragment_value_t<G>*>(fragment));
    acc.axpby(scalar_of<G>(alpha_re, alpha_im), scalar_of<G>(beta_re, beta_im),
              static_cast<typename G::c_value_type*>(c), ld);
}

// Where element i of the calling thread's fragment sits in C, and whether it is a real element.
template <class G> __device__ __forceinline__ int fragment_row(int i) { return typename G::accumulator().row(i); }
template <class G> __device__ __forceinline__ int fragment_col(int i) { return typename G::accumulator().col(i); }
template <class G> __device__ __forceinline__ int fragment_valid(int i) {
    return typename G::accumulator().is_valid(i) ? 1 : 0;
}

// Row and column of every fragment element of the calling thread (row -1: padding, no element of C).
template <class G> __device__ __forceinline__ void fragment_positions(int* rows, int* cols) {
    const typename G::accumulator acc;
#pragma unroll
    for (int i = 0; i < G::accumulator::size; ++i) {
        rows[i] = acc.is_valid(i) ? acc.row(i) : -1;
        cols[i] = acc.col(i);
    }
}

}  // namespace entry
}  // namespace blasdx

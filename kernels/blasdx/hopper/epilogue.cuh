// Epilogues of the Hopper engine: what happens to each pair of accumulator elements.
//
// An epilogue is a functor called as epi(work, row, col, v0, v1) for the elements (row, col)
// and (row, col + 1) of the output tile's problem, both possibly outside M x N (the
// functor predicates). The device GEMM (gemm.cuh) calls it from the consumer warpgroups
// once a tile's accumulation is complete; users pass their own (bias, activation, ...).
#pragma once

#include "../types.cuh"
#include "scheduler.cuh"

namespace blasdx {
namespace hopper {

template <class T> struct pair_of;
template <> struct pair_of<float> { using type = float2; };
template <> struct pair_of<__half> { using type = __half2; };
template <> struct pair_of<__nv_bfloat16> { using type = __nv_bfloat162; };

template <class T> __device__ __forceinline__ float load_float(const T* p) { return convert<float>::from(*p); }
template <class T> __device__ __forceinline__ void store_float(T* p, float v) { *p = convert<float>::to<T>(v); }

// Two adjacent elements at p, p + 1 (p aligned to the pair).
template <class T> __device__ __forceinline__ void load_pair(const T* p, float& v0, float& v1) {
    const typename pair_of<T>::type v = *reinterpret_cast<const typename pair_of<T>::type*>(p);
    v0 = convert<float>::from(v.x);
    v1 = convert<float>::from(v.y);
}
template <class T> __device__ __forceinline__ void store_pair(T* p, float v0, float v1) {
    typename pair_of<T>::type v;
    v.x = convert<float>::to<T>(v0);
    v.y = convert<float>::to<T>(v1);
    *reinterpret_cast<typename pair_of<T>::type*>(p) = v;
}

// Whether a matrix with these strides lets every even column pair be one aligned access.
template <class T>
__device__ __forceinline__ bool pairs_aligned(const T* base, i64 row_stride, i64 col_stride, i64 batch_stride) {
    return col_stride == 1 && row_stride % 2 == 0 && batch_stride % 2 == 0 &&
           reinterpret_cast<unsigned long long>(base) % (2 * sizeof(T)) == 0;
}

// D = alpha * acc + beta * C, C read only when beta != 0; C and D of any strides (they may
// be the same matrix). Element strides; a batch stride of 0 broadcasts.
template <class TC>
struct LinearCombination {
    const TC* c;
    TC* d;
    int m, n;
    i64 c_row, c_col, c_batch, d_row, d_col, d_batch;
    float alpha, beta;
    bool read_c, c_pairs, d_pairs;

    __device__ __forceinline__ LinearCombination(const TC* c_, TC* d_, int m_, int n_, i64 c_row_, i64 c_col_,
                                                 i64 c_batch_, i64 d_row_, i64 d_col_, i64 d_batch_, float alpha_,
                                                 float beta_)
        : c(c_), d(d_), m(m_), n(n_), c_row(c_row_), c_col(c_col_), c_batch(c_batch_), d_row(d_row_),
          d_col(d_col_), d_batch(d_batch_), alpha(alpha_), beta(beta_) {
        read_c = beta != 0.0f;
        c_pairs = read_c && pairs_aligned(c, c_row, c_col, c_batch);
        d_pairs = pairs_aligned(d, d_row, d_col, d_batch);
    }

    __device__ __forceinline__ void operator()(const Work& w, int row, int col, float v0, float v1) const {
        if (row >= m || col >= n) return;
        TC* pd = d + w.batch * d_batch + row * d_row + col * d_col;
        const TC* pc = c + w.batch * c_batch + row * c_row + col * c_col;
        v0 *= alpha;
        v1 *= alpha;
        const bool both = col + 1 < n;
        if (read_c) {
            if (both && c_pairs) {
                float c0, c1;
                load_pair(pc, c0, c1);
                v0 += beta * c0;
                v1 += beta * c1;
            } else {
                v0 += beta * load_float(pc);
                if (both) v1 += beta * load_float(pc + c_col);
            }
        }
        if (both && d_pairs) {
            store_pair(pd, v0, v1);
        } else {
            store_float(pd, v0);
            if (both) store_float(pd + d_col, v1);
        }
    }
};

// Split K: each split writes its raw partial sums to workspace[split][batch][m][n] (f32);
// a second kernel (splitk_reduce.cu) adds the splits up and applies alpha, beta and C.
struct SplitKPartial {
    float* workspace;
    int m, n, batch;

    __device__ __forceinline__ void operator()(const Work& w, int row, int col, float v0, float v1) const {
        if (row >= m || col >= n) return;
        float* p = workspace + ((i64(w.split) * batch + w.batch) * m + row) * i64(n) + col;
        if (col + 1 < n && n % 2 == 0) {
            *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
        } else {
            p[0] = v0;
            if (col + 1 < n) p[1] = v1;
        }
    }
};

}  // namespace hopper
}  // namespace blasdx

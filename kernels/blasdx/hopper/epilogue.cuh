// Epilogues of the Hopper engine: what happens to a consumer's finished accumulator tile.
//
// Two levels. A pair functor is called as f(work, row, col, v0, v1) for the elements
// (row, col) and (row, col + 1) of the unit's problem, both possibly outside M x N (the
// functor predicates): LinearCombination, SplitKPartial, or a user's (bias, activation).
// A tile epilogue is what the device GEMM (gemm.cuh) calls with the whole accumulator:
// * StoreEachPair<F> hands every pair to F, which writes global memory itself;
// * StageThroughShared<TC, F> asks F for the final values (F::value), writes them into a
//   128-byte-swizzled shared-memory chunk and stores the chunk with TMA, two chunks in
//   flight: the stores drain while the consumer goes on to its next tile.
// A tile epilogue declares the shared memory it needs per consumer (staging_bytes).
#pragma once

#include "../types.cuh"
#include "../wgmma.cuh"
#include "scheduler.cuh"
#include "sync.cuh"
#include "tma.cuh"

namespace blasdx {
namespace hopper {

template <class T> struct pair_of;
template <> struct pair_of<float> { using type = float2; };
template <> struct pair_of<double> { using type = double2; };
template <> struct pair_of<int> { using type = int2; };
template <> struct pair_of<unsigned char> { using type = uchar2; };
template <> struct pair_of<__half> { using type = __half2; };
template <> struct pair_of<__nv_bfloat16> { using type = __nv_bfloat162; };

// One element of storage type T read as / written from the accumulator's type V (float,
// int or double): conversions of types.cuh's convert<V>.
template <class V, class T> __device__ __forceinline__ V load_value(const T* p) { return convert<V>::from(*p); }
template <class V, class T> __device__ __forceinline__ void store_value(T* p, V v) {
    *p = convert<V>::template to<T>(v);
}

// Two adjacent elements at p, p + 1 (p aligned to the pair).
template <class T, class V> __device__ __forceinline__ void load_pair(const T* p, V& v0, V& v1) {
    const typename pair_of<T>::type v = *reinterpret_cast<const typename pair_of<T>::type*>(p);
    v0 = convert<V>::from(v.x);
    v1 = convert<V>::from(v.y);
}
template <class T, class V> __device__ __forceinline__ void store_pair(T* p, V v0, V v1) {
    typename pair_of<T>::type v;
    v.x = convert<V>::template to<T>(v0);
    v.y = convert<V>::template to<T>(v1);
    *reinterpret_cast<typename pair_of<T>::type*>(p) = v;
}

// (v0, v1) at p and p + col_step: one paired access where `pairs` holds (p aligned to the pair, the
// next column contiguous), else element by element; the second only where `second` (column + 1 < N).
template <class T, class V>
__device__ __forceinline__ void store_two(T* p, V v0, V v1, i64 col_step, bool second, bool pairs) {
    if (second && pairs) {
        store_pair(p, v0, v1);
    } else {
        store_value(p, v0);
        if (second) store_value(p + col_step, v1);
    }
}

// Whether a matrix with these strides lets every even column pair be one aligned access.
template <class T>
__device__ __forceinline__ bool pairs_aligned(const T* base, i64 row_stride, i64 col_stride, i64 batch_stride) {
    return col_stride == 1 && row_stride % 2 == 0 && batch_stride % 2 == 0 &&
           reinterpret_cast<unsigned long long>(base) % (2 * sizeof(T)) == 0;
}

// ---- pair functors ------------------------------------------------------------------------------

// D = alpha * acc + beta * C, C read only when beta != 0; C and D of any strides (they may
// be the same matrix). Element strides; a batch stride of 0 broadcasts. V is the
// accumulator's type, and that of alpha and beta (int keeps integer results exact).
template <class TC, class V = float>
struct LinearCombination {
    using value_type = TC;
    const TC* c;
    TC* d;
    int m, n;
    i64 c_row, c_col, c_batch, d_row, d_col, d_batch;
    V alpha, beta;
    bool read_c, c_pairs, d_pairs;

    __device__ __forceinline__ LinearCombination(const TC* c_, TC* d_, int m_, int n_, i64 c_row_, i64 c_col_,
                                                 i64 c_batch_, i64 d_row_, i64 d_col_, i64 d_batch_, V alpha_,
                                                 V beta_)
        : c(c_), d(d_), m(m_), n(n_), c_row(c_row_), c_col(c_col_), c_batch(c_batch_), d_row(d_row_),
          d_col(d_col_), d_batch(d_batch_), alpha(alpha_), beta(beta_) {
        read_c = beta != V(0);
        c_pairs = read_c && pairs_aligned(c, c_row, c_col, c_batch);
        d_pairs = pairs_aligned(d, d_row, d_col, d_batch);
    }

    // alpha * (v0, v1) + beta * C at (row, col), (row, col + 1); C is read inside M x N only.
    __device__ __forceinline__ void value(const Work& w, int row, int col, V& v0, V& v1) const {
        v0 *= alpha;
        v1 *= alpha;
        if (!read_c || row >= m || col >= n) return;
        const TC* pc = c + w.batch * c_batch + row * c_row + col * c_col;
        if (col + 1 < n && c_pairs) {
            V c0, c1;
            load_pair(pc, c0, c1);
            v0 += beta * c0;
            v1 += beta * c1;
        } else {
            v0 += beta * load_value<V>(pc);
            if (col + 1 < n) v1 += beta * load_value<V>(pc + c_col);
        }
    }

    __device__ __forceinline__ void operator()(const Work& w, int row, int col, V v0, V v1) const {
        if (row >= m || col >= n) return;
        value(w, row, col, v0, v1);
        store_two(d + w.batch * d_batch + row * d_row + col * d_col, v0, v1, d_col, col + 1 < n, d_pairs);
    }
};

// Split K: each split writes its raw partial sums to workspace[split][batch][m][n] (of the
// accumulator's type V); a second kernel (splitk_reduce.cu) adds the splits up and applies
// alpha, beta and C.
template <class V = float>
struct SplitKPartial {
    V* workspace;
    int m, n, batch;

    __device__ __forceinline__ void operator()(const Work& w, int row, int col, V v0, V v1) const {
        if (row >= m || col >= n) return;
        V* p = workspace + ((i64(w.split) * batch + w.batch) * m + row) * i64(n) + col;
        if (col + 1 < n && n % 2 == 0) {
            using pair = typename pair_of<V>::type;
            *reinterpret_cast<pair*>(p) = pair{v0, v1};
        } else {
            p[0] = v0;
            if (col + 1 < n) p[1] = v1;
        }
    }
};

// ---- tile epilogues -----------------------------------------------------------------------------

// Every pair to the functor F (which stores).
template <class F>
struct StoreEachPair {
    static constexpr int staging_bytes = 0;
    F pair;

    template <class Acc>
    __device__ __forceinline__ void operator()(const Work& w, const Acc& acc, int row0, int col0, int /*consumer*/,
                                               unsigned char* /*staging*/) const {
        using V = typename Acc::value_type;
        acc.for_each_pair(row0, col0, [&](int row, int col, V v0, V v1) { pair(w, row, col, v0, v1); });
    }
    __device__ __forceinline__ void finish(int /*consumer*/) const {}
};

// F::value(work, row, col, v0, v1) gives the final values, written as TC through shared
// memory and stored with the tensor map of D (box {128 / sizeof(TC), 64, 1}, 128B swizzle;
// TMA drops what lies outside D). Each 64-row slice of the tile is cut into chunks of 128
// bytes of columns; two chunk buffers per consumer alternate, so one store is in flight
// while the next chunk is written. Only the consumer's first thread issues and waits for
// stores; named barrier 1 + consumer keeps its 128 threads in step.
template <class TC, class F>
struct StageThroughShared {
    static constexpr int COLUMNS = 128 / int(sizeof(TC));  // per chunk
    static constexpr int CHUNK_BYTES = 64 * 128;
    static constexpr int BUFFERS = 2;
    static constexpr int staging_bytes = BUFFERS * CHUNK_BYTES;
    const TensorMap* map;
    F values;

    template <class Acc>
    __device__ __forceinline__ void operator()(const Work& w, const Acc& acc, int row0, int col0, int consumer,
                                               unsigned char* staging) const {
        constexpr int CHUNKS = Acc::N / COLUMNS;
        static_assert(Acc::N % COLUMNS == 0, "the tile is whole chunks wide");
        const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
        const bool leader = threadIdx.x % 128 == 0;
#pragma unroll
        for (int i = 0; i < Acc::ATOMS_M; ++i) {
#pragma unroll
            for (int chunk = 0; chunk < CHUNKS; ++chunk) {
                unsigned char* buffer = staging + ((i * CHUNKS + chunk) % BUFFERS) * CHUNK_BYTES;
                if (leader) store_wait_read<BUFFERS - 1>();  // the store that used this buffer has read it
                barrier(consumer);
#pragma unroll
                for (int j = 0; j < COLUMNS / 8; ++j) {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int r = 16 * warp + lane / 4 + 8 * h, c = 8 * j + 2 * (lane % 4);
                        const int reg = 4 * (chunk * COLUMNS / 8 + j) + 2 * h;
                        typename Acc::value_type v0 = acc.r[i][reg], v1 = acc.r[i][reg + 1];
                        values.value(w, row0 + 64 * i + r, col0 + chunk * COLUMNS + c, v0, v1);
                        store_pair(reinterpret_cast<TC*>(buffer + wgmma::swizzle<128>(r * 128 + c * int(sizeof(TC)))),
                                   v0, v1);
                    }
                }
                async_proxy_fence();
                barrier(consumer);
                if (leader) {
                    store_box(map, buffer, col0 + chunk * COLUMNS, row0 + 64 * i, w.batch);
                    store_commit();
                }
            }
        }
    }

    // Before the consumer exits: its stores have read their shared memory and completed.
    __device__ __forceinline__ void finish(int /*consumer*/) const {
        if (threadIdx.x % 128 == 0) store_wait<0>();
    }

    __device__ __forceinline__ static void barrier(int consumer) {
        if (consumer == 0) {
            named_barrier<1, 128>();
        } else {
            named_barrier<2, 128>();
        }
    }
};

}  // namespace hopper
}  // namespace blasdx

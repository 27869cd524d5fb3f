// Block-level triangular solve (TRSM) from shared memory, and its device API.
//
// Solves A X = alpha B (left) or X A = alpha B (right) for X, which overwrites B; A is
// triangular (lower or upper; its other triangle is never read) with a unit diagonal (never
// read) or not. Cfg (generated per descriptor by blasdx.trsm_codegen) fixes sizes, types,
// orders, leading dimensions, threads and the update GEMMs.
//
// Every right-hand side (a column of B on the left, a row on the right) is independent, and
// the unknowns of one are found in order: forward (left-lower, right-upper) or backward. The
// unknowns are taken `panel` at a time:
//   1. substitution inside the panel, one thread per right-hand side, the panel's values in
//      registers, A read as broadcasts (every thread of a group reads the same element);
//   2. the equations still to solve lose the panel's unknowns: a block GEMM (BlockGemm, the
//      GEMM engine, so f64 runs on DMMA) of the trailing part of B minus A's panel block
//      times the panel's solution, straight into B.
// A barrier follows each step. alpha is applied where each element of B is first touched:
// the first panel's substitution and the first update. Reciprocals of the diagonal come
// from a functor (the batched kernel computes them once into shared memory; the device API
// computes them where they are needed), so 1 / A(i, i) is rounded once, as IEEE division
// would, and applied by a multiplication.
//
// BatchesPerBlock: the block's threads form `batches` groups of `group_threads`, group g
// solving problem g; every group runs the same panel schedule, so the barriers line up.
// Groups that run update GEMMs are whole warps (the Python side checks it).
#pragma once

#include "api.cuh"
#include "block_gemm.cuh"
#include "copy.cuh"
#include "types.cuh"

namespace blasdx {

enum class side { left, right };
enum class fill_mode { lower, upper };
enum class diag { unit, non_unit };

namespace trsm_detail {

// Arithmetic on the compute type, real or complex.
template <class T> __device__ __forceinline__ T mul(const T& a, const T& b) { return a * b; }
template <class T> __device__ __forceinline__ complex<T> mul(const complex<T>& a, const complex<T>& b) {
    return {fma(a.x, b.x, -a.y * b.y), fma(a.x, b.y, a.y * b.x)};
}
template <class T> __device__ __forceinline__ T minus(const T& a, const T& b) { return a - b; }
template <class T> __device__ __forceinline__ complex<T> minus(const complex<T>& a, const complex<T>& b) {
    return {a.x - b.x, a.y - b.y};
}
// x - a * b
template <class T> __device__ __forceinline__ T sub_mul(const T& x, const T& a, const T& b) { return fma(-a, b, x); }
template <class T>
__device__ __forceinline__ complex<T> sub_mul(const complex<T>& x, const complex<T>& a, const complex<T>& b) {
    complex<T> r;
    r.x = fma(-a.x, b.x, x.x);
    r.x = fma(a.y, b.y, r.x);
    r.y = fma(-a.x, b.y, x.y);
    r.y = fma(-a.y, b.x, r.y);
    return r;
}

// 1 / v rounded once (round to nearest); complex by Smith's method, which avoids overflow in |v|^2.
__device__ __forceinline__ float reciprocal(float v) { return __frcp_rn(v); }
__device__ __forceinline__ double reciprocal(double v) { return __drcp_rn(v); }
template <class T> __device__ __forceinline__ complex<T> reciprocal(const complex<T>& v) {
    if (fabs(v.x) >= fabs(v.y)) {
        const T r = v.y / v.x, d = v.x + v.y * r;
        return {T(1) / d, -r / d};
    }
    const T r = v.x / v.y, d = v.x * r + v.y;
    return {r / d, T(-1) / d};
}

template <class T> __device__ __forceinline__ bool is_zero(const T& v) { return v == T(0); }
template <class T> __device__ __forceinline__ bool is_zero(const complex<T>& v) { return v.x == T(0) && v.y == T(0); }
template <class T> __device__ __forceinline__ bool is_one(const T& v) { return v == T(1); }
template <class T> __device__ __forceinline__ bool is_one(const complex<T>& v) { return v.x == T(1) && v.y == T(0); }

__host__ __device__ constexpr int min_of(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int max_of(int a, int b) { return a > b ? a : b; }

}  // namespace trsm_detail

template <class Cfg>
struct BlockTrsm {
    using value_type = typename Cfg::value_type;  // A and B elements, also the compute type
    using scalar_type = typename Cfg::scalar_type;  // one part of alpha
    using scalar_value_type = typename std_conditional<Cfg::is_complex, complex<scalar_type>, scalar_type>::type;
    static_assert(sizeof(scalar_value_type) == sizeof(value_type), "a TRSM computes in its element type");

    static constexpr bool left = Cfg::left, lower = Cfg::lower, unit = Cfg::unit_diagonal;
    static constexpr int m = Cfg::m, n = Cfg::n;
    static constexpr int dim = left ? m : n;    // A is dim x dim
    static constexpr int width = left ? n : m;  // independent right-hand sides
    static constexpr bool forward = left == lower;
    static constexpr int panel = Cfg::panel;
    static constexpr int panels = (dim + panel - 1) / panel;
    static constexpr int group = Cfg::group_threads;
    static_assert(panel >= 1 && group >= 1, "a TRSM needs a panel and threads");

    // Panel P: unknowns [p0, p0 + pb); the equations still to solve after it: [r0, r0 + rn).
    // The same rule as blasdx.trsm_plan.panel_steps.
    template <int P> struct step {
        static constexpr int p1 = forward ? trsm_detail::min_of(dim, (P + 1) * panel) : dim - P * panel;
        static constexpr int p0 = forward ? P * panel : trsm_detail::max_of(0, p1 - panel);
        static constexpr int pb = p1 - p0;
        static constexpr int r0 = forward ? p1 : 0;
        static constexpr int rn = forward ? dim - p1 : p0;
    };

    // A(i, j) and B(i, j) in shared memory with leading dimensions LDA, LDB.
    template <int LDA> __device__ __forceinline__ static const value_type& a_at(const value_type* sA, int i, int j) {
        return Cfg::a_row_major ? sA[i * LDA + j] : sA[i + j * LDA];
    }
    template <int LDB> __device__ __forceinline__ static value_type& b_at(value_type* sB, int i, int j) {
        return Cfg::b_row_major ? sB[i * LDB + j] : sB[i + j * LDB];
    }
    // The coefficient of unknown k in equation i: A(i, k) on the left, A(k, i) on the right.
    template <int LDA> __device__ __forceinline__ static const value_type& coef(const value_type* sA, int i, int k) {
        return left ? a_at<LDA>(sA, i, k) : a_at<LDA>(sA, k, i);
    }
    // Unknown i of right-hand side q: B(i, q) on the left, B(q, i) on the right.
    template <int LDB> __device__ __forceinline__ static value_type& rhs(value_type* sB, int i, int q) {
        return left ? b_at<LDB>(sB, i, q) : b_at<LDB>(sB, q, i);
    }

    // 1 / A(i, i) computed where needed (the device API, which has no workspace).
    template <int LDA> struct computed_reciprocal {
        const value_type* sA;
        __device__ __forceinline__ value_type operator()(int i) const {
            return trsm_detail::reciprocal(a_at<LDA>(sA, i, i));
        }
    };
    // 1 / A(i, i) from a table filled beforehand (the batched kernel).
    struct stored_reciprocal {
        const value_type* inv;
        __device__ __forceinline__ value_type operator()(int i) const { return inv[i]; }
    };

    // 16 bytes of consecutive elements, for the panel's vector loads and stores.
    static constexpr int VEC = 16 % int(sizeof(value_type)) == 0 ? 16 / int(sizeof(value_type)) : 1;
    struct alignas(16) vec {
        value_type v[VEC];
    };

    // Whether panel P's unknowns of one right-hand side lie in whole 16-byte pieces of shared memory
    // (B column-major on the left, row-major on the right; sB 16-byte aligned): then a thread moves
    // them with vector loads, and neighbouring threads (leading dimensions an odd number of pieces,
    // as the batched kernel pads them) hit distinct banks.
    template <int P, int LDB> __host__ __device__ static constexpr bool vector_panel() {
        constexpr int bytes = int(sizeof(value_type));
        return (left ? !Cfg::b_row_major : Cfg::b_row_major) && VEC > 1 && (step<P>::pb * bytes) % 16 == 0 &&
               (step<P>::p0 * bytes) % 16 == 0 && (LDB * bytes) % 16 == 0;
    }

    // Substitution inside panel P: thread lt of the group takes right-hand sides lt, lt + group, ...
    template <int P, int LDA, int LDB, class Inv>
    __device__ __forceinline__ static void solve_panel(const value_type* sA, value_type* sB, int lt,
                                                       const scalar_value_type& alpha, bool scale, const Inv& inv) {
        using st = step<P>;
        for (int q = lt; q < width; q += group) {
            value_type x[st::pb];
            if constexpr (vector_panel<P, LDB>()) {
                const value_type* run = &rhs<LDB>(sB, st::p0, q);
#pragma unroll
                for (int t = 0; t < st::pb; t += VEC) {
                    const vec piece = *reinterpret_cast<const vec*>(run + t);
#pragma unroll
                    for (int e = 0; e < VEC; ++e) x[t + e] = piece.v[e];
                }
            } else {
#pragma unroll
                for (int t = 0; t < st::pb; ++t) x[t] = rhs<LDB>(sB, st::p0 + t, q);
            }
            if (P == 0 && scale) {
#pragma unroll
                for (int t = 0; t < st::pb; ++t) x[t] = trsm_detail::mul(alpha, x[t]);
            }
#pragma unroll
            for (int s = 0; s < st::pb; ++s) {
                const int a = forward ? s : st::pb - 1 - s;
                if constexpr (!unit) x[a] = trsm_detail::mul(x[a], inv(st::p0 + a));
#pragma unroll
                for (int s2 = s + 1; s2 < st::pb; ++s2) {
                    const int b = forward ? s2 : st::pb - 1 - s2;
                    x[b] = trsm_detail::sub_mul(x[b], coef<LDA>(sA, st::p0 + b, st::p0 + a), x[a]);
                }
            }
            if constexpr (vector_panel<P, LDB>()) {
                value_type* run = &rhs<LDB>(sB, st::p0, q);
#pragma unroll
                for (int t = 0; t < st::pb; t += VEC) {
                    vec piece;
#pragma unroll
                    for (int e = 0; e < VEC; ++e) piece.v[e] = x[t + e];
                    *reinterpret_cast<vec*>(run + t) = piece;
                }
            } else {
#pragma unroll
                for (int t = 0; t < st::pb; ++t) rhs<LDB>(sB, st::p0 + t, q) = x[t];
            }
        }
    }

    // The update after panel P: B's trailing equations lose the panel's unknowns (a block GEMM).
    template <int P, int LDA, int LDB>
    __device__ __forceinline__ static void update(const value_type* sA, value_type* sB, int lt,
                                                  const scalar_value_type& alpha, bool scale) {
        using st = step<P>;
        using U = typename Cfg::template update<P>;
        static_assert(U::p0 == st::p0 && U::pb == st::pb && U::r0 == st::r0 && U::rn == st::rn,
                      "the update GEMM of a panel differs between Python and C++");
        static_assert(U::k == st::pb && U::threads == group,
                      "an update GEMM has the panel's depth and the group's threads");
        const bool first = P == 0 && scale;
        if constexpr (left) {
            // B[r0 + row, col] -= A[r0 + row, p0 + kk] * B[p0 + kk, col]
            static_assert(U::m == st::rn && U::n == width, "left update: rn x width");
            auto epi = [&](int row, int col, const value_type& v) {
                value_type& dst = b_at<LDB>(sB, st::r0 + row, col);
                dst = trsm_detail::minus(first ? trsm_detail::mul(alpha, dst) : dst, v);
            };
            BlockGemm<U>::template run<LDA, LDB>(&a_at<LDA>(sA, st::r0, st::p0), &b_at<LDB>(sB, st::p0, 0), lt, epi);
        } else {
            // B[row, r0 + col] -= B[row, p0 + kk] * A[p0 + kk, r0 + col]
            static_assert(U::m == width && U::n == st::rn, "right update: width x rn");
            auto epi = [&](int row, int col, const value_type& v) {
                value_type& dst = b_at<LDB>(sB, row, st::r0 + col);
                dst = trsm_detail::minus(first ? trsm_detail::mul(alpha, dst) : dst, v);
            };
            BlockGemm<U>::template run<LDB, LDA>(&b_at<LDB>(sB, 0, st::p0), &a_at<LDA>(sA, st::p0, st::r0), lt, epi);
        }
    }

    template <int P, int LDA, int LDB, class Inv>
    __device__ __forceinline__ static void panels_from(const value_type* sA, value_type* sB, int lt, bool active,
                                                       const scalar_value_type& alpha, bool scale, const Inv& inv) {
        if constexpr (P < panels) {
            if (active) solve_panel<P, LDA, LDB>(sA, sB, lt, alpha, scale, inv);
            __syncthreads();
            if constexpr (step<P>::rn > 0) {
                if (active) update<P, LDA, LDB>(sA, sB, lt, alpha, scale);
                __syncthreads();
            }
            panels_from<P + 1, LDA, LDB>(sA, sB, lt, active, alpha, scale, inv);
        }
    }

    // Solve one problem in place: A (leading dimension LDA) and B (LDB) in shared memory. Every
    // thread of the block calls it (it synchronises the block after each step, the last one
    // included); those with active == false only take part in the barriers. lt is the thread's
    // index in its group. alpha must not be zero (the callers set B to zero themselves).
    template <int LDA, int LDB, class Inv>
    __device__ static void solve(const value_type* sA, value_type* sB, int lt, bool active,
                                 const scalar_value_type& alpha, const Inv& inv) {
        panels_from<0, LDA, LDB>(sA, sB, lt, active, alpha, !trsm_detail::is_one(alpha), inv);
    }
};

// Block-cooperative copy of the pieces of a DIM x DIM matrix that hold its LOWER (or upper)
// triangle, diagonal included: the same pieces copy_matrix_to_shared moves, less those wholly
// in the other triangle (about half of them), which the solve never reads.
template <class T, bool ROW_MAJOR, bool LOWER, int DIM, int LDG, int LDS, int VEC_BYTES, int THREADS>
__device__ __forceinline__ void copy_triangle_to_shared(T* dst, const T* src, int tid) {
    static_assert(VEC_BYTES % int(sizeof(T)) == 0, "copy width must be a multiple of the element size");
    static_assert((DIM * int(sizeof(T))) % VEC_BYTES == 0, "rows must be a whole number of copies");
    constexpr int V = VEC_BYTES / int(sizeof(T));
    // piece (r, c): run r (a row when ROW_MAJOR, else a column), elements c .. c + V - 1 of it
    for_each_piece<DIM, DIM, V, THREADS>(tid, [&](int r, int c) {
        // row-major: row r, columns c..c+V-1; column-major: column r, rows c..c+V-1
        const bool holds_lower = ROW_MAJOR ? c <= r : c + V - 1 >= r;
        const bool holds_upper = ROW_MAJOR ? c + V - 1 >= r : c <= r;
        if (LOWER ? holds_lower : holds_upper) {
            copy_to_shared<VEC_BYTES>(dst + r * LDS + c, src + i64(r) * LDG + c);
        }
    });
}

// ---- the device API ---------------------------------------------------------------------------
//
// Cfg: the generated config plus alignment_a/b (bytes) and block_dim_x/y/z. Shared-memory
// matrices use the descriptor's arrangement and leading dimensions (TRSM::lda, ldb); with
// BatchesPerBlock, problem g's A starts a_stride elements after problem g - 1's (B: b_stride).
template <class Cfg>
struct Trsm {
    using engine = BlockTrsm<Cfg>;
    using a_value_type = typename Cfg::value_type;
    using b_value_type = typename Cfg::value_type;
    using scalar_type = typename Cfg::scalar_type;
    using scalar_value_type = typename engine::scalar_value_type;
    static constexpr bool is_complex = Cfg::is_complex;

    static constexpr blasdx::side side = Cfg::left ? blasdx::side::left : blasdx::side::right;
    static constexpr blasdx::fill_mode fill_mode = Cfg::lower ? blasdx::fill_mode::lower : blasdx::fill_mode::upper;
    static constexpr blasdx::diag diag = Cfg::unit_diagonal ? blasdx::diag::unit : blasdx::diag::non_unit;

    static constexpr int m = Cfg::m, n = Cfg::n;
    static constexpr int a_dim = engine::dim;  // A is a_dim x a_dim
    static constexpr bool a_row_major = Cfg::a_row_major, b_row_major = Cfg::b_row_major;
    static constexpr int lda = Cfg::lda, ldb = Cfg::ldb;
    static constexpr int b_outer = b_row_major ? m : n, b_inner = b_row_major ? n : m;
    static constexpr int a_size = lda * a_dim, b_size = ldb * b_outer;
    static constexpr int alignment_a = Cfg::alignment_a, alignment_b = Cfg::alignment_b;

    static constexpr int batches_per_block = Cfg::batches;
    static constexpr int max_threads_per_block = Cfg::threads;
    static constexpr dim3 block_dim = dim3(Cfg::block_dim_x, Cfg::block_dim_y, Cfg::block_dim_z);
    static_assert(Cfg::block_dim_x * Cfg::block_dim_y * Cfg::block_dim_z == Cfg::threads,
                  "block_dim must hold exactly the TRSM's threads");

    // batches_per_block A's, then as many B's, each on a 16-byte boundary.
    static constexpr int shared_a_bytes = detail::round_up(a_size * int(sizeof(a_value_type)), 16);
    static constexpr int shared_b_bytes = detail::round_up(b_size * int(sizeof(b_value_type)), 16);
    static constexpr int a_stride = shared_a_bytes / int(sizeof(a_value_type));  // elements between problems
    static constexpr int b_stride = shared_b_bytes / int(sizeof(b_value_type));
    static constexpr int shared_a_offset = 0, shared_b_offset = batches_per_block * shared_a_bytes;
    static constexpr int shared_memory_size = batches_per_block * (shared_a_bytes + shared_b_bytes);

    struct shared_buffers {
        a_value_type* a;
        b_value_type* b;
    };
    // The first problem's sA and sB in a block of shared_memory_size bytes (16-byte aligned).
    __device__ __forceinline__ static shared_buffers slice_shared_memory(void* smem) {
        auto* base = static_cast<unsigned char*>(smem);
        return {reinterpret_cast<a_value_type*>(base + shared_a_offset),
                reinterpret_cast<b_value_type*>(base + shared_b_offset)};
    }

    __device__ __forceinline__ static int thread_id() { return detail::thread_id(); }

    // Global -> shared copies of one matrix by all the TRSM's threads (asynchronous on sm_80+:
    // copy_wait() before use). The global matrix has the descriptor's order and leading
    // dimension LDG; both pointers must meet the descriptor's Alignment.
    template <int LDG = lda>
    __device__ __forceinline__ static void load_a(const a_value_type* gA, a_value_type* sA) {
        constexpr int W = detail::copy_width(alignment_a, int(sizeof(a_value_type)), a_dim, LDG, lda);
        const int tid = thread_id();
        if (tid < max_threads_per_block) {
            copy_matrix_to_shared<a_value_type, a_dim, a_dim, LDG, lda, W, max_threads_per_block>(sA, gA, tid);
        }
    }
    template <int LDG = ldb>
    __device__ __forceinline__ static void load_b(const b_value_type* gB, b_value_type* sB) {
        constexpr int W = detail::copy_width(alignment_b, int(sizeof(b_value_type)), b_inner, LDG, ldb);
        const int tid = thread_id();
        if (tid < max_threads_per_block) {
            copy_matrix_to_shared<b_value_type, b_outer, b_inner, LDG, ldb, W, max_threads_per_block>(sB, gB, tid);
        }
    }
    // Shared -> global (synchronous); execute() already synchronised the block.
    template <int LDG = ldb>
    __device__ __forceinline__ static void store_b(const b_value_type* sB, b_value_type* gB) {
        constexpr int W = detail::copy_width(alignment_b, int(sizeof(b_value_type)), b_inner, ldb, LDG);
        const int tid = thread_id();
        if (tid < max_threads_per_block) {
            copy_matrix_to_global<b_value_type, b_outer, b_inner, ldb, LDG, W, max_threads_per_block>(gB, sB, tid);
        }
    }
    // Wait for this thread's copies, then for the whole block.
    __device__ __forceinline__ static void copy_wait() {
        copy_wait_all();
        __syncthreads();
    }

    // Solve in place: B = alpha A^-1 B (left) or alpha B A^-1 (right) for the batches_per_block
    // problems at sA, sA + a_stride, ... and sB, sB + b_stride, ... Every thread of the block
    // must call it with the same alpha (it synchronises the block); it returns with sB complete.
    // alpha == 0 sets B to zero without reading A or B, as BLAS does.
    __device__ static void execute(const scalar_value_type& alpha, const a_value_type* sA, b_value_type* sB) {
        const int tid = thread_id();
        const bool active = tid < max_threads_per_block;
        const int g = active ? tid / engine::group : 0, lt = active ? tid % engine::group : 0;
        const a_value_type* a = sA + g * a_stride;
        b_value_type* b = sB + g * b_stride;
        if (trsm_detail::is_zero(alpha)) {
            if (active) {
                for (int i = lt; i < b_size; i += engine::group) b[i] = b_value_type{};
            }
            __syncthreads();
            return;
        }
        using inverse = typename engine::template computed_reciprocal<lda>;
        engine::template solve<lda, ldb>(a, b, lt, active, alpha, inverse{a});
    }
    __device__ static void execute(const a_value_type* sA, b_value_type* sB) {
        execute(scalar_value_type{1}, sA, sB);
    }
};

// cuBLASDx's traits: side_of<TRSM>::value, fill_mode_of<TRSM>::value, diag_of<TRSM>::value.
template <class T> struct side_of { static constexpr side value = T::side; };
template <class T> struct fill_mode_of { static constexpr fill_mode value = T::fill_mode; };
template <class T> struct diag_of { static constexpr diag value = T::diag; };

}  // namespace blasdx

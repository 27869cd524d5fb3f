// The device API of a blasdx descriptor, for calling the block GEMM from your own kernels.
//
// blasdx.compile_kernel (or blasdx.header) generates, for each descriptor you name,
//
//     struct GEMM_config { ... };                  // sizes, types, tiling (codegen)
//     struct GEMM_traits : GEMM_config { ... };    // alignments and block shape
//     using GEMM = blasdx::Gemm<GEMM_traits>;
//
// and GEMM then offers, mirroring cuBLASDx where it fits:
//
//   traits           GEMM::m, n, k, lda, ldb, ldc, a_size, b_size, c_size (elements),
//                    a_value_type, b_value_type, c_value_type, scalar_value_type,
//                    accumulator_value_type, block_dim, max_threads_per_block,
//                    shared_memory_size (A + B + C), shared_memory_size_ab (A + B), swizzled
//   shared memory    GEMM::slice_shared_memory(smem) -> {a, b, c}, slice_shared_memory_ab,
//                    GEMM::a_index(row, col), b_index(row, col) (element offsets in sA, sB),
//                    GEMM::shared_fence() (after writing sA / sB yourself)
//   copies           GEMM::load_a / load_b / load_c (global -> shared), GEMM::store_c
//                    (shared -> global; any element type shaped like C), GEMM::copy_wait()
//   shared-memory    GEMM::execute(alpha, sA, sB, beta, sC [, a_op, b_op, c_load_op, c_store_op])
//   registers        auto acc = GEMM::execute(sA, sB [, a_op, b_op]);
//                    GEMM::execute(sA, sB, acc [, a_op, b_op]);   // acc += A B
//                    acc.size, acc.row(i), acc.col(i), acc.is_valid(i), acc.get(i), acc.set(i, v),
//                    acc.transform(f), acc.for_each(f), acc.store(c), acc.axpby(alpha, beta, c)
//   transforms       blasdx::identity, blasdx::conjugate, blasdx::scale<S>{factor}, any functor
//   streaming        GEMM::load_a / load_b (gX, sX, runs) (zero-filled past runs), store_c(sC, gC, runs),
//                    GEMM::copy_commit(), GEMM::copy_wait<PENDING>()            (bounded_copy.cuh)
//   rows             auto rows = blasdx::rows(acc); rows.count, rows.row(r), rows.transform(f(r, col, v)),
//                    rows.max(out) / sum(out) / reduce / thread_reduce / all_reduce (accumulator_rows.cuh)
//   register A       GEMM::a_registers p(other_acc); GEMM::execute(p, sB, acc)  (wgmma; warpgroup_fusion.cuh)
//   asynchronous     GEMM::execute_async(sA, sB, acc) / (p, sB, acc), GEMM::wait<PENDING>(acc [, p])  (wgmma)
//   stage barriers   blasdx::stage_barrier: init, arrive, arrive_after_copies, wait(phase);
//                    blasdx::warpgroup_turns: start, take, pass, finish  (stage_barrier.cuh)
//
// Shared-memory matrices use the descriptor's arrangement and leading dimensions
// (GEMM::lda ...) and start on 16-byte boundaries (slice_shared_memory gives that). sm_90a
// plans that run on wgmma (GEMM::swizzled) keep sA and sB as swizzled K-panels instead
// (wgmma.cuh), on 1024-byte boundaries that slice_shared_memory finds inside the block it is
// given; a_index / b_index address either layout, and C stays plain. Load transforms on those
// plans: none (or conjugate, nothing for real types) runs wgmma from shared memory; a_op alone
// runs wgmma with A through registers (the transform applied on the way in); any b_op runs
// mma.sync over the panels (wgmma reads B only from shared memory, which stays unchanged).
// The GEMM runs on the first max_threads_per_block threads of the block; a larger block is
// fine, the extra threads skip the GEMM (they still must reach every __syncthreads()).
// Nothing here synchronises on its own except copy_wait(): call __syncthreads() between
// writing shared memory and a GEMM reading it, and between a GEMM writing sC and readers.
#pragma once

#include "block_gemm.cuh"
#include "bounded_copy.cuh"
#include "copy.cuh"
#include "types.cuh"

namespace blasdx {

// ---- load / store transforms ------------------------------------------------------------------
//
// A transform takes one element and returns an element of the same type: a_op sees A
// elements as they leave shared memory, c_store_op sees C elements before they are stored.
// identity (block_gemm.cuh) changes nothing; any functor or lambda works the same way.

// The complex conjugate (real types pass through unchanged).
struct conjugate {
    template <class T> __device__ __forceinline__ T operator()(const T& v) const { return v; }
    template <class T> __device__ __forceinline__ complex<T> operator()(const complex<T>& v) const {
        return {v.x, negate(v.y)};
    }
};

namespace detail {

// v in the compute type S (float, double or int). fp8 has its own overloads: convert<> is
// defined before fp8.cuh can add to it.
template <class S, class T> __device__ __forceinline__ S widen_to(const T& v) { return convert<S>::from(v); }
template <class S, class T> __device__ __forceinline__ T narrow_from(S v) { return convert<S>::template to<T>(v); }

#ifdef __CUDA_FP8_TYPES_EXIST__
template <class S> __device__ __forceinline__ S widen_to(const __nv_fp8_e4m3& v) { return S(static_cast<float>(v)); }
template <class S> __device__ __forceinline__ S widen_to(const __nv_fp8_e5m2& v) { return S(static_cast<float>(v)); }
template <> __device__ __forceinline__ __nv_fp8_e4m3 narrow_from<float, __nv_fp8_e4m3>(float v) {
    return __nv_fp8_e4m3(v);
}
template <> __device__ __forceinline__ __nv_fp8_e5m2 narrow_from<float, __nv_fp8_e5m2>(float v) {
    return __nv_fp8_e5m2(v);
}
#endif

}  // namespace detail

// Multiplication by a factor, computed in S (float, double or int) and rounded back once.
template <class S>
struct scale {
    S factor;
    template <class T> __device__ __forceinline__ T operator()(const T& v) const {
        return detail::narrow_from<S, T>(factor * detail::widen_to<S>(v));
    }
    template <class T> __device__ __forceinline__ complex<T> operator()(const complex<T>& v) const {
        return {(*this)(v.x), (*this)(v.y)};
    }
};

// ---- helpers ----------------------------------------------------------------------------------

namespace detail {

// Linear index of the calling thread in its block.
__device__ __forceinline__ int thread_id() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

// Widest copy (bytes, at most 16) that the alignment allows and that divides every extent
// (in elements); the same rule as blasdx.heuristics.vector_bytes.
__host__ __device__ constexpr int copy_width(int alignment, int element, int inner, int ld_from, int ld_to) {
    int width = alignment < 16 ? alignment : 16;
    while (width > element &&
           ((inner * element) % width != 0 || (ld_from * element) % width != 0 || (ld_to * element) % width != 0)) {
        width /= 2;
    }
    return width > element ? width : element;
}

// Whether a scalar (alpha, beta) is zero.
template <class S> __device__ __forceinline__ bool is_zero(const S& v) { return v == S(0); }
template <class S> __device__ __forceinline__ bool is_zero(const complex<S>& v) { return v.x == S(0) && v.y == S(0); }

// dst = store_op(alpha * acc + beta * load_op(dst)) in the scalar type S, rounded once to T;
// dst is read only when read_c.
template <class S, class T, class V, class LoadOp, class StoreOp>
__device__ __forceinline__ void axpby_element(T* dst, S alpha, S beta, bool read_c, const V& acc,
                                              const LoadOp& load_op, const StoreOp& store_op) {
    S r = alpha * widen_to<S>(acc);
    if (read_c) r += beta * widen_to<S>(load_op(*dst));
    *dst = store_op(narrow_from<S, T>(r));
}
template <class S, class T, class V, class LoadOp, class StoreOp>
__device__ __forceinline__ void axpby_element(complex<T>* dst, complex<S> alpha, complex<S> beta, bool read_c,
                                              const complex<V>& acc, const LoadOp& load_op,
                                              const StoreOp& store_op) {
    const S ar = widen_to<S>(acc.x), ai = widen_to<S>(acc.y);
    S re = alpha.x * ar - alpha.y * ai;
    S im = alpha.x * ai + alpha.y * ar;
    if (read_c) {
        const complex<T> c = load_op(*dst);
        const S cr = widen_to<S>(c.x), ci = widen_to<S>(c.y);
        re += beta.x * cr - beta.y * ci;
        im += beta.x * ci + beta.y * cr;
    }
    *dst = store_op(complex<T>{narrow_from<S, T>(re), narrow_from<S, T>(im)});
}

// f(row, col, v) when f takes three arguments, else f(v).
template <class F, class V>
__device__ __forceinline__ auto call_transform(F& f, int row, int col, const V& v, int) -> decltype(f(row, col, v)) {
    return f(row, col, v);
}
template <class F, class V>
__device__ __forceinline__ auto call_transform(F& f, int, int, const V& v, long) -> decltype(f(v)) {
    return f(v);
}

template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { using type = T; };

template <class T> struct is_accumulator { static constexpr bool value = false; };

}  // namespace detail

// The wgmma side (warpgroup_gemm.cuh), which the generated prelude includes for wgmma plans only,
// and its fusion pieces (warpgroup_fusion.cuh).
template <class Cfg> struct WarpgroupGemm;
template <class Cfg> struct warpgroup_fragment;
template <class Cfg> struct WarpgroupFusion;
template <class Cfg> struct register_a;

namespace detail {
// Whether T is (a reference to, a const) register_a<...>: matched without instantiating it.
template <class T> struct is_register_a { static constexpr bool value = false; };
template <class T> struct is_register_a<T&> : is_register_a<T> {};
template <class T> struct is_register_a<T&&> : is_register_a<T> {};
template <class T> struct is_register_a<const T> : is_register_a<T> {};
template <class C> struct is_register_a<register_a<C>> { static constexpr bool value = true; };
}  // namespace detail

namespace detail {

// Whether a load transform leaves real elements as they are (then wgmma may read A and B).
template <class Op> struct keeps_real { static constexpr bool value = is_identity<Op>::value; };
template <> struct keeps_real<conjugate> { static constexpr bool value = true; };

// Whether Cfg's plan runs on wgmma (configs without the flag are warp-level ones).
template <class Cfg, class = void> struct uses_wgmma { static constexpr bool value = false; };
template <class Cfg> struct uses_wgmma<Cfg, decltype(void(Cfg::use_wgmma))> {
    static constexpr bool value = Cfg::use_wgmma;
};

// The per-thread registers of the accumulator: wgmma tiles, or the warp-level fragment.
template <class Cfg>
using fragment_of = typename std_conditional<uses_wgmma<Cfg>::value, warpgroup_fragment<Cfg>,
                                             thread_fragment<Cfg>>::type;

__host__ __device__ constexpr int round_up(int value, int multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace detail

// ---- the register accumulator -----------------------------------------------------------------

// Register accumulators above this size (bytes per thread) would spill to local memory.
constexpr int MAX_ACCUMULATOR_BYTES = 512;

// Every output element of the GEMM that the calling thread owns, in registers: element i
// (0 <= i < size) is C(row(i), col(i)) when is_valid(i). Loop over elements with
// `#pragma unroll` (or use for_each / transform, which do): a runtime index puts the whole
// accumulator in local memory.
template <class Cfg> class accumulator_rows;  // accumulator_rows.cuh: its rows, which visit the same elements

template <class Cfg>
class accumulator {
    using fragment_type = detail::fragment_of<Cfg>;
    using shape = typename fragment_type::shape;

  public:
    using value_type = typename shape::value_type;  // accumulator_type, complex<> for complex GEMMs
    using scalar_value_type =
        typename std_conditional<Cfg::is_complex, complex<typename Cfg::scalar_type>, typename Cfg::scalar_type>::type;
    static constexpr int size = shape::SIZE;
    static_assert(int(sizeof(typename shape::item_type)) * shape::ITEMS <= MAX_ACCUMULATOR_BYTES,
                  "the register accumulator of this GEMM does not fit in registers (more than 128 32-bit registers "
                  "per thread): give the descriptor more threads (BlockDim), a smaller Size, or use the "
                  "shared-memory API execute(alpha, sA, sB, beta, sC)");

    // A zero accumulator of the calling thread.
    __device__ __forceinline__ accumulator() : tid_(detail::thread_id()) { clear(); }

    __device__ __forceinline__ void clear() {
#pragma unroll
        for (int i = 0; i < size; ++i) shape::set(frag_.regs, i, value_type{});
    }

    __device__ __forceinline__ int row(int i) const { return shape::row(tid_, i); }
    __device__ __forceinline__ int col(int i) const { return shape::col(tid_, i); }
    // Whether element i is a real element of C (partial tiles and idle threads hold padding).
    __device__ __forceinline__ bool is_valid(int i) const { return shape::valid(tid_, i); }
    __device__ __forceinline__ value_type get(int i) const { return shape::get(frag_.regs, i); }
    __device__ __forceinline__ void set(int i, const value_type& v) { shape::set(frag_.regs, i, v); }

    // v = f(v) or v = f(row, col, v) for every valid element, e.g. a bias and an activation.
    template <class F> __device__ __forceinline__ void transform(F f) {
        visit([&](int i, int r, int c) { set(i, detail::call_transform(f, r, c, get(i), 0)); });
    }

    // f(row, col, value) for every valid element, e.g. to write them anywhere or reduce them.
    template <class F> __device__ __forceinline__ void for_each(F f) const {
        visit([&](int i, int r, int c) { f(r, c, get(i)); });
    }

    // C = alpha * acc + beta * C into global or shared memory, in C's arrangement with leading
    // dimension ld, computed in the scalar type and rounded once to T (C's type or any other
    // blasdx type, e.g. __half for a float accumulator). C is not read when beta == 0.
    template <class T, class StoreOp = identity>
    __device__ __forceinline__ void axpby(scalar_value_type alpha, scalar_value_type beta, T* c, int ld = Cfg::ldc,
                                          const StoreOp& store_op = StoreOp{}) const {
        const bool read_c = !detail::is_zero(beta);
        visit([&](int i, int r, int cc) {
            T* dst = c + (Cfg::c_row_major ? i64(r) * ld + cc : r + i64(cc) * ld);
            detail::axpby_element(dst, alpha, beta, read_c, get(i), identity{}, store_op);
        });
    }

    // C = acc (converted to T), in C's arrangement with leading dimension ld.
    template <class T, class StoreOp = identity>
    __device__ __forceinline__ void store(T* c, int ld = Cfg::ldc, const StoreOp& store_op = StoreOp{}) const {
        axpby(scalar_value_type{1}, scalar_value_type{}, c, ld, store_op);
    }

    // The raw registers and the owning thread, for BlockGemm / WarpgroupGemm::accumulate.
    __device__ __forceinline__ fragment_type& fragment() { return frag_; }
    __device__ __forceinline__ const fragment_type& fragment() const { return frag_; }
    __device__ __forceinline__ int thread() const { return tid_; }

  private:
    friend class accumulator_rows<Cfg>;  // walks the same elements, rows as slots

    // f(i, row, col) for every valid element i. Coordinates are a per-item base plus a
    // compile-time offset, and whole tiles need no bounds checks, so this unrolls to straight
    // code with the index arithmetic done once per item.
    template <class F> __device__ __forceinline__ void visit(F&& f) const {
        if (!shape::active(tid_)) return;
#pragma unroll
        for (int t = 0; t < shape::ITEMS; ++t) {
            if (!shape::item_exists(tid_, t)) continue;
            const int r0 = shape::row_base(tid_, t), c0 = shape::col_base(tid_, t);
#pragma unroll
            for (int e = 0; e < shape::PER_ITEM; ++e) {
                const int r = r0 + shape::row_offset(e), c = c0 + shape::col_offset(e);
                if ((shape::FULL_M || r < Cfg::m) && (shape::FULL_N || c < Cfg::n)) f(t * shape::PER_ITEM + e, r, c);
            }
        }
    }

    fragment_type frag_;
    int tid_;
};

namespace detail {
template <class Cfg> struct is_accumulator<accumulator<Cfg>> { static constexpr bool value = true; };
}  // namespace detail

// ---- the GEMM ---------------------------------------------------------------------------------

// Cfg: the generated config struct plus alignment_a/b/c (bytes) and block_dim_x/y/z.
template <class Cfg>
struct Gemm {
    using engine = BlockGemm<Cfg>;
    using warpgroup_engine = WarpgroupGemm<Cfg>;  // used only when swizzled

    // -- types
    using a_value_type = typename Cfg::a_type;
    using b_value_type = typename Cfg::b_type;
    using c_value_type = typename Cfg::c_type;
    using accumulator_value_type = typename engine::value_type;
    using scalar_type = typename Cfg::scalar_type;  // one part of alpha and beta
    using scalar_value_type = typename std_conditional<Cfg::is_complex, complex<scalar_type>, scalar_type>::type;
    using accumulator = blasdx::accumulator<Cfg>;
    static constexpr bool is_complex = Cfg::is_complex;

    // -- sizes and layouts (leading dimensions and sizes in elements)
    static constexpr int m = Cfg::m, n = Cfg::n, k = Cfg::k;
    static constexpr bool a_row_major = Cfg::a_row_major, b_row_major = Cfg::b_row_major;
    static constexpr bool c_row_major = Cfg::c_row_major;
    static constexpr int lda = Cfg::lda, ldb = Cfg::ldb, ldc = Cfg::ldc;
    static constexpr int a_outer = Cfg::a_outer, a_inner = Cfg::a_inner;
    static constexpr int b_outer = Cfg::b_outer, b_inner = Cfg::b_inner;
    static constexpr int c_outer = c_row_major ? m : n, c_inner = c_row_major ? n : m;
    static constexpr int a_size = lda * a_outer, b_size = ldb * b_outer, c_size = ldc * c_outer;
    static constexpr int alignment_a = Cfg::alignment_a, alignment_b = Cfg::alignment_b;
    static constexpr int alignment_c = Cfg::alignment_c;
    // sA and sB in wgmma's swizzled panels (sm_90a plans that run on wgmma), else plain.
    static constexpr bool swizzled = detail::uses_wgmma<Cfg>::value;

    // -- threads
    static constexpr int max_threads_per_block = Cfg::threads;
    static constexpr dim3 block_dim = dim3(Cfg::block_dim_x, Cfg::block_dim_y, Cfg::block_dim_z);
    static_assert(Cfg::block_dim_x * Cfg::block_dim_y * Cfg::block_dim_z == Cfg::threads,
                  "block_dim must hold exactly the GEMM's threads");

    // -- shared memory: A, B, C one after another, each on a 16-byte boundary; swizzled A and B
    // are dense panels on 1024-byte boundaries (the swizzle repeats every 1024 bytes and wgmma
    // applies it to absolute addresses), counted from the first such boundary of the block:
    // the sizes include the shared_memory_slack that finding it may skip.
    static constexpr int shared_alignment = swizzled ? 1024 : 16;
    static constexpr int shared_memory_slack = shared_alignment - 16;
    static constexpr int shared_a_bytes = (swizzled ? a_outer * a_inner : a_size) * int(sizeof(a_value_type));
    static constexpr int shared_b_bytes = (swizzled ? b_outer * b_inner : b_size) * int(sizeof(b_value_type));
    static constexpr int shared_a_offset = 0;
    static constexpr int shared_b_offset = detail::round_up(shared_a_bytes, shared_alignment);
    static constexpr int shared_c_offset = detail::round_up(shared_b_offset + shared_b_bytes, 16);
    static constexpr int shared_memory_size =
        shared_memory_slack + shared_c_offset + c_size * int(sizeof(c_value_type));
    static constexpr int shared_memory_size_ab = shared_memory_slack + shared_b_offset + shared_b_bytes;

    // Offset in elements of A(row, col) (row < m, col < k) in sA, and of B(row, col) in sB:
    // the descriptor's arrangement and leading dimension, or the swizzled panels.
    __host__ __device__ static constexpr int a_index(int row, int col) {
        if constexpr (swizzled) {
            return warpgroup_engine::a_index(row, col);
        } else {
            return a_row_major ? row * lda + col : row + col * lda;
        }
    }
    __host__ __device__ static constexpr int b_index(int row, int col) {
        if constexpr (swizzled) {
            return warpgroup_engine::b_index(row, col);
        } else {
            return b_row_major ? row * ldb + col : row + col * ldb;
        }
    }

    // Makes this thread's ordinary stores to sA / sB visible to wgmma (the async proxy); call it
    // after filling them yourself, before the __syncthreads() ahead of execute. A no-op unless swizzled.
    __device__ __forceinline__ static void shared_fence() {
        if constexpr (swizzled) warpgroup_engine::proxy_fence();
    }

    struct shared_buffers {
        a_value_type* a;
        b_value_type* b;
        c_value_type* c;
    };
    struct shared_buffers_ab {
        a_value_type* a;
        b_value_type* b;
    };

    // sA, sB, sC in a shared-memory block of shared_memory_size bytes (16-byte aligned).
    __device__ __forceinline__ static shared_buffers slice_shared_memory(void* smem) {
        auto* base = aligned_base(smem);
        return {reinterpret_cast<a_value_type*>(base + shared_a_offset),
                reinterpret_cast<b_value_type*>(base + shared_b_offset),
                reinterpret_cast<c_value_type*>(base + shared_c_offset)};
    }
    // sA, sB only (shared_memory_size_ab bytes): what the register API needs.
    __device__ __forceinline__ static shared_buffers_ab slice_shared_memory_ab(void* smem) {
        auto* base = aligned_base(smem);
        return {reinterpret_cast<a_value_type*>(base + shared_a_offset),
                reinterpret_cast<b_value_type*>(base + shared_b_offset)};
    }

    // Linear index of the calling thread in its block.
    __device__ __forceinline__ static int thread_id() { return detail::thread_id(); }

    // -- copies. Global matrices are in the descriptor's arrangement with leading dimension
    // LDG (default: the descriptor's); both pointers must meet the descriptor's Alignment.
    // Loads are asynchronous on sm_80+: call copy_wait() before using the data.

    template <int LDG = lda>
    __device__ __forceinline__ static void load_a(const a_value_type* gA, a_value_type* sA) {
        const int tid = thread_id();
        if constexpr (swizzled) {
            constexpr int W = detail::copy_width(alignment_a, int(sizeof(a_value_type)), a_inner, LDG, a_inner);
            if (takes_part<max_threads_per_block>(tid)) {
                warpgroup_engine::template load_a<LDG, W>(sA, gA, tid);
            }
        } else {
            constexpr int W = detail::copy_width(alignment_a, int(sizeof(a_value_type)), a_inner, LDG, lda);
            if (takes_part<max_threads_per_block>(tid)) {
                copy_matrix_to_shared<a_value_type, a_outer, a_inner, LDG, lda, W, max_threads_per_block>(sA, gA, tid);
            }
        }
    }
    template <int LDG = ldb>
    __device__ __forceinline__ static void load_b(const b_value_type* gB, b_value_type* sB) {
        const int tid = thread_id();
        if constexpr (swizzled) {
            constexpr int W = detail::copy_width(alignment_b, int(sizeof(b_value_type)), b_inner, LDG, b_inner);
            if (takes_part<max_threads_per_block>(tid)) {
                warpgroup_engine::template load_b<LDG, W>(sB, gB, tid);
            }
        } else {
            constexpr int W = detail::copy_width(alignment_b, int(sizeof(b_value_type)), b_inner, LDG, ldb);
            if (takes_part<max_threads_per_block>(tid)) {
                copy_matrix_to_shared<b_value_type, b_outer, b_inner, LDG, ldb, W, max_threads_per_block>(sB, gB, tid);
            }
        }
    }
    // C, or any matrix shaped like C (T: e.g. __half results of a float GEMM staged in shared
    // memory with leading dimension LDS).
    template <int LDG = ldc, int LDS = ldc, class T = c_value_type>
    __device__ __forceinline__ static void load_c(const T* gC, T* sC) {
        constexpr int W = detail::copy_width(alignment_c, int(sizeof(T)), c_inner, LDG, LDS);
        const int tid = thread_id();
        if (takes_part<max_threads_per_block>(tid)) {
            copy_matrix_to_shared<T, c_outer, c_inner, LDG, LDS, W, max_threads_per_block>(sC, gC, tid);
        }
    }
    // sC -> gC (synchronous); call __syncthreads() first so that sC is complete.
    template <int LDG = ldc, int LDS = ldc, class T = c_value_type>
    __device__ __forceinline__ static void store_c(const T* sC, T* gC) {
        constexpr int W = detail::copy_width(alignment_c, int(sizeof(T)), c_inner, LDS, LDG);
        const int tid = thread_id();
        if (takes_part<max_threads_per_block>(tid)) {
            copy_matrix_to_global<T, c_outer, c_inner, LDS, LDG, W, max_threads_per_block>(gC, sC, tid);
        }
    }
    // Wait for this thread's loads, then for the whole block (swizzled: fenced for wgmma too).
    __device__ __forceinline__ static void copy_wait() {
        copy_wait_all();
        shared_fence();
        __syncthreads();
    }

    // -- streaming tiles (kernels/blasdx/bounded_copy.cuh): loads of a tile of which only the
    // first `runs` runs (rows of a row-major matrix, columns of a column-major one) exist in
    // global memory, the rest zero-filled; stores of those runs only. copy_commit() closes this
    // thread's loads issued so far as one group; copy_wait<PENDING>() waits until at most PENDING
    // groups are in flight, then fences for wgmma and syncs the block: the next tile's loads stay
    // in flight while the current one is multiplied.
    template <int LDG = lda>
    __device__ __forceinline__ static void load_a(const a_value_type* gA, a_value_type* sA, int runs) {
        const int tid = thread_id();
        if constexpr (swizzled) {
            constexpr int W = detail::copy_width(alignment_a, int(sizeof(a_value_type)), a_inner, LDG, a_inner);
            WarpgroupFusion<Cfg>::template load_a<LDG, W>(sA, gA, runs, tid);
        } else {
            constexpr int W = detail::copy_width(alignment_a, int(sizeof(a_value_type)), a_inner, LDG, lda);
            if (takes_part<max_threads_per_block>(tid)) {
                copy_matrix_to_shared_bounded<a_value_type, a_outer, a_inner, LDG, lda, W, max_threads_per_block>(
                    sA, gA, runs, tid);
            }
        }
    }
    template <int LDG = ldb>
    __device__ __forceinline__ static void load_b(const b_value_type* gB, b_value_type* sB, int runs) {
        const int tid = thread_id();
        if constexpr (swizzled) {
            constexpr int W = detail::copy_width(alignment_b, int(sizeof(b_value_type)), b_inner, LDG, b_inner);
            WarpgroupFusion<Cfg>::template load_b<LDG, W>(sB, gB, runs, tid);
        } else {
            constexpr int W = detail::copy_width(alignment_b, int(sizeof(b_value_type)), b_inner, LDG, ldb);
            if (takes_part<max_threads_per_block>(tid)) {
                copy_matrix_to_shared_bounded<b_value_type, b_outer, b_inner, LDG, ldb, W, max_threads_per_block>(
                    sB, gB, runs, tid);
            }
        }
    }
    template <int LDG = ldc, int LDS = ldc, class T = c_value_type>
    __device__ __forceinline__ static void store_c(const T* sC, T* gC, int runs) {
        constexpr int W = detail::copy_width(alignment_c, int(sizeof(T)), c_inner, LDS, LDG);
        const int tid = thread_id();
        if (takes_part<max_threads_per_block>(tid)) {
            copy_matrix_to_global_bounded<T, c_outer, c_inner, LDS, LDG, W, max_threads_per_block>(gC, sC, runs, tid);
        }
    }
    __device__ __forceinline__ static void copy_commit() { blasdx::copy_commit(); }
    template <int PENDING>
    __device__ __forceinline__ static void copy_wait() {
        blasdx::copy_wait<PENDING>();
        shared_fence();
        __syncthreads();
    }

    // -- shared-memory API: sC = c_store_op(alpha * A B + beta * c_load_op(sC)), with
    // a_op / b_op applied to A / B elements as they are read. sC is not read when beta == 0.
    template <class AOp = identity, class BOp = identity, class CLoadOp = identity, class CStoreOp = identity>
    __device__ __forceinline__ static void execute(scalar_value_type alpha, const a_value_type* sA,
                                                   const b_value_type* sB, scalar_value_type beta, c_value_type* sC,
                                                   const AOp& a_op = AOp{}, const BOp& b_op = BOp{},
                                                   const CLoadOp& c_load_op = CLoadOp{},
                                                   const CStoreOp& c_store_op = CStoreOp{}) {
        const int tid = thread_id();
        if (!takes_part<max_threads_per_block>(tid)) return;
        const bool read_c = !detail::is_zero(beta);
        auto epilogue = [&](int row, int col, const accumulator_value_type& value) {
            c_value_type* dst = sC + (c_row_major ? row * ldc + col : row + col * ldc);
            detail::axpby_element(dst, alpha, beta, read_c, value, c_load_op, c_store_op);
        };
        if constexpr (!swizzled) {
            engine::template run<lda, ldb>(sA, sB, tid, epilogue, a_op, b_op);
        } else if constexpr (wgmma_reads<AOp, BOp>()) {
            warpgroup_engine::run(sA, sB, tid, epilogue);
        } else if constexpr (wgmma_reads_b<BOp>()) {
            warpgroup_engine::run_rs(sA, sB, tid, epilogue, a_op);
        } else {
            warpgroup_engine::run_mma(sA, sB, tid, epilogue, a_op, b_op);
        }
    }

    // -- register API: acc += op(A) op(B) for the elements this thread owns.
    template <class AOp = identity, class BOp = identity>
    __device__ __forceinline__ static void execute(const a_value_type* sA, const b_value_type* sB, accumulator& acc,
                                                   const AOp& a_op = AOp{}, const BOp& b_op = BOp{}) {
        if constexpr (!swizzled) {
            engine::template accumulate<lda, ldb>(acc.fragment(), sA, sB, acc.thread(), a_op, b_op);
        } else if constexpr (wgmma_reads<AOp, BOp>()) {
            warpgroup_engine::accumulate(acc.fragment(), sA, sB, acc.thread());
        } else if constexpr (wgmma_reads_b<BOp>()) {
            warpgroup_engine::accumulate_rs(acc.fragment(), sA, sB, acc.thread(), a_op);
        } else {
            warpgroup_engine::accumulate_mma(acc.fragment(), sA, sB, acc.thread(), a_op, b_op);
        }
    }

    // -- A in registers (wgmma plans, 16-bit A; kernels/blasdx/warpgroup_fusion.cuh): the A of
    // the tiles this thread's warpgroup computes, built from another GEMM's accumulator
    // (`GEMM::a_registers p(scores);`), and acc += A B with it.
    // (templates enabled for register_a only: a plain overload would make every execute(sA, sB, acc)
    // call check whether a pointer converts to register_a<Cfg>, instantiating it for any plan)
    using a_registers = register_a<Cfg>;
    template <class A, class = typename detail::enable_if<detail::is_register_a<A>::value>::type>
    __device__ __forceinline__ static void execute(A&& a, const b_value_type* sB, accumulator& acc) {
        static_assert(swizzled, "A from registers runs on wgmma: an sm_90a descriptor whose plan is wgmma");
        WarpgroupFusion<Cfg>::template accumulate<true>(acc.fragment(), a, sB, acc.thread());
    }

    // -- asynchronous register API (wgmma plans): acc += A B issued as one group of this thread's
    // warpgroup, returning at once; wait<PENDING>(acc [, a]) waits until at most PENDING groups are
    // in flight (groups complete in issue order). Until then, leave acc, the register A and the
    // shared memory the group reads alone; other work (a softmax on another accumulator) overlaps it.
    __device__ __forceinline__ static void execute_async(const a_value_type* sA, const b_value_type* sB,
                                                         accumulator& acc) {
        static_assert(swizzled, "asynchronous execution runs on wgmma: an sm_90a descriptor whose plan is wgmma");
        WarpgroupFusion<Cfg>::template accumulate<false>(acc.fragment(), sA, sB, acc.thread());
    }
    template <class A, class = typename detail::enable_if<detail::is_register_a<A>::value>::type>
    __device__ __forceinline__ static void execute_async(A& a, const b_value_type* sB, accumulator& acc) {
        static_assert(swizzled, "asynchronous execution runs on wgmma: an sm_90a descriptor whose plan is wgmma");
        WarpgroupFusion<Cfg>::template accumulate<false>(acc.fragment(), a, sB, acc.thread());
    }
    template <int PENDING>
    __device__ __forceinline__ static void wait(accumulator& acc) {
        static_assert(swizzled, "asynchronous execution runs on wgmma: an sm_90a descriptor whose plan is wgmma");
        WarpgroupFusion<Cfg>::template wait<PENDING>(acc.fragment());
    }
    template <int PENDING, class A, class = typename detail::enable_if<detail::is_register_a<A>::value>::type>
    __device__ __forceinline__ static void wait(accumulator& acc, A& a) {
        wait<PENDING>(acc);
        WarpgroupFusion<Cfg>::fence_registers(a);
    }

    // A new accumulator holding op(A) op(B).
    template <class AOp = identity, class BOp = identity,
              class = typename detail::enable_if<!detail::is_accumulator<AOp>::value>::type>
    __device__ __forceinline__ static accumulator execute(const a_value_type* sA, const b_value_type* sB,
                                                          const AOp& a_op = AOp{}, const BOp& b_op = BOp{}) {
        accumulator acc;
        execute(sA, sB, acc, a_op, b_op);
        return acc;
    }

  private:
    // wgmma reads A and B straight from shared memory when the load transforms leave real
    // elements unchanged. Otherwise it still reads B there when b_op does (A then goes through
    // registers, a_op applied on the way); any other b_op takes mma.sync over the same panels.
    template <class AOp, class BOp> __host__ __device__ static constexpr bool wgmma_reads() {
        return detail::keeps_real<AOp>::value && detail::keeps_real<BOp>::value;
    }
    template <class BOp> __host__ __device__ static constexpr bool wgmma_reads_b() {
        return detail::keeps_real<BOp>::value && warpgroup_engine::REGISTER_A;
    }

    // The first shared_alignment boundary at or after smem (smem itself when plain).
    __device__ __forceinline__ static unsigned char* aligned_base(void* smem) {
        auto* base = static_cast<unsigned char*>(smem);
        if constexpr (swizzled) {
            const u32 skip = (shared_alignment - shared_address(base) % shared_alignment) % shared_alignment;
            return base + skip;
        } else {
            return base;
        }
    }
};

}  // namespace blasdx

// The row view of accumulators (blasdx::rows) and the wgmma fusion pieces (register A, bounded
// copies into panels): templates over the types above.
#include "accumulator_rows.cuh"
#include "stage_barrier.cuh"
#include "warpgroup_fusion.cuh"

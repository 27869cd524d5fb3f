// The wgmma side of the device API's fusion pieces (sm_90a): what chains one wgmma GEMM into
// the next without leaving registers, and streams tiles of a longer matrix through the panels.
//
// * row_slots of a wgmma accumulator (accumulator_rows.cuh): item t of a thread is one
//   64 x TILE_N tile; its rows lane/4 and lane/4 + 8 of warp (tid / 32) % 4 are slots 2t, 2t + 1.
// * register_a<Cfg>: the A operand of a 16-bit wgmma GEMM in registers, built from the
//   accumulator of an earlier GEMM (e.g. P = softmax(S) from the scores S of Q K^T, the A of
//   P V). The f32 accumulator of an m64nN tile holds, per 8 columns, the m16n8 C fragment; two
//   neighbouring 8-column blocks are exactly the m16n8k16 A fragment that wgmma takes as its
//   register A (PTX ISA 9.7.15.5.1.1: warp w holds rows 16w..16w+15 in both), so element pairs
//   are rounded and packed, with no data moving between threads.
// * WarpgroupFusion<Cfg>: wgmma with that register A over B in the panels, and copies of tiles
//   that reach past the end of the matrix (zero-filled) into the panels.
#pragma once

#include "accumulator_rows.cuh"
#include "bounded_copy.cuh"
#include "types.cuh"
#include "wgmma.cuh"

namespace blasdx {

template <class Cfg> struct WarpgroupGemm;             // warpgroup_gemm.cuh, which the prelude of
template <class Cfg> struct warpgroup_fragment_shape;  // wgmma plans includes after this header

namespace detail {

template <class Cfg> struct row_slots<warpgroup_fragment_shape<Cfg>> {
    using shape = warpgroup_fragment_shape<Cfg>;
    static constexpr bool KNOWN = true;
    static constexpr bool WHOLE_ROWS = shape::TILE_N == shape::n;  // one tile spans N
    static constexpr int COUNT = shape::ITEMS * 2;
    __host__ __device__ static constexpr int slot(int t, int e) { return 2 * t + (e % 4) / 2; }
    __device__ __forceinline__ static int row(int tid, int s) { return shape::row_base(tid, s / 2) + 8 * (s % 2); }
};

// Two floats rounded to one 32-bit word of two 16-bit values (the first in the low half).
template <class T> __device__ __forceinline__ u32 pack_pair(float lo, float hi);
template <> __device__ __forceinline__ u32 pack_pair<__half>(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const u32*>(&h);
}
template <> __device__ __forceinline__ u32 pack_pair<__nv_bfloat16>(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const u32*>(&h);
}

}  // namespace detail

// The A operand (m x k) of the wgmma GEMM Cfg for the tiles the calling thread's warpgroup
// computes, in registers: per item (a 64-row tile of C) and K step of 16, the four 32-bit words
// of wgmma's register A.
template <class Cfg>
struct register_a {
    static_assert(detail::uses_wgmma<Cfg>::value,
                  "A from registers runs on wgmma: an sm_90a descriptor (bx.SM(90, arch_specific=True)) whose plan "
                  "is wgmma");
    using a_type = typename Cfg::a_type;
    using shape = warpgroup_fragment_shape<Cfg>;
    static constexpr int ITEMS = shape::ITEMS, STEPS = Cfg::k / 16;
    static_assert(sizeof(a_type) == 2, "a register A built from an accumulator is 16-bit (f16 or bf16)");
    static_assert(Cfg::wgmma_n == Cfg::n,
                  "a GEMM with A in registers needs one tile across N per 64 rows (desc.plan.warpgroup_n == n)");
    u32 regs[ITEMS][STEPS][4];

    register_a() = default;  // unset: assign one built from an accumulator before use

    // A = the accumulator `source` of GEMM Src (m x k of this GEMM, the same threads), rounded
    // to a_type. Src's tiles must span its N (= this GEMM's k) so that a thread holds whole
    // 16-column K steps of its rows.
    template <class Src>
    __device__ __forceinline__ explicit register_a(const accumulator<Src>& source) {
        using src_shape = warpgroup_fragment_shape<Src>;
        static_assert(detail::uses_wgmma<Src>::value, "register A comes from the accumulator of a wgmma GEMM");
        static_assert(Src::m == Cfg::m && Src::n == Cfg::k && Src::threads == Cfg::threads,
                      "register A of an m x k GEMM comes from an m x k accumulator on the same threads");
        static_assert(Src::wgmma_n == Src::n, "the source accumulator needs one tile across its N");
        static_assert(src_shape::ITEMS == ITEMS, "the source holds the same tiles");
        const auto& frag = source.fragment();
#pragma unroll
        for (int t = 0; t < ITEMS; ++t)
#pragma unroll
            for (int s = 0; s < STEPS; ++s)
#pragma unroll
                for (int w = 0; w < 4; ++w) {
                    regs[t][s][w] = detail::pack_pair<a_type>(float(frag.regs[t][8 * s + 2 * w]),
                                                             float(frag.regs[t][8 * s + 2 * w + 1]));
                }
    }
};

template <class Cfg>
struct WarpgroupFusion {
    using W = WarpgroupGemm<Cfg>;
    using op = typename W::op;
    using reg_type = typename W::reg_type;
    using b_type = typename Cfg::b_type;
    static_assert(op::REGISTER_A, "this wgmma type has no register-A form");

    // acc += A B for every tile thread tid owns, A in registers, B through its descriptors:
    // every K step issued back to back (A never changes) as one group. WAIT: returns once it has
    // completed; else at once (wait<PENDING>(frag, a) before touching acc or a again).
    template <bool WAIT, class Fragment>
    __device__ static void accumulate(Fragment& frag, register_a<Cfg>& a, const b_type* sB, int tid) {
        const u32 b_base = shared_address(sB);
        fence_registers(a);
        W::template issue_group<WAIT>(frag, tid, [&](reg_type* acc, int t, int tile) {
            const int n0 = W::tile_n0(tile);
#pragma unroll
            for (int s = 0; s < register_a<Cfg>::STEPS; ++s) issue(acc, a.regs[t][s], b_base, n0, 16 * s);
        });
    }

    // acc += A B with A and B in the panels, issued as one group; WAIT as above.
    template <bool WAIT, class Fragment>
    __device__ static void accumulate(Fragment& frag, const typename Cfg::a_type* sA, const b_type* sB, int tid) {
        W::template accumulate<WAIT>(frag, sA, sB, tid);
    }

    // Waits until at most PENDING of this warpgroup's wgmma groups are in flight; the registers of
    // frag (and of a register A, whose values must stay put until their group completes) are read
    // or changed only after this point.
    template <int PENDING, class Fragment>
    __device__ __forceinline__ static void wait(Fragment& frag) {
        W::template wait<PENDING>(frag);
    }
    __device__ __forceinline__ static void fence_registers(register_a<Cfg>& a) {
#pragma unroll
        for (int t = 0; t < register_a<Cfg>::ITEMS; ++t)
#pragma unroll
            for (int s = 0; s < register_a<Cfg>::STEPS; ++s)
#pragma unroll
                for (int w = 0; w < 4; ++w) wgmma::fence_operand(a.regs[t][s][w]);
    }

    // Copies of global A / B tiles into the panels, of which only the first `runs` runs exist.
    template <int LDG, int VEC>
    __device__ __forceinline__ static void load_a(typename Cfg::a_type* sA, const typename Cfg::a_type* gA, int runs,
                                                  int tid) {
        static_assert(!W::A_TRANSPOSED, "bounded copies keep the global order (16-bit, or K-major 8-bit)");
        load_panels<typename Cfg::a_type, Cfg::a_outer, Cfg::a_inner, LDG, Cfg::a_panel_bytes, VEC>(
            reinterpret_cast<unsigned char*>(sA), gA, runs, tid);
    }
    template <int LDG, int VEC>
    __device__ __forceinline__ static void load_b(b_type* sB, const b_type* gB, int runs, int tid) {
        static_assert(!W::B_TRANSPOSED, "bounded copies keep the global order (16-bit, or K-major 8-bit)");
        load_panels<b_type, Cfg::b_outer, Cfg::b_inner, LDG, Cfg::b_panel_bytes, VEC>(
            reinterpret_cast<unsigned char*>(sB), gB, runs, tid);
    }

  private:
    // One K step (k0 .. k0 + 16) of the tile at column n0: TILE_N as its binary digits, widest first.
    template <int WIDTH = 256, int DONE = 0>
    __device__ __forceinline__ static void issue(reg_type* acc, const u32* a, u32 b_base, int n0, int k0) {
        if constexpr (WIDTH >= 8) {
            if constexpr ((W::TILE_N & WIDTH) != 0) {
                op::template issue_rs<WIDTH, !W::B_K_MAJOR>(acc + DONE / 2 * int(sizeof(typename W::acc_type)) / 4, a,
                                                            W::b_descriptor(b_base, n0 + DONE, k0));
            }
            issue<WIDTH / 2, DONE + (W::TILE_N & WIDTH)>(acc, a, b_base, n0, k0);
        }
    }

    template <class T, int OUTER, int INNER, int LDG, int PANEL_BYTES, int VEC>
    __device__ __forceinline__ static void load_panels(unsigned char* dst, const T* src, int runs, int tid) {
        static_assert(VEC % int(sizeof(T)) == 0 && 16 % VEC == 0, "pieces stay inside a 16-byte chunk");
        using layout = wgmma::panels<T, OUTER, INNER, PANEL_BYTES>;
        constexpr int V = VEC / int(sizeof(T)), PER_ROW = INNER / V, THREADS = Cfg::threads;
        constexpr int STEP = THREADS / PER_ROW;  // rows one pass of the block covers
        if (!takes_part<THREADS>(tid)) return;
        if constexpr (THREADS % PER_ROW == 0 && STEP % 8 == 0 && OUTER % STEP == 0) {
            // Each thread keeps one column and steps down STEP rows a pass: the swizzle repeats
            // every 8 rows, so every pass is the first one's addresses plus constants (a tile of K
            // or V costs one predicate and one copy per piece, not a division and a swizzle each).
            const int r0 = unsigned(tid) / PER_ROW, c = (unsigned(tid) % PER_ROW) * V;
            unsigned char* d = dst + layout::offset(r0, c);
            const T* s = src + i64(r0) * LDG + c;
#pragma unroll
            for (int t = 0; t < OUTER / STEP; ++t) {
                const bool in = r0 + t * STEP < runs;
                copy_to_shared_or_zero<VEC>(d + t * STEP * PANEL_BYTES, in ? s + i64(t) * STEP * LDG : src, in);
            }
        } else {
            for_each_piece<OUTER, INNER, V, THREADS>(tid, [&](int r, int c) {
                const bool in = r < runs;
                copy_to_shared_or_zero<VEC>(dst + layout::offset(r, c), in ? src + i64(r) * LDG + c : src, in);
            });
        }
    }
};

}  // namespace blasdx

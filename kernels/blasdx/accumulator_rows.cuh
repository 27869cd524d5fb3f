// The rows of a register accumulator, as the calling thread holds them: what a row-wise
// operation between two GEMMs (a softmax, a row normalisation, a running maximum) walks.
//
//     auto rows = blasdx::rows(acc);          // a view; acc stays where it is
//     float m[rows.count];                    // one value per row this thread holds
//     rows.max(m);                            // the maximum of each whole row of C
//     rows.transform([&](int r, int col, float v) { return exp2f(v - m[r]); });
//
// Slot r (0 <= r < count) is one row of C this thread holds part of (rows.row(r) says which).
// Each row of C lies in one warp: on tensor-core plans the lanes of a quad (lane / 4) share it,
// so max / sum / reduce combine the thread's own elements, then the quad's, with two shuffles.
// That needs every row whole inside one warp: a plan whose tiles cover all of N at once
// (wgmma: desc.plan.warpgroup_n == n; mma.sync: warp_n atoms * 8 >= n). Two accumulators of
// GEMMs with the same m, the same threads and such plans have the same slots (row(r) agrees),
// so per-row values computed on one apply to the other: the running maximum of a softmax
// found on the scores rescales the output accumulator of the next GEMM.
//
// All threads of each warp of the GEMM call max / sum / reduce / all_reduce together (they
// shuffle); rows of padding (past C, or of absent tiles) take the identity of the reduction.
#pragma once

#include "block_gemm.cuh"
#include "types.cuh"

// Included from api.cuh, after blasdx::accumulator.

namespace blasdx {

namespace detail {

// How the elements of a fragment shape map to row slots: slot(t, e) of element e of item t,
// the C row of slot s for thread tid, COUNT slots per thread, whether rows are whole inside one
// warp's quads (WHOLE_ROWS). Specialised for the shapes whose element layout is known: mma.sync
// m16n8 warp tiles here, wgmma tiles in warpgroup_fusion.cuh.
template <class Shape> struct row_slots {
    static constexpr bool KNOWN = false, WHOLE_ROWS = false;
    static constexpr int COUNT = 1;
};

// mma.sync with an m16n8 atom (C fragment: row lane/4 + 8*(e/2), the quad sharing a row): a
// warp tile of FM x FN atoms gives 2 * FM rows per item.
template <class Cfg> struct row_slots<fragment_shape<Cfg, true>> {
    using shape = fragment_shape<Cfg, true>;
    using atom = typename Cfg::atom;
    static constexpr bool KNOWN = atom::M == 16 && atom::N == 8 && atom::C_ELEMS == 4 && !tile_order<Cfg>::DMMA &&
                                  !Cfg::is_complex;
    static constexpr bool WHOLE_ROWS = shape::TILES == shape::TILES_M;  // one warp tile spans N
    static constexpr int FM = shape::FM, FN = shape::FN, CE = shape::CE;
    static constexpr int COUNT = shape::ITEMS * FM * 2;
    __host__ __device__ static constexpr int slot(int t, int e) {
        return (t * FM + e / (FN * CE)) * 2 + (e % CE) / 2;
    }
    __device__ __forceinline__ static int row(int tid, int s) {
        return shape::row_base(tid, s / (2 * FM)) + 16 * ((s / 2) % FM) + 8 * (s % 2);
    }
};

template <class Op> struct reduction_identity;

}  // namespace detail

template <class Cfg> class accumulator;

// A view of the rows of a register accumulator (blasdx::accumulator<Cfg>) held by the calling thread.
template <class Cfg>
class accumulator_rows {
    using Acc = accumulator<Cfg>;
    using shape = typename detail::fragment_of<Cfg>::shape;
    using slots = detail::row_slots<shape>;

  public:
    using value_type = typename Acc::value_type;
    static_assert(slots::KNOWN,
                  "blasdx::rows needs a real GEMM on tensor cores with m16n8 or wgmma tiles (the layout of "
                  "whose accumulator rows is known)");
    static_assert(slots::WHOLE_ROWS,
                  "blasdx::rows needs every row of C inside one warp: a plan whose tiles span all of N "
                  "(wgmma: desc.plan.warpgroup_n == n; mma.sync: warp_n * 8 >= n)");
    // Rows of C this thread holds part of.
    static constexpr int count = slots::COUNT;

    __device__ __forceinline__ explicit accumulator_rows(Acc& acc) : acc_(acc) {}

    // The row of C of slot r (past m for rows of padding).
    __device__ __forceinline__ int row(int r) const { return slots::row(acc_.thread(), r); }

    // v = f(r, col, v) for every element of C this thread holds, r its row slot.
    template <class F> __device__ __forceinline__ void transform(F f) {
        visit([&](int i, int r, int c) { acc_.set(i, f(r, c, acc_.get(i))); });
    }
    // f(r, col, v) for every element of C this thread holds.
    template <class F> __device__ __forceinline__ void for_each(F f) const {
        visit([&](int i, int r, int c) { f(r, c, acc_.get(i)); });
    }

    // out[r] = op over this thread's own elements of row slot r, starting from init.
    template <class Op>
    __device__ __forceinline__ void thread_reduce(value_type (&out)[count], value_type init, Op op) const {
#pragma unroll
        for (int r = 0; r < count; ++r) out[r] = init;
        visit([&](int i, int r, int) { out[r] = op(out[r], acc_.get(i)); });
    }
    // values[r] = op over the lanes that share row slot r (per-thread partial results -> whole rows).
    template <class Op>
    __device__ __forceinline__ static void all_reduce(value_type (&values)[count], Op op) {
#pragma unroll
        for (int r = 0; r < count; ++r) {
            values[r] = op(values[r], __shfl_xor_sync(0xffffffffu, values[r], 1));
            values[r] = op(values[r], __shfl_xor_sync(0xffffffffu, values[r], 2));
        }
    }
    // out[r] = op over the whole row of C of slot r: thread_reduce, then all_reduce.
    template <class Op>
    __device__ __forceinline__ void reduce(value_type (&out)[count], value_type init, Op op) const {
        thread_reduce(out, init, op);
        all_reduce(out, op);
    }
    __device__ __forceinline__ void max(value_type (&out)[count]) const {  // FMNMX for floats
        reduce(out, lowest(), [](value_type a, value_type b) { return larger(a, b); });
    }
    __device__ __forceinline__ void sum(value_type (&out)[count]) const {
        reduce(out, value_type(0), [](value_type a, value_type b) { return a + b; });
    }

  private:
    __device__ __forceinline__ static float lowest_of(float) { return __int_as_float(0xff800000); }  // -infinity
    __device__ __forceinline__ static double lowest_of(double) { return __longlong_as_double(0xfff0000000000000ll); }
    __device__ __forceinline__ static int lowest_of(int) { return -2147483647 - 1; }
    __device__ __forceinline__ static value_type lowest() { return lowest_of(value_type{}); }
    __device__ __forceinline__ static float larger(float a, float b) { return fmaxf(a, b); }
    __device__ __forceinline__ static double larger(double a, double b) { return fmax(a, b); }
    __device__ __forceinline__ static int larger(int a, int b) { return a > b ? a : b; }

    // f(i, slot, col) for every element i of C this thread holds: the accumulator's own walk, the row as its slot
    // (i = t * PER_ITEM + e is a constant once unrolled, and so is the slot).
    template <class F> __device__ __forceinline__ void visit(F&& f) const {
        acc_.visit([&](int i, int, int c) { f(i, slots::slot(i / shape::PER_ITEM, i % shape::PER_ITEM), c); });
    }

    Acc& acc_;
};

// The row view of a register accumulator.
template <class Cfg> __device__ __forceinline__ accumulator_rows<Cfg> rows(accumulator<Cfg>& acc) {
    return accumulator_rows<Cfg>(acc);
}

}  // namespace blasdx

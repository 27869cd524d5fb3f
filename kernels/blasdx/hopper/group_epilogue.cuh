// Epilogue and block scales of the grouped GEMM (group_scheduler.cuh): what differs from the
// single GEMM is that rows stop at the group's end, and that D, Y's scales and (masked layout)
// X's scales have a stride per group.
//
// Rows are in the coordinates of A's tensor map (contiguous: the row of [total, K]; masked:
// the row inside group g's [max_m, K]); element (row, col) of group g is stored at
// d[g * d_group + row * d_row + col * d_col] (contiguous: d_group = 0). Scales are f32:
// * x per row (SCALE_VECTOR): sx[g * sx_group + row * sx_row];
// * y per group and column (SCALE_VECTOR): sy[g * sy_group + col * sy_col];
// * x per 1 x 128 block and y per 128 x 128 block (SCALE_BLOCK): applied at promotion by
//   GroupBlockScales, x[g * x_group + row * x_row + kb * x_col], y[g * y_group + kb * y_row + nb * y_col].
#pragma once

#include "epilogue.cuh"
#include "group_scheduler.cuh"
#include "promotion.cuh"
#include "scaling.cuh"

namespace blasdx {
namespace hopper {

// The pair functor: D = (sx * sy) * acc, as the scalings XS / YS say (SCALE_TENSOR here means none).
// value() gives the final values (the staged store's functor); operator() also stores them.
template <class TC, int XS, int YS>
struct GroupStore {
    TC* d;
    const float* sx;
    const float* sy;
    int n, rows;  // rows: A's row extent (a factor of a row past it is never needed)
    i64 d_row, d_col, d_group, sx_row, sx_group, sy_col, sy_group;
    bool d_pairs;

    __device__ __forceinline__ void value(const Work& w, int row, int col, float& v0, float& v1) const {
        const i64 g = static_cast<const GroupWork&>(w).group;  // the grouped scheduler's units
        if constexpr (XS == SCALE_VECTOR) {
            const float f = __ldg(sx + g * sx_group + min(row, rows - 1) * sx_row);
            v0 *= f;
            v1 *= f;
        }
        if constexpr (YS == SCALE_VECTOR) {
            const float* p = sy + g * sy_group;
            v0 *= __ldg(p + min(col, n - 1) * sy_col);
            v1 *= __ldg(p + min(col + 1, n - 1) * sy_col);
        }
    }

    __device__ __forceinline__ void operator()(const Work& w, int row, int col, float v0, float v1) const {
        const GroupWork& gw = static_cast<const GroupWork&>(w);
        if (row < gw.row_begin || row >= gw.row_end || col >= n) return;
        value(w, row, col, v0, v1);
        store_two(d + gw.group * d_group + row * d_row + col * d_col, v0, v1, d_col, col + 1 < n, d_pairs);
    }
};

// The tile epilogue with D's tensor map: a consumer tile wholly inside its group's rows goes
// through shared memory and TMA (StageThroughShared; its box lands at problem Work.batch of the
// map: 0 for a contiguous D [total, N], the group for D [G, rows, N]); a tile that crosses the
// group's first or last row (the rows beyond belong to other groups) is stored pair by pair.
template <class TC, class Store>
struct GroupStaged {
    static constexpr int staging_bytes = StageThroughShared<TC, Store>::staging_bytes;
    StageThroughShared<TC, Store> staged;
    StoreEachPair<Store> pairs;
    bool d_per_group;  // D's map has a problem per group (else one matrix of all groups' rows)

    template <class Acc>
    __device__ __forceinline__ void operator()(const Work& w, const Acc& acc, int row0, int col0, int consumer,
                                               unsigned char* staging) const {
        const GroupWork& gw = static_cast<const GroupWork&>(w);
        // the same for the consumer's 128 threads
        if (row0 >= gw.row_begin && row0 + 64 * Acc::ATOMS_M <= gw.row_end) {
            GroupWork at = gw;
            at.batch = d_per_group ? gw.group : 0;
            staged(at, acc, row0, col0, consumer, staging);
        } else {
            pairs(w, acc, row0, col0, consumer, staging);
        }
    }
    __device__ __forceinline__ void finish(int consumer) const { staged.finish(consumer); }
};

// BlockScales (promotion.cuh) with a stride per group (the unit's GroupWork::group).
template <bool X, bool Y>
struct GroupBlockScales {
    static constexpr bool ACTIVE = X || Y;
    static constexpr int BLOCK = 128;
    const float* x;
    const float* y;
    i64 x_row, x_col, x_group, y_row, y_col, y_group;
    int rows, n;

    template <int TN, int ATOMS_M, int CHUNKS>
    __device__ __forceinline__ void load(Factors<ATOMS_M, CHUNKS>& f, const Work& w, int kb, int row0,
                                         int col0) const {
        cursor<TN, ATOMS_M, CHUNKS>(w, row0, col0).load(f, kb);
    }

    // The addresses of load() for K block 0 of this unit's group (promotion.cuh's FactorCursor).
    template <int TN, int ATOMS_M, int CHUNKS>
    __device__ __forceinline__ FactorCursor<X, Y, ATOMS_M, CHUNKS> cursor(const Work& w, int row0, int col0) const {
        static_assert(BLOCK % TN == 0, "a promotion chunk lies in one 128-column block of B");
        FactorCursor<X, Y, ATOMS_M, CHUNKS> c;
        const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
        const int row = row0 + 16 * warp + lane / 4;
        const i64 g = static_cast<const GroupWork&>(w).group;
#pragma unroll
        for (int i = 0; i < ATOMS_M; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                c.x[i][h] = X ? x + g * x_group + min(row + 64 * i + 8 * h, rows - 1) * x_row : nullptr;
            }
        const int last = (n - 1) / BLOCK;
#pragma unroll
        for (int j = 0; j < CHUNKS; ++j) c.y[j] = Y ? y + g * y_group + min((col0 + j * TN) / BLOCK, last) * y_col : nullptr;
        c.x_col = x_col;
        c.y_row = y_row;
        return c;
    }
};

}  // namespace hopper
}  // namespace blasdx

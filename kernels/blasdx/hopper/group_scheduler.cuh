// The grouped tile scheduler: the work units of many GEMMs of one N and K and varying M
// (mixture-of-experts), walked by one persistent launch.
//
// Group g multiplies rows [start[g], end[g]) of A (in the coordinates of A's tensor map) by
// its own B (problem g of B's map) into the same rows of D. The groups' row ranges are read on
// the device at the start of the launch, so a CUDA graph replays with new group sizes:
// * contiguous: A is [total, K] and group g's rows are [offs[g - 1], offs[g]) (offs[-1] = 0);
// * masked: A is [G, max_m, K], problem g of A's map, rows [0, counts[g]) of it;
// * uniform (batched): as masked with every count max_m (no counts array).
// Ranges are clamped into [0, rows] (and contiguous ends to a running maximum): bad offsets
// give empty or shorter groups, never overlapping ones or accesses outside the arrays. A group
// of R rows has ceil(R / BM) tile rows; an empty group has no units and costs nothing. Units run group by group; inside a group in raster groups of
// GROUP_M tile rows (as Scheduler does), so the tiles running at one time share B's columns.
//
// The table (start, end, first tile row of each group: GroupTable::bytes(G) bytes) lives in
// shared memory after the GEMM's own and is built by every thread of the block before the GEMM
// starts.
#pragma once

#include "scheduler.cuh"

namespace blasdx {
namespace hopper {

// A grouped unit: Work plus its group and the group's rows (the epilogue stores those only). Work.batch is the problem of B's (and a masked A's) map: the group too.
struct GroupWork : Work {
    int group;
    int row_begin, row_end;  // the group's rows [row_begin, row_end); a tile may start above row_begin
};

enum GroupLayout : int {
    GROUPS_CONTIGUOUS = 0,  // offs: cumulative end rows
    GROUPS_MASKED = 1,      // counts: rows per group (or every group max_m rows when counts is null)
};

// The groups' table: start[G], end[G] and first[G + 1] (tile rows of the groups before g;
// first[G] is the total), ints one after the other in shared memory at `base`.
struct GroupTable {
    int* start;
    int* end;
    int* first;

    __device__ __forceinline__ GroupTable(int* base, int groups)
        : start(base), end(base + groups), first(base + 2 * groups) {}
    __host__ __device__ static constexpr int bytes(int groups) { return 4 * (3 * groups + 1); }

    // Every thread of the block takes part (THREADS of them); the table is complete on return.
    // `bounds` is offs (contiguous) or counts (masked; null: every group `rows` rows); `rows` is
    // A's row extent: total rows (contiguous) or max_m (masked). Contiguous ends are clamped to
    // [0, rows] and made non-decreasing (a running maximum), so groups never overlap. A group's
    // tile rows start at its first row rounded down to `align` rows (a power of two: TMA reads
    // an M-major A's boxes from 16-byte aligned rows only), the rows above it the previous group's.
    // With CLUSTER > 1, first[] counts clusters of CLUSTER tile rows (a group's last may be short).
    template <int BM, int THREADS, int CLUSTER = 1>
    __device__ __forceinline__ void build(int layout, const int* bounds, int groups, int rows, int align = 1) const {
        const bool contiguous = layout == GROUPS_CONTIGUOUS;
        for (int g = threadIdx.x; g < groups; g += THREADS) {
            end[g] = bounds != nullptr ? min(max(__ldg(bounds + g), 0), rows) : rows;
        }
        __syncthreads();
        if (contiguous && threadIdx.x < 32) scan<false>(end, groups);
        __syncthreads();
        for (int g = threadIdx.x; g < groups; g += THREADS) {
            start[g] = contiguous && g > 0 ? end[g - 1] : 0;
            const int origin = start[g] & -align;  // this group's tile rows, summed below
            first[g] = end[g] > start[g] ? ((end[g] - origin + BM - 1) / BM + CLUSTER - 1) / CLUSTER : 0;
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            const int total = scan<true>(first, groups);
            if (threadIdx.x == 0) first[groups] = total;
        }
        __syncthreads();
    }

    // One warp scans v[0, count) in place: SUM an exclusive sum (returning the total), else an
    // inclusive running maximum. Each lane takes a run of entries, then a shuffle scan over the lanes.
    template <bool SUM>
    __device__ __forceinline__ static int scan(int* v, int count) {
        const int lane = threadIdx.x % 32;
        const int per = (count + 31) / 32;
        const int lo = min(lane * per, count), hi = min(lo + per, count);
        int own = SUM ? 0 : -1;
        for (int g = lo; g < hi; ++g) own = SUM ? own + v[g] : max(own, v[g]);
        int upto = own;  // inclusive over the lanes
#pragma unroll
        for (int d = 1; d < 32; d *= 2) {
            const int other = __shfl_up_sync(0xffffffffu, upto, d);
            if (lane >= d) upto = SUM ? upto + other : max(upto, other);
        }
        int before = SUM ? upto - own : __shfl_up_sync(0xffffffffu, upto, 1);
        if (!SUM && lane == 0) before = -1;
        for (int g = lo; g < hi; ++g) {
            const int value = v[g];
            if (SUM) {
                v[g] = before;
                before += value;
            } else {
                before = max(before, value);
                v[g] = before;
            }
        }
        return __shfl_sync(0xffffffffu, upto, 31);
    }
};

// The last group whose first entry (tile row or K step) is at most r: an empty group shares
// its first entry with the next, so the last such is the one holding r.
__device__ __forceinline__ int group_holding(const int* first, int groups, int r) {
    int lo = 0, hi = groups;  // answer in [lo, hi)
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (first[mid] <= r) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// Groups along M (contiguous or masked layouts): the table is built in tile rows (GRAIN = BM), or
// in clusters of CLUSTER_M tile rows of one group (the blocks of a cluster share B's tile: a
// cluster never spans two groups; block `rank` takes tile row CLUSTER_M * i + rank, which may lie
// past the group's end: its rows are loaded and never stored).
template <int BM, int BN, int BK, int GROUP_M, int CLUSTER_M = 1>
struct GroupScheduler {
    static constexpr int GRAIN = BM;
    static constexpr int CLUSTER = CLUSTER_M;
    static constexpr bool ALONG_K = false;
    GroupTable table;
    int m;  // rows of A's map that exist (the producer loads A's tile below it)
    int groups, tiles_n, steps, units, align;

    __device__ __forceinline__ GroupScheduler(const GroupTable& table_, int groups_, int rows, int n, int k,
                                              int align_ = 1)
        : table(table_), m(rows), groups(groups_), align(align_) {
        tiles_n = (n + BN - 1) / BN;
        steps = (k + BK - 1) / BK;
        units = table.first[groups] * tiles_n;
    }

    __device__ __forceinline__ int group_of(int r) const { return group_holding(table.first, groups, r); }

    __device__ __forceinline__ GroupWork work(int unit, int rank = 0) const {
        GroupWork w;
        const int g = group_of(unit / tiles_n);
        const int first_row = table.first[g];
        const int rows = table.first[g + 1] - first_row;
        // raster_tile's walk, written out (through raster_tile this kernel's SASS changes)
        const int t = unit - first_row * tiles_n;
        const int span = GROUP_M * tiles_n;
        const int raster = t / span;
        const int top = raster * GROUP_M;
        const int in_rows = min(rows - top, GROUP_M);
        const int in_raster = t - raster * span;
        w.batch = w.group = g;
        w.split = 0;
        w.m0 = (table.start[g] & -align) + ((top + in_raster % in_rows) * CLUSTER_M + rank) * BM;
        w.n0 = (in_raster / in_rows) * BN;
        w.k_begin = 0;
        w.k_end = steps;
        w.row_begin = table.start[g];
        w.row_end = table.end[g];
        return w;
    }
};

// Groups along K (the 2D x 2D form, weight gradients): group g multiplies A[:, its K range] by
// B[its K range, :] into problem g of D, every group M x N. A and B are read from copies whose
// groups' K ranges are padded with zeros to whole BK steps (grouped_pad.cu), so a group's K steps
// are [first[g], first[g + 1]) of the table built in K steps (GRAIN = BK) and no step mixes two
// groups. Every group has all M x N tiles (an empty one stores zeros).
template <int BM, int BN, int BK, int GROUP_M, int CLUSTER_M = 1>
struct KGroupScheduler {
    static_assert(CLUSTER_M == 1, "groups along K run without clusters");
    static constexpr int GRAIN = BK;
    static constexpr int CLUSTER = 1;
    static constexpr bool ALONG_K = true;
    GroupTable table;
    int m;
    int groups, tiles_m, tiles_n, tiles, units;

    __device__ __forceinline__ KGroupScheduler(const GroupTable& table_, int groups_, int rows, int n, int /*k*/,
                                               int /*align*/ = 1)
        : table(table_), m(rows), groups(groups_) {
        tiles_m = (rows + BM - 1) / BM;
        tiles_n = (n + BN - 1) / BN;
        tiles = tiles_m * tiles_n;
        units = groups * tiles;
    }

    __device__ __forceinline__ GroupWork work(int unit, int /*rank*/ = 0) const {
        GroupWork w;
        const int g = unit / tiles;
        const TileAt at = raster_tile<GROUP_M>(unit - g * tiles, tiles_m, tiles_n);
        w.batch = w.group = g;
        w.split = 0;
        w.m0 = at.row * BM;
        w.n0 = at.col * BN;
        w.k_begin = table.first[g];
        w.k_end = table.first[g + 1];
        w.row_begin = 0;
        w.row_end = m;
        return w;
    }
};

}  // namespace hopper
}  // namespace blasdx

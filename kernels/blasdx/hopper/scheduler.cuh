// The persistent tile schedulers: which output tile, problem and K range each work unit is.
//
// A block (a cluster) walks units blockIdx.x / CLUSTER_M, + gridDim.x / CLUSTER_M, ...; the
// producer, the consumers and the rewriting threads walk the same units. A tile is CLUSTER_M output
// tiles stacked along M (one per block of a cluster, which share B's tile): block `rank` of the
// cluster takes tile row CLUSTER_M * i + rank of the unit's group (a row past M still loads its
// share of B for the others). Tiles are numbered problem by problem and inside a problem in groups
// of GROUP_M tile rows: consecutive tiles (the ones running at the same time) walk down GROUP_M
// rows of tiles before moving one tile column right, so the A rows and B columns they read at one
// time stay few and in L2 (tile_origin).
//
// Scheduler (split K): units = batch x splits x tiles, split by split; a split covers a contiguous
// range of BK-wide K steps; with one split a unit is a whole output tile.
//
// StreamKScheduler: the last tiles' (tile, K step) iterations are shared evenly by all blocks, so
// that a last partial wave of tiles does not leave SMs idle (see its comment).
//
// Work.parts is the number of units that contribute to the unit's tile (its K splits, or the blocks
// whose stream-K ranges cover part of it): 1 when the unit is the whole tile, 0 for a unit with no
// work at all (stream-K's trailing units), which every role skips.
#pragma once

namespace blasdx {
namespace hopper {

struct Work {
    int batch;   // problem index
    int split;   // K split index (stream-K: the unit's piece of its block's range)
    int m0, n0;  // first row and column of the output tile
    int k_begin, k_end;  // K steps [k_begin, k_end)
    int parts = 1;       // units that add up the tile (splitk.cuh); 0: no work
    int part = 0;        // which of them this unit is (K splits: the split; stream-K: not used)
};

// Tile row and column of tile t of one problem's rows x tiles_n tiles, numbered in groups of
// GROUP_M tile rows (down the group's rows, then one tile column right).
struct TileAt {
    int row, col;
};
template <int GROUP_M>
__device__ __forceinline__ TileAt raster_tile(int t, int rows, int tiles_n) {
    const int span = GROUP_M * tiles_n;  // tiles of one group of tile rows
    const int group = t / span;
    const int first = group * GROUP_M;
    const int in_rows = min(rows - first, GROUP_M);
    const int in_group = t - group * span;
    return {first + in_group % in_rows, in_group / in_rows};
}

// Sets w.batch, w.m0, w.n0 of tile t of all problems' tiles (tiles per problem; rows of clusters).
template <int BM, int BN, int GROUP_M, int CLUSTER_M>
__device__ __forceinline__ void tile_origin(Work& w, int t, int tiles, int rows, int tiles_n, int rank) {
    w.batch = t / tiles;
    t -= w.batch * tiles;
    const TileAt at = raster_tile<GROUP_M>(t, rows, tiles_n);
    w.m0 = (at.row * CLUSTER_M + rank) * BM;
    w.n0 = at.col * BN;
}

template <int BM, int BN, int BK, int GROUP_M, int CLUSTER_M = 1>
struct Scheduler {
    int m, rows, tiles_n, tiles, splits, steps, chunk, units;  // rows: tile rows of clusters

    __device__ __forceinline__ Scheduler(int m_, int n, int k, int batch, int splits_) {
        m = m_;
        rows = ((m + BM - 1) / BM + CLUSTER_M - 1) / CLUSTER_M;
        tiles_n = (n + BN - 1) / BN;
        tiles = rows * tiles_n;
        splits = splits_;
        steps = (k + BK - 1) / BK;
        chunk = (steps + splits - 1) / splits;
        units = batch * splits * tiles;
    }

    __device__ __forceinline__ Work work(int unit, int rank = 0) const {
        Work w;
        const int per_problem = splits * tiles;
        const int batch = unit / per_problem;
        const int rest = unit - batch * per_problem;
        w.split = rest / tiles;
        tile_origin<BM, BN, GROUP_M, CLUSTER_M>(w, batch * tiles + rest - w.split * tiles, tiles, rows, tiles_n, rank);
        w.k_begin = min(w.split * chunk, steps);
        w.k_end = min(w.k_begin + chunk, steps);
        w.parts = splits;
        w.part = w.split;
        return w;
    }
};

// Stream-K with data-parallel tiles first. Of the T = batch x tiles output tiles, the last
// SK = min(T, T mod G + (waves - 1) x G) (G: the blocks of the grid, `waves` >= 2 the launch's
// `splits` argument) are shared: their I = SK x steps (tile, K step) iterations, tile-major, are cut
// into contiguous ranges of q = I / G' or q + 1 iterations, one per block b < G' = min(G, I) (the
// first r = I mod G' blocks take q + 1; every range has at least one iteration). The T - SK tiles
// before them (a multiple of G) are whole units, G at a time. A block's range meets one or more tiles:
// one unit per tile met, its K steps the range's part of that tile. Units are numbered so that block
// b's are b, b + G, ...: first the data-parallel tiles (unit = tile), then block b's i-th stream-K
// piece at DP + i x G + b; blocks with fewer pieces than the most any block has get units of no work
// (parts = 0) at the end of their walk. A tile's parts are the blocks whose ranges meet it:
// owner(last iteration) - owner(first iteration) + 1. I stays below 2^31 (the host checks), so all of
// it is 32-bit arithmetic.
template <int BM, int BN, int BK, int GROUP_M, int CLUSTER_M = 1>
struct StreamKScheduler {
    static_assert(CLUSTER_M == 1, "stream-K takes blocks of their own (no clusters)");
    int m, rows, tiles_n, tiles, steps, units;
    int blocks;      // G: the persistent grid
    int dp_tiles;    // whole tiles, before the shared ones
    int sk_blocks;   // G': blocks with a stream-K range
    int iterations;  // I: the shared tiles' K steps
    int per_block, longer;  // q = I / G' and r = I mod G': blocks b < r take q + 1 iterations
    int pieces;      // the most units a block's stream-K range is cut into

    __device__ __forceinline__ StreamKScheduler(int m_, int n, int k, int batch, int waves) {
        m = m_;
        rows = (m + BM - 1) / BM;
        tiles_n = (n + BN - 1) / BN;
        tiles = rows * tiles_n;
        steps = (k + BK - 1) / BK;  // at least 1: the host takes stream-K only for K > 0
        blocks = int(gridDim.x);
        const int all = batch * tiles;
        const int shared = min(all, all % blocks + (waves - 1) * blocks);
        dp_tiles = all - shared;
        iterations = shared * steps;
        sk_blocks = min(blocks, iterations);
        per_block = iterations / sk_blocks;
        longer = iterations - per_block * sk_blocks;
        pieces = (per_block + (longer > 0) - 1) / steps + 2;
        units = dp_tiles + pieces * blocks;
    }

    // The first iteration of block b's range (b <= sk_blocks).
    __device__ __forceinline__ int begin_of(int b) const { return b * per_block + min(b, longer); }

    // The block whose range holds iteration x.
    __device__ __forceinline__ int owner(int x) const {
        const int split = longer * (per_block + 1);  // the longer ranges' iterations
        return x < split ? x / (per_block + 1) : longer + (x - split) / per_block;
    }

    __device__ __forceinline__ Work work(int unit, int /*rank*/ = 0) const {
        Work w;
        w.split = 0;
        if (unit < dp_tiles) {
            tile_origin<BM, BN, GROUP_M, 1>(w, unit, tiles, rows, tiles_n, 0);
            w.k_begin = 0;
            w.k_end = steps;
            w.parts = 1;
            return w;
        }
        const int u = unit - dp_tiles, b = u % blocks;
        w.split = u / blocks;
        const int begin = b < sk_blocks ? begin_of(b) : 0;
        const int end = b < sk_blocks ? begin_of(b + 1) : 0;
        const int t = begin / steps + w.split;  // the shared tile this piece falls in
        if (begin >= end || t * steps >= end) {  // past the block's range: no work
            tile_origin<BM, BN, GROUP_M, 1>(w, 0, tiles, rows, tiles_n, 0);
            w.k_begin = w.k_end = 0;
            w.parts = 0;
            return w;
        }
        const int first = t * steps;
        tile_origin<BM, BN, GROUP_M, 1>(w, dp_tiles + t, tiles, rows, tiles_n, 0);
        w.k_begin = max(begin, first) - first;
        w.k_end = min(end, first + steps) - first;
        w.parts = owner(first + steps - 1) - owner(first) + 1;
        return w;
    }
};

}  // namespace hopper
}  // namespace blasdx

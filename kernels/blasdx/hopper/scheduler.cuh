// The persistent tile scheduler: which output tile, problem and K range each work unit is.
//
// A launch has units = batch x splits x tiles work units, where a tile is CLUSTER_M output
// tiles stacked along M (one per block of a cluster, which share B's tile). Cluster c takes
// units c, c + clusters, ...; block `rank` of the cluster takes tile row CLUSTER_M * i + rank
// of the unit's group (a row past M still loads its share of B for the others). Units run
// problem by problem, split by split, and inside a split in groups of GROUP_M tile rows:
// consecutive units (the ones running at the same time) walk down GROUP_M rows of tiles
// before moving one tile column right, so the A rows and B columns they read at one time
// stay few and in L2. A split covers a contiguous range of BK-wide K steps; with one split
// a unit is a whole output tile.
#pragma once

namespace blasdx {
namespace hopper {

struct Work {
    int batch;   // problem index
    int split;   // K split index
    int m0, n0;  // first row and column of the output tile
    int k_begin, k_end;  // K steps [k_begin, k_end)
};

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
        w.batch = unit / per_problem;
        int rest = unit - w.batch * per_problem;
        w.split = rest / tiles;
        const int t = rest - w.split * tiles;
        const int span = GROUP_M * tiles_n;  // units of one group of tile rows
        const int group = t / span;
        const int first = group * GROUP_M;
        const int in_rows = min(rows - first, GROUP_M);
        const int in_group = t - group * span;
        w.m0 = ((first + in_group % in_rows) * CLUSTER_M + rank) * BM;
        w.n0 = (in_group / in_rows) * BN;
        w.k_begin = min(w.split * chunk, steps);
        w.k_end = min(w.k_begin + chunk, steps);
        return w;
    }
};

}  // namespace hopper
}  // namespace blasdx

// Split K (and stream-K) finished inside the GEMM: every unit that covers part of a tile's K steps
// adds its partial sums into the tile's sums in a workspace, and the last of the tile's Work.parts
// units to arrive reads the total and runs the tile epilogue, so no second kernel reads partial sums
// back. A unit that is its tile's only part (parts 1: no split, a data-parallel stream-K tile, a
// stream-K range that covers a whole tile) runs the epilogue directly. The K ranges may be uneven
// (stream-K); the count of parts is the scheduler's (scheduler.cuh).
//
// Each warp of a consumer owns the same fragment of its tile in every split (wgmma's
// accumulator layout does not depend on K). A split's warp adds its fragment into its slot of
// the workspace with reductions that return nothing (red.global.add: issued back to back,
// register-major and lane-minor, so every instruction of the warp is one 128-byte line), makes
// them visible device-wide and counts itself in the slot's counter. The warp that brings the
// counter to the tile's parts resets it, reads the total (one pass of independent loads), sets the slot
// back to zero and hands the total to the inner epilogue. Slots and counters are zero between
// launches (the host zeroes them when it allocates them; each launch leaves them so). Nothing
// waits: a split that arrives early is done. Floating-point totals are added in arrival order,
// so their last bits may differ from run to run (split K and stream-K alike); integer totals are
// exact.
//
// Warps decide on their own, so the inner epilogue must not synchronise a warpgroup (the
// direct-store StoreEachPair; not the TMA-store StageThroughShared). Warps whose rows all lie
// past M skip the whole exchange in every split alike.
#pragma once

#include "../types.cuh"
#include "scheduler.cuh"

namespace blasdx {
namespace hopper {

// Slots: per (problem, tile row, tile column, part, warp), part = the consumer for consumers
// that share a tile's rows (PER_CONSUMER), 0 for ping-pong consumers that take whole tiles.
template <class Inner, class V, int BM, int BN, int PARTS>
struct SplitKFixup {
    static constexpr int staging_bytes = Inner::staging_bytes;
    Inner inner;
    V* workspace;   // a fragment per slot, zero between launches
    int* counters;  // one per slot, zero between launches
    int m, splits, tiles_m, tiles_n;  // splits: the launch's (1: no tile has several parts)

    template <class Acc>
    __device__ __forceinline__ void operator()(const Work& w, Acc& acc, int row0, int col0, int consumer,
                                               unsigned char* staging) const {
        if (splits == 1 || w.parts == 1) {
            inner(w, acc, row0, col0, consumer, staging);
            return;
        }
        constexpr int REGS = Acc::N / 2, FRAGMENT = Acc::ATOMS_M * REGS * 32;
        const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
        if (row0 + 16 * warp >= m) return;  // the warp's first row is past M, and so are all its others
        const int tile = (w.batch * tiles_m + w.m0 / BM) * tiles_n + w.n0 / BN;
        const int slot = (tile * PARTS + (PARTS > 1 ? consumer : 0)) * 4 + warp;
        V* sums = workspace + i64(slot) * FRAGMENT + lane;
#pragma unroll
        for (int i = 0; i < Acc::ATOMS_M; ++i)
#pragma unroll
            for (int j = 0; j < REGS; ++j) atomicAdd(sums + (i * REGS + j) * 32, acc.r[i][j]);  // a reduction
        __threadfence();  // the additions are visible device-wide before the count says they are there
        __syncwarp();
        int last = 0;
        if (lane == 0) {
            last = atomicAdd(counters + slot, 1) == w.parts - 1;
            if (last) counters[slot] = 0;  // every split has counted: ready for the next launch
        }
        if (!__shfl_sync(0xffffffffu, last, 0)) return;
        __threadfence();  // the other splits' additions are read after their counts were seen
#pragma unroll
        for (int i = 0; i < Acc::ATOMS_M; ++i)
#pragma unroll
            for (int j = 0; j < REGS; ++j) acc.r[i][j] = __ldcg(sums + (i * REGS + j) * 32);
#pragma unroll
        for (int i = 0; i < Acc::ATOMS_M; ++i)
#pragma unroll
            for (int j = 0; j < REGS; ++j) __stcg(sums + (i * REGS + j) * 32, V(0));  // zero for the next launch
        inner(w, acc, row0, col0, consumer, staging);
    }

    __device__ __forceinline__ void finish(int consumer) const { inner.finish(consumer); }
};

}  // namespace hopper
}  // namespace blasdx

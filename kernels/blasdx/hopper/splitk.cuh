// Split K (and stream-K) finished inside the GEMM: every unit that covers part of a tile's K steps
// hands its partial sums to the tile's slot in a workspace, and the last of the tile's Work.parts
// units to arrive adds them up and runs the tile epilogue, so no second kernel reads partial sums
// back. A unit that is its tile's only part (parts 1: no split, a data-parallel stream-K tile, a
// stream-K range that covers a whole tile) runs the epilogue directly. The K ranges may be uneven
// (stream-K); the count of parts is the scheduler's (scheduler.cuh).
//
// Each warp of a consumer owns the same fragment of its tile in every split (wgmma's
// accumulator layout does not depend on K), kept register-major and lane-minor in the workspace,
// so every instruction of the warp is one 128-byte line.
//
// K splits (Work.part is the split): each split's warp stores its fragment in its own part of the
// slot with plain stores, makes them visible device-wide and counts itself in the slot's counter.
// The warp that brings the counter to the tile's parts resets it and adds the parts up in split
// order (one pass of independent loads per part), so the total is the same in every run whatever
// the order of arrival. Partial sums need no zeroing; only the counters are zero between launches.
//
// Stream-K (IN_PLACE): a unit's place among its tile's parts is not known to it, so each adds its
// fragment into the slot with reductions that return nothing (red.global.add), and the last reads
// the total and sets the slot back to zero. Slots and counters are then zero between launches, and
// floating-point totals are added in arrival order (their last bits may differ between runs).
//
// The host zeroes the workspace when it allocates it; each launch leaves the counters (and
// stream-K's slots) zero. Nothing waits: a part that arrives early is done. Warps decide on their
// own, so the inner epilogue must not synchronise a warpgroup (the direct-store StoreEachPair; not
// the TMA-store StageThroughShared). Warps whose rows all lie past M skip the whole exchange in
// every part alike.
#pragma once

#include "../types.cuh"
#include "scheduler.cuh"

namespace blasdx {
namespace hopper {

// Slots: per (problem, tile row, tile column, consumer part, warp), consumer part = the consumer for
// consumers that share a tile's rows (PARTS > 1), 0 for ping-pong consumers that take whole tiles.
// A slot holds `splits` fragments (K splits: one per split) or one (IN_PLACE, stream-K).
template <class Inner, class V, int BM, int BN, int PARTS, bool IN_PLACE = false>
struct SplitKFixup {
    static constexpr int staging_bytes = Inner::staging_bytes;
    Inner inner;
    V* workspace;   // the slots' fragments
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
        V* sums = workspace + i64(slot) * (IN_PLACE ? 1 : splits) * FRAGMENT + lane;  // the slot's first part
        V* mine = IN_PLACE ? sums : sums + i64(w.part) * FRAGMENT;
#pragma unroll
        for (int i = 0; i < Acc::ATOMS_M; ++i)
#pragma unroll
            for (int j = 0; j < REGS; ++j) {
                if constexpr (IN_PLACE) {
                    atomicAdd(mine + (i * REGS + j) * 32, acc.r[i][j]);  // a reduction
                } else {
                    __stcg(mine + (i * REGS + j) * 32, acc.r[i][j]);
                }
            }
        __threadfence();  // the sums are visible device-wide before the count says they are there
        __syncwarp();
        int last = 0;
        if (lane == 0) {
            last = atomicAdd(counters + slot, 1) == w.parts - 1;
            if (last) counters[slot] = 0;  // every split has counted: ready for the next launch
        }
        if (!__shfl_sync(0xffffffffu, last, 0)) return;
        __threadfence();  // the other parts' sums are read after their counts were seen
#pragma unroll
        for (int i = 0; i < Acc::ATOMS_M; ++i)
#pragma unroll
            for (int j = 0; j < REGS; ++j) acc.r[i][j] = __ldcg(sums + (i * REGS + j) * 32);
        if constexpr (IN_PLACE) {
#pragma unroll
            for (int i = 0; i < Acc::ATOMS_M; ++i)
#pragma unroll
                for (int j = 0; j < REGS; ++j) __stcg(sums + (i * REGS + j) * 32, V(0));  // zero for the next launch
        } else {
            // In split order (the same total in every run), BATCH parts' loads in flight before their adds where
            // the fragment is small enough to hold them beside everything else (decode's narrow tiles; wider
            // ones, fp8's promoted sums beside them, would spill).
            constexpr int HELD = Acc::ATOMS_M * REGS, BATCH = HELD <= 32 ? 4 : 1;
            for (int p = 1; p < w.parts; p += BATCH) {
                V t[BATCH][Acc::ATOMS_M][REGS];
#pragma unroll
                for (int b = 0; b < BATCH; ++b) {
                    if (p + b < w.parts) {
                        const V* part = sums + i64(p + b) * FRAGMENT;
#pragma unroll
                        for (int i = 0; i < Acc::ATOMS_M; ++i)
#pragma unroll
                            for (int j = 0; j < REGS; ++j) t[b][i][j] = __ldcg(part + (i * REGS + j) * 32);
                    }
                }
#pragma unroll
                for (int b = 0; b < BATCH; ++b) {
                    if (p + b < w.parts) {
#pragma unroll
                        for (int i = 0; i < Acc::ATOMS_M; ++i)
#pragma unroll
                            for (int j = 0; j < REGS; ++j) acc.r[i][j] += t[b][i][j];
                    }
                }
            }
        }
        inner(w, acc, row0, col0, consumer, staging);
    }

    __device__ __forceinline__ void finish(int consumer) const { inner.finish(consumer); }
};

}  // namespace hopper
}  // namespace blasdx

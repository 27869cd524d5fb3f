// Split K finished inside the GEMM: the last split of a tile to arrive adds the others' partial
// sums and runs the tile epilogue, so no second kernel reads the partial sums back.
//
// Each warp of a consumer owns the same fragment of its tile in every split (wgmma's
// accumulator layout does not depend on K). A split's warp writes its fragment to its slot of
// the workspace (register-major, lane-minor: every store of the warp is one 128-byte line),
// makes it visible device-wide, and counts itself in the slot's counter. The warp that brings
// the counter to `splits` resets it to zero (counters are zero between launches: the host
// zeroes them once when it allocates them), reads every split's fragment back in split order
// (its own from registers: the sum does not depend on which split came last) and hands the
// total to the inner epilogue. Nothing waits: a split that arrives early is done.
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
    V* workspace;   // slots x splits fragments
    int* counters;  // one per slot, zero between launches
    int m, splits, tiles_m, tiles_n;

    template <class Acc>
    __device__ __forceinline__ void operator()(const Work& w, Acc& acc, int row0, int col0, int consumer,
                                               unsigned char* staging) const {
        if (splits == 1) {
            inner(w, acc, row0, col0, consumer, staging);
            return;
        }
        constexpr int REGS = Acc::N / 2, FRAGMENT = Acc::ATOMS_M * REGS * 32;
        const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
        if (row0 + 16 * warp >= m) return;  // the warp's first row is past M, and so are all its others
        const int tile = (w.batch * tiles_m + w.m0 / BM) * tiles_n + w.n0 / BN;
        const int slot = (tile * PARTS + (PARTS > 1 ? consumer : 0)) * 4 + warp;
        V* fragments = workspace + i64(slot) * splits * FRAGMENT + lane;
        V* mine = fragments + i64(w.split) * FRAGMENT;
#pragma unroll
        for (int i = 0; i < Acc::ATOMS_M; ++i)
#pragma unroll
            for (int j = 0; j < REGS; ++j) __stcg(mine + (i * REGS + j) * 32, acc.r[i][j]);
        __threadfence();  // the fragment is visible device-wide before the count says it is there
        __syncwarp();
        int last = 0;
        if (lane == 0) {
            last = atomicAdd(counters + slot, 1) == splits - 1;
            if (last) counters[slot] = 0;  // every split has counted: ready for the next launch
        }
        if (!__shfl_sync(0xffffffffu, last, 0)) return;
        __threadfence();  // the other splits' fragments are read after their counts were seen
#pragma unroll
        for (int i = 0; i < Acc::ATOMS_M; ++i)
#pragma unroll
            for (int j = 0; j < REGS; ++j) {
                V total = V(0);
                for (int s = 0; s < splits; ++s) {
                    total += s == w.split ? acc.r[i][j] : __ldcg(fragments + i64(s) * FRAGMENT + (i * REGS + j) * 32);
                }
                acc.r[i][j] = total;
            }
        inner(w, acc, row0, col0, consumer, staging);
    }

    __device__ __forceinline__ void finish(int consumer) const { inner.finish(consumer); }
};

}  // namespace hopper
}  // namespace blasdx

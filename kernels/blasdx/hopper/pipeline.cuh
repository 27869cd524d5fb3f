// The stage ring between the producer (TMA) and the consumer warpgroups (wgmma).
//
// STAGES shared-memory stages, each with a `full` barrier (one producer arrival plus the
// stage's TMA bytes) and an `empty` barrier (one arrival per consumer warp once its wgmmas
// have read the stage). Producer and consumers walk the same sequence of stages; a
// RingState is the position in it: the stage and the parity of the pass over the ring.
// The producer waits on `empty` with the opposite parity, so its first pass never blocks.
// When the engine splits float32 operands into tf32 high and low parts (precision.cuh),
// a stage also has a `split` barrier: the splitting warps arrive once the parts are in
// shared memory, and the consumers wait for it instead of `full`.
#pragma once

#include "sync.cuh"
#include "tma.cuh"

namespace blasdx {
namespace hopper {

template <int STAGES>
struct Ring {
    u64 full[STAGES];
    u64 empty[STAGES];
    u64 split[STAGES];
    // Ping-pong consumers take turns: turn[c] completes a phase when the other consumer has
    // waited for every stage of its last unit. A consumer that skips the other's stages must
    // not wait on a stage more than one pass ahead (a parity wait cannot tell passes apart),
    // so it waits for its turn first.
    u64 turn[2];

    // One thread initialises; the block syncs before anyone uses the barriers.
    __device__ __forceinline__ void init(int consumer_arrivals, int splitter_arrivals = 1) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            barrier_init(&full[s], 1);
            barrier_init(&empty[s], consumer_arrivals);
            barrier_init(&split[s], splitter_arrivals);
        }
        barrier_init(&turn[0], 1);
        barrier_init(&turn[1], 1);
        barrier_init_fence();
    }
};

// The block's start, before any role runs: thread 0 traps on a launch that grants less than `needed`
// bytes of dynamic shared memory (a launch with less would corrupt memory), initialises the ring's
// barriers and prefetches both tensor maps; then the cluster (the peers' barriers exist before anyone
// multicasts into or frees them) or the block waits.
template <int CLUSTER, int STAGES>
__device__ __forceinline__ void start_ring(Ring<STAGES>* ring, int consumer_arrivals, int splitter_arrivals, u32 needed,
                                           const TensorMap* map_a, const TensorMap* map_b) {
    if (threadIdx.x == 0) {
        u32 granted;
        asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(granted));
        if (granted < needed) __trap();
        ring->init(consumer_arrivals, splitter_arrivals);
        prefetch_tensor_map(map_a);
        prefetch_tensor_map(map_b);
    }
    if constexpr (CLUSTER > 1) {
        cluster_sync();
    } else {
        __syncthreads();
    }
}

template <int STAGES>
struct RingState {
    int stage = 0;
    u32 parity = 0;

    __device__ __forceinline__ void advance() {
        if (++stage == STAGES) {
            stage = 0;
            parity ^= 1;
        }
    }

    // Past `steps` stages at once (the ones another consumer takes).
    __device__ __forceinline__ void skip(int steps) {
        const int to = stage + steps;
        parity ^= u32(to / STAGES) & 1;
        stage = to % STAGES;
    }
};

// The TMA producer's walk (one thread): for every K step of every unit this block takes (units
// blockIdx.x / CLUSTER on, gridDim.x / CLUSTER apart), wait until the next stage is free, expect
// its bytes (A's only where the unit's tile row lies inside M) and load_step(stage, its full
// barrier, work, step, has_a, rank); in a cluster, then stay until every consumer of the cluster
// has freed every stage here.
template <int STAGES, int CLUSTER, int STAGE_BYTES, int A_BYTES, int B_BYTES, class Sched, class LoadStep>
__device__ __forceinline__ void produce_stages(unsigned char* smem, Ring<STAGES>* ring, const Sched& sched,
                                               const LoadStep& load_step) {
    RingState<STAGES> at;
    const int rank = CLUSTER > 1 ? int(cluster_rank()) : 0;
    for (int unit = blockIdx.x / CLUSTER; unit < sched.units; unit += gridDim.x / CLUSTER) {
        const auto w = sched.work(unit, rank);  // the scheduler's Work (a grouped one carries more)
        const bool has_a = w.m0 < sched.m;      // a cluster's last tile row may lie past M
        for (int step = w.k_begin; step < w.k_end; ++step) {
            wait(&ring->empty[at.stage], at.parity ^ 1);
            unsigned char* s = smem + at.stage * STAGE_BYTES;
            u64* full = &ring->full[at.stage];
            arrive_expect_bytes(full, (has_a ? A_BYTES : 0) + B_BYTES);
            load_step(s, full, w, step, has_a, rank);
            at.advance();
        }
    }
    if constexpr (CLUSTER > 1) {  // stay until every consumer of the cluster has freed every stage here
        for (int i = 0; i < STAGES; ++i) {
            wait(&ring->empty[at.stage], at.parity ^ 1);
            at.advance();
        }
    }
}

}  // namespace hopper
}  // namespace blasdx

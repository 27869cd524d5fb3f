// Synchronisation atoms of the Hopper engine (sm_90): mbarriers, proxy fences, register
// reallocation between warpgroups, named barriers.
//
// Facts from the PTX ISA (our wording):
// * mbarrier (9.7.13.15): a 64-bit shared-memory object with an expected arrival count and
//   a transaction count. A phase completes when every expected thread has arrived and the
//   pending transaction bytes are zero; the barrier then starts the next phase. Waiting on
//   a phase is done by parity: try_wait.parity(P) returns true once the phase whose parity
//   is P has completed; on a fresh barrier (phase 0 running), parity 1 counts as completed.
// * arrive.expect_tx(bytes) arrives once and adds bytes to the pending transaction count;
//   cp.async.bulk.tensor with .mbarrier::complete_tx::bytes subtracts the bytes it wrote
//   (the whole box, zero-filled parts included) when they have landed.
// * setmaxnreg (9.7.19.5, sm_90a): moves registers between the warpgroups of a block. The
//   kernel needs a register cap at entry (__launch_bounds__(threads, 1)); every warp of a
//   warpgroup executes the same setmaxnreg.
#pragma once

#include "../copy.cuh"

namespace blasdx {
namespace hopper {

typedef unsigned long long u64;

__device__ __forceinline__ void barrier_init(u64* bar, int arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(arrivals));
}

// Makes initialised barriers visible to the async proxy (TMA) before the block syncs.
__device__ __forceinline__ void barrier_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void arrive_expect_bytes(u64* bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void arrive(u64* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
}

// Spins until the phase of parity `parity` has completed.
__device__ __forceinline__ void wait(u64* bar, u32 parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "BLASDX_WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra BLASDX_WAIT_%=;\n"
        "}\n" ::"r"(shared_address(bar)),
        "r"(parity)
        : "memory");
}

// Registers per thread of the calling warpgroup: fewer for the producer, more for consumers.
template <int REGS> __device__ __forceinline__ void release_registers() {
    static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, "setmaxnreg takes multiples of 8 in [24, 256]");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS> __device__ __forceinline__ void claim_registers() {
    static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, "setmaxnreg takes multiples of 8 in [24, 256]");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

// ---- clusters (sm_90): blocks of one cluster share their shared memory ----------------------------

// This block's rank in its cluster.
__device__ __forceinline__ u32 cluster_rank() {
    u32 rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}

// Every thread of every block of the cluster arrives here before any goes on (a release /
// acquire pair: shared-memory writes before it, barrier inits included, are seen after it).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// Arrive on the barrier at the same shared-memory offset as `bar` in block `rank` of the cluster
// (release at CTA scope, as a local arrive: it orders this thread's earlier accesses, no fence
// across the GPU, which .release.cluster would cost in every K step).
__device__ __forceinline__ void arrive_in_block(u64* bar, u32 rank) {
    asm volatile(
        "{\n"
        ".reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
        "}\n" ::"r"(shared_address(bar)),
        "r"(rank)
        : "memory");
}

// A barrier among THREADS threads (whole warps) of the block, apart from __syncthreads (id 0).
template <int ID, int THREADS> __device__ __forceinline__ void named_barrier() {
    static_assert(ID > 0 && ID < 16 && THREADS % 32 == 0, "named barriers 1..15 over whole warps");
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(THREADS) : "memory");
}

}  // namespace hopper
}  // namespace blasdx

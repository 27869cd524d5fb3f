// Per-stage barriers of a shared-memory pipeline: who may read a stage, who may refill it, without
// stopping the whole block (sm_80+; mbarrier objects).
//
// A stage of a multi-stage pipeline (a K or V tile of attention) is filled by the copies of many
// threads and read by many. `__syncthreads()` between the two makes every warp wait for the
// slowest at every tile; a pair of barriers per stage only makes the readers of a stage wait for
// its copies ("full") and the refill of a stage wait for its last readers ("empty"), so the
// warpgroups of a block may drift apart by up to the pipeline's slack (e.g. one warpgroup's softmax
// under the other's GEMMs).
//
// Facts from the PTX ISA (our wording): an mbarrier phase completes when its expected count of
// arrivals has been made; try_wait.parity(P) succeeds once the phase of parity P has completed
// (mbarrier, 9.7.13.15). cp.async.mbarrier.arrive.noinc makes the barrier see one arrival when all
// of the executing thread's earlier cp.async copies have landed, counting against the expected
// count (9.7.9.24). Data written by cp.async is read by wgmma through the async proxy: after the
// wait, fence.proxy.async.shared::cta (GEMM::shared_fence) before the wgmma.
#pragma once

#include "copy.cuh"
#include "types.cuh"

namespace blasdx {

struct stage_barrier {
    unsigned long long word;

    // One thread, before any use; then __syncthreads().
    __device__ __forceinline__ void init(int count) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(&word)), "r"(count) : "memory");
    }
    // This thread is done with the stage (its reads are complete).
    __device__ __forceinline__ void arrive() {
        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(&word)) : "memory");
    }
    // One arrival once every cp.async copy this thread issued so far has landed.
    __device__ __forceinline__ void arrive_after_copies() {
#if __CUDA_ARCH__ >= 800
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(&word)) : "memory");
#else
        arrive();
#endif
    }
    // Until the phase `phase` (counted from 0) has completed (try_wait suspends the thread for a
    // while on sm_90; sm_80 polls with test_wait).
    __device__ __forceinline__ void wait(int phase) {
#if __CUDA_ARCH__ >= 900
        asm volatile(
            "{\n"
            ".reg .pred done;\n"
            "BLASDX_STAGE_WAIT_%=:\n"
            "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
            "@!done bra BLASDX_STAGE_WAIT_%=;\n"
            "}\n" ::"r"(shared_address(&word)),
            "r"(phase & 1)
            : "memory");
#else
        asm volatile(
            "{\n"
            ".reg .pred done;\n"
            "BLASDX_STAGE_WAIT_%=:\n"
            "mbarrier.test_wait.parity.shared::cta.b64 done, [%0], %1;\n"
            "@!done bra BLASDX_STAGE_WAIT_%=;\n"
            "}\n" ::"r"(shared_address(&word)),
            "r"(phase & 1)
            : "memory");
#endif
    }
};

}  // namespace blasdx

namespace blasdx {

// Two warpgroups of a block taking turns at one step of every iteration (issuing their GEMMs):
// 0, 1, 0, 1, ... Where their other work (a softmax) is as long as their GEMMs, one's other work
// then runs under the other's GEMMs. Named barriers 1 and 2 (barrier 0 is __syncthreads), each
// completed by one warpgroup waiting and the other arriving: bar.sync / bar.arrive with a count
// of 256 (PTX ISA "barrier"). Call start() once before the loop and finish() once after it from
// every thread of both warpgroups, take() before the step and pass() after it in every iteration
// (the same number of iterations in both warpgroups).
struct warpgroup_turns {
    __device__ __forceinline__ static int group() { return (threadIdx.x / 128) % 2; }
    __device__ __forceinline__ static void sync(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
    __device__ __forceinline__ static void arrive(int id) {
        asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory");
    }
    // warpgroup 0 goes first
    __device__ __forceinline__ static void start() {
        if (group() == 1) arrive(1);
    }
    __device__ __forceinline__ static void take() { sync(1 + group()); }
    __device__ __forceinline__ static void pass() { arrive(2 - group()); }
    // the last pass of warpgroup 1 is taken by warpgroup 0, so that no arrival is left pending
    __device__ __forceinline__ static void finish() {
        if (group() == 0) sync(1);
    }
};

}  // namespace blasdx

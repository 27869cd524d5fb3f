// TMA (the bulk tensor copy engine, sm_90): tiles of a global tensor into and out of shared memory.
//
// A tensor map is built on the host (cuTensorMapEncodeTiled) and passed by value as a
// `const __grid_constant__ TensorMap` kernel parameter; its generic address is what the
// copy instruction takes. Facts from the PTX ISA, cp.async.bulk.tensor (our wording): the
// box lands in shared memory laid out as the map's swizzle says (128B: 16-byte chunk c of
// 128-byte row r at c ^ (r % 8), atoms of 1024 bytes, so the destination is 1024-aligned);
// elements outside the tensor are written as zeros and still count towards complete_tx.
// Coordinates are in elements, innermost dimension first.
#pragma once

#include "sync.cuh"

namespace blasdx {
namespace hopper {

// The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned.
struct alignas(64) TensorMap {
    unsigned long long opaque[16];
};

__device__ __forceinline__ void prefetch_tensor_map(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}

// Box of a rank-3 map at (c0, c1, c2) into dst; its bytes complete on `bar`.
__device__ __forceinline__ void load_box(void* dst, const TensorMap* map, u64* bar, int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
        "[%2];\n" ::"r"(shared_address(dst)),
        "l"(reinterpret_cast<u64>(map)), "r"(shared_address(bar)), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

// The same box into dst of every block of the cluster named in `blocks` (a bit per rank);
// its bytes complete on the barrier at `bar`'s offset in each of them.
__device__ __forceinline__ void load_box_multicast(void* dst, const TensorMap* map, u64* bar, int c0, int c1, int c2,
                                                   unsigned short blocks) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
        "[%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(shared_address(dst)),
        "l"(reinterpret_cast<u64>(map)), "r"(shared_address(bar)), "r"(c0), "r"(c1), "r"(c2), "h"(blocks)
        : "memory");
}

// Box of a rank-3 map at (c0, c1, c2) from src (shared memory, laid out as the map says)
// into global memory; parts outside the tensor are not written. Completes in bulk groups.
__device__ __forceinline__ void store_box(const TensorMap* map, const void* src, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                     reinterpret_cast<u64>(map)),
                 "r"(shared_address(src)), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}
__device__ __forceinline__ void store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until at most PENDING committed store groups still read their shared memory.
template <int PENDING> __device__ __forceinline__ void store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(PENDING) : "memory");
}
// Until at most PENDING committed store groups are incomplete (their writes done).
template <int PENDING> __device__ __forceinline__ void store_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

// Writes of this thread to shared memory become visible to the async proxy (TMA, wgmma).
__device__ __forceinline__ void async_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

}  // namespace hopper
}  // namespace blasdx

// Float32 products on tf32 tensor cores at float32 accuracy: each operand x is split into
// a high part hi = x rounded to tf32 (to nearest) and a low part lo = x - hi rounded to tf32
// (to nearest), both read exactly by the tensor core; a product is summed as
// a_lo b_hi + a_hi b_lo + a_hi b_hi (a_lo b_lo lies below float32's last bit). What the parts
// miss of x is at most 2^-22 |x|.
//
// The split (split_tf32, ../split_tf32.cuh, shared with the block GEMM) runs in shared
// memory, on each stage TMA has filled: it is element by element,
// so it does not care about the stage's swizzled layout. The high parts replace the stage's
// operands in place; the low parts go to a second half of the stage.
#pragma once

#include "../split_tf32.cuh"
#include "pipeline.cuh"
#include "tma.cuh"

namespace blasdx {
namespace hopper {

// Splits BYTES of float32 at `stage` in place (high parts) and writes the low parts at
// `low`; THREADS threads, `thread` the caller's index among them, 16 bytes at a time.
template <int BYTES, int THREADS>
__device__ __forceinline__ void split_stage(unsigned char* stage, unsigned char* low, int thread) {
    static_assert(BYTES % 16 == 0, "stages are whole 16-byte vectors");
    float4* hi = reinterpret_cast<float4*>(stage);
    float4* lo = reinterpret_cast<float4*>(low);
#pragma unroll 4
    for (int i = thread; i < BYTES / 16; i += THREADS) {
        const float4 x = hi[i];
        float4 h, l;
        split_tf32(x.x, h.x, l.x);
        split_tf32(x.y, h.y, l.y);
        split_tf32(x.z, h.z, l.z);
        split_tf32(x.w, h.w, l.w);
        hi[i] = h;
        lo[i] = l;
    }
}

}  // namespace hopper
}  // namespace blasdx

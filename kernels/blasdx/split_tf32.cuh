// Float32 products at float32 accuracy on tf32 tensor cores (the 3xtf32 scheme): each operand
// x is split into a high part hi = x rounded to tf32 (to nearest) and a low part
// lo = x - hi rounded to tf32 (to nearest), so that the tensor core, which reads only tf32's
// 10 mantissa bits and would truncate the rest, reads both exactly; a product is summed as
// a_lo b_hi + a_hi b_lo + a_hi b_hi (a_lo b_lo lies below float32's last bit). x - hi is
// exact in float32 and at most 2^-11 |x|; rounding it costs at most 2^-11 of it, so what the
// parts miss of x is at most 2^-22 |x| (truncated by the tensor core, 2^-21), and on average
// a quarter of that, below float32's own rounding of x.
//
// split_tf32 is the one split of the library: the Hopper engine applies it to whole
// shared-memory stages (hopper/precision.cuh), the block GEMM to fragments in registers
// (mma_3xtf32.cuh).
#pragma once

#include "types.cuh"

namespace blasdx {

// x rounded to tf32, to nearest (ties away from zero): integer rounding of the bits (add half
// of tf32's last place, clear the 13 bits below it). Values within 2^-12 of the largest float
// round up to infinity.
__device__ __forceinline__ float round_tf32(float x) {
    return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
}

// (hi, lo) of one value: hi rounded to tf32, then the exact rest rounded to tf32. NaN and
// infinities give a NaN rest, replaced by 0 (hi keeps the value). Values within 2^-12 of the
// largest float round up to infinity and are not split correctly.
__device__ __forceinline__ void split_tf32(float x, float& hi, float& lo) {
    hi = round_tf32(x);
    const float rest = x - hi;
    lo = rest == rest ? round_tf32(rest) : 0.0f;
}

}  // namespace blasdx

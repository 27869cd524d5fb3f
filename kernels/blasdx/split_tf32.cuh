// Float32 products at float32 accuracy on tf32 tensor cores (the 3xtf32 scheme): each operand
// x is split into a high part hi = x rounded to tf32 (to nearest) and a low part lo = x - hi
// (exact in float32, |lo| <= 2^-11 |x|), which the tensor core reads to tf32's 10 mantissa
// bits; a product is summed as a_lo b_hi + a_hi b_lo + a_hi b_hi (a_lo b_lo lies below
// float32's last bit). What the parts miss of x is at most 2^-21 |x|.
//
// split_tf32 is the one split of the library: the Hopper engine applies it to whole
// shared-memory stages (hopper/precision.cuh), the block GEMM to fragments in registers
// (mma_3xtf32.cuh).
#pragma once

#include "types.cuh"

namespace blasdx {

// (hi, lo) of one value: integer rounding of the bits (add half of tf32's last place, clear
// the 13 bits below it), then one exact subtraction. NaN and infinities give a NaN low part,
// replaced by 0 (hi keeps the value). Values within 2^-12 of the largest float round up to
// infinity and are not split correctly.
__device__ __forceinline__ void split_tf32(float x, float& hi, float& lo) {
    hi = __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
    const float rest = x - hi;
    lo = rest == rest ? rest : 0.0f;
}

}  // namespace blasdx

// Reading single elements of a TMA-filled stage operand (warpgroup_mma.cuh's StageOperand) with
// ordinary shared-memory loads, for the consumers that feed mma.sync or FFMA from registers.
//
// A stage operand is 128-byte-swizzled (tma.cuh): 16-byte chunk c of 128-byte row r sits at
// chunk c ^ (r % 8), atoms of 8 rows are 1024-byte aligned. Its rows are
// * K-major: one row of BK elements per M/N index (BK * sizeof(T) = 128 bytes);
// * MN-major: panels of W = 128 / sizeof(T) M/N indices, BK rows (one per K index) each.
// A 16-byte load never straddles a chunk, so any element with a 16-byte aligned position
// inside its row starts a 16-byte vector (two doubles or four floats along the row).
#pragma once

#include "../types.cuh"

namespace blasdx {
namespace hopper {

// Byte offset of element (idx, k) of a stage operand of type T: idx is its M/N index, k its
// K index inside the stage.
template <class T, int BK, bool K_MAJOR>
__device__ __forceinline__ int stage_offset(int idx, int k) {
    constexpr int ROW = 128, W = ROW / int(sizeof(T));
    if constexpr (K_MAJOR) {
        const int byte = k * int(sizeof(T));
        return idx * ROW + (((byte >> 4) ^ (idx & 7)) << 4) + (byte & 15);
    } else {
        const int byte = (idx % W) * int(sizeof(T));
        return (idx / W) * (BK * ROW) + k * ROW + (((byte >> 4) ^ (k & 7)) << 4) + (byte & 15);
    }
}

// The 16 bytes at `offset` of a stage (offset 16-byte aligned) as V (double2 or float4).
template <class V>
__device__ __forceinline__ V load_vector(const unsigned char* stage, int offset) {
    return *reinterpret_cast<const V*>(stage + offset);
}

}  // namespace hopper
}  // namespace blasdx

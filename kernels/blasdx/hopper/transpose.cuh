// MN-major operands of 4-byte (tf32) and 1-byte (fp8, int8) types transposed in shared memory.
//
// wgmma reads tf32 and 8-bit operands K-major only. Rather than copying such an operand into a
// K-major array in global memory first (a whole extra pass over it), TMA loads the MN-major
// tile as it is (panels of 128-byte rows, one row per K index: warpgroup_mma.cuh's MN-major
// StageOperand) into a raw area of the stage, and the transposing warps rewrite it K-major
// into the stage's operand (one 128-byte row of K per M/N index), which the consumers read.
// Both layouts are 128-byte swizzled (stage_reads.cuh: stage_offset).
//
// The work is cut into blocks of 4 x 4 elements so that every shared-memory access of a warp
// meets each bank once (checked exhaustively by the engine's tests):
// * 4-byte elements: groups of 8 threads; thread t of a group moves the block of M/N indices
//   4t .. 4t + 3 of a panel and K indices 4g .. 4g + 3, g = (t + d) % 8 for the group's
//   diagonal d: four 16-byte loads (one per K row), four 16-byte stores (one per M/N row);
// * 1-byte elements: whole warps; lane t moves M/N indices 4t .. 4t + 3 and K indices
//   4g .. 4g + 3, g = (t + d) % 32: four 4-byte loads, a 4 x 4 byte transpose in registers
//   (byte permutes), four 4-byte stores.
#pragma once

#include "../types.cuh"
#include "stage_reads.cuh"

namespace blasdx {
namespace hopper {

// The 4 x 4 bytes of w[0..3] (word j: K index j, bytes: 4 M/N indices) transposed in place
// (word i: M/N index i, bytes: 4 K indices).
__device__ __forceinline__ void transpose_bytes(u32 (&w)[4]) {
    const u32 lo01 = __byte_perm(w[0], w[1], 0x5140), hi01 = __byte_perm(w[0], w[1], 0x7362);
    const u32 lo23 = __byte_perm(w[2], w[3], 0x5140), hi23 = __byte_perm(w[2], w[3], 0x7362);
    w[0] = __byte_perm(lo01, lo23, 0x5410);
    w[1] = __byte_perm(lo01, lo23, 0x7632);
    w[2] = __byte_perm(hi01, hi23, 0x5410);
    w[3] = __byte_perm(hi01, hi23, 0x7632);
}

// The 4 x 4 piece at M/N index n0, K index k0 of the MN-major tile at `raw`, written K-major at `dst`.
// n0 and k0 are multiples of 4, so the piece's four rows j (K indices k0 + j read, M/N indices n0 + j
// written) have row & 7 = (first row & 7) ^ j: in the 128-byte swizzle their offsets are the first
// row's with j << 4 XORed into the 16-byte chunk field (bits 4-5) and j rows added (an immediate). One
// swizzled offset per side, then one LOP3 per further access (not the swizzle's arithmetic each time).
__device__ __forceinline__ int next_row(int first, int j) { return (first ^ (j << 4)) + j * 128; }

template <class T, int BK>
__device__ __forceinline__ void transpose_piece(const unsigned char* raw, unsigned char* dst, int n0, int k0) {
    const int from = stage_offset<T, BK, false>(n0, k0), to = stage_offset<T, BK, true>(n0, k0);
    if constexpr (sizeof(T) == 4) {
        float4 v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = load_vector<float4>(raw, next_row(from, j));
        const float4 o0 = make_float4(v[0].x, v[1].x, v[2].x, v[3].x);
        const float4 o1 = make_float4(v[0].y, v[1].y, v[2].y, v[3].y);
        const float4 o2 = make_float4(v[0].z, v[1].z, v[2].z, v[3].z);
        const float4 o3 = make_float4(v[0].w, v[1].w, v[2].w, v[3].w);
        *reinterpret_cast<float4*>(dst + next_row(to, 0)) = o0;
        *reinterpret_cast<float4*>(dst + next_row(to, 1)) = o1;
        *reinterpret_cast<float4*>(dst + next_row(to, 2)) = o2;
        *reinterpret_cast<float4*>(dst + next_row(to, 3)) = o3;
    } else {
        u32 w[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) w[j] = *reinterpret_cast<const u32*>(raw + next_row(from, j));
        transpose_bytes(w);
#pragma unroll
        for (int i = 0; i < 4; ++i) *reinterpret_cast<u32*>(dst + next_row(to, i)) = w[i];
    }
}

// Rewrites the MN-major tile at `raw` (ROWS M/N indices x BK K indices of T) K-major at `dst`;
// THREADS threads (whole warps), `thread` the caller's index among them. A panel's pieces go to
// W / 4 threads (8 for 4-byte elements, a warp for 1-byte ones); thread t of item takes K piece (t + item) % (W / 4).
template <class T, int ROWS, int BK, int THREADS>
__device__ __forceinline__ void transpose_stage(const unsigned char* raw, unsigned char* dst, int thread) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 1, "4-byte and 1-byte elements are transposed here");
    static_assert(THREADS % 32 == 0, "whole warps transpose");
    constexpr int W = 128 / int(sizeof(T));  // M/N indices of a panel
    static_assert(ROWS % W == 0 && BK == W, "whole panels, and one 128-byte row of K per M/N index");
    constexpr int LANES = W / 4, GROUPS = THREADS / LANES, ITEMS = ROWS / W * LANES;
    const int t = thread % LANES;
#pragma unroll 1
    for (int item = thread / LANES; item < ITEMS; item += GROUPS) {
        const int panel = item / LANES, g = (t + item) % LANES;
        transpose_piece<T, BK>(raw, dst, panel * W + 4 * t, 4 * g);
    }
}

}  // namespace hopper
}  // namespace blasdx

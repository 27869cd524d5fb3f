// The warpgroup GEMM of the Hopper engine: one pipeline stage of A and B in shared memory,
// as TMA lays it out, multiplied into a warpgroup's register accumulator with wgmma.
//
// A stage operand is a ROWS x BK tile (ROWS = the tile's M extent for A, N extent for B)
// in 128-byte-swizzled shared memory:
// * K-major (A row-major, B column-major): ROWS rows of BK elements, BK * sizeof(T) = 128
//   bytes, one TMA box {BK, ROWS}. A K step of the instruction (32 bytes of K) is reached by
//   moving the descriptor's start address along the row; SBO = 1024 (8 rows of 128 B).
// * MN-major (A column-major, B row-major; 16-bit types only): ROWS / 64 panels, each BK
//   rows (along K) of 64 elements (128 B), one TMA box {64, BK} per panel. The instruction
//   spans panels LBO = one panel apart and groups of 8 K rows SBO = 1024 apart.
// These are the layouts of wgmma.cuh's `panels` (PTX ISA 9.7.15.5.1.2), filled by TMA.
#pragma once

#include "../wgmma.cuh"
#include "tma.cuh"

namespace blasdx {
namespace hopper {

constexpr int SWIZZLE_BYTES = 128;
constexpr int ATOM_BYTES = 8 * SWIZZLE_BYTES;

template <class T, int ROWS, int BK, bool K_MAJOR>
struct StageOperand {
    using type = T;
    static constexpr bool k_major = K_MAJOR;
    static constexpr int W = SWIZZLE_BYTES / int(sizeof(T));  // elements per 128-byte row
    static constexpr int BYTES = ROWS * BK * int(sizeof(T));
    static constexpr int BOXES = K_MAJOR ? 1 : ROWS / W;
    static constexpr int BOX_BYTES = BYTES / BOXES;
    static_assert(!K_MAJOR || BK == W, "a K-major stage holds one 128-byte row of K per M/N index");
    static_assert(K_MAJOR || (ROWS % W == 0 && BK % 8 == 0), "an MN-major stage is whole 64-wide panels of 8-row atoms");
    static_assert(ROWS % 8 == 0 && ROWS <= 256, "TMA boxes are at most 256 rows of whole swizzle atoms");
    static_assert(BOX_BYTES % ATOM_BYTES == 0, "every box starts on a swizzle atom");

    // The tile whose first M/N index is row0 and first K index k0, of problem `batch`.
    __device__ __forceinline__ static void load(unsigned char* dst, const TensorMap* map, u64* bar, int row0, int k0,
                                                int batch) {
        if constexpr (K_MAJOR) {
            load_box(dst, map, bar, k0, row0, batch);
        } else {
#pragma unroll
            for (int b = 0; b < BOXES; ++b) load_box(dst + b * BOX_BYTES, map, bar, row0 + b * W, k0, batch);
        }
    }

    // Part `part` of PARTS of the tile, multicast into the same place in each block of
    // `blocks`: K-major tiles split by rows (the map's box is ROWS / PARTS rows), MN-major
    // ones by panels. The parts of all blocks together make the whole tile in each.
    template <int PARTS>
    __device__ __forceinline__ static void load_part(unsigned char* dst, const TensorMap* map, u64* bar, int row0,
                                                     int k0, int batch, int part, unsigned short blocks) {
        if constexpr (K_MAJOR) {
            static_assert(ROWS % (8 * PARTS) == 0, "each part is whole swizzle atoms");
            constexpr int PART_ROWS = ROWS / PARTS;
            load_box_multicast(dst + part * PART_ROWS * SWIZZLE_BYTES, map, bar, k0, row0 + part * PART_ROWS, batch,
                               blocks);
        } else {
            static_assert(BOXES % PARTS == 0, "each part is whole panels");
#pragma unroll
            for (int b = part * (BOXES / PARTS); b < (part + 1) * (BOXES / PARTS); ++b) {
                load_box_multicast(dst + b * BOX_BYTES, map, bar, row0 + b * W, k0, batch, blocks);
            }
        }
    }

    // Descriptor of the slice at tile row `row` (a multiple of 64 for A, 0 for B) and K step
    // `step` of K_STEP elements (32 bytes of K), for the operand whose stage starts at `base`.
    template <int K_STEP>
    __device__ __forceinline__ static wgmma::u64 descriptor(u32 base, int row, int step) {
        if constexpr (K_MAJOR) {
            return wgmma::descriptor<SWIZZLE_BYTES>(base + row * SWIZZLE_BYTES + step * K_STEP * int(sizeof(T)), 16,
                                                    ATOM_BYTES);
        } else {
            return wgmma::descriptor<SWIZZLE_BYTES>(base + (row / W) * BOX_BYTES + step * K_STEP * SWIZZLE_BYTES,
                                                    BOX_BYTES, ATOM_BYTES);
        }
    }
};

// A warpgroup's accumulator: ATOMS_M slices of 64 rows x N columns in registers of type V
// (float, or int for 8-bit integers), in wgmma's fragment layout (wgmma.cuh): register
// 4j + e of a slice holds row 16 * warp + lane / 4 + 8 * (e / 2), column 8j + 2 * (lane % 4) + e % 2.
template <int ATOMS_M_, int N_, class V = float>
struct Accumulator {
    using value_type = V;
    static constexpr int ATOMS_M = ATOMS_M_, N = N_;
    V r[ATOMS_M][N / 2];

    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int i = 0; i < ATOMS_M; ++i)
#pragma unroll
            for (int j = 0; j < N / 2; ++j) r[i][j] = V(0);
        pin();
    }

    // Keeps the compiler from moving register accesses across wgmma issue / wait points.
    __device__ __forceinline__ void pin() {
#pragma unroll
        for (int i = 0; i < ATOMS_M; ++i)
#pragma unroll
            for (int j = 0; j < N / 2; ++j) wgmma::fence_operand(r[i][j]);
    }

    // f(row, col, v0, v1) for each pair of horizontally adjacent elements this thread holds,
    // rows and columns counted from the warpgroup tile's corner (row0, col0).
    template <class F>
    __device__ __forceinline__ void for_each_pair(int row0, int col0, F&& f) const {
        const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
        const int row = row0 + 16 * warp + lane / 4, col = col0 + 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < ATOMS_M; ++i)
#pragma unroll
            for (int j = 0; j < N / 8; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h) f(row + 64 * i + 8 * h, col + 8 * j, r[i][4 * j + 2 * h], r[i][4 * j + 2 * h + 1]);
    }
};

// acc += A[row0 .. row0 + 64 * ATOMS_M) x B[0 .. N) over one stage's BK: the wgmmas only
// (the caller fences and commits). TA / TB are the instruction's operand types
// (blasdx::tf32 for tf32), SA / SB the stage operands. FRESH: acc = A x B instead (the first
// step starts the sum afresh; tf32 only).
template <class TA, class TB, class SA, class SB, int ATOMS_M, int N, int BK, bool FRESH = false, class V>
__device__ __forceinline__ void issue_stage(Accumulator<ATOMS_M, N, V>& acc, u32 a_base, u32 b_base, int row0) {
    using op = wgmma::mma<TA, TB, V>;
    constexpr bool TRANS_A = !SA::k_major, TRANS_B = !SB::k_major;
    static_assert(BK % op::K_STEP == 0, "a stage is whole instruction K steps");
#pragma unroll
    for (int step = 0; step < BK / op::K_STEP; ++step) {
        const wgmma::u64 desc_b = SB::template descriptor<op::K_STEP>(b_base, 0, step);
#pragma unroll
        for (int i = 0; i < ATOMS_M; ++i) {
            const wgmma::u64 desc_a = SA::template descriptor<op::K_STEP>(a_base, row0 + 64 * i, step);
            if constexpr (FRESH) {
                if (step == 0) {
                    op::template issue<N, TRANS_A, TRANS_B, false>(acc.r[i], desc_a, desc_b);
                    continue;
                }
            }
            op::template issue<N, TRANS_A, TRANS_B>(acc.r[i], desc_a, desc_b);
        }
    }
}

// One stage as one wgmma group (committed, not waited for).
template <class TA, class TB, class SA, class SB, int ATOMS_M, int N, int BK, class V>
__device__ __forceinline__ void mma_stage(Accumulator<ATOMS_M, N, V>& acc, u32 a_base, u32 b_base, int row0) {
    wgmma::fence();
    issue_stage<TA, TB, SA, SB, ATOMS_M, N, BK>(acc, a_base, b_base, row0);
    wgmma::commit();
}

// One stage of float32 operands split into tf32 parts (precision.cuh), as one wgmma group:
// acc += A_lo B_hi + A_hi B_lo + A_hi B_hi, the small terms first (FRESH: acc = ..., the sum
// started afresh by the first step).
template <class SA, class SB, int ATOMS_M, int N, int BK, bool FRESH = false>
__device__ __forceinline__ void mma_stage_split(Accumulator<ATOMS_M, N, float>& acc, u32 a_hi, u32 b_hi, u32 a_lo,
                                                u32 b_lo, int row0) {
    wgmma::fence();
    issue_stage<tf32, tf32, SA, SB, ATOMS_M, N, BK, FRESH>(acc, a_lo, b_hi, row0);
    issue_stage<tf32, tf32, SA, SB, ATOMS_M, N, BK>(acc, a_hi, b_lo, row0);
    issue_stage<tf32, tf32, SA, SB, ATOMS_M, N, BK>(acc, a_hi, b_hi, row0);
    wgmma::commit();
}

}  // namespace hopper
}  // namespace blasdx

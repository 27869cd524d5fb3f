// The f32 warp tile of the wide engine: a warp's WM x WN part of the block tile as 4 x 8
// lanes, each holding a (WM / 4) x (WN / 8) register tile, multiplied with FFMA from
// fragments read out of the TMA-filled stages.
//
// A stage holds BK = 32 K indices (128 bytes of floats), taken as BK / 4 groups of 4. Every
// shared-memory load is 16 bytes (four floats), and the 8 lanes of a quarter-warp (one lane
// row `lm`, lanes `ln` = 0..7) never meet in a bank:
// * A: the quarter-warp reads one A address (a broadcast) in either layout. K-major: thread
//   rows lm + 4i, one load gives 4 K values of a row. MN-major: thread rows 4 lm + 16 ii + e,
//   one load gives 4 rows at one K.
// * B: the 8 lanes read 8 addresses. K-major: columns ln + 8j, whose rows sit in 8 different
//   swizzle phases. MN-major: columns 4 ln + 32 jj + e, 8 different chunks of one row.
// Per group a thread loads (WM / 4 + WN / 8) * 4 floats for (WM / 4) * (WN / 8) * 4 FFMAs.
#pragma once

#include "stage_reads.cuh"

namespace blasdx {
namespace hopper {

template <int WM, int WN, int BK, int A_BYTES, bool A_K_MAJOR, bool B_K_MAJOR>
struct FfmaWarpTile {
    using value_type = float;
    static constexpr int TM = WM / 4, TN = WN / 8, KG = 4, GROUPS = BK / KG;
    static_assert(TM % 4 == 0 && TN % 4 == 0, "register tiles of whole 4 x 4 blocks");
    static_assert(BK == 32, "a stage is one 128-byte row of floats per K-major index");
    static_assert(A_K_MAJOR || WM % 32 == 0, "an MN-major warp tile covers whole 32-row panels");
    static_assert(B_K_MAJOR || WN % 32 == 0, "an MN-major warp tile covers whole 32-column panels");

    static_assert(GROUPS % 2 == 0, "register sets alternate the same way in every stage");

    // One K group's values of the thread's rows and columns, in two alternating sets.
    struct Group {
        float a[TM][KG];
        float b[TN][KG];
    };
    struct Fragments {
        Group set[2];
    };
    struct Accumulator {
        float r[TM][TN];
    };

    int m0, n0;  // the warp tile's corner in the block tile
    int lm, ln;  // lane / 8, lane % 8
    // The lane's part of every load's byte offset; the rest is a compile-time constant. The
    // swizzle phase of a K-major row is its index % 8, of an MN-major panel row its K % 8:
    // * A K-major, row m0 + lm + 4i, K group q: chunk q ^ (lm + 4 (i % 2)); with x = q ^ 4 (i % 2),
    //   16 ((x & 3) ^ lm) is the lane's part (a_lane[x & 3]), 64 (x >> 2) + 512 i the constant;
    // * A MN-major, rows m0 + 4 lm + 16 ii, K index k: chunk (lm + 4 (ii % 2)) ^ (k % 8);
    //   16 (lm ^ (k % 4)) is the lane's part (a_lane[k % 4]), 64 ((ii % 2) ^ (k % 8 >> 2)) the rest;
    // * B K-major, row n0 + ln + 8j, group q: chunk q ^ ln, b_lane[q], 1024 j on;
    // * B MN-major, columns n0 + 4 ln + 32 jj, K index k: chunk ln ^ (k % 8), b_lane[k % 8].
    int a_lane[4], b_lane[8];

    __device__ __forceinline__ FfmaWarpTile(int m0_, int n0_) : m0(m0_), n0(n0_) {
        const int lane = threadIdx.x % 32;
        lm = lane >> 3;
        ln = lane & 7;
#pragma unroll
        for (int x = 0; x < 4; ++x) {
            a_lane[x] = A_K_MAJOR ? (m0 + lm) * 128 + 16 * (x ^ lm) : (m0 / 32) * (BK * 128) + 16 * (lm ^ x);
        }
#pragma unroll
        for (int x = 0; x < 8; ++x) {
            b_lane[x] = B_K_MAJOR ? (n0 + ln) * 128 + 16 * (x ^ ln) : (n0 / 32) * (BK * 128) + 16 * (ln ^ x);
        }
    }

    __device__ __forceinline__ void zero(Accumulator& acc) const {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc.r[i][j] = 0.0f;
    }

    // The four floats of one 16-byte load as four K values of one row (or column) of a fragment...
    __device__ static __forceinline__ void put_k(float (&dst)[KG], float4 v) {
        dst[0] = v.x;
        dst[1] = v.y;
        dst[2] = v.z;
        dst[3] = v.w;
    }

    // ... or as K index kk of rows (or columns) first .. first + 3.
    template <int ROWS>
    __device__ static __forceinline__ void put_rows(float (&dst)[ROWS][KG], int first, int kk, float4 v) {
        dst[first][kk] = v.x;
        dst[first + 1][kk] = v.y;
        dst[first + 2][kk] = v.z;
        dst[first + 3][kk] = v.w;
    }

    // Group `group` of the stage whose A operand is at a, B at b.
    __device__ __forceinline__ void load(Group& f, const unsigned char* a, const unsigned char* b, int group) const {
        const int k = KG * group;
        if constexpr (A_K_MAJOR) {
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                const int x = group ^ (4 * (i % 2));
                put_k(f.a[i], load_vector<float4>(a, a_lane[x & 3] + 64 * (x >> 2) + 512 * i));
            }
        } else {
#pragma unroll
            for (int ii = 0; ii < TM / 4; ++ii)
#pragma unroll
                for (int kk = 0; kk < KG; ++kk) {
                    const int kr = k + kk;
                    put_rows(f.a, 4 * ii, kk, load_vector<float4>(a, a_lane[kr % 4] + (BK * 128) * (ii / 2) + 128 * kr +
                                                                          64 * ((ii % 2) ^ ((kr % 8) >> 2))));
                }
        }
        if constexpr (B_K_MAJOR) {
#pragma unroll
            for (int j = 0; j < TN; ++j) put_k(f.b[j], load_vector<float4>(b, b_lane[group] + 1024 * j));
        } else {
#pragma unroll
            for (int jj = 0; jj < TN / 4; ++jj)
#pragma unroll
                for (int kk = 0; kk < KG; ++kk) {
                    const int kr = k + kk;
                    put_rows(f.b, 4 * jj, kk, load_vector<float4>(b, b_lane[kr % 8] + (BK * 128) * jj + 128 * kr));
                }
        }
    }

    __device__ __forceinline__ void first(Fragments& f, const unsigned char* stage) const {
        load(f.set[0], stage, stage + A_BYTES, 0);
    }

    // acc += the stage's product, each group's successor loaded before the group multiplies;
    // next() (called once, before the last group) gives the next stage of the unit or nullptr.
    template <class Next>
    __device__ __forceinline__ void stage(Accumulator& acc, Fragments& f, const unsigned char* stage,
                                          Next&& next) const {
#pragma unroll
        for (int group = 0; group < GROUPS; ++group) {
            if (group + 1 < GROUPS) {
                load(f.set[(group + 1) & 1], stage, stage + A_BYTES, group + 1);
            } else if (const unsigned char* following = next()) {
                first(f, following);
            }
            mma(acc, f.set[group & 1]);
        }
    }

    __device__ __forceinline__ void mma(Accumulator& acc, const Group& f) const {
#pragma unroll
        for (int kk = 0; kk < KG; ++kk)
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc.r[i][j] = fmaf(f.a[i][kk], f.b[j][kk], acc.r[i][j]);
    }

    __device__ __forceinline__ int row(int i) const {
        return m0 + (A_K_MAJOR ? lm + 4 * i : 4 * lm + 16 * (i / 4) + i % 4);
    }
    __device__ __forceinline__ int col(int j) const {
        return n0 + (B_K_MAJOR ? ln + 8 * j : 4 * ln + 32 * (j / 4) + j % 4);
    }

    template <class F>
    __device__ __forceinline__ void for_each(const Accumulator& acc, F&& f) const {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) f(row(i), col(j), acc.r[i][j]);
    }
};

}  // namespace hopper
}  // namespace blasdx

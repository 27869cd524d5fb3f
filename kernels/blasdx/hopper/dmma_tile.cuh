// The f64 warp tile of the wide engine: a warp's WM x WN part of the block tile, multiplied
// with DMMA m16n8k8 (mma.cuh) from fragments read out of the TMA-filled stages.
//
// A stage holds BK = 16 K indices (128 bytes of doubles), taken as BK / 8 groups; each group
// is one m16n8k8 per (16-row, 8-column) piece of the warp tile. Every fragment register pair
// comes from one 16-byte shared-memory load, without bank conflicts in any layout. Two
// freedoms make that possible (the product does not change):
// * K order: thread t's K slots (t and t + 4 of the instruction) are taken from stage K
//   indices 2t and 2t + 1 of the group, so one 16-byte load along a K-major row gives both.
// * M / N order: the instruction's row (column) g of a piece is stage row p(g) of the piece:
//   - K-major operand: p(g) = sigma(g) = (g >> 1) | 4 * (g & 1), so the two rows that the 8
//     lanes of a quarter-warp read (g = 2q, 2q + 1) differ in bit 2 of their swizzle phase
//     and their chunks 0..3 and 4..7 never meet;
//   - MN-major operand: A's rows g and g + 8 are stage indices 2g and 2g + 1 (one 16-byte
//     load gives both); B's column g of two neighbouring pieces likewise.
// The accumulator remembers the order: row() / col() give each register's place in the tile.
#pragma once

#include "../mma.cuh"
#include "stage_reads.cuh"

namespace blasdx {
namespace hopper {

template <int WM, int WN, int BK, int A_BYTES, bool A_K_MAJOR, bool B_K_MAJOR>
struct DmmaWarpTile {
    using value_type = double;
    using atom = mma_m16n8_f64<8>;
    static constexpr int MI = WM / 16, NJ = WN / 8, GROUPS = BK / atom::K, STEPS = GROUPS * MI;
    static_assert(WM % 16 == 0 && WN % 16 == 0, "whole 16 x 16 pieces (MN-major B pairs its 8-column pieces)");
    static_assert(BK == 16, "a stage is one 128-byte row of doubles per K-major index");
    static_assert(STEPS % 2 == 0 && GROUPS % 2 == 0, "register sets alternate the same way in every stage");

    // A step is one 16-row slice of one K group: its A fragment alternates between two sets
    // from step to step, B's fragments of the group between two sets from group to group
    // (128 accumulator + 48 fragment registers for a 64 x 32 warp tile).
    struct Fragments {
        double a[2][4];
        double b[2][NJ][2];
    };
    struct Accumulator {
        double r[MI][NJ][4];
    };

    int m0, n0;  // the warp tile's corner in the block tile
    int g, t;    // lane / 4, lane % 4
    // Byte offsets of this lane's first loads (slice 0 of A, 8-column slice 0 of B): K-major by
    // K group, MN-major by K slot; every other load adds a compile-time constant.
    int a_lane[2], b_lane[2];

    __device__ __forceinline__ static int sigma(int i) { return dmma_row_order(i); }

    // stage_offset of the lane's first element, split into the lane's part and constants:
    // K-major row r = base + sigma(g) (r % 8 = sigma(g)), K index 8 * group + 2t: chunk
    //   (4 group + t) ^ sigma(g) = 4 (group ^ (sigma(g) >> 2)) + (t ^ (sigma(g) & 3));
    // MN-major index base + 2g (chunk g of its 16-wide panel), K index 2t + slot (+ 8 group:
    //   one row of 1024 bytes further, same swizzle phase).
    __device__ __forceinline__ static int lane_offset(int base, bool k_major, int g, int t, int which) {
        if (k_major) {
            const int s = sigma(g);
            return (base + s) * 128 + 16 * (t ^ (s & 3)) + 64 * (which ^ (s >> 2));
        }
        const int k = 2 * t + which;
        return (base / 16) * (BK * 128) + k * 128 + ((g ^ k) << 4);
    }

    __device__ __forceinline__ DmmaWarpTile(int m0_, int n0_) : m0(m0_), n0(n0_) {
        const int lane = threadIdx.x % 32;
        g = lane >> 2;
        t = lane & 3;
#pragma unroll
        for (int w = 0; w < 2; ++w) {
            a_lane[w] = lane_offset(m0, A_K_MAJOR, g, t, w);
            b_lane[w] = lane_offset(n0, B_K_MAJOR, g, t, w);
        }
    }

    __device__ __forceinline__ void zero(Accumulator& acc) const {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc.r[i][j][e] = 0.0;
    }

    // A's fragment of 16-row slice i, K group `group`, from the stage's A operand at a
    // (K-major: rows 16 i + sigma(g) and + 8, 2048 and 1024 bytes on; MN-major: panel i).
    __device__ __forceinline__ void load_a(double (&f)[4], const unsigned char* a, int i, int group) const {
        if constexpr (A_K_MAJOR) {
            const double2 lo = load_vector<double2>(a, a_lane[group] + 2048 * i);
            const double2 hi = load_vector<double2>(a, a_lane[group] + 2048 * i + 1024);
            f[0] = lo.x;
            f[2] = lo.y;
            f[1] = hi.x;
            f[3] = hi.y;
        } else {
            const double2 s0 = load_vector<double2>(a, a_lane[0] + BK * 128 * i + 1024 * group);
            const double2 s1 = load_vector<double2>(a, a_lane[1] + BK * 128 * i + 1024 * group);
            f[0] = s0.x;
            f[1] = s0.y;
            f[2] = s1.x;
            f[3] = s1.y;
        }
    }

    // B's fragments of K group `group` for every 8-column slice, from the stage's B operand at b
    // (K-major: rows 8 j + sigma(g), 1024 bytes apart; MN-major: slices 2p, 2p + 1 in panel p).
    __device__ __forceinline__ void load_b(double (&f)[NJ][2], const unsigned char* b, int group) const {
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            if constexpr (B_K_MAJOR) {
                const double2 v = load_vector<double2>(b, b_lane[group] + 1024 * j);
                f[j][0] = v.x;
                f[j][1] = v.y;
            } else if (j % 2 == 0) {
                const double2 s0 = load_vector<double2>(b, b_lane[0] + BK * 128 * (j / 2) + 1024 * group);
                const double2 s1 = load_vector<double2>(b, b_lane[1] + BK * 128 * (j / 2) + 1024 * group);
                f[j][0] = s0.x;
                f[j + 1][0] = s0.y;
                f[j][1] = s1.x;
                f[j + 1][1] = s1.y;
            }
        }
    }

    // The fragments of a stage's first step.
    __device__ __forceinline__ void first(Fragments& f, const unsigned char* stage) const {
        load_a(f.a[0], stage, 0, 0);
        load_b(f.b[0], stage + A_BYTES, 0);
    }

    // acc += the stage's product, each step's successor loaded before the step multiplies;
    // next() (called once, before the last step) gives the next stage of the unit or nullptr.
    template <class Next>
    __device__ __forceinline__ void stage(Accumulator& acc, Fragments& f, const unsigned char* stage,
                                          Next&& next) const {
#pragma unroll
        for (int step = 0; step < STEPS; ++step) {
            const int group = step / MI, i = step % MI;
            if (step + 1 < STEPS) {
                const int group1 = (step + 1) / MI, i1 = (step + 1) % MI;
                load_a(f.a[(step + 1) & 1], stage, i1, group1);
                if (i1 == 0) load_b(f.b[group1 & 1], stage + A_BYTES, group1);
            } else if (const unsigned char* following = next()) {
                first(f, following);
            }
#pragma unroll
            for (int j = 0; j < NJ; ++j) atom::mma(acc.r[i][j], f.a[step & 1], f.b[group & 1][j]);
        }
    }

    // Row and column in the block tile of register e of piece (i, j).
    __device__ __forceinline__ int row(int i, int e) const {
        return m0 + 16 * i + (A_K_MAJOR ? sigma(g) + 8 * (e >> 1) : 2 * g + (e >> 1));
    }
    __device__ __forceinline__ int col(int j, int e) const {
        const int c = 2 * t + (e & 1);  // the instruction's column
        return B_K_MAJOR ? n0 + 8 * j + sigma(c) : n0 + 8 * (j & ~1) + 2 * c + (j & 1);
    }

    // f(row, col, value) for every element this thread holds.
    template <class F>
    __device__ __forceinline__ void for_each(const Accumulator& acc, F&& f) const {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) f(row(i, e), col(j, e), acc.r[i][j][e]);
    }
};

}  // namespace hopper
}  // namespace blasdx

// WarpgroupGemm: C(M x N) = A(M x K) * B(K x N) by one thread block with wgmma (sm_90a).
//
// A and B sit in shared memory as swizzled panels (wgmma.cuh): each operand in its global
// storage order, cut along its contiguous dimension into panels Cfg::a_panel_bytes /
// Cfg::b_panel_bytes wide. The output is tiled into 64 x Cfg::wgmma_n warpgroup tiles that the
// block's warpgroups take in turn; a tile accumulates over all of K in registers, then hands
// every element to epi(row, col, value) like BlockGemm::run does. Sizes tile exactly (the
// plan chooses this path only then), so nothing is predicated.
#pragma once

#include "types.cuh"
#include "wgmma.cuh"

namespace blasdx {

template <class Cfg>
struct WarpgroupGemm {
    using a_type = typename Cfg::a_type;
    using b_type = typename Cfg::b_type;
    using acc_type = typename Cfg::accumulator_type;
    using op = wgmma::mma<a_type, b_type, acc_type>;
    using reg_type = typename op::reg_type;  // float, or u32 holding two halves

    static constexpr int m = Cfg::m, n = Cfg::n, k = Cfg::k;
    static constexpr int TILE_N = Cfg::wgmma_n, K_STEP = op::K_STEP;
    static constexpr int GROUPS = Cfg::threads / 128;
    static constexpr int TILES_M = m / 64, TILES = TILES_M * (n / TILE_N);
    static constexpr int REGS = TILE_N / 2 * int(sizeof(acc_type)) / 4;  // accumulator registers per thread
    // K-major: A row-major (M x K rows along K), B column-major (N rows along K).
    static constexpr bool A_K_MAJOR = Cfg::a_row_major, B_K_MAJOR = !Cfg::b_row_major;
    using A = wgmma::panels<a_type, Cfg::a_outer, Cfg::a_inner, Cfg::a_panel_bytes>;
    using B = wgmma::panels<b_type, Cfg::b_outer, Cfg::b_inner, Cfg::b_panel_bytes>;

    static_assert(!Cfg::is_complex, "wgmma runs real GEMMs");
    static_assert(Cfg::threads % 128 == 0, "wgmma is issued by whole warpgroups of 128 threads");
    static_assert(m % 64 == 0 && n % TILE_N == 0 && k % K_STEP == 0, "the warpgroup tiles must cover C and K exactly");
    static_assert(TILE_N % 8 == 0 && TILE_N <= 256, "a warpgroup tile is 8 to 256 columns wide");
    static_assert(op::TRANSPOSES || (A_K_MAJOR && B_K_MAJOR), "fp8 wgmma needs row-major A and column-major B");
    static_assert(A_K_MAJOR || A::W == 64, "M-major A is read in 64-row slabs, one 128B panel each");
    static_assert(B_K_MAJOR || (TILE_N & -TILE_N) % B::W == 0,
                  "N-major B panels must not be wider than the narrowest instruction of a tile");
    static_assert(K_STEP * int(sizeof(a_type)) == 32, "one wgmma reads 32 bytes of K");

    // Descriptor of the 64 x K_STEP slice of A at (m0, k0).
    __device__ __forceinline__ static wgmma::u64 a_descriptor(u32 base, int m0, int k0) {
        if constexpr (A_K_MAJOR) {  // rows along K: step K inside the panel row by moving the start
            const int kb = k0 * int(sizeof(a_type));
            return wgmma::descriptor<Cfg::a_panel_bytes>(
                base + (kb / Cfg::a_panel_bytes) * A::PANEL + m0 * Cfg::a_panel_bytes + kb % Cfg::a_panel_bytes, 16,
                A::ATOM);
        } else {  // rows along M: the 64 rows of the slice are one panel, K rows 8 to an atom
            return wgmma::descriptor<Cfg::a_panel_bytes>(base + (m0 / A::W) * A::PANEL + k0 * Cfg::a_panel_bytes,
                                                         A::PANEL, A::ATOM);
        }
    }

    // Descriptor of the K_STEP x width slice of B at (k0, n0).
    __device__ __forceinline__ static wgmma::u64 b_descriptor(u32 base, int n0, int k0) {
        if constexpr (B_K_MAJOR) {
            const int kb = k0 * int(sizeof(b_type));
            return wgmma::descriptor<Cfg::b_panel_bytes>(
                base + (kb / Cfg::b_panel_bytes) * B::PANEL + n0 * Cfg::b_panel_bytes + kb % Cfg::b_panel_bytes, 16,
                B::ATOM);
        } else {  // N-major: consecutive panels of B::W columns are LBO apart
            return wgmma::descriptor<Cfg::b_panel_bytes>(base + (n0 / B::W) * B::PANEL + k0 * Cfg::b_panel_bytes,
                                                         B::PANEL, B::ATOM);
        }
    }

    // One K step of the tile at (m0, n0): a tile TILE_N wide is issued as its binary digits,
    // widest first (96 = 64 + 32), each instruction on its own accumulator registers.
    template <int WIDTH = 256, int DONE = 0>
    __device__ __forceinline__ static void issue(reg_type* acc, wgmma::u64 desc_a, u32 sB, int n0, int k0) {
        if constexpr (WIDTH >= 8) {
            if constexpr ((TILE_N & WIDTH) != 0) {
                op::template issue<WIDTH, !A_K_MAJOR, !B_K_MAJOR>(acc + DONE / 2 * int(sizeof(acc_type)) / 4, desc_a,
                                                                  b_descriptor(sB, n0 + DONE, k0));
            }
            issue<WIDTH / 2, DONE + (TILE_N & WIDTH)>(acc, desc_a, sB, n0, k0);
        }
    }

    // Every element of the warpgroup tiles this thread's warpgroup owns goes to epi(row, col, value).
    template <class Epilogue>
    __device__ static void run(const a_type* sA, const b_type* sB, int tid, Epilogue& epi) {
        const int group = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
        const u32 a_base = shared_address(sA), b_base = shared_address(sB);
        for (int tile = group; tile < TILES; tile += GROUPS) {
            const int m0 = (tile % TILES_M) * 64, n0 = (tile / TILES_M) * TILE_N;
            reg_type acc[REGS];
#pragma unroll
            for (int r = 0; r < REGS; ++r) acc[r] = reg_type(0);
#pragma unroll
            for (int r = 0; r < REGS; ++r) wgmma::fence_operand(acc[r]);
            wgmma::fence();
#pragma unroll
            for (int k0 = 0; k0 < k; k0 += K_STEP) issue(acc, a_descriptor(a_base, m0, k0), b_base, n0, k0);
            wgmma::commit();
            wgmma::wait<0>();
#pragma unroll
            for (int r = 0; r < REGS; ++r) wgmma::fence_operand(acc[r]);

            const acc_type* values = reinterpret_cast<const acc_type*>(acc);
            const int row = m0 + 16 * warp + lane / 4, col = n0 + 2 * (lane % 4);
#pragma unroll
            for (int j = 0; j < TILE_N / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) epi(row + 8 * (e / 2), col + 8 * j + e % 2, values[4 * j + e]);
        }
        // the block's other warpgroups may still read shared memory through the async proxy;
        // callers sync the block before reusing it, as after BlockGemm::run
    }
};

}  // namespace blasdx

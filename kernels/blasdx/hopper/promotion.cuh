// fp8 promotion: the tensor core's partial sums added into f32 registers every INTERVAL K elements.
//
// Hopper's fp8 wgmma keeps its running sum in a narrower accumulator than f32 (its result is
// truncated to about 14 significant bits at every instruction), so over a deep K the error
// grows with the number of instructions. Promotion (DeepSeek-V3 report, section 3.3.2) lets
// the tensor core sum only INTERVAL K elements into a temporary accumulator that starts
// afresh (scale-d 0), waits for it, and adds it into the consumer's f32 accumulator on the CUDA
// cores: the tensor core's error stays that of one interval whatever K is. The moment of the
// addition is also where block scales of the operands are applied (a factor per row of A and
// 128-deep K block, and per 128 x 128 block of B), since a K block's products share them.
//
// The temporary accumulator is one 64 x TN slice (TN = min(N, 128) columns, 64 registers), so
// promotion costs 64 registers whatever the tile: each 64-row slice and TN-column chunk of the
// consumer's tile is multiplied and promoted in turn. A promoting consumer waits for its own
// products before it adds them up; the other consumer's products keep the tensor cores busy.
// Overlapped (gemm.cuh's multiply_overlapped, one chunk a consumer): a second temporary takes the
// next stage's products while this stage's are added (issue_interval / add_interval below).
// Block scales come from global memory (L2) and are loaded a stage ahead (Factors), so their
// latency hides under a whole stage of products.
#pragma once

#include "../wgmma.cuh"
#include "scheduler.cuh"
#include "warpgroup_mma.cuh"

namespace blasdx {
namespace hopper {

// One stage's block factors of this thread: rows (slice i, half h) and TN-column chunks j.
template <int ATOMS_M, int CHUNKS>
struct Factors {
    float x[ATOMS_M][2];
    float y[CHUNKS];
};

// Block scales applied at promotion: none (every factor 1; the addition has no multiply).
struct NoBlockScales {
    static constexpr bool ACTIVE = false;
    template <int TN, int ATOMS_M, int CHUNKS>
    __device__ __forceinline__ void load(Factors<ATOMS_M, CHUNKS>&, const Work&, int, int, int) const {}
    struct Cursor {
        template <int ATOMS_M, int CHUNKS>
        __device__ __forceinline__ void load(Factors<ATOMS_M, CHUNKS>&, int) const {}
    };
    template <int TN, int ATOMS_M, int CHUNKS>
    __device__ __forceinline__ Cursor cursor(const Work&, int, int) const { return {}; }
};

// A unit's block factors read K block by K block: this thread's rows (slice i, half h) and TN-column
// chunks (j) resolved once a unit, so that each stage's reads cost an address each (what an overlapped
// promotion's consumer, short of registers, can afford). X / Y: whether that operand has block scales.
template <bool X, bool Y, int ATOMS_M, int CHUNKS>
struct FactorCursor {
    const float* x[ATOMS_M][2];
    const float* y[CHUNKS];
    i64 x_col, y_row;

    template <int A, int C>
    __device__ __forceinline__ void load(Factors<A, C>& f, int kb) const {
        static_assert(A == ATOMS_M && C == CHUNKS, "the factors of this cursor's slices and chunks");
#pragma unroll
        for (int i = 0; i < ATOMS_M; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) f.x[i][h] = X ? __ldg(x[i][h] + kb * x_col) : 1.0f;
#pragma unroll
        for (int j = 0; j < CHUNKS; ++j) f.y[j] = Y ? __ldg(y[j] + kb * y_row) : 1.0f;
    }
};

// Block scales of X (A: one f32 per row and 128-deep K block, x[row * x_row + kb * x_col]) and / or
// of Y (B: one f32 per 128-deep K block and 128-wide column block, y[kb * y_row + nb * y_col]).
// Rows and columns past M and N read the last one (their products are zeros and never stored).
template <bool X, bool Y>
struct BlockScales {
    static constexpr bool ACTIVE = X || Y;
    static constexpr int BLOCK = 128;  // K elements (and B columns) per scale
    const float* x;
    const float* y;
    i64 x_row, x_col, y_row, y_col;
    int m, n;

    // This thread's factors for K block kb: rows row0 + 64 i + 16 * warp + lane / 4 + 8 h of the
    // warpgroup tile starting at (row0, col0), and its TN-column chunks j.
    template <int TN, int ATOMS_M, int CHUNKS>
    __device__ __forceinline__ void load(Factors<ATOMS_M, CHUNKS>& f, const Work& w, int kb, int row0, int col0) const {
        cursor<TN, ATOMS_M, CHUNKS>(w, row0, col0).load(f, kb);
    }

    // The addresses of load() for K block 0: cursor(w, row0, col0).load(f, kb) is load(f, w, kb, row0, col0).
    template <int TN, int ATOMS_M, int CHUNKS>
    __device__ __forceinline__ FactorCursor<X, Y, ATOMS_M, CHUNKS> cursor(const Work&, int row0, int col0) const {
        static_assert(BLOCK % TN == 0, "a promotion chunk lies in one 128-column block of B");
        FactorCursor<X, Y, ATOMS_M, CHUNKS> c;
        const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
        const int row = row0 + 16 * warp + lane / 4;
#pragma unroll
        for (int i = 0; i < ATOMS_M; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) c.x[i][h] = X ? x + min(row + 64 * i + 8 * h, m - 1) * x_row : nullptr;
        const int last = (n - 1) / BLOCK;
#pragma unroll
        for (int j = 0; j < CHUNKS; ++j) c.y[j] = Y ? y + min((col0 + j * TN) / BLOCK, last) * y_col : nullptr;
        c.x_col = x_col;
        c.y_row = y_row;
        return c;
    }
};

// Columns of the temporary accumulator of a consumer whose tile is N wide.
template <int N> struct promotion_width {
    static constexpr int value = N < 128 ? N : 128;
};

// The tensor cores' sum of one interval: the instructions of K steps [first, first + STEPS) of the
// 64-row slice at `row` and the TN columns at `col` into `part`, the first starting afresh (scale-d 0),
// as one committed wgmma group.
template <class TA, class TB, class SA, class SB, int TN, int STEPS>
__device__ __forceinline__ void issue_interval(Accumulator<1, TN, float>& part, u32 a_base, u32 b_base, int row,
                                               int col, int first) {
    using op = wgmma::mma<TA, TB, float>;
    wgmma::fence();  // part's registers were read by the previous promotion
    op::template issue<TN, false, false, false>(part.r[0], SA::template descriptor<op::K_STEP>(a_base, row, first),
                                                SB::template descriptor<op::K_STEP>(b_base, col, first));
#pragma unroll
    for (int s = 1; s < STEPS; ++s) {
        op::template issue<TN, false, false, true>(part.r[0],
                                                   SA::template descriptor<op::K_STEP>(a_base, row, first + s),
                                                   SB::template descriptor<op::K_STEP>(b_base, col, first + s));
    }
    wgmma::commit();
}

// acc[slice i][chunk j] += factor * part, part's group completed: the factor of the slice's rows and the
// chunk's columns (f) when SCALED, else a plain addition.
template <int ATOMS_M, int N, int TN, bool SCALED, int CHUNKS>
__device__ __forceinline__ void add_interval(Accumulator<ATOMS_M, N, float>& acc, Accumulator<1, TN, float>& part,
                                             int i, int j, const Factors<ATOMS_M, CHUNKS>& f) {
    part.pin();  // read part only after the wait
#pragma unroll
    for (int c = 0; c < TN / 8; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float& sum = acc.r[i][4 * (j * (TN / 8) + c) + 2 * h + e];
                const float v = part.r[0][4 * c + 2 * h + e];
                if constexpr (SCALED) {
                    sum = fmaf(f.x[i][h] * f.y[j], v, sum);
                } else {
                    sum += v;
                }
            }
}

// One stage, promoted: for each 64-row slice i and TN-column chunk j of the consumer's tile and
// each INTERVAL-deep part of the stage's BK, the instructions of that part into `part` (the
// first starting afresh), then acc[i][chunk j] += factor * part, the factor the stage's block
// factors f (SCALED; else none). Every wgmma of the stage has completed on return.
template <class TA, class TB, class SA, class SB, int ATOMS_M, int N, int BK, int INTERVAL, bool SCALED>
__device__ __forceinline__ void promote_stage(Accumulator<ATOMS_M, N, float>& acc,
                                              Accumulator<1, promotion_width<N>::value, float>& part, u32 a_base,
                                              u32 b_base, int row0,
                                              const Factors<ATOMS_M, N / promotion_width<N>::value>& f) {
    using op = wgmma::mma<TA, TB, float>;
    constexpr int TN = promotion_width<N>::value, CHUNKS = N / TN;
    constexpr int STEPS = INTERVAL / op::K_STEP, PARTS = BK / INTERVAL;
    static_assert(SA::k_major && SB::k_major, "fp8 wgmma reads A and B K-major only");
    static_assert(INTERVAL % op::K_STEP == 0 && BK % INTERVAL == 0, "an interval is whole instructions inside a stage");
    static_assert(N % TN == 0, "the tile is whole promotion chunks wide");
#pragma unroll
    for (int i = 0; i < ATOMS_M; ++i) {
#pragma unroll
        for (int j = 0; j < CHUNKS; ++j) {
#pragma unroll
            for (int p = 0; p < PARTS; ++p) {
                issue_interval<TA, TB, SA, SB, TN, STEPS>(part, a_base, b_base, row0 + 64 * i, j * TN, p * STEPS);
                wgmma::wait<0>();
                add_interval<ATOMS_M, N, TN, SCALED, CHUNKS>(acc, part, i, j, f);
            }
        }
    }
}

}  // namespace hopper
}  // namespace blasdx

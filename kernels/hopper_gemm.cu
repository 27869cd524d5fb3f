// Device-level GEMM on Hopper (sm_90a): D = alpha * A B + beta * C for matrices of any size,
// batched, through TMA, an mbarrier stage ring, warp-specialised wgmma consumers and a
// persistent grid (blasdx/hopper/gemm.cuh).
//
// Expects the generated prelude to define `HopperConfig` (gemm.cuh lists its members) with
// `c_type` and `store_by_tma`. A and B come as rank-3 tensor maps (inner, outer, batch),
// 128-byte swizzle, box {bk, bm} / {bk, bn} when K-major and {64, bk} when M/N-major, zero
// fill outside; a broadcast operand has batch extent 1 (batched_a / batched_b = 0).
// With store_by_tma, D is written through shared memory with its own map (row-major D,
// box {128 / sizeof(c_type), 64, 1}); otherwise every element pair is stored directly with
// D's strides. With splits > 1 (direct stores only) each split writes partial sums (of the
// accumulator's type: f32, or s32 for integers) to `workspace` and splitk_reduce.cu finishes. C is read only when beta != 0. Strides are
// in elements.
#include "blasdx/hopper/gemm.cuh"

namespace blasdx {
namespace hopper {

using Engine = DeviceGemm<HopperConfig>;
using TC = HopperConfig::c_type;
using TV = Engine::Acc::value_type;  // the accumulator's type: alpha, beta and split partial sums have it too

// The pair functor of direct stores: the final D, or the split's partial sums.
struct FinalOrPartial {
    LinearCombination<TC, TV> final_;
    SplitKPartial<TV> partial;
    bool split;

    __device__ __forceinline__ void operator()(const Work& w, int row, int col, TV v0, TV v1) const {
        if (split) {
            partial(w, row, col, v0, v1);
        } else {
            final_(w, row, col, v0, v1);
        }
    }
};

}  // namespace hopper
}  // namespace blasdx

extern "C" __global__ void __launch_bounds__(blasdx::hopper::Engine::THREADS, 1)
    blasdx_hopper_gemm(const __grid_constant__ blasdx::hopper::TensorMap map_a,
                       const __grid_constant__ blasdx::hopper::TensorMap map_b,
                       const __grid_constant__ blasdx::hopper::TensorMap map_d, const blasdx::hopper::TC* c,
                       blasdx::hopper::TC* d, blasdx::hopper::TV* workspace, int m, int n, int k, int batch, int batched_a,
                       int batched_b, int splits, blasdx::i64 c_row, blasdx::i64 c_col, blasdx::i64 c_batch,
                       blasdx::i64 d_row, blasdx::i64 d_col, blasdx::i64 d_batch, blasdx::hopper::TV alpha,
                       blasdx::hopper::TV beta) {
    using namespace blasdx::hopper;
    extern __shared__ __align__(16) unsigned char smem[];
    const Engine::Sched sched(m, n, k, batch, splits);
    const LinearCombination<TC, TV> final_(c, d, m, n, c_row, c_col, c_batch, d_row, d_col, d_batch, alpha, beta);
    if constexpr (HopperConfig::store_by_tma) {
        const StageThroughShared<TC, LinearCombination<TC, TV>> epi{&map_d, final_};
        Engine::run(smem, &map_a, &map_b, sched, batched_a != 0, batched_b != 0, epi);
    } else {
        const StoreEachPair<FinalOrPartial> epi{{final_, SplitKPartial<TV>{workspace, m, n, batch}, splits > 1}};
        Engine::run(smem, &map_a, &map_b, sched, batched_a != 0, batched_b != 0, epi);
    }
}

// The engine's GEMM ending in a final pair functor F (epilogue.cuh's LinearCombination, or the
// residue bytes of kernels/hopper_residue_gemm.cu), the one way its entry points finish a tile:
// through shared memory and TMA when Cfg::store_by_tma, else pair by pair, split K and stream-K
// finished by the tile's last part (splitk.cuh). F::value_type is the stored type.
#pragma once

#include "epilogue.cuh"
#include "gemm.cuh"
#include "splitk.cuh"

namespace blasdx {
namespace hopper {

template <class Cfg, class F>
__device__ __forceinline__ void run_to_final(unsigned char* smem, const TensorMap* map_a, const TensorMap* map_b,
                                             const TensorMap* map_d, const typename DeviceGemm<Cfg>::Sched& sched,
                                             bool batched_a, bool batched_b, const F& final_,
                                             typename DeviceGemm<Cfg>::Acc::value_type* workspace, int* counters,
                                             int m, int splits) {
    using Engine = DeviceGemm<Cfg>;
    static_assert(!(Engine::STREAM_K && Cfg::store_by_tma), "stream-K tiles are finished by direct stores");
    if constexpr (Cfg::store_by_tma) {
        const StageThroughShared<typename F::value_type, F> epi{map_d, final_};
        Engine::run(smem, map_a, map_b, sched, batched_a, batched_b, epi);
    } else {
        using Fixup = SplitKFixup<StoreEachPair<F>, typename Engine::Acc::value_type, Engine::BM, Engine::BN,
                                  Engine::PINGPONG ? 1 : Engine::CONSUMERS, Engine::STREAM_K>;
        const Fixup epi{{final_}, workspace, counters, m, splits, sched.rows * Cfg::cluster_m, sched.tiles_n};
        Engine::run(smem, map_a, map_b, sched, batched_a, batched_b, epi);
    }
}

}  // namespace hopper
}  // namespace blasdx

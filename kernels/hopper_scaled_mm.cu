// Scaled fp8 GEMM on Hopper (sm_90a): D = (X * sx) (Y * sy) + bias for one M x K by K x N
// product of fp8 matrices, D of type c_type. The engine of hopper_gemm.cu (blasdx/hopper/gemm.cuh)
// with two additions: block scales (x_scaling / y_scaling == SCALE_BLOCK) multiply each
// promotion's partial sums (promotion.cuh), and the other scales and the bias are applied in
// the epilogue (scaling.cuh). blasdx/scaled_mm.py states the semantics and checks the shapes.
//
// Expects the prelude to define `ScaledConfig` (gemm.cuh's members plus c_type, store_by_tma,
// x_scaling, y_scaling). A and B come as rank-3 tensor maps (batch extent 1), K-major, or B
// MN-major when the configuration transposes it in shared memory. With splits > 1 (direct stores
// only) the splits of a tile add their partial sums (block-scaled already, if at all) into
// `workspace` and the last one applies the other scales and the bias and stores D
// (blasdx/hopper/splitk.cuh; `counters` are zero between launches). Scale strides are in elements: sx_row / sx_col for
// X's scale (its [M, 1] or [M, ceil(K / 128)] matrix), sy_row / sy_col for Y's ([1, N] or
// [ceil(K / 128), ceil(N / 128)]).
#include "blasdx/hopper/gemm.cuh"
#include "blasdx/hopper/scaling.cuh"
#include "blasdx/hopper/splitk.cuh"

namespace blasdx {
namespace hopper {

using Engine = DeviceGemm<ScaledConfig>;
using TC = ScaledConfig::c_type;
constexpr int XS = ScaledConfig::x_scaling, YS = ScaledConfig::y_scaling;
using Epilogue = Dequantize<TC, XS, YS>;
using Blocks = BlockScales<XS == SCALE_BLOCK, YS == SCALE_BLOCK>;
using Fixup = SplitKFixup<StoreEachPair<Epilogue>, float, Engine::BM, Engine::BN,
                          Engine::PINGPONG ? 1 : Engine::CONSUMERS, Engine::STREAM_K>;
static_assert(Engine::PROMOTION > 0 || (XS != SCALE_BLOCK && YS != SCALE_BLOCK),
              "block scales are applied at promotion: a configuration without promotion takes none");

}  // namespace hopper
}  // namespace blasdx

extern "C" __global__ void __launch_bounds__(blasdx::hopper::Engine::THREADS, 1)
    blasdx_hopper_scaled_mm(const __grid_constant__ blasdx::hopper::TensorMap map_a,
                            const __grid_constant__ blasdx::hopper::TensorMap map_b,
                            const __grid_constant__ blasdx::hopper::TensorMap map_d, blasdx::hopper::TC* d,
                            float* workspace, int* counters, int m, int n, int k, int splits, const float* sx, blasdx::i64 sx_row,
                            blasdx::i64 sx_col, const float* sy, blasdx::i64 sy_row, blasdx::i64 sy_col,
                            const blasdx::hopper::TC* bias, blasdx::i64 d_row, blasdx::i64 d_col) {
    using namespace blasdx::hopper;
    extern __shared__ __align__(16) unsigned char smem[];
    const Engine::Sched sched(m, n, k, 1, splits);
    // the epilogue's vector scales: X's per row (stride sx_row), Y's per column (stride sy_col)
    const Epilogue values(d, workspace, sx, sx_row, sy, sy_col, bias, m, n, d_row, d_col, false);
    const Blocks blocks{sx, sy, sx_row, sx_col, sy_row, sy_col, m, n};
    if constexpr (ScaledConfig::store_by_tma) {
        const StageThroughShared<TC, Epilogue> epi{&map_d, values};
        Engine::run(smem, &map_a, &map_b, sched, false, false, epi, blocks);
    } else {
        const Fixup epi{{values}, workspace, counters, m, splits, sched.rows * ScaledConfig::cluster_m, sched.tiles_n};
        Engine::run(smem, &map_a, &map_b, sched, false, false, epi, blocks);
    }
}

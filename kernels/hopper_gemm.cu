// Device-level GEMM on Hopper (sm_90a): D = alpha * A B + beta * C for matrices of any size,
// batched, through TMA, an mbarrier stage ring, warp-specialised wgmma consumers and a
// persistent grid (blasdx/hopper/gemm.cuh).
//
// Expects the generated prelude to define `HopperConfig` (gemm.cuh lists its members) and
// `c_type`. A and B come as rank-3 tensor maps (inner, outer, batch), 128-byte swizzle, box
// {bk, bm} / {bk, bn} when K-major and {64, bk} when M/N-major, zero fill outside; a
// broadcast operand has batch extent 1 (batched_a / batched_b = 0). With splits > 1 each
// split writes f32 partial sums to `workspace` and splitk_reduce.cu finishes; otherwise the
// epilogue writes D, reading C only when beta != 0. Strides are in elements.
#include "blasdx/hopper/gemm.cuh"

namespace blasdx {
namespace hopper {

using Engine = DeviceGemm<HopperConfig>;
using TC = HopperConfig::c_type;

// The launch's epilogue: the final D, or the split's partial sums.
struct EntryEpilogue {
    LinearCombination<TC> final_;
    SplitKPartial partial;
    bool split;

    __device__ __forceinline__ void operator()(const Work& w, int row, int col, float v0, float v1) const {
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
                       const __grid_constant__ blasdx::hopper::TensorMap map_b, const blasdx::hopper::TC* c,
                       blasdx::hopper::TC* d, float* workspace, int m, int n, int k, int batch, int batched_a,
                       int batched_b, int splits, blasdx::i64 c_row, blasdx::i64 c_col, blasdx::i64 c_batch,
                       blasdx::i64 d_row, blasdx::i64 d_col, blasdx::i64 d_batch, float alpha, float beta) {
    using namespace blasdx::hopper;
    extern __shared__ __align__(16) unsigned char smem[];
    const Engine::Sched sched(m, n, k, batch, splits);
    const EntryEpilogue epi{LinearCombination<TC>(c, d, m, n, c_row, c_col, c_batch, d_row, d_col, d_batch, alpha, beta),
                            SplitKPartial{workspace, m, n, batch}, splits > 1};
    Engine::run(smem, &map_a, &map_b, sched, batched_a != 0, batched_b != 0, epi);
}

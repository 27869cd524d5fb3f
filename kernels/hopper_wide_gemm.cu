// Device-level f64 / f32 GEMM on Hopper (sm_90a): D = alpha * A B + beta * C for matrices of
// any size, batched, through TMA, an mbarrier stage ring, warp-specialised DMMA (f64) or FFMA
// (f32) consumers and a persistent grid (blasdx/hopper/wide_gemm.cuh).
//
// Expects the generated prelude to define `WideConfig` (wide_gemm.cuh lists its members). A
// and B come as rank-3 tensor maps (inner, outer, batch), 128-byte swizzle, box {bk, bm} /
// {bk, bn / cluster_m} when K-major and {128 / sizeof(type), bk} when M/N-major, zero fill
// outside; a broadcast operand has batch extent 1 (batched_a / batched_b = 0). D is written
// element by element with its strides; with splits > 1 each split writes its partial sums to
// `workspace` and splitk_reduce.cu finishes. C is read only when beta != 0. Strides are
// in elements.
#include "blasdx/hopper/wide_gemm.cuh"

namespace blasdx {
namespace hopper {

using Wide = WideGemm<WideConfig>;
using TW = WideConfig::type;

// The element functor of the launch: the final D, or the split's partial sums.
struct FinalOrSplit {
    ElementLinearCombination<TW> final_;
    ElementSplitPartial<TW> partial;
    bool split;

    __device__ __forceinline__ void operator()(const Work& w, int row, int col, TW v) const {
        if (split) {
            partial(w, row, col, v);
        } else {
            final_(w, row, col, v);
        }
    }
};

}  // namespace hopper
}  // namespace blasdx

extern "C" __global__ void __launch_bounds__(blasdx::hopper::Wide::THREADS, 1)
    blasdx_hopper_wide_gemm(const __grid_constant__ blasdx::hopper::TensorMap map_a,
                            const __grid_constant__ blasdx::hopper::TensorMap map_b, const blasdx::hopper::TW* c,
                            blasdx::hopper::TW* d, blasdx::hopper::TW* workspace, int m, int n, int k, int batch,
                            int batched_a, int batched_b, int splits, blasdx::i64 c_row, blasdx::i64 c_col,
                            blasdx::i64 c_batch, blasdx::i64 d_row, blasdx::i64 d_col, blasdx::i64 d_batch,
                            blasdx::hopper::TW alpha, blasdx::hopper::TW beta) {
    using namespace blasdx::hopper;
    extern __shared__ __align__(16) unsigned char smem[];
    const ElementLinearCombination<TW> final_{c, d, m, n, c_row, c_col, c_batch, d_row, d_col, d_batch, alpha, beta};
    const EachElement<FinalOrSplit> epi{{final_, ElementSplitPartial<TW>{workspace, m, n, batch}, splits > 1}};
    Wide::run(smem, &map_a, &map_b, m, n, k, batch, splits, batched_a != 0, batched_b != 0, epi);
}

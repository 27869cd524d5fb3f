// Device-level GEMM on Hopper (sm_90a): D = alpha * A B + beta * C for matrices of any size,
// batched, through TMA, an mbarrier stage ring, warp-specialised wgmma consumers and a
// persistent grid (blasdx/hopper/gemm.cuh).
//
// Expects the generated prelude to define `HopperConfig` (gemm.cuh lists its members) with
// `c_type` and `store_by_tma`. A and B come as rank-3 tensor maps (inner, outer, batch),
// 128-byte swizzle, box {bk, bm} / {bk, bn} when K-major and {128 / sizeof, bk} when M/N-major,
// zero fill outside; a broadcast operand has batch extent 1 (batched_a / batched_b = 0).
// With store_by_tma, D is written through shared memory with its own map (row-major D,
// box {128 / sizeof(c_type), 64, 1}); otherwise every element pair is stored directly with
// D's strides. With splits > 1 (direct stores only) the splits of a tile leave their partial
// sums (of the accumulator's type: f32, or s32 for integers) in `workspace` (a tile's sums per
// split) and the last one to finish adds them up in split order and stores D
// (blasdx/hopper/splitk.cuh). With HopperConfig::stream_k (direct stores only) `splits` is the
// stream-K waves (>= 2, blasdx/hopper/scheduler.cuh) and the blocks that share a tile add their sums
// into `workspace` (one tile's sums, zero between launches). `counters` (one int per tile, consumer
// and warp) are zero between launches. C is read only when beta != 0. Strides are in elements.
#include "blasdx/hopper/final_store.cuh"

namespace blasdx {
namespace hopper {

using Engine = DeviceGemm<HopperConfig>;
using TC = HopperConfig::c_type;
using TV = Engine::Acc::value_type;  // the accumulator's type: alpha, beta and split partial sums have it too
using Final = LinearCombination<TC, TV>;

}  // namespace hopper
}  // namespace blasdx

extern "C" __global__ void __launch_bounds__(blasdx::hopper::Engine::THREADS, 1)
    blasdx_hopper_gemm(const __grid_constant__ blasdx::hopper::TensorMap map_a,
                       const __grid_constant__ blasdx::hopper::TensorMap map_b,
                       const __grid_constant__ blasdx::hopper::TensorMap map_d, const blasdx::hopper::TC* c,
                       blasdx::hopper::TC* d, blasdx::hopper::TV* workspace, int* counters, int m, int n, int k,
                       int batch, int batched_a, int batched_b, int splits, blasdx::i64 c_row, blasdx::i64 c_col,
                       blasdx::i64 c_batch, blasdx::i64 d_row, blasdx::i64 d_col, blasdx::i64 d_batch,
                       blasdx::hopper::TV alpha, blasdx::hopper::TV beta) {
    using namespace blasdx::hopper;
    extern __shared__ __align__(16) unsigned char smem[];
    const Engine::Sched sched(m, n, k, batch, splits);
    const Final final_(c, d, m, n, c_row, c_col, c_batch, d_row, d_col, d_batch, alpha, beta);
    run_to_final<HopperConfig>(smem, &map_a, &map_b, &map_d, sched, batched_a != 0, batched_b != 0, final_, workspace,
                               counters, m, splits);
}

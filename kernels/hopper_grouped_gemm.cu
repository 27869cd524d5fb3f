// Grouped GEMM on Hopper (sm_90a): for each group g, D_g = (A_g * sx) (B_g * sy), one
// persistent launch over every group's tiles (blasdx/hopper/group_scheduler.cuh), on the
// engine of hopper_gemm.cu (blasdx/hopper/gemm.cuh). Mixture-of-experts layers: each expert's
// rows of tokens times that expert's weights; blasdx/calls/grouped_mm.py states the semantics.
//
// Expects the prelude to define `GroupedConfig` (gemm.cuh's members plus c_type, scheduler =
// GroupScheduler<bm, bn, bk, group_m> or KGroupScheduler<...>, x_scaling, y_scaling; scalings of scaling.cuh, SCALE_TENSOR meaning none). A comes as a
// rank-3 tensor map: contiguous layout (K, total, 1) (or (total, K, 1) M-major), masked layout
// (K, max_m, G); B as (K, N, G) K-major or (N, K, G) N-major. Groups along K
// (KGroupScheduler): A (K', M, 1) and B (K', N, 1), K' the groups' K ranges padded to whole
// steps (grouped_pad.cu), bounds the offs along K, D [G, M, N]. With store_by_tma, consumer
// tiles wholly inside their group's rows are stored through shared memory with D's map
// (row-major D: (N, total, 1) contiguous, (N, rows, G) otherwise; box {128 / sizeof(c_type),
// 64, 1}), the others element pair by pair (GroupStaged); without it, every tile pair by pair. `bounds` is offs (int32 cumulative end rows, contiguous) or
// counts (int32 rows per group, masked; null: max_m each). Rows past a group's end are not
// stored (the masked layout leaves them as they were). Strides are in elements.
#include "blasdx/hopper/gemm.cuh"
#include "blasdx/hopper/group_epilogue.cuh"

namespace blasdx {
namespace hopper {

using Engine = DeviceGemm<GroupedConfig>;
using TC = GroupedConfig::c_type;
constexpr int XS = GroupedConfig::x_scaling, YS = GroupedConfig::y_scaling;
using Store = GroupStore<TC, XS, YS>;
using Epilogue = typename std_conditional<GroupedConfig::store_by_tma, GroupStaged<TC, Store>,
                                          StoreEachPair<Store>>::type;
using Blocks = GroupBlockScales<XS == SCALE_BLOCK, YS == SCALE_BLOCK>;
// The tile epilogue E: staged (D's map for whole tiles, pairs for the rest) or pair by pair.
template <class E>
__device__ __forceinline__ E epilogue_of(const TensorMap* map_d, const Store& store, bool d_per_group) {
    if constexpr (E::staging_bytes > 0) {
        return E{{map_d, store}, {store}, d_per_group};
    } else {
        return E{store};
    }
}

static_assert(Engine::CLUSTER == 1, "a grouped launch runs without clusters (adjacent tiles may be other groups')");
static_assert(Engine::PROMOTION > 0 || (XS != SCALE_BLOCK && YS != SCALE_BLOCK),
              "block scales are applied at promotion: a configuration without promotion takes none");

}  // namespace hopper
}  // namespace blasdx

extern "C" __global__ void __launch_bounds__(blasdx::hopper::Engine::THREADS, 1)
    blasdx_hopper_grouped_gemm(const __grid_constant__ blasdx::hopper::TensorMap map_a,
                               const __grid_constant__ blasdx::hopper::TensorMap map_b,
                               const __grid_constant__ blasdx::hopper::TensorMap map_d, blasdx::hopper::TC* d,
                               const int* bounds, int layout, int groups, int rows, int n, int k, int batched_a,
                               int batched_b, blasdx::i64 d_row, blasdx::i64 d_col, blasdx::i64 d_group,
                               const float* sx, blasdx::i64 sx_row, blasdx::i64 sx_col, blasdx::i64 sx_group,
                               const float* sy, blasdx::i64 sy_row, blasdx::i64 sy_col, blasdx::i64 sy_group) {
    using namespace blasdx::hopper;
    extern __shared__ __align__(16) unsigned char smem[];
    // the group table after the GEMM's shared memory (the host adds GroupTable::bytes(groups))
    const GroupTable table(reinterpret_cast<int*>(smem + Engine::shared_bytes<Epilogue>()), groups);
    // groups along M: row ranges in tile rows; along K: K ranges (of k) in K steps
    table.build<Engine::Sched::GRAIN, Engine::THREADS>(layout, bounds, groups, Engine::Sched::ALONG_K ? k : rows);
    const Engine::Sched sched(table, groups, rows, n, k);
    const Store store{d, sx, sy, n, rows, d_row, d_col, d_group, sx_row, sx_group, sy_col, sy_group,
                      pairs_aligned(d, d_row, d_col, d_group)};
    const Blocks blocks{sx, sy, sx_row, sx_col, sx_group, sy_row, sy_col, sy_group, rows, n};
    const Epilogue epi = epilogue_of<Epilogue>(&map_d, store, d_group != 0);
    Engine::run(smem, &map_a, &map_b, sched, batched_a != 0, batched_b != 0, epi, blocks);
}

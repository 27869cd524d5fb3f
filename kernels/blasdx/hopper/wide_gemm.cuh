// The wide engine: device-level f64 (DMMA) and f32 (FFMA) GEMM on Hopper through the same
// TMA stage ring, persistent scheduler and warp specialisation as gemm.cuh, with consumers
// that read their fragments from the stages with ordinary shared-memory loads.
//
// The block has 3 warpgroups. Warpgroup 0 is the producer: it gives up registers and one of
// its threads loads every work unit's K steps with TMA into the ring (StageOperand, any
// layout of A and B, clusters of 2 multicasting B). Warpgroups 1 and 2 are 8 consumer warps
// laid out WARPS_M x WARPS_N over the block tile; each keeps its warp tile (dmma_tile.cuh,
// ffma_tile.cuh) in registers. For each stage a warp waits for the data, multiplies the
// stage's K groups while loading the next group's fragments (the first group of the next
// stage before the last of this one), then frees the stage: one arrival per warp, in every
// block of the cluster. A finished unit goes to the epilogue (an element functor), while the
// producer already loads the next unit.
//
// Cfg: type (double or float), bm, bn, bk, wm, wn (warp tile), stages, group_m, cluster_m,
// a_k_major, b_k_major.
#pragma once

#include "dmma_tile.cuh"
#include "ffma_tile.cuh"
#include "pipeline.cuh"
#include "scheduler.cuh"
#include "tma.cuh"
#include "warpgroup_mma.cuh"

namespace blasdx {
namespace hopper {

// The warp tile of each type: DMMA for double, FFMA for float.
template <class T, int WM, int WN, int BK, int A_BYTES, bool AK, bool BKM> struct wide_tile_of;
template <int WM, int WN, int BK, int A_BYTES, bool AK, bool BKM> struct wide_tile_of<double, WM, WN, BK, A_BYTES, AK, BKM> {
    using type = DmmaWarpTile<WM, WN, BK, A_BYTES, AK, BKM>;
};
template <int WM, int WN, int BK, int A_BYTES, bool AK, bool BKM> struct wide_tile_of<float, WM, WN, BK, A_BYTES, AK, BKM> {
    using type = FfmaWarpTile<WM, WN, BK, A_BYTES, AK, BKM>;
};

template <class Cfg>
struct WideGemm {
    using T = typename Cfg::type;
    static constexpr int BM = Cfg::bm, BN = Cfg::bn, BK = Cfg::bk, WM = Cfg::wm, WN = Cfg::wn;
    static constexpr int STAGES = Cfg::stages, CLUSTER = Cfg::cluster_m;
    static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN, WARPS = WARPS_M * WARPS_N;
    static constexpr int THREADS = 128 + 32 * WARPS;
    // The pool setmaxnreg moves registers in is what the block got at launch (168 a thread): the
    // producer gives up 128 x 144, the consumers take 256 x 72 of them.
    static constexpr int PRODUCER_REGISTERS = 24, CONSUMER_REGISTERS = 240;

    using SA = StageOperand<T, BM, BK, Cfg::a_k_major>;
    using SB = StageOperand<T, BN, BK, Cfg::b_k_major>;
    using Tile = typename wide_tile_of<T, WM, WN, BK, SA::BYTES, Cfg::a_k_major, Cfg::b_k_major>::type;
    using Sched = Scheduler<BM, BN, BK, Cfg::group_m, CLUSTER>;
    using Stages = Ring<STAGES>;
    static constexpr int STAGE_BYTES = SA::BYTES + SB::BYTES;

    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles cover the block tile");
    static_assert(WARPS == 8, "two consumer warpgroups (setmaxnreg hands them the producer's registers)");
    static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of one or two blocks");
    static_assert((65536 / THREADS / 8 * 8 - PRODUCER_REGISTERS) * 128 >=
                      (CONSUMER_REGISTERS - 65536 / THREADS / 8 * 8) * 32 * WARPS,
                  "consumers take no more registers than the producer gives up (else setmaxnreg.inc waits forever)");
    static_assert(STAGES >= 2, "the producer loads ahead while consumers multiply");
    static_assert(SA::BYTES % ATOM_BYTES == 0 && SB::BYTES % ATOM_BYTES == 0, "stages stay atom-aligned");

    // Dynamic shared memory: 1024 bytes of slack to align the stages to a swizzle atom, the stages, the barriers.
    __host__ __device__ static constexpr int shared_bytes() {
        return ATOM_BYTES + STAGES * STAGE_BYTES + int(sizeof(Stages));
    }

    __device__ __forceinline__ static unsigned char* stage(unsigned char* smem, int s) { return smem + s * STAGE_BYTES; }

    __device__ __forceinline__ static void release(Stages* ring, int s, int rank) {
        arrive(&ring->empty[s]);
        if constexpr (CLUSTER > 1) arrive_in_block(&ring->empty[s], rank ^ 1);
    }

    // The whole block's work on problems of m x n x k, `batch` of them, K in `splits` parts. Each
    // role builds its own scheduler after the register hand-over (nothing derived stays live
    // across it, where the producer's few registers would have to hold it).
    template <class Epilogue>
    __device__ __forceinline__ static void run(unsigned char* smem_raw, const TensorMap* map_a,
                                               const TensorMap* map_b, int m, int n, int k, int batch, int splits,
                                               bool batched_a, bool batched_b, const Epilogue& epi) {
        static_assert(shared_bytes() <= 232448, "the stages fit the 227 KB a Hopper block can have");
        static_assert(shared_bytes() <= Cfg::host_shared_bytes, "the host's figure (hopper_wide.py) covers the block's");
        unsigned char* smem = smem_raw + ((ATOM_BYTES - shared_address(smem_raw) % ATOM_BYTES) % ATOM_BYTES);
        Stages* ring = reinterpret_cast<Stages*>(smem + STAGES * STAGE_BYTES);
        start_ring<CLUSTER>(ring, WARPS * CLUSTER, 1, u32(shared_bytes()), map_a, map_b);
        if (threadIdx.x < 128) {
            release_registers<PRODUCER_REGISTERS>();
            if (threadIdx.x == 0) produce(smem, ring, map_a, map_b, Sched(m, n, k, batch, splits), batched_a, batched_b);
        } else {
            claim_registers<CONSUMER_REGISTERS>();
            consume(smem, ring, Sched(m, n, k, batch, splits), epi);
        }
    }

    // StageOperand's loads (part `part` of PARTS, multicast into the cluster when PARTS > 1), with
    // MN-major panels in a loop rather than unrolled: the producer runs on 24 registers.
    template <class S, int PARTS>
    __device__ __forceinline__ static void load(unsigned char* dst, const TensorMap* map, u64* bar, int row0, int k0,
                                                int batch, int part) {
        if constexpr (S::k_major) {
            if constexpr (PARTS > 1) {
                S::template load_part<PARTS>(dst, map, bar, row0, k0, batch, part, (1 << PARTS) - 1);
            } else {
                S::load(dst, map, bar, row0, k0, batch);
            }
        } else {
            constexpr int PER_PART = S::BOXES / PARTS;
#pragma unroll 1
            for (int b = part * PER_PART; b < (part + 1) * PER_PART; ++b) {
                if constexpr (PARTS > 1) {
                    load_box_multicast(dst + b * S::BOX_BYTES, map, bar, row0 + b * S::W, k0, batch, (1 << PARTS) - 1);
                } else {
                    load_box(dst + b * S::BOX_BYTES, map, bar, row0 + b * S::W, k0, batch);
                }
            }
        }
    }

    __device__ __forceinline__ static void produce(unsigned char* smem, Stages* ring, const TensorMap* map_a,
                                                   const TensorMap* map_b, const Sched& sched, bool batched_a,
                                                   bool batched_b) {
        produce_stages<STAGES, CLUSTER, STAGE_BYTES, SA::BYTES, SB::BYTES>(
            smem, ring, sched, [&](unsigned char* s, u64* full, const Work& w, int step, bool has_a, int rank) {
                if (has_a) load<SA, 1>(s, map_a, full, w.m0, step * BK, batched_a ? w.batch : 0, 0);
                load<SB, CLUSTER>(s + SA::BYTES, map_b, full, w.n0, step * BK, batched_b ? w.batch : 0, rank);
            });
    }

    template <class Epilogue>
    __device__ __forceinline__ static void consume(unsigned char* smem, Stages* ring, const Sched& sched,
                                                   const Epilogue& epi) {
        const int warp = threadIdx.x / 32 - 4;
        const bool lead = threadIdx.x % 32 == 0;  // one arrival per warp frees a stage
        const int rank = CLUSTER > 1 ? int(cluster_rank()) : 0;
        const Tile tile((warp % WARPS_M) * WM, (warp / WARPS_M) * WN);
        RingState<STAGES> at;
        typename Tile::Accumulator acc;
        typename Tile::Fragments f;
        for (int unit = blockIdx.x / CLUSTER; unit < sched.units; unit += gridDim.x / CLUSTER) {
            const Work w = sched.work(unit, rank);
            const int steps = w.k_end - w.k_begin;
            tile.zero(acc);
            if (steps > 0) {
                wait(&ring->full[at.stage], at.parity);
                tile.first(f, stage(smem, at.stage));
            }
            for (int step = 0; step < steps; ++step) {
                const int s = at.stage;
                at.advance();
                tile.stage(acc, f, stage(smem, s), [&]() -> const unsigned char* {
                    if (step + 1 == steps) return nullptr;
                    wait(&ring->full[at.stage], at.parity);
                    return stage(smem, at.stage);
                });
                __syncwarp();  // every lane's loads of stage s are done
                if (lead) release(ring, s, rank);
            }
            epi(w, tile, acc);
        }
    }
};

// ---- element epilogues: f(work, row, col, v) for every element of the tile, row and column in
// the unit's problem (both possibly outside M x N: the functor predicates) ------------------------

// D = alpha * acc + beta * C, C read only when beta != 0; C and D of any element strides (they
// may be the same matrix; a batch stride of 0 broadcasts).
template <class T>
struct ElementLinearCombination {
    const T* c;
    T* d;
    int m, n;
    i64 c_row, c_col, c_batch, d_row, d_col, d_batch;
    T alpha, beta;

    __device__ __forceinline__ void operator()(const Work& w, int row, int col, T v) const {
        if (row >= m || col >= n) return;
        v *= alpha;
        if (beta != T(0)) v += beta * c[w.batch * c_batch + row * c_row + col * c_col];
        d[w.batch * d_batch + row * d_row + col * d_col] = v;
    }
};

// Split K: each split writes its raw partial sums to workspace[split][batch][m][n] (type T);
// kernels/splitk_reduce.cu (splitk_acc_type = T) adds the splits up and applies alpha, beta and C.
template <class T>
struct ElementSplitPartial {
    T* workspace;
    int m, n, batch;

    __device__ __forceinline__ void operator()(const Work& w, int row, int col, T v) const {
        if (row >= m || col >= n) return;
        workspace[((i64(w.split) * batch + w.batch) * m + row) * i64(n) + col] = v;
    }
};

// The tile epilogue: every element of the warp tile to F, at the unit's tile corner.
template <class F>
struct EachElement {
    F f;

    template <class Tile>
    __device__ __forceinline__ void operator()(const Work& w, const Tile& tile,
                                               const typename Tile::Accumulator& acc) const {
        tile.for_each(acc, [&](int row, int col, typename Tile::value_type v) { f(w, w.m0 + row, w.n0 + col, v); });
    }
};

}  // namespace hopper
}  // namespace blasdx

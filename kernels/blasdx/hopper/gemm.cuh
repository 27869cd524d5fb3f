// The device-level GEMM of the Hopper engine: a warp-specialised, persistent block.
//
// The block has 1 + CONSUMERS warpgroups. Warpgroup 0 is the producer: it gives up
// registers (setmaxnreg) and one of its threads walks the scheduler's work units, loading
// each unit's K steps with TMA into the stage ring. Consumer warpgroup c takes rows
// [c * BM / CONSUMERS, (c + 1) * BM / CONSUMERS) of every output tile (or, ping-pong,
// every other tile whole): for each stage it
// waits for the data, issues the stage's wgmmas, and frees the stage the previous group
// read once that group has completed (one group stays in flight). When a unit's K range
// is done it hands its accumulator to the tile epilogue (epilogue.cuh), while the producer
// already loads the next unit. Nothing else synchronises the warpgroups.
//
// Cfg names the types and the tile (the generated prelude's struct, or a user's):
//   a_type, b_type         storage types of A and B (float for tf32)
//   a_mma, b_mma           the instruction's operand types (blasdx::tf32 for tf32)
//   bm, bn, bk, stages, consumers, group_m, a_k_major, b_k_major
//   pingpong               consumers take whole tiles in turn (unit 0 consumer 0, unit 1
//                          consumer 1, ...) instead of sharing each tile's rows: one
//                          consumer's epilogue runs while the other multiplies
//   acc_type (optional)    the accumulator's element type: float (default), int for 8-bit integers
//   promotion (optional)   fp8: K elements the tensor core sums before a consumer adds them into
//                          its f32 accumulator (promotion.cuh; 32, 64 or 128); 0 (default): the
//                          whole K range stays in the tensor core's accumulator. run() then takes
//                          the block scales applied at each promotion (NoBlockScales: none)
//   cluster_m              blocks per cluster along M (1 or 2): the blocks of a cluster take
//                          vertically adjacent tiles and each loads half of their common B
//                          tile, multicast into both (half the B traffic through L2); a
//                          stage is free again once the consumers of every block of the
//                          cluster have read it, so consumers free it in each block.
#pragma once

#include "epilogue.cuh"
#include "pipeline.cuh"
#include "promotion.cuh"
#include "scheduler.cuh"
#include "tma.cuh"
#include "warpgroup_mma.cuh"

namespace blasdx {
namespace hopper {

// Cfg::acc_type when the configuration names one, else float.
template <class...> using void_t = void;
template <class Cfg, class = void> struct accumulator_of { using type = float; };
template <class Cfg> struct accumulator_of<Cfg, void_t<typename Cfg::acc_type>> { using type = typename Cfg::acc_type; };
// Cfg::promotion when the configuration names one, else 0.
template <class Cfg, class = void> struct promotion_of { static constexpr int value = 0; };
template <class Cfg> struct promotion_of<Cfg, void_t<decltype(Cfg::promotion)>> {
    static constexpr int value = Cfg::promotion;
};

template <class Cfg>
struct DeviceGemm {
    static constexpr int BM = Cfg::bm, BN = Cfg::bn, BK = Cfg::bk, STAGES = Cfg::stages;
    static constexpr int CONSUMERS = Cfg::consumers, CLUSTER = Cfg::cluster_m;
    static constexpr bool PINGPONG = Cfg::pingpong;
    static constexpr int WG_M = PINGPONG ? BM : BM / CONSUMERS, ATOMS_M = WG_M / 64;
    static constexpr int READERS = PINGPONG ? 1 : CONSUMERS;  // consumer warpgroups that read each stage
    static constexpr int THREADS = 128 * (1 + CONSUMERS);
    // Registers per thread after the hand-over: the producer keeps few, consumers get the rest.
    static constexpr int PRODUCER_REGISTERS = 40;
    static constexpr int CONSUMER_REGISTERS = CONSUMERS == 1 ? 256 : 232;

    using SA = StageOperand<typename Cfg::a_type, BM, BK, Cfg::a_k_major>;
    using SB = StageOperand<typename Cfg::b_type, BN, BK, Cfg::b_k_major>;
    using Acc = Accumulator<ATOMS_M, BN, typename accumulator_of<Cfg>::type>;
    static constexpr int PROMOTION = promotion_of<Cfg>::value;
    using Part = Accumulator<1, promotion_width<BN>::value, float>;  // the tensor core's sums of one interval
    using Sched = Scheduler<BM, BN, BK, Cfg::group_m, CLUSTER>;
    using Stages = Ring<STAGES>;

    static constexpr int STAGE_BYTES = SA::BYTES + SB::BYTES;
    // Dynamic shared memory: 1024 bytes of slack to align the stages to a swizzle atom, the
    // stages, each consumer's staging for its epilogue, the barriers.
    template <class Epilogue>
    __host__ __device__ static constexpr int shared_bytes() {
        return ATOM_BYTES + STAGES * STAGE_BYTES + CONSUMERS * Epilogue::staging_bytes + int(sizeof(Stages));
    }

    static_assert(CONSUMERS == 1 || CONSUMERS == 2, "one or two consumer warpgroups");
    static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of one or two blocks");
    static_assert(!PINGPONG || CONSUMERS == 2, "ping-pong takes two consumers");
    static_assert(WG_M % 64 == 0 && ATOMS_M <= 2, "a consumer owns one or two 64-row slices of the tile");
    static_assert(BN == 64 || BN == 128 || BN == 256, "one wgmma spans the tile's N: 64, 128 or 256");
    static_assert(STAGES >= 2, "the producer loads ahead while consumers multiply");
    static_assert(SA::BYTES % ATOM_BYTES == 0 && SB::BYTES % ATOM_BYTES == 0, "stages stay atom-aligned");
    static_assert(ATOMS_M * BN / 2 + (PROMOTION ? Part::N / 2 : 0) + 40 <= CONSUMER_REGISTERS,
                  "the accumulator (and the promotion's) fits the consumer's registers");
    static_assert(PROMOTION == 0 || (Cfg::a_k_major && Cfg::b_k_major && sizeof(typename Cfg::a_type) == 1),
                  "promotion is for fp8 operands (K-major)");

    __device__ __forceinline__ static unsigned char* stage(unsigned char* smem, int s) { return smem + s * STAGE_BYTES; }

    // Stage s has been read by this warp: free it in every block of the cluster (each loads part of it into all).
    __device__ __forceinline__ static void release(Stages* ring, int s, int rank) {
        arrive(&ring->empty[s]);
        if constexpr (CLUSTER > 1) arrive_in_block(&ring->empty[s], rank ^ 1);
    }

    // The whole block's work; `smem` is the dynamic shared memory (shared_bytes<Epilogue>()).
    // `scales` are the block scales applied at each promotion (promotion.cuh; only with PROMOTION).
    template <class Epilogue, class Scales = NoBlockScales>
    __device__ __forceinline__ static void run(unsigned char* smem_raw, const TensorMap* map_a,
                                               const TensorMap* map_b, const Sched& sched, bool batched_a,
                                               bool batched_b, const Epilogue& epi, const Scales& scales = Scales{}) {
        static_assert(PROMOTION > 0 || !Scales::ACTIVE, "block scales are applied at promotion");
        static_assert(shared_bytes<Epilogue>() <= 232448, "the stages fit the 227 KB a Hopper block can have");
        unsigned char* smem = smem_raw + ((ATOM_BYTES - shared_address(smem_raw) % ATOM_BYTES) % ATOM_BYTES);
        unsigned char* staging = smem + STAGES * STAGE_BYTES;
        Stages* ring = reinterpret_cast<Stages*>(staging + CONSUMERS * Epilogue::staging_bytes);
        if (threadIdx.x == 0) {
            u32 granted;
            asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(granted));
            if (granted < u32(shared_bytes<Epilogue>())) __trap();  // a launch with less would corrupt memory
            ring->init(4 * READERS * CLUSTER);
            prefetch_tensor_map(map_a);
            prefetch_tensor_map(map_b);
        }
        if constexpr (CLUSTER > 1) {
            cluster_sync();  // the peer's barriers exist before anyone multicasts into or frees them
        } else {
            __syncthreads();
        }
        const int warpgroup = threadIdx.x / 128;
        if (warpgroup == 0) {
            release_registers<PRODUCER_REGISTERS>();
            if (threadIdx.x == 0) produce(smem, ring, map_a, map_b, sched, batched_a, batched_b);
        } else {
            claim_registers<CONSUMER_REGISTERS>();
            const int consumer = warpgroup - 1;
            consume(smem, ring, sched, consumer, epi, staging + consumer * Epilogue::staging_bytes, scales);
        }
    }

    __device__ __forceinline__ static void produce(unsigned char* smem, Stages* ring, const TensorMap* map_a,
                                                   const TensorMap* map_b, const Sched& sched, bool batched_a,
                                                   bool batched_b) {
        RingState<STAGES> at;
        const int rank = CLUSTER > 1 ? int(cluster_rank()) : 0;
        for (int unit = blockIdx.x / CLUSTER; unit < sched.units; unit += gridDim.x / CLUSTER) {
            const Work w = sched.work(unit, rank);
            const bool has_a = w.m0 < sched.m;  // a cluster's last tile row may lie past M
            for (int step = w.k_begin; step < w.k_end; ++step) {
                wait(&ring->empty[at.stage], at.parity ^ 1);
                unsigned char* s = stage(smem, at.stage);
                u64* full = &ring->full[at.stage];
                arrive_expect_bytes(full, (has_a ? SA::BYTES : 0) + SB::BYTES);
                if (has_a) SA::load(s, map_a, full, w.m0, step * BK, batched_a ? w.batch : 0);
                if constexpr (CLUSTER > 1) {
                    SB::template load_part<CLUSTER>(s + SA::BYTES, map_b, full, w.n0, step * BK,
                                                    batched_b ? w.batch : 0, rank, (1 << CLUSTER) - 1);
                } else {
                    SB::load(s + SA::BYTES, map_b, full, w.n0, step * BK, batched_b ? w.batch : 0);
                }
                at.advance();
            }
        }
        if constexpr (CLUSTER > 1) {  // stay until every consumer of the cluster has freed every stage here
            for (int i = 0; i < STAGES; ++i) {
                wait(&ring->empty[at.stage], at.parity ^ 1);
                at.advance();
            }
        }
    }

    template <class Epilogue, class Scales>
    __device__ __forceinline__ static void consume(unsigned char* smem, Stages* ring, const Sched& sched,
                                                   int consumer, const Epilogue& epi, unsigned char* staging,
                                                   const Scales& scales) {
        const bool lead = threadIdx.x % 32 == 0;  // one arrival per warp frees a stage
        const int rank = CLUSTER > 1 ? int(cluster_rank()) : 0;
        RingState<STAGES> at;
        Acc acc;
        Part part;  // unused without promotion
        int turn = 0;    // ping-pong: the units of this block alternate between the consumers
        u32 waited = 0;  // turns of this consumer that waited for the other's
        for (int unit = blockIdx.x / CLUSTER; unit < sched.units; unit += gridDim.x / CLUSTER, ++turn) {
            const Work w = sched.work(unit, rank);
            if (PINGPONG && turn % CONSUMERS != consumer) {
                at.skip(w.k_end - w.k_begin);  // the other consumer's stages
                continue;
            }
            if (PINGPONG && turn > 0) wait(&ring->turn[consumer], waited++ & 1);  // its last unit's stages are in
            const int row0 = PINGPONG ? 0 : consumer * WG_M;
            acc.zero();
            int held = -1;  // the stage the group in flight reads
            for (int step = w.k_begin; step < w.k_end; ++step) {
                wait(&ring->full[at.stage], at.parity);
                const u32 a_base = shared_address(stage(smem, at.stage));
                if constexpr (PROMOTION > 0) {  // every product of the stage is in acc on return
                    promote_stage<typename Cfg::a_mma, typename Cfg::b_mma, SA, SB, ATOMS_M, BN, BK, PROMOTION>(
                        acc, part, a_base, a_base + SA::BYTES, row0, scales, step, w.m0 + row0, w.n0);
                    if (lead) release(ring, at.stage, rank);
                } else {
                    mma_stage<typename Cfg::a_mma, typename Cfg::b_mma, SA, SB, ATOMS_M, BN, BK>(acc, a_base,
                                                                                         a_base + SA::BYTES, row0);
                    wgmma::wait<1>();
                    if (held >= 0 && lead) release(ring, held, rank);
                    held = at.stage;
                }
                at.advance();
            }
            if (PINGPONG && threadIdx.x % 128 == 0) arrive(&ring->turn[consumer ^ 1]);  // every stage waited for
            wgmma::wait<0>();
            if (held >= 0 && lead) release(ring, held, rank);
            acc.pin();
            epi(w, acc, w.m0 + row0, w.n0, consumer, staging);
        }
        epi.finish(consumer);
    }
};

}  // namespace hopper
}  // namespace blasdx

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
//   split_tf32 (optional)  float32 operands at float32 accuracy on tf32 tensor cores
//                          (precision.cuh): warps 1-3 of the producer warpgroup and one more
//                          warpgroup after the consumers split each filled stage into high
//                          and low parts, and consumers multiply three products per stage
//   promote_stages (opt.)  with the split: stages summed by the tensor cores between two
//                          promotions into the accumulator (default 1)
//   promotion (optional)   fp8: K elements the tensor core sums before a consumer adds them into
//                          its f32 accumulator (promotion.cuh; 32, 64 or 128); 0 (default): the
//                          whole K range stays in the tensor core's accumulator. run() then takes
//                          the block scales applied at each promotion (NoBlockScales: none)
//   promotion_overlap (opt.) fp8 promoted once a stage (promotion = bk) on consumer tiles of one 64-row
//                          slice and at most 128 columns: the next stage's products go to a second
//                          temporary before this stage's are added up, so the tensor cores multiply while
//                          the CUDA cores add (64 more registers a thread)
//   b_transpose (optional) B is MN-major in global memory and of a type wgmma reads K-major only
//                          (tf32, 8-bit): TMA loads its MN-major tile into a raw area of the stage
//                          and the transposing threads (warps 1-3 of the producer warpgroup and
//                          one more warpgroup after the consumers) rewrite it K-major
//                          (transpose.cuh) before the consumers read the stage
//   stream_k (optional)    the last tiles' K steps shared evenly by all blocks (StreamKScheduler in
//                          scheduler.cuh; the launch's `splits` is then its waves); the tiles
//                          several blocks cover are added up as K splits are (splitk.cuh)
//   cluster_m              blocks per cluster along M (1 or 2): the blocks of a cluster take
//                          vertically adjacent tiles and each loads half of their common B
//                          tile, multicast into both (half the B traffic through L2); a
//                          stage is free again once the consumers of every block of the
//                          cluster have read it, so consumers free it in each block.
#pragma once

#include "epilogue.cuh"
#include "pipeline.cuh"
#include "precision.cuh"
#include "promotion.cuh"
#include "scheduler.cuh"
#include "tma.cuh"
#include "transpose.cuh"
#include "warpgroup_mma.cuh"

namespace blasdx {
namespace hopper {

// Cfg::acc_type when the configuration names one, else float.
template <class...> using void_t = void;
template <class Cfg, class = void> struct accumulator_of { using type = float; };
template <class Cfg> struct accumulator_of<Cfg, void_t<typename Cfg::acc_type>> { using type = typename Cfg::acc_type; };
// Cfg::MEMBER when the configuration names it, else DEFAULT: the configuration's optional values.
#define BLASDX_CFG_OPTIONAL(TRAIT, MEMBER, TYPE, DEFAULT)                                        \
    template <class Cfg, class = void> struct TRAIT { static constexpr TYPE value = DEFAULT; };   \
    template <class Cfg> struct TRAIT<Cfg, void_t<decltype(Cfg::MEMBER)>> {                      \
        static constexpr TYPE value = Cfg::MEMBER;                                               \
    };
BLASDX_CFG_OPTIONAL(splits_tf32, split_tf32, bool, false)
BLASDX_CFG_OPTIONAL(promote_stages_of, promote_stages, int, 1)  // with the tf32 split
BLASDX_CFG_OPTIONAL(transposes_b, b_transpose, bool, false)
BLASDX_CFG_OPTIONAL(promotion_of, promotion, int, 0)  // fp8
BLASDX_CFG_OPTIONAL(streams_k, stream_k, bool, false)
BLASDX_CFG_OPTIONAL(overlaps_promotion, promotion_overlap, bool, false)  // fp8
#undef BLASDX_CFG_OPTIONAL

// Cfg::scheduler when the configuration names one (group_scheduler.cuh), else Default.
template <class Cfg, class Default, class = void> struct scheduler_of { using type = Default; };
template <class Cfg, class Default> struct scheduler_of<Cfg, Default, void_t<typename Cfg::scheduler>> {
    using type = typename Cfg::scheduler;
};

template <class Cfg>
struct DeviceGemm {
    static constexpr int BM = Cfg::bm, BN = Cfg::bn, BK = Cfg::bk, STAGES = Cfg::stages;
    static constexpr int CONSUMERS = Cfg::consumers, CLUSTER = Cfg::cluster_m;
    static constexpr bool PINGPONG = Cfg::pingpong;
    static constexpr bool SPLIT = splits_tf32<Cfg>::value;
    static constexpr bool TRANSPOSE_B = transposes_b<Cfg>::value;
    // Stages are rewritten in shared memory (split into tf32 parts, or B transposed) before use.
    static constexpr bool REWRITE = SPLIT || TRANSPOSE_B;
    // Threads that rewrite stages: warps 1-3 of the producer warpgroup and the last warpgroup.
    static constexpr int SPLITTERS = REWRITE ? 96 + 128 : 0;
    // The products of every PROMOTE_STAGES stages summed apart and added into the accumulator
    // by the CUDA cores.
    static constexpr bool PROMOTE = SPLIT;
    static constexpr int PROMOTE_STAGES = promote_stages_of<Cfg>::value;
    // fp8: the tensor cores' sums of every PROMOTION K elements added into the f32 accumulator
    // (times the block scales, if any) through a 64 x 128 temporary (promotion.cuh).
    static constexpr int PROMOTION = promotion_of<Cfg>::value;
    static constexpr bool OVERLAP = overlaps_promotion<Cfg>::value;
    static constexpr int WG_M = PINGPONG ? BM : BM / CONSUMERS, ATOMS_M = WG_M / 64;
    static constexpr int READERS = PINGPONG ? 1 : CONSUMERS;  // consumer warpgroups that read each stage
    static constexpr int THREADS = 128 * (1 + CONSUMERS + (REWRITE ? 1 : 0));
    // Registers per thread after the hand-over: the producer keeps few, consumers get the rest.
    // Transposing threads keep more, so that their loop does not spill: with one consumer
    // 2 x 128 x 88 + 128 x 256, with two 2 x 128 x 48 + 256 x 208 registers.
    static constexpr int PRODUCER_REGISTERS = !TRANSPOSE_B ? 40 : CONSUMERS == 1 ? 88 : 48;
    // (With the splitting warpgroup: 2 x 128 x 40 + 256 x 216 = the 64K registers of an SM.)
    static constexpr int CONSUMER_REGISTERS = CONSUMERS == 1 ? 256 : TRANSPOSE_B ? 208 : SPLIT ? 216 : 232;

    using SA = StageOperand<typename Cfg::a_type, BM, BK, Cfg::a_k_major>;
    using SB = StageOperand<typename Cfg::b_type, BN, BK, Cfg::b_k_major || TRANSPOSE_B>;
    // B's MN-major tile as TMA loads it (only with the transposition: narrower tiles have no MN-major form)
    using SR = typename std_conditional<TRANSPOSE_B, StageOperand<typename Cfg::b_type, BN, BK, false>, SB>::type;
    using Acc = Accumulator<ATOMS_M, BN, typename accumulator_of<Cfg>::type>;
    using Part = Accumulator<1, promotion_width<BN>::value, float>;  // fp8: the tensor cores' sums of one interval
    static constexpr bool STREAM_K = streams_k<Cfg>::value;
    using Sched = typename scheduler_of<
        Cfg, typename std_conditional<STREAM_K, StreamKScheduler<BM, BN, BK, Cfg::group_m, CLUSTER>,
                                      Scheduler<BM, BN, BK, Cfg::group_m, CLUSTER>>::type>::type;
    using Stages = Ring<STAGES>;

    static constexpr int OPERAND_BYTES = SA::BYTES + SB::BYTES;
    static constexpr int RAW_BYTES = TRANSPOSE_B ? SR::BYTES : 0;
    // split: [A B A_lo B_lo]; transposed B: [A B B_raw]
    static constexpr int STAGE_BYTES = SPLIT ? 2 * OPERAND_BYTES : OPERAND_BYTES + RAW_BYTES;
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
    static_assert(BN == 16 || BN == 32 || BN == 64 || BN == 128 || BN == 256 ||
                      (BN == 192 && !PROMOTION && !REWRITE && sizeof(typename Cfg::a_type) == 2),
                  "one wgmma spans the tile's N: 16 to 256 (192: 16-bit inputs, unpromoted, stages as loaded)");
    static_assert(STAGES >= 2, "the producer loads ahead while consumers multiply");
    static_assert(!SPLIT || (CLUSTER == 1 && sizeof(typename Cfg::a_type) == 4 && sizeof(typename Cfg::b_type) == 4),
                  "the tf32 split takes float32 operands, without clusters");
    static_assert(SA::BYTES % ATOM_BYTES == 0 && SB::BYTES % ATOM_BYTES == 0, "stages stay atom-aligned");
    static_assert(ATOMS_M * BN / 2 + (PROMOTION ? (OVERLAP ? 2 : 1) * Part::N / 2 : 0) + 40 <= CONSUMER_REGISTERS,
                  "the accumulator (and the fp8 promotion's temporaries) fits the consumer's registers");
    static_assert(!OVERLAP || (PROMOTION == BK && ATOMS_M == 1 && Part::N == BN),
                  "overlapped promotion: one interval a stage, one 64-row slice and one chunk of columns a consumer");
    static_assert(PROMOTION == 0 || (!SPLIT && Cfg::a_k_major && SB::k_major && sizeof(typename Cfg::a_type) == 1),
                  "fp8 promotion is for K-major 8-bit operands");
    static_assert(!TRANSPOSE_B || (!SPLIT && !Cfg::b_k_major && sizeof(typename Cfg::b_type) != 2),
                  "B is transposed in shared memory when it is MN-major and of a 4-byte or 1-byte type");

    __device__ __forceinline__ static unsigned char* stage(unsigned char* smem, int s) { return smem + s * STAGE_BYTES; }

    // Stage s has been read by this warp: free it in every block of the cluster (each loads part of it into all).
    __device__ __forceinline__ static void release(Stages* ring, int s, int rank) {
        arrive(&ring->empty[s]);
        if constexpr (CLUSTER > 1) arrive_in_block(&ring->empty[s], rank ^ 1);
    }

    // The whole block's work; `smem` is the dynamic shared memory (shared_bytes<Epilogue>()).
    // `scales` are the block scales applied at each fp8 promotion (promotion.cuh; PROMOTION only).
    template <class Epilogue, class Scales = NoBlockScales>
    __device__ __forceinline__ static void run(unsigned char* smem_raw, const TensorMap* map_a,
                                               const TensorMap* map_b, const Sched& sched, bool batched_a,
                                               bool batched_b, const Epilogue& epi, const Scales& scales = Scales{}) {
        static_assert(PROMOTION > 0 || !Scales::ACTIVE, "block scales are applied at promotion");
        static_assert(shared_bytes<Epilogue>() <= 232448, "the stages fit the 227 KB a Hopper block can have");
        unsigned char* smem = smem_raw + ((ATOM_BYTES - shared_address(smem_raw) % ATOM_BYTES) % ATOM_BYTES);
        unsigned char* staging = smem + STAGES * STAGE_BYTES;
        Stages* ring = reinterpret_cast<Stages*>(staging + CONSUMERS * Epilogue::staging_bytes);
        start_ring<CLUSTER>(ring, 4 * READERS * CLUSTER, REWRITE ? SPLITTERS : 1, u32(shared_bytes<Epilogue>()), map_a,
                            map_b);
        const int warpgroup = threadIdx.x / 128;
        if (warpgroup == 0) {
            release_registers<PRODUCER_REGISTERS>();
            if (threadIdx.x == 0) {
                produce(smem, ring, map_a, map_b, sched, batched_a, batched_b);
            } else if constexpr (REWRITE) {
                if (threadIdx.x >= 32) split(smem, ring, sched, threadIdx.x - 32);
            }
        } else if (REWRITE && warpgroup == 1 + CONSUMERS) {
            release_registers<PRODUCER_REGISTERS>();
            split(smem, ring, sched, 96 + threadIdx.x % 128);
        } else {
            claim_registers<CONSUMER_REGISTERS>();
            const int consumer = warpgroup - 1;
            consume(smem, ring, sched, consumer, epi, staging + consumer * Epilogue::staging_bytes, scales);
        }
    }

    __device__ __forceinline__ static void produce(unsigned char* smem, Stages* ring, const TensorMap* map_a,
                                                   const TensorMap* map_b, const Sched& sched, bool batched_a,
                                                   bool batched_b) {
        produce_stages<STAGES, CLUSTER, STAGE_BYTES, SA::BYTES, SB::BYTES>(
            smem, ring, sched,  // a named Work, not a generic lambda: some NVRTC releases take those for host code
            [&](unsigned char* s, u64* full, const Work& w, int step, bool has_a, int rank) {
                if (has_a) SA::load(s, map_a, full, w.m0, step * BK, batched_a ? w.batch : 0);
                if constexpr (TRANSPOSE_B) {  // B's MN-major tile into the raw area
                    load_b<SR>(s + OPERAND_BYTES, map_b, full, w, step, batched_b, rank);
                } else {
                    load_b<SB>(s + SA::BYTES, map_b, full, w, step, batched_b, rank);
                }
            });
    }

    // B's tile of a unit's K step into dst as LB lays it out; in a cluster, this block's part into every block.
    template <class LB>
    __device__ __forceinline__ static void load_b(unsigned char* dst, const TensorMap* map_b, u64* full,
                                                  const Work& w, int step, bool batched_b, int rank) {
        if constexpr (CLUSTER > 1) {
            LB::template load_part<CLUSTER>(dst, map_b, full, w.n0, step * BK, batched_b ? w.batch : 0, rank,
                                            (1 << CLUSTER) - 1);
        } else {
            LB::load(dst, map_b, full, w.n0, step * BK, batched_b ? w.batch : 0);
        }
    }

    // The rewriting threads (`splitter` of SPLITTERS): each stage, once filled, split into tf32
    // high parts (in place) and low parts, or B's raw MN-major tile transposed into the stage's B.
    __device__ __forceinline__ static void split(unsigned char* smem, Stages* ring, const Sched& sched,
                                                 int splitter) {
        RingState<STAGES> at;
        const int rank = CLUSTER > 1 ? int(cluster_rank()) : 0;
        for (int unit = blockIdx.x / CLUSTER; unit < sched.units; unit += gridDim.x / CLUSTER) {
            const Work w = sched.work(unit, rank);
            for (int step = w.k_begin; step < w.k_end; ++step) {
                wait(&ring->full[at.stage], at.parity);
                unsigned char* s = stage(smem, at.stage);
                if constexpr (SPLIT) {
                    split_stage<OPERAND_BYTES, SPLITTERS>(s, s + OPERAND_BYTES, splitter);
                } else if constexpr (TRANSPOSE_B) {
                    transpose_stage<typename Cfg::b_type, BN, BK, SPLITTERS>(s + OPERAND_BYTES, s + SA::BYTES,
                                                                              splitter);
                }
                async_proxy_fence();  // the rewritten operands are visible to wgmma (the async proxy)
                arrive(&ring->split[at.stage]);
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
        int turn = 0;    // ping-pong: the units of this block alternate between the consumers
        u32 waited = 0;  // turns of this consumer that waited for the other's
        for (int unit = blockIdx.x / CLUSTER; unit < sched.units; unit += gridDim.x / CLUSTER, ++turn) {
            const auto w = sched.work(unit, rank);  // the scheduler's Work (a grouped one carries more)
            // No work (stream-K's units past a block's range; they end its walk, so ping-pong turns alternate
            // over the units with work alone): no stages, no epilogue.
            if (w.parts == 0) continue;
            if (PINGPONG && turn % CONSUMERS != consumer) {
                at.skip(w.k_end - w.k_begin);  // the other consumer's stages
                continue;
            }
            if (PINGPONG && turn > 0) wait(&ring->turn[consumer], waited++ & 1);  // its last unit's stages are in
            const int row0 = PINGPONG ? 0 : consumer * WG_M;
            if constexpr (PROMOTE) {
                multiply_promoted(acc, smem, ring, at, w, row0, lead, rank);
            } else if constexpr (OVERLAP) {
                multiply_overlapped(acc, smem, ring, at, w, row0, lead, rank, scales);
            } else if constexpr (PROMOTION > 0) {
                multiply_in_intervals(acc, smem, ring, at, w, row0, lead, rank, scales);
            } else {
                multiply(acc, smem, ring, at, w, row0, lead, rank);
            }
            epi(w, acc, w.m0 + row0, w.n0, consumer, staging);
        }
        epi.finish(consumer);
    }

    // Waits for the stage at `at` and issues its products into `target` as one wgmma group.
    __device__ __forceinline__ static void issue(Acc& target, unsigned char* smem, Stages* ring,
                                                 const RingState<STAGES>& at, int row0) {
        const u32 base = shared_address(stage(smem, at.stage));
        if constexpr (SPLIT) {
            wait(&ring->split[at.stage], at.parity);
            // promoted every stage: each stage's sum starts afresh (no zeroed registers)
            mma_stage_split<SA, SB, ATOMS_M, BN, BK, PROMOTE_STAGES == 1>(
                target, base, base + SA::BYTES, base + OPERAND_BYTES, base + OPERAND_BYTES + SA::BYTES, row0);
        } else {
            wait(REWRITE ? &ring->split[at.stage] : &ring->full[at.stage], at.parity);
            mma_stage<typename Cfg::a_mma, typename Cfg::b_mma, SA, SB, ATOMS_M, BN, BK>(target, base,
                                                                                 base + SA::BYTES, row0);
        }
    }

    // A unit's K steps summed in acc by the tensor cores; one stage's group stays in flight
    // while the next is issued, and a stage is freed once its group has completed. Ping-pong:
    // the other consumer may go on once every stage of this unit has been waited for.
    __device__ __forceinline__ static void multiply(Acc& acc, unsigned char* smem, Stages* ring,
                                                    RingState<STAGES>& at, const Work& w, int row0, bool lead,
                                                    int rank) {
        acc.zero();
        int held = -1;  // the stage the group in flight reads
        for (int step = w.k_begin; step < w.k_end; ++step) {
            issue(acc, smem, ring, at, row0);
            wgmma::wait<1>();
            if (held >= 0 && lead) release(ring, held, rank);
            held = at.stage;
            at.advance();
        }
        if (PINGPONG && threadIdx.x % 128 == 0) arrive(&ring->turn[(threadIdx.x / 128 - 1) ^ 1]);
        wgmma::wait<0>();
        if (held >= 0 && lead) release(ring, held, rank);
        acc.pin();
    }

    // As multiply, but the products of every PROMOTE_STAGES stages go to a fresh accumulator
    // that is then added into acc by the CUDA cores (rounded f32 adds): the tensor cores' f32
    // sums do not round to nearest, so their error grows with the length of the sum; promoted,
    // it grows with PROMOTE_STAGES stages'. The last group is waited for before the adds
    // (reading an accumulator of a group in flight would make ptxas serialise every wgmma),
    // so this consumer's tensor-core work pauses while it adds.
    __device__ static void multiply_promoted(Acc& acc, unsigned char* smem, Stages* ring, RingState<STAGES>& at,
                                             const Work& w, int row0, bool lead, int rank) {
        Acc part;
        acc.zero();
        part.zero();
        int held = -1;  // the stage the group in flight reads, when one is
        int summed = 0;  // stages in part
        for (int step = w.k_begin; step < w.k_end; ++step) {
            issue(part, smem, ring, at, row0);
            if (++summed == PROMOTE_STAGES || step + 1 == w.k_end) {
                wgmma::wait<0>();
                if (lead) {
                    if (held >= 0) release(ring, held, rank);
                    release(ring, at.stage, rank);
                }
                add_and_clear(acc, part);
                held = -1;
                summed = 0;
            } else {
                wgmma::wait<1>();
                if (held >= 0 && lead) release(ring, held, rank);
                held = at.stage;
            }
            at.advance();
        }
        wgmma::wait<0>();  // nothing is in flight here (the last step promoted); ptxas cannot tell
        if (PINGPONG && threadIdx.x % 128 == 0) arrive(&ring->turn[(threadIdx.x / 128 - 1) ^ 1]);
        acc.pin();
    }

    // fp8: each stage's products summed by the tensor cores PROMOTION K elements at a time
    // into a temporary that starts afresh, and added into acc (times the block scales) by the
    // CUDA cores (promote_stage); a stage is freed once all its products are in acc. The
    // consumer's tensor-core work pauses while it adds: the other consumer's fills the gap.
    // The block factors of the next stage are loaded while this one multiplies.
    template <class Scales>
    __device__ __forceinline__ static void multiply_in_intervals(Acc& acc, unsigned char* smem, Stages* ring,
                                                                 RingState<STAGES>& at, const Work& w, int row0,
                                                                 bool lead, int rank, const Scales& scales) {
        constexpr int TN = Part::N;
        Part part;
        Factors<ATOMS_M, BN / TN> now, next;
        acc.zero();
        if constexpr (Scales::ACTIVE) {
            static_assert(BK == Scales::BLOCK, "a stage is one 128-deep K block of the block scales");
            if (w.k_begin < w.k_end) scales.template load<TN>(now, w, w.k_begin, w.m0 + row0, w.n0);
        }
        for (int step = w.k_begin; step < w.k_end; ++step) {
            if constexpr (Scales::ACTIVE) {
                if (step + 1 < w.k_end) scales.template load<TN>(next, w, step + 1, w.m0 + row0, w.n0);
            }
            wait(REWRITE ? &ring->split[at.stage] : &ring->full[at.stage], at.parity);
            const u32 base = shared_address(stage(smem, at.stage));
            promote_stage<typename Cfg::a_mma, typename Cfg::b_mma, SA, SB, ATOMS_M, BN, BK, PROMOTION,
                          Scales::ACTIVE>(acc, part, base, base + SA::BYTES, row0, now);
            if (lead) release(ring, at.stage, rank);
            at.advance();
            if constexpr (Scales::ACTIVE) now = next;
        }
        if (PINGPONG && threadIdx.x % 128 == 0) arrive(&ring->turn[(threadIdx.x / 128 - 1) ^ 1]);
        acc.pin();
    }

    // fp8 promoted once a stage, overlapped (promotion_overlap): while stage s's products are added into
    // acc (times its block factors), stage s + 1's are already on the tensor cores, in the other of two
    // temporaries; that group is waited for before the next stage is issued, so no group is in flight at a
    // branch or across the loop's back edge (ptxas serialises every wgmma otherwise). A stage is freed once
    // its products are in acc. The loop takes two stages a pass so that each temporary keeps its
    // registers.
    template <class Scales>
    __device__ __forceinline__ static void multiply_overlapped(Acc& acc, unsigned char* smem, Stages* ring,
                                                               RingState<STAGES>& at, const Work& w, int row0,
                                                               bool lead, int rank, const Scales& scales) {
        Part first, second;
        Factors<1, 1> now, next;
        const auto factors = scales.template cursor<BN, 1, 1>(w, w.m0 + row0, w.n0);
        acc.zero();
        if (w.k_begin >= w.k_end) {  // no K step (not expected of a unit with parts): acc stays zero
            if (PINGPONG && threadIdx.x % 128 == 0) arrive(&ring->turn[(threadIdx.x / 128 - 1) ^ 1]);
            acc.pin();
            return;
        }
        if constexpr (Scales::ACTIVE) factors.load(now, w.k_begin);
        issue_promoted(first, smem, ring, at, row0);
        wgmma::wait<0>();
        int step = w.k_begin;
        bool last_in_second = false;
        for (;;) {
            if (step + 1 >= w.k_end) break;
            overlap_step<Scales::ACTIVE>(acc, first, second, smem, ring, at, w, step, row0, lead, rank, factors, now,
                                         next);
            ++step;
            if (step + 1 >= w.k_end) {
                last_in_second = true;
                break;
            }
            overlap_step<Scales::ACTIVE>(acc, second, first, smem, ring, at, w, step, row0, lead, rank, factors, now,
                                         next);
            ++step;
        }
        if (last_in_second) {
            add_interval<1, BN, BN, Scales::ACTIVE, 1>(acc, second, 0, 0, now);
        } else {
            add_interval<1, BN, BN, Scales::ACTIVE, 1>(acc, first, 0, 0, now);
        }
        if (lead) release(ring, at.stage, rank);
        at.advance();
        if (PINGPONG && threadIdx.x % 128 == 0) arrive(&ring->turn[(threadIdx.x / 128 - 1) ^ 1]);
        acc.pin();
    }

    // Waits for the stage at `at` and issues its products into `part` (one interval, one committed group).
    __device__ __forceinline__ static void issue_promoted(Part& part, unsigned char* smem, Stages* ring,
                                                          const RingState<STAGES>& at, int row0) {
        using op = wgmma::mma<typename Cfg::a_mma, typename Cfg::b_mma, float>;
        wait(REWRITE ? &ring->split[at.stage] : &ring->full[at.stage], at.parity);
        const u32 base = shared_address(stage(smem, at.stage));
        issue_interval<typename Cfg::a_mma, typename Cfg::b_mma, SA, SB, BN, BK / op::K_STEP>(part, base,
                                                                                            base + SA::BYTES, row0, 0, 0);
    }

    // One pass of multiply_overlapped: `held` holds stage `step` (at `at`, its group completed) and a next
    // stage exists: it is issued into `spare`, `held` is added into acc with `now`'s factors meanwhile, the
    // stage freed and `at` advanced, and `spare`'s group waited for.
    template <bool SCALED, class Cursor>
    __device__ __forceinline__ static void overlap_step(Acc& acc, Part& held, Part& spare, unsigned char* smem,
                                                        Stages* ring, RingState<STAGES>& at, const Work& w, int step,
                                                        int row0, bool lead, int rank, const Cursor& factors,
                                                        Factors<1, 1>& now, Factors<1, 1>& next) {
        if constexpr (SCALED) factors.load(next, step + 1);
        RingState<STAGES> ahead = at;
        ahead.advance();
        issue_promoted(spare, smem, ring, ahead, row0);
        add_interval<1, BN, BN, SCALED, 1>(acc, held, 0, 0, now);
        if (lead) release(ring, at.stage, rank);
        at.advance();
        if constexpr (SCALED) now = next;
        wgmma::wait<0>();
    }

    // acc += part; part = 0 (part's group has completed), unless each interval's first step starts
    // part afresh (one stage an interval).
    __device__ __forceinline__ static void add_and_clear(Acc& acc, Acc& part) {
        part.pin();
#pragma unroll
        for (int i = 0; i < ATOMS_M; ++i)
#pragma unroll
            for (int j = 0; j < BN / 2; ++j) {
                acc.r[i][j] += part.r[i][j];
                if constexpr (PROMOTE_STAGES != 1) part.r[i][j] = 0;
            }
        part.pin();
    }
};

}  // namespace hopper
}  // namespace blasdx

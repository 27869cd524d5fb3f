// The K/V tiles of one attention head streaming through shared memory past a tile of queries
// (sm_90a, wgmma): the machinery of a FlashAttention-style forward, so that the kernel keeps only
// the attention logic.
//
//     using Stream = blasdx::kv_stream<QK, PV, blasdx::kv_pipelining::overlap>;
//     Stream stream(smem, q, q_rows, k, v, seq, keys);  // Q and the first K / V tiles on their way
//     auto scores = stream.first_scores();               // S = Q K^T of tile 0
//     ... softmax of S -> P;  PV::a_registers p(scores);
//     for (int j = 0; j + 1 < stream.tiles(); ++j) {
//         stream.multiply(j, scores, p, out);            // S = Q K^T of tile j + 1, O += P V of tile j
//         stream.wait_scores(j, scores);                 // S is done (P V may run on)
//         ... softmax of S -> P
//         stream.wait_output(j, out, p);                 // O += P V is done
//         ... rescale O;  p = PV::a_registers(scores);
//     }
//     stream.multiply_last(p, out);                      // O += P V of the last tile
//     stream.store(out, o, q_rows);                      // O (rounded to T) through shared memory
//
// QK: the (BLOCK_M x D) x (D x BLOCK_N) scores GEMM (row-major A = Q, column-major B = K^T); PV: the
// (BLOCK_M x BLOCK_N) x (BLOCK_N x D) GEMM of P (register A) and V (row-major B); wgmma plans on
// the same threads, PV 16-bit (QK may be 8-bit: fp8 Q and K). O is stored as PV's A type. TV: V's
// element type in global memory, PV's B type by default; another one (fp8 V beside f16 P V: 8-bit
// wgmma reads B K-major only, and V is MN-major) is converted on its way into the panels, through
// registers (plain loads and stores, no cp.async). q: the block's BLOCK_M query rows (q_rows of them exist), k
// and v: the head's seq x D keys and values (rows D apart); tiles() = ceil(keys / BLOCK_N) tiles
// are multiplied (keys <= seq: fewer for a causal tile of queries). Key rows past seq are
// zero-filled on the way in; the scores of those keys are the kernel's to mask.
//
// Shared memory (shared_memory_size bytes, from a 1024-byte aligned block): Q's panels, two K
// stages and two or three V stages, each on a 1024-byte boundary. The pipelining (kv_pipelining):
// * serial: each GEMM completes before the next step; copies of tile j + 1 under tile j.
// * overlap: Q K^T of tile j + 1 and P V of tile j are issued together (execute_async); the
//   kernel's softmax of tile j + 1 runs while P V of tile j is on the tensor cores. One block
//   barrier per tile (copy_wait): K j + 2 and V j + 1 stream in during tile j.
// * stages: as overlap, with a full and a free barrier per stage (stage_barrier.cuh) instead of a
//   block barrier per tile: a stage is read once its copies landed and refilled once its last
//   reader is done, so the two warpgroups may drift apart (one's softmax under the other's GEMMs).
//   K is refilled two tiles ahead in multiply, V two tiles ahead in wait_output (three V stages).
// * turns: stages, and the two warpgroups take turns at issuing their GEMMs (warpgroup_turns).
// Call every member from every thread of the block, the loop as above (no branch around
// multiply / wait_* inside it: ptxas would serialise the asynchronous GEMMs).
#pragma once

#include "stage_barrier.cuh"
#include "types.cuh"

namespace blasdx {

namespace detail {
template <class A, class B> struct same_type { static constexpr bool value = false; };
template <class A> struct same_type<A, A> { static constexpr bool value = true; };
template <class Acc> struct config_of;  // the config of a GEMM, from its accumulator type
template <class Cfg> struct config_of<accumulator<Cfg>> { using type = Cfg; };
}  // namespace detail

enum class kv_pipelining { serial = 0, overlap = 1, stages = 2, turns = 3 };

template <class QK, class PV, kv_pipelining MODE, class TV = typename PV::b_value_type>
class kv_stream {
  public:
    using T = typename QK::a_value_type;   // Q and K
    using TB = typename PV::b_value_type;  // V in the panels
    using TO = typename PV::a_value_type;  // O
    static constexpr bool CONVERT_V = !detail::same_type<TV, TB>::value;
    static constexpr int BLOCK_M = QK::m, BLOCK_N = QK::n, D = QK::k;
    static_assert(PV::m == BLOCK_M && PV::k == BLOCK_N && PV::n == D, "P V multiplies the scores' tile by a V tile");
    static_assert(QK::swizzled && PV::swizzled, "the K / V stream runs on wgmma: sm_90a descriptors whose plans are wgmma");
    static_assert(QK::max_threads_per_block == PV::max_threads_per_block, "QK and PV run on the same threads");
    static constexpr bool BARRIERS = MODE == kv_pipelining::stages || MODE == kv_pipelining::turns;
    static constexpr int K_BYTES = (QK::shared_b_bytes + 1023) / 1024 * 1024;
    static constexpr int V_BYTES = (PV::shared_b_bytes + 1023) / 1024 * 1024;
    static constexpr int V_STAGES = BARRIERS ? 3 : 2;  // per-stage barriers refill V two tiles ahead
    static constexpr int O_LD = D + 8;                 // staged output rows (the 8 spread the banks)
    // Dynamic shared memory the stream needs: Q, K0 K1, V0 V1 (V2), plus the slack to align it.
    static constexpr int shared_memory_size =
        QK::shared_b_offset + 2 * K_BYTES + V_STAGES * V_BYTES + QK::shared_memory_slack;
    static_assert(BLOCK_M * O_LD * int(sizeof(TO)) <= 2 * (K_BYTES + V_BYTES), "O is staged over the K / V stages");

    // Starts the copies of Q and of the first K / V tiles.
    __device__ __forceinline__ kv_stream(void* smem, const T* q, int q_rows, const T* k, const TV* v, int seq, int keys)
        : k_(k), v_(v), seq_(seq), tiles_((keys + BLOCK_N - 1) / BLOCK_N) {
        const auto buffers = QK::slice_shared_memory_ab(smem);
        sQ_ = buffers.a;
        stages_ = reinterpret_cast<unsigned char*>(buffers.b);
        if constexpr (BARRIERS) {
            barriers& b = bar();
            if (threadIdx.x == 0) {
                for (int s = 0; s < 2; ++s) b.k_full[s].init(THREADS), b.k_free[s].init(THREADS);
                for (int s = 0; s < V_STAGES; ++s) b.v_full[s].init(THREADS), b.v_free[s].init(THREADS);
            }
            __syncthreads();
            QK::template load_a<D>(q, sQ_, q_rows);  // rows past q_rows are zeros
            load_k(0);
            b.k_full[0].arrive_after_copies();
            if (tiles_ > 1) load_k(1);
            b.k_full[1].arrive_after_copies();
            load_v(0);
            v_landed(b.v_full[0]);
            if (tiles_ > 1) load_v(1);
            v_landed(b.v_full[1]);
        } else {
            QK::template load_a<D>(q, sQ_, q_rows);  // rows past q_rows are zeros
            load_k(0);
            QK::copy_commit();
            if (tiles_ > 1) load_k(1);
            load_v(0);
            QK::copy_commit();
        }
    }

    // Key tiles to multiply.
    __device__ __forceinline__ int tiles() const { return tiles_; }

    // S = Q K^T of tile 0, complete.
    __device__ __forceinline__ typename QK::accumulator first_scores() {
        if constexpr (BARRIERS) {
            bar().k_full[0].wait(0);
            QK::shared_fence();
            auto scores = QK::execute(sQ_, sK(0));
            bar().k_free[0].arrive();
            if constexpr (MODE == kv_pipelining::turns) warpgroup_turns::start();
            return scores;
        } else {
            QK::template copy_wait<1>();  // Q and K 0
            return QK::execute(sQ_, sK(0));
        }
    }

    // scores = Q K^T of tile j + 1 and out += P V of tile j (p: P of tile j in registers); both
    // asynchronous except when serial. Copies of later tiles start here.
    __device__ __forceinline__ void multiply(int j, typename QK::accumulator& scores, typename PV::a_registers& p,
                                             typename PV::accumulator& out) {
        if constexpr (BARRIERS) {
            barriers& b = bar();
            if (j + 2 < tiles_) {  // K j + 2 over K j, once every thread is done with it
                b.k_free[j % 2].wait(j / 2);
                load_k(j + 2);
                b.k_full[j % 2].arrive_after_copies();
            }
            b.k_full[(j + 1) % 2].wait((j + 1) / 2);
            b.v_full[j % V_STAGES].wait(j / V_STAGES);
            QK::shared_fence();
            scores.clear();
            if constexpr (MODE == kv_pipelining::turns) warpgroup_turns::take();
            QK::execute_async(sQ_, sK(j + 1), scores);
            PV::execute_async(p, sV(j), out);
            if constexpr (MODE == kv_pipelining::turns) warpgroup_turns::pass();
        } else if constexpr (MODE == kv_pipelining::overlap) {
            QK::template copy_wait<0>();  // K j + 1 and V j landed; every warpgroup is done with Q K^T j, P V j - 1
            scores.clear();
            QK::execute_async(sQ_, sK(j + 1), scores);
            PV::execute_async(p, sV(j), out);
            if (j + 2 < tiles_) load_k(j + 2);  // over K j
            load_v(j + 1);                      // over V j - 1
            QK::copy_commit();
        } else {  // serial
            QK::template copy_wait<0>();  // as overlap, the copies before the GEMMs
            if (j + 2 < tiles_) load_k(j + 2);
            load_v(j + 1);
            QK::copy_commit();
            PV::execute(p, sV(j), out);
            scores.clear();
            QK::execute(sQ_, sK(j + 1), scores);
        }
    }

    // Until the scores of multiply(j) are complete (P V of tile j may still run).
    __device__ __forceinline__ void wait_scores(int j, typename QK::accumulator& scores) {
        if constexpr (MODE != kv_pipelining::serial) QK::template wait<1>(scores);  // groups complete in order
        if constexpr (BARRIERS) bar().k_free[(j + 1) % 2].arrive();
    }

    // Until out += P V of multiply(j) is complete (p may change again).
    __device__ __forceinline__ void wait_output(int j, typename PV::accumulator& out, typename PV::a_registers& p) {
        if constexpr (MODE != kv_pipelining::serial) PV::template wait<0>(out, p);
        if constexpr (BARRIERS) {
            barriers& b = bar();
            b.v_free[j % V_STAGES].arrive();
            if (j + 2 < tiles_) {  // V j + 2 over V j - 1, once every thread is done with it
                if (j >= 1) b.v_free[(j + 2) % V_STAGES].wait((j - 1) / V_STAGES);
                load_v(j + 2);
                v_landed(b.v_full[(j + 2) % V_STAGES]);
            }
        }
    }

    // out += P V of the last tile, complete.
    __device__ __forceinline__ void multiply_last(typename PV::a_registers& p, typename PV::accumulator& out) {
        const int last = tiles_ - 1;
        if constexpr (BARRIERS) {
            if constexpr (MODE == kv_pipelining::turns) {
                warpgroup_turns::finish();
                // One more turn, warpgroup 0 to 1, so that both warpgroups have executed as many
                // bar.sync as bar.arrive (n + 1 each after n tiles in the loop). The hardware needs
                // finish() alone; compute-sanitizer's racecheck orders the accesses of two warps by
                // how many blocking barriers each has passed (a bar.arrive counts as none), so with
                // warpgroup 0 one bar.sync ahead it took the __syncthreads() pair of store() for a
                // race: warpgroup 0's writes of O (STS of out.store) against warpgroup 1's reads of
                // them (LDS of store_c), never the other way round. Warpgroup 1 takes the second
                // turn of every tile, so it gets here after warpgroup 0: the wait costs nothing.
                if (warpgroup_turns::group() == 0) {
                    warpgroup_turns::arrive(2);
                } else {
                    warpgroup_turns::sync(2);
                }
            }
            bar().v_full[last % V_STAGES].wait(last / V_STAGES);
            QK::shared_fence();
        } else {
            QK::template copy_wait<0>();  // V of the last tile
        }
        PV::execute(p, sV(last), out);
    }

    // The first rows of O (rows of them; `out` rounded to T) to o (rows D apart), staged through the
    // K / V stages for whole rows of 16-byte stores.
    __device__ __forceinline__ void store(const typename PV::accumulator& out, TO* o, int rows) {
        __syncthreads();  // every warp is done with the stages
        TO* sO = reinterpret_cast<TO*>(stages_);
        out.store(sO, O_LD);
        __syncthreads();
        PV::template store_c<D, O_LD>(sO, o, rows);
    }

  private:
    static constexpr int THREADS = QK::max_threads_per_block;
    struct barriers {
        stage_barrier k_full[2], k_free[2], v_full[V_STAGES], v_free[V_STAGES];
    };
    // The block's barriers: static shared memory, one set per kernel that uses this stream.
    __device__ __forceinline__ static barriers& bar() {
        __shared__ barriers b;
        return b;
    }

    __device__ __forceinline__ T* sK(int j) const { return reinterpret_cast<T*>(stages_ + (j % 2) * K_BYTES); }
    __device__ __forceinline__ TB* sV(int j) const {
        return reinterpret_cast<TB*>(stages_ + 2 * K_BYTES + (j % V_STAGES) * V_BYTES);
    }
    __device__ __forceinline__ void load_k(int j) {
        QK::template load_b<D>(k_ + i64(j) * BLOCK_N * D, sK(j), seq_ - j * BLOCK_N);
    }
    __device__ __forceinline__ void load_v(int j) {
        if constexpr (CONVERT_V) {
            convert_v(v_ + i64(j) * BLOCK_N * D, sV(j), seq_ - j * BLOCK_N);
        } else {
            PV::template load_b<D>(v_ + i64(j) * BLOCK_N * D, sV(j), seq_ - j * BLOCK_N);
        }
    }
    // The stage's barrier sees this thread's arrival once its V copies landed: cp.async's arrival,
    // or, for converted V (stores already done), the stores fenced for wgmma and a plain arrival.
    __device__ __forceinline__ static void v_landed(stage_barrier& full) {
        if constexpr (CONVERT_V) {
            QK::shared_fence();
            full.arrive();
        } else {
            full.arrive_after_copies();
        }
    }
    // V's tile (rows past `runs` zeros) converted from TV to TB into the panels: VEC elements per
    // thread and piece, each thread on one column and every STEP-th row (the swizzle repeats every
    // 8 rows), all loads of the tile issued before the first store.
    __device__ __forceinline__ static void convert_v(const TV* src, TB* dst, int runs) {
        constexpr int VEC = 8, PER_ROW = D / VEC, STEP = THREADS / PER_ROW, PASSES = BLOCK_N / STEP;
        static_assert(THREADS % PER_ROW == 0 && STEP % 8 == 0 && BLOCK_N % STEP == 0, "whole passes of 8-row atoms");
        static_assert(sizeof(TV) == 1 && sizeof(TB) == 2, "8-bit V converted to 16 bits");
        using Cfg = typename detail::config_of<typename PV::accumulator>::type;
        constexpr int PANEL_BYTES = Cfg::b_panel_bytes;
        using layout = wgmma::panels<TB, Cfg::b_outer, Cfg::b_inner, PANEL_BYTES>;
        const int tid = threadIdx.x, r0 = tid / PER_ROW, c = (tid % PER_ROW) * VEC;
        uint2 raw[PASSES];
#pragma unroll
        for (int t = 0; t < PASSES; ++t) {
            raw[t] = r0 + t * STEP < runs ? *reinterpret_cast<const uint2*>(src + i64(r0 + t * STEP) * D + c)
                                          : make_uint2(0u, 0u);
        }
        unsigned char* d = reinterpret_cast<unsigned char*>(dst) + layout::offset(r0, c);
#pragma unroll
        for (int t = 0; t < PASSES; ++t) {
            const TV* e = reinterpret_cast<const TV*>(&raw[t]);
            uint4 wide;
            wide.x = detail::pack_pair<TB>(float(e[0]), float(e[1]));
            wide.y = detail::pack_pair<TB>(float(e[2]), float(e[3]));
            wide.z = detail::pack_pair<TB>(float(e[4]), float(e[5]));
            wide.w = detail::pack_pair<TB>(float(e[6]), float(e[7]));
            *reinterpret_cast<uint4*>(d + t * STEP * PANEL_BYTES) = wide;
        }
    }

    const T* k_;
    const TV* v_;
    int seq_, tiles_;
    T* sQ_;
    unsigned char* stages_;
};

}  // namespace blasdx

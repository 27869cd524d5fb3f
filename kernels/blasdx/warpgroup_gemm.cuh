// WarpgroupGemm: C(M x N) = A(M x K) * B(K x N) by one thread block with wgmma (sm_90a).
//
// A and B sit in shared memory as swizzled panels (wgmma.cuh): each operand in its global
// storage order, cut along its contiguous dimension into panels Cfg::a_panel_bytes /
// Cfg::b_panel_bytes wide. 8-bit instructions read both operands K-major only, so an 8-bit
// operand stored M- or N-major (column-major A, row-major B) is transposed on its way in
// (copy_to_panels_transposed) and its panels are K-major whatever its global order. The output is tiled into 64 x Cfg::wgmma_n warpgroup tiles that the
// block's warpgroups take in turn; a tile accumulates over all of K in registers, then hands
// every element to epi(row, col, value) like BlockGemm::run does. Sizes tile exactly (the
// plan chooses this path only then), so nothing is predicated.
//
// The fusion API (api.cuh) adds the register form: accumulate() adds A * B into a
// warpgroup_fragment, every tile a thread owns at once. Load transforms, which wgmma cannot
// apply on its way from shared memory, take one of two other forms, with results in the same
// registers:
// * an A transform alone (*_rs): wgmma with A from registers ("RS"). Each warp loads its 16
//   rows of A from the panels with the warp-level fragment loader, applies a_op, and issues
//   wgmma on those registers with B still read through its descriptor.
// * a B transform (*_mma): mma.sync over the same panels, each warp computing the 16 rows of
//   the tile that its wgmma fragment holds. wgmma reads B only from shared memory, which the
//   GEMM may not change, so there is no wgmma form for it.
#pragma once

#include "block_gemm.cuh"
#include "types.cuh"
#include "wgmma.cuh"

namespace blasdx {

template <class Cfg>
struct WarpgroupGemm {
    using a_type = typename Cfg::a_type;
    using b_type = typename Cfg::b_type;
    using acc_type = typename Cfg::accumulator_type;
    using op = wgmma::mma<a_type, b_type, acc_type>;
    using reg_type = typename op::reg_type;  // float, or u32 holding two halves

    static constexpr int m = Cfg::m, n = Cfg::n, k = Cfg::k;
    static constexpr int TILE_N = Cfg::wgmma_n, K_STEP = op::K_STEP;
    static constexpr int GROUPS = Cfg::threads / 128;
    static constexpr int TILES_M = m / 64, TILES = TILES_M * (n / TILE_N);
    static constexpr int REGS = TILE_N / 2 * int(sizeof(acc_type)) / 4;  // accumulator registers per thread
    // K-major panels: A row-major (M x K rows along K), B column-major (N rows along K), or
    // any 8-bit operand (the instructions without transposes; transposed on the way in).
    static constexpr bool A_K_MAJOR = Cfg::a_row_major || !op::TRANSPOSES;
    static constexpr bool B_K_MAJOR = !Cfg::b_row_major || !op::TRANSPOSES;
    // whether the copy into the panels transposes the global order
    static constexpr bool A_TRANSPOSED = A_K_MAJOR != Cfg::a_row_major, B_TRANSPOSED = B_K_MAJOR == Cfg::b_row_major;
    using A = wgmma::panels<a_type, A_K_MAJOR ? m : k, A_K_MAJOR ? k : m, Cfg::a_panel_bytes>;
    using B = wgmma::panels<b_type, B_K_MAJOR ? n : k, B_K_MAJOR ? k : n, Cfg::b_panel_bytes>;

    static_assert(!Cfg::is_complex, "wgmma runs real GEMMs");
    static_assert(Cfg::threads % 128 == 0, "wgmma is issued by whole warpgroups of 128 threads");
    static_assert(m % 64 == 0 && n % TILE_N == 0 && k % K_STEP == 0, "the warpgroup tiles must cover C and K exactly");
    static_assert(TILE_N % 8 == 0 && TILE_N <= 256, "a warpgroup tile is 8 to 256 columns wide");
    static_assert(op::TRANSPOSES || sizeof(a_type) == 1,
                  "operands of instructions without transposes are transposed into K-major panels only when 8-bit");
    static_assert(A_K_MAJOR || A::W == 64, "M-major A is read in 64-row slabs, one 128B panel each");
    static_assert(B_K_MAJOR || (TILE_N & -TILE_N) % B::W == 0,
                  "N-major B panels must not be wider than the narrowest instruction of a tile");
    static_assert(K_STEP * int(sizeof(a_type)) == 32, "one wgmma reads 32 bytes of K");

    // ---- the warp-level side: fragment loaders and mma.sync atoms over the panels ------------

    // Columns of a tile one mma.sync pass covers: at most 64 (32 for 8-bit operands, whose
    // fragments are read element by element), so that the B fragments stay in registers.
    static constexpr int CHUNK_N = (TILE_N & -TILE_N) < (sizeof(a_type) == 1 ? 32 : 64)
                                       ? (TILE_N & -TILE_N)
                                       : (sizeof(a_type) == 1 ? 32 : 64);

    // The warp-level config that covers this warp's 16 rows of a chunk with mma.sync atoms,
    // reading the panels in their order (K-major for transposed 8-bit operands).
    struct warp_config : Cfg {
        static constexpr int warp_m = 1, warp_n = CHUNK_N / Cfg::atom::N;
        static constexpr bool a_row_major = A_K_MAJOR, b_row_major = !B_K_MAJOR;
    };
    using warp_engine = BlockGemm<warp_config>;

    // The plan's mma.sync atom: its C fragment is wgmma's per 8 columns, and its A fragment (16
    // rows x K_STEP) one warp's share of wgmma's register A.
    using atom = typename Cfg::atom;
    using a_fragment = fragment<typename atom::a_type, atom::A_ELEMS>;
    static_assert(atom::M == 16 && atom::N == 8 && atom::C_ELEMS == 4,
                  "the warp-level forms need m16n8 atoms, whose C fragment is wgmma's per 8 columns");
    // Whether load transforms of A alone keep wgmma (A through registers; not for tf32).
    static constexpr bool REGISTER_A = op::REGISTER_A;
    static_assert(!REGISTER_A || (atom::K == K_STEP && sizeof(a_fragment) == 16),
                  "wgmma's register A is the atom's A fragment: four 32-bit words of one K step");

    // Descriptor of the 64 x K_STEP slice of A at (m0, k0).
    __device__ __forceinline__ static wgmma::u64 a_descriptor(u32 base, int m0, int k0) {
        if constexpr (A_K_MAJOR) {  // rows along K: step K inside the panel row by moving the start
            const int kb = k0 * int(sizeof(a_type));
            return wgmma::descriptor<Cfg::a_panel_bytes>(
                base + (kb / Cfg::a_panel_bytes) * A::PANEL + m0 * Cfg::a_panel_bytes + kb % Cfg::a_panel_bytes, 16,
                A::ATOM);
        } else {  // rows along M: the 64 rows of the slice are one panel, K rows 8 to an atom
            return wgmma::descriptor<Cfg::a_panel_bytes>(base + (m0 / A::W) * A::PANEL + k0 * Cfg::a_panel_bytes,
                                                         A::PANEL, A::ATOM);
        }
    }

    // Descriptor of the K_STEP x width slice of B at (k0, n0).
    __device__ __forceinline__ static wgmma::u64 b_descriptor(u32 base, int n0, int k0) {
        if constexpr (B_K_MAJOR) {
            const int kb = k0 * int(sizeof(b_type));
            return wgmma::descriptor<Cfg::b_panel_bytes>(
                base + (kb / Cfg::b_panel_bytes) * B::PANEL + n0 * Cfg::b_panel_bytes + kb % Cfg::b_panel_bytes, 16,
                B::ATOM);
        } else {  // N-major: consecutive panels of B::W columns are LBO apart
            return wgmma::descriptor<Cfg::b_panel_bytes>(base + (n0 / B::W) * B::PANEL + k0 * Cfg::b_panel_bytes,
                                                         B::PANEL, B::ATOM);
        }
    }

    // One wgmma WIDTH columns wide: A through its descriptor, or this thread's A registers.
    template <int WIDTH>
    __device__ __forceinline__ static void issue_part(reg_type* d, wgmma::u64 desc_a, wgmma::u64 desc_b) {
        op::template issue<WIDTH, !A_K_MAJOR, !B_K_MAJOR>(d, desc_a, desc_b);
    }
    template <int WIDTH>
    __device__ __forceinline__ static void issue_part(reg_type* d, const a_fragment& a, wgmma::u64 desc_b) {
        op::template issue_rs<WIDTH, !B_K_MAJOR>(d, a.regs(), desc_b);
    }

    // One K step of the tile at (m0, n0), A a descriptor or an a_fragment: a tile TILE_N wide
    // is issued as its binary digits, widest first (96 = 64 + 32), each instruction on its own
    // accumulator registers.
    template <int WIDTH = 256, int DONE = 0, class AOperand>
    __device__ __forceinline__ static void issue(reg_type* acc, const AOperand& a, u32 sB, int n0, int k0) {
        if constexpr (WIDTH >= 8) {
            if constexpr ((TILE_N & WIDTH) != 0) {
                issue_part<WIDTH>(acc + DONE / 2 * int(sizeof(acc_type)) / 4, a, b_descriptor(sB, n0 + DONE, k0));
            }
            issue<WIDTH / 2, DONE + (TILE_N & WIDTH)>(acc, a, sB, n0, k0);
        }
    }

    // Origin of warpgroup tile `tile` (M tiles first).
    __device__ __forceinline__ static int tile_m0(int tile) { return (tile % TILES_M) * 64; }
    __device__ __forceinline__ static int tile_n0(int tile) { return (tile / TILES_M) * TILE_N; }

    // Issues every K step of the tile at (m0, n0) into acc; the caller fences, commits and waits.
    __device__ __forceinline__ static void issue_tile(reg_type* acc, u32 a_base, u32 b_base, int m0, int n0) {
#pragma unroll
        for (int k0 = 0; k0 < k; k0 += K_STEP) issue(acc, a_descriptor(a_base, m0, k0), b_base, n0, k0);
    }

    // Hands the tile's accumulator (this thread's part: acc_type[TILE_N / 2]) to epi(row, col, value).
    template <class Epilogue>
    __device__ __forceinline__ static void emit(const acc_type* values, int m0, int n0, int tid, Epilogue& epi) {
        const int warp = (tid / 32) % 4, lane = tid % 32;
        const int row = m0 + 16 * warp + lane / 4, col = n0 + 2 * (lane % 4);
        if constexpr (epilogue_takes_runs<Epilogue>::value) {  // column pairs at once
#pragma unroll
            for (int j = 0; j < TILE_N / 8; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const acc_type pair[2] = {values[4 * j + 2 * h], values[4 * j + 2 * h + 1]};
                    epi.run(row + 8 * h, col + 8 * j, pair);
                }
        } else {
#pragma unroll
            for (int j = 0; j < TILE_N / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) epi(row + 8 * (e / 2), col + 8 * j + e % 2, values[4 * j + e]);
        }
    }

    // Each warpgroup tile this thread's warpgroup owns: a zeroed accumulator, issue(acc, m0, n0)
    // (which leaves it complete), then every element to epi(row, col, value).
    template <class Epilogue, class Issue>
    __device__ __forceinline__ static void each_tile(int tid, Epilogue& epi, const Issue& issue) {
        for (int tile = tid / 128; tile < TILES; tile += GROUPS) {
            const int m0 = tile_m0(tile), n0 = tile_n0(tile);
            reg_type acc[REGS];
#pragma unroll
            for (int r = 0; r < REGS; ++r) acc[r] = reg_type(0);
#pragma unroll
            for (int r = 0; r < REGS; ++r) wgmma::fence_operand(acc[r]);
            issue(acc, m0, n0);
#pragma unroll
            for (int r = 0; r < REGS; ++r) wgmma::fence_operand(acc[r]);
            emit(reinterpret_cast<const acc_type*>(acc), m0, n0, tid, epi);
        }
    }

    // Every element of the warpgroup tiles this thread's warpgroup owns goes to epi(row, col, value).
    template <class Epilogue>
    __device__ static void run(const a_type* sA, const b_type* sB, int tid, Epilogue& epi) {
        const u32 a_base = shared_address(sA), b_base = shared_address(sB);
        each_tile(tid, epi, [&](reg_type* acc, int m0, int n0) {
            wgmma::fence();
            issue_tile(acc, a_base, b_base, m0, n0);
            wgmma::commit();
            wgmma::wait<0>();
        });
        // the block's other warpgroups may still read shared memory through the async proxy;
        // callers sync the block before reusing it, as after BlockGemm::run
    }

    // ---- the fusion API -------------------------------------------------------------------

    // Offsets in elements of A(row, col) and B(row, col) in their panels.
    __host__ __device__ static constexpr int a_index(int row, int col) {
        return (A_K_MAJOR ? A::offset(row, col) : A::offset(col, row)) / int(sizeof(a_type));
    }
    __host__ __device__ static constexpr int b_index(int row, int col) {
        return (B_K_MAJOR ? B::offset(col, row) : B::offset(row, col)) / int(sizeof(b_type));
    }

    // Block-cooperative copies of global A / B (in the descriptor's arrangement, leading
    // dimension LDG) into panels, VEC bytes at a time; transposed where the panels are K-major
    // and the global order is not (8-bit). Asynchronous only when not transposed.
    template <int LDG, int VEC>
    __device__ __forceinline__ static void load_a(a_type* sA, const a_type* gA, int tid) {
        load_panels<a_type, Cfg::a_outer, Cfg::a_inner, Cfg::a_panel_bytes, A_TRANSPOSED, LDG, VEC>(sA, gA, tid);
    }
    template <int LDG, int VEC>
    __device__ __forceinline__ static void load_b(b_type* sB, const b_type* gB, int tid) {
        load_panels<b_type, Cfg::b_outer, Cfg::b_inner, Cfg::b_panel_bytes, B_TRANSPOSED, LDG, VEC>(sB, gB, tid);
    }
    // The copy of one OUTER x INNER operand into panels of PANEL_BYTES (TRANSPOSED: from the other order).
    template <class T, int OUTER, int INNER, int PANEL_BYTES, bool TRANSPOSED, int LDG, int VEC>
    __device__ __forceinline__ static void load_panels(T* s, const T* g, int tid) {
        auto* dst = reinterpret_cast<unsigned char*>(s);
        if constexpr (TRANSPOSED) {
            wgmma::copy_to_panels_transposed<T, OUTER, INNER, LDG, PANEL_BYTES, VEC, Cfg::threads>(dst, g, tid);
        } else {
            wgmma::copy_to_panels<T, OUTER, INNER, LDG, PANEL_BYTES, VEC, Cfg::threads>(dst, g, tid);
        }
    }

    // This thread's shared-memory stores become visible to wgmma (then sync the block).
    __device__ __forceinline__ static void proxy_fence() { wgmma::proxy_fence(); }

    // One wgmma group over a fragment: issue_item(acc, t, tile) for every item t (tile `tile`,
    // registers acc) thread tid owns, between the fences its accumulators need. WAIT: returns
    // once the group has completed; else at once (wait<PENDING>(frag) before touching it again).
    template <bool WAIT, class Fragment, class Issue>
    __device__ __forceinline__ static void issue_group(Fragment& frag, int tid, const Issue& issue_item) {
        using shape = typename Fragment::shape;
        constexpr int ALL = shape::ITEMS * REGS;
        static_assert(sizeof(frag.regs) == ALL * sizeof(reg_type), "a fragment item is one tile's registers");
        if (!shape::active(tid)) return;
        reg_type* acc = reinterpret_cast<reg_type*>(frag.regs);
#pragma unroll
        for (int r = 0; r < ALL; ++r) wgmma::fence_operand(acc[r]);
        wgmma::fence();
#pragma unroll
        for (int t = 0; t < shape::ITEMS; ++t) {
            if (shape::item_exists(tid, t)) issue_item(acc + t * REGS, t, shape::tile(tid, t));
        }
        wgmma::commit();
        if constexpr (WAIT) wait<0>(frag);
    }

    // Waits until at most PENDING of this warpgroup's wgmma groups are in flight; the registers of
    // frag are read or changed only after this point.
    template <int PENDING, class Fragment>
    __device__ __forceinline__ static void wait(Fragment& frag) {
        constexpr int ALL = Fragment::shape::ITEMS * REGS;
        reg_type* acc = reinterpret_cast<reg_type*>(frag.regs);
        wgmma::wait<PENDING>();
#pragma unroll
        for (int r = 0; r < ALL; ++r) wgmma::fence_operand(acc[r]);
    }

    // frag += A * B for every tile thread tid owns: all tiles issued as one group, then (WAIT) one wait.
    template <bool WAIT = true, class Fragment>
    __device__ static void accumulate(Fragment& frag, const a_type* sA, const b_type* sB, int tid) {
        const u32 a_base = shared_address(sA), b_base = shared_address(sB);
        issue_group<WAIT>(frag, tid, [&](reg_type* acc, int, int tile) {
            issue_tile(acc, a_base, b_base, tile_m0(tile), tile_n0(tile));
        });
    }

    // ---- A through registers: wgmma with an A transform ------------------------------------

    // This warp's 16 rows of the 64 x K_STEP slice of A at (m0, k0), a_op applied: ldmatrix on
    // the panels (the warp-level loader) fills exactly the layout of wgmma's register A.
    template <class AOp>
    __device__ __forceinline__ static void load_a_fragment(a_fragment& frag, const a_type* sA, int m0, int k0,
                                                           int tid, const AOp& a_op) {
        warp_engine::template load_fragment<true, PANELS, atom>(&frag, sA, m0 + 16 * ((tid / 32) % 4), 0, k0,
                                                                tid % 32, a_op);
        // the values exist before the wgmma.fence that precedes their wgmma
#pragma unroll
        for (int r = 0; r < a_fragment::WORDS; ++r) wgmma::fence_operand(frag.reg[r]);
    }

    // acc += op(A) B over all of K for the tile at (m0, n0), A through registers, B through
    // descriptors; returns with the tile's wgmmas complete. Two fragments in turn: the next K
    // step's is loaded and transformed while the wgmma of this one runs, into the buffer that
    // the wgmma before it read, once wait_group says that one has completed.
    template <class AOp>
    __device__ __forceinline__ static void issue_tile_rs(reg_type* acc, const a_type* sA, u32 b_base, int m0, int n0,
                                                         int tid, const AOp& a_op) {
        constexpr int STEPS = k / K_STEP;
        a_fragment frag[2];
        load_a_fragment(frag[0], sA, m0, 0, tid, a_op);
#pragma unroll
        for (int s = 0; s < STEPS; ++s) {
            wgmma::fence();  // orders this thread's writes of frag[s % 2] (and of acc) before the wgmma
            issue(acc, frag[s % 2], b_base, n0, s * K_STEP);
            wgmma::commit();
            if (s + 1 < STEPS) {
                wgmma::wait<1>();  // step s - 1, the last reader of frag[(s + 1) % 2], is done
                load_a_fragment(frag[(s + 1) % 2], sA, m0, (s + 1) * K_STEP, tid, a_op);
            }
        }
        wgmma::wait<0>();
    }

    // accumulate() with an A transform: wgmma with A through registers, one tile after another.
    template <class Fragment, class AOp>
    __device__ static void accumulate_rs(Fragment& frag, const a_type* sA, const b_type* sB, int tid,
                                         const AOp& a_op) {
        using shape = typename Fragment::shape;
        constexpr int ALL = shape::ITEMS * REGS;
        static_assert(sizeof(frag.regs) == ALL * sizeof(reg_type), "a fragment item is one tile's registers");
        if (!shape::active(tid)) return;
        reg_type* acc = reinterpret_cast<reg_type*>(frag.regs);
        const u32 b_base = shared_address(sB);
#pragma unroll
        for (int r = 0; r < ALL; ++r) wgmma::fence_operand(acc[r]);
#pragma unroll
        for (int t = 0; t < shape::ITEMS; ++t) {
            if (shape::item_exists(tid, t)) {
                const int tile = shape::tile(tid, t);
                issue_tile_rs(acc + t * REGS, sA, b_base, tile_m0(tile), tile_n0(tile), tid, a_op);
            }
        }
#pragma unroll
        for (int r = 0; r < ALL; ++r) wgmma::fence_operand(acc[r]);
    }

    // run() with an A transform: wgmma with A through registers, one tile at a time.
    template <class Epilogue, class AOp>
    __device__ static void run_rs(const a_type* sA, const b_type* sB, int tid, Epilogue& epi, const AOp& a_op) {
        const u32 b_base = shared_address(sB);
        each_tile(tid, epi, [&](reg_type* acc, int m0, int n0) { issue_tile_rs(acc, sA, b_base, m0, n0, tid, a_op); });
    }

    // ---- mma.sync over the panels: B transforms ---------------------------------------------

    static constexpr int K_UNROLL = sizeof(a_type) == 1 ? 1 : 2;

    // acc (this thread's acc_type[TILE_N / 2] of the tile at (m0, n0)) += op(A) op(B), with mma.sync.
    template <class AOp, class BOp>
    __device__ __forceinline__ static void accumulate_tile_mma(acc_type* acc, const a_type* sA, const b_type* sB,
                                                               int m0, int n0, int tid, const AOp& a_op,
                                                               const BOp& b_op) {
        const int row0 = m0 + 16 * ((tid / 32) % 4), lane = tid % 32;
#pragma unroll
        for (int c = 0; c < TILE_N / CHUNK_N; ++c) {  // columns c * CHUNK_N ...: elements from c * CHUNK_N / 2
            auto& chunk = *reinterpret_cast<acc_type(*)[1][1][CHUNK_N / 8][4]>(acc + c * CHUNK_N / 2);
            // one K step at a time for 8-bit operands: their transformed fragments are
            // gathered element by element, and two steps' worth spill (fp8, 128 columns)
#pragma unroll K_UNROLL
            for (int k0 = 0; k0 < k; k0 += atom::K) {
                warp_engine::template mma_step<PANELS, PANELS>(chunk, sA, sB, row0, n0 + c * CHUNK_N, k0, lane, a_op,
                                                               b_op);
            }
        }
    }

    // accumulate() with load transforms: mma.sync reading the panels.
    template <class Fragment, class AOp, class BOp>
    __device__ static void accumulate_mma(Fragment& frag, const a_type* sA, const b_type* sB, int tid,
                                          const AOp& a_op, const BOp& b_op) {
        using shape = typename Fragment::shape;
        if (!shape::active(tid)) return;
#pragma unroll
        for (int t = 0; t < shape::ITEMS; ++t) {
            if (shape::item_exists(tid, t)) {
                const int tile = shape::tile(tid, t);
                accumulate_tile_mma(frag.regs[t], sA, sB, tile_m0(tile), tile_n0(tile), tid, a_op, b_op);
            }
        }
    }

    // run() with load transforms: mma.sync reading the panels, one tile at a time.
    template <class Epilogue, class AOp, class BOp>
    __device__ static void run_mma(const a_type* sA, const b_type* sB, int tid, Epilogue& epi, const AOp& a_op,
                                   const BOp& b_op) {
        for (int tile = tid / 128; tile < TILES; tile += GROUPS) {
            const int m0 = tile_m0(tile), n0 = tile_n0(tile);
            alignas(16) acc_type acc[TILE_N / 2];
#pragma unroll
            for (int r = 0; r < TILE_N / 2; ++r) acc[r] = acc_type(0);
            accumulate_tile_mma(acc, sA, sB, m0, n0, tid, a_op, b_op);
            emit(acc, m0, n0, tid, epi);
        }
    }
};

// ---- the register accumulator of a wgmma plan ------------------------------------------------
//
// Warpgroup w of the block takes 64 x TILE_N tiles w, w + GROUPS, ... (one item each); inside
// a tile warp i owns rows 16i .. 16i + 15, and per 8 columns a lane holds the 4 elements of the
// mma.sync m16n8 C fragment: element 4j + e at row lane/4 + 8*(e/2), column 8j + 2*(lane%4) + e%2.
// The same interface as fragment_shape (block_gemm.cuh), which accumulator (api.cuh) reads.
template <class Cfg>
struct warpgroup_fragment_shape {
    using acc_type = typename Cfg::accumulator_type;
    using value_type = acc_type;
    static constexpr int m = Cfg::m, n = Cfg::n, TILE_N = Cfg::wgmma_n;
    static constexpr int TILES_M = m / 64, TILES = TILES_M * (n / TILE_N), GROUPS = Cfg::threads / 128;
    static constexpr int ITEMS = (TILES + GROUPS - 1) / GROUPS;
    static constexpr int PER_ITEM = TILE_N / 2;
    static constexpr int SIZE = ITEMS * PER_ITEM;
    static constexpr bool FULL_M = true, FULL_N = true;  // wgmma plans tile C exactly
    using item_type = acc_type[PER_ITEM];

    __device__ __forceinline__ static bool active(int tid) { return takes_part<GROUPS * 128>(tid); }
    __device__ __forceinline__ static int tile(int tid, int t) { return tid / 128 + t * GROUPS; }
    __device__ __forceinline__ static bool item_exists(int tid, int t) {
        return TILES % GROUPS == 0 || tile(tid, t) < TILES;
    }
    __device__ __forceinline__ static int row_base(int tid, int t) {
        return (tile(tid, t) % TILES_M) * 64 + 16 * ((tid / 32) % 4) + (tid % 32) / 4;
    }
    __device__ __forceinline__ static int col_base(int tid, int t) {
        return (tile(tid, t) / TILES_M) * TILE_N + 2 * (tid % 4);
    }
    __device__ __forceinline__ static int row_offset(int r) { return 8 * ((r % 4) / 2); }
    __device__ __forceinline__ static int col_offset(int r) { return 8 * (r / 4) + r % 2; }
    __device__ __forceinline__ static int row(int tid, int idx) {
        return row_base(tid, idx / PER_ITEM) + row_offset(idx % PER_ITEM);
    }
    __device__ __forceinline__ static int col(int tid, int idx) {
        return col_base(tid, idx / PER_ITEM) + col_offset(idx % PER_ITEM);
    }
    __device__ __forceinline__ static bool valid(int tid, int idx) {
        return active(tid) && item_exists(tid, idx / PER_ITEM);
    }
    __device__ __forceinline__ static value_type get(const item_type* regs, int idx) {
        return regs[idx / PER_ITEM][idx % PER_ITEM];
    }
    __device__ __forceinline__ static void set(item_type* regs, int idx, const value_type& v) {
        regs[idx / PER_ITEM][idx % PER_ITEM] = v;
    }
};

// Every tile one thread owns in a wgmma plan, in registers (wgmma writes them in place).
template <class Cfg>
struct warpgroup_fragment {
    using shape = warpgroup_fragment_shape<Cfg>;
    alignas(16) typename shape::item_type regs[shape::ITEMS];
};

}  // namespace blasdx

// BlockGemm: C(M x N) = A(M x K) * B(K x N) computed by one thread block from shared memory.
//
// Cfg (generated per descriptor) fixes sizes, types, orders and tiling. Warps take warp
// tiles of the output in turn; each accumulates its tile over all of K in registers with
// mma.sync (or FFMA/DFMA on the CUDA-core path) and hands every result element to an
// epilogue functor epi(row, col, value). Out-of-range rows, columns and K are predicated
// inside the kernel, so any size works without padded copies.
//
// Load transforms a_op / b_op (element -> element of the same type) are applied to every
// A / B element on its way from shared memory into the fragments; identity by default.
// accumulate() is the register form for the fusion API (api.cuh): it adds A * B into a
// thread_fragment that holds every output element a thread owns, all tiles at once.
//
// A leading dimension of PANELS means the operand sits in wgmma's swizzled panels
// (Cfg::a_panel_bytes / b_panel_bytes wide, wgmma.cuh): the fusion API of sm_90a plans reads
// them with mma.sync when load transforms keep wgmma out (warpgroup_gemm.cuh).
#pragma once

#include "copy.cuh"
#include "mma.cuh"
#include "types.cuh"

namespace blasdx {

// The load transform that leaves elements as they are (what run() applies by default).
struct identity {
    template <class T> __device__ __forceinline__ T operator()(const T& v) const { return v; }
};
template <class Op> struct is_identity { static constexpr bool value = false; };
template <> struct is_identity<identity> { static constexpr bool value = true; };

// A (row, kk) and B (kk, col) in a shared-memory matrix of leading dimension LD.
template <bool ROW_MAJOR, int LD, class T>
__device__ __forceinline__ const T& matrix_at(const T* s, int row, int col) {
    return ROW_MAJOR ? s[row * LD + col] : s[row + col * LD];
}

// The leading-dimension argument of an operand stored in swizzled wgmma panels.
constexpr int PANELS = -1;

// Defined in wgmma.cuh, which only wgmma plans include (so that other kernels compile as before).
namespace wgmma {
template <class T, int OUTER, int INNER, int PANEL_BYTES> struct panels;
}  // namespace wgmma

// Element (row, col) of a ROWS x COLS matrix stored as panels PANEL_BYTES wide along its
// contiguous dimension (columns when ROW_MAJOR).
template <bool ROW_MAJOR, int ROWS, int COLS, int PANEL_BYTES, class T>
__device__ __forceinline__ const T* panel_at(const T* s, int row, int col) {
    using layout = wgmma::panels<T, ROW_MAJOR ? ROWS : COLS, ROW_MAJOR ? COLS : ROWS, PANEL_BYTES>;
    const int offset = ROW_MAJOR ? layout::offset(row, col) : layout::offset(col, row);
    return reinterpret_cast<const T*>(reinterpret_cast<const unsigned char*>(s) + offset);
}

// One part (0 real, 1 imaginary) of a value, the imaginary part negated when CONJ.
template <bool CONJ, class T> __device__ __forceinline__ T part_of(const T& v, int) { return v; }
template <bool CONJ, class T> __device__ __forceinline__ T part_of(const complex<T>& v, int part) {
    if (part == 0) return v.x;
    return CONJ ? negate(v.y) : v.y;
}

// Accumulator arithmetic of the CUDA-core path.
template <class T> __device__ __forceinline__ void mac(T& acc, T a, T b) { acc = fma(a, b, acc); }
template <class T> __device__ __forceinline__ void mac(complex<T>& acc, complex<T> a, complex<T> b) {
    acc.x = fma(a.x, b.x, acc.x);
    acc.x = fma(-a.y, b.y, acc.x);
    acc.y = fma(a.x, b.y, acc.y);
    acc.y = fma(a.y, b.x, acc.y);
}

template <class Acc, bool CONJ, class T> __device__ __forceinline__ Acc widen(const T& v) {
    return convert<Acc>::from(v);
}
template <class Acc, bool CONJ, class T> __device__ __forceinline__ complex<Acc> widen(const complex<T>& v) {
    Acc im = convert<Acc>::from(v.y);
    return {convert<Acc>::from(v.x), CONJ ? -im : im};
}

// op(v), or a reference to v itself for the identity, so that the default path is the plain load.
template <class Op, class T> __device__ __forceinline__ decltype(auto) transformed(const Op& op, const T& v) {
    if constexpr (is_identity<Op>::value) {
        return (v);
    } else {
        return op(v);
    }
}

template <class Cfg>
struct BlockGemm {
    using a_type = typename Cfg::a_type;
    using b_type = typename Cfg::b_type;
    using c_type = typename Cfg::c_type;
    using acc_type = typename Cfg::accumulator_type;  // one part
    using scalar_type = typename Cfg::scalar_type;    // alpha, beta (one part)
    static constexpr bool is_complex = Cfg::is_complex;
    using value_type = typename std_conditional<is_complex, complex<acc_type>, acc_type>::type;

    static constexpr int m = Cfg::m, n = Cfg::n, k = Cfg::k;
    static constexpr int threads = Cfg::threads;
    static_assert(threads >= 32 && threads <= 1024, "a block GEMM runs on 32 to 1024 threads");

    // A(row, kk) and B(kk, col) in wgmma panels (LD == PANELS; plain layouts index directly).
    template <int LDA> __device__ __forceinline__ static const a_type* a_ptr(const a_type* sA, int row, int kk) {
        static_assert(LDA == PANELS, "a_ptr reads panels");
        return panel_at<Cfg::a_row_major, m, k, Cfg::a_panel_bytes>(sA, row, kk);
    }
    template <int LDB> __device__ __forceinline__ static const b_type* b_ptr(const b_type* sB, int kk, int col) {
        static_assert(LDB == PANELS, "b_ptr reads panels");
        return panel_at<Cfg::b_row_major, k, n, Cfg::b_panel_bytes>(sB, kk, col);
    }

    // ---- tensor-core path ---------------------------------------------------------------

    // A fragment (16 x K atom) at (m0, k0) with ldmatrix: 8x8 block i covers rows 8*(i%2),
    // k 8*(i/2). K-contiguous A is read as is; M-contiguous A transposed on the way.
    template <class Atom, int LDA>
    __device__ static void load_a_ldmatrix(u32* reg, const a_type* sA, int m0, int k0, int lane) {
        constexpr int MATS = Atom::A_ELEMS / 2;
        const int i = (lane / 8) % MATS, r = lane % 8;
        if constexpr (LDA == PANELS) {  // 8-element rows are whole 16-byte chunks, which the swizzle keeps whole
            const bool row_major = Cfg::a_row_major;
            ldmatrix<MATS, !row_major>(reg, a_ptr<LDA>(sA, m0 + 8 * (i % 2) + (row_major ? r : 0),
                                                        k0 + 8 * (i / 2) + (row_major ? 0 : r)));
        } else if constexpr (Cfg::a_row_major) {
            ldmatrix<MATS, false>(reg, sA + (m0 + 8 * (i % 2) + r) * LDA + k0 + 8 * (i / 2));
        } else {
            ldmatrix<MATS, true>(reg, sA + m0 + 8 * (i % 2) + (k0 + 8 * (i / 2) + r) * LDA);
        }
    }

    // B fragment (K x 8 atom) at (k0, n0): 8x8 block j covers k 8*j.
    template <class Atom, int LDB>
    __device__ static void load_b_ldmatrix(u32* reg, const b_type* sB, int n0, int k0, int lane) {
        constexpr int MATS = Atom::B_ELEMS / 2;
        const int j = (lane / 8) % MATS, r = lane % 8;
        if constexpr (LDB == PANELS) {
            const bool row_major = Cfg::b_row_major;
            ldmatrix<MATS, row_major>(reg, b_ptr<LDB>(sB, k0 + 8 * j + (row_major ? r : 0), n0 + (row_major ? 0 : r)));
        } else if constexpr (Cfg::b_row_major) {
            ldmatrix<MATS, true>(reg, sB + (k0 + 8 * j + r) * LDB + n0);
        } else {
            ldmatrix<MATS, false>(reg, sB + k0 + 8 * j + (n0 + r) * LDB);
        }
    }

    // Adds the A * B of one K step (k0 .. k0 + atom::K) of the warp tile at (m0, n0) into
    // acc[part][i][j][e]. The K loop stays with the callers, so run() compiles as it always did.
    template <int LDA, int LDB, class Acc, class AOp, class BOp>
    __device__ __forceinline__ static void mma_step(Acc& acc, const a_type* sA, const b_type* sB, int m0, int n0,
                                                    int k0, int lane, const AOp& a_op, const BOp& b_op) {
        using atom = typename Cfg::atom;
        using fa_type = typename atom::a_type;
        using fb_type = typename atom::b_type;
        constexpr int FM = Cfg::warp_m, FN = Cfg::warp_n;
        constexpr bool FULL_M = m % (FM * atom::M) == 0, FULL_N = n % (FN * atom::N) == 0;
        constexpr bool FULL_K = k % atom::K == 0;
        constexpr int PARTS = is_complex ? 2 : 1;
        // Complex products take four real MMAs: re += ar*br + (-ai)*bi, im += ar*bi + ai*br.
        constexpr int A_FRAGS = is_complex ? 3 : 1;  // ar, ai, -ai
        // Real 16-bit operands in whole 8x8 blocks with 16-byte rows are read with ldmatrix
        // (one instruction per fragment); anything else element by element, predicated.
        constexpr bool SIXTEEN_BIT = sizeof(fa_type) == 2 && !is_complex;
        constexpr bool LDSM_A = SIXTEEN_BIT && FULL_M && FULL_K && (LDA == PANELS || (LDA * 2) % 16 == 0);
        constexpr bool LDSM_B = SIXTEEN_BIT && FULL_N && FULL_K && (LDB == PANELS || (LDB * 2) % 16 == 0);

        fragment<fa_type, atom::A_ELEMS> fa[A_FRAGS][FM];
        fragment<fb_type, atom::B_ELEMS> fb[PARTS][FN];
#pragma unroll
        for (int i = 0; i < FM; ++i) {
            if constexpr (LDSM_A) {
                load_a_ldmatrix<atom, LDA>(fa[0][i].reg, sA, m0 + i * atom::M, k0, lane);
                if constexpr (!is_identity<AOp>::value) {
#pragma unroll
                    for (int e = 0; e < atom::A_ELEMS; ++e) fa[0][i].elems()[e] = a_op(fa[0][i].elems()[e]);
                }
                continue;
            }
#pragma unroll
            for (int e = 0; e < atom::A_ELEMS; ++e) {
                const int row = m0 + i * atom::M + atom::a_row(lane, e);
                const int kk = k0 + atom::a_k(lane, e);
                const bool in = (FULL_M || row < m) && (FULL_K || kk < k);
#pragma unroll
                for (int p = 0; p < PARTS; ++p) {
                    fa_type v = zero<fa_type>();
                    if (in) {
                        if constexpr (LDA == PANELS) {
                            v = part_of<Cfg::conj_a>(transformed(a_op, *a_ptr<LDA>(sA, row, kk)), p);
                        } else {
                            v = part_of<Cfg::conj_a>(transformed(a_op, matrix_at<Cfg::a_row_major, LDA>(sA, row, kk)),
                                                     p);
                        }
                    }
                    fa[p][i].elems()[e] = preparer<atom>::apply(v);
                }
                if constexpr (is_complex) fa[2][i].elems()[e] = negate(fa[1][i].elems()[e]);
            }
        }
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            if constexpr (LDSM_B) {
                load_b_ldmatrix<atom, LDB>(fb[0][j].reg, sB, n0 + j * atom::N, k0, lane);
                if constexpr (!is_identity<BOp>::value) {
#pragma unroll
                    for (int e = 0; e < atom::B_ELEMS; ++e) fb[0][j].elems()[e] = b_op(fb[0][j].elems()[e]);
                }
                continue;
            }
#pragma unroll
            for (int e = 0; e < atom::B_ELEMS; ++e) {
                const int col = n0 + j * atom::N + atom::b_col(lane, e);
                const int kk = k0 + atom::b_k(lane, e);
                const bool in = (FULL_N || col < n) && (FULL_K || kk < k);
#pragma unroll
                for (int p = 0; p < PARTS; ++p) {
                    fb_type v = zero<fb_type>();
                    if (in) {
                        if constexpr (LDB == PANELS) {
                            v = part_of<Cfg::conj_b>(transformed(b_op, *b_ptr<LDB>(sB, kk, col)), p);
                        } else {
                            v = part_of<Cfg::conj_b>(transformed(b_op, matrix_at<Cfg::b_row_major, LDB>(sB, kk, col)),
                                                     p);
                        }
                    }
                    fb[p][j].elems()[e] = preparer<atom>::apply(v);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < FM; ++i)
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                atom::mma(acc[0][i][j], fa[0][i].regs(), fb[0][j].regs());
                if constexpr (is_complex) {
                    atom::mma(acc[0][i][j], fa[2][i].regs(), fb[1][j].regs());
                    atom::mma(acc[1][i][j], fa[0][i].regs(), fb[1][j].regs());
                    atom::mma(acc[1][i][j], fa[1][i].regs(), fb[0][j].regs());
                }
            }
    }

    // Every output element of the warp tiles this warp owns goes to epi(row, col, value).
    template <int LDA, int LDB, class Epilogue, class AOp, class BOp>
    __device__ static void run_mma(const a_type* sA, const b_type* sB, int tid, Epilogue& epi, const AOp& a_op,
                                   const BOp& b_op) {
        using atom = typename Cfg::atom;
        constexpr int FM = Cfg::warp_m, FN = Cfg::warp_n;
        constexpr int WM = FM * atom::M, WN = FN * atom::N;
        constexpr int TILES_M = (m + WM - 1) / WM, TILES = TILES_M * ((n + WN - 1) / WN);
        constexpr int WARPS = threads / 32;
        constexpr bool FULL_M = m % WM == 0, FULL_N = n % WN == 0;
        constexpr int PARTS = is_complex ? 2 : 1;
        const int warp = tid / 32, lane = tid % 32;
        if (warp >= WARPS) return;  // threads of a partial last warp only help with copies

        for (int tile = warp; tile < TILES; tile += WARPS) {
            const int m0 = (tile % TILES_M) * WM, n0 = (tile / TILES_M) * WN;
            alignas(16) acc_type acc[PARTS][FM][FN][atom::C_ELEMS];
#pragma unroll
            for (int p = 0; p < PARTS; ++p)
#pragma unroll
                for (int i = 0; i < FM; ++i)
#pragma unroll
                    for (int j = 0; j < FN; ++j)
#pragma unroll
                        for (int e = 0; e < atom::C_ELEMS; ++e) acc[p][i][j][e] = acc_type(0);

#pragma unroll 2
            for (int k0 = 0; k0 < k; k0 += atom::K) mma_step<LDA, LDB>(acc, sA, sB, m0, n0, k0, lane, a_op, b_op);

#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j)
#pragma unroll
                    for (int e = 0; e < atom::C_ELEMS; ++e) {
                        const int row = m0 + i * atom::M + atom::c_row(lane, e);
                        const int col = n0 + j * atom::N + atom::c_col(lane, e);
                        if ((FULL_M || row < m) && (FULL_N || col < n)) {
                            if constexpr (is_complex) {
                                epi(row, col, value_type{acc[0][i][j][e], acc[1][i][j][e]});
                            } else {
                                epi(row, col, acc[0][i][j][e]);
                            }
                        }
                    }
        }
    }

    // ---- CUDA-core path -------------------------------------------------------------------

    // Adds A(:, kk) * B(kk, :) for the TM x TN outputs of work item (gm, gn) into acc. Rows
    // are strided by the number of row groups so that neighbouring threads read neighbouring
    // rows. The K loop stays with the callers, like mma_step's.
    template <int LDA, int LDB, class Acc, class AOp, class BOp>
    __device__ __forceinline__ static void fma_step(Acc& acc, const a_type* sA, const b_type* sB, int gm, int gn,
                                                    int kk, const AOp& a_op, const BOp& b_op) {
        constexpr int TM = Cfg::thread_m, TN = Cfg::thread_n;
        constexpr int GM = (m + TM - 1) / TM, GN = (n + TN - 1) / TN;
        constexpr bool FULL_M = m % TM == 0, FULL_N = n % TN == 0;
        value_type a[TM], b[TN];
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int row = gm + GM * i;
            a[i] = (FULL_M || row < m) ? widen<acc_type, Cfg::conj_a>(
                                             transformed(a_op, matrix_at<Cfg::a_row_major, LDA>(sA, row, kk)))
                                       : value_type{};
        }
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = gn + GN * j;
            b[j] = (FULL_N || col < n) ? widen<acc_type, Cfg::conj_b>(
                                             transformed(b_op, matrix_at<Cfg::b_row_major, LDB>(sB, kk, col)))
                                       : value_type{};
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) mac(acc[i][j], a[i], b[j]);
    }

    // Each thread owns TM x TN outputs per work item and takes work items in turn.
    template <int LDA, int LDB, class Epilogue, class AOp, class BOp>
    __device__ static void run_fma(const a_type* sA, const b_type* sB, int tid, Epilogue& epi, const AOp& a_op,
                                   const BOp& b_op) {
        constexpr int TM = Cfg::thread_m, TN = Cfg::thread_n;
        constexpr int GM = (m + TM - 1) / TM, GN = (n + TN - 1) / TN, WORK = GM * GN;
        constexpr bool FULL_M = m % TM == 0, FULL_N = n % TN == 0;
        // fully unrolled for short K: a remainder loop of a partial unroll costs registers
        constexpr int K_UNROLL = k <= 16 ? k : 4;
        for (int w = tid; w < WORK; w += threads) {
            const int gm = w % GM, gn = w / GM;
            value_type acc[TM][TN];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = value_type{};
#pragma unroll K_UNROLL
            for (int kk = 0; kk < k; ++kk) fma_step<LDA, LDB>(acc, sA, sB, gm, gn, kk, a_op, b_op);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    const int row = gm + GM * i, col = gn + GN * j;
                    if ((FULL_M || row < m) && (FULL_N || col < n)) epi(row, col, acc[i][j]);
                }
        }
    }

    // C = A * B from shared memory (A, B with leading dimensions LDA, LDB), results to epi.
    template <int LDA, int LDB, class Epilogue>
    __device__ static void run(const a_type* sA, const b_type* sB, int tid, Epilogue& epi) {
        run<LDA, LDB>(sA, sB, tid, epi, identity{}, identity{});
    }

    // The same with load transforms: a_op(A element) and b_op(B element) enter the product.
    template <int LDA, int LDB, class Epilogue, class AOp, class BOp>
    __device__ static void run(const a_type* sA, const b_type* sB, int tid, Epilogue& epi, const AOp& a_op,
                               const BOp& b_op) {
        if constexpr (Cfg::use_mma) {
            run_mma<LDA, LDB>(sA, sB, tid, epi, a_op, b_op);
        } else {
            run_fma<LDA, LDB>(sA, sB, tid, epi, a_op, b_op);
        }
    }

    // ---- register accumulation (the fusion API) -------------------------------------------

    // frag += A * B for every output element thread tid owns (thread_fragment<Cfg> below).
    template <int LDA, int LDB, class Fragment, class AOp, class BOp>
    __device__ static void accumulate(Fragment& frag, const a_type* sA, const b_type* sB, int tid, const AOp& a_op,
                                      const BOp& b_op) {
        using shape = typename Fragment::shape;
        if (!shape::active(tid)) return;
#pragma unroll
        for (int t = 0; t < shape::ITEMS; ++t) {
            if (!shape::item_exists(tid, t)) continue;
            if constexpr (Cfg::use_mma) {
                const int m0 = shape::m0(tid, t), n0 = shape::n0(tid, t), lane = tid % 32;
#pragma unroll 2
                for (int k0 = 0; k0 < k; k0 += shape::atom::K) {
                    mma_step<LDA, LDB>(frag.regs[t], sA, sB, m0, n0, k0, lane, a_op, b_op);
                }
            } else {
                const int gm = shape::gm(tid, t), gn = shape::gn(tid, t);
                constexpr int K_UNROLL = k <= 16 ? k : 4;
#pragma unroll K_UNROLL
                for (int kk = 0; kk < k; ++kk) fma_step<LDA, LDB>(frag.regs[t], sA, sB, gm, gn, kk, a_op, b_op);
            }
        }
    }
};

// ---- per-thread fragment shapes ---------------------------------------------------------------
//
// Which output elements one thread owns in run(), as ITEMS items of PER_ITEM elements: on the
// tensor-core path an item is a warp tile (tile = warp + t * WARPS), on the CUDA-core path a
// TM x TN work item (w = tid + t * threads). Element idx is item idx / PER_ITEM; get/set
// read and write it as the GEMM's value type (complex<acc_type> for complex GEMMs).

template <class Cfg, bool MMA = Cfg::use_mma> struct fragment_shape;

template <class Cfg> struct fragment_shape<Cfg, true> {
    using atom = typename Cfg::atom;
    using acc_type = typename Cfg::accumulator_type;
    using value_type = typename std_conditional<Cfg::is_complex, complex<acc_type>, acc_type>::type;
    static constexpr int m = Cfg::m, n = Cfg::n, CE = atom::C_ELEMS;
    static constexpr int FM = Cfg::warp_m, FN = Cfg::warp_n, WM = FM * atom::M, WN = FN * atom::N;
    static constexpr int TILES_M = (m + WM - 1) / WM, TILES = TILES_M * ((n + WN - 1) / WN);
    static constexpr int WARPS = Cfg::threads / 32;
    static constexpr int PARTS = Cfg::is_complex ? 2 : 1;
    static constexpr int ITEMS = (TILES + WARPS - 1) / WARPS;
    static constexpr int PER_ITEM = FM * FN * CE;
    static constexpr int SIZE = ITEMS * PER_ITEM;
    using item_type = acc_type[PARTS][FM][FN][CE];

    __device__ __forceinline__ static bool active(int tid) { return tid / 32 < WARPS; }
    __device__ __forceinline__ static int tile(int tid, int t) { return tid / 32 + t * WARPS; }
    __device__ __forceinline__ static bool item_exists(int tid, int t) {
        return TILES % WARPS == 0 || tile(tid, t) < TILES;
    }
    __device__ __forceinline__ static int m0(int tid, int t) { return (tile(tid, t) % TILES_M) * WM; }
    __device__ __forceinline__ static int n0(int tid, int t) { return (tile(tid, t) / TILES_M) * WN; }
    // Element r of item t is at (row_base + row_offset(r), col_base + col_offset(r)): the lane
    // moves every element of a fragment alike (true of every atom in mma.cuh), so the offsets
    // are compile-time constants once r is.
    __device__ __forceinline__ static int row_base(int tid, int t) { return m0(tid, t) + atom::c_row(tid % 32, 0); }
    __device__ __forceinline__ static int col_base(int tid, int t) { return n0(tid, t) + atom::c_col(tid % 32, 0); }
    __device__ __forceinline__ static int row_offset(int r) {
        return (r / (FN * CE)) * atom::M + atom::c_row(0, r % CE) - atom::c_row(0, 0);
    }
    __device__ __forceinline__ static int col_offset(int r) {
        return ((r / CE) % FN) * atom::N + atom::c_col(0, r % CE) - atom::c_col(0, 0);
    }
    static constexpr bool FULL_M = m % WM == 0, FULL_N = n % WN == 0;  // no element of any tile is outside C
    __device__ __forceinline__ static int row(int tid, int idx) {
        return row_base(tid, idx / PER_ITEM) + row_offset(idx % PER_ITEM);
    }
    __device__ __forceinline__ static int col(int tid, int idx) {
        return col_base(tid, idx / PER_ITEM) + col_offset(idx % PER_ITEM);
    }
    __device__ __forceinline__ static bool valid(int tid, int idx) {
        return active(tid) && item_exists(tid, idx / PER_ITEM) && row(tid, idx) < m && col(tid, idx) < n;
    }
    __device__ __forceinline__ static value_type get(const item_type* regs, int idx) {
        const int t = idx / PER_ITEM, r = idx % PER_ITEM, i = r / (FN * CE), j = (r / CE) % FN, e = r % CE;
        if constexpr (Cfg::is_complex) {
            return value_type{regs[t][0][i][j][e], regs[t][1][i][j][e]};
        } else {
            return regs[t][0][i][j][e];
        }
    }
    __device__ __forceinline__ static void set(item_type* regs, int idx, const value_type& v) {
        const int t = idx / PER_ITEM, r = idx % PER_ITEM, i = r / (FN * CE), j = (r / CE) % FN, e = r % CE;
        if constexpr (Cfg::is_complex) {
            regs[t][0][i][j][e] = v.x;
            regs[t][1][i][j][e] = v.y;
        } else {
            regs[t][0][i][j][e] = v;
        }
    }
};

template <class Cfg> struct fragment_shape<Cfg, false> {
    using acc_type = typename Cfg::accumulator_type;
    using value_type = typename std_conditional<Cfg::is_complex, complex<acc_type>, acc_type>::type;
    static constexpr int m = Cfg::m, n = Cfg::n;
    static constexpr int TM = Cfg::thread_m, TN = Cfg::thread_n;
    static constexpr int GM = (m + TM - 1) / TM, GN = (n + TN - 1) / TN, WORK = GM * GN;
    static constexpr int ITEMS = (WORK + Cfg::threads - 1) / Cfg::threads;
    static constexpr int PER_ITEM = TM * TN;
    static constexpr int SIZE = ITEMS * PER_ITEM;
    using item_type = value_type[TM][TN];

    __device__ __forceinline__ static bool active(int tid) { return tid < Cfg::threads; }
    __device__ __forceinline__ static int work(int tid, int t) { return tid + t * Cfg::threads; }
    __device__ __forceinline__ static bool item_exists(int tid, int t) {
        return WORK % Cfg::threads == 0 || work(tid, t) < WORK;
    }
    __device__ __forceinline__ static int gm(int tid, int t) { return work(tid, t) % GM; }
    __device__ __forceinline__ static int gn(int tid, int t) { return work(tid, t) / GM; }
    __device__ __forceinline__ static int row_base(int tid, int t) { return gm(tid, t); }
    __device__ __forceinline__ static int col_base(int tid, int t) { return gn(tid, t); }
    __device__ __forceinline__ static int row_offset(int r) { return GM * (r / TN); }
    __device__ __forceinline__ static int col_offset(int r) { return GN * (r % TN); }
    static constexpr bool FULL_M = m % TM == 0, FULL_N = n % TN == 0;
    __device__ __forceinline__ static int row(int tid, int idx) {
        return row_base(tid, idx / PER_ITEM) + row_offset(idx % PER_ITEM);
    }
    __device__ __forceinline__ static int col(int tid, int idx) {
        return col_base(tid, idx / PER_ITEM) + col_offset(idx % PER_ITEM);
    }
    __device__ __forceinline__ static bool valid(int tid, int idx) {
        return active(tid) && item_exists(tid, idx / PER_ITEM) && row(tid, idx) < m && col(tid, idx) < n;
    }
    __device__ __forceinline__ static value_type get(const item_type* regs, int idx) {
        const int r = idx % PER_ITEM;
        return regs[idx / PER_ITEM][r / TN][r % TN];
    }
    __device__ __forceinline__ static void set(item_type* regs, int idx, const value_type& v) {
        const int r = idx % PER_ITEM;
        regs[idx / PER_ITEM][r / TN][r % TN] = v;
    }
};

// Every output element one thread owns, all items at once, in registers while it fits
// (api.cuh checks the size). accumulate() adds into it; get/set/row/col read it.
template <class Cfg>
struct thread_fragment {
    using shape = fragment_shape<Cfg>;
    alignas(16) typename shape::item_type regs[shape::ITEMS];
};

}  // namespace blasdx

// BlockGemm: C(M x N) = A(M x K) * B(K x N) computed by one thread block from shared memory.
//
// Cfg (generated per descriptor) fixes sizes, types, orders and tiling. Warps take warp
// tiles of the output in turn; each accumulates its tile over all of K in registers with
// mma.sync (or FFMA/DFMA on the CUDA-core path) and hands every result element to an
// epilogue functor epi(row, col, value). Any size works without padded copies: fragments read
// with ldmatrix (or 16-byte f64 loads) clamp their rows to the edge and zero K past it,
// element-wise reads are predicated, and the warp tiles at the edges of an odd size multiply
// only their pieces that start inside C (a loop of their own per edge, chosen once per tile).
// tile_order says where each register sits in the tile.
//
// Load transforms a_op / b_op (element -> element of the same type) are applied to every
// A / B element on its way from shared memory into the fragments; identity by default.
// accumulate() is the register form for the fusion API (api.cuh): it adds A * B into a
// thread_fragment that holds every output element a thread owns, all tiles at once.
//
// A leading dimension of PANELS means the operand sits in wgmma's swizzled panels
// (Cfg::a_panel_bytes / b_panel_bytes wide, wgmma.cuh): the fusion API of sm_90a plans reads
// them with mma.sync when a transform of B keeps wgmma out, and loads wgmma's register A
// through load_fragment when a transform of A alone does not (warpgroup_gemm.cuh).
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

// What a K step of a warp tile may reach past, so which tests its fragment loads need: K past k
// (the last step of a K the atom does not divide), rows past M and columns past N (edge tiles).
// Rows and columns past the edge are only clamped, since their products land in outputs nobody
// stores; K past the end is zeroed, since it would add into every output.
template <bool K_TAIL, bool M_EDGE, bool N_EDGE> struct step_reach {
    static constexpr bool k_tail = K_TAIL, m_edge = M_EDGE, n_edge = N_EDGE;
};
using any_reach = step_reach<true, true, true>;

// The atom of a K step: the plan's (Atom void) or the one given (a smaller K tail, tail_atom).
template <class Cfg, class Atom> struct step_atom { using type = Atom; };
template <class Cfg> struct step_atom<Cfg, void> { using type = typename Cfg::atom; };

// Whether a config's shared-memory operands start on 16-byte boundaries (generated configs say
// so; block GEMMs run on sub-matrices inside other kernels, e.g. TRSM updates, may not).
template <class Cfg, class = void> struct aligned_smem { static constexpr bool value = false; };
template <class Cfg> struct aligned_smem<Cfg, decltype(void(Cfg::aligned_smem))> {
    static constexpr bool value = Cfg::aligned_smem;
};

// Pieces per group of tile_order's grouped B columns: real 8-bit B stored N-contiguous
// (row-major) on m16n8k32, whose fragments hold four K values of one column per register and no
// ldmatrix form reads them; 4 (or 2) when the warp tile's pieces along N divide into such groups,
// else 1 (the atom's own columns). 32-bit (tf32) B gains nothing from it: its fragment pairs two
// K rows of a column, so runs along N cost a register move per value (measured slower on H100).
template <class Cfg, class Atom> __host__ __device__ constexpr int b_group_pieces() {
    constexpr bool byte_shape = Atom::K == 32 && sizeof(typename Atom::a_type) == 1 && sizeof(typename Atom::b_type) == 1;
    if constexpr (Atom::M != 16 || Atom::N != 8 || !byte_shape || !Cfg::b_row_major || Cfg::is_complex) {
        return 1;
    } else {
        return Cfg::warp_n % 4 == 0 ? 4 : Cfg::warp_n % 2 == 0 ? 2 : 1;
    }
}

// Where each register of a warp tile's fragments and accumulators sits in the tile: piece (i, j)
// is the atom at row block i, column block j of the warp tile; e a register of its fragment.
// By default the atom's own order (mma.cuh). A GEMM does not change when rows of A and C, columns
// of B and C, or K are renumbered alike, which the grouped B columns here and the f64 order below
// use: with P = b_group_pieces > 1, column c of piece j sits at (j / P) * 8P + c * P + j % P, so
// the P pieces of a group give each lane P adjacent bytes of one row of B (one read per K index
// where the atom's order takes P byte reads) and C's columns come in runs of 2P per lane.
template <class Cfg, class Atom = typename Cfg::atom, class = void>
struct tile_order {
    static constexpr bool DMMA = false, TRANSPOSED = false;
    static constexpr int P = b_group_pieces<Cfg, Atom>();
    __host__ __device__ __forceinline__ static constexpr int b_place(int j, int c) {  // column c of piece j
        return (j / P) * Atom::N * P + c * P + j % P;
    }
    __device__ __forceinline__ static int a_row(int lane, int i, int e) { return i * Atom::M + Atom::a_row(lane, e); }
    __device__ __forceinline__ static int b_col(int lane, int j, int e) { return b_place(j, Atom::b_col(lane, e)); }
    __device__ __forceinline__ static int a_k(int lane, int e) { return Atom::a_k(lane, e); }
    __device__ __forceinline__ static int b_k(int lane, int e) { return Atom::b_k(lane, e); }
    __device__ __forceinline__ static int c_row(int lane, int i, int e) { return i * Atom::M + Atom::c_row(lane, e); }
    __device__ __forceinline__ static int c_col(int lane, int j, int e) { return b_place(j, Atom::c_col(lane, e)); }
    // the first column any register of piece j has
    __host__ __device__ __forceinline__ static constexpr int piece_col(int j) { return b_place(j, 0); }
};

// How many of a warp tile's `pieces` along N start before column `extent` (Order::piece_col rises
// with the piece): those an edge tile must multiply.
template <class Order> __host__ __device__ constexpr int pieces_before(int pieces, int extent) {
    int inside = 0;
    for (int j = 0; j < pieces; ++j) inside += Order::piece_col(j) < extent ? 1 : 0;
    return inside;
}

// Whether Cfg asks for the f64 order's transposed issue (heuristics.dmma_transposed); absent: no.
template <class Cfg, class = void> struct dmma_transposed { static constexpr bool value = false; };
template <class Cfg> struct dmma_transposed<Cfg, decltype(void(Cfg::dmma_transposed))> {
    static constexpr bool value = Cfg::dmma_transposed;
};
// Whether the transposed order issues each K step as two m16n8k4 (heuristics.DMMA_TRANSPOSED_K4); absent: no.
template <class Cfg, class = void> struct dmma_k4 { static constexpr bool value = false; };
template <class Cfg> struct dmma_k4<Cfg, decltype(void(Cfg::dmma_k4))> { static constexpr bool value = Cfg::dmma_k4; };

// f64 m16n8k8 (sm_90 DMMA): the order that lets one 16-byte shared-memory load fill two
// registers of a K-contiguous operand, without bank conflicts in the padded layouts (rows an odd
// number of 16-byte chunks), while each lane keeps C's adjacent pairs (what lets the epilogue
// store 16 bytes at once):
// * K: the instruction's K slots t and t + 4 (t = lane % 4) are K indices 2t and 2t + 1 of the
//   step, so a K-contiguous operand gives both in one load. The other operand reads element by
//   element: 8-byte loads of rows 2t of a warp fall on distinct banks with odd-chunk rows.
// * K-contiguous A: the instruction's row g of each group of eight is dmma_row_order(g)
//   (mma.cuh), so that the two rows a quarter-warp reads fall in opposite halves of the bank
//   line; M-contiguous A: rows g and g + 8 of a piece are 2g and 2g + 1 (one load gives both).
// * K-contiguous B: column g is dmma_row_order(g) where C is column-major; where it is row-major
//   that order would split C's column pairs, so B keeps the atom's columns (2-way conflicts).
// TRANSPOSED (Cfg::dmma_transposed: K-contiguous A, N-contiguous B, even warp_n): each DMMA
// computes the transpose of an 8-row x 16-column block of C, B^T as the instruction's A and A^T as
// its B, so that both read 16 bytes at a time. Pieces keep their registers' count (16 x 8 elements
// of C, four per lane) but not their shape: piece (i, j) holds rows 16i + 8h + dmma_row_order(2t +
// s) (register 2h + s) and column 16(j / 2) + 2g + j % 2, i.e. registers 2h, 2h + 1 of pieces 2q
// and 2q + 1 are one instruction's C. A's register 2h + s is row 16i + 8h + dmma_row_order(g) at K
// 2t + s; B's register s of piece j is column 16(j / 2) + 2g + j % 2 at K 2t + s, so a lane's
// columns 2g, 2g + 1 of one K row (pieces 2q, 2q + 1) are one load.
// The Hopper engine's f64 warp tile (hopper/dmma_tile.cuh) uses the same orders on swizzled stages.
template <class Cfg, class Atom>
struct tile_order<Cfg, Atom, typename std_conditional<Atom::M == 16 && sizeof(typename Atom::a_type) == 8, void, int>::type> {
    static constexpr bool DMMA = true;
    static_assert(Atom::K == 8, "the f64 order pairs the two K slots of m16n8k8");
    static constexpr bool A_K = Cfg::a_row_major, B_K = !Cfg::b_row_major;
    static constexpr bool B_ORDERED = B_K && !Cfg::c_row_major;
    static constexpr bool TRANSPOSED = dmma_transposed<Cfg>::value;
    static_assert(!TRANSPOSED || (A_K && !B_K && !Cfg::is_complex && Cfg::warp_n % 2 == 0 && Cfg::k % 8 == 0 &&
                                  Cfg::m % (16 * Cfg::warp_m) == 0 && Cfg::n % (8 * Cfg::warp_n) == 0),
                  "the transposed f64 order takes real K-contiguous A, N-contiguous B, an even warp_n, whole K "
                  "steps and warp tiles that tile C (heuristics.dmma_transposed)");
    __host__ __device__ __forceinline__ static constexpr int a_place(int r) {  // instruction row r (0..15)
        return A_K ? (r & 8) + dmma_row_order(r & 7) : 2 * (r & 7) + (r >> 3);
    }
    __host__ __device__ __forceinline__ static constexpr int b_place(int j, int c) {  // column c of piece j
        return TRANSPOSED ? 16 * (j >> 1) + 2 * c + (j & 1) : 8 * j + (B_ORDERED ? dmma_row_order(c) : c);
    }
    __host__ __device__ __forceinline__ static constexpr int k_place(int s) { return 2 * (s & 3) + (s >> 2); }
    __device__ __forceinline__ static int a_row(int lane, int i, int e) {
        return TRANSPOSED ? 16 * i + 8 * (e >> 1) + dmma_row_order(lane >> 2) : 16 * i + a_place(Atom::a_row(lane, e));
    }
    __device__ __forceinline__ static int b_col(int lane, int j, int e) {
        return TRANSPOSED ? b_place(j, lane >> 2) : b_place(j, Atom::b_col(lane, e));
    }
    __device__ __forceinline__ static int a_k(int lane, int e) {
        return TRANSPOSED ? 2 * (lane & 3) + (e & 1) : k_place(Atom::a_k(lane, e));
    }
    __device__ __forceinline__ static int b_k(int lane, int e) {
        return TRANSPOSED ? 2 * (lane & 3) + e : k_place(Atom::b_k(lane, e));
    }
    __device__ __forceinline__ static int c_row(int lane, int i, int e) {
        return TRANSPOSED ? 16 * i + 8 * (e >> 1) + dmma_row_order(2 * (lane & 3) + (e & 1))
                          : 16 * i + a_place(Atom::c_row(lane, e));
    }
    __device__ __forceinline__ static int c_col(int lane, int j, int e) {
        return TRANSPOSED ? b_place(j, lane >> 2) : b_place(j, Atom::c_col(lane, e));
    }
    __host__ __device__ __forceinline__ static constexpr int piece_col(int j) { return TRANSPOSED ? b_place(j, 0) : 8 * j; }

    // The transposed order's instruction over rows 16i + 8h + (0..7) and the columns of pieces 2q,
    // 2q + 1: registers 2h, 2h + 1 of those pieces' C, B's registers of both pieces, A's 2h, 2h + 1.
    template <class Acc, class FragA, class FragB>
    __device__ __forceinline__ static void mma_transposed(Acc& acc, const FragA& fa, const FragB* fb, int i, int h,
                                                          int q) {
        double* c0 = acc[i][2 * q];
        double* c1 = acc[i][2 * q + 1];
        const double* b0 = fb[2 * q][0].regs();
        const double* b1 = fb[2 * q + 1][0].regs();
        const double* a = fa.regs();
        double d[4] = {c0[2 * h], c0[2 * h + 1], c1[2 * h], c1[2 * h + 1]};
        const double ta[4] = {b0[0], b1[0], b0[1], b1[1]};  // instruction rows g, g + 8 at K 2t, then 2t + 1
        const double tb[2] = {a[2 * h], a[2 * h + 1]};      // instruction column g at K 2t, 2t + 1
        if constexpr (dmma_k4<Cfg>::value) {  // K 2t of the step (slot t of one m16n8k4), then K 2t + 1
            mma_m16n8_f64<4>::mma(d, ta, tb);
            mma_m16n8_f64<4>::mma(d, ta + 2, tb + 1);
        } else {
            Atom::mma(d, ta, tb);
        }
        c0[2 * h] = d[0], c0[2 * h + 1] = d[1], c1[2 * h] = d[2], c1[2 * h + 1] = d[3];
    }
};

// Runs of adjacent columns of C that a lane holds in one row of a warp tile, so that an epilogue
// can write a run with vector stores instead of element by element. Every atom gives a lane the
// column pair 2t, 2t + 1 (registers 2h, 2h + 1 of row half h); with tile_order's grouped B
// columns (P = b_group_pieces > 1) pieces qP ... qP + P - 1 together give it 2P adjacent columns
// starting at a multiple of 2P (the f64 order renumbers B's columns only where C is column-major,
// whose epilogues take no runs). Real C only; whether adjacent columns are adjacent in memory is
// the epilogue's to say (epilogue_takes_runs).
template <class Cfg, class Atom = typename Cfg::atom>
struct c_runs {
    using order = tile_order<Cfg, Atom>;
    using acc_type = typename Cfg::accumulator_type;
    static constexpr int P = order::DMMA ? 1 : b_group_pieces<Cfg, Atom>();
    static constexpr int RUN = 2 * P, HALVES = Atom::C_ELEMS / 2;
    static constexpr bool works = !Cfg::is_complex && Atom::C_ELEMS % 2 == 0 && !dmma_transposed<Cfg>::value;

    // Columns of a part of a run that lies wholly inside or wholly outside C: the run itself where
    // the tile lies inside C along N, else the largest power of two dividing both it and N.
    template <bool FULL_N> __host__ __device__ static constexpr int part() {
        int u = RUN;
        while (!FULL_N && u > 1 && Cfg::n % u != 0) u /= 2;
        return u;
    }

    // The warp tile at (m0, n0), acc[i][j][e] as the tensor-core path holds it: f.run(row, col, v)
    // for each part of a run inside C (v[s] at column col + s; f(row, col, value) where parts are
    // single elements). Rows past M are skipped (FULL_M, FULL_N: the tile lies inside C).
    template <bool FULL_M, bool FULL_N, class Acc, class F>
    __device__ __forceinline__ static void visit(const Acc& acc, int m0, int n0, int lane, F& f) {
        constexpr int U = part<FULL_N>();
#pragma unroll
        for (int i = 0; i < Cfg::warp_m; ++i)
#pragma unroll
            for (int h = 0; h < HALVES; ++h) {
                const int row = m0 + order::c_row(lane, i, 2 * h);
                if (!FULL_M && row >= Cfg::m) continue;
#pragma unroll
                for (int q = 0; q < Cfg::warp_n / P; ++q) {
                    const int col = n0 + order::c_col(lane, q * P, 2 * h);
#pragma unroll
                    for (int u = 0; u < RUN; u += U) {
                        if (!FULL_N && col + u >= Cfg::n) continue;
                        acc_type v[U];
#pragma unroll
                        for (int s = 0; s < U; ++s) v[s] = acc[i][q * P + (u + s) % P][2 * h + (u + s) / P];
                        if constexpr (U == 1) {
                            f(row, col + u, v[0]);
                        } else {
                            f.run(row, col + u, v);
                        }
                    }
                }
            }
    }
};

// Whether an epilogue functor also takes whole runs of columns (f.run(row, col, values), c_runs).
template <class E, class = void> struct epilogue_takes_runs { static constexpr bool value = false; };
template <class E> struct epilogue_takes_runs<E, decltype(void(E::takes_runs))> {
    static constexpr bool value = E::takes_runs;
};

// The CUDA-core path's tiling: work item (gm, gn) of a thread owns TM x TN outputs, rows
// row(gm, i) and columns col(gn, j). Runs of V consecutive rows (columns) start V * GM
// (V * GN) apart: V = 4 where the operand is contiguous along them (column-major A, row-major
// B) so that one 16-byte read fetches a run, else 1, so that neighbouring threads read
// neighbouring rows (or columns), each its own 16 bytes of K.
template <class Cfg>
struct fma_tiling {
    static constexpr int m = Cfg::m, n = Cfg::n, TM = Cfg::thread_m, TN = Cfg::thread_n;
    static constexpr int GM = (m + TM - 1) / TM, GN = (n + TN - 1) / TN, WORK = GM * GN;
    // real f32: the operands are read as float2 / float4 where the layout allows
    static constexpr bool VECTOR = !Cfg::is_complex && sizeof(typename Cfg::a_type) == 4 &&
                                   sizeof(typename Cfg::b_type) == 4 && sizeof(typename Cfg::accumulator_type) == 4 &&
                                   aligned_smem<Cfg>::value;
    static constexpr int VM = VECTOR && !Cfg::a_row_major && TM % 4 == 0 && m % 4 == 0 ? 4 : 1;
    static constexpr int VN = VECTOR && Cfg::b_row_major && TN % 4 == 0 && n % 4 == 0 ? 4 : 1;
    static constexpr bool FULL_M = m % TM == 0, FULL_N = n % TN == 0;
    // K values read at once from a K-contiguous operand (row-major A, column-major B); 2 when
    // both are and the tile is large, to keep the registers of both under control.
    static constexpr bool A_K = VECTOR && Cfg::a_row_major, B_K = VECTOR && !Cfg::b_row_major;
    static constexpr int KC = !(A_K || B_K) ? 1 : (A_K && B_K && TM * TN >= 64) ? 2 : 4;
    __host__ __device__ static constexpr int row_offset(int i) { return i % VM + (i / VM) * GM * VM; }
    __host__ __device__ static constexpr int col_offset(int j) { return j % VN + (j / VN) * GN * VN; }
    __host__ __device__ static constexpr int row(int gm, int i) { return gm * VM + row_offset(i); }
    __host__ __device__ static constexpr int col(int gn, int j) { return gn * VN + col_offset(j); }
};

// N consecutive values of T from shared memory (16 * N / 4 bytes, aligned to that) into dst.
template <int N, class T> __device__ __forceinline__ void load_run(T* dst, const T* src) {
    if constexpr (N == 4 && sizeof(T) == 4) {
        const float4 v = *reinterpret_cast<const float4*>(src);
        dst[0] = reinterpret_cast<const T&>(v.x);
        dst[1] = reinterpret_cast<const T&>(v.y);
        dst[2] = reinterpret_cast<const T&>(v.z);
        dst[3] = reinterpret_cast<const T&>(v.w);
    } else if constexpr (N == 2 && sizeof(T) == 4) {
        const float2 v = *reinterpret_cast<const float2*>(src);
        dst[0] = reinterpret_cast<const T&>(v.x);
        dst[1] = reinterpret_cast<const T&>(v.y);
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) dst[i] = src[i];
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

    // One operand seen as X x K: A is (row, kk), B is (kk, col), with x the row of A or the
    // column of B. K_CONTIG: consecutive kk are adjacent in shared memory (row-major A,
    // column-major B), which ldmatrix reads as is; otherwise it reads transposed.
    template <bool IS_A> struct operand {
        using T = typename std_conditional<IS_A, a_type, b_type>::type;
        static constexpr int X = IS_A ? m : n;
        static constexpr bool ROW_MAJOR = IS_A ? Cfg::a_row_major : Cfg::b_row_major;
        static constexpr bool K_CONTIG = IS_A ? ROW_MAJOR : !ROW_MAJOR;
        static constexpr bool CONJ = IS_A ? Cfg::conj_a : Cfg::conj_b;
        template <int LD> __device__ __forceinline__ static const T* at(const T* s, int x, int kk) {
            if constexpr (LD == PANELS) {
                if constexpr (IS_A) {
                    return a_ptr<LD>(s, x, kk);
                } else {
                    return b_ptr<LD>(s, kk, x);
                }
            } else {
                return K_CONTIG ? s + x * LD + kk : s + x + kk * LD;
            }
        }
    };

    // Whether a fragment of this operand is read with ldmatrix: real operands of 16-bit types
    // (either order) or of 8- and 32-bit types stored K-contiguous (whose fragments hold whole
    // 32-bit words of consecutive K), in 16-byte rows starting on 16-byte boundaries. Edges
    // need no per-element tests: rows past the end are clamped (their products land in
    // outputs nobody stores) and K past the end is zeroed after the load.
    template <bool IS_A, int LD, class Atom> __host__ __device__ static constexpr bool ldmatrix_reads() {
        using op = operand<IS_A>;
        using T = typename op::T;
        constexpr int ELEMS = IS_A ? Atom::A_ELEMS : Atom::B_ELEMS;
        constexpr bool width_ok = sizeof(T) == 2 || (op::K_CONTIG && (sizeof(T) == 1 || sizeof(T) == 4));
        constexpr bool whole = op::X % 8 == 0 && k % (16 / int(sizeof(T))) == 0;
        constexpr bool rows_ok = LD == PANELS ? whole : (LD * int(sizeof(T))) % 16 == 0 && (whole || aligned_smem<Cfg>::value);
        return !is_complex && width_ok && rows_ok && (ELEMS * int(sizeof(T))) % 4 == 0;
    }

    // Whether a K step (step_reach Reach) needs per-element K tests: only a tail step of a K that
    // the atom's ATOM_K does not divide reaches past k.
    template <int ATOM_K, class Reach> __host__ __device__ static constexpr bool k_tail() {
        return Reach::k_tail && k % ATOM_K != 0;
    }

    // Whether this operand's fragments of a K step (step_reach Reach) may reach past its rows (A)
    // or columns (B): only in an edge tile, where XA (what one fragment covers) does not divide them.
    template <bool IS_A, int XA, class Reach> __host__ __device__ static constexpr bool x_edge() {
        return (IS_A ? Reach::m_edge : Reach::n_edge) && operand<IS_A>::X % XA != 0;
    }

    // Whether f64 fragments of this operand are read 16 bytes at a time (tile_order's f64 order):
    // real values in rows of an even number of doubles starting on 16-byte boundaries; B only
    // K-contiguous, or in the transposed order (two pieces' columns at once, load_dmma_b_pair).
    template <bool IS_A, int LD> __host__ __device__ static constexpr bool dmma_vector_reads() {
        using order = tile_order<Cfg>;
        if constexpr (!order::DMMA) {
            return false;
        } else {
            return !is_complex && LD != PANELS && LD % 2 == 0 && aligned_smem<Cfg>::value &&
                   (IS_A || order::B_K || order::TRANSPOSED);
        }
    }

    // Whether B fragments come in pairs of pieces from load_dmma_b_pair (the transposed f64 order).
    template <int LD> __host__ __device__ static constexpr bool dmma_b_pairs() {
        return tile_order<Cfg>::TRANSPOSED && dmma_vector_reads<false, LD>();
    }

    // The B fragments of pieces `piece` and `piece` + 1 (piece even) of the warp tile at column x0,
    // K step k0, in the transposed f64 order: one 16-byte load per K row gives the lane's columns
    // 2g and 2g + 1, one of each piece (tile_order: warp tiles lie inside C, K steps are whole).
    template <int LD, class Frag, class Op>
    __device__ __forceinline__ static void load_dmma_b_pair(Frag* first, Frag* second, const double* s, int x0,
                                                            int piece, int k0, int lane, const Op& op) {
        const int c = x0 + tile_order<Cfg>::b_place(piece, lane >> 2), kk = k0 + 2 * (lane & 3);
        const double2 v0 = *reinterpret_cast<const double2*>(s + kk * LD + c);
        const double2 v1 = *reinterpret_cast<const double2*>(s + (kk + 1) * LD + c);
        double* f = first[0].elems();
        double* g = second[0].elems();
        f[0] = op(v0.x), f[1] = op(v1.x), g[0] = op(v0.y), g[1] = op(v1.y);
    }

    // One double from shared address `addr`, an 8-byte load of its own.
    static __device__ __forceinline__ double lds_f64(u32 addr) {
        double v;
        asm volatile("ld.shared.f64 %0, [%1];\n" : "=d"(v) : "r"(addr));
        return v;
    }

    // f64 fragments with 16-byte loads, in tile_order's f64 order: A or K-contiguous B of piece
    // `piece` of the warp tile at x0. Rows (columns) past the edge read row 0 (their products
    // land in outputs nobody stores); K past the end is zeroed after the load (an odd K reads one
    // element past it, inside the row: rows hold an even number of doubles).
    template <bool IS_A, int LD, class Reach, class Frag, class Op>
    __device__ __forceinline__ static void load_dmma_fragment(Frag* frag, const double* s, int x0, int piece, int k0,
                                                              int lane, const Op& op) {
        using order = tile_order<Cfg>;
        constexpr int X = operand<IS_A>::X;
        constexpr bool FULL_K = !k_tail<8, Reach>(), FULL_X = !x_edge<IS_A, IS_A ? 16 : 8, Reach>();
        const int g = lane >> 2, t = lane & 3;
        int kk = k0 + 2 * t;
        const bool k_in = FULL_K || kk < k, k1_in = FULL_K || kk + 1 < k;
        if (!k_in) kk = 0;
        double* f = frag[0].elems();
        constexpr int N = IS_A ? 4 : 2;
        if constexpr (IS_A && order::TRANSPOSED) {  // rows r and r + 8 (two instructions' columns), K 2t and 2t + 1
            static_assert(FULL_K && FULL_X, "the transposed f64 order takes whole K steps and tiles inside C");
            const int r0 = x0 + 16 * piece + dmma_row_order(g);
            const double2 lo = *reinterpret_cast<const double2*>(s + r0 * LD + kk);
            const double2 hi = *reinterpret_cast<const double2*>(s + (r0 + 8) * LD + kk);
            f[0] = lo.x, f[1] = lo.y, f[2] = hi.x, f[3] = hi.y;
        } else if constexpr (IS_A && order::A_K) {  // rows r and r + 8, K 2t and 2t + 1 each
            int r0 = x0 + 16 * piece + dmma_row_order(g), r1 = r0 + 8;
            if (!FULL_X) {
                r0 = r0 < X ? r0 : 0;
                r1 = r1 < X ? r1 : 0;
            }
            if constexpr (Cfg::threads <= 128) {
                // Four 8-byte loads straight into the instruction's register order (rows r0, r1 at
                // K 2t, then at 2t + 1). A 16-byte load of a row's two K values puts them into
                // registers 0 and 2 of the group, and the compiler assembles every group anew with
                // moves (f64 64^3: 46 moves per 8 DMMA, 10.3 instructions per MMA against 6.5). The
                // second K's address is an xor (16-byte aligned rows) so that ptxas does not merge
                // the pair back into one load. Blocks of up to 128 threads gained (block compute
                // 64^3 +7%, 32^3 +4% on an H200); 256-thread blocks lost (100^3 -10%, 128x128x64
                // -22%; not profiled: the 8-byte reads meet two-way bank conflicts, twice the
                // shared-memory wavefronts of the 16-byte reads), so they keep those.
                const u32 lo = shared_address(s + r0 * LD + kk), hi = shared_address(s + r1 * LD + kk);
                u32 lo1, hi1;
                asm("xor.b32 %0, %2, 8;\n\txor.b32 %1, %3, 8;\n" : "=r"(lo1), "=r"(hi1) : "r"(lo), "r"(hi));
                f[0] = lds_f64(lo), f[1] = lds_f64(hi), f[2] = lds_f64(lo1), f[3] = lds_f64(hi1);
            } else {
                const double2 lo = *reinterpret_cast<const double2*>(s + r0 * LD + kk);
                const double2 hi = *reinterpret_cast<const double2*>(s + r1 * LD + kk);
                f[0] = lo.x, f[2] = lo.y, f[1] = hi.x, f[3] = hi.y;
            }
        } else if constexpr (IS_A) {  // rows 2g and 2g + 1 at K 2t, then at K 2t + 1
            int r = x0 + 16 * piece + 2 * g;
            if (!FULL_X) r = r < X ? r : 0;
            const double2 v0 = *reinterpret_cast<const double2*>(s + r + kk * LD);
            const double2 v1 = *reinterpret_cast<const double2*>(s + r + (k1_in ? kk + 1 : 0) * LD);
            f[0] = v0.x, f[1] = v0.y, f[2] = v1.x, f[3] = v1.y;
        } else {  // column c, K 2t and 2t + 1
            static_assert(!order::TRANSPOSED, "the transposed f64 order reads B in pairs of pieces (load_dmma_b_pair)");
            int c = x0 + order::b_place(piece, g);
            if (!FULL_X) c = c < X ? c : 0;
            const double2 v = *reinterpret_cast<const double2*>(s + c * LD + kk);
            f[0] = v.x, f[1] = v.y;
        }
#pragma unroll
        for (int e = 0; e < N; ++e) {  // register e holds K index 2t + (e >> 1) of A (transposed: e & 1), 2t + e of B
            if constexpr (!is_identity<Op>::value) f[e] = op(f[e]);
            if (!((IS_A ? (order::TRANSPOSED ? e & 1 : e >> 1) : e) == 0 ? k_in : k1_in)) f[e] = 0.0;
        }
    }

    // The shared-memory row lane r of an ldmatrix hands over for the 8 x 8 block at (x, kk) of this
    // operand: a row of x when K-contiguous (its 16 bytes run along K), else a row of K. Rows past
    // X are clamped (their products land in outputs nobody stores) and K past the end too (zeroed
    // after the load by finish_fragment); XA is the extent along x of what the loads cover.
    template <bool IS_A, int LD, int XA, class Atom, class Reach>
    __device__ __forceinline__ static const typename operand<IS_A>::T* ldmatrix_row(const typename operand<IS_A>::T* s,
                                                                                   int x, int kk, int r) {
        using opd = operand<IS_A>;
        constexpr int X = opd::X;
        constexpr bool FULL_K = !k_tail<Atom::K, Reach>();
        if constexpr (opd::K_CONTIG) {
            x += r;
            if (x_edge<IS_A, XA, Reach>()) x = x < X ? x : X - 1;
            if (!FULL_K) kk = kk < k ? kk : 0;
        } else {
            kk += r;
            if (x_edge<IS_A, XA, Reach>()) x = x < X ? x : 0;
            if (!FULL_K) kk = kk < k ? kk : k - 1;
        }
        return opd::template at<LD>(s, x, kk);
    }

    // A fragment just read with ldmatrix: op applied to every element, K past the end zeroed
    // (both operands: the padding may hold NaN).
    template <bool IS_A, class Atom, class Reach, class Frag, class Op>
    __device__ __forceinline__ static void finish_fragment(Frag& frag, int k0, int lane, const Op& op) {
        using F = typename std_conditional<IS_A, typename Atom::a_type, typename Atom::b_type>::type;
        constexpr int ELEMS = IS_A ? Atom::A_ELEMS : Atom::B_ELEMS;
        if constexpr (!is_identity<Op>::value) {
#pragma unroll
            for (int e = 0; e < ELEMS; ++e) frag.elems()[e] = op(frag.elems()[e]);
        }
        if constexpr (k_tail<Atom::K, Reach>()) {
            if (k0 + Atom::K > k) {
#pragma unroll
                for (int e = 0; e < ELEMS; ++e) {
                    if (k0 + (IS_A ? Atom::a_k(lane, e) : Atom::b_k(lane, e)) >= k) frag.elems()[e] = zero<F>();
                }
            }
        }
    }

    // Whether B fragments of neighbouring pieces are read in pairs: one ldmatrix.x4 for two pieces
    // whose fragments are two 8 x 8 blocks each (16-bit, and K-contiguous 8- or 32-bit B), which
    // halves the shared-memory instructions of B.
    template <int LD, class Atom> __host__ __device__ static constexpr bool b_pairs() {
        return ldmatrix_reads<false, LD, Atom>() && !dmma_vector_reads<false, LD>() &&
               Atom::B_ELEMS * int(sizeof(b_type)) == 8;
    }

    // The B fragments of pieces `piece` and `piece` + 1 of the warp tile at column tile0, K step k0:
    // blocks 0 and 1 of the x4 are the first piece's two K halves, blocks 2 and 3 the second's.
    template <int LD, class Atom, class Reach, class Frag, class Op>
    __device__ __forceinline__ static void load_b_pair(Frag* first, Frag* second, const b_type* s, int tile0,
                                                       int piece, int k0, int lane, const Op& op) {
        constexpr int KB = 16 / int(sizeof(b_type));
        const int q = lane / 8, r = lane % 8;
        u32 regs[4];
        ldmatrix<4, !operand<false>::K_CONTIG>(
            regs, ldmatrix_row<false, LD, Atom::N, Atom, Reach>(s, tile0 + (piece + q / 2) * Atom::N, k0 + KB * (q % 2), r));
        first[0].reg[0] = regs[0], first[0].reg[1] = regs[1];
        second[0].reg[0] = regs[2], second[0].reg[1] = regs[3];
        finish_fragment<false, Atom, Reach>(first[0], k0, lane, op);
        finish_fragment<false, Atom, Reach>(second[0], k0, lane, op);
    }

    // Pieces of B read together by load_b_group: tile_order's group where its runs of P columns can
    // be read whole (plain rows starting on 16-byte boundaries, LD and N multiples of P, so no run
    // straddles the edge), else 1.
    template <int LD, class Atom> __host__ __device__ static constexpr int b_group_reads() {
        constexpr int P = b_group_pieces<Cfg, Atom>();
        return P > 1 && LD != PANELS && LD % P == 0 && n % P == 0 && aligned_smem<Cfg>::value ? P : 1;
    }

    // The B fragments of the P pieces from `piece` on of the warp tile at column tile0, K step k0,
    // in tile_order's grouped order: per K row one read of the lane's P adjacent bytes, four rows'
    // reads transposed into each piece's K quad with byte permutes. Runs wholly past N read column
    // 0 (their products land in outputs nobody stores); K past the end reads row 0 and is zeroed,
    // op left out there (it must add nothing).
    template <int LD, class Atom, class Reach, class Frag, class Op>
    __device__ __forceinline__ static void load_b_group(Frag* frags, const b_type* s, int tile0, int piece, int k0,
                                                        int lane, const Op& op) {
        constexpr int P = b_group_reads<LD, Atom>();
        constexpr bool FULL_K = !k_tail<Atom::K, Reach>();
        static_assert(sizeof(b_type) == 1 && (P == 2 || P == 4), "grouped reads take 8-bit B in runs of 2 or 4");
        int col = tile0 + tile_order<Cfg, Atom>::b_place(piece, lane >> 2);
        if (x_edge<false, 8 * P, Reach>()) col = col < n ? col : 0;
#pragma unroll
        for (int h = 0; h < Atom::B_ELEMS / 4; ++h) {  // register h: K 16h + 4t .. 16h + 4t + 3
            u32 w[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int kk = k0 + Atom::b_k(lane, 4 * h + r);
                const bool k_in = FULL_K || kk < k;
                const b_type* at = operand<false>::template at<LD>(s, col, k_in ? kk : 0);
                const u32 v = P == 4 ? *reinterpret_cast<const u32*>(at) : u32(*reinterpret_cast<const unsigned short*>(at));
                w[r] = k_in ? v : 0u;
            }
            const u32 lo01 = __byte_perm(w[0], w[1], 0x5140), lo23 = __byte_perm(w[2], w[3], 0x5140);
            frags[0][0].reg[h] = __byte_perm(lo01, lo23, 0x5410);
            frags[1][0].reg[h] = __byte_perm(lo01, lo23, 0x7632);
            if constexpr (P == 4) {
                const u32 hi01 = __byte_perm(w[0], w[1], 0x7362), hi23 = __byte_perm(w[2], w[3], 0x7362);
                frags[2][0].reg[h] = __byte_perm(hi01, hi23, 0x5410);
                frags[3][0].reg[h] = __byte_perm(hi01, hi23, 0x7632);
            }
        }
        if constexpr (!is_identity<Op>::value) {
#pragma unroll
            for (int p = 0; p < P; ++p)
#pragma unroll
                for (int e = 0; e < Atom::B_ELEMS; ++e) {
                    if (FULL_K || k0 + Atom::b_k(lane, e) < k) frags[p][0].elems()[e] = op(frags[p][0].elems()[e]);
                }
        }
    }

    // The fragment of this operand's piece `piece` of the warp tile at x0 (row x0 of A, column x0
    // of B) and K step k0 (a 16 x K atom for A, K x 8 for B), op applied to every element, in
    // frag[part] (frag[2] = -imaginary part for complex A). ldmatrix 8x8 block q covers
    // x 8 * (q % XB), k KB * (q / XB) (KB elements make 16 bytes).
    template <bool IS_A, int LD, class Atom, class Reach = any_reach, class Frag, class Op>
    __device__ __forceinline__ static void load_fragment(Frag* frag, const typename operand<IS_A>::T* s, int tile0,
                                                         int piece, int k0, int lane, const Op& op) {
        using opd = operand<IS_A>;
        using T = typename opd::T;
        using order = tile_order<Cfg, Atom>;
        using F = typename std_conditional<IS_A, typename Atom::a_type, typename Atom::b_type>::type;
        constexpr int ELEMS = IS_A ? Atom::A_ELEMS : Atom::B_ELEMS;
        constexpr int XA = IS_A ? Atom::M : Atom::N;  // extent of the fragment along x
        constexpr int X = opd::X;
        constexpr bool FULL_K = !k_tail<Atom::K, Reach>();
        if constexpr (dmma_vector_reads<IS_A, LD>()) {
            load_dmma_fragment<IS_A, LD, Reach>(frag, s, tile0, piece, k0, lane, op);
        } else if constexpr (ldmatrix_reads<IS_A, LD, Atom>()) {
            const int x0 = tile0 + piece * XA;
            constexpr int MATS = ELEMS * int(sizeof(T)) / 4, XB = XA / 8, KB = 16 / int(sizeof(T));
            const int q = (lane / 8) % MATS, r = lane % 8;
            ldmatrix<MATS, !opd::K_CONTIG>(frag[0].reg,
                                           ldmatrix_row<IS_A, LD, XA, Atom, Reach>(s, x0 + 8 * (q % XB), k0 + KB * (q / XB), r));
            finish_fragment<IS_A, Atom, Reach>(frag[0], k0, lane, op);
        } else {
            constexpr int PARTS = is_complex ? 2 : 1;
            constexpr bool FULL_X = !x_edge<IS_A, XA, Reach>();
#pragma unroll
            for (int e = 0; e < ELEMS; ++e) {
                const int x = tile0 + (IS_A ? order::a_row(lane, piece, e) : order::b_col(lane, piece, e));
                const int kk = k0 + (IS_A ? order::a_k(lane, e) : order::b_k(lane, e));
                const bool in = (FULL_X || x < X) && (FULL_K || kk < k);
#pragma unroll
                for (int p = 0; p < PARTS; ++p) {
                    F v = zero<F>();
                    if (in) v = part_of<opd::CONJ>(transformed(op, *opd::template at<LD>(s, x, kk)), p);
                    frag[p].elems()[e] = v;
                }
                if constexpr (is_complex && IS_A) frag[2].elems()[e] = negate(frag[1].elems()[e]);
            }
        }
    }

    // The warp tiles of the tensor-core path: FM x FN atoms each, TILES_M along M. Only the last
    // tile along M (N) may reach past C; it holds LAST_FM (LAST_FN) pieces that start inside C.
    struct warp_tiling {
        using atom = typename Cfg::atom;
        static constexpr int FM = Cfg::warp_m, FN = Cfg::warp_n, WM = FM * atom::M, WN = FN * atom::N;
        static constexpr int TILES_M = (m + WM - 1) / WM, TILES = TILES_M * ((n + WN - 1) / WN);
        static constexpr bool FULL_M = m % WM == 0, FULL_N = n % WN == 0;
        static constexpr int LAST_FM = (m - (TILES_M - 1) * WM + atom::M - 1) / atom::M;
        static constexpr int LAST_FN = pieces_before<tile_order<Cfg>>(FN, n - ((n + WN - 1) / WN - 1) * WN);
    };

    // Adds the A * B of one K step (k0 .. k0 + atom::K) of pieces i < PM, j < PN of the warp tile
    // at (m0, n0) into acc[part][i][j][e]; every one of those pieces starts inside C (tile_product
    // picks PM, PN). Reach (step_reach) says which bounds the step may cross; Atom is the plan's
    // unless a K tail takes a smaller one. The K loop stays with the callers.
    template <int LDA, int LDB, int PM = Cfg::warp_m, int PN = Cfg::warp_n, class Reach = any_reach,
              class Atom = void, class Acc, class AOp, class BOp>
    __device__ __forceinline__ static void mma_step(Acc& acc, const a_type* sA, const b_type* sB, int m0, int n0,
                                                    int k0, int lane, const AOp& a_op, const BOp& b_op) {
        using atom = typename step_atom<Cfg, Atom>::type;
        constexpr int PARTS = is_complex ? 2 : 1;
        // Complex products take four real MMAs: re += ar*br + (-ai)*bi, im += ar*bi + ai*br.
        constexpr int A_FRAGS = is_complex ? 3 : 1;  // ar, ai, -ai

        fragment<typename atom::a_type, atom::A_ELEMS> fa[PM][A_FRAGS];
        fragment<typename atom::b_type, atom::B_ELEMS> fb[PN][PARTS];
#pragma unroll
        for (int i = 0; i < PM; ++i) load_fragment<true, LDA, atom, Reach>(fa[i], sA, m0, i, k0, lane, a_op);
        constexpr int GROUP = b_group_reads<LDB, atom>();
#pragma unroll
        for (int j = 0; j < PN; ++j) {
            if constexpr (GROUP > 1) {
                if (j < PN - PN % GROUP) {
                    if (j % GROUP == 0) load_b_group<LDB, atom, Reach>(fb + j, sB, n0, j, k0, lane, b_op);
                } else {
                    load_fragment<false, LDB, atom, Reach>(fb[j], sB, n0, j, k0, lane, b_op);
                }
            } else if constexpr (dmma_b_pairs<LDB>()) {
                if (j % 2 == 0) load_dmma_b_pair<LDB>(fb[j], fb[j + 1], sB, n0, j, k0, lane, b_op);
            } else if constexpr (b_pairs<LDB, atom>()) {
                if (j % 2 == 0 && j + 1 < PN) load_b_pair<LDB, atom, Reach>(fb[j], fb[j + 1], sB, n0, j, k0, lane, b_op);
                if (j % 2 == 0 && j + 1 == PN) load_fragment<false, LDB, atom, Reach>(fb[j], sB, n0, j, k0, lane, b_op);
            } else {
                load_fragment<false, LDB, atom, Reach>(fb[j], sB, n0, j, k0, lane, b_op);
            }
        }
        using order = tile_order<Cfg, atom>;
        if constexpr (order::TRANSPOSED) {  // one instruction per 8 rows and two pieces' columns
#pragma unroll
            for (int i = 0; i < PM; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int q = 0; q < PN / 2; ++q) order::mma_transposed(acc[0], fa[i][0], fb, i, h, q);
            return;
        }
#pragma unroll
        for (int i = 0; i < PM; ++i)
#pragma unroll
            for (int j = 0; j < PN; ++j) {
                atom::mma(acc[0][i][j], fa[i][0].regs(), fb[j][0].regs());
                if constexpr (is_complex) {
                    atom::mma(acc[0][i][j], fa[i][2].regs(), fb[j][1].regs());
                    atom::mma(acc[1][i][j], fa[i][0].regs(), fb[j][1].regs());
                    atom::mma(acc[1][i][j], fa[i][1].regs(), fb[j][0].regs());
                }
            }
    }

    // acc += A * B over all of K for the warp tile at (m0, n0), whose pieces inside C are PM x PN
    // and which reaches past M (N) if EDGE_M (EDGE_N). The whole K steps run without K tests; a K
    // the atom does not divide ends with one tail step (of tail_atom, a smaller MMA where the rest
    // fits in one) that zeroes what lies past k.
    template <int LDA, int LDB, int PM, int PN, bool EDGE_M, bool EDGE_N, class Acc, class AOp, class BOp>
    __device__ __forceinline__ static void tile_k_loop(Acc& acc, const a_type* sA, const b_type* sB, int m0, int n0,
                                                       int lane, const AOp& a_op, const BOp& b_op) {
        using atom = typename Cfg::atom;
        constexpr int STEP = atom::K, WHOLE = k / STEP * STEP;
        constexpr int UNROLL = Cfg::k_unroll;  // heuristics.k_loop_unroll
#pragma unroll UNROLL
        for (int k0 = 0; k0 < WHOLE; k0 += STEP) {
            mma_step<LDA, LDB, PM, PN, step_reach<false, EDGE_M, EDGE_N>>(acc, sA, sB, m0, n0, k0, lane, a_op, b_op);
        }
        if constexpr (WHOLE < k) {
            using tail = typename tail_atom<atom, k - WHOLE>::type;
            static_assert(k - WHOLE <= tail::K, "the K tail is one step");
            mma_step<LDA, LDB, PM, PN, step_reach<true, EDGE_M, EDGE_N>, tail>(acc, sA, sB, m0, n0, WHOLE, lane, a_op,
                                                                               b_op);
        }
    }

    // tile_k_loop for the warp tile at (m0, n0): the edge tiles of an odd size run a loop of their
    // own (a branch per tile, which the whole warp takes alike), with bounds tests and only the
    // pieces that start inside C; the tiles inside C run theirs without tests.
    template <int LDA, int LDB, class Acc, class AOp, class BOp>
    __device__ __forceinline__ static void tile_product(Acc& acc, const a_type* sA, const b_type* sB, int m0, int n0,
                                                        int lane, const AOp& a_op, const BOp& b_op) {
        using W = warp_tiling;
        constexpr int FM = W::FM, FN = W::FN;
        const bool edge_m = !W::FULL_M && m0 + W::WM > m, edge_n = !W::FULL_N && n0 + W::WN > n;
        // (only the variants a size can reach are instantiated)
        if constexpr (!W::FULL_M && !W::FULL_N) {
            if (edge_m && edge_n) {
                return tile_k_loop<LDA, LDB, W::LAST_FM, W::LAST_FN, true, true>(acc, sA, sB, m0, n0, lane, a_op, b_op);
            }
        }
        if constexpr (!W::FULL_M) {
            if (edge_m) return tile_k_loop<LDA, LDB, W::LAST_FM, FN, true, false>(acc, sA, sB, m0, n0, lane, a_op, b_op);
        }
        if constexpr (!W::FULL_N) {
            if (edge_n) return tile_k_loop<LDA, LDB, FM, W::LAST_FN, false, true>(acc, sA, sB, m0, n0, lane, a_op, b_op);
        }
        tile_k_loop<LDA, LDB, FM, FN, false, false>(acc, sA, sB, m0, n0, lane, a_op, b_op);
    }

    // Every output element of the warp tiles this warp owns goes to epi(row, col, value).
    template <int LDA, int LDB, class Epilogue, class AOp, class BOp>
    __device__ static void run_mma(const a_type* sA, const b_type* sB, int tid, Epilogue& epi, const AOp& a_op,
                                   const BOp& b_op) {
        using atom = typename Cfg::atom;
        using W = warp_tiling;
        constexpr int FM = W::FM, FN = W::FN, WARPS = threads / 32;
        constexpr int PARTS = is_complex ? 2 : 1;
        constexpr int ITEMS = (W::TILES + WARPS - 1) / WARPS;  // tiles per warp, the last one maybe absent
        const int warp = tid / 32, lane = tid % 32;
        if (!takes_part<WARPS * 32>(tid)) return;  // threads of a partial last warp only help with copies

        // A constant trip count: one tile per warp is straight code (a loop from warp to TILES
        // was a loop even then, the compiler not knowing that warp < WARPS).
#pragma unroll 1
        for (int t = 0; t < ITEMS; ++t) {
            const int tile = warp + t * WARPS;
            if (W::TILES % WARPS != 0 && t == ITEMS - 1 && tile >= W::TILES) break;
            const int m0 = (tile % W::TILES_M) * W::WM, n0 = (tile / W::TILES_M) * W::WN;
            alignas(16) acc_type acc[PARTS][FM][FN][atom::C_ELEMS];
#pragma unroll
            for (int p = 0; p < PARTS; ++p)
#pragma unroll
                for (int i = 0; i < FM; ++i)
#pragma unroll
                    for (int j = 0; j < FN; ++j)
#pragma unroll
                        for (int e = 0; e < atom::C_ELEMS; ++e) acc[p][i][j][e] = acc_type(0);

            tile_product<LDA, LDB>(acc, sA, sB, m0, n0, lane, a_op, b_op);

            if constexpr (epilogue_takes_runs<Epilogue>::value && c_runs<Cfg>::works) {
                c_runs<Cfg>::template visit<W::FULL_M, W::FULL_N>(acc[0], m0, n0, lane, epi);
            } else {
#pragma unroll
                for (int i = 0; i < FM; ++i)
#pragma unroll
                    for (int j = 0; j < FN; ++j)
#pragma unroll
                        for (int e = 0; e < atom::C_ELEMS; ++e) {
                            const int row = m0 + tile_order<Cfg>::c_row(lane, i, e);
                            const int col = n0 + tile_order<Cfg>::c_col(lane, j, e);
                            if ((W::FULL_M || row < m) && (W::FULL_N || col < n)) {
                                if constexpr (is_complex) {
                                    epi(row, col, value_type{acc[0][i][j][e], acc[1][i][j][e]});
                                } else {
                                    epi(row, col, acc[0][i][j][e]);
                                }
                            }
                        }
            }
        }
    }

    // ---- CUDA-core path -------------------------------------------------------------------

    // The K values k0 .. k0 + KC of each of the COUNT rows of A (IS_A) or columns of B that work
    // item g holds (fma_tiling), read as one run each and transformed; zeros past the matrix edge.
    template <bool IS_A, int LD, int COUNT, int KC, class T, class Op>
    __device__ __forceinline__ static void load_k_runs(value_type (&v)[COUNT][KC], const T* s, int g, int k0,
                                                       const Op& op) {
        using L = fma_tiling<Cfg>;
#pragma unroll
        for (int i = 0; i < COUNT; ++i) {
            const int x = IS_A ? L::row(g, i) : L::col(g, i);
            if ((IS_A ? L::FULL_M : L::FULL_N) || x < (IS_A ? m : n)) {
                load_run<KC>(v[i], s + x * LD + k0);
#pragma unroll
                for (int c = 0; c < KC; ++c) v[i][c] = transformed(op, v[i][c]);
            } else {
#pragma unroll
                for (int c = 0; c < KC; ++c) v[i][c] = value_type{};
            }
        }
    }

    // K value kk (slot c of v) of each of the COUNT rows of A (IS_A) or columns of B that work item
    // g holds: V > 1 neighbours along M (N) in one read, else one element, transformed and widened;
    // zeros past the matrix edge (runs of V rows or columns are wholly inside or outside it).
    template <bool IS_A, int LD, int V, int COUNT, int KC, class T, class Op>
    __device__ __forceinline__ static void load_mn_runs(value_type (&v)[COUNT][KC], const T* s, int g, int c, int kk,
                                                        const Op& op) {
        using L = fma_tiling<Cfg>;
#pragma unroll
        for (int i = 0; i < COUNT; i += V) {
            const int x = IS_A ? L::row(g, i) : L::col(g, i);
            if ((IS_A ? L::FULL_M : L::FULL_N) || x < (IS_A ? m : n)) {
                if constexpr (V > 1) {
                    value_type run[V];
                    load_run<V>(run, s + x + kk * LD);
#pragma unroll
                    for (int r = 0; r < V; ++r) v[i + r][c] = transformed(op, run[r]);
                } else if constexpr (IS_A) {
                    v[i][c] = widen<acc_type, Cfg::conj_a>(transformed(op, matrix_at<Cfg::a_row_major, LD>(s, x, kk)));
                } else {
                    v[i][c] = widen<acc_type, Cfg::conj_b>(transformed(op, matrix_at<Cfg::b_row_major, LD>(s, kk, x)));
                }
            } else {
#pragma unroll
                for (int r = 0; r < V; ++r) v[i + r][c] = value_type{};
            }
        }
    }

    // Adds A(:, k0 .. k0 + KC) * B(k0 .. k0 + KC, :) for the TM x TN outputs of work item
    // (gm, gn) into acc (fma_tiling says which). K-contiguous operands are read KC values at
    // a time, operands contiguous along M (N) four rows (columns) at a time; anything else,
    // and complex values, element by element. The K loop stays with the callers.
    template <int LDA, int LDB, int KC, class Acc, class AOp, class BOp>
    __device__ __forceinline__ static void fma_step(Acc& acc, const a_type* sA, const b_type* sB, int gm, int gn,
                                                    int k0, const AOp& a_op, const BOp& b_op) {
        using L = fma_tiling<Cfg>;
        constexpr int TM = L::TM, TN = L::TN;
        constexpr bool A_KV = KC > 1 && L::A_K && LDA % KC == 0;   // A(row, k0 .. k0 + KC) in one read
        constexpr bool B_KV = KC > 1 && L::B_K && LDB % KC == 0;   // B(k0 .. k0 + KC, col) in one read
        constexpr int AV = L::VM > 1 && LDA % 4 == 0 ? 4 : 1;     // rows of A per read
        constexpr int BV = L::VN > 1 && LDB % 4 == 0 ? 4 : 1;     // columns of B per read
        value_type a[TM][KC], b[TN][KC];
        if constexpr (A_KV) load_k_runs<true, LDA>(a, sA, gm, k0, a_op);
        if constexpr (B_KV) load_k_runs<false, LDB>(b, sB, gn, k0, b_op);
#pragma unroll
        for (int c = 0; c < KC; ++c) {
            const int kk = k0 + c;
            if constexpr (!A_KV) load_mn_runs<true, LDA, AV>(a, sA, gm, c, kk, a_op);
            if constexpr (!B_KV) load_mn_runs<false, LDB, BV>(b, sB, gn, c, kk, b_op);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) mac(acc[i][j], a[i][c], b[j][c]);
        }
    }

    // acc += A * B over all of K for work item (gm, gn): KC-wide steps, then the K remainder.
    template <int LDA, int LDB, class Acc, class AOp, class BOp>
    __device__ __forceinline__ static void fma_k_loop(Acc& acc, const a_type* sA, const b_type* sB, int gm, int gn,
                                                      const AOp& a_op, const BOp& b_op) {
        constexpr int KC = fma_tiling<Cfg>::KC, K_MAIN = k / KC * KC;
        // fully unrolled for short K: a remainder loop of a partial unroll costs registers
        constexpr int UNROLL = K_MAIN <= 16 ? (K_MAIN / KC > 0 ? K_MAIN / KC : 1) : (KC >= 4 ? 2 : 4 / KC);
#pragma unroll UNROLL
        for (int k0 = 0; k0 < K_MAIN; k0 += KC) fma_step<LDA, LDB, KC>(acc, sA, sB, gm, gn, k0, a_op, b_op);
#pragma unroll
        for (int kk = K_MAIN; kk < k; ++kk) fma_step<LDA, LDB, 1>(acc, sA, sB, gm, gn, kk, a_op, b_op);
    }

    // Each thread owns TM x TN outputs per work item and takes work items in turn.
    template <int LDA, int LDB, class Epilogue, class AOp, class BOp>
    __device__ static void run_fma(const a_type* sA, const b_type* sB, int tid, Epilogue& epi, const AOp& a_op,
                                   const BOp& b_op) {
        using L = fma_tiling<Cfg>;
        constexpr int TM = L::TM, TN = L::TN;
        constexpr int ITEMS = (L::WORK + threads - 1) / threads;  // work items per thread (as run_mma's tiles)
        if (!takes_part<threads>(tid)) return;
#pragma unroll 1
        for (int t = 0; t < ITEMS; ++t) {
            const int w = tid + t * threads;
            if (L::WORK % threads != 0 && t == ITEMS - 1 && w >= L::WORK) break;
            const int gm = w % L::GM, gn = w / L::GM;
            value_type acc[TM][TN];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = value_type{};
            fma_k_loop<LDA, LDB>(acc, sA, sB, gm, gn, a_op, b_op);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    const int row = L::row(gm, i), col = L::col(gn, j);
                    if ((L::FULL_M || row < m) && (L::FULL_N || col < n)) epi(row, col, acc[i][j]);
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
                tile_product<LDA, LDB>(frag.regs[t], sA, sB, shape::m0(tid, t), shape::n0(tid, t), tid % 32, a_op, b_op);
            } else {
                fma_k_loop<LDA, LDB>(frag.regs[t], sA, sB, shape::gm(tid, t), shape::gn(tid, t), a_op, b_op);
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

// Where element idx of a fragment shape S sits in C (item idx / PER_ITEM at S's row_base /
// col_base, element idx % PER_ITEM at its row_offset / col_offset), and whether it is in C.
template <class S> struct fragment_walk {
    __device__ __forceinline__ static int row(int tid, int idx) {
        return S::row_base(tid, idx / S::PER_ITEM) + S::row_offset(idx % S::PER_ITEM);
    }
    __device__ __forceinline__ static int col(int tid, int idx) {
        return S::col_base(tid, idx / S::PER_ITEM) + S::col_offset(idx % S::PER_ITEM);
    }
    __device__ __forceinline__ static bool valid(int tid, int idx) {
        return S::active(tid) && S::item_exists(tid, idx / S::PER_ITEM) && row(tid, idx) < S::m && col(tid, idx) < S::n;
    }
};

template <class Cfg> struct fragment_shape<Cfg, true> : fragment_walk<fragment_shape<Cfg, true>> {
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

    __device__ __forceinline__ static bool active(int tid) { return takes_part<WARPS * 32>(tid); }
    __device__ __forceinline__ static int tile(int tid, int t) { return tid / 32 + t * WARPS; }
    __device__ __forceinline__ static bool item_exists(int tid, int t) {
        return TILES % WARPS == 0 || tile(tid, t) < TILES;
    }
    __device__ __forceinline__ static int m0(int tid, int t) { return (tile(tid, t) % TILES_M) * WM; }
    __device__ __forceinline__ static int n0(int tid, int t) { return (tile(tid, t) / TILES_M) * WN; }
    // Element r of item t is at (row_base + row_offset(r), col_base + col_offset(r)): the lane
    // moves every element of a fragment alike (true of every atom in mma.cuh and of tile_order),
    // so the offsets are compile-time constants once r is.
    using order = tile_order<Cfg>;
    __device__ __forceinline__ static int row_base(int tid, int t) { return m0(tid, t) + order::c_row(tid % 32, 0, 0); }
    __device__ __forceinline__ static int col_base(int tid, int t) { return n0(tid, t) + order::c_col(tid % 32, 0, 0); }
    __device__ __forceinline__ static int row_offset(int r) {
        return order::c_row(0, r / (FN * CE), r % CE) - order::c_row(0, 0, 0);
    }
    __device__ __forceinline__ static int col_offset(int r) {
        return order::c_col(0, (r / CE) % FN, r % CE) - order::c_col(0, 0, 0);
    }
    static constexpr bool FULL_M = m % WM == 0, FULL_N = n % WN == 0;  // no element of any tile is outside C
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

template <class Cfg> struct fragment_shape<Cfg, false> : fragment_walk<fragment_shape<Cfg, false>> {
    using acc_type = typename Cfg::accumulator_type;
    using value_type = typename std_conditional<Cfg::is_complex, complex<acc_type>, acc_type>::type;
    static constexpr int m = Cfg::m, n = Cfg::n;
    using tiling = fma_tiling<Cfg>;
    static constexpr int TM = tiling::TM, TN = tiling::TN;
    static constexpr int GM = tiling::GM, GN = tiling::GN, WORK = tiling::WORK;
    static constexpr int ITEMS = (WORK + Cfg::threads - 1) / Cfg::threads;
    static constexpr int PER_ITEM = TM * TN;
    static constexpr int SIZE = ITEMS * PER_ITEM;
    using item_type = value_type[TM][TN];

    __device__ __forceinline__ static bool active(int tid) { return takes_part<Cfg::threads>(tid); }
    __device__ __forceinline__ static int work(int tid, int t) { return tid + t * Cfg::threads; }
    __device__ __forceinline__ static bool item_exists(int tid, int t) {
        return WORK % Cfg::threads == 0 || work(tid, t) < WORK;
    }
    __device__ __forceinline__ static int gm(int tid, int t) { return work(tid, t) % GM; }
    __device__ __forceinline__ static int gn(int tid, int t) { return work(tid, t) / GM; }
    __device__ __forceinline__ static int row_base(int tid, int t) { return tiling::row(gm(tid, t), 0); }
    __device__ __forceinline__ static int col_base(int tid, int t) { return tiling::col(gn(tid, t), 0); }
    __device__ __forceinline__ static int row_offset(int r) { return tiling::row_offset(r / TN); }
    __device__ __forceinline__ static int col_offset(int r) { return tiling::col_offset(r % TN); }
    static constexpr bool FULL_M = m % TM == 0, FULL_N = n % TN == 0;
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

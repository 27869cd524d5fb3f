// float64 products on int8 tensor cores by residues (blasdx.ozaki; docs/index.md, "float64 on int8").
//
// Each row i of A (and each column j of B) is scaled by a power of two 2^s_i so that its
// 2-norm is at most T, and rounded to integers A' (B'). With pairwise coprime moduli m_l <= 256
// whose product M exceeds 2 (T + sqrt(K) / 2)^2, every |(A' B')_ij| <= ||A'_i|| ||B'_j|| < M / 2
// (Cauchy-Schwarz), so the exact integer product is fixed by its residues modulo the m_l, each
// computed by an exact int8 x int8 -> int32 GEMM of residues whose epilogue stores it modulo m_l
// as a byte (kernels/hopper_residue_gemm.cu). Three kernels here, one pass each:
//   blasdx_ozaki_shifts   each row's scale exponent s_i (or a flag for inf / NaN);
//   blasdx_ozaki_slices   the scaled, rounded operand as int8 residues, [modulus][row][k] (K-major);
//   blasdx_ozaki_combine  the residue products back to float64 (Chinese remainder theorem as a
//                         fractional sum in 64-bit fixed point), unscaled: D = alpha * AB + beta * C.
// The prelude defines `ozaki_moduli` (the count) and the generated functions ozaki_modulus(l),
// ozaki_high_step(l) / ozaki_low_step(l) (the combine's integer steps, below), ozaki_product()
// (M as a double) and ozaki_norm() (T, a little below, as a double).
#include "blasdx/types.cuh"

namespace blasdx::ozaki {

using blasdx::i64;

//: Shift of a row holding inf or NaN (its results are NaN).
constexpr int kNonFinite = 0x7fffffff;
constexpr int kEmpty = -0x40000000;  // the exponent of a sum of squares with no term yet

// An integer |v| < 2^63 as three 21-bit parts, v = a 2^42 + b 2^21 + c (a signed, b and c in [0, 2^21)):
// its residue modulo any m <= 256 is then a few int32 multiply-adds, not a float64 division.
struct Parts {
    int a;
    unsigned b, c;
};
__device__ __forceinline__ Parts parts_of(double v) {
    const long long i = static_cast<long long>(v);  // exact: v is integer-valued, |v| < 2^63
    return {int(i >> 42), unsigned(i >> 21) & 0x1fffffu, unsigned(i) & 0x1fffffu};
}

// The symmetric residue of v in [-(M / 2), (M - 1) / 2]: s = a (2^42 mod M) + b (2^21 mod M) + c plus a
// multiple of M above 2^29 and M / 2 is in [0, 2^31) and congruent to v + M / 2; Barrett's quotient
// hi32(s floor(2^32 / M)) falls short of floor(s / M) by at most one, so one correction leaves
// (v + M / 2) mod M, and M / 2 is taken back.
template <int M>
__device__ __forceinline__ int residue(const Parts& p) {
    constexpr unsigned k21 = (1u << 21) % M, k42 = unsigned((1ull << 42) % M);
    constexpr unsigned lift = M * ((1u << 29) / M + 1) + M / 2;
    constexpr unsigned magic = unsigned((1ull << 32) / M);
    const unsigned s = unsigned(p.a * int(k42)) + p.b * k21 + p.c + lift;
    unsigned r = s - __umulhi(s, magic) * M;  // in [0, 2M)
    r = min(r, r - M);                        // r - M wraps above 2^31 when r < M
    return int(r) - M / 2;
}

// A sum of squares kept as sum * 4^exponent with every term scaled by the same power of two
// (no overflow or underflow for any float64), merged exactly by rescaling by powers of two.
struct Squares {
    double sum = 0.0;
    int exponent = kEmpty;

    __device__ __forceinline__ void rescale(int to) {
        sum = exponent == kEmpty ? 0.0 : scalbn(sum, 2 * (exponent - to));
        exponent = to;
    }
    __device__ __forceinline__ void add(double v) {  // v finite, not 0
        const int e = ilogb(v);
        if (e > exponent) rescale(e);
        const double t = scalbn(v, -exponent);
        sum = fma(t, t, sum);
    }
    __device__ __forceinline__ void merge(const Squares& o) {
        if (o.exponent == kEmpty) return;
        if (o.exponent > exponent) rescale(o.exponent);
        sum += o.exponent == exponent ? o.sum : scalbn(o.sum, 2 * (o.exponent - exponent));
    }
    // The largest s with 2-norm * 2^s <= target (0 for an all-zero row).
    __device__ __forceinline__ int shift_to(double target) const {
        if (exponent == kEmpty || sum == 0.0) return 0;
        const double root = sqrt(sum);  // the norm is root * 2^exponent
        int s = ilogb(target) - ilogb(root) - exponent;
        while (scalbn(root, exponent + s) > target) --s;
        while (scalbn(root, exponent + s + 1) <= target) ++s;
        return s;
    }
};

}  // namespace blasdx::ozaki

// Rows of an operand viewed as [rows][k] with element strides (row_stride, k_stride); block
// (32, 32) covers 32 rows, threadIdx.x runs along the contiguous dimension.
template <bool K_CONTIGUOUS>
__device__ void ozaki_shifts(const double* __restrict__ x, int rows, int k, blasdx::i64 row_stride,
                             blasdx::i64 k_stride, int* __restrict__ shift, double (&part_sum)[32][33],
                             int (&part_exponent)[32][33], int (&bad)[32][33]) {
    using namespace blasdx::ozaki;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.x * 32 + (K_CONTIGUOUS ? ty : tx);
    const int k0 = K_CONTIGUOUS ? tx : ty;
    Squares squares;
    bool non_finite = false;
    if (row < rows) {
        const double* line = x + row * row_stride;
        for (int kk = k0; kk < k; kk += 32) {
            const double v = fabs(line[kk * k_stride]);
            if (!(v <= 1.7976931348623157e308)) non_finite = true;  // inf or NaN
            else if (v != 0.0) squares.add(v);
        }
    }
    // merge over the K threads: threadIdx.x when K is contiguous, else threadIdx.y
    part_sum[ty][tx] = squares.sum;
    part_exponent[ty][tx] = squares.exponent;
    bad[ty][tx] = non_finite;
    __syncthreads();
    if (ty == 0) {
        const int r = tx;  // the row slot this thread finishes
        Squares total;
        int any = 0;
        for (int i = 0; i < 32; ++i) {
            Squares one;
            one.sum = K_CONTIGUOUS ? part_sum[r][i] : part_sum[i][r];
            one.exponent = K_CONTIGUOUS ? part_exponent[r][i] : part_exponent[i][r];
            total.merge(one);
            any |= K_CONTIGUOUS ? bad[r][i] : bad[i][r];
        }
        const int out = blockIdx.x * 32 + r;
        if (out < rows) shift[out] = any ? kNonFinite : total.shift_to(ozaki_norm());
    }
}

extern "C" __global__ void __launch_bounds__(1024) blasdx_ozaki_shifts(
    const double* __restrict__ x, int rows, int k, blasdx::i64 row_stride, blasdx::i64 k_stride,
    int* __restrict__ shift) {
    __shared__ double part_sum[32][33];
    __shared__ int part_exponent[32][33], bad[32][33];
    if (k_stride == 1) ozaki_shifts<true>(x, rows, k, row_stride, k_stride, shift, part_sum, part_exponent, bad);
    else ozaki_shifts<false>(x, rows, k, row_stride, k_stride, shift, part_sum, part_exponent, bad);
}

namespace blasdx::ozaki {

constexpr int kTileRows = 32, kTileK = 128, kThreads = 256, kTileStride = 137;
// Tile element (r, c) in shared memory: 16-element chunks padded to 17 and rows to 137, so the
// transposing loads and the 16-element reads of the writers meet few bank conflicts.
__device__ __forceinline__ int tile_index(int r, int c) { return r * kTileStride + (c >> 4) * 17 + (c & 15); }

// Four elements' residues for every modulus, one 4-byte store per modulus ([modulus][row][k] bytes).
template <int L>
__device__ __forceinline__ void write_residues(const Parts (&v)[4], signed char* out, i64 slice_stride) {
    if constexpr (L < ozaki_moduli) {
        constexpr int M = ozaki_modulus(L);
        unsigned packed = 0;
#pragma unroll
        for (int b = 0; b < 4; ++b) packed |= unsigned(residue<M>(v[b]) & 0xff) << (8 * b);
        *reinterpret_cast<unsigned*>(out + L * slice_stride) = packed;
        write_residues<L + 1>(v, out, slice_stride);
    }
}

template <bool K_CONTIGUOUS>
__device__ void slices(const double* __restrict__ x, int rows, int k, i64 row_stride, i64 k_stride,
                       const int* __restrict__ row_shift, signed char* __restrict__ out, int ld,
                       i64 slice_stride, double* tile, int* shift) {
    const int t = threadIdx.x;
    const int row0 = blockIdx.y * kTileRows, k_base = blockIdx.x * kTileK;
    if (t < kTileRows) {
        const int row = row0 + t;
        shift[t] = row < rows ? row_shift[row] : kNonFinite;
    }
    __syncthreads();
#pragma unroll 4
    for (int i = t; i < kTileRows * kTileK; i += kThreads) {
        const int r = K_CONTIGUOUS ? i / kTileK : i % kTileRows;
        const int c = K_CONTIGUOUS ? i % kTileK : i / kTileRows;
        const int row = row0 + r, kk = k_base + c;
        double v = 0.0;
        if (row < rows && kk < k && shift[r] != kNonFinite) v = rint(scalbn(x[row * row_stride + kk * k_stride], shift[r]));
        tile[tile_index(r, c)] = v;
    }
    __syncthreads();
    // Each warp writes whole 128-byte lines of every modulus: four consecutive K elements a thread, eight rows
    // a pass; one pass at a time (not unrolled), so that four elements' parts are all a thread holds.
    const int c = (t % 32) * 4, kk = k_base + c;
#pragma unroll 1
    for (int r = t / 32; r < kTileRows; r += kThreads / 32) {
        const int row = row0 + r;
        if (row >= rows || kk >= ld) continue;
        Parts v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = parts_of(tile[tile_index(r, c + j)]);
        write_residues<0>(v, out + row * i64(ld) + kk, slice_stride);
    }
}

}  // namespace blasdx::ozaki

// One block per 32 rows x 128 K; out is [moduli][rows][ld] int8 with ld a multiple of 16 (the
// columns from k to ld are written as zeros).
extern "C" __global__ void __launch_bounds__(256) blasdx_ozaki_slices(
    const double* __restrict__ x, int rows, int k, blasdx::i64 row_stride, blasdx::i64 k_stride,
    const int* __restrict__ row_shift, signed char* __restrict__ out, int ld, blasdx::i64 slice_stride) {
    using namespace blasdx::ozaki;
    __shared__ double tile[kTileRows * kTileStride];
    __shared__ int shift[kTileRows];
    if (k_stride == 1) slices<true>(x, rows, k, row_stride, k_stride, row_shift, out, ld, slice_stride, tile, shift);
    else slices<false>(x, rows, k, row_stride, k_stride, row_shift, out, ld, slice_stride, tile, shift);
}

namespace blasdx::ozaki {

// (sum over l of t_l / m_l) mod 1 for t_l = c_l (M / m_l)^-1 mod m_l: the exact product over M. c_l is the
// residue product modulo m_l, a byte (kernels/hopper_residue_gemm.cu). With 1 / m_l = h_l 2^-44 + e_l (h_l an
// integer, |e_l| < 2^-45), c_l (M / m_l)^-1 / m_l is c_l G_l 2^-44 + c_l P_l 2^-87 up to c_l 2^-88, where
// G_l = (M / m_l)^-1 h_l mod 2^44 and P_l rounds (M / m_l)^-1 e_l 2^87 (ozaki_high_step / ozaki_low_step).
// Both sums are integers: `high` is exact modulo 2^44 (terms below 2^52) and `low` stays within int64
// (terms below 2^58), added with wrap-around.
template <int L>
__device__ __forceinline__ void accumulate(const unsigned char* __restrict__ c, i64 slice_stride,
                                           unsigned long long& high, unsigned long long& low) {
    if constexpr (L < ozaki_moduli) {
        const unsigned long long v = c[L * slice_stride];
        high += v * ozaki_high_step(L);
        low += v * static_cast<unsigned long long>(ozaki_low_step(L));
        accumulate<L + 1>(c, slice_stride, high, low);
    }
}

}  // namespace blasdx::ozaki

// D = alpha * A B + beta * C from the residue products c ([moduli][m][n] bytes, row-major, each
// modulo its modulus) and the scale shifts of A's rows and B's columns. Rows stride over
// blockIdx.y, columns over the threads of blockIdx.x (no division per element).
extern "C" __global__ void __launch_bounds__(256) blasdx_ozaki_combine(
    const unsigned char* __restrict__ c_slices, int m, int n, const int* __restrict__ shift_a,
    const int* __restrict__ shift_b, const double* acc, blasdx::i64 acc_row, blasdx::i64 acc_col,
    double* d, blasdx::i64 d_row, blasdx::i64 d_col, double alpha, double beta) {
    using blasdx::i64;
    using namespace blasdx::ozaki;
    const i64 total = i64(m) * n;
    for (int row = blockIdx.y; row < m; row += gridDim.y) {
        const int sa = shift_a[row];
        for (int col = blockIdx.x * blockDim.x + threadIdx.x; col < n; col += gridDim.x * blockDim.x) {
            unsigned long long high = 0, low = 0;
            accumulate<0>(c_slices + i64(row) * n + col, total, high, low);
            // high's low 44 bits as a signed fraction in [-1/2, 1/2): a small product keeps its relative accuracy
            const long long whole = static_cast<long long>(high << 20) >> 20;
            double fraction = double(whole) * 0x1p-44 + double(static_cast<long long>(low)) * 0x1p-87;
            fraction -= rint(fraction);
            const int sb = shift_b[col];
            double v = (sa == kNonFinite || sb == kNonFinite) ? __longlong_as_double(0x7ff8000000000000ll)
                                                              : scalbn(fraction * ozaki_product(), -(sa + sb));
            v *= alpha;
            if (beta != 0.0) v = fma(beta, acc[row * acc_row + col * acc_col], v);
            d[row * d_row + col * d_col] = v;
        }
    }
}

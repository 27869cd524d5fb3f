// float64 products on int8 tensor cores by residues (blasdx.ozaki; docs/index.md, "float64 on int8").
//
// Each row of A (and each column of B) is scaled by a power of two so that its largest element
// is just below 2^p and rounded to integers A' (B'). For pairwise coprime moduli m_l <= 256 with
// product M > 2 K 4^p, the exact integer product A' B' lies in (-M/2, M/2) and is fixed by its
// residues modulo the m_l, each computed by an exact int8 x int8 -> int32 GEMM of residues.
// Three kernels, one pass each:
//   blasdx_ozaki_exponents  the binary exponent of each row's largest magnitude (or a flag for inf / NaN);
//   blasdx_ozaki_slices     the scaled, rounded operand as int8 residues, [modulus][row][k] (K-major);
//   blasdx_ozaki_combine    the residue products back to float64 (Chinese remainder theorem as a
//                           fractional sum in float64 pairs), unscaled, D = alpha * AB + beta * C.
// The prelude defines `ozaki_moduli` (the count) and the generated functions ozaki_modulus(l),
// ozaki_inverse(l) ((M / m_l)^-1 mod m_l), ozaki_hi(l) / ozaki_lo(l) (1 / m_l as an exact
// multiple of 2^-44 plus the rest) and ozaki_product() (M as a double).
#include "blasdx/types.cuh"

namespace blasdx::ozaki {

using blasdx::i64;

//: Exponent of a row holding inf or NaN (its results are NaN).
constexpr int kNonFinite = 0x7fffffff;

// The symmetric residue of an integer-valued double |v| <= 2^60, as an int in [-m/2, (m-1)/2].
template <int M>
__device__ __forceinline__ int residue(double v) {
    const double q = rint(v * (1.0 / M));
    int r = int(fma(-q, double(M), v)) % M;  // v - qM is a small integer: exact
    if (r > (M - 1) / 2) r -= M;
    if (r < -(M / 2)) r += M;
    return r;
}

// Row r's scale exponent: the binary exponent e of its largest magnitude (2^(e-1) <= max < 2^e;
// 0 for an all-zero row) or kNonFinite.
__device__ __forceinline__ int exponent_of(double largest, bool non_finite) {
    if (non_finite) return kNonFinite;
    return largest == 0.0 ? 0 : ilogb(largest) + 1;
}

}  // namespace blasdx::ozaki

// Rows of an operand viewed as [rows][k] with element strides (row_stride, k_stride); block
// (32, 32) covers 32 rows, threadIdx.x runs along the contiguous dimension.
template <bool K_CONTIGUOUS>
__device__ void ozaki_exponents(const double* __restrict__ x, int rows, int k, blasdx::i64 row_stride,
                                blasdx::i64 k_stride, int* __restrict__ exponent, double (&largest)[32][33],
                                int (&bad)[32][33]) {
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.x * 32 + (K_CONTIGUOUS ? ty : tx);
    const int k0 = K_CONTIGUOUS ? tx : ty;
    double m = 0.0;
    bool non_finite = false;
    if (row < rows) {
        const double* line = x + row * row_stride;
        for (int kk = k0; kk < k; kk += 32) {
            const double v = fabs(line[kk * k_stride]);
            non_finite |= !(v <= 1.7976931348623157e308);  // inf or NaN
            m = fmax(m, v);
        }
    }
    // reduce over the K threads: threadIdx.x when K is contiguous, else threadIdx.y
    largest[ty][tx] = m;
    bad[ty][tx] = non_finite;
    __syncthreads();
    if (ty == 0) {
        const int r = tx;  // the row slot this thread finishes
        double best = 0.0;
        int any = 0;
        for (int i = 0; i < 32; ++i) {
            best = fmax(best, K_CONTIGUOUS ? largest[r][i] : largest[i][r]);
            any |= K_CONTIGUOUS ? bad[r][i] : bad[i][r];
        }
        const int out = blockIdx.x * 32 + r;
        if (out < rows) exponent[out] = blasdx::ozaki::exponent_of(best, any);
    }
}

extern "C" __global__ void __launch_bounds__(1024) blasdx_ozaki_exponents(
    const double* __restrict__ x, int rows, int k, blasdx::i64 row_stride, blasdx::i64 k_stride,
    int* __restrict__ exponent) {
    __shared__ double largest[32][33];
    __shared__ int bad[32][33];
    if (k_stride == 1) ozaki_exponents<true>(x, rows, k, row_stride, k_stride, exponent, largest, bad);
    else ozaki_exponents<false>(x, rows, k, row_stride, k_stride, exponent, largest, bad);
}

namespace blasdx::ozaki {

constexpr int kTileRows = 32, kTileK = 128, kThreads = 256, kTileStride = 137;
// Tile element (r, c) in shared memory: 16-element chunks padded to 17 and rows to 137, so the
// transposing loads and the 16-element reads of the writers meet few bank conflicts.
__device__ __forceinline__ int tile_index(int r, int c) { return r * kTileStride + (c >> 4) * 17 + (c & 15); }

template <int L>
__device__ __forceinline__ void write_residues(const double (&v)[16], signed char* out, i64 slice_stride) {
    if constexpr (L < ozaki_moduli) {
        constexpr int M = ozaki_modulus(L);
        int words[4];
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            unsigned packed = 0;
#pragma unroll
            for (int b = 0; b < 4; ++b) packed |= unsigned(residue<M>(v[4 * w + b]) & 0xff) << (8 * b);
            words[w] = int(packed);
        }
        *reinterpret_cast<int4*>(out + L * slice_stride) = make_int4(words[0], words[1], words[2], words[3]);
        write_residues<L + 1>(v, out, slice_stride);
    }
}

template <bool K_CONTIGUOUS>
__device__ void slices(const double* __restrict__ x, int rows, int k, i64 row_stride, i64 k_stride,
                       const int* __restrict__ exponent, int p, signed char* __restrict__ out, int ld,
                       i64 slice_stride, double* tile, int* shift) {
    const int t = threadIdx.x;
    const int row0 = blockIdx.y * kTileRows, k_base = blockIdx.x * kTileK;
    if (t < kTileRows) {
        const int row = row0 + t;
        const int e = row < rows ? exponent[row] : kNonFinite;
        shift[t] = e == kNonFinite ? kNonFinite : p - e;
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
    const int r = t / 8, chunk = t % 8;  // 16 consecutive K elements of one row per thread
    const int row = row0 + r, kk = k_base + chunk * 16;
    if (row >= rows || kk >= ld) return;
    double v[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = tile[tile_index(r, chunk * 16 + j)];
    write_residues<0>(v, out + row * i64(ld) + kk, slice_stride);
}

}  // namespace blasdx::ozaki

// One block per 32 rows x 128 K; out is [moduli][rows][ld] int8 with ld a multiple of 16 (the
// columns from k to ld are written as zeros).
extern "C" __global__ void __launch_bounds__(256) blasdx_ozaki_slices(
    const double* __restrict__ x, int rows, int k, blasdx::i64 row_stride, blasdx::i64 k_stride,
    const int* __restrict__ exponent, int p, signed char* __restrict__ out, int ld, blasdx::i64 slice_stride) {
    using namespace blasdx::ozaki;
    __shared__ double tile[kTileRows * kTileStride];
    __shared__ int shift[kTileRows];
    if (k_stride == 1) slices<true>(x, rows, k, row_stride, k_stride, exponent, p, out, ld, slice_stride, tile, shift);
    else slices<false>(x, rows, k, row_stride, k_stride, exponent, p, out, ld, slice_stride, tile, shift);
}

namespace blasdx::ozaki {

// (sum over l of t_l / m_l) mod 1, for t_l = (c_l (M / m_l)^-1) mod m_l: the exact product over M.
template <int L>
__device__ __forceinline__ void accumulate(const int* __restrict__ c, i64 slice_stride, double& high, double& low) {
    if constexpr (L < ozaki_moduli) {
        constexpr int M = ozaki_modulus(L);
        int r = c[L * slice_stride] % M;
        if (r < 0) r += M;
        const int t = (r * ozaki_inverse(L)) % M;
        high += double(t) * ozaki_hi(L);  // t * hi is a multiple of 2^-44 below 2^9: exact, as is the sum
        high -= rint(high);
        low = fma(double(t), ozaki_lo(L), low);
        accumulate<L + 1>(c, slice_stride, high, low);
    }
}

}  // namespace blasdx::ozaki

// D = alpha * A B + beta * C from the residue products c ([moduli][m][n] int32, row-major) and
// the scale exponents of A's rows and B's columns. Grid-stride, one thread per element of D.
extern "C" __global__ void __launch_bounds__(256) blasdx_ozaki_combine(
    const int* __restrict__ c_slices, int m, int n, const int* __restrict__ exponent_a,
    const int* __restrict__ exponent_b, int p, const double* acc, blasdx::i64 acc_row, blasdx::i64 acc_col,
    double* d, blasdx::i64 d_row, blasdx::i64 d_col, double alpha, double beta) {
    using blasdx::i64;
    using namespace blasdx::ozaki;
    const i64 total = i64(m) * n;
    for (i64 i = blockIdx.x * i64(blockDim.x) + threadIdx.x; i < total; i += i64(gridDim.x) * blockDim.x) {
        const i64 row = i / n, col = i - row * n;
        double high = 0.0, low = 0.0;
        accumulate<0>(c_slices + i, total, high, low);
        double fraction = high + low;
        fraction -= rint(fraction);
        const int ea = exponent_a[row], eb = exponent_b[col];
        double v = (ea == kNonFinite || eb == kNonFinite) ? __longlong_as_double(0x7ff8000000000000ll)
                                                          : scalbn(fraction * ozaki_product(), ea + eb - 2 * p);
        v *= alpha;
        if (beta != 0.0) v = fma(beta, acc[row * acc_row + col * acc_col], v);
        d[row * d_row + col * d_col] = v;
    }
}

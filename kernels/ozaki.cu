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
//                         fractional sum kept exact in float64), unscaled: D = alpha * AB + beta * C.
// The prelude defines `ozaki_moduli` (the count) and the generated functions ozaki_modulus(l),
// ozaki_inverse(l) ((M / m_l)^-1 mod m_l), ozaki_hi(l) / ozaki_lo(l) (1 / m_l as an exact
// multiple of 2^-44 plus the rest), ozaki_product() (M as a double) and ozaki_norm() (T, a
// little below, as a double).
#include "blasdx/types.cuh"

namespace blasdx::ozaki {

using blasdx::i64;

//: Shift of a row holding inf or NaN (its results are NaN).
constexpr int kNonFinite = 0x7fffffff;
constexpr int kEmpty = -0x40000000;  // the exponent of a sum of squares with no term yet

// The symmetric residue of an integer-valued double |v| < 2^64, as an int in [-m/2, (m-1)/2].
template <int M>
__device__ __forceinline__ int residue(double v) {
    const double q = rint(v * (1.0 / M));
    int r = int(fma(-q, double(M), v)) % M;  // v - qM is a small integer: exact
    if (r > (M - 1) / 2) r -= M;
    if (r < -(M / 2)) r += M;
    return r;
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
    const int* __restrict__ row_shift, signed char* __restrict__ out, int ld, blasdx::i64 slice_stride) {
    using namespace blasdx::ozaki;
    __shared__ double tile[kTileRows * kTileStride];
    __shared__ int shift[kTileRows];
    if (k_stride == 1) slices<true>(x, rows, k, row_stride, k_stride, row_shift, out, ld, slice_stride, tile, shift);
    else slices<false>(x, rows, k, row_stride, k_stride, row_shift, out, ld, slice_stride, tile, shift);
}

namespace blasdx::ozaki {

// (sum over l of t_l / m_l) mod 1, for t_l = (c_l (M / m_l)^-1) mod m_l: the exact product over M.
// c_l is the residue product modulo m_l, a byte in [0, m_l) (kernels/hopper_residue_gemm.cu).
template <int L>
__device__ __forceinline__ void accumulate(const unsigned char* __restrict__ c, i64 slice_stride, double& high,
                                           double& low) {
    if constexpr (L < ozaki_moduli) {
        constexpr int M = ozaki_modulus(L);
        const int t = (int(c[L * slice_stride]) * ozaki_inverse(L)) % M;
        high += double(t) * ozaki_hi(L);  // t * hi is a multiple of 2^-44 below 2^9: exact, as is the sum
        high -= rint(high);
        low = fma(double(t), ozaki_lo(L), low);
        accumulate<L + 1>(c, slice_stride, high, low);
    }
}

}  // namespace blasdx::ozaki

// D = alpha * A B + beta * C from the residue products c ([moduli][m][n] bytes, row-major, each
// modulo its modulus) and the scale shifts of A's rows and B's columns. Grid-stride, one thread
// per element of D.
extern "C" __global__ void __launch_bounds__(256) blasdx_ozaki_combine(
    const unsigned char* __restrict__ c_slices, int m, int n, const int* __restrict__ shift_a,
    const int* __restrict__ shift_b, const double* acc, blasdx::i64 acc_row, blasdx::i64 acc_col,
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
        const int sa = shift_a[row], sb = shift_b[col];
        double v = (sa == kNonFinite || sb == kNonFinite) ? __longlong_as_double(0x7ff8000000000000ll)
                                                          : scalbn(fraction * ozaki_product(), -(sa + sb));
        v *= alpha;
        if (beta != 0.0) v = fma(beta, acc[row * acc_row + col * acc_col], v);
        d[row * d_row + col * d_col] = v;
    }
}

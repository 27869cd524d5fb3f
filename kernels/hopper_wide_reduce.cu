// Split-K finish of the wide engine: D = alpha * (sum of the splits' partial sums) + beta * C,
// in the engine's own type (f64 or f32).
//
// Expects the prelude to define `wide_reduce_type`. The workspace is [splits][batch][m][n], as
// hopper_wide_gemm.cu's split epilogue writes it; C and D have element strides (a batch stride
// of 0 broadcasts C). One thread per element of D, grid-stride.
#include "blasdx/types.cuh"

extern "C" __global__ void blasdx_hopper_wide_reduce(const wide_reduce_type* __restrict__ workspace,
                                                     const wide_reduce_type* c, wide_reduce_type* d, int m, int n,
                                                     int batch, int splits, blasdx::i64 c_row, blasdx::i64 c_col,
                                                     blasdx::i64 c_batch, blasdx::i64 d_row, blasdx::i64 d_col,
                                                     blasdx::i64 d_batch, wide_reduce_type alpha,
                                                     wide_reduce_type beta) {
    using blasdx::i64;
    const i64 matrix = i64(m) * n, total = matrix * batch;
    for (i64 i = blockIdx.x * i64(blockDim.x) + threadIdx.x; i < total; i += i64(gridDim.x) * blockDim.x) {
        const i64 p = i / matrix, rest = i - p * matrix;
        const i64 row = rest / n, col = rest - row * n;
        wide_reduce_type sum = 0;
        for (int s = 0; s < splits; ++s) sum += workspace[s * total + i];
        wide_reduce_type v = alpha * sum;
        if (beta != wide_reduce_type(0)) v += beta * c[p * c_batch + row * c_row + col * c_col];
        d[p * d_batch + row * d_row + col * d_col] = v;
    }
}

// Split-K finish: D = alpha * (sum of the splits' f32 partial sums) + beta * C.
//
// Expects the prelude to define `splitk_c_type`. The workspace is [splits][batch][m][n]
// f32, as hopper_gemm.cu's split epilogue writes it; C and D have element strides (a batch
// stride of 0 broadcasts C). One thread per element of D, grid-stride.
#include "blasdx/hopper/epilogue.cuh"

extern "C" __global__ void blasdx_splitk_reduce(const float* __restrict__ workspace, const splitk_c_type* c,
                                                splitk_c_type* d, int m, int n, int batch, int splits,
                                                blasdx::i64 c_row, blasdx::i64 c_col, blasdx::i64 c_batch,
                                                blasdx::i64 d_row, blasdx::i64 d_col, blasdx::i64 d_batch,
                                                float alpha, float beta) {
    using blasdx::i64;
    const i64 matrix = i64(m) * n, total = matrix * batch;
    const bool read_c = beta != 0.0f;
    for (i64 i = blockIdx.x * i64(blockDim.x) + threadIdx.x; i < total; i += i64(gridDim.x) * blockDim.x) {
        const i64 p = i / matrix, rest = i - p * matrix;
        const i64 row = rest / n, col = rest - row * n;
        float sum = 0.0f;
        for (int s = 0; s < splits; ++s) sum += workspace[s * total + i];
        float v = alpha * sum;
        if (read_c) v += beta * blasdx::hopper::load_float(c + p * c_batch + row * c_row + col * c_col);
        blasdx::hopper::store_float(d + p * d_batch + row * d_row + col * d_col, v);
    }
}

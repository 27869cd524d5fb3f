// Split-K finish: D = alpha * (sum of the splits' partial sums) + beta * C.
//
// Expects the prelude to define `splitk_c_type` and `splitk_acc_type` (float, or int for
// integer results: alpha, beta and the sums have it). The workspace is [splits][batch][m][n]
// of splitk_acc_type, as hopper_gemm.cu's split epilogue writes it; C and D have element strides (a batch
// stride of 0 broadcasts C). One thread per element of D, grid-stride.
#include "blasdx/hopper/epilogue.cuh"

extern "C" __global__ void blasdx_splitk_reduce(const splitk_acc_type* __restrict__ workspace, const splitk_c_type* c,
                                                splitk_c_type* d, int m, int n, int batch, int splits,
                                                blasdx::i64 c_row, blasdx::i64 c_col, blasdx::i64 c_batch,
                                                blasdx::i64 d_row, blasdx::i64 d_col, blasdx::i64 d_batch,
                                                splitk_acc_type alpha, splitk_acc_type beta) {
    using blasdx::i64;
    using V = splitk_acc_type;
    const i64 matrix = i64(m) * n, total = matrix * batch;
    const bool read_c = beta != V(0);
    for (i64 i = blockIdx.x * i64(blockDim.x) + threadIdx.x; i < total; i += i64(gridDim.x) * blockDim.x) {
        const i64 p = i / matrix, rest = i - p * matrix;
        const i64 row = rest / n, col = rest - row * n;
        V sum = V(0);
        for (int s = 0; s < splits; ++s) sum += workspace[s * total + i];
        V v = alpha * sum;
        if (read_c) v += beta * blasdx::hopper::load_value<V>(c + p * c_batch + row * c_row + col * c_col);
        blasdx::hopper::store_value(d + p * d_batch + row * d_row + col * d_col, v);
    }
}

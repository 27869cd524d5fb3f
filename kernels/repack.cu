// Batched repack: dst[p] = src[p] as a row-major rows x cols matrix with leading dimension
// ld_dst, from any element strides of src.
//
// Expects the prelude to define `repack_type` (an unsigned integer of the element's size).
// Gives an operand the layout TMA and the tensor cores need: K-major (tf32 wgmma reads no
// other), 16-byte aligned rows and batch strides. Blocks of 32 x 8 threads move 32 x 32
// tiles through shared memory (one column of padding: no bank conflicts): threads read
// along src's contiguous dimension and write along dst's rows, so both sides coalesce.
// Grid (column tiles, row tiles, problems); a block loops over problems z, z + gridDim.z...
#include "blasdx/types.cuh"

extern "C" __global__ void
    blasdx_repack(const repack_type* __restrict__ src, repack_type* __restrict__ dst, int rows, int cols,
                  blasdx::i64 src_row, blasdx::i64 src_col, blasdx::i64 src_batch, blasdx::i64 ld_dst,
                  blasdx::i64 dst_batch, int batch) {
    __shared__ repack_type tile[32][33];
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    const bool down = src_col != 1;  // src runs along rows: threads read down a column of the tile
    for (int p = blockIdx.z; p < batch; p += gridDim.z) {
        const repack_type* s = src + p * src_batch;
        repack_type* t = dst + p * dst_batch;
        for (int i = threadIdx.y; i < 32; i += 8) {
            const int dr = down ? int(threadIdx.x) : i, dc = down ? i : int(threadIdx.x);
            const int r = r0 + dr, c = c0 + dc;
            if (r < rows && c < cols) tile[dr][dc] = s[r * src_row + c * src_col];
        }
        __syncthreads();
        for (int i = threadIdx.y; i < 32; i += 8) {
            const int r = r0 + i, c = c0 + threadIdx.x;
            if (r < rows && c < cols) t[r * ld_dst + c] = tile[i][threadIdx.x];
        }
        __syncthreads();  // the next problem overwrites the tile
    }
}

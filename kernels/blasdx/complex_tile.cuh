// A 32 x 32 tile of a complex matrix staged in shared memory as its real and imaginary parts,
// for the kernels that rewrite complex operands as real ones (complex_expand.cu,
// complex_planes.cu). Blocks are 32 x 8 threads; the tiles are padded to 33 columns so that
// reads along either dimension of a tile hit distinct banks.
#pragma once

#include "blasdx/types.cuh"

namespace blasdx {

// Reads tile (r0, c0) of the rows x cols complex matrix `src` (interleaved parts, element
// strides src_row and src_col in complex elements) into re / im, threads x running along the
// source's contiguous dimension, and waits for the whole block. Elements outside the matrix
// are left as they were.
template <class T>
__device__ __forceinline__ void stage_complex_tile(T (&re)[32][33], T (&im)[32][33], const T* __restrict__ src,
                                                   int r0, int c0, int rows, int cols, i64 src_row, i64 src_col) {
    const bool down = src_col != 1;  // the source runs along its rows: threads read down a column of the tile
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int dr = down ? int(threadIdx.x) : i, dc = down ? i : int(threadIdx.x);
        const int r = r0 + dr, c = c0 + dc;
        if (r < rows && c < cols) {
            const T* e = src + 2 * (r * src_row + c * src_col);
            re[dr][dc] = e[0];
            im[dr][dc] = e[1];
        }
    }
    __syncthreads();
}

// The loop both rewriting kernels share: for each problem p = blockIdx.z, blockIdx.z +
// gridDim.z, ... below batch (src problems src_batch complex elements apart, dst problems
// dst_batch parts apart), stages tile (blockIdx.y, blockIdx.x) of the source and calls
// write(re, im, t, r0, c0) with t the problem's destination and (r0, c0) the tile's first
// element; the block waits before the next problem overwrites the tiles.
template <class T, class Write>
__device__ __forceinline__ void rewrite_complex_tiles(const T* __restrict__ src, T* __restrict__ dst, int rows,
                                                      int cols, i64 src_row, i64 src_col, i64 src_batch,
                                                      i64 dst_batch, int batch, Write write) {
    __shared__ T re[32][33];
    __shared__ T im[32][33];
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    for (int p = blockIdx.z; p < batch; p += gridDim.z) {
        stage_complex_tile(re, im, src + 2 * p * src_batch, r0, c0, rows, cols, src_row, src_col);
        write(re, im, dst + p * dst_batch, r0, c0);
        __syncthreads();
    }
}

}  // namespace blasdx

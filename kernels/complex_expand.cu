// Complex operands of a real GEMM: a complex K x N matrix B becomes the real 2K x 2N matrix
//
//     [ re  im ]      element (k, n) of B = re + i im fills rows 2k, 2k+1 and columns 2n, 2n+1,
//     [-im  re ]
//
// so that a complex A read as the real M x 2K matrix of its interleaved parts times this
// matrix is the complex product A B read as the real M x 2N matrix of its interleaved parts:
// four real products per complex one, summed by the real GEMM.
//
// Expects the prelude to define `part_type` (float or double). The result is column-major
// (2K contiguous: the K-major layout TMA and the tensor cores read), with leading dimension
// ld_dst and problems dst_batch elements apart. Blocks of 32 x 8 threads move 32 x 32
// tiles of B through shared memory, so that reads run along B's contiguous dimension and
// writes along the result's columns. Grid (column tiles, row tiles, problems); a block loops
// over problems z, z + gridDim.z, ...
#include "blasdx/complex_tile.cuh"

extern "C" __global__ void
    blasdx_complex_expand(const part_type* __restrict__ src, part_type* __restrict__ dst, int rows, int cols,
                          blasdx::i64 src_row, blasdx::i64 src_col, blasdx::i64 src_batch, blasdx::i64 ld_dst,
                          blasdx::i64 dst_batch, int batch) {
    blasdx::rewrite_complex_tiles(src, dst, rows, cols, src_row, src_col, src_batch, dst_batch, batch,
                                  [=](const part_type (&re)[32][33], const part_type (&im)[32][33], part_type* t,
                                      int r0, int c0) {
        // thread x walks K (the result's contiguous dimension); i walks the tile's columns
        for (int i = threadIdx.y; i < 32; i += 8) {
            const int r = r0 + threadIdx.x, c = c0 + i;
            if (r < rows && c < cols) {
                const part_type a = re[threadIdx.x][i], b = im[threadIdx.x][i];
                part_type* even = t + (2 * blasdx::i64(c)) * ld_dst + 2 * r;  // column 2n: (re, -im)
                part_type* odd = even + ld_dst;                                // column 2n + 1: (im, re)
                even[0] = a;
                even[1] = -b;
                odd[0] = b;
                odd[1] = a;
            }
        }
    });
}

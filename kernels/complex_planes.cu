// Complex products as three real ones (Gauss): with A = Ar + i Ai and B = Br + i Bi,
//
//     T1 = Ar Br,  T2 = Ai Bi,  T3 = (Ar + Ai)(Br + Bi),   A B = (T1 - T2) + i (T3 - T1 - T2),
//
// one real product fewer than the four of the textbook formula. blasdx_complex_planes writes
// a complex matrix as its three real planes (re, im, re + im), blasdx_complex_combine puts the
// three real results back together into a complex D (with real alpha and beta).
//
// Expects the prelude to define `part_type` (float or double).
#include "blasdx/complex_tile.cuh"

// Planes p = 0, 1, 2 (re, im, re + im) of a batch of complex rows x cols matrices (element
// strides src_row, src_col, src_batch, in complex elements), each written row-major with
// leading dimension ld_dst at dst + p * plane + problem * dst_batch. Blocks of 32 x 8 threads
// move 32 x 32 tiles through shared memory, so that reads run along the source's contiguous
// dimension and writes along the planes' rows. Grid (column tiles, row tiles, problems).
extern "C" __global__ void
    blasdx_complex_planes(const part_type* __restrict__ src, part_type* __restrict__ dst, int rows, int cols,
                          blasdx::i64 src_row, blasdx::i64 src_col, blasdx::i64 src_batch, blasdx::i64 ld_dst,
                          blasdx::i64 dst_batch, blasdx::i64 plane, int batch) {
    blasdx::rewrite_complex_tiles(src, dst, rows, cols, src_row, src_col, src_batch, dst_batch, batch,
                                  [=](const part_type (&re)[32][33], const part_type (&im)[32][33], part_type* t,
                                      int r0, int c0) {
        for (int i = threadIdx.y; i < 32; i += 8) {
            const int r = r0 + i, c = c0 + threadIdx.x;
            if (r < rows && c < cols) {
                const part_type a = re[i][threadIdx.x], b = im[i][threadIdx.x];
                part_type* at = t + r * ld_dst + c;
                at[0] = a;
                at[plane] = b;
                at[2 * plane] = a + b;
            }
        }
    });
}

// D = alpha * ((T1 - T2) + i (T3 - T1 - T2)) + beta * D for a batch of rows x cols complex D
// (element strides d_row, d_col, d_batch in complex elements; beta == 0 never reads D). The
// planes T1, T2, T3 are row-major with leading dimension ld_t, problems t_batch apart and
// planes `plane` apart. Threads walk D along its contiguous dimension (grid-stride loop).
extern "C" __global__ void
    blasdx_complex_combine(const part_type* __restrict__ t, part_type* __restrict__ d, int rows, int cols,
                           blasdx::i64 ld_t, blasdx::i64 t_batch, blasdx::i64 plane, blasdx::i64 d_row,
                           blasdx::i64 d_col, blasdx::i64 d_batch, int batch, part_type alpha, part_type beta) {
    const blasdx::i64 per = blasdx::i64(rows) * cols, total = per * batch;
    const bool along_rows = d_col == 1 || cols == 1;  // D's rows are contiguous
    for (blasdx::i64 i = blasdx::i64(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
         i += blasdx::i64(gridDim.x) * blockDim.x) {
        const blasdx::i64 p = i / per, e = i - p * per;
        const blasdx::i64 r = along_rows ? e / cols : e % rows, c = along_rows ? e % cols : e / rows;
        const part_type* at = t + p * t_batch + r * ld_t + c;
        const part_type t1 = at[0], t2 = at[plane], t3 = at[2 * plane];
        part_type re = alpha * (t1 - t2), im = alpha * (t3 - t1 - t2);
        part_type* out = d + 2 * (p * d_batch + r * d_row + c * d_col);
        if (beta != part_type(0)) {
            re += beta * out[0];
            im += beta * out[1];
        }
        out[0] = re;
        out[1] = im;
    }
}

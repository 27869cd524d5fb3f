// The groups of a K-grouped product (grouped_mm's 2D x 2D form) copied with each group's K range
// padded with zeros to whole K steps: dst[o][p] for o < other (M of x, N of w) and p < the padded
// K, from src[o * src_o + k * src_k]. Group g's K range [offs[g - 1], offs[g]) starts at step
// first[g] of the table (blasdx/hopper/group_scheduler.cuh, built in steps of STEP elements), so
// the GEMM's K steps never mix two groups. dst is K-major with rows of ld_dst elements.
//
// Expects the prelude to define `pad_type` (an unsigned integer of the element's size) and
// `PAD_STEP` (the GEMM's K step). 32 x 8 threads move 32 x 32 tiles through shared memory:
// reads along src's contiguous dimension, writes along dst's rows. Grid-stride over tiles.
#include "blasdx/types.cuh"
#include "blasdx/hopper/group_scheduler.cuh"

extern "C" __global__ void __launch_bounds__(256)
    blasdx_grouped_pad(const pad_type* __restrict__ src, pad_type* __restrict__ dst, const int* offs, int groups,
                       int k, int other, blasdx::i64 src_k, blasdx::i64 src_o, blasdx::i64 ld_dst, int padded) {
    using namespace blasdx::hopper;
    extern __shared__ int table_storage[];  // GroupTable::bytes(groups) bytes
    __shared__ pad_type tile[32][33];
    const GroupTable table(table_storage, groups);
    table.build<PAD_STEP, 256>(GROUPS_CONTIGUOUS, offs, groups, k);
    const int filled = min(table.first[groups] * PAD_STEP, padded);  // the padded K the GEMM reads
    const int tiles_p = (filled + 31) / 32, tiles_o = (other + 31) / 32;
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const bool along_k = src_k == 1;  // src contiguous along K: threads read along p
    for (int t = blockIdx.x; t < tiles_p * tiles_o; t += gridDim.x) {
        const int p0 = (t % tiles_p) * 32, o0 = (t / tiles_p) * 32;
        for (int i = ty; i < 32; i += 8) {
            const int dp = along_k ? tx : i, dol = along_k ? i : tx;
            const int p = p0 + dp, o = o0 + dol;
            pad_type v = 0;
            if (p < filled && o < other) {
                const int g = group_holding(table.first, groups, p / PAD_STEP);
                const int kk = table.start[g] + (p - table.first[g] * PAD_STEP);
                if (kk < table.end[g]) v = src[o * src_o + kk * src_k];
            }
            tile[dol][dp] = v;
        }
        __syncthreads();
        for (int i = ty; i < 32; i += 8) {
            const int p = p0 + tx, o = o0 + i;
            if (p < filled && o < other) dst[o * ld_dst + p] = tile[i][tx];
        }
        __syncthreads();  // the next tile overwrites this one
    }
}

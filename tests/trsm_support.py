"""What the TRSM tests share: a user's kernel that solves with the device API."""

from __future__ import annotations

#: One block solves TRSM::batches_per_block systems of a batch stored tightly (leading dimensions
#: the descriptor's): load A and B, execute, store X over B. Blocks of up to 256 threads.
SOLVE_KERNEL = r"""
extern "C" __global__ void __launch_bounds__(256, 1)
solve(const TRSM::a_value_type* a, TRSM::b_value_type* b, TRSM::scalar_value_type alpha, int batch) {
    extern __shared__ __align__(16) unsigned char smem[];
    auto [sA, sB] = TRSM::slice_shared_memory(smem);
    const long long first = (long long)blockIdx.x * TRSM::batches_per_block;
    for (int g = 0; g < TRSM::batches_per_block && first + g < batch; ++g) {
        TRSM::load_a(a + (first + g) * TRSM::a_size, sA + g * TRSM::a_stride);
        TRSM::load_b(b + (first + g) * TRSM::b_size, sB + g * TRSM::b_stride);
    }
    TRSM::copy_wait();
    TRSM::execute(alpha, sA, sB);
    for (int g = 0; g < TRSM::batches_per_block && first + g < batch; ++g) {
        TRSM::store_b(sB + g * TRSM::b_stride, b + (first + g) * TRSM::b_size);
    }
}
"""

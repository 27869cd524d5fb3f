"""The CUDA C++ kernels of the fusion tests: every form of the device API over global matrices.

Each kernel multiplies problem ``blockIdx.x`` of tightly stored global operands (leading
dimension = inner extent, problems one after another), with ``A_OP`` / ``B_OP`` the load
transforms a test puts in (``source(...).replace("A_OP", ...)``). tests/test_fusion.py compiles
the register and shared-memory API for every type, tests/test_wgmma_fusion.py and
tests/test_wgmma_register_a.py every form on wgmma plans; their GPU twins run the same source.
"""

from __future__ import annotations

#: What every kernel shares: the launch bound, the problem strides, C's element index and the
#: load of a problem's A and B into shared memory.
PRELUDE = r"""
#ifndef MAX_THREADS
#define MAX_THREADS GEMM::max_threads_per_block, 1
#endif
constexpr long long A_STRIDE = GEMM::a_inner * GEMM::a_outer, B_STRIDE = GEMM::b_inner * GEMM::b_outer;
constexpr long long C_STRIDE = GEMM::c_inner * GEMM::c_outer;
using TC = GEMM::c_value_type;
using S = GEMM::scalar_value_type;

__device__ __forceinline__ long long c_at(int row, int col) {
    return GEMM::c_row_major ? (long long)row * GEMM::c_inner + col : row + (long long)col * GEMM::c_inner;
}

// Problem blockIdx.x's A and B copied into the shared memory they are sliced from, waited for.
template <class Buffers>
__device__ __forceinline__ Buffers load_ab(const GEMM::a_value_type* a, const GEMM::b_value_type* b, Buffers s) {
    const long long p = blockIdx.x;
    GEMM::load_a<GEMM::a_inner>(a + p * A_STRIDE, s.a);
    GEMM::load_b<GEMM::b_inner>(b + p * B_STRIDE, s.b);
    GEMM::copy_wait();
    return s;
}
"""

#: The kernels by name: ``register_api`` (execute into a returned accumulator), ``twice`` (two
#: products into one accumulator: C = 2 alpha A B + beta C), ``elements`` (the accumulator walked
#: by hand: row, col, is_valid, get, set, transform, for_each), ``user_fill`` (sA and sB filled
#: with ordinary stores at a_index / b_index, then shared_fence()) and ``shared_api`` (the
#: shared-memory execute with C in shared memory).
BODIES = {
    "register_api": r"""
    auto [sA, sB] = load_ab(a, b, GEMM::slice_shared_memory_ab(smem));
    auto acc = GEMM::execute(sA, sB, A_OP, B_OP);
    acc.axpby(alpha, beta, c + blockIdx.x * C_STRIDE, GEMM::c_inner);
""",
    "twice": r"""
    auto [sA, sB] = load_ab(a, b, GEMM::slice_shared_memory_ab(smem));
    GEMM::accumulator acc;
    GEMM::execute(sA, sB, acc, A_OP, B_OP);
    GEMM::execute(sA, sB, acc, A_OP, B_OP);
    acc.axpby(alpha, beta, c + blockIdx.x * C_STRIDE, GEMM::c_inner);
""",
    "elements": r"""
    auto [sA, sB] = load_ab(a, b, GEMM::slice_shared_memory_ab(smem));
    const long long p = blockIdx.x;
    auto acc = GEMM::execute(sA, sB, A_OP, B_OP);
    acc.transform([&](float v) { return v * alpha; });
#pragma unroll
    for (int i = 0; i < acc.size; ++i) {
        if (acc.is_valid(i)) {
            const long long at = c_at(acc.row(i), acc.col(i));
            const float old = beta == S(0) ? 0.0f : beta * float(c[p * C_STRIDE + at]);
            acc.set(i, acc.get(i) + GEMM::accumulator_value_type(old));
        }
    }
    acc.for_each([&](int row, int col, GEMM::accumulator_value_type v) { c[p * C_STRIDE + c_at(row, col)] = TC(v); });
""",
    "user_fill": r"""
    auto [sA, sB] = GEMM::slice_shared_memory_ab(smem);
    const long long p = blockIdx.x;
    for (int i = threadIdx.x; i < GEMM::m * GEMM::k; i += blockDim.x) {
        const int row = i / GEMM::k, col = i % GEMM::k;
        sA[GEMM::a_index(row, col)] = a[p * A_STRIDE + (GEMM::a_row_major ? i : row + col * GEMM::m)];
    }
    for (int i = threadIdx.x; i < GEMM::k * GEMM::n; i += blockDim.x) {
        const int row = i / GEMM::n, col = i % GEMM::n;
        sB[GEMM::b_index(row, col)] = b[p * B_STRIDE + (GEMM::b_row_major ? i : row + col * GEMM::k)];
    }
    GEMM::shared_fence();
    __syncthreads();
    auto acc = GEMM::execute(sA, sB, A_OP, B_OP);
    acc.axpby(alpha, beta, c + p * C_STRIDE, GEMM::c_inner);
""",
    "shared_api": r"""
    auto buffers = GEMM::slice_shared_memory(smem);
    GEMM::load_c<GEMM::c_inner>(c + blockIdx.x * C_STRIDE, buffers.c);
    auto [sA, sB, sC] = load_ab(a, b, buffers);
    GEMM::execute(alpha, sA, sB, beta, sC, A_OP, B_OP);
    __syncthreads();
    GEMM::store_c<GEMM::c_inner>(sC, c + blockIdx.x * C_STRIDE);
""",
}


def _entry(name: str, body: str) -> str:
    """Kernel ``name`` (a, b, c, alpha, beta: problem blockIdx.x of each), ``body`` its statements after the
    dynamic shared memory's declaration."""
    return (f"""
extern "C" __global__ void __launch_bounds__(MAX_THREADS)
{name}(const GEMM::a_value_type* a, const GEMM::b_value_type* b, GEMM::c_value_type* c,
             GEMM::scalar_value_type alpha, GEMM::scalar_value_type beta) {{
    extern __shared__ __align__(16) unsigned char smem[];
""" + body.lstrip("\n") + "}\n")


KERNELS = {name: _entry(name, body) for name, body in BODIES.items()}


def source(*names: str) -> str:
    """The prelude and the kernels ``names`` (A_OP and B_OP still to be replaced)."""
    return PRELUDE + "".join(KERNELS[name] for name in names)

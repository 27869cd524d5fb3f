// One cuBLASDx descriptor per translation unit, for the blasdx benchmarks.
//
// cublasdx_harness.py writes a .cu per case: the defines of CASE_M, CASE_N, CASE_K, CASE_TA,
// CASE_TB, CASE_TC and CASE_NAME, then this file's text. The library built from it exports
// plain C host functions that benchmarks load with ctypes:
//
//   cublasdx_batched        C[i] = alpha A[i] B[i] + beta C[i], one problem per block (a kernel
//                           that never reads C when beta == 0),
//                           contiguous row-major [batch, rows, cols] operands
//   cublasdx_block_compute  A and B loaded to shared memory once, then acc += A B
//                           `repeats` times with the register API; C[block] = acc
//   cublasdx_block_dim, cublasdx_shared_memory, cublasdx_max_active_blocks, cublasdx_case
//
// All operands use the descriptor's suggested shared-memory layouts and MaxAlignment.

#include <cuda_runtime.h>
#include <cublasdx.hpp>

#include <type_traits>

#if !defined(CASE_M) || !defined(CASE_N) || !defined(CASE_K) || !defined(CASE_TA) || !defined(CASE_TB) || \
    !defined(CASE_TC) || !defined(CASE_NAME)
#error "define CASE_M, CASE_N, CASE_K, CASE_TA, CASE_TB, CASE_TC and CASE_NAME before including case.cu"
#endif

namespace bench {

using Gemm = decltype(cublasdx::Size<CASE_M, CASE_N, CASE_K>() +
                      cublasdx::Precision<CASE_TA, CASE_TB, CASE_TC>() +
                      cublasdx::Type<cublasdx::type::real>() +
                      cublasdx::Function<cublasdx::function::MM>() +
                      cublasdx::Arrangement<cublasdx::row_major, cublasdx::row_major, cublasdx::row_major>() +
                      cublasdx::MaxAlignment() + cublasdx::SM<900>() + cublasdx::Block());

using TA = typename Gemm::a_value_type;
using TB = typename Gemm::b_value_type;
using TC = typename Gemm::c_value_type;

constexpr unsigned kThreads = Gemm::max_threads_per_block;
constexpr unsigned kAlignA = cublasdx::alignment_of<Gemm>::a;
constexpr unsigned kAlignB = cublasdx::alignment_of<Gemm>::b;
constexpr unsigned kAlignC = cublasdx::alignment_of<Gemm>::c;
constexpr long long kSizeA = static_cast<long long>(CASE_M) * CASE_K;
constexpr long long kSizeB = static_cast<long long>(CASE_K) * CASE_N;
constexpr long long kSizeC = static_cast<long long>(CASE_M) * CASE_N;

// A and B side by side in their suggested layouts.
constexpr unsigned kSmemAB =
    cublasdx::get_shared_storage_size_ab<Gemm>(Gemm::suggest_layout_smem_a(), Gemm::suggest_layout_smem_b());
// C staged in its suggested layout over the A/B space once the product is done.
constexpr unsigned kSmemC = static_cast<unsigned>(cublasdx::cosize(Gemm::suggest_layout_smem_c()) * sizeof(TC));
constexpr unsigned kSmemBatched = kSmemAB > kSmemC ? kSmemAB : kSmemC;
constexpr unsigned kSmemCompute = kSmemAB;
static_assert(kSmemBatched <= 227 * 1024,
              "harness: the operands need more shared memory than the 227 KB an sm_90 block can have");

template <class T>
__device__ __forceinline__ T scalar(double v) {
    if constexpr (std::is_same_v<T, double> || std::is_integral_v<T>) {
        return static_cast<T>(v);
    } else {
        return static_cast<T>(static_cast<float>(v));
    }
}

// Global A and B of problem `item` into shared memory; returns the two shared tensors.
__device__ __forceinline__ auto load_ab(const TA* a, const TB* b, long long item, unsigned char* smem) {
    auto [pa, pb] = cublasdx::slice_shared_memory_ab<Gemm>(smem, Gemm::suggest_layout_smem_a(),
                                                            Gemm::suggest_layout_smem_b());
    auto gA = cublasdx::make_tensor(a + item * kSizeA, Gemm::get_layout_gmem_a());
    auto gB = cublasdx::make_tensor(b + item * kSizeB, Gemm::get_layout_gmem_b());
    auto sA = cublasdx::make_tensor(pa, Gemm::suggest_layout_smem_a());
    auto sB = cublasdx::make_tensor(pb, Gemm::suggest_layout_smem_b());
    cublasdx::copy<Gemm, kAlignA>(gA, sA);
    cublasdx::copy<Gemm, kAlignB>(gB, sB);
    cublasdx::copy_wait();
    return cute::make_tuple(sA, sB);
}

// HasBeta = false never reads C (and keeps the second fragment's registers free).
template <bool HasBeta>
__global__ void __launch_bounds__(kThreads)
batched_kernel(const TA* a, const TB* b, TC* c, double alpha_in, double beta_in) {
    extern __shared__ __align__(128) unsigned char smem[];
    const long long item = blockIdx.x;
    const TC alpha = scalar<TC>(alpha_in);
    const TC beta = scalar<TC>(beta_in);

    auto [sA, sB] = load_ab(a, b, item, smem);
    auto [acc, partitioner] = Gemm().execute(sA, sB);
    __syncthreads();  // every warp is done with A and B: C may now overwrite them

    auto gC = cublasdx::make_tensor(c + item * kSizeC, Gemm::get_layout_gmem_c());
    auto sC = cublasdx::make_tensor(reinterpret_cast<TC*>(smem), Gemm::suggest_layout_smem_c());
    if constexpr (!HasBeta) {
        cublasdx::axpby(alpha, acc, beta, acc);  // beta == 0: acc = alpha acc
        cublasdx::copy_fragment<kAlignC>(acc, sC, partitioner);
    } else {
        cublasdx::copy<Gemm, kAlignC>(gC, sC);
        cublasdx::copy_wait();
        auto old = cublasdx::make_fragment_like(acc);
        cublasdx::copy_fragment<kAlignC>(sC, old, partitioner);
        cublasdx::axpby(alpha, acc, beta, old);
        cublasdx::copy_fragment<kAlignC>(old, sC, partitioner);
    }
    __syncthreads();
    cublasdx::copy<Gemm, kAlignC>(sC, gC);
}

__global__ void __launch_bounds__(kThreads)
compute_kernel(const TA* a, const TB* b, TC* c, int repeats) {
    extern __shared__ __align__(128) unsigned char smem[];
    auto [sA, sB] = load_ab(a, b, 0, smem);
    auto [acc, partitioner] = Gemm().execute(sA, sB);
    for (int r = 1; r < repeats; ++r) {
        Gemm().execute(sA, sB, acc);
    }
    auto gC = cublasdx::make_tensor(c + blockIdx.x * kSizeC, Gemm::get_layout_gmem_c());
    cublasdx::copy_fragment<kAlignC>(acc, gC, partitioner);
}

template <class Kernel>
cudaError_t allow_shared_memory(Kernel kernel, unsigned bytes) {
    if (bytes <= 48 * 1024) {
        return cudaSuccess;
    }
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

cudaError_t allow_batched_shared_memory() {
    const cudaError_t err = allow_shared_memory(batched_kernel<false>, kSmemBatched);
    return err != cudaSuccess ? err : allow_shared_memory(batched_kernel<true>, kSmemBatched);
}

}  // namespace bench

extern "C" {

// Message of a cudaError_t returned by the functions below.
const char* cublasdx_error_string(int err) { return cudaGetErrorString(static_cast<cudaError_t>(err)); }

// Case name, as the harness wrote it.
const char* cublasdx_case() { return CASE_NAME; }

// cuBLASDx version (e.g. 400 for 0.4.0).
int cublasdx_version() { return CUBLASDX_VERSION; }

// Block dimensions of both kernels (the descriptor's suggested block_dim).
void cublasdx_block_dim(unsigned* xyz) {
    xyz[0] = bench::Gemm::block_dim.x;
    xyz[1] = bench::Gemm::block_dim.y;
    xyz[2] = bench::Gemm::block_dim.z;
}

// Dynamic shared memory in bytes: kernel 0 = batched, 1 = block compute.
unsigned cublasdx_shared_memory(int kernel) { return kernel == 0 ? bench::kSmemBatched : bench::kSmemCompute; }

// Active blocks per SM of kernel 0 (batched) or 1 (block compute) into *blocks; returns a cudaError_t.
int cublasdx_max_active_blocks(int kernel, int* blocks) {
    cudaError_t err;
    if (kernel == 0) {
        err = bench::allow_batched_shared_memory();
        if (err == cudaSuccess) {
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, bench::batched_kernel<false>, bench::kThreads,
                                                                bench::kSmemBatched);
        }
    } else {
        err = bench::allow_shared_memory(bench::compute_kernel, bench::kSmemCompute);
        if (err == cudaSuccess) {
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, bench::compute_kernel, bench::kThreads,
                                                                bench::kSmemCompute);
        }
    }
    return static_cast<int>(err);
}

// C = alpha A B + beta C for `batch` problems; returns a cudaError_t.
int cublasdx_batched(const void* a, const void* b, void* c, long long batch, double alpha, double beta,
                     void* stream) {
    static cudaError_t configured = bench::allow_batched_shared_memory();
    if (configured != cudaSuccess) {
        return static_cast<int>(configured);
    }
    if (batch <= 0 || batch > 0x7fffffffLL) {
        return batch == 0 ? 0 : static_cast<int>(cudaErrorInvalidValue);
    }
    const auto kernel = beta == 0.0 ? bench::batched_kernel<false> : bench::batched_kernel<true>;
    kernel<<<static_cast<unsigned>(batch), bench::Gemm::block_dim, bench::kSmemBatched,
             static_cast<cudaStream_t>(stream)>>>(
        static_cast<const bench::TA*>(a), static_cast<const bench::TB*>(b), static_cast<bench::TC*>(c), alpha, beta);
    return static_cast<int>(cudaGetLastError());
}

// `blocks` blocks each compute C[block] = repeats * A B from shared memory; returns a cudaError_t.
int cublasdx_block_compute(const void* a, const void* b, void* c, int repeats, int blocks, void* stream) {
    static cudaError_t configured = bench::allow_shared_memory(bench::compute_kernel, bench::kSmemCompute);
    if (configured != cudaSuccess) {
        return static_cast<int>(configured);
    }
    if (blocks <= 0 || repeats <= 0) {
        return static_cast<int>(cudaErrorInvalidValue);
    }
    bench::compute_kernel<<<blocks, bench::Gemm::block_dim, bench::kSmemCompute, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const bench::TA*>(a), static_cast<const bench::TB*>(b), static_cast<bench::TC*>(c), repeats);
    return static_cast<int>(cudaGetLastError());
}

}  // extern "C"

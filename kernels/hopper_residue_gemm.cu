// The int8 residue products of float64 emulation (blasdx.engine.ozaki) on the Hopper engine,
// each result stored as one byte: problem l of the batch is the product of the operands'
// residues modulo m_l, and what the combine needs of it is that product modulo m_l, so the
// epilogue reduces the exact int32 sum and stores r in [0, m_l) as an unsigned char. The
// combine then reads a quarter of the bytes it read as int32, and the GEMM writes a quarter.
//
// Expects the prelude of kernels/hopper_gemm.cu (HopperConfig with c_type = unsigned char,
// acc_type = int) after ozaki.py's generated residue tables (residue_constants). Same
// parameters as blasdx_hopper_gemm (C, alpha and beta are not read), so the engine's plan
// launches it unchanged.
#include "blasdx/hopper/final_store.cuh"

namespace blasdx {
namespace hopper {

// v mod m in [0, m) for any int v and 2 <= m <= 256, in integer instructions: u = v + 2^31 (unsigned)
// reduced by Barrett's quotient hi32(u * floor(2^32 / m)), which falls short of floor(u / m) by at most
// one, then 2^31 mod m taken back. `magic` is floor(2^32 / m), `offset` 2^31 mod m.
__device__ __forceinline__ int residue_of(int v, unsigned m, unsigned magic, int offset) {
    const unsigned u = unsigned(v) ^ 0x80000000u;
    unsigned r = u - __umulhi(u, magic) * m;  // in [0, 2m)
    if (r >= m) r -= m;
    int s = int(r) - offset;
    if (s < 0) s += int(m);
    return s;
}

// Modulus l's m, floor(2^32 / m) and 2^31 mod m, read from constant memory (ozaki.py's residue_constants:
// ozaki_residue_m / _magic / _offset). The index is the tile's problem, the same in every thread, so each
// is one broadcast load the compiler may keep across the tile; a chain of selects on the index, its first
// form, was walked again for every pair of values and slowed the GEMM with the moduli's count.
struct ModulusConstants {
    unsigned m, magic;
    int offset;
};
__device__ __forceinline__ ModulusConstants modulus_constants(int l) {
    return {ozaki_residue_m[l], ozaki_residue_magic[l], ozaki_residue_offset[l]};
}

// The tile's final values: each sum reduced modulo its problem's modulus, stored as bytes.
struct ResidueBytes {
    using value_type = unsigned char;
    unsigned char* d;
    int m, n;
    i64 d_row, d_col, d_batch;
    bool d_pairs;

    __device__ __forceinline__ ResidueBytes(unsigned char* d_, int m_, int n_, i64 d_row_, i64 d_col_, i64 d_batch_)
        : d(d_), m(m_), n(n_), d_row(d_row_), d_col(d_col_), d_batch(d_batch_) {
        d_pairs = pairs_aligned(d, d_row, d_col, d_batch);
    }

    __device__ __forceinline__ void value(const Work& w, int /*row*/, int /*col*/, int& v0, int& v1) const {
        const ModulusConstants c = modulus_constants(w.batch);
        v0 = residue_of(v0, c.m, c.magic, c.offset);
        v1 = residue_of(v1, c.m, c.magic, c.offset);
    }

    __device__ __forceinline__ void operator()(const Work& w, int row, int col, int v0, int v1) const {
        if (row >= m || col >= n) return;
        value(w, row, col, v0, v1);
        store_two(d + w.batch * d_batch + row * d_row + col * d_col, v0, v1, d_col, col + 1 < n, d_pairs);
    }
};

using Engine = DeviceGemm<HopperConfig>;
using TC = HopperConfig::c_type;
using TV = Engine::Acc::value_type;
static_assert(sizeof(TC) == 1 && sizeof(TV) == 4, "residue bytes from int32 sums");

}  // namespace hopper
}  // namespace blasdx

extern "C" __global__ void __launch_bounds__(blasdx::hopper::Engine::THREADS, 1)
    blasdx_hopper_residue_gemm(const __grid_constant__ blasdx::hopper::TensorMap map_a,
                               const __grid_constant__ blasdx::hopper::TensorMap map_b,
                               const __grid_constant__ blasdx::hopper::TensorMap map_d,
                               const blasdx::hopper::TC* /*c*/, blasdx::hopper::TC* d, blasdx::hopper::TV* workspace,
                               int* counters, int m, int n, int k, int batch, int batched_a, int batched_b,
                               int splits, blasdx::i64 /*c_row*/, blasdx::i64 /*c_col*/, blasdx::i64 /*c_batch*/,
                               blasdx::i64 d_row, blasdx::i64 d_col, blasdx::i64 d_batch,
                               blasdx::hopper::TV /*alpha*/, blasdx::hopper::TV /*beta*/) {
    using namespace blasdx::hopper;
    extern __shared__ __align__(16) unsigned char smem[];
    const Engine::Sched sched(m, n, k, batch, splits);
    const ResidueBytes final_(d, m, n, d_row, d_col, d_batch);
    run_to_final<HopperConfig>(smem, &map_a, &map_b, &map_d, sched, batched_a != 0, batched_b != 0, final_, workspace,
                               counters, m, splits);
}

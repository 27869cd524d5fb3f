// The block GEMM's 3xtf32 step: float32 operands at float32 accuracy as three tf32 mma.sync
// (split_tf32.cuh says how and why). An atom like those of mma.cuh, so BlockGemm runs it
// through the same fragment loads (ldmatrix or element reads) and the same K loop.
#pragma once

#include "mma.cuh"
#include "split_tf32.cuh"

namespace blasdx {

// A fragment's N registers of float32 split into their tf32 high and low parts.
template <int N>
__device__ __forceinline__ void split_fragment(const u32* x, u32* high, u32* low) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
        float h, l;
        split_tf32(__uint_as_float(x[i]), h, l);
        high[i] = __float_as_uint(h);
        low[i] = __float_as_uint(l);
    }
}

// The block GEMM's 3xtf32 atom: fragments hold the float32 operands as read from shared
// memory (no rounding on load); mma() splits them in registers and issues three m16n8k8 tf32
// mma.sync, small terms first, whose sum it adds into the f32 accumulators. The splits of a fragment are
// the same arithmetic on the same registers for every product it enters, so the compiler
// computes them once per fragment and K step.
struct mma_m16n8k8_3xtf32 : shape_m16n8k8_tf32 {
    using a_type = float; using b_type = float; using acc_type = float;
    static constexpr int PRODUCTS = 3;
    __device__ static void mma(float* d, const u32* a, const u32* b) {
        u32 ah[4], al[4], bh[2], bl[2];
        split_fragment<4>(a, ah, al);
        split_fragment<2>(b, bh, bl);
        // The step's three products are summed from zero, then added into d with rounded f32
        // adds: the tensor core's f32 sums truncate, which summed over all of K would grow
        // linearly with K (2.8e-5 at K = 4096 measured on H100 summing into d directly).
        float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        tf32_mma(t, al, bh);
        tf32_mma(t, ah, bl);
        tf32_mma(t, ah, bh);
#pragma unroll
        for (int i = 0; i < 4; ++i) d[i] += t[i];
    }

  private:
    __device__ __forceinline__ static void tf32_mma(float* d, const u32* a, const u32* b) {
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

}  // namespace blasdx

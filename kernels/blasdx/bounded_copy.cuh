// Copies of a tile that may reach past the end of its matrix: only the first `runs` runs (rows
// of a row-major matrix, columns of a column-major one) exist in global memory; the rest of the
// tile is zero-filled in shared memory on the way in, and left unwritten on the way out.
//
// This is what streaming a long matrix through a fixed-size tile needs (the last K/V tile of an
// attention head, the last query tile): the GEMM keeps its compile-time shape, the zeros add
// nothing to the products, and the copies stay asynchronous (cp.async with a source size of 0
// writes zeros without reading global memory, PTX ISA "cp.async": bytes past src-size are
// zero-filled). Commit them as a group (copy_commit) and wait with copy_wait<PENDING> to keep
// the next tile in flight while the current one is multiplied.
#pragma once

#include "copy.cuh"
#include "types.cuh"

namespace blasdx {

// Copy BYTES from global src to shared dst when `in`, else write BYTES zeros to dst (both
// BYTES-aligned). Asynchronous on sm_80+ like copy_to_shared; src is not read when !in.
template <int BYTES>
__device__ __forceinline__ void copy_to_shared_or_zero(void* dst, const void* src, bool in) {
#if __CUDA_ARCH__ >= 800
    if constexpr (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
                     "l"(src), "r"(in ? 16 : 0));
        return;
    } else if constexpr (BYTES >= 4) {
        asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], %2, %3;\n" ::"r"(shared_address(dst)),
                     "l"(src), "n"(BYTES), "r"(in ? BYTES : 0));
        return;
    }
#endif
    using V = typename vector_of<BYTES>::type;
    *reinterpret_cast<V*>(dst) = in ? *reinterpret_cast<const V*>(src) : V{};
}

// Block-cooperative copy of an OUTER x INNER matrix, global (leading dim LDG) to shared (LDS),
// of which only runs 0 .. runs - 1 exist in global memory: later runs are zero-filled.
template <class T, int OUTER, int INNER, int LDG, int LDS, int VEC_BYTES, int THREADS>
__device__ __forceinline__ void copy_matrix_to_shared_bounded(T* dst, const T* src, int runs, int tid) {
    static_assert(VEC_BYTES % int(sizeof(T)) == 0, "copy width must be a multiple of the element size");
    static_assert((INNER * int(sizeof(T))) % VEC_BYTES == 0, "rows must be a whole number of copies");
    for_each_piece<OUTER, INNER, VEC_BYTES / int(sizeof(T)), THREADS>(tid, [&](int r, int c) {
        const bool in = r < runs;
        copy_to_shared_or_zero<VEC_BYTES>(dst + r * LDS + c, in ? src + i64(r) * LDG + c : src, in);
    });
}

// Block-cooperative copy of an OUTER x INNER matrix, shared (leading dim LDS) to global (LDG):
// runs 0 .. runs - 1 only, the others do not exist in global memory.
template <class T, int OUTER, int INNER, int LDS, int LDG, int VEC_BYTES, int THREADS>
__device__ __forceinline__ void copy_matrix_to_global_bounded(T* dst, const T* src, int runs, int tid) {
    static_assert(VEC_BYTES % int(sizeof(T)) == 0, "copy width must be a multiple of the element size");
    static_assert((INNER * int(sizeof(T))) % VEC_BYTES == 0, "rows must be a whole number of copies");
    using Vec = typename vector_of<VEC_BYTES>::type;
    for_each_piece<OUTER, INNER, VEC_BYTES / int(sizeof(T)), THREADS>(tid, [&](int r, int c) {
        if (r < runs) *reinterpret_cast<Vec*>(dst + i64(r) * LDG + c) = *reinterpret_cast<const Vec*>(src + r * LDS + c);
    });
}

}  // namespace blasdx

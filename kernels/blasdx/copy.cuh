// Cooperative copies between global and shared memory.
//
// A matrix is OUTER runs of INNER contiguous elements; each run starts LD elements after
// the previous one. Copies move VEC_BYTES at a time: cp.async on sm_80+ (no register
// round trip), plain vector loads and stores on sm_75.
#pragma once

#include "types.cuh"

namespace blasdx {

template <int BYTES> struct vector_of;
template <> struct vector_of<16> { using type = uint4; };
template <> struct vector_of<8> { using type = uint2; };
template <> struct vector_of<4> { using type = unsigned int; };
template <> struct vector_of<2> { using type = unsigned short; };
template <> struct vector_of<1> { using type = unsigned char; };

// The shared-memory address of ptr. The compiler's own conversion, not inline PTX, so that it can
// do the address arithmetic of fragment and copy loops in 32 bits on the shared window.
__device__ __forceinline__ u32 shared_address(const void* ptr) {
    return static_cast<u32>(__cvta_generic_to_shared(ptr));
}

// Copy BYTES from global src to shared dst (both BYTES-aligned). cp.async asks L2 to fetch the
// whole 128-byte line of src (.L2::128B, as cuBLASDx's copies do): batched benchmark on an H200
// (2026-11-27, alternating in one process) 16-bit 32^3 +3-7% (f16->f32 0.92-0.93 -> 0.96-0.99x
// cuBLASDx), nothing lost elsewhere; .L2::256B gained nothing more.
template <int BYTES>
__device__ __forceinline__ void copy_to_shared(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
    if constexpr (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(shared_address(dst)), "l"(src));
        return;
    } else if constexpr (BYTES >= 4) {
        asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], %2;\n" ::"r"(shared_address(dst)), "l"(src),
                     "n"(BYTES));
        return;
    }
#endif
    using V = typename vector_of<BYTES>::type;
    *reinterpret_cast<V*>(dst) = *reinterpret_cast<const V*>(src);
}

// Load N (1, 2 or 4) 8x8 matrices of 16-bit values from shared memory; lanes 8i..8i+7
// give the row addresses of matrix i. TRANS delivers each matrix transposed.
template <int N, bool TRANS>
__device__ __forceinline__ void ldmatrix(u32* r, const void* row) {
    const u32 addr = shared_address(row);
    if constexpr (N == 4 && !TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
    } else if constexpr (N == 4) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
    } else if constexpr (N == 2 && !TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
    } else if constexpr (N == 2) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
    } else if constexpr (!TRANS) {
        static_assert(N == 1, "ldmatrix loads 1, 2 or 4 matrices");
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr));
    } else {
        static_assert(N == 1, "ldmatrix loads 1, 2 or 4 matrices");
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr));
    }
}

// Wait until every copy this thread issued has landed (the caller then syncs the block).
__device__ __forceinline__ void copy_wait_all() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
#endif
}

// Close the group of copies this thread issued since the last one (a pipeline stage).
__device__ __forceinline__ void copy_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Wait until at most PENDING of this thread's committed groups are still in flight: the
// older ones have landed (the caller then syncs the block). Copies without cp.async
// (sm_75) land when issued.
template <int PENDING>
__device__ __forceinline__ void copy_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
#endif
}

// copy_wait<PENDING> for a count that is a constant once loops are unrolled: at most MAX.
template <int MAX>
__device__ __forceinline__ void copy_wait_at_most(int pending) {
    if constexpr (MAX > 0) {
        if (pending >= MAX) {
            copy_wait<MAX>();
            return;
        }
        copy_wait_at_most<MAX - 1>(pending);
    } else {
        copy_wait<0>();
    }
}

// Hand this thread's share of the V-element pieces of an OUTER x INNER matrix to
// f(row, col): piece i goes to thread i % THREADS, so a warp covers consecutive pieces.
// Threads from THREADS on take none. The trip count is a constant, so that a share of up to
// eight pieces is straight code with no loop bookkeeping (a 32^3 16-bit operand is one piece
// per thread of 128; a loop from tid to TOTAL cost a trip-count computation and a remainder
// branch per matrix).
//
// With ROW_PASSES, where a row's pieces do not divide the block (100 f16 values: 25 pieces of
// 8 bytes, 128 threads) and a thread has four or more, each pass of the block takes THREADS /
// PER_ROW whole rows instead and the threads past them idle (at most an eighth of the block): a
// thread keeps one column and steps down by a constant number of rows, so its addresses advance
// by constants. Consecutive pieces cost a constant division (multiply-high, shifts), a
// remainder and 64-bit address arithmetic each, about ten instructions per 8-byte piece (f16
// 100^3). Only copy_matrix_to_shared asks for them (below); stores of C keep consecutive
// pieces: with row passes, the store and the beta != 0 load of C took the two-problem e4m3
// 48x80x24 kernel from 56 to 65 registers.
template <int OUTER, int INNER, int V, int THREADS, bool ROW_PASSES = false, class F>
__device__ __forceinline__ void for_each_piece(int tid, F&& f) {
    constexpr int PER_ROW = INNER / V;
    constexpr int TOTAL = OUTER * PER_ROW;
    constexpr int ROWS = THREADS / PER_ROW;  // whole rows per pass of the block
    constexpr int SHARE = (TOTAL + THREADS - 1) / THREADS;
    if constexpr (ROW_PASSES && THREADS % PER_ROW != 0 && ROWS >= 1 && 8 * (THREADS % PER_ROW) <= THREADS &&
                  SHARE >= 4) {
        constexpr int PASSES = (OUTER + ROWS - 1) / ROWS;
        if (tid >= ROWS * PER_ROW) return;
        const int r0 = tid / PER_ROW, c = (tid - r0 * PER_ROW) * V;
#pragma unroll
        for (int t = 0; t < PASSES; ++t) {
            const int r = r0 + t * ROWS;
            if (OUTER % ROWS == 0 || t < PASSES - 1 || r < OUTER) f(r, c);
        }
        return;
    }
    constexpr int UNROLL = SHARE <= 8 ? SHARE : 4;
    if (tid >= THREADS) return;
#pragma unroll UNROLL
    for (int t = 0; t < SHARE; ++t) {
        const int i = tid + t * THREADS;
        if (TOTAL % THREADS == 0 || t < SHARE - 1 || i < TOTAL) {
            const int r = i / PER_ROW;
            f(r, (i - r * PER_ROW) * V);
        }
    }
}

// Block-cooperative copy of an OUTER x INNER matrix, global (leading dim LDG) to shared (LDS);
// ROW_PASSES as for for_each_piece, for pieces under 16 bytes (batched on an H200: f16 100^3,
// 8-byte pieces, 0.92 -> 1.01-1.07x cuBLASDx; f64 100^3, 16-byte pieces, 5% slower).
template <class T, int OUTER, int INNER, int LDG, int LDS, int VEC_BYTES, int THREADS, bool ROW_PASSES = true>
__device__ __forceinline__ void copy_matrix_to_shared(T* dst, const T* src, int tid) {
    static_assert(VEC_BYTES % int(sizeof(T)) == 0, "copy width must be a multiple of the element size");
    static_assert((INNER * int(sizeof(T))) % VEC_BYTES == 0, "rows must be a whole number of copies");
    constexpr int V = VEC_BYTES / int(sizeof(T));
    if constexpr (LDG == INNER && LDS == INNER) {  // both contiguous: one flat run, no division
        for_each_piece<1, OUTER * INNER, V, THREADS>(
            tid, [&](int, int c) { copy_to_shared<VEC_BYTES>(dst + c, src + c); });
    } else {
        for_each_piece<OUTER, INNER, V, THREADS, ROW_PASSES && (VEC_BYTES < 16)>(
            tid, [&](int r, int c) { copy_to_shared<VEC_BYTES>(dst + r * LDS + c, src + i64(r) * LDG + c); });
    }
}

// Block-cooperative copy of an OUTER x INNER matrix, shared (leading dim LDS) to global (LDG).
template <class T, int OUTER, int INNER, int LDS, int LDG, int VEC_BYTES, int THREADS>
__device__ __forceinline__ void copy_matrix_to_global(T* dst, const T* src, int tid) {
    static_assert(VEC_BYTES % int(sizeof(T)) == 0, "copy width must be a multiple of the element size");
    static_assert((INNER * int(sizeof(T))) % VEC_BYTES == 0, "rows must be a whole number of copies");
    using Vec = typename vector_of<VEC_BYTES>::type;
    for_each_piece<OUTER, INNER, VEC_BYTES / int(sizeof(T)), THREADS>(tid, [&](int r, int c) {
        *reinterpret_cast<Vec*>(dst + i64(r) * LDG + c) = *reinterpret_cast<const Vec*>(src + r * LDS + c);
    });
}

}  // namespace blasdx

// wgmma (sm_90a only): warpgroup matrix multiply-accumulate with A and B read from shared
// memory through 64-bit matrix descriptors, the accumulator in registers.
//
// Facts this file relies on, from the PTX ISA, section 9.7.15 "Asynchronous Warpgroup Level
// Matrix Multiply-Accumulate Instructions" (our wording):
//
// * Warpgroup (9.7.15.1): four consecutive warps, the first with a warp index divisible by 4,
//   issue every wgmma instruction together (.sync.aligned: all 128 threads, same instruction).
// * Shapes (9.7.15.5, "Matrix Shape"): m64nNk16 for f16/bf16 inputs (accumulator f16 or f32),
//   m64nNk32 for e4m3/e5m2 (f16 or f32) and for s8/u8 (s32), m64nNk8 for tf32; N is a multiple
//   of 8 from 8 to 256 (of 16 from 16 to 256 for s8/u8 beyond 32: the widths blasdx issues,
//   powers of two, are valid for every type; 192 is issued with f32 accumulators only). One
//   instruction reads 32 bytes of K per row of A and per column of B in every case.
// * Operands (9.7.15.5, syntax): f16/bf16 take "d, a-desc, b-desc, scale-d, imm-scale-a,
//   imm-scale-b, imm-trans-a, imm-trans-b"; tf32 and fp8 the same without the transposes;
//   s8/u8 only "d, a-desc, b-desc, scale-d" (no negation, no transposes). scale-d 0 computes
//   D = A * B, ignoring D's old values.
// * Register A (same syntax section): A may come from registers instead, "d, {a0, a1, a2, a3},
//   b-desc, ...": the same immediates less imm-trans-a (f16/bf16: scale-d, imm-scale-a,
//   imm-scale-b, imm-trans-b; fp8: scale-d, imm-scale-a, imm-scale-b; s8/u8: scale-d), B still
//   from shared memory. Four 32-bit registers per thread hold A in every case.
// * A fragment (9.7.15.5.1.1.1 and .1.1.3, "register fragment layout for matrix A"): warp w of
//   the warpgroup holds rows 16w .. 16w+15 laid out as the A fragment of mma.sync m16n8k16
//   (16-bit: element e at row lane/4 + 8*((e/2)%2), K 2*(lane%4) + e%2 + 8*(e/4)) or of
//   m16n8k32 (8-bit: row lane/4 + 8*((e/4)%2), K 4*(lane%4) + e%4 + 16*(e/8)), so the
//   warp-level fragment loaders fill it as they are.
// * Accumulator fragment (9.7.15.5.1.1.1, "Matrix Fragments for wgmma.mma_async.m64nNk16",
//   Figure "register fragment layout for accumulator matrix D"; the k8 and k32 figures are the
//   same): warp w of the warpgroup holds rows 16w .. 16w+15. Within a warp it is the mma.sync
//   m16n8 C layout repeated along N: register index 4j + e (e = 0..3, j = column block of 8)
//   is row 16w + lane/4 + 8*(e/2), column 8j + 2*(lane%4) + e%2. f32: N/2 registers; f16:
//   N/4 registers of two halves, element 4j + e being half e%2 of register 2j + e/2.
// * Operand majorness (9.7.15.5.1.2, "Shared Memory Matrix Layout"): imm-trans-a = 0 reads A
//   K-major (K contiguous, i.e. row-major M x K), 1 M-major; imm-trans-b = 0 reads B K-major
//   (K contiguous, column-major K x N), 1 N-major. The transposes exist only for 16-bit types:
//   fp8 and tf32 instructions take no imm-trans operands and need both operands K-major.
// * Swizzle atoms (same section, Table 38): a swizzled operand is made of atoms of 8 rows of
//   S bytes (S = 128, 64 or 32, the swizzle mode) stored densely (8*S bytes). A "row" runs along
//   the contiguous dimension: along K for K-major, along M/N for MN-major. Inside an atom the
//   16-byte chunk c of row r sits at chunk position c ^ (row bits), which is the address rule
//   "bits [4, 4+log2(S/16)) ^= bits [7, 7+log2(S/16))" of the byte address: for 128B, chunk
//   c ^ (r % 8); for 64B, c ^ ((r / 2) % 4); for 32B, c ^ ((r / 4) % 2). The hardware applies
//   it to absolute shared addresses, so atoms must start on a multiple of 8*S bytes (1024 for
//   128B) for the matrix base offset field to be 0 (9.7.15.5.1.2.2).
// * Strides (9.7.15.5.1.2.1.1 "Leading Dimension Byte Offset", .1.2 "Stride Dimension Byte
//   Offset"): K-major swizzled: LBO is unused (encode 1), SBO = bytes from one group of 8 rows
//   (M or N) to the next. MN-major swizzled: LBO = bytes from one atom-wide slab of M/N
//   (S / element-size elements) to the next, SBO = bytes from one group of 8 K rows to the next.
//   An instruction whose K extent (32 bytes) lies inside a K-major row is addressed by moving
//   the start address along the row by the K offset in bytes (the swizzle is applied after).
// * Descriptor (9.7.15.5.1.2.2 "Matrix Descriptor Format"): bits 0-13 start address >> 4,
//   16-29 LBO >> 4, 32-45 SBO >> 4, 49-51 base offset, 62-63 swizzle mode (0 none, 1 128B,
//   2 64B, 3 32B); addresses are 18-bit shared-window byte addresses.
// * Ordering (9.7.15.4 "Async Proxy", 9.7.15.7): wgmma reads shared memory in the async proxy,
//   so shared-memory writes by ordinary stores or cp.async need fence.proxy.async.shared::cta
//   (then a barrier) before a wgmma reads them. wgmma.fence must precede the first wgmma of a
//   warpgroup and separate any other access of the accumulator registers from a wgmma;
//   accumulators shared by wgmmas of the same shape need no fence between them. The same holds
//   for registers of a register A: writes to them need wgmma.fence before a wgmma reads them,
//   and they may change again only once that wgmma has completed. wgmma.commit_group closes a
//   group of issued wgmmas; wgmma.wait_group N waits until at most N groups are pending, after
//   which the accumulators (and the A registers of the completed groups) may be touched.
// * scale-d: an immediate 1 gives D = A*B + D (we start from zeroed registers; ptxas folds the
//   zeros into the first instruction).
#pragma once

#include "copy.cuh"
#include "types.cuh"

namespace blasdx {
namespace wgmma {

typedef unsigned long long u64;

// ---- swizzled panels ---------------------------------------------------------------------------

// Byte offset of byte `offset` of a panel whose rows are PANEL_BYTES long, after the swizzle
// of that width (the row is offset / PANEL_BYTES; only 16-byte chunk bits move).
template <int PANEL_BYTES>
__host__ __device__ constexpr int swizzle(int offset) {
    static_assert(PANEL_BYTES == 128 || PANEL_BYTES == 64 || PANEL_BYTES == 32, "swizzle modes are 128B, 64B, 32B");
    return offset ^ (((offset >> 7) & (PANEL_BYTES / 16 - 1)) << 4);
}

// The descriptor's swizzle-mode code of a panel width.
template <int PANEL_BYTES>
__host__ __device__ constexpr u64 swizzle_mode() {
    return PANEL_BYTES == 128 ? 1 : PANEL_BYTES == 64 ? 2 : 3;
}

// An OUTER x INNER matrix in storage order (INNER contiguous) cut into panels PANEL_BYTES wide
// along INNER: panel p holds inner elements [p * W, (p + 1) * W) of every row, W = PANEL_BYTES /
// sizeof(T), as OUTER dense rows of PANEL_BYTES, swizzled. Panels follow each other.
template <class T, int OUTER, int INNER, int PANEL_BYTES>
struct panels {
    static constexpr int W = PANEL_BYTES / int(sizeof(T));  // elements per panel row
    static constexpr int PANEL = OUTER * PANEL_BYTES;      // bytes per panel (the LBO of MN-major)
    static constexpr int ATOM = 8 * PANEL_BYTES;           // bytes per 8-row atom (the SBO)
    static constexpr int BYTES = PANEL * (INNER / W);
    static_assert(INNER % W == 0, "the contiguous extent must be a whole number of panels");
    static_assert(OUTER % 8 == 0, "panels are made of 8-row swizzle atoms");

    // Byte offset of element (row, col), col along the contiguous dimension.
    __host__ __device__ static constexpr int offset(int row, int col) {
        return (col / W) * PANEL + swizzle<PANEL_BYTES>(row * PANEL_BYTES + (col % W) * int(sizeof(T)));
    }
};

// Block-cooperative copy of an OUTER x INNER global matrix (leading dimension LDG) into
// panels at dst, VEC_BYTES at a time (a piece never crosses a 16-byte chunk, so the swizzle
// moves it whole). Asynchronous on sm_80+: copy_wait_all() and proxy_fence() before use.
template <class T, int OUTER, int INNER, int LDG, int PANEL_BYTES, int VEC_BYTES, int THREADS>
__device__ __forceinline__ void copy_to_panels(unsigned char* dst, const T* src, int tid) {
    static_assert(VEC_BYTES % int(sizeof(T)) == 0 && 16 % VEC_BYTES == 0, "pieces stay inside a 16-byte chunk");
    using layout = panels<T, OUTER, INNER, PANEL_BYTES>;
    for_each_piece<OUTER, INNER, VEC_BYTES / int(sizeof(T)), THREADS>(tid, [&](int r, int c) {
        copy_to_shared<VEC_BYTES>(dst + layout::offset(r, c), src + i64(r) * LDG + c);
    });
}

// The V bytes at src (V-aligned) as little-endian 32-bit words (V < 4: the low bytes of w[0]).
template <int V>
__device__ __forceinline__ void load_words(u32* w, const unsigned char* src) {
    const auto v = *reinterpret_cast<const typename vector_of<V>::type*>(src);
    if constexpr (V == 16) {
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    } else if constexpr (V == 8) {
        w[0] = v.x, w[1] = v.y;
    } else {
        w[0] = u32(v);
    }
}

// Block-cooperative copy of a ROWS x COLS global matrix of 8-bit values (COLS contiguous,
// leading dimension LDG) into the panels of its transpose: COLS panel rows of ROWS bytes, cut
// PANEL_BYTES wide along ROWS. 8-bit wgmma reads its operands K-major only (no transposes), so
// a row-major B (K x N, N contiguous) or a column-major A (stored K x M) is transposed on its
// way into shared memory. A piece is 4 global rows x VEC_BYTES columns, read as 4 vectors,
// transposed in registers 4 x 4 bytes at a time with byte permutes, and written as one 32-bit
// word (4 consecutive K) per column. Lanes pair up on adjacent runs of a row (whole 32-byte
// sectors) and otherwise step down the rows, so one store of a warp writes 2 panel rows of up to
// 64 bytes each (2-way bank conflicts at most for 64B and 128B panels). Synchronous loads:
// the caller syncs the block (and fences for wgmma) as after copy_to_panels.
template <class T, int ROWS, int COLS, int LDG, int PANEL_BYTES, int VEC_BYTES, int THREADS>
__device__ __forceinline__ void copy_to_panels_transposed(unsigned char* dst, const T* src, int tid) {
    static_assert(sizeof(T) == 1, "the transposing copy moves 8-bit values (4 of them make a 32-bit word of K)");
    static_assert(ROWS % 4 == 0 && COLS % VEC_BYTES == 0, "pieces of 4 rows x VEC_BYTES columns must tile the matrix");
    static_assert(VEC_BYTES == 1 || VEC_BYTES == 2 || VEC_BYTES == 4 || VEC_BYTES == 8 || VEC_BYTES == 16,
                  "copy widths are 1 to 16 bytes");
    using layout = panels<T, COLS, ROWS, PANEL_BYTES>;
    constexpr int V = VEC_BYTES, WORDS = V >= 4 ? V / 4 : 1;
    constexpr int GROUPS = ROWS / 4, CHUNKS = COLS / V, PAIR = CHUNKS % 2 == 0 ? 2 : 1;
    constexpr int PIECES = GROUPS * CHUNKS;
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(src);
#pragma unroll 2
    for (int p = tid; p < PIECES; p += THREADS) {
        const int chunk = p % PAIR + PAIR * (p / (PAIR * GROUPS));
        const int r0 = 4 * ((p / PAIR) % GROUPS), c0 = chunk * V;
        u32 w[4][WORDS];
#pragma unroll
        for (int i = 0; i < 4; ++i) load_words<V>(w[i], bytes + i64(r0 + i) * LDG + c0);
#pragma unroll
        for (int j = 0; j < WORDS; ++j) {
            // rows i of word j hold columns 4j .. 4j+3: gather byte b of every row into column 4j+b
            const u32 t0 = __byte_perm(w[0][j], w[1][j], 0x5140), t1 = __byte_perm(w[0][j], w[1][j], 0x7362);
            const u32 t2 = __byte_perm(w[2][j], w[3][j], 0x5140), t3 = __byte_perm(w[2][j], w[3][j], 0x7362);
            const u32 column[4] = {__byte_perm(t0, t2, 0x5410), __byte_perm(t0, t2, 0x7632),
                                   __byte_perm(t1, t3, 0x5410), __byte_perm(t1, t3, 0x7632)};
#pragma unroll
            for (int b = 0; b < 4 && 4 * j + b < V; ++b) {
                *reinterpret_cast<u32*>(dst + layout::offset(c0 + 4 * j + b, r0)) = column[b];
            }
        }
    }
}

// ---- descriptors and ordering ------------------------------------------------------------------

// A matrix descriptor: start address, leading and stride byte offsets, swizzle mode.
template <int PANEL_BYTES>
__device__ __forceinline__ u64 descriptor(u32 address, u32 lbo, u32 sbo) {
    return u64((address & 0x3FFFF) >> 4) | (u64((lbo & 0x3FFFF) >> 4) << 16) | (u64((sbo & 0x3FFFF) >> 4) << 32) |
           (swizzle_mode<PANEL_BYTES>() << 62);
}

// Shared-memory writes of this thread become visible to wgmma reads (then sync the block).
__device__ __forceinline__ void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int PENDING> __device__ __forceinline__ void wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}
// Keeps the compiler from moving accesses of an accumulator register across this point.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(u32& r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(int& r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(double& r) { asm volatile("" : "+d"(r)::"memory"); }

// ---- the instruction ---------------------------------------------------------------------------

// Register lists "%0, %1, ..." of C accumulator registers, and the operand numbers that follow
// them: the descriptors (%C, %C+1) and the transpose immediates (%C+2, %C+3).
#define BLASDX_WG_R4_0 "%0, %1, %2, %3"
#define BLASDX_WG_R4_1 "%4, %5, %6, %7"
#define BLASDX_WG_R4_2 "%8, %9, %10, %11"
#define BLASDX_WG_R4_3 "%12, %13, %14, %15"
#define BLASDX_WG_R4_4 "%16, %17, %18, %19"
#define BLASDX_WG_R4_5 "%20, %21, %22, %23"
#define BLASDX_WG_R4_6 "%24, %25, %26, %27"
#define BLASDX_WG_R4_7 "%28, %29, %30, %31"
#define BLASDX_WG_R4_8 "%32, %33, %34, %35"
#define BLASDX_WG_R4_9 "%36, %37, %38, %39"
#define BLASDX_WG_R4_10 "%40, %41, %42, %43"
#define BLASDX_WG_R4_11 "%44, %45, %46, %47"
#define BLASDX_WG_R4_12 "%48, %49, %50, %51"
#define BLASDX_WG_R4_13 "%52, %53, %54, %55"
#define BLASDX_WG_R4_14 "%56, %57, %58, %59"
#define BLASDX_WG_R4_15 "%60, %61, %62, %63"
#define BLASDX_WG_R4_16 "%64, %65, %66, %67"
#define BLASDX_WG_R4_17 "%68, %69, %70, %71"
#define BLASDX_WG_R4_18 "%72, %73, %74, %75"
#define BLASDX_WG_R4_19 "%76, %77, %78, %79"
#define BLASDX_WG_R4_20 "%80, %81, %82, %83"
#define BLASDX_WG_R4_21 "%84, %85, %86, %87"
#define BLASDX_WG_R4_22 "%88, %89, %90, %91"
#define BLASDX_WG_R4_23 "%92, %93, %94, %95"
#define BLASDX_WG_R4_24 "%96, %97, %98, %99"
#define BLASDX_WG_R4_25 "%100, %101, %102, %103"
#define BLASDX_WG_R4_26 "%104, %105, %106, %107"
#define BLASDX_WG_R4_27 "%108, %109, %110, %111"
#define BLASDX_WG_R4_28 "%112, %113, %114, %115"
#define BLASDX_WG_R4_29 "%116, %117, %118, %119"
#define BLASDX_WG_R4_30 "%120, %121, %122, %123"
#define BLASDX_WG_R4_31 "%124, %125, %126, %127"
#define BLASDX_WG_REGS_2 "%0, %1"
#define BLASDX_WG_REGS_4 BLASDX_WG_R4_0
#define BLASDX_WG_REGS_8 BLASDX_WG_REGS_4 ", " BLASDX_WG_R4_1
#define BLASDX_WG_REGS_16 BLASDX_WG_REGS_8 ", " BLASDX_WG_R4_2 ", " BLASDX_WG_R4_3
#define BLASDX_WG_REGS_32 \
    BLASDX_WG_REGS_16 ", " BLASDX_WG_R4_4 ", " BLASDX_WG_R4_5 ", " BLASDX_WG_R4_6 ", " BLASDX_WG_R4_7
#define BLASDX_WG_REGS_64                                                                                      \
    BLASDX_WG_REGS_32 ", " BLASDX_WG_R4_8 ", " BLASDX_WG_R4_9 ", " BLASDX_WG_R4_10 ", " BLASDX_WG_R4_11 ", " \
        BLASDX_WG_R4_12 ", " BLASDX_WG_R4_13 ", " BLASDX_WG_R4_14 ", " BLASDX_WG_R4_15
#define BLASDX_WG_REGS_96                                                                                         \
    BLASDX_WG_REGS_64 ", " BLASDX_WG_R4_16 ", " BLASDX_WG_R4_17 ", " BLASDX_WG_R4_18 ", " BLASDX_WG_R4_19 ", "   \
        BLASDX_WG_R4_20 ", " BLASDX_WG_R4_21 ", " BLASDX_WG_R4_22 ", " BLASDX_WG_R4_23
#define BLASDX_WG_REGS_128                                                                                        \
    BLASDX_WG_REGS_64 ", " BLASDX_WG_R4_16 ", " BLASDX_WG_R4_17 ", " BLASDX_WG_R4_18 ", " BLASDX_WG_R4_19 ", "   \
        BLASDX_WG_R4_20 ", " BLASDX_WG_R4_21 ", " BLASDX_WG_R4_22 ", " BLASDX_WG_R4_23 ", " BLASDX_WG_R4_24 ", " \
        BLASDX_WG_R4_25 ", " BLASDX_WG_R4_26 ", " BLASDX_WG_R4_27 ", " BLASDX_WG_R4_28 ", " BLASDX_WG_R4_29 ", " \
        BLASDX_WG_R4_30 ", " BLASDX_WG_R4_31
#define BLASDX_WG_AB_2 "%2, %3"
#define BLASDX_WG_AB_4 "%4, %5"
#define BLASDX_WG_AB_8 "%8, %9"
#define BLASDX_WG_AB_16 "%16, %17"
#define BLASDX_WG_AB_32 "%32, %33"
#define BLASDX_WG_AB_64 "%64, %65"
#define BLASDX_WG_AB_96 "%96, %97"
#define BLASDX_WG_AB_128 "%128, %129"
#define BLASDX_WG_T_2 ", %4, %5"
#define BLASDX_WG_T_4 ", %6, %7"
#define BLASDX_WG_T_8 ", %10, %11"
#define BLASDX_WG_T_16 ", %18, %19"
#define BLASDX_WG_T_32 ", %34, %35"
#define BLASDX_WG_T_64 ", %66, %67"
#define BLASDX_WG_T_96 ", %98, %99"
#define BLASDX_WG_T_128 ", %130, %131"
#define BLASDX_WG_NO_T(C) ""
#define BLASDX_WG_WITH_T(C) BLASDX_WG_T_##C

// Read-write operand lists of C registers starting at d ("+f" floats, "+r" f16x2 words).
#define BLASDX_WG_F4(d) "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3])
#define BLASDX_WG_F8(d) BLASDX_WG_F4(d), BLASDX_WG_F4((d) + 4)
#define BLASDX_WG_F16(d) BLASDX_WG_F8(d), BLASDX_WG_F8((d) + 8)
#define BLASDX_WG_F32(d) BLASDX_WG_F16(d), BLASDX_WG_F16((d) + 16)
#define BLASDX_WG_F64(d) BLASDX_WG_F32(d), BLASDX_WG_F32((d) + 32)
#define BLASDX_WG_F96(d) BLASDX_WG_F64(d), BLASDX_WG_F32((d) + 64)
#define BLASDX_WG_F128(d) BLASDX_WG_F64(d), BLASDX_WG_F64((d) + 64)
#define BLASDX_WG_U2(d) "+r"((d)[0]), "+r"((d)[1])
#define BLASDX_WG_U4(d) BLASDX_WG_U2(d), BLASDX_WG_U2((d) + 2)
#define BLASDX_WG_U8(d) BLASDX_WG_U4(d), BLASDX_WG_U4((d) + 4)
#define BLASDX_WG_U16(d) BLASDX_WG_U8(d), BLASDX_WG_U8((d) + 8)
#define BLASDX_WG_U32(d) BLASDX_WG_U16(d), BLASDX_WG_U16((d) + 16)
#define BLASDX_WG_U64(d) BLASDX_WG_U32(d), BLASDX_WG_U32((d) + 32)
#define BLASDX_WG_U128(d) BLASDX_WG_U64(d), BLASDX_WG_U64((d) + 64)

// One width: "wgmma...m64n<N><OP> {regs}, descA, descB, 1, 1, 1[, transA, transB];" with C registers.
#define BLASDX_WG_CASE(N, C, OP, LIST, TRANS, ...)                                                               \
    if constexpr (WIDTH == N) {                                                                                  \
        asm volatile("wgmma.mma_async.sync.aligned.m64n" #N OP " {" BLASDX_WG_REGS_##C "}, " BLASDX_WG_AB_##C  \
                     ", 1, 1, 1" TRANS(C) ";\n"                                                                  \
                     : LIST##C(d)                                                                                \
                     : "l"(desc_a), "l"(desc_b)__VA_ARGS__);                                                     \
    }
// Every width of an f32 accumulator (N/2 registers) or an f16 one (N/4 words).
#define BLASDX_WG_F32_WIDTHS(OP, TRANS, ...)                    \
    BLASDX_WG_CASE(8, 4, OP, BLASDX_WG_F, TRANS, __VA_ARGS__)    \
    BLASDX_WG_CASE(16, 8, OP, BLASDX_WG_F, TRANS, __VA_ARGS__)   \
    BLASDX_WG_CASE(32, 16, OP, BLASDX_WG_F, TRANS, __VA_ARGS__)  \
    BLASDX_WG_CASE(64, 32, OP, BLASDX_WG_F, TRANS, __VA_ARGS__)  \
    BLASDX_WG_CASE(128, 64, OP, BLASDX_WG_F, TRANS, __VA_ARGS__) \
    BLASDX_WG_CASE(192, 96, OP, BLASDX_WG_F, TRANS, __VA_ARGS__) \
    BLASDX_WG_CASE(256, 128, OP, BLASDX_WG_F, TRANS, __VA_ARGS__)
#define BLASDX_WG_F16_WIDTHS(OP, TRANS, ...)                   \
    BLASDX_WG_CASE(8, 2, OP, BLASDX_WG_U, TRANS, __VA_ARGS__)   \
    BLASDX_WG_CASE(16, 4, OP, BLASDX_WG_U, TRANS, __VA_ARGS__)  \
    BLASDX_WG_CASE(32, 8, OP, BLASDX_WG_U, TRANS, __VA_ARGS__)  \
    BLASDX_WG_CASE(64, 16, OP, BLASDX_WG_U, TRANS, __VA_ARGS__) \
    BLASDX_WG_CASE(128, 32, OP, BLASDX_WG_U, TRANS, __VA_ARGS__) \
    BLASDX_WG_CASE(256, 64, OP, BLASDX_WG_U, TRANS, __VA_ARGS__)

// The same with a literal operand tail TAIL after the descriptors (", 0, 1, 1" starts the sum
// afresh for fp8: scale-d 0 gives D = A * B; integer wgmma takes scale-d alone: ", 1" or ", 0").
#define BLASDX_WG_CASE_TAIL(N, C, OP, LIST, TAIL)                                                           \
    if constexpr (WIDTH == N) {                                                                               \
        asm volatile("wgmma.mma_async.sync.aligned.m64n" #N OP " {" BLASDX_WG_REGS_##C "}, " BLASDX_WG_AB_##C \
                     TAIL ";\n"                                                                               \
                     : LIST##C(d)                                                                             \
                     : "l"(desc_a), "l"(desc_b));                                                             \
    }
// Every width of an accumulator of N/2 32-bit registers (f32 "+f" or s32 "+r").
#define BLASDX_WG_WORD_WIDTHS(OP, LIST, TAIL)                \
    BLASDX_WG_CASE_TAIL(8, 4, OP, LIST, TAIL)                 \
    BLASDX_WG_CASE_TAIL(16, 8, OP, LIST, TAIL)                \
    BLASDX_WG_CASE_TAIL(32, 16, OP, LIST, TAIL)               \
    BLASDX_WG_CASE_TAIL(64, 32, OP, LIST, TAIL)               \
    BLASDX_WG_CASE_TAIL(128, 64, OP, LIST, TAIL)              \
    BLASDX_WG_CASE_TAIL(256, 128, OP, LIST, TAIL)

// Register A: after the C registers come the four A registers and B's descriptor (%C .. %C+4),
// then the transpose immediate of B (%C+5) for 16-bit types.
#define BLASDX_WG_RS_A_2 "{%2, %3, %4, %5}, %6"
#define BLASDX_WG_RS_A_4 "{%4, %5, %6, %7}, %8"
#define BLASDX_WG_RS_A_8 "{%8, %9, %10, %11}, %12"
#define BLASDX_WG_RS_A_16 "{%16, %17, %18, %19}, %20"
#define BLASDX_WG_RS_A_32 "{%32, %33, %34, %35}, %36"
#define BLASDX_WG_RS_A_64 "{%64, %65, %66, %67}, %68"
#define BLASDX_WG_RS_A_128 "{%128, %129, %130, %131}, %132"
#define BLASDX_WG_RS_T_2 ", %7"
#define BLASDX_WG_RS_T_4 ", %9"
#define BLASDX_WG_RS_T_8 ", %13"
#define BLASDX_WG_RS_T_16 ", %21"
#define BLASDX_WG_RS_T_32 ", %37"
#define BLASDX_WG_RS_T_64 ", %69"
#define BLASDX_WG_RS_T_128 ", %133"
// Operand tails after B's descriptor: 16-bit "scale-d, scale-a, scale-b, trans-b"; fp8 without
// trans-b; integers scale-d alone. Always D += A * B.
#define BLASDX_WG_RS_TAIL_TRANS(C) ", 1, 1, 1" BLASDX_WG_RS_T_##C
#define BLASDX_WG_RS_TAIL_SCALES(C) ", 1, 1, 1"
#define BLASDX_WG_RS_TAIL_ACCUMULATE(C) ", 1"

// One width of the register-A form: "wgmma...m64n<N><OP> {regs}, {a0..a3}, descB<TAIL>;".
#define BLASDX_WG_RS_CASE(N, C, OP, LIST, TAIL, ...)                                                            \
    if constexpr (WIDTH == N) {                                                                                 \
        asm volatile("wgmma.mma_async.sync.aligned.m64n" #N OP " {" BLASDX_WG_REGS_##C "}, " BLASDX_WG_RS_A_##C \
                         TAIL(C) ";\n"                                                                          \
                     : LIST##C(d)                                                                               \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b)__VA_ARGS__);                     \
    }
// Every width with an accumulator of N/2 32-bit registers (f32 "+f", s32 "+r") or N/4 (f16 pairs).
#define BLASDX_WG_RS_WORD_WIDTHS(OP, LIST, TAIL, ...)       \
    BLASDX_WG_RS_CASE(8, 4, OP, LIST, TAIL, __VA_ARGS__)    \
    BLASDX_WG_RS_CASE(16, 8, OP, LIST, TAIL, __VA_ARGS__)   \
    BLASDX_WG_RS_CASE(32, 16, OP, LIST, TAIL, __VA_ARGS__)  \
    BLASDX_WG_RS_CASE(64, 32, OP, LIST, TAIL, __VA_ARGS__)  \
    BLASDX_WG_RS_CASE(128, 64, OP, LIST, TAIL, __VA_ARGS__) \
    BLASDX_WG_RS_CASE(256, 128, OP, LIST, TAIL, __VA_ARGS__)
#define BLASDX_WG_RS_HALF_WIDTHS(OP, LIST, TAIL, ...)       \
    BLASDX_WG_RS_CASE(8, 2, OP, LIST, TAIL, __VA_ARGS__)    \
    BLASDX_WG_RS_CASE(16, 4, OP, LIST, TAIL, __VA_ARGS__)   \
    BLASDX_WG_RS_CASE(32, 8, OP, LIST, TAIL, __VA_ARGS__)   \
    BLASDX_WG_RS_CASE(64, 16, OP, LIST, TAIL, __VA_ARGS__)  \
    BLASDX_WG_RS_CASE(128, 32, OP, LIST, TAIL, __VA_ARGS__) \
    BLASDX_WG_RS_CASE(256, 64, OP, LIST, TAIL, __VA_ARGS__)

template <int WIDTH>
struct width_check {
    static_assert(WIDTH == 8 || WIDTH == 16 || WIDTH == 32 || WIDTH == 64 || WIDTH == 128 || WIDTH == 192 ||
                      WIDTH == 256,
                  "blasdx issues wgmma widths that are powers of two from 8 to 256, and 192 with f32 sums (wider "
                  "tiles take several)");
};

// mma<TA, TB, TAcc>::issue<WIDTH, TRANS_A, TRANS_B>(d, desc_a, desc_b): d += A * B for a 64 x
// WIDTH x K_STEP step, d the accumulator registers (floats, or f16x2 words for f16). TRANS_A /
// TRANS_B select M-major A / N-major B (16-bit types only). The type list is the supported one.
// issue_rs<WIDTH, TRANS_B>(d, a, desc_b) is the same step with A in registers: a holds this
// thread's four 32-bit words of the A fragment (REGISTER_A says which types have the form here).
template <class TA, class TB, class TAcc> struct mma {
    static_assert(sizeof(TA) == 0,
                  "wgmma runs f16 x f16 -> f16 | f32, bf16 x bf16 -> f32, tf32 -> f32, e4m3/e5m2 (any pair) -> f32 "
                  "and s8/u8 (any pair) -> s32 here");
};

#define BLASDX_WG_SIXTEEN_BIT(TA, TACC, REG, WIDTHS, RS_WIDTHS, LIST, OP)                         \
    template <> struct mma<TA, TA, TACC> {                                                       \
        static constexpr int K_STEP = 16;                                                        \
        static constexpr bool TRANSPOSES = true, REGISTER_A = true;                              \
        using reg_type = REG;                                                                    \
        template <int WIDTH, bool TRANS_A, bool TRANS_B>                                         \
        __device__ __forceinline__ static void issue(REG* d, u64 desc_a, u64 desc_b) {           \
            (void)width_check<WIDTH>{};                                                          \
            WIDTHS(OP, BLASDX_WG_WITH_T, , "n"(int(TRANS_A)), "n"(int(TRANS_B)))                 \
        }                                                                                        \
        template <int WIDTH, bool TRANS_B>                                                       \
        __device__ __forceinline__ static void issue_rs(REG* d, const u32* a, u64 desc_b) {      \
            (void)width_check<WIDTH>{};                                                          \
            RS_WIDTHS(OP, LIST, BLASDX_WG_RS_TAIL_TRANS, , "n"(int(TRANS_B)))                    \
        }                                                                                        \
    };
BLASDX_WG_SIXTEEN_BIT(__half, float, float, BLASDX_WG_F32_WIDTHS, BLASDX_WG_RS_WORD_WIDTHS, BLASDX_WG_F,
                      "k16.f32.f16.f16")
BLASDX_WG_SIXTEEN_BIT(__half, __half, u32, BLASDX_WG_F16_WIDTHS, BLASDX_WG_RS_HALF_WIDTHS, BLASDX_WG_U,
                      "k16.f16.f16.f16")
BLASDX_WG_SIXTEEN_BIT(__nv_bfloat16, float, float, BLASDX_WG_F32_WIDTHS, BLASDX_WG_RS_WORD_WIDTHS, BLASDX_WG_F,
                      "k16.f32.bf16.bf16")
#undef BLASDX_WG_SIXTEEN_BIT

// tf32 (operands stored as float; the tensor core reads their upper 19 bits): K-major only.
// issue<..., ACCUMULATE = false> starts the sum afresh (scale-d 0: D = A * B): the first step of
// a 3xtf32 promotion interval (hopper/gemm.cuh) needs no zeroed registers.
template <> struct mma<tf32, tf32, float> {
    static constexpr int K_STEP = 8;
    static constexpr bool TRANSPOSES = false, REGISTER_A = false;  // no block plan runs tf32 on wgmma
    using reg_type = float;
    template <int WIDTH, bool TRANS_A, bool TRANS_B, bool ACCUMULATE = true>
    __device__ __forceinline__ static void issue(float* d, u64 desc_a, u64 desc_b) {
        (void)width_check<WIDTH>{};
        static_assert(!TRANS_A && !TRANS_B, "tf32 wgmma reads A and B K-major only");
        if constexpr (ACCUMULATE) {
            BLASDX_WG_F32_WIDTHS("k8.f32.tf32.tf32", BLASDX_WG_NO_T, )
        } else {
            static_assert(WIDTH != 192, "a fresh tf32 step is a power-of-two width");
            BLASDX_WG_WORD_WIDTHS("k8.f32.tf32.tf32", BLASDX_WG_F, ", 0, 1, 1")
        }
    }
};

// 8-bit types (fp8 -> f32, s8/u8 -> s32; k32, K-major only). issue<..., ACCUMULATE = false>
// starts the sum afresh (D = A * B, scale-d 0): the first step of an fp8 promotion interval
// (warpgroup_mma.cuh) needs no zeroed registers.
// KIND names the types in the static_asserts; SUM and START are the scale operands of a step that
// adds to D and of one that starts it afresh; RS_TAIL those of the register-A form.
#define BLASDX_WG_EIGHT_BIT(TA, TB, TACC, LIST, KIND, SUM, START, RS_TAIL, OP)                      \
    template <> struct mma<TA, TB, TACC> {                                                       \
        static constexpr int K_STEP = 32;                                                        \
        static constexpr bool TRANSPOSES = false, REGISTER_A = true;                             \
        using reg_type = TACC;                                                                   \
        template <int WIDTH, bool TRANS_A, bool TRANS_B, bool ACCUMULATE = true>                 \
        __device__ __forceinline__ static void issue(TACC* d, u64 desc_a, u64 desc_b) {          \
            (void)width_check<WIDTH>{};                                                          \
            static_assert(!TRANS_A && !TRANS_B, KIND " wgmma reads A and B K-major only");       \
            if constexpr (ACCUMULATE) {                                                          \
                BLASDX_WG_WORD_WIDTHS(OP, LIST, SUM)                                             \
            } else {                                                                             \
                BLASDX_WG_WORD_WIDTHS(OP, LIST, START)                                           \
            }                                                                                    \
        }                                                                                        \
        template <int WIDTH, bool TRANS_B>                                                       \
        __device__ __forceinline__ static void issue_rs(TACC* d, const u32* a, u64 desc_b) {     \
            (void)width_check<WIDTH>{};                                                          \
            static_assert(!TRANS_B, KIND " wgmma reads B K-major only");                         \
            BLASDX_WG_RS_WORD_WIDTHS(OP, LIST, RS_TAIL, )                                        \
        }                                                                                        \
    };

#ifdef __CUDA_FP8_TYPES_EXIST__
#define BLASDX_WG_FP8(TA, TB, OP) \
    BLASDX_WG_EIGHT_BIT(TA, TB, float, BLASDX_WG_F, "fp8", ", 1, 1, 1", ", 0, 1, 1", BLASDX_WG_RS_TAIL_SCALES, OP)
BLASDX_WG_FP8(__nv_fp8_e4m3, __nv_fp8_e4m3, "k32.f32.e4m3.e4m3")
BLASDX_WG_FP8(__nv_fp8_e4m3, __nv_fp8_e5m2, "k32.f32.e4m3.e5m2")
BLASDX_WG_FP8(__nv_fp8_e5m2, __nv_fp8_e4m3, "k32.f32.e5m2.e4m3")
BLASDX_WG_FP8(__nv_fp8_e5m2, __nv_fp8_e5m2, "k32.f32.e5m2.e5m2")
#undef BLASDX_WG_FP8
#endif

// s8 / u8 in any pair -> s32 (exact: wraps modulo 2^32 like int32 arithmetic, no .satfinite).
#define BLASDX_WG_INT8(TA, TB, OP) \
    BLASDX_WG_EIGHT_BIT(TA, TB, int, BLASDX_WG_U, "integer", ", 1", ", 0", BLASDX_WG_RS_TAIL_ACCUMULATE, OP)
BLASDX_WG_INT8(signed char, signed char, "k32.s32.s8.s8")
BLASDX_WG_INT8(signed char, unsigned char, "k32.s32.s8.u8")
BLASDX_WG_INT8(unsigned char, signed char, "k32.s32.u8.s8")
BLASDX_WG_INT8(unsigned char, unsigned char, "k32.s32.u8.u8")
#undef BLASDX_WG_INT8
#undef BLASDX_WG_EIGHT_BIT

}  // namespace wgmma
}  // namespace blasdx

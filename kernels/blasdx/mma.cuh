// Warp-level MMA atoms: one mma.sync instruction each, with the (row, col) of every
// fragment element so that fragments can be gathered from any shared-memory layout.
//
// Coordinates follow the PTX ISA fragment figures (section "Matrix fragments for mma"):
// g = lane / 4 (group), t = lane % 4 (thread in group). Element e of a fragment is the
// e-th value of the fragment's registers taken in order, low half / byte first.
#pragma once

#include "types.cuh"

namespace blasdx {

// ---- shapes: fragment sizes and element coordinates ----------------------------------------

// What every 16 x 8 shape shares: B's column and the C fragment (four values, rows g and g + 8,
// columns 2t and 2t + 1). A shape adds K and where its A and B elements sit.
struct m16n8_tile {
    static constexpr int M = 16, N = 8, C_ELEMS = 4;
    __device__ static int b_col(int lane, int) { return lane >> 2; }
    __device__ static int c_row(int lane, int e) { return (lane >> 2) + 8 * (e >> 1); }
    __device__ static int c_col(int lane, int e) { return 2 * (lane & 3) + (e & 1); }
};

struct shape_m16n8k16 : m16n8_tile {  // 16-bit A/B
    static constexpr int K = 16, A_ELEMS = 8, B_ELEMS = 4;
    __device__ static int a_row(int lane, int e) { return (lane >> 2) + 8 * ((e >> 1) & 1); }
    __device__ static int a_k(int lane, int e) { return 2 * (lane & 3) + (e & 1) + 8 * (e >> 2); }
    __device__ static int b_k(int lane, int e) { return 2 * (lane & 3) + (e & 1) + 8 * (e >> 1); }
};

struct shape_m16n8k8_16bit : m16n8_tile {  // 16-bit A/B on sm_75
    static constexpr int K = 8, A_ELEMS = 4, B_ELEMS = 2;
    __device__ static int a_row(int lane, int e) { return (lane >> 2) + 8 * (e >> 1); }
    __device__ static int a_k(int lane, int e) { return 2 * (lane & 3) + (e & 1); }
    __device__ static int b_k(int lane, int e) { return 2 * (lane & 3) + e; }
};

struct shape_m16n8k32 : m16n8_tile {  // 8-bit A/B (integers, fp8)
    static constexpr int K = 32, A_ELEMS = 16, B_ELEMS = 8;
    __device__ static int a_row(int lane, int e) { return (lane >> 2) + 8 * ((e >> 2) & 1); }
    __device__ static int a_k(int lane, int e) { return 4 * (lane & 3) + (e & 3) + 16 * (e >> 3); }
    __device__ static int b_k(int lane, int e) { return 4 * (lane & 3) + (e & 3) + 16 * (e >> 2); }
};

// One element per register (tf32, and f64 on sm_90's DMMA): 16 x 8 tiles with K = 4, 8 or 16.
// A holds K / 2 elements per thread, element e at row g + 8 * (e % 2), k = t + 4 * (e / 2); B
// holds K / 4, element e at k = t + 4 * e, column g.
template <int K_>
struct shape_m16n8_word : m16n8_tile {
    static constexpr int K = K_, A_ELEMS = K / 2, B_ELEMS = K / 4;
    static_assert(K == 4 || K == 8 || K == 16, "16 x 8 tiles of one element per register have K = 4, 8, 16");
    __device__ static int a_row(int lane, int e) { return (lane >> 2) + 8 * (e & 1); }
    __device__ static int a_k(int lane, int e) { return (lane & 3) + 4 * (e >> 1); }
    __device__ static int b_k(int lane, int e) { return (lane & 3) + 4 * e; }
};
using shape_m16n8k8_tf32 = shape_m16n8_word<8>;
template <int K> using shape_m16n8_f64 = shape_m16n8_word<K>;

struct shape_m8n8k4 {  // f64 before sm_90
    static constexpr int M = 8, N = 8, K = 4, A_ELEMS = 1, B_ELEMS = 1, C_ELEMS = 2;
    __device__ static int a_row(int lane, int) { return lane >> 2; }
    __device__ static int a_k(int lane, int) { return lane & 3; }
    __device__ static int b_k(int lane, int) { return lane & 3; }
    __device__ static int b_col(int lane, int) { return lane >> 2; }
    __device__ static int c_row(int lane, int) { return lane >> 2; }
    __device__ static int c_col(int lane, int e) { return 2 * (lane & 3) + e; }
};

// ---- atoms: shape + element types + the instruction ----------------------------------------
//
// mma(d, a, b): d += a * b, with a and b the fragments as 32-bit registers (64-bit for f64).

template <class TA, class TB, class TAcc> struct mma_m16n8k16;

template <class TA, class TB, class TAcc> struct mma_m16n8k8;

// 16-bit operands summed in f32, at K = 16 and K = 8 (sm_75 runs f16 at K = 8; bf16 needs sm_80
// and takes K = 8 for the K tails of its m16n8k16 plans, tail_atom below).
#define BLASDX_MMA_16BIT_F32(T, PTX)                                                                           \
    template <> struct mma_m16n8k16<T, T, float> : shape_m16n8k16 {                                            \
        using a_type = T; using b_type = T; using acc_type = float;                                             \
        __device__ static void mma(float* d, const u32* a, const u32* b) {                                    \
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTX "." PTX ".f32 {%0,%1,%2,%3}, "          \
                         "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                                           \
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                     \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                \
        }                                                                                                      \
    };                                                                                                         \
    template <> struct mma_m16n8k8<T, T, float> : shape_m16n8k8_16bit {                                        \
        using a_type = T; using b_type = T; using acc_type = float;                                             \
        __device__ static void mma(float* d, const u32* a, const u32* b) {                                    \
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32." PTX "." PTX ".f32 {%0,%1,%2,%3}, {%4,%5}, " \
                         "{%6}, {%0,%1,%2,%3};\n"                                                             \
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                     \
                         : "r"(a[0]), "r"(a[1]), "r"(b[0]));                                                   \
        }                                                                                                      \
    };

BLASDX_MMA_16BIT_F32(__half, "f16")
BLASDX_MMA_16BIT_F32(__nv_bfloat16, "bf16")

#undef BLASDX_MMA_16BIT_F32

template <> struct mma_m16n8k16<__half, __half, __half> : shape_m16n8k16 {
    using a_type = __half; using b_type = __half; using acc_type = __half;
    __device__ static void mma(__half* d, const u32* a, const u32* b) {
        u32* c = reinterpret_cast<u32*>(d);
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, "
                     "{%0,%1};\n"
                     : "+r"(c[0]), "+r"(c[1])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

template <> struct mma_m16n8k8<__half, __half, __half> : shape_m16n8k8_16bit {
    using a_type = __half; using b_type = __half; using acc_type = __half;
    __device__ static void mma(__half* d, const u32* a, const u32* b) {
        u32* c = reinterpret_cast<u32*>(d);
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3}, {%4}, {%0,%1};\n"
                     : "+r"(c[0]), "+r"(c[1])
                     : "r"(a[0]), "r"(a[1]), "r"(b[0]));
    }
};

// tf32 operands live in shared memory as float and go to the tensor core as stored: it reads
// the upper 19 bits of each (tf32 values pass unchanged, others are truncated), as wgmma does
// and as cuBLASDx's tfloat32_t operands arrive. Rounding every fragment element first cost one
// conversion per register, the tf32 loop's largest cost once its K steps were unrolled
// (block compute on an H200, 48x80x24: 3.5 -> 2.0 instructions per MMA, 239 -> 270 TFLOP/s).
template <> struct mma_m16n8k8<tf32, tf32, float> : shape_m16n8k8_tf32 {
    using a_type = float; using b_type = float; using acc_type = float;
    __device__ static void mma(float* d, const u32* a, const u32* b) {
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

// 8-bit operands: the PTX type names of each storage type.
#define BLASDX_MMA_K32(TA, TB, TAcc, PTXA, PTXB, PTXACC, CONSTRAINT)                                     \
    template <> struct mma_m16n8k32<TA, TB, TAcc> : shape_m16n8k32 {                                    \
        using a_type = TA; using b_type = TB; using acc_type = TAcc;                                       \
        __device__ static void mma(TAcc* d, const u32* a, const u32* b) {                                  \
            asm volatile("mma.sync.aligned.m16n8k32.row.col." PTXACC "." PTXA "." PTXB "." PTXACC          \
                         " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                        \
                         : "+" CONSTRAINT(d[0]), "+" CONSTRAINT(d[1]), "+" CONSTRAINT(d[2]),               \
                           "+" CONSTRAINT(d[3])                                                            \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));              \
        }                                                                                                  \
    };

template <class TA, class TB, class TAcc> struct mma_m16n8k32;
BLASDX_MMA_K32(signed char, signed char, int, "s8", "s8", "s32", "r")
BLASDX_MMA_K32(signed char, unsigned char, int, "s8", "u8", "s32", "r")
BLASDX_MMA_K32(unsigned char, signed char, int, "u8", "s8", "s32", "r")
BLASDX_MMA_K32(unsigned char, unsigned char, int, "u8", "u8", "s32", "r")
#ifdef __CUDA_FP8_TYPES_EXIST__
BLASDX_MMA_K32(__nv_fp8_e4m3, __nv_fp8_e4m3, float, "e4m3", "e4m3", "f32", "f")
BLASDX_MMA_K32(__nv_fp8_e4m3, __nv_fp8_e5m2, float, "e4m3", "e5m2", "f32", "f")
BLASDX_MMA_K32(__nv_fp8_e5m2, __nv_fp8_e4m3, float, "e5m2", "e4m3", "f32", "f")
BLASDX_MMA_K32(__nv_fp8_e5m2, __nv_fp8_e5m2, float, "e5m2", "e5m2", "f32", "f")
#endif
#undef BLASDX_MMA_K32

template <class TA, class TB, class TAcc> struct mma_m8n8k4;
template <> struct mma_m8n8k4<double, double, double> : shape_m8n8k4 {
    using a_type = double; using b_type = double; using acc_type = double;
    __device__ static void mma(double* d, const double* a, const double* b) {
        asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
                     : "+d"(d[0]), "+d"(d[1])
                     : "d"(a[0]), "d"(b[0]));
    }
};

// sm_90 f64 atoms (PTX ISA 7.8): d += a * b over a 16 x 8 x K tile.
template <int K> struct mma_m16n8_f64;
template <> struct mma_m16n8_f64<4> : shape_m16n8_f64<4> {
    using a_type = double; using b_type = double; using acc_type = double;
    __device__ static void mma(double* d, const double* a, const double* b) {
        asm volatile("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                     "{%0,%1,%2,%3};\n"
                     : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
                     : "d"(a[0]), "d"(a[1]), "d"(b[0]));
    }
};
template <> struct mma_m16n8_f64<8> : shape_m16n8_f64<8> {
    using a_type = double; using b_type = double; using acc_type = double;
    __device__ static void mma(double* d, const double* a, const double* b) {
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
                     : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
    }
};
template <> struct mma_m16n8_f64<16> : shape_m16n8_f64<16> {
    using a_type = double; using b_type = double; using acc_type = double;
    __device__ static void mma(double* d, const double* a, const double* b) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, {%0,%1,%2,%3};\n"
                     : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
                     : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]),
                       "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
    }
};

// The f64 m16n8k8 atom under the family name the block GEMM plans use (mma.sync.m16n8k8).
template <> struct mma_m16n8k8<double, double, double> : mma_m16n8_f64<8> {};

// The atom that runs the last K step of a K that Atom's K does not divide: the 16-bit m16n8k8
// where the REST values left fit in it (the same A rows, B columns and C layout at half the
// MMA's work: K = 24 takes one m16n8k16 and one m16n8k8 step, not two m16n8k16), else Atom.
template <class Atom, int REST> struct tail_atom { using type = Atom; };
template <class TA, class TB, class TAcc, int REST> struct tail_atom<mma_m16n8k16<TA, TB, TAcc>, REST> {
    using type = typename std_conditional<REST <= 8, mma_m16n8k8<TA, TB, TAcc>, mma_m16n8k16<TA, TB, TAcc>>::type;
};

// Row order that keeps 16-byte f64 fragment loads free of bank conflicts: within each group of
// eight rows, the instruction's row g reads row (g >> 1) | 4 * (g & 1), so that the two rows one
// quarter-warp reads (g = 2q, 2q + 1) sit four rows apart. Four rows of a stride that is an odd
// number of 16-byte chunks, or one 1024-byte swizzle atom's half, put them in opposite halves of
// the 128-byte bank line.
__host__ __device__ __forceinline__ constexpr int dmma_row_order(int g) { return (g >> 1) | ((g & 1) << 2); }

// ---- fragment registers -------------------------------------------------------------------

// Registers that hold N elements of T: 32-bit words, or doubles for f64.
template <class T, int N> struct fragment {
    static constexpr int WORDS = (N * int(sizeof(T)) + 3) / 4;
    u32 reg[WORDS];
    __device__ __forceinline__ T* elems() { return reinterpret_cast<T*>(reg); }
    __device__ __forceinline__ const u32* regs() const { return reg; }
};
template <int N> struct fragment<double, N> {
    double reg[N];
    __device__ __forceinline__ double* elems() { return reg; }
    __device__ __forceinline__ const double* regs() const { return reg; }
};

}  // namespace blasdx

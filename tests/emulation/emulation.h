// Host stand-ins for the CUDA features blasdx's TRSM and FMA GEMM code uses, so that the real kernel code
// runs on the CPU (tests/host_emulation.py): one OS thread per CUDA thread, __syncthreads() a
// std::barrier, shared memory a static array, cp.async and mma.sync left out (the code under
// test takes their plain paths without __CUDA_ARCH__). Built with ThreadSanitizer, a missing
// barrier shows up as a data race.
#pragma once
// Every standard header of a build (launch.inc's too), so that the precompiled emulation.h holds them all.
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
using std::fabs;
using std::fma;
#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct alignas(8) float2 { float x, y; };
struct alignas(16) double2 { double x, y; };
inline thread_local dim3 threadIdx;
inline dim3 blockIdx, blockDim, gridDim;
inline std::barrier<>* emulated_barrier = nullptr;
inline void __syncthreads() { emulated_barrier->arrive_and_wait(); }
inline void __trap() { std::abort(); }
inline float __frcp_rn(float v) { return 1.0f / v; }
inline double __drcp_rn(double v) { return 1.0 / v; }
// the shared-window address: on the host the plain address, whose low bits give the alignment
inline std::size_t __cvta_generic_to_shared(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
inline float __uint_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
inline unsigned __float_as_uint(float v) { unsigned u; std::memcpy(&u, &v, 4); return u; }
inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, 4); return f; }
inline int __float_as_int(float v) { int i; std::memcpy(&i, &v, 4); return i; }
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((static_cast<unsigned long long>(a) * b) >> 32); }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
inline long long __double_as_longlong(double v) { long long i; std::memcpy(&i, &v, 8); return i; }
// byte i of the result is byte (s >> 4i) & 7 of the eight bytes of x (0-3) and y (4-7)
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long bytes = x | (static_cast<unsigned long long>(y) << 32);
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= static_cast<unsigned>((bytes >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}

// dynamic shared memory: a kernel in namespace blasdx declares blasdx::smem, a user's kernel ::smem
constexpr std::size_t EMULATED_SHARED_MEMORY = 240 * 1024;
alignas(1024) inline unsigned char smem[EMULATED_SHARED_MEMORY];
namespace blasdx {
alignas(1024) inline unsigned char smem[EMULATED_SHARED_MEMORY];
}

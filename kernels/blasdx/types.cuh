// blasdx element types and conversions.
//
// Storage types are CUDA's own (__half, __nv_bfloat16, __nv_fp8_e4m3, ...); complex values
// are interleaved (real, imaginary) pairs. Arithmetic happens in a compute type (float,
// double or int) chosen per combination by the Python side.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>

// The most threads any block of the kernel is launched with, where its launcher promises it
// (blasdx.compile_kernel defines it from its block); 0 where nothing is promised.
#ifndef BLASDX_BLOCK_THREADS
#define BLASDX_BLOCK_THREADS 0
#endif

namespace blasdx {

typedef unsigned int u32;
typedef long long i64;

// Whether thread tid of the block takes part in work spread over the first THREADS threads.
// Where the block has no more threads than that, every thread does and the check compiles
// away: a branch around each GEMM would keep the compiler from unrolling the caller's loop
// around it and from reusing fragments across its iterations.
template <int THREADS> __device__ __forceinline__ bool takes_part(int tid) {
    if constexpr (BLASDX_BLOCK_THREADS > 0 && BLASDX_BLOCK_THREADS <= THREADS) {
        return true;
    } else {
        return tid < THREADS;
    }
}

// std::conditional without the standard library (NVRTC compiles without host headers).
template <bool B, class T, class F> struct std_conditional { using type = T; };
template <class T, class F> struct std_conditional<false, T, F> { using type = F; };

// Tag of tf32 operands: stored as float, multiplied with 10 mantissa bits by the tensor cores.
struct tf32 {};

template <class T>
struct alignas(2 * sizeof(T)) complex {
    T x, y;
};

template <class T> struct is_complex { static constexpr bool value = false; };
template <class T> struct is_complex<complex<T>> { static constexpr bool value = true; };

// The real part type of an element type (itself for real types).
template <class T> struct real_of { using type = T; };
template <class T> struct real_of<complex<T>> { using type = T; };

// ---- conversions to and from compute types -------------------------------------------------

__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(double v) { return static_cast<float>(v); }
__device__ __forceinline__ float to_float(int v) { return static_cast<float>(v); }
__device__ __forceinline__ float to_float(signed char v) { return static_cast<float>(v); }
__device__ __forceinline__ float to_float(unsigned char v) { return static_cast<float>(v); }

template <class S> struct convert;  // convert<S>::from(x) and convert<S>::to<T>(s)

template <> struct convert<float> {
    template <class T> __device__ __forceinline__ static float from(T v) { return to_float(v); }
    template <class T> __device__ __forceinline__ static T to(float v);
};
template <> __device__ __forceinline__ float convert<float>::to<float>(float v) { return v; }
template <> __device__ __forceinline__ __half convert<float>::to<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 convert<float>::to<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

template <> struct convert<double> {
    __device__ __forceinline__ static double from(double v) { return v; }
    template <class T> __device__ __forceinline__ static T to(double v) { return static_cast<T>(v); }
};

template <> struct convert<int> {
    __device__ __forceinline__ static int from(int v) { return v; }
    template <class T> __device__ __forceinline__ static T to(int v) { return static_cast<T>(v); }
};

// Negation of one real value of a storage type (used for the imaginary parts of complex MMAs).
__device__ __forceinline__ __half negate(__half v) { return __hneg(v); }
__device__ __forceinline__ double negate(double v) { return -v; }
__device__ __forceinline__ float negate(float v) { return -v; }

// Zero of a storage type, for predicated (out-of-range) fragment elements.
template <class T> __device__ __forceinline__ T zero() { return T(0); }
template <> __device__ __forceinline__ __half zero<__half>() { return __ushort_as_half(0); }
template <> __device__ __forceinline__ __nv_bfloat16 zero<__nv_bfloat16>() { return __ushort_as_bfloat16(0); }

}  // namespace blasdx

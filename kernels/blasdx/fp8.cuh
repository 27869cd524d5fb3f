// fp8 (e4m3, e5m2) support: included only by kernels that use fp8, since cuda_fp8.h is large.
#pragma once

#include <cuda_fp8.h>
#include "types.cuh"

namespace blasdx {

__device__ __forceinline__ float to_float(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
__device__ __forceinline__ float to_float(__nv_fp8_e5m2 v) { return static_cast<float>(v); }

template <> __device__ __forceinline__ __nv_fp8_e4m3 zero<__nv_fp8_e4m3>() {
    __nv_fp8_e4m3 z;
    z.__x = 0;
    return z;
}
template <> __device__ __forceinline__ __nv_fp8_e5m2 zero<__nv_fp8_e5m2>() {
    __nv_fp8_e5m2 z;
    z.__x = 0;
    return z;
}

}  // namespace blasdx

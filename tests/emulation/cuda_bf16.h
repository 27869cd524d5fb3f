#pragma once
struct __nv_bfloat16 { unsigned short x; };
inline float __bfloat162float(__nv_bfloat16) { return 0.0f; }
inline __nv_bfloat16 __float2bfloat16_rn(float) { return __nv_bfloat16{0}; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short v) { return __nv_bfloat16{v}; }
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
inline __nv_bfloat162 __floats2bfloat162_rn(float, float) { return __nv_bfloat162{}; }

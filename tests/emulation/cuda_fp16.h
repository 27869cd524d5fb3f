// host stand-ins for the 16-bit types the blasdx headers name (the TRSM emulation never uses them)
#pragma once
struct __half { unsigned short x; };
inline float __half2float(__half) { return 0.0f; }
inline __half __float2half_rn(float) { return __half{0}; }
inline __half __hneg(__half v) { return v; }
inline __half __ushort_as_half(unsigned short v) { return __half{v}; }
struct __half2 { __half x, y; };
inline __half2 __floats2half2_rn(float, float) { return __half2{}; }

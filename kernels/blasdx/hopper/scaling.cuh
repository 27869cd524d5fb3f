// Scaled fp8 GEMM epilogue: D = (sx * sy) * acc + bias, the scale factors that do not vary
// along K (per tensor, per row of X, per column of Y) applied once to the finished sum.
//
// Factors that vary along K (1 x 128 blocks of X, 128 x 128 blocks of Y) cannot wait for the
// end: they are applied at each promotion (promotion.cuh's BlockScales), and this epilogue
// treats them as 1. A scale is f32 in global memory, read with element strides.
#pragma once

#include "epilogue.cuh"

namespace blasdx {
namespace hopper {

// How one operand's scale covers it (the host's names in blasdx/scaled_mm.py).
enum Scaling : int {
    SCALE_TENSOR = 0,  // one factor for the whole operand: s[0]
    SCALE_VECTOR = 1,  // one per row of X (s[row * stride]) or per column of Y (s[col * stride])
    SCALE_BLOCK = 2,   // per 1 x 128 block of X or 128 x 128 block of Y: applied at promotion
};

// The pair functor: value() for the TMA-store epilogue, operator() for direct stores or, with
// `split`, for a split's partial sums (scaled, without the bias, which the split-K reduction
// adds once as its C: a row stride of 0 repeats it down the rows).
template <class TC, int XS, int YS>
struct Dequantize {
    TC* d;
    float* workspace;
    const float* sx;
    const float* sy;
    const TC* bias;  // null: none
    int m, n;
    i64 sx_stride, sy_stride, d_row, d_col;
    bool split, d_pairs;
    float tensor;  // the product of the per-tensor factors (1 when there are none)

    __device__ __forceinline__ Dequantize(TC* d_, float* workspace_, const float* sx_, i64 sx_stride_,
                                          const float* sy_, i64 sy_stride_, const TC* bias_, int m_, int n_,
                                          i64 d_row_, i64 d_col_, bool split_)
        : d(d_), workspace(workspace_), sx(sx_), sy(sy_), bias(bias_), m(m_), n(n_), sx_stride(sx_stride_),
          sy_stride(sy_stride_), d_row(d_row_), d_col(d_col_), split(split_) {
        d_pairs = pairs_aligned(d, d_row, d_col, i64(0));
        tensor = (XS == SCALE_TENSOR ? __ldg(sx) : 1.0f) * (YS == SCALE_TENSOR ? __ldg(sy) : 1.0f);
    }

    // (v0, v1) at (row, col), (row, col + 1) scaled, plus the bias (not for a split's partial sums).
    __device__ __forceinline__ void value(const Work&, int row, int col, float& v0, float& v1) const {
        const int c0 = min(col, n - 1), c1 = min(col + 1, n - 1);  // past N: any factor (not stored)
        float f = tensor;
        if constexpr (XS == SCALE_VECTOR) f *= __ldg(sx + min(row, m - 1) * sx_stride);
        float f0 = f, f1 = f;
        if constexpr (YS == SCALE_VECTOR) {
            f0 *= __ldg(sy + c0 * sy_stride);
            f1 *= __ldg(sy + c1 * sy_stride);
        }
        v0 *= f0;
        v1 *= f1;
        if (bias != nullptr && !split) {
            v0 += load_value<float>(bias + c0);
            v1 += load_value<float>(bias + c1);
        }
    }

    __device__ __forceinline__ void operator()(const Work& w, int row, int col, float v0, float v1) const {
        if (row >= m || col >= n) return;
        value(w, row, col, v0, v1);
        if (split) {
            SplitKPartial<float>{workspace, m, n, 1}(w, row, col, v0, v1);
            return;
        }
        store_two(d + row * d_row + col * d_col, v0, v1, d_col, col + 1 < n, d_pairs);
    }
};

}  // namespace hopper
}  // namespace blasdx

"""Array-level calls on whole arrays: matmul / mma, scaled_mm, solve_triangular, and the tiled multi-block GEMM.

The top layer: each call builds a plan from the arrays' types, shapes and strides and hands it
to the engine, the tiled kernel or the block kernels.
"""

from . import complex_matmul as _complex_matmul  # noqa: F401  (routes complex inputs of matmul / mma)

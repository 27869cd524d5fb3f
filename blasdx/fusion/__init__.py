"""Fusion: users' own kernels with blasdx GEMM types in scope (compile_kernel, FusedKernel, headers), and the
Numba-CUDA bridge (numba_types, numba_lowering: descriptors inside ``@cuda.jit`` kernels, see blasdx.numba)."""

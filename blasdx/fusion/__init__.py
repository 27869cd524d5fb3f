"""Fusion: users' own kernels with blasdx GEMM types in scope (compile_kernel, FusedKernel, headers)."""

"""Running descriptors: argument checks and launches of the batched block kernels (GEMM, TRSM), precompile.

``Descriptor.compile()`` / ``execute()`` land here (through :mod:`blasdx.describe.backend`).
"""

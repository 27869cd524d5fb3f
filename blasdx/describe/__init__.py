"""Description: the operators, the GEMM and TRSM descriptors they compose into, and the schemes of products.

A descriptor is a value (frozen, hashable, picklable) that validates itself and answers its
traits from :mod:`blasdx.plan`. Its ``source()`` / ``compile()`` / ``execute()`` reach the
layers above through :mod:`blasdx.describe.backend`, which the package wires at import, so
this layer imports nothing above the plans.
"""

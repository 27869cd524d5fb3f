"""The Hopper device-level GEMM: tile plans, tensor maps, the 16-bit / 8-bit / tf32 and wide (f32, f64) paths,
DeviceGemm for user kernels, and the precision schemes that run on it (emulation, Ozaki residues).
"""

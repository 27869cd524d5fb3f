"""A blasdx GEMM linked into a kernel that blasdx never sees: LTO-IR and cuda.core's Program / Linker.

    python examples/ltoir_cuda_core.py [--batch N] [--size S]

``desc.ltoir()`` compiles the descriptor's extern "C" entry points (plain pointers, scalars by
value) to LTO-IR; ``.declarations`` are their C prototypes and ``.symbols`` their names. The
kernel below is compiled on its own (no blasdx header: only those prototypes), then nvJitLink
links both with link-time optimisation, so the GEMM inlines into the kernel as if it were one
source. Any JIT that emits LTO-IR or PTX can link the same way.

Without a GPU the script compiles and links for sm_90a and prints the kernel's SASS summary.
"""

from __future__ import annotations

import sys

import numpy as np

import blasdx as bx
from blasdx.reference import assert_close, random_operand, reference_gemm, tolerance

KERNEL = r"""
// One problem per block: C[p] = alpha * A[p] B[p] through shared memory.
extern "C" __global__ void batched_gemm(const unsigned char* a, const unsigned char* b, unsigned char* c,
                                        float alpha, long long a_bytes, long long b_bytes, long long c_bytes) {
    extern __shared__ __align__(16) unsigned char smem[];
    void *sa, *sb, *sc;
    GEMM_slice_shared_memory(smem, &sa, &sb, &sc);
    const long long p = blockIdx.x;
    GEMM_load_a(a + p * a_bytes, sa);
    GEMM_load_b(b + p * b_bytes, sb);
    GEMM_copy_wait();
    GEMM_execute(alpha, 0.0f, sa, sb, 0.0f, 0.0f, sc);
    __syncthreads();
    GEMM_store_c(sc, c + p * c_bytes);
}
"""


def link(gemm: bx.Descriptor):
    """The cubin of KERNEL linked with the GEMM's LTO-IR (cuda.core ObjectCode)."""
    from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions

    lto = gemm.ltoir()
    # The kernel names the entry points GEMM_<role>; the prototypes name them by their real symbols.
    source = lto.declarations + "".join(f"#define GEMM_{role} {name}\n" for role, name in lto.symbols.items()) + KERNEL
    options = ProgramOptions(arch=lto.arch, relocatable_device_code=True, link_time_optimization=True)
    kernel_ltoir = Program(source, "c++", options).compile("ltoir").code
    linker = Linker(
        ObjectCode.from_ltoir(kernel_ltoir, name="batched_gemm"),
        ObjectCode.from_ltoir(lto.data, name=lto.name),
        options=LinkerOptions(arch=lto.arch, link_time_optimization=True),
    )
    return linker.link("cubin")


def main() -> int:
    from gpu_device import device_sm, sized_parser  # examples/ is on sys.path

    args = sized_parser(__doc__, batch=100_000, size=64).parse_args()

    sm = device_sm()
    s = args.size
    gemm = (bx.Size(s, s, s) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM
            + bx.Arrangement(bx.row_major, bx.col_major, bx.col_major)
            + bx.SM(sm or 90, arch_specific=(sm or 90) == 90) + bx.Block())
    print(gemm, "->", gemm.instruction)
    cubin = link(gemm)
    print(f"linked for {gemm.arch}: {len(cubin.code)} bytes of cubin")
    if sm is None:
        print("no GPU found: skipped the run")
        return 0

    import cupy as cp
    from cuda.core import Device, LaunchConfig, launch

    device = Device()
    device.set_current()
    stream = device.create_stream()
    rng = np.random.default_rng(7)
    a = random_operand(bx.float16, (args.batch, s, s), rng)                     # row-major A
    b = random_operand(bx.float16, (args.batch, s, s), rng).transpose(0, 2, 1)  # column-major B
    da = cp.asarray(a)
    db = cp.asarray(np.ascontiguousarray(b.transpose(0, 2, 1)))  # storage (batch, N, K) = column-major B
    dc = cp.full((args.batch, s, s), np.nan, np.float32)          # storage (batch, N, M) = column-major C
    kernel = cubin.get_kernel("batched_gemm")
    smem = gemm.shared_memory_size
    if smem > 48 * 1024:  # above 48 KB a kernel must opt in to its dynamic shared memory
        from cuda.bindings import driver

        attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        driver.cuKernelSetAttribute(attribute, smem, kernel.handle, driver.CUdevice(device.device_id))
    config = LaunchConfig(grid=args.batch, block=gemm.block_dim, shmem_size=smem)
    cp.cuda.runtime.deviceSynchronize()
    launch(stream, config, kernel, da.data.ptr, db.data.ptr, dc.data.ptr, np.float32(1.0),
           np.int64(s * s * 2), np.int64(s * s * 2), np.int64(s * s * 4))
    stream.sync()
    got = cp.asnumpy(dc).transpose(0, 2, 1)
    pick = rng.choice(args.batch, size=min(500, args.batch), replace=False)
    assert_close(got[pick], reference_gemm(a[pick], b[pick]), tolerance(bx.float16, bx.float32, s))
    print(f"checked {len(pick)} of {args.batch} problems against the float64 reference: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

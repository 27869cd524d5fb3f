"""Kernels that call a descriptor's LTO-IR entry points, linked with nvJitLink (CPU and GPU tests).

The kernels see only the C prototypes of ``desc.ltoir().declarations`` (no blasdx header), as
any other JIT would: ``shared_api`` runs the shared-memory execute with loads, beta and a
store; ``register_api`` accumulates into a per-thread fragment and writes it with axpby.
One problem per block; operands are dense per problem in the descriptor's arrangement.
"""

from __future__ import annotations

import functools

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt


def link_cases(types_by_name: dict[str, tuple], sms: list[tuple[int, bool]]):
    """pytest params (types, sm, arch_specific) of each (A, B, C) on each (sm, arch_specific) of ``sms`` it runs on."""
    for name, types in types_by_name.items():
        row = dt.find_combination(*types, False)
        for sm, specific in sms:
            if row.min_sm <= sm:
                yield pytest.param(types, sm, specific, id=f"{name}-sm{sm}{'a' if specific else ''}")


def tensor_opcodes(desc: bx.Descriptor) -> set[str]:
    """The SASS opcodes ``desc``'s instruction becomes: a kernel with its GEMM must hold one of them."""
    a = desc.precision[0]
    if desc.instruction == "fma":
        return {"FFMA", "DFMA"}
    if desc.instruction.startswith("wgmma"):
        return {"HGMMA", "QGMMA", "IGMMA"}
    if a == dt.float64:
        return {"DMMA"}
    if a in (dt.float8_e4m3, dt.float8_e5m2):
        return {"QMMA"} if desc.sm == 89 else {"HMMA"}
    if a in (dt.int8, dt.uint8):
        return {"IMMA"}
    return {"HMMA"}


KERNELS = r"""
// Both kernels: the same arguments, and A and B of this block's problem loaded into the GEMM's shared memory.
#define KERNEL(name)                                                                                           \
    extern "C" __global__ void name(const unsigned char* a, const unsigned char* b, unsigned char* c,         \
                                    SCALAR alpha, SCALAR beta, long long a_bytes, long long b_bytes,          \
                                    long long c_bytes)
#define LOAD_AB()                                                                                              \
    extern __shared__ __align__(16) unsigned char smem[];                                                      \
    void *sa, *sb, *sc;                                                                                        \
    GEMM_slice_shared_memory(smem, &sa, &sb, &sc);                                                             \
    const long long p = blockIdx.x;                                                                            \
    GEMM_load_a(a + p * a_bytes, sa);                                                                          \
    GEMM_load_b(b + p * b_bytes, sb)

KERNEL(shared_api) {
    LOAD_AB();
    if (beta != SCALAR(0)) GEMM_load_c(c + p * c_bytes, sc);
    GEMM_copy_wait();
    GEMM_execute(alpha, SCALAR(0), sa, sb, beta, SCALAR(0), sc);
    __syncthreads();
    GEMM_store_c(sc, c + p * c_bytes);
}

#if FRAGMENT_SIZE > 0
KERNEL(register_api) {
    LOAD_AB();
    GEMM_copy_wait();
    alignas(16) unsigned char fragment[FRAGMENT_SIZE * FRAGMENT_BYTES];
#pragma unroll
    for (int i = 0; i < FRAGMENT_SIZE * FRAGMENT_BYTES; ++i) fragment[i] = 0;
    GEMM_accumulate(sa, sb, fragment);
    GEMM_fragment_axpby(fragment, alpha, SCALAR(0), beta, SCALAR(0), c + p * c_bytes, C_INNER);
}
#endif
"""


def nvjitlink_available() -> bool:
    """Whether cuda.core can link LTO-IR here (nvJitLink found)."""
    try:
        from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions

        code = Program('extern "C" __global__ void k() {}', "c++",
                       ProgramOptions(arch="sm_80", relocatable_device_code=True,
                                      link_time_optimization=True)).compile("ltoir").code
        Linker(ObjectCode.from_ltoir(code, name="k"),
               options=LinkerOptions(arch="sm_80", link_time_optimization=True)).link("cubin")
        return True
    except Exception:  # noqa: BLE001 - any failure means: no usable nvJitLink
        return False


def require_nvjitlink() -> None:
    if not _nvjitlink():
        pytest.skip("needs nvJitLink (pip install nvidia-nvjitlink, or blasdx[numba])")


@functools.cache
def _nvjitlink() -> bool:
    return nvjitlink_available()


def kernel_source(desc: bx.Descriptor) -> str:
    """The test kernels with the descriptor's prototypes and names in front."""
    lto = desc.ltoir()
    p = desc._problem_shape()
    defines = {
        "SCALAR": desc.scalar_type.cpp,
        "FRAGMENT_SIZE": lto.fragment_size,
        "FRAGMENT_BYTES": desc.accumulator_type.size * (2 if desc.is_complex else 1),
        "C_INNER": p.c_inner,
        **{f"GEMM_{role}": name for role, name in lto.symbols.items()},
    }
    return lto.declarations + "".join(f"#define {k} {v}\n" for k, v in defines.items()) + KERNELS


@functools.cache
def link(desc: bx.Descriptor):
    """cuda.core ObjectCode (cubin) of the test kernels linked with the descriptor's LTO-IR."""
    from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions

    lto = desc.ltoir()
    options = ProgramOptions(arch=lto.arch, relocatable_device_code=True, link_time_optimization=True)
    user = Program(kernel_source(desc), "c++", options).compile("ltoir").code
    linker = Linker(ObjectCode.from_ltoir(user, name="kernels"), ObjectCode.from_ltoir(lto.data, name=lto.name),
                    options=LinkerOptions(arch=lto.arch, link_time_optimization=True))
    return linker.link("cubin")


def opt_in(kernel, nbytes: int, device_id: int = 0) -> None:
    """Let ``kernel`` (cuda.core Kernel) launch with ``nbytes`` of dynamic shared memory (needed above 48 KB)."""
    from cuda.bindings import driver

    attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    handle = kernel.handle
    if isinstance(handle, driver.CUkernel):
        (err,) = driver.cuKernelSetAttribute(attribute, nbytes, handle, driver.CUdevice(device_id))
    else:
        (err,) = driver.cuFuncSetAttribute(handle, attribute, nbytes)
    assert int(err) == 0, f"opting in to {nbytes} B of dynamic shared memory failed: {err}"

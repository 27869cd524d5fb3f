"""blasdx GEMMs inside Numba-CUDA kernels on the GPU: a random table of descriptors through the shared-memory
and register APIs against float64, the kernels' SASS as Numba built it (GEMM inlined, no local memory), and the
examples."""

from __future__ import annotations

import re

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.reference import assert_close, gemm_scale, reference_gemm, rounding, tolerance

from .gpu_support import (
    C,
    R,
    family_types,
    gemm_operands,
    require_gpu,
    run_example,
    sampled_cases,
    sampled_descriptor,
    stable_seed,
)
from .numba_support import numba_cuda

from blasdx.numba import as_bits  # noqa: E402 - after numba_support, which skips without numba-cuda
from .test_numba import register_api_kernel, shared_api_kernel

pytestmark = pytest.mark.gpu
cuda = numba_cuda

TYPES = family_types((dt.float8_e4m3, dt.float8_e5m2))
SIZES = [(32, 32, 32), (64, 64, 64), (17, 33, 9), (128, 128, 64), (48, 80, 32)]
ARRANGEMENTS = [(R, C, C), (C, R, R), (R, R, R), (C, C, C)]


@pytest.fixture(scope="module")
def sm() -> int:
    return require_gpu()


def _storage(host: np.ndarray, row_major: bool) -> np.ndarray:
    """Dense per problem in the given order: (batch, rows, cols) or (batch, cols, rows)."""
    return np.ascontiguousarray(host if row_major else host.transpose(0, 2, 1))


def _from_storage(stored: np.ndarray, value: dt.DType, row_major: bool) -> np.ndarray:
    if value.name == "float16" or value.host_dtype == stored.dtype:
        data = stored
    else:
        data = stored.view(value.host_dtype)
    return data if row_major else data.transpose(0, 2, 1)


def kernel_sass(kernel) -> str:
    """SASS of a Numba kernel's one compiled overload (Numba's nvdisasm, else blasdx's cuobjdump)."""
    try:
        sass = kernel.inspect_sass()
        return next(iter(sass.values())) if isinstance(sass, dict) else sass
    except Exception:  # noqa: BLE001 - no nvdisasm here: disassemble the cubin with cuobjdump
        from blasdx.compile import cubin as _cubin

        overload = next(iter(kernel.overloads.values()))
        return _cubin.run_cuobjdump(bytes(overload._codelibrary.get_cubin()), "-sass")


def run_case(desc: bx.Descriptor, api: str, alpha, beta, batch: int = 29) -> None:
    """One launch on data drawn from a seed of the case (named in a failure), every element of C
    against the float64 reference within its own bound (|A| |B| + |C|, C's rounding apart)."""
    seed = stable_seed(repr(desc), api, alpha, beta)
    rng = np.random.default_rng(seed)
    m, n, k = desc.size
    a_t, b_t, c_t = desc.precision
    cplx = desc.is_complex
    ra, rb, rc = (o is R for o in (desc.arrangement.a, desc.arrangement.b, desc.arrangement.c))
    a_host, b_host, c_host = gemm_operands(desc, rng, batch, beta)
    a = cuda.to_device(as_bits(_storage(a_host, ra)))
    b = cuda.to_device(as_bits(_storage(b_host, rb)))
    c = cuda.to_device(as_bits(_storage(c_host, rc)))
    make = {"shared": shared_api_kernel, "register": register_api_kernel,
            "positions": lambda d: register_api_kernel(d, positions=True),
            "index": lambda d: register_api_kernel(d, positions="index")}[api]
    kernel = cuda.jit(make(desc))
    scalar = (np.complex64 if desc.scalar_type.name == "float32" else np.complex128) if cplx else desc.scalar_type.numpy
    smem = desc.shared_memory_size if api == "shared" else desc.shared_memory_size_ab
    kernel[batch, desc.block_dim, 0, smem](a, b, c, scalar(alpha), scalar(beta))
    cuda.synchronize()
    got = _from_storage(c.copy_to_host(), desc.c_value_type, rc)
    ref = reference_gemm(a_host, b_host, c_host, alpha, beta)
    scale = gemm_scale(a_host, b_host, c_host, alpha, beta)
    if api == "register":  # the kernel doubles the product in registers (exactly: its error doubles too)
        ref += alpha * reference_gemm(a_host, b_host)
        scale += abs(alpha) * gemm_scale(a_host, b_host)
    if api in ("positions", "index"):  # the kernel doubles the product's diagonal in registers
        diagonal = np.arange(min(m, n))
        ref[:, diagonal, diagonal] += alpha * reference_gemm(a_host, b_host)[:, diagonal, diagonal]
        scale[:, diagonal, diagonal] += abs(alpha) * gemm_scale(a_host, b_host)[:, diagonal, diagonal]
    assert_close(got, ref, tolerance(a_t, c_t, k, desc.accumulator_type, desc.instruction, rounding_apart=True),
                 what=f"{api} API of {desc!r}, seed {seed}", scale=scale, rounding=rounding(c_t, cplx))
    sass = kernel_sass(kernel)
    if api == "index":  # may keep the fragment in local memory (the compiler's unroll budget), never call
        assert not re.search(r"\bCALL\.\w+", sass), "Numba's kernel calls the GEMM instead of inlining it"
    else:
        assert not re.search(r"\b(STL|LDL|CALL\.\w+)\b", sass), "Numba's kernel calls the GEMM or uses local memory"


@pytest.mark.parametrize("types, size, arrangement, arch_specific",
                         list(sampled_cases(TYPES, SIZES, ARRANGEMENTS, 2033)))
def test_gemms_in_numba_kernels_match_float64(sm, types, size, arrangement, arch_specific):
    desc = sampled_descriptor(sm, types, size, arrangement, arch_specific)
    integral = types[2].integral
    if desc.shared_memory_size <= cuda.get_current_device().MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        run_case(desc, "shared", 1, 0)
        run_case(desc, "shared", -2 if integral else -1.5, 3 if integral else 0.5)
    else:  # A, B and C do not fit one block's shared memory: the register API needs A and B only
        assert desc.ltoir().fragment_size, f"{desc!r} fits neither API"
    if desc.ltoir().fragment_size:
        run_case(desc, "register", 1, 0)
        run_case(desc, "positions", 2 if integral else 0.75, -1 if integral else 0.25)
        run_case(desc, "index", 1, 0)


@pytest.mark.parametrize("c_order", [R, C], ids=lambda o: o.name)
@pytest.mark.parametrize("size", [(64, 64, 64), (32, 32, 32), (128, 64, 64), (64, 32, 16)], ids=str)
def test_transposed_f64_order_in_numba_kernels_matches_float64(sm, size, c_order):
    """Compute-bound f64 on row-major A and B issues each DMMA on C^T = B^T A^T (heuristics.dmma_transposed),
    which moves every accumulator element: the shared-memory API's epilogue, the register API's store and
    the element positions it reports (positions, index) all follow it."""
    if sm < 90:
        pytest.skip("the transposed order is sm_90's DMMA m16n8k8 (older GPUs run m8n8k4)")
    desc = (bx.Size(*size) + bx.Precision(dt.float64) + bx.Function.MM + bx.Arrangement(R, R, c_order)
            + bx.MaxAlignment + bx.SM(sm) + bx.Block() + bx.Workload.compute_bound)
    desc = desc + bx.LeadingDimension(*desc.suggested_leading_dimension)
    assert desc.plan.dmma_transposed, desc.plan
    if desc.shared_memory_size <= cuda.get_current_device().MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        run_case(desc, "shared", -1.5, 0.5)
    run_case(desc, "register", 1, 0)
    run_case(desc, "positions", 0.75, 0.25)
    run_case(desc, "index", 1, 0)


@pytest.mark.parametrize("real", [dt.float32, dt.float64], ids=lambda t: f"complex-{t.name}")
def test_complex_gemms_in_numba_kernels_match_float64(sm, real):
    desc = (bx.Size(32, 16, 24) + bx.Precision(real) + bx.Type.complex + bx.Function.MM
            + bx.Arrangement(R, C, R) + bx.SM(sm) + bx.Block())
    run_case(desc, "shared", complex(1.5, -0.5), complex(0.25, 1.0))
    if desc.ltoir().fragment_size:
        run_case(desc, "register", complex(-1.0, 0.5), 0)


@pytest.mark.parametrize("example", ["numba_gemm", "numba_attention"])
def test_examples_run(sm, example):
    assert run_example(example, "--quick") == 0

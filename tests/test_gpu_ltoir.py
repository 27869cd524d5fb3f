"""GPU correctness of LTO-IR entry points linked into a kernel compiled apart (cuda.core Program / Linker).

A table of descriptors (every type, both orders, odd and full sizes, sm_XX and sm_90a) runs
the shared-memory execute (beta 0 with C poisoned, then beta != 0) and the register API in
kernels that know only the entry points' prototypes, against the float64 reference.
"""

from __future__ import annotations

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.reference import assert_gemm_close, rounding, tolerance

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
    tight_operands,
    torch_to_host,
)
from .ltoir_support import link, opt_in, require_nvjitlink

pytestmark = pytest.mark.gpu

TYPES = family_types((dt.float8_e5m2, dt.float8_e4m3))
SIZES = [(64, 64, 64), (32, 32, 32), (17, 33, 9), (128, 128, 64)]
ARRANGEMENTS = [(R, C, C), (C, R, R), (R, R, C)]


@pytest.fixture(scope="module")
def sm() -> int:
    require_nvjitlink()
    return require_gpu()


def _run(kernel_name: str, desc: bx.Descriptor, alpha, beta, batch: int = 37) -> None:
    """One launch on data drawn from a seed of the case (named in a failure), every element of C
    against the float64 reference within its own bound (|A| |B| + |C|, C's rounding apart)."""
    import torch
    from cuda.core import Device, LaunchConfig, launch

    seed = stable_seed(repr(desc), kernel_name, alpha, beta)
    rng = np.random.default_rng(seed)
    m, n, k = desc.size
    a_t, b_t, c_t = desc.precision
    a_host, b_host, c_host = gemm_operands(desc, rng, batch, beta)
    a, b, c = tight_operands(desc, a_host, b_host, c_host)
    device = Device()
    device.set_current()
    kernel = link(desc).get_kernel(kernel_name)
    smem = desc.shared_memory_size if kernel_name == "shared_api" else desc.shared_memory_size_ab
    if smem > 48 * 1024:
        opt_in(kernel, smem, device.device_id)
    scalar = desc.scalar_type.numpy
    torch.cuda.synchronize()
    stream = device.create_stream()
    launch(stream, LaunchConfig(grid=batch, block=desc.block_dim, shmem_size=smem), kernel,
           a.data_ptr(), b.data_ptr(), c.data_ptr(), scalar(alpha), scalar(beta),
           np.int64(m * k * a_t.size), np.int64(k * n * b_t.size), np.int64(m * n * c_t.size))
    stream.sync()
    got = torch_to_host(c, c_t)
    assert_gemm_close(got, a_host, b_host, c_host, alpha, beta,
                      tolerance(a_t, c_t, k, desc.accumulator_type, desc.instruction, rounding_apart=True),
                      f"{kernel_name} of {desc!r}, seed {seed}", rounding(c_t))


@pytest.mark.parametrize("types, size, arrangement, arch_specific",
                         list(sampled_cases(TYPES, SIZES, ARRANGEMENTS, 33)))
def test_entry_points_match_the_float64_reference(sm, types, size, arrangement, arch_specific):
    desc = sampled_descriptor(sm, types, size, arrangement, arch_specific)
    from cuda.core import Device

    integral = types[2].integral
    if desc.shared_memory_size <= Device().properties.max_shared_memory_per_block_optin:
        _run("shared_api", desc, 1, 0)
        _run("shared_api", desc, -2 if integral else -1.5, 3 if integral else 0.5)
    else:  # A, B and C do not fit one block: the register API needs A and B only
        assert desc.ltoir().fragment_size, f"{desc!r} fits neither API"
    if desc.ltoir().fragment_size:
        _run("register_api", desc, 1, 0)
        _run("register_api", desc, 2 if integral else 0.75, -1 if integral else 0.25)


def test_the_cuda_core_example_runs(sm):
    assert run_example("ltoir_cuda_core", "--batch", "20000") == 0

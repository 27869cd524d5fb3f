"""GPU correctness of the fusion device API on wgmma plans (sm_90a on a compute capability 9.0 GPU).

Every wgmma type (f16 -> f16 | f32, bf16 -> f32, e4m3/e5m2 -> f16 | f32) in every
arrangement it reads, at 64^3, 128x128x64 and 128^3, through every API form of
tests/test_wgmma_fusion.py (register API once and twice, the accumulator walked by hand,
shared memory filled through a_index / b_index, the shared-memory API), without load
transforms (wgmma from shared memory), with a scale of A (wgmma with A in registers) and with
one of B (mma.sync over the panels), against the float64 reference with C poisoned when beta = 0.

Transforms of A on wgmma with A in registers go further (tests/test_wgmma_register_a.py): every
wgmma type including s8/u8 pairs, odd and non-square sizes (64 x 96 x 48, 192 x 48 x 80,
192 x 40 x 96, ...), a scale (-2 A, or A >> 1 for integers) and a value-dependent transform
(max(A, 0)), the register API once and twice and the shared-memory API, against the float64 /
exact int64 reference with C poisoned (NaN, INT32_MIN) when beta = 0.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.reference import assert_gemm_close, to_float64, tolerance

from . import test_wgmma_register_a as rs
from .gpu_support import gemm_operands, require_gpu, stable_seed, tight_operands, torch_to_host
from .test_wgmma_fusion import CASES, KERNEL_NAMES, OPS, case_id, compile_all, gemm

pytestmark = pytest.mark.gpu

R = bx.row_major
SCALARS = [(1.0, 0.0), (-1.5, 0.5)]
INT32_POISON = np.iinfo(np.int32).min


class _OnDemand(dict):
    """{(desc, ops, name): FusedKernel}, each (desc, ops)'s kernels compiled together at first use
    by compile(descs, ops)."""

    def __init__(self, compile) -> None:
        super().__init__()
        self._compile = compile

    def __missing__(self, key):
        desc, ops, _ = key
        self.update(self._compile([desc], (ops,)))
        return self[key]


def _require_sm90() -> None:
    sm = require_gpu()
    if sm != 90:
        pytest.skip(f"sm_90a code runs only on compute capability 9.0 devices, this one is {sm // 10}.{sm % 10}")


@pytest.fixture(scope="module")
def kernels():
    """Every case's kernels: compiled up front in a single process; under pytest-xdist each worker
    compiles those of its own tests (an up-front pass would compile all of them in every worker).
    Skip off compute capability 9.0."""
    _require_sm90()
    if "PYTEST_XDIST_WORKER" in os.environ:
        return _OnDemand(compile_all)
    return compile_all([gemm(size, types, arr) for types, arr, size in CASES])


@pytest.fixture(scope="module")
def register_a_kernels():
    """The kernels of tests/test_wgmma_register_a.py, compiled as ``kernels`` compiles its own."""
    _require_sm90()
    if "PYTEST_XDIST_WORKER" in os.environ:
        return _OnDemand(rs.compile_all)
    return rs.compile_all([gemm(size, types, arr) for types, arr, size in rs.CASES])


def run_case(kernel: bx.FusedKernel, desc: bx.Descriptor, transform_a, what: str, alpha, beta, rng,
             batch: int = 3) -> None:
    """One problem per block on tightly stored operands, against the float64 / exact int64
    reference of transform_a(A) B (as many times as the kernel adds it); C poisoned (NaN, or
    INT32_MIN for integer C) when beta = 0."""
    a_t, b_t, c_t = desc.precision
    a_host, b_host, c_host = gemm_operands(desc, rng, batch, beta, fill=INT32_POISON if c_t.integral else None)
    a, b, c = tight_operands(desc, a_host, b_host, c_host)
    kernel.launch(batch, (a, b, c, alpha, beta))
    got = torch_to_host(c, c_t)
    products = rs.PRODUCTS.get(kernel.name, 1)
    accumulator = dt.find_combination(a_t, b_t, c_t, False).accumulator  # the type table's, not the descriptor's
    tol = tolerance(a_t, c_t, desc.size[2] * products, accumulator, "wgmma")
    assert_gemm_close(got, products * transform_a(to_float64(a_host)), b_host, c_host, alpha, beta, tol,
                      f"C of {kernel.name} ({what}) for {desc!r} alpha={alpha} beta={beta}")


def scaled_by(ops: str):
    """A as the OPS entry ``ops`` leaves it in the product (its transforms scale A or B by a factor)."""
    return lambda a: OPS[ops][2] * a


@pytest.mark.parametrize("ops", list(OPS))
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_every_api_form_on_every_wgmma_combination(kernels, case, ops):
    types, arr, size = case
    desc = gemm(size, types, arr)
    assert desc.instruction.startswith("wgmma.") and dt.find_combination(*types, False) is not None
    rng = np.random.default_rng(stable_seed(case_id(case), ops))
    for name in KERNEL_NAMES:
        kernel = kernels[(desc, ops, name)]
        for alpha, beta in SCALARS:
            run_case(kernel, desc, scaled_by(ops), ops, alpha, beta, rng)


def test_a_block_larger_than_the_gemm(kernels):
    """Warpgroups beyond max_threads_per_block skip the GEMM; shared memory still lines up."""
    desc = next(gemm(size, types, arr) for types, arr, size in CASES
                if size == (128, 128, 64) and types == (dt.float16, dt.float16, dt.float32))
    for name in ("register_api", "shared_api"):
        kernel = kernels[(desc, "wgmma", name)]
        block = desc.max_threads_per_block + 128
        # launch bounds of the block itself: 1024 would cap registers at 64, below one wgmma's accumulator
        kernel = bx.compile_kernel(f"#define MAX_THREADS {block}\n" + kernel.user_source, name, {"GEMM": desc},
                                   block=block)
        run_case(kernel, desc, scaled_by("wgmma"), "wgmma", -1.5, 0.5, np.random.default_rng(7))


# ---------------------------------------------------------------------------------------------- A in registers

#: (alpha, beta) of floating-point and of integer GEMMs.
REGISTER_A_SCALARS = {False: [(1.0, 0.0), (-1.5, 0.5)], True: [(1, 0), (-3, 2)]}


@pytest.mark.parametrize("op", list(rs.A_OPS))
@pytest.mark.parametrize("case", rs.CASES, ids=rs.case_id)
def test_a_transforms_on_wgmma_with_a_in_registers(register_a_kernels, case, op):
    types, arr, size = case
    desc = gemm(size, types, arr)
    assert desc.plan.is_wgmma
    rng = np.random.default_rng(stable_seed(rs.case_id(case), op))
    for name in rs.KERNEL_NAMES:
        kernel = register_a_kernels[(desc, op, name)]
        for alpha, beta in REGISTER_A_SCALARS[types[0].integral]:
            run_case(kernel, desc, lambda a: rs.transform_a(a, op), f"{op}(A)", alpha, beta, rng)

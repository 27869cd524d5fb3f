"""GPU correctness of MantissaBits on the block GEMM: float32 as 3xtf32 on mma.sync (sm_80+).

Fresh random operands against the float64 reference, C poisoned (NaN) when beta = 0, every
arrangement, odd sizes, K from 32 to 4096 within one block, the device API (register and
shared-memory forms) and bx.matmul / bx.mma calls that take the one-block path. The bound is
``tolerance(scheme="3xtf32")`` (docs/index.md); plain tf32 misses it by far, which each case
checks too, so the three products are really there.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.calls.matmul import call_plan
from blasdx.reference import (
    assert_close,
    gemm_scale,
    random_operand,
    reference_gemm,
    relative_error,
    to_float64,
    tolerance,
)

from .gpu_support import (
    C,
    R,
    check_outside,
    gemm_operands,
    guarded_operand,
    poisoned_new_tensors,
    require_gpu,
    stable_seed,
    strided_operand,
    torch_to_host,
)
from .test_fusion import type_source

pytestmark = pytest.mark.gpu

F32 = dt.find_combination(dt.float32, dt.float32, dt.float32, False)
ALL_ARRANGEMENTS = list(itertools.product((R, C), repeat=3))
# K from 32 to 4096 (M and N shrink so that A and B fit one block), odd sizes among them
DEPTHS = [(64, 64, 32), (48, 40, 256), (33, 17, 1024), (8, 8, 2048), (5, 6, 4096), (37, 29, 19)]


@pytest.fixture(scope="module")
def sm() -> int:
    sm = require_gpu()
    if sm < 80:
        pytest.skip("3xtf32 needs tf32 mma.sync (sm_80)")
    return sm


def descriptor(size, sm, arrangement=(R, C, C), bits=23, *extra) -> bx.Descriptor:
    desc = (bx.Size(*size) + bx.Precision(bx.float32) + bx.Function.MM + bx.Arrangement(*arrangement) + bx.SM(sm)
            + bx.Block() + bx.MantissaBits(bits))
    for op in extra:
        desc = desc + op
    return desc


def _tf32_error(a: np.ndarray, b: np.ndarray, ref: np.ndarray) -> float:
    """The error of one tf32 product of the same operands (truncated to tf32): what 3xtf32 must beat."""
    t = lambda x: (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)  # noqa: E731
    return relative_error(np.matmul(t(a), t(b)), ref)


def run(desc: bx.Descriptor, alpha: float, beta: float, rng, batch: int = 3) -> float:
    """Execute once on fresh data; assert the 3xtf32 bound; return the error."""
    assert desc.scheme.name == "3xtf32" and desc.instruction == "mma.sync.m16n8k8"
    m, n, k = desc.size
    a_host, b_host, c_host = gemm_operands(desc, rng, batch, beta)
    arr = desc.arrangement
    lda, ldb, ldc = desc.leading_dimension
    ga = guarded_operand(a_host, dt.float32, arr.a is R, lda)
    gb = guarded_operand(b_host, dt.float32, arr.b is R, ldb)
    gc = guarded_operand(c_host, dt.float32, arr.c is R, ldc)
    assert desc.execute(ga.view, gb.view, gc.view, alpha=alpha, beta=beta) is gc.view
    got = torch_to_host(gc.view, dt.float32)
    ref = reference_gemm(a_host, b_host, c_host, alpha, beta)
    tol = tolerance(dt.float32, dt.float32, k, scheme="3xtf32")
    what = f"C of {desc!r} alpha={alpha} beta={beta}"
    assert_close(got, ref, tol, what=what, scale=gemm_scale(a_host, b_host, c_host, alpha, beta))
    check_outside(gc, what)
    check_outside(ga, "A", whole=True)
    check_outside(gb, "B", whole=True)
    if beta == 0 and k >= 32:
        assert _tf32_error(a_host, b_host, ref / alpha) > 10 * relative_error(got, ref)
    return relative_error(got, ref)


@pytest.mark.parametrize("size", DEPTHS, ids=lambda s: "x".join(map(str, s)))
def test_depths(sm, size):
    desc = descriptor(size, sm)
    if not desc.is_supported:
        pytest.skip(f"does not fit sm_{sm}'s shared memory")
    rng = np.random.default_rng(size[2])
    for alpha, beta in ((1.0, 0.0), (-1.5, 0.5)):
        run(desc, alpha, beta, rng)


@pytest.mark.parametrize("arr", ALL_ARRANGEMENTS, ids=lambda a: "".join(x.name[0] for x in a))
@pytest.mark.parametrize("size", [(37, 29, 19), (64, 64, 64), (100, 100, 100), (128, 8, 100), (128, 128, 64)],
                         ids=lambda s: "x".join(map(str, s)))
def test_every_arrangement(sm, size, arr):
    desc = descriptor(size, sm, arr)
    rng = np.random.default_rng(stable_seed(size, [x.name for x in arr]))
    for alpha, beta in ((1.0, 0.0), (-1.5, 0.5)):
        run(desc, alpha, beta, rng)


@pytest.mark.parametrize("extra", [
    (bx.LeadingDimension(45, 47, 37),),
    (bx.MaxAlignment,),
    (bx.BlockDim(33),),
    (bx.BlockDim(512),),
    (bx.Workload.compute_bound,),
], ids=repr)
def test_operators_around_it(sm, extra):
    desc = descriptor((40, 36, 44), sm, (C, C, R), 20, *extra)
    run(desc, -1.5, 0.5, np.random.default_rng(11))


def test_every_requirement_from_11_to_23_bits_runs_the_same_kernel(sm):
    rng = np.random.default_rng(5)
    kernels = {descriptor((32, 32, 64), sm, bits=bits).compile().cubin for bits in (11, 16, 23)}
    assert len(kernels) == 1
    run(descriptor((32, 32, 64), sm, bits=11), 1.0, 0.0, rng)


def test_the_device_api_register_and_shared_forms(sm):
    """The descriptor's GEMM in a user's kernel: load transforms (A doubled, B conjugated: a
    no-op for real) enter the split fragments; C poisoned for beta = 0."""
    source = type_source(F32)
    for size, arr in (((64, 64, 64), (R, C, C)), ((33, 17, 40), (C, R, R))):
        desc = descriptor(size, sm, arr)
        m, n, k = size
        for name in ("register_api", "shared_api"):
            kernel = bx.compile_kernel(source, name, {"GEMM": desc})
            for alpha, beta in ((1.0, 0.0), (-1.5, 0.5)):
                rng = np.random.default_rng(stable_seed(size, name, beta))
                a_host = random_operand(dt.float32, (3, m, k), rng)
                b_host = random_operand(dt.float32, (3, k, n), rng)
                c_host = random_operand(dt.float32, (3, m, n), rng)
                if beta == 0:
                    c_host[...] = np.nan
                a = strided_operand(a_host, dt.float32, arr[0] is R, k if arr[0] is R else m)
                b = strided_operand(b_host, dt.float32, arr[1] is R, n if arr[1] is R else k)
                c = strided_operand(c_host, dt.float32, arr[2] is R, n if arr[2] is R else m)
                kernel.launch(3, (a, b, c, alpha, beta))
                ref = reference_gemm(2 * to_float64(a_host), to_float64(b_host), c_host, alpha, beta)
                assert_close(torch_to_host(c, dt.float32), ref, tolerance(dt.float32, dt.float32, k, scheme="3xtf32"),
                             what=f"{name} of {desc!r} alpha={alpha} beta={beta}",
                             scale=gemm_scale(2 * to_float64(a_host), b_host, c_host, alpha, beta))


@pytest.mark.parametrize("bits", [12, 23])
def test_small_batched_matmul_and_mma_take_the_block_kernel(sm, bits):
    import torch

    gen = torch.Generator(device="cuda").manual_seed(bits)
    x = torch.randn((300, 24, 40), device="cuda", generator=gen)
    y = torch.randn((300, 40, 16), device="cuda", generator=gen).transpose(1, 2).contiguous().transpose(1, 2)
    with poisoned_new_tensors():  # the results matmul / mma allocate start as NaN
        got = bx.matmul(x, y, mantissa_bits=bits)
    plan = call_plan(x, y, mantissa_bits=bits)
    assert plan.kind == "block" and plan.desc.scheme.name == "3xtf32", plan.describe()
    xh, yh = x.cpu().numpy(), y.cpu().numpy()
    ref, scale = reference_gemm(xh, yh), gemm_scale(xh, yh)
    tol = tolerance(dt.float32, dt.float32, 40, scheme="3xtf32")
    assert_close(got.cpu().numpy(), ref, tol, what="bx.matmul", scale=scale)
    acc = torch.full((300, 24, 16), 0.25, device="cuda")
    with poisoned_new_tensors():
        out = bx.mma(x, y, acc, mantissa_bits=bits)
    plan = call_plan(x, y, acc, mantissa_bits=bits)
    assert plan.kind == "block" and plan.desc.scheme.name == "3xtf32", plan.describe()
    assert_close(out.cpu().numpy(), ref + 0.25, tol, what="bx.mma", scale=scale + 0.25)


@pytest.mark.parametrize("size, arr", [((32, 32, 32), (R, C, C)), ((17, 33, 9), (C, R, R)), ((48, 40, 128), (R, R, C))],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v[0], int) else "".join(x.name[0] for x in v))
def test_complex(sm, size, arr):
    """Complex float32: four real 3xtf32 products per complex one (re: ar br - ai bi, im: ar bi + ai br)."""
    desc = descriptor(size, sm, arr) + bx.Type.complex
    assert desc.scheme.name == "3xtf32"
    m, n, k = size
    rng = np.random.default_rng(m * n * k)
    vc = dt.complex_of(dt.float32)
    for alpha, beta in ((1, 0), (complex(-1.5, 0.25), complex(0.5, -1))):
        a_host = random_operand(dt.float32, (2, m, k), rng, is_complex=True)
        b_host = random_operand(dt.float32, (2, k, n), rng, is_complex=True)
        c_host = random_operand(dt.float32, (2, m, n), rng, is_complex=True)
        if beta == 0:
            c_host[...] = np.nan
        lda, ldb, ldc = desc.leading_dimension
        a = strided_operand(a_host, vc, arr[0] is R, lda)
        b = strided_operand(b_host, vc, arr[1] is R, ldb)
        c = strided_operand(c_host, vc, arr[2] is R, ldc)
        desc.execute(a, b, c, alpha=alpha, beta=beta)
        ref = reference_gemm(a_host, b_host, c_host, alpha, beta)
        assert_close(torch_to_host(c, vc), ref, tolerance(dt.float32, dt.float32, k, scheme="3xtf32"),
                     what=f"C of {desc!r} alpha={alpha} beta={beta}",
                     scale=gemm_scale(a_host, b_host, c_host, alpha, beta))

"""GPU correctness of bx.matmul / bx.mma: the tile libraries' worked examples, random shapes and
layouts of every input type against the float64 reference, and the multi-block path from 1 to 4096.
"""

from __future__ import annotations

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.calls import matmul as array_gemm
from blasdx.calls.matmul import call_plan
from blasdx.engine import hopper
from blasdx.reference import (
    assert_close,
    gemm_scale,
    random_operand,
    reference_gemm,
    to_float64,
    tolerance,
)

from .gpu_support import (
    gpu_sm,
    host_to_torch,
    poisoned_new_tensors,
    require_gpu,
    stable_seed,
    torch_to_host,
)

pytestmark = pytest.mark.gpu

INPUTS = [dt.float16, dt.bfloat16, dt.tfloat32, dt.float32, dt.float64, dt.int8, dt.uint8, dt.float8_e4m3,
          dt.float8_e5m2]


@pytest.fixture(scope="module")
def sm() -> int:
    return require_gpu()


def _runs(a: dt.DType) -> bool:
    return min(r.min_sm for r in dt.COMBINATIONS if r.a == a) <= (gpu_sm() or 0)


def _tensor(host: np.ndarray, value: dt.DType, order: str = "R"):
    """A CUDA tensor holding ``host``; 'C' gives a column-major view (last two axes) of the same values."""
    if order == "R":
        t = host_to_torch(np.ascontiguousarray(host), value)
    else:
        t = host_to_torch(np.ascontiguousarray(np.swapaxes(host, -1, -2)), value).transpose(-1, -2)
    return bx.tf32(t) if value == dt.tfloat32 else t


def _host(t, value: dt.DType) -> np.ndarray:
    return torch_to_host(t, value).astype(np.float64) if not value.integral else torch_to_host(t, value)


def _iota(shape, value: dt.DType, sign: int = 1) -> np.ndarray:
    return (sign * np.arange(np.prod(shape)).reshape(shape)).astype(value.host_dtype)


def _acc_types(a: dt.DType) -> list[dt.DType]:
    sm = gpu_sm() or 0
    return sorted({r.c for r in dt.COMBINATIONS if r.a == a and r.b == a and not r.is_complex and r.min_sm <= sm},
                  key=lambda d: d.name)


# ---- the worked examples ------------------------------------------------------------------------


@pytest.mark.parametrize("a", INPUTS, ids=lambda d: d.name)
def test_seed_mma_iota(sm, a):
    if not _runs(a):
        pytest.skip(f"{a.name} needs a newer GPU")
    for c in _acc_types(a):
        x = _tensor(_iota((2, 4), a), a)
        y = _tensor(_iota((4, 2), a), a)
        acc = _tensor(_iota((2, 2), c), c)
        got = bx.mma(x, y, acc)
        assert tuple(got.shape) == (2, 2)
        np.testing.assert_array_equal(_host(got, c), [[28, 35], [78, 101]])


@pytest.mark.parametrize("a", [d for d in INPUTS if d != dt.uint8], ids=lambda d: d.name)
def test_seed_mma_batched_negated(sm, a):
    if not _runs(a):
        pytest.skip(f"{a.name} needs a newer GPU")
    c = _acc_types(a)[-1]
    x = _tensor(np.stack([_iota((2, 4), a), _iota((2, 4), a, -1)]), a)
    y = _tensor(np.stack([_iota((4, 2), a)] * 2), a)
    acc = _tensor(np.stack([_iota((2, 2), c)] * 2), c)
    got = bx.mma(x, y, acc)
    np.testing.assert_array_equal(_host(got, c), [[[28, 35], [78, 101]], [[-28, -33], [-74, -95]]])


@pytest.mark.parametrize("a", INPUTS, ids=lambda d: d.name)
def test_seed_ones_plus_ten(sm, a):
    if not _runs(a):
        pytest.skip(f"{a.name} needs a newer GPU")
    for c in _acc_types(a):
        x = _tensor(np.ones((2, 4), a.host_dtype), a)
        y = _tensor(np.ones((4, 2), a.host_dtype), a)
        acc = _tensor(np.full((2, 2), 10, c.host_dtype), c)
        np.testing.assert_array_equal(_host(bx.mma(x, y, acc), c), np.full((2, 2), 14))


@pytest.mark.parametrize("a", INPUTS, ids=lambda d: d.name)
def test_seed_matmul_3d_by_2d_broadcast(sm, a):
    if not _runs(a):
        pytest.skip(f"{a.name} needs a newer GPU")
    x = _tensor(np.ones((2, 2, 4), a.host_dtype), a)
    y = _tensor(np.ones((4, 2), a.host_dtype), a)
    got = bx.matmul(x, y)
    result = array_gemm.RESULT_TYPES[a]
    assert tuple(got.shape) == (2, 2, 2)
    assert torch_to_host(got, result).dtype == result.host_dtype
    np.testing.assert_array_equal(_host(got, result), np.full((2, 2, 2), 4))


# ---- random shapes and layouts ------------------------------------------------------------------

SHAPES = [(1, 1, 1), (5, 7, 3), (33, 17, 65), (64, 64, 64), (128, 128, 64), (300, 200, 100), (257, 129, 1000)]
ORDERS = ["RR", "RC", "CR", "CC"]


def _random_case(a: dt.DType, c: dt.DType, shape, orders: str, rng, batches=(None, None, None)):
    m, n, k = shape
    bx_, by_, bacc = batches
    xs = (m, k) if bx_ is None else (bx_, m, k)
    ys = (k, n) if by_ is None else (by_, k, n)
    x_host = random_operand(a, xs, rng)
    y_host = random_operand(a, ys, rng)
    acc_host = None
    if c is not None:
        acc_host = random_operand(c, (m, n) if bacc is None else (bacc, m, n), rng)
    return x_host, y_host, acc_host


def _reference(x_host, y_host, acc_host):
    x = x_host if x_host.ndim == 3 else x_host[None]
    y = y_host if y_host.ndim == 3 else y_host[None]
    ref = reference_gemm(x, y, None if acc_host is None else (acc_host if acc_host.ndim == 3 else acc_host[None]),
                         1, 0 if acc_host is None else 1)
    return ref if (x_host.ndim == 3 or y_host.ndim == 3 or (acc_host is not None and acc_host.ndim == 3)) else ref[0]


@pytest.mark.parametrize("a", INPUTS, ids=lambda d: d.name)
@pytest.mark.parametrize("orders", ORDERS)
def test_matmul_random(sm, a, orders):
    if not _runs(a):
        pytest.skip(f"{a.name} needs a newer GPU")
    seed = stable_seed(a.name, orders)
    rng = np.random.default_rng(seed)
    result = array_gemm.RESULT_TYPES[a]
    for shape in SHAPES:
        for batches in [(None, None, None), (3, 3, None), (1, 4, None), (4, None, None)]:
            x_host, y_host, _ = _random_case(a, None, shape, orders, rng, batches)
            with poisoned_new_tensors():  # the result matmul allocates starts as NaN / the largest int
                got = bx.matmul(_tensor(x_host, a, orders[0]), _tensor(y_host, a, orders[1]))
            ref = _reference(x_host, y_host, None)
            assert tuple(got.shape) == ref.shape
            tol = _path_tolerance(a, result, shape[2])
            scale = _reference(*(np.abs(to_float64(v)) for v in (x_host, y_host)), None)
            assert_close(_host(got, result), ref, tol, what=f"matmul {a.name} {shape} {orders} {batches} (seed {seed})",
                         scale=scale)


@pytest.mark.parametrize("a", INPUTS, ids=lambda d: d.name)
def test_mma_random(sm, a):
    if not _runs(a):
        pytest.skip(f"{a.name} needs a newer GPU")
    import torch

    seed = stable_seed(a.name, "mma")
    rng = np.random.default_rng(seed)
    for c in _acc_types(a):
        for shape, orders in zip(SHAPES, ORDERS * 2):
            for batches in [(None, None, None), (2, 1, 2), (2, 2, 2)]:
                x_host, y_host, acc_host = _random_case(a, c, shape, orders, rng, batches)
                x, y = _tensor(x_host, a, orders[0]), _tensor(y_host, a, orders[1])
                acc = _tensor(acc_host, c, orders[1])
                ref = _reference(x_host, y_host, acc_host)
                scale = _reference(*(np.abs(to_float64(v)) for v in (x_host, y_host, acc_host)))  # terms' size
                what = f"mma {a.name}->{c.name} {shape} {orders} {batches} (seed {seed})"
                before = torch_to_host(acc, c).copy()
                with poisoned_new_tensors():
                    got = bx.mma(x, y, acc)  # a new array; acc untouched
                assert_close(_host(got, c), ref, _path_tolerance(a, c, shape[2]), what=what, scale=scale)
                np.testing.assert_array_equal(torch_to_host(acc, c), before)
                out = torch.full(tuple(acc.shape), float("nan") if not c.integral else 77,
                                 dtype=got.dtype, device="cuda")
                assert bx.mma(x, y, acc, out=out) is out
                assert_close(_host(out, c), ref, _path_tolerance(a, c, shape[2]), what=what + " out=", scale=scale)
                assert bx.mma(x, y, acc, out=acc) is acc  # in place
                assert_close(_host(acc, c), ref, _path_tolerance(a, c, shape[2]), what=what + " in place",
                             scale=scale)


# ---- the multi-block path -------------------------------------------------------------------------

SQUARES = [1, 2, 17, 64, 65, 127, 128, 129, 255, 511, 1000, 2048, 4096]
RECTANGLES = [(4096, 64, 1000), (64, 4096, 129), (1, 4096, 4096), (4096, 1, 513), (3000, 2500, 40)]



def _path_tolerance(a: dt.DType, c: dt.DType, k: int) -> float:
    """reference.tolerance for any path a call may take: on sm_90 an fp8 product may run on the Hopper
    engine, which promotes its tensor-core sums every hopper.PROMOTION K (the wgmma allowance, the
    larger), else the table's (whichever path ran, not read from the call)."""
    accumulator = dt.find_combination(a, a, c, False).accumulator
    if gpu_sm() == 90 and a in (dt.float8_e4m3, dt.float8_e5m2):
        return tolerance(a, c, k, accumulator, "wgmma", hopper.PROMOTION)
    return tolerance(a, c, k, accumulator)

def _sampled_check(x_host, y_host, got_host, a, result, k, rng, what):
    """Compare 64 random rows of the result with the float64 reference of those rows."""
    m = x_host.shape[-2]
    rows = rng.choice(m, size=min(m, 64), replace=False)
    ref = reference_gemm(x_host[rows][None], y_host[None])[0]
    assert_close(got_host[rows], ref, _path_tolerance(a, result, k), what=what,
                 scale=gemm_scale(x_host[rows], y_host))


@pytest.mark.parametrize("a", [dt.float16, dt.bfloat16, dt.tfloat32, dt.float32, dt.float64, dt.int8,
                               dt.float8_e4m3], ids=lambda d: d.name)
def test_multi_block_sizes(sm, a):
    if not _runs(a):
        pytest.skip(f"{a.name} needs a newer GPU")
    seed = stable_seed(a.name, "sizes")
    rng = np.random.default_rng(seed)
    result = array_gemm.RESULT_TYPES[a]
    shapes = [(s, s, s) for s in SQUARES] + RECTANGLES
    for i, (m, n, k) in enumerate(shapes):
        orders = ORDERS[i % 4]
        x_host = random_operand(a, (m, k), rng)
        y_host = random_operand(a, (k, n), rng)
        with poisoned_new_tensors():
            got = bx.matmul(_tensor(x_host, a, orders[0]), _tensor(y_host, a, orders[1]))
        assert tuple(got.shape) == (m, n)
        _sampled_check(x_host, y_host, _host(got, result), a, result, k, rng,
                       f"{a.name} {m}x{n}x{k} {orders} (seed {seed})")


def test_multi_block_batched_broadcast_and_offsets(sm):
    """Grid y over problems, a broadcast operand, and operands that start off 16-byte boundaries."""
    import torch

    rng = np.random.default_rng(7)
    a = dt.float16
    x_host = random_operand(a, (5, 300, 130), rng)
    y_host = random_operand(a, (1, 130, 257), rng)
    base = host_to_torch(np.concatenate([np.zeros(1, np.float16), x_host.ravel()]), a)
    x = base[1:].view(5, 300, 130)  # 2-byte aligned: the kernel must fall back to narrow copies
    y = _tensor(y_host, a)
    got = bx.matmul(x, y)
    assert_close(_host(got, dt.float16), reference_gemm(x_host, np.repeat(y_host, 5, 0)),
                 tolerance(a, dt.float16, 130, dt.float16), what="offset batched matmul")
    acc_host = random_operand(dt.float32, (5, 300, 257), rng)
    acc = torch.from_numpy(acc_host).cuda()
    got = bx.mma(x, y, acc)
    assert_close(_host(got, dt.float32), reference_gemm(x_host, np.repeat(y_host, 5, 0), acc_host, 1, 1),
                 tolerance(a, dt.float32, 130, dt.float32), what="offset batched mma")


def test_cupy_arrays(sm):
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(11)
    for a in (dt.float16, dt.float32, dt.float64, dt.int8):
        result = array_gemm.RESULT_TYPES[a]
        for shape in [(17, 33, 9), (64, 64, 64), (700, 300, 200)]:
            m, n, k = shape
            x_host = random_operand(a, (m, k), rng)
            y_host = random_operand(a, (k, n), rng)
            x, y = cupy.asarray(x_host), cupy.asfortranarray(cupy.asarray(y_host))
            got = bx.matmul(x, y)
            assert isinstance(got, cupy.ndarray) and got.dtype == result.host_dtype
            tol = tolerance(a, result, k, dt.find_combination(a, a, result, False).accumulator)
            assert_close(cupy.asnumpy(got).astype(np.float64) if not a.integral else cupy.asnumpy(got),
                         reference_gemm(x_host, y_host), tol, what=f"cupy matmul {a.name} {shape}")
            acc_host = random_operand(result, (m, n), rng)
            got = bx.mma(x, y, cupy.asarray(acc_host))
            assert_close(cupy.asnumpy(got).astype(np.float64) if not a.integral else cupy.asnumpy(got),
                         reference_gemm(x_host, y_host, acc_host, 1, 1), tol, what=f"cupy mma {a.name} {shape}")


def test_blasdx_device_arrays(sm):
    rng = np.random.default_rng(5)
    for shape in [(16, 16, 16), (300, 200, 100)]:
        m, n, k = shape
        x_host = random_operand(dt.float32, (m, k), rng)
        y_host = random_operand(dt.float32, (k, n), rng)
        acc_host = random_operand(dt.float32, (m, n), rng)
        x, y, acc = bx.to_device(x_host), bx.to_device(y_host), bx.to_device(acc_host)
        got = bx.matmul(x, y)
        assert isinstance(got, bx.arrays.DeviceArray)
        tol = tolerance(dt.float32, dt.float32, k, dt.float32)
        assert_close(bx.from_device(got), reference_gemm(x_host, y_host), tol, what=f"DeviceArray matmul {shape}")
        got = bx.mma(x, y, acc)
        assert_close(bx.from_device(got), reference_gemm(x_host, y_host, acc_host, 1, 1), tol,
                     what=f"DeviceArray mma {shape}")
        np.testing.assert_array_equal(bx.from_device(acc), acc_host)


def test_fast_accumulation_fp8(sm):
    """On sm_90 the flag moves wgmma-shaped problems to the tensor core's accumulator; else nothing changes."""
    if sm < 89:
        pytest.skip("fp8 needs sm_89+")
    rng = np.random.default_rng(3)
    a = dt.float8_e4m3
    x_host = random_operand(a, (64, 256), rng)
    y_host = random_operand(a, (256, 32), rng)
    acc_host = random_operand(dt.float32, (64, 32), rng)
    x, y = _tensor(x_host, a), _tensor(y_host, a, "C")  # column-major B: the layout fp8 wgmma reads
    acc = _tensor(acc_host, dt.float32)
    ref = reference_gemm(x_host, y_host, acc_host, 1, 1)
    slow = _host(bx.mma(x, y, acc), dt.float32)
    assert_close(slow, ref, tolerance(a, dt.float32, 256, dt.float32), what="fp8 mma")
    fast = _host(bx.mma(x, y, acc, fast_accumulation=True), dt.float32)
    if sm == 90:
        plan = call_plan(x, y, acc, fast_accumulation=True)
        assert plan.kind == "block" and plan.desc.arch.endswith("a"), plan.describe()
        assert plan.desc.instruction.startswith("wgmma"), plan.describe()
    instruction = "wgmma" if sm == 90 else None
    assert_close(fast, ref, tolerance(a, dt.float32, 256, dt.float32, instruction), what="fp8 mma, fast",
                 scale=gemm_scale(x_host, y_host, acc_host, 1, 1))
    if sm != 90:
        np.testing.assert_array_equal(fast, slow)


def test_repeated_calls_reuse_the_plan(sm):
    import torch

    x = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    y = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    bx.matmul(x, y)
    plans = len(array_gemm._CALLS)
    for _ in range(3):
        bx.matmul(torch.randn_like(x), torch.randn_like(y))
    assert len(array_gemm._CALLS) == plans

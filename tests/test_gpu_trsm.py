"""GPU correctness of TRSM: descriptors' execute, bx.solve_triangular and the device API.

Fresh random systems per case (blasdx.reference.trsm): A's unread triangle, and its diagonal
when unit, hold NaN, so a read of them shows. Every result is checked twice: its backward
error (residual) within 2 n u, and its forward error against an extended-precision solution
within 2 n u cond(A). Every Side x FillMode x Diag x arrangement x type at an odd size, the
sizes that take other paths, several problems per block, a shared A, padded leading
dimensions, alpha (zero: B holds NaN and must not be read), an ill-conditioned system, large
batches; solve_triangular against torch.linalg.solve_triangular on the same data, with
broadcasts, out=, in place, column-major inputs, right-hand sides split over blocks, CuPy and
blasdx arrays. Tests named ``sanitize_*`` are the compute-sanitizer subset
(benchmarks/trsm_job.sh).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.reference import random_operand, relative_error
from blasdx.reference.trsm import (
    condition_number,
    forward_bound,
    random_triangular,
)

from .gpu_support import (
    C,
    R,
    behind_a_delay,
    host_to_torch,
    poisoned_new_tensors,
    require_gpu,
    side_stream,
    stable_seed,
    strided_operand,
    torch_to_host,
)
from .trsm_support import SOLVE_KERNEL, check_solution

pytestmark = pytest.mark.gpu

TYPES = [(bx.float32, bx.Type.real), (bx.float64, bx.Type.real), (bx.float32, bx.Type.complex),
         (bx.float64, bx.Type.complex)]
ORDERS = list(itertools.product((R, C), repeat=2))
VARIANTS = list(itertools.product(bx.Side, bx.FillMode, bx.Diag))


def _type_id(prec, kind) -> str:
    return f"{'c' if kind is bx.Type.complex else ''}{prec.name}"


def trsm(size, sm, *ops, prec=bx.float32, kind=bx.Type.real):
    desc = bx.Size(*size) + bx.Precision(prec) + kind + bx.Function.TRSM + bx.SM(sm) + bx.Block()
    for op in ops:
        desc = desc + op
    return desc


@pytest.fixture(scope="module")
def sm() -> int:
    return require_gpu()


def run_execute(desc, rng, *, batch=3, alpha=1.0, shared_a=False, growth=None) -> None:
    """One execute on fresh data in the descriptor's layouts (padding holds data, never results)."""
    m, n = desc.size
    dim = desc.a_dim[0]
    real, value = desc.scalar_type, desc.b_value_type
    system = random_triangular(rng, 1 if shared_a else batch, dim, real, is_complex=desc.is_complex,
                               lower=desc.fill_mode is bx.FillMode.lower, unit=desc.diag is bx.Diag.unit,
                               growth=growth)
    b_host = random_operand(real, (batch, m, n), rng, is_complex=desc.is_complex)
    arr = desc.arrangement
    lda, ldb = desc.leading_dimension
    a = strided_operand(system.stored, value, arr.a is R, lda)
    b_given = np.full_like(b_host, np.nan) if alpha == 0 else b_host
    b = strided_operand(b_given, value, arr.b is R, ldb)
    assert desc.execute(a, b, alpha=alpha) is b
    x = torch_to_host(b, value)
    check_solution(desc, system, b_host, x, alpha, f"{desc!r} alpha={alpha} batch={batch}")


# ---------------------------------------------------------------------------------------------- execute

VARIANT_CASES = [
    (prec, kind, side, fill, diag, order)
    for (prec, kind), (side, fill, diag), order in itertools.product(TYPES, VARIANTS, ORDERS)
]


@pytest.fixture(scope="module")
def variant_descs(sm):
    """Every descriptor of test_every_variant, compiled in parallel up front."""
    descs = {
        case: trsm((33, 17), sm, case[2], case[3], case[4], bx.Arrangement(*case[5]), prec=case[0], kind=case[1])
        for case in VARIANT_CASES
    }
    bx.precompile(list(descs.values()), workers=16)
    return descs


@pytest.mark.parametrize(
    "case", VARIANT_CASES,
    ids=[f"{_type_id(p, k)}-{s.name}-{f.name}-{d.name}-{o[0].name[0]}{o[1].name[0]}"
         for p, k, s, f, d, o in VARIANT_CASES],
)
def test_every_variant(variant_descs, case):
    desc = variant_descs[case]
    rng = np.random.default_rng(stable_seed(repr(desc)))
    alpha = (0.5 - 1.5j) if desc.is_complex else -2.5
    run_execute(desc, rng, alpha=alpha)


SIZES = [(1, 1), (5, 3), (16, 16), (32, 32), (64, 64), (100, 37), (37, 100), (128, 128), (128, 64), (17, 300)]
SIZE_CASES = list(itertools.product(SIZES, TYPES, bx.Side))


def batch_alignment(size, prec, kind, side):
    """The widest Alignment every problem of a contiguous batch keeps (odd sizes misalign the later problems)."""
    m, n = size
    dim = m if side is bx.Side.left else n
    item = prec.size * (2 if kind is bx.Type.complex else 1)

    def widest(nbytes: int) -> int:
        width = 16
        while nbytes % width and width > item:
            width //= 2
        return width

    return bx.Alignment(widest(dim * dim * item), widest(m * n * item), widest(m * n * item))


@pytest.fixture(scope="module")
def size_descs(sm):
    """Every descriptor of test_sizes that fits one block, compiled in parallel up front."""
    descs = {}
    for size, (prec, kind), side in SIZE_CASES:
        desc = trsm(size, sm, side, batch_alignment(size, prec, kind, side), prec=prec, kind=kind)
        if desc.is_supported:
            descs[(size, prec, kind, side)] = desc
    bx.precompile(list(descs.values()), workers=16)
    return descs


@pytest.mark.parametrize(
    "size, types, side", SIZE_CASES,
    ids=[f"{s[0]}x{s[1]}-{_type_id(*t)}-{side.name}" for s, t, side in SIZE_CASES],
)
def test_sizes(size_descs, size, types, side):
    desc = size_descs.get((size, *types, side))
    if desc is None:
        pytest.skip("does not fit one block's shared memory on this GPU")
    run_execute(desc, np.random.default_rng(sum(size)), batch=4)


@pytest.mark.parametrize(
    "ops, batch",
    [
        ((bx.BatchesPerBlock(3),), 7),
        ((bx.BatchesPerBlock(3), bx.Side.right, bx.FillMode.upper), 8),
        ((bx.BlockDim(64),), 2),
        ((bx.BlockDim(256),), 3),
        ((bx.BlockDim(96), bx.BatchesPerBlock(3)), 5),
        ((bx.BatchesPerBlock(16),), 33),
    ],
    ids=["batches-partial", "batches-right", "block-64", "block-256", "block-96-batches", "batches-16"],
)
@pytest.mark.parametrize("prec", [bx.float32, bx.float64], ids=lambda p: p.name)
def test_threads_and_batches(sm, ops, batch, prec):
    desc = trsm((24, 20), sm, *ops, prec=prec)
    run_execute(desc, np.random.default_rng(batch), batch=batch, alpha=1.5)


def test_one_thread_per_problem(sm):
    """One right-hand side per system: each problem on one thread, 64 problems a block."""
    desc = trsm((12, 1), sm, bx.BatchesPerBlock(64), prec=bx.float64)
    assert desc.plan.group_threads == 1
    run_execute(desc, np.random.default_rng(1), batch=300)


@pytest.mark.parametrize("shape", [(16, 16), (64, 32)])
@pytest.mark.parametrize("prec, kind", TYPES, ids=[_type_id(*t) for t in TYPES])
def test_shared_a(sm, shape, prec, kind):
    desc = trsm(shape, sm, bx.Side.right, prec=prec, kind=kind)
    run_execute(desc, np.random.default_rng(2), batch=9, shared_a=True)


@pytest.mark.parametrize("side", list(bx.Side), ids=lambda s: s.name)
@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"{o[0].name[0]}{o[1].name[0]}")
def test_padded_leading_dimensions(sm, side, order):
    m, n = 40, 24
    dim = m if side is bx.Side.left else n
    ldb = (n if order[1] is R else m) + 5
    desc = trsm((m, n), sm, side, bx.Arrangement(*order), bx.LeadingDimension(dim + 3, ldb), prec=bx.float64)
    run_execute(desc, np.random.default_rng(3), alpha=0.75)


@pytest.mark.parametrize("prec, kind", TYPES, ids=[_type_id(*t) for t in TYPES])
def test_alpha_zero_reads_nothing(sm, prec, kind):
    run_execute(trsm((33, 17), sm, prec=prec, kind=kind), np.random.default_rng(4), alpha=0.0)


@pytest.mark.parametrize("prec, growth, floor", [(bx.float64, 1.0, 1e8), (bx.float32, 0.3, 1e2)],
                         ids=["f64", "f32"])
@pytest.mark.parametrize("side", list(bx.Side), ids=lambda s: s.name)
def test_ill_conditioned(sm, prec, growth, floor, side):
    """An ill-conditioned A: backward error still within 2 n u, forward error within the cond(A) bound."""
    desc = trsm((64, 64), sm, side, bx.FillMode.upper, prec=prec)
    rng = np.random.default_rng(5)
    probe = random_triangular(np.random.default_rng(5), 3, 64, prec, is_complex=False, lower=False, unit=False,
                              growth=growth)
    assert condition_number(probe.exact) > floor
    run_execute(desc, rng, growth=growth)


def test_large_batch(sm):
    desc = trsm((32, 32), sm, bx.MaxAlignment, prec=bx.float32)
    run_execute(desc, np.random.default_rng(6), batch=4096)


def test_torch_stream_orders_work(sm):
    """Warmed up, then on a busy side stream behind a write of new B (gpu_support.behind_a_delay): the solve
    must read B as written just before it on that stream, and a copy queued after it must see X."""
    torch = pytest.importorskip("torch")
    desc = trsm((32, 8), sm, bx.Arrangement(R, R), prec=bx.float64)
    seed = stable_seed("trsm torch stream")
    rng = np.random.default_rng(seed)
    system = random_triangular(rng, 4, 32, dt.float64, is_complex=False, lower=True, unit=False)
    b_host, new_b = (random_operand(dt.float64, (4, 32, 8), rng) for _ in range(2))
    a, b, fresh = (host_to_torch(t, dt.float64) for t in (system.stored, b_host, new_b))
    torch.cuda.synchronize()  # made on the default stream, which the side stream does not wait for
    stream = side_stream()
    desc.execute(a, b, alpha=0.5, stream=stream)  # warm-up
    stream.synchronize()
    with behind_a_delay(stream, f"TRSM execute on a torch stream (seed {seed})"):
        b.copy_(fresh)  # queued on the stream before the solve, which must read it
        desc.execute(a, b, alpha=0.5, stream=stream)
        snapshot = b.clone()  # queued after the solve: must see its result
    check_solution(desc, system, new_b, b.cpu().numpy(), 0.5, f"torch stream (seed {seed})")
    check_solution(desc, system, new_b, snapshot.cpu().numpy(), 0.5, f"copy of X queued after the solve (seed {seed})")


# ---------------------------------------------------------------------------------------------- solve_triangular


def _torch_dtype(prec, kind):
    import torch

    return {(bx.float32, False): torch.float32, (bx.float64, False): torch.float64,
            (bx.float32, True): torch.complex64, (bx.float64, True): torch.complex128}[(prec, kind is bx.Type.complex)]


@pytest.mark.parametrize("left", [True, False], ids=["left", "right"])
@pytest.mark.parametrize("lower", [True, False], ids=["lower", "upper"])
@pytest.mark.parametrize("unit", [False, True], ids=["non_unit", "unit"])
@pytest.mark.parametrize("prec, kind", TYPES, ids=[_type_id(*t) for t in TYPES])
def test_solve_triangular_matches_torch(sm, left, lower, unit, prec, kind):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    cplx = kind is bx.Type.complex
    system = random_triangular(rng, 5, 48, prec, is_complex=cplx, lower=lower, unit=unit)
    b_host = random_operand(prec, (5, 48, 20) if left else (5, 20, 48), rng, is_complex=cplx)
    value = dt.complex_of(prec) if cplx else prec
    a, b = host_to_torch(system.stored, value), host_to_torch(b_host, value)
    x = bx.solve_triangular(a, b, lower=lower, left=left, unit_diagonal=unit)
    assert isinstance(x, torch.Tensor) and x.shape == b.shape and x.is_contiguous()
    desc = trsm((48, 20) if left else (20, 48), sm, bx.Side.left if left else bx.Side.right,
                bx.FillMode.lower if lower else bx.FillMode.upper, bx.Diag.unit if unit else bx.Diag.non_unit,
                prec=prec, kind=kind)
    got = torch_to_host(x, value)
    check_solution(desc, system, b_host, got, 1, "solve_triangular")
    # the same X as PyTorch's (which gets A with zeros, and ones on a unit diagonal, where blasdx gets NaN)
    clean = host_to_torch(system.exact.astype(np.dtype(value.numpy)), value)
    expected = torch.linalg.solve_triangular(clean, b, upper=not lower, left=left, unitriangular=unit)
    bound = forward_bound(prec, 48, condition_number(system.exact))
    assert relative_error(got, torch_to_host(expected, value).astype(np.complex128)) <= 4 * bound


def test_solve_triangular_on_a_busy_stream(sm):
    """bx.solve_triangular into a new result and into out=, warmed up, then on a busy side stream behind a
    write of new b (gpu_support.behind_a_delay): each solve must read b as written just before it there,
    and a copy queued after it must see its result."""
    torch = pytest.importorskip("torch")
    seed = stable_seed("solve_triangular on a busy stream")
    rng = np.random.default_rng(seed)
    system = random_triangular(rng, 4, 32, dt.float64, is_complex=False, lower=True, unit=False)
    b_host, new_b = (random_operand(dt.float64, (4, 32, 8), rng) for _ in range(2))
    a, b, fresh = (host_to_torch(t, dt.float64) for t in (system.stored, b_host, new_b))
    out = torch.full_like(b, float("nan"))
    torch.cuda.synchronize()  # made on the default stream, which the side stream does not wait for
    s = side_stream()
    with torch.cuda.stream(s):  # warm-up: compiled, loaded, bound
        bx.solve_triangular(a, b, lower=True), bx.solve_triangular(a, b, lower=True, out=out)
    s.synchronize()
    with poisoned_new_tensors(), behind_a_delay(s, f"solve_triangular on a side stream (seed {seed})"):
        b.copy_(fresh)
        x = bx.solve_triangular(a, b, lower=True)
        x_copy = x.clone()
        bx.solve_triangular(a, b, lower=True, out=out)
        out_copy = out.clone()
    desc = trsm((32, 8), sm, prec=bx.float64)
    for what, got in (("new result", x), ("copy of the new result", x_copy), ("out=", out), ("copy of out=", out_copy)):
        check_solution(desc, system, new_b, got.cpu().numpy(), 1, f"{what} (seed {seed})")


def test_solve_triangular_broadcasts_and_out(sm):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    system = random_triangular(rng, 1, 32, dt.float32, is_complex=False, lower=False, unit=False)
    b_host = random_operand(dt.float32, (6, 32, 16), rng)
    a = host_to_torch(system.stored[0], dt.float32)  # a matrix shared by the batch
    b = host_to_torch(b_host, dt.float32)
    desc = trsm((32, 16), sm, bx.FillMode.upper)
    x = bx.solve_triangular(a, b, upper=True)
    check_solution(desc, system, b_host, x.cpu().numpy(), 1, "matrix a, batched b")
    out = torch.full((6, 16, 32), float("nan"), device="cuda").transpose(1, 2)  # column-major matrices
    assert bx.solve_triangular(a, b, upper=True, out=out) is out
    check_solution(desc, system, b_host, out.cpu().numpy(), 1, "out=, column-major")
    same = b.clone()
    assert bx.solve_triangular(a, same, upper=True, out=same) is same
    check_solution(desc, system, b_host, same.cpu().numpy(), 1, "out=b")
    # a batch of A with one b: the result takes A's batch
    many = random_triangular(rng, 4, 32, dt.float32, is_complex=False, lower=True, unit=True)
    one_b = random_operand(dt.float32, (32, 16), rng)
    x = bx.solve_triangular(host_to_torch(many.stored, dt.float32), host_to_torch(one_b, dt.float32), lower=True,
                            unitriangular=True)
    assert x.shape == (4, 32, 16)
    check_solution(trsm((32, 16), sm, bx.Diag.unit), many, np.broadcast_to(one_b, (4, 32, 16)), x.cpu().numpy(), 1,
                   "batched a, matrix b")


def test_solve_triangular_column_major_inputs(sm):
    rng = np.random.default_rng(11)
    system = random_triangular(rng, 3, 40, dt.float64, is_complex=False, lower=True, unit=False)
    b_host = random_operand(dt.float64, (3, 24, 40), rng)
    a = host_to_torch(np.ascontiguousarray(np.swapaxes(system.stored, 1, 2)), dt.float64).transpose(1, 2)
    b = host_to_torch(np.ascontiguousarray(np.swapaxes(b_host, 1, 2)), dt.float64).transpose(1, 2)
    x = bx.solve_triangular(a, b, lower=True, left=False)
    check_solution(trsm((24, 40), sm, bx.Side.right, prec=bx.float64), system, b_host, x.cpu().numpy(), 1,
                   "column-major a and b, right")


@pytest.mark.parametrize("shape", [(2, 128, 128), (128, 1000)], ids=["128x128", "128x1000"])
def test_solve_triangular_splits_wide_b(sm, shape):
    """f64 A of 128 x 128 and all of B do not fit one block: right-hand sides go to several blocks."""
    rng = np.random.default_rng(12)
    system = random_triangular(rng, 1, 128, dt.float64, is_complex=False, lower=True, unit=False)
    b_host = random_operand(dt.float64, shape, rng)
    x = bx.solve_triangular(host_to_torch(system.stored[0], dt.float64), host_to_torch(b_host, dt.float64),
                            lower=True)
    batched = b_host.reshape((-1, *shape[-2:]))
    desc = trsm((128, 64), sm, prec=bx.float64)
    check_solution(desc, system, batched, x.cpu().numpy().reshape(batched.shape), 1, f"wide b {shape}")


def test_solve_triangular_cupy_and_device_arrays(sm):
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(13)
    system = random_triangular(rng, 2, 20, dt.float32, is_complex=True, lower=False, unit=True)
    b_host = random_operand(dt.float32, (2, 20, 7), rng, is_complex=True)
    desc = trsm((20, 7), sm, bx.FillMode.upper, bx.Diag.unit, kind=bx.Type.complex)
    x = bx.solve_triangular(cp.asarray(system.stored), cp.asarray(b_host), upper=True, unit_diagonal=True)
    assert isinstance(x, cp.ndarray)
    check_solution(desc, system, b_host, cp.asnumpy(x), 1, "cupy")
    x = bx.solve_triangular(bx.to_device(system.stored), bx.to_device(b_host), upper=True, unit_diagonal=True)
    check_solution(desc, system, b_host, bx.from_device(x), 1, "DeviceArray")


# ---------------------------------------------------------------------------------------------- device API


def run_device_api(desc, rng, batch: int, alpha, extra_threads: int = 0) -> None:
    """SOLVE_KERNEL on tightly stored operands (leading dimensions = the descriptor's)."""
    m, n = desc.size
    real, value = desc.scalar_type, desc.b_value_type
    system = random_triangular(rng, batch, desc.a_dim[0], real, is_complex=desc.is_complex,
                               lower=desc.fill_mode is bx.FillMode.lower, unit=desc.diag is bx.Diag.unit)
    b_host = random_operand(real, (batch, m, n), rng, is_complex=desc.is_complex)
    arr = desc.arrangement
    lda, ldb = desc.leading_dimension
    a = strided_operand(system.stored, value, arr.a is R, lda)
    b = strided_operand(b_host, value, arr.b is R, ldb)
    kernel = bx.compile_kernel(SOLVE_KERNEL, "solve", {"TRSM": desc})
    block = desc.max_threads_per_block + extra_threads
    assert block <= 256, "SOLVE_KERNEL is built for blocks of at most 256 threads (__launch_bounds__)"
    kernel.launch(-(-batch // desc.batches_per_block), (a, b, alpha, batch), block=block)
    check_solution(desc, system, b_host, torch_to_host(b, value), alpha, f"device API {desc!r}")


@pytest.mark.parametrize(
    "ops, prec, kind, batch, extra",
    [
        ((bx.Side.right, bx.FillMode.upper, bx.BatchesPerBlock(2)), bx.float32, bx.Type.real, 3, 32),
        ((bx.Diag.unit, bx.Arrangement(C, R)), bx.float64, bx.Type.complex, 2, 0),
        ((bx.BatchesPerBlock(4),), bx.float64, bx.Type.real, 6, 0),
        ((bx.Side.right,), bx.float64, bx.Type.real, 3, 7),
    ],
    ids=["right-upper-batches", "complex-unit", "batches-4", "right-f64"],
)
def test_device_api(sm, ops, prec, kind, batch, extra):
    alpha = (1.5 - 0.5j) if kind is bx.Type.complex else 1.5
    run_device_api(trsm((40, 24), sm, *ops, prec=prec, kind=kind), np.random.default_rng(14), batch, alpha, extra)


# ---------------------------------------------------------------------------------------------- sanitizer subset


def test_sanitize_batched(sm):
    """Multi-panel f64 (DMMA updates) with a partial block and a shared A; a wide f32 with several sides per thread."""
    run_execute(trsm((33, 17), sm, bx.BatchesPerBlock(2), bx.Side.right, prec=bx.float64), np.random.default_rng(15),
                batch=3, alpha=-1.0, shared_a=True)
    run_execute(trsm((40, 300), sm, bx.Arrangement(C, R)), np.random.default_rng(16), batch=2)
    run_execute(trsm((16, 16), sm, kind=bx.Type.complex), np.random.default_rng(17), batch=11)


def test_sanitize_device_api(sm):
    run_device_api(trsm((40, 24), sm, bx.BatchesPerBlock(2), prec=bx.float64), np.random.default_rng(18), 3, 2.0, 32)

"""GPU correctness of execute(): every supported combination against the float64 reference.

Fresh random operands per case (seeds stable across processes, printed with every failure), C
poisoned (NaN) when beta = 0, odd sizes, every arrangement for two sizes and two arrangements for
the rest, explicit leading dimensions, BlockDim overrides, batches with broadcast, CuPy / PyTorch /
blasdx arrays, streams. Every element of C is held to the tolerance times its own scale
(|alpha| |A| |B| + |beta| |C|); C's padding and a guard after it, and all of A and B, must be
left as they were.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.reference import (
    assert_close,
    assert_gemm_close,
    gemm_scale,
    random_operand,
    reference_gemm,
    relative_error,
    rounding,
    tolerance,
)

from .gpu_support import (
    C,
    R,
    behind_a_delay,
    check_outside,
    gemm_descriptor,
    gemm_operands,
    gpu_sm,
    guarded_operand,
    largest_square,
    require_gpu,
    scalar_pairs,
    side_stream,
    stable_seed,
    strided_operand,
    torch_to_host,
    value_type,
)

pytestmark = pytest.mark.gpu

ALL_ARRANGEMENTS = list(itertools.product((R, C), repeat=3))
TWO_ARRANGEMENTS = [(R, C, C), (C, R, R)]
SIZES_ALL_ARRANGEMENTS = [(17, 33, 9), (64, 64, 64)]
SIZES = [(1, 1, 1), (8, 8, 8), (16, 16, 16), (32, 32, 32), (33, 17, 64), (100, 100, 100), (128, 128, 64),
         (16, 128, 33), (128, 8, 100)]


def _rows() -> list[dt.Combination]:
    sm = gpu_sm() or 90
    return [row for row in dt.COMBINATIONS if row.min_sm <= sm]


def _row_id(row: dt.Combination) -> str:
    return f"{'c' if row.is_complex else ''}{row.a.name}x{row.b.name}-{row.c.name}"


def _cases():
    for row in _rows():
        for size in SIZES_ALL_ARRANGEMENTS:
            for arr in ALL_ARRANGEMENTS:
                yield row, size, arr
        for size in SIZES + ["largest"]:
            for arr in TWO_ARRANGEMENTS:
                yield row, size, arr


CASES = list(_cases())


@pytest.fixture(scope="module")
def sm() -> int:
    return require_gpu()


@pytest.fixture(scope="module")
def compiled(sm):
    """Every descriptor of the module, compiled up front in parallel in a single process. Under
    pytest-xdist each worker compiles the descriptors of its own tests as they run instead (an up-front
    pass would compile all of them in every worker)."""
    descs = {}
    for row, size, arr in CASES:
        s = (largest_square(row, sm),) * 3 if size == "largest" else size
        desc = gemm_descriptor(row, s, sm, arr)
        if desc.is_supported:
            descs[(row, size, arr)] = desc
    if "PYTEST_XDIST_WORKER" not in os.environ:
        bx.precompile(list(descs.values()), workers=16)
    return descs


def run_gemm(desc: bx.Descriptor, row: dt.Combination, alpha, beta, seed: int, batch: int = 2, a_batch=None,
             b_batch=None, instruction: str | None = None) -> None:
    """Execute once on fresh data drawn from ``seed`` and check every element of C against the float64
    reference within its own bound; C's padding and guard, and all of A and B, are left as they were.

    The tolerance comes from the type table (the combination's accumulator) and the caller's
    ``instruction`` ("wgmma" where the test expects it), not from what the descriptor reports."""
    assert desc.precision == (row.a, row.b, row.c) and desc.is_complex == row.is_complex
    m, n, k = desc.size
    va, vb, vc = (value_type(t, row.is_complex) for t in (row.a, row.b, row.c))
    a_host, b_host, c_host = gemm_operands(desc, np.random.default_rng(seed), batch, beta, a_batch, b_batch)
    arr = desc.arrangement
    lda, ldb, ldc = desc.leading_dimension
    ga = guarded_operand(a_host, va, arr.a is R, lda)
    gb = guarded_operand(b_host, vb, arr.b is R, ldb)
    gc = guarded_operand(c_host, vc, arr.c is R, ldc)
    out = desc.execute(ga.view, gb.view, gc.view, alpha=alpha, beta=beta)
    assert out is gc.view
    got = torch_to_host(gc.view, vc)
    tol = tolerance(row.a, row.c, k, row.accumulator, instruction, rounding_apart=True)
    what = f"C of {desc!r} alpha={alpha} beta={beta} batch={batch} seed={seed}"
    assert_gemm_close(got, a_host, b_host, c_host, alpha, beta, tol, what, rounding(row.c, row.is_complex))
    check_outside(gc, what)
    check_outside(ga, f"A ({what})", whole=True)
    check_outside(gb, f"B ({what})", whole=True)


@pytest.mark.parametrize(
    "row,size,arr", CASES, ids=[f"{_row_id(r)}-{s if isinstance(s, str) else 'x'.join(map(str, s))}-"
                                f"{''.join(x.name[0] for x in a)}" for r, s, a in CASES]
)
def test_every_combination(compiled, row, size, arr):
    desc = compiled.get((row, size, arr))
    if desc is None:
        pytest.skip("does not fit this SM's shared memory")
    for alpha, beta in scalar_pairs(row):
        run_gemm(desc, row, alpha, beta, stable_seed(repr(desc), alpha, beta))


@pytest.mark.parametrize("threads", [32, 33, 64, 96, 160, 512, 1024])
@pytest.mark.parametrize("row", _rows(), ids=_row_id)
def test_block_dim_override(sm, row, threads):
    desc = gemm_descriptor(row, (40, 24, 40), sm, (R, C, C), block=bx.BlockDim(threads))
    run_gemm(desc, row, *scalar_pairs(row)[1], stable_seed(repr(desc)))


@pytest.mark.parametrize("arr", [(R, R, R), (R, C, C), (C, C, R)], ids=lambda a: "".join(x.name[0] for x in a))
@pytest.mark.parametrize("size", [(64, 64, 64), (48, 80, 24), (100, 100, 100), (37, 29, 19)], ids=str)
@pytest.mark.parametrize("row", _rows(), ids=_row_id)
def test_compute_bound_workload(sm, row, size, arr):
    """Workload.compute_bound's plans (fewer threads, larger warp and thread tiles) compute the same C."""
    desc = gemm_descriptor(row, size, sm, arr, workload=bx.Workload.compute_bound)
    if not desc.is_supported:
        pytest.skip("does not fit this SM's shared memory")
    run_gemm(desc, row, *scalar_pairs(row)[1], stable_seed(repr(desc)))


@pytest.mark.parametrize("row", _rows(), ids=_row_id)
def test_explicit_leading_dimensions_and_alignment(sm, row):
    ld = bx.LeadingDimension(40, 48, 36)
    desc = gemm_descriptor(row, (32, 32, 32), sm, (C, C, C), ld=ld)
    run_gemm(desc, row, *scalar_pairs(row)[1], 7)
    desc16 = gemm_descriptor(row, (64, 64, 64), sm, (R, C, C), al=bx.MaxAlignment)
    if desc16.is_supported:
        run_gemm(desc16, row, *scalar_pairs(row)[1], 8)


@pytest.mark.parametrize("arr", [(R, R, R), (C, C, C)], ids=lambda a: "".join(x.name[0] for x in a))
@pytest.mark.parametrize("size", [(48, 80, 24), (32, 32, 32), (100, 100, 100), (20, 72, 8)], ids=str)
@pytest.mark.parametrize("row", _rows(), ids=_row_id)
def test_several_problems_per_block(sm, row, size, arr):
    """Plans whose block runs consecutive problems (KernelPlan.stages > 1): an odd batch (the last
    block runs fewer), beta 0 (C poisoned) and not, and A broadcast to every problem."""
    desc = gemm_descriptor(row, size, sm, arr)
    if not desc.is_supported or desc.plan.stages == 1:
        pytest.skip("one problem per block")
    for alpha, beta in scalar_pairs(row):
        run_gemm(desc, row, alpha, beta, stable_seed(repr(desc), alpha, beta, "stages"), batch=7)
    run_gemm(desc, row, *scalar_pairs(row)[1], stable_seed(repr(desc), "broadcast"), batch=5, a_batch=1)


def _replanned(monkeypatch, name: str, choice):
    """heuristics.<name> replaced by ``choice`` for one test, with no plan or kernel cached from before."""
    from blasdx.compile import cache
    from blasdx.plan import heuristics
    from blasdx.run import execute

    monkeypatch.setattr(heuristics, name, choice)
    monkeypatch.setattr(execute, "_PLANS", {})
    monkeypatch.setattr(execute, "_PLANS_BY_ID", {})
    cache.clear_memory_cache()
    yield
    cache.clear_memory_cache()


@pytest.fixture
def k_chunks_everywhere(monkeypatch):
    """Every batched plan that can take K in chunks takes them (the smallest that fit, so that odd K
    ends in a short chunk), whatever heuristics.batched_k_chunk would choose."""
    from blasdx.plan import heuristics

    def smallest(p, plan):
        return next((c for c in range(16, p.k, 16) if heuristics.k_chunk_fits(p, plan, c)), 0)

    yield from _replanned(monkeypatch, "batched_k_chunk", smallest)


@pytest.mark.parametrize("arr", [(R, R, R), (C, C, C), (R, C, R), (C, R, C)],
                         ids=lambda a: "".join(x.name[0] for x in a))
@pytest.mark.parametrize("size", [(64, 64, 64), (100, 100, 100), (128, 96, 72), (33, 40, 50)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("row", _rows(), ids=_row_id)
def test_k_in_chunks(sm, k_chunks_everywhere, row, size, arr):
    """Plans whose block copies K in chunks and multiplies each as it lands (KernelPlan.k_chunk):
    every type, K-contiguous and not, K ending in a short chunk, C staged or stored from
    registers, beta 0 (C poisoned) and not."""
    desc = gemm_descriptor(row, size, sm, arr)
    if not desc.is_supported or not desc.plan.k_chunk:
        pytest.skip("no K chunks for this plan")
    for alpha, beta in scalar_pairs(row):
        run_gemm(desc, row, alpha, beta, stable_seed(repr(desc), alpha, beta, "k chunks"), batch=3)


@pytest.fixture
def panels_everywhere(monkeypatch):
    """Every batched plan keeps A and B in swizzled panels wherever it can (heuristics.panel_widths),
    whatever heuristics.batched_panels would choose."""
    from blasdx.plan import heuristics

    yield from _replanned(monkeypatch, "batched_panels", heuristics.panel_widths)


@pytest.mark.parametrize("arr", [(R, R, R), (C, C, C), (R, C, R), (C, R, C)],
                         ids=lambda a: "".join(x.name[0] for x in a))
@pytest.mark.parametrize("size", [(32, 32, 32), (16, 16, 16), (64, 32, 48), (32, 64, 128), (64, 64, 64), (64, 8, 32)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("arch_specific", [False, True], ids=["sm", "sm_a"])
@pytest.mark.parametrize("row", [r for r in _rows() if r.a.size == 2 and not r.is_complex], ids=_row_id)
def test_operands_in_panels(sm, panels_everywhere, row, size, arr, arch_specific):
    """Plans whose batched kernel keeps A and B in swizzled panels (KernelPlan.batched_panels):
    16-bit types, panels one and several per row, 32 to 128 bytes wide, either order, C beside A
    and B (over them: the next test), beta 0 (C poisoned) and not; sm_90a's plans where wgmma
    does not take the size."""
    if arch_specific and sm != 90:
        pytest.skip("wgmma plans are sm_90a's")
    desc = gemm_descriptor(row, size, sm, arr)
    if arch_specific:
        desc = (bx.Size(*size) + bx.Precision(row.a, row.b, row.c) + bx.Type.real + bx.Function.MM
                + bx.SM(sm, arch_specific=True) + bx.Block() + bx.Arrangement(*arr))
    if not desc.is_supported or desc.plan.batched_panels == (0, 0):
        pytest.skip("no panels for this plan")
    for alpha, beta in scalar_pairs(row):
        run_gemm(desc, row, alpha, beta, stable_seed(repr(desc), alpha, beta, "panels"), batch=5)


@pytest.mark.parametrize("arr", [(R, R, R), (C, R, C)], ids=lambda a: "".join(x.name[0] for x in a))
@pytest.mark.parametrize("size", [(32, 32, 32), (64, 32, 48)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("row", [r for r in _rows() if r.a.size == 2 and not r.is_complex], ids=_row_id)
def test_operands_in_panels_with_c_over_them(sm, panels_everywhere, monkeypatch, row, size, arr):
    """A and B in swizzled panels, C staged over them once the product is in registers."""
    from blasdx.plan import heuristics

    monkeypatch.setattr(heuristics, "staged_c_layout", lambda p, ab_bytes, max_bytes: None)
    desc = gemm_descriptor(row, size, sm, arr)
    assert desc.plan.batched_panels != (0, 0) and desc.plan.smem_c_over_ab is not None
    for alpha, beta in scalar_pairs(row):
        run_gemm(desc, row, alpha, beta, stable_seed(repr(desc), alpha, beta, "panels, C over"), batch=5)


def _float32_row(a: dt.DType) -> dt.Combination:
    return next(r for r in _rows() if r.a == a and r.c == dt.float32 and not r.is_complex)


@pytest.mark.parametrize("arr", [(R, R, R), (C, C, C), (R, C, C)], ids=lambda a: "".join(x.name[0] for x in a))
@pytest.mark.parametrize("size", [(128, 128, 64), (128, 128, 128)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("a, bits", [(dt.float32, None), (dt.tfloat32, None), (dt.float32, 23)],
                         ids=["f32", "tf32", "3xtf32"])
def test_k_chunk_plans_of_the_heuristics(sm, a, bits, size, arr):
    """The plans heuristics.batched_k_chunk gives chunks to (128-wide float32, tf32 and 3xtf32),
    as users get them."""
    row = _float32_row(a)
    desc = gemm_descriptor(row, size, sm, arr, **({"bits": bx.MantissaBits(bits)} if bits else {}))
    if not desc.is_supported or not desc.plan.k_chunk:
        pytest.skip("no K chunks for this plan on this GPU")
    for alpha, beta in scalar_pairs(row):
        run_gemm(desc, row, alpha, beta, stable_seed(repr(desc), alpha, beta, "planned chunks"), batch=3)


def _tf32_bits(x: np.ndarray, half: int) -> np.ndarray:
    """float32 values cut to tf32's 10 mantissa bits after adding ``half`` (0: truncated, 0x1000: rounded)."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(half)) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.mark.parametrize("workload", [bx.Workload.memory_bound, bx.Workload.compute_bound], ids=lambda w: w.name)
@pytest.mark.parametrize("arr", [(R, R, R), (C, C, C)], ids=lambda a: "".join(x.name[0] for x in a))
@pytest.mark.parametrize("size", [(48, 80, 24), (100, 100, 100)], ids=str)
def test_tf32_operands_are_read_as_stored(sm, size, arr, workload):
    """float32 values with bits below tf32's reach the tensor core as stored, which reads their
    upper 19 bits: C matches the product of the truncated operands to float32 accuracy, and is
    much further from that of operands rounded to nearest."""
    row = dt.find_combination(dt.tfloat32, dt.tfloat32, dt.float32, False)
    desc = gemm_descriptor(row, size, sm, arr, workload=workload)
    m, n, k = size
    seed = stable_seed(size, arr, workload.name)
    rng = np.random.default_rng(seed)
    a_host = random_operand(dt.float32, (3, m, k), rng)
    b_host = random_operand(dt.float32, (3, k, n), rng)
    assert np.mean(_tf32_bits(a_host, 0) != a_host) > 0.9  # the low bits are set
    lda, ldb, ldc = desc.leading_dimension
    a = strided_operand(a_host, dt.float32, arr[0] is R, lda)
    b = strided_operand(b_host, dt.float32, arr[1] is R, ldb)
    c = strided_operand(np.full((3, m, n), np.nan, np.float32), dt.float32, arr[2] is R, ldc)
    got = torch_to_host(desc.execute(a, b, c), dt.float32)
    truncated = reference_gemm(_tf32_bits(a_host, 0), _tf32_bits(b_host, 0))
    rounded = reference_gemm(_tf32_bits(a_host, 0x1000), _tf32_bits(b_host, 0x1000))
    assert_close(got, truncated, tolerance(dt.float32, dt.float32, k), what=f"tf32 C, seed {seed}",
                 scale=gemm_scale(_tf32_bits(a_host, 0), _tf32_bits(b_host, 0)))
    assert relative_error(got, rounded) > 10 * relative_error(got, truncated)


@pytest.mark.parametrize("a_batch,b_batch", [(1, 5), (5, 1), (1, 1), (5, 5)])
def test_batch_broadcast(sm, a_batch, b_batch):
    row = dt.find_combination(dt.float16, dt.float16, dt.float32, False)
    desc = gemm_descriptor(row, (24, 40, 16), sm, (R, C, C))
    run_gemm(desc, row, -1.5, 0.5, 3, batch=5, a_batch=a_batch, b_batch=b_batch)


def test_large_batch_matches_reference(sm):
    row = dt.find_combination(dt.float16, dt.float16, dt.float32, False)
    desc = gemm_descriptor(row, (32, 32, 32), sm, (R, C, C), al=bx.MaxAlignment)
    run_gemm(desc, row, 1.0, 0.0, 4, batch=4096)


def test_beta_zero_never_reads_c(sm):
    """NaN in C must not leak into the result when beta is 0 (all element types)."""
    for row in _rows():
        desc = gemm_descriptor(row, (16, 16, 16), sm)
        run_gemm(desc, row, 1, 0, 5)


# ---- streams: each call warmed up, then run on a busy stream behind writes of new data ------------
# (gpu_support.behind_a_delay: a launch on any other stream runs during the delay, on the old data)


def stream_case(sm: int, types, size, arrangement, what: str) -> tuple[bx.Descriptor, int]:
    """A stream test's block GEMM of the real ``types`` (A, B, C) and its seed, stable for ``what``."""
    return gemm_descriptor(dt.find_combination(*types, False), size, sm, arrangement), stable_seed(what)


def test_cupy_arrays_and_cupy_stream(sm):
    cp = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    desc, seed = stream_case(sm, (dt.float32, dt.float32, dt.float32), (33, 17, 20), (R, R, R), "cupy stream")
    rng = np.random.default_rng(seed)
    a_h, b_h, c_h, new_a, new_c = (rng.standard_normal(shape).astype(np.float32)
                                   for shape in ((33, 20), (20, 17), (33, 17), (33, 20), (33, 17)))
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        a, b, c = cp.asarray(a_h), cp.asarray(b_h), cp.asarray(c_h)
        fresh_a, fresh_c = cp.asarray(new_a), cp.asarray(new_c)
        a[...] = cp.asarray(a_h)  # warm-up: CuPy builds its copy kernels at their first use, the GEMM loads
        c.copy()
        desc.execute(a, b, c, alpha=1.0, beta=0.5, stream=stream)
    stream.synchronize()
    with behind_a_delay(torch.cuda.ExternalStream(stream.ptr), f"execute on a CuPy stream (seed {seed})"), stream:
        a[...] = fresh_a  # queued before the GEMM on its stream: the GEMM must read these
        c[...] = fresh_c
        desc.execute(a, b, c, alpha=1.0, beta=0.5, stream=stream)
        snapshot = c.copy()  # queued after it: must see its result
    ref, scale = reference_gemm(new_a, b_h, new_c, 1.0, 0.5), gemm_scale(new_a, b_h, new_c, 1.0, 0.5)
    assert_close(cp.asnumpy(c), ref, 1e-5, what=f"C (seed {seed})", scale=scale)
    assert_close(cp.asnumpy(snapshot), ref, 1e-5, what=f"copy of C queued after the GEMM (seed {seed})", scale=scale)


def test_torch_stream_orders_work(sm):
    torch = pytest.importorskip("torch")
    desc, seed = stream_case(sm, (dt.bfloat16, dt.bfloat16, dt.float32), (64, 64, 64), (R, C, C), "torch stream")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    s = side_stream()
    with torch.cuda.stream(s):
        a, fresh_a = (torch.randn(8, 64, 64, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(2))
        b = torch.randn(8, 64, 64, device="cuda", generator=gen).to(torch.bfloat16).transpose(1, 2)
        c, fresh_c = (torch.randn(8, 64, 64, device="cuda", generator=gen).transpose(1, 2) for _ in range(2))
        desc.execute(a, b, c, alpha=2.0, beta=-1.0, stream=s)  # warm-up; c column-major
    s.synchronize()
    with behind_a_delay(s, f"execute on a torch stream (seed {seed})"):
        a.copy_(fresh_a)  # queued on s before the GEMM, which must read them
        c.copy_(fresh_c)
        desc.execute(a, b, c, alpha=2.0, beta=-1.0, stream=s)
        snapshot = c.clone()  # queued on s after the GEMM: must see its result
    expected = (2.0 * (fresh_a.double() @ b.double()) - fresh_c.double()).cpu().numpy()
    scale = (2.0 * (fresh_a.double().abs() @ b.double().abs()) + fresh_c.double().abs()).cpu().numpy()
    for what, got in (("C", c), ("copy of C queued after the GEMM", snapshot)):
        assert_close(got.double().cpu().numpy(), expected, 1e-5, what=f"{what} (seed {seed})", scale=scale)


def test_default_stream_uses_torch_current_stream(sm):
    torch = pytest.importorskip("torch")
    desc, seed = stream_case(sm, (dt.float64, dt.float64, dt.float64), (16, 16, 16), (R, R, R),
                             "torch current stream")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, b, fresh = (torch.randn(16, 16, device="cuda", dtype=torch.float64, generator=gen) for _ in range(3))
    c = torch.full((16, 16), float("nan"), device="cuda", dtype=torch.float64)
    torch.cuda.synchronize()  # made on the default stream, which the side stream does not wait for
    s = side_stream()
    with torch.cuda.stream(s):
        desc.execute(a, b, c)  # warm-up, on torch's current stream
    s.synchronize()
    with behind_a_delay(s, f"execute without stream= (seed {seed})"):  # torch's current stream: execute queues there
        a.copy_(fresh)  # the GEMM must read these values, not a's old ones
        desc.execute(a, b, c)
        snapshot = c.clone()
    ref = (fresh @ b).cpu().numpy()
    scale = (fresh.abs() @ b.abs()).cpu().numpy()
    assert_close(c.cpu().numpy(), ref, 1e-12, what=f"C (seed {seed})", scale=scale)
    assert_close(snapshot.cpu().numpy(), ref, 1e-12, what=f"copy of C queued after the GEMM (seed {seed})", scale=scale)


def test_blasdx_arrays_on_a_busy_stream(sm):
    """blasdx's own arrays, written on the stream through torch views of the same memory (DLPack)."""
    torch = pytest.importorskip("torch")
    desc, seed = stream_case(sm, (dt.int8, dt.int8, dt.int32), (48, 40, 64), (R, C, C), "blasdx arrays on a stream")
    rng = np.random.default_rng(seed)
    a_h, new_a = (random_operand(dt.int8, (48, 64), rng) for _ in range(2))
    b_h = np.asfortranarray(random_operand(dt.int8, (64, 40), rng))
    c_h, new_c = (np.asfortranarray(random_operand(dt.int32, (48, 40), rng)) for _ in range(2))
    a, b, c = bx.to_device(a_h), bx.to_device(b_h), bx.to_device(c_h)
    s = side_stream()
    desc.execute(a, b, c, alpha=3, beta=-2, stream=s)  # warm-up
    s.synchronize()
    fresh_a, fresh_c = torch.from_numpy(new_a).cuda(), torch.from_numpy(np.ascontiguousarray(new_c)).cuda()
    torch.cuda.synchronize()
    view_a, view_c = torch.from_dlpack(a), torch.from_dlpack(c)
    with behind_a_delay(s, f"execute of blasdx arrays (seed {seed})"):
        view_a.copy_(fresh_a)
        view_c.copy_(fresh_c)
        desc.execute(a, b, c, alpha=3, beta=-2, stream=s)
        snapshot = view_c.clone()
    ref = reference_gemm(new_a, b_h, new_c, 3, -2)
    assert_close(bx.from_device(c), ref, 0.0, what=f"C (seed {seed})")
    assert_close(snapshot.cpu().numpy(), ref, 0.0, what=f"copy of C queued after the GEMM (seed {seed})")


def test_blasdx_device_arrays_round_trip(sm):
    desc = gemm_descriptor(dt.find_combination(dt.int8, dt.int8, dt.int32, False), (48, 40, 64), sm, (R, C, C))
    rng = np.random.default_rng(12)
    a_h = random_operand(dt.int8, (48, 64), rng)
    b_h = np.asfortranarray(random_operand(dt.int8, (64, 40), rng))
    c_h = np.asfortranarray(random_operand(dt.int32, (48, 40), rng))
    a, b, c = bx.to_device(a_h), bx.to_device(b_h), bx.to_device(c_h)
    desc.execute(a, b, c, alpha=3, beta=-2)
    got = bx.from_device(c)
    assert_close(got, reference_gemm(a_h, b_h, c_h, 3, -2), 0.0)


def test_bad_input_raises_before_launch_and_leaves_c_unchanged(sm):
    torch = pytest.importorskip("torch")
    desc = gemm_descriptor(dt.find_combination(dt.float16, dt.float16, dt.float32, False), (32, 32, 32), sm,
                           (R, R, R), al=bx.MaxAlignment)
    a = torch.randn(32, 32, device="cuda", dtype=torch.float16)
    b = torch.randn(32, 32, device="cuda", dtype=torch.float16)
    c = torch.randn(32, 32, device="cuda", dtype=torch.float32)
    before = c.clone()
    bad_calls = {
        "dtype": (lambda: desc.execute(a.float(), b, c), r"^a: dtype float32 does not match A's type float16"),
        "shape": (lambda: desc.execute(a[:, :16], b, c), r"^a: shape \(32, 16\) does not match A"),
        "arrangement": (lambda: desc.execute(a.t(), b, c),
                        r"^a: element strides \(1, 32\) of shape \(32, 32\) do not match row_major A"),
        "alignment": (lambda: desc.execute(torch.randn(32 * 32 + 1, device="cuda", dtype=torch.float16)[1:]
                                           .view(32, 32), b, c), r"^a: address 0x[0-9a-f]+ is not aligned to 16 bytes"),
        "host": (lambda: desc.execute(a.cpu(), b, c), r"^a: .* is in host memory"),
    }
    for name, (call, match) in bad_calls.items():
        with pytest.raises(bx.ExecutionError, match=match):
            call()
        torch.cuda.synchronize()
        assert torch.equal(c, before), f"C changed after the failed {name} call"

    shared = torch.randn(2048, device="cuda", dtype=torch.float32)
    shared_before = shared.clone()
    a_alias = shared.view(torch.float16)[:1024].view(32, 32)
    c_alias = shared[:1024].view(32, 32)
    with pytest.raises(bx.ExecutionError, match="overlap"):
        desc.execute(a_alias, b, c_alias)
    torch.cuda.synchronize()
    assert torch.equal(shared, shared_before)

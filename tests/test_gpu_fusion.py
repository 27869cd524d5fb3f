"""GPU correctness of fused kernels: the device API over every type, the examples' kernels, launches.

Fresh random operands per case against the float64 reference; C poisoned (NaN, or a
sentinel for integers) when beta = 0 so that a read of C shows.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.base.errors import ExecutionError
from blasdx.reference import assert_close, assert_gemm_close, to_float64, tolerance

from .gpu_support import (
    gemm_operands,
    gpu_sm,
    require_gpu,
    scalar_pairs,
    stable_seed,
    tight_operands,
    torch_to_host,
    value_type,
)
from .test_fusion import (
    case_id,
    compile_type_kernels,
    load_example,
    type_cases,
    type_descriptor,
    type_source,
)

pytestmark = pytest.mark.gpu

CASES = type_cases(gpu_sm() or 90)


@pytest.fixture(scope="module")
def sm() -> int:
    return require_gpu()


@pytest.fixture(scope="module")
def type_kernels(sm):
    return compile_type_kernels(CASES, sm)


def run_type_case(kernel: bx.FusedKernel, desc: bx.Descriptor, row: dt.Combination, alpha, beta, rng,
                  batch: int = 3, block=None) -> None:
    """Launch one problem per block on tightly stored operands and compare with the reference."""
    assert desc.precision == (row.a, row.b, row.c) and desc.is_complex == row.is_complex
    a_host, b_host, c_host = gemm_operands(desc, rng, batch, beta)
    a, b, c = tight_operands(desc, a_host, b_host, c_host)
    kernel.launch(batch, (a, b, c, alpha, beta), block=block)
    got = torch_to_host(c, value_type(row.c, row.is_complex))
    a_scale = 1 if row.a.integral else 2  # A_OP doubles A, B_OP conjugates B (see tests/test_fusion.py)
    tol = tolerance(row.a, row.c, desc.size[2], row.accumulator)  # the type table's accumulator, not the descriptor's
    assert_gemm_close(got, a_scale * to_float64(a_host), np.conj(to_float64(b_host)), c_host, alpha, beta, tol,
                      f"C of {kernel.name} for {desc!r} alpha={alpha} beta={beta}")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_register_and_shared_memory_api_every_type(sm, type_kernels, case):
    row, shape = case
    desc = type_descriptor(row, sm, shape)
    rng = np.random.default_rng(stable_seed(case_id(case)))
    for kernel in type_kernels[case]:
        for alpha, beta in scalar_pairs(row):
            run_type_case(kernel, desc, row, alpha, beta, rng)


def test_a_block_larger_than_the_gemm(sm):
    """Threads beyond max_threads_per_block skip the GEMM and its copies; the result is the same,
    whether the block is compile_kernel's or only the launch's (which runs the compile that keeps
    the thread checks)."""
    row = dt.find_combination(dt.float16, dt.float16, dt.float32, False)
    desc = type_descriptor(row, sm, "full")
    source = "#define MAX_THREADS 1024\n" + type_source(row)
    threads = desc.max_threads_per_block + 96
    for name in ("register_api", "shared_api"):
        kernel = bx.compile_kernel(source, name, {"GEMM": desc}, block=threads)
        assert kernel.block == (threads, 1, 1)
        run_type_case(kernel, desc, row, -1.5, 0.5, np.random.default_rng(5))
        run_type_case(kernel, desc, row, -1.5, 0.5, np.random.default_rng(6), block=(threads + 32, 1))
        exact = bx.compile_kernel(source, name, {"GEMM": desc})
        assert exact.block == desc.block_dim
        larger = (desc.max_threads_per_block + 64, 1)
        assert exact.compiled_for(larger + (1,)) is not exact.compiled
        run_type_case(exact, desc, row, -1.5, 0.5, np.random.default_rng(7))
        run_type_case(exact, desc, row, -1.5, 0.5, np.random.default_rng(8), block=larger)


def test_launch_checks_arrays_before_launching(sm):
    torch = pytest.importorskip("torch")
    row = dt.find_combination(dt.float32, dt.float32, dt.float32, False)
    desc = type_descriptor(row, sm, "odd")
    kernel = bx.compile_kernel(type_source(row), "register_api", {"GEMM": desc})
    a = torch.zeros(40, 33, device="cuda", dtype=torch.float64)
    b = torch.zeros(40, 17, device="cuda")
    c = torch.full((33, 17), 7.0, device="cuda")
    with pytest.raises(ExecutionError, match=r"args\[0\] \(a\): dtype float64 does not match"):
        kernel.launch(1, (a, b, c, 1.0, 0.0))
    with pytest.raises(ExecutionError, match=r"block: \(32, 1, 1\) is 32 threads but GEMM runs on"):
        kernel.launch(1, (a.float(), b, c, 1.0, 0.0), block=32)
    torch.cuda.synchronize()
    assert bool((c == 7.0).all())  # nothing ran


def test_launch_follows_the_torch_stream(sm):
    torch = pytest.importorskip("torch")
    cg = load_example("complex_gemm")
    kernel = cg.build(sm, 16, 16, 16)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        a = torch.randn(64, 16, 16, device="cuda", dtype=torch.complex64)
        b = torch.randn(64, 16, 16, device="cuda", dtype=torch.complex64)
        c = torch.empty(64, 16, 16, device="cuda", dtype=torch.complex64)
        a.mul_(2)  # queued on the side stream before the kernel: the kernel must see it
        cg.run(kernel, a, b, c)  # stream=None: the current torch stream
    stream.synchronize()
    ref = cg.reference(a.cpu().numpy(), b.cpu().numpy(), c.cpu().numpy(), 1, 0)
    assert_close(c.cpu().numpy(), ref, tolerance(bx.float32, bx.float32, 16))


# ---------------------------------------------------------------------------------------------
# the examples' kernels against float64
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,grid", [((64, 128, 128), 5), ((32, 64, 96), 3), ((64, 128, 128), None)])
def test_fused_mlp(sm, shape, grid):
    torch = pytest.importorskip("torch")
    mlp = load_example("fused_mlp")
    tokens, features, hidden = shape
    kernel = mlp.build(sm, tokens, features, hidden)
    batch = 37
    x = torch.randn(batch, tokens, features, device="cuda", dtype=torch.float16)
    w = (torch.randn(hidden, features, device="cuda") / math.sqrt(features)).to(torch.float16)
    bias = torch.randn(hidden, device="cuda")
    y = torch.full((batch, tokens, hidden), float("nan"), device="cuda", dtype=torch.float16)
    mlp.run(kernel, x, w, bias, y, grid)  # grid < batch: each block loops over several token blocks
    ref = mlp.reference(x.cpu().numpy(), w.cpu().numpy(), bias.cpu().numpy())
    assert_close(y.cpu().numpy(), ref, tolerance(bx.float16, bx.float16, features), what="Y")


@pytest.mark.parametrize("seq,head_dim", [(128, 64), (128, 128), (100, 64), (64, 128), (17, 64)])
def test_fused_attention(sm, seq, head_dim):
    torch = pytest.importorskip("torch")
    attention = load_example("fused_attention")
    kernel = attention.build(sm, seq, head_dim)
    q, k, v = (torch.randn(2, 3, seq, head_dim, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    attention.run(kernel, q, k, v, o)
    ref = attention.reference(q.cpu().numpy(), k.cpu().numpy(), v.cpu().numpy())
    assert_close(o.cpu().numpy(), ref, tolerance(bx.float16, bx.float16, seq), what="O")


@pytest.mark.parametrize("size", [(32, 32, 32), (24, 40, 16)])
def test_complex_gemm(sm, size):
    torch = pytest.importorskip("torch")
    cg = load_example("complex_gemm")
    m, n, k = size
    kernel = cg.build(sm, m, n, k)
    a = torch.randn(9, k, m, device="cuda", dtype=torch.complex64)
    b = torch.randn(9, k, n, device="cuda", dtype=torch.complex64)
    c0 = torch.randn(9, m, n, device="cuda", dtype=torch.complex64)
    for alpha, beta in ((1, 0), (0.5 - 1j, 2 + 0.25j)):
        c = c0.clone()
        if beta == 0:
            c.fill_(complex(float("nan"), float("nan")))
        cg.run(kernel, a, b, c, alpha, beta)
        ref = cg.reference(a.cpu().numpy(), b.cpu().numpy(), c0.cpu().numpy(), alpha, beta)
        assert_close(c.cpu().numpy(), ref, tolerance(bx.float32, bx.float32, k), what=f"C alpha={alpha} beta={beta}")


def test_docs_example_runs(sm):
    pytest.importorskip("torch")
    from .test_fusion import docs_example

    code = docs_example().replace("bx.SM(90)", f"bx.SM({sm})").replace("print(", "error = (")
    namespace: dict = {}
    exec(code, namespace)
    assert float(namespace["error"]) < 0.05  # f16 output of values up to ~30

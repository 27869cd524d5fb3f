"""GPU correctness of examples/flash_attention.py (sm_90a on a compute capability 9.0 GPU) and of the
device-API pieces it is built from (row view, bounded copies, register A).

softmax(Q K^T / sqrt(d)) V for odd sequence lengths (1, 17, 129, 1000, 4097: one partial tile, a
second tile of one key, partial last query and key tiles, many full tiles and a one-row tail), head dims 64 and 128,
f16 and bf16, causal and not, on fresh random data with O poisoned (NaN) first: sampled heads
against the float64 reference within the reference table's tolerance, and all of O against
torch SDPA's result within twice that.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import blasdx as bx
from blasdx.reference import assert_close, tolerance

from .attention_kernels import (
    chain_gemms,
    compile_chain,
    compile_row_stats,
    row_stats_gemm,
)
from .gpu_support import gpu_sm

pytestmark = pytest.mark.gpu

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _example():
    spec = importlib.util.spec_from_file_location("blasdx_example_flash_attention", EXAMPLES / "flash_attention.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fa = _example()


@pytest.fixture(scope="module")
def hopper() -> None:
    if gpu_sm() != 90:
        pytest.skip("needs a compute capability 9.0 GPU (wgmma, sm_90a)")
    pytest.importorskip("torch")


CASES = [
    (seq, d, dtype, causal)
    for seq in (1, 17, 129, 1000, 4097)
    for d in (64, 128)
    for dtype in (bx.float16, bx.bfloat16)
    for causal in (False, True)
    if (dtype == bx.float16 and (seq != 129 or d == 64)) or (dtype == bx.bfloat16 and seq in (17, 1000))
]


@pytest.mark.parametrize("seq,d,dtype,causal", CASES, ids=lambda v: str(v))
def test_flash_attention(hopper, seq: int, d: int, dtype, causal: bool) -> None:
    import torch

    torch.manual_seed(seq * 7 + d)
    kernel = fa.build(d, dtype, causal)
    assert kernel.local_memory == 0
    batch, heads = (2, 3) if seq < 4000 else (1, 2)
    diff = fa.check(kernel, batch, heads, seq, d, dtype, causal, sample=3)
    assert diff <= 2 * fa.tolerance_of(dtype, seq)


def test_flash_attention_many_heads(hopper) -> None:
    """A grid with many heads and query tiles: each block finds its own head and tile."""
    kernel = fa.build(64, bx.float16, True)
    fa.check(kernel, 4, 8, 513, 64, bx.float16, True, sample=6)


@pytest.mark.parametrize("seq,d,causal", [(17, 64, False), (1000, 128, True), (4097, 64, True), (300, 128, False)])
def test_flash_attention_without_pipelining(hopper, seq: int, d: int, causal: bool) -> None:
    """The kernel whose GEMMs complete one after the other (no asynchronous wgmma)."""
    kernel = fa.build(d, bx.float16, causal, pipelined=False)
    fa.check(kernel, 1, 3, seq, d, bx.float16, causal, sample=2)


# ---------------------------------------------------------------------------------------------
# the device-API pieces on their own (tests/attention_kernels.py)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [64, 37, 1])
@pytest.mark.parametrize("sm,size,threads", [(80, (64, 32, 64), 128), ((90, True), (128, 64, 64), 256)],
                         ids=["mma_sync", "wgmma"])
def test_rows_and_bounded_copies(sm, size, threads, rows: int) -> None:
    """Row maxima / sums of C = A B through blasdx::rows, A loaded with only `rows` rows (the rest
    zero-filled), C / row sums stored for those rows only."""
    device_sm = gpu_sm()
    if device_sm is None or (isinstance(sm, tuple) and device_sm != 90):
        pytest.skip("needs a GPU (compute capability 9.0 for wgmma)")
    import numpy as np

    torch = pytest.importorskip("torch")
    desc = row_stats_gemm(sm, size=size, threads=threads)
    kernel = compile_row_stats(desc)
    m, n, k = size
    torch.manual_seed(rows)
    a = torch.rand(m, k, device="cuda", dtype=torch.float16) + 0.1  # positive: row sums far from zero
    a[rows:] = float("nan")  # never read
    b = torch.rand(n, k, device="cuda", dtype=torch.float16) - 0.25  # column-major K x N
    a_in = a.clone()
    poison = -12345.0
    row_max = torch.full((m,), poison, device="cuda")
    row_sum = torch.full((m,), poison, device="cuda")
    c = torch.full((m, n), poison, device="cuda")
    kernel.launch(1, (a_in, b, row_max, row_sum, c, rows))
    torch.cuda.synchronize()
    full = np.zeros((m, k))
    full[:rows] = a[:rows].double().cpu().numpy()
    ref = full @ b.double().cpu().numpy().T
    got_max, got_sum, got_c = (t.double().cpu().numpy() for t in (row_max, row_sum, c))
    tol = tolerance(bx.float16, bx.float32, k)
    assert_close(got_max, ref.max(axis=1), tol, what="row maxima")  # zero rows past `rows`: max 0
    assert_close(got_sum, ref.sum(axis=1), tol, what="row sums", scale=np.abs(ref).sum(axis=1))
    assert_close(got_c[:rows], ref[:rows] / ref[:rows].sum(axis=1, keepdims=True), 10 * tol, what="C / row sums",
                 scale=np.abs(ref[:rows]) / np.abs(ref[:rows].sum(axis=1, keepdims=True)))
    assert np.all(got_c[rows:] == poison), "the bounded store wrote rows past `rows`"


@pytest.mark.parametrize("dtype", [bx.float16, bx.bfloat16])
@pytest.mark.parametrize("b2_order", [bx.row_major, bx.col_major], ids=["b2_row", "b2_col"])
def test_register_a_chain(hopper, dtype, b2_order) -> None:
    """O = round16(A B1) B2, the first accumulator becoming the second GEMM's register A."""
    import torch

    gemms = chain_gemms(dtype, b2_order=b2_order)
    kernel = compile_chain(gemms)
    g1, g2 = gemms["G1"], gemms["G2"]
    tdtype = getattr(torch, str(dtype))
    torch.manual_seed(7)
    a = torch.randn(g1.m, g1.k, device="cuda", dtype=tdtype)
    b1 = torch.randn(g1.n, g1.k, device="cuda", dtype=tdtype)  # column-major k1 x n1
    b2 = torch.randn(g2.k, g2.n, device="cuda", dtype=tdtype)
    b2_given = b2 if b2_order == bx.row_major else b2.t().contiguous()
    o = torch.full((g2.m, g2.n), float("nan"), device="cuda")
    kernel.launch(1, (a, b1, b2_given, o))
    torch.cuda.synchronize()
    s = (a.double() @ b1.double().t()).to(tdtype)  # the kernel rounds S once, as here (from f32 sums)
    ref = (s.double() @ b2.double()).cpu().numpy()
    assert_close(o.double().cpu().numpy(), ref, tolerance(dtype, dtype, g1.k), what="O")


@pytest.mark.parametrize("dtype", [bx.float16, bx.bfloat16])
def test_async_chain(hopper, dtype) -> None:
    """execute_async / wait with two groups in flight: the older (register A) and the newer (A B1 again)."""
    import torch

    gemms = chain_gemms(dtype)
    kernel = compile_chain(gemms, asynchronous=True)
    g1, g2 = gemms["G1"], gemms["G2"]
    tdtype = getattr(torch, str(dtype))
    torch.manual_seed(11)
    a = torch.randn(g1.m, g1.k, device="cuda", dtype=tdtype)
    b1 = torch.randn(g1.n, g1.k, device="cuda", dtype=tdtype)
    b2 = torch.randn(g2.k, g2.n, device="cuda", dtype=tdtype)
    o = torch.full((g2.m, g2.n), float("nan"), device="cuda")
    s2 = torch.full((g1.m, g1.n), float("nan"), device="cuda")
    kernel.launch(1, (a, b1, b2, o, s2))
    torch.cuda.synchronize()
    exact = a.double() @ b1.double().t()
    ref = (exact.to(tdtype).double() @ b2.double()).cpu().numpy()
    assert_close(o.double().cpu().numpy(), ref, tolerance(dtype, dtype, g1.k), what="O")
    assert_close(s2.double().cpu().numpy(), exact.cpu().numpy(), tolerance(dtype, bx.float32, g1.k), what="S2")

"""The TRSM kernels' own C++ run on the CPU (tests/host_emulation.py), checked like the GPU tests.

Every Side x FillMode x Diag over the four arrangements, odd sizes, several problems per block
with a partial last block, a shared A, padded leading dimensions, alpha (zero included, with NaN
in B), an output of another order, right-hand sides split over blocks, an ill-conditioned
system, and the device API from a user's kernel. A's unread triangle (and a unit diagonal) hold
NaN, so reading them shows; so does writing padding or shared memory past the kernel's share.
Three cases run under ThreadSanitizer (a missing barrier is a race) and two under
AddressSanitizer. f32 runs as on the GPU; f64 runs on sm_75's DFMA path (sm_80's DMMA is
GPU-only, and checked there).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.codegen.trsm import OutputLayout, generate
from blasdx.fusion.kernel import fused_source
from blasdx.reference import random_operand
from blasdx.reference.trsm import (
    condition_number,
    random_triangular,
)

from . import host_emulation as emu
from .gpu_support import stable_seed
from .trsm_support import SOLVE_KERNEL, check_solution

pytestmark = pytest.mark.skipif(emu.compiler() is None, reason="needs g++ (C++20) to run kernel code on the host")

R, C = bx.row_major, bx.col_major


@dataclass
class Case:
    desc: bx.TrsmDescriptor
    batch: int = 3
    alpha: complex = 1.0
    shared_a: bool = False
    out: OutputLayout | None = None  # None: in place
    chunks: int = 1  # right-hand sides split over grid y (the descriptor's Size is one chunk)
    growth: float | None = None  # ill-conditioned A
    sanitize: str | None = None


def trsm(size, *ops, prec=bx.float32, kind=bx.Type.real, sm=80):
    desc = bx.Size(*size) + bx.Precision(prec) + kind + bx.Function.TRSM + bx.SM(sm) + bx.Block()
    for op in ops:
        desc = desc + op
    return desc


def _alpha_literal(desc, alpha: complex) -> str:
    scalar = "blasdx_trsm_config::scalar_type"
    if desc.is_complex:
        return f"{scalar}({complex(alpha).real!r}), {scalar}({complex(alpha).imag!r})"
    return f"{scalar}({float(np.real(alpha))!r})"


def _host_type(desc) -> np.dtype:
    return np.dtype(desc.b_value_type.numpy)


def _data(desc, batch: int, rng, growth=None, shared_a=False, width: int | None = None):
    """(system, B): A stored with NaN where it must not be read, B of (batch, M, width or N)."""
    m, n = desc.size
    dim = desc.a_dim[0]
    real = desc.scalar_type
    system = random_triangular(rng, 1 if shared_a else batch, dim, real, is_complex=desc.is_complex,
                               lower=desc.fill_mode is bx.FillMode.lower, unit=desc.diag is bx.Diag.unit, growth=growth)
    shape = (batch, m, n)
    if width is not None:
        shape = (batch, m, width) if desc.side is bx.Side.left else (batch, width, n)
    return system, random_operand(real, shape, rng, is_complex=desc.is_complex)


def run_batched(case: Case, build_dir, work, rng) -> None:
    desc = case.desc
    m, n = desc.size
    width = (n if desc.side is bx.Side.left else m) * case.chunks
    system, b = _data(desc, case.batch, rng, case.growth, case.shared_a, width if case.chunks > 1 else None)
    full_m, full_n = b.shape[1:]
    b_row = desc.arrangement.b is R
    lda, ldb = desc.leading_dimension
    if case.chunks > 1:  # one chunk's leading dimension is the whole B's
        assert ldb == (full_n if b_row else full_m)
    host = _host_type(desc)
    a_buf = emu.storage(system.stored.astype(host), desc.arrangement.a is R, lda)
    b_buf = emu.storage(b.astype(host), b_row, ldb)
    out_row, ldo = (b_row, ldb) if case.out is None else (case.out.row_major, case.out.ld)
    out_buf = b_buf.copy() if case.out is None else emu.storage(np.zeros_like(b, dtype=host), out_row, ldo)
    outer_b = full_m if b_row else full_n
    outer_o = full_m if out_row else full_n
    step_b = (1 if b_row else ldb) if desc.side is bx.Side.left else (ldb if b_row else 1)
    step_o = (1 if out_row else ldo) if desc.side is bx.Side.left else (ldo if out_row else 1)
    chunk = (n if desc.side is bx.Side.left else m)
    stride_a = 0 if case.shared_a else lda * desc.a_dim[0]
    call = (
        "blasdx_batched_trsm(reinterpret_cast<const blasdx::T*>(a.data()), "
        f"reinterpret_cast<const blasdx::T*>({'out' if case.out is None else 'b'}.data()), "
        f"reinterpret_cast<blasdx::T*>(out.data()), {_alpha_literal(desc, case.alpha)}, {stride_a}LL, "
        f"{ldb * outer_b}LL, {ldo * outer_o}LL, {chunk * step_b}LL, {chunk * step_o}LL, {case.batch})"
    )
    exe = emu.build(generate(desc, case.out).source, call, "blasdx::smem", build_dir, case.sanitize)
    grid = (-(-case.batch // desc.plan.batches), case.chunks)
    result = emu.run(exe, grid, desc.max_threads_per_block, desc.kernel_shared_memory_size, a_buf, b_buf,
                     out_buf, work)
    x = emu.unstorage(result, case.batch, full_m, full_n, out_row, ldo)
    assert np.array_equal(emu.padding_of(result, case.batch, full_m, full_n, out_row, ldo),
                          emu.padding_of(out_buf, case.batch, full_m, full_n, out_row, ldo)), "padding was written"
    check_solution(desc, system, b, x, case.alpha, repr(desc))


def _cases():
    variants = list(itertools.product(bx.Side, bx.FillMode, bx.Diag))
    orders = list(itertools.product((R, C), repeat=2))
    for i, (side, fill, diag) in enumerate(variants):
        yield pytest.param(Case(trsm((40, 24), side, fill, diag, bx.Arrangement(*orders[i % 4])), alpha=-0.75),
                           id=f"f32-{side.name}-{fill.name}-{diag.name}")
        kind = bx.Type.complex if i % 2 else bx.Type.real
        yield pytest.param(Case(trsm((33, 17), side, fill, diag, bx.Arrangement(*orders[(i + 1) % 4]), prec=bx.float64,
                                     kind=kind, sm=75), alpha=(0.5 - 1.5j) if i % 2 else 2.5),
                           id=f"{'c' if i % 2 else ''}f64-{side.name}-{fill.name}-{diag.name}")
    sizes = [
        ((1, 1), ()), ((5, 3), ()), ((16, 16), ()), ((17, 33), (bx.Side.right, bx.FillMode.upper)),
        ((128, 128), (bx.Arrangement(C, C),)), ((130, 20), (bx.Side.right, bx.FillMode.upper)),
        ((40, 300), ()), ((3, 40), (bx.Side.right, bx.BlockDim(32))), ((100, 37), (bx.Diag.unit,)),
    ]
    for size, ops in sizes:
        yield pytest.param(Case(trsm(size, *ops), batch=2), id=f"{size[0]}x{size[1]}-{'-'.join(map(repr, ops))}")
    yield pytest.param(Case(trsm((24, 20), bx.BatchesPerBlock(3)), batch=7), id="batches-partial-block")
    yield pytest.param(Case(trsm((24, 20), bx.BatchesPerBlock(3), bx.Side.right, bx.FillMode.upper), batch=7,
                            shared_a=True), id="batches-shared-a")
    yield pytest.param(Case(trsm((12, 5), bx.BatchesPerBlock(5), bx.BlockDim(35), prec=bx.float64, sm=75), batch=11),
                       id="block-dim-batches")
    yield pytest.param(Case(trsm((24, 20), bx.BlockDim(64), bx.Side.right), batch=2), id="block-dim")
    yield pytest.param(Case(trsm((24, 20), bx.LeadingDimension(27, 29))), id="leading-dimensions")
    yield pytest.param(Case(trsm((24, 20), bx.Side.right, bx.Arrangement(C, R), bx.LeadingDimension(30, 33))),
                       id="leading-dimensions-right")
    yield pytest.param(Case(trsm((24, 20)), alpha=0.0), id="alpha-zero")
    for side, order in itertools.product(bx.Side, (R, C)):
        for out_row, ld in ((True, 25), (False, 21)):
            desc = trsm((19, 23), side, bx.Arrangement(R, order))
            out = OutputLayout(out_row, ld, 4)
            yield pytest.param(Case(desc, alpha=1.5, out=out),
                               id=f"out-{side.name}-{order.name}-to-{'row' if out_row else 'col'}")
    yield pytest.param(Case(trsm((32, 8), bx.Arrangement(R, C), bx.LeadingDimension(32, 32)), chunks=3),
                       id="chunks-left")
    yield pytest.param(Case(trsm((6, 40), bx.Side.right, bx.Arrangement(C, R), bx.LeadingDimension(40, 40)),
                            chunks=2, out=OutputLayout(True, 40, 4)), id="chunks-right-out")
    yield pytest.param(Case(trsm((64, 8), prec=bx.float64, sm=75), growth=1.0), id="ill-conditioned-f64")
    yield pytest.param(Case(trsm((64, 16), bx.Diag.unit), growth=0.3), id="ill-conditioned-f32")
    yield pytest.param(Case(trsm((40, 24), bx.Arrangement(C, C)), sanitize="thread"), id="tsan-left")
    yield pytest.param(Case(trsm((24, 20), bx.BatchesPerBlock(3), bx.Side.right, bx.FillMode.upper), batch=5,
                            shared_a=True, sanitize="thread"), id="tsan-batches")
    yield pytest.param(Case(trsm((33, 17), prec=bx.float64, kind=bx.Type.complex, sm=75), alpha=2 + 1j,
                            sanitize="thread"), id="tsan-complex")
    yield pytest.param(Case(trsm((40, 24), bx.Side.right, bx.Diag.unit), batch=2, sanitize="address"), id="asan")
    yield pytest.param(Case(trsm((19, 23)), out=OutputLayout(False, 21, 4), sanitize="address"), id="asan-out")


@pytest.mark.parametrize("case", list(_cases()))
def test_batched_kernel(case, build_dir, tmp_path):
    if not emu.available(case.sanitize):
        pytest.skip(f"g++ cannot build with -fsanitize={case.sanitize} here")
    rng = np.random.default_rng(stable_seed(repr(case.desc)))
    run_batched(case, build_dir, tmp_path, rng)


def test_ill_conditioned_cases_are_ill_conditioned():
    rng = np.random.default_rng(0)
    f64 = random_triangular(rng, 3, 64, dt.float64, is_complex=False, lower=True, unit=False, growth=1.0)
    f32 = random_triangular(rng, 3, 64, dt.float32, is_complex=False, lower=True, unit=True, growth=0.3)
    assert condition_number(f64.exact) > 1e8 and condition_number(f32.exact) > 1e2


# ---------------------------------------------------------------------------------------------- device API


@pytest.mark.parametrize(
    "desc, batch, extra_threads, alpha, sanitize",
    [
        (trsm((40, 24), bx.Side.right, bx.FillMode.upper, bx.BatchesPerBlock(2)), 3, 32, 1.5, None),
        (trsm((33, 17), bx.Diag.unit, bx.Arrangement(C, R), prec=bx.float64, kind=bx.Type.complex, sm=75), 2, 0,
         0.5 + 1j, None),
        (trsm((12, 5), bx.BatchesPerBlock(4), bx.LeadingDimension(13, 14)), 6, 7, 1.0, "thread"),
        (trsm((24, 20)), 1, 0, 0.0, None),
        (trsm((40, 24), bx.BatchesPerBlock(2)), 3, 0, -1.0, None),  # column-major B: the panels' vector path
    ],
    ids=["right-upper-batches", "complex-unit", "tsan-batches-padded", "alpha-zero", "left-vector"],
)
def test_device_api(desc, batch, extra_threads, alpha, sanitize, build_dir, tmp_path):
    """TRSM::load_a / load_b / copy_wait / execute / store_b from a user's kernel, on a block larger than the TRSM's."""
    if not emu.available(sanitize):
        pytest.skip(f"g++ cannot build with -fsanitize={sanitize} here")
    rng = np.random.default_rng(7)
    m, n = desc.size
    system, b = _data(desc, batch, rng)
    host = _host_type(desc)
    lda, ldb = desc.leading_dimension
    b_row = desc.arrangement.b is R
    a_buf = emu.storage(system.stored.astype(host), desc.arrangement.a is R, lda)
    b_buf = emu.storage(b.astype(host), b_row, ldb)
    scalar = "TRSM::scalar_value_type"
    value = f"{scalar}{{{complex(alpha).real!r}, {complex(alpha).imag!r}}}" if desc.is_complex else \
        f"{scalar}({float(np.real(alpha))!r})"
    call = (f"solve(reinterpret_cast<const TRSM::a_value_type*>(a.data()), "
            f"reinterpret_cast<TRSM::b_value_type*>(out.data()), {value}, {batch})")
    exe = emu.build(fused_source(SOLVE_KERNEL, {"TRSM": desc}), call, "::smem", build_dir, sanitize)
    grid = (-(-batch // desc.batches_per_block), 1)
    result = emu.run(exe, grid, desc.max_threads_per_block + extra_threads, desc.shared_memory_size, a_buf,
                     np.zeros(1, host), b_buf.copy(), tmp_path)
    x = emu.unstorage(result, batch, m, n, b_row, ldb)
    check_solution(desc, system, b, x, alpha, repr(desc))

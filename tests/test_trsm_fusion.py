"""The TRSM device API in users' kernels (CPU: NVRTC compiles, parameters are read, no GPU)."""

from __future__ import annotations

import re

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.fusion.kernel import prelude

from .trsm_support import SOLVE_KERNEL


def trsm(size, *ops, prec=bx.float32, kind=bx.Type.real, sm=90):
    desc = bx.Size(*size) + bx.Precision(prec) + kind + bx.Function.TRSM + bx.MaxAlignment + bx.SM(sm) + bx.Block()
    for op in ops:
        desc = desc + op
    return desc


CASES = [
    trsm((64, 64)),
    trsm((64, 64), bx.Side.right, bx.FillMode.upper, prec=bx.float64, sm=80),
    trsm((33, 17), bx.Diag.unit, bx.Arrangement(bx.col_major, bx.row_major), kind=bx.Type.complex),
    trsm((16, 16), bx.BatchesPerBlock(4), prec=bx.float64, kind=bx.Type.complex),
    trsm((128, 32), bx.LeadingDimension(132, 132), sm=80),
]


@pytest.mark.parametrize("desc", CASES, ids=lambda d: repr(d).replace(" ", ""))
def test_device_api_compiles_without_spills(desc):
    kernel = bx.compile_kernel(SOLVE_KERNEL, "solve", {"TRSM": desc})
    assert kernel.block == desc.block_dim and kernel.shared_memory == desc.shared_memory_size
    assert kernel.local_memory == 0, f"{desc!r} uses local memory"
    assert [p.name for p in kernel.params] == ["a", "b", "alpha", "batch"]
    a, b, alpha, _ = kernel.params
    assert a.dtype == desc.a_value_type and a.const and b.dtype == desc.b_value_type and not b.const
    assert alpha.dtype == (dt.complex_of(desc.scalar_type) if desc.is_complex else desc.scalar_type)
    sass = kernel.compiled.sass()
    assert not re.search(r"\b(LDL|STL)\b", sass)
    if desc.instruction.startswith("mma"):
        assert "DMMA" in sass


def test_prelude_states_the_traits():
    desc = trsm((40, 24), bx.Side.right, bx.FillMode.upper, bx.Diag.unit)
    text = prelude({"TRSM": desc})
    assert '#include "blasdx/trsm.cuh"' in text
    assert "using TRSM = blasdx::Trsm<TRSM_traits>;" in text
    assert f"static_assert(TRSM::shared_memory_size == {desc.shared_memory_size}," in text
    assert "static constexpr bool left = false, lower = false, unit_diagonal = true;" in text


def test_traits_read_in_cuda():
    """side_of / fill_mode_of / diag_of and the sizes agree with the descriptor (static_asserts compile)."""
    desc = trsm((40, 24), bx.Side.right, bx.FillMode.upper, bx.Diag.unit, bx.BatchesPerBlock(2))
    source = r"""
    static_assert(blasdx::side_of<TRSM>::value == blasdx::side::right, "side");
    static_assert(blasdx::fill_mode_of<TRSM>::value == blasdx::fill_mode::upper, "fill mode");
    static_assert(blasdx::diag_of<TRSM>::value == blasdx::diag::unit, "diag");
    static_assert(TRSM::m == 40 && TRSM::n == 24 && TRSM::a_dim == 24, "sizes");
    static_assert(TRSM::lda == %d && TRSM::ldb == %d && TRSM::batches_per_block == 2, "layout");
    static_assert(TRSM::max_threads_per_block == %d, "threads");
    extern "C" __global__ void nothing() {}
    """ % (*desc.leading_dimension, desc.max_threads_per_block)
    bx.compile_kernel(source, "nothing", {"TRSM": desc})


def test_gemm_and_trsm_in_one_kernel():
    """B = A^-1 (X Y): a GEMM's result solved in place by a TRSM of the same block."""
    gemm = (bx.Size(32, 16, 32) + bx.Precision(bx.float32) + bx.Function.MM + bx.Arrangement(bx.row_major,
            bx.col_major, bx.col_major) + bx.SM(90) + bx.Block() + bx.BlockDim(64))
    solve = trsm((32, 16), bx.BlockDim(64))
    source = r"""
    extern "C" __global__ void __launch_bounds__(64, 1)
    product_then_solve(const float* x, const float* y, const float* a, float* out) {
        extern __shared__ __align__(16) unsigned char smem[];
        auto [sX, sY, sC] = GEMM::slice_shared_memory(smem);
        float* sA = reinterpret_cast<float*>(smem + GEMM::shared_memory_size);
        GEMM::load_a(x, sX);
        GEMM::load_b(y, sY);
        TRSM::load_a(a, sA);
        GEMM::copy_wait();
        GEMM::execute(1.0f, sX, sY, 0.0f, sC);   // column-major C: TRSM's B
        __syncthreads();
        TRSM::execute(sA, sC);
        TRSM::store_b(sC, out);
    }
    """
    smem = gemm.shared_memory_size + solve.a_size * 4
    kernel = bx.compile_kernel(source, "product_then_solve", {"GEMM": gemm, "TRSM": solve}, shared_memory=smem)
    assert kernel.block == (64, 1, 1) and kernel.local_memory == 0


def test_header_for_other_front_ends():
    hdr = bx.header(trsm((16, 16)), name="SOLVE")
    assert "using SOLVE = blasdx::Trsm<SOLVE_traits>;" in hdr.text and hdr.arch == "sm_90"

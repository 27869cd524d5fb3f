"""TRSM descriptors (CPU): operator algebra, the rules and their messages, traits."""

from __future__ import annotations

import pickle
import re

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt

R, C = bx.row_major, bx.col_major


def trsm(m=64, n=32, *ops, sm=80):
    desc = bx.Size(m, n) + bx.Function.TRSM + bx.SM(sm) + bx.Block()
    for op in ops:
        desc = desc + op
    return desc


# ---------------------------------------------------------------------------------------------- algebra


def test_function_trsm_makes_a_trsm_descriptor_in_any_order():
    ops = [bx.Size(16, 8), bx.Side.right, bx.FillMode.upper, bx.Diag.unit, bx.Function.TRSM, bx.SM(90), bx.Block()]
    forward = sum(ops[1:], ops[0])
    backward = sum(reversed(ops[:-1]), ops[-1])
    assert type(forward) is bx.TrsmDescriptor and type(backward) is bx.TrsmDescriptor
    assert forward == backward and hash(forward) == hash(backward)
    assert repr(forward) == "Size(16, 8) + Function.TRSM + Side.right + FillMode.upper + Diag.unit + SM(90) + Block()"
    assert type(bx.Size(8, 8, 8) + bx.Function.MM) is bx.Descriptor


def test_defaults_equal_their_explicit_operators():
    plain = trsm(32, 16)
    explicit = plain + bx.Side.left + bx.FillMode.lower + bx.Diag.non_unit + bx.Precision(bx.float32)
    assert plain == explicit and hash(plain) == hash(explicit)
    assert plain != trsm(32, 16, bx.Side.right)
    assert plain != trsm(32, 16, bx.BatchesPerBlock(2))


def test_pickles_and_builds_from_a_tuple():
    desc = trsm(24, 40, bx.Side.right, bx.Precision(bx.float64), bx.Type.complex, bx.BatchesPerBlock(2))
    again = pickle.loads(pickle.dumps(desc))
    assert type(again) is bx.TrsmDescriptor and again == desc
    assert type(bx.Descriptor(desc.operators)) is bx.TrsmDescriptor


def test_operators_without_function_wait_for_it():
    partial = bx.Size(8, 8) + bx.Side.right + bx.FillMode.upper
    assert type(partial) is bx.Descriptor and not partial.is_complete
    assert type(partial + bx.Function.TRSM) is bx.TrsmDescriptor
    assert partial != bx.Size(8, 8) + bx.Side.left + bx.FillMode.upper


def test_side_fill_mode_diag_values():
    assert [s.name for s in bx.Side] == ["left", "right"]
    assert [f.name for f in bx.FillMode] == ["lower", "upper"]
    assert [d.name for d in bx.Diag] == ["unit", "non_unit"]
    assert bx.Side("right") is bx.Side.right and repr(bx.Diag.non_unit) == "Diag.non_unit"
    assert repr(bx.BatchesPerBlock(4)) == "BatchesPerBlock(4)" and bx.BatchesPerBlock(4).batches == 4


# ---------------------------------------------------------------------------------------------- rules


@pytest.mark.parametrize(
    "build, error, words",
    [
        (lambda: bx.Size(64, 64, 64) + bx.Function.TRSM, bx.DescriptorError,
         "Size(64, 64, 64) and Function.TRSM: a TRSM takes Size(M, N) (B is M x N; A is M x M with Side.left, "
         "N x N with Side.right)"),
        (lambda: bx.Size(64, 64) + bx.Function.MM, bx.DescriptorError,
         "Size(64, 64) and Function.MM: a GEMM needs Size(M, N, K); Size(M, N) describes a Function.TRSM"),
        (lambda: bx.Side.left + bx.Function.MM, bx.DescriptorError,
         "Side.left and Function.MM: Side describes a triangular solve and applies to Function.TRSM only"),
        (lambda: bx.Function.MM + bx.FillMode.upper, bx.DescriptorError,
         "FillMode.upper and Function.MM: FillMode describes a triangular solve"),
        (lambda: bx.Diag.unit + bx.Size(8, 8, 8) + bx.Function.MM, bx.DescriptorError,
         "Diag.unit and Function.MM: Diag describes a triangular solve"),
        (lambda: bx.BatchesPerBlock(2) + bx.Function.MM, bx.DescriptorError,
         "BatchesPerBlock(2) and Function.MM: BatchesPerBlock describes a triangular solve"),
        (lambda: bx.Side.left + bx.Side.right, bx.DescriptorError,
         "Side.left and Side.right: a descriptor takes one Side operator"),
        (lambda: bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.TRSM, bx.DescriptorError,
         "Precision(float16, float16, float32) and Function.TRSM: a TRSM solves in place, so A and B share one "
         "type; give Precision(float16)"),
        (lambda: bx.Precision(bx.float16) + bx.Function.TRSM, bx.UnsupportedError,
         "Precision(float16, float16, float16) and Function.TRSM: no float16 TRSM; supported: float32, float64 "
         "(real or complex)"),
        (lambda: bx.Function.TRSM + bx.LeadingDimension(64, 64, 64), bx.DescriptorError,
         "LeadingDimension(64, 64, 64) and Function.TRSM: a TRSM has no C; give LeadingDimension(lda, ldb)"),
        (lambda: bx.Size(64, 32) + bx.Function.TRSM + bx.Side.right + bx.LeadingDimension(16, 64),
         bx.DescriptorError,
         "LeadingDimension: lda=16 is smaller than N=32, the extent of the square A of Side.right in Size(64, 32)"),
        (lambda: bx.Size(64, 32) + bx.Function.TRSM + bx.LeadingDimension(16, 64), bx.DescriptorError,
         "LeadingDimension: lda=16 is smaller than both M=64 (Side.left) and N=32 (Side.right) of Size(64, 32)"),
        (lambda: bx.Size(64, 32) + bx.Function.TRSM + bx.Arrangement(R, C) + bx.LeadingDimension(64, 40),
         bx.DescriptorError,
         "LeadingDimension: ldb=40 is smaller than M=64, the minimum for col_major B in Size(64, 32)"),
        (lambda: bx.Size(64, 32) + bx.Function.TRSM + bx.LeadingDimension(64, 16), bx.DescriptorError,
         "LeadingDimension: ldb=16 is smaller than both N=32 (row_major B) and M=64 (col_major B) of Size(64, 32)"),
        (lambda: bx.Function.TRSM + bx.Precision(bx.float64) + bx.Alignment(4, 8, 8), bx.DescriptorError,
         "Alignment: a=4 bytes is not a multiple of the float64 element size (8 bytes)"),
        (lambda: bx.Function.TRSM + bx.Precision(bx.float32) + bx.Type.complex + bx.Alignment(8, 4, 8),
         bx.DescriptorError, "Alignment: b=4 bytes is not a multiple of the complex float32 element size (8 bytes)"),
        (lambda: bx.BatchesPerBlock(0), bx.DescriptorError,
         "BatchesPerBlock: batches must be a positive integer, got 0"),
        (lambda: bx.BatchesPerBlock(1025), bx.DescriptorError,
         "BatchesPerBlock: batches must be at most 1024 (one thread each), got 1025"),
    ],
)
def test_rules_at_plus(build, error, words):
    with pytest.raises(error, match=re.escape(words)):
        build()


def test_transpose_mode_is_a_gemm_operator():
    with pytest.warns(DeprecationWarning):
        mode = bx.TransposeMode(bx.Transpose.N, bx.Transpose.N)
    words = "TransposeMode(Transpose.N, Transpose.N) and Function.TRSM: TransposeMode describes GEMM operands"
    with pytest.raises(bx.DescriptorError, match=re.escape(words)):
        bx.Function.TRSM + mode


@pytest.mark.parametrize(
    "desc, error, words",
    [
        (bx.Size(64, 32) + bx.Function.TRSM + bx.LeadingDimension(40, 64) + bx.SM(80), bx.DescriptorError,
         "LeadingDimension: lda=40 is smaller than M=64, the extent of the square A of Side.left in Size(64, 32)"),
        (bx.Size(64, 32) + bx.Function.TRSM + bx.LeadingDimension(64, 40) + bx.SM(80), bx.DescriptorError,
         "LeadingDimension: ldb=40 is smaller than M=64, the minimum for col_major B in Size(64, 32)"),
        (trsm(24, 20, bx.BlockDim(100), bx.BatchesPerBlock(3)), bx.UnsupportedError,
         "BlockDim: 100 threads do not split evenly into 3 problems (BatchesPerBlock(3)); give a multiple of 3"),
        (trsm(64, 64, bx.BlockDim(48)), bx.UnsupportedError,
         "BlockDim: 48 threads per problem; a TRSM with A 64 x 64 (more than 16 unknowns) runs block GEMMs on whole "
         "warps, so give each problem a multiple of 32 threads"),
        (trsm(16, 16, bx.BatchesPerBlock(100)), bx.UnsupportedError,
         "BatchesPerBlock: 100 problems x 16 threads each = 1600 threads, more than 1024 per block; ask for at most "
         "64 batches"),
        (trsm(128, 128, bx.Precision(bx.float64), sm=90), bx.UnsupportedError,
         "needs 263168 bytes of shared memory (1 x 263168 for A, B and the reciprocals of A's diagonal) but sm_90 "
         "has 232448 per block; reduce Size or BatchesPerBlock (bx.solve_triangular splits independent right-hand "
         "sides over blocks)"),
        (bx.Size(8, 8) + bx.Function.TRSM + bx.Block(), bx.DescriptorError,
         "incomplete descriptor: missing SM (Size(8, 8) + Function.TRSM + Block())"),
    ],
)
def test_rules_at_validate(desc, error, words):
    assert not desc.is_supported
    with pytest.raises(error, match=re.escape(words)):
        desc.validate()


def test_a_descriptor_from_a_one_shot_iterator_is_refused():
    ops = (bx.Size(8, 8), bx.Function.TRSM)
    with pytest.raises(bx.DescriptorError, match=re.escape("Function.TRSM: build the descriptor with +")):
        bx.Descriptor(op for op in ops)


@pytest.mark.parametrize("trait", ["k", "c_dim", "c_value_type", "ldc", "c_size", "suggested_smem_layout_c"])
def test_gemm_only_traits_raise(trait):
    with pytest.raises(bx.DescriptorError, match=f"{trait}: a TRSM has no "):
        getattr(trsm(), trait)


def test_shared_memory_size_ab_is_a_gemm_trait():
    with pytest.raises(bx.DescriptorError, match="shared_memory_size_ab: a GEMM trait"):
        trsm().shared_memory_size_ab


# ---------------------------------------------------------------------------------------------- traits


def test_traits_left():
    desc = trsm(64, 32, bx.Precision(bx.float64), bx.Arrangement(C, R))
    assert desc.is_supported and desc.is_complete_execution
    assert (desc.side, desc.fill_mode, desc.diag) == (bx.Side.left, bx.FillMode.lower, bx.Diag.non_unit)
    assert desc.size == (64, 32) and (desc.m, desc.n) == (64, 32)
    assert desc.a_dim == (64, 64) and desc.b_dim == (64, 32)
    assert desc.leading_dimension == (64, 32) and (desc.lda, desc.ldb) == (64, 32)  # col-major A, row-major B
    assert desc.a_size == 64 * 64 and desc.b_size == 64 * 32
    assert desc.a_value_type == dt.float64 and desc.b_value_type == dt.float64
    assert desc.scalar_type == dt.float64 and desc.accumulator_type == dt.float64
    assert desc.alignment == (8, 8) and desc.suggested_alignment == (16, 16)
    assert desc.shared_memory_size == 64 * 64 * 8 + 64 * 32 * 8
    assert desc.instruction == "mma.sync.m8n8k4"
    assert desc.function is bx.Function.TRSM


def test_traits_right_complex():
    desc = trsm(48, 20, bx.Side.right, bx.FillMode.upper, bx.Diag.unit, bx.Type.complex,
                bx.LeadingDimension(24, 50), bx.Alignment(8, 8, 8))
    assert desc.a_dim == (20, 20) and desc.b_dim == (48, 20)
    assert desc.leading_dimension == (24, 50)
    assert desc.a_size == 24 * 20 and desc.b_size == 50 * 20  # column-major B: ldb * N
    assert desc.b_value_type == dt.complex_of(dt.float32) and desc.alignment == (8, 8)
    assert desc.shared_memory_size == desc.batches_per_block * (24 * 20 * 8 + 50 * 20 * 8)
    assert desc.instruction == "fma"


def test_traits_follow_block_dim_and_batches():
    desc = trsm(12, 5, bx.BatchesPerBlock(5), bx.BlockDim(35))
    assert desc.batches_per_block == 5 and desc.block_dim == (35, 1, 1) and desc.plan.group_threads == 7
    assert desc.suggested_block_dim == (5 * 5, 1, 1)  # five threads (one per right-hand side) per problem
    assert trsm(12, 5, bx.BlockDim(64)).batches_per_block == 1


def test_single_panel_instruction_and_f64_on_sm75():
    assert trsm(16, 16, bx.Precision(bx.float64)).instruction == "fma"  # substitution only
    assert trsm(32, 16, bx.Precision(bx.float64), sm=75).instruction == "fma"  # DFMA updates
    assert trsm(32, 16, bx.Precision(bx.float64), sm=80).instruction == "mma.sync.m8n8k4"


def test_suggested_layouts_are_the_batched_kernels():
    desc = trsm(64, 64)
    assert desc.suggested_leading_dimension == (68, 68)
    assert desc.suggested_smem_layout_a.strides == (68, 1) and desc.suggested_smem_layout_b.strides == (1, 68)
    # float32, one problem per block, non-unit: the 64 reciprocals of the diagonal (256 bytes), then A and
    # B each 63 rows of 68 plus a last row of 64 (4348 floats, 17392 bytes), each start 16-byte aligned
    assert desc.kernel_shared_memory_size == 256 + 17392 + 17392


def test_str_describes_the_solve():
    text = str(trsm(64, 32, bx.Side.right))
    assert "TRSM right lower non_unit: B 64x32, A 32x32, real float32" in text
    assert "not ready" in str(bx.Size(8, 8) + bx.Function.TRSM)


def test_cli_describes_a_trsm(capsys):
    from blasdx.__main__ import main

    assert main(["describe", "Size(64, 32) + Function.TRSM + Side.right + Diag.unit + SM(90) + Block()"]) == 0
    out = capsys.readouterr().out
    for line in ("side                         Side.right", "diag                         Diag.unit",
                 "a_dim                        (32, 32)", "c_dim                        (n/a: c_dim: a TRSM has no C"):
        assert line in out

"""Traits of a table of descriptors. Every expected value is worked out by hand in the comments,
never by calling the formula blasdx uses."""

from __future__ import annotations

from functools import reduce

import pytest

import blasdx as bx
from blasdx.plan.heuristics import SmemLayout

R, K = bx.row_major, bx.col_major
F16, BF16, TF32, F32, F64 = bx.float16, bx.bfloat16, bx.tfloat32, bx.float32, bx.float64
E4, E5, I8, U8, I32 = bx.float8_e4m3, bx.float8_e5m2, bx.int8, bx.uint8, bx.int32


def total(*operators):
    return reduce(lambda x, y: x + y, operators)


CASES = {
    # f16 x f16 -> f32, 64^3, default arrangement (row A, col B, col C), sm_80.
    #   tight ld: A row-major -> K=64; B col-major -> K=64; C col-major -> M=64
    #   sizes 64*64 = 4096 each; bytes A 8192, B 8192, C 16384 -> 32768; A+B 16384
    #   padding: A row 64*2 = 128 B (multiple of 32) -> 64 + 16/2 = 72; B same; C 64*4 = 256 B -> 64 + 4 = 68
    #   warp tile: atom 16x8, f32 accumulator; start 4x8 atoms = 64x64 -> 64*64*4/32 = 512 B/thread > 256
    #   -> 2x8 (256 B) -> 2 tiles < 4 -> 2x4 -> 4 tiles -> 4 warps = 128 threads
    "f16-f32-sm80": dict(
        ops=lambda: total(bx.Size(64, 64, 64), bx.Precision(F16, F16, F32), bx.Function.MM, bx.SM(80), bx.Block()),
        size=(64, 64, 64), value_types=("float16", "float16", "float32"), precision=(F16, F16, F32),
        ld=(64, 64, 64), sizes=(4096, 4096, 4096), dims=((64, 64), (64, 64), (64, 64)),
        alignment=(2, 2, 4), smem=32768, smem_ab=16384, suggested_ld=(72, 72, 68),
        instruction="mma.sync.m16n8k16", suggested_block_dim=(128, 1, 1), block_dim=(128, 1, 1),
        layout_a=((64, 64), (72, 1)), layout_b=((64, 64), (1, 72)), layout_c=((64, 64), (1, 68)),
        scalar=F32, accumulator=F32, arrangement=(R, K, K), type=bx.Type.real, sm=80, arch="sm_80",
    ),
    # f32, odd 17x9x5, sm_75 (CUDA cores).
    #   ld: A row -> K=5; B col -> K=5; C col -> M=17
    #   sizes: A 5*17 = 85, B 5*9 = 45, C 17*9 = 153
    #   bytes: A 340 -> 352 (16-byte rounding), B 180 -> 192, C 612 -> 1156; A+B = 352 + 180 = 532
    #   padding: rows of 20, 20 bytes are short and not whole chunks -> unchanged; 68 bytes -> 5 chunks = 20
    #   fma: 4x4 elements per thread -> ceil(17/4)*ceil(9/4) = 5*3 = 15 threads -> one warp
    "f32-odd-sm75": dict(
        ops=lambda: total(bx.Size(17, 9, 5), bx.Precision(F32), bx.Function.MM, bx.SM(75), bx.Block()),
        size=(17, 9, 5), value_types=("float32", "float32", "float32"), precision=(F32, F32, F32),
        ld=(5, 5, 17), sizes=(85, 45, 153), dims=((17, 5), (5, 9), (17, 9)),
        alignment=(4, 4, 4), smem=1156, smem_ab=532, suggested_ld=(5, 5, 20),
        instruction="fma", suggested_block_dim=(32, 1, 1), block_dim=(32, 1, 1),
        layout_a=((17, 5), (5, 1)), layout_b=((5, 9), (1, 5)), layout_c=((17, 9), (1, 20)),
        scalar=F32, accumulator=F32, arrangement=(R, K, K), type=bx.Type.real, sm=75, arch="sm_75",
    ),
    # int8 x int8 -> int32, 32x16x8, Arrangement(col, row, row), BlockDim(64, 2), sm_80.
    #   ld: A col -> M=32; B row -> N=16; C row -> N=16
    #   sizes: A 32*K(8) = 256; B 16*K(8) = 128; C 16*M(32) = 512
    #   bytes: 256 + 128 + 512*4 = 2432; A+B = 384
    #   padding: A row 32 B -> 32 + 16 = 48; B 16 B, one chunk (odd; the 8-byte-step rule of 8-bit B read
    #   in runs is for Workload.compute_bound) -> 16;
    #   C 16*4 = 64 B -> 16 + 4 = 20
    #   warp tile: atom 16x8, start 2x2 (32x16 elements, 64 B/thread), 1 tile -> 1x2 -> 2 tiles -> 1x1
    #   -> 2*2 = 4 tiles -> 128 threads suggested; BlockDim(64, 2) = 128 threads used
    "int8-col-row-row": dict(
        ops=lambda: total(bx.Size(32, 16, 8), bx.Precision(I8, I8, I32), bx.Arrangement(K, R, R), bx.Function.MM,
                          bx.SM(80), bx.Block(), bx.BlockDim(64, 2)),
        size=(32, 16, 8), value_types=("int8", "int8", "int32"), precision=(I8, I8, I32),
        ld=(32, 16, 16), sizes=(256, 128, 512), dims=((32, 8), (8, 16), (32, 16)),
        alignment=(1, 1, 4), smem=2432, smem_ab=384, suggested_ld=(48, 16, 20),
        instruction="mma.sync.m16n8k32", suggested_block_dim=(128, 1, 1), block_dim=(64, 2, 1),
        layout_a=((32, 8), (1, 48)), layout_b=((8, 16), (16, 1)), layout_c=((32, 16), (20, 1)),
        scalar=I32, accumulator=I32, arrangement=(K, R, R), type=bx.Type.real, sm=80, arch="sm_80",
    ),
    # complex f64, 8x8x8, all column-major, sm_80, no Block.
    #   element 16 bytes; ld 8 each; sizes 64 each -> 1024 bytes each -> 3072; A+B 2048
    #   padding: rows of 8*16 = 128 B -> + 1 element (16 B) = 9
    #   DMMA atom 8x8; one atom, complex f64 accumulator 16 B: 8*8*16/32 = 32 B/thread; one tile -> 32 threads
    "complex-f64": dict(
        ops=lambda: total(bx.Size(8, 8, 8), bx.Precision(F64), bx.Type.complex, bx.Arrangement(K, K, K),
                          bx.Function.MM, bx.SM(80)),
        size=(8, 8, 8), value_types=("complex128", "complex128", "complex128"), precision=(F64, F64, F64),
        ld=(8, 8, 8), sizes=(64, 64, 64), dims=((8, 8), (8, 8), (8, 8)),
        alignment=(16, 16, 16), smem=3072, smem_ab=2048, suggested_ld=(9, 9, 9),
        instruction="mma.sync.m8n8k4", suggested_block_dim=(32, 1, 1), block_dim=(32, 1, 1),
        layout_a=((8, 8), (1, 9)), layout_b=((8, 8), (1, 9)), layout_c=((8, 8), (1, 9)),
        scalar=F64, accumulator=F64, arrangement=(K, K, K), type=bx.Type.complex, sm=80, arch="sm_80",
    ),
    # complex f16 -> f16, 16^3, explicit LeadingDimension(24, 40, 32), sm_75.
    #   element 4 bytes; sizes: A 24*M(16) = 384, B 40*N(16) = 640, C 32*N(16) = 512
    #   bytes: 1536 + 2560 + 2048 = 6144; A+B = 4096
    #   suggested ld ignores the explicit one: tight rows are 16*4 = 64 B -> 16 + 16/4 = 20
    #   atom 16x8 (sm_75: k8); complex f16 accumulator 4 B; 1x2 atoms, one tile -> 1x1 -> 2 tiles -> 64 threads
    #   f16 C scales in f32
    "complex-f16-ld-sm75": dict(
        ops=lambda: total(bx.Size(16, 16, 16), bx.Precision(F16), bx.Type.complex, bx.Function.MM, bx.SM(75),
                          bx.Block(), bx.LeadingDimension(24, 40, 32)),
        size=(16, 16, 16), value_types=("complex32", "complex32", "complex32"), precision=(F16, F16, F16),
        ld=(24, 40, 32), sizes=(384, 640, 512), dims=((16, 16), (16, 16), (16, 16)),
        alignment=(4, 4, 4), smem=6144, smem_ab=4096, suggested_ld=(20, 20, 20),
        instruction="mma.sync.m16n8k8", suggested_block_dim=(64, 1, 1), block_dim=(64, 1, 1),
        layout_a=((16, 16), (20, 1)), layout_b=((16, 16), (1, 20)), layout_c=((16, 16), (1, 20)),
        scalar=F32, accumulator=F16, arrangement=(R, K, K), type=bx.Type.complex, sm=75, arch="sm_75",
    ),
    # e4m3 x e5m2 -> f16, 32x32x64, sm_89.
    #   ld: A row -> K=64, B col -> K=64, C col -> M=32; sizes 2048, 2048, 1024
    #   bytes 2048 + 2048 + 2048 = 6144; A+B 4096
    #   padding: 64 B rows -> 64 + 16 = 80; C 32*2 = 64 B -> 32 + 8 = 40
    #   atom 16x8 f32 accumulator: 2x4 (128 B), 1 tile -> 1x4 -> 2 tiles -> 1x2 -> 4 tiles -> 128
    "fp8-sm89": dict(
        ops=lambda: total(bx.Size(32, 32, 64), bx.Precision(E4, E5, F16), bx.Function.MM, bx.SM(89), bx.Block()),
        size=(32, 32, 64), value_types=("float8_e4m3", "float8_e5m2", "float16"), precision=(E4, E5, F16),
        ld=(64, 64, 32), sizes=(2048, 2048, 1024), dims=((32, 64), (64, 32), (32, 32)),
        alignment=(1, 1, 2), smem=6144, smem_ab=4096, suggested_ld=(80, 80, 40),
        instruction="mma.sync.m16n8k32", suggested_block_dim=(128, 1, 1), block_dim=(128, 1, 1),
        layout_a=((32, 64), (80, 1)), layout_b=((64, 32), (1, 80)), layout_c=((32, 32), (1, 40)),
        scalar=F32, accumulator=F32, arrangement=(R, K, K), type=bx.Type.real, sm=89, arch="sm_89",
    ),
    # int8 x uint8 -> int32, 3x5x7, sm_86: tiny odd sizes show the 16-byte rounding of A and B.
    #   ld: A row -> 7, B col -> 7, C col -> 3; sizes 21, 35, 15
    #   bytes: 21 -> 32, 35 -> 48, 15*4 = 60 -> 140; A+B = 32 + 35 = 67
    #   padding: 7 B, 7 B, 12 B rows -> unchanged
    #   one 16x8 atom covers 3x5 -> 32 threads
    "int8-tiny-sm86": dict(
        ops=lambda: total(bx.Size(3, 5, 7), bx.Precision(I8, U8, I32), bx.Function.MM, bx.SM(86), bx.Block()),
        size=(3, 5, 7), value_types=("int8", "uint8", "int32"), precision=(I8, U8, I32),
        ld=(7, 7, 3), sizes=(21, 35, 15), dims=((3, 7), (7, 5), (3, 5)),
        alignment=(1, 1, 4), smem=140, smem_ab=67, suggested_ld=(7, 7, 3),
        instruction="mma.sync.m16n8k32", suggested_block_dim=(32, 1, 1), block_dim=(32, 1, 1),
        layout_a=((3, 7), (7, 1)), layout_b=((7, 5), (1, 7)), layout_c=((3, 5), (1, 3)),
        scalar=I32, accumulator=I32, arrangement=(R, K, K), type=bx.Type.real, sm=86, arch="sm_86",
    ),
    # bf16 x bf16 -> f32, 128x128x32, sm_90a: wgmma.
    #   ld: A row -> 32, B col -> 32, C col -> 128; sizes 4096, 4096, 16384
    #   bytes 8192 + 8192 + 65536 = 81920 in plain layouts; A+B 16384
    #   padding: 64 B rows -> 40; C 512 B -> 132; padded total 10240*2 + 67584 = 88064 <= 227 KiB
    #   wgmma: M = 2 * 64, N = 128 (f32: at most 128 columns per warpgroup tile), K = 2 * 16
    #   -> 2 tiles of 64x128 -> 2 warpgroups = 256 threads; A and B are K-major with rows of
    #   32 * 2 = 64 B -> one 64B-swizzled panel each, 32 elements per row. The device API keeps
    #   A and B in those panels on 1024-byte boundaries found inside a 16-byte aligned block:
    #   1008 B of slack + 8192 + 8192 (A+B 17392) + C 65536 = 82928
    "bf16-sm90a": dict(
        ops=lambda: total(bx.Size(128, 128, 32), bx.Precision(BF16, BF16, F32), bx.Function.MM,
                          bx.SM(90, arch_specific=True), bx.Block()),
        size=(128, 128, 32), value_types=("bfloat16", "bfloat16", "float32"), precision=(BF16, BF16, F32),
        ld=(32, 32, 128), sizes=(4096, 4096, 16384), dims=((128, 32), (32, 128), (128, 128)),
        alignment=(2, 2, 4), smem=82928, smem_ab=17392, suggested_ld=(40, 40, 132),
        instruction="wgmma.m64n128k16", suggested_block_dim=(256, 1, 1), block_dim=(256, 1, 1),
        layout_a=((128, 32), (32, 1)), layout_b=((32, 128), (1, 32)), layout_c=((128, 128), (1, 132)),
        swizzle_a="64B", swizzle_b="64B",
        scalar=F32, accumulator=F32, arrangement=(R, K, K), type=bx.Type.real, sm=90, arch="sm_90a",
    ),
    # tf32 -> f32, 64x32x16, Arrangement(col, row) with MaxAlignment, sm_87.
    #   ld: A col -> M=64, B row -> N=32, C col -> M=64; sizes 64*16 = 1024, 32*16 = 512, 64*32 = 2048
    #   bytes 4096 + 2048 + 8192 = 14336; A+B 6144
    #   padding: A 256 B -> 68; B 128 B -> 36; C 256 B -> 68
    #   atom 16x8 (k8): 4x4 atoms = 64x32 (256 B) -> 1 tile -> 2x4 -> 2 tiles -> 1x4 (16x32) -> 4 tiles -> 128
    "tf32-sm87": dict(
        ops=lambda: total(bx.Size(64, 32, 16), bx.Precision(TF32, TF32, F32), bx.Arrangement(K, R), bx.MaxAlignment,
                          bx.Function.MM, bx.SM(870), bx.Block()),
        size=(64, 32, 16), value_types=("tfloat32", "tfloat32", "float32"), precision=(TF32, TF32, F32),
        ld=(64, 32, 64), sizes=(1024, 512, 2048), dims=((64, 16), (16, 32), (64, 32)),
        alignment=(16, 16, 16), smem=14336, smem_ab=6144, suggested_ld=(68, 36, 68),
        instruction="mma.sync.m16n8k8", suggested_block_dim=(128, 1, 1), block_dim=(128, 1, 1),
        layout_a=((64, 16), (1, 68)), layout_b=((16, 32), (36, 1)), layout_c=((64, 32), (1, 68)),
        scalar=F32, accumulator=F32, arrangement=(K, R, K), type=bx.Type.real, sm=87, arch="sm_87",
    ),
    # f64 on sm_75 runs on the CUDA cores: 64^3, 4x2 elements per thread -> 16*32 = 512 -> capped at 256.
    #   ld 64 each; sizes 4096 each; bytes 32768 * 3 = 98304; A+B 65536
    #   padding 512 B rows -> 66 each; A+B+C padded = 3 * 66*64*8 = 101376 > 64 KiB -> tight (64, 64, 64)
    "f64-fma-sm75": dict(
        ops=lambda: total(bx.Size(64, 64, 64), bx.Precision(F64), bx.Function.MM, bx.SM(75), bx.Block()),
        size=(64, 64, 64), value_types=("float64", "float64", "float64"), precision=(F64, F64, F64),
        ld=(64, 64, 64), sizes=(4096, 4096, 4096), dims=((64, 64), (64, 64), (64, 64)),
        alignment=(8, 8, 8), smem=98304, smem_ab=65536, suggested_ld=(64, 64, 64),
        instruction="fma", suggested_block_dim=(256, 1, 1), block_dim=(256, 1, 1),
        layout_a=None, layout_b=None, layout_c=((64, 64), (1, 64)),
        scalar=F64, accumulator=F64, arrangement=(R, K, K), type=bx.Type.real, sm=75, arch="sm_75",
    ),
}


@pytest.fixture(params=list(CASES), ids=list(CASES))
def case(request):
    expected = CASES[request.param]
    return expected["ops"](), expected


def test_size(case):
    d, e = case
    assert d.size == e["size"]
    assert (d.m, d.n, d.k) == e["size"]


def test_precision_and_value_types(case):
    d, e = case
    assert d.precision == e["precision"]
    assert (d.a_value_type.name, d.b_value_type.name, d.c_value_type.name) == e["value_types"]
    assert d.type is e["type"]
    assert d.is_complex is (e["type"] is bx.Type.complex)


def test_function_arrangement_sm(case):
    d, e = case
    assert d.function is bx.Function.MM
    arr = d.arrangement
    assert isinstance(arr, bx.Arrangement)
    assert (arr.a, arr.b, arr.c) == e["arrangement"]
    assert d.sm == e["sm"]
    assert d.arch == e["arch"]


def test_leading_dimensions(case):
    d, e = case
    assert d.leading_dimension == e["ld"]
    assert (d.lda, d.ldb, d.ldc) == e["ld"]


def test_matrix_sizes_and_dims(case):
    d, e = case
    assert (d.a_size, d.b_size, d.c_size) == e["sizes"]
    assert (d.a_dim, d.b_dim, d.c_dim) == e["dims"]


def test_alignment(case):
    d, e = case
    assert d.alignment == e["alignment"]
    assert d.suggested_alignment == (16, 16, 16)


def test_shared_memory_size(case):
    d, e = case
    assert d.shared_memory_size == e["smem"]
    assert d.shared_memory_size_ab == e["smem_ab"]


def test_suggested_leading_dimension(case):
    d, e = case
    assert d.suggested_leading_dimension == e["suggested_ld"]


def test_instruction(case):
    d, e = case
    assert d.instruction == e["instruction"]


def test_block_dims(case):
    d, e = case
    assert d.suggested_block_dim == e["suggested_block_dim"]
    assert d.block_dim == e["block_dim"]
    x, y, z = e["block_dim"]
    assert d.max_threads_per_block == x * y * z


def test_suggested_smem_layouts(case):
    d, e = case
    for which in ("a", "b", "c"):
        expected = e[f"layout_{which}"]
        if expected is None:
            continue
        layout = getattr(d, f"suggested_smem_layout_{which}")
        assert isinstance(layout, SmemLayout)
        assert (layout.shape, layout.strides) == expected
        assert layout.swizzle == e.get(f"swizzle_{which}")


def test_scalar_and_accumulator(case):
    d, e = case
    assert d.scalar_type is e["scalar"]
    assert d.accumulator_type is e["accumulator"]


def test_is_valid(case):
    d, _ = case
    assert d.validate() is d
    assert d.is_supported


# ---------------------------------------------------------------------------------------------- single traits


def test_alignment_default_is_one_element_and_explicit_wins():
    base = total(bx.Size(16, 16, 16), bx.Precision(F16, F16, F32), bx.Function.MM, bx.SM(80))
    assert base.alignment == (2, 2, 4)
    assert (base + bx.Alignment(16, 8, 4)).alignment == (16, 8, 4)
    assert (base + bx.MaxAlignment).alignment == (16, 16, 16)
    assert (base + bx.Type.complex).alignment == (4, 4, 8)


def test_suggested_leading_dimension_falls_back_when_padding_does_not_fit():
    # f32 72^3: tight A + B + C = 3 * 72*72*4 = 62208 bytes; 72*4 = 288 B rows pad to 76:
    # 3 * 76*72*4 = 65664 > 65536 (sm_75) but fits on sm_80 (163 KiB)
    ops = (bx.Size(72, 72, 72), bx.Precision(F32), bx.Function.MM)
    assert total(*ops, bx.SM(75)).suggested_leading_dimension == (72, 72, 72)
    assert total(*ops, bx.SM(80)).suggested_leading_dimension == (76, 76, 76)
    assert total(*ops, bx.SM(75)).shared_memory_size == 62208


def test_shared_memory_size_uses_the_explicit_leading_dimension():
    # f16 16x16x16, lda = 24 (row-major A: 24 * M=16 = 384 el = 768 B), ldb = 16 (256 el = 512 B),
    # ldc = 20 (col-major C: 20 * N=16 = 320 el = 640 B) -> 1920
    d = total(bx.Size(16, 16, 16), bx.Precision(F16), bx.Function.MM, bx.SM(80), bx.LeadingDimension(24, 16, 20))
    assert (d.a_size, d.b_size, d.c_size) == (384, 256, 320)
    assert d.shared_memory_size == 1920
    assert d.shared_memory_size_ab == 768 + 512


def test_block_dim_given_or_suggested():
    base = total(bx.Size(64, 64, 64), bx.Precision(F16, F16, F32), bx.Function.MM, bx.SM(80), bx.Block())
    assert base.block_dim == (128, 1, 1)
    assert (base + bx.BlockDim(256)).block_dim == (256, 1, 1)
    assert (base + bx.BlockDim(8, 4, 2)).block_dim == (8, 4, 2)
    assert (base + bx.BlockDim(8, 4, 2)).max_threads_per_block == 64
    assert (base + bx.BlockDim(8, 4, 2)).suggested_block_dim == (128, 1, 1)


@pytest.mark.parametrize(
    "precision, kind, sm, instruction",
    [
        ((F16, F16, F16), bx.Type.real, 75, "mma.sync.m16n8k8"),
        ((F16, F16, F32), bx.Type.real, 80, "mma.sync.m16n8k16"),
        ((F16, F16, F32), bx.Type.complex, 86, "mma.sync.m16n8k16"),
        ((BF16, BF16, F32), bx.Type.real, 89, "mma.sync.m16n8k16"),
        ((TF32, TF32, F32), bx.Type.real, 80, "mma.sync.m16n8k8"),
        ((I8, I8, I32), bx.Type.real, 80, "mma.sync.m16n8k32"),
        ((U8, U8, I32), bx.Type.real, 87, "mma.sync.m16n8k32"),
        ((E5, E5, F32), bx.Type.real, 89, "mma.sync.m16n8k32"),
        ((F64, F64, F64), bx.Type.real, 80, "mma.sync.m8n8k4"),
        ((F64, F64, F64), bx.Type.complex, 86, "mma.sync.m8n8k4"),
        ((F64, F64, F64), bx.Type.real, 75, "fma"),
        ((F32, F32, F32), bx.Type.real, 75, "fma"),
        ((F32, F32, F32), bx.Type.complex, 80, "fma"),
    ],
)
def test_instruction_per_type_and_sm(precision, kind, sm, instruction):
    d = total(bx.Size(32, 32, 32), bx.Precision(*precision), kind, bx.Function.MM, bx.SM(sm))
    assert d.instruction == instruction


@pytest.mark.parametrize(
    "precision, kind, scalar, accumulator",
    [
        ((F16, F16, F16), bx.Type.real, F32, F16),
        ((F16, F16, F32), bx.Type.real, F32, F32),
        ((BF16, BF16, F32), bx.Type.real, F32, F32),
        ((E4, E4, F16), bx.Type.real, F32, F32),  # fp8 accumulates in f32 even for an f16 C
        ((I8, U8, I32), bx.Type.real, I32, I32),
        ((F64, F64, F64), bx.Type.complex, F64, F64),
        ((F32, F32, F32), bx.Type.complex, F32, F32),
    ],
)
def test_scalar_and_accumulator_types(precision, kind, scalar, accumulator):
    d = total(bx.Size(16, 16, 16), bx.Precision(*precision), kind, bx.Function.MM, bx.SM(89))
    assert d.scalar_type is scalar
    assert d.accumulator_type is accumulator


def test_traits_need_no_block_or_function():
    d = bx.Size(8, 4, 2) + bx.Precision(F32)
    assert d.size == (8, 4, 2)
    assert d.leading_dimension == (2, 2, 8)
    assert (d.a_dim, d.b_dim, d.c_dim) == ((8, 2), (2, 4), (8, 4))
    # A 2*8 = 16 el = 64 B, B 2*4 = 8 el = 32 B, C 8*4 = 32 el = 128 B
    assert d.shared_memory_size == 64 + 32 + 128


# (size, precision): the suggested threads for memory-bound batches and for compute-bound fusion
WORKLOAD_CASES = [
    ((32, 32, 32), bx.float16, 128, 64),  # cuBLASDx's 64-thread choice wins compute-bound 32^3
    ((64, 64, 64), bx.float32, 256, 64),  # FFMA: 4x4 tiles for batches, 8x8 for fusion
    ((48, 80, 24), bx.float32, 256, 64),
    ((128, 128, 128), bx.float32, 256, 256),  # 8x8 tiles either way
]


@pytest.mark.parametrize("size, prec, memory, compute", WORKLOAD_CASES)
def test_workload_decides_the_suggested_block_dim(size, prec, memory, compute):
    base = bx.Size(*size) + bx.Precision(prec) + bx.Function.MM + bx.SM(80) + bx.Block()
    assert base.workload is bx.Workload.memory_bound
    assert base.suggested_block_dim == (memory, 1, 1)
    assert (base + bx.Workload.memory_bound).suggested_block_dim == (memory, 1, 1)
    fused = base + bx.Workload.compute_bound
    assert fused.workload is bx.Workload.compute_bound
    assert fused.suggested_block_dim == (compute, 1, 1) == fused.block_dim
    assert (fused + bx.BlockDim(96)).block_dim == (96, 1, 1)  # BlockDim still decides


@pytest.mark.parametrize("prec", [(bx.int8, bx.int8, bx.int32), (bx.float8_e4m3, bx.float8_e4m3, bx.float32)])
def test_workload_decides_the_leading_dimension_of_8bit_b_read_in_runs(prec):
    """Row-major 8-bit B read in runs: an odd number of 8-byte steps (no bank conflicts) where B is
    reused, whole odd 16-byte chunks (16-byte copies from global memory) where it is read once."""
    base = (bx.Size(48, 80, 24) + bx.Precision(*prec) + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major)
            + bx.Function.MM + bx.SM(90) + bx.Block())
    assert base.suggested_leading_dimension[1] == 80  # 5 chunks
    assert (base + bx.Workload.compute_bound).suggested_leading_dimension[1] == 88  # 11 steps of 8 bytes
    assert base.plan.smem_b.strides == (80, 1)


def test_workload_is_an_operator():
    d = bx.Size(32, 32, 32) + bx.Function.MM + bx.SM(80) + bx.Workload.compute_bound
    assert "Workload.compute_bound" in repr(d)
    assert d == bx.Workload.compute_bound + bx.SM(80) + bx.Function.MM + bx.Size(32, 32, 32)
    assert d != bx.Size(32, 32, 32) + bx.Function.MM + bx.SM(80)
    assert bx.Size(32, 32, 32) + bx.Workload.memory_bound == bx.Size(32, 32, 32) + bx.Workload.memory_bound
    with pytest.raises(bx.DescriptorError, match="one Workload operator"):
        d + bx.Workload.memory_bound

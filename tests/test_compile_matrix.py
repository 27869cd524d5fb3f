"""Compile matrix (CPU, no GPU): every supported (A, B, C) combination x both orders of A and B x
sm_75, sm_80, sm_89, sm_90, at a regular, an odd and a padded-leading-dimension size.

Every kernel must compile, use no local memory (no spills), stay within the register
budget of its block size, and its SASS must hold the tensor-core opcode of its instruction.
"""

from __future__ import annotations

import itertools
import os
import re

import pytest

import blasdx as bx
from blasdx.codegen import gemm as codegen
from blasdx.compile import cubin as cubins
from blasdx.plan import heuristics
from blasdx.base import dtypes as dt

SMS = (75, 80, 89, 90)
ORDERS = list(itertools.product((bx.row_major, bx.col_major), repeat=2))
SIZES = {"64x64x64": ((64, 64, 64), None), "17x33x9": ((17, 33, 9), None), "ld": ((32, 24, 40), (48, 56, 40))}

#: SASS opcode each instruction family must produce (PTX mma.sync -> SASS name).
OPCODES = {
    "mma.sync.m16n8k16": "HMMA",
    "mma.sync.m16n8k8": "HMMA",
    "mma.sync.m16n8k32": "IMMA",  # QMMA for fp8, below
    "mma.sync.m8n8k4": "DMMA",  # f64 on sm_90 runs mma.sync.m16n8k8: DMMA too, below
    "fma": ("FFMA", "DFMA"),
}


def _descriptor(row: dt.Combination, sm: int, order, size_key: str) -> bx.Descriptor:
    size, ld = SIZES[size_key]
    desc = (
        bx.Size(*size)
        + bx.Precision(row.a, row.b, row.c)
        + (bx.Type.complex if row.is_complex else bx.Type.real)
        + bx.Function.MM
        + bx.Arrangement(order[0], order[1], bx.col_major)
        + bx.SM(sm)
        + bx.Block()
    )
    if ld is not None:
        m, n, k = size
        lda = ld[0] if order[0] is bx.col_major else ld[1]  # >= M or >= K
        ldb = ld[2] if order[1] is bx.col_major else ld[1]  # >= K or >= N
        desc = desc + bx.LeadingDimension(max(lda, m if order[0] is bx.col_major else k),
                                          max(ldb, k if order[1] is bx.col_major else n), ld[0])
    return desc


def _cases():
    for row in dt.COMBINATIONS:
        for sm in SMS:
            if row.min_sm > sm:
                continue
            for order in ORDERS:
                for size_key in SIZES:
                    yield pytest.param(row, sm, order, size_key,
                                       id=(f"{'c' if row.is_complex else ''}{row.a.name}x{row.b.name}-{row.c.name}-"
                                           f"sm{sm}-{order[0].name[0]}{order[1].name[0]}-{size_key}"))


CASES = list(_cases())


class _Matrix:
    """The matrix's kernels, compiled an SM at a time: all kernels of an SM in parallel, on its first use,
    and the SASS of its SASS cases disassembled together (one cuobjdump run per architecture)."""

    def __init__(self) -> None:
        self.by_sm: dict[int, dict[bx.Descriptor, object]] = {}

    def __getitem__(self, desc: bx.Descriptor):
        if desc.sm not in self.by_sm:
            descs = [d for d in (_descriptor(*case.values) for case in CASES) if d.sm == desc.sm and d.is_supported]
            kernels = self.by_sm[desc.sm] = dict(zip(descs, bx.precompile(descs, workers=os.cpu_count() or 2)))
            sass = [_descriptor(*case.values) for case in _sass_cases() if case.values[1] == desc.sm]
            cubins.prefetch_sass(kernels[d].cubin for d in sass if d in kernels)
        return self.by_sm[desc.sm][desc]


@pytest.fixture(scope="module")
def compiled() -> _Matrix:
    """The matrix's kernels by descriptor (compiled into the run's cache as each SM is first asked for)."""
    return _Matrix()


@pytest.mark.slow
@pytest.mark.parametrize("row,sm,order,size_key", CASES)
def test_compiles_without_spills(compiled, row, sm, order, size_key):
    desc = _descriptor(row, sm, order, size_key)
    if not desc.is_supported:
        pytest.skip(f"{desc!r} does not fit sm_{sm} shared memory")
    kernel = compiled[desc]
    assert kernel.arch == desc.arch
    assert kernel.local_memory == 0, f"{desc!r} spills {kernel.local_memory} B per thread"
    threads = desc.max_threads_per_block
    assert 0 < kernel.registers <= min(255, 65536 // threads), kernel
    assert kernel.shared_memory <= 1024, "the batched kernel keeps A and B in dynamic shared memory"


def _sass_cases():
    """One size per (combination, SM): the SASS check disassembles, which is slower."""
    for case in CASES:
        row, sm, order, size_key = case.values
        if order == (bx.row_major, bx.col_major) and size_key == "17x33x9":
            yield case


@pytest.mark.slow
@pytest.mark.parametrize("row,sm,order,size_key", list(_sass_cases()))
def test_sass_uses_the_tensor_cores(compiled, row, sm, order, size_key):
    desc = _descriptor(row, sm, order, size_key)
    sass = compiled[desc].sass()
    expected = "DMMA" if row.a == dt.float64 and desc.instruction != "fma" else OPCODES[desc.instruction]
    if row.a in (dt.float8_e4m3, dt.float8_e5m2):
        # sm_89 has fp8 mma.sync (QMMA); sm_90 keeps fp8 tensor cores for wgmma and runs
        # mma.sync on fp8 as an f16 HMMA after unpacking the operands (F2FP ... UNPACK)
        expected = "QMMA" if sm == 89 else "HMMA"
        if sm == 90:
            assert "F2FP" in sass
    expected = expected if isinstance(expected, tuple) else (expected,)
    found = set(re.findall(r"\b(HMMA|IMMA|QMMA|DMMA|HGMMA|FFMA|DFMA)\b", sass))
    assert found & set(expected), f"{desc!r}: expected {expected} for {desc.instruction}, SASS has {sorted(found)}"
    assert not re.search(r"\b(LDL|STL)\b", sass), f"{desc!r} touches local memory"


@pytest.fixture(scope="module")
def ahead():
    """The kernels of the SASS tests below compiled together (in parallel) and disassembled together,
    a cuobjdump run per architecture instead of one per kernel; the tests then find both ready."""
    descs = [_ldmatrix_descriptor(a, order, sm) for a in LDMATRIX_TYPES for order in ORDERS for sm in SMS]
    descs += [_n_contiguous_descriptor(a, c, size, workload) for a, c in N_CONTIGUOUS_TYPES for size in N_CONTIGUOUS_SIZES
              for workload in (bx.Workload.compute_bound, bx.Workload.memory_bound)]
    descs += [_k_chunks_descriptor(sm, a, size, bits) for sm in K_CHUNK_SMS for a, size, bits in K_CHUNK_CASES]
    descs += [_panels_descriptor(a, c, order, sm) for a, c in PANEL_TYPES for order in ORDERS for sm in PANEL_SMS]
    descs = [d for d in descs if d is not None and d.is_supported]
    kernels = bx.precompile(descs, workers=os.cpu_count() or 2)
    cubins.prefetch_sass(kernel.cubin for kernel in kernels)


LDMATRIX_TYPES = [dt.float16, dt.bfloat16]


def _ldmatrix_descriptor(a, order, sm) -> bx.Descriptor | None:
    """The 64^3 16-bit block of test_sixteen_bit_fragments_use_ldmatrix; None where the type needs a later SM."""
    row = dt.find_combination(a, a, dt.float32, False)
    return None if row.min_sm > sm else _descriptor(row, sm, order, "64x64x64") + bx.MaxAlignment


@pytest.mark.slow  # the module's `ahead` compiles their kernels together
@pytest.mark.parametrize("sm", SMS)
@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"{o[0].name[0]}{o[1].name[0]}")
@pytest.mark.parametrize("a", LDMATRIX_TYPES, ids=lambda t: t.name)
def test_sixteen_bit_fragments_use_ldmatrix(ahead, a, order, sm):
    """Whole 16-bit tiles feed the tensor cores with ldmatrix (.trans for the other order)."""
    desc = _ldmatrix_descriptor(a, order, sm)
    if desc is None:
        pytest.skip(f"{a.name} needs sm_{dt.find_combination(a, a, dt.float32, False).min_sm}")
    sass = desc.compile().sass()
    if order[0] is bx.row_major or order[1] is bx.col_major:
        assert re.search(r"\bLDSM\.16\.M88", sass), "K-contiguous operand not loaded with ldmatrix"
    if order[0] is bx.col_major or order[1] is bx.row_major:
        assert re.search(r"\bLDSM\.16\.MT88", sass), "M/N-contiguous operand not loaded with ldmatrix.trans"
    assert "LDGSTS" in sass or sm < 80, "16-byte aligned operands are copied with cp.async"


N_CONTIGUOUS_SIZES = [(64, 64, 64), (100, 100, 100), (48, 80, 32), (33, 72, 48), (20, 24, 32)]
N_CONTIGUOUS_TYPES = [(dt.int8, dt.int32), (dt.float8_e4m3, dt.float32)]


def _n_contiguous_descriptor(a, c, size, workload) -> bx.Descriptor:
    """test_n_contiguous_8bit_b_is_read_in_runs's block: row-major 8-bit operands at the suggested leading dimensions."""
    desc = (
        bx.Size(*size) + bx.Precision(a, a, c) + bx.Type.real + bx.Function.MM
        + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + bx.SM(90) + bx.Block() + bx.MaxAlignment
        + workload
    )
    return desc + bx.LeadingDimension(*desc.suggested_leading_dimension)


@pytest.mark.slow  # the module's `ahead` compiles their kernels together
@pytest.mark.parametrize("size", N_CONTIGUOUS_SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("a, c", N_CONTIGUOUS_TYPES, ids=["int8", "e4m3"])
@pytest.mark.parametrize("workload", [bx.Workload.compute_bound, bx.Workload.memory_bound], ids=lambda w: w.name)
def test_n_contiguous_8bit_b_is_read_in_runs(ahead, a, c, size, workload):
    """Row-major 8-bit B on mma.sync is read in runs of 4 (2) adjacent bytes per K row and
    transposed with byte permutes (block_gemm.cuh's grouped B order) wherever the warp tile's
    pieces along N pair up: no byte loads (A takes ldmatrix at these sizes), no local memory.
    The suggested B leading dimension is an odd number of 8-byte steps (conflict-free runs) where
    B is reused, the odd-chunk rule's (16-byte copies) where it is read once."""
    desc = _n_contiguous_descriptor(a, c, size, workload)
    assert desc.instruction == "mma.sync.m16n8k32"
    if workload is bx.Workload.compute_bound:
        assert desc.ldb % 16 == 8
    else:
        assert desc.ldb == heuristics.padded_leading_dimension(size[1], 1)
    kernel = desc.compile()
    sass = kernel.sass()
    assert kernel.local_memory == 0 and not re.search(r"\b(LDL|STL)\b", sass), f"{desc!r} touches local memory"
    if desc.plan.warp_tile[1] % 2:
        pytest.skip("odd pieces along N: B keeps the atom's columns (element reads), no byte permutes to find")
    assert re.search(r"\bPRMT\b", sass), f"{desc!r}: B runs not transposed with byte permutes"
    assert not re.search(r"\bLDS\.(U8|S8)\b", sass), f"{desc!r}: B read byte by byte"
    run = r"LDS\b(?!\.)" if desc.plan.warp_tile[1] % 4 == 0 else r"LDS\.U16\b"
    assert re.search(rf"\b{run}", sass), f"{desc!r}: no {run} reads, plan {desc.plan.warp_tile}"


#: Descriptors that stage C over the consumed A and B (heuristics.c_over_ab_layout): (size, A, C, sm_90a).
C_OVER_AB = [
    ((128, 128, 128), dt.float16, dt.float32, False),
    ((128, 128, 128), dt.float16, dt.float32, True),
    ((128, 128, 128), dt.bfloat16, dt.float32, True),
    ((128, 128, 64), dt.tfloat32, dt.float32, False),
    ((100, 100, 100), dt.tfloat32, dt.float32, False),
    ((128, 128, 128), dt.float32, dt.float32, False),
]


@pytest.mark.parametrize(
    "size,a,c,arch_specific", C_OVER_AB,
    ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else getattr(v, "name", str(v)),
)
def test_c_over_ab_compiles_to_whole_row_stores(size, a, c, arch_specific):
    """The whole product stays in registers (no local memory, within the block's budget) and C
    leaves through shared memory in 16-byte stores (16-byte aligned C)."""
    desc = (
        bx.Size(*size)
        + bx.Precision(a, a, c)
        + bx.Type.real
        + bx.Function.MM
        + bx.Arrangement(bx.row_major, bx.col_major, bx.col_major)
        + bx.SM(90, arch_specific=arch_specific)
        + bx.Block()
        + bx.MaxAlignment
    )
    assert desc.plan.smem_c_over_ab is not None and desc.plan.smem_c is None
    assert "stage_c_over_ab = true" in codegen.generate(desc).source
    kernel = desc.compile()
    assert kernel.local_memory == 0, f"{desc!r} spills {kernel.local_memory} B per thread"
    assert 0 < kernel.registers <= min(255, 65536 // (desc.max_threads_per_block * desc.plan.min_blocks)), kernel
    sass = kernel.sass()
    assert not re.search(r"\b(LDL|STL)\b", sass), f"{desc!r} touches local memory"
    assert re.search(r"\bSTS", sass) and re.search(r"\bSTG\.E\.128\b", sass), "C is not stored in whole rows"


@pytest.mark.parametrize("size, a, b", [((100, 100, 100), dt.int8, dt.int8), ((100, 106, 122), dt.uint8, dt.uint8),
                                        ((110, 140, 93), dt.int8, dt.int8)],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v.name)
def test_register_cap_gives_way_where_it_spills(size, a, b):
    """Integer 8-bit blocks of 256 threads ask for two blocks per SM (128 registers); a shape that
    spills under that cap is compiled again without it: no kernel blasdx hands out spills."""
    from blasdx.compile.cache import cached_compile
    from blasdx.codegen.sources import generate

    desc = (bx.Size(*size) + bx.Precision(a, b, dt.int32) + bx.Type.real + bx.Function.MM
            + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + bx.SM(90) + bx.Block())
    assert desc.plan.min_blocks == 2 and desc.max_threads_per_block == 256, desc.plan
    kernel = desc.compile()
    assert kernel.local_memory == 0, f"{desc!r} spills {kernel.local_memory} B per thread"
    generated = generate(desc)
    capped = cached_compile(generated.source, generated.kernel_name, generated.arch)
    if capped.local_memory:  # compiled again without the cap (ptxas may then fit 128 or fewer without spilling)
        assert kernel is not capped and kernel.cubin != capped.cubin
    else:
        assert kernel is capped and kernel.registers <= 128


@pytest.mark.parametrize("size, blocks", [((48, 80, 24), 5), ((64, 64, 64), 4)], ids=["48x80x24", "64x64x64"])
@pytest.mark.parametrize("order", [bx.row_major, bx.col_major], ids=["B-rows", "B-columns"])
def test_memory_bound_f32_blocks_ask_for_what_shared_memory_allows(size, blocks, order):
    """Memory-bound f32 FFMA blocks on sm_90 run 4 x 8 tiles on 128 threads and ask for as many
    blocks per SM as their shared memory allows (five of 44 KB, four of 51 KB); the register cap
    that follows (102 / 128) holds their 94-96 registers without spilling in either order of B."""
    from blasdx.compile.cache import cached_compile
    from blasdx.codegen.sources import generate

    desc = (bx.Size(*size) + bx.Precision(dt.float32) + bx.Type.real + bx.Function.MM
            + bx.Arrangement(bx.row_major, order, bx.row_major) + bx.SM(90) + bx.Block() + bx.MaxAlignment)
    plan = desc.plan
    assert desc.instruction == "fma" and plan.thread_tile == (4, 8) and desc.max_threads_per_block == 128, plan
    assert plan.min_blocks == blocks, plan
    kernel = desc.compile()
    assert kernel.local_memory == 0, kernel
    generated = generate(desc)
    capped = cached_compile(generated.source, generated.kernel_name, generated.arch)
    assert kernel is capped and kernel.registers <= 65536 // (128 * blocks), kernel


@pytest.mark.parametrize("size, a, c, arch_specific, cap", [
    ((128, 128, 64), dt.float16, dt.float16, True, 85),          # wgmma, f16 sums: three blocks of 256
    ((48, 80, 24), dt.int8, dt.int32, False, 56),                # two problems per block of 192: six
    ((48, 80, 24), dt.float8_e4m3, dt.float32, False, 56),
], ids=["f16-128x128x64-wgmma", "int8-48x80x24", "e4m3-48x80x24"])
def test_memory_bound_blocks_fit_the_blocks_per_sm_they_ask_for(size, a, c, arch_specific, cap):
    """Plans that ask for more blocks per SM than the compiler's own register choice allowed get
    them: the capped compile is the one handed out, without spilling."""
    from blasdx.compile.cache import cached_compile
    from blasdx.codegen.sources import generate

    desc = (bx.Size(*size) + bx.Precision(a, a, c) + bx.Type.real + bx.Function.MM
            + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + bx.SM(90, arch_specific=arch_specific)
            + bx.Block() + bx.MaxAlignment)
    assert 65536 // (desc.max_threads_per_block * desc.plan.min_blocks) == cap, desc.plan
    kernel = desc.compile()
    generated = generate(desc)
    assert kernel is cached_compile(generated.source, generated.kernel_name, generated.arch)
    assert kernel.local_memory == 0 and kernel.registers <= cap, kernel


@pytest.mark.parametrize("arch_specific", [False, True])
@pytest.mark.parametrize("order", [bx.row_major, bx.col_major], ids=["rows", "columns"])
def test_3xtf32_128x128x64_fits_two_blocks_per_sm(order, arch_specific):
    """3xtf32 128x128x64 (256 threads, shared memory for three blocks) takes the 128-register cap
    and fits it without spilling: two blocks per SM, where the compiler alone gave 128-134 registers."""
    from blasdx.compile.cache import cached_compile
    from blasdx.codegen.sources import generate

    desc = (bx.Size(128, 128, 64) + bx.Precision(dt.float32) + bx.Type.real + bx.Function.MM
            + bx.Arrangement(bx.row_major, order, bx.row_major) + bx.SM(90, arch_specific=arch_specific)
            + bx.Block() + bx.MaxAlignment + bx.MantissaBits(23))
    assert desc.plan.min_blocks == 2 and desc.max_threads_per_block == 256, desc.plan
    kernel = desc.compile()
    generated = generate(desc)
    assert kernel is cached_compile(generated.source, generated.kernel_name, generated.arch)  # the capped compile
    assert kernel.local_memory == 0 and kernel.registers <= 128, kernel


@pytest.mark.parametrize("a, c, loops", [(dt.float16, dt.float16, False), (dt.float16, dt.float32, False),
                                         (dt.tfloat32, dt.float32, True)], ids=["f16-f16", "f16-f32", "tf32-f32"])
def test_small_batched_kernel_is_straight_code(a, c, loops):
    """A 32^3 batched block copies one 16-byte piece of A and one of B per thread of 128 (two
    for tf32), and with beta != 0 its pieces of C, with no loop around them, and each warp
    multiplies its one tile without a tile loop: the trip counts are constants. With K of two
    16-bit steps (unrolled) nothing in the kernel loops; tf32's four k8 steps stay a loop in
    memory-bound plans (k_loop_unroll)."""
    desc = (bx.Size(32, 32, 32) + bx.Precision(a, a, c) + bx.Type.real + bx.Function.MM
            + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + bx.SM(90) + bx.Block() + bx.MaxAlignment)
    sass = desc.compile().sass()
    pieces = 32 * 32 * a.size // 16 // desc.max_threads_per_block
    c_pieces = 32 * 32 * c.size // 16 // desc.max_threads_per_block
    # each with the L2 prefetch of its whole 128-byte line (cp.async ... .L2::128B, as cuBLASDx's)
    assert len(re.findall(r"\bLDGSTS\.E\.BYPASS\.LTC128B\.128\b", sass)) == 2 * pieces + c_pieces, sass.count("LDGSTS")
    branches = re.findall(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?BRA\s+(0x[0-9a-f]+)", sass)
    backward = [(at, to) for at, to in branches if int(to, 16) < int(at, 16)]  # (a branch to itself ends the code)
    assert bool(backward) == loops, f"backward branches {backward}"


K_CHUNK_SMS = (80, 86, 89, 90)
K_CHUNK_CASES = [(dt.float32, (128, 128, 64), None), (dt.tfloat32, (128, 128, 128), None), (dt.float32, (128, 128, 128), 23)]


def _k_chunks_descriptor(sm, a, size, bits) -> bx.Descriptor:
    """test_batched_k_chunks_are_commit_groups_waited_for_in_turn's block."""
    desc = (bx.Size(*size) + bx.Precision(a, a, dt.float32) + bx.Type.real + bx.Function.MM
            + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + bx.SM(sm) + bx.Block())
    return desc + bx.MantissaBits(bits) if bits else desc


@pytest.mark.slow  # the module's `ahead` compiles their kernels together
@pytest.mark.parametrize("sm", K_CHUNK_SMS)
@pytest.mark.parametrize("a, size, bits", K_CHUNK_CASES, ids=["f32", "tf32", "3xtf32"])
def test_batched_k_chunks_are_commit_groups_waited_for_in_turn(ahead, sm, a, size, bits):
    """A plan with K in chunks (KernelPlan.k_chunk) issues one cp.async group per chunk and waits
    for them one at a time (1, then 0 still in flight for two chunks), with no local memory; the
    last group and wait are C's, loaded for beta != 0."""
    desc = _k_chunks_descriptor(sm, a, size, bits)
    if not desc.is_supported:
        pytest.skip("does not fit this SM's shared memory")
    chunks = -(-size[2] // desc.plan.k_chunk)
    kernel = desc.compile()
    sass = kernel.sass()
    assert kernel.local_memory == 0
    assert len(re.findall(r"\bLDGDEPBAR\b", sass)) == chunks + 1
    waits = [int(n, 16) for n in re.findall(r"\bDEPBAR\.LE SB0, (0x[0-9a-f]+)", sass)]
    assert waits == [*range(chunks - 1, -1, -1), 0]


@pytest.mark.parametrize("a, c, size", [(dt.float16, dt.float16, (48, 80, 24)), (dt.float16, dt.float32, (100, 100, 100)),
                                        (dt.int8, dt.int32, (100, 100, 100)), (dt.tfloat32, dt.float32, (100, 100, 100))],
                         ids=["f16-f16-two-stages", "f16-f32-beside", "int8-over-ab", "tf32-over-ab"])
def test_batched_staged_c_is_read_in_whole_rows(a, c, size):
    """Where the batched plan stages C in shared memory (beside A and B, or over them), beta != 0
    loads C there with the same 16-byte cp.async copies as A and B: the kernel has no plain
    global loads and no stores narrower than 16 bytes (the element-wise epilogue ran at a quarter
    of the copy bandwidth)."""
    desc = (bx.Size(*size) + bx.Precision(a, a, c) + bx.Type.real + bx.Function.MM
            + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + bx.SM(90) + bx.Block() + bx.MaxAlignment)
    plan = desc.plan
    assert plan.smem_c is not None or plan.smem_c_over_ab is not None, plan
    sass = desc.compile().sass()
    assert not re.findall(r"\bLDG\.", sass), "C (or A, B) read by plain global loads"
    stores = set(re.findall(r"\bSTG\.E(\.\w+)?", sass))
    assert stores == {".128"}, f"global stores {stores}"


PANEL_SMS = [75, 80, 90]
PANEL_TYPES = [(dt.float16, dt.float16), (dt.float16, dt.float32), (dt.bfloat16, dt.float32)]


def _panels_descriptor(a, c, order, sm) -> bx.Descriptor | None:
    """test_batched_panels_compile_to_ldmatrix_without_spills's 32^3 block; None where the type needs a later SM."""
    if dt.find_combination(a, a, c, False).min_sm > sm:
        return None
    return (bx.Size(32, 32, 32) + bx.Precision(a, a, c) + bx.Type.real + bx.Function.MM
            + bx.Arrangement(*order, bx.row_major) + bx.SM(sm) + bx.Block() + bx.MaxAlignment)


@pytest.mark.slow  # the module's `ahead` compiles their kernels together
@pytest.mark.parametrize("sm", PANEL_SMS)
@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"{o[0].name[0]}{o[1].name[0]}")
@pytest.mark.parametrize("a, c", PANEL_TYPES, ids=["f16-f16", "f16-f32", "bf16-f32"])
def test_batched_panels_compile_to_ldmatrix_without_spills(ahead, a, c, order, sm):
    """Batched kernels whose A and B sit in swizzled panels (heuristics.batched_panels: rows under a
    128-byte line) read them with ldmatrix only, copy them with cp.async from sm_80 on, and spill
    nothing, for every order of A and B."""
    desc = _panels_descriptor(a, c, order, sm)
    if desc is None:
        pytest.skip(f"{a.name} needs sm_{dt.find_combination(a, a, c, False).min_sm}")
    assert desc.plan.batched_panels == (64, 64)
    kernel = desc.compile()
    sass = kernel.sass()
    assert kernel.local_memory == 0 and not re.search(r"\b(LDL|STL)\b", sass)
    assert len(re.findall(r"\bLDSM\.16\.MT?88(\.[24])?\b", sass)) >= 4, "fragments not read with ldmatrix"
    assert not re.search(r"\bLDS\.U16\b|\bLDS\.U\.16\b", sass), "a 16-bit operand read element by element"
    assert ("LDGSTS" in sass) == (sm >= 80)

"""The fusion device API on wgmma plans (sm_90a, CPU only): layouts, sizes and compiled code.

Descriptors whose plan is wgmma keep sA and sB as swizzled K-panels in the device API too:
``a_index`` / ``b_index`` must agree with the Python layouts (``suggested_smem_layout_a/b``),
the shared-memory sizes with ``Descriptor.shared_memory_size(_ab)``, and every API form must
compile to HGMMA / QGMMA without local memory: from shared memory without load transforms, with
A in registers with a transform of A, and with mma.sync over the panels (HMMA) with one of B.
8-bit operands sit K-major whatever their arrangement (transposed on their way in).
tests/test_gpu_wgmma_fusion.py runs the same kernels; tests/test_wgmma_register_a.py goes
further into transforms of A.
"""

from __future__ import annotations

import itertools
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

import blasdx as bx
from blasdx.compile import cubin as cubins
from blasdx.plan import heuristics as h

from . import fusion_kernels

R, C = bx.row_major, bx.col_major
F16, BF16, F32 = bx.float16, bx.bfloat16, bx.float32
E4, E5 = bx.float8_e4m3, bx.float8_e5m2
FP8 = (E4, E5)
SIXTEEN_BIT = [(F16, F16, F16), (F16, F16, F32), (BF16, BF16, F32)]
EIGHT_BIT = [(a, b, c) for a in FP8 for b in FP8 for c in (F16, F32)]
SIZES = [(64, 64, 64), (128, 128, 64), (128, 128, 128)]

KERNEL_NAMES = ("register_api", "twice", "elements", "user_fill", "shared_api")
#: Every form of the device API over tightly stored global operands (tests/fusion_kernels.py),
#: with A_OP / B_OP the load transforms of a case.
KERNELS = fusion_kernels.source(*KERNEL_NAMES)
#: (A_OP, B_OP) -> the scale of the product it implies. Identity and conjugate (nothing for real
#: types) keep wgmma with both operands in shared memory; a scale of A keeps wgmma with A in
#: registers; a scale of B makes the GEMM read the panels with mma.sync.
OPS = {
    "wgmma": ("blasdx::identity{}", "blasdx::conjugate{}", 1),
    "transform": ("blasdx::scale<GEMM::scalar_type>{2}", "blasdx::identity{}", 2),
    "b_transform": ("blasdx::identity{}", "blasdx::scale<GEMM::scalar_type>{2}", 2),
}


def gemm(size, types, arr, *extra) -> bx.Descriptor:
    desc = (bx.Size(*size) + bx.Precision(*types) + bx.Function.MM + bx.Arrangement(*arr)
            + bx.SM(90, arch_specific=True) + bx.Block() + bx.MaxAlignment)
    for op in extra:
        desc = desc + op
    return desc


def kernel_source(ops: str) -> str:
    a_op, b_op, _ = OPS[ops]
    return KERNELS.replace("A_OP", a_op).replace("B_OP", b_op)


def cases():
    """(types, arrangement, size): every wgmma type, every arrangement it reads, each size."""
    for types in SIXTEEN_BIT:
        for (a, b), c in zip(itertools.product((R, C), repeat=2), (C, R, R, C)):
            for size in SIZES:
                yield types, (a, b, c), size
    for types in EIGHT_BIT:
        for size, c in zip(SIZES, (C, R, C)):
            yield types, (R, C, c), size
    # 8-bit operands that are not K-major: transposed into K-major panels by load_a / load_b
    for types, arr, size in (((E4, E4, F32), (R, R, R), (128, 128, 64)), ((E5, E4, F16), (C, R, C), (64, 64, 64)),
                             ((E4, E5, F32), (C, C, R), (128, 128, 128))):
        yield types, arr, size


def case_id(case) -> str:
    (a, b, c), arr, size = case
    return f"{a.name}x{b.name}-{c.name}-{''.join(x.name[0] for x in arr)}-{'x'.join(map(str, size))}"


CASES = list(cases())


def compile_all(descs, ops_list=tuple(OPS), names=KERNEL_NAMES) -> dict:
    """{(desc, ops, name): FusedKernel}, compiled on a thread pool."""
    jobs = [(d, o, n) for d in descs for o in ops_list for n in names]

    def build(job):
        desc, ops, name = job
        return job, bx.compile_kernel(kernel_source(ops), name, {"GEMM": desc})

    first = build(jobs[0])  # cuda.core's lazy imports are not thread-safe: warm them up first
    with ThreadPoolExecutor(8) as pool:
        return dict([first, *pool.map(build, jobs[1:])])


def functions(sass: str) -> dict[str, str]:
    """{kernel name: its SASS} of a module (every kernel of the source is in it)."""
    parts = sass.split("Function : ")[1:]
    return {part.split()[0]: part for part in parts}


# ---------------------------------------------------------------------------------------------- layouts


def swizzled_offset(layout: h.SmemLayout, element: int, row: int, col: int) -> int:
    """The panel rule of the PTX ISA written out once more: chunk c of panel row r goes to c ^ (r bits)."""
    panel = layout.swizzle_bytes
    width = panel // element
    outer, inner = (row, col) if layout.strides[1] == 1 else (col, row)
    rows = layout.shape[0] if layout.strides[1] == 1 else layout.shape[1]
    chunk, within = divmod((inner % width) * element, 16)
    row_bits = {128: outer % 8, 64: (outer // 2) % 4, 32: (outer // 4) % 2}[panel]
    byte = (inner // width) * rows * panel + outer * panel + (chunk ^ row_bits) * 16 + within
    return byte // element


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_python_layouts_are_panels(case):
    types, arr, size = case
    desc = gemm(size, types, arr)
    assert desc.instruction.startswith("wgmma.")
    for layout, dtype, (rows, cols) in ((desc.suggested_smem_layout_a, types[0], (desc.m, desc.k)),
                                        (desc.suggested_smem_layout_b, types[1], (desc.k, desc.n))):
        assert layout.swizzle is not None
        offsets = {layout.index(r, c) for r in range(rows) for c in range(cols)}
        assert offsets == set(range(rows * cols)), "a swizzled layout is a permutation of a dense block"
        for r, c in itertools.product((0, 1, 7, 9, rows - 1), (0, 5, 8, 33, cols - 1)):
            assert layout.index(r, c) == swizzled_offset(layout, dtype.size, r, c), (r, c)


def index_checks(desc: bx.Descriptor, name: str = "GEMM") -> str:
    """static_asserts that GEMM::a_index / b_index equal the Python layouts at sample points."""
    lines = []
    for which, layout, (rows, cols) in (("a", desc.suggested_smem_layout_a, (desc.m, desc.k)),
                                        ("b", desc.suggested_smem_layout_b, (desc.k, desc.n))):
        for r, c in itertools.product(sorted({0, 1, 3, 8, 13, rows - 1}), sorted({0, 7, 8, 17, 40, cols - 1})):
            if r < rows and c < cols:
                lines.append(f'static_assert({name}::{which}_index({r}, {c}) == {layout.index(r, c)}, '
                             f'"{which}_index({r}, {c})");')
    return "\n".join(lines) + '\nextern "C" __global__ void index_checks() {}\n'


def test_index_functions_agree_with_python_layouts():
    descs = [gemm(size, types, arr) for types, arr, size in CASES[::2]]
    plain = (bx.Size(64, 32, 48) + bx.Precision(F16, F16, F32) + bx.Function.MM + bx.Arrangement(C, R, C)
             + bx.LeadingDimension(72, 40, 64) + bx.SM(90) + bx.Block())
    descs.append(plain)  # plain layouts use the descriptor's leading dimensions

    def build(desc):
        return bx.compile_kernel(index_checks(desc), "index_checks", {"GEMM": desc})

    build(descs[0])
    with ThreadPoolExecutor(8) as pool:
        kernels = list(pool.map(build, descs[1:]))
    assert all(k.arch == "sm_90a" for k in kernels[:-1])
    assert not plain.plan.is_wgmma


def test_plain_index_functions_use_the_leading_dimension():
    desc = (bx.Size(64, 32, 48) + bx.Precision(F16, F16, F32) + bx.Function.MM + bx.Arrangement(C, R, C)
            + bx.LeadingDimension(72, 40, 64) + bx.SM(90) + bx.Block())
    source = ('static_assert(GEMM::a_index(3, 5) == 3 + 5 * 72, "column-major A");\n'
              'static_assert(GEMM::b_index(3, 5) == 3 * 40 + 5, "row-major B");\n'
              'extern "C" __global__ void plain() {}\n')
    bx.compile_kernel(source, "plain", {"GEMM": desc})


# ---------------------------------------------------------------------------------------------- sizes

#: (descriptor, shared_memory_size, shared_memory_size_ab) worked out by hand: 1008 bytes of
#: slack to reach a 1024-byte boundary from a 16-byte aligned block, A panels rounded up to
#: 1024, B panels, then C plain with the descriptor's leading dimension.
SIZE_CASES = [
    (gemm((64, 64, 64), (F16, F16, F32), (R, C, C)), 1008 + 8192 + 8192 + 64 * 64 * 4, 1008 + 8192 + 8192),
    (gemm((128, 128, 128), (BF16, BF16, F32), (C, R, R)), 1008 + 32768 + 32768 + 65536, 1008 + 65536),
    (gemm((64, 64, 64), (E4, E5, F16), (R, C, C)), 1008 + 4096 + 4096 + 64 * 64 * 2, 1008 + 8192),
    (gemm((64, 96, 48), (F16, F16, F32), (R, C, C), bx.LeadingDimension(56, 64, 72)),
     1008 + 6144 + 9216 + 72 * 96 * 4, 1008 + 6144 + 9216),
]


@pytest.mark.parametrize("desc, size, size_ab", SIZE_CASES, ids=["f16-64", "bf16-128", "fp8-64", "ld-64x96x48"])
def test_shared_memory_sizes(desc, size, size_ab):
    assert desc.plan.is_wgmma
    assert (desc.shared_memory_size, desc.shared_memory_size_ab) == (size, size_ab)
    # the prelude's static_asserts compare both with the C++ sizes; the offsets are 1024-aligned
    source = ('static_assert(GEMM::swizzled && GEMM::shared_alignment == 1024, "panels");\n'
              'static_assert(GEMM::shared_b_offset % 1024 == 0, "B starts on a 1024-byte boundary");\n'
              'extern "C" __global__ void sizes() {}\n')
    kernel = bx.compile_kernel(source, "sizes", {"GEMM": desc})
    assert kernel.shared_memory == -(-size // 16) * 16


def test_plain_and_fallback_plans_keep_plain_sizes():
    for desc in (gemm((64, 64, 64), (F16, F16, F32), (R, C, C), bx.BlockDim(96)),  # not whole warpgroups
                 gemm((32, 64, 64), (F16, F16, F32), (R, C, C))):  # M not a multiple of 64
        assert not desc.plan.is_wgmma
        assert desc.shared_memory_size == 2 * desc.a_size + 2 * desc.b_size + 4 * desc.c_size
        source = 'static_assert(!GEMM::swizzled && GEMM::shared_alignment == 16, "plain");\n' \
                 'extern "C" __global__ void sizes() {}\n'
        bx.compile_kernel(source, "sizes", {"GEMM": desc})


# ---------------------------------------------------------------------------------------------- compiled code


#: Every type and arrangement, a share of the sizes (the GPU tests compile them all).
def _share(cases: list, period: int) -> list:
    """One size per (types, A/B arrangement), rotating through the sizes."""
    groups = {}
    for case in cases:
        groups.setdefault((case[0], case[1][:2]), []).append(case)
    return [group[(i // period) % len(group)] for i, group in enumerate(groups.values()) if i % period == 0]


SASS_CASES = _share(CASES, 1)
TRANSFORM_CASES = _share(CASES, 1)


@pytest.fixture(scope="module")
def kernels():
    """One module per case and transform kind: compiling any of its kernels compiles them all."""
    wgmma = compile_all([gemm(size, types, arr) for types, arr, size in SASS_CASES], ("wgmma",), ("register_api",))
    transforms = compile_all([gemm(size, types, arr) for types, arr, size in TRANSFORM_CASES],
                             ("transform", "b_transform"), ("register_api",))
    cubins.prefetch_sass(kernel.compiled.cubin for kernel in [*wgmma.values(), *transforms.values()])
    return {**wgmma, **transforms}


def gmma_in_every_function(found: dict[str, str], desc: bx.Descriptor, gmma: str, what: str) -> None:
    """Each function's SASS (``found``: name to SASS) has the ``gmma`` pattern, and no HMMA nor local memory."""
    for name, sass in found.items():
        assert re.search(gmma, sass), f"{name} of {desc!r}: no {what}"
        assert not re.search(r"\b(HMMA|LDL|STL)\b", sass), f"{name} of {desc!r}: HMMA or local memory"


@pytest.mark.slow
@pytest.mark.parametrize("case", SASS_CASES, ids=case_id)
def test_every_api_form_compiles_to_gmma_without_local_memory(kernels, case):
    types, arr, size = case
    desc = gemm(size, types, arr)
    kernel = kernels[(desc, "wgmma", "register_api")]
    assert kernel.arch == "sm_90a" and kernel.local_memory == 0
    opcode = "QGMMA" if types[0] in FP8 else "HGMMA"
    width, depth = desc.plan.atom[1:]
    found = functions(kernel.compiled.sass())
    assert sorted(found) == sorted(KERNEL_NAMES)
    gmma_in_every_function(found, desc, rf"\b{opcode}\.64x{width}x{depth}\b", opcode)


@pytest.mark.slow
@pytest.mark.parametrize("case", TRANSFORM_CASES, ids=case_id)
def test_a_transforms_keep_gmma_with_a_in_registers(kernels, case):
    types, arr, size = case
    desc = gemm(size, types, arr)
    opcode = "QGMMA" if types[0] in FP8 else "HGMMA"
    found = functions(kernels[(desc, "transform", "register_api")].compiled.sass())
    gmma_in_every_function(found, desc, rf"\b{opcode}\.64x\d+x\d+\S* R\d+, R\d+, gdesc\[", "register A")


@pytest.mark.slow
@pytest.mark.parametrize("case", TRANSFORM_CASES, ids=case_id)
def test_b_transforms_read_the_panels_with_mma_sync(kernels, case):
    types, arr, size = case
    desc = gemm(size, types, arr)
    for name, sass in functions(kernels[(desc, "b_transform", "register_api")].compiled.sass()).items():
        assert re.search(r"\bHMMA\b", sass) and not re.search(r"\b[HQ]GMMA\b", sass), f"{name} of {desc!r}"
        assert not re.search(r"\b(LDL|STL)\b", sass), f"{name} of {desc!r}: local memory"


def test_copy_wait_fences_the_async_proxy_and_load_a_writes_panels():
    desc = gemm((64, 64, 64), (F16, F16, F32), (R, C, C))
    kernel = bx.compile_kernel(kernel_source("wgmma"), "register_api", {"GEMM": desc})
    ptx_like = kernel.compiled.sass()
    assert re.search(r"\bFENCE\.VIEW\.ASYNC\.S\b", ptx_like), "fence.proxy.async.shared::cta before wgmma reads"
    assert re.search(r"\bLDGSTS\.E\.BYPASS\.LTC128B\.128\b", ptx_like), "16-byte cp.async into the panels"

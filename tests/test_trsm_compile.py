"""NVRTC compile matrix of the TRSM kernels (CPU, no GPU): every Side x FillMode x Diag for every
type on sm_80 and sm_90 across the four arrangements, plus the sizes that take other paths
(one panel, several batches per block, more right-hand sides than threads, wide f64).

Every kernel must compile, keep everything in registers (no local memory), stay within the
register budget of its block, and its SASS must hold the instructions of its plan: DMMA for
f64 updates on sm_80+, FFMA / DFMA otherwise, cp.async (LDGSTS) for 16-byte aligned copies.
"""

from __future__ import annotations

import itertools
import os
import re

import pytest

import blasdx as bx
from blasdx.codegen import trsm as trsm_codegen
from blasdx.compile import cubin as cubins

R, C = bx.row_major, bx.col_major
TYPES = [(bx.float32, bx.Type.real), (bx.float64, bx.Type.real), (bx.float32, bx.Type.complex),
         (bx.float64, bx.Type.complex)]
ARRANGEMENTS = list(itertools.product((R, C), repeat=2))
VARIANTS = list(itertools.product(bx.Side, bx.FillMode, bx.Diag))


def _variant_cases():
    for (prec, kind), sm in itertools.product(TYPES, (80, 90)):
        for i, (side, fill, diag) in enumerate(VARIANTS):
            arrangement = ARRANGEMENTS[i % 4]
            desc = (bx.Size(40, 24) + bx.Precision(prec) + kind + bx.Function.TRSM + side + fill + diag
                    + bx.Arrangement(*arrangement) + bx.MaxAlignment + bx.SM(sm) + bx.Block())
            name = (f"{'c' if kind is bx.Type.complex else ''}{prec.name}-sm{sm}-{side.name}-{fill.name}-{diag.name}-"
                    f"{arrangement[0].name[0]}{arrangement[1].name[0]}")
            yield pytest.param(desc, id=name)


def _size_cases():
    sizes = [
        ((16, 16), bx.float32, bx.Type.real, ()),  # one panel, 8 problems per block
        ((16, 16), bx.float64, bx.Type.complex, (bx.Side.right,)),
        ((1, 1), bx.float32, bx.Type.real, ()),
        ((64, 64), bx.float32, bx.Type.real, ()),
        ((64, 64), bx.float64, bx.Type.real, (bx.Side.right, bx.FillMode.upper)),
        ((128, 128), bx.float32, bx.Type.real, ()),
        ((128, 64), bx.float64, bx.Type.real, ()),  # what bx.solve_triangular runs for 128 x 128 f64
        ((100, 37), bx.float32, bx.Type.complex, (bx.Side.left, bx.FillMode.upper)),
        ((40, 300), bx.float32, bx.Type.real, ()),  # more right-hand sides than threads
        ((24, 20), bx.float32, bx.Type.real, (bx.BatchesPerBlock(3), bx.BlockDim(96))),
        ((12, 5), bx.float64, bx.Type.real, (bx.BatchesPerBlock(5), bx.BlockDim(35))),
    ]
    for (size, prec, kind, extra), arrangement in itertools.product(sizes, [(R, C), (C, R)]):
        desc = (bx.Size(*size) + bx.Precision(prec) + kind + bx.Function.TRSM + bx.Arrangement(*arrangement)
                + bx.MaxAlignment + bx.SM(90) + bx.Block())
        for op in extra:
            desc = desc + op
        name = f"{size[0]}x{size[1]}-{'c' if kind is bx.Type.complex else ''}{prec.name}-{arrangement[0].name[0]}" \
               f"{arrangement[1].name[0]}-{'-'.join(repr(op) for op in extra) or 'default'}"
        yield pytest.param(desc, id=name)


CASES = list(_variant_cases()) + list(_size_cases())


@pytest.fixture(scope="module")
def compiled():
    """Every kernel of the matrix, compiled in parallel into the run's cache (tests/conftest.py: a fresh
    folder shared by the run's workers), where the TRSM tests of other files find the kernels they share."""
    descs = [case.values[0] for case in CASES]
    kernels = bx.precompile(descs, workers=os.cpu_count() or 2)
    cubins.prefetch_sass(kernel.cubin for kernel in kernels)  # for test_sass_runs_the_plan, a cuobjdump run per arch
    return dict(zip(descs, kernels))


@pytest.mark.slow
@pytest.mark.parametrize("desc", CASES)
def test_compiles_without_spills(compiled, desc):
    assert desc.is_supported, desc
    kernel = compiled[desc]
    assert kernel.arch == desc.arch
    assert kernel.local_memory == 0, f"{desc!r} uses {kernel.local_memory} B of local memory per thread"
    assert 0 < kernel.registers <= min(255, 65536 // desc.max_threads_per_block), kernel
    assert kernel.shared_memory == 0, "the batched kernel keeps everything in dynamic shared memory"


@pytest.mark.slow
@pytest.mark.parametrize("desc", CASES)
def test_sass_runs_the_plan(compiled, desc):
    sass = compiled[desc].sass()
    assert not re.search(r"\b(LDL|STL)\b", sass), f"{desc!r} touches local memory"
    found = set(re.findall(r"\b(DMMA|FFMA|DFMA|LDGSTS|BAR)\b", sass))
    assert "BAR" in found, "the panels are separated by barriers"
    assert "LDGSTS" in found, "16-byte aligned operands are copied with cp.async"
    if desc.instruction == "mma.sync.m8n8k4":
        assert "DMMA" in found, f"{desc!r}: f64 updates should run on DMMA, SASS has {sorted(found)}"
    else:
        expected = "DFMA" if desc.scalar_type is bx.float64 else "FFMA"
        assert expected in found, f"{desc!r}: expected {expected}, SASS has {sorted(found)}"


def test_generated_source_names_every_update():
    desc = bx.Size(40, 24) + bx.Function.TRSM + bx.Side.right + bx.SM(90) + bx.Block()
    source = trsm_codegen.generate(desc).source
    # right side: A is 24 x 24, panels of 16 unknowns run backwards (lower): [8, 24) then [0, 8)
    assert "template <> struct blasdx_trsm_config::update<0> {  // 40 x 8 x 16, fma" in source
    assert "static constexpr int p0 = 8, pb = 16, r0 = 0, rn = 8;" in source
    assert "update<1>" not in source  # the last panel has nothing after it
    assert '#include "batched_trsm.cu"' in source


def test_output_layout_goes_into_the_source():
    desc = bx.Size(19, 23) + bx.Function.TRSM + bx.Arrangement(R, C) + bx.SM(80) + bx.Block()
    plain = trsm_codegen.generate(desc).source
    assert "out_row_major = false" in plain and "ldo = 19" in plain
    other = trsm_codegen.generate(desc, trsm_codegen.OutputLayout(True, 25, 4)).source
    assert "out_row_major = true" in other and "ldo = 25, copy_bytes_out = 4" in other
    assert other != plain

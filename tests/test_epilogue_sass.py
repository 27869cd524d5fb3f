"""How the batched kernel writes C into shared memory before its row-wise store (CPU, SASS).

A lane holds C in runs of adjacent columns (the atom's column pair, or 2P columns with the grouped
8-bit B order); the staging epilogue writes a run with vector stores. Element by element, the edge
tests of odd sizes kept the compiler from pairing stores, and 100^3 plans wrote int32 / f32 C 4 bytes
and f16 C 2 bytes at a time (int8 100^3: 0.82x cuBLASDx, 1.02x with 16-byte stores; H200).
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt

R = bx.row_major


def _batched(a: dt.DType, b: dt.DType, c: dt.DType, size: tuple[int, int, int], sm: int = 90) -> bx.Descriptor:
    return (bx.Size(*size) + bx.Precision(a, b, c) + bx.Function.MM + bx.Arrangement(R, R, R) + bx.MaxAlignment
            + bx.SM(sm, arch_specific=sm == 90) + bx.Block())


def _shared_stores(desc: bx.Descriptor) -> Counter:
    return Counter(re.findall(r"\b(STS(?:\.[A-Z0-9]+)*)\b", desc.compile().sass()))


#: (A, B, C) -> the one shared-memory store a run of C takes at 100^3 and 48x80x24 (C's rows padded
#: to an even number of elements): two f16 as 32 bits, two f32 or a pair of f64 as 8 / 16 bytes,
#: int32 from the grouped 8-bit order four at a time.
STAGED = {
    (dt.float16, dt.float16, dt.float16): "STS",
    (dt.float16, dt.float16, dt.float32): "STS.64",
    (dt.bfloat16, dt.bfloat16, dt.float32): "STS.64",
    (dt.tfloat32, dt.tfloat32, dt.float32): "STS.64",
    (dt.int8, dt.int8, dt.int32): "STS.128",
    (dt.float8_e4m3, dt.float8_e4m3, dt.float32): "STS.128",
}


@pytest.mark.parametrize("size", [(100, 100, 100), (48, 80, 24)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("types", list(STAGED), ids=lambda t: "x".join(x.name for x in t))
def test_odd_size_c_is_staged_in_vector_stores(types, size):
    desc = _batched(*types, size)
    plan = desc.plan
    assert plan.smem_c is not None or plan.smem_c_over_ab is not None, "the plan stages C"
    stores = _shared_stores(desc)
    assert set(stores) == {STAGED[types]}, stores


def test_f64_pairs_are_staged_16_bytes_at_a_time():
    stores = _shared_stores(_batched(dt.float64, dt.float64, dt.float64, (64, 64, 64)))
    assert set(stores) == {"STS.128"}, stores


@pytest.mark.parametrize("sm", [80, 90])
def test_odd_size_edge_runs_stay_inside_c(sm):
    """int8 100^3: a lane's run of eight int32 columns 96..103 crosses N = 100; it is stored as
    two runs of four (N is a multiple of four), the first one only (the GPU tests check the values)."""
    desc = _batched(dt.int8, dt.int8, dt.int32, (100, 100, 100), sm)
    stores = _shared_stores(desc)
    assert stores and set(stores) <= {"STS.128"}, stores

"""LTO-IR of a descriptor's entry points (CPU): produced for every supported SM, linked with nvJitLink
into kernels that use the tensor cores and no local memory, cached like cubins, refused clearly."""

from __future__ import annotations

import re

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.codegen import ltoir as codegen
from blasdx.compile import cache as _cache
from blasdx.compile import cubin as _cubin
from blasdx.compile import ltoir as _ltoir

from .ltoir_support import (
    kernel_source,
    link,
    link_cases,
    require_nvjitlink,
    tensor_opcodes,
)

#: (A, B, C) per case (test_numba links the same descriptors into Numba kernels).
TYPES = {
    "f16-f32": (dt.float16, dt.float16, dt.float32),
    "f16-f16": (dt.float16, dt.float16, dt.float16),
    "bf16-f32": (dt.bfloat16, dt.bfloat16, dt.float32),
    "tf32-f32": (dt.tfloat32, dt.tfloat32, dt.float32),
    "f32": (dt.float32, dt.float32, dt.float32),
    "f64": (dt.float64, dt.float64, dt.float64),
    "e4m3-f32": (dt.float8_e4m3, dt.float8_e4m3, dt.float32),
    "s8-s32": (dt.int8, dt.int8, dt.int32),
}
SMS = [(75, False), (80, False), (86, False), (89, False), (90, False), (90, True)]


def _desc(types, sm, arch_specific, size=(64, 64, 64), arrangement=(bx.row_major, bx.col_major, bx.col_major)):
    a, b, c = types
    return (bx.Size(*size) + bx.Precision(a, b, c) + bx.Function.MM + bx.Arrangement(*arrangement)
            + bx.SM(sm, arch_specific=arch_specific) + bx.Block())


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A cache folder of the test's own and nothing in memory (the other tests share the run's LTO-IR with
    the Numba tests, which link the same descriptors)."""
    monkeypatch.setenv("BLASDX_CACHE_DIR", str(tmp_path / "cache"))
    _ltoir._memory.clear()
    _ltoir._by_descriptor.clear()
    link.cache_clear()


@pytest.mark.slow
@pytest.mark.parametrize("types, sm, arch_specific", list(link_cases(TYPES, SMS)))
def test_links_into_a_kernel_on_the_tensor_cores_without_local_memory(types, sm, arch_specific):
    require_nvjitlink()
    desc = _desc(types, sm, arch_specific)
    lto = desc.ltoir()
    assert lto.arch == desc.arch and len(lto.data) > 0
    cubin = bytes(link(desc).code)
    sass = _cubin.run_cuobjdump(cubin, "-sass")
    kernels = ["shared_api"] + (["register_api"] if lto.fragment_size else [])
    for kernel in kernels:
        usage = _cubin.resource_usage(cubin, kernel)
        assert usage.local_memory == 0, f"{kernel} of {desc!r} uses {usage.local_memory} B of local memory"
    found = set(re.findall(r"\b(HMMA|IMMA|QMMA|DMMA|HGMMA|QGMMA|IGMMA|FFMA|DFMA|IMAD)\b", sass))
    assert found & tensor_opcodes(desc), f"{desc!r} ({desc.instruction}): SASS has {sorted(found)}"
    assert not re.search(r"\b(LDL|STL)\b", sass), f"{desc!r} touches local memory"
    assert not re.search(r"\bCALL\.", sass), "the entry points did not inline at link time"


@pytest.mark.parametrize("size", [(17, 33, 9), (32, 32, 32)], ids=lambda s: "x".join(map(str, s)))
def test_odd_sizes_and_both_orders_link(size):
    require_nvjitlink()
    for arrangement in [(bx.col_major, bx.row_major, bx.row_major), (bx.row_major, bx.col_major, bx.col_major)]:
        desc = _desc(TYPES["f16-f32"], 80, False, size, arrangement)
        cubin = bytes(link(desc).code)
        assert _cubin.resource_usage(cubin, "shared_api").local_memory == 0


def test_entry_points_are_named_per_descriptor_and_declared():
    one = _desc(TYPES["f16-f32"], 80, False)
    two = _desc(TYPES["f16-f32"], 80, False, (32, 32, 32))
    src1, src2 = codegen.generate(one), codegen.generate(two)
    assert set(src1.symbols) >= {"execute", "load_a", "load_b", "load_c", "store_c", "copy_wait",
                                 "slice_shared_memory", "accumulate", "fragment_axpby", "fragment_row",
                                 "fragment_col", "fragment_valid"}
    assert not set(src1.symbols.values()) & set(src2.symbols.values())
    assert codegen.generate(one) == src1  # deterministic
    for name in src1.symbols.values():
        assert re.search(rf'extern "C" __device__ (void|int) {name}\(', src1.declarations)
    assert "float alpha_re" in src1.declarations


def test_register_api_only_where_the_accumulator_fits():
    big = _desc(TYPES["f64"], 80, False, (128, 128, 32)) + bx.BlockDim(32)
    if not big.is_supported:
        pytest.skip("not plannable here")
    generated = codegen.generate(big)
    assert generated.fragment_size == 0
    assert not set(generated.symbols) & codegen.REGISTER_ROLES
    assert "execute" in generated.symbols
    small = codegen.generate(_desc(TYPES["f16-f32"], 80, False, (32, 32, 32)))
    assert small.fragment_size > 0 and codegen.REGISTER_ROLES <= set(small.symbols)


def test_disk_hit_runs_no_nvrtc_and_corrupt_entries_are_rebuilt(private_cache):
    desc = _desc(TYPES["f16-f32"], 80, False, (32, 32, 32))
    first = desc.ltoir()
    assert desc.ltoir() is first  # memory
    _ltoir._memory.clear()
    _ltoir._by_descriptor.clear()
    _cache.stats.reset()
    again = desc.ltoir()
    assert again.data == first.data and _cache.stats.nvrtc_calls == 0 and _cache.stats.disk_hits == 1
    store = _ltoir.LtoirCache(_cache.cache_dir())
    (entry,) = store.entries()
    entry.write_bytes(entry.read_bytes()[:-5])
    _ltoir._memory.clear()
    _ltoir._by_descriptor.clear()
    _cache.stats.reset()
    rebuilt = desc.ltoir()
    assert rebuilt.data == first.data and _cache.stats.corrupt_entries == 1 and _cache.stats.nvrtc_calls == 1
    assert store.clear() == 1
    desc.ltoir()
    _ltoir._memory.clear()
    _ltoir._by_descriptor.clear()
    desc.ltoir()  # written again
    assert len(store.entries()) == 1
    assert _cache.clear_cache(memory=False) >= 1 and store.entries() == []  # `blasdx cache clear` too


def test_without_block_or_for_trsm_is_a_descriptor_error():
    desc = bx.Size(32, 32, 32) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM + bx.SM(80)
    with pytest.raises(bx.DescriptorError, match="no Block operator"):
        desc.ltoir()
    trsm = (bx.Size(32, 32) + bx.Precision(bx.float32) + bx.Function.TRSM + bx.Side.left
            + bx.FillMode.lower + bx.Diag.non_unit + bx.SM(80) + bx.Block())
    with pytest.raises(bx.DescriptorError, match="only GEMM"):
        trsm.ltoir()


def test_the_kernel_source_needs_only_the_declarations():
    desc = _desc(TYPES["bf16-f32"], 90, False, (32, 32, 32))
    source = kernel_source(desc)
    assert "#include" not in source

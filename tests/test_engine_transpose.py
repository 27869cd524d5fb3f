"""MN-major tf32 and 8-bit B transposed in shared memory (kernels/blasdx/hopper/transpose.cuh),
without a GPU: which operands qualify, the rule that picks it over a repack, the configuration
that makes room for the raw tile, the tensor maps, and the kernels' SASS.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from blasdx.base import dtypes as dt
from blasdx.calls import matmul as array_gemm
from blasdx.compile.cache import cached_compile
from blasdx.engine import hopper

from .array_views import PTR, views

SMS = 132


view = views(dt.float16)[0]


def plan(x, y):
    return array_gemm.plan_call(x, y, None, array_gemm.RESULT_TYPES[x.dtype], array_gemm._DeviceInfo(90, SMS), 0)


# ---- which operands, and when ---------------------------------------------------------------------


def test_routes_mark_repacks_that_are_only_for_the_instruction():
    for a in (dt.tfloat32, dt.float8_e4m3, dt.int8):
        r = hopper.route("y", a, PTR, False, 1024, 512, 0, False)
        assert r.repack == f"{a.name} wgmma reads K-major operands only" and r.transposable
        odd = hopper.route("y", a, PTR, False, 1001, 512, 0, False)  # TMA cannot read these rows in place
        assert odd.repack and not odd.transposable
        assert not hopper.route("y", a, PTR + 4, False, 1024, 512, 0, False).transposable
    assert not hopper.route("y", dt.bfloat16, PTR, False, 1024, 512, 0, False).transposable  # read as it is


@pytest.mark.parametrize("a", [dt.tfloat32, dt.float8_e4m3, dt.int8], ids=lambda t: t.name)
def test_few_tile_rows_transpose_b_many_repack_it(encoder, a):
    p = plan(view((500, 960), a), view((960, 800), a))  # row-major y: N-major; 4 tile rows
    assert p.kind == "hopper" and "y MN-major (transposed in shared memory)" in p.describe(), p.describe()
    config = p.kernel.config
    assert config.transpose_b and config.bn == 128 and config.threads == 128 * (2 + config.consumers)
    assert config.shared_memory(a.size, p.kernel.store_d is not None) <= hopper.MAX_SHARED
    map_b = encoder.calls[1]
    assert map_b.dims == (800, 960, 1) and map_b.box == (128 // a.size, 128 // a.size, 1)  # MN-major panels
    encoder.calls.clear()
    deep = plan(view((8192, 960), a), view((960, 800), a))  # 64 tile rows: a repack copies B once
    assert "y K-major (repacked" in deep.describe() and not deep.kernel.config.transpose_b
    assert "x K-major (repacked" in plan(view((500, 960), a, (1, 500)), view((960, 800), a)).describe()  # A: never


def test_describe_call_says_where_b_is_transposed():
    text = hopper.describe_call(dt.tfloat32, dt.float32, 16, 8192, 8192)
    assert "B transposed in shared memory" in text and "y MN-major (transposed in shared memory)" in text
    assert "K split" in text
    assert "repacked" in hopper.describe_call(dt.tfloat32, dt.float32, 8192, 8192, 8192)
    assert "transposed" not in hopper.describe_call(dt.tfloat32, dt.float32, 16, 8192, 8192, b_row_major=False)


@pytest.mark.parametrize("itemsize", [1, 4])
@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("name", ["wide", "square", "narrow", "pingpong", "wide clusters"])
def test_transposed_configs_fit_shared_memory(name, staged, itemsize):
    config = hopper.fit_transposed(hopper.replace(hopper.CONFIGS[name], bk=128 // itemsize), itemsize, staged)
    assert config.transpose_b and config.bn <= 128 and config.stages >= 3
    assert config.shared_memory(itemsize, staged) <= hopper.MAX_SHARED
    assert config.stage_bytes(itemsize) == (config.bm + 2 * config.bn) * 128
    assert (config.bn * itemsize // 128) % config.cluster == 0  # a cluster block loads whole panels of B


def test_forced_transposition_follows_the_configuration(encoder):
    from blasdx.engine.hopper import OperandRoute, place_transposition

    route_b = hopper.route("y", dt.tfloat32, PTR, False, 800, 960, 0, False)
    forced = hopper.replace(hopper.PINGPONG, bk=32, transpose_b=True)
    config, splits, r = place_transposition(forced, 1, route_b, dt.tfloat32, 8192, 800, 960, 1, SMS, True, True)
    assert r == OperandRoute("y", False, transpose=True) and config.transpose_b and splits == 1
    config, _, r = place_transposition(hopper.replace(forced, transpose_b=False), 1, route_b, dt.tfloat32, 16, 800,
                                       960, 1, SMS, True, False)
    assert r is route_b and not config.transpose_b


def test_transposing_thread_mapping_meets_every_bank_once():
    """The mapping transpose.cuh documents: every warp access of the raw and the K-major tile is conflict-free."""

    def offset(row: int, byte: int) -> int:  # 128-byte swizzle, rows of 128 bytes
        return row * 128 + ((((byte >> 4) ^ (row & 7))) << 4) + (byte & 15)

    for d in range(8):  # 4-byte elements: phases of 8 threads moving 16 bytes each
        for j in range(4):
            loads = {(offset(4 * ((t + d) % 8) + j, 16 * t) >> 4) % 8 for t in range(8)}
            stores = {(offset(4 * t + j, 16 * ((t + d) % 8)) >> 4) % 8 for t in range(8)}
            assert len(loads) == len(stores) == 8
    for d in range(32):  # 1-byte elements: warps moving 4 bytes a thread
        for j in range(4):
            loads = {(offset(4 * ((t + d) % 32) + j, 4 * t) >> 2) % 32 for t in range(32)}
            stores = {(offset(4 * t + j, 4 * ((t + d) % 32)) >> 2) % 32 for t in range(32)}
            assert len(loads) == len(stores) == 32


#: transpose.cuh's stage rewrite run on the host (tests/host_emulation.py): every thread of the transposing
#: warps in turn over a stage of numbered bytes, then each element's place checked against stage_offset.
HARNESS = r"""
#include "emulation.h"
#include "blasdx/hopper/transpose.cuh"
using namespace blasdx::hopper;

template <class T, int ROWS, int BK, int THREADS>
int check() {
    constexpr int BYTES = ROWS * BK * int(sizeof(T));
    alignas(1024) static unsigned char raw[BYTES], dst[BYTES];
    for (int i = 0; i < BYTES; ++i) raw[i] = static_cast<unsigned char>(i * 131 + i / 256);
    std::memset(dst, 0xff, BYTES);
    for (int thread = 0; thread < THREADS; ++thread) transpose_stage<T, ROWS, BK, THREADS>(raw, dst, thread);
    int wrong = 0;
    for (int n = 0; n < ROWS; ++n)
        for (int k = 0; k < BK; ++k)
            wrong += std::memcmp(dst + stage_offset<T, BK, true>(n, k), raw + stage_offset<T, BK, false>(n, k),
                                 sizeof(T)) != 0;
    return wrong;
}

int main() {
    std::printf("%d %d %d %d\n", check<float, 128, 32, 224>(), check<float, 64, 32, 224>(),
                check<unsigned char, 128, 128, 224>(), check<signed char, 128, 128, 96>());
    return 0;
}
"""


def test_stage_transposition_puts_every_element_in_its_k_major_place(tmp_path):
    """tf32 (4-byte) and 8-bit stages of 128 and 64 rows, by the 224 threads the engine gives the rewrite (and 96):
    every element lands where the consumers' K-major reads look for it, no byte left unwritten."""
    from . import host_emulation

    exe = host_emulation.build_harness(tmp_path, HARNESS)
    done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "0", "0", "0"]


# ---- the kernels ------------------------------------------------------------------------------------


TRANSPOSED = [  # (a, c, base configuration, promotion, TMA store)
    (dt.tfloat32, dt.float32, "narrow", 0, False),
    (dt.tfloat32, dt.float32, "pingpong", 0, True),
    (dt.tfloat32, dt.float32, "wide clusters", 0, True),
    (dt.float8_e4m3, dt.float16, "narrow", 128, False),
    (dt.float8_e4m3, dt.float16, "wide", 128, True),
    (dt.int8, dt.int32, "pingpong", 0, True),
]


@pytest.mark.slow
@pytest.mark.parametrize(("a", "c", "name", "promotion", "staged"), TRANSPOSED,
                         ids=lambda v: v.name if isinstance(v, dt.DType) else str(v))
def test_transposing_kernels_compile_without_spills(a, c, name, promotion, staged):
    config = hopper.replace(hopper.CONFIGS[name], bk=128 // a.size, promotion=promotion)
    config = hopper.fit_transposed(config, a.size, staged)
    source = hopper.gemm_source(a, c, config, True, False, store_by_tma=staged)
    assert "static constexpr bool b_transpose = true;" in source
    compiled = cached_compile(source, hopper.KERNEL_NAME, "sm_90a")
    sass = compiled.sass()
    ops = set(re.findall(r"\b(HGMMA|QGMMA|IGMMA|UTMALDG|USETMAXREG|PRMT|LDL|STL)\b", sass))
    gmma = {"tfloat32": "HGMMA", "float8_e4m3": "QGMMA", "int8": "IGMMA"}[a.name]
    assert {gmma, "UTMALDG", "USETMAXREG"} <= ops, ops
    assert not ops & {"LDL", "STL"} and compiled.local_memory == 0
    if a.size == 1:
        assert "PRMT" in ops  # the 4 x 4 byte transposes
        assert _shortest_rewrite_loop(sass) <= 60, "the 8-bit rewrite's loop (52-58 instructions a 4 x 4 piece)"
    assert compiled.registers <= 65536 // config.threads


def _shortest_rewrite_loop(sass: str) -> int:
    """Instructions of the shortest backward-branch loop that loads, byte-permutes and stores shared memory: one
    4 x 4 piece of the 8-bit rewrite (75-76 when every access recomputed its swizzled offset, 52-58 with next_row)."""
    from .test_k_loop_sass import _sass_loops

    sass_loops = _sass_loops()
    return min(len(body) for _, _, body in sass_loops.loops(sass_loops.instructions(sass))
               if {"LDS", "STS", "PRMT"} <= {op.split(".")[0] for op in body})

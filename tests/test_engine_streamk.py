"""Stream-K on the Hopper engine without a GPU: the decomposition, the rule, the plans, the kernels.

The decomposition (blasdx.engine.streamk, kernels/blasdx/hopper/scheduler.cuh's StreamKScheduler)
is checked on its Python model (every (tile, K step) iteration covered exactly once, each tile's
part count the number of units that cover it, blocks' ranges balanced, units of no work only at
the end of a block's walk) and the real header is compiled with g++ and compared with the model
unit by unit. The rule picks stream-K on exactly the LLM suite's shapes listed here; the kernels
compile for sm_90a without local memory.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blasdx.base import dtypes as dt
from blasdx.calls import matmul as array_gemm
from blasdx.compile.cache import cached_compile
from blasdx.engine import hopper, streamk, tuning

from . import host_emulation
from .array_views import views

SMS = 132


@pytest.fixture(autouse=True)
def rule_takes_stream_k(monkeypatch):
    """These tests prove stream-K's machinery as the rule would run it (plans take it only with
    hopper.STREAM_K_BY_RULE on; see test_plans_keep_their_splits_by_default)."""
    monkeypatch.setattr(hopper, "STREAM_K_BY_RULE", True)
view, col = views(dt.bfloat16)


# ---- the decomposition's model ----------------------------------------------------------------------


def walks(d: streamk.Decomposition) -> list[list[streamk.Piece | None]]:
    """Each block's units in the order it takes them (b, b + blocks, ...)."""
    return [[streamk.work(d, u) for u in range(b, d.units, d.blocks)] for b in range(d.blocks)]


def check_decomposition(tiles: int, steps: int, blocks: int, waves: int) -> None:
    d = streamk.decomposition(tiles, steps, blocks, waves)
    shared = tiles - d.dp_tiles
    assert d.dp_tiles % blocks == 0 and 0 < shared <= tiles
    assert shared == min(tiles, tiles % blocks + (waves - 1) * blocks)
    assert d.iterations == shared * steps and d.sk_blocks == min(blocks, d.iterations)
    covered: dict[int, list[tuple[int, int, int, int]]] = {}  # tile -> (k_begin, k_end, parts, block)
    for b, walk in enumerate(walks(d)):
        ended = False
        seen_tiles = set()
        done = 0
        for p in walk:
            if p is None:
                ended = True
                continue
            assert not ended, "a unit of no work comes only after the block's last piece"
            assert 0 <= p.k_begin < p.k_end <= steps and 0 <= p.tile < tiles
            assert p.tile not in seen_tiles, "a block covers a tile at most once"
            seen_tiles.add(p.tile)
            covered.setdefault(p.tile, []).append((p.k_begin, p.k_end, p.parts, b))
            if p.tile >= d.dp_tiles:
                done += p.k_end - p.k_begin
        if b < d.sk_blocks:  # balanced: floor or ceil of the shared iterations per block
            assert d.iterations // d.sk_blocks <= done <= -(-d.iterations // d.sk_blocks)
        else:
            assert done == 0
    assert sorted(covered) == list(range(tiles)), "every tile has a unit"
    for t, pieces in covered.items():
        pieces.sort()
        assert pieces[0][0] == 0 and pieces[-1][1] == steps
        assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces)), f"tile {t}: K steps covered exactly once"
        assert all(p[2] == len(pieces) for p in pieces), f"tile {t}: parts are its units"
        blocks_of = [p[3] for p in pieces]
        assert blocks_of == sorted(blocks_of), "a tile's K steps go to blocks in order"
        if t < d.dp_tiles:
            assert len(pieces) == 1 and t % blocks == pieces[0][3], "data-parallel tiles are whole, round robin"


@settings(max_examples=400, deadline=None)
@given(tiles=st.integers(1, 1200), steps=st.integers(1, 300), blocks=st.integers(1, 140), waves=st.integers(2, 5))
def test_every_iteration_is_covered_once(tiles, steps, blocks, waves):
    check_decomposition(tiles, steps, blocks, waves)


@settings(max_examples=150, deadline=None)
@given(tiles=st.integers(1, 400), steps=st.integers(1, 80), blocks=st.integers(1, 140), waves=st.integers(2, 4),
       order=st.randoms(use_true_random=False))
def test_fixup_protocol_finishes_every_tile_once(tiles, steps, blocks, waves, order):
    """splitk.cuh's exchange on the model's pieces, arriving in any order: each piece adds its K steps' sum
    into its tile's slot and counts itself; the arrival that brings the count to the tile's parts resets the
    count, takes the total and zeroes the slot. Every tile is finished once, with all of its K steps, and the
    slots and counts are zero afterwards (ready for the next launch, as a CUDA-graph replay needs)."""
    d = streamk.decomposition(tiles, steps, blocks, waves)
    pieces = [p for u in range(d.units) if (p := streamk.work(d, u)) is not None]
    order.shuffle(pieces)
    value = [[(t * 131 + s * 7) % 97 + 1 for s in range(steps)] for t in range(tiles)]  # exact in any order
    sums, counts, finished = [0] * tiles, [0] * tiles, {}
    for p in pieces:
        part = sum(value[p.tile][p.k_begin:p.k_end])
        if p.parts == 1:
            total = part
        else:
            sums[p.tile] += part
            counts[p.tile] += 1
            if counts[p.tile] != p.parts:
                continue
            counts[p.tile], total, sums[p.tile] = 0, sums[p.tile], 0
        assert p.tile not in finished, "a tile is finished once"
        finished[p.tile] = total
    assert finished == {t: sum(value[t]) for t in range(tiles)}
    assert not any(sums) and not any(counts)


@pytest.mark.parametrize(("tiles", "steps", "blocks"), [
    (1, 1, 132), (1, 1000, 132), (3, 2, 132),  # fewer iterations than blocks: some blocks idle
    (132, 64, 132), (264, 8, 132), (133, 112, 132), (272, 112, 132), (68, 112, 132), (192, 64, 132),
    (5000, 7, 1), (7, 5000, 2),
])
def test_edge_decompositions(tiles, steps, blocks):
    check_decomposition(tiles, steps, blocks, streamk.MIN_WAVES)


def test_waves_share_the_partial_wave_and_whole_ones_before_it():
    d = streamk.decomposition(272, 112, 132, 2)  # 2048x2112x7168: 272 tiles, 8 past two waves
    assert (d.dp_tiles, d.iterations, d.sk_blocks) == (132, 140 * 112, 132)
    assert d.pieces == 3 and d.units == 132 + 3 * 132  # 118.8 iterations a block meet at most 3 tiles
    assert streamk.decomposition(100, 10, 132, 2).dp_tiles == 0  # under a wave: all shared
    assert streamk.decomposition(264, 10, 132, 2).dp_tiles == 132  # whole waves: the last one shared


# ---- the real scheduler against the model ------------------------------------------------------------

HARNESS = r"""
#include "emulation.h"
#include <algorithm>
#include <cstdio>
using std::max;
using std::min;
#include "blasdx/hopper/scheduler.cuh"
using namespace blasdx::hopper;
constexpr int BM = 128, BN = 128, BK = 64, GROUP_M = 8;

int main() {
    int m, n, k, batch, waves, grid;
    while (std::scanf("%d %d %d %d %d %d", &m, &n, &k, &batch, &waves, &grid) == 6) {
        gridDim = dim3(grid);
        const StreamKScheduler<BM, BN, BK, GROUP_M> sched(m, n, k, batch, waves);
        std::printf("%d %d\n", sched.units, sched.dp_tiles);
        for (int u = 0; u < sched.units; ++u) {
            const Work w = sched.work(u);
            std::printf("%d %d %d %d %d %d\n", w.batch, w.m0, w.n0, w.k_begin, w.k_end, w.parts);
        }
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def scheduler_exe(tmp_path_factory):
    return host_emulation.build_harness(tmp_path_factory.mktemp("streamk_scheduler"), HARNESS)


def tile_origins(m: int, n: int, batch: int) -> list[tuple[int, int, int]]:
    """(batch, m0, n0) of tile t: problem by problem, GROUP_M = 8 tile rows down before one column right."""
    rows, cols = math.ceil(m / 128), math.ceil(n / 128)
    out = []
    for t in range(batch * rows * cols):
        b, t = divmod(t, rows * cols)
        group, in_group = divmod(t, 8 * cols)
        in_rows = min(rows - 8 * group, 8)
        out.append((b, (8 * group + in_group % in_rows) * 128, in_group // in_rows * 128))
    return out


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 3000), n=st.integers(1, 3000), k=st.integers(1, 9000), batch=st.integers(1, 3),
       waves=st.integers(2, 4), grid=st.sampled_from([1, 7, 78, 132]))
def test_kernel_scheduler_matches_the_model(scheduler_exe, m, n, k, batch, waves, grid):
    done = subprocess.run([str(scheduler_exe)], input=f"{m} {n} {k} {batch} {waves} {grid}\n", capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    units, dp_tiles = map(int, lines[0].split())
    origins = tile_origins(m, n, batch)
    d = streamk.decomposition(len(origins), math.ceil(k / 64), grid, waves)
    assert (units, dp_tiles) == (d.units, d.dp_tiles)
    for u in range(units):
        got = tuple(int(v) for v in lines[1 + u].split())
        p = streamk.work(d, u)
        if p is None:
            assert got[5] == 0 and got[3] == got[4], f"unit {u}: no work"
        else:
            assert got == (*origins[p.tile], p.k_begin, p.k_end, p.parts), f"unit {u}"


# ---- the rule ---------------------------------------------------------------------------------------

#: The LLM suite's shapes (benchmarks/llm_shapes.py: M x N x K, bf16) the rule runs in stream-K on 132 SMs, with
#: the class; every other shape of the suite keeps the configuration and splits it had without stream-K.
STREAM_K_SHAPES = {(128, 24576, 1536): "pingpong", (2048, 2112, 7168): "pingpong", (128, 2112, 7168): "medium"}
KN = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096), (8192, 10240), (8192, 8192), (8192, 57344),
      (28672, 8192), (7168, 2112), (1536, 24576), (512, 32768), (16384, 7168), (4096, 14336)]
SUITE = [(m, n, k) for m in (16, 64, 128, 512, 2048, 8192) for k, n in KN]


def llm_shapes():
    """benchmarks/llm_shapes.py as a module (its folder on the path while it loads: it imports a sibling)."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location("llm_shapes", folder / "llm_shapes.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["llm_shapes"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(folder))


def test_the_table_is_the_llm_suites():
    suite = llm_shapes()
    assert set(SUITE) == {(m, n, k) for kn in suite.MODELS.values() for k, n in kn for m in suite.MS}
    picked = suite.suite(["bf16"], None, ["nk"], False, shapes=[(2048, 2112, 7168), (512, 6144, 4096)])
    assert [(c.m, c.n, c.k, c.model) for c in picked] == [(2048, 2112, 7168, "deepseek-v3"),
                                                         (512, 6144, 4096, "llama3-8b")]


@pytest.mark.parametrize("shape", SUITE, ids=lambda s: "x".join(map(str, s)))
def test_rule_takes_stream_k_exactly_on_its_shapes(shape):
    m, n, k = shape
    chosen, splits = hopper.choose_config(dt.bfloat16, m, n, k, 1, SMS, stream_k=True)
    before, before_splits = hopper.choose_config(dt.bfloat16, m, n, k, 1, SMS)
    if shape in STREAM_K_SHAPES:
        assert chosen == hopper.replace(hopper.CONFIGS[STREAM_K_SHAPES[shape]], bk=64, stream_k=True)
        assert splits == hopper.STREAM_K_WAVES
        assert (hopper.stream_k_estimate(chosen, m, n, k, 1, SMS)
                < hopper.STREAM_K_GAIN * hopper.split_estimate(before, before_splits, m, n, k, 1, SMS))
    else:
        assert (chosen, splits) == (before, before_splits)


def test_rule_figures_of_the_wave_quantised_shapes():
    pingpong = hopper.replace(hopper.PINGPONG, bk=64)
    assert hopper.split_estimate(pingpong, 1, 2048, 2112, 7168, 1, SMS) == 336  # 272 tiles: 3 rounds of 112
    assert hopper.stream_k_estimate(pingpong, 2048, 2112, 7168, 1, SMS) == 235  # 112 + 119 + 2 fixups of 2
    assert hopper.split_estimate(pingpong, 3, 512, 2112, 7168, 1, SMS) == 80
    assert hopper.stream_k_estimate(pingpong, 512, 2112, 7168, 1, SMS) == 62
    # many waves: the last partial wave is a few per cent, kept whole
    assert hopper.choose_config(dt.bfloat16, 8192, 2112, 7168, 1, SMS, stream_k=True)[0].stream_k is False


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 70000), batch=st.integers(1, 40),
       sms=st.sampled_from([1, 8, 78, 114, 132]), a=st.sampled_from([dt.bfloat16, dt.tfloat32, dt.int8,
                                                                     dt.float8_e4m3]))
def test_stream_k_only_for_eligible_classes_within_its_waves(m, n, k, batch, sms, a):
    promotion = hopper.promotion_of(a)
    config, splits = hopper.choose_config(a, m, n, k, batch, sms, promotion=promotion, stream_k=True)
    plain = hopper.choose_config(a, m, n, k, batch, sms, promotion=promotion)
    if not config.stream_k:
        assert (config, splits) == plain
        return
    assert hopper.stream_k_eligible(config) and splits == hopper.STREAM_K_WAVES
    assert hopper.replace(config, stream_k=False) == plain[0]
    tiles = batch * math.ceil(m / config.bm) * math.ceil(n / config.bn)
    assert tiles <= hopper.STREAM_K_MAX_WAVES * sms
    if not config.pingpong:  # medium: only where the memory-bound rule splits
        assert plain[1] > 1


# ---- plans ------------------------------------------------------------------------------------------


def plan(x, y, **kw):
    return array_gemm.plan_call(x, y, None, dt.float32, array_gemm._DeviceInfo(90, SMS), 0, **kw)


def test_plans_run_stream_k_on_a_block_per_sm_with_direct_stores(encoder):
    for w in (col((7168, 2112)), view((7168, 2112))):  # weights [N, K] read transposed, and [K, N]
        p = plan(view((2048, 7168)), w)
        engine = p.kernel
        assert engine.config.stream_k and engine.splits == 2 and engine.grid == (SMS, 1, 1)
        assert engine.store_d is None and engine.needs_scratch
        assert engine.units == streamk.decomposition(272, 112, SMS, 2).units
        assert "stream-K, over the last 2 waves of tiles, D by direct stores" in p.describe()
        source = engine._gemm.source
        assert "static constexpr bool stream_k = true;" in source and "store_by_tma = false" in source
    medium = plan(view((128, 16384)), col((16384, 2112))).kernel  # medium tiles split K only past 128 K steps
    assert medium.config.stream_k and medium.config.bm == 64 and not medium.config.pingpong


def test_plans_keep_their_splits_by_default(encoder, monkeypatch):
    """Off by default (measured slower than the rule's splits on the shapes the estimate picks): plans and
    describe_call keep the configuration they had before stream-K."""
    monkeypatch.setattr(hopper, "STREAM_K_BY_RULE", False)
    engine = plan(view((2048, 7168)), col((7168, 2112))).kernel
    assert not engine.config.stream_k
    assert (engine.config.bm, engine.config.bn, engine.config.pingpong) == (128, 128, True)
    assert "stream-K" not in hopper.describe_call(dt.bfloat16, dt.float32, 2048, 2112, 7168, b_row_major=False)


def test_describe_call_says_stream_k():
    text = hopper.describe_call(dt.bfloat16, dt.float32, 2048, 2112, 7168, b_row_major=False)
    assert "ping-pong, group 8, stream-K, over the last 2 waves of tiles, D by direct stores" in text
    assert "stream-K" not in hopper.describe_call(dt.bfloat16, dt.float32, 8192, 8192, 8192)


def test_batched_plans_share_the_tiles_of_all_problems(encoder):
    p = plan(view((4, 512, 7168)), col((7168, 2112))).kernel  # 4 x 68 tiles
    assert p.config.stream_k and p.units == streamk.decomposition(272, 112, SMS, 2).units


def test_explicit_configurations_are_checked(encoder):
    x, y = view((2048, 7168)), col((7168, 2112))
    sk = hopper.replace(hopper.PINGPONG, bk=64, stream_k=True)
    mx, my = array_gemm._matrix(x, "x"), array_gemm._matrix(y, "y")

    def engine(config, splits):
        return array_gemm._engine_plan(x, y, mx, my, dt.float32, 2048, 2112, 7168, 1, array_gemm._DeviceInfo(90, SMS),
                                       None, config, splits)

    for config, splits, why in ((sk, 1, "at least 2, not 1"), (hopper.replace(sk, cluster=2), 2, "cannot run")):
        with pytest.raises(ValueError, match=why):
            engine(config, splits)
    e, _ = engine(sk, 3)
    assert e.splits == 3 and e.units == streamk.decomposition(272, 112, SMS, 3).units
    e, _ = engine(None, 2)  # splits asked for without a configuration: the rule's tile, split
    assert not e.config.stream_k and e.splits == 2


def test_scaled_and_device_rules_keep_their_splits():
    # plans of other kernels built on the engine's (on views) do not take stream-K from the rule
    assert hopper.EnginePlan.streams_k.fget(type("P", (), {"on_pointers": False})()) is False
    assert not hopper.choose_config(dt.bfloat16, 2048, 2112, 7168, 1, SMS)[0].stream_k


def test_tune_candidates_include_stream_k():
    names = {base for base, changes in tuning.CANDIDATES if changes.get("stream_k")}
    assert {"pingpong", "medium"} <= names
    for base, changes in tuning.CANDIDATES:
        hopper.replace(hopper.CONFIGS[base], **changes)  # every candidate names real fields


# ---- kernels ----------------------------------------------------------------------------------------

KERNELS = [  # (input, result, class, x K-major, y K-major, extra changes)
    (dt.bfloat16, dt.float32, "pingpong", True, True, {}),
    (dt.bfloat16, dt.bfloat16, "pingpong", True, False, {}),
    (dt.float16, dt.float16, "medium", True, True, {}),
    (dt.float8_e4m3, dt.float16, "medium", True, True, {"promotion": 128}),
    (dt.tfloat32, dt.float32, "pingpong", True, False, {"transpose_b": True, "bn": 128, "stages": 4}),
    (dt.int8, dt.int32, "pingpong", True, True, {}),
]


@pytest.mark.slow
@pytest.mark.parametrize(("a", "c", "name", "a_k", "b_k", "changes"), KERNELS,
                         ids=lambda v: v.name if isinstance(v, dt.DType) else str(v))
def test_stream_k_kernels_compile_without_local_memory(a, c, name, a_k, b_k, changes):
    config = hopper.replace(hopper.CONFIGS[name], bk=128 // a.size, stream_k=True, **changes)
    compiled = cached_compile(hopper.gemm_source(a, c, config, a_k, b_k), hopper.KERNEL_NAME, "sm_90a")
    sass = compiled.sass()
    ops = set(re.findall(r"\b(HGMMA|QGMMA|IGMMA|UTMALDG|UTMASTG|LDL|STL)\b", sass))
    assert compiled.local_memory == 0 and not ops & {"LDL", "STL"}
    assert ops & {"HGMMA", "QGMMA", "IGMMA"} and "UTMALDG" in ops and "UTMASTG" not in ops  # direct stores
    add = "ATOMG.E.ADD.STRONG.GPU" if c.integral else "ATOMG.E.ADD.F32.FTZ.RN.STRONG.GPU"
    assert add in sass, "the shared tiles' partial sums are added in the workspace"
    assert "serialized" not in (compiled.log or "")


@pytest.mark.slow
def test_stream_k_with_a_tma_store_does_not_compile():
    config = hopper.replace(hopper.PINGPONG, bk=64, stream_k=True)
    source = hopper.gemm_source(dt.bfloat16, dt.float32, config, True, True, store_by_tma=True)
    with pytest.raises(Exception, match="stream-K tiles are finished by direct stores"):
        cached_compile(source, hopper.KERNEL_NAME, "sm_90a")

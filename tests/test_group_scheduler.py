"""The grouped tile schedulers (kernels/blasdx/hopper/group_scheduler.cuh) run on the CPU.

The real header is compiled with g++ against tests/emulation/emulation.h (one OS thread per CUDA
thread) plus warp-shuffle stand-ins; a block of 64 threads builds the group table from bounds,
and every work unit is listed. Checked: each group's rows (or K range) are covered by its
units exactly once and nothing else is, empty groups have no units, bad offsets are clamped
into non-overlapping groups, and the K-grouped scheduler's steps match the padded layout.
"""

from __future__ import annotations

import math
import subprocess

import numpy as np
import pytest


from . import host_emulation

HARNESS = r"""
#include "emulation.h"
#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>
using std::max;
using std::min;
inline std::barrier<>* warp_barrier = nullptr;  // the 32 threads of warp 0 (the only one that shuffles)
inline int shuffle_slots[32];
inline int exchange(int v, int from) {
    const int lane = threadIdx.x % 32;
    shuffle_slots[lane] = v;
    warp_barrier->arrive_and_wait();
    const int r = shuffle_slots[from];
    warp_barrier->arrive_and_wait();
    return r;
}
inline int __shfl_up_sync(unsigned, int v, int d) {
    const int lane = threadIdx.x % 32;
    return exchange(v, lane >= d ? lane - d : lane);
}
inline int __shfl_sync(unsigned, int v, int from) { return exchange(v, from); }
template <class T> inline T __ldg(const T* p) { return *p; }
#include "blasdx/hopper/group_scheduler.cuh"
using namespace blasdx::hopper;
constexpr int THREADS = 64, BM = 128, BN = 256, BK = 64, GROUP_M = 8;

int main() {
    int along_k, layout, groups, rows, n, k, has_bounds, align, cluster;
    if (std::scanf("%d %d %d %d %d %d %d %d %d", &along_k, &layout, &groups, &rows, &n, &k, &has_bounds, &align,
                   &cluster) != 9) {
        return 2;
    }
    std::vector<int> bounds(groups);
    for (int& b : bounds) std::scanf("%d", &b);
    std::vector<int> storage(3 * groups + 1);
    const GroupTable table(storage.data(), groups);
    std::barrier<> block(THREADS), warp(32);
    emulated_barrier = &block;
    warp_barrier = &warp;
    std::vector<std::thread> threads;
    for (int t = 0; t < THREADS; ++t) {
        threads.emplace_back([&, t] {
            threadIdx = dim3(t);
            const int* b = has_bounds ? bounds.data() : nullptr;
            if (along_k) {
                table.build<BK, THREADS>(layout, b, groups, k);
            } else if (cluster == 2) {
                table.build<BM, THREADS, 2>(layout, b, groups, rows, align);
            } else {
                table.build<BM, THREADS>(layout, b, groups, rows, align);
            }
        });
    }
    for (auto& t : threads) t.join();
    for (int g = 0; g <= groups; ++g) std::printf("%d %d %d\n", g < groups ? table.start[g] : 0,
                                                  g < groups ? table.end[g] : 0, table.first[g]);
    auto list = [&](const auto& sched) {
        std::printf("%d\n", sched.units * cluster);
        for (int u = 0; u < sched.units * cluster; ++u) {
            const GroupWork w = sched.work(u / cluster, u % cluster);
            std::printf("%d %d %d %d %d %d %d %d\n", w.batch, w.m0, w.n0, w.k_begin, w.k_end, w.row_end, w.group,
                        w.row_begin);
        }
    };
    if (along_k) {
        list(KGroupScheduler<BM, BN, BK, GROUP_M>(table, groups, rows, n, k));
    } else if (cluster == 2) {
        list(GroupScheduler<BM, BN, BK, GROUP_M, 2>(table, groups, rows, n, k, align));
    } else {
        list(GroupScheduler<BM, BN, BK, GROUP_M>(table, groups, rows, n, k, align));
    }
    return 0;
}
"""
BM, BN, BK = 128, 256, 64


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    return host_emulation.build_harness(tmp_path_factory.mktemp("group_scheduler"), HARNESS)


def run(exe, along_k: bool, layout: int, rows: int, n: int, k: int, bounds, align: int = 1,
        cluster: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(table rows (start, end, first) per group plus the total, units (group, m0, n0, k_begin, k_end, row_end,
    group, row_begin))."""
    groups = len(bounds) if bounds is not None else 1
    text = f"{int(along_k)} {layout} {groups} {rows} {n} {k} {int(bounds is not None)} {align} {cluster}\n"
    text += " ".join(str(int(b)) for b in (bounds if bounds is not None else [0]))
    done = subprocess.run([str(exe)], input=text, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    table = np.array([[int(v) for v in line.split()] for line in lines[:groups + 1]])
    count = int(lines[groups + 1])
    units = np.array([[int(v) for v in line.split()] for line in lines[groups + 2:groups + 2 + count]])
    return table, units.reshape(-1, 8)


def expected_ranges(bounds, rows: int) -> list[tuple[int, int]]:
    """Group ranges after the kernel's clamping: ends inside [0, rows], as a running maximum."""
    ends = np.maximum.accumulate(np.clip(np.asarray(bounds), 0, rows))
    starts = np.concatenate([[0], ends[:-1]])
    return list(zip(starts.tolist(), ends.tolist()))


def check_rows_covered(units, ranges, n: int, align: int = 1) -> None:
    """Every (row, column tile) of every group is in exactly one unit, and no unit lies outside its group; tiles
    start at the group's first row rounded down to ``align``."""
    tiles_n = math.ceil(n / BN)
    seen: dict[tuple[int, int, int], int] = {}
    covered: dict[int, set[int]] = {}
    for g, m0, n0, _, _, row_end, group, row_begin in units.tolist():
        start, end = ranges[g]
        origin = start - start % align
        assert group == g and (row_begin, row_end) == (start, end) and origin <= m0 < end and n0 % BN == 0
        assert n0 < n and (m0 - origin) % BM == 0 and m0 % align == 0, "tile rows start at the group's origin"
        seen[(g, m0, n0)] = seen.get((g, m0, n0), 0) + 1
        covered.setdefault(g, set()).update(range(max(m0, start), min(m0 + BM, end)))
    assert all(v == 1 for v in seen.values()), "a tile taken twice"
    want = sum(math.ceil((e - (s - s % align)) / BM) * tiles_n for s, e in ranges if e > s)
    assert len(units) == want == len(seen)
    for g, (s, e) in enumerate(ranges):
        assert covered.get(g, set()) == set(range(s, e)), f"group {g}'s rows"


ROUTINGS = {
    "uniform": [100, 200, 300, 400],
    "empty groups": [0, 0, 130, 130, 130, 500, 500, 1000],
    "one group": [777],
    "many": np.cumsum(np.random.default_rng(0).integers(0, 300, 257)).tolist(),
    "out of order": [60, 20, 100, 5000, -3],
}


@pytest.mark.parametrize("name", list(ROUTINGS))
def test_contiguous(harness, name):
    bounds = ROUTINGS[name]
    rows = max(bounds[-1], 1) if name != "out of order" else 100
    n = 600
    table, units = run(harness, False, 0, rows, n, 512, bounds)
    ranges = expected_ranges(bounds, rows)
    assert [tuple(r) for r in table[:-1, :2].tolist()] == ranges
    check_rows_covered(units, ranges, n)
    assert np.all(units[:, 3] == 0) and np.all(units[:, 4] == math.ceil(512 / BK))


@pytest.mark.parametrize("name", ["uniform", "many", "out of order"])
def test_contiguous_m_major_origins(harness, name):
    """An M-major A: tiles start on 8-row (16-byte) boundaries, the rows above the group's first masked."""
    bounds = ROUTINGS[name]
    rows = max(bounds[-1], 1) if name != "out of order" else 100
    _, units = run(harness, False, 0, rows, 600, 512, bounds, align=8)
    check_rows_covered(units, expected_ranges(bounds, rows), 600, align=8)


@pytest.mark.parametrize("name", ["uniform", "empty groups", "many"])
def test_contiguous_clusters(harness, name):
    """Clusters of 2 tile rows of one group: every row covered once, the pair's second tile past the group's end
    (when its rows run out) stores nothing."""
    bounds = ROUTINGS[name]
    rows, n = bounds[-1], 600
    _, units = run(harness, False, 0, rows, n, 512, bounds, align=1, cluster=2)
    ranges = expected_ranges(bounds, rows)
    assert len(units) % 2 == 0
    tiles_n = math.ceil(n / BN)
    want = sum(2 * math.ceil(math.ceil((e - s) / BM) / 2) * tiles_n for s, e in ranges if e > s)
    assert len(units) == want
    pairs = units.reshape(-1, 2, 8)
    assert np.all(pairs[:, 0, 0] == pairs[:, 1, 0]) and np.all(pairs[:, 1, 1] == pairs[:, 0, 1] + BM)
    assert np.all(pairs[:, 0, 2] == pairs[:, 1, 2]), "the blocks of a cluster share w's tile"
    inside = units[units[:, 1] < units[:, 5]]  # tiles with rows to store
    check_rows_covered(inside, ranges, n)


def test_masked_and_batched(harness):
    counts = [0, 1, 128, 129, 300, 256, 999, -4]
    table, units = run(harness, False, 1, 300, 300, 64, counts)
    ranges = [(0, min(max(c, 0), 300)) for c in counts]
    assert [tuple(r) for r in table[:-1, :2].tolist()] == ranges
    check_rows_covered(units, ranges, 300)
    table, units = run(harness, False, 1, 300, 300, 64, None)  # batched: every group all rows
    check_rows_covered(units, [(0, 300)], 300)


def test_groups_along_k(harness):
    bounds = [0, 64, 65, 200, 200, 1000]
    m, n, k = 300, 520, 1000
    table, units = run(harness, True, 0, m, n, k, bounds)
    ranges = expected_ranges(bounds, k)
    steps = np.concatenate([[0], np.cumsum([math.ceil((e - s) / BK) for s, e in ranges])])
    assert table[:, 2].tolist() == steps.tolist()
    tiles = math.ceil(m / BM) * math.ceil(n / BN)
    assert len(units) == len(bounds) * tiles
    for g in range(len(bounds)):
        mine = units[units[:, 0] == g]
        assert len(mine) == tiles and np.all(mine[:, 3] == steps[g]) and np.all(mine[:, 4] == steps[g + 1])
        assert sorted(zip(mine[:, 1].tolist(), mine[:, 2].tolist())) == sorted(
            (i * BM, j * BN) for i in range(math.ceil(m / BM)) for j in range(math.ceil(n / BN)))
        assert np.all(mine[:, 5] == m)

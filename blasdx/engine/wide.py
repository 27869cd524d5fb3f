"""The Hopper engine's f64 and f32 path: host side of kernels/hopper_wide_gemm.cu.

wgmma has no f64 and no plain f32, so on an sm_90 GPU ``bx.matmul`` / ``bx.mma`` run these
types through a sibling of the wgmma engine: the same TMA stage ring, persistent scheduler,
warp specialisation, operand routes and split K, with consumer warps that multiply from
registers (DMMA m16n8k8 for f64, FFMA register tiles for f32; kernels/blasdx/hopper/
wide_gemm.cuh). TMA reads either layout of A and B, so only operands TMA cannot describe
are repacked. Everything per call (maps, scratch, the repack) is :class:`hopper.EnginePlan`'s
machinery; this module adds the tile rule, the source and the launch parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..base import dtypes as _dt
from ..launch import scratch as _scratch
from . import hopper as _hopper
from .hopper import OperandRoute

__all__ = ["SERVED", "SMALL", "WideConfig", "WidePlan", "CONFIGS", "choose_config", "reads", "serves", "route",
           "tune_candidates", "wide_source", "describe_call", "KERNEL_NAME"]

KERNEL_NAME = "blasdx_hopper_wide_gemm"

#: (input, result) type pairs the wide path runs on sm_90.
SERVED = {(_dt.float64, _dt.float64), (_dt.float32, _dt.float32)}
_TYPES = {"float64": "double", "float32": "float"}
_SLOTS = {"float64": "f64", "float32": "f32"}


def serves(a: _dt.DType, c: _dt.DType) -> bool:
    """Whether the wide path runs inputs of type ``a`` with results of type ``c``."""
    return (a, c) in SERVED


@dataclass(frozen=True)
class WideConfig:
    """One tile configuration: block tile, warp tile (8 consumer warps), ring depth, raster group, cluster."""

    bm: int
    bn: int
    wm: int
    wn: int
    stages: int
    group_m: int = 8
    cluster: int = 1  # blocks per cluster along M, sharing B's tile by TMA multicast

    @property
    def threads(self) -> int:
        """The producer warpgroup plus one warp per warp tile."""
        return 128 + 32 * (self.bm // self.wm) * (self.bn // self.wn)

    @staticmethod
    def bk(itemsize: int) -> int:
        """K per stage: one 128-byte swizzle row."""
        return 128 // itemsize

    def shared_memory(self, itemsize: int) -> int:
        """Dynamic shared memory (wide_gemm.cuh): alignment slack, the stages, barriers."""
        return 1024 + self.stages * (self.bm + self.bn) * self.bk(itemsize) * itemsize + _hopper.ring_bytes(self.stages)

    def __str__(self) -> str:
        cluster = f", clusters of {self.cluster}" if self.cluster > 1 else ""
        return (f"{self.bm}x{self.bn} tiles, {self.wm}x{self.wn} per warp, {self.stages} stages, "
                f"group {self.group_m}{cluster}")


# 128 x 128 block tiles (the most accumulators two warpgroups hold: 64 doubles or 64 floats a
# thread), 32 KB stages, 6 deep. f64 warps hold 64 x 32 (four 16-row DMMA slices), f32 warps
# 32 x 64 (8 x 8 per thread).
F64 = WideConfig(128, 128, 64, 32, 6)
F32 = WideConfig(128, 128, 32, 64, 6)
CONFIGS = {"float64": F64, "float32": F32}


# Smaller tiles for products whose 128 x 128 tiles leave most SMs idle even when split (short or
# skinny products; a blocked triangular solve's 128-row leaves and updates, 8 tiles of 128 x 1024 x 128 on
# 132 SMs), each with its estimated speed per SM against 128 x 128: smaller warp tiles multiply fewer
# values per shared-memory read. f32's 64 x 64 tile has 16-row warp tiles, which read a K-major A only.
SMALL = {
    "float64": ((WideConfig(128, 64, 32, 32, 6), 0.85), (WideConfig(64, 128, 32, 32, 6), 0.85),
                (WideConfig(64, 64, 32, 16, 6), 0.65)),
    "float32": ((WideConfig(128, 64, 32, 32, 6), 0.8), (WideConfig(64, 128, 32, 32, 6), 0.8),
                (WideConfig(64, 64, 16, 32, 6), 0.6)),
}
#: Whether the rule may take SMALL's tiles (off: 128 x 128 always, as before them).
SMALL_TILES = True
#: K steps a unit of work costs beyond its own (pipeline fill, the epilogue's stores): short K weighs them.
_UNIT_OVERHEAD_STEPS = 4
#: A split launch counted this much slower (the second kernel adding the splits up).
_SPLIT_COST = 1.1
#: A smaller tile is taken only when its estimate is this many times shorter than the larger one's.
_SMALL_MARGIN = 1.2


class _SplitGeometry:
    """What hopper.split_count reads of a configuration (tile and K step)."""

    def __init__(self, config: WideConfig, itemsize: int) -> None:
        self.bm, self.bn, self.bk = config.bm, config.bn, config.bk(itemsize)


def reads(a: _dt.DType, config: WideConfig, a_k_major: bool, b_k_major: bool) -> bool:
    """Whether ``config``'s warp tiles read these layouts: DMMA's read every layout; an FFMA warp tile of an
    MN-major operand covers whole 32-element panels (kernels/blasdx/hopper/ffma_tile.cuh)."""
    return a == _dt.float64 or ((a_k_major or config.wm % 32 == 0) and (b_k_major or config.wn % 32 == 0))


def _estimate(config: WideConfig, speed: float, itemsize: int, m: int, n: int, k: int, batch: int,
              multiprocessors: int) -> tuple[float, int]:
    """(estimated time in tile-element K steps of 128 x 128 speed, K splits) of ``config`` on this product:
    rounds of units over the SMs times one unit's work."""
    geometry = _SplitGeometry(config, itemsize)
    splits = _hopper.split_count(geometry, m, n, k, batch, multiprocessors)
    units = batch * math.ceil(m / config.bm) * math.ceil(n / config.bn) * splits
    steps = math.ceil(math.ceil(k / geometry.bk) / splits) + _UNIT_OVERHEAD_STEPS
    cost = math.ceil(units / multiprocessors) * config.bm * config.bn * steps / speed
    return cost * (_SPLIT_COST if splits > 1 else 1.0), splits


def choose_config(a: _dt.DType, m: int, n: int, k: int, batch: int, multiprocessors: int,
                  a_k_major: bool = True, b_k_major: bool = True) -> tuple[WideConfig, int]:
    """The tile of the type and the K splits that bring the work up to the SM count: 128 x 128, or a SMALL tile
    that reads these layouts where rounds of 128 x 128 tiles would leave the SMs idle (estimated, _estimate)."""
    best = CONFIGS[a.name]
    best_cost, best_splits = _estimate(best, 1.0, a.size, m, n, k, batch, multiprocessors)
    if SMALL_TILES:
        small = [(*_estimate(config, speed, a.size, m, n, k, batch, multiprocessors), config)
                 for config, speed in SMALL[a.name] if reads(a, config, a_k_major, b_k_major)]
        cost, splits, config = min(small, key=lambda found: found[0])
        if cost * _SMALL_MARGIN < best_cost:
            best, best_splits = config, splits
    return best, best_splits


def tune_candidates(a: _dt.DType) -> dict[str, WideConfig]:
    """bx.tune's candidates on the wide path: the 128 x 128 tile (also 4 stages deep and in clusters of 2) and every
    SMALL tile, by name (blasdx.calls.tune times those whose warp tiles read the call's layouts, with its splits)."""
    base = CONFIGS[a.name]
    found = {"128x128": base, "128x128 4 stages": replace(base, stages=4), "128x128 clusters": replace(base, cluster=2)}
    found.update((f"{config.bm}x{config.bn}", config) for config, _ in SMALL[a.name])
    return found


def route(argument: str, dtype: _dt.DType, ptr: int, k_major: bool, ld: int, outer: int, batch_stride: int,
          batched: bool) -> OperandRoute:
    """hopper.route's TMA rules; either layout is read in place (the consumers read any)."""
    found = _hopper.route(argument, dtype, ptr, True, ld, outer, batch_stride, batched)
    return found if found.repack is not None else OperandRoute(argument, k_major)


def wide_source(a: _dt.DType, config: WideConfig, a_k_major: bool, b_k_major: bool) -> str:
    """kernels/hopper_wide_gemm.cu instantiated for the type, tile and layouts."""
    return "\n".join([
        '#include "blasdx/types.cuh"',
        "struct WideConfig {",
        f"    using type = {_TYPES[a.name]};",
        f"    static constexpr int bm = {config.bm}, bn = {config.bn}, bk = {config.bk(a.size)}, "
        f"wm = {config.wm}, wn = {config.wn};",
        f"    static constexpr int stages = {config.stages}, group_m = {config.group_m}, "
        f"cluster_m = {config.cluster};",
        f"    static constexpr bool a_k_major = {str(a_k_major).lower()}, b_k_major = {str(b_k_major).lower()};",
        f"    static constexpr int host_shared_bytes = {config.shared_memory(a.size)};  // what launches ask for",
        "};",
        '#include "hopper_wide_gemm.cu"',
        "",
    ])


def _params(c: _dt.DType) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Parameter kinds of the GEMM and of the split-K finish (alpha and beta in the result's type)."""
    f = _SLOTS[c.name]
    gemm = ("map", "map", "u64", "u64", "u64", "i32", "i32", "i32", "i32", "i32", "i32", "i32",
            "i64", "i64", "i64", "i64", "i64", "i64", f, f)
    reduce = ("u64", "u64", "u64", "i32", "i32", "i32", "i32", "i64", "i64", "i64", "i64", "i64", "i64", f, f)
    return gemm, reduce


class WidePlan(_hopper.EnginePlan):
    """What every call of one kind runs on the wide path (an EnginePlan with its own kernel and launch)."""

    on_pointers = False  # its kernel's parameters are its own: it runs on views

    def __init__(self, a: _dt.DType, c: _dt.DType, m: int, n: int, k: int, batch: int, route_a: OperandRoute,
                 route_b: OperandRoute, lda: int, ldb: int, batch_a: int, batch_b: int, batch_stride_a: int,
                 batch_stride_b: int, ptr_a: int, ptr_b: int, multiprocessors: int,
                 d_layout: tuple[int, int, int, int] | None = None, config: WideConfig | None = None,
                 splits: int | None = None) -> None:
        """Choose and encode the maps (kernels compile at the first run); ExecutionError when TMA refuses.

        The arguments are EnginePlan's; D is always stored element by element with the
        call's strides, so ``d_layout`` changes nothing here.
        """
        self.a, self.b, self.c = a, a, c  # both operands have the input type
        self.m, self.n, self.k, self.batch = m, n, k, batch
        self.route_a, self.route_b = route_a, route_b
        self.routes_given = (route_a, route_b)  # bx.tune's key
        chosen, chosen_splits = choose_config(a, m, n, k, batch, multiprocessors, route_a.k_major, route_b.k_major)
        if config is None and splits is None:  # a configuration bx.tune kept wins
            config, splits = _tuned(a, c, m, n, k, batch, multiprocessors, route_a, route_b)
        self.config = config or chosen
        self.splits = splits if splits is not None else (chosen_splits if config is None else 1)
        self.splits = _hopper.nonempty_splits(math.ceil(k / self.config.bk(a.size)), self.splits)
        self.multiprocessors = multiprocessors
        bk, cluster = self.config.bk(a.size), self.config.cluster
        self.operand_a = _hopper._operand(route_a, a, m, k, lda, batch_a, batch_stride_a, self.config.bm, bk)
        self.operand_b = _hopper._operand(route_b, a, n, k, ldb, batch_b, batch_stride_b, self.config.bn // cluster,
                                          bk)
        self.tiles = math.ceil(math.ceil(m / self.config.bm) / cluster) * math.ceil(n / self.config.bn)
        self.units = batch * self.splits * self.tiles
        if self.units >= 2**31:
            raise ValueError(f"{self.units} work units exceed the scheduler's 32-bit range")
        self.grid = (cluster * max(1, min(self.units, multiprocessors // cluster)), 1, 1)
        self._grid_checked = cluster == 1
        self.store_d = None
        gemm_params, reduce_params = _params(c)
        self._gemm = _hopper._Kernel(wide_source(a, self.config, route_a.k_major, route_b.k_major), KERNEL_NAME,
                                     _hopper.ARCH, gemm_params, self.config.shared_memory(a.size))
        self._reduce = (_hopper._Kernel(_hopper.reduce_source(c), _hopper.REDUCE_NAME, "sm_90", reduce_params)
                        if self.splits > 1 else None)
        needs_repack = route_a.repack is not None or route_b.repack is not None
        self._repack = (_hopper._Kernel(_hopper.repack_source(a.size), _hopper.REPACK_NAME, "sm_90",
                                        _hopper._REPACK_PARAMS) if needs_repack else None)
        scratch = _hopper._SCRATCH_ALIGNMENT
        self._maps = [
            _hopper._driver.encode_tiled(a.name, ptr if r.repack is None else scratch, op.dims, op.strides, op.box,
                                         _hopper._SWIZZLE)
            for ptr, r, op in ((ptr_a, route_a, self.operand_a), (ptr_b, route_b, self.operand_b))
        ]
        self._scalars: Any = None
        self._mapped = [ptr if r.repack is None else scratch for ptr, r in ((ptr_a, route_a), (ptr_b, route_b))]

    def describe(self) -> str:
        """The path and what it chose: tile, stages, splits, operand routes."""
        return _describe(self.a, self.config, self.splits, self.route_a, self.route_b)

    def run(self, device_id: int, stream_core: Any, stream: int, a: Any, b: Any, c: Any, d: Any, alpha: float,
            beta: float) -> None:
        """D = alpha * A B + beta * C on ``stream``: A, B, C, D are ArrayViews (C None: beta is 0).

        Scratch is the call's, safe in a CUDA graph capture (blasdx.launch.scratch)."""
        if c is None:
            beta = 0.0
        with _scratch.call_scratch(device_id, stream) if self.needs_scratch else _hopper._NO_SCRATCH as scratch:
            a_ptr = self._prepare(a, self.route_a, self.operand_a, self.m, "a", device_id, scratch, stream)
            b_ptr = self._prepare(b, self.route_b, self.operand_b, self.n, "b", device_id, scratch, stream)
            workspace = 0
            if self.splits > 1:
                nbytes = self.c.size * self.splits * self.batch * self.m * self.n
                workspace = scratch.get("wide splits", nbytes)
            c_ptr, c_strides = (0, (0, 0, 0)) if c is None else (c.ptr, _hopper.result_strides(c))
            d_strides = _hopper.result_strides(d)
            d_ptr = d.ptr if self.splits == 1 else 0
            gemm = self._gemm
            with gemm.params.lock:
                self._point_maps(a_ptr, b_ptr, d.ptr)
                scalars = (c_strides, d_strides, alpha, beta)
                if scalars == self._scalars:  # the common case: only the addresses change from call to call
                    gemm.params.set(2, c_ptr)
                    gemm.params.set(3, d_ptr)
                    gemm.params.set(4, workspace)
                else:
                    gemm.fill((None, None, c_ptr, d_ptr, workspace, self.m, self.n, self.k, self.batch,
                               int(self.operand_a.batched), int(self.operand_b.batched), self.splits, *c_strides,
                               *d_strides, alpha, beta))
                    self._scalars = scalars
                if not self._grid_checked:
                    self._fit_grid(device_id)
                gemm.launch(device_id, self.grid, (self.config.threads, 1, 1), stream, self.config.cluster)
            if self.splits > 1:
                _hopper.reduce_splits(self._reduce, device_id, stream, workspace, self.splits, c_ptr, c_strides,
                                      d.ptr, d_strides, self.m, self.n, self.batch, self.multiprocessors, alpha, beta)

    def _point_maps(self, a_ptr: int, b_ptr: int, d_ptr: int) -> None:
        """Point A's and B's maps at this call's operands (a driver call only on change); D has no map."""
        _hopper.point_maps(self._gemm.params, self._maps, self._mapped, (a_ptr, b_ptr))


def _tuned(a: _dt.DType, c: _dt.DType, m: int, n: int, k: int, batch: int, multiprocessors: int,
           route_a: OperandRoute, route_b: OperandRoute) -> tuple[WideConfig | None, int | None]:
    """The configuration and splits bx.tune kept for this kind of call, or (None, None): none kept, or one of another
    version's fields or that does not read these layouts."""
    from .tuning import TUNED, key_of

    tuned = TUNED.get(key_of(a, a, c, m, n, k, batch, multiprocessors, route_a, route_b, 0))
    if tuned is None:
        return None, None
    try:
        config = WideConfig(**tuned[0])
    except TypeError:
        return None, None
    return (config, tuned[1]) if reads(a, config, route_a.k_major, route_b.k_major) else (None, None)


def _describe(a: _dt.DType, config: WideConfig, splits: int, route_a: OperandRoute, route_b: OperandRoute) -> str:
    unit = "DMMA" if a == _dt.float64 else "FFMA"
    text = f"hopper {unit}+TMA, {config}, {splits} K split{'s' if splits > 1 else ''}, D by direct stores"
    for r in (route_a, route_b):
        layout = "K-major" if r.k_major else "MN-major"
        text += f", {r.argument} {layout}" + (f" (repacked: {r.repack})" if r.repack else "")
    return text


def describe_call(a: _dt.DType, c: _dt.DType, m: int, n: int, k: int, batch: int = 1, a_row_major: bool = True,
                  b_row_major: bool = True, multiprocessors: int = 132) -> str:
    """What the wide path runs for contiguous operands of these types, shape and layouts (no GPU needed)."""
    if not serves(a, c):
        raise ValueError(f"the wide path runs {', '.join(f'{x.name} -> {y.name}' for x, y in sorted(SERVED, key=str))}"
                         f"; not {a.name} -> {c.name}")
    aligned = _hopper._SCRATCH_ALIGNMENT
    route_a = route("x", a, aligned, a_row_major, k if a_row_major else m, m if a_row_major else k, m * k, batch > 1)
    route_b = route("y", a, aligned, not b_row_major, n if b_row_major else k, k if b_row_major else n, k * n,
                    batch > 1)
    config, splits = choose_config(a, m, n, k, batch, multiprocessors, route_a.k_major, route_b.k_major)
    return _describe(a, config, splits, route_a, route_b)


def sweep_configs(a: _dt.DType) -> dict[str, WideConfig]:
    """Variants of the type's configuration for benchmarks/matmul.py --engine-sweep."""
    base = CONFIGS[a.name]
    configs = {"default": base, "4 stages": replace(base, stages=4), "clusters of 2": replace(base, cluster=2),
               "group 16": replace(base, group_m=16)}
    if a == _dt.float32:  # f64's 32 x 64 warp tile needs more fragment registers than it has
        configs["warp tile 64x32"] = replace(base, wm=64, wn=32)
    return configs

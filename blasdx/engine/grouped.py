"""The grouped GEMM of the Hopper engine: many products of one N and K and varying M in one launch.

kernels/hopper_grouped_gemm.cu runs the engine's warp-specialised wgmma pipeline
(kernels/blasdx/hopper/gemm.cuh) under a grouped tile scheduler
(kernels/blasdx/hopper/group_scheduler.cuh): every block of the persistent grid reads the
groups' row ranges from the device (offsets or counts), builds a table of their tile rows in
shared memory and walks all groups' tiles, so the group sizes can change between the
replays of a CUDA graph and no host synchronisation is needed. This module chooses the tile
configuration, writes the kernel's prelude, encodes the tensor maps and launches
(:class:`GroupedPlan`); blasdx.calls.grouped_mm checks the arguments.

Layouts (``layout``): "contiguous" (A is [total, K], group g's rows [offs[g - 1], offs[g])),
"masked" (A is [G, max_m, K], group g's first counts[g] rows; no counts: all of them) and
"along_k" (A is [M, total_k], B [total_k, N], group g's K range [offs[g - 1], offs[g]); both are
first copied with each group's K range padded to whole K steps by kernels/grouped_pad.cu, so
that no K step of the GEMM mixes two groups).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ..base import dtypes as _dt
from ..compile.compiled import Forward
from ..base.errors import ExecutionError
from ..launch import cuda_driver as _driver
from . import hopper as _hopper

__all__ = [
    "KERNEL_NAME",
    "LAYOUTS",
    "SCALINGS",
    "SERVED",
    "SHARED_LIMIT",
    "GroupedPlan",
    "choose_config",
    "grouped_source",
    "table_bytes",
]

KERNEL_NAME = "blasdx_hopper_grouped_gemm"
#: Shared memory a Hopper block can have (bytes): the GEMM's stages plus the group table.
SHARED_LIMIT = 232448
#: The A layouts and their codes in group_scheduler.cuh (GroupLayout).
LAYOUTS = {"contiguous": 0, "masked": 1, "along_k": 0}
#: How a scale covers its operand (scaling.cuh's codes; "none": no factor).
SCALINGS = {"none": 0, "row": 1, "column": 1, "block": 2}
_FP8 = (_dt.float8_e4m3, _dt.float8_e5m2)
_SIXTEEN = (_dt.float16, _dt.bfloat16)
_RESULTS = (_dt.float16, _dt.bfloat16, _dt.float32)
#: Input types and the result types each takes (8-bit inputs may mix e4m3 and e5m2).
SERVED = {a: _RESULTS for a in (*_SIXTEEN, *_FP8)}
_PARAMS = ("map", "map", "map", "u64", "u64", "i32", "i32", "i32", "i32", "i32", "i32", "i32", "i32", "i64", "i64", "i64", "u64",
           "i64", "i64", "i64", "u64", "i64", "i64", "i64")
PAD_NAME = "blasdx_grouped_pad"
_PAD_PARAMS = ("u64", "u64", "u64", "i32", "i32", "i32", "i64", "i64", "i64", "i32")


def table_bytes(groups: int) -> int:
    """Shared memory of group_scheduler.cuh's GroupTable (start, end, first) for ``groups`` groups, 16-byte
    rounded."""
    return -(-4 * (3 * groups + 1) // 16) * 16


def choose_config(a: _dt.DType, rows_per_group: float) -> _hopper.EngineConfig:
    """The tile configuration for groups of about ``rows_per_group`` rows.

    Groups of at most 64 rows (decode) take `narrow` 64 x 256 tiles; larger ones the tiles the
    single GEMM takes at its size: `wide` 128 x 256 (fp8: promotion every 128 K; 16-bit: wide beat
    ping-pong on DeepSeek-V3, Qwen3 and Mixtral shapes with the staged store). No clusters: vertically adjacent tiles may belong to groups with
    different w (a configuration given with clusters pairs tile rows of one group only).
    """
    if rows_per_group <= 64:
        base = _hopper.NARROW
    else:  # measured with the staged store (H200, bf16): wide 455 / 466 / 667 against ping-pong 453 / 461 / 617
        base = _hopper.WIDE
    return replace(base, bk=128 // a.size, promotion=_hopper.PROMOTION if a in _FP8 else 0)


def grouped_source(a: _dt.DType, b: _dt.DType, c: _dt.DType, config: _hopper.EngineConfig, a_k_major: bool,
                   b_k_major: bool, x_scaling: str = "none", y_scaling: str = "none", along_k: bool = False,
                   store_by_tma: bool = False) -> str:
    """kernels/hopper_grouped_gemm.cu instantiated for the types, layouts, tile and scalings (``along_k``: the
    K-grouped scheduler; ``store_by_tma``: whole tiles stored through D's tensor map)."""
    scheduler = "KGroupScheduler" if along_k else "GroupScheduler"
    return "\n".join([
        *_hopper.type_headers(a, b),
        '#include "blasdx/hopper/group_scheduler.cuh"',
        "struct GroupedConfig {",
        *_hopper.config_members(a, b, config, a_k_major, b_k_major),
        f"    using c_type = {_hopper._STORAGE_TYPES[c.name]};",
        f"    using scheduler = blasdx::hopper::{scheduler}<bm, bn, bk, group_m, cluster_m>;",
        f"    static constexpr int x_scaling = {SCALINGS[x_scaling]}, y_scaling = {SCALINGS[y_scaling]};",
        f"    static constexpr bool store_by_tma = {str(store_by_tma).lower()};",
        "};",
        '#include "hopper_grouped_gemm.cu"',
        "",
    ])


def pad_source(itemsize: int, step: int) -> str:
    """kernels/grouped_pad.cu for elements of ``itemsize`` bytes and K steps of ``step`` elements."""
    return f"using pad_type = {_hopper._UNSIGNED[itemsize]};\n#define PAD_STEP {step}\n#include \"grouped_pad.cu\"\n"


def padded_k(k: int, groups: int, step: int) -> int:
    """K extent of the padded copies: every group's K range rounded up to whole steps fits in it."""
    return (math.ceil(k / step) + groups) * step


class GroupedPlan:
    """What every grouped call of one kind (types, layouts, shapes, strides, device) runs.

    ``rows`` is A's row extent (contiguous: total rows; masked: max_m), ``groups`` the group
    count, ``n`` / ``k`` the products' N and K. ``a_geometry`` / ``b_geometry`` are
    (ld, batch_stride) in elements: A's row (or column, M-major) stride and, masked, its group
    stride; B's stride between N (or K) lines and between groups. ``route_a`` / ``route_b`` are
    the operands' routes (blasdx.engine.hopper.route); one that TMA or the instruction cannot
    read in place is copied K-major at every call (:meth:`operand_address`). ``x_scaling`` / ``y_scaling``: "none", "row" / "column" or "block".
    """

    def __init__(self, a: _dt.DType, b: _dt.DType, c: _dt.DType, layout: str, groups: int, rows: int, n: int,
                 k: int, route_a: _hopper.OperandRoute, route_b: _hopper.OperandRoute,
                 a_geometry: tuple[int, int], b_geometry: tuple[int, int], ptr_a: int, ptr_b: int,
                 multiprocessors: int, x_scaling: str = "none", y_scaling: str = "none",
                 config: _hopper.EngineConfig | None = None, rows_per_group: float | None = None,
                 d_layout: tuple[int, int, int, int] | None = None, store_by_tma: bool = False) -> None:
        if k == 0:  # nothing is loaded: maps of one K-major column of 16-byte rows stand in for the operands
            route_a, route_b = _hopper.OperandRoute("x", True), _hopper.OperandRoute("w", True)
            a_geometry, b_geometry = (16 // a.size, rows * 16 // a.size), (16 // b.size, n * 16 // b.size)
        self.a, self.b, self.c = a, b, c
        self.layout, self.groups, self.rows, self.n, self.k = layout, groups, rows, n, k
        self.route_a, self.route_b = route_a, route_b
        self.x_scaling, self.y_scaling = x_scaling, y_scaling
        if rows_per_group is None:
            rows_per_group = rows / max(groups, 1) if layout == "contiguous" else rows
        self.config = config or choose_config(a, rows_per_group)
        if "block" in (x_scaling, y_scaling) and not self.config.promotion:
            raise ValueError("block scales are applied at promotion: they need a configuration that promotes")
        overlap = self.config.overlap_problem()
        if overlap is not None:
            raise ValueError(overlap)
        self.multiprocessors = multiprocessors
        masked, along_k = layout == "masked", layout == "along_k"
        self.store_d = self._store_geometry(d_layout) if store_by_tma else None
        staged = self.store_d is not None
        if staged and config is None:  # the staging buffers and the table beside the stages: fewer stages if need be
            while self.config.stages > 2 and (self.config.shared_memory(a.size, True) + table_bytes(groups)
                                              > SHARED_LIMIT):
                self.config = replace(self.config, stages=self.config.stages - 1)
        gemm_bytes = self.config.shared_memory(a.size, staged)
        if gemm_bytes + table_bytes(groups) > SHARED_LIMIT:
            most = (SHARED_LIMIT - gemm_bytes) // 12 - 1
            raise ExecutionError(f"{groups} groups: the group table and the {self.config} tiles' stages take more than "
                                 f"the {SHARED_LIMIT} bytes of shared memory a block has; one launch takes at most "
                                 f"{most} groups of these tiles")
        bk = self.config.bk
        kk = max(k, 1)  # K = 0: a map of one (never loaded) column; every group's result is zeros
        # an M-major A in the contiguous layout: TMA boxes start on 16-byte aligned rows (the inner coordinate)
        self.row_align = 16 // a.size if layout == "contiguous" and not route_a.k_major else 1
        self._pad = self._repack = None
        if not along_k and (route_a.repack is not None or route_b.repack is not None):
            self._repack = _hopper._Kernel(_hopper.repack_source(a.size), _hopper.REPACK_NAME, "sm_90",
                                           _hopper._REPACK_PARAMS)
        if along_k:  # both operands come from K-major padded copies
            if a.size != 2:
                raise ExecutionError(f"x: the 2D x 2D form (groups along K) takes 16-bit inputs, not {a.name}")
            self.k_padded = kk = padded_k(k, groups, bk)
            route_a, route_b = _hopper.OperandRoute("x", True), _hopper.OperandRoute("w", True)
            self.route_a, self.route_b = route_a, route_b
            a_geometry, b_geometry = (kk, 0), (kk, 0)
            self._pad = _hopper._Kernel(pad_source(a.size, bk), PAD_NAME, "sm_90", _PAD_PARAMS, table_bytes(groups))
        self.operand_a = _hopper._operand(route_a, a, rows, kk, a_geometry[0], groups if masked else 1,
                                          a_geometry[1], self.config.bm, bk)
        cluster = self.config.cluster
        if cluster > 1 and along_k:
            raise ValueError("groups along K run without clusters")
        self.operand_b = _hopper._operand(route_b, b, n, kk, b_geometry[0], 1 if along_k else groups, b_geometry[1],
                                          self.config.bn // cluster, bk)
        # an upper bound of the units: every group's rows plus two partial tile rows each (its first may start above)
        tile_rows = ((math.ceil(rows / self.config.bm) + 2 * groups) if layout == "contiguous" else
                     groups * math.ceil(rows / self.config.bm))
        units = math.ceil(tile_rows / cluster) + (groups if cluster > 1 else 0)  # of clusters
        units *= math.ceil(n / self.config.bn)
        # clusters: as many as run at once, read off the device at the first run (an SM's pair may be missing)
        self.grid = (cluster * max(1, min(units, multiprocessors // cluster)), 1, 1)
        self._grid_checked = cluster == 1
        source = grouped_source(a, b, c, self.config, route_a.k_major, route_b.k_major, x_scaling, y_scaling, along_k,
                                staged)
        self._gemm = _hopper._Kernel(source, KERNEL_NAME, _hopper.ARCH, _PARAMS, gemm_bytes + table_bytes(groups))
        # no operand yet where it is a copy (scratch, known at the first call) or K = 0
        placeholder = not k or along_k
        self._mapped = [_hopper._SCRATCH_ALIGNMENT if placeholder or route_a.repack else ptr_a,
                        _hopper._SCRATCH_ALIGNMENT if placeholder or route_b.repack else ptr_b]
        self._maps = [_driver.encode_tiled(t.name, ptr, op.dims, op.strides, op.box, _hopper._SWIZZLE)
                      for t, ptr, op in ((a, self._mapped[0], self.operand_a), (b, self._mapped[1], self.operand_b))]
        if staged:
            ptr_d = (d_layout[3] if d_layout is not None else 0) or _hopper._SCRATCH_ALIGNMENT  # a new result: later
            op = self.store_d
            self._maps.append(_driver.encode_tiled(c.name, ptr_d, op.dims, op.strides, op.box, _hopper._SWIZZLE))
            self._mapped.append(ptr_d)

    def _store_geometry(self, d_layout: tuple[int, int, int, int] | None) -> Any:
        """D's tensor map geometry for the staged store, or None when TMA cannot write D (not row-major, rows or
        problems not on 16 bytes). ``d_layout``: D's (row, column, group) element strides and address (None: a
        new C-contiguous result)."""
        per_group = self.layout != "contiguous" and self.groups > 1
        if d_layout is None:
            d_layout = (self.n, 1, self.rows * self.n if per_group else 0, 0)
        return _hopper._store_geometry(self.c, self.rows, self.n, self.groups if per_group else 1,
                                       d_layout if per_group else (*d_layout[:2], 0, d_layout[3]))

    compiled = Forward[Any]("_gemm", "The grouped GEMM's CompiledKernel (SASS, registers, spills).")
    source = Forward[str]("_gemm", "The grouped GEMM's CUDA C++ source.")

    def describe(self) -> str:
        """The path and what it chose: tile, layouts, scales."""
        text = f"hopper grouped wgmma+TMA, {self.layout} groups, {self.config}"
        text += ", whole tiles of D by TMA" if self.store_d is not None else ", D by direct stores"
        for r in (self.route_a, self.route_b):
            text += f", {r.argument} {'K-major' if r.k_major else 'MN-major'}"
            text += f" (repacked: {r.repack})" if r.repack else ""
        if self.x_scaling != "none" or self.y_scaling != "none":
            text += f", scales: x per {self.x_scaling}, w per {self.y_scaling}"
        return text

    def __repr__(self) -> str:
        return f"GroupedPlan({self.describe()})"

    @property
    def needs_scratch(self) -> bool:
        """Whether a call copies an operand into scratch memory (a repacked operand, or the K-padded copies)."""
        return self._repack is not None or self._pad is not None

    def operand_address(self, device_id: int, stream: int, slot: str, view: Any, scratch: Any = None) -> int:
        """The address TMA reads operand ``slot`` ("x" or "w") from: the array itself, or its K-major copy
        (kernels/repack.cu, every call, into ``scratch``: blasdx.launch.scratch's call scratch) where its route says
        TMA or the instruction cannot read it in place."""
        x = slot == "x"
        route_, op = (self.route_a, self.operand_a) if x else (self.route_b, self.operand_b)
        if route_.repack is None or not self.k:
            return view.ptr
        size, rows, problems = (self.a if x else self.b).size, self.rows if x else self.n, op.dims[2]
        target = scratch.get(f"grouped {slot}", op.strides[1] * problems)
        shape, strides = tuple(view.shape), tuple(view.strides)
        # the copy's rows are M (x [.., M, K]) or N (w [G, K, N]) and run along K
        src_row, src_col = (strides[-2], strides[-1]) if x else (strides[-1], strides[-2])
        src_batch = strides[0] if len(shape) == 3 and shape[0] > 1 else 0
        grid = (math.ceil(self.k / 32), math.ceil(rows / 32), min(problems, 65535))
        with self._repack.params.lock:
            self._repack.fill((view.ptr, target, rows, self.k, src_row, src_col, src_batch, op.strides[0] // size,
                               op.strides[1] // size, problems))
            self._repack.launch(device_id, grid, (32, 8, 1), stream)
        return target

    def run(self, device_id: int, stream: int, a_ptr: int, b_ptr: int, bounds_ptr: int, d_ptr: int,
            d_strides: tuple[int, int, int], sx: tuple[int, int, int, int] = (0, 0, 0, 0),
            sy: tuple[int, int, int, int] = (0, 0, 0, 0)) -> None:
        """Launch on ``stream``: D's (row, column, group) element strides; scales as (address, row, column,
        group) element strides (contiguous x: group stride 0); ``bounds_ptr`` offs or counts (0: none)."""
        gemm = self._gemm
        with gemm.params.lock:
            self._point_maps(a_ptr, b_ptr, d_ptr)
            gemm.fill((None, None, None, d_ptr, bounds_ptr, LAYOUTS[self.layout], self.row_align, self.groups,
                       self.rows, self.n, self.k,
                       int(self.operand_a.batched), int(self.operand_b.batched), *d_strides, *sx, *sy))
            if not self._grid_checked:
                self._fit_grid(device_id)
            gemm.launch(device_id, self.grid, (self.config.threads, 1, 1), stream, self.config.cluster)

    def run_along_k(self, device_id: int, stream: int, x: tuple[int, int, int], w: tuple[int, int, int],
                    offs_ptr: int, d_ptr: int, d_strides: tuple[int, int, int], scratch: Any) -> None:
        """The 2D x 2D form: x and w as (address, K stride, other stride) in elements, copied with each group's K
        range padded to whole steps (kernels/grouped_pad.cu) into ``scratch`` (the call's), then the K-grouped GEMM
        into D [G, M, N]."""
        size, kp = self.a.size, self.k_padded
        copies = []
        for slot, (ptr, k_stride, o_stride), other in (("grouped x", x, self.rows), ("grouped w", w, self.n)):
            target = scratch.get(slot, max(other, 1) * kp * size)
            tiles = math.ceil(kp / 32) * math.ceil(other / 32)
            with self._pad.params.lock:
                self._pad.fill((ptr, target, offs_ptr, self.groups, self.k, other, k_stride, o_stride, kp, kp))
                self._pad.launch(device_id, (max(1, min(tiles, 4 * self.multiprocessors)), 1, 1), (256, 1, 1), stream)
            copies.append(target)
        gemm = self._gemm
        with gemm.params.lock:
            self._point_maps(*copies, d_ptr)
            gemm.fill((None, None, None, d_ptr, offs_ptr, LAYOUTS[self.layout], 1, self.groups, self.rows, self.n,
                       self.k,
                       0, 0, *d_strides, 0, 0, 0, 0, 0, 0, 0, 0))
            if not self._grid_checked:
                self._fit_grid(device_id)
            gemm.launch(device_id, self.grid, (self.config.threads, 1, 1), stream, self.config.cluster)

    def _fit_grid(self, device_id: int) -> None:
        """A persistent grid of clusters no larger than the device runs at once."""
        cluster = self.config.cluster
        fits = _driver.max_active_clusters(self._gemm.function(device_id), (self.config.threads, 1, 1),
                                           self._gemm.shared_memory, cluster)
        if fits:
            self.grid = (cluster * max(1, min(self.grid[0] // cluster, fits)), 1, 1)
        self._grid_checked = True

    def _point_maps(self, a_ptr: int, b_ptr: int, d_ptr: int) -> None:
        """Point the tensor maps at this call's operands (a driver call only on change); without the staged
        store, D's parameter takes A's map (the kernel does not read it)."""
        if not self.k and self.layout != "along_k":
            a_ptr = b_ptr = _hopper._SCRATCH_ALIGNMENT
        maps, params = self._maps, self._gemm.params
        if _hopper.point_maps(params, maps, self._mapped, (a_ptr, b_ptr, d_ptr)[:len(maps)]):
            params.set_map(2, maps[2] if len(maps) > 2 else maps[0])

"""The Hopper engine as a type for your own kernels: a device-level GEMM with your epilogue.

``bx.DeviceGemm(a, c, ...)`` describes the engine's pipeline (types, A/B layouts, tile
configuration) the way a descriptor describes a block-level GEMM. Named in
``bx.compile_kernel(source, name, gemms={"LINEAR": dg})`` it puts ``LINEAR`` in scope::

    LINEAR::gemm            blasdx::hopper::DeviceGemm<...>: Sched, run(smem, &map_a, &map_b,
                            sched, batched_a, batched_b, tile_epilogue)
    LINEAR::a_type, b_type, c_type, threads, shared_memory

and your kernel runs the whole persistent, warp-specialised GEMM with its own epilogue
(kernels/blasdx/hopper/epilogue.cuh: ``StageThroughShared<c_type, F>`` with your
``F::value(work, row, col, v0, v1)``, or ``StoreEachPair<F>`` with your own stores).
On the host, :meth:`DeviceGemm.tensor_map_a` / ``_b`` / ``_d`` build the kernel's tensor
map arguments from arrays, and :meth:`DeviceGemm.grid` the persistent grid.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ..base import dtypes as _dt
from ..arrays import as_array
from ..describe.operators import Layout, col_major, row_major
from ..base.errors import DescriptorError, ExecutionError
from ..launch import cuda_driver as _driver
from . import hopper as _hopper

__all__ = ["DeviceGemm"]

_INPUTS = (_dt.float16, _dt.bfloat16, _dt.tfloat32, _dt.float8_e4m3, _dt.float8_e5m2, _dt.int8, _dt.uint8)
_RESULTS = (_dt.float16, _dt.bfloat16, _dt.float32)
_INT_RESULTS = (_dt.int32,)
_STORAGE = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "int32": "int"}


@dataclass(frozen=True)
class DeviceGemm:
    """A device-level GEMM of the Hopper engine (sm_90a) for fused kernels.

    Args:
        a: input type of A (and of B unless ``b`` says otherwise): float16, bfloat16 or tfloat32
            (f32 accumulation), float8_e4m3 / float8_e5m2 (f32, promoted: see ``fast_accumulation``),
            int8 / uint8 (int32 accumulation).
        c: the type D is stored in by the TMA-store epilogue: float16, bfloat16 or float32; int32
            for 8-bit integer inputs (the accumulator's values are int then).
        a_layout / b_layout: row_major or col_major; tf32 and 8-bit types need row-major A and
            column-major B (their wgmma reads K-major operands only).
        config: the engine's tile configuration (default: the 128 x 256 tile of large products;
            :meth:`for_problem` applies the engine's rule to a problem size). For fp8 its
            ``promotion`` (32, 64 or 128 K elements) is kept when set.
        b: B's type when it differs from A's: another 8-bit type of the same kind (e4m3 x e5m2,
            int8 x uint8).
        fast_accumulation: fp8 only: leave the whole K sum in the tensor core instead of
            promoting it into f32 registers every 128 K elements (hopper.PROMOTION).
    """

    a: _dt.DType
    c: _dt.DType = _dt.float32
    a_layout: Layout = row_major
    b_layout: Layout = row_major
    config: _hopper.EngineConfig = _hopper.WIDE
    b: _dt.DType | None = None
    fast_accumulation: bool = False

    def __post_init__(self) -> None:
        a, c = _dt.as_dtype(self.a), _dt.as_dtype(self.c)
        b = a if self.b is None else _dt.as_dtype(self.b, argument="b")
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)
        object.__setattr__(self, "c", c)
        if a not in _INPUTS:
            raise DescriptorError(f"a: the engine takes {', '.join(d.name for d in _INPUTS)} inputs, not {a.name}")
        results = _INT_RESULTS if a.integral else _RESULTS
        if c not in results:
            raise DescriptorError(f"c: D of {a.name} inputs is stored as {', '.join(d.name for d in results)}, not "
                                  f"{c.name}")
        if b != a and (a.size != 1 or b.size != 1 or a.integral != b.integral):
            raise DescriptorError(f"b: {b.name} does not pair with a: {a.name}; only 8-bit types of one kind mix "
                                  "(float8_e4m3 with float8_e5m2, int8 with uint8)")
        if not isinstance(self.fast_accumulation, bool) or (self.fast_accumulation and a.integral) or (
                self.fast_accumulation and a.size != 1):
            raise DescriptorError(f"fast_accumulation: True or False, and True for fp8 inputs only; got "
                                  f"{self.fast_accumulation!r} with {a.name}")
        for name in ("a_layout", "b_layout"):
            if not isinstance(getattr(self, name), Layout):
                raise DescriptorError(f"{name}: expected bx.row_major or bx.col_major, got {getattr(self, name)!r}")
        if a.size != 2 and (self.a_layout is not row_major or self.b_layout is not col_major):
            raise DescriptorError(
                f"a_layout / b_layout: {a.name} wgmma reads K-major operands only: row-major A and column-major B"
            )
        if not isinstance(self.config, _hopper.EngineConfig):
            raise DescriptorError(f"config: expected a blasdx.engine.hopper.EngineConfig, got {self.config!r}")
        promotion = self.config.promotion or _hopper.promotion_of(a, self.fast_accumulation)
        if self.fast_accumulation or a not in _hopper._FP8:
            promotion = 0
        if promotion not in (0, *_hopper.PROMOTION_INTERVALS):
            raise DescriptorError(f"config: promotion every {promotion} K elements; the engine promotes every "
                                  f"{', '.join(map(str, _hopper.PROMOTION_INTERVALS))}")
        object.__setattr__(self, "config", dataclasses.replace(self.config, bk=128 // a.size, promotion=promotion))

    @classmethod
    def for_problem(cls, a: Any, c: Any, m: int, n: int, k: int, *, a_layout: Layout = row_major,
                    b_layout: Layout = row_major, multiprocessors: int = 132, b: Any = None,
                    fast_accumulation: bool = False) -> DeviceGemm:
        """The configuration the engine's rule picks for an M x N x K product (without K splits)."""
        a = _dt.as_dtype(a)
        promotion = _hopper.promotion_of(a, fast_accumulation is True)
        config, _ = _hopper.choose_config(a, m, n, k, 1, multiprocessors, promotion=promotion)
        config = _hopper.b_panels_fit(config, b_layout is col_major)
        return cls(a, c, a_layout, b_layout, config, b, fast_accumulation)

    # -- traits ---------------------------------------------------------------------------------

    sm = 90
    arch = _hopper.ARCH

    @property
    def a_k_major(self) -> bool:
        return self.a_layout is row_major

    @property
    def b_k_major(self) -> bool:
        return self.b_layout is col_major

    @property
    def cluster(self) -> int:
        """Blocks per cluster (the launch groups the grid's blocks along x by this)."""
        return self.config.cluster

    @property
    def threads(self) -> int:
        """Threads per block: one producer warpgroup and the consumers."""
        return self.config.threads

    @property
    def block_dim(self) -> tuple[int, int, int]:
        return (self.threads, 1, 1)

    @property
    def max_threads_per_block(self) -> int:
        return self.threads

    @property
    def shared_memory(self) -> int:
        """Dynamic shared memory of a block with the TMA-store epilogue (enough for StoreEachPair too)."""
        return self.config.shared_memory(self.a.size, staged_store=True)

    # The names the fusion layer reads off every GEMM type (a descriptor's traits of the same meaning).
    shared_memory_size = shared_memory
    is_complex = False

    @property
    def a_value_type(self) -> _dt.DType:
        return self.a

    @property
    def b_value_type(self) -> _dt.DType:
        return self.b

    @property
    def c_value_type(self) -> _dt.DType:
        return self.c

    @property
    def scalar_type(self) -> _dt.DType:
        """The accumulator's (and the epilogue's values') type: int32 for 8-bit integers, else float32."""
        return _dt.int32 if self.a.integral else _dt.float32

    accumulator_type = scalar_type

    def __repr__(self) -> str:
        types = self.a.name if self.b == self.a else f"{self.a.name} x {self.b.name}"
        return (f"DeviceGemm({types} -> {self.c.name}, A {self.a_layout.value}, B {self.b_layout.value}, "
                f"{self.config})")

    # -- C++ ------------------------------------------------------------------------------------

    def prelude(self, name: str) -> str:
        """``struct <name>`` with the engine type and traits (and the config struct it instantiates)."""
        return "\n".join([
            f"struct {name}_config {{",
            *_hopper.config_members(self.a, self.b, self.config, self.a_k_major, self.b_k_major),
            f"    using acc_type = {_hopper.accumulator_type(self.c)};",
            "};",
            f"struct {name} {{",
            f"    using gemm = blasdx::hopper::DeviceGemm<{name}_config>;",
            f"    using a_type = {_hopper._STORAGE_TYPES[self.a.name]};",
            f"    using b_type = {_hopper._STORAGE_TYPES[self.b.name]};",
            f"    using c_type = {_STORAGE[self.c.name]};",
            f"    static constexpr int threads = {self.threads};",
            f"    static constexpr int shared_memory = {self.shared_memory};",
            "};",
            f"static_assert({name}::gemm::shared_bytes<blasdx::hopper::StageThroughShared<{name}::c_type, "
            f"blasdx::hopper::StoreEachPair<int>>>() <= {name}::shared_memory, \"blasdx: {name}'s shared memory "
            "differs between Python and C++\");",
        ])

    # -- host side ------------------------------------------------------------------------------

    def grid(self, m: int, n: int, batch: int = 1, multiprocessors: int | None = None) -> int:
        """Blocks of the persistent grid for an M x N result with ``batch`` problems."""
        if multiprocessors is None:
            from cuda.core import Device

            multiprocessors = int(Device().properties.multiprocessor_count)
        cluster = self.config.cluster
        tiles = batch * math.ceil(math.ceil(m / self.config.bm) / cluster) * math.ceil(n / self.config.bn)
        return cluster * max(1, min(tiles, multiprocessors // cluster))

    def tensor_map_a(self, array: Any) -> _driver.TensorMap:
        """The tensor map of A ([M, K] or [batch, M, K], this GEMM's layout) for ``run``'s map_a."""
        view = self._view(array, "a", self.a, self.a_layout)
        rows, k = view.shape[-2:]
        return self._encode(view, "a", rows, k, self.a_k_major, self.config.bm, self.a_layout)

    def tensor_map_b(self, array: Any) -> _driver.TensorMap:
        """The tensor map of B ([K, N] or [batch, K, N], this GEMM's layout) for ``run``'s map_b."""
        view = self._view(array, "b", self.b, self.b_layout)
        k, cols = view.shape[-2:]
        return self._encode(view, "b", cols, k, self.b_k_major, self.config.bn // self.config.cluster, self.b_layout,
                            self.b)

    def tensor_map_d(self, array: Any) -> _driver.TensorMap:
        """The tensor map of a row-major D ([M, N] or [batch, M, N], type c) for StageThroughShared."""
        view = self._view(array, "d", self.c, row_major)
        m, n = view.shape[-2:]
        batch = view.shape[0] if len(view.shape) == 3 else 1
        rs, cs, bs = _hopper.result_strides(view)
        geometry = _hopper._store_geometry(self.c, m, n, batch, (rs, cs, bs, view.ptr))
        if geometry is None:
            raise ExecutionError(
                f"d: TMA stores need a 16-byte aligned address, rows (and problems) of whole 16 bytes and N "
                f"elements of whole 16 bytes (a store past N writes the rest of its 16 bytes); got address "
                f"{view.ptr:#x}, row stride {rs} x {self.c.size} bytes, N = {n} x {self.c.size} bytes"
            )
        return _driver.encode_tiled(self.c.name, view.ptr, geometry.dims, geometry.strides, geometry.box, 128)

    def _view(self, array: Any, argument: str, dtype: _dt.DType, layout: Layout) -> Any:
        view = as_array(array, argument)
        if view.dtype.name != dtype.name and not (dtype == _dt.tfloat32 and view.dtype == _dt.float32):
            raise ExecutionError(f"{argument}: expected {dtype.name} elements, got {view.dtype.name}")
        if len(view.shape) not in (2, 3):
            raise ExecutionError(f"{argument}: expected [rows, cols] or [batch, rows, cols], got {tuple(view.shape)}")
        unit = view.strides[-1] if layout is row_major else view.strides[-2]
        if unit != 1 and view.shape[-1 if layout is row_major else -2] > 1:
            raise ExecutionError(f"{argument}: expected a {layout.value} array, got strides {tuple(view.strides)}")
        return view._replace(dtype=dtype)

    def _encode(self, view: Any, argument: str, rows: int, k: int, k_major: bool, tile_rows: int,
                layout: Layout, dtype: _dt.DType | None = None) -> Any:
        dtype = self.a if dtype is None else dtype
        batch = view.shape[0] if len(view.shape) == 3 else 1
        ld = view.strides[-2] if layout is row_major else view.strides[-1]
        bs = view.strides[0] if batch > 1 else 0
        r = _hopper.route(argument, dtype, view.ptr, k_major, ld, rows if k_major else k, bs, batch > 1)
        if r.repack is not None:
            raise ExecutionError(f"{argument}: {r.repack}; pass a copy that TMA can read")
        op = _hopper._operand(r, dtype, rows, k, ld, batch, bs, tile_rows, self.config.bk)
        return _driver.encode_tiled(dtype.name, view.ptr, op.dims, op.strides, op.box, 128)

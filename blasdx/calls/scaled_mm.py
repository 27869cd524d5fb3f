"""``bx.scaled_mm``: fp8 matrix products with dequantization scales, on the Hopper engine.

``scaled_mm(x, y, scale_x, scale_y)`` returns ``(x * sx) @ (y * sy) [+ bias]`` where x is
M x K and y is K x N, both fp8 (float8_e4m3 or float8_e5m2, in any pair), and each scale is a
float32 device array whose shape says what it covers (docs/index.md, "Scaled fp8 products"):

* ``()``, ``(1,)`` or ``(1, 1)``: the whole operand (per tensor), x or y;
* x: ``(M, 1)`` one factor per row; ``(M, ceil(K / 128))`` per 1 x 128 block (a row, 128 K);
* y: ``(1, N)`` one factor per column; ``(ceil(K / 128), ceil(N / 128))`` per 128 x 128 block.

Factors constant along K (tensor, row, column) multiply the finished f32 sum in the epilogue;
block factors vary along K, so they multiply each 128-deep partial sum as the engine promotes
it into f32 registers (kernels/blasdx/hopper/promotion.cuh), which is why block scales need
promotion (``fast_accumulation=False``). Every argument is checked before anything is
allocated or launched; a failure is an :class:`~blasdx.base.errors.ExecutionError` naming it.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .. import arrays as _arrays
from ..base import dtypes as _dt
from ..arrays import ArrayView, DeviceArray, as_array, resolve_stream
from ..arrays import keys as _keys
from ..engine import hopper as _hopper
from ..base.errors import DeviceError, ExecutionError
from ..launch import caches as _caches
from ..launch import devices as _devices
from . import matmul as _ag

__all__ = ["scaled_mm", "ScaledPlan", "Scaling", "BLOCK", "OUT_DTYPES", "scaling_of"]

#: K elements (and y columns) one block scale covers.
BLOCK = 128
#: Result types of scaled_mm (f32 sums rounded once).
OUT_DTYPES = (_dt.float16, _dt.bfloat16, _dt.float32)
_FP8 = (_dt.float8_e4m3, _dt.float8_e5m2)
KERNEL_NAME = "blasdx_hopper_scaled_mm"
_CODES = {"tensor": 0, "row": 1, "column": 1, "block": 2}  # scaling.cuh's Scaling
_PARAMS = ("map", "map", "map", "u64", "u64", "u64", "i32", "i32", "i32", "i32", "u64", "i64", "i64", "u64", "i64", "i64",
           "u64", "i64", "i64")


class Scaling(NamedTuple):
    """How one scale covers its operand: ``mode`` ("tensor", "row", "column" or "block") and its element strides."""

    mode: str
    row_stride: int
    col_stride: int

    @property
    def per_block(self) -> bool:
        return self.mode == "block"


def scaling_of(view: ArrayView, argument: str, rows: int, k: int, cols: int, is_x: bool) -> Scaling:
    """The Scaling a scale array's shape states for an M x K x (or K x N y); ExecutionError naming it otherwise.

    ``rows`` / ``cols`` are M (x) or N (y). Where two readings of a shape coincide (K <= 128:
    one K block) they mean the same factors; the cheaper one (row, column, tensor) is taken.
    """
    if view.dtype != _dt.float32:
        raise ExecutionError(f"{argument}: scales are float32, not {view.dtype.name}; pass scale.float()")
    shape, strides = tuple(view.shape), tuple(view.strides)
    if any(s < 0 for s in strides):
        raise ExecutionError(f"{argument}: negative strides {strides} are not supported; pass a copy")
    blocks_k = math.ceil(k / BLOCK)
    if math.prod(shape) == 1 and len(shape) <= 2:
        return Scaling("tensor", 0, 0)
    if len(shape) == 2:
        rs, cs = strides
        if is_x and shape == (rows, 1):
            return Scaling("row", rs, 0)
        if is_x and shape == (rows, blocks_k):
            return Scaling("block", rs, cs)
        if not is_x and shape == (1, cols):
            return Scaling("column", 0, cs)
        if not is_x and shape == (blocks_k, math.ceil(cols / BLOCK)):
            return Scaling("block", rs, cs)
    if is_x:
        allowed = f"() or (1, 1) per tensor, ({rows}, 1) per row, ({rows}, {blocks_k}) per 1 x {BLOCK} block"
    else:
        allowed = (f"() or (1, 1) per tensor, (1, {cols}) per column, ({blocks_k}, {math.ceil(cols / BLOCK)}) per "
                   f"{BLOCK} x {BLOCK} block")
    raise ExecutionError(f"{argument}: shape {shape} covers its operand in none of the supported ways: {allowed}")


def scaled_source(a: _dt.DType, b: _dt.DType, c: _dt.DType, config: _hopper.EngineConfig, a_k_major: bool,
                  b_k_major: bool, store_by_tma: bool, x_mode: str, y_mode: str) -> str:
    """kernels/hopper_scaled_mm.cu instantiated for the types, tile, store path and scalings."""
    return "\n".join([
        *_hopper.type_headers(a, b),
        "struct ScaledConfig {",
        *_hopper.config_members(a, b, config, a_k_major, b_k_major),
        f"    using c_type = {_hopper._STORAGE_TYPES[c.name]};",
        f"    static constexpr bool store_by_tma = {str(store_by_tma).lower()};",
        f"    static constexpr int x_scaling = {_CODES[x_mode]}, y_scaling = {_CODES[y_mode]};",
        "};",
        '#include "hopper_scaled_mm.cu"',
        "",
    ])


class ScaledPlan(_hopper.EnginePlan):
    """The engine's plan of one kind of scaled_mm call: its GEMM kernel applies the scales and bias."""

    swaps = False  # the scales and the bias follow x's rows and y's columns
    on_pointers = False  # its kernel's parameters are its own: it runs on views

    def __init__(self, a: _dt.DType, b: _dt.DType, c: _dt.DType, m: int, n: int, k: int,
                 route_a: _hopper.OperandRoute, route_b: _hopper.OperandRoute, lda: int, ldb: int, ptr_a: int,
                 ptr_b: int, multiprocessors: int, d_layout: tuple[int, int, int, int] | None, x_mode: str,
                 y_mode: str, fast_accumulation: bool = False, config: _hopper.EngineConfig | None = None,
                 splits: int | None = None) -> None:
        self.x_mode, self.y_mode = x_mode, y_mode
        blocks = "block" in (x_mode, y_mode)
        if blocks and (fast_accumulation or (config is not None and not config.promotion)):
            raise ValueError("block scales are applied at promotion: they need a configuration that promotes")
        if x_mode == y_mode == "block" and config is not None and config.promotion_overlap:
            raise ValueError("overlapped promotion with block scales of x and y: the consumer's registers do not hold "
                             "both temporaries and both cursors (the kernel spills); one operand's block scales at most")
        super().__init__(a, c, m, n, k, 1, route_a, route_b, lda, ldb, 1, 1, 0, 0, ptr_a, ptr_b, multiprocessors,
                         d_layout, config, splits, b=b, fast_accumulation=fast_accumulation)
        # per call every scalar slot (3-18: D, the split sums and counters, the extents, the scales, the bias,
        # D's strides) in one write
        self._pack_call, self._call_offset = self._gemm.params.packer(3, len(_PARAMS) - 3)

    def _gemm_kernel(self, staged: bool) -> Any:
        source = scaled_source(self.a, self.b, self.c, self.config, self.route_a.k_major, self.route_b.k_major, staged,
                               self.x_mode, self.y_mode)
        return _hopper._Kernel(source, KERNEL_NAME, _hopper.ARCH, _PARAMS,
                               self.config.shared_memory(self.a.size, staged))

    def describe(self) -> str:
        return f"{super().describe()}, scales: x per {self.x_mode}, y per {self.y_mode}"

    def run(self, device_id: int, stream_core: Any, stream: int, x: ArrayView, y: ArrayView,  # type: ignore[override]
            sx: ArrayView, sy: ArrayView, bias: ArrayView | None, d: ArrayView) -> None:
        """D = (x * sx) @ (y * sy) [+ bias] on ``stream`` (the views' scalings are this plan's); scratch as
        :meth:`EnginePlan.run`'s, safe in a CUDA graph capture."""
        scales = self.scales(sx.ptr, sy.ptr, 0 if bias is None else bias.ptr, self.strides_of(sx, sy, d))
        self.launch(device_id, stream, x.ptr, y.ptr, 0, d.ptr, scales, x, y)

    def strides_of(self, sx: ArrayView, sy: ArrayView, d: ArrayView) -> tuple[int, ...]:
        """The scales' and D's element strides as the kernel takes them (a bound call computes them once)."""
        d_row, d_col, _ = _hopper.result_strides(d)
        return (*_strides(sx), *_strides(sy), d_row, d_col)

    @staticmethod
    def scales(psx: int, psy: int, pbias: int, strides: tuple[int, ...]) -> tuple[int, ...]:
        """The kernel's parameters after the extents, as :meth:`launch` takes them for its ``scalars``: the
        scales' pointers and strides, the bias's pointer (0: none) and D's strides (:meth:`strides_of`)."""
        sx_row, sx_col, sy_row, sy_col, d_row, d_col = strides
        return (psx, sx_row, sx_col, psy, sy_row, sy_col, pbias, d_row, d_col)

    def _launch_gemm(self, device_id: int, stream: int, a_ptr: int, b_ptr: int, c_ptr: int, d_ptr: int,
                     workspace: int, counters: int, scalars: tuple[Any, ...]) -> None:
        """The engine's launch step with this kernel's parameters (``c_ptr`` unused; ``scalars`` from
        :meth:`scales`): point the maps, write every scalar slot, launch."""
        gemm = self._gemm
        params = gemm.params
        with params.lock:
            self._point_maps(a_ptr, b_ptr, d_ptr)
            self._pack_call(params.data, self._call_offset, d_ptr, workspace, counters, self.m, self.n, self.k,
                            self.splits, *scalars)
            if not self._grid_checked:
                self._fit_grid(device_id)
            gemm.launch(device_id, self.grid, self._block, stream, self.config.cluster)


def _strides(view: ArrayView) -> tuple[int, int]:
    """A scale's (row, column) element strides (0 for a per-tensor scale's)."""
    return (0, 0) if len(view.shape) < 2 else (int(view.strides[0]), int(view.strides[1]))


class _BiasOnly:
    """K = 0: D = bias repeated down the rows (or zeros), by the split-K reduction with no splits."""

    def __init__(self, c: _dt.DType, m: int, n: int, multiprocessors: int) -> None:
        self.c, self.m, self.n, self.multiprocessors = c, m, n, multiprocessors
        self._reduce = _hopper._Kernel(_hopper.reduce_source(c), _hopper.REDUCE_NAME, "sm_90",
                                       _hopper._REDUCE_PARAMS)

    def describe(self) -> str:
        return "K = 0: D = bias (or zeros)"

    def run(self, device_id: int, stream_core: Any, stream: int, x: Any, y: Any, sx: Any, sy: Any,
            bias: ArrayView | None, d: ArrayView) -> None:
        d_row, d_col, _ = _hopper.result_strides(d)
        _hopper.reduce_splits(self._reduce, device_id, stream, 0, 0, 0 if bias is None else bias.ptr, (0, 1, 0),
                              d.ptr, (d_row, d_col, 0), self.m, self.n, 1, self.multiprocessors, 1.0,
                              0.0 if bias is None else 1.0)


class _Call(NamedTuple):
    plan: Any
    shape: tuple[int, int]
    dtype: _dt.DType
    device_id: int


_CALLS: dict[tuple[Any, ...], _Call] = {}


def _key(views: tuple[ArrayView | None, ...], extra: Any) -> tuple[Any, ...]:
    return tuple(None if v is None else (v.dtype.name, v.shape, v.strides, v.ptr & 15, v.device_id) for v in views) + (
        extra,)


def _check_operands(vx: ArrayView, vy: ArrayView) -> tuple[_ag.Matrix, _ag.Matrix]:
    for name, v in (("x", vx), ("y", vy)):
        if v.dtype not in _FP8:
            raise ExecutionError(f"{name}: scaled_mm multiplies fp8 (float8_e4m3, float8_e5m2) matrices, not "
                                 f"{v.dtype.name}")
        if len(v.shape) != 2:
            raise ExecutionError(f"{name}: shape {tuple(v.shape)}: scaled_mm multiplies matrices (rank 2)")
    mx, my = _ag._matrix(vx, "x"), _ag._matrix(vy, "y")
    _ag._check_inner(mx, my, vx, vy)
    return mx, my


def _out_dtype(value: Any) -> _dt.DType:
    if value is None:
        return _dt.float16
    try:
        c = _dt.as_dtype(value, argument="out_dtype")
    except TypeError as exc:
        raise ExecutionError(str(exc)) from None
    if c not in OUT_DTYPES:
        raise ExecutionError(f"out_dtype: scaled_mm writes {', '.join(d.name for d in OUT_DTYPES)}, not {c.name}")
    return c


def _plan(vx: ArrayView, vy: ArrayView, mx: _ag.Matrix, my: _ag.Matrix, sx: Scaling, sy: Scaling, c: _dt.DType,
          vout: ArrayView | None, device_id: int, fast_accumulation: bool) -> _Call:
    device = _ag._device_info(device_id)
    if device.sm != 90:
        raise DeviceError(f"scaled_mm runs on the Hopper engine (sm_90: H100, H200); device {device_id} is "
                          f"sm_{device.sm}")
    m, n, k = mx.rows, my.cols, mx.cols
    if k == 0:
        return _Call(_BiasOnly(c, m, n, device.multiprocessors), (m, n), c, device_id)
    route_a = _hopper.route("x", vx.dtype, vx.ptr, mx.row_major, mx.ld, mx.outer, 0, False)
    route_b = _hopper.route("y", vy.dtype, vy.ptr, not my.row_major, my.ld, my.outer, 0, False)
    d_layout = None if vout is None else (*_hopper.result_strides(vout), vout.ptr)
    plan = ScaledPlan(vx.dtype, vy.dtype, c, m, n, k, route_a, route_b, mx.ld, my.ld, vx.ptr, vy.ptr,
                      device.multiprocessors, d_layout, sx.mode, sy.mode, fast_accumulation)
    return _Call(plan, (m, n), c, device_id)


def scaled_mm(x: Any, y: Any, scale_x: Any, scale_y: Any, *, out_dtype: Any = None, bias: Any = None,
              out: Any = None, fast_accumulation: bool = False, stream: Any = None) -> Any:
    """``(x * scale_x) @ (y * scale_y) [+ bias]`` of fp8 matrices as a new array of ``out_dtype`` (or into ``out``).

    x is [M, K] and y is [K, N], float8_e4m3 or float8_e5m2 in any pair and any row- or
    column-major layout (the engine reads both K-major: row-major x and column-major y run
    in place, others are first copied). scale_x is float32 of shape () / (1, 1) (per
    tensor), (M, 1) (per row) or (M, ceil(K / 128)) (per 1 x 128 block); scale_y of shape
    () / (1, 1), (1, N) (per column) or (ceil(K / 128), ceil(N / 128)) (per 128 x 128 block);
    any strides. ``out_dtype`` is float16 (default), bfloat16 or float32; ``bias`` an (N,)
    array of out_dtype added to every row. The products are summed in f32, promoted from the
    tensor core every 128 K elements; ``fast_accumulation=True`` keeps the whole sum in the
    tensor core (faster, less accurate; not with block scales). Runs on sm_90 GPUs.
    """
    if stream is None and type(out_dtype) in _KEYED_DTYPES and type(fast_accumulation) is bool:
        found = _bound_key(x, y, scale_x, scale_y, bias, out, out_dtype, fast_accumulation)
        if found is not None:
            bound = _BOUND.get(found[0])
            if bound is not None:
                return bound.run(out, found[1])
    if not isinstance(fast_accumulation, bool):
        raise ExecutionError(f"fast_accumulation: expected True or False, got {fast_accumulation!r}")
    c = _out_dtype(out_dtype)
    known: dict[int, int] = {}
    handle = resolve_stream(stream, (x if out is None else out, x, y), known=known)
    vx, vy = as_array(x, "x", stream=handle, known=known), as_array(y, "y", stream=handle, known=known)
    vsx = as_array(scale_x, "scale_x", stream=handle, known=known)
    vsy = as_array(scale_y, "scale_y", stream=handle, known=known)
    vbias = None if bias is None else as_array(bias, "bias", stream=handle, known=known)
    vout = None if out is None else as_array(out, "out", stream=handle, known=known)
    vout_given = vout is not None
    spans = None
    mx, my = _check_operands(vx, vy)
    m, n, k = mx.rows, my.cols, mx.cols
    sx = scaling_of(vsx, "scale_x", m, k, n, True)
    sy = scaling_of(vsy, "scale_y", m, k, n, False)
    if fast_accumulation and (sx.per_block or sy.per_block):
        raise ExecutionError(
            "fast_accumulation=True with block scales: block scales multiply each 128-deep partial sum as it is "
            "promoted into f32 registers, which fast accumulation does not do; pass fast_accumulation=False"
        )
    if vbias is not None and (tuple(vbias.shape) != (n,) or vbias.dtype != c):
        raise ExecutionError(f"bias: expected shape ({n},) of {c.name} (out_dtype), got {tuple(vbias.shape)} of "
                             f"{vbias.dtype.name}")
    if vout is not None:
        if tuple(vout.shape) != (m, n) or vout.dtype != c:
            raise ExecutionError(f"out: expected shape ({m}, {n}) of {c.name} (out_dtype), got {tuple(vout.shape)} "
                                 f"of {vout.dtype.name}")
        if vout.readonly:
            raise ExecutionError("out: the array is read-only; pass a writable array")
        _ag._matrix(vout, "out")
        spans = _ag._spans((("out", vout), ("x", vx), ("y", vy), ("scale_x", vsx), ("scale_y", vsy))
                           + ((("bias", vbias),) if vbias is not None else ()))
        ptrs = tuple(v.ptr for v in (vx, vy, vsx, vsy, vbias) if v is not None)
        _ag._check_overlap(vout, spans[0][1:], spans[1:], ptrs)
    views = (vx, vy, vsx, vsy, vbias, vout)
    key = _key(views, (c.name, sx.mode, sy.mode, fast_accumulation, None if out is None else type(out)))
    call = _CALLS.get(key)
    if call is None:
        present = [(v, name) for v, name in zip(views, ("x", "y", "scale_x", "scale_y", "bias", "out"))
                   if v is not None]
        device_id = _ag._device_of(tuple(v for v, _ in present), tuple(name for _, name in present))
        call = _plan(vx, vy, mx, my, sx, sy, c, vout, device_id, fast_accumulation)
        if len(_CALLS) > 1024:
            _CALLS.clear()
        _CALLS[key] = call
    if stream is not None:
        _devices.check_stream_device(stream, handle, call.device_id)
    with _devices.current(call.device_id):
        if out is None:
            out = _ag._allocate(x, call.shape, c, call.device_id, handle)
            vout = as_array(out, "out", stream=handle, known=known)
        if m and n:
            core = _arrays.as_core_stream(stream, handle)
            producers = tuple(v.stream for v in views if v is not None and v.stream is not None)
            if producers:
                _arrays.wait_for_producers(core, handle, producers)
            call.plan.run(call.device_id, core, handle, vx, vy, vsx, vsy, vbias, vout)
    if type(out) is DeviceArray:
        out._set_stream(handle)
    if stream is None and type(out_dtype) in _KEYED_DTYPES:
        _bind(x, y, scale_x, scale_y, bias, out if vout_given else None, out_dtype, fast_accumulation, call,
              (vx, vy, vsx, vsy, vbias, vout), spans if vout_given else None)
    return out


# ---------------------------------------------------------------------------------------------
# the hot path: a kind of call bound to what its first call decided (as bx.matmul's)
# ---------------------------------------------------------------------------------------------

_BOUND: dict[tuple[Any, ...], _Bound] = {}
_KEYED_DTYPES = (type(None), str, _dt.DType)  # out_dtype spellings that can stand in a key


def _bound_key(x: Any, y: Any, sx: Any, sy: Any, bias: Any, out: Any, out_dtype: Any,
               fast: bool) -> tuple[tuple[Any, ...], tuple[int | None, ...]] | None:
    """The key of a call's kind and its pointers, or None when an array has no key. x, y and the scales are read
    in one go (:func:`keys.read_quad`), bias and out one by one when given."""
    found = _keys.read_quad(x, y, sx, sy)
    if found is None:
        return None
    key: tuple[Any, ...] = (out_dtype, fast, found[0])
    pointers: tuple[int | None, ...] = found[1:]
    for array in (bias, out):
        if array is None:
            key += (None,)
            pointers += (None,)
            continue
        read = _keys.read(array)
        if read is None:
            return None
        key += ((read[0], read[1] & 15),)
        pointers += (read[1],)
    return key, pointers


class _Bound(_ag.BoundCall):
    """What every scaled_mm of one kind does once its arrays are known to be of that kind. Holds no array.

    A plan that reads x and y in place launches on pointers, the scales' and D's strides computed once
    (``strides``); one that repacks an operand, or a K = 0 call, runs on views."""

    __slots__ = ("call", "rests", "overlap", "strides")

    def __init__(self, call: _Call, stream_of: Any, allocate: Any, pointer_of: Any,
                 rests: tuple[tuple[Any, ...] | None, ...], overlap: tuple[Any, ...] | None) -> None:
        self.call, self.stream_of, self.allocate, self.pointer_of = call, stream_of, allocate, pointer_of
        self.device_id = call.device_id
        self.rests = rests  # x, y, scale_x, scale_y, bias, out
        self.overlap = overlap  # (out's span, the others' spans) for a given out
        self.strides: tuple[int, ...] | None = None
        plan = call.plan
        if isinstance(plan, ScaledPlan) and not plan.repacks:
            _, _, rsx, rsy, _, rout = rests
            self.strides = plan.strides_of(_ag._new_view(ArrayView, (0, *rsx)), _ag._new_view(ArrayView, (0, *rsy)),
                                           _ag._new_view(ArrayView, (0, *rout)))

    def run(self, out: Any, pointers: tuple[int | None, ...]) -> Any:
        px, py, psx, psy, pbias, pout = pointers
        overlap = self.overlap
        if overlap is not None:
            _ag._raise_overlap(pout, overlap[0], overlap[1], tuple(p for p in pointers[:5] if p is not None))
        handle, token, out, new = self.begin(out)
        if new is not None:
            pout = new
        call = self.call
        device = call.device_id
        try:
            if not (call.shape[0] and call.shape[1]):
                return out
            plan = call.plan
            strides = self.strides
            if strides is not None:
                plan.launch(device, handle, px, py, 0, pout,
                            plan.scales(psx, psy, 0 if pbias is None else pbias, strides))
                return out
            rx, ry, rsx, rsy, rbias, rout = self.rests
            view = _ag._new_view
            plan.run(device, None, handle, view(ArrayView, (px, *rx)), view(ArrayView, (py, *ry)),
                     view(ArrayView, (psx, *rsx)), view(ArrayView, (psy, *rsy)),
                     None if pbias is None else view(ArrayView, (pbias, *rbias)), view(ArrayView, (pout, *rout)))
        finally:
            if token is not None:
                _devices.leave(token)
        return out


def _bind(x: Any, y: Any, sx: Any, sy: Any, bias: Any, out: Any, out_dtype: Any, fast: bool, call: _Call,
          views: tuple[ArrayView | None, ...], spans: Any) -> None:
    """After a full call without ``stream=``: bind its kind (when every array has a key)."""
    found = _bound_key(x, y, sx, sy, bias, out, out_dtype, fast)
    if found is None:
        return
    like = x if out is None else out
    overlap = None if spans is None else (spans[0][1:], spans[1:])
    bound = _Bound(call, _keys.library_stream(like), _ag._allocator(x, call), _ag._pointer_reader(like),
                   tuple(None if v is None else _ag._rest(v) for v in views), overlap)
    _caches.remember(_BOUND, found[0], bound)

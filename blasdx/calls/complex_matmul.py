"""Complex ``bx.matmul`` / ``bx.mma`` (complex64, complex128) on the real GEMMs.

A complex product is four real ones: ``Re C = Ar Br - Ai Bi``, ``Im C = Ar Bi + Ai Br``.
Read a complex matrix whose parts run along a row as the real matrix of its interleaved parts
(M x K complex -> M x 2K real, the same memory) and the four products become one real GEMM

    C (M x 2N real) = A (M x 2K real) @ B^ (2K x 2N real),   B^ = [[Br, Bi], [-Bi, Br]] per element,

so C and A are used in place and only B is rewritten (kernels/complex_expand.cu: twice B's
bytes, column-major, as TMA and the tensor cores read). The real GEMM is matmul's own plan
(the Hopper engine's FFMA / DMMA consumers, the tiled kernel, or one block per problem), so
batches, broadcasts and ``mantissa_bits`` (tf32 / 3xtf32 parts for complex64) behave as for
the real types. The arithmetic is the textbook one (no Gauss three-product trick, whose
error bound is weaker): each part of C is a real dot product of length 2K.

Layouts: C must have its parts along N, so a column-major result runs as ``C^T = B^T A^T``;
an A whose parts do not run along K is first packed row-major (blasdx.engine.layouts).

Large products on the Hopper engine (M, N and K at least :data:`GAUSS_MIN`, one batch for all
operands) take Gauss's three real products instead (:class:`GaussStep`):
``T1 = Ar Br, T2 = Ai Bi, T3 = (Ar + Ai)(Br + Bi)``, ``C = (T1 - T2) + i (T3 - T1 - T2)``: a
quarter fewer operations for three passes over memory (the planes of A and B, the
combination). Its error is a few times the four-product one's in the imaginary part
(|T3| is about twice |T1|, and T3 - T1 - T2 adds the three errors), still well within the
tolerance of the type (blasdx.reference.tolerance: the part type's at depth 2K).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .. import arrays as _arrays
from ..base import dtypes as _dt
from ..arrays import ArrayView, DeviceArray, as_array
from ..engine import layouts as _layouts
from ..base.errors import ExecutionError
from ..launch import devices as _devices
from ..launch import scratch as _scratch
from . import gemm_steps as _steps
from . import matmul as _ag

__all__ = ["GAUSS_MIN", "ComplexStep", "GaussStep", "complex_step", "matmul", "mma"]

_PLACEHOLDER = 1 << 20  # where scratch operands are planned (aligned as the scratch pool's buffers are)
_LD_ALIGN = 8  # real elements: B^'s columns (and the planes' rows) start on 32 bytes (TMA wants 16)
#: Smallest M, N and K whose product runs as Gauss's three real products (on the Hopper engine).
GAUSS_MIN = 512


def _round_up(value: int, multiple: int) -> int:
    return max(multiple, math.ceil(value / multiple) * multiple)


def _transposed(view: ArrayView) -> ArrayView:
    shape, strides = tuple(view.shape), tuple(view.strides)
    return view._replace(shape=(*shape[:-2], shape[-1], shape[-2]), strides=(*strides[:-2], strides[-1], strides[-2]))


def _batch(view: ArrayView) -> tuple[int | None, int]:
    """(batch or None, batch stride; 0 when the batch is 1)."""
    if len(view.shape) != 3:
        return None, 0
    return view.shape[0], view.strides[0] if view.shape[0] > 1 else 0


def _real_view(view: ArrayView, part: _dt.DType) -> ArrayView:
    """A complex view whose last dimension is unit-stride, read as real with twice the columns."""
    shape, strides = tuple(view.shape), tuple(view.strides)
    real_strides = tuple(2 * s for s in strides[:-1]) + (1,)
    return view._replace(shape=(*shape[:-1], 2 * shape[-1]), strides=real_strides, dtype=part)


def _with_batch(shape: tuple[int, int], batch: int | None) -> tuple[int, ...]:
    return shape if batch is None else (batch, *shape)


def _strides(core: tuple[int, int], batch_stride: int, batch: int | None) -> tuple[int, ...]:
    return core if batch is None else (batch_stride, *core)


class ComplexStep:
    """``D = alpha * X Y + beta * D`` for complex views of one kind (real alpha, beta): one real GEMM."""

    __slots__ = (
        "batch_x",
        "batch_y",
        "device_id",
        "item",
        "k",
        "ld_y",
        "m",
        "n",
        "pack_x",
        "part",
        "real",
        "sm",
        "transpose",
    )

    def __init__(self, x: ArrayView, y: ArrayView, d: ArrayView, accumulate: bool, device_id: int,
                 mantissa_bits: int | None = None) -> None:
        self.device_id = device_id
        self.sm = _ag._device_info(device_id).sm
        self.part = _dt.as_dtype(d.dtype.real_name)
        self.item = d.dtype.size
        _d_rows, d_cols = d.shape[-2:]
        # the result's parts must run along N: a column-major D is the transposed product
        self.transpose = d.strides[-1] != 1 and d_cols > 1
        x, y, d = self._oriented(x, y, d)
        self.m, self.k = x.shape[-2:]
        self.n = y.shape[-1]
        self.batch_x, _ = _batch(x)
        self.batch_y, _ = _batch(y)
        self.pack_x = x.strides[-1] != 1 and self.k > 1
        self.ld_y = max(_LD_ALIGN, math.ceil(2 * self.k / _LD_ALIGN) * _LD_ALIGN)
        xr, yr, dr = self._real_views(x, y, d, _PLACEHOLDER, _PLACEHOLDER)
        self.real = _steps.real_step(xr, yr, dr, accumulate, device_id, mantissa_bits)

    def describe(self) -> str:
        """The real GEMM's path, and how the operands were prepared."""
        how = "C^T = B^T A^T, " if self.transpose else ""
        how += "A packed, " if self.pack_x else ""
        return f"complex as real 2K x 2N: {how}{self.real.describe()}"

    def _oriented(self, x: ArrayView, y: ArrayView, d: ArrayView) -> tuple[ArrayView, ArrayView, ArrayView]:
        if not self.transpose:
            return x, y, d
        return _transposed(y), _transposed(x), _transposed(d)

    def _real_views(self, x: ArrayView, y: ArrayView, d: ArrayView, x_scratch: int,
                    y_scratch: int) -> tuple[ArrayView, ArrayView, ArrayView]:
        """The real GEMM's operands: A (or its packed copy), B^ in scratch, D."""
        m, n, k, part = self.m, self.n, self.k, self.part
        if self.pack_x:
            xb = self.batch_x
            x = x._replace(ptr=x_scratch, shape=_with_batch((m, k), xb), strides=_strides((k, 1), m * k, xb))
        xr = _real_view(x, part)
        yb = self.batch_y
        yr = y._replace(ptr=y_scratch, shape=_with_batch((2 * k, 2 * n), yb),
                        strides=_strides((1, self.ld_y), self.ld_y * 2 * n, yb), dtype=part)
        return xr, yr, _real_view(d, part)

    def run(self, core: Any, handle: int, x: ArrayView, y: ArrayView, d: ArrayView, alpha: float,
            beta: float) -> None:
        """Launch on stream ``handle`` with the device current."""
        x, y, d = self._oriented(x, y, d)
        if self.m == 0 or self.n == 0:
            return
        with _scratch.call_scratch(self.device_id, handle) as scratch:  # capture-safe (CUDA graphs)
            x_ptr = 0
            if self.pack_x:
                problems = self.batch_x or 1
                x_ptr = scratch.get("complex x", self.item * self.m * self.k * problems)
                _, bs = _batch(x)
                _layouts.copy(self.device_id, self.sm, handle, self.item, x.ptr, x_ptr, self.m, self.k,
                              (x.strides[-2], x.strides[-1], bs), (self.k, 1, self.m * self.k), problems)
            problems = self.batch_y or 1
            part = self.part.size
            y_ptr = scratch.get("complex y", part * self.ld_y * 2 * self.n * problems)
            _, bs = _batch(y)
            _layouts.expand(self.device_id, self.sm, handle, self.part, y.ptr, y_ptr, self.k, self.n,
                            (y.strides[-2], y.strides[-1], bs), self.ld_y, self.ld_y * 2 * self.n, problems)
            xr, yr, dr = self._real_views(x, y, d, x_ptr, y_ptr)
            self.real.run(core, handle, xr, yr, dr, alpha, beta)


class GaussStep:
    """``D = alpha * X Y + beta * D`` for complex views of one kind as three real products (Gauss)."""

    __slots__ = (
        "device_id",
        "k",
        "ld_t",
        "ld_x",
        "ld_y",
        "m",
        "multiprocessors",
        "n",
        "part",
        "problems",
        "real",
        "sm",
        "views",
    )

    def __init__(self, x: ArrayView, y: ArrayView, d: ArrayView, device_id: int,
                 mantissa_bits: int | None = None) -> None:
        info = _ag._device_info(device_id)
        self.device_id, self.sm, self.multiprocessors = device_id, info.sm, info.multiprocessors
        self.part = _dt.as_dtype(d.dtype.real_name)
        self.m, self.k = x.shape[-2:]
        self.n = y.shape[-1]
        batch, _ = _batch(d)
        self.problems = batch or 1
        self.ld_x = self.ld_y = _round_up(self.k, _LD_ALIGN)
        self.ld_t = _round_up(self.n, _LD_ALIGN)
        self.views = self._views(x, _PLACEHOLDER, _PLACEHOLDER, _PLACEHOLDER)
        self.real = _steps.real_step(*self.views, False, device_id, mantissa_bits)

    def describe(self) -> str:
        return f"complex as three real products (Gauss): {self.real.describe()}"

    def _sizes(self) -> tuple[int, int, int]:
        """Real elements of each operand's three planes (all problems): x, y, t."""
        p = 3 * self.problems
        return p * self.m * self.ld_x, p * self.n * self.ld_y, p * self.m * self.ld_t

    def _views(self, like: ArrayView, x_ptr: int, y_ptr: int, t_ptr: int) -> tuple[ArrayView, ArrayView, ArrayView]:
        """The real GEMM's batched operands: (3 x problems) planes of x (row-major), y (column-major), T."""
        m, n, k, q = self.m, self.n, self.k, 3 * self.problems
        base = like._replace(dtype=self.part, readonly=False, stream=None)
        xv = base._replace(ptr=x_ptr, shape=(q, m, k), strides=(m * self.ld_x, self.ld_x, 1))
        yv = base._replace(ptr=y_ptr, shape=(q, k, n), strides=(n * self.ld_y, 1, self.ld_y))
        tv = base._replace(ptr=t_ptr, shape=(q, m, n), strides=(m * self.ld_t, self.ld_t, 1))
        return xv, yv, tv

    def run(self, core: Any, handle: int, x: ArrayView, y: ArrayView, d: ArrayView, alpha: float,
            beta: float) -> None:
        """Planes of x and y, the batched real product, the combination into d; stream ``handle``."""
        size, p = self.part.size, self.problems
        nx, ny, nt = self._sizes()
        m, n, k = self.m, self.n, self.k
        with _scratch.call_scratch(self.device_id, handle) as scratch:  # capture-safe (CUDA graphs)
            x_ptr = scratch.get("gauss x", size * nx)
            y_ptr = scratch.get("gauss y", size * ny)
            t_ptr = scratch.get("gauss t", size * nt)
            _, xb = _batch(x)
            _layouts.planes(self.device_id, self.sm, handle, self.part, x.ptr, x_ptr, m, k,
                            (x.strides[-2], x.strides[-1], xb), (self.ld_x, 1, m * self.ld_x), nx // 3, p)
            _, yb = _batch(y)
            _layouts.planes(self.device_id, self.sm, handle, self.part, y.ptr, y_ptr, k, n,
                            (y.strides[-2], y.strides[-1], yb), (1, self.ld_y, n * self.ld_y), ny // 3, p)
            xv, yv, tv = self._views(x, x_ptr, y_ptr, t_ptr)
            self.real.run(core, handle, xv, yv, tv, 1.0, 0.0)
            _, db = _batch(d)
            _layouts.combine(self.device_id, self.sm, handle, self.part, t_ptr, d.ptr, m, n, self.ld_t,
                             m * self.ld_t, nt // 3, (d.strides[-2], d.strides[-1], db), p, alpha, beta,
                             self.multiprocessors)


def _gauss_serves(x: ArrayView, y: ArrayView, d: ArrayView, device_id: int) -> bool:
    """Whether the product runs as three real products: large, on the Hopper engine, one batch for all."""
    if _ag._device_info(device_id).sm != 90:
        return False
    m, k = x.shape[-2:]
    n = y.shape[-1]
    if min(m, n, k) < GAUSS_MIN:
        return False
    batches = {_batch(v)[0] for v in (x, y, d)}
    return len(batches) == 1


def complex_step(x: ArrayView, y: ArrayView, d: ArrayView, accumulate: bool, device_id: int,
                 mantissa_bits: int | None = None) -> ComplexStep | GaussStep:
    """The step for complex views x [.., M, K], y [.., K, N] into d [.., M, N] (``accumulate``: beta != 0):
    Gauss's three real products for large ones (:func:`_gauss_serves`), else the four in one real GEMM."""
    if _gauss_serves(x, y, d, device_id):
        return GaussStep(x, y, d, device_id, mantissa_bits)
    return ComplexStep(x, y, d, accumulate, device_id, mantissa_bits)


# ---------------------------------------------------------------------------------------------
# bx.matmul / bx.mma with complex inputs
# ---------------------------------------------------------------------------------------------


class _Call(NamedTuple):
    shape: tuple[int, ...]
    dtype: _dt.DType
    step: ComplexStep | GaussStep
    device_id: int


_CALLS: dict[tuple[Any, ...], _Call] = {}


def _check_types(vx: ArrayView, vy: ArrayView, vacc: ArrayView | None, mantissa_bits: int | None) -> None:
    if vx.dtype != vy.dtype:
        raise ExecutionError(f"x: {vx.dtype.name} and y: {vy.dtype.name} differ; {_ag._rule('dtype')}")
    if not vx.dtype.is_complex or vx.dtype.real_name not in ("float32", "float64"):
        raise ExecutionError(f"x: complex products take complex64 or complex128, not {vx.dtype.name}")
    if vacc is not None and vacc.dtype != vx.dtype:
        raise ExecutionError(
            f"x, y, acc: {vx.dtype.name} x {vy.dtype.name} + {vacc.dtype.name} is not supported; complex products "
            f"accumulate in their own type ({vx.dtype.name} + {vx.dtype.name}); {_ag._rule('types')}"
        )
    _ag._resolve_scheme(_dt.as_dtype(vx.dtype.real_name), mantissa_bits)


def _placeholder(shape: tuple[int, ...], dtype: _dt.DType, like: ArrayView) -> ArrayView:
    strides = (shape[-1], 1) if len(shape) == 2 else (shape[1] * shape[2], shape[2], 1)
    return like._replace(ptr=_PLACEHOLDER, shape=shape, strides=strides, dtype=dtype, readonly=False, owner=None,
                         stream=None)


def _plan(vx: ArrayView, vy: ArrayView, vacc: ArrayView | None, vout: ArrayView | None, device_id: int,
          mantissa_bits: int | None) -> _Call:
    _check_types(vx, vy, vacc, mantissa_bits)
    mx, my = _ag._matrix(vx, "x"), _ag._matrix(vy, "y")
    _ag._check_inner(mx, my, vx, vy)
    if vacc is None:
        batch = _ag._result_batch(mx, my)
    else:
        ma = _ag._matrix(vacc, "acc")
        _ag._check_acc(mx, my, ma, vacc)
        batch = ma.batch
    shape = (mx.rows, my.cols) if batch is None else (batch, mx.rows, my.cols)
    if vout is not None:
        if tuple(vout.shape) != shape or vout.dtype != vx.dtype:
            raise ExecutionError(
                f"out: shape {tuple(vout.shape)} and type {vout.dtype.name} do not match the result's {shape} "
                f"{vx.dtype.name} (acc's); {_ag._rule('acc')}"
            )
        _ag._matrix(vout, "out")
    d = vout if vout is not None else _placeholder(shape, vx.dtype, vx)
    step = complex_step(vx, vy, d, vacc is not None, device_id, mantissa_bits)
    return _Call(shape, vx.dtype, step, device_id)


def _launch(call: _Call, views: tuple[ArrayView | None, ...], vx: ArrayView, vy: ArrayView, vd: ArrayView,
            stream: Any, handle: int, beta: float, copy_from: ArrayView | None) -> None:
    """Order after the producers, copy acc into out when they differ, run the product into vd."""
    core = _arrays.as_core_stream(stream, handle)
    producers = tuple(v.stream for v in views if v is not None and v.stream is not None)
    if producers:
        _arrays.wait_for_producers(core, handle, producers)
    if copy_from is not None:  # acc into out: the product then accumulates in place
        batch, bs = _batch(vd)
        _, bs_acc = _batch(copy_from)
        rows, cols = vd.shape[-2:]
        _layouts.copy(call.device_id, call.step.sm, handle, vd.dtype.size, copy_from.ptr, vd.ptr, rows, cols,
                      (copy_from.strides[-2], copy_from.strides[-1], bs_acc), (vd.strides[-2], vd.strides[-1], bs),
                      batch or 1)
    call.step.run(core, handle, vx, vy, vd, 1.0, beta)


def matmul(x: Any, y: Any, vx: ArrayView, vy: ArrayView, handle: int, known: dict[int, int], stream: Any,
           mantissa_bits: int | None) -> Any:
    """``x @ y`` for complex64 / complex128 inputs (called by :func:`blasdx.calls.matmul.matmul`)."""
    key = _ag._key(vx, vy, None, ("complex matmul", mantissa_bits))
    call = _CALLS.get(key)
    if call is None:
        device_id = _ag._device_of((vx, vy), ("x", "y"))
        call = _ag._cached_plan(_CALLS, key, lambda: _plan(vx, vy, None, None, device_id, mantissa_bits))
    if stream is not None:
        _devices.check_stream_device(stream, handle, call.device_id)
    with _devices.current(call.device_id):
        out = _steps.allocate(x, call.shape, call.dtype, call.device_id, handle)
        vout = as_array(out, "out", stream=handle, known=known)
        _launch(call, (vx, vy), vx, vy, vout, stream, handle, 0.0, None)
    if type(out) is DeviceArray:
        out._set_stream(handle)
    return out


def mma(x: Any, y: Any, acc: Any, out: Any, vx: ArrayView, vy: ArrayView, vacc: ArrayView, vout: ArrayView | None,
        handle: int, known: dict[int, int], stream: Any, mantissa_bits: int | None) -> Any:
    """``x @ y + acc`` for complex64 / complex128 (called by :func:`blasdx.calls.matmul.mma`)."""
    in_place = vout is not None and vout.ptr == vacc.ptr and vout.strides == vacc.strides and vout.shape == vacc.shape
    out_key = None if vout is None else (vout.dtype.name, vout.shape, vout.strides, vout.ptr & 15, in_place)
    key = _ag._key(vx, vy, vacc, ("complex mma", out_key, mantissa_bits))
    call = _CALLS.get(key)
    if call is None:
        views, names = (vx, vy, vacc), ("x", "y", "acc")
        if vout is not None:
            views, names = views + (vout,), names + ("out",)
        device_id = _ag._device_of(views, names)
        call = _ag._cached_plan(_CALLS, key, lambda: _plan(vx, vy, vacc, vout, device_id, mantissa_bits))
    if vout is not None:
        if vout.readonly:
            raise ExecutionError("out: the array is read-only; pass a writable array")
        spans = _ag._spans((("out", vout), ("x", vx), ("y", vy), ("acc", vacc)))
        others = spans[1:3] if in_place else spans[1:]
        _ag._check_overlap(vout, spans[0][1:], others, (vx.ptr, vy.ptr, vacc.ptr))
    if stream is not None:
        _devices.check_stream_device(stream, handle, call.device_id)
    with _devices.current(call.device_id):
        if vout is None:
            out = _steps.allocate(acc, call.shape, call.dtype, call.device_id, handle)
            vout = as_array(out, "out", stream=handle, known=known)
        _launch(call, (vx, vy, vacc), vx, vy, vout, stream, handle, 1.0, None if in_place else vacc)
    if type(out) is DeviceArray:
        out._set_stream(handle)
    return out


def _install() -> None:
    """Route complex inputs of bx.matmul / bx.mma here (matmul.py does not import this module)."""
    _ag.COMPLEX_CALLS["matmul"] = matmul
    _ag.COMPLEX_CALLS["mma"] = mma


_install()

"""``bx.grouped_mm``: many matrix products of one K and N in one launch (mixture-of-experts layers).

PyTorch's ``grouped_mm`` semantics, on the Hopper engine (blasdx.engine.grouped):

* contiguous: x [total, K] (the tokens of every expert, expert by expert), w [G, K, N],
  ``offs`` the int32 cumulative end row of each group: rows [offs[g - 1], offs[g]) of the
  result are x's same rows times w[g]; result [total, N];
* batched: x [G, M, K], w [G, K, N], result [G, M, N] (every group M rows);
* masked (decode): as batched, with ``counts`` an int32 [G] array of rows per group: only
  rows [0, counts[g]) of group g are computed and written, the rest of out is left as it is;
* groups along K (2D x 2D, the weight gradient): x [M, total_k], w [total_k, N], ``offs`` the
  end of each group's K range; result [G, M, N]: checked, then refused (not enabled: its
  results were wrong on the GPU);
* groups along N (3D x 2D): x [G, M, K], w [K, total_n], ``offs`` the end column of each
  group: columns [offs[g - 1], offs[g]) of the result [M, total_n] are x[g] times w's same
  columns (run as the contiguous form of the transposes; no scales).

Group sizes are read on the device, so a CUDA graph captured once replays with new offsets or
counts written into the same arrays. fp8 inputs (float8_e4m3 / float8_e5m2) take float32
scales: scale_x per row or per 1 x 128 block of x, scale_w per group and column or per
128 x 128 block of each w[g]; the products are summed in f32, promoted from the tensor core
every 128 K as in bx.scaled_mm. Every argument is checked before anything is allocated or
launched; a failure is an :class:`~blasdx.base.errors.ExecutionError` naming it. The offsets'
values live on the device: ``check_offsets=True`` reads them back (a synchronisation) and
checks them; without it, offsets out of order or past the rows give empty or shortened
groups (the kernel clamps them), never accesses outside the arrays.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from .. import arrays as _arrays
from ..base import dtypes as _dt
from ..arrays import ArrayView, DeviceArray, as_array, resolve_stream
from ..engine import grouped as _grouped
from ..engine import hopper as _hopper
from ..base.errors import DeviceError, ExecutionError
from ..launch import devices as _devices
from ..launch import scratch as _scratch
from . import matmul as _ag

__all__ = ["BLOCK", "Form", "Scale", "form_of", "grouped_mm", "scale_of"]

#: K elements (and w columns) one block scale covers.
BLOCK = 128
#: Whether plans store whole tiles of a row-major result through its tensor map (TMA) rather than element pair
#: by element pair (blasdx.engine.grouped: GroupedPlan's store_by_tma).
STORE_BY_TMA = True  # measured (H200): 5-8% faster than pair by pair on DeepSeek-V3, Qwen3, Mixtral shapes
_FP8 = (_dt.float8_e4m3, _dt.float8_e5m2)
_SIXTEEN = (_dt.float16, _dt.bfloat16)


class Form(NamedTuple):
    """What a call computes: ``layout`` ("contiguous" or "masked"), the groups, A's row extent
    (total rows, or M per group), N, K and the result's shape."""

    layout: str
    groups: int
    rows: int
    n: int
    k: int
    out_shape: tuple[int, ...]


def form_of(vx: ArrayView, vw: ArrayView, voffs: ArrayView | None, vcounts: ArrayView | None) -> Form:
    """The form the operands' ranks and the bounds given state; ExecutionError naming what does not fit."""
    if len(vw.shape) == 2 and len(vx.shape) == 2:  # groups along K
        if vcounts is not None:
            raise ExecutionError("counts: the 2D x 2D form (groups along K) takes offs")
        if voffs is None:
            raise ExecutionError("offs: x [M, total_k] with w [total_k, N] needs offs, the int32 end of each group's "
                                 "K range")
        if vx.shape[1] != vw.shape[0]:
            raise ExecutionError(f"x: shape {tuple(vx.shape)} and w: shape {tuple(vw.shape)} do not multiply "
                                 f"(K = {vx.shape[1]} vs {vw.shape[0]})")
        if vx.dtype not in _SIXTEEN:
            raise ExecutionError(f"x: the 2D x 2D form (groups along K) takes float16 or bfloat16, not "
                                 f"{vx.dtype.name}")
        groups = voffs.shape[0] if len(voffs.shape) == 1 else -1
        _check_bounds(voffs, "offs", max(groups, 1))
        m, n = vx.shape[0], vw.shape[1]
        return Form("along_k", groups, m, n, vx.shape[1], (groups, m, n))
    if len(vw.shape) != 3:
        raise ExecutionError(
            f"w: shape {tuple(vw.shape)}: grouped_mm takes w as [G, K, N] (one matrix per group), or x [M, total_k] "
            "with w [total_k, N] (groups along K)"
        )
    groups, k, n = vw.shape
    if groups < 1:
        raise ExecutionError("w: shape has 0 groups; grouped_mm needs at least one")
    if len(vx.shape) == 2:
        if vcounts is not None:
            raise ExecutionError("counts: the masked layout takes x as [G, max_m, K]; a 2D x takes offs")
        if voffs is None:
            raise ExecutionError("offs: x [total, K] with w [G, K, N] needs offs, the int32 end row of each group")
        if vx.shape[1] != k:
            raise ExecutionError(f"x: shape {tuple(vx.shape)} and w: shape {tuple(vw.shape)} do not multiply "
                                 f"(K = {vx.shape[1]} vs {k})")
        _check_bounds(voffs, "offs", groups)
        return Form("contiguous", groups, vx.shape[0], n, k, (vx.shape[0], n))
    if len(vx.shape) == 3:
        if voffs is not None:
            raise ExecutionError("offs: x [G, M, K] with w [G, K, N] is batched (every group M rows); pass the rows "
                                 "per group as counts= for the masked layout")
        if vx.shape[0] != groups or vx.shape[2] != k:
            raise ExecutionError(f"x: shape {tuple(vx.shape)} does not match w: shape {tuple(vw.shape)} "
                                 f"(expected [{groups}, M, {k}])")
        if vcounts is not None:
            _check_bounds(vcounts, "counts", groups)
        return Form("masked", groups, vx.shape[1], n, k, (groups, vx.shape[1], n))
    raise ExecutionError(f"x: shape {tuple(vx.shape)} has rank {len(vx.shape)}; grouped_mm takes x as [total, K] "
                         "(with offs) or [G, M, K]")


def _check_bounds(view: ArrayView, argument: str, groups: int) -> None:
    if view.dtype != _dt.int32:
        raise ExecutionError(f"{argument}: expected int32, got {view.dtype.name}; pass {argument}.int()")
    if tuple(view.shape) != (groups,):
        raise ExecutionError(f"{argument}: expected shape ({groups},) (one entry per group of w), got "
                             f"{tuple(view.shape)}")
    if groups > 1 and view.strides[0] != 1:
        raise ExecutionError(f"{argument}: expected a contiguous array, got stride {view.strides[0]}; pass a copy")


class Scale(NamedTuple):
    """How a scale covers its operand: ``mode`` ("none", "row", "column", "block") and its (row, column, group)
    element strides."""

    mode: str
    row: int = 0
    col: int = 0
    group: int = 0


def scale_of(view: ArrayView | None, argument: str, form: Form, is_x: bool) -> Scale:
    """The Scale a scale array's shape states; ExecutionError naming it otherwise.

    x (contiguous): (total,) or (total, 1) per row, (total, ceil(K / 128)) per 1 x 128 block;
    x (batched / masked): (G, M) or (G, M, 1) per row, (G, M, ceil(K / 128)) per block;
    w: (G, N) or (G, 1, N) per column of each group, (G, ceil(K / 128), ceil(N / 128)) per 128 x 128 block.
    Where two readings coincide (K <= 128) they mean the same factors; the per-row / per-column one is taken.
    """
    if view is None:
        return Scale("none")
    if view.dtype != _dt.float32:
        raise ExecutionError(f"{argument}: scales are float32, not {view.dtype.name}; pass {argument}.float()")
    shape, st = tuple(view.shape), tuple(view.strides)
    if any(s < 0 for s in st):
        raise ExecutionError(f"{argument}: negative strides {st} are not supported; pass a copy")
    g, rows, n, kb = form.groups, form.rows, form.n, math.ceil(form.k / BLOCK)
    if is_x and form.layout == "contiguous":
        if shape == (rows,):
            return Scale("row", st[0])
        if shape == (rows, 1):
            return Scale("row", st[0])
        if shape == (rows, kb):
            return Scale("block", st[0], st[1])
        allowed = f"({rows},) or ({rows}, 1) per row, ({rows}, {kb}) per 1 x {BLOCK} block"
    elif is_x:
        if shape in ((g, rows), (g, rows, 1)):
            return Scale("row", st[1], 0, st[0])
        if shape == (g, rows, kb):
            return Scale("block", st[1], st[2], st[0])
        allowed = f"({g}, {rows}) or ({g}, {rows}, 1) per row, ({g}, {rows}, {kb}) per 1 x {BLOCK} block"
    else:
        if shape == (g, n):
            return Scale("column", 0, st[1], st[0])
        if shape == (g, 1, n):
            return Scale("column", 0, st[2], st[0])
        if shape == (g, kb, math.ceil(n / BLOCK)):
            return Scale("block", st[1], st[2], st[0])
        allowed = f"({g}, {n}) or ({g}, 1, {n}) per column, ({g}, {kb}, {math.ceil(n / BLOCK)}) per {BLOCK} x " \
                  f"{BLOCK} block"
    raise ExecutionError(f"{argument}: shape {shape} covers its operand in none of the supported ways: {allowed}")


def _types(vx: ArrayView, vw: ArrayView, out_dtype: Any, scales: tuple[Any, Any],
           vout: ArrayView | None = None) -> _dt.DType:
    """The result type: ``out_dtype``, else out's type when out is given, else x's (bfloat16 for fp8)."""
    a, b = vx.dtype, vw.dtype
    if a in _SIXTEEN:
        if b != a:
            raise ExecutionError(f"w: {b.name} does not match x's {a.name}; 16-bit grouped products take one type")
        for name, s in zip(("scale_x", "scale_w"), scales):
            if s is not None:
                raise ExecutionError(f"{name}: scales are for fp8 inputs; {a.name} products take none")
    elif a in _FP8:
        if b not in _FP8:
            raise ExecutionError(f"w: {b.name} with fp8 x; fp8 products take float8_e4m3 / float8_e5m2 w")
    else:
        raise ExecutionError(f"x: grouped_mm multiplies float16, bfloat16, float8_e4m3 or float8_e5m2, not {a.name}")
    if out_dtype is None and vout is not None:
        if vout.dtype not in _grouped.SERVED[a]:
            raise ExecutionError(f"out: grouped_mm writes {', '.join(d.name for d in _grouped.SERVED[a])}, not "
                                 f"{vout.dtype.name}")
        return vout.dtype
    if out_dtype is None:
        return a if a in _SIXTEEN else _dt.bfloat16
    try:
        c = _dt.as_dtype(out_dtype, argument="out_dtype")
    except TypeError as exc:
        raise ExecutionError(str(exc)) from None
    if c not in _grouped.SERVED[a]:
        raise ExecutionError(f"out_dtype: grouped_mm writes {', '.join(d.name for d in _grouped.SERVED[a])}, "
                             f"not {c.name}")
    return c


class _Call(NamedTuple):
    plan: _grouped.GroupedPlan
    form: Form
    dtype: _dt.DType
    device_id: int
    x_scale: Scale
    w_scale: Scale


_CALLS: dict[tuple[Any, ...], _Call] = {}


def _key(views: tuple[ArrayView | None, ...], extra: Any) -> tuple[Any, ...]:
    return tuple(None if v is None else (v.dtype.name, v.shape, v.strides, v.ptr & 15, v.device_id) for v in views) + (
        extra,)


def _plan(vx: ArrayView, vw: ArrayView, form: Form, c: _dt.DType, sx: Scale, sw: Scale, device_id: int,
          d_layout: tuple[int, int, int, int] | None = None) -> _Call:
    """The call's plan; ``d_layout`` is the result's (row, column, group) element strides and address (None: a new
    C-contiguous one)."""
    device = _ag._device_info(device_id)
    if device.sm != 90:
        raise DeviceError(f"grouped_mm runs on the Hopper engine (sm_90: H100, H200); device {device_id} is "
                          f"sm_{device.sm}")
    mx, mw = _ag._matrix(vx, "x"), _ag._matrix(vw, "w")
    if form.layout == "along_k":  # read by the padding copy, with any strides
        route = _hopper.OperandRoute("x", True), _hopper.OperandRoute("w", True)
        plan = _grouped.GroupedPlan(vx.dtype, vw.dtype, c, form.layout, form.groups, form.rows, form.n, form.k,
                                    *route, (0, 0), (0, 0), vx.ptr, vw.ptr, device.multiprocessors,
                                    d_layout=d_layout, store_by_tma=STORE_BY_TMA)
        return _Call(plan, form, c, device_id, sx, sw)
    masked = form.layout == "masked"
    route_a = _hopper.route("x", vx.dtype, vx.ptr, mx.row_major, mx.ld, mx.outer, mx.batch_stride,
                            masked and form.groups > 1)
    route_b = _hopper.route("w", vw.dtype, vw.ptr, not mw.row_major, mw.ld, mw.outer, mw.batch_stride,
                            form.groups > 1)
    plan = _grouped.GroupedPlan(vx.dtype, vw.dtype, c, form.layout, form.groups, form.rows, form.n, form.k, route_a,
                                route_b, (mx.ld, mx.batch_stride), (mw.ld, mw.batch_stride), vx.ptr, vw.ptr,
                                device.multiprocessors, sx.mode, sw.mode, d_layout=d_layout,
                                store_by_tma=STORE_BY_TMA)
    return _Call(plan, form, c, device_id, sx, sw)


def _transposed(view: ArrayView) -> ArrayView:
    """The view of the last two dimensions swapped."""
    return view._replace(shape=(*view.shape[:-2], view.shape[-1], view.shape[-2]),
                         strides=(*view.strides[:-2], view.strides[-1], view.strides[-2]))


def _along_n(vx: ArrayView, vw: ArrayView, voffs: ArrayView | None, vcounts: ArrayView | None,
             vsx: ArrayView | None, vsw: ArrayView | None, vout: ArrayView | None,
             c: _dt.DType) -> tuple[ArrayView, ArrayView, ArrayView | None]:
    """The 3D x 2D form (x [G, M, K], w [K, total_n], groups along N, result [M, total_n]) as the contiguous form
    of the transposes: result^T [total_n, M] = w^T [total_n, K] times x[g]^T [K, M]. Checks what the swap would
    hide; returns (x', w', out')."""
    if voffs is None:
        raise ExecutionError("offs: x [G, M, K] with w [K, total_n] needs offs, the int32 end column of each group")
    for name, v in (("counts", vcounts), ("scale_x", vsx), ("scale_w", vsw)):
        if v is not None:
            raise ExecutionError(f"{name}: the 3D x 2D form (groups along N) takes none")
    groups, m, k = vx.shape
    if vw.shape[0] != k:
        raise ExecutionError(f"x: shape {tuple(vx.shape)} and w: shape {tuple(vw.shape)} do not multiply "
                             f"(K = {k} vs {vw.shape[0]})")
    _check_bounds(voffs, "offs", groups)
    if vout is not None:
        if tuple(vout.shape) != (m, vw.shape[1]) or vout.dtype != c:
            raise ExecutionError(f"out: expected shape {(m, vw.shape[1])} of {c.name} (out_dtype), got "
                                 f"{tuple(vout.shape)} of {vout.dtype.name}")
        vout = _transposed(vout)
    return _transposed(vw), _transposed(vx), vout


def _check_offsets(array: Any, argument: str, form: Form, stream: Any) -> None:
    """Read offs / counts back (a synchronisation) and check their values."""
    values = np.asarray(_arrays.from_device(array, stream=stream)).astype(np.int64)
    if argument == "offs":
        along_k = form.layout == "along_k"
        ends, total = ("ends of K ranges", form.k) if along_k else ("end rows", form.rows)
        if values.size and (np.any(values < 0) or np.any(np.diff(values) < 0)):
            raise ExecutionError(f"offs: expected non-negative, non-decreasing {ends}, got {values.tolist()[:16]}")
        if values.size and values[-1] != total:
            raise ExecutionError(f"offs: the last entry is {values[-1]}, expected "
                                 f"{'the K of x and w' if along_k else 'the total rows of x'}, {total}")
    elif np.any(values < 0) or np.any(values > form.rows):
        raise ExecutionError(f"counts: expected rows per group in [0, {form.rows}], got {values.tolist()[:16]}")


def grouped_mm(x: Any, w: Any, offs: Any = None, *, counts: Any = None, out_dtype: Any = None, scale_x: Any = None,
               scale_w: Any = None, out: Any = None, check_offsets: bool = False, stream: Any = None) -> Any:
    """Grouped products ``x_g @ w[g]`` in one launch, as a new array of ``out_dtype`` (or into ``out``).

    x [total, K] with ``offs`` (int32 [G], the cumulative end row of each group) and w [G, K, N]
    give [total, N]; x [G, M, K] with w [G, K, N] gives [G, M, N] (with ``counts``, int32 [G],
    only the first counts[g] rows of group g). float16 / bfloat16 inputs (one type) or fp8
    (float8_e4m3 / float8_e5m2, any pair) with float32 ``scale_x`` / ``scale_w`` (module
    docstring); results float16, bfloat16 or float32 (default: out's type when out is given, else
    x's type, bfloat16 for fp8).
    16-bit operands may be row- or column-major (w typically stored [G, N, K] and passed
    transposed); fp8 operands are read K-major (x row-major, w column-major per group), others
    are first copied K-major at every call, as are operands whose addresses or strides are not
    multiples of 16 bytes. Runs on sm_90 GPUs.
    """
    if not isinstance(check_offsets, bool):
        raise ExecutionError(f"check_offsets: expected True or False, got {check_offsets!r}")
    known: dict[int, int] = {}
    handle = resolve_stream(stream, (x if out is None else out, x, w), known=known)
    vx, vw = as_array(x, "x", stream=handle, known=known), as_array(w, "w", stream=handle, known=known)
    voffs = None if offs is None else as_array(offs, "offs", stream=handle, known=known)
    vcounts = None if counts is None else as_array(counts, "counts", stream=handle, known=known)
    vsx = None if scale_x is None else as_array(scale_x, "scale_x", stream=handle, known=known)
    vsw = None if scale_w is None else as_array(scale_w, "scale_w", stream=handle, known=known)
    vout = None if out is None else as_array(out, "out", stream=handle, known=known)
    c = _types(vx, vw, out_dtype, (vsx, vsw), vout)
    along_n = len(vx.shape) == 3 and len(vw.shape) == 2
    if along_n:  # groups along N: out^T = w^T x[g]^T, the contiguous form on transposed views
        vx, vw, vout = _along_n(vx, vw, voffs, vcounts, vsx, vsw, vout, c)
    form = form_of(vx, vw, voffs, vcounts)
    if form.layout == "along_k":
        raise ExecutionError("x, w: the 2D x 2D form (groups along K) is not enabled: its results were wrong on the "
                             "GPU; pass each group's product separately")
    sx = scale_of(vsx, "scale_x", form, True)
    sw = scale_of(vsw, "scale_w", form, False)
    if vout is not None:
        if tuple(vout.shape) != form.out_shape or vout.dtype != c:
            raise ExecutionError(f"out: expected shape {form.out_shape} of {c.name} (out_dtype), got "
                                 f"{tuple(vout.shape)} of {vout.dtype.name}")
        if vout.readonly:
            raise ExecutionError("out: the array is read-only; pass a writable array")
        _ag._matrix(vout, "out")
        named = tuple((name, v) for name, v in (("x", vx), ("w", vw), ("offs", voffs), ("counts", vcounts),
                                                ("scale_x", vsx), ("scale_w", vsw)) if v is not None)
        spans = _ag._spans((("out", vout), *named))
        _ag._check_overlap(vout, spans[0][1:], spans[1:], tuple(v.ptr for _, v in named))
    views = (vx, vw, voffs, vcounts, vsx, vsw, vout)
    key = _key(views, (c.name, None if out is None else type(out), STORE_BY_TMA, along_n))
    call = _CALLS.get(key)
    if call is None:
        names = ("x", "w", "offs", "counts", "scale_x", "scale_w", "out")
        present = [(v, name) for v, name in zip(views, names) if v is not None]
        device_id = _ag._device_of(tuple(v for v, _ in present), tuple(name for _, name in present))
        if vout is not None:
            d_layout = (*_hopper.result_strides(vout), vout.ptr)
        else:  # a new result: C-contiguous (along N: its transpose, column-major)
            d_layout = (1, form.rows, 0, 0) if along_n else None
        call = _plan(vx, vw, form, c, sx, sw, device_id, d_layout)
        if len(_CALLS) > 1024:
            _CALLS.clear()
        _CALLS[key] = call
    if stream is not None:
        _devices.check_stream_device(stream, handle, call.device_id)
    bounds = voffs if voffs is not None else vcounts
    if check_offsets and bounds is not None:
        _check_offsets(offs if voffs is not None else counts, "offs" if voffs is not None else "counts", form, stream)
    with _devices.current(call.device_id):
        if out is None:
            shape = form.out_shape[::-1] if along_n else form.out_shape
            out = _ag._allocate(x, shape, c, call.device_id, handle)
            vout = as_array(out, "out", stream=handle, known=known)
            if along_n:
                vout = _transposed(vout)
        if form.rows and form.n:
            core = _arrays.as_core_stream(stream, handle)
            producers = tuple(v.stream for v in views if v is not None and v.stream is not None)
            if producers:
                _arrays.wait_for_producers(core, handle, producers)
            d_row, d_col, d_group = _hopper.result_strides(vout)
            if form.layout == "contiguous" or form.groups == 1:
                d_group = 0
            sxp = (0, 0, 0, 0) if vsx is None else (vsx.ptr, sx.row, sx.col, sx.group)
            swp = (0, 0, 0, 0) if vsw is None else (vsw.ptr, sw.row, sw.col, sw.group)
            plan = call.plan
            with _scratch.call_scratch(call.device_id, handle) if plan.needs_scratch else _hopper._NO_SCRATCH as scratch:
                if form.layout == "along_k":
                    x_k, x_o = vx.strides[1], vx.strides[0]
                    w_k, w_o = vw.strides[0], vw.strides[1]
                    plan.run_along_k(call.device_id, handle, (vx.ptr, x_k, x_o), (vw.ptr, w_k, w_o), voffs.ptr,
                                     vout.ptr, (d_row, d_col, d_group), scratch)
                else:
                    a_ptr = plan.operand_address(call.device_id, handle, "x", vx, scratch)
                    b_ptr = plan.operand_address(call.device_id, handle, "w", vw, scratch)
                    plan.run(call.device_id, handle, a_ptr, b_ptr, 0 if bounds is None else bounds.ptr, vout.ptr,
                             (d_row, d_col, d_group), sxp, swp)
    if type(out) is DeviceArray:
        out._set_stream(handle)
    return out

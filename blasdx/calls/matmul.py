"""``bx.matmul`` and ``bx.mma``: GEMMs on whole arrays with the tile libraries' semantics.

``mma(x, y, acc)`` returns ``x @ y + acc`` in acc's type and ``matmul(x, y)`` returns
``x @ y`` in the type the input fixes (:data:`RESULT_TYPES`), as ``mma`` / ``matmul`` of
the CUDA tile libraries (C++ ``ct::mma`` / ``ct::matmul``, Python ``cuda.tile.mma``) do,
so code written against them maps one to one. Each call reads the arrays' dtypes,
shapes, strides and pointer alignment, builds the matching descriptor and launches:

* one block per problem (the descriptor's batched kernel, Descriptor.execute) when a
  problem fits one block's shared memory and there are enough problems to fill the GPU;
* otherwise the multi-block kernel (blasdx.calls.tiled): a grid of output tiles per problem
  with a K loop, for any size.

What a call decides is remembered per (dtypes, shapes, strides, alignments, device), so
a repeated call costs reading the arrays, one dictionary look-up, the output allocation
and the launch. A call runs on its arrays' device (made current for the call, whichever
device was current before); arrays on different devices, or a stream of another device,
are refused. Every rule is checked before anything is allocated or launched; a
failure is an :class:`~blasdx.base.errors.ExecutionError` that quotes the rule it broke.
"""

from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

from .. import arrays as _arrays
from ..base import dtypes as _dt
from ..arrays import ArrayView, DeviceArray, as_array, resolve_stream
from ..arrays import keys as _keys
from ..arrays.view import new_view as _new_view
from ..describe.operators import (
    SM,
    Alignment,
    Arrangement,
    Block,
    Function,
    LeadingDimension,
    MantissaBits,
    Precision,
    Size,
    col_major,
    row_major,
)
from ..engine import emulation as _emulation
from ..engine import hopper as _hopper
from ..engine import ozaki as _ozaki
from ..engine import wide as _hopper_wide
from ..base.errors import DeviceError, ExecutionError
from ..launch import caches as _caches
from ..launch import cuda_modules as _cuda
from ..launch import devices as _devices
from ..run import execute as _execute
from . import tiled as _tiled

__all__ = ["RESULT_TYPES", "RULES", "TF32", "CallPlan", "call_plan", "matmul", "mma", "plan_call", "result_type",
           "tf32"]

#: matmul's result type per input type: the tile libraries' table.
RESULT_TYPES: dict[_dt.DType, _dt.DType] = {
    _dt.int8: _dt.int32,
    _dt.uint8: _dt.int32,
    _dt.float8_e4m3: _dt.float16,
    _dt.float8_e5m2: _dt.float16,
    _dt.float16: _dt.float16,
    _dt.bfloat16: _dt.float32,
    _dt.tfloat32: _dt.float32,
    _dt.float32: _dt.float32,
    _dt.float64: _dt.float64,
}

#: The rules a call must follow, quoted by the errors that enforce them.
RULES = {
    "rank": "x, y and acc are matrices (rank 2) or batches of matrices (rank 3)",
    "inner": "x is [..., M, K] and y is [..., K, N]: x's last extent equals y's second-to-last",
    "batch": "a batch extent equals the result's batch or is 1, which broadcasts (A = C or A = 1)",
    "acc": "acc is [M, N] or [batch, M, N] and fixes the result's shape, batch and element type",
    "dtype": "x and y have the same element type; they are not promoted to a common type",
    "types": "(x, y, acc) element types form one of the supported rows",
    "fast": "fast_accumulation applies to fp8 inputs (float8_e4m3, float8_e5m2) only",
    "bits": "mantissa_bits is the minimum the products keep: float32 inputs take 1-23 (tf32 up to 10, 3xtf32 "
            "beyond), float64 1-52 (int8 residue products, bits relative to each row's / column's largest), other "
            "types at most their own",
}

_FP8 = (_dt.float8_e4m3, _dt.float8_e5m2)
#: The calls complex inputs go to ("matmul", "mma"): blasdx.calls.complex_matmul installs them when the
#: package loads (it builds on this module, which therefore does not import it).
COMPLEX_CALLS: dict[str, Any] = {}
_TORCH_NAMES = {
    "float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
    "float8_e4m3": "float8_e4m3fn", "float8_e5m2": "float8_e5m2", "int32": "int32",
}


def _rule(name: str) -> str:
    return f'(rule: "{RULES[name]}")'


# ---------------------------------------------------------------------------------------------
# tf32 inputs: float32 arrays marked to run on tf32 tensor cores
# ---------------------------------------------------------------------------------------------


class TF32:
    """A float32 array marked as tf32 input (arrays have no tf32 dtype): made by :func:`tf32`."""

    __slots__ = ("array",)

    def __init__(self, array: Any) -> None:
        self.array = array

    def __repr__(self) -> str:
        return f"blasdx.tf32({type(self.array).__name__})"


def tf32(array: Any) -> TF32:
    """Mark a float32 device array as tf32 input of matmul / mma (10-bit mantissa products, f32 sums)."""
    return TF32(array)


def _view(obj: Any, argument: str, stream: int, known: dict[int, int] | None = None) -> ArrayView:
    """The ArrayView of an operand; tf32-marked float32 arrays come back with dtype tfloat32."""
    if type(obj) is TF32:
        view = as_array(obj.array, argument, stream=stream, known=known)
        if view.dtype != _dt.float32:
            raise ExecutionError(
                f"{argument}: blasdx.tf32() marks float32 arrays, but this one holds {view.dtype.name}"
            )
        return view._replace(dtype=_dt.tfloat32)
    return as_array(obj, argument, stream=stream, known=known)


# ---------------------------------------------------------------------------------------------
# shapes and layouts
# ---------------------------------------------------------------------------------------------


class Matrix(NamedTuple):
    """One operand read from its view: extents, storage order, leading dimension, batch."""

    rows: int
    cols: int
    row_major: bool
    ld: int
    batch: int | None  # None for a rank-2 operand
    batch_stride: int

    @property
    def outer(self) -> int:
        """Extent of the strided dimension (rows when row-major)."""
        return self.rows if self.row_major else self.cols


def _matrix(view: ArrayView, argument: str) -> Matrix:
    """Extents, order and leading dimension from shape and strides (rows or columns must be unit-stride)."""
    shape, strides = tuple(view.shape), tuple(view.strides)
    if len(shape) not in (2, 3):
        raise ExecutionError(f"{argument}: shape {shape} has rank {len(shape)}; {_rule('rank')}")
    if any(s < 0 for s in strides):
        raise ExecutionError(f"{argument}: negative strides {strides} are not supported; pass a copy")
    rows, cols = shape[-2:]
    rs, cs = strides[-2:]
    if (cs == 1 or cols <= 1) and (rows <= 1 or rs >= cols):
        row_major_, ld = True, rs if rows > 1 else max(cols, 1)
    elif (rs == 1 or rows <= 1) and (cols <= 1 or cs >= rows):
        row_major_, ld = False, cs if cols > 1 else max(rows, 1)
    else:
        raise ExecutionError(
            f"{argument}: element strides {strides} of shape {shape} are neither row-major (last stride 1) nor "
            "column-major (second-to-last stride 1) with a leading dimension covering the matrix; pass a "
            "contiguous copy"
        )
    batch, batch_stride = None, 0
    if len(shape) == 3:
        batch = shape[0]
        batch_stride = strides[0] if batch > 1 else 0
    return Matrix(rows, cols, row_major_, ld, batch, batch_stride)


def _result_batch(first: Matrix, second: Matrix, names: tuple[str, str] = ("x", "y"), rule: str | None = None
                  ) -> int | None:
    """The broadcast batch of two operands (None when both are matrices): equal batches, or one of 1 (or a matrix)
    taking the other's. ExecutionError naming ``names`` and quoting ``rule`` (default matmul's) otherwise."""
    b1, b2 = first.batch, second.batch
    if b1 is None or b2 is None:
        return b1 if b2 is None else b2
    if b1 == b2 or b2 == 1:
        return b1
    if b1 == 1:
        return b2
    raise ExecutionError(f"{names[0]}: batch {b1} and {names[1]}: batch {b2} do not broadcast; "
                         f"{_rule('batch') if rule is None else rule}")


def _check_inner(mx: Matrix, my: Matrix, vx: ArrayView, vy: ArrayView) -> None:
    if mx.cols != my.rows:
        raise ExecutionError(
            f"x: shape {tuple(vx.shape)} and y: shape {tuple(vy.shape)} do not multiply (K = {mx.cols} vs "
            f"{my.rows}); {_rule('inner')}"
        )


def _check_acc(mx: Matrix, my: Matrix, ma: Matrix, va: ArrayView, argument: str = "acc") -> None:
    """acc's shape against x @ y: same M, N; x and y batches are acc's or 1; no rank-3 operand for rank-2 acc."""
    if (ma.rows, ma.cols) != (mx.rows, my.cols):
        raise ExecutionError(
            f"{argument}: shape {tuple(va.shape)} does not hold x @ y of M x N = {mx.rows} x {my.cols}; "
            f"{_rule('acc')}"
        )
    for name, m in (("x", mx), ("y", my)):
        if m.batch is None:
            continue
        if ma.batch is None:
            raise ExecutionError(
                f"{name}: rank 3 (batch {m.batch}) but {argument} has rank 2; a batched product needs a "
                f"[batch, M, N] {argument}; {_rule('acc')}"
            )
        if m.batch not in (ma.batch, 1):
            raise ExecutionError(
                f"{name}: batch {m.batch} does not match {argument}'s batch {ma.batch}; {_rule('batch')}"
            )


# ---------------------------------------------------------------------------------------------
# devices
# ---------------------------------------------------------------------------------------------


class _DeviceInfo(NamedTuple):
    sm: int
    multiprocessors: int


_DEVICES: dict[int, _DeviceInfo] = {}


def _device_info(device_id: int) -> _DeviceInfo:
    found = _DEVICES.get(device_id)
    if found is None:
        device = _cuda.core().Device(device_id)
        major, minor = device.compute_capability
        found = _DEVICES[device_id] = _DeviceInfo(10 * major + minor, int(device.properties.multiprocessor_count))
    return found


def _device_of(views: tuple[ArrayView, ...], names: tuple[str, ...]) -> int:
    """The one device of the arrays (the call runs there); the current device when none has memory."""
    ids = {v.device_id for v in views if v.device_id is not None}
    if len(ids) > 1:
        listed = ", ".join(f"{n} on device {v.device_id}" for n, v in zip(names, views))
        raise ExecutionError(f"arrays on different devices ({listed}); a call runs on one GPU: move them to one device")
    if ids:
        return ids.pop()
    current = _devices.current_device_id()
    return 0 if current is None else current


# ---------------------------------------------------------------------------------------------
# the plan of one kind of call
# ---------------------------------------------------------------------------------------------


def _alignment(ptr: int, itemsize: int, batch_stride: int, batch: int) -> int:
    """The Alignment (bytes, <= 16) the pointer and the batch stride allow (the copy-width rule)."""
    return _tiled.copy_width(ptr, itemsize, 0, 1, batch_stride, batch)


class CallPlan:
    """What every call with the same dtypes, shapes, strides, alignments and device does.

    ``kind`` is the path: "block" (one block per problem), "hopper" (the sm_90 wgmma + TMA
    engine) or "tiled" (the multi-block mma.sync kernel); ``reason`` says why the engine
    was not taken when it was not.
    """

    __slots__ = (
        "kind", "shape", "dtype", "batch", "m", "n", "k", "beta", "desc", "kernel", "strides", "device_id",
        "result_layout", "spans", "reason", "scheme",
    )

    def __repr__(self) -> str:
        if self.kind == "block":
            what = repr(self.desc)
        elif self.kind == "hopper":
            what = self.kernel.describe()
        else:
            what = repr(self.kernel.desc)
        why = f", {self.reason}" if self.reason else ""
        scheme = "" if self.scheme.name == "native" else f", {self.scheme}"
        return f"CallPlan({self.kind}, result {self.shape} {self.dtype}{scheme}, {what}{why})"

    def describe(self) -> str:
        """One line: the path, what it runs, and why the Hopper engine was not taken (if not)."""
        return repr(self)[len("CallPlan("):-1]


def plan_call(
    vx: ArrayView, vy: ArrayView, vacc: ArrayView | None, result: _dt.DType, device: _DeviceInfo, device_id: int,
    out: ArrayView | None = None, allow_block: bool = True, fast_accumulation: bool = False,
    scheme: _emulation.Scheme | None = None,
) -> CallPlan:
    """Check the operands and pick the kernel: matmul when vacc is None, else mma (acc's type, shape).

    ``out`` is the array the result goes to (None: a new C-contiguous one); ``allow_block``
    False keeps the call on the multi-block kernel (one that reads acc and writes out).
    ``fast_accumulation`` (fp8 on sm_90) builds the one-block descriptor for sm_90a, whose
    wgmma keeps the sum in the tensor core's accumulator. ``scheme`` (blasdx.engine.emulation) is
    how products are formed: "tf32" runs float32 views as tf32; "3xtf32" runs on the one-block
    kernel (MantissaBits: mma.sync on split fragments, sm_80 and newer) when the call takes it,
    else on the Hopper engine, or where neither can, on the native float32 kernel (which keeps
    more bits).
    """
    scheme = scheme or _emulation.resolve(vx.dtype, None)
    if scheme.name == "tf32":
        vx, vy = vx._replace(dtype=_dt.tfloat32), vy._replace(dtype=_dt.tfloat32)
    mx, my = _matrix(vx, "x"), _matrix(vy, "y")
    _check_inner(mx, my, vx, vy)
    if vacc is None:
        batch = _result_batch(mx, my)
        ma = None
    else:
        ma = _matrix(vacc, "acc")
        _check_acc(mx, my, ma, vacc)
        batch = ma.batch
    row = _dt.find_combination(vx.dtype, vy.dtype, result, False)
    if row is None:  # the callers check the table first; this guards the kernels
        raise ExecutionError(f"x, y, acc: no kernel for {vx.dtype.name} x {vy.dtype.name} -> {result.name}")
    if row.min_sm > device.sm:
        raise DeviceError(
            f"{row.describe()} needs compute capability {row.min_sm // 10}.{row.min_sm % 10} or newer; device "
            f"{device_id} is {device.sm // 10}.{device.sm % 10}"
        )
    m, n, k = mx.rows, my.cols, mx.cols
    plan = CallPlan()
    plan.m, plan.n, plan.k = m, n, k
    plan.batch = 1 if batch is None else batch
    plan.shape = (m, n) if batch is None else (batch, m, n)
    plan.dtype = result
    plan.device_id = device_id
    plan.beta = 0 if vacc is None else 1
    plan.desc = plan.kernel = plan.strides = plan.spans = plan.reason = None
    plan.scheme = scheme
    if out is not None:
        _check_out_shape(out, plan)
    mo = None if out is None else _matrix(out, "out")
    plan.result_layout = mo
    if scheme.name == "ozaki":
        emulated, why = _ozaki_plan(vx, vy, m, n, k, batch, device, scheme)
        if emulated is not None:
            plan.scheme = _emulation.resolve(vx.dtype, scheme.mantissa_bits, k)
            plan.kind, plan.kernel = "hopper", emulated
            return plan
        scheme = plan.scheme = _emulation.resolve(vx.dtype, None)
        fallback = f"int8 emulation not run ({why}): native float64 products keep the bits"
    else:
        fallback = None
    arch_specific = fast_accumulation and device.sm == 90 and vx.dtype in _FP8
    desc = None
    if allow_block:  # 3xtf32: the block GEMM's mma.sync split (MantissaBits), sm_80 and newer
        bits = scheme.mantissa_bits if scheme.name == "3xtf32" else None
        desc = _block_descriptor(vx, vy, mx, my, out, mo, result, m, n, k, device.sm, plan.batch, arch_specific,
                                 bits)
    tile = _tiled.tile_shape(vx.dtype, m, n, device.sm, result)
    tiles = math.ceil(m / tile.m) * math.ceil(n / tile.n)
    if desc is not None and (tiles == 1 or plan.batch >= device.multiprocessors):
        plan.kind, plan.desc, plan.reason = "block", desc, fallback
        if bits is not None and desc.scheme.name != scheme.name:  # before sm_80: FFMA keeps every float32 bit
            plan.scheme = desc.scheme
            plan.reason = f"{scheme.name} not run (mma.sync tf32 needs sm_80): native float32 products keep the bits"
        return plan
    plan.strides = (mx, my, ma)
    split = _emulation.engine_scheme(scheme, k)
    engine, plan.reason = _engine_plan(vx, vy, mx, my, result, m, n, k, plan.batch, device, out,
                                       fast_accumulation=fast_accumulation, scheme=split or "native")
    if fallback is not None:
        plan.reason = fallback if plan.reason is None else f"{fallback}; {plan.reason}"
    if engine is not None:
        plan.kind, plan.kernel = "hopper", engine
        if scheme.name == "3xtf32" and not split:  # the engine's 3xtf32 keeps fewer bits (blasdx.engine.emulation)
            plan.scheme = _emulation.resolve(vx.dtype, None)
            plan.reason = (f"3xtf32 not run (the engine's keeps {_emulation.ENGINE_3XTF32_BITS} bits below "
                           f"K = {_emulation.ENGINE_3XTF32_FULL_MIN_K}, {scheme.mantissa_bits} asked at K = {k}): "
                           "native float32 products keep the bits")
        return plan
    if scheme.name == "3xtf32":  # native float32 products keep every bit 3xtf32 would
        plan.scheme = _emulation.resolve(vx.dtype, None)
        plan.reason = f"3xtf32 not run ({plan.reason}): native float32 products keep the bits"
    plan.kind = "tiled"
    vec_a = _tiled.copy_width(vx.ptr, vx.dtype.size, mx.ld, mx.outer, mx.batch_stride, mx.batch or 1)
    vec_b = _tiled.copy_width(vy.ptr, vy.dtype.size, my.ld, my.outer, my.batch_stride, my.batch or 1)
    plan.kernel = _tiled.tiled_kernel(
        vx.dtype, vy.dtype, result, mx.row_major, my.row_major, m, n, device.sm, vec_a, vec_b
    )
    return plan


def _engine_plan(vx: ArrayView, vy: ArrayView, mx: Matrix, my: Matrix, result: _dt.DType, m: int, n: int, k: int,
                 batch: int, device: _DeviceInfo, vout: ArrayView | None = None, config: Any = None,
                 splits: int | None = None, scheme: str = "native",
                 fast_accumulation: bool = False) -> tuple[Any, str | None]:
    """The Hopper engine's plan of this call, or (None, why it does not run it).

    ``vout`` is the result array when one is given (None: a new C-contiguous one);
    ``config`` / ``splits`` override the engine's own choice (benchmark sweeps, tests);
    ``fast_accumulation`` keeps fp8 sums in the tensor core (no promotion to f32 registers).
    """
    if device.sm != 90:
        return None, f"the wgmma engine needs sm_90 (this GPU is sm_{device.sm})"
    # f64 / f32: DMMA / FFMA consumers on the same pipeline (hopper_wide); 3xtf32: wgmma on split parts
    wide = scheme == "native" and _hopper_wide.serves(vx.dtype, result)
    if scheme != "native" and not _hopper.serves(vx.dtype, result, scheme):
        return None, f"the wgmma engine runs {scheme} for float32 -> float32 only"
    if scheme == "native" and not wide and not _hopper.serves(vx.dtype, result, b=vy.dtype):
        served = ", ".join(f"{a.name} -> {c.name}" for a, c in sorted(_hopper.SERVED | _hopper_wide.SERVED, key=str))
        return None, f"the Hopper engine runs {served}"
    if k == 0:
        return None, "K = 0: nothing to multiply"
    engine_module: Any = _hopper_wide if wide else _hopper
    route_a = engine_module.route("x", vx.dtype, vx.ptr, mx.row_major, mx.ld, mx.outer, mx.batch_stride,
                                  (mx.batch or 1) > 1)
    route_b = engine_module.route("y", vy.dtype, vy.ptr, not my.row_major, my.ld, my.outer, my.batch_stride,
                                  (my.batch or 1) > 1)
    d_layout = None if vout is None else (*_hopper.result_strides(vout), vout.ptr)
    common = (vx.dtype, result, m, n, k, batch, route_a, route_b, mx.ld, my.ld, mx.batch or 1, my.batch or 1,
              mx.batch_stride, my.batch_stride, vx.ptr, vy.ptr, device.multiprocessors, d_layout, config, splits)
    try:
        if wide:
            engine = _hopper_wide.WidePlan(*common)
        else:
            engine = _hopper.EnginePlan(*common, scheme, vy.dtype, fast_accumulation)
    except ExecutionError as exc:  # TMA refused an operand: the multi-block kernel reads anything
        return None, f"TMA: {exc}"
    return engine, None


def _ozaki_plan(vx: ArrayView, vy: ArrayView, m: int, n: int, k: int, batch: int | None, device: _DeviceInfo,
                scheme: _emulation.Scheme) -> tuple[Any, str | None]:
    """The float64-on-int8 plan of this call (blasdx.engine.ozaki), or (None, why it does not run)."""
    if device.sm != 90:
        return None, f"the int8 engine needs sm_90 (this GPU is sm_{device.sm})"
    if batch is not None:
        return None, "batches run as plain float64"
    if min(m, n, k) == 0:
        return None, "an empty product"
    if k > _ozaki.MAX_K:
        return None, f"K = {k} exceeds the {_ozaki.MAX_K} whose int32 residue sums are exact"
    try:
        return _ozaki.OzakiPlan(m, n, k, scheme.mantissa_bits, device.multiprocessors), None
    except ExecutionError as exc:  # TMA refused the residue operands (not expected: they are K-major, padded)
        return None, f"TMA: {exc}"


def _check_out_shape(vout: ArrayView, plan: CallPlan) -> None:
    """out holds exactly the result: acc's shape and type."""
    if tuple(vout.shape) != plan.shape or vout.dtype != plan.dtype:
        raise ExecutionError(
            f"out: shape {tuple(vout.shape)} and type {vout.dtype.name} do not match the result's {plan.shape} "
            f"{plan.dtype.name} (acc's); {_rule('acc')}"
        )


def _block_descriptor(
    vx: ArrayView, vy: ArrayView, mx: Matrix, my: Matrix, vout: ArrayView | None, mo: Matrix | None,
    result: _dt.DType, m: int, n: int, k: int, sm: int, batch: int, arch_specific: bool = False,
    mantissa_bits: int | None = None,
) -> Any:
    """The one-block-per-problem descriptor of this call, or None when a problem does not fit one block.

    ``mantissa_bits`` adds MantissaBits (3xtf32 calls: the block GEMM splits float32 fragments)."""
    if min(m, n, k) == 0:
        return None
    al_a = _alignment(vx.ptr, vx.dtype.size, mx.batch_stride, mx.batch or 1)
    al_b = _alignment(vy.ptr, vy.dtype.size, my.batch_stride, my.batch or 1)
    if vout is None or mo is None:  # a new contiguous row-major result (allocations are 256-byte aligned)
        c_row_major, ldc = True, n
        al_c = _alignment(0, result.size, m * n, batch)
    else:
        c_row_major, ldc = mo.row_major, mo.ld
        al_c = _alignment(vout.ptr, result.size, mo.batch_stride, mo.batch or 1)
    try:
        desc = (
            Size(m, n, k)
            + Precision(vx.dtype, vy.dtype, result)
            + Function.MM
            + Arrangement(
                row_major if mx.row_major else col_major,
                row_major if my.row_major else col_major,
                row_major if c_row_major else col_major,
            )
            + LeadingDimension(mx.ld, my.ld, ldc)
            + Alignment(al_a, al_b, al_c)
            + SM(sm, arch_specific=arch_specific)
            + Block()
        )
        if mantissa_bits is not None:
            desc = desc + MantissaBits(mantissa_bits)
    except Exception:  # a shape the descriptor rules refuse (e.g. a leading dimension it does not allow)
        return None
    return desc if desc.is_supported else None


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------


def _allocate(like: Any, shape: tuple[int, ...], dtype: _dt.DType, device_id: int, stream: int) -> Any:
    """A new C-contiguous array of ``like``'s library (PyTorch, CuPy; else a blasdx DeviceArray)."""
    library = _arrays._library_of(like)
    if library == "torch":
        import torch

        return torch.empty(shape, dtype=getattr(torch, _TORCH_NAMES[dtype.name]), device=like.device)
    if library == "cupy" and dtype.name in ("float16", "float32", "float64", "int32"):
        import cupy

        with cupy.cuda.Device(device_id):
            return cupy.empty(shape, dtype=dtype.host_dtype)
    npd = dtype.host_dtype
    nbytes = max(math.prod(shape) * npd.itemsize, 1)  # device_id is current: the default streams are its own
    buffer = _devices.core_device(device_id).allocate(nbytes, stream=_arrays.core_stream(stream))
    array = DeviceArray(buffer, shape, npd, device_id=device_id)
    array._set_stream(stream)
    return array


def _copy_into(out: Any, acc: Any, stream: int, device_id: int) -> None:
    """out[...] = acc by the arrays' own library on ``device_id``, ordered on ``stream`` (1, 2: the default stream)."""
    special = stream in (0, _arrays.LEGACY_STREAM, _arrays.PER_THREAD_STREAM)
    if _arrays._library_of(out) == "torch":
        import torch

        current = torch.cuda.current_stream(out.device)
        if special and current.cuda_stream == 0 or current.cuda_stream == stream:
            out.copy_(acc)
            return
        side = (
            torch.cuda.default_stream(out.device) if special else torch.cuda.ExternalStream(stream, device=out.device)
        )
        with torch.cuda.stream(side):
            out.copy_(acc)
        return
    import cupy

    with cupy.cuda.Device(device_id):
        side = cupy.cuda.Stream.null if special else cupy.cuda.ExternalStream(stream, device_id)
        with side:
            cupy.copyto(out, acc)


# ---------------------------------------------------------------------------------------------
# launching
# ---------------------------------------------------------------------------------------------


def _tiled_arguments(plan: CallPlan, cin: ArrayView | None, dout: ArrayView, alpha: float, beta: float
                     ) -> tuple[int, int, tuple[Any, ...]]:
    """The multi-block kernel's grid and its arguments after the four pointers (x, y, C, D) for C and D laid out
    as ``cin`` (None: no C) and ``dout``: functions of shapes and strides alone."""
    mx, my, _ = plan.strides
    rs_c = cs_c = bs_c = 0
    if cin is not None:
        rs_c, cs_c = cin.strides[-2:]
        bs_c = cin.strides[0] if len(cin.shape) == 3 and cin.shape[0] > 1 else 0
    rs_d, cs_d = dout.strides[-2:]
    bs_d = dout.strides[0] if len(dout.shape) == 3 and dout.shape[0] > 1 else 0
    grid_x, grid_y, _ = plan.kernel.grid(plan.m, plan.n, plan.batch)
    return grid_x, grid_y, (plan.m, plan.n, plan.k, mx.ld, my.ld, rs_c, cs_c, rs_d, cs_d, mx.batch_stride,
                            my.batch_stride, bs_c, bs_d, plan.batch, alpha, beta)


def _launch_tiled(plan: CallPlan, vx: ArrayView, vy: ArrayView, cin: ArrayView | None, dout: ArrayView,
                  alpha: float, beta: float, handle: int) -> None:
    """The multi-block kernel: D = alpha x @ y + beta C, on the plan's device (current) and stream ``handle``."""
    grid_x, grid_y, tail = _tiled_arguments(plan, cin, dout, alpha, beta)
    plan.kernel.packed(plan.device_id).launch(grid_x, grid_y, handle, vx.ptr, vy.ptr, 0 if cin is None else cin.ptr,
                                              dout.ptr, *tail)


_CALLS: dict[tuple[Any, ...], CallPlan] = {}


def _key(vx: ArrayView, vy: ArrayView, vacc: ArrayView | None, extra: Any) -> tuple[Any, ...]:
    """What a call's plan depends on: dtypes, shapes, strides, pointer alignment classes, device."""
    acc = () if vacc is None else (vacc.dtype.name, vacc.shape, vacc.strides, vacc.ptr & 15, vacc.device_id)
    return (vx.dtype.name, vx.shape, vx.strides, vx.ptr & 15, vx.device_id, vy.dtype.name, vy.shape, vy.strides,
            vy.ptr & 15, vy.device_id, acc, extra)


#: ``cache[key]``, built by ``build()`` on a miss (blasdx.launch.caches).
_cached_plan = _caches.cached


def _spans(views: tuple[tuple[str, ArrayView], ...]) -> tuple[tuple[str, int, int], ...]:
    """(name, low, high) byte offsets from each array's first element (a function of shape and strides)."""
    spans = []
    for name, v in views:
        low, high = _arrays._span(0, v.shape, v.strides, v.dtype.size)
        spans.append((name, low, high))
    return tuple(spans)


def _check_overlap(out: ArrayView, out_span: tuple[int, int], others: tuple[tuple[str, int, int], ...],
                   ptrs: tuple[int, ...]) -> None:
    """ExecutionError when out's bytes meet those of an array it is computed from."""
    _raise_overlap(out.ptr, out_span, others, ptrs)


def _run(plan: CallPlan, x_view: ArrayView, y_view: ArrayView, acc: Any, vacc: ArrayView | None, out: Any,
         vout: ArrayView, stream: Any, handle: int) -> None:
    """Launch the plan's kernel into ``out`` (already allocated or checked), with the plan's device current."""
    if plan.batch == 0 or plan.m == 0 or plan.n == 0:
        return
    if plan.scheme.name == "tf32" and x_view.dtype == _dt.float32:
        x_view, y_view = x_view._replace(dtype=_dt.tfloat32), y_view._replace(dtype=_dt.tfloat32)
    if plan.kind in ("tiled", "hopper"):
        core = _arrays.as_core_stream(stream, handle)
        producers = tuple(v.stream for v in (x_view, y_view, vacc, vout) if v is not None and v.stream is not None)
        if producers:
            _arrays.wait_for_producers(core, handle, producers)
        if plan.kind == "hopper":
            plan.kernel.run(plan.device_id, core, handle, x_view, y_view, vacc, vout, 1.0, float(plan.beta))
        else:
            _launch_tiled(plan, x_view, y_view, vacc, vout, 1, plan.beta, handle)
    else:
        if vacc is not None and vout.ptr != vacc.ptr:
            _copy_into(out, acc, handle, plan.device_id)
        _execute.execute_on(plan.desc, x_view, y_view, vout, 1, plan.beta, handle)
    if type(out) is DeviceArray:
        out._set_stream(handle)


def _launch_call(plan: CallPlan, like: Any, vx: ArrayView, vy: ArrayView, acc: Any, vacc: ArrayView | None, out: Any,
                 vout: ArrayView | None, stream: Any, handle: int, known: dict[int, int]) -> tuple[Any, ArrayView]:
    """How a checked matmul / mma ends: ``stream`` checked against the plan's device, that device made current, a
    new result of ``like``'s library when ``out`` is None, the launch; (out, its view)."""
    if stream is not None:
        _devices.check_stream_device(stream, handle, plan.device_id)
    token = _devices.enter(plan.device_id)
    try:
        if out is None:
            out = _allocate(like, plan.shape, plan.dtype, plan.device_id, handle)
            vout = as_array(out, "out", stream=handle, known=known)
        _run(plan, vx, vy, acc, vacc, out, vout, stream, handle)  # type: ignore[arg-type]
    finally:
        if token is not None:
            _devices.leave(token)
    return out, vout  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# public calls
# ---------------------------------------------------------------------------------------------


def matmul(x: Any, y: Any, *, out_dtype: Any = None, stream: Any = None, dtype: Any = None,
           mantissa_bits: int | None = None, fast_accumulation: bool = False) -> Any:
    """``x @ y`` as a new array of ``out_dtype``, by default the type the inputs fix (:data:`RESULT_TYPES`).

    x is [M, K] or [batch, M, K], y is [K, N] or [batch, K, N]; a batch of 1 (or a matrix)
    broadcasts. Any row- or column-major layout and leading dimension per operand. The
    result is a C-contiguous array of x's library (PyTorch, CuPy, else a blasdx
    DeviceArray). ``out_dtype`` picks another row of the type table for the inputs' type
    (float16 -> float32, bfloat16 -> bfloat16 as torch.matmul gives it, fp8 -> float32): the
    sums stay in the row's accumulator and are rounded once into the result. Use :func:`tf32`
    to run float32 inputs on tf32 tensor cores; ``mantissa_bits`` states the bits the products
    must keep (blasdx.engine.emulation: float32 inputs with 11-23 bits run as three tf32 products
    on Hopper). ``fast_accumulation`` is :func:`mma`'s (fp8 inputs only).
    """
    if stream is None and dtype is None and mantissa_bits is None and fast_accumulation is False:
        found = _keys.read_pair(x, y)
        if found is not None:
            try:
                bound = _BOUND.get(found[0] if out_dtype is None else (found[0], out_dtype))
            except TypeError:  # an unhashable out_dtype: the full path says what it is
                bound = None
            if bound is not None:
                return bound.matmul(found[1], found[2])
    if not isinstance(fast_accumulation, bool):
        raise ExecutionError(f"fast_accumulation: expected True or False, got {fast_accumulation!r}")
    if dtype is not None:
        raise ExecutionError(
            f"dtype={dtype!r}: matmul names its result type out_dtype= (as scaled_mm and grouped_mm do); by "
            f"default the input type fixes it ({_result_table()})"
        )
    known: dict[int, int] = {}  # the library streams asked during this call
    handle = resolve_stream(stream, (_unwrap(x), _unwrap(y)), known=known)
    vx, vy = _view(x, "x", handle, known), _view(y, "y", handle, known)
    if fast_accumulation and vx.dtype not in _FP8:
        raise ExecutionError(f"fast_accumulation=True with {vx.dtype.name} inputs; {_rule('fast')}")
    if vx.dtype.is_complex:
        if out_dtype is not None:
            raise ExecutionError(f"out_dtype={out_dtype!r}: {vx.dtype.name} inputs give {vx.dtype.name} results; "
                                 "leave out_dtype None")
        return COMPLEX_CALLS["matmul"](x, y, vx, vy, handle, known, stream, mantissa_bits)
    result = result_type(vx.dtype, out_dtype)
    key = _key(vx, vy, None, ("matmul", mantissa_bits, fast_accumulation, result))
    plan = _CALLS.get(key)
    if plan is None:
        _check_shapes(vx, vy, None)  # the arguments before the device (a missing GPU is reported after them)
        device_id = _device_of((vx, vy), ("x", "y"))
        plan = _cached_plan(_CALLS, key, lambda: _plan_matmul(vx, vy, device_id, mantissa_bits, fast_accumulation,
                                                             result))
    out, vout = _launch_call(plan, _unwrap(x), vx, vy, None, None, None, None, stream, handle, known)
    if stream is None and mantissa_bits is None and not fast_accumulation:
        _bind_matmul(x, y, out, plan, vx, vy, vout, out_dtype)
    return out


def result_type(a: _dt.DType, out_dtype: Any = None) -> _dt.DType:
    """matmul's result type for inputs of type ``a``: :data:`RESULT_TYPES`'s, or ``out_dtype`` where the type
    table has the row (a, a -> out_dtype); ExecutionError naming the argument otherwise."""
    default = RESULT_TYPES.get(a)
    if default is None:
        raise ExecutionError(
            f"x: matmul takes {', '.join(d.name for d in RESULT_TYPES)} inputs, not {a.name} ({_result_table()})"
        )
    if out_dtype is None:
        return default
    try:
        c = _dt.as_dtype(out_dtype, argument="out_dtype")
    except TypeError as exc:
        raise ExecutionError(str(exc)) from None
    if _dt.find_combination(a, a, c, False) is None:
        rows = [r.c.name for r in _dt.COMBINATIONS if r.a == a and r.b == a and not r.is_complex]
        raise ExecutionError(f"out_dtype: {a.name} inputs give {' or '.join(rows)}, not {c.name}")
    return c


def _plan_matmul(vx: ArrayView, vy: ArrayView, device_id: int, mantissa_bits: int | None = None,
                 fast_accumulation: bool = False, result: _dt.DType | None = None) -> CallPlan:
    _check_dtypes(vx, vy)
    scheme = _resolve_scheme(vx.dtype, mantissa_bits)
    result = result_type(vx.dtype) if result is None else result
    return plan_call(vx, vy, None, result, _device_info(device_id), device_id, scheme=scheme,
                     fast_accumulation=fast_accumulation)


def mma(x: Any, y: Any, acc: Any, *, out: Any = None, fast_accumulation: bool = False, stream: Any = None,
        mantissa_bits: int | None = None) -> Any:
    """``x @ y + acc`` as a new array of acc's type and shape (or into ``out``; ``out=acc`` works in place).

    acc is [M, N] or [batch, M, N] and fixes the batch; x and y have acc's batch or 1 (or
    are matrices). ``fast_accumulation`` is accepted for fp8 inputs only: on sm_90 the whole
    K sum stays in the tensor core's accumulator (about 14 significant bits per addition,
    docs/index.md) in the Hopper engine and in one-block problems that wgmma tiles, where by
    default the engine adds the tensor core's sums into f32 registers every 128 K elements;
    elsewhere it changes nothing. ``mantissa_bits`` as for :func:`matmul`.
    """
    if stream is None and mantissa_bits is None and fast_accumulation is False:
        found = _mma_key(x, y, acc, out)
        if found is not None:
            bound = _BOUND.get(found[0])
            if bound is not None:
                return bound.mma(acc, out, found[1])
    if not isinstance(fast_accumulation, bool):
        raise ExecutionError(f"fast_accumulation: expected True or False, got {fast_accumulation!r}")
    known: dict[int, int] = {}  # the library streams asked during this call
    handle = resolve_stream(stream, (acc if out is None else out, _unwrap(x), _unwrap(y)), known=known)
    vx, vy = _view(x, "x", handle, known), _view(y, "y", handle, known)
    vacc = as_array(acc, "acc", stream=handle, known=known)
    if fast_accumulation and vx.dtype not in _FP8:
        raise ExecutionError(f"fast_accumulation=True with {vx.dtype.name} inputs; {_rule('fast')}")
    vout = None if out is None else as_array(out, "out", stream=handle, known=known)
    given_out = out is not None
    if vx.dtype.is_complex:
        return COMPLEX_CALLS["mma"](x, y, acc, out, vx, vy, vacc, vout, handle, known, stream, mantissa_bits)
    in_place = vout is not None and vout.ptr == vacc.ptr and vout.strides == vacc.strides and vout.shape == vacc.shape
    out_key = None if vout is None else (vout.dtype.name, vout.shape, vout.strides, vout.ptr & 15, in_place,
                                         type(out))
    key = _key(vx, vy, vacc, ("mma", type(acc), out_key, fast_accumulation, mantissa_bits))
    plan = _CALLS.get(key)
    if plan is None:
        _check_shapes(vx, vy, vacc)
        views, names = (vx, vy, vacc), ("x", "y", "acc")
        if vout is not None:
            views, names = views + (vout,), names + ("out",)
        device_id = _device_of(views, names)
        copyable = _one_block_allowed(acc, out, vacc, in_place, device_id)
        plan = _cached_plan(_CALLS, key, lambda: _plan_mma(vx, vy, vacc, vout, device_id, copyable, fast_accumulation,
                                                   mantissa_bits))
    if vout is not None:
        if vout.readonly:
            raise ExecutionError("out: the array is read-only; pass a writable array")
        if not (in_place and plan.kind == "block"):  # execute() checks C against A and B itself
            spans = plan.spans
            if spans is None:
                spans = plan.spans = _spans((("out", vout), ("x", vx), ("y", vy), ("acc", vacc)))
            _check_overlap(vout, spans[0][1:], spans[1:3] if in_place else spans[1:],
                           (vx.ptr, vy.ptr, vacc.ptr))
    out, vout = _launch_call(plan, acc, vx, vy, acc, vacc, out, vout, stream, handle, known)
    if stream is None and mantissa_bits is None and not fast_accumulation:
        _bind_mma(x, y, acc, out if given_out else None, plan, vx, vy, vacc, vout, in_place)
    return out


def _one_block_allowed(acc: Any, out: Any, vacc: ArrayView, in_place: bool, device_id: int) -> bool:
    """Whether an mma may run on the one-block kernel, which computes in place.

    In place (out is acc) it may. Otherwise acc must first be copied into the result, which
    PyTorch / CuPy do: for a new result always, and into a given ``out`` only when the
    problems fill the GPU (a second launch pays off there); else the multi-block kernel or
    the engine reads acc and writes out in one launch, the host's cost of one call.
    """
    if in_place:
        return True
    if not _library_copy(acc, acc if out is None else out):
        return False
    return out is None or _problems(vacc) >= _device_info(device_id).multiprocessors


def _problems(view: ArrayView) -> int:
    """How many matrices a [M, N] or [batch, M, N] array holds (0 for a malformed rank: the checks say why)."""
    return view.shape[0] if len(view.shape) == 3 else 1


def _library_copy(acc: Any, out: Any) -> bool:
    """Whether acc's library can copy acc into out (both PyTorch or both CuPy)."""
    library = _arrays._library_of(acc)
    return library in ("torch", "cupy") and _arrays._library_of(out) == library


def _plan_mma(vx: ArrayView, vy: ArrayView, vacc: ArrayView, vout: ArrayView | None, device_id: int,
              allow_block: bool, fast_accumulation: bool = False, mantissa_bits: int | None = None) -> CallPlan:
    _check_dtypes(vx, vy)
    scheme = _resolve_scheme(vx.dtype, mantissa_bits)
    if _dt.find_combination(vx.dtype, vy.dtype, vacc.dtype, False) is None:
        rows = "; ".join(_dt.supported_rows(is_complex=False))
        raise ExecutionError(
            f"x, y, acc: {vx.dtype.name} x {vy.dtype.name} + {vacc.dtype.name} is not supported; {_rule('types')}: "
            f"{rows}"
        )
    return plan_call(vx, vy, vacc, vacc.dtype, _device_info(device_id), device_id, vout, allow_block,
                     fast_accumulation, scheme)


def _resolve_scheme(dtype: _dt.DType, mantissa_bits: int | None) -> _emulation.Scheme:
    """The products' scheme for ``mantissa_bits`` (ExecutionError quoting the rule when it cannot be kept)."""
    try:
        return _emulation.resolve(dtype, mantissa_bits)
    except ExecutionError as exc:
        raise ExecutionError(f"{exc}; {_rule('bits')}") from None


def _check_shapes(vx: ArrayView, vy: ArrayView, vacc: ArrayView | None) -> None:
    """The host-only checks of a new kind of call (types, ranks, layouts, extents), run before its device is
    looked up; the plan checks the rest."""
    _check_dtypes(vx, vy)
    mx, my = _matrix(vx, "x"), _matrix(vy, "y")
    _check_inner(mx, my, vx, vy)
    if vacc is not None:
        _check_acc(mx, my, _matrix(vacc, "acc"), vacc)


def _check_dtypes(vx: ArrayView, vy: ArrayView) -> None:
    if vx.dtype != vy.dtype:
        raise ExecutionError(f"x: {vx.dtype.name} and y: {vy.dtype.name} differ; {_rule('dtype')}")


def _result_table() -> str:
    return ", ".join(f"{a.name} -> {c.name}" for a, c in RESULT_TYPES.items())


def _unwrap(obj: Any) -> Any:
    return obj.array if type(obj) is TF32 else obj


# ---------------------------------------------------------------------------------------------
# the hot path: a kind of call bound to what its first call decided
# ---------------------------------------------------------------------------------------------

#: Bound calls by the keys of their arrays (blasdx.arrays.keys) and pointer alignment classes.
_BOUND: dict[tuple[Any, ...], _Bound] = {}


def _rest(view: ArrayView) -> tuple[Any, ...]:
    """A view's fields after the pointer, without its owner and producer stream (a bound call keeps no array)."""
    return (view.shape, view.strides, view.dtype, view.device_id, False, None, None)


_POINTER_READERS = {"torch": operator.methodcaller("data_ptr"), "cupy": operator.attrgetter("data.ptr")}


def _pointer_reader(array: Any) -> Any:
    """The function reading the data pointer of arrays like ``array`` (PyTorch, CuPy or blasdx's own): a C-level
    callable, so that reading a bound call's new result costs no Python frame."""
    return _POINTER_READERS.get(_arrays._library_of(array), _BLASDX_POINTER)  # type: ignore[arg-type]


_BLASDX_POINTER = operator.attrgetter("_ptr")


def _allocator(like: Any, plan: CallPlan) -> Any:
    """A function of the stream handle making a new result as :func:`_allocate` does, its arguments fixed once
    (and no reference to ``like`` kept)."""
    shape, dtype, device_id = plan.shape, plan.dtype, plan.device_id
    library = _arrays._library_of(like)
    if library == "torch":
        import torch

        # empty_strided with the C-contiguous strides: the same tensor as torch.empty, 1.1 us less per call (H200)
        empty, torch_dtype, device = torch.empty_strided, getattr(torch, _TORCH_NAMES[dtype.name]), like.device
        strides = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
        return lambda handle: empty(shape, strides, dtype=torch_dtype, device=device)
    if library == "cupy" and dtype.name in ("float16", "float32", "float64", "int32"):
        import cupy

        host = dtype.host_dtype

        def allocate(handle: int) -> Any:
            with cupy.cuda.Device(device_id):
                return cupy.empty(shape, dtype=host)

        return allocate
    return lambda handle: _allocate(None, shape, dtype, device_id, handle)


class BoundCall:
    """How every bound array call (matmul, mma, scaled_mm, solve_triangular) starts: its arrays' library stream,
    its device made current, a new result when none is given."""

    __slots__ = ("device_id", "stream_of", "allocate", "pointer_of")

    def begin(self, out: Any) -> tuple[int, Any, Any, int | None]:
        """(stream handle, :func:`~blasdx.launch.devices.enter`'s token, out, the new result's pointer): the call's
        device made current and, when ``out`` is None, a new result allocated on the stream (else the pointer is
        None). The caller leaves the device; nothing stays entered when the allocation fails."""
        device = self.device_id
        handle = self.stream_of(device)
        token = _devices.enter(device)
        if out is not None:
            return handle, token, out, None
        try:
            out = self.allocate(handle)
            return handle, token, out, self.pointer_of(out)
        except BaseException:
            _devices.leave(token)
            raise


class _Bound(BoundCall):
    """What every call of one kind does once its arrays are known to be of that kind: no reading of views,
    no checks that depend on dtypes, shapes and strides, no plan look-up. Holds no array."""

    __slots__ = ("plan", "rests", "block", "empty", "overlap", "windows", "engine", "beta", "scalars", "tiled")

    def __init__(self, plan: CallPlan, stream_of: Any, allocate: Any, pointer_of: Any,
                 rests: tuple[tuple[Any, ...] | None, ...], block: tuple[Any, ...] | None = None,
                 overlap: tuple[Any, ...] | None = None) -> None:
        self.plan = plan
        self.device_id = plan.device_id
        self.stream_of = stream_of
        self.allocate = allocate
        self.pointer_of = pointer_of
        self.rests = rests  # x, y, acc, out
        # matmul on one block per problem: (its PackedLaunch, grid, arguments after C, C's alignment)
        self.block = block
        self.empty = plan.batch == 0 or plan.m == 0 or plan.n == 0
        self.overlap = overlap  # (out's span, the others' spans) when out must be checked against them
        # the same check on pointer differences, for x, y and acc ((0, 0): never meets)
        windows = None if overlap is None else overlap_windows(overlap[0], overlap[1])
        self.windows = None if windows is None else windows + ((0, 0),) * (3 - len(windows))
        # the Hopper engine's plan, run directly (its launch reads pointers, strides and shapes of the views)
        self.engine = plan.kernel if plan.kind == "hopper" else None
        self.beta = float(plan.beta)
        # an engine plan that reads its operands in place launches on pointers, its other parameters computed once
        self.scalars: tuple[Any, ...] | None = None
        # a multi-block plan launches on pointers too: (its PackedLaunch, grid x, grid y, the arguments after them)
        self.tiled: tuple[Any, int, int, tuple[Any, ...]] | None = None
        views = [None if r is None else _new_view(ArrayView, (0, *r)) for r in rests]
        if self.engine is not None and self.engine.on_pointers and not self.engine.repacks and not self.empty:
            self.scalars = self.engine.scalars(views[2], views[3], 1.0, self.beta)
        elif plan.kind == "tiled" and not self.empty:
            self.tiled = (plan.kernel.packed(plan.device_id),
                          *_tiled_arguments(plan, views[2], views[3], 1, plan.beta))  # as the full path: ints

    def matmul(self, px: int, py: int) -> Any:
        """``x @ y`` into a new array: allocate, launch (:meth:`begin` inline: this is the hottest call)."""
        device = self.device_id
        handle = self.stream_of(device)
        token = _devices.enter(device)
        try:
            out = self.allocate(handle)
            if not self.empty:
                pout = self.pointer_of(out)
                block = self.block
                if self.scalars is not None:
                    self.engine.launch(device, handle, px, py, 0, pout, self.scalars)
                elif block is not None and pout % block[3] == 0:
                    block[0].launch_pointers(block[1], handle, px, py, pout, block[2])
                elif self.tiled is not None:
                    packed, grid_x, grid_y, tail = self.tiled
                    packed.launch(grid_x, grid_y, handle, px, py, 0, pout, *tail)
                else:
                    self._run_views(handle, None, out, (px, py, 0, pout))
        finally:
            if token is not None:
                _devices.leave(token)
        return out

    def mma(self, acc: Any, out: Any, pointers: tuple[int, int, int, int | None]) -> Any:
        """``x @ y + acc`` into ``out`` (checked against the inputs' memory) or a new array."""
        px, py, pacc, pout = pointers
        windows = self.windows
        if windows is not None:  # overlap_windows: out meets an input exactly when its difference is inside
            (b0, a0), (b1, a1), (b2, a2) = windows
            if b0 < px - pout < a0 or b1 < py - pout < a1 or b2 < pacc - pout < a2:
                overlap = self.overlap
                _raise_overlap(pout, overlap[0], overlap[1], (px, py, pacc))  # names the array
        handle, token, out, new = self.begin(out)
        if new is not None:
            pout = new
        device = self.device_id
        try:
            if self.scalars is not None:
                self.engine.launch(device, handle, px, py, pacc, pout, self.scalars)
            elif self.tiled is not None:
                packed, grid_x, grid_y, tail = self.tiled
                packed.launch(grid_x, grid_y, handle, px, py, pacc, pout, *tail)
            else:
                self._run_views(handle, acc, out, (px, py, pacc, pout))
        finally:
            if token is not None:
                _devices.leave(token)
        return out

    def _run_views(self, handle: int, acc: Any, out: Any, pointers: tuple[int, int, int, int]) -> None:
        """The call on views of the arrays at ``pointers`` (x, y, acc, out), for plans whose launch reads views:
        the engine's run, or the plan's (the device current)."""
        px, py, pacc, pout = pointers
        rx, ry, racc, ro = self.rests
        vx, vy = _new_view(ArrayView, (px, *rx)), _new_view(ArrayView, (py, *ry))
        vacc = None if racc is None else _new_view(ArrayView, (pacc, *racc))
        vout = _new_view(ArrayView, (pout, *ro))
        if self.engine is not None and not self.empty:
            self.engine.run(self.device_id, None, handle, vx, vy, vacc, vout, 1.0, self.beta)
        else:
            _run(self.plan, vx, vy, acc, vacc, out, vout, None, handle)


def _bind_matmul(x: Any, y: Any, out: Any, plan: CallPlan, vx: ArrayView, vy: ArrayView, vout: ArrayView,
                 out_dtype: Any = None) -> None:
    """After a full matmul call: bind its kind (when x and y have keys) for the next calls; a call that named
    ``out_dtype`` is bound under it as given."""
    found = _keys.read_pair(x, y)
    if found is None or plan.scheme.name not in ("native", "tf32"):
        return
    block = None
    if plan.kind == "block" and not (plan.batch == 0 or plan.m == 0 or plan.n == 0) and type(out) is not DeviceArray:
        eplan = _execute.plan_for(plan.desc)
        launch = eplan.bind(vx, vy, vout, 1, plan.beta, vout.stream)
        device_plan = eplan.on_device(plan.device_id)
        block = (device_plan.packed, device_plan.grid(launch.batch), _execute.python_numbers(launch.args[3:]),
                 eplan.c.alignment)
    bound = _Bound(plan, _keys.library_stream(x), _allocator(x, plan), _pointer_reader(out),
                   (_rest(vx), _rest(vy), None, _rest(vout)), block)
    _caches.remember(_BOUND, found[0] if out_dtype is None else (found[0], out_dtype), bound)


def _mma_key(x: Any, y: Any, acc: Any, out: Any) -> tuple[tuple[Any, ...], tuple[int, int, int, int | None]] | None:
    """The bound-call key of an mma and its pointers, or None when an array has no key.

    The key is the arrays' keys (blasdx.arrays.keys.read_triple / read_quad) and a flag: for x, y and acc
    alone, whether out is acc itself (False: a new result); with out another array's key, whether out is acc
    in place (the same memory and layout)."""
    if out is None or out is acc:
        found = _keys.read_triple(x, y, acc)
        if found is None:
            return None
        key, px, py, pacc = found
        return (key, out is not None), (px, py, pacc, None if out is None else pacc)
    found4 = _keys.read_quad(x, y, acc, out)
    if found4 is None:
        return None
    key, px, py, pacc, pout = found4
    in_place = pout == pacc and key[10:15] == key[15:20]  # acc's key and out's
    return (key, in_place), (px, py, pacc, pout)


def _bind_mma(x: Any, y: Any, acc: Any, out: Any, plan: CallPlan, vx: ArrayView, vy: ArrayView, vacc: ArrayView,
              vout: ArrayView, in_place: bool) -> None:
    """After a full mma call: bind its kind (when every array has a key) for the next calls."""
    found = _mma_key(x, y, acc, out)
    if found is None or plan.scheme.name not in ("native", "tf32"):
        return
    overlap = None
    if out is not None and not (in_place and plan.kind == "block"):
        spans = plan.spans  # set by the full call's check
        overlap = (spans[0][1:], spans[1:3] if in_place else spans[1:])
    like = acc if out is None else out
    bound = _Bound(plan, _keys.library_stream(acc if out is None else out), _allocator(acc, plan),
                   _pointer_reader(like), (_rest(vx), _rest(vy), _rest(vacc), _rest(vout)), None, overlap)
    _caches.remember(_BOUND, found[0], bound)


def overlap_windows(out_span: tuple[int, int], others: tuple[tuple[str, int, int], ...]
                    ) -> tuple[tuple[int, int], ...] | None:
    """:func:`_raise_overlap`'s test as (below, above) per other array: out's bytes meet the array's exactly when
    ``below < array pointer - out pointer < above`` ((0, 0) for an empty span, which meets nothing); None when
    out's span is empty."""
    o_lo, o_hi = out_span
    if o_hi <= o_lo:
        return None
    return tuple((o_lo - hi, o_hi - lo) if hi > lo else (0, 0) for _, lo, hi in others)


def _raise_overlap(pout: int, out_span: tuple[int, int], others: tuple[tuple[str, int, int], ...],
                   pointers: tuple[int, ...]) -> None:
    """The full path's overlap check of out, on pointers (ExecutionError naming the array out meets)."""
    low, high = pout + out_span[0], pout + out_span[1]
    if high <= low:
        return
    for (name, lo, hi), ptr in zip(others, pointers):
        if hi > lo and ptr + lo < high and low < ptr + hi:
            raise ExecutionError(
                f"out: its memory overlaps {name}'s, which is read while out is written; pass a separate array"
            )


def call_plan(x: Any, y: Any, acc: Any = None, *, out: Any = None, mantissa_bits: int | None = None,
              fast_accumulation: bool = False, out_dtype: Any = None) -> CallPlan:
    """The plan ``matmul(x, y, out_dtype=out_dtype)`` (``acc`` None) or ``mma(x, y, acc, out=out)`` runs with
    these arguments.

    Computed afresh from the arguments as the calls compute it (nothing cached is read or
    kept): the path, its kernel and why the Hopper engine was not taken, for one given call.
    """
    vx, vy = _view(x, "x", None), _view(y, "y", None)  # type: ignore[arg-type]  # no stream: nothing runs
    if acc is None:
        return _plan_matmul(vx, vy, _device_of((vx, vy), ("x", "y")), mantissa_bits, fast_accumulation,
                            result_type(vx.dtype, out_dtype))
    if out_dtype is not None:
        raise ExecutionError("out_dtype: an mma's result type is acc's; give out_dtype without acc")
    vacc = as_array(acc, "acc")
    vout = None if out is None else as_array(out, "out")
    in_place = vout is not None and vout.ptr == vacc.ptr and vout.strides == vacc.strides and vout.shape == vacc.shape
    views = (vx, vy, vacc) if vout is None else (vx, vy, vacc, vout)
    device_id = _device_of(views, ("x", "y", "acc", "out")[: len(views)])
    copyable = _one_block_allowed(acc, out, vacc, in_place, device_id)
    return _plan_mma(vx, vy, vacc, vout, device_id, copyable, fast_accumulation, mantissa_bits)

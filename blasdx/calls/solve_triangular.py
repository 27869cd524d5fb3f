"""``bx.solve_triangular``: triangular solves on whole arrays, with PyTorch's semantics.

``solve_triangular(a, b, lower=True)`` returns X with ``a @ X = b`` (``left=False``:
``X @ a = b``) for a triangular a, as ``torch.linalg.solve_triangular`` does: batches
broadcast, the result is a new array (or ``out=``, which may be b itself), only the named
triangle of a is read and, with ``unit_diagonal=True``, not its diagonal; a singular a is
not detected (the result holds inf or NaN, as in PyTorch and BLAS). The keywords are
SciPy's (``lower``, ``unit_diagonal``) plus PyTorch's ``left``; PyTorch's own spellings
``upper=`` and ``unitriangular=`` are accepted too, so code written for either library reads
the same. SciPy's semantics are narrower (one matrix, left solves only, ``trans``), which is
why the call follows PyTorch's.

Each call reads the arrays' dtypes, shapes, strides and pointer alignment, builds the TRSM
descriptor (Side, FillMode, Diag, Arrangement and LeadingDimension from the strides,
Alignment from the pointers, SM from the device, Block) and launches its batched kernel,
one block per problem, or per group of right-hand sides when A and B do not fit one
block's shared memory together (the right-hand sides are independent). What a call
decides is remembered per (dtypes, shapes, strides, alignments, device, options).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import arrays as _arrays
from ..base import dtypes as _dt
from ..arrays import ArrayView, as_array, resolve_stream
from ..arrays import keys as _keys
from ..codegen.trsm import OutputLayout
from ..describe.operators import Size
from ..describe.trsm import solve_description
from ..base.errors import ExecutionError, UnsupportedError
from ..launch import caches as _caches
from ..launch import devices as _devices
from ..plan.trsm import TRSM_TYPES
from ..run.trsm import TrsmKernel, kernel_for
from . import blocked_trsm as _blocked
from . import gemm_steps as _steps
from . import matmul as _ag
from . import tiled as _tiled

__all__ = ["RULES", "SolvePlan", "plan_solve", "solve_plan", "solve_triangular"]

#: The rules a call must follow, quoted by the errors that enforce them.
RULES = {
    "rank": "a and b are matrices (rank 2) or batches of matrices (rank 3)",
    "square": "a is [..., K, K] with K = M (left=True) or N (left=False) for b of [..., M, N]",
    "batch": "a batch extent equals the result's batch or is 1, which broadcasts",
    "dtype": "a and b have one element type: float32, float64, complex64 or complex128",
    "out": "out has the result's shape (b's, with the broadcast batch) and b's element type",
}

_MAX_CHUNKS = 65535  # grid y
_MAX_BATCH = 2**31 - 1


def _rule(name: str) -> str:
    return f'(rule: "{RULES[name]}")'


class SolvePlan(NamedTuple):
    """What every call with the same dtypes, shapes, strides, alignments, device and options does."""

    shape: tuple[int, ...]  # the result's
    dtype: _dt.DType
    batch: int
    kernel: TrsmKernel | None  # None when there is nothing to solve (an empty extent) or A needs blocking
    strides: tuple[int, int, int]  # batch strides of a, b, out (elements)
    chunks: tuple[int, int, int]  # (count, elements between chunks of b, of out)
    device_id: int
    blocked: _blocked.BlockedSolve | None = None  # A does not fit one block: leaves and GEMM updates

    def describe(self) -> str:
        """One line: the one-kernel solve (its descriptor and split) or the blocked one (its steps)."""
        if self.blocked is not None:
            return self.blocked.describe()
        if self.kernel is None:
            return "nothing to solve"
        return f"one block TRSM per {'problem' if self.chunks[0] == 1 else f'{self.chunks[0]} chunks'}: {self.kernel.desc!r}"


def _flag(value: Any, argument: str) -> bool:
    if not isinstance(value, bool):
        raise ExecutionError(f"{argument}: expected True or False, got {value!r}")
    return value


def _options(lower: Any, upper: Any, left: Any, unit_diagonal: Any, unitriangular: Any) -> tuple[bool, bool, bool]:
    """(lower, left, unit) from the keywords; exactly one of lower= / upper= is required."""
    if (lower is None) == (upper is None):
        given = "both" if lower is not None else "neither"
        raise ExecutionError(
            f"lower, upper: {given} given; name the triangle of a that holds the matrix with lower=True/False "
            "(SciPy's keyword) or upper=True/False (PyTorch's), exactly one of them"
        )
    is_lower = _flag(lower, "lower") if lower is not None else not _flag(upper, "upper")
    if unit_diagonal is not None and unitriangular is not None:
        raise ExecutionError(
            "unit_diagonal, unitriangular: both given; they mean the same (SciPy's and PyTorch's names), give one"
        )
    unit = unitriangular if unit_diagonal is None else unit_diagonal
    unit = False if unit is None else _flag(unit, "unit_diagonal" if unitriangular is None else "unitriangular")
    return is_lower, _flag(left, "left"), unit


def _matrix(view: ArrayView, argument: str) -> _ag.Matrix:
    if len(view.shape) not in (2, 3):
        raise ExecutionError(f"{argument}: shape {tuple(view.shape)} has rank {len(view.shape)}; {_rule('rank')}")
    return _ag._matrix(view, argument)


def _value_type(view: ArrayView, argument: str) -> _dt.DType:
    """The real part type of an operand, which must be one a TRSM runs."""
    dtype = view.dtype
    real = _dt.as_dtype(dtype.real_name) if dtype.is_complex else dtype
    if real not in TRSM_TYPES:
        raise ExecutionError(f"{argument}: dtype {dtype.name} is not supported; {_rule('dtype')}")
    return real


def _chunked_descriptor(
    real: _dt.DType, is_complex: bool, ma: _ag.Matrix, mb: _ag.Matrix, flags: tuple[bool, bool, bool],
    pointers: tuple[int, int, int], out: tuple[bool, int, int], batch: int, sm: int,
) -> tuple[Any, int, int, int, int] | None:
    """(descriptor, chunks, b and out chunk strides, out alignment): the fewest equal chunks of B that fit one block.

    None when even one right-hand side per block does not fit (A alone is too large): the
    call then runs the blocked solver (blasdx.calls.blocked_trsm).

    A chunk is a set of consecutive right-hand sides (columns of b on the left, rows on the
    right), solved by its own block with the whole A; the alignments cover every chunk's start.
    """
    left = flags[1]
    m, n = mb.rows, mb.cols
    width = n if left else m
    b_step = (1 if mb.row_major else mb.ld) if left else (mb.ld if mb.row_major else 1)
    out_row, out_ld, out_batch_stride = out
    o_step = (1 if out_row else out_ld) if left else (out_ld if out_row else 1)
    item = real.size * (2 if is_complex else 1)
    for chunks in range(1, width + 1):
        if width % chunks or chunks > _MAX_CHUNKS:
            continue
        w = width // chunks
        al_a = _tiled.copy_width(pointers[0], item, 0, 1, ma.batch_stride, ma.batch or 1)
        al_b = _tiled.copy_width(pointers[1], item, w * b_step, chunks, mb.batch_stride, mb.batch or 1)
        al_o = _tiled.copy_width(pointers[2], item, w * o_step, chunks, out_batch_stride, batch)
        desc = solve_description(
            Size(m, w) if left else Size(w, n), real, is_complex, flags, (ma.row_major, mb.row_major),
            (ma.ld, mb.ld), (al_a, al_b, al_b), sm,
        )
        try:
            desc.validate()
        except UnsupportedError:  # does not fit one block: try more chunks
            continue
        if chunks == 1:
            return desc, 1, 0, 0, al_o
        return desc, chunks, w * b_step, w * o_step, al_o
    return None  # A does not fit one block: the blocked solver takes it


def plan_solve(
    va: ArrayView, vb: ArrayView, vout: ArrayView | None, flags: tuple[bool, bool, bool], device_id: int,
    mantissa_bits: int | None = None,
) -> SolvePlan:
    """Check the operands and build the kernel of one kind of call (the blocked solver's steps when A is large)."""
    real = _value_type(va, "a")
    if mantissa_bits is not None:
        _steps.scheme_of(real, mantissa_bits)  # ExecutionError quoting matmul's rule
    if vb.dtype != va.dtype:
        raise ExecutionError(f"b: dtype {vb.dtype.name} differs from a's {va.dtype.name}; {_rule('dtype')}")
    ma, mb = _matrix(va, "a"), _matrix(vb, "b")
    lower, left, unit = flags
    k = mb.rows if left else mb.cols
    if ma.rows != ma.cols or ma.rows != k:
        side = "M (rows of b), left=True" if left else "N (columns of b), left=False"
        raise ExecutionError(
            f"a: shape {tuple(va.shape)} is not [..., K, K] with K = {k}, the {side}, for b of shape "
            f"{tuple(vb.shape)}; {_rule('square')}"
        )
    batch = _ag._result_batch(ma, mb, ("a", "b"), _rule("batch"))
    shape = (mb.rows, mb.cols) if batch is None else (batch, mb.rows, mb.cols)
    total = 1 if batch is None else batch
    if total > _MAX_BATCH:
        raise ExecutionError(f"b: batch {total} exceeds the {_MAX_BATCH} problems one launch can run")
    if vout is not None:
        if tuple(vout.shape) != shape or vout.dtype != vb.dtype:
            raise ExecutionError(
                f"out: shape {tuple(vout.shape)} and type {vout.dtype.name} do not match the result's {shape} "
                f"{vb.dtype.name}; {_rule('out')}"
            )
        mo = _matrix(vout, "out")
        out = (mo.row_major, mo.ld, mo.batch_stride)
        out_ptr = vout.ptr
    else:  # a new C-contiguous array (allocations are 256-byte aligned)
        out = (True, mb.cols, mb.rows * mb.cols)
        out_ptr = 0
    strides = (ma.batch_stride if (ma.batch or 1) > 1 else 0, mb.batch_stride if (mb.batch or 1) > 1 else 0,
               out[2] if total > 1 else 0)
    if min(mb.rows, mb.cols) == 0 or total == 0:
        return SolvePlan(shape, vb.dtype, total, None, strides, (1, 0, 0), device_id)
    info = _ag._device_info(device_id)
    chunked = _chunked_descriptor(real, vb.dtype.is_complex, ma, mb, flags, (va.ptr, vb.ptr, out_ptr), out, total,
                                  info.sm)
    if chunked is None:
        x_view = vout if vout is not None else _placeholder(vb, shape)
        blocked = _blocked.plan_blocked(vb.dtype, va, vb, x_view, lower, left, unit, total, device_id, info.sm,
                                        info.multiprocessors, mantissa_bits)
        return SolvePlan(shape, vb.dtype, total, None, strides, (1, 0, 0), device_id, blocked)
    desc, chunks, b_chunk, o_chunk, al_o = chunked
    kernel = kernel_for(desc, OutputLayout(out[0], out[1], al_o))
    return SolvePlan(shape, vb.dtype, total, kernel, strides, (chunks, b_chunk, o_chunk), device_id)


_PLACEHOLDER = 1 << 20  # the address a new result is planned at: aligned as every allocation is (256 bytes)


def _placeholder(vb: ArrayView, shape: tuple[int, ...]) -> ArrayView:
    """The view of a new C-contiguous result, planned before it exists (the address is a stand-in)."""
    strides = (shape[-1], 1) if len(shape) == 2 else (shape[1] * shape[2], shape[2], 1)
    return vb._replace(ptr=_PLACEHOLDER, shape=shape, strides=strides, readonly=False, owner=None, stream=None)


#: A new C-contiguous result of b's library (complex types included).
_allocate = _steps.allocate


_CALLS: dict[tuple[Any, ...], SolvePlan] = {}


def _key(views: tuple[ArrayView | None, ...], extra: Any) -> tuple[Any, ...]:
    parts: list[Any] = [extra]
    for v in views:
        parts.append(None if v is None else (v.dtype.name, v.shape, v.strides, v.ptr & 15, v.device_id))
    return tuple(parts)


def _check_out(vout: ArrayView, va: ArrayView, vb: ArrayView) -> bool:
    """Whether out is b itself (an in-place solve); ExecutionError when out is read-only or overlaps a or b."""
    if vout.readonly:
        raise ExecutionError("out: the array is read-only; pass a writable array")
    same = vout.ptr == vb.ptr and vout.shape == vb.shape and vout.strides == vb.strides
    (o_lo, o_hi) = vout.span
    for name, view in (("a", va), ("b", vb)):
        if same and name == "b":
            continue
        lo, hi = view.span
        if o_hi > o_lo and hi > lo and o_lo < hi and lo < o_hi:
            raise ExecutionError(
                f"out: its memory overlaps {name}'s, which is read while out is written; pass a separate array "
                "(or b itself, for an in-place solve)"
            )
    return same


def _plan(va: ArrayView, vb: ArrayView, vout: ArrayView | None, flags: tuple[bool, bool, bool],
          mantissa_bits: int | None = None) -> SolvePlan:
    """The remembered plan of this kind of call (built and checked on first use)."""
    key = _key((va, vb, vout), (flags, mantissa_bits))
    plan = _CALLS.get(key)
    if plan is None:
        views, names = (va, vb), ("a", "b")
        if vout is not None:
            views, names = views + (vout,), names + ("out",)
        plan = plan_solve(va, vb, vout, flags, _ag._device_of(views, names), mantissa_bits)
        if len(_CALLS) > 1024:
            _CALLS.clear()
        _CALLS[key] = plan
    return plan


def solve_plan(
    a: Any, b: Any, *, lower: bool | None = None, upper: bool | None = None, left: bool = True,
    unit_diagonal: bool | None = None, unitriangular: bool | None = None, out: Any = None,
    mantissa_bits: int | None = None,
) -> SolvePlan:
    """What ``solve_triangular`` with these arguments runs (its kernel's descriptor, chunks, strides, or the
    blocked solver's steps); no launch."""
    flags = _options(lower, upper, left, unit_diagonal, unitriangular)
    handle = resolve_stream(None, (b if out is None else out, a))
    vout = None if out is None else as_array(out, "out", stream=handle)
    return _plan(as_array(a, "a", stream=handle), as_array(b, "b", stream=handle), vout, flags, mantissa_bits)


def solve_triangular(
    a: Any, b: Any, *, lower: bool | None = None, upper: bool | None = None, left: bool = True,
    unit_diagonal: bool | None = None, unitriangular: bool | None = None, out: Any = None, stream: Any = None,
    mantissa_bits: int | None = None,
) -> Any:
    """X with ``a @ X = b`` (``left=True``) or ``X @ a = b``, for a triangular ``a``; PyTorch's semantics.

    a is [K, K] or [batch, K, K], b is [M, N] or [batch, M, N] (K = M on the left, N on the
    right); a batch of 1 or a matrix broadcasts. ``lower=`` (or ``upper=``) names the
    triangle of a that holds the matrix, and is required; the other triangle is never read,
    nor the diagonal with ``unit_diagonal=True`` (or ``unitriangular=True``). float32,
    float64, complex64, complex128. The result is a new C-contiguous array of b's library
    (PyTorch, CuPy, else a blasdx DeviceArray), or ``out`` (the result's shape and type, any
    order; ``out=b`` solves in place). Any K: a system whose A does not fit one thread
    block runs blocked (blasdx.calls.blocked_trsm: block TRSM kernels on the diagonal, GEMMs
    for the rest), and ``mantissa_bits`` then applies to its GEMMs as in :func:`blasdx.matmul`
    (the diagonal solves keep every bit). Everything is checked before anything is allocated
    or launched.
    """
    if stream is None and mantissa_bits is None:
        found = _bound_key(a, b, out, (lower, upper, left, unit_diagonal, unitriangular))
        if found is not None:
            bound = _BOUND.get(found[0])
            if bound is not None:
                done = bound.run(out, found[1])
                if done is not None:
                    return done
    flags = _options(lower, upper, left, unit_diagonal, unitriangular)
    handle = resolve_stream(stream, (b if out is None else out, a))
    va, vb = as_array(a, "a", stream=handle), as_array(b, "b", stream=handle)
    vout = None if out is None else as_array(out, "out", stream=handle)
    given_out = vout is not None
    plan = _plan(va, vb, vout, flags, mantissa_bits)
    in_place = False
    if vout is not None:
        in_place = _check_out(vout, va, vb)
    alpha = plan.kernel.alpha(1) if plan.kernel is not None else ()
    if stream is not None:
        _devices.check_stream_device(stream, handle, plan.device_id)
    if plan.kernel is not None:
        plan.kernel.on_device(plan.device_id)  # DeviceError before anything is allocated
    if plan.blocked is not None:
        plan.blocked.on_device()
    with _devices.current(plan.device_id):  # the call runs on the operands' device
        if out is None:
            out = _allocate(b, plan.shape, plan.dtype, plan.device_id, handle)
            vout = as_array(out, "out", stream=handle)
        if (plan.kernel is None and plan.blocked is None) or plan.batch == 0:
            return out
        core = _arrays.as_core_stream(stream, handle)
        producers = tuple(v.stream for v in (va, vb, vout) if v.stream is not None and v.stream != handle)
        if producers:
            _arrays.wait_for_producers(core, handle, producers)
        if plan.blocked is not None:
            plan.blocked.run(core, handle, va, vb, vout, in_place)
        else:
            plan.kernel.launch(core, plan.device_id, (va.ptr, vb.ptr, vout.ptr), alpha, plan.strides, plan.chunks,
                               plan.batch)
    if type(out) is _arrays.DeviceArray:
        out._set_stream(handle)
    if stream is None and mantissa_bits is None and plan.blocked is None:
        _bind(a, b, out if given_out else None, (lower, upper, left, unit_diagonal, unitriangular), plan, alpha,
              (va, vb, vout))
    return out


# ---------------------------------------------------------------------------------------------
# the hot path: a kind of call bound to what its first call decided (as bx.matmul's)
# ---------------------------------------------------------------------------------------------

_BOUND: dict[tuple[Any, ...], _Bound] = {}
_FLAG_TYPES = (bool, type(None))


def _bound_key(a: Any, b: Any, out: Any, options: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """The key of a call's kind (arrays' keys and alignment classes, the options) and its pointers, or None."""
    if type(options[0]) not in _FLAG_TYPES or any(type(o) not in _FLAG_TYPES for o in options[1:]):
        return None
    if out is None or out is b:
        found = _keys.read_pair(a, b)
        if found is None:
            return None
        key, pa, pb = found
        return (key, out is not None, options), (pa, pb, None if out is None else pb)
    found3 = _keys.read_triple(a, b, out)
    if found3 is None:
        return None
    key, pa, pb, po = found3
    same = po == pb and key[5:10] == key[10:15]  # out is b's memory and layout: an in-place solve
    return (key, same, options), (pa, pb, po)


class _Bound(_ag.BoundCall):
    """What every solve of one kind does once its arrays are known to be of that kind. Holds no array."""

    __slots__ = ("plan", "alpha", "spans", "in_place")

    def __init__(self, plan: SolvePlan, alpha: tuple[Any, ...], stream_of: Any, allocate: Any, pointer_of: Any,
                 spans: tuple[tuple[int, int], ...] | None, in_place: bool) -> None:
        self.plan, self.alpha, self.stream_of = plan, alpha, stream_of
        self.device_id = plan.device_id
        self.allocate, self.pointer_of = allocate, pointer_of
        self.spans = spans  # out's, a's, b's byte spans from their pointers, for a given out
        self.in_place = in_place  # out is b (the key says so)

    def run(self, out: Any, pointers: tuple[Any, ...]) -> Any:
        """Solve into ``out`` or a new array; None when out meets a or b (the full path says how)."""
        pa, pb, pout = pointers
        spans = self.spans
        if spans is not None:
            (o_lo, o_hi), (a_lo, a_hi), (b_lo, b_hi) = spans
            low, high = pout + o_lo, pout + o_hi
            if high > low and ((pa + a_lo < high and low < pa + a_hi and a_hi > a_lo) or (
                    not self.in_place and pb + b_lo < high and low < pb + b_hi and b_hi > b_lo)):
                return None
        handle, token, out, new = self.begin(out)
        if new is not None:
            pout = new
        plan = self.plan
        try:
            if plan.kernel is not None and plan.batch:
                plan.kernel.launch(_arrays.core_stream(handle), plan.device_id, (pa, pb, pout), self.alpha,
                                   plan.strides, plan.chunks, plan.batch)
        finally:
            if token is not None:
                _devices.leave(token)
        return out


def _bind(a: Any, b: Any, out: Any, options: tuple[Any, ...], plan: SolvePlan, alpha: tuple[Any, ...],
          views: tuple[ArrayView, ArrayView, ArrayView]) -> None:
    """After a full call without ``stream=``: bind its kind (when every array has a key)."""
    found = _bound_key(a, b, out, options)
    if found is None:
        return
    va, vb, vout = views
    spans = None
    if out is not None:
        spans = tuple(_arrays._span(0, v.shape, v.strides, v.dtype.size) for v in (vout, va, vb))
    like = b if out is None else out
    bound = _Bound(plan, alpha, _keys.library_stream(like), _ag._allocator(b, plan), _ag._pointer_reader(like),
                   spans, out is not None and found[0][1])  # the key's flag: out is b's memory and layout
    _caches.remember(_BOUND, found[0], bound)

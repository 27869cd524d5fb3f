"""Argument validation and launch of blasdx's batched block GEMM (``C = alpha*A@B + beta*C``).

A call goes through three steps, each a small function so that the first two run (and
are tested) without a GPU:

1. :func:`plan_for` — once per descriptor: validate it and precompute what every call
   expects (dtypes, logical shapes, element strides from the arrangement and leading
   dimensions, matrix extents, alignments, the scalar type). Cached by the descriptor's
   identity (no hashing on the hot path), then by its value.
2. :meth:`ExecutionPlan.bind` (:func:`check_arguments`) — per call, host only: read the
   arrays (:func:`blasdx.arrays.as_array`), check them against the plan, convert alpha and
   beta, and return a :class:`Launch` holding the exact kernel arguments. Checks that
   depend only on (dtype, shape, strides) and on alpha/beta run once per distinct value
   and are remembered; pointers, devices and the read-only flag are checked every call.
   Every failure is an :class:`~blasdx.base.errors.ExecutionError` naming the argument,
   showing the value and saying what was expected; nothing has been launched.
3. :meth:`ExecutionPlan.on_device` — once per (descriptor, device): check the device can
   run the kernel (DeviceError), load it on that device and lay out its parameter block
   (:class:`~blasdx.launch.cuda_driver.PackedLaunch`).

A call runs on its arrays' device: that device is made current for the launch (its
primary context, :func:`blasdx.launch.devices.enter`) and what was current is restored after,
so arrays on device 1 work while device 0 is current. Arrays on different devices, or a
stream of another device, are an ExecutionError before anything runs.

The kernel (kernels/batched_gemm.cu) takes ``(const A* a, const B* b, C* c, alpha, beta,
long long stride_a, long long stride_b, long long stride_c, long long problems)`` —
``alpha_re, alpha_im, beta_re, beta_im`` for complex GEMMs — with batch strides in elements
and 0 for a broadcast operand. A block runs ``KernelPlan.stages`` consecutive problems (one
for most plans), so grid x is the batch divided by that, rounded up (:meth:`DevicePlan.grid`).
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..base import dtypes as _dt
from ..arrays import (
    _ADAPTERS,
    ArrayView,
    DeviceArray,
    _library_of,
    as_array,
    resolve_stream,
)
from ..arrays import keys as _keys
from ..arrays.streams import as_core_stream, stream_handle, wait_for_producers
from ..arrays.streams import default_stream_handle as _default_stream
from ..arrays.view import byte_span
from ..describe.operators import Block, Function, row_major
from ..base.errors import DescriptorError, DeviceError, ExecutionError
from ..launch import cuda_driver as _driver
from ..launch import devices as _devices
from ..launch.devices import check_stream_device

if TYPE_CHECKING:  # pragma: no cover
    from ..describe.descriptor import Descriptor

__all__ = [
    "ExecutionPlan",
    "DevicePlan",
    "Launch",
    "plan_for",
    "check_arguments",
    "check_device",
    "check_stream_device",
    "execute",
    "execute_on",
    "load_on_device",
    "prepare",
    "python_numbers",
]

_new_tuple = tuple.__new__  # NamedTuple without its Python-level __new__ (hot path)
_read = _keys.read_with_blasdx
_GATHERERS = _keys.GATHERERS  # the gatherer of each array type seen (keys.gatherer makes the missing ones)
_SCALAR_NUMPY = {"float32": np.float32, "float64": np.float64, "int32": np.int32}
_SCALAR_SLOTS = {"float32": "f", "float64": "d", "int32": "i"}  # PackedLaunch slot kinds
_NOTHING = object()  # no alpha / beta seen yet
_INT32_RANGE = (-(2**31), 2**31 - 1)
_MAX_GRID_X = 2**31 - 1


# ---------------------------------------------------------------------------------------------
# per-descriptor expectations
# ---------------------------------------------------------------------------------------------


class _Operand:
    """What one of A, B, C must look like: dtype, logical shape, element strides, extent, alignment."""

    __slots__ = (
        "name", "matrix", "dims", "dim_names", "dtype", "accepted", "row_major", "ld", "ld_name", "expected",
        "size", "itemsize", "alignment",
    )

    def __init__(
        self,
        name: str,
        dims: tuple[int, int],
        dim_names: tuple[str, str],
        dtype: _dt.DType,
        row_major_: bool,
        ld: int,
        size: int,
        alignment: int,
    ) -> None:
        self.name = name
        self.matrix = name.upper()
        self.dims = dims
        self.dim_names = dim_names
        self.dtype = dtype
        # tfloat32 operands are float32 in memory
        self.accepted = frozenset({dtype.name} | ({"float32"} if dtype.name == "tfloat32" else set()))
        self.row_major = row_major_
        self.ld = ld
        self.ld_name = f"ld{name}"
        self.expected = (ld, 1) if row_major_ else (1, ld)
        self.size = size
        self.itemsize = dtype.size
        self.alignment = alignment

    @property
    def layout_name(self) -> str:
        return "row_major" if self.row_major else "col_major"

    @property
    def storage_name(self) -> str:
        """The array dtype that holds this operand (float32 for tfloat32)."""
        return "float32" if self.dtype.name == "tfloat32" else self.dtype.name


class ExecutionPlan:
    """Everything a call of one descriptor checks against, computed once; plus its device plans."""

    __slots__ = (
        "desc", "a", "b", "c", "is_complex", "scalar", "scalar_numpy", "block_dim", "shared_memory", "slots",
        "_alignments", "_devices", "_scalars", "_last_scalars", "_layouts", "_text", "_bound", "_last_bound",
    )

    def __init__(self, desc: Descriptor) -> None:
        desc.validate()
        if not desc.has(Block):
            raise DescriptorError(
                f"execute needs the Block execution operator: {desc!r} has none; add bx.Block() to the descriptor"
            )
        if desc.function is not Function.MM:  # pragma: no cover - MM is the only Function today
            raise DescriptorError(f"execute runs Function.MM only, not {desc.function!r}")
        m, n, k = desc.size
        lda, ldb, ldc = desc.leading_dimension
        al_a, al_b, al_c = desc.alignment
        arr = desc.arrangement
        self.desc = desc
        self.a = _Operand("a", (m, k), ("M", "K"), desc.a_value_type, arr.a is row_major, lda, desc.a_size, al_a)
        self.b = _Operand("b", (k, n), ("K", "N"), desc.b_value_type, arr.b is row_major, ldb, desc.b_size, al_b)
        self.c = _Operand("c", (m, n), ("M", "N"), desc.c_value_type, arr.c is row_major, ldc, desc.c_size, al_c)
        self._alignments = (al_a, al_b, al_c)
        self.is_complex = desc.is_complex
        self.scalar = desc.scalar_type
        self.scalar_numpy = _SCALAR_NUMPY[self.scalar.name]
        self.block_dim = tuple(desc.block_dim)
        self.shared_memory = int(desc.kernel_shared_memory_size)
        scalar_slot = _SCALAR_SLOTS[self.scalar.name]
        self.slots = "PPP" + scalar_slot * (4 if self.is_complex else 2) + "qqqq"  # the kernel's parameter list
        self._devices: dict[int, DevicePlan] = {}
        self._scalars: dict[Any, tuple[Any, ...]] = {}
        self._last_scalars: tuple[Any, Any, tuple[Any, ...]] = (_NOTHING, _NOTHING, ())
        self._layouts: dict[Any, tuple[Any, ...]] = {}
        self._bound: dict[Any, BoundLayout] = {}  # calls bound to the kind of their arrays (the hot path)
        self._last_bound: tuple[Any, BoundLayout | None] = (None, None)  # the last key found there, and its binding
        self._text = repr(desc)

    def __repr__(self) -> str:
        return f"ExecutionPlan({self._text})"

    def unbind(self) -> None:
        """Forget every bound kind of call: the next call of each takes the full path (and binds it again)."""
        self._last_bound = (None, None)
        self._bound.clear()

    # -- per call -------------------------------------------------------------------------------

    def bind(
        self, a: Any, b: Any, c: Any, alpha: Any = 1, beta: Any = 0, stream: int | None = None,
        device_id: int | None = None, known: dict[int, int] | None = None,
    ) -> Launch:
        """Check one call's arguments (host only) and return the launch they make.

        ``stream`` is the consumer stream handle (DLPack producers order their work before
        it); ``device_id``, when given, is the device every array must be on (the call runs
        on the arrays' device otherwise: ``Launch.device_id``). What depends
        only on dtypes, shapes and strides is checked once per layout and remembered; the
        pointers (alignment, overlap), devices and the read-only flag are checked every call.
        ``known``: the array libraries' current streams already asked during this call.
        """
        last = self._last_scalars  # the same alpha and beta objects as the last call: nothing to convert
        if alpha is last[0] and beta is last[1]:
            scalars = last[2]
        else:
            scalars = self._scalars_of(alpha, beta)
        if known is None:
            known = {}  # the arrays' library streams, asked once per device
        adapters = _ADAPTERS
        adapter = adapters.get(type(a))
        va = adapter(a, "a", stream, known) if adapter is not None else as_array(a, "a", stream=stream, known=known)
        adapter = adapters.get(type(b))
        vb = adapter(b, "b", stream, known) if adapter is not None else as_array(b, "b", stream=stream, known=known)
        adapter = adapters.get(type(c))
        vc = adapter(c, "c", stream, known) if adapter is not None else as_array(c, "c", stream=stream, known=known)
        # one unpacking per view instead of an attribute look-up per field (ArrayView's field order)
        pa, shape_a, strides_a, dtype_a, da, _, _, sa = va
        pb, shape_b, strides_b, dtype_b, db, _, _, sb = vb
        pc, shape_c, strides_c, dtype_c, dc, readonly_c, _, sc = vc
        layout_key = (
            dtype_a.name, shape_a, strides_a, dtype_b.name, shape_b, strides_b, dtype_c.name, shape_c, strides_c,
        )
        layout = self._layouts.get(layout_key)
        if layout is None:
            layout = self._layout(va, vb, vc)
            if len(self._layouts) > 64:
                self._layouts.clear()
            self._layouts[layout_key] = layout
        batch, strides, (a_lo, a_hi, b_lo, b_hi, c_lo, c_hi) = layout
        al_a, al_b, al_c = self._alignments
        if pa % al_a or pb % al_b or pc % al_c:
            for spec, view in ((self.a, va), (self.b, vb), (self.c, vc)):
                _check_pointer(spec, view)
        if not (da == db == dc) or (device_id is not None and dc != device_id):
            _check_devices((va, vb, vc), device_id)
        if readonly_c:
            raise ExecutionError("c: the array is read-only; blasdx writes the result into C. Pass a writable array")
        if c_hi > c_lo:
            low = pc + c_lo
            high = pc + c_hi
            if (pa + a_lo < high and low < pa + a_hi) or (pb + b_lo < high and low < pb + b_hi):
                for spec, lo, hi in ((self.a, pa + a_lo, pa + a_hi), (self.b, pb + b_lo, pb + b_hi)):
                    if lo < high and low < hi and hi > lo:
                        raise ExecutionError(
                            f"c: its memory [{low:#x}, {high:#x}) overlaps {spec.name}'s [{lo:#x}, {hi:#x}); C is "
                            f"written while {spec.matrix} is read. Pass a separate output array"
                        )
        waits = ()
        if (sa is not None and sa != stream) or (sb is not None and sb != stream) or (sc is not None and sc != stream):
            waits = tuple(dict.fromkeys(s for s in (sa, sb, sc) if s is not None and s != stream))
        device = dc if dc is not None else da if da is not None else db if db is not None else device_id
        return _new_tuple(Launch, (va, vb, vc, batch, (pa, pb, pc, *scalars, *strides), stream, waits, device))

    def _scalars_of(self, alpha: Any, beta: Any) -> tuple[Any, ...]:
        """The converted scalars of (alpha, beta), remembered per distinct (type, value) pair."""
        key = (type(alpha), alpha, type(beta), beta)
        try:
            scalars = self._scalars.get(key)
        except TypeError:  # unhashable (a 0-d array): converted every call, never remembered
            return self._convert_scalars(alpha, beta)
        if scalars is None:
            scalars = self._convert_scalars(alpha, beta)
            if len(self._scalars) > 64:
                self._scalars.clear()
            self._scalars[key] = scalars
        self._last_scalars = (alpha, beta, scalars)  # one assignment: threads see an old or a new triple
        return scalars

    def _convert_scalars(self, alpha: Any, beta: Any) -> tuple[Any, ...]:
        """The kernel's scalar arguments: (alpha, beta) or (alpha_re, alpha_im, beta_re, beta_im)."""
        alpha_re, alpha_im = _convert_scalar(alpha, "alpha", self.scalar, self.scalar_numpy, self.is_complex)
        beta_re, beta_im = _convert_scalar(beta, "beta", self.scalar, self.scalar_numpy, self.is_complex)
        return (alpha_re, alpha_im, beta_re, beta_im) if self.is_complex else (alpha_re, beta_re)

    def _layout(self, va: ArrayView, vb: ArrayView, vc: ArrayView) -> tuple[Any, ...]:
        """Checks that depend on dtypes, shapes and strides only: (batch, (batch strides, batch), byte extents)."""
        ba = _check_shape(self.a, va)
        bb = _check_shape(self.b, vb)
        batch = _check_shape(self.c, vc)
        if batch > _MAX_GRID_X:
            raise ExecutionError(
                f"c: batch {batch} exceeds the {_MAX_GRID_X} problems one launch can run (grid x); split the batch"
            )
        for spec, view, nb in ((self.a, va, ba), (self.b, vb, bb)):
            if nb != batch and nb != 1:
                raise ExecutionError(
                    f"{spec.name}: batch {nb} (shape {tuple(view.shape)}) does not match c's batch {batch}; "
                    f"{spec.matrix} needs C's batch or 1 (one {spec.matrix} broadcast to every problem). C's batch "
                    "fixes the number of problems"
                )
        strides = (
            np.int64(_check_strides(self, self.a, va, ba)),
            np.int64(_check_strides(self, self.b, vb, bb)),
            np.int64(_check_strides(self, self.c, vc, batch)),
            np.int64(batch),  # the kernel's `problems`
        )
        extents = (
            *byte_span(0, va.shape, va.strides, va.dtype.size),
            *byte_span(0, vb.shape, vb.strides, vb.dtype.size),
            *byte_span(0, vc.shape, vc.strides, vc.dtype.size),
        )
        return (batch, strides, extents)

    # -- per device -----------------------------------------------------------------------------

    def on_device(self, device_id: int) -> DevicePlan:
        """The kernel and launch configurations on ``device_id`` (built once; DeviceError if it cannot run)."""
        found = self._devices.get(device_id)
        if found is None:
            found = self._devices[device_id] = DevicePlan(self, device_id)
        return found


class DevicePlan:
    """A descriptor's kernel loaded on one device: its parameter block and a LaunchConfig per batch size."""

    __slots__ = ("device_id", "kernel", "block_dim", "shared_memory", "packed", "stages", "_configs")

    def __init__(self, plan: ExecutionPlan, device_id: int) -> None:
        device = _cuda_core().Device(device_id)
        check_device(plan.desc, tuple(device.compute_capability), device_id, _device_name(device))
        self.device_id = device_id
        self.kernel = _load_kernel(plan.desc, plan.shared_memory, device_id)
        self.block_dim = plan.block_dim
        self.shared_memory = plan.shared_memory
        self.packed = _driver.PackedLaunch(
            self.kernel, plan.slots, plan.block_dim, plan.shared_memory, name=f"blasdx_batched_gemm of {plan._text}"
        )
        self.stages = plan.desc.plan.stages
        self._configs: dict[int, Any] = {}

    def grid(self, batch: int) -> int:
        """Blocks for ``batch`` problems: one per ``stages`` consecutive problems."""
        stages = self.stages
        return batch if stages == 1 else -(-batch // stages)

    def launch(self, batch: int, stream: int, args: tuple[Any, ...]) -> None:
        """``batch`` problems on :meth:`grid` blocks on stream handle ``stream``, in the current context
        (the grid computed inline: this is every execute's path)."""
        stages = self.stages
        self.packed.launch(batch if stages == 1 else -(-batch // stages), 1, stream, *args)

    def config(self, batch: int) -> Any:
        """LaunchConfig(grid=(grid(batch), 1, 1), block=block_dim, shmem_size=kernel shared memory), memoised.

        What a bare ``cuda.core.launch`` of this kernel takes (:func:`prepare`; execute itself
        launches through the parameter block).
        """
        found = self._configs.get(batch)
        if found is None:
            if len(self._configs) > 64:
                self._configs.clear()
            found = self._configs[batch] = _cuda_core().LaunchConfig(
                grid=(self.grid(batch), 1, 1), block=self.block_dim, shmem_size=self.shared_memory
            )
        return found


def _cuda_core() -> Any:
    """cuda.core, through the one import lock."""
    from ..launch import cuda_modules

    return cuda_modules.core()


class Launch(NamedTuple):
    """A checked call: the views (kept alive until the launch), grid size, kernel arguments, streams."""

    a: ArrayView
    b: ArrayView
    c: ArrayView
    batch: int
    args: tuple[Any, ...]
    stream: int | None
    waits: tuple[int, ...]
    device_id: int | None


# ---------------------------------------------------------------------------------------------
# the checks (pure functions of the plan and the views)
# ---------------------------------------------------------------------------------------------


def _check_shape(spec: _Operand, view: ArrayView) -> int:
    """dtype and logical shape of one operand; returns its batch (1 for a matrix)."""
    if view.dtype.name not in spec.accepted:
        hint = ""
        if view.dtype.is_complex != spec.dtype.is_complex:
            hint = (
                " (a complex array for a real GEMM: add Type.complex to the descriptor)"
                if view.dtype.is_complex
                else " (a real array for a complex GEMM: pass complex arrays, or drop Type.complex)"
            )
        raise ExecutionError(
            f"{spec.name}: dtype {view.dtype.name} does not match {spec.matrix}'s type {spec.dtype.name} in the "
            f"descriptor{hint}; convert the array (e.g. .astype('{spec.storage_name}')) or change Precision"
        )
    shape = view.shape
    dims = spec.dims
    if len(shape) == 2 and shape == dims:
        return 1
    if len(shape) == 3 and shape[1:] == dims:
        return shape[0]
    shape = tuple(shape)  # torch.Size prints as torch.Size([...])
    expected = f"({spec.dim_names[0]}, {spec.dim_names[1]}) = {dims} or (batch, {dims[0]}, {dims[1]})"
    if len(shape) not in (2, 3):
        raise ExecutionError(f"{spec.name}: shape {shape} has rank {len(shape)}; expected {expected}")
    hint = ""
    if shape[-2:] == dims[::-1] and dims[0] != dims[1]:
        hint = (
            f" (it looks transposed: pass the logical {spec.matrix} of shape {dims} and describe its storage "
            "order with Arrangement; a transposed view of a row-major array is a column-major array)"
        )
    raise ExecutionError(f"{spec.name}: shape {shape} does not match {spec.matrix} {expected}{hint}")


def _strides_fit(shape: tuple[int, int], strides: tuple[int, int], expected: tuple[int, int]) -> bool:
    """Strides equal the expected ones wherever the extent is above 1."""
    return (shape[0] == 1 or strides[0] == expected[0]) and (shape[1] == 1 or strides[1] == expected[1])


def _check_strides(plan: ExecutionPlan, spec: _Operand, view: ArrayView, batch: int) -> int:
    """Matrix strides, batch stride and alignment of one operand; returns the batch stride for the kernel."""
    shape = tuple(view.shape[-2:])
    strides = tuple(view.strides[-2:])
    if not _strides_fit(shape, strides, spec.expected):
        raise ExecutionError(_stride_message(plan, spec, shape, strides))
    stride = 0
    if batch > 1:
        stride = view.strides[0]
        if stride < spec.size:
            outer = 0 if spec.row_major else 1
            raise ExecutionError(
                f"{spec.name}: batch stride {stride} (elements) is smaller than {spec.matrix}'s extent in memory, "
                f"{spec.ld_name} * {spec.dim_names[outer]} = {spec.ld} * {spec.dims[outer]} = {spec.size}; the "
                "problems would overlap. Use an array whose matrices follow each other (e.g. a contiguous batch)"
            )
    align = spec.alignment
    if stride * spec.itemsize % align:
        raise ExecutionError(
            f"{spec.name}: batch stride {stride} elements ({stride * spec.itemsize} bytes) is not a multiple of "
            f"the {align}-byte Alignment of {spec.matrix}, so problems after the first are misaligned; pad the "
            "batch stride or lower Alignment"
        )
    return stride


def _check_pointer(spec: _Operand, view: ArrayView) -> None:
    """The first element's address must meet the descriptor's Alignment for this operand."""
    align = spec.alignment
    if view.ptr % align:
        raise ExecutionError(
            f"{spec.name}: address {view.ptr:#x} is not aligned to {align} bytes as the descriptor's Alignment "
            f"requires for {spec.matrix} (it is {_alignment_of(view.ptr)}-byte aligned); pass an array that "
            "starts on an aligned address (not an offset view), or lower Alignment"
        )


def _alignment_of(ptr: int) -> int:
    """The largest power of two (up to 256) that divides ``ptr``."""
    for power in (256, 128, 64, 32, 16, 8, 4, 2):
        if ptr % power == 0:
            return power
    return 1


def _stride_message(plan: ExecutionPlan, spec: _Operand, shape: tuple[int, int], strides: tuple[int, int]) -> str:
    """Why the strides do not fit, and which Arrangement / LeadingDimension would."""
    rows, cols = spec.dims
    head = (
        f"{spec.name}: element strides {strides} of shape {shape} do not match {spec.layout_name} {spec.matrix} "
        f"with {spec.ld_name}={spec.ld}, which needs strides {spec.expected}"
    )
    desc = plan.desc
    arrangement = desc.arrangement
    layouts = {"a": arrangement.a.name, "b": arrangement.b.name, "c": arrangement.c.name}
    lds = {"a": plan.a.ld, "b": plan.b.ld, "c": plan.c.ld}
    # same order, another leading dimension
    if spec.row_major:
        same = (rows == 1 or strides[0] >= cols) and (cols == 1 or strides[1] == 1)
        same_ld = strides[0]
    else:
        same = (rows == 1 or strides[0] == 1) and (cols == 1 or strides[1] >= rows)
        same_ld = strides[1]
    if same and rows > 1 and cols > 1:
        lds[spec.name] = same_ld
        return (
            f"{head}; the array is {spec.layout_name} with leading dimension {same_ld}: build the descriptor with "
            f"LeadingDimension({lds['a']}, {lds['b']}, {lds['c']}) or pass an array with {spec.ld_name}={spec.ld}"
        )
    # the other order
    if spec.row_major:
        other = (rows == 1 or strides[0] == 1) and (cols == 1 or strides[1] >= rows)
        other_ld, other_name = strides[1], "col_major"
    else:
        other = (rows == 1 or strides[0] >= cols) and (cols == 1 or strides[1] == 1)
        other_ld, other_name = strides[0], "row_major"
    if other:
        layouts[spec.name] = other_name
        tight = cols if other_name == "row_major" else rows
        suggestion = f"Arrangement({layouts['a']}, {layouts['b']}, {layouts['c']})"
        if other_ld != tight or desc.has(_leading_dimension_operator()):
            lds[spec.name] = other_ld
            suggestion += f" + LeadingDimension({lds['a']}, {lds['b']}, {lds['c']})"
        return (
            f"{head}; the array is {other_name}: build the descriptor with {suggestion}, or copy the array to "
            f"{spec.layout_name} order"
        )
    return (
        f"{head}; the array is neither row- nor column-major with a valid leading dimension. Make it contiguous "
        f"in {spec.layout_name} order (e.g. numpy/cupy {'ascontiguousarray' if spec.row_major else 'asfortranarray'})"
    )


def _leading_dimension_operator() -> type:
    from ..describe.operators import LeadingDimension

    return LeadingDimension


def _check_devices(views: tuple[ArrayView, ...], device_id: int | None) -> None:
    """Every array on one device, and that device ``device_id`` when it is given."""
    first_name, first = None, None
    for name, view in zip("abc", views):
        if view.device_id is None:
            continue
        if device_id is not None and view.device_id != device_id:
            raise ExecutionError(
                f"{name}: the array is on device {view.device_id} but the call was asked to run on device "
                f"{device_id}; move the array (or leave the device out: a call runs on its arrays' device)"
            )
        if first is None:
            first_name, first = name, view.device_id
        elif view.device_id != first:
            raise ExecutionError(
                f"{name}: the array is on device {view.device_id} but {first_name} is on device {first}; a, b and c "
                "must be on one GPU"
            )


def _convert_scalar(
    value: Any, argument: str, scalar: _dt.DType, scalar_numpy: Any, is_complex: bool
) -> tuple[Any, Any]:
    """(real, imaginary) parts of alpha/beta as numpy scalars of the kernel's scalar type."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Number):
        raise ExecutionError(
            f"{argument}: {value!r} ({type(value).__name__}) is not a number; expected a Python or numpy scalar"
        )
    try:
        parts = (value.real, value.imag) if isinstance(value, numbers.Complex) else (value, 0)
    except Exception:  # pragma: no cover - exotic Number
        parts = (complex(value).real, complex(value).imag)
    if parts[1] != 0 and not is_complex:
        raise ExecutionError(
            f"{argument}: {value!r} is complex but the GEMM is real; pass a real number or add Type.complex"
        )
    out = []
    for part in parts:
        if scalar.name == "int32":
            if isinstance(part, numbers.Integral):
                as_int = int(part)
            else:
                as_float = float(part)
                if not as_float.is_integer():
                    raise ExecutionError(
                        f"{argument}: {value!r} is not an integer; an integer GEMM (C is int32) scales in int32"
                    )
                as_int = int(as_float)
            if not _INT32_RANGE[0] <= as_int <= _INT32_RANGE[1]:
                raise ExecutionError(f"{argument}: {value!r} does not fit in int32, the scalar type of this GEMM")
            out.append(np.int32(as_int))
        else:
            try:
                as_float, overflow = float(part), False
            except OverflowError:  # an int beyond float64
                as_float, overflow = 0.0, True
            with np.errstate(over="ignore"):
                converted = scalar_numpy(as_float)
            if overflow or (math.isfinite(as_float) and not np.isfinite(converted)):
                raise ExecutionError(
                    f"{argument}: {value!r} overflows {scalar.name}, the scalar type of this GEMM"
                )
            out.append(converted)
    return (out[0], out[1])


# ---------------------------------------------------------------------------------------------
# device checks and kernel loading (the only parts that need a GPU)
# ---------------------------------------------------------------------------------------------


def check_device(desc: Descriptor, compute_capability: tuple[int, int], device_id: int = 0, name: str = "") -> None:
    """DeviceError unless a kernel built for ``desc.arch`` (a cubin) runs on a device of this compute capability.

    A cubin runs on devices of the same major version and an equal or newer minor one;
    arch-specific code (``sm_90a``) runs only on exactly that compute capability.
    """
    major, minor = int(compute_capability[0]), int(compute_capability[1])
    cc = major * 10 + minor
    sm = desc.sm
    arch = desc.arch
    what = f"device {device_id}{f' ({name})' if name else ''} has compute capability {major}.{minor}"
    suggestion = f"build the descriptor with SM({cc})"
    if arch.endswith("a") and cc != sm:
        raise DeviceError(
            f"{arch} (SM({sm}, arch_specific=True)) code runs only on compute capability {sm // 10}.{sm % 10} "
            f"devices, but {what}; {suggestion}"
        )
    if sm > cc:
        raise DeviceError(f"the descriptor targets {arch}, newer than the GPU: {what}; {suggestion}")
    if sm // 10 != major:
        raise DeviceError(
            f"the descriptor targets {arch}; its cubin runs on compute capability {sm // 10}.x devices only, but "
            f"{what}; {suggestion}"
        )


def _device_name(device: Any) -> str:
    try:
        return str(device.name)
    except Exception:  # pragma: no cover
        return ""


def _load_kernel(desc: Descriptor, shared_memory: int, device_id: int) -> Any:
    """The cuda.core Kernel of ``desc`` loaded on ``device_id``, opted in to ``shared_memory`` dynamic bytes.

    The one call into the compiled kernel: ``CompiledKernel.kernel`` loads the cubin once
    per device and sets the >48 KB opt-in there.
    """
    compiled = desc.compile()
    return compiled.kernel(dynamic_shared_memory=shared_memory, device_id=device_id)


def load_on_device(desc: Descriptor, device_id: int, compiled: Any = None) -> None:
    """What the first ``execute`` on ``device_id`` does before launching: check the device, load the kernel there.

    DeviceError when the device cannot run the descriptor's kernel. ``compiled`` (a kernel
    of ``desc`` built with other options, or for a descriptor without Block, which is only
    fused) is loaded as it is; otherwise the execute plan of that device is made.
    """
    with _devices.on_device(device_id):
        if compiled is None and desc.has(Block):
            plan_for(desc).on_device(device_id)
            return
        device = _cuda_core().Device(device_id)
        check_device(desc, tuple(device.compute_capability), device_id, _device_name(device))
        kernel = desc.compile() if compiled is None else compiled
        kernel.kernel(dynamic_shared_memory=int(desc.kernel_shared_memory_size), device_id=device_id)


#: ``cuda.core.launch`` (blasdx.launch.cuda_driver.core_launch), under the name the TRSM launch uses.
_launch = _driver.core_launch


def _call_device(launch: Launch) -> int:
    """The device a checked call runs on: its arrays', else (arrays without memory) the current one, else 0."""
    device = launch.device_id
    if device is None:
        device = _devices.current_device_id()
    return 0 if device is None else device


# ---------------------------------------------------------------------------------------------
# public entry points
# ---------------------------------------------------------------------------------------------

_PLANS_BY_ID: dict[int, ExecutionPlan] = {}
_PLANS: dict[Any, ExecutionPlan] = {}


def plan_for(desc: Descriptor) -> ExecutionPlan:
    """The cached ExecutionPlan of ``desc`` (validated once; DescriptorError if it cannot execute).

    Looked up by identity first (no hashing on the hot path), then by value, so equal
    descriptors built anew share one plan (and its loaded kernels).
    """
    plan = _PLANS_BY_ID.get(id(desc))
    if plan is not None and plan.desc is desc:
        return plan
    shared = _PLANS.get(desc)
    if shared is None:
        shared = ExecutionPlan(desc)
        if len(_PLANS) > 1024:
            _PLANS.clear()
        _PLANS[desc] = shared
    plan = shared if shared.desc is desc else _alias(shared, desc)
    if len(_PLANS_BY_ID) > 1024:
        _PLANS_BY_ID.clear()
    _PLANS_BY_ID[id(desc)] = plan  # the plan holds desc, so its id cannot be reused while cached
    return plan


def _alias(plan: ExecutionPlan, desc: Descriptor) -> ExecutionPlan:
    """A plan sharing ``plan``'s device plans but holding ``desc`` (so the id cache stays sound)."""
    alias = ExecutionPlan.__new__(ExecutionPlan)
    for slot in ExecutionPlan.__slots__:
        setattr(alias, slot, getattr(plan, slot))
    alias.desc = desc
    return alias


def check_arguments(
    desc: Descriptor, a: Any, b: Any, c: Any, alpha: Any = 1, beta: Any = 0, *, stream: Any = None,
    device_id: int | None = None,
) -> Launch:
    """Validate a call without launching (host only): the Launch it would make, or ExecutionError."""
    plan = plan_for(desc)
    handle = resolve_stream(stream, (c, a, b))
    return plan.bind(a, b, c, alpha, beta, handle, device_id)


class Prepared(NamedTuple):
    """A launch ready to go: what ``cuda.core.launch`` takes (used by execute and the benchmarks)."""

    stream: Any
    config: Any
    kernel: Any
    args: tuple[Any, ...]
    launch: Launch


def prepare(
    desc: Descriptor, a: Any, b: Any, c: Any, *, alpha: Any = 1, beta: Any = 0, stream: Any = None
) -> Prepared | None:
    """Everything :func:`execute` does short of launching; None when the batch is empty.

    The pieces are those of a bare ``cuda.core.launch`` (what the benchmarks compare
    execute against); launch them with the arrays' device current.
    """
    plan = plan_for(desc)
    handle = resolve_stream(stream, (c, a, b))
    launch = plan.bind(a, b, c, alpha, beta, handle)
    device = _call_device(launch)
    if stream is not None:
        check_stream_device(stream, handle, device)
    with _devices.on_device(device):
        device_plan = plan.on_device(device)
    if launch.batch == 0:
        return None
    core = as_core_stream(stream, handle)
    return Prepared(core, device_plan.config(launch.batch), device_plan.kernel, launch.args, launch)


def execute(desc: Descriptor, a: Any, b: Any, c: Any, *, alpha: Any = 1, beta: Any = 0, stream: Any = None) -> Any:
    """``C = alpha * A @ B + beta * C`` in place on device arrays, one block per problem; returns ``c``.

    Shapes are (M, K), (K, N), (M, N) or batched (batch, M, K) ...; A or B of batch 1
    broadcast. Strides must follow the descriptor's Arrangement and LeadingDimension.
    The kernel runs on the arrays' device, whichever device is current. ``stream`` is
    None (the current stream of the arrays' library on their device, else the default
    stream), a cuda.core Stream, a CuPy/PyTorch stream, anything with ``__cuda_stream__``
    or an int handle, of the arrays' device. Every check runs before anything is
    launched; with ``beta == 0`` C is never read.

    A call whose arrays are PyTorch, CuPy or blasdx arrays of a kind (dtype, shape, strides,
    device) that has run before, on their library's current stream (``stream`` None or that
    stream), takes the bound path (:class:`BoundLayout`): the pointers, alpha and beta are
    checked and the kernel launched.
    """
    plan = _PLANS_BY_ID.get(id(desc))
    if plan is None or plan.desc is not desc:
        plan = plan_for(desc)
    # the libraries' current streams asked during this call (a bound call asks one only for a given stream)
    known: dict[int, int] | None = None if stream is None else {}
    gather = _GATHERERS.get(type(a))
    if gather is None:
        gather = _keys.gatherer(type(a))
    found = gather(a, b, c)
    if found is not None:
        key, pa, pb, pc = found
        last = plan._last_bound  # the same kind as the last bound call: an equality test, no hashing
        if key == last[0]:
            bound = last[1]
        else:
            bound = plan._bound.get(key)
            if bound is not None:
                plan._last_bound = (key, bound)  # one assignment: threads see an old or a new pair
        if bound is not None and bound.run(plan, a, b, c, pa, pb, pc, alpha, beta, stream, known):
            return c
    if known is None:
        known = {}
    return _run(plan, a, b, c, alpha, beta, stream, resolve_stream(stream, (c, a, b), known=known), known, True)


class BoundLayout:
    """What every execute() with arrays of one kind (dtype, shape, strides, device; the keys of
    blasdx.arrays.keys) does once the first such call has passed the checks: the grid, the batch
    strides, the byte extents, the device plan and where the stream comes from. Holds no array.

    What a bound call compares its pointers with is one tuple (``checks``, unpacked at once):
    the three alignments, then for A and B the open interval of ``pc - pa`` (``pc - pb``) in
    which their memory meets C's (empty when either has no bytes).
    """

    __slots__ = ("device_id", "device_plan", "batch", "strides", "extents", "checks", "stream_query",
                 "stream_object", "default_stream", "known_slot", "blasdx", "packed", "grid", "try_first", "_tail",
                 "_last")

    def __init__(self, device_id: int, device_plan: DevicePlan, batch: int, strides: tuple[Any, ...],
                 extents: tuple[int, ...], known_slot: int | None, alignments: tuple[int, int, int],
                 stream_query: tuple[Any, bool], blasdx: tuple[bool, bool, bool]) -> None:
        self.device_id = device_id
        self.device_plan = device_plan
        self.batch = batch
        self.strides = strides
        self.extents = extents
        self.checks = (*alignments, *_meeting(extents[0], extents[1], extents[4], extents[5]),
                       *_meeting(extents[2], extents[3], extents[4], extents[5]))
        # the library's current stream, asked inline (blasdx.arrays.keys.stream_query): its query, whether that answers
        # with a stream object (CuPy) rather than a handle (torch); no query: the default stream (blasdx arrays)
        self.stream_query, self.stream_object = stream_query
        self.default_stream = _default_stream()
        self.known_slot = known_slot  # where the library's stream goes in a call's ``known`` (None: blasdx's)
        self.blasdx = blasdx  # which of a, b, c are blasdx DeviceArrays (their producer streams are checked)
        self.packed = device_plan.packed
        self.grid = device_plan.grid(batch)
        self.try_first = True  # launch before asking which device is current (False: the last call found another)
        self._tail: tuple[Any, Any] = (None, ())  # (converted scalars, the launch's slots after the pointers)
        self._last: tuple[Any, Any, Any] = (_NOTHING, _NOTHING, ())  # (alpha, beta, their tail)

    def tail(self, scalars: tuple[Any, ...]) -> tuple[Any, ...]:
        """The kernel's arguments after the pointers for ``scalars`` (the plan's converted alpha and beta): one
        tuple of Python numbers per scalars object, so the launch rewrites them only when they change."""
        seen, tail = self._tail
        if seen is not scalars:
            tail = python_numbers((*scalars, *self.strides))
            self._tail = (scalars, tail)  # one assignment: threads see an old or a new pair
        return tail

    def tail_of(self, plan: ExecutionPlan, alpha: Any, beta: Any) -> tuple[Any, ...]:
        """:meth:`tail` of ``alpha`` and ``beta`` (checked and converted by the plan, which raises what the full path
        raises); remembered for the next call with the same objects when the plan remembers them too."""
        scalars = plan._scalars_of(alpha, beta)
        tail = self.tail(scalars)
        last = plan._last_scalars
        if last[0] is alpha and last[1] is beta and last[2] is scalars:  # hashable: not a 0-d array, which can change
            self._last = (alpha, beta, tail)
        return tail

    def run(self, plan: ExecutionPlan, a: Any, b: Any, c: Any, pa: int, pb: int, pc: int, alpha: Any,
            beta: Any, stream: Any = None, known: dict[int, int] | None = None) -> bool:
        """Check the pointers and scalars and launch; False (nothing done) when the full path must decide.

        ``stream`` is what the user passed: None (the arrays' library stream), or a stream of the
        arrays' device that is the library's current one there (any other needs the full path's
        ordering after the library's stream, which then finds the stream asked here in ``known``)."""
        al_a, al_b, al_c, a_low, a_high, b_low, b_high = self.checks
        if pa % al_a or pb % al_b or pc % al_c or a_low < pc - pa < a_high or b_low < pc - pb < b_high:
            return False
        last = self._last
        tail = last[2] if alpha is last[0] and beta is last[1] else self.tail_of(plan, alpha, beta)
        device = self.device_id
        query = self.stream_query
        if query is None:
            handle = self.default_stream
        elif self.stream_object:
            handle = query(device).ptr or self.default_stream
        else:
            handle = query(device) or self.default_stream
        if stream is not None:
            if stream_handle(stream) != handle:
                if known is not None and self.known_slot is not None:
                    known[self.known_slot] = handle
                return False
            check_stream_device(stream, handle, device)
        in_a, in_b, in_c = self.blasdx  # blasdx arrays written on another stream: the full path orders after it
        if (in_a and a._stream is not None and a._stream != handle) or (
                in_b and b._stream is not None and b._stream != handle) or (
                in_c and c._stream is not None and c._stream != handle):
            return False
        # launched by the kernel's function of the device whichever context is current: the driver refuses the
        # launch when that is another device's (or none) and the stream does not name the context, and then the
        # device is made current for a second try (which raises what the launch raises). A layout whose last
        # call found another device current asks first (a refused launch costs more than the question).
        # The second try makes the device current in the same C call that launches (where it is installed).
        packed = self.packed
        if self.batch and not (self.try_first and packed.try_launch_pointers(self.grid, handle, pa, pb, pc, tail)):
            if packed.try_launch_pointers_on(device, self.grid, handle, pa, pb, pc, tail):
                self.try_first = False
            else:
                token = _devices.enter(device)
                self.try_first = token is None  # one assignment: threads see an old or a new value
                try:
                    packed.launch_pointers(self.grid, handle, pa, pb, pc, tail)
                finally:
                    if token is not None:
                        _devices.leave(token)
        if in_c:
            c._set_stream(handle)
        return True


def _meeting(lo: int, hi: int, c_lo: int, c_hi: int) -> tuple[int, int]:
    """The open interval of ``pc - p`` in which bytes ``[p + lo, p + hi)`` meet C's ``[pc + c_lo, pc + c_hi)``
    (``(0, 0)``, empty, when either span has no bytes)."""
    if hi <= lo or c_hi <= c_lo:
        return 0, 0
    return lo - c_hi, hi - c_lo


def python_numbers(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """Kernel arguments as Python ints and floats (numpy scalars converted once: struct packs these faster); a
    float32 value is exact as a Python float."""
    return tuple(float(v) if isinstance(v, (float, np.floating)) else int(v) for v in values)


def _bind(plan: ExecutionPlan, a: Any, b: Any, c: Any, launch: Launch, device: int, device_plan: DevicePlan) -> None:
    """After a full call: bind the kind of its arrays (when each has a key), under the key execute() gathers."""
    ra, rb, rc = _read(a), _read(b), _read(c)
    if ra is None or rb is None or rc is None:
        return
    layout = plan._layouts.get((launch.a.dtype.name, launch.a.shape, launch.a.strides, launch.b.dtype.name,
                                launch.b.shape, launch.b.strides, launch.c.dtype.name, launch.c.shape,
                                launch.c.strides))
    if layout is None:
        return
    batch, strides, extents = layout
    first = next((x for x in (c, a, b) if _library_of(x) is not None), c)  # whose stream resolve_stream takes
    gathered = _keys.gatherer(type(a))(a, b, c)  # (key, pointers): execute() looks the binding up by that key
    if gathered is None:
        return
    if len(plan._bound) > 64:
        plan.unbind()
    library = _library_of(first)
    slot = None if library is None else device if library == "torch" else ~device  # resolve_stream's slots
    blasdx = (type(a) is DeviceArray, type(b) is DeviceArray, type(c) is DeviceArray)
    plan._bound[gathered[0]] = BoundLayout(device, device_plan, batch, strides, extents, slot, plan._alignments,
                                           _keys.stream_query(first), blasdx)


def execute_on(desc: Descriptor, a: Any, b: Any, c: Any, alpha: Any, beta: Any, handle: int) -> Any:
    """:func:`execute` on stream ``handle`` that the caller resolved and checked against the arrays' device.

    For bx.matmul / bx.mma, which read the arrays and the stream once for the whole call.
    """
    plan = _PLANS_BY_ID.get(id(desc))
    if plan is None or plan.desc is not desc:
        plan = plan_for(desc)
    return _run(plan, a, b, c, alpha, beta, None, handle, None)


def _run(
    plan: ExecutionPlan, a: Any, b: Any, c: Any, alpha: Any, beta: Any, stream: Any, handle: int,
    known: dict[int, int] | None, remember: bool = False,
) -> Any:
    """Check, then launch on the arrays' device with it current; ``stream`` is what the user passed (or None).

    ``remember``: bind the kind of the arrays after the launch (:class:`BoundLayout`)."""
    launch = plan.bind(a, b, c, alpha, beta, handle, None, known)
    device = launch[7]
    if device is None:
        device = _call_device(launch)
    if stream is not None:
        check_stream_device(stream, handle, device)
    token = _devices.enter(device)
    try:
        device_plan = plan._devices.get(device) or plan.on_device(device)
        batch = launch[3]
        if batch == 0:
            return c
        if launch[6]:
            wait_for_producers(as_core_stream(stream, handle), handle, launch[6])
        device_plan.launch(batch, handle, launch[4])
    finally:
        if token is not None:
            _devices.leave(token)
    if type(c) is DeviceArray and c._stream != handle:
        c._set_stream(handle)
    if remember:
        _bind(plan, a, b, c, launch, device, device_plan)
    return c

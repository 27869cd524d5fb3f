"""Argument checks and launch of blasdx's batched block TRSM (``TrsmDescriptor.execute``).

:class:`TrsmKernel` is one descriptor's batched kernel writing X in one output layout,
loaded per device; ``bx.solve_triangular`` launches it too, with an output of its own and
right-hand sides split over blocks. :func:`execute` solves in place: it checks a and b
against the descriptor (dtype, shape, strides, batch, alignment, device, a writable b that
does not overlap a), converts alpha, and only then launches. Every failure is an
ExecutionError naming the argument; nothing has run.

The kernel (kernels/batched_trsm.cu) takes ``(const T* a, const T* b, T* out, alpha,
long long stride_a, stride_b, stride_out, chunk_b, chunk_out, int batch)`` -- ``alpha_re,
alpha_im`` for complex -- on a grid of (ceil(batch / batches_per_block), chunks) blocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import arrays as _arrays
from ..arrays import (
    ArrayView,
    as_array,
    as_core_stream,
    resolve_stream,
    wait_for_producers,
)
from ..codegen.trsm import KERNEL_NAME, OutputLayout, default_output, generate
from ..compile.cache import cached_compile
from ..describe.operators import Block, Side, row_major
from ..base.errors import DescriptorError, ExecutionError
from ..launch import devices as _devices
from ..launch.caches import remember
from . import execute as _ex

if TYPE_CHECKING:  # pragma: no cover
    from ..compile import CompiledKernel
    from ..describe.trsm import TrsmDescriptor

__all__ = ["TrsmKernel", "TrsmOperands", "execute", "kernel_for", "operands_for"]

_MAX_GRID_X = 2**31 - 1
_SCALAR_NUMPY = {"float32": np.float32, "float64": np.float64}


class TrsmKernel:
    """The batched TRSM kernel of ``desc`` writing X in ``out``'s layout; compiled once, loaded per device."""

    def __init__(self, desc: TrsmDescriptor, out: OutputLayout | None = None) -> None:
        desc.validate()
        if not desc.has(Block):
            raise DescriptorError(
                f"execute needs the Block execution operator: {desc!r} has none; add bx.Block() to the descriptor"
            )
        self.desc = desc
        self.out = out or default_output(desc)
        self.batches = desc.plan.batches
        self.block = tuple(desc.block_dim)
        self.shared_memory = int(desc.kernel_shared_memory_size)
        self.scalar = _SCALAR_NUMPY[desc.scalar_type.name]
        self._compiled: CompiledKernel | None = None
        self._devices: dict[int, Any] = {}
        self._configs: dict[tuple[int, int], Any] = {}

    def __repr__(self) -> str:
        return f"TrsmKernel({self.desc!r}, out={self.out})"

    def compile(self) -> CompiledKernel:
        """The cubin (through both cache levels)."""
        if self._compiled is None:
            if self.out == default_output(self.desc):
                self._compiled = self.desc.compile()
            else:
                generated = generate(self.desc, self.out)
                self._compiled = cached_compile(generated.source, KERNEL_NAME, generated.arch)
        return self._compiled

    def alpha(self, value: Any) -> tuple[Any, ...]:
        """alpha as the kernel's scalar arguments (real, or real and imaginary parts)."""
        re, im = _ex._convert_scalar(value, "alpha", self.desc.scalar_type, self.scalar, self.desc.is_complex)
        return (re, im) if self.desc.is_complex else (re,)

    def on_device(self, device_id: int) -> Any:
        """The loaded kernel on ``device_id`` (DeviceError when the device cannot run it)."""
        kernel = self._devices.get(device_id)
        if kernel is None:
            from cuda.core import Device

            device = Device(device_id)
            _ex.check_device(self.desc, tuple(device.compute_capability), device_id, _ex._device_name(device))
            kernel = self._devices[device_id] = self.compile().kernel(dynamic_shared_memory=self.shared_memory,
                                                                      device_id=device_id)
        return kernel

    def launch(
        self, stream: Any, device_id: int, pointers: tuple[int, int, int], alpha: tuple[Any, ...],
        strides: tuple[int, int, int], chunks: tuple[int, int, int], batch: int,
    ) -> None:
        """Run ``batch`` problems: ``pointers`` (a, b, out), batch ``strides`` and ``chunks`` (count, b, out)."""
        count, chunk_b, chunk_out = chunks
        grid = (-(-batch // self.batches), count)
        config = self._configs.get(grid)
        if config is None:
            from cuda.core import LaunchConfig

            config = LaunchConfig(grid=(*grid, 1), block=self.block, shmem_size=self.shared_memory)
            self._configs[grid] = config
        i64 = np.int64
        args = (*pointers, *alpha, *(i64(s) for s in strides), i64(chunk_b), i64(chunk_out), np.int32(batch))
        _ex._launch(stream, config, self.on_device(device_id), *args)


_KERNELS: dict[tuple[Any, OutputLayout | None], TrsmKernel] = {}


def kernel_for(desc: TrsmDescriptor, out: OutputLayout | None = None) -> TrsmKernel:
    """The cached :class:`TrsmKernel` of ``(desc, out)``."""
    key = (desc, out)
    found = _KERNELS.get(key)
    if found is None:
        if len(_KERNELS) > 1024:
            _KERNELS.clear()
        found = _KERNELS[key] = TrsmKernel(desc, out)
    return found


class TrsmOperands:
    """What a and b must look like for one descriptor (dtype, logical shape, strides, extent, alignment)."""

    def __init__(self, desc: TrsmDescriptor) -> None:
        m, n = desc.size
        dim = desc.a_dim[0]
        lda, ldb = desc.leading_dimension
        al_a, al_b = desc.alignment
        arr = desc.arrangement
        extent = ("M", "M") if desc.side is Side.left else ("N", "N")
        self.desc = desc
        self.a = _ex._Operand("a", (dim, dim), extent, desc.a_value_type, arr.a is row_major, lda, desc.a_size, al_a)
        self.b = _ex._Operand("b", (m, n), ("M", "N"), desc.b_value_type, arr.b is row_major, ldb, desc.b_size, al_b)
        self._layouts: dict[Any, tuple[int, int, int]] = {}

    def layout(self, va: ArrayView, vb: ArrayView) -> tuple[int, int, int]:
        """(batch, batch stride of a, batch stride of b) after the checks that depend on shapes and strides only."""
        key = (va.dtype.name, va.shape, va.strides, vb.dtype.name, vb.shape, vb.strides)
        found = self._layouts.get(key)
        if found is None:
            ba = _ex._check_shape(self.a, va)
            batch = _ex._check_shape(self.b, vb)
            if batch > _MAX_GRID_X:
                raise ExecutionError(f"b: batch {batch} exceeds the {_MAX_GRID_X} problems one launch can run")
            if ba not in (batch, 1):
                raise ExecutionError(
                    f"a: batch {ba} (shape {tuple(va.shape)}) does not match b's batch {batch}; A needs B's batch or 1 "
                    "(one A shared by every problem)"
                )
            found = (batch, self._batch_stride(self.a, va, ba), self._batch_stride(self.b, vb, batch))
            if len(self._layouts) > 64:
                self._layouts.clear()
            self._layouts[key] = found
        return found

    def _batch_stride(self, spec: Any, view: ArrayView, batch: int) -> int:
        shape, strides = tuple(view.shape[-2:]), tuple(view.strides[-2:])
        if not _ex._strides_fit(shape, strides, spec.expected):
            raise ExecutionError(self._stride_message(spec, shape, strides))
        # the element strides fit, so only the batch stride and its alignment remain to check
        return _ex._check_strides(None, spec, view, batch)  # type: ignore[arg-type]

    def _stride_message(self, spec: Any, shape: tuple[int, int], strides: tuple[int, int]) -> str:
        """Why the strides do not fit, and the Arrangement / LeadingDimension that would."""
        head = (
            f"{spec.name}: element strides {strides} of shape {shape} do not match {spec.layout_name} {spec.matrix} "
            f"with {spec.ld_name}={spec.ld}, which needs strides {spec.expected}"
        )
        rows, cols = spec.dims
        if (rows == 1 or strides[0] == 1) and (cols == 1 or strides[1] >= rows):
            order, ld = "col_major", strides[1]
        elif (rows == 1 or strides[0] >= cols) and (cols == 1 or strides[1] == 1):
            order, ld = "row_major", strides[0]
        else:
            return (
                f"{head}; the array is neither row- nor column-major with a valid leading dimension. Make it "
                f"contiguous in {spec.layout_name} order"
            )
        layouts = {"a": self.a.layout_name, "b": self.b.layout_name, spec.name: order}
        lds = {"a": self.a.ld, "b": self.b.ld, spec.name: ld}
        return (
            f"{head}; the array is {order} with leading dimension {ld}: build the descriptor with "
            f"Arrangement({layouts['a']}, {layouts['b']}) + LeadingDimension({lds['a']}, {lds['b']}), or pass a "
            f"{spec.layout_name} array with {spec.ld_name}={spec.ld}"
        )


_OPERANDS: dict[Any, TrsmOperands] = {}


def operands_for(desc: TrsmDescriptor) -> TrsmOperands:
    """The cached :class:`TrsmOperands` of ``desc``."""
    found = _OPERANDS.get(desc)
    return found if found is not None else remember(_OPERANDS, desc, TrsmOperands(desc))


def check_arguments(
    desc: TrsmDescriptor, a: Any, b: Any, alpha: Any = 1, *, stream: Any = None, device_id: int | None = None
) -> tuple[ArrayView, ArrayView, int, tuple[int, int], tuple[Any, ...]]:
    """Everything execute checks, host only: (a view, b view, batch, batch strides, alpha arguments)."""
    kernel = kernel_for(desc)
    ops = operands_for(desc)
    handle = resolve_stream(stream, (b, a))
    va, vb = as_array(a, "a", stream=handle), as_array(b, "b", stream=handle)
    batch, stride_a, stride_b = ops.layout(va, vb)
    for spec, view in ((ops.a, va), (ops.b, vb)):
        _ex._check_pointer(spec, view)
    _check_devices(va, vb, device_id)
    if vb.readonly:
        raise ExecutionError("b: the array is read-only; the solution overwrites B. Pass a writable array")
    (a_lo, a_hi), (b_lo, b_hi) = va.span, vb.span
    if a_hi > a_lo and b_hi > b_lo and a_lo < b_hi and b_lo < a_hi:
        raise ExecutionError(
            f"b: its memory [{b_lo:#x}, {b_hi:#x}) overlaps a's [{a_lo:#x}, {a_hi:#x}); B is overwritten while A is "
            "read. Pass separate arrays"
        )
    return va, vb, batch, (stride_a, stride_b), kernel.alpha(alpha)


def _check_devices(va: ArrayView, vb: ArrayView, device_id: int | None) -> None:
    """a and b on one device, and that device the current one when ``device_id`` is given."""
    if va.device_id is not None and vb.device_id is not None and va.device_id != vb.device_id:
        raise ExecutionError(
            f"b: the array is on device {vb.device_id} but a is on device {va.device_id}; a and b must be on one GPU"
        )
    for name, view in (("a", va), ("b", vb)):
        if device_id is not None and view.device_id is not None and view.device_id != device_id:
            raise ExecutionError(
                f"{name}: the array is on device {view.device_id} but the current device is {device_id}; make "
                f"device {view.device_id} current or move the array"
            )


def execute(desc: TrsmDescriptor, a: Any, b: Any, *, alpha: Any = 1, stream: Any = None) -> Any:
    """``B = alpha A^-1 B`` (Side.left) or ``alpha B A^-1`` (Side.right) in place, one block per problem; returns b.

    a is (dim, dim) or (batch, dim, dim) (a batch of 1 is shared by every problem), b is
    (M, N) or (batch, M, N); strides follow the descriptor's Arrangement and
    LeadingDimension. alpha == 0 sets B to zero without reading A or B.
    """
    handle = resolve_stream(stream, (b, a))
    va, vb, batch, (stride_a, stride_b), alpha_args = check_arguments(desc, a, b, alpha, stream=handle)
    device = vb.device_id if vb.device_id is not None else va.device_id  # the call runs on the operands' device
    if device is None:
        current = _devices.current_device_id()
        device = 0 if current is None else current
    if stream is not None:
        _devices.check_stream_device(stream, handle, device)
    kernel = kernel_for(desc)
    kernel.on_device(device)
    if batch == 0:
        return b
    token = _devices.enter(device)
    try:
        core = as_core_stream(stream, handle)
        producers = tuple(s for s in (va.stream, vb.stream) if s is not None and s != handle)
        if producers:
            wait_for_producers(core, handle, producers)
        kernel.launch(core, device, (va.ptr, vb.ptr, vb.ptr), alpha_args, (stride_a, stride_b, stride_b), (1, 0, 0),
                      batch)
    finally:
        if token is not None:
            _devices.leave(token)
    if type(b) is _arrays.DeviceArray and b._stream != handle:
        b._set_stream(handle)
    return b

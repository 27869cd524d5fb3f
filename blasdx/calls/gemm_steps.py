"""GEMMs on array views with any alpha and beta: the building block of the blocked solver and complex products.

``bx.matmul`` / ``bx.mma`` compute ``x @ y (+ acc)``; algorithms built on GEMMs need
``D = alpha * X Y + beta * C`` on parts of arrays (a triangular solve's updates
``B2 -= A21 X1``). A :class:`GemmStep` is the plan of one such product on views (pointer,
shape, strides), chosen by matmul's own planner (:func:`blasdx.calls.matmul.plan_call`: the
Hopper engine, the tiled kernel or one block per problem), and run with the scalars of the
step: C is D itself or absent, so every path, the in-place one-block kernel included, serves.
"""

from __future__ import annotations

from typing import Any

from .. import arrays as _arrays
from ..base import dtypes as _dt
from ..arrays import ArrayView
from ..engine import emulation as _emulation
from ..run import execute as _execute
from . import matmul as _ag

__all__ = ["GemmStep", "allocate", "real_step", "view_of"]


def view_of(base: ArrayView, offset: int, shape: tuple[int, ...], strides: tuple[int, ...],
            dtype: _dt.DType | None = None) -> ArrayView:
    """A view into ``base``'s memory ``offset`` bytes from its start (strides in elements of ``dtype``)."""
    return base._replace(ptr=base.ptr + offset, shape=shape, strides=strides, dtype=dtype or base.dtype)


class GemmStep:
    """``D = alpha * X Y + beta * D`` (beta 0: D is only written) for views of one kind; built once, run often."""

    __slots__ = ("device_id", "plan")

    def __init__(self, plan: _ag.CallPlan, device_id: int) -> None:
        self.plan = plan
        self.device_id = device_id

    def describe(self) -> str:
        """The path the product runs on (matmul's CallPlan line)."""
        return self.plan.describe()

    def run(self, core: Any, handle: int, x: ArrayView, y: ArrayView, d: ArrayView, alpha: float,
            beta: float) -> None:
        """Launch on stream ``handle`` (``core``: its cuda.core Stream) with the plan's device current."""
        plan = self.plan
        if plan.batch == 0 or plan.m == 0 or plan.n == 0:
            return
        if plan.scheme.name == "tf32" and x.dtype == _dt.float32:
            x, y = x._replace(dtype=_dt.tfloat32), y._replace(dtype=_dt.tfloat32)
        c = d if beta != 0 else None
        if plan.kind == "hopper":
            plan.kernel.run(self.device_id, core, handle, x, y, c, d, alpha, beta)
        elif plan.kind == "tiled":
            _ag._launch_tiled(plan, x, y, c, d, alpha, beta, handle)
        else:  # one block per problem, in place
            _execute.execute_on(plan.desc, x, y, d, alpha, beta, handle)


def real_step(x: ArrayView, y: ArrayView, d: ArrayView, accumulate: bool, device_id: int,
              mantissa_bits: int | None = None) -> GemmStep:
    """The step for real views x [.., M, K], y [.., K, N] into d [.., M, N] of x's type (``accumulate``: beta != 0).

    ``mantissa_bits`` is matmul's (float32: tf32 / 3xtf32 products; float64: int8 residues).
    """
    device = _ag._device_info(device_id)
    scheme = _ag._resolve_scheme(x.dtype, mantissa_bits)
    # the one-block kernel refuses a D whose byte span meets x's or y's (column-major parts of one array do)
    apart = all(not _meet(d.span, v.span) for v in (x, y))
    plan = _ag.plan_call(x, y, d if accumulate else None, d.dtype, device, device_id, out=d, allow_block=apart,
                         scheme=scheme)
    return GemmStep(plan, device_id)


def _meet(one: tuple[int, int], other: tuple[int, int]) -> bool:
    return one[1] > one[0] and other[1] > other[0] and one[0] < other[1] and other[0] < one[1]


def scheme_of(dtype: _dt.DType, mantissa_bits: int | None) -> _emulation.Scheme:
    """The products' scheme of a step (matmul's rule, its errors quoting it)."""
    return _ag._resolve_scheme(dtype, mantissa_bits)


def allocate(like: Any, shape: tuple[int, ...], dtype: _dt.DType, device_id: int, stream: int) -> Any:
    """A new C-contiguous array of ``like``'s library, complex types included."""
    if dtype.is_complex:
        library = _arrays._library_of(like)
        if library == "torch":
            import torch

            return torch.empty(shape, dtype=getattr(torch, dtype.name), device=like.device)
        if library == "cupy":
            import cupy

            with cupy.cuda.Device(device_id):
                return cupy.empty(shape, dtype=dtype.host_dtype)
    return _ag._allocate(like, shape, dtype, device_id, stream)

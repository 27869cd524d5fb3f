"""Triangular solves of any size: recursive blocking over the block TRSM kernel and the GEMM.

``bx.solve_triangular`` solves a system whose A fits one thread block's shared memory with
one kernel (blasdx.run.trsm). A larger A is split in halves, recursively,

    [A11  0 ] [X1]   [B1]      X1 = A11^-1 B1
    [A21 A22] [X2] = [B2]  ->  B2 -= A21 X1          (a GEMM: matmul's planner picks its kernel)
                               X2 = A22^-1 B2

(upper triangles walk the halves the other way), until a diagonal block is small enough for
the block TRSM kernel (:data:`LEAF`). The right-hand sides become X in place in the result:
B is copied into it first (one pass, any layouts; nothing when the result is b itself). A
right-side solve ``X A = B`` is the left solve ``A^T X^T = B^T`` on transposed views (the
triangle flips), so every side, triangle, transpose (a transposed view of A) and diagonal
runs the same two kernels; a batch runs each step as one batched launch, a batch of 1 in A
or B broadcasting as in the one-kernel path. Most of the work is in the GEMMs (all but
about LEAF / K of it), whose sizes halve from K / 2 down to LEAF.

The diagonal blocks are solved by their inverses (:data:`INVERT_DIAGONAL`): a substitution
runs one thread per right-hand side, too few to fill the GPU when a leaf's right-hand sides
are all of B, whereas ``X_i = A_ii^-1 W_i`` is a GEMM. So every full leaf's A_ii is inverted up
front in one batched launch of the block TRSM kernel (``A_ii Z = I``, substitution, backward
stable column by column), B is copied into a work array W, the updates
``W_rows -= A_rows,solved X_solved`` and the leaves ``X_i = A_ii^-1 W_i`` are GEMMs, and X is
written once. The error of a leaf is then that of a product with the computed inverse, within
cond(A_ii) u of the substitution's; leaves are small (64-128), as in the blocked solvers of
GPU BLAS libraries.

A :class:`BlockedSolve` is built once per kind of call (the result's, a's and b's layouts,
dtypes, shapes, alignment classes, device, options): every step's kernel is chosen and its
byte offsets fixed, so a call launches the steps in order.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..base import dtypes as _dt
from ..arrays import ArrayView
from ..codegen.trsm import OutputLayout
from ..describe.operators import Size
from ..describe.trsm import solve_description
from ..engine import layouts as _layouts
from ..base.errors import UnsupportedError
from ..launch import scratch as _scratch
from ..run.trsm import TrsmKernel, kernel_for
from . import gemm_steps as _steps
from . import tiled as _tiled

__all__ = ["LEAF", "BlockedSolve", "plan_blocked", "split_point"]

#: Largest diagonal block (unknowns) the block TRSM kernel solves, per element type: A's
#: leaf takes 64 KB of shared memory (32 KB for 16-byte elements), leaving room for B.
LEAF = {"float32": 128, "float64": 64, "complex64": 64, "complex128": 64}
#: The same for the inverse mode, whose inversions may split the identity's columns over blocks.
INVERSE_LEAF = {"float32": 128, "float64": 128, "complex64": 128, "complex128": 64}
#: Right-hand sides per block of a leaf solve, tried largest first: the largest that still
#: gives the GPU two blocks per SM.
_WIDTHS = (128, 64, 32, 16)
_ALIGN = 16  # unknowns: split points are multiples of it (16-element offsets keep TMA's 16-byte rule)
#: Diagonal blocks as inverses and GEMMs (False: the block TRSM kernel substitutes, as a one-kernel solve does).
INVERT_DIAGONAL = True
_PLACEHOLDER = 1 << 21  # where the work arrays are planned (scratch is 256-byte aligned)
_IDENTITY: dict[tuple[int, str, int], Any] = {}  # (device, dtype, leaf) -> an identity matrix on the device


def split_point(lo: int, hi: int) -> int:
    """Where [lo, hi) splits: the middle, rounded to a multiple of 16 unknowns from lo."""
    half = (hi - lo) // 2
    return lo + max(_ALIGN, (half + _ALIGN // 2) // _ALIGN * _ALIGN)


class _Leaf(NamedTuple):
    kernel: TrsmKernel
    a_offset: int  # bytes from a's first element
    x_offset: int  # bytes from the result's first element
    chunks: tuple[int, int, int]  # (count, elements between chunks) of the in-place B / X


class _Inverse(NamedTuple):
    """A_ii^-1 of diagonal blocks into the inverse buffer: ``count`` leaves of ``dim`` from ``first``."""

    kernel: TrsmKernel
    chunks: int  # blocks per diagonal block: the identity's columns split in equal groups
    first: int  # unknown where the first block starts
    dim: int
    count: int  # blocks in one launch (A unbatched or shared), else 1 launch per block over A's batch
    inv_offset: int  # bytes into the inverse buffer


class _Product(NamedTuple):
    """X_i = A_ii^-1 W_i (a GEMM, beta 0)."""

    step: Any
    inv_offset: int
    inv_shape: tuple[int, ...]
    inv_strides: tuple[int, ...]
    w_offset: int
    w_shape: tuple[int, ...]
    x_offset: int
    x_shape: tuple[int, ...]


class _Update(NamedTuple):
    step: _steps.GemmStep
    a_offset: int
    a_shape: tuple[int, ...]
    src_offset: int  # X rows already solved
    src_shape: tuple[int, ...]
    dst_offset: int  # rows they update
    dst_shape: tuple[int, ...]


class Operand(NamedTuple):
    """A view's matrix geometry after the side is normalised (left solves): strides in elements."""

    rows: int
    cols: int
    row_stride: int
    col_stride: int
    batch: int | None
    batch_stride: int

    def shape(self, rows: int, cols: int) -> tuple[int, ...]:
        return (rows, cols) if self.batch is None else (self.batch, rows, cols)

    def strides(self) -> tuple[int, ...]:
        core = (self.row_stride, self.col_stride)
        return core if self.batch is None else (self.batch_stride, *core)

    def offset(self, row: int, col: int, itemsize: int) -> int:
        return (row * self.row_stride + col * self.col_stride) * itemsize

    @property
    def row_major(self) -> bool:
        return self.col_stride == 1 and (self.cols <= 1 or self.row_stride >= self.cols) or self.rows <= 1

    @property
    def ld(self) -> int:
        return max(self.row_stride if self.row_major else self.col_stride, 1)


def operand(view: ArrayView, transpose: bool) -> Operand:
    """The geometry of a rank-2 or rank-3 view, transposed when the solve is on the right."""
    shape, strides = tuple(view.shape), tuple(view.strides)
    rows, cols = shape[-2:]
    rs, cs = strides[-2:]
    if transpose:
        rows, cols, rs, cs = cols, rows, cs, rs
    batch = shape[0] if len(shape) == 3 else None
    bs = strides[0] if batch is not None and batch > 1 else 0
    return Operand(rows, cols, rs, cs, batch, bs)


class BlockedSolve:
    """The steps of one kind of blocked solve: copy B into X (unless in place), then leaves and updates."""

    def __init__(self, dtype: _dt.DType, a: Operand, b: Operand, x: Operand, lower: bool, unit: bool, batch: int,
                 a_view: ArrayView, x_view: ArrayView, device_id: int, sm: int, multiprocessors: int,
                 mantissa_bits: int | None = None) -> None:
        """``a``, ``b``, ``x``: geometries of a left solve (transposed for right ones); ``x_view`` the result's
        view (its address may be a placeholder: only alignment matters here)."""
        self.dtype, self.a, self.b, self.x = dtype, a, b, x
        self.lower, self.unit, self.batch = lower, unit, batch
        self.device_id, self.sm = device_id, sm
        self.real = _dt.as_dtype(dtype.real_name) if dtype.is_complex else dtype
        self.steps: list[_Leaf | _Update] = []
        self._multiprocessors = multiprocessors
        self._mantissa_bits = mantissa_bits
        self._gemms: dict[Any, _steps.GemmStep] = {}
        self.leaf = INVERSE_LEAF[dtype.name] if INVERT_DIAGONAL else LEAF[dtype.name]
        self.inverses: list[_Inverse] = []
        self.inverse = INVERT_DIAGONAL and self._plan_inverses(a_view)
        if not self.inverse:
            self.leaf = LEAF[dtype.name]
        if self.inverse:
            self._plan_work()
            self._walk_inverse(0, a.rows, a_view, x_view)
        else:
            self._walk(0, a.rows, a_view, x_view)
        self.leaves = sum(isinstance(s, (_Leaf, _Product)) for s in self.steps)
        self.updates = len(self.steps) - self.leaves

    def describe(self) -> str:
        """One line: K, the leaf size, the number of leaf solves and GEMM updates, the GEMMs' paths."""
        paths = sorted({s.step.describe().split(",")[0] for s in self.steps if isinstance(s, _Update)})
        if self.inverse:
            launches = sum(1 if (self.a.batch or 1) == 1 else i.count for i in self.inverses)
            return (f"blocked TRSM, K = {self.a.rows}, leaves of {self.leaf} by their inverses: {launches} block-TRSM "
                    f"inversion launch{'es' if launches > 1 else ''}, {self.leaves} leaf GEMMs, {self.updates} GEMM "
                    f"updates ({'; '.join(paths) or 'none'})")
        return (f"blocked TRSM, K = {self.a.rows}, leaves of {self.leaf}: {self.leaves} block-TRSM launches, "
                f"{self.updates} GEMM updates ({'; '.join(paths) or 'none'})")

    # -- building -------------------------------------------------------------------------------

    def _walk(self, lo: int, hi: int, a_view: ArrayView, x_view: ArrayView) -> None:
        if hi - lo <= self.leaf:
            self.steps.extend(self._leaves(lo, hi, a_view, x_view))
            return
        mid = split_point(lo, hi)
        first, second = ((lo, mid), (mid, hi)) if self.lower else ((mid, hi), (lo, mid))
        self._walk(*first, a_view, x_view)
        self.steps.append(self._update(second, first, a_view, x_view))
        self._walk(*second, a_view, x_view)

    # -- the inverse mode -----------------------------------------------------------------------

    def _plan_inverses(self, a_view: ArrayView) -> bool:
        """The inversion launches of the diagonal blocks (full leaves, then the rest); False when they do not fit."""
        a, leaf, size = self.a, self.leaf, self.dtype.size
        k = a.rows
        full, rest = divmod(k, leaf)
        per_leaf = (a.batch or 1) if a.batch_stride else 1  # inverses per block (A's problems; shared A: 1)
        self._per_leaf = per_leaf
        offset = 0
        try:
            for first, dim, count in ((0, leaf, full), (full * leaf, rest, 1)):
                if count == 0 or dim == 0:
                    continue
                step = dim * (a.row_stride + a.col_stride)
                launches_one = per_leaf == 1
                kernel, chunks = self._inverse_kernel(dim, a_view.ptr + a.offset(first, first, size),
                                                      step if launches_one else a.batch_stride,
                                                      count if launches_one else per_leaf)
                self.inverses.append(_Inverse(kernel, chunks, first, dim, count, offset))
                offset += count * per_leaf * dim * dim * size
        except UnsupportedError:
            self.inverses = []
            return False
        self._inverse_bytes = offset
        return True

    def _inverse_kernel(self, dim: int, a_ptr: int, a_stride: int, batch: int) -> tuple[TrsmKernel, int]:
        """The block TRSM of A_ii Z = I (B: a dim x dim identity with ld = leaf) writing Z row-major, ld = dim,
        and the chunks its columns are split into: the fewest whose block fits (UnsupportedError: none)."""
        a = self.a
        item = self.dtype.size
        al_a = _tiled.copy_width(a_ptr, item, 0, 1, a_stride, batch)
        last: Exception | None = None
        # the fewest chunks that give every SM a block (the blocks substitute one column each per thread), more
        # where fewer do not fit
        counts = [c for c in (1, 2, 4, 8) if dim % c == 0]
        wanted = next((c for c in counts if batch * c >= self._multiprocessors), counts[-1])
        for chunks in [c for c in counts if c >= wanted]:
            width = dim // chunks
            al_out = _tiled.copy_width(_PLACEHOLDER, item, width, chunks, dim * dim, batch)
            desc = solve_description(
                Size(dim, width), self.real, self.dtype.is_complex, (self.lower, True, self.unit), (a.row_major, True),
                (a.ld, self.leaf), (al_a, _tiled.copy_width(_PLACEHOLDER, item, width, chunks, 0, 1), al_out), self.sm,
            )
            try:
                desc.validate()
            except UnsupportedError as exc:
                last = exc
                continue
            return kernel_for(desc, OutputLayout(True, dim, al_out)), chunks
        raise UnsupportedError(f"a {dim} x {dim} diagonal block does not fit one thread block: {last}")

    def _plan_work(self) -> None:
        """W: B's copy that the updates work on, row-major (the normalised left solve's rows), rows 32-byte aligned."""
        x = self.x
        ld = max(8, -(-x.cols // 8) * 8)
        self.w = Operand(x.rows, x.cols, ld, 1, x.batch if self.batch > 1 or x.batch else None,
                         x.rows * ld if self.batch > 1 else 0)
        self._w_bytes = max(1, self.batch) * x.rows * ld * self.dtype.size

    def _walk_inverse(self, lo: int, hi: int, a_view: ArrayView, x_view: ArrayView) -> None:
        leaf = self.leaf
        if hi - lo <= leaf:
            self.steps.append(self._product(lo, hi, x_view))
            return
        leaves = -(-(hi - lo) // leaf)
        mid = lo + leaf * -(-leaves // 2)  # whole leaves in the first half: every leaf starts on a multiple of leaf
        first, second = ((lo, mid), (mid, hi)) if self.lower else ((mid, hi), (lo, mid))
        self._walk_inverse(*first, a_view, x_view)
        self.steps.append(self._update(second, first, a_view, x_view, into_work=True))
        self._walk_inverse(*second, a_view, x_view)

    def _product(self, lo: int, hi: int, x_view: ArrayView) -> _Product:
        """X[lo:hi] = A_ii^-1 W[lo:hi]."""
        x, w, size, dim = self.x, self.w, self.dtype.size, hi - lo
        inv = next(i for i in self.inverses if i.first <= lo < i.first + i.count * i.dim)
        index = (lo - inv.first) // inv.dim
        per = self._per_leaf
        inv_off = inv.inv_offset + index * per * dim * dim * size
        inv_shape = (dim, dim) if per == 1 else (per, dim, dim)
        inv_strides = (dim, 1) if per == 1 else (dim * dim, dim, 1)
        w_off, w_shape = w.offset(lo, 0, size), w.shape(dim, x.cols)
        x_off, x_shape = x.offset(lo, 0, size), x.shape(dim, x.cols)
        vi = x_view._replace(ptr=_PLACEHOLDER + inv_off, shape=inv_shape, strides=inv_strides)
        vw = x_view._replace(ptr=_PLACEHOLDER + w_off, shape=w_shape, strides=w.strides())
        vx = _steps.view_of(x_view, x_off, x_shape, x.strides())
        key = ("leaf", inv_shape, w_shape, x_shape, vx.ptr & 255)
        step = self._gemms.get(key)
        if step is None:
            step = self._gemms[key] = self._gemm(vi, vw, vx, accumulate=False)
        return _Product(step, inv_off, inv_shape, inv_strides, w_off, w_shape, x_off, x_shape)

    def _update(self, rows: tuple[int, int], solved: tuple[int, int], a_view: ArrayView,
                x_view: ArrayView, into_work: bool = False) -> _Update:
        """X[rows] -= A[rows, solved] X[solved]."""
        a, x, size = self.a, self.x, self.dtype.size
        n = x.cols
        a_off = a.offset(rows[0], solved[0], size)
        a_shape = a.shape(rows[1] - rows[0], solved[1] - solved[0])
        src_off, src_shape = x.offset(solved[0], 0, size), x.shape(solved[1] - solved[0], n)
        dst = self.w if into_work else x
        dst_off, dst_shape = dst.offset(rows[0], 0, size), dst.shape(rows[1] - rows[0], n)
        va = _steps.view_of(a_view, a_off, a_shape, a.strides())
        vs = _steps.view_of(x_view, src_off, src_shape, x.strides())
        if into_work:
            vd = x_view._replace(ptr=_PLACEHOLDER + dst_off, shape=dst_shape, strides=dst.strides())
        else:
            vd = _steps.view_of(x_view, dst_off, dst_shape, x.strides())
        key = (a_shape, src_shape, dst_shape, va.ptr & 255, vs.ptr & 255, vd.ptr & 255, into_work)
        step = self._gemms.get(key)
        if step is None:
            step = self._gemms[key] = self._gemm(va, vs, vd)
        return _Update(step, a_off, a_shape, src_off, src_shape, dst_off, dst_shape)

    def _gemm(self, va: ArrayView, vs: ArrayView, vd: ArrayView, accumulate: bool = True) -> Any:
        if self.dtype.is_complex:
            from . import complex_matmul as _complex

            return _complex.complex_step(va, vs, vd, accumulate, self.device_id, self._mantissa_bits)
        return _steps.real_step(va, vs, vd, accumulate, self.device_id, self._mantissa_bits)

    def _leaves(self, lo: int, hi: int, a_view: ArrayView, x_view: ArrayView) -> list[_Leaf]:
        """The block TRSM launches of diagonal block [lo, hi): equal chunks of right-hand sides, and the rest."""
        a, x, size = self.a, self.x, self.dtype.size
        dim, n = hi - lo, x.cols
        a_off = a.offset(lo, lo, size)
        last: Exception | None = None
        for width in self._widths(n):  # the widest that gives the GPU enough blocks, narrower if it does not fit
            count, rest = divmod(n, width)
            out = []
            try:
                for first, w, chunks in ((0, width, count), (count * width, rest, 1)):
                    if chunks == 0 or w == 0:
                        continue
                    x_off = x.offset(lo, first, size)
                    kernel = self._leaf_kernel(dim, w, chunks, a_view.ptr + a_off, x_view.ptr + x_off)
                    out.append(_Leaf(kernel, a_off, x_off, (chunks, w * x.col_stride)))
            except UnsupportedError as exc:
                last = exc
                continue
            return out
        raise UnsupportedError(f"a {dim} x {dim} diagonal block does not fit one thread block: {last}")

    def _widths(self, n: int) -> list[int]:
        """Right-hand sides per block to try: from the largest of _WIDTHS giving two blocks per SM, down."""
        start = len(_WIDTHS) - 1
        for i, w in enumerate(_WIDTHS):
            if self.batch * -(-n // w) >= 2 * self._multiprocessors:
                start = i
                break
        return sorted({min(w, n) for w in _WIDTHS[start:]} | {min(_WIDTHS[-1], n)}, reverse=True) + \
            ([1] if n > 1 else [])

    def _leaf_kernel(self, dim: int, w: int, chunks: int, a_ptr: int, x_ptr: int) -> TrsmKernel:
        """The block TRSM kernel of one diagonal block and w right-hand sides per block (UnsupportedError: too big)."""
        a, x = self.a, self.x
        item = self.dtype.size
        step = w * x.col_stride
        al_a = _tiled.copy_width(a_ptr, item, 0, 1, a.batch_stride, a.batch or 1)
        al_x = _tiled.copy_width(x_ptr, item, step, chunks, x.batch_stride, self.batch)
        desc = solve_description(
            Size(dim, w), self.real, self.dtype.is_complex, (self.lower, True, self.unit), (a.row_major, x.row_major),
            (a.ld, x.ld), (al_a, al_x, al_x), self.sm,
        )
        desc.validate()
        return kernel_for(desc, OutputLayout(x.row_major, x.ld, al_x))

    # -- running --------------------------------------------------------------------------------

    def on_device(self) -> None:
        """Load the leaf kernels on the plan's device (DeviceError before anything is allocated or launched)."""
        for s in self.steps:
            if isinstance(s, _Leaf):
                s.kernel.on_device(self.device_id)
        for inv in self.inverses:
            inv.kernel.on_device(self.device_id)

    def run(self, core: Any, handle: int, a_view: ArrayView, b_view: ArrayView, x_view: ArrayView,
            in_place: bool) -> None:
        """Copy B into X (unless ``in_place``), then the steps, on stream ``handle`` with the device current.

        ``a_view`` / ``b_view`` / ``x_view`` are the call's views as given (not transposed).
        """
        if self.inverse:
            self._run_inverse(core, handle, a_view, b_view, x_view)
            return
        a, b, x, size = self.a, self.b, self.x, self.dtype.size
        if not in_place:
            _layouts.copy(self.device_id, self.sm, handle, size, b_view.ptr, x_view.ptr, x.rows, x.cols,
                          (b.row_stride, b.col_stride, b.batch_stride), (x.row_stride, x.col_stride, x.batch_stride),
                          self.batch)
        a_strides, x_strides = a.strides(), x.strides()
        a_batch_stride = a.batch_stride if (a.batch or 1) > 1 else 0
        x_batch_stride = x.batch_stride if self.batch > 1 else 0
        for s in self.steps:
            if isinstance(s, _Leaf):
                alpha = s.kernel.alpha(1)
                xp = x_view.ptr + s.x_offset
                s.kernel.launch(core, self.device_id, (a_view.ptr + s.a_offset, xp, xp), alpha,
                                (a_batch_stride, x_batch_stride, x_batch_stride), (s.chunks[0], s.chunks[1], s.chunks[1]),
                                self.batch)
            else:
                va = _steps.view_of(a_view, s.a_offset, s.a_shape, a_strides)
                vs = _steps.view_of(x_view, s.src_offset, s.src_shape, x_strides)
                vd = _steps.view_of(x_view, s.dst_offset, s.dst_shape, x_strides)
                s.step.run(core, handle, va, vs, vd, -1.0, 1.0)


    def _identity(self) -> int:
        """The address of a leaf x leaf identity matrix of the solve's type on its device (made once)."""
        key = (self.device_id, self.dtype.name, self.leaf)
        found = _IDENTITY.get(key)
        if found is None:
            import numpy as np

            from ..arrays import to_device

            found = _IDENTITY[key] = to_device(np.eye(self.leaf, dtype=self.dtype.host_dtype), self.device_id)
        return found.ptr

    def _run_inverse(self, core: Any, handle: int, a_view: ArrayView, b_view: ArrayView, x_view: ArrayView) -> None:
        a, b, w, x, size = self.a, self.b, self.w, self.x, self.dtype.size
        identity = self._identity()
        a_strides, x_strides, w_strides = a.strides(), x.strides(), w.strides()
        per = self._per_leaf
        with _scratch.call_scratch(self.device_id, handle) as scratch:  # capture-safe (CUDA graphs)
            w_ptr = scratch.get("trsm work", self._w_bytes)
            inv_ptr = scratch.get("trsm inverses", max(self._inverse_bytes, 1))
            _layouts.copy(self.device_id, self.sm, handle, size, b_view.ptr, w_ptr, x.rows, x.cols,
                          (b.row_stride, b.col_stride, b.batch_stride), (w.row_stride, 1, w.batch_stride), self.batch)
            for inv in self.inverses:
                alpha = inv.kernel.alpha(1)
                a_ptr = a_view.ptr + a.offset(inv.first, inv.first, size)
                square = inv.dim * inv.dim
                width = inv.dim // inv.chunks  # chunk c: the identity's and the inverse's columns from c * width
                chunks = (inv.chunks, width, width)
                if per == 1:  # one launch: the blocks down the diagonal are the batch
                    step = inv.dim * (a.row_stride + a.col_stride)
                    inv.kernel.launch(core, self.device_id, (a_ptr, identity, inv_ptr + inv.inv_offset), alpha,
                                      (step, 0, square), chunks, inv.count)
                    continue
                for i in range(inv.count):  # A batched: one launch per block over A's problems
                    offset = a.offset(i * inv.dim, i * inv.dim, size)
                    inv.kernel.launch(core, self.device_id,
                                      (a_ptr + offset, identity, inv_ptr + inv.inv_offset + i * per * square * size),
                                      alpha, (a.batch_stride, 0, square), chunks, per)
            for s in self.steps:
                if isinstance(s, _Product):
                    vi = a_view._replace(ptr=inv_ptr + s.inv_offset, shape=s.inv_shape, strides=s.inv_strides,
                                         dtype=self.dtype)
                    vw = x_view._replace(ptr=w_ptr + s.w_offset, shape=s.w_shape, strides=w_strides)
                    vx = _steps.view_of(x_view, s.x_offset, s.x_shape, x_strides)
                    s.step.run(core, handle, vi, vw, vx, 1.0, 0.0)
                else:
                    va = _steps.view_of(a_view, s.a_offset, s.a_shape, a_strides)
                    vs = _steps.view_of(x_view, s.src_offset, s.src_shape, x_strides)
                    vd = x_view._replace(ptr=w_ptr + s.dst_offset, shape=s.dst_shape, strides=w_strides)
                    s.step.run(core, handle, va, vs, vd, -1.0, 1.0)


def plan_blocked(dtype: _dt.DType, va: ArrayView, vb: ArrayView, x_view: ArrayView, lower: bool, left: bool,
                 unit: bool, batch: int, device_id: int, sm: int, multiprocessors: int,
                 mantissa_bits: int | None = None) -> BlockedSolve:
    """The blocked solve of one kind of call; ``x_view`` is the result's view (a placeholder address for a new one)."""
    transpose = not left
    a, b, x = operand(va, transpose), operand(vb, transpose), operand(x_view, transpose)
    a_view = va
    if transpose:  # the left solve A^T X^T = B^T on transposed views; the triangle flips
        lower = not lower
    return BlockedSolve(dtype, a, b, x, lower, unit, batch, _transposed(a_view, transpose),
                        _transposed(x_view, transpose), device_id, sm, multiprocessors, mantissa_bits)


def _transposed(view: ArrayView, transpose: bool) -> ArrayView:
    if not transpose:
        return view
    shape, strides = tuple(view.shape), tuple(view.strides)
    return view._replace(shape=(*shape[:-2], shape[-1], shape[-2]), strides=(*strides[:-2], strides[-1], strides[-2]))

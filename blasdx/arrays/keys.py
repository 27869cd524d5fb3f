"""What an array is, read cheaply: the key the array calls' hot path looks its bound launch up by.

A call that has run once with arrays of some kind (library, dtype, shape, strides,
device) binds what it decided to that kind; the next call with arrays of the same kind
reads this key and the data pointer straight off each array (``tensor.data_ptr()``, a
CuPy array's ``data.ptr``), without building views or DLPack capsules, and launches. The
key holds everything the checks of the full path depend on except the pointer, whose
16-byte alignment class the callers add. Arrays of other libraries, host or non-CUDA
tensors, complex PyTorch tensors and PyTorch tensors with a pending negation (lazy conjugation
and negation, which the full path refuses) have no key: their calls take the full path every
time (a PyTorch dtype has a key once the full path has read a tensor of it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .cupy_adapter import _CUPY_STREAM, _cupy_stream_function
from .device_array import DeviceArray
from .streams import default_stream_handle
from .torch_adapter import _TORCH_REAL, _TORCH_STREAM, _torch_stream_function

__all__ = ["GATHERERS", "gatherer", "library_of_type", "library_stream", "read", "read_pair", "read_quad",
           "read_triple", "read_with_blasdx", "stream_query"]

_Reader = Callable[[Any], "tuple[tuple[Any, ...], int] | None"]


_UNBOUND: dict[type, tuple[Any, ...] | None] = {}


def _unbound(kind: type) -> tuple[Any, ...] | None:
    """For torch.Tensor itself, its ``stride``, ``is_neg``, ``get_device`` and ``data_ptr`` to call unbound (each
    read skips an attribute look-up: 230 -> 130 ns for ``stride()`` on an H200 host); None for any other type,
    subclasses included (they may override them). Memoised per type."""
    found = _UNBOUND.get(kind, False)
    if found is False:
        torch = sys.modules.get("torch")
        exact = torch is not None and kind is torch.Tensor
        found = _UNBOUND[kind] = (kind.stride, kind.is_neg, kind.get_device, kind.data_ptr) if exact else None
    return found


def _torch(t: Any) -> tuple[tuple[Any, ...], int] | None:
    dtype = t.dtype
    # dtypes the full path has read (complex ones never: their conjugation bit is checked there), on CUDA tensors
    # without a pending negation (the .imag of a .conj() view)
    methods = _unbound(type(t))
    if methods is not None:
        stride, is_neg, get_device, data_ptr = methods
        if dtype in _TORCH_REAL and t.is_cuda and not is_neg(t):
            return (dtype, t.shape, stride(t), get_device(t)), data_ptr(t)
        return None
    if dtype in _TORCH_REAL and t.is_cuda and not t.is_neg():
        return (dtype, t.shape, t.stride(), t.get_device()), t.data_ptr()
    return None


def _cupy(x: Any) -> tuple[tuple[Any, ...], int] | None:
    data = x.data
    return (x.dtype, x.shape, x.strides, data.device_id), data.ptr


def _none(obj: Any) -> None:
    return None


_READERS: dict[type, _Reader] = {}


def library_of_type(kind: type) -> str | None:
    """'torch' / 'cupy' when ``kind`` is their array type (neither library is imported here), else None."""
    torch = sys.modules.get("torch")
    if torch is not None and issubclass(kind, torch.Tensor):
        return "torch"
    cupy = sys.modules.get("cupy")
    if cupy is not None and issubclass(kind, cupy.ndarray):
        return "cupy"
    return None


def _reader_of(kind: type) -> _Reader:
    """The reader of arrays of type ``kind``, chosen once per type."""
    reader = _READERS.get(kind)
    if reader is None:
        readers: dict[str | None, _Reader] = {"torch": _torch, "cupy": _cupy}
        reader = _READERS[kind] = readers.get(library_of_type(kind), _none)
    return reader


def read(obj: Any) -> tuple[tuple[Any, ...], int] | None:
    """(key, data pointer) of a PyTorch CUDA tensor or a CuPy array; None for arrays that take the full path.

    The key is (dtype, shape, strides, device) in the array library's own terms.
    """
    reader = _READERS.get(type(obj))
    if reader is None:
        reader = _reader_of(type(obj))
    return reader(obj)


def read_with_blasdx(obj: Any) -> tuple[tuple[Any, ...], int] | None:
    """:func:`read`, and blasdx DeviceArrays too (whose producer stream the caller orders after itself)."""
    if type(obj) is DeviceArray:
        return obj._key, obj._ptr
    reader = _READERS.get(type(obj))
    if reader is None:
        reader = _reader_of(type(obj))
    return reader(obj)


# ---------------------------------------------------------------------------------------------
# the array calls' keys: two to four arrays read in one go, each key with its pointer's alignment class
# ---------------------------------------------------------------------------------------------


def _joined(*arrays: Any) -> tuple[Any, ...] | None:
    """(key, pointers...) of arrays of any libraries with keys (:func:`read` each, its key and its pointer's
    16-byte alignment class joined in one tuple, five entries an array); None when one has none."""
    key: tuple[Any, ...] = ()
    pointers = []
    for array in arrays:
        found = read(array)
        if found is None:
            return None
        key += (*found[0], found[1] & 15)
        pointers.append(found[1])
    return (key, *pointers)


def _torch_methods(a: Any) -> tuple[Any, ...] | None:
    """:func:`_unbound` of ``a``'s type, its memo read inline."""
    kind = type(a)
    methods = _UNBOUND.get(kind, False)
    return _unbound(kind) if methods is False else methods


def read_pair(a: Any, b: Any) -> tuple[tuple[Any, ...], int, int] | None:
    """(key, pa, pb) of two arrays with keys (:func:`read`: PyTorch and CuPy, not blasdx arrays), None else.

    The key holds each array's key and its pointer's 16-byte alignment class, five entries an array. Two
    torch.Tensors are read in one go, without a tuple each, under read()'s rules: a real dtype the full path has
    read, a CUDA tensor, no pending negation (complex tensors never have a key: their conjugation bit is the
    full path's to check).
    """
    methods = _torch_methods(a)
    if methods is not None and type(b) is type(a):
        stride, is_neg, get_device, data_ptr = methods
        ta, tb = a.dtype, b.dtype
        if ta in _TORCH_REAL and tb in _TORCH_REAL and a.is_cuda and b.is_cuda and not (is_neg(a) or is_neg(b)):
            pa, pb = data_ptr(a), data_ptr(b)
            return ((ta, a.shape, stride(a), get_device(a), pa & 15,
                     tb, b.shape, stride(b), get_device(b), pb & 15), pa, pb)
        return None
    return _joined(a, b)  # type: ignore[return-value]


def read_triple(a: Any, b: Any, c: Any) -> tuple[tuple[Any, ...], int, int, int] | None:
    """:func:`read_pair` of three arrays."""
    methods = _torch_methods(a)
    if methods is not None and type(b) is type(a) and type(c) is type(a):
        stride, is_neg, get_device, data_ptr = methods
        ta, tb, tc = a.dtype, b.dtype, c.dtype
        if (ta in _TORCH_REAL and tb in _TORCH_REAL and tc in _TORCH_REAL and a.is_cuda and b.is_cuda and c.is_cuda
                and not (is_neg(a) or is_neg(b) or is_neg(c))):
            pa, pb, pc = data_ptr(a), data_ptr(b), data_ptr(c)
            return ((ta, a.shape, stride(a), get_device(a), pa & 15,
                     tb, b.shape, stride(b), get_device(b), pb & 15,
                     tc, c.shape, stride(c), get_device(c), pc & 15), pa, pb, pc)
        return None
    return _joined(a, b, c)  # type: ignore[return-value]


def read_quad(a: Any, b: Any, c: Any, d: Any) -> tuple[tuple[Any, ...], int, int, int, int] | None:
    """:func:`read_pair` of four arrays."""
    methods = _torch_methods(a)
    kind = type(a)
    if methods is not None and type(b) is kind and type(c) is kind and type(d) is kind:
        stride, is_neg, get_device, data_ptr = methods
        ta, tb, tc, td = a.dtype, b.dtype, c.dtype, d.dtype
        if (ta in _TORCH_REAL and tb in _TORCH_REAL and tc in _TORCH_REAL and td in _TORCH_REAL and a.is_cuda
                and b.is_cuda and c.is_cuda and d.is_cuda and not (is_neg(a) or is_neg(b) or is_neg(c) or is_neg(d))):
            pa, pb, pc, pd = data_ptr(a), data_ptr(b), data_ptr(c), data_ptr(d)
            return ((ta, a.shape, stride(a), get_device(a), pa & 15,
                     tb, b.shape, stride(b), get_device(b), pb & 15,
                     tc, c.shape, stride(c), get_device(c), pc & 15,
                     td, d.shape, stride(d), get_device(d), pd & 15), pa, pb, pc, pd)
        return None
    return _joined(a, b, c, d)  # type: ignore[return-value]


_Gatherer = Callable[[Any, Any, Any], "tuple[tuple[Any, ...], int, int, int] | None"]


def _mixed(a: Any, b: Any, c: Any) -> tuple[tuple[Any, ...], int, int, int] | None:
    """The joined key and pointers of three arrays of any libraries with keys (:func:`read_with_blasdx` each)."""
    ra = read_with_blasdx(a)
    if ra is None:
        return None
    rb = read_with_blasdx(b)
    if rb is None:
        return None
    rc = read_with_blasdx(c)
    if rc is None:
        return None
    return ra[0] + rb[0] + rc[0], ra[1], rb[1], rc[1]


def _torch3(a: Any, b: Any, c: Any) -> tuple[tuple[Any, ...], int, int, int] | None:
    """:func:`_mixed` of three PyTorch tensors of one type, each attribute read once and no tuple per tensor.

    The dtype is not checked: a key of a dtype without one (complex) is never bound, so it finds nothing. Tensors
    with a pending negation have no key (the full path refuses them).
    """
    kind = type(a)
    if type(b) is not kind or type(c) is not kind:
        return _mixed(a, b, c)
    methods = _UNBOUND.get(kind, False)
    if methods is False:
        methods = _unbound(kind)
    if methods is not None:
        stride, is_neg, get_device, data_ptr = methods
        if a.is_cuda and b.is_cuda and c.is_cuda and not (is_neg(a) or is_neg(b) or is_neg(c)):
            return ((a.dtype, a.shape, stride(a), get_device(a), b.dtype, b.shape, stride(b), get_device(b),
                     c.dtype, c.shape, stride(c), get_device(c)), data_ptr(a), data_ptr(b), data_ptr(c))
        return None
    if a.is_cuda and b.is_cuda and c.is_cuda and not (a.is_neg() or b.is_neg() or c.is_neg()):
        return ((a.dtype, a.shape, a.stride(), a.get_device(), b.dtype, b.shape, b.stride(), b.get_device(),
                 c.dtype, c.shape, c.stride(), c.get_device()), a.data_ptr(), b.data_ptr(), c.data_ptr())
    return None


def _cupy3(a: Any, b: Any, c: Any) -> tuple[tuple[Any, ...], int, int, int] | None:
    """:func:`_mixed` of three CuPy arrays of one type, each attribute read once."""
    kind = type(a)
    if type(b) is not kind or type(c) is not kind:
        return _mixed(a, b, c)
    da, db, dc = a.data, b.data, c.data
    return ((a.dtype, a.shape, a.strides, da.device_id, b.dtype, b.shape, b.strides, db.device_id, c.dtype,
             c.shape, c.strides, dc.device_id), da.ptr, db.ptr, dc.ptr)


def _blasdx3(a: Any, b: Any, c: Any) -> tuple[tuple[Any, ...], int, int, int] | None:
    """For three blasdx DeviceArrays: the tuple of their keys (objects each array keeps, so a key compared with
    the last call's compares three identities); :func:`_mixed` for other arrays."""
    if type(b) is not DeviceArray or type(c) is not DeviceArray:
        return _mixed(a, b, c)
    return (a._key, b._key, c._key), a._ptr, b._ptr, c._ptr


_GATHERERS: dict[type, _Gatherer] = {DeviceArray: _blasdx3}


def gatherer(kind: type) -> _Gatherer:
    """For calls whose first array is of type ``kind``: the function giving ``(key, pa, pb, pc)`` of three arrays,
    or None when one has no key. The key is the three keys of :func:`read_with_blasdx` joined in one tuple (held
    as three for blasdx arrays); the function of a library reads three arrays of its type in one go (and joins the
    keys of mixed ones). Keys of different kinds of calls never compare equal: a blasdx array's key is longer than
    the others and holds its class. Chosen once per type; look it up in ``GATHERERS`` first."""
    found = _GATHERERS.get(kind)
    if found is None:
        found = _GATHERERS[kind] = {"torch": _torch3, "cupy": _cupy3}.get(library_of_type(kind), _mixed)
    return found


#: The gatherer of each array type seen (:func:`gatherer`).
GATHERERS = _GATHERERS


def library_stream(obj: Any) -> Callable[[int], int]:
    """For an array that has a key: the function giving its library's current stream handle on a device.

    The same handle the full path resolves for a call without ``stream=`` (the legacy or
    per-thread default stream for the library's null stream; the default stream for blasdx
    arrays).
    """
    reader = _reader_of(type(obj))
    default = default_stream_handle()
    if reader is _torch:
        raw = _TORCH_STREAM[0] if _TORCH_STREAM else _torch_stream_function()
        return lambda device: raw(device) or default
    if reader is _cupy:
        current = _CUPY_STREAM[0] if _CUPY_STREAM else _cupy_stream_function()
        return lambda device: current(device).ptr or default
    if type(obj) is DeviceArray:
        return lambda device: default
    raise TypeError(f"{type(obj).__name__} arrays have no key")


def stream_query(obj: Any) -> tuple[Callable[[int], Any] | None, bool]:
    """:func:`library_stream` in parts, for callers that inline it: (the library's current-stream query on a
    device, whether it answers with a stream object whose ``ptr`` is the handle). The handle is that, or the
    default stream when it is 0 (the library's null stream); the query is None for blasdx arrays (the default
    stream always)."""
    reader = _reader_of(type(obj))
    if reader is _torch:
        return (_TORCH_STREAM[0] if _TORCH_STREAM else _torch_stream_function()), False
    if reader is _cupy:
        return (_CUPY_STREAM[0] if _CUPY_STREAM else _cupy_stream_function()), True
    if type(obj) is DeviceArray:
        return None, False
    raise TypeError(f"{type(obj).__name__} arrays have no key")

"""Helpers of the GPU tests: device detection and strided torch operands built from host data."""

from __future__ import annotations

import contextlib
import functools
import runpy
import sys
import zlib
from pathlib import Path
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.reference import random_operand


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: The arrangements' shorthand in the GPU tests' tables: row-major and column-major.
R, C = bx.row_major, bx.col_major


@functools.cache
def gpu_sm() -> int | None:
    """Compute capability of device 0 as 90, 80, ...; None without a usable GPU."""
    try:
        from cuda.core import Device, system

        if system.get_num_devices() < 1:
            return None
        major, minor = Device(0).compute_capability
        return major * 10 + minor
    except Exception:  # no driver, no device
        return None


def scalar_pairs(row: dt.Combination) -> list[tuple]:
    """(alpha, beta) pairs of a type: beta = 0 (C must not be read), then both non-trivial."""
    if row.c.integral:
        return [(1, 0), (-2, 3)]
    if row.is_complex:
        return [(1, 0), (complex(-1.5, 0.25), complex(0.5, -1))]
    return [(1, 0), (-1.5, 0.5)]


def require_gpu() -> int:
    sm = gpu_sm()
    if sm is None:
        pytest.skip("needs an NVIDIA GPU")
    return sm


def gpu_torch():
    """torch on a GPU: the ``torch`` fixture of the GPU modules of array calls (skips without either)."""
    require_gpu()
    return pytest.importorskip("torch")


def torch_relative_error(torch, got, ref) -> float:
    """reference.relative_error of torch tensors, on their GPU; inf where ``got`` is not all finite."""
    got = got.to(torch.float64)
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    return float((got - ref).norm() / ref.norm().clamp_min(1e-300))


def torch_dtype(value: dt.DType):
    """The torch dtype holding ``value`` (tf32 lives in float32)."""
    import torch

    return {
        "float16": torch.float16, "bfloat16": torch.bfloat16, "tfloat32": torch.float32, "float32": torch.float32,
        "float64": torch.float64, "float8_e4m3": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
        "int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32,
        "complex32": torch.complex32, "complex64": torch.complex64, "complex128": torch.complex128,
    }[value.name]


_SAME_SIZE_INT = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64, 16: np.complex128}


def host_to_torch(host: np.ndarray, value: dt.DType):
    """A CUDA tensor holding exactly ``host`` (bit-for-bit, through an integer view)."""
    import torch

    if host.dtype.kind in "fiu" and host.dtype.name in ("float16", "float32", "float64", "int8", "uint8", "int32"):
        return torch.from_numpy(np.ascontiguousarray(host)).cuda()
    if host.dtype.kind == "c" and host.dtype.itemsize in (8, 16):
        return torch.from_numpy(np.ascontiguousarray(host)).cuda()
    raw = np.ascontiguousarray(host).view(_SAME_SIZE_INT[host.dtype.itemsize])
    if raw.dtype == np.uint8:
        return torch.from_numpy(raw).cuda().view(torch_dtype(value))
    return torch.from_numpy(raw).cuda().view(torch_dtype(value))


def torch_to_host(tensor, value: dt.DType) -> np.ndarray:
    """Copy a CUDA tensor back to numpy in blasdx's host dtype for ``value``."""
    import torch

    t = tensor.detach().contiguous().cpu()
    if value.name in ("float16", "float32", "float64", "int8", "uint8", "int32", "tfloat32", "complex64", "complex128"):
        return t.numpy()
    size = t.element_size()
    raw = t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]).numpy()
    return raw.view(value.host_dtype)


def type_id(value: Any) -> str:
    """A test parameter's id: a blasdx type's name, anything else as str()."""
    return value.name if isinstance(value, dt.DType) else str(value)


def stable_seed(*parts: Any) -> int:
    """A seed from a test's parameters that is the same in every process (``hash()`` of a str is
    not, under PYTHONHASHSEED): CRC-32 of their repr. Print it with any failure it leads to."""
    return zlib.crc32(repr(parts).encode())


class Guarded(NamedTuple):
    """An operand's view, the flat storage around it and that storage's bytes as written."""

    view: Any  # (batch, rows, cols) CUDA view
    storage: Any  # 1-D tensor: the view, the padding up to its leading dimension, then a guard
    value: dt.DType
    outside: np.ndarray  # bool per storage element: not part of the view
    before: np.ndarray  # storage's bytes (uint8, one row per element) when made


GUARD = 64  # elements after the last problem's storage, also never to be written


def guarded_operand(host: np.ndarray, value: dt.DType, row_major: bool, ld: int, guard: int = GUARD) -> Guarded:
    """:func:`strided_operand`, with its storage kept to check afterwards (:func:`check_outside`).

    The storage is (batch, rows, ld) for row-major and (batch, cols, ld) for column-major, then
    ``guard`` more elements; the padding and the guard hold a value from the data (read as
    an operand it gives a wrong but finite product, which the element-wise check sees).
    """
    batch, rows, cols = host.shape
    inner, outer = (cols, rows) if row_major else (rows, cols)
    data = host if row_major else np.swapaxes(host, 1, 2)
    flat = np.empty(batch * outer * ld + guard, dtype=host.dtype)
    flat[...] = data.flat[0] if data.size else np.zeros(1, host.dtype)[0]
    flat[: batch * outer * ld].reshape(batch, outer, ld)[:, :, :inner] = data
    storage = host_to_torch(flat, value)
    view = storage[: batch * outer * ld].view(batch, outer, ld)[:, :, :inner]
    outside = np.ones(flat.size, dtype=bool)
    outside[: batch * outer * ld].reshape(batch, outer, ld)[:, :, :inner] = False
    before = _bytes(torch_to_host(storage, value))
    return Guarded(view if row_major else view.transpose(1, 2), storage, value, outside, before)


def _bytes(host: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(host).reshape(-1)
    return flat.view(np.uint8).reshape(flat.size, -1)


def check_outside(g: Guarded, what: str, whole: bool = False) -> None:
    """Fail unless the padding and guard of ``g``'s storage (and with ``whole`` the view too:
    an input) hold the bytes they were made with."""
    changed = np.any(_bytes(torch_to_host(g.storage, g.value)) != g.before, axis=1)
    if not whole:
        changed &= g.outside
    if changed.any():
        where = np.flatnonzero(changed)
        part = "storage" if whole else "padding / guard"
        raise AssertionError(f"{what}: {where.size} elements of its {part} were written, first at storage "
                             f"offset {int(where[0])} of {g.outside.size}")


def strided_operand(host: np.ndarray, value: dt.DType, row_major: bool, ld: int):
    """A (batch, rows, cols) CUDA view of ``host`` in the given order with leading dimension ``ld``
    (:func:`guarded_operand`'s view)."""
    return guarded_operand(host, value, row_major, ld).view


#: torch.cuda._sleep cycles that keep a stream busy for about 0.1 s (0.1-0.13 s at 1.5-2 GHz clocks): work
#: queued behind them on that stream runs long after anything launched on another stream, and a warmed-up
#: call queues its launches in well under a millisecond.
BUSY_CYCLES = 200_000_000


_STREAMS: list[Any] = []  # the cuda.core streams behind side_stream()'s torch streams, kept alive


def side_stream():
    """A torch stream over a new non-blocking CUDA stream (cuda.core's default): neither it nor the
    legacy default stream waits for the other, so work launched on any other stream is unordered
    with its work (torch.cuda.Stream() may give a blocking stream, which the legacy stream orders)."""
    import torch
    from cuda.core import Device, StreamOptions

    device = Device(torch.cuda.current_device())
    device.set_current()  # cuda.core creates streams in the current context (the primary one, torch's too)
    core = device.create_stream(options=StreamOptions(nonblocking=True))
    _STREAMS.append(core)
    return torch.cuda.ExternalStream(int(core.handle))


@contextlib.contextmanager
def behind_a_delay(stream, what: str):
    """Within, ``stream`` (a torch stream) is torch's current stream and busy: a delay of BUSY_CYCLES is
    queued on it first. Writes queued within run after the delay, then the call, then the reads: a call
    that launches on any other stream runs during the delay, on the data as it was before the writes, and
    its result is overwritten or never read. Warm the call up first (compiled, loaded, bound), so that it
    queues its work well inside the delay. On leaving, checks that the stream was still busy when the last
    work within was queued (else a launch elsewhere could not be seen), then waits for it."""
    import torch

    with torch.cuda.stream(stream):
        torch.cuda._sleep(BUSY_CYCLES)
        yield
    busy = not stream.query()
    stream.synchronize()
    assert busy, (f"{what}: the stream's delay was over before the work within it was queued (the host blocked "
                  "or fell behind), so a launch on another stream could not be seen")


@contextlib.contextmanager
def poisoned_new_tensors():
    """Within, every torch.empty on the GPU (the outputs bx.matmul allocates among them) is filled
    with NaN (floats) or the largest integer, by torch's own switch for uninitialised memory
    (``torch.utils.deterministic.fill_uninitialized_memory``, on while deterministic algorithms
    are, here with warn_only so that nothing else changes): an element a kernel never writes shows.
    """
    import torch
    from torch.utils import deterministic

    was = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
           deterministic.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    deterministic.fill_uninitialized_memory = True
    try:
        probe = torch.empty(5, device="cuda"), torch.empty(5, device="cuda", dtype=torch.int32)
        assert torch.isnan(probe[0]).all() and bool((probe[1] == torch.iinfo(torch.int32).max).all()), \
            "torch does not fill new tensors: the outputs would not be poisoned"
        yield
    finally:
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])
        deterministic.fill_uninitialized_memory = was[2]


def gemm_descriptor(row: dt.Combination, size, sm: int, arrangement=None, **extra) -> bx.Descriptor:
    desc = (
        bx.Size(*size)
        + bx.Precision(row.a, row.b, row.c)
        + (bx.Type.complex if row.is_complex else bx.Type.real)
        + bx.Function.MM
        + bx.SM(sm)
        + bx.Block()
    )
    if arrangement is not None:
        desc = desc + bx.Arrangement(*arrangement)
    for op in extra.values():
        desc = desc + op
    return desc


def family_types(mixed_fp8: tuple[dt.DType, dt.DType]) -> list[tuple[dt.DType, dt.DType, dt.DType]]:
    """(A, B, C) of each type family the block GEMM runs (16-bit to f32 and f16, tf32, f32, f64, fp8, int8),
    with ``mixed_fp8`` as the A and B of the mixed fp8 -> f16 row: the types :func:`sampled_cases` draws from."""
    return [(dt.float16, dt.float16, dt.float32), (dt.float16, dt.float16, dt.float16),
            (dt.bfloat16, dt.bfloat16, dt.float32), (dt.tfloat32, dt.tfloat32, dt.float32),
            (dt.float32, dt.float32, dt.float32), (dt.float64, dt.float64, dt.float64),
            (dt.float8_e4m3, dt.float8_e4m3, dt.float32), (*mixed_fp8, dt.float16),
            (dt.int8, dt.int8, dt.int32), (dt.uint8, dt.int8, dt.int32)]


def sampled_cases(types, sizes, arrangements, seed: int):
    """pytest params (types, size, arrangement, arch_specific) for each (A, B, C) of ``types`` that the GPU
    (sm_90 without one) runs, generic and, on sm_90, sm_90a, each with a size and arrangement drawn from
    ``seed``: every type on every run, the sizes and arrangements spread across the types."""
    sm = gpu_sm() or 90
    rng = np.random.default_rng(seed)
    for abc in types:
        if dt.find_combination(*abc, False).min_sm > sm:
            continue
        for specific in ([False, True] if sm == 90 else [False]):
            size = sizes[int(rng.integers(len(sizes)))]
            arrangement = arrangements[int(rng.integers(len(arrangements)))]
            yield pytest.param(abc, size, arrangement, specific, id=(
                f"{abc[0].name}x{abc[1].name}-{abc[2].name}-{'x'.join(map(str, size))}-"
                f"{''.join(o.name[0] for o in arrangement)}{'-sm90a' if specific else ''}"))


def sampled_descriptor(sm: int, types, size, arrangement, arch_specific: bool) -> bx.Descriptor:
    """The block GEMM of a :func:`sampled_cases` param on a GPU of ``sm``; skips where it is not supported."""
    desc = (bx.Size(*size) + bx.Precision(*types) + bx.Function.MM + bx.Arrangement(*arrangement)
            + bx.SM(sm, arch_specific=arch_specific) + bx.Block())
    if not desc.is_supported:
        pytest.skip(f"{desc!r} is not supported here")
    return desc


def gemm_operands(desc: bx.Descriptor, rng, batch: int, beta=1, a_batch: int | None = None,
                  b_batch: int | None = None, fill=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random host A (a_batch or batch, M, K), B (b_batch or batch, K, N) and C (batch, M, N) of
    ``desc``'s types drawn from ``rng``; C full of ``fill`` (default :func:`poison`) when beta is 0:
    it must not be read."""
    m, n, k = desc.size
    (a_t, b_t, c_t), cplx = desc.precision, desc.is_complex
    a_host = random_operand(a_t, (a_batch or batch, m, k), rng, is_complex=cplx)
    b_host = random_operand(b_t, (b_batch or batch, k, n), rng, is_complex=cplx)
    c_host = random_operand(c_t, (batch, m, n), rng, is_complex=cplx)
    if beta == 0:
        c_host[...] = poison(c_t) if fill is None else fill
    return a_host, b_host, c_host


def tight_operands(desc: bx.Descriptor, *hosts: np.ndarray) -> list:
    """CUDA views of host A, B, C in ``desc``'s arrangement, each problem stored densely (its leading
    dimension the inner extent)."""
    m, n, k = desc.size
    arr = desc.arrangement
    inner = ((arr.a, k, m), (arr.b, n, k), (arr.c, n, m))
    return [strided_operand(host, value_type(t, desc.is_complex), order is bx.row_major, row if order is bx.row_major
                            else col) for host, t, (order, row, col) in zip(hosts, desc.precision, inner)]


def value_type(dtype: dt.DType, is_complex: bool) -> dt.DType:
    return dt.complex_of(dtype) if is_complex else dtype


def largest_square(row: dt.Combination, sm: int) -> int:
    """Largest s (a multiple of 8) with s x s x s of this combination fitting one block."""
    best = 8
    for s in range(8, 513, 8):
        if gemm_descriptor(row, (s, s, s), sm).is_supported:
            best = s
        else:
            break
    return best


def poison(value: dt.DType) -> float | int:
    """A value C is filled with when beta = 0: NaN for floats, a sentinel for integers."""
    return 12345 if value.integral else float("nan")


def ml_complex32():
    return ml_dtypes.complex32


def run_example(name: str, *args: str) -> Any:
    """Run examples/<name>.py in this process as ``python examples/<name>.py ARGS`` does (examples/ first on
    sys.path: gpu_device.py importable); its exit code."""
    path = EXAMPLES / f"{name}.py"
    argv, search = sys.argv, list(sys.path)
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(EXAMPLES))
    try:
        with pytest.raises(SystemExit) as done:
            runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv, sys.path[:] = argv, search
    return done.value.code

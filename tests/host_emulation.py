"""Runs blasdx's TRSM kernel code on the CPU: the generated source, compiled with g++ against
tests/emulation/emulation.h (one OS thread per CUDA thread, barriers, shared memory as a static
array), launched block by block. The FMA paths (f32, and f64 on sm_75) run exactly as written;
mma.sync and cp.async are GPU-only and stay out. ``sanitize="thread"`` builds with
ThreadSanitizer (a missing barrier is a data race), ``"address"`` with AddressSanitizer (global
buffers read or written out of bounds).

Every build opens with ``#include "emulation.h"``, which holds the C++ standard headers too: g++
reads it precompiled (one ``.gch`` per build folder and set of flags), which halves a build.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from blasdx.compile import kernels_dir

HERE = Path(__file__).parent / "emulation"
_SANITIZERS = {None: [], "thread": ["-fsanitize=thread", "-g"], "address": ["-fsanitize=address,undefined", "-g"]}


_PROBE = "#include <barrier>\nint main() { std::barrier<> b(1); b.arrive_and_wait(); return 0; }\n"


@functools.cache
def compiler() -> str | None:
    """g++ when it builds C++20 with std::barrier (GCC 11 or newer), else None."""
    gxx = shutil.which("g++")
    return gxx if gxx is not None and available(None, gxx) else None


@functools.cache
def build_harness(folder: Path, source: str) -> Path:
    """A stand-alone C++20 harness (``source``: a program that includes kernel headers on the host) built with
    g++ in ``folder``; skips the test without a g++ that has C++20's std::barrier."""
    import pytest

    gxx = compiler()
    if gxx is None:
        pytest.skip("needs g++ with C++20 std::barrier")
    (folder / "harness.cpp").write_text(source)
    exe = folder / "harness"
    built = subprocess.run([gxx, "-std=c++20", "-O1", "-w", "-pthread", f"-I{HERE}", f"-I{kernels_dir()}",
                            str(folder / "harness.cpp"), "-o", str(exe)], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    return exe


def available(sanitize: str | None, gxx: str | None = None) -> bool:
    """Whether a program with ``sanitize`` (None, "thread", "address") builds and runs here."""
    gxx = gxx or compiler()
    if gxx is None:
        return False
    with tempfile.TemporaryDirectory() as folder:
        exe = Path(folder) / "probe"
        flags = ["-std=c++20", "-pthread", *_SANITIZERS[sanitize]]
        built = subprocess.run([gxx, *flags, "-x", "c++", "-", "-o", str(exe)], input=_PROBE, capture_output=True,
                               text=True)
        return built.returncode == 0 and subprocess.run([str(exe)], capture_output=True).returncode == 0


def build(source: str, call: str, shared: str, build_dir: Path, sanitize: str | None = None) -> Path:
    """An executable running ``call`` (the kernel call, as C++) on host threads; cached by content."""
    text = "\n".join([
        '#include "emulation.h"',
        source,
        f"#define EMULATED_CALL {call}",
        f"#define EMULATED_SHARED {shared}",
        '#include "launch.inc"',
        "",
    ])
    flags = ["-std=c++20", "-O1", "-fno-strict-aliasing", "-w", "-pthread", *_SANITIZERS[sanitize]]
    kernels = kernels_dir()
    digest = hashlib.sha256(" ".join(flags).encode() + text.encode())
    for path in sorted([*kernels.rglob("*.cu*"), *HERE.iterdir()]):
        digest.update(path.read_bytes())
    exe = build_dir / digest.hexdigest()[:20]
    if not exe.exists():
        cpp = exe.with_suffix(".cpp")
        cpp.write_text(text)
        headers = ["-I", str(folder)] if (folder := _precompiled(flags, build_dir)) is not None else []
        result = subprocess.run(
            [compiler() or "g++", *flags, *headers, "-I", str(HERE), "-I", str(kernels), "-x", "c++", str(cpp), "-o",
             str(exe)],
            capture_output=True, text=True,
        )
        if result.returncode:
            raise AssertionError(f"g++ failed on {cpp}:\n{result.stderr[:6000]}")
    return exe


def _precompiled(flags: list[str], build_dir: Path) -> Path | None:
    """A folder of ``build_dir`` holding emulation.h precompiled with ``flags`` (made on first use), or None
    where g++ cannot precompile it (the builds then parse the header themselves: slower, the same program).

    g++ looks for ``emulation.h.gch`` in each include folder before ``emulation.h`` and takes it when
    it was made with the same flags, so this folder goes first on the include path."""
    digest = hashlib.sha256(" ".join(flags).encode())
    for path in sorted(HERE.iterdir()):
        digest.update(path.read_bytes())
    folder = build_dir / f"pch-{digest.hexdigest()[:16]}"
    header = folder / "emulation.h.gch"
    if header.exists():
        return folder
    folder.mkdir(exist_ok=True)
    part = folder / f"emulation.h.gch.{os.getpid()}"
    result = subprocess.run([compiler() or "g++", *flags, "-I", str(HERE), "-x", "c++-header", str(HERE / "emulation.h"),
                             "-o", str(part)], capture_output=True, text=True)
    if result.returncode:
        part.unlink(missing_ok=True)
        return None
    os.replace(part, header)  # whole or absent, for a build of another process
    return folder


def run(exe: Path, grid: tuple[int, int], threads: int, shared_bytes: int, a: np.ndarray, b: np.ndarray,
        out: np.ndarray, work: Path, scalars: tuple[float, ...] = ()) -> np.ndarray:
    """Launch on ``grid`` blocks of ``threads``; returns ``out`` after the kernel (a copy). The call reads
    ``scalars`` as ``emulated_scalar(i)`` (values that need no program of their own)."""
    names = [work / name for name in ("a.bin", "b.bin", "out.bin", "result.bin")]
    for array, path in zip((a, b, out), names):
        np.ascontiguousarray(array).tofile(path)
    result = subprocess.run(
        [str(exe), str(grid[0]), str(grid[1]), str(threads), str(shared_bytes), *map(str, names), *map(repr, scalars)],
        capture_output=True, text=True, timeout=600,
    )
    if result.returncode or "WARNING" in result.stderr or "ERROR" in result.stderr:
        raise AssertionError(f"{exe.name} failed ({result.returncode}):\n{result.stderr[:6000]}")
    return np.fromfile(names[3], dtype=out.dtype)


def storage(matrices: np.ndarray, row_major: bool, ld: int, fill: float = np.nan) -> np.ndarray:
    """(batch, rows, cols) as a flat buffer in that order with leading dimension ``ld``; padding = ``fill``."""
    batch, rows, cols = matrices.shape
    outer, inner = (rows, cols) if row_major else (cols, rows)
    buffer = np.full((batch, outer, ld), fill, dtype=matrices.dtype)
    buffer[:, :, :inner] = matrices if row_major else np.swapaxes(matrices, 1, 2)
    return buffer.reshape(-1)


def unstorage(buffer: np.ndarray, batch: int, rows: int, cols: int, row_major: bool, ld: int) -> np.ndarray:
    """The inverse of :func:`storage`."""
    outer, inner = (rows, cols) if row_major else (cols, rows)
    blocks = buffer.reshape(batch, outer, ld)[:, :, :inner]
    return blocks if row_major else np.swapaxes(blocks, 1, 2)


def padding_of(buffer: np.ndarray, batch: int, rows: int, cols: int, row_major: bool, ld: int) -> np.ndarray:
    """The padding elements of a :func:`storage` buffer, as raw bytes (NaN compares unequal)."""
    outer, inner = (rows, cols) if row_major else (cols, rows)
    return buffer.reshape(batch, outer, ld)[:, :, inner:].copy().view(np.uint8)

"""Device-GEMM competitors for benchmarks/matmul.py: Triton (in process) and cuBLASDx's pipeline (own process).

    from matmul_competitors import triton_call, run_cublasdx_pipeline, merge_cublasdx

- ``triton_call(case, x, y)``: a callable computing x @ y with ``triton_matmul`` (the
  persistent TMA kernel, tuned once per shape within 20 s), for the cases f16, bf16 and
  tf32 of matmul.py, or None and the reason for the others. Check and time it like the torch
  call: it returns C in blasdx's result type (f16 -> f16, bf16 -> f32, tf32 -> f32).
- ``run_cublasdx_pipeline(sizes, types)``: runs benchmarks/cublasdx_pipeline.py in a
  subprocess against the nvmath-python 1.0 wheels carried in ``.whl/`` (installed once into
  ``.scratch/nvmath`` with pip --no-index) and returns its rows (each checked against the
  float64 reference in that process; ``error`` says why a row has no time). It never raises
  for a failure of the competitor: a missing wheel, a failed install or a crash is a row
  error, so the benchmark goes on.
- ``merge_cublasdx(rows, dx_rows)``: adds the fastest checked cuBLASDx time per (case, size)
  to matmul.py's rows (``cublasdx_ms``, ``cublasdx_tflops``, ``cublasdx_tile``,
  ``ratio_vs_cublasdx`` = cuBLASDx time / blasdx time, > 1: blasdx faster) or
  ``cublasdx_error``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WHEEL_DIR = ROOT / ".whl"
NVMATH_TARGET = ROOT / ".scratch" / "nvmath"
PIPELINE_SCRIPT = Path(__file__).resolve().parent / "cublasdx_pipeline.py"
# The wheels cublasdx_pipeline.py needs: nvmath-python's device APIs, libmathdx, and a numpy
# under which the GPU machine's numba-cuda imports.
WHEELS = ("nvmath_python-1.0.0-", "nvidia_libmathdx_cu13-0.3.2.6-", "numpy-2.3.5-")
TRITON_CASES = ("f16", "bf16", "tf32")
PIPELINE_TYPES = ("f16", "bf16")


def triton_call(case: str, x, y, autotune: bool = True) -> tuple[Callable[[], Any] | None, str | None]:
    """(callable, None) running ``triton_matmul(x, y)`` for a matmul.py case, or (None, why not)."""
    if case not in TRITON_CASES:
        return None, f"the Triton kernel takes f16, bf16 and tf32 (float32 inputs); not {case}"
    try:
        from triton_matmul import triton_matmul, tune
    except ImportError as exc:
        return None, f"triton is not importable: {exc}"
    if autotune:
        tune(x, y)
    return (lambda: triton_matmul(x, y)), None


def nvmath_env(wheel_dir: Path = WHEEL_DIR, target: Path = NVMATH_TARGET) -> tuple[dict[str, str] | None, str]:
    """The environment cublasdx_pipeline.py runs in, installing the carried wheels into ``target`` once.

    Returns (environment, what was done) or (None, why not).
    """
    wheels = sorted(str(w) for w in wheel_dir.glob("*.whl") if w.name.startswith(WHEELS))
    missing = [p for p in WHEELS if not any(Path(w).name.startswith(p) for w in wheels)]
    if missing:
        return None, (f"wheels missing in {wheel_dir}: {', '.join(p.rstrip('-') for p in missing)} "
                      "(pip download them there; see benchmarks/cublasdx_pipeline.py)")
    stamp = target / ".installed"
    names = "\n".join(Path(w).name for w in wheels)
    done = "already installed"
    if not (stamp.exists() and stamp.read_text() == names):
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--upgrade",
                               "--target", str(target), *wheels], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            return None, f"pip install into {target} failed:\n{(proc.stdout + proc.stderr)[-2000:]}"
        stamp.write_text(names)
        done = f"installed {len(wheels)} wheels into {target}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), env.get("PYTHONPATH")]))
    libs = sorted(str(p) for p in target.glob("nvidia/cu*/lib"))
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [*libs, env.get("LD_LIBRARY_PATH")]))
    return env, done


def _error_rows(sizes, types, message: str) -> list[dict]:
    return [{"type": t, "m": s, "n": s, "k": s, "ms": None, "tflops": None, "ok": False, "error": message}
            for t in types for s in sizes]


def run_cublasdx_pipeline(sizes, types=PIPELINE_TYPES, tiles: list[str] | None = None, timeout_s: float = 560.0,
                          json_path: Path | None = None, extra_args: list[str] | None = None) -> list[dict]:
    """cuBLASDx pipeline rows for square ``sizes`` and ``types`` (f16, bf16), from a subprocess.

    ``timeout_s`` bounds the whole run (the script gets 20 s less as its own budget, so
    that it writes the rows it has). The JSON it writes is kept at ``json_path`` if given.
    """
    types = [t for t in types if t in PIPELINE_TYPES]
    env, done = nvmath_env()
    if env is None:
        return _error_rows(sizes, types, f"cuBLASDx pipeline not run: {done}")
    with tempfile.TemporaryDirectory(prefix="cublasdx-rows-") as tmp:
        out = json_path or Path(tmp) / "rows.json"
        cmd = [sys.executable, str(PIPELINE_SCRIPT), "--json", str(out), "--sizes", *map(str, sizes),
               "--types", *types, "--budget-s", str(max(30.0, timeout_s - 20.0)), *(extra_args or [])]
        if tiles:
            cmd += ["--tiles", *tiles]
        try:
            proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                                  check=False)
            log = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            log = f"timed out after {timeout_s:.0f} s: {exc.stdout or ''}"
        print(log.rstrip(), flush=True)
        try:
            rows = json.loads(Path(out).read_text())
        except (OSError, ValueError) as exc:
            return _error_rows(sizes, types, f"cuBLASDx pipeline gave no rows ({exc}):\n{log[-2000:]}")
    return rows


def merge_cublasdx(rows: list[dict], dx_rows: list[dict]) -> None:
    """Add the fastest checked cuBLASDx row of each (case, size) to matmul.py's ``rows`` in place."""
    best: dict[tuple[str, int], dict] = {}
    errors: dict[tuple[str, int], str] = {}
    for r in dx_rows:
        key = (r["type"], r["m"])
        if r.get("ok") and r.get("ms") and (key not in best or r["ms"] < best[key]["ms"]):
            best[key] = r
        elif not r.get("ok"):
            errors.setdefault(key, str(r.get("error")))
    for row in rows:
        key = (row["case"], row["size"])
        if key in best:
            r = best[key]
            row.update(cublasdx_ms=r["ms"], cublasdx_tflops=r["tflops"], cublasdx_c_type=r.get("c_type"),
                       cublasdx_tile=f"{'x'.join(map(str, r['tile']))}:{r['threads']} depth {r.get('pipeline_depth')}")
            if row.get("blasdx_ms"):
                row["ratio_vs_cublasdx"] = r["ms"] / row["blasdx_ms"]
        elif key in errors:
            row["cublasdx_error"] = errors[key]

"""cuBLASDx's pipelined device GEMM (nvmath-python 1.0 ``DevicePipeline``) as a competitor of bx.matmul.

    PYTHONPATH=DIR LD_LIBRARY_PATH=DIR/nvidia/cu13/lib python3 benchmarks/cublasdx_pipeline.py \\
        --json OUT.json [--sizes 4096 8192] [--types f16 bf16] [--tiles 128x128x64:128 ...] [--jobs N]

DIR holds nvmath-python 1.0.0, nvidia-libmathdx-cu13 0.3.2.6 and numpy 2.3.5, installed with
``pip install --no-index --no-deps --target DIR .whl/*.whl`` (``matmul_competitors.nvmath_env``
does it). The kernels are numba-cuda kernels calling cuBLASDx through nvmath-python, so this
runs in its own process, with that numpy first on the path (numba-cuda 0.30 does not import
under numpy 2.5). libmathdx 0.3.x is the range nvmath 1.0 declares (``<0.4``): with 0.4.1
the pipelined accumulator of ``Matmul.suggest_accumulator()`` fails cuBLASDx's static
assertion "In pipelined mode you are required to call tile_pipeline.get_accumulator()
instead", which nvmath 1.0's numba layer does not expose.

Each case (input type, M = N = K size, tile) is one square product C = A @ B with row-major
A, B (``--b-major col`` for a column-major B) and C, on fresh random data:

- a ``Matmul`` of the tile (``with_pipeline``, ``enable_input_streaming``, ``MaxAlignment``,
  static block dim, the device's SM, i.e. sm_90a on Hopper), f32 accumulation; the grid has
  one block per C tile, and each block runs ``DevicePipeline.get_tile(...).execute(acc)``
  and writes its accumulator to C. The pipeline depth is the largest that fits the opt-in
  shared memory (as NVIDIA's ``cublasdx_device_gemm_performance_pipeline`` example does)
  unless the tile names one (``128x128x64:128:3`` = tile, threads, depth). Default tiles:
  ``DEFAULT_TILES``; each row has its tile, depth, buffer size and block dim.
- C's type follows blasdx's table: f16 inputs write f16 (the f32 accumulator is converted in
  the epilogue), bf16 inputs write f32; ``--c-type f32`` writes f32 for both.
- bf16: nvmath-python 1.0 maps only numpy types to cuBLASDx precisions, and numpy has no
  bfloat16; libmathdx has one (BF16), so this script adds ``ml_dtypes.bfloat16`` to
  nvmath's type tables before building the ``Matmul`` (rows say so in ``note``).
- Checked on 64 sampled rows against the float64 reference (normwise relative error, the
  tolerances of ``blasdx.reference.tolerance``), then timed: median of 20 CUDA-event
  intervals, each around one launch in a queue kept full (the launch before each interval
  is already running when it starts, so host launch cost is not counted), after warm-up.

Every case runs in a worker process of its own (a failure or a poisoned CUDA context stays
in its case); ``--jobs`` workers build at once, since building one case takes minutes of
NVRTC compiles, and only one at a time holds the GPU (a file lock) while it runs, checks
and times. Whatever goes wrong (imports, compiles, wrong results, the time budget) becomes
the ``error`` of the rows concerned: the JSON list of rows
``{type, m, n, k, ms, tflops, ok, error, ...}`` is always written and the exit status is 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

TYPES = ("f16", "bf16")
# 128 x 128 x 64 with one warpgroup and 3 stages (about 96 KB: two blocks per SM), and
# 128 x 256 x 64 with two warpgroups and the deepest pipeline that fits (4 stages, one block per SM).
DEFAULT_TILES = ("128x128x64:128:3", "128x256x64:256")
SAMPLED_ROWS = 64


@dataclass(frozen=True)
class Case:
    """One measured product: input type, problem size, tile, threads, pipeline depth (0 = largest)."""

    type: str
    m: int
    n: int
    k: int
    tile: tuple[int, int, int]
    threads: int
    depth: int = 0
    b_major: str = "row"
    c_type: str = "auto"

    def label(self) -> str:
        depth = f":{self.depth}" if self.depth else ""
        tile = "x".join(map(str, self.tile))
        return f"{self.type} {self.m}x{self.n}x{self.k} tile {tile}:{self.threads}{depth}"


def parse_tile(text: str) -> tuple[tuple[int, int, int], int, int]:
    """``"128x128x64:128"`` or ``"128x128x64:128:3"`` -> ((128, 128, 64), 128 threads, depth 3 or 0)."""
    try:
        parts = text.split(":")
        tile = tuple(int(v) for v in parts[0].split("x"))
        threads = int(parts[1])
        depth = int(parts[2]) if len(parts) > 2 else 0
        if len(tile) != 3 or len(parts) > 3 or min(*tile, threads) <= 0 or depth < 0:
            raise ValueError
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"tile {text!r}: expected MxNxK:THREADS[:DEPTH], e.g. 128x128x64:128") from None
    return tile, threads, depth


def base_row(case: Case) -> dict:
    """The fields every row has, before the case runs."""
    return {"type": case.type, "m": case.m, "n": case.n, "k": case.k, "ms": None, "tflops": None, "ok": False,
            "error": None, "tile": list(case.tile), "threads": case.threads, "b_major": case.b_major}


# ---------------------------------------------------------------------------------------------
# worker: one case, in its own process
# ---------------------------------------------------------------------------------------------


def _preload_mathdx() -> str:
    """Load NVRTC (through cuda.pathfinder, as nvmath does on import) and then libmathdx.so.0 from
    beside the nvmath package (pip --target layout), so that nvmath's binding finds libmathdx
    even without LD_LIBRARY_PATH. Says what it loaded or why not; a failure here is not fatal.
    """
    import ctypes
    import importlib.util

    try:
        from cuda import pathfinder

        pathfinder.load_nvidia_dynamic_lib("nvrtc")
    except Exception as exc:  # reported in the row; LD_LIBRARY_PATH may still do
        return f"not preloaded: NVRTC not found ({type(exc).__name__}: {exc})"
    spec = importlib.util.find_spec("nvmath")
    if spec is None or not spec.submodule_search_locations:
        return "not preloaded: nvmath is not importable"
    root = Path(next(iter(spec.submodule_search_locations))).parent
    for lib in sorted(root.glob("nvidia/cu*/lib/libmathdx.so.0")):
        try:
            ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            return f"not preloaded: {exc}"
        return str(lib)
    return f"not preloaded: no nvidia/cu*/lib/libmathdx.so.0 under {root}"


def _enable_bfloat16():
    """Teach nvmath-python 1.0's type tables ml_dtypes.bfloat16 <-> libmathdx's BF16; returns the type.

    nvmath 1.0 maps numpy scalar types to cuBLASDx value types and precisions, and numpy has
    no bfloat16, so its device API accepts none; libmathdx itself has BF16 (R_16BF).
    """
    import ml_dtypes
    from nvmath.bindings import mathdx
    from nvmath.device import common_backend, cublasdx_backend

    bf16 = ml_dtypes.bfloat16
    common_backend.MATHDX_TYPES_TO_NP.setdefault(mathdx.CommondxValueType.R_16BF, bf16)
    common_backend.NP_TYPES_TO_MATHDX_TYPES.setdefault(bf16, mathdx.CommondxValueType.R_16BF)
    common_backend.NP_TYPES_TO_MATHDX_PRECISION.setdefault(bf16, mathdx.CommondxPrecision.BF16)
    if bf16 not in cublasdx_backend._ACCEPTED_PRECISION:
        cublasdx_backend._ACCEPTED_PRECISION.append(bf16)
    return bf16


def _host_operands(case: Case, seed: int):
    """Random A (m x k) and B as stored on the device: f16, or bf16 as its bits in uint16.

    The stored B is K x N, or its transpose (N x K, row-major) for ``b_major == "col"``.
    """
    import numpy as np

    rng = np.random.default_rng(seed)

    def make(shape):
        x = rng.standard_normal(shape, dtype=np.float32)
        if case.type == "f16":
            return x.astype(np.float16)
        bits = x.view(np.uint32)  # round to nearest even on the upper 16 bits
        return ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)

    a = make((case.m, case.k))
    b = make((case.n, case.k) if case.b_major == "col" else (case.k, case.n))
    return a, b


def _widen(stored, case: Case):
    """float64 values of stored operand elements (f16, or bf16 bits)."""
    import numpy as np

    if case.type == "f16":
        return stored.astype(np.float64)
    return (stored.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _c_dtype(case: Case):
    import numpy as np

    return np.float16 if case.type == "f16" and case.c_type == "auto" else np.float32


def _kernel(mm, tile_m: int, tile_n: int, ldc: int, threads: int, c_dtype):
    """The numba kernel of one case: one block per C tile, pipelined cuBLASDx GEMM, C written from registers.

    With a ``c_dtype`` other than float32 the accumulator is converted element by element into
    a register fragment of that type first (its layout is the accumulator's fragment layout
    retyped, ``suggest_layout_rmem_c`` like ``c_dtype``; 16-byte aligned, as numba wants
    local arrays aligned to at least 8).
    """
    import numpy as np
    from numba import cuda
    from nvmath.device.common import make_tensor
    from nvmath.device.cublasdx import _BlasMatmulLikeLayout
    from nvmath.device.cublasdx_numba import pipeline_extensions

    if np.dtype(c_dtype) == np.float32:
        @cuda.jit(extensions=pipeline_extensions, launch_bounds=(threads, 1))
        def gemm(c, device_pipeline):
            smem = cuda.shared.array(shape=(0,), dtype=np.byte, alignment=device_pipeline.buffer_alignment)
            bm, bn = cuda.blockIdx.x, cuda.blockIdx.y
            gmem_c = make_tensor(c[bm * tile_m:(bm + 1) * tile_m, bn * tile_n:(bn + 1) * tile_n],
                                 mm.get_layout_gmem_c(ldc))
            tile = device_pipeline.get_tile(smem, bm, bn)
            acc = mm.suggest_accumulator()
            tile.execute(acc)
            if acc.is_thread_active():
                acc.partition_and_copy(acc.get_results(), gmem_c)
            tile._del()

        return gemm

    narrow_layout = _BlasMatmulLikeLayout(mm, "suggest_layout_rmem_c", c_dtype)
    narrow_size = narrow_layout.cosize

    @cuda.jit(extensions=pipeline_extensions, launch_bounds=(threads, 1))
    def gemm_converted(c, device_pipeline):
        smem = cuda.shared.array(shape=(0,), dtype=np.byte, alignment=device_pipeline.buffer_alignment)
        bm, bn = cuda.blockIdx.x, cuda.blockIdx.y
        gmem_c = make_tensor(c[bm * tile_m:(bm + 1) * tile_m, bn * tile_n:(bn + 1) * tile_n],
                             mm.get_layout_gmem_c(ldc))
        tile = device_pipeline.get_tile(smem, bm, bn)
        acc = mm.suggest_accumulator()
        tile.execute(acc)
        if acc.is_thread_active():
            wide = acc.get_results()
            narrow = make_tensor(cuda.local.array(narrow_size, dtype=c_dtype, alignment=16), narrow_layout)
            for i in range(wide.layout.cosize):
                narrow[i] = wide[i]
            acc.partition_and_copy(narrow, gmem_c)
        tile._del()

    return gemm_converted


def _compile(kernel, args, shared_bytes: int):
    """Compile for these arguments and allow ``shared_bytes`` of dynamic shared memory; seconds taken."""
    from numba.cuda.cudadrv.driver import binding, driver

    start = time.perf_counter()
    compiled = kernel.compile(tuple(kernel.typeof_pyval(x) for x in args))
    function = compiled.library.get_cufunc()
    driver.cuKernelSetAttribute(binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                shared_bytes, function.handle, function.device.id)
    return time.perf_counter() - start


def _queued_ms(launch, samples: int = 20, warmup: int = 3) -> float:
    """Median ms of one launch: event pairs around launches queued back to back on the default stream."""
    import numpy as np
    from numba import cuda

    stream = cuda.default_stream()
    for _ in range(warmup):
        launch()
    stream.synchronize()
    starts = [cuda.event() for _ in range(samples)]
    ends = [cuda.event() for _ in range(samples)]
    launch()  # busy while the timed launches are queued behind it
    for start, end in zip(starts, ends):
        start.record(stream)
        launch()
        end.record(stream)
    ends[-1].synchronize()
    return float(np.median([cuda.event_elapsed_time(s, e) for s, e in zip(starts, ends)]))


def _tolerance(case: Case, c_dtype) -> float:
    """blasdx.reference.tolerance for f16/bf16 inputs with f32 accumulation (+2e-3 for an f16 C)."""
    import numpy as np

    return 1e-5 + (2e-3 if c_dtype == np.float16 else 0.0)


def _locked(lock_path: str):
    """An exclusive lock on the GPU shared by the workers (released when the file closes)."""
    import fcntl

    handle = open(lock_path, "a")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def run_case(case: Case, lock_path: str | None, seed: int = 0) -> dict:
    """Build, run, check and time one case; a row with ``error`` set at the first failure."""
    row = base_row(case)
    stage = "import"
    try:
        row["mathdx_library"] = _preload_mathdx()
        import numpy as np
        import nvmath
        from numba import cuda
        from nvmath.bindings import mathdx
        from nvmath.device import Matmul
        from nvmath.device.cublasdx import MAX_ALIGNMENT

        row["versions"] = {"nvmath": nvmath.__version__, "numpy": np.__version__,
                           "libmathdx": ".".join(map(str, mathdx.get_version_ex()))}
        stage = "types"
        value = np.float16
        if case.type == "bf16":
            value = _enable_bfloat16()
            row["note"] = "bf16 through nvmath's type tables extended with ml_dtypes.bfloat16 (libmathdx BF16)"
        tm, tn, tk = case.tile
        if case.m % tm or case.n % tn or case.k % tk:
            raise ValueError(f"{case.m}x{case.n}x{case.k} is not a multiple of the tile {tm}x{tn}x{tk}")

        stage = "matmul"
        start = time.perf_counter()
        mm = Matmul(size=case.tile, precision=(value, value, np.float32), data_type="real",
                    arrangement=("row_major", f"{case.b_major}_major", "row_major"), alignment=MAX_ALIGNMENT,
                    execution="Block", block_size=case.threads, with_pipeline=True, enable_input_streaming=True,
                    static_block_dim=True)
        row["sm"] = str(mm.sm)

        stage = "device arrays"
        c_dtype = _c_dtype(case)
        store = np.float16 if case.type == "f16" else np.uint16  # bf16 travels as its bits
        a_d = cuda.device_array((case.m, case.k), dtype=store)
        b_shape = (case.n, case.k) if case.b_major == "col" else (case.k, case.n)
        b_stored = cuda.device_array(b_shape, dtype=store)
        b_d = b_stored.T if case.b_major == "col" else b_stored

        stage = "pipeline"
        optin = cuda.get_current_device().MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        stage_bytes = (tm * tk + tk * tn) * 2 + 16
        depth = case.depth or max(1, min(16, case.k // tk, (optin - 1024) // stage_bytes))
        while True:
            pipeline = mm.suggest_device_pipeline(depth, a_d, b_d)
            if pipeline.buffer_size <= optin or case.depth or depth == 1:
                break
            depth -= 1
        row.update(pipeline_depth=depth, buffer_bytes=pipeline.buffer_size, block_dim=list(pipeline.block_dim),
                   matmul_block_dim=list(mm.block_dim))
        if pipeline.buffer_size > optin:
            raise ValueError(f"pipeline buffer {pipeline.buffer_size} B > {optin} B of shared memory (depth {depth})")

        stage = "kernel compile"
        kernel = None
        for target in dict.fromkeys([c_dtype, np.float32]):  # an f16 C, else f32 (noted)
            c_d = cuda.device_array((case.m, case.n), dtype=target)
            try:
                kernel = _kernel(mm, tm, tn, case.n, pipeline.block_dim[0] * pipeline.block_dim[1]
                                 * pipeline.block_dim[2], target)
                row["compile_s"] = round(_compile(kernel, (c_d, pipeline), pipeline.buffer_size), 1)
                c_dtype = target
                break
            except Exception as exc:  # the f16 epilogue is the only optional part
                if target == np.float32:
                    raise
                row["note"] = (row.get("note", "") + f"; f16 C epilogue failed ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0][:200]}), C is f32").lstrip("; ")
        row["c_type"] = np.dtype(c_dtype).name
        row["build_s"] = round(time.perf_counter() - start, 1)
        grid, block = (case.m // tm, case.n // tn, 1), tuple(pipeline.block_dim)

        def launch():
            kernel[grid, block, 0, pipeline.buffer_size](c_d, pipeline)

        stage = "data"
        a_h, b_h = _host_operands(case, seed)
        rows = np.sort(np.random.default_rng(seed + 1).choice(case.m, SAMPLED_ROWS, replace=False))
        handle = _locked(lock_path) if lock_path else None
        try:
            a_d.copy_to_device(a_h)
            b_stored.copy_to_device(b_h)
            stage = "run"
            launch()
            cuda.synchronize()
            got = np.stack([c_d[int(r)].copy_to_host() for r in rows]).astype(np.float64)
            stage = "timing"
            ms = _queued_ms(launch)
        finally:
            if handle:
                handle.close()

        stage = "check"
        b64 = _widen(b_h, case)
        ref = _widen(a_h[rows], case) @ (b64.T if case.b_major == "col" else b64)
        err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref)) if np.isfinite(got).all() else float("inf")
        tol = _tolerance(case, c_dtype)
        row.update(rel_error=err, tolerance=tol, ok=err <= tol, ms=ms, tflops=2.0 * case.m * case.n * case.k / ms / 1e9)
        if not row["ok"]:
            row["error"] = f"wrong result: relative error {err:.3e} > {tol:.1e} on {SAMPLED_ROWS} sampled rows"
    except BaseException as exc:  # every failure is a result of this benchmark
        row["error"] = f"{stage}: {type(exc).__name__}: {str(exc).strip()[:1500]}"
    return row


# ---------------------------------------------------------------------------------------------
# parent: the cases, the workers, the JSON
# ---------------------------------------------------------------------------------------------


def cases_of(args: argparse.Namespace) -> list[Case]:
    return [Case(t, s, s, s, tile, threads, depth, args.b_major, args.c_type)
            for t in args.types for s in args.sizes for tile, threads, depth in args.tiles]


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_all(cases: list[Case], jobs: int, budget_s: float, out: Path | None, quiet: bool = False) -> list[dict]:
    """Run each case in a worker (at most ``jobs`` at once, GPU work serialised by a lock); the rows.

    Rows are written to ``out`` as they come; workers still running after ``budget_s`` are
    stopped and their rows say so.
    """
    rows: list[dict | None] = [None] * len(cases)
    scratch = Path(tempfile.mkdtemp(prefix="cublasdx-pipeline-"))
    lock = scratch / "gpu.lock"
    lock.touch()
    started = time.monotonic()
    pending = list(enumerate(cases))
    running: dict[int, tuple[subprocess.Popen, Path, Path, float]] = {}

    def save() -> None:
        if out is not None:
            done = [r for r in rows if r is not None]
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_suffix(out.suffix + ".tmp")
            tmp.write_text(json.dumps(done, indent=1))
            os.replace(tmp, out)

    def finish(i: int, row: dict) -> None:
        rows[i] = row
        save()
        if not quiet:
            shown = f"{row['tflops']:.1f} TFLOP/s ({row['ms']:.3f} ms)" if row.get("ok") else f"ERROR {row['error']}"
            print(f"cuBLASDx pipeline {cases[i].label()}: {shown}", flush=True)

    while pending or running:
        while pending and len(running) < jobs:
            i, case = pending.pop(0)
            case_file, row_file, log = scratch / f"case{i}.json", scratch / f"row{i}.json", scratch / f"log{i}.txt"
            case_file.write_text(json.dumps(asdict(case)))
            with open(log, "w") as log_handle:
                proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", str(case_file),
                                         "--row-out", str(row_file), "--lock", str(lock)],
                                        stdout=log_handle, stderr=subprocess.STDOUT)
            running[i] = (proc, row_file, log, time.monotonic())
        for i, (proc, row_file, log, _) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[i]
            if row_file.exists():
                finish(i, json.loads(row_file.read_text()))
            else:
                row = base_row(cases[i])
                row["error"] = f"worker exited with status {proc.returncode} and no result:\n{_tail(log)}"
                finish(i, row)
        if time.monotonic() - started > budget_s:
            for i, (proc, _, log, _) in list(running.items()):
                proc.kill()
                proc.wait()
                row = base_row(cases[i])
                row["error"] = f"stopped: time budget of {budget_s:.0f} s spent (still building or running)"
                row["log_tail"] = _tail(log)
                finish(i, row)
            running.clear()
            for i, case in pending:
                row = base_row(case)
                row["error"] = f"skipped: time budget of {budget_s:.0f} s spent"
                finish(i, row)
            pending.clear()
        time.sleep(0.2)
    for path in scratch.iterdir():
        path.unlink()
    scratch.rmdir()
    return [r for r in rows if r is not None]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/cublasdx_pipeline.json"))
    parser.add_argument("--sizes", nargs="*", type=int, default=[4096, 8192], help="M = N = K")
    parser.add_argument("--types", nargs="*", default=list(TYPES), choices=TYPES)
    parser.add_argument("--tiles", nargs="*", type=parse_tile, default=[parse_tile(t) for t in DEFAULT_TILES],
                        help=f"MxNxK:THREADS[:DEPTH] (default {' '.join(DEFAULT_TILES)})")
    parser.add_argument("--b-major", choices=("row", "col"), default="row", help="B's storage order")
    parser.add_argument("--c-type", choices=("auto", "f32"), default="auto",
                        help="auto: blasdx's result types (f16 -> f16, bf16 -> f32)")
    parser.add_argument("--jobs", type=int, default=0, help="cases built at once (default: half the CPUs, <= 8)")
    parser.add_argument("--budget-s", type=float, default=540.0, help="stop everything after this many seconds")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--row-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--lock", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        fields = json.loads(args.worker.read_text())
        case = Case(**{**fields, "tile": tuple(fields["tile"])})
        row = run_case(case, args.lock)
        args.row_out.write_text(json.dumps(row))
        return 0
    cases = cases_of(args)
    jobs = args.jobs or max(1, min(8, len(cases), (os.cpu_count() or 2) // 2))
    print(f"cuBLASDx pipeline: {len(cases)} cases, {jobs} built at once, budget {args.budget_s:.0f} s", flush=True)
    rows = run_all(cases, jobs, args.budget_s, args.json)
    if not rows:  # nothing selected: still an (empty) JSON list
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text("[]")
    print(f"JSON: {args.json} ({sum(bool(r.get('ok')) for r in rows)} of {len(rows)} rows checked and timed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

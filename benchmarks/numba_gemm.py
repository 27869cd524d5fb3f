"""The same Numba-CUDA kernel with a blasdx GEMM and with nvmath-python's device GEMM (cuBLASDx through libmathdx).

    python benchmarks/numba_gemm.py [--quick] [--types f16->f32 ...] [--sizes 64x64x64 ...] [--kinds compute batched]
                                    [--cases f16->f32:64x64x64:compute ...] [--workers N] [--budget S] [--json PATH]

Two kinds per case, each a Numba kernel written the same way for both libraries (global ->
shared copies of the library, the register API, the accumulator stored to global memory):

* ``compute``: operands in shared memory, ``repeats`` GEMMs per block accumulated in registers
  (the block's tensor-core work alone); 4 blocks per SM.
* ``batched``: one problem per block, A and B from global memory, C to global memory
  (memory-bound at these sizes: GB/s beside TFLOP/s), in each library's documented pattern:
  nvmath.device's register fragment stored with ``copy_fragment``; blasdx's ``execute`` into
  shared C and ``store_c`` (coalesced 16-byte stores, docs/numba.md), its register API
  (``fragment_axpby`` from registers) beside it (``blasdx_register_c_*``) and in its place
  where A, B and C do not fit a block's shared memory (``blasdx_batched_api``).

Every (case, size, kind, library) is one task in a fresh worker process (``--workers``, default
one per core): kernels are built there in parallel, while checking and timing on the GPU take
turns under one lock, so no two processes run kernels at once. A task's first build is cold
(a new process, so no in-memory caches; blasdx with an empty disk cache of its own under
``--cache``) and is timed as typing, code generation, link and module load (``compile`` +
``bind``, no launch); the warm build is a new kernel object in the same process after blasdx's
in-memory caches are dropped (it reads its disk cache; nvmath.device keeps its generated code in
memory only). GPU time from CUDA events around back-to-back launches after a warm-up; results
are checked against the float64 reference first. ``--budget`` stops the run cleanly: the JSON
holds every task that finished, and the unfinished ones are named.

Cases are taken in the order given (``--cases``, else types x sizes x kinds). Rows of
``benchmarks/results/numba_gemm.json``: {case, size, kind, blasdx_tflops, nvmath_tflops, ratio
(= blasdx / nvmath), first / warm compile seconds of each, ...}; nvmath fields are null where
nvmath.device has no such GEMM (bf16, tf32, fp8) or failed (the reason is kept).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import batched  # noqa: E402  (the block-level benchmarks' table of cases)

import blasdx as bx  # noqa: E402
from blasdx.base import dtypes as dt  # noqa: E402
from blasdx.reference import (  # noqa: E402
    assert_close,
    gemm_scale,
    random_operand,
    reference_gemm,
    rounding,
    tolerance,
)

#: batched.py's cases less those stating MantissaBits (blasdx-only schemes nvmath.device has no counterpart of)
TYPES = {name: abc for name, abc in batched.TYPES.items() if name not in batched.MANTISSA_BITS}
SIZES = [(32, 32, 32), (64, 64, 64), (128, 128, 64), (128, 128, 128)]
QUICK = [("f16->f32", (64, 64, 64)), ("f16->f32", (128, 128, 64)), ("f64", (64, 64, 64)), ("f32", (64, 64, 64)),
         ("bf16->f32", (64, 64, 64)), ("int8->int32", (64, 64, 64)), ("e4m3->f32", (64, 64, 64)),
         ("f16->f32", (32, 32, 32)), ("tf32->f32", (64, 64, 64)), ("f16->f32", (128, 128, 128))]
#: numpy dtypes nvmath.device takes for a blasdx type (None: nvmath.device has no such GEMM)
NVMATH = {"float16": np.float16, "float32": np.float32, "float64": np.float64, "int8": np.int8, "int32": np.int32}
RESULTS = Path(__file__).resolve().parent / "results" / "numba_gemm.json"
ARRANGEMENT = (bx.row_major, bx.row_major, bx.row_major)
CHECK_REPEATS = 3  # the checked run of the compute kind accumulates a few times: C = 3 A B


def descriptor(case: str, size, sm: int, kind: str) -> bx.Descriptor:
    """Row-major A, B, C with MaxAlignment; wgmma (sm_90a) on Hopper; padded shared-memory rows for both
    kinds (free of bank conflicts, as nvmath's suggested shared layouts are) and the compute-bound block
    size for the compute kind, as blasdx suggests them."""
    a, b, c = TYPES[case]
    desc = (bx.Size(*size) + bx.Precision(a, b, c) + bx.Function.MM + bx.Arrangement(*ARRANGEMENT)
            + bx.MaxAlignment + bx.SM(sm, arch_specific=sm == 90) + bx.Block())
    if kind == "compute":
        desc = desc + bx.Workload.compute_bound
    return desc + bx.LeadingDimension(*desc.suggested_leading_dimension)


# ---------------------------------------------------------------------------------------------
# the kernels
# ---------------------------------------------------------------------------------------------


def blasdx_kernel(G, kind: str):
    from numba import cuda

    if kind == "compute":
        def compute(a, b, c, repeats):
            sA, sB = G.shared_memory_ab()
            G.load_a(a, sA)
            G.load_b(b, sB)
            G.copy_wait()
            acc = G.accumulator()
            for _ in range(repeats):
                G.accumulate(sA, sB, acc)
            G.fragment_axpby(1, acc, 0, c[cuda.blockIdx.x])

        return cuda.jit(compute)

    if kind == "batched-shared":  # C through shared memory: coalesced 16-byte stores
        def batched_shared(a, b, c, repeats):
            sA, sB, sC = G.shared_memory()
            p = cuda.blockIdx.x
            G.load_a(a[p], sA)
            G.load_b(b[p], sB)
            G.copy_wait()
            G.execute(1, sA, sB, 0, sC)
            cuda.syncthreads()
            G.store_c(sC, c[p])

        return cuda.jit(batched_shared)

    def batched(a, b, c, repeats):
        sA, sB = G.shared_memory_ab()
        p = cuda.blockIdx.x
        G.load_a(a[p], sA)
        G.load_b(b[p], sB)
        G.copy_wait()
        acc = G.accumulator()
        G.accumulate(sA, sB, acc)
        G.fragment_axpby(1, acc, 0, c[p])

    return cuda.jit(batched)


def nvmath_gemm(case: str, size, sm: int):
    """nvmath.device's Matmul for the case (suggested block size), or raise why there is none."""
    from nvmath.device import Matmul

    a, b, c = TYPES[case]
    if any(t.name not in NVMATH for t in (a, b, c)):
        raise LookupError(f"nvmath.device has no {case} GEMM")
    return Matmul(size=size, precision=(NVMATH[a.name], NVMATH[b.name], NVMATH[c.name]), data_type="real",
                  arrangement=("row_major", "row_major", "row_major"), execution="Block", sm=sm)


def nvmath_kernel(MM, kind: str):
    from numba import cuda
    from nvmath.device.common import (  # noqa: F401
        axpby,
        clear,
        copy,
        copy_fragment,
        copy_wait,
        make_tensor,
    )

    layout_a, layout_b, layout_c = MM.suggest_layout_smem_a(), MM.suggest_layout_smem_b(), MM.suggest_layout_rmem_c()
    a_size, b_size, c_size = layout_a.cosize, layout_b.cosize, layout_c.cosize
    smem_dtype = MM.a_value_type
    c_dtype = MM.c_value_type

    if kind == "compute":
        def compute(a, b, c, repeats):
            smem = cuda.shared.array(shape=(0,), dtype=smem_dtype, alignment=16)
            smem_a_buffer, smem = smem[:a_size], smem[a_size:]
            smem_b_buffer = smem[:b_size]
            rmem = cuda.local.array(shape=(c_size,), dtype=c_dtype)
            smem_a = make_tensor(smem_a_buffer, MM.suggest_layout_smem_a())
            smem_b = make_tensor(smem_b_buffer, MM.suggest_layout_smem_b())
            rmem_c = make_tensor(rmem, MM.suggest_layout_rmem_c())
            copy(make_tensor(a, MM.get_layout_gmem_a()), smem_a)
            copy(make_tensor(b, MM.get_layout_gmem_b()), smem_b)
            copy_wait()
            clear(rmem_c)
            for _ in range(repeats):
                MM.execute(smem_a, smem_b, rmem_c)
            copy_fragment(rmem_c, make_tensor(c[cuda.blockIdx.x], MM.get_layout_gmem_c()))

        return cuda.jit(compute)

    def batched(a, b, c, repeats):
        smem = cuda.shared.array(shape=(0,), dtype=smem_dtype, alignment=16)
        smem_a_buffer, smem = smem[:a_size], smem[a_size:]
        smem_b_buffer = smem[:b_size]
        rmem = cuda.local.array(shape=(c_size,), dtype=c_dtype)
        p = cuda.blockIdx.x
        smem_a = make_tensor(smem_a_buffer, MM.suggest_layout_smem_a())
        smem_b = make_tensor(smem_b_buffer, MM.suggest_layout_smem_b())
        rmem_c = make_tensor(rmem, MM.suggest_layout_rmem_c())
        copy(make_tensor(a[p], MM.get_layout_gmem_a()), smem_a)
        copy(make_tensor(b[p], MM.get_layout_gmem_b()), smem_b)
        copy_wait()
        clear(rmem_c)
        MM.execute(smem_a, smem_b, rmem_c)
        copy_fragment(rmem_c, make_tensor(c[p], MM.get_layout_gmem_c()))

    return cuda.jit(batched)


#: The most shared memory a block of an sm_90 GPU may opt in to.
MAX_BLOCK_SHARED = 232448


def nvmath_shared_memory(MM) -> int:
    return int(MM.get_shared_storage_size_ab(MM.suggest_layout_smem_a(), MM.suggest_layout_smem_b()))


# ---------------------------------------------------------------------------------------------
# running and timing
# ---------------------------------------------------------------------------------------------


class Operands:
    """Host and device operands of one case and kind (the same data for both libraries)."""

    def __init__(self, case: str, size, kind: str, blocks: int, rng: np.random.Generator) -> None:
        from numba import cuda

        from blasdx.numba import as_bits

        m, n, k = size
        a_t, b_t, c_t = TYPES[case]
        batch = 1 if kind == "compute" else blocks
        self.a = random_operand(a_t, (batch, m, k), rng)
        self.b = random_operand(b_t, (batch, k, n), rng)
        self.c_type = c_t
        self.blocks = blocks
        self.host = tuple(as_bits(h[0] if kind == "compute" else h) for h in (self.a, self.b))
        self.da, self.db = (cuda.device_array(h.shape, h.dtype) for h in self.host)  # filled by upload()
        self.dc = cuda.device_array((blocks, m, n), dtype=as_bits(np.zeros(1, c_t.host_dtype)).dtype)

    def upload(self) -> None:
        """A and B to the GPU (under the GPU lock: copies would disturb another task's timing)."""
        self.da.copy_to_device(self.host[0])
        self.db.copy_to_device(self.host[1])

    def poison(self) -> None:
        self.dc.copy_to_device(np.full(self.dc.shape, 12345 if self.c_type.integral else np.nan, self.dc.dtype))

    def check(self, repeats: int, kind: str, case: str, what: str, instruction: str | None = None) -> None:
        """The first and last blocks' C against ``repeats`` times the float64 product, element by element."""
        got = self.dc.copy_to_host()
        a, _, c = TYPES[case]
        tol = tolerance(a, c, self.a.shape[-1] * repeats, None, instruction, rounding_apart=True)
        for p in [0, self.blocks - 1]:
            x, y = self.a[0 if kind == "compute" else p], self.b[0 if kind == "compute" else p]
            assert_close(got[p].view(c.host_dtype) if got.dtype != c.host_dtype else got[p],
                         repeats * reference_gemm(x, y), tol, what=what, scale=repeats * gemm_scale(x, y),
                         rounding=rounding(c))


def time_kernel(kernel, blocks: int, threads, smem: int, args: tuple, runs: int) -> float:
    """Median GPU milliseconds of one launch, from CUDA events around ``runs`` back-to-back launches."""
    from numba import cuda

    kernel[blocks, threads, 0, smem](*args)
    cuda.synchronize()
    samples = []
    for _ in range(5):
        start, end = cuda.event(), cuda.event()
        start.record()
        for _ in range(runs):
            kernel[blocks, threads, 0, smem](*args)
        end.record()
        end.synchronize()
        samples.append(cuda.event_elapsed_time(start, end) / runs)
    return float(np.median(samples))


def build_seconds(make, args: tuple, smem: int = 0):
    """Wall seconds of building a kernel object for ``args`` and loading it (typing, code generation, link,
    module load; no launch, so builds in other processes never overlap a timed kernel); the kernel, opted in
    to ``smem`` bytes of dynamic shared memory."""
    import numba

    start = time.perf_counter()
    kernel = make()
    compiled = kernel.compile(tuple(numba.typeof(a) for a in args))
    compiled.bind()
    seconds = time.perf_counter() - start
    allow_dynamic_shared_memory(compiled, smem)
    return seconds, kernel


def allow_dynamic_shared_memory(compiled, nbytes: int) -> None:
    """Let a loaded Numba kernel launch with ``nbytes`` of dynamic shared memory: above 48 KB the driver wants
    an opt-in first (blasdx's LTO-IR opts its kernels in when loaded; nvmath.device's kernels need this)."""
    if nbytes <= 48 * 1024:
        return
    from cuda.bindings import driver

    handle = compiled._codelibrary.get_cufunc().kernel.handle
    attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    if isinstance(handle, driver.CUkernel):
        result = driver.cuKernelSetAttribute(attribute, nbytes, handle, driver.CUdevice(0))
    else:
        result = driver.cuFuncSetAttribute(handle, attribute, nbytes)
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise RuntimeError(f"opting the kernel in to {nbytes} B of dynamic shared memory failed: {err}")


def drop_blasdx_memory_caches() -> None:
    """Forget blasdx's in-process LTO-IR so that the next kernel reads the disk cache."""
    from blasdx.compile import ltoir as _ltoir
    from blasdx.fusion import numba_lowering as _lowering

    _ltoir._memory.clear()
    _ltoir._by_descriptor.clear()
    _lowering._ltoir_objects.clear()


#: the lock every task holds while it runs kernels (set in each worker by :func:`_worker_init`)
GPU_LOCK = None


def _worker_init(lock) -> None:
    global GPU_LOCK
    GPU_LOCK = lock


class Task(tuple):
    """(case, size, kind, library): one measurement, run in a worker process of its own."""

    @property
    def key(self) -> tuple:
        return self[0], "x".join(map(str, self[1])), self[2]


def blocks_of(case: str, size, kind: str, sms: int) -> int:
    """4 blocks per SM for the compute kind; batched: ~300 MB of A and B, five times the L2, so that every
    problem comes from DRAM."""
    m, n, k = size
    return 4 * sms if kind == "compute" else max(1, int(3e8 // ((m * k + k * n) * TYPES[case][0].size)))


def _measure(library: str, case: str, size, kind: str, sm: int, sms: int, repeats: int) -> dict:
    """Build (first and warm), check and time one library's kernel; fields prefixed with the library."""
    import numba
    from numba import cuda

    m, n, k = size
    blocks = blocks_of(case, size, kind, sms)
    reps = repeats if kind == "compute" else 1
    ops = Operands(case, size, kind, blocks, np.random.default_rng(5))  # the same data for both libraries
    flops = 2.0 * m * n * k * reps * blocks
    moved = (ops.a.nbytes + ops.b.nbytes + ops.dc.size * ops.dc.dtype.itemsize) if kind == "batched" else 0
    args = (ops.da, ops.db, ops.dc, np.int32(reps))
    check_args = (ops.da, ops.db, ops.dc, np.int32(min(reps, CHECK_REPEATS)))
    out: dict = {"blocks": blocks, "repeats": reps}
    register_c = None  # blasdx's register API beside its documented shared-memory batched pattern
    if library == "blasdx":
        import blasdx.numba  # noqa: F401

        G = descriptor(case, size, sm, kind)
        shared = kind == "batched" and G.shared_memory_size <= MAX_BLOCK_SHARED
        make, threads, smem = ((lambda: blasdx_kernel(G, "batched-shared")), G.block_dim, G.shared_memory_size) \
            if shared else ((lambda: blasdx_kernel(G, kind)), G.block_dim, G.shared_memory_size_ab)
        out["blasdx_instruction"] = G.instruction
        if kind == "batched":
            out["blasdx_batched_api"] = "shared" if shared else "register"
        if shared:
            register_c = blasdx_kernel(G, "batched")
    else:
        start = time.perf_counter()  # the first build counts nvmath's Matmul (libmathdx) too
        MM = nvmath_gemm(case, size, sm)
        setup = time.perf_counter() - start
        make, threads, smem = (lambda: nvmath_kernel(MM, kind)), MM.block_dim, nvmath_shared_memory(MM)
    first, kernel = build_seconds(make, check_args, smem)
    out[f"{library}_first_compile_s"] = first + (setup if library == "nvmath" else 0.0)
    if library == "nvmath":
        out["nvmath_matmul_s"] = setup  # nvmath.device.Matmul(...) alone (libmathdx)
    if library == "blasdx":
        drop_blasdx_memory_caches()
    out[f"{library}_warm_compile_s"], _ = build_seconds(make, check_args)
    out[f"{library}_block_dim"] = list(threads)
    if register_c is not None:
        compiled = register_c.compile(tuple(numba.typeof(a) for a in args))
        compiled.bind()
        allow_dynamic_shared_memory(compiled, G.shared_memory_size_ab)
    with GPU_LOCK:
        ops.upload()
        ops.poison()
        kernel[blocks, threads, 0, smem](*check_args)
        ops.check(min(reps, CHECK_REPEATS), kind, case, f"{library} {case} {kind}", out.get("blasdx_instruction"))
        ms = time_kernel(kernel, blocks, threads, smem, args, 3 if kind == "batched" else 2)
        if register_c is not None:  # the same problem with C stored from registers (fragment_axpby)
            ops.poison()
            register_c[blocks, threads, 0, G.shared_memory_size_ab](*args)
            ops.check(reps, kind, case, f"blasdx {case} batched, C from registers", G.instruction)
            ms_register = time_kernel(register_c, blocks, threads, G.shared_memory_size_ab, args, 3)
            out["blasdx_register_c_tflops"] = flops / ms_register / 1e9
            out["blasdx_register_c_gbps"] = moved / ms_register / 1e6
        cuda.synchronize()
    out[f"{library}_ms"], out[f"{library}_tflops"] = ms, flops / ms / 1e9
    if moved:
        out[f"{library}_gbps"] = moved / ms / 1e6
    return out


def run_task(task: Task, sm: int, sms: int, repeats: int, cache_root: str) -> tuple[tuple, dict]:
    """One task in its worker: its own empty blasdx disk cache (cold first build); errors become fields."""
    library, (case, size, kind) = task[3], task[:3]
    os.environ["BLASDX_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"{library}-", dir=cache_root)
    try:
        return task.key, _measure(library, case, size, kind, sm, sms, repeats)
    except Exception as exc:  # noqa: BLE001 - the reason becomes part of the result
        return task.key, {f"{library}_error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def fmt(value, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def parse_cases(args, sm: int) -> list[tuple]:
    """(case, size, kind) in the order asked, those this GPU has."""
    if args.cases:
        wanted = []
        for text in args.cases:
            case, size, kind = text.split(":")
            wanted.append((case, tuple(int(x) for x in size.split("x")), kind))
    elif args.quick:
        wanted = [(c, s, kind) for c, s in QUICK for kind in args.kinds]
    else:
        wanted = [(c, tuple(int(x) for x in s.split("x")), kind) for c in args.types for s in args.sizes
                  for kind in args.kinds]
    for case, _, kind in wanted:
        if case not in TYPES or kind not in ("compute", "batched"):
            raise SystemExit(f"unknown case {case!r} or kind {kind!r}: types {sorted(TYPES)}, kinds compute, batched")
    return [w for w in wanted if dt.find_combination(*TYPES[w[0]], False).min_sm <= sm]


def nvmath_has(case: str) -> bool:
    """Whether nvmath.device has a GEMM of these types."""
    return all(t.name in NVMATH for t in TYPES[case])


def schedule(cases: list[tuple], libraries: list[str]) -> list[Task]:
    """The tasks in the order they start: case by case, nvmath.device's task before blasdx's (its builds,
    libmathdx then NVRTC over cuBLASDx per descriptor, are the long ones, so each starts as early as its case
    allows and the libraries take the workers one for one). Types nvmath.device lacks give no nvmath task."""
    return [Task((*c, library)) for c in cases for library in ("nvmath", "blasdx")
            if library in libraries and (library == "blasdx" or nvmath_has(c[0]))]


def merge(rows: dict, key: tuple, fields: dict) -> dict:
    """Add a task's fields to its row; the ratio once both libraries have a time."""
    row = rows.setdefault(key, {"case": key[0], "size": key[1], "kind": key[2], "blasdx_tflops": None,
                                "nvmath_tflops": None, "ratio": None})
    row.update(fields)
    if row.get("blasdx_tflops") and row.get("nvmath_tflops"):
        row["ratio"] = row["blasdx_tflops"] / row["nvmath_tflops"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the short case list")
    parser.add_argument("--types", nargs="*", default=list(TYPES), help=f"of {', '.join(TYPES)}")
    parser.add_argument("--sizes", nargs="*", default=["x".join(map(str, s)) for s in SIZES])
    parser.add_argument("--kinds", nargs="*", default=["compute", "batched"])
    parser.add_argument("--cases", nargs="*", default=None, help="TYPE:MxNxK:KIND, run in this order (overrides the rest)")
    parser.add_argument("--libraries", nargs="*", default=["blasdx", "nvmath"], choices=["blasdx", "nvmath"])
    parser.add_argument("--repeats", type=int, default=400, help="GEMMs per block in the compute kind")
    parser.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1), help="build processes")
    parser.add_argument("--budget", type=float, default=None, help="seconds: stop then, writing what finished")
    parser.add_argument("--cache", default=None, help="root of the blasdx disk caches (default: a new temporary folder)")
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    begin = time.perf_counter()
    try:
        from numba import cuda

        if not cuda.is_available():
            raise RuntimeError("no GPU")
        device = cuda.get_current_device()
    except Exception as exc:  # noqa: BLE001
        print(f"skipped: needs numba-cuda and a GPU ({exc})")
        return 0
    major, minor = device.compute_capability
    sm, sms = 10 * major + minor, device.MULTIPROCESSOR_COUNT
    name = device.name.decode() if isinstance(device.name, bytes) else str(device.name)
    cases = parse_cases(args, sm)
    cache_root = args.cache or tempfile.mkdtemp(prefix="blasdx-numba-bench-")
    os.makedirs(cache_root, exist_ok=True)
    tasks = schedule(cases, args.libraries)
    print(f"{name}, sm_{sm}, {sms} SMs; {len(tasks)} tasks on {args.workers} workers; TFLOP/s (GPU time)", flush=True)
    rows: dict = {}
    for case, size, kind in cases:  # rows in the order asked
        merge(rows, (case, "x".join(map(str, size)), kind),
              {} if nvmath_has(case) or "nvmath" not in args.libraries else
              {"nvmath_error": f"LookupError: nvmath.device has no {case} GEMM"})

    def write(unfinished: list[str]) -> None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"date": str(date.today()), "device": name, "sm": sm, "workers": args.workers,
                                         "rows": list(rows.values()), "unfinished": unfinished},
                                        indent=1, default=str))

    context = multiprocessing.get_context("spawn")  # CUDA in every worker: no forked contexts
    pool = context.Pool(args.workers, initializer=_worker_init, initargs=(context.Lock(),), maxtasksperchild=1)
    pending = {task: pool.apply_async(run_task, (task, sm, sms, args.repeats, cache_root)) for task in tasks}
    try:
        while pending:
            if args.budget is not None and time.perf_counter() - begin > args.budget:
                break
            done = [t for t, r in pending.items() if r.ready()]
            for task in done:
                key, fields = pending.pop(task).get()
                row = merge(rows, key, fields)
                error = fields.get(f"{task[3]}_error")
                print(f"{row['case']:<12} {row['size']:<12} {row['kind']:<8} {task[3]:<7} "
                      + (f"[{error[:110]}]" if error else
                         f"{fmt(fields.get(task[3] + '_tflops')):>8} TFLOP/s, first / warm build "
                         f"{fmt(fields.get(task[3] + '_first_compile_s'), '.2f')} / "
                         f"{fmt(fields.get(task[3] + '_warm_compile_s'), '.2f')} s")
                      + (f"  ratio {row['ratio']:.2f}" if row.get("ratio") else ""), flush=True)
                write([])
            if not done:
                time.sleep(0.2)
    finally:
        unfinished = [f"{t[0]}:{'x'.join(map(str, t[1]))}:{t[2]}:{t[3]}" for t in pending]
        pool.terminate()
        pool.join()
    if unfinished:
        print(f"out of the time budget ({args.budget:.0f} s): {len(unfinished)} tasks unfinished: "
              + " ".join(unfinished[:12]), flush=True)
    write(unfinished)
    both = [r["ratio"] for r in rows.values() if r.get("ratio")]
    if both:
        print(f"cases both ran: {len(both)}, blasdx >= nvmath in {sum(r >= 1.0 for r in both)}, "
              f"min ratio {min(both):.2f}, geomean {float(np.exp(np.mean(np.log(both)))):.2f}")
    print(f"wrote {args.json} ({time.perf_counter() - begin:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

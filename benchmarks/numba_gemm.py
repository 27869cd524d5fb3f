"""The same Numba-CUDA kernel with a blasdx GEMM and with nvmath-python's device GEMM (cuBLASDx through libmathdx).

    python benchmarks/numba_gemm.py [--quick] [--cases f16->f32 ...] [--sizes 64x64x64 ...] [--budget S]
                                    [--json PATH]

Two kinds per case, each a Numba kernel written the same way for both libraries (global ->
shared copies of the library, the register API, the accumulator stored to global memory):

* ``compute``: operands in shared memory, ``repeats`` GEMMs per block accumulated in registers
  (the block's tensor-core work alone); 4 blocks per SM.
* ``batched``: one problem per block, A and B from global memory, C back from registers
  (memory-bound at these sizes: GB/s beside TFLOP/s); blasdx also with C staged in shared
  memory and stored coalesced (``blasdx_shared_c_*``).

GPU time from CUDA events around back-to-back launches after a warm-up; results checked against
the float64 reference first. Also measured per case: the first compile of a Numba kernel using
the GEMM (cold blasdx disk cache; nvmath builds its LTO-IR with libmathdx) and a warm one (a new
kernel object after the in-memory caches are dropped: blasdx reads its disk cache).

Rows of ``benchmarks/results/numba_gemm.json``: {case, size, kind, blasdx_tflops, nvmath_tflops,
ratio (= blasdx / nvmath), ...}; nvmath fields are null where nvmath.device has no such GEMM
(bf16, tf32, fp8) or failed (the reason is kept).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

import blasdx as bx
from blasdx import dtypes as dt
from blasdx.reference import assert_close, random_operand, reference_gemm, tolerance

TYPES = {
    "f16->f32": (dt.float16, dt.float16, dt.float32),
    "f16->f16": (dt.float16, dt.float16, dt.float16),
    "bf16->f32": (dt.bfloat16, dt.bfloat16, dt.float32),
    "tf32->f32": (dt.tfloat32, dt.tfloat32, dt.float32),
    "f32": (dt.float32, dt.float32, dt.float32),
    "f64": (dt.float64, dt.float64, dt.float64),
    "int8->int32": (dt.int8, dt.int8, dt.int32),
    "e4m3->f32": (dt.float8_e4m3, dt.float8_e4m3, dt.float32),
}
SIZES = [(32, 32, 32), (64, 64, 64), (128, 128, 64), (128, 128, 128)]
QUICK = [("f16->f32", (64, 64, 64)), ("f16->f32", (128, 128, 64)), ("f64", (64, 64, 64)), ("f32", (64, 64, 64)),
         ("bf16->f32", (64, 64, 64)), ("int8->int32", (64, 64, 64)), ("e4m3->f32", (64, 64, 64)),
         ("f16->f32", (32, 32, 32)), ("tf32->f32", (64, 64, 64)), ("f16->f32", (128, 128, 128))]
#: numpy dtypes nvmath.device takes for a blasdx type (None: nvmath.device has no such GEMM)
NVMATH = {"float16": np.float16, "float32": np.float32, "float64": np.float64, "int8": np.int8, "int32": np.int32}
RESULTS = Path(__file__).resolve().parent / "results" / "numba_gemm.json"
ARRANGEMENT = (bx.row_major, bx.row_major, bx.row_major)


def bits(host: np.ndarray) -> np.ndarray:
    """What a Numba device array holds for ``host``: bf16 and fp8 as their bits."""
    if host.dtype.name == "bfloat16":
        return host.view(np.uint16)
    if host.dtype.itemsize == 1 and host.dtype.kind not in "iu":
        return host.view(np.uint8)
    return host


def descriptor(case: str, size, sm: int, kind: str) -> bx.Descriptor:
    """Row-major A, B, C with MaxAlignment; wgmma (sm_90a) on Hopper; compute-bound block size and padded
    shared-memory rows for the compute kind, as blasdx suggests them."""
    a, b, c = TYPES[case]
    desc = (bx.Size(*size) + bx.Precision(a, b, c) + bx.Function.MM + bx.Arrangement(*ARRANGEMENT)
            + bx.MaxAlignment + bx.SM(sm, arch_specific=sm == 90) + bx.Block())
    if kind == "compute":
        desc = desc + bx.Workload.compute_bound
        desc = desc + bx.LeadingDimension(*desc.suggested_leading_dimension)
    return desc


# ---------------------------------------------------------------------------------------------
# the kernels
# ---------------------------------------------------------------------------------------------


def blasdx_kernel(G, kind: str):  # noqa: N803 - the GEMM reads as a type
    from numba import cuda

    if kind == "compute":
        def compute(a, b, c, repeats):
            sA, sB, _ = G.shared_memory()
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
        sA, sB, _ = G.shared_memory()
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


def nvmath_kernel(MM, kind: str):  # noqa: N803
    from numba import cuda
    from nvmath.device.common import axpby, clear, copy, copy_fragment, copy_wait, make_tensor  # noqa: F401

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


def nvmath_shared_memory(MM) -> int:  # noqa: N803
    return int(MM.get_shared_storage_size_ab(MM.suggest_layout_smem_a(), MM.suggest_layout_smem_b()))


# ---------------------------------------------------------------------------------------------
# running and timing
# ---------------------------------------------------------------------------------------------


class Operands:
    """Host and device operands of one case and kind (the same data for both libraries)."""

    def __init__(self, case: str, size, kind: str, blocks: int, rng: np.random.Generator) -> None:
        from numba import cuda

        m, n, k = size
        a_t, b_t, c_t = TYPES[case]
        batch = 1 if kind == "compute" else blocks
        self.a = random_operand(a_t, (batch, m, k), rng)
        self.b = random_operand(b_t, (batch, k, n), rng)
        self.c_type = c_t
        self.blocks = blocks
        self.da = cuda.to_device(bits(self.a[0] if kind == "compute" else self.a))
        self.db = cuda.to_device(bits(self.b[0] if kind == "compute" else self.b))
        self.dc = cuda.device_array((blocks, m, n), dtype=bits(np.zeros(1, c_t.host_dtype)).dtype)

    def poison(self) -> None:
        self.dc.copy_to_device(np.full(self.dc.shape, 12345 if self.c_type.integral else np.nan, self.dc.dtype))

    def check(self, repeats: int, kind: str, case: str, what: str) -> None:
        got = self.dc.copy_to_host()
        pick = [0, self.blocks - 1]
        a, b, c = TYPES[case]
        for p in pick:
            ref = repeats * reference_gemm(self.a[0 if kind == "compute" else p], self.b[0 if kind == "compute" else p])
            assert_close(got[p].view(c.host_dtype) if got.dtype != c.host_dtype else got[p], ref,
                         tolerance(a, c, self.a.shape[-1] * repeats), what=what)


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


def first_launch_seconds(make, blocks: int, threads, smem: int, args: tuple) -> float:
    """Wall seconds of building a kernel object and its first launch (typing, codegen, link, load)."""
    from numba import cuda

    start = time.perf_counter()
    kernel = make()
    kernel[blocks, threads, 0, smem](*args)
    cuda.synchronize()
    return time.perf_counter() - start


def drop_blasdx_memory_caches() -> None:
    """Forget blasdx's in-process LTO-IR so that the next kernel reads the disk cache."""
    from blasdx.compile import ltoir as _ltoir
    from blasdx.fusion import numba_lowering as _lowering

    _ltoir._memory.clear()
    _ltoir._by_descriptor.clear()
    _lowering._ltoir_objects.clear()


def run_case(case: str, size, kind: str, sm: int, sms: int, repeats: int, rng) -> dict:
    import blasdx.numba  # noqa: F401

    m, n, k = size
    blocks = 4 * sms if kind == "compute" else max(1, int(1.5e9 // ((m * k + k * n) * TYPES[case][0].size)))
    reps = repeats if kind == "compute" else 1
    ops = Operands(case, size, kind, blocks, rng)
    row: dict = {"case": case, "size": "x".join(map(str, size)), "kind": kind, "blocks": blocks, "repeats": reps}
    flops = 2.0 * m * n * k * reps * blocks
    moved = (ops.a.nbytes + ops.b.nbytes) if kind == "batched" else 0
    moved += ops.dc.size * ops.dc.dtype.itemsize if kind == "batched" else 0

    G = descriptor(case, size, sm, kind)  # noqa: N806
    args = (ops.da, ops.db, ops.dc, np.int32(reps))
    row["blasdx_instruction"] = G.instruction
    row["blasdx_first_compile_s"] = first_launch_seconds(lambda: blasdx_kernel(G, kind), blocks, G.block_dim,
                                                         G.shared_memory_size, args)
    drop_blasdx_memory_caches()
    row["blasdx_warm_compile_s"] = first_launch_seconds(lambda: blasdx_kernel(G, kind), blocks, G.block_dim,
                                                        G.shared_memory_size, args)
    kernel = blasdx_kernel(G, kind)
    ops.poison()
    kernel[blocks, G.block_dim, 0, G.shared_memory_size](*args)
    ops.check(reps, kind, case, f"blasdx {case} {kind}")
    ms = time_kernel(kernel, blocks, G.block_dim, G.shared_memory_size, args, 3 if kind == "batched" else 2)
    row["blasdx_ms"], row["blasdx_tflops"] = ms, flops / ms / 1e9
    if moved:
        row["blasdx_gbps"] = moved / ms / 1e6
    if kind == "batched":  # the same problem with C staged in shared memory and stored coalesced
        kernel = blasdx_kernel(G, "batched-shared")
        ops.poison()
        kernel[blocks, G.block_dim, 0, G.shared_memory_size](*args)
        ops.check(reps, kind, case, f"blasdx {case} batched, C through shared memory")
        ms_shared = time_kernel(kernel, blocks, G.block_dim, G.shared_memory_size, args, 3)
        row["blasdx_shared_c_tflops"] = flops / ms_shared / 1e9
        row["blasdx_shared_c_gbps"] = moved / ms_shared / 1e6

    row.update(nvmath_tflops=None, ratio=None)
    try:
        from numba import cuda

        start = time.perf_counter()  # the first compile counts nvmath's Matmul build (libmathdx) too
        MM = nvmath_gemm(case, size, sm)  # noqa: N806
        smem, threads = nvmath_shared_memory(MM), MM.block_dim
        first = nvmath_kernel(MM, kind)
        first[blocks, threads, 0, smem](*args)
        cuda.synchronize()
        row["nvmath_first_compile_s"] = time.perf_counter() - start
        row["nvmath_warm_compile_s"] = first_launch_seconds(lambda: nvmath_kernel(MM, kind), blocks, threads,
                                                            smem, args)
        kernel = nvmath_kernel(MM, kind)
        ops.poison()
        kernel[blocks, threads, 0, smem](*args)
        ops.check(reps, kind, case, f"nvmath {case} {kind}")
        ms = time_kernel(kernel, blocks, threads, smem, args, 3 if kind == "batched" else 2)
        row["nvmath_ms"], row["nvmath_tflops"] = ms, flops / ms / 1e9
        row["nvmath_block_dim"] = list(threads)
        if moved:
            row["nvmath_gbps"] = moved / ms / 1e6
        row["ratio"] = row["blasdx_tflops"] / row["nvmath_tflops"]
    except Exception as exc:  # noqa: BLE001 - the reason becomes part of the result
        row["nvmath_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return row


def fmt(value, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the short case list (GPU jobs)")
    parser.add_argument("--cases", nargs="*", default=list(TYPES))
    parser.add_argument("--sizes", nargs="*", default=["x".join(map(str, s)) for s in SIZES])
    parser.add_argument("--kinds", nargs="*", default=["compute", "batched"])
    parser.add_argument("--repeats", type=int, default=400, help="GEMMs per block in the compute kind")
    parser.add_argument("--budget", type=float, default=None, help="seconds: start no case after this")
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    begin = time.perf_counter()
    os.environ["BLASDX_CACHE_DIR"] = tempfile.mkdtemp(prefix="blasdx-numba-bench-")  # first compiles start cold
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
    cases = QUICK if args.quick else [(c, tuple(int(x) for x in s.split("x"))) for c in args.cases for s in args.sizes]
    rng = np.random.default_rng(5)
    rows: list[dict] = []
    header = f"{'case':<12} {'size':<12} {'kind':<8} {'blasdx':>9} {'nvmath':>9} {'ratio':>6}  first/warm compile s"
    print(f"{device.name.decode() if isinstance(device.name, bytes) else device.name}, sm_{sm}, {sms} SMs; "
          "TFLOP/s (GPU time)\n" + header)
    for case, size in cases:
        for kind in args.kinds:
            if args.budget is not None and time.perf_counter() - begin > args.budget:
                print(f"out of time budget ({args.budget:.0f} s): stopped before {case} {size} {kind}")
                break
            if dt.find_combination(*TYPES[case], False).min_sm > sm:
                continue
            try:
                row = run_case(case, size, kind, sm, sms, args.repeats, rng)
            except Exception as exc:  # noqa: BLE001 - one failing case must not hide the others
                row = {"case": case, "size": "x".join(map(str, size)), "kind": kind, "blasdx_tflops": None,
                       "nvmath_tflops": None, "ratio": None, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            rows.append(row)
            compile_text = (f"blasdx {fmt(row.get('blasdx_first_compile_s'), '.2f')}/"
                            f"{fmt(row.get('blasdx_warm_compile_s'), '.2f')}  nvmath "
                            f"{fmt(row.get('nvmath_first_compile_s'), '.2f')}/{fmt(row.get('nvmath_warm_compile_s'), '.2f')}")
            print(f"{case:<12} {row['size']:<12} {kind:<8} {fmt(row.get('blasdx_tflops')):>9} "
                  f"{fmt(row.get('nvmath_tflops')):>9} {fmt(row.get('ratio'), '.2f'):>6}  {compile_text}"
                  + (f"  [{row['error']}]" if "error" in row else "")
                  + (f"  [nvmath: {row['nvmath_error'][:90]}]" if "nvmath_error" in row else ""), flush=True)
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"date": str(date.today()), "device": str(device.name), "sm": sm,
                                             "rows": rows}, indent=1, default=str))
    both = [r["ratio"] for r in rows if r.get("ratio")]
    if both:
        print(f"cases both run: {len(both)}, blasdx >= nvmath in {sum(r >= 1.0 for r in both)}, "
              f"min ratio {min(both):.2f}, geomean {float(np.exp(np.mean(np.log(both)))):.2f}")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

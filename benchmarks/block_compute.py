"""Block GEMM throughput with operands already in shared memory: blasdx (fusion API) against cuBLASDx.

    python benchmarks/block_compute.py [--cases f16-f32 ...] [--sizes 64x64x64 ...] [--repeats N] [--json PATH]
    python benchmarks/block_compute.py --compile-only [--sm 90]     # NVRTC only, no GPU needed

Each block loads one A and one B into shared memory once, then accumulates A B ``repeats``
times with the register API and stores the accumulator: the time is the block's own
tensor-core (or FMA) work, with no global-memory traffic to hide. The grid is the SM count
times as many blocks as fit on an SM, per competitor. blasdx runs a kernel of its public
fusion API (``blasdx.compile_kernel``; ``Workload.compute_bound``, the descriptor's
suggested block dim for it and suggested leading dimensions); cuBLASDx the harness's
block-compute kernel (its suggested block dim and
shared-memory layouts). Both results are checked against the float64 reference first.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import blasdx as bx  # noqa: E402
import cublasdx_harness as dx  # noqa: E402
from batched import (  # noqa: E402
    SIZES, TYPES, _host, descriptor, gpu_sm, pyplot, random_tensor, say_unbuilt, time_ms, torch_dtype,
)
from blasdx.base import dtypes as dt  # noqa: E402
from blasdx.reference import assert_close, reference_gemm, tolerance  # noqa: E402
from report import case_labels, save_plot  # noqa: E402

SOURCE = r"""
extern "C" __global__ void __launch_bounds__(GEMM::max_threads_per_block, 1)
block_compute(const GEMM::a_value_type* a, const GEMM::b_value_type* b, GEMM::c_value_type* c, int repeats) {
    extern __shared__ __align__(16) unsigned char smem[];
    auto [sA, sB] = GEMM::slice_shared_memory_ab(smem);
    GEMM::load_a<GEMM::a_inner>(a, sA);   // tight row-major A and B in global memory
    GEMM::load_b<GEMM::b_inner>(b, sB);
    GEMM::copy_wait();
    auto acc = GEMM::execute(sA, sB);
    for (int r = 1; r < repeats; ++r) {
        GEMM::execute(sA, sB, acc);       // acc += A B
    }
    acc.store(c + blockIdx.x * static_cast<long long>(GEMM::m * GEMM::n), GEMM::c_inner);
}
"""
CHECK_REPEATS = 3  # the check run accumulates a few times: C = 3 A B
TIMED_RUNS = 10


def block_descriptor(name: str, size, sm: int, arch_specific: bool) -> bx.Descriptor:
    """The batched benchmark's descriptor for compute-bound use (``Workload.compute_bound``: the
    suggested block size of fusion) with blasdx's suggested (padded) shared-memory leading dimensions."""
    desc = descriptor(name, size, sm, arch_specific) + bx.Workload.compute_bound
    return desc + bx.LeadingDimension(*desc.suggested_leading_dimension)


def compile_blasdx(desc: bx.Descriptor) -> bx.FusedKernel:
    """The fusion kernel of one descriptor (A and B in shared memory, C in registers)."""
    return bx.compile_kernel(SOURCE, "block_compute", {"GEMM": desc}, shared_memory=desc.shared_memory_size_ab)


def auto_repeats(size, gflop_per_block: float) -> int:
    """GEMMs per block so that each block does about ``gflop_per_block`` GFLOP (16 to 20000)."""
    m, n, k = size
    return int(min(20000, max(16, round(gflop_per_block * 1e9 / (2 * m * n * k)))))


def check(name: str, size, got, ref, accumulator, what: str, instruction: str | None = None) -> str:
    """First and last block's C against ``ref`` (= CHECK_REPEATS A B): "ok" or what is wrong (printed).

    The tolerance is that of the path taken (``instruction``): fp8 sums kept in wgmma's
    accumulator carry fewer bits than mma.sync's (blasdx.reference.tolerance says how many)."""
    ta, _, tc = TYPES[name]
    tol = tolerance(ta, tc, CHECK_REPEATS * size[2], accumulator, instruction)
    try:
        for block in (0, got.shape[0] - 1):
            label = f"{what} {name} {'x'.join(map(str, size))} block {block}"
            assert_close(_host(got[block], tc), ref, tol, what=label)
    except AssertionError as exc:
        print(f"CHECK FAILED: {exc}", flush=True)
        return f"wrong result: {exc}"
    return "ok"


def run_blasdx(name: str, size, a, b, ref, sms: int, repeats: int, args: argparse.Namespace, sm: int) -> dict:
    """blasdx's fusion kernel: checked, then timed on SMs x occupancy blocks."""
    import torch

    desc = block_descriptor(name, size, sm, args.arch_specific)
    start = time.perf_counter()
    try:
        kernel = compile_blasdx(desc)
    except bx.BlasdxError as exc:
        print(f"blasdx FAILED: {str(exc).splitlines()[0]}", flush=True)
        return {"blasdx_threads": int(np.prod(desc.block_dim)), "blasdx_blocks_per_sm": 0, "blasdx_registers": 0,
                "blasdx_check": f"error: {type(exc).__name__}: {str(exc).splitlines()[0]}"}
    compile_s = time.perf_counter() - start
    occupancy = kernel.max_active_blocks_per_sm()
    blocks = sms * max(1, occupancy)
    c = torch.empty((blocks, *size[:2]), device="cuda", dtype=torch_dtype(TYPES[name][2]))
    kernel.launch(blocks, (a, b, c, CHECK_REPEATS))
    torch.cuda.synchronize()
    row = {"blasdx_threads": int(np.prod(desc.block_dim)), "blasdx_blocks_per_sm": occupancy,
           "blasdx_shared_memory": kernel.shared_memory, "blasdx_registers": kernel.registers,
           "blasdx_local_memory": kernel.local_memory, "blasdx_compile_s": round(compile_s, 3),
           "blasdx_leading_dimension": list(desc.leading_dimension),
           "blasdx_check": check(name, size, c, ref, desc.accumulator_type, "blasdx", desc.instruction)}
    if row["blasdx_check"] == "ok":
        ms = time_ms(lambda: kernel.launch(blocks, (a, b, c, repeats)), TIMED_RUNS)
        row.update(blasdx_ms=ms, blasdx_tflops=2.0 * np.prod(size) * repeats * blocks / ms / 1e9)
    return row


def run_cublasdx(name: str, size, a, b, ref, sms: int, repeats: int, build_dir: Path) -> dict:
    """cuBLASDx's block-compute kernel, same data and rules; a note when its library is missing."""
    import torch

    case, why = dx.load_case(name, size, build_dir)
    if case is None:
        return {"cublasdx_note": why}
    tc = TYPES[name][2]
    try:
        occupancy = case.max_active_blocks("compute")
        blocks = sms * max(1, occupancy)
        c = torch.empty((blocks, *size[:2]), device="cuda", dtype=torch_dtype(tc))
        case.block_compute(a, b, c, CHECK_REPEATS, blocks)
        torch.cuda.synchronize()
    except RuntimeError as exc:
        print(f"cuBLASDx failed: {exc}", flush=True)
        return {"cublasdx_note": str(exc)}
    row = {"cublasdx_threads": case.threads, "cublasdx_blocks_per_sm": occupancy,
           "cublasdx_shared_memory": case.shared_memory("compute"),
           "cublasdx_check": check(name, size, c, ref, dt.float16 if tc == dt.float16 else None, "cuBLASDx")}
    if row["cublasdx_check"] == "ok":
        ms = time_ms(lambda: case.block_compute(a, b, c, repeats, blocks), TIMED_RUNS)
        row.update(cublasdx_ms=ms, cublasdx_tflops=2.0 * np.prod(size) * repeats * blocks / ms / 1e9)
    return row


def run_case(name: str, size, args: argparse.Namespace, sm: int, sms: int, gen) -> dict | None:
    """Both competitors on one case; None when blasdx does not support it."""
    if not descriptor(name, size, sm, args.arch_specific).is_supported:
        return None
    ta, tb, _ = TYPES[name]
    m, n, k = size
    a = random_tensor(ta, (m, k), gen)
    b = random_tensor(tb, (k, n), gen)
    ref = CHECK_REPEATS * reference_gemm(_host(a, ta), _host(b, tb))
    repeats = args.repeats or auto_repeats(size, args.gflop_per_block)
    row = {"case": name, "size": list(size), "repeats": repeats}
    row.update(run_blasdx(name, size, a, b, ref, sms, repeats, args, sm))
    row.update(run_cublasdx(name, size, a, b, ref, sms, repeats, args.build_dir))
    if "cublasdx_tflops" in row and "blasdx_tflops" in row:
        row["ratio_vs_cublasdx"] = row["blasdx_tflops"] / row["cublasdx_tflops"]  # > 1: blasdx faster
    return row


def compile_only(args: argparse.Namespace) -> int:
    """Compile every selected blasdx kernel with NVRTC (no GPU); print registers and spills."""
    arch_specific = args.sm == 90 if args.arch_specific is None else args.arch_specific
    failures = 0
    for name, size in cases_of(args):
        desc = block_descriptor(name, size, args.sm, arch_specific)
        if not desc.is_supported:
            print(f"{name:12s} {'x'.join(map(str, size)):12s} not supported by blasdx")
            continue
        start = time.perf_counter()
        try:
            kernel = compile_blasdx(desc)
        except bx.CompileError as exc:
            failures += 1
            print(f"{name:12s} {'x'.join(map(str, size)):12s} FAILED: {str(exc).splitlines()[0]}")
            continue
        print(f"{name:12s} {'x'.join(map(str, size)):12s} {kernel.arch} {desc.block_dim[0]:4d} threads "
              f"{kernel.registers:3d} registers, {kernel.local_memory} B spilled, "
              f"{kernel.shared_memory} B smem, {time.perf_counter() - start:.2f} s")
    return 1 if failures else 0


def cases_of(args: argparse.Namespace) -> list[tuple[str, tuple[int, int, int]]]:
    """(name, size) pairs the filters select."""
    try:
        return dx.select_cases(args.cases, args.sizes or SIZES)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="*", default=None, help=dx.CASES_HELP)
    parser.add_argument("--sizes", nargs="*", type=dx.parse_size, default=None, help="MxNxK sizes (default all)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="GEMMs per block (default: about --gflop-per-block of work, 16 to 20000)")
    parser.add_argument("--gflop-per-block", type=float, default=0.5)
    parser.add_argument("--arch-specific", action=argparse.BooleanOptionalAction, default=None,
                        help="blasdx descriptors for sm_90a on Hopper, as cuBLASDx is built (default: on for SM 90)")
    parser.add_argument("--build-dir", type=Path, default=dx.DEFAULT_BUILD_DIR, help="cuBLASDx libraries")
    parser.add_argument("--json", default="benchmarks/results/block_compute.json")
    parser.add_argument("--compile-only", action="store_true", help="only compile the blasdx kernels (no GPU)")
    parser.add_argument("--sm", type=int, default=90, help="target of --compile-only (default 90)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compile_only:
        return compile_only(args)
    cases = cases_of(args)
    sm = gpu_sm(args)
    if sm is None:
        return 0
    import torch

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    say_unbuilt([c for c in cases if dx.availability(*c, args.build_dir) == "not built"], cases, args.build_dir)
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for name, size in cases:
        row = run_case(name, size, args, sm, sms, gen)
        if row is not None:
            rows.append(row)
            print(_line(row), flush=True)
    print(f"\ndevice {torch.cuda.get_device_name()}, {sms} SMs, grid = SMs x blocks per SM")
    print(_table(rows))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "sms": sms,
            "torch": torch.__version__, "blasdx": bx.__version__, "blasdx_arch_specific": args.arch_specific,
            "cublasdx": "cuBLASDx 0.4 (nvidia-mathdx 25.6), nvcc, sm_90a", "timed_runs": TIMED_RUNS,
            "ratio": "blasdx TFLOP/s / cuBLASDx TFLOP/s (> 1: blasdx faster)"}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"JSON: {out}")
    _plot(rows, out.with_suffix(".png"))
    wrong = [f"{r['case']} {r['size']} {who}" for r in rows for who in ("blasdx", "cublasdx")
             if r.get(f"{who}_check", "ok") != "ok"]
    if wrong:
        print(f"wrong results (not timed): {', '.join(wrong)}")
    return 1 if wrong else 0


def _status(r: dict, who: str) -> str:
    """Why a competitor has no figure: a wrong result, its note, or n/a."""
    check = r.get(f"{who}_check", "ok")
    if check != "ok":
        return "ERROR" if check.startswith("error") else "WRONG"
    return r.get(f"{who}_note", "n/a")


def _part(r: dict, who: str, label: str) -> str:
    if f"{who}_tflops" not in r:
        return f"{label} {_status(r, who)}"
    return (f"{label} {r[f'{who}_tflops']:7.1f} TF/s ({r[f'{who}_threads']} thr x "
            f"{r[f'{who}_blocks_per_sm']}/SM)")


def _line(r: dict) -> str:
    size = "x".join(map(str, r["size"]))
    ratio = f"  ratio {r['ratio_vs_cublasdx']:.2f}" if "ratio_vs_cublasdx" in r else ""
    return (f"{r['case']:12s} {size:12s} x{r['repeats']:<6d} {_part(r, 'blasdx', 'blasdx')}  "
            f"{_part(r, 'cublasdx', 'cuBLASDx')}{ratio}")


def _table(rows: list[dict]) -> str:
    head = ("| case | M x N x K | repeats | blasdx threads | blocks/SM | regs | TFLOP/s | cuBLASDx threads | "
            "blocks/SM | TFLOP/s | blasdx / cuBLASDx |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        if "cublasdx_threads" in r:
            theirs = [str(r["cublasdx_threads"]), str(r["cublasdx_blocks_per_sm"]),
                      f"{r['cublasdx_tflops']:.1f}" if "cublasdx_tflops" in r else _status(r, "cublasdx")]
        else:
            theirs = [_status(r, "cublasdx"), "", ""]
        ours = f"{r['blasdx_tflops']:.1f}" if "blasdx_tflops" in r else _status(r, "blasdx")
        ratio = f"{r['ratio_vs_cublasdx']:.2f}" if "ratio_vs_cublasdx" in r else "n/a"
        cells = [r["case"], "x".join(map(str, r["size"])), str(r["repeats"]), str(r["blasdx_threads"]),
                 str(r["blasdx_blocks_per_sm"]), str(r["blasdx_registers"]), ours, *theirs, ratio]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _plot(rows: list[dict], path: Path) -> None:
    """TFLOP/s bars per case, blasdx and cuBLASDx side by side (log scale: FMA and tensor-core cases differ 50x)."""
    plt = pyplot()
    if plt is None or not rows:
        return
    labels = case_labels(rows)
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(10, len(rows) * 0.5), 5))
    ax.bar(x - 0.2, [r.get("blasdx_tflops", 0) for r in rows], 0.4, label="blasdx (fusion API)")
    ax.bar(x + 0.2, [r.get("cublasdx_tflops", 0) for r in rows], 0.4, label="cuBLASDx 0.4")
    ax.set_yscale("log")
    ax.set_ylabel("TFLOP/s (operands in shared memory)")
    ax.set_xticks(x, labels, rotation=90, fontsize=7)
    ax.legend()
    save_plot(plt, fig, path)


if __name__ == "__main__":
    sys.exit(main())

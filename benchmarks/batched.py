"""Batched small GEMMs, one problem per block: blasdx execute() against cuBLASDx and cuBLAS strided batched.

    python benchmarks/batched.py [--gbytes 2] [--cases f16-f32 ...] [--sizes 64x64x64 ...] [--beta B] [--json PATH]

About ``--gbytes`` of operands per case so that L2 does not help; every competitor runs in
this process on the same A and B, and every result is checked against the float64
reference on a sample of problems before it is timed. cuBLASDx runs from the libraries
that ``benchmarks/cublasdx_harness.py build`` makes (absent ones are reported as not
built); cuBLAS through ``torch.bmm``. Prints a table (GB/s counts A and B read, C read when
beta != 0, C written; TFLOP/s; % of the measured copy bandwidth), writes JSON and, with
matplotlib, a PNG.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cublasdx_harness as dx  # noqa: E402
from report import case_labels, cell, save_plot  # noqa: E402
from timing import time_ms  # noqa: E402  (the benchmarks' one CUDA-event timer, imported from here by the others)

import blasdx as bx  # noqa: E402
from blasdx.base import dtypes as dt  # noqa: E402
from blasdx.reference import assert_close, reference_gemm, relative_error, tolerance  # noqa: E402

# (name, A, B, C); every case runs at each size of SIZES that fits one block.
TYPES = {
    "f16->f32": (dt.float16, dt.float16, dt.float32),
    "f16->f16": (dt.float16, dt.float16, dt.float16),
    "bf16->f32": (dt.bfloat16, dt.bfloat16, dt.float32),
    "tf32->f32": (dt.tfloat32, dt.tfloat32, dt.float32),
    "f32": (dt.float32, dt.float32, dt.float32),
    "f64": (dt.float64, dt.float64, dt.float64),
    "int8->int32": (dt.int8, dt.int8, dt.int32),
    "e4m3->f32": (dt.float8_e4m3, dt.float8_e4m3, dt.float32),
    "3xtf32->f32": (dt.float32, dt.float32, dt.float32),
}
#: Cases whose descriptor states MantissaBits: float32 inputs at float32 accuracy as three tf32
#: products on mma.sync (blasdx only; cuBLAS runs them as plain float32, torch.bmm).
MANTISSA_BITS = {"3xtf32->f32": 23}
SIZES = [(32, 32, 32), (64, 64, 64), (128, 128, 64), (128, 128, 128), (48, 80, 24), (100, 100, 100)]
COMPETITORS = ("blasdx", "cublasdx", "cublas")
LABELS = {"blasdx": "blasdx", "cublasdx": "cuBLASDx", "cublas": "cuBLAS (torch.bmm)"}


def torch_dtype(t: dt.DType):
    import torch

    return {
        "float16": torch.float16, "bfloat16": torch.bfloat16, "tfloat32": torch.float32, "float32": torch.float32,
        "float64": torch.float64, "int8": torch.int8, "int32": torch.int32, "float8_e4m3": torch.float8_e4m3fn,
    }[t.name]


def random_tensor(t: dt.DType, shape, gen):
    import torch

    if t.integral:
        return torch.randint(-100, 100, shape, device="cuda", dtype=torch.int8, generator=gen)
    x = torch.randn(shape, device="cuda", generator=gen)
    return x.to(torch_dtype(t))


def cuda_sm() -> int | None:
    """The GPU's SM (90, 80, ...), or None after saying why the benchmark is skipped (no torch or GPU)."""
    try:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("no GPU")
    except Exception as exc:
        print(f"skipped: needs PyTorch with a CUDA GPU ({exc})")
        return None
    major, minor = torch.cuda.get_device_capability()
    return 10 * major + minor


def gpu_sm(args: argparse.Namespace) -> int | None:
    """cuda_sm(), with ``args.arch_specific`` (--arch-specific) defaulting to on for SM 90 once there is a GPU."""
    sm = cuda_sm()
    if sm is not None and args.arch_specific is None:
        args.arch_specific = sm == 90
    return sm


def say_unbuilt(missing: list, cases: list, build_dir: Path) -> None:
    """Say for how many cases cuBLASDx is not built, and how to build it (nothing when all are)."""
    if missing:
        print(f"cuBLASDx: not built for {len(missing)} of {len(cases)} cases ({build_dir}); "
              "build with `python benchmarks/cublasdx_harness.py build`")


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (said once) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return None
    return plt


def write_record(path: str, **fields: Any) -> None:
    """Write ``fields`` with today's date and the GPU's name as JSON at ``path`` (folders made as needed)."""
    from datetime import date

    import torch

    record = {"date": date.today().isoformat(), "device": torch.cuda.get_device_name(), **fields}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=1))
    print(f"wrote {path}")


def emulation_parser(description: str, name: str, sizes: list[int], wide_exponent: int) -> argparse.ArgumentParser:
    """The emulated-GEMM benchmarks' command line: --sizes (default ``sizes``), --wide-range (operands over
    2^-wide_exponent .. 2^wide_exponent), --accuracy and --json (default benchmarks/results/<name>.json)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--sizes", nargs="*", type=int, default=sizes)
    parser.add_argument("--wide-range", action="store_true",
                        help=f"also operands over 2^-{wide_exponent} .. 2^{wide_exponent}")
    parser.add_argument("--accuracy", nargs="*", type=int, default=None, metavar="K",
                        help="only the errors of 256 x 256 x K products")
    parser.add_argument("--json", default=f"benchmarks/results/{name}.json")
    return parser


def descriptor(name: str, size, sm: int, arch_specific: bool) -> bx.Descriptor:
    """The blasdx descriptor of a case: row-major A, B, C, MaxAlignment, the device's SM."""
    ta, tb, tc = TYPES[name]
    desc = (bx.Size(*size) + bx.Precision(ta, tb, tc) + bx.Function.MM
            + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + bx.MaxAlignment
            + bx.SM(sm, arch_specific=arch_specific) + bx.Block())
    return desc + bx.MantissaBits(MANTISSA_BITS[name]) if name in MANTISSA_BITS else desc


def cublas_call(a, b, c, name: str):
    """The cuBLAS strided-batched call closest to the case, or None where cuBLAS has none."""
    import torch

    if name in ("int8->int32", "e4m3->f32"):
        return None  # cuBLAS exposes no batched int8 / fp8 GEMM through torch
    torch.backends.cuda.matmul.allow_tf32 = name == "tf32->f32"
    if a.dtype != c.dtype:  # f16/bf16 inputs with f32 output
        try:
            torch.bmm(a[:1], b[:1], out_dtype=c.dtype)
            return lambda: torch.bmm(a, b, out_dtype=c.dtype)
        except (TypeError, RuntimeError):
            return lambda: torch.bmm(a, b)  # C in the input type: fewer bytes written than blasdx
    return lambda: torch.bmm(a, b, out=c)


def _host(t, value: dt.DType) -> np.ndarray:
    import torch

    t = t.detach().cpu()
    if value.name in ("bfloat16", "float8_e4m3"):
        return t.to(torch.float64).numpy()
    return t.numpy()


def checked(row: dict, who: str, got: np.ndarray, ref: np.ndarray, tol: float, what: str) -> bool:
    """Compare with the reference; a mismatch is noted in the row and printed, and the competitor is not timed."""
    row[f"{who}_error"] = relative_error(got, ref)
    try:
        assert_close(got, ref, tol, what=what)
    except AssertionError as exc:
        row[f"{who}_check"] = f"wrong result: {exc}"
        print(f"CHECK FAILED: {exc}", flush=True)
        return False
    row[f"{who}_check"] = "ok"
    return True


def _figures(row: dict, who: str, ms: float, moved: float, flops: float, roof: float) -> None:
    """Time, GB/s, TFLOP/s and fraction of copy bandwidth of one competitor, into ``row``."""
    gbs = moved / ms / 1e6
    row.update({f"{who}_ms": ms, f"{who}_gbs": gbs, f"{who}_tflops": flops / ms / 1e9,
                f"{who}_copy_fraction": gbs / roof})


def run_case(name: str, size, args: argparse.Namespace, sm: int, roof: float, gen) -> dict | None:
    """Every competitor on one case, each checked on a sample then timed; None if blasdx does not support it."""
    import torch

    ta, tb, tc = TYPES[name]
    m, n, k = size
    desc = descriptor(name, size, sm, args.arch_specific)
    if not desc.is_supported:
        return None
    beta = scalar_beta(args.beta, tc)
    per_problem = m * k * ta.size + k * n * tb.size + m * n * tc.size * (2 if beta else 1)  # C read when beta != 0
    batch = max(1, int(args.gbytes * 1e9 // per_problem))
    a = random_tensor(ta, (batch, m, k), gen)
    b = random_tensor(tb, (batch, k, n), gen)
    c0 = random_tensor(tc, (batch, m, n), gen).to(torch_dtype(tc)) if beta else None
    c = c0.clone() if beta else torch.empty((batch, m, n), device="cuda", dtype=torch_dtype(tc))
    pick = torch.randint(0, batch, (64,), generator=gen, device="cuda")
    ref = reference_gemm(_host(a[pick], ta), _host(b[pick], tb), _host(c0[pick], tc) if beta else None, 1, beta)
    flops = 2.0 * m * n * k * batch
    row = {"case": name, "size": list(size), "batch": batch, "flops": flops, "bytes": batch * per_problem,
           "instruction": desc.instruction, "block_dim": desc.block_dim[0], "beta": beta}
    tol = tolerance(ta, tc, k, desc.accumulator_type, desc.instruction, scheme=desc.scheme.name)
    label = f"blasdx {name} {size}"
    row["scheme"] = str(desc.scheme)
    if _blasdx_ran(row, desc, a, b, c, beta) and checked(row, "blasdx", _host(c[pick], tc), ref, tol, label):
        _figures(row, "blasdx", time_ms(lambda: desc.execute(a, b, c, beta=beta)), batch * per_problem, flops, roof)

    _run_cublasdx(row, name, size, a, b, c0, ref, pick, args.build_dir, roof)
    if beta:
        row["cublas_note"] = "not run with beta != 0"
    else:
        _run_cublas(row, name, size, a, b, ref, pick, desc, roof)
    for who in ("cublasdx", "cublas"):
        if f"{who}_ms" in row and "blasdx_ms" in row:
            row[f"ratio_vs_{who}"] = row[f"{who}_ms"] / row["blasdx_ms"]  # > 1: blasdx faster
    return row


def scalar_beta(beta: float, c_type: dt.DType) -> float | int:
    """The beta the cases run with: ``--beta`` as it is, 1 for integer C when it is not 0 (integer
    GEMMs take integer scalars)."""
    if c_type.integral:
        return 1 if beta else 0
    return beta


def _blasdx_ran(row: dict, desc: bx.Descriptor, a, b, c, beta: float | int = 0) -> bool:
    """Compile (timed) and run blasdx once; a blasdx error is noted in the row and printed, not raised."""
    import torch

    start = time.perf_counter()
    try:
        desc.compile()
        row["compile_s"] = round(time.perf_counter() - start, 3)
        desc.execute(a, b, c, beta=beta)
        torch.cuda.synchronize()
    except bx.BlasdxError as exc:
        row["blasdx_check"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0]}"
        print(f"blasdx FAILED: {row['blasdx_check']}", flush=True)
        return False
    return True


def _run_cublasdx(row: dict, name: str, size, a, b, c0, ref, pick, build_dir: Path, roof: float) -> None:
    """cuBLASDx's batched kernel on the same A and B (and C0 when beta != 0), into its own C; notes why
    when it cannot run."""
    import torch

    if name not in dx.TYPES:
        row["cublasdx_note"] = "no such case in the cuBLASDx harness"
        return
    case, why = dx.load_case(name, size, build_dir)
    if case is None:
        row["cublasdx_note"] = why
        return
    ta, tb, tc = TYPES[name]
    m, n, k = size
    beta = row["beta"]
    c = c0.clone() if beta else torch.empty((a.shape[0], m, n), device="cuda", dtype=torch_dtype(tc))
    row.update(cublasdx_block_dim=case.threads, cublasdx_shared_memory=case.shared_memory("batched"))
    try:
        case.batched(a, b, c, beta=beta)
        torch.cuda.synchronize()
    except RuntimeError as exc:
        row["cublasdx_note"] = str(exc)
        print(f"cuBLASDx failed: {exc}", flush=True)
        return
    accumulator = dt.float16 if tc == dt.float16 else None  # cuBLASDx accumulates in C's type
    if checked(row, "cublasdx", _host(c[pick], tc), ref, tolerance(ta, tc, k, accumulator), f"cuBLASDx {name} {size}"):
        moved = a.shape[0] * (m * k * ta.size + k * n * tb.size + m * n * tc.size * (2 if beta else 1))
        _figures(row, "cublasdx", time_ms(lambda: case.batched(a, b, c, beta=beta)), moved, row["flops"], roof)


def _run_cublas(row: dict, name: str, size, a, b, ref, pick, desc: bx.Descriptor, roof: float) -> None:
    """torch.bmm (cuBLAS strided batched) where cuBLAS has the types; its C may be in the input type."""
    import torch

    ta, tb, tc = TYPES[name]
    m, n, k = size
    c = torch.empty((a.shape[0], m, n), device="cuda", dtype=torch_dtype(tc))
    call = cublas_call(a, b, c, name)
    if call is None:
        row["cublas_note"] = "no batched cuBLAS call for these types in torch"
        return
    check = call()
    narrowed = check.dtype != c.dtype
    sample = check[pick].to(torch_dtype(tc)) if narrowed else check[pick]
    tol = tolerance(ta, tc, k, desc.accumulator_type) + (2e-3 if narrowed else 0)
    ok = checked(row, "cublas", _host(sample, tc), ref, tol, f"cuBLAS {name} {size}")
    moved = a.shape[0] * (m * k * ta.size + k * n * tb.size + m * n * check.element_size())
    row["cublas_out"] = str(check.dtype).replace("torch.", "")
    del check
    if ok:
        _figures(row, "cublas", time_ms(call), moved, row["flops"], roof)


def copy_bandwidth(gbytes: float) -> float:
    """Device-to-device copy, GB/s counting read + write: the roofline of these cases."""
    import torch

    x = torch.empty(int(gbytes * 1e9 / 2), dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = time_ms(lambda: y.copy_(x))
    return 2 * x.numel() / ms / 1e6


def cases_of(args: argparse.Namespace) -> list[tuple[str, tuple[int, int, int]]]:
    """(name, size) pairs the filters select."""
    own = [dx.case_name(n) for n in args.cases or () if dx.case_name(n) in MANTISSA_BITS]
    harness = [n for n in args.cases or () if dx.case_name(n) not in MANTISSA_BITS]
    try:
        cases = dx.select_cases(harness, args.sizes or SIZES) if harness or not args.cases else []
    except ValueError as exc:
        raise SystemExit(f"{exc}, {', '.join(MANTISSA_BITS)}") from None
    return cases + [(n, s) for n in (own if args.cases else MANTISSA_BITS) for s in (args.sizes or SIZES)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gbytes", type=float, default=2.0, help="operand bytes per case (default 2 GB)")
    parser.add_argument("--cases", nargs="*", default=None, help=dx.CASES_HELP)
    parser.add_argument("--sizes", nargs="*", type=dx.parse_size, default=None, help="MxNxK sizes (default all)")
    parser.add_argument("--arch-specific", action=argparse.BooleanOptionalAction, default=None,
                        help="blasdx for sm_90a on Hopper, as cuBLASDx is built (default: on for SM 90)")
    parser.add_argument("--build-dir", type=Path, default=dx.DEFAULT_BUILD_DIR, help="cuBLASDx libraries")
    parser.add_argument("--json", default="benchmarks/results/batched.json")
    parser.add_argument("--beta", type=float, default=0.0,
                        help="C = A B + beta C (default 0: C only written; integer C takes 1 for any non-zero "
                             "beta); cuBLAS runs only with beta 0")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = cases_of(args)
    sm = gpu_sm(args)
    if sm is None:
        return 0
    import torch

    missing = [f"{n} {'x'.join(map(str, s))}" for n, s in cases
               if n in dx.TYPES and dx.availability(n, s, args.build_dir) == "not built"]
    say_unbuilt(missing, cases, args.build_dir)
    gen = torch.Generator(device="cuda").manual_seed(0)
    roof = copy_bandwidth(args.gbytes)
    rows = []
    for name, size in cases:
        row = run_case(name, size, args, sm, roof, gen)
        torch.cuda.empty_cache()  # this case's operands are gone
        if row is not None:
            rows.append(row)
            print(_line(row), flush=True)
    print(f"\ndevice {torch.cuda.get_device_name()}, copy bandwidth {roof:.0f} GB/s, "
          f"blasdx for sm_{sm}{'a' if args.arch_specific else ''}")
    print(_table(rows))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "copy_gbs": roof,
            "torch": torch.__version__, "blasdx": bx.__version__, "blasdx_arch_specific": args.arch_specific,
            "cublasdx": "cuBLASDx 0.4 (nvidia-mathdx 25.6), nvcc, sm_90a", "gbytes": args.gbytes, "beta": args.beta,
            "ratio": "competitor time / blasdx time (> 1: blasdx faster)"}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"JSON: {out}")
    _plot(rows, roof, out.with_suffix(".png"))
    wrong = [f"{r['case']} {r['size']} {who}" for r in rows for who in COMPETITORS
             if r.get(f"{who}_check", "ok") != "ok"]
    if wrong:
        print(f"wrong results (not timed): {', '.join(wrong)}")
    return 1 if wrong else 0


def _gbs(r: dict, who: str) -> str:
    if f"{who}_gbs" not in r:
        check = r.get(f"{who}_check", "ok")
        why = r.get(f"{who}_note", "n/a").split(":")[0] if check == "ok" else check.split(":")[0].upper()
        return f"{LABELS[who].split()[0]} {why}"
    ratio = f" ({r[f'ratio_vs_{who}']:.2f}x)" if f"ratio_vs_{who}" in r else ""
    return f"{LABELS[who].split()[0]} {r[f'{who}_gbs']:5.0f} GB/s{ratio}"


def _line(r: dict) -> str:
    size = "x".join(map(str, r["size"]))
    tflops = f" {r['blasdx_tflops']:6.1f} TF/s" if "blasdx_tflops" in r else ""
    return f"{r['case']:12s} {size:12s} {_gbs(r, 'blasdx')}{tflops}  {_gbs(r, 'cublasdx')}  {_gbs(r, 'cublas')}"


def _table(rows: list[dict]) -> str:
    head = ("| case | M x N x K | instruction | threads | blasdx GB/s | TFLOP/s | % copy | cuBLASDx GB/s | TFLOP/s "
            "| % copy | cuBLAS GB/s (C type) | TFLOP/s | % copy | blasdx / cuBLASDx | blasdx / cuBLAS |")
    lines = [head, "|" + "---|" * 15]
    for r in rows:
        dx_note = r.get("cublasdx_note", "wrong" if r.get("cublasdx_check", "ok") != "ok" else "n/a")
        cublas = f"{r['cublas_gbs']:.0f} ({r['cublas_out']})" if "cublas_gbs" in r else \
            ("wrong" if r.get("cublas_check", "ok") != "ok" else "n/a")
        cells = [r["case"], "x".join(map(str, r["size"])), r["instruction"], str(r["block_dim"]),
                 cell(r, "blasdx_gbs", ".0f", "wrong"), cell(r, "blasdx_tflops", ".1f"),
                 cell(r, "blasdx_copy_fraction", ".0%"),
                 cell(r, "cublasdx_gbs", ".0f", dx_note), cell(r, "cublasdx_tflops", ".1f"),
                 cell(r, "cublasdx_copy_fraction", ".0%"), cublas, cell(r, "cublas_tflops", ".1f"),
                 cell(r, "cublas_copy_fraction", ".0%"), cell(r, "ratio_vs_cublasdx", ".2f"),
                 cell(r, "ratio_vs_cublas", ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _plot(rows: list[dict], roof: float, path: Path) -> None:
    """GB/s bars per case with the copy-bandwidth line; TFLOP/s bars with the bandwidth-bound ceiling."""
    plt = pyplot()
    if plt is None or not rows:
        return
    labels = case_labels(rows)
    x = np.arange(len(rows))
    width = 0.27
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(10, len(rows) * 0.6), 9), sharex=True)
    for i, who in enumerate(COMPETITORS):
        offset = (i - 1) * width
        top.bar(x + offset, [r.get(f"{who}_gbs", 0) for r in rows], width, label=LABELS[who])
        bottom.bar(x + offset, [r.get(f"{who}_tflops", 0) for r in rows], width, label=LABELS[who])
    top.axhline(roof, color="k", linestyle="--", label=f"copy bandwidth {roof:.0f} GB/s")
    top.set_ylabel("GB/s (A, B read + C written)")
    top.legend(fontsize=8)
    ceiling = [roof * r["flops"] / r["bytes"] / 1e3 for r in rows]  # TFLOP/s at the copy bandwidth
    bottom.scatter(x, ceiling, marker="_", s=300, color="k", label="roofline at copy bandwidth", zorder=3)
    bottom.set_yscale("log")
    bottom.set_ylabel("TFLOP/s")
    bottom.legend(fontsize=8)
    bottom.set_xticks(x, labels, rotation=90, fontsize=7)
    save_plot(plt, fig, path)


if __name__ == "__main__":
    sys.exit(main())

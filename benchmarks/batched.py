"""Batched small GEMMs, one problem per block: blasdx execute() against cuBLAS strided batched.

    python benchmarks/batched.py [--gbytes 2] [--cases f16-32 ...] [--json PATH]

About ``--gbytes`` of operands per case so that L2 does not help; every competitor runs in
this process on the same data, and every result is checked against the reference on a
sample of problems before it is timed. Prints a table (GB/s counts A and B read, C read
when beta != 0, C written), writes JSON and, with matplotlib, a PNG.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

import blasdx as bx
from blasdx import dtypes as dt
from blasdx.reference import assert_close, reference_gemm, tolerance

# (name, A, B, C, sizes); every case runs at each size that fits one block.
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
SIZES = [(32, 32, 32), (64, 64, 64), (128, 128, 64), (128, 128, 128), (48, 80, 24), (100, 100, 100)]


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


def time_ms(fn, repeats: int = 20) -> float:
    """Median milliseconds of ``fn`` over CUDA events, after two warm-up calls."""
    import torch

    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


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


def run_case(name: str, size, gbytes: float, sm: int, gen) -> dict | None:
    import torch

    ta, tb, tc = TYPES[name]
    m, n, k = size
    desc = (bx.Size(m, n, k) + bx.Precision(ta, tb, tc) + bx.Function.MM
            + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + bx.MaxAlignment + bx.SM(sm) + bx.Block())
    if not desc.is_supported:
        return None
    per_problem = m * k * ta.size + k * n * tb.size + m * n * tc.size
    batch = max(1, int(gbytes * 1e9 // per_problem))
    a = random_tensor(ta, (batch, m, k), gen)
    b = random_tensor(tb, (batch, k, n), gen)
    c = torch.empty((batch, m, n), device="cuda", dtype=torch_dtype(tc))
    compile_start = time.perf_counter()
    desc.compile()
    compile_s = time.perf_counter() - compile_start
    desc.execute(a, b, c)
    torch.cuda.synchronize()
    pick = torch.randint(0, batch, (64,), generator=gen, device="cuda")
    ref = reference_gemm(_host(a[pick], ta), _host(b[pick], tb))
    assert_close(_host(c[pick], tc), ref, tolerance(ta, tc, k, desc.accumulator_type), what=f"blasdx {name} {size}")
    row = {"case": name, "size": list(size), "batch": batch, "instruction": desc.instruction,
           "block_dim": desc.block_dim[0], "compile_s": round(compile_s, 3)}
    moved = batch * per_problem
    flops = 2.0 * m * n * k * batch
    ms = time_ms(lambda: desc.execute(a, b, c))
    row.update(blasdx_ms=ms, blasdx_gbs=moved / ms / 1e6, blasdx_tflops=flops / ms / 1e9)
    call = cublas_call(a, b, c, name)
    if call is not None:
        check = call()
        assert_close(_host(check[pick].to(torch_dtype(tc)) if check.dtype != c.dtype else check[pick], tc),
                     ref, tolerance(ta, tc, k, desc.accumulator_type) + (2e-3 if check.dtype != c.dtype else 0),
                     what=f"cuBLAS {name} {size}")
        ms_cublas = time_ms(call)
        moved_cublas = batch * (m * k * ta.size + k * n * tb.size + m * n * check.element_size())
        row.update(cublas_ms=ms_cublas, cublas_gbs=moved_cublas / ms_cublas / 1e6,
                   cublas_out=str(check.dtype).replace("torch.", ""), speedup_vs_cublas=ms_cublas / ms)
    del a, b, c
    torch.cuda.empty_cache()
    return row


def _host(t, value: dt.DType) -> np.ndarray:
    import torch

    t = t.detach().cpu()
    if value.name in ("bfloat16", "float8_e4m3"):
        return t.to(torch.float64).numpy()
    return t.numpy()


def copy_bandwidth(gbytes: float) -> float:
    """Device-to-device copy, GB/s counting read + write: the roofline of these cases."""
    import torch

    x = torch.empty(int(gbytes * 1e9 / 2), dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = time_ms(lambda: y.copy_(x))
    return 2 * x.numel() / ms / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gbytes", type=float, default=2.0)
    parser.add_argument("--cases", nargs="*", default=list(TYPES))
    parser.add_argument("--json", default="benchmarks/results/batched.json")
    args = parser.parse_args()
    try:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("no GPU")
    except Exception as exc:
        print(f"skipped: needs PyTorch with a CUDA GPU ({exc})")
        return 0
    major, minor = torch.cuda.get_device_capability()
    sm = 10 * major + minor
    gen = torch.Generator(device="cuda").manual_seed(0)
    roof = copy_bandwidth(args.gbytes)
    rows = []
    for name in args.cases:
        for size in SIZES:
            row = run_case(name, size, args.gbytes, sm, gen)
            if row is None:
                continue
            row["copy_fraction"] = row["blasdx_gbs"] / roof
            rows.append(row)
            print(_line(row), flush=True)
    print(f"\ndevice {torch.cuda.get_device_name()}, copy bandwidth {roof:.0f} GB/s")
    print(_table(rows))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "copy_gbs": roof,
            "torch": torch.__version__, "blasdx": bx.__version__}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"JSON: {out}")
    _plot(rows, roof, out.with_suffix(".png"))
    return 0


def _line(r: dict) -> str:
    size = "x".join(map(str, r["size"]))
    cub = f"{r['cublas_gbs']:7.0f} GB/s ({r['speedup_vs_cublas']:.2f}x)" if "cublas_gbs" in r else "   n/a"
    return f"{r['case']:12s} {size:12s} blasdx {r['blasdx_gbs']:7.0f} GB/s {r['blasdx_tflops']:6.1f} TF/s  cuBLAS {cub}"


def _table(rows: list[dict]) -> str:
    head = "| case | M x N x K | instruction | threads | blasdx GB/s | TFLOP/s | % copy | cuBLAS GB/s (C type) | blasdx / cuBLAS |"
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        cub = (f"{r['cublas_gbs']:.0f} ({r['cublas_out']})", f"{r['speedup_vs_cublas']:.2f}x") if "cublas_gbs" in r \
            else ("n/a", "n/a")
        lines.append(f"| {r['case']} | {'x'.join(map(str, r['size']))} | {r['instruction']} | {r['block_dim']} | "
                     f"{r['blasdx_gbs']:.0f} | {r['blasdx_tflops']:.1f} | {100 * r['copy_fraction']:.0f}% | "
                     f"{cub[0]} | {cub[1]} |")
    return "\n".join(lines)


def _plot(rows: list[dict], roof: float, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    labels = [f"{r['case']}\n{'x'.join(map(str, r['size']))}" for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.5), 5))
    ax.bar(x - 0.2, [r["blasdx_gbs"] for r in rows], 0.4, label="blasdx")
    ax.bar(x + 0.2, [r.get("cublas_gbs", 0) for r in rows], 0.4, label="cuBLAS (torch.bmm)")
    ax.axhline(roof, color="k", linestyle="--", label=f"copy {roof:.0f} GB/s")
    ax.set_xticks(x, labels, rotation=90, fontsize=7)
    ax.set_ylabel("GB/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


if __name__ == "__main__":
    sys.exit(main())

"""Complex GEMM: bx.matmul on complex64 / complex128 against torch.matmul (cuBLAS cgemm / zgemm).

    python benchmarks/complex_matmul.py [--sizes 1024 2048 4096 8192] [--types c64 c128] [--four] [--json PATH]

Square row-major operands of normal random parts, the same for both libraries. Each result is
checked against the complex128 product of 256 sampled rows (blasdx's within
blasdx.reference.tolerance for its type) before it is timed: per call, median of CUDA-event
timings after warm-up. Prints a table (TFLOP/s counts 8 M N K real operations; ratio = torch
time / blasdx time, above 1: blasdx faster) and writes JSON rows {type, size, ratio, ...}.
``--four`` also times the four-products path where bx.matmul takes Gauss's three
(blasdx.calls.complex_matmul.GAUSS_MIN), as "blasdx 4M".
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import blasdx as bx  # noqa: E402
from batched import cuda_sm, time_ms  # noqa: E402
from blasdx.base import dtypes as dt  # noqa: E402
from blasdx.reference import tolerance  # noqa: E402

TYPES = {"c64": dt.complex_of(dt.float32), "c128": dt.complex_of(dt.float64)}


def _error(got, x, y, rows) -> float:
    import torch

    ref = x[rows].to(torch.complex128) @ y.to(torch.complex128)
    return (torch.linalg.norm(got[rows].to(torch.complex128) - ref) / torch.linalg.norm(ref)).item()


def run_case(name: str, size: int, gen, four: bool = False) -> dict:
    import torch

    value = TYPES[name]
    dtype = torch.complex64 if name == "c64" else torch.complex128
    x = torch.randn(size, size, dtype=dtype, device="cuda", generator=gen)
    y = torch.randn(size, size, dtype=dtype, device="cuda", generator=gen)
    rows = torch.randint(0, size, (256,), device="cuda", generator=gen)
    row = {"type": name, "size": size, "flops": 8.0 * size**3}
    torch_out = torch.matmul(x, y)
    row["torch_error"] = _error(torch_out, x, y, rows)
    row["torch_ms"] = time_ms(lambda: torch.matmul(x, y), 5)
    try:
        got = bx.matmul(x, y)
        torch.cuda.synchronize()
        row["blasdx_error"] = _error(got, x, y, rows)
        bound = tolerance(value, value, size)
        from blasdx.calls import complex_matmul

        calls = list(complex_matmul._CALLS.values())
        row["plan"] = calls[-1].step.describe() if calls else "n/a"
        if row["blasdx_error"] <= bound:
            row["blasdx_ms"] = time_ms(lambda: bx.matmul(x, y), 5)
            row["ratio"] = row["torch_ms"] / row["blasdx_ms"]
        else:
            row["check"] = f"wrong result: error {row['blasdx_error']:.2e} > {bound:.1e}"
    except bx.BlasdxError as exc:
        row["check"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    if four:
        from blasdx.calls import complex_matmul

        saved, complex_matmul.GAUSS_MIN = complex_matmul.GAUSS_MIN, 1 << 62
        complex_matmul._CALLS.clear()
        try:
            got = bx.matmul(x, y)
            row["blasdx 4M_error"] = _error(got, x, y, rows)
            row["blasdx 4M_ms"] = time_ms(lambda: bx.matmul(x, y), 5)
            row["ratio 4M"] = row["torch_ms"] / row["blasdx 4M_ms"]
        finally:
            complex_matmul.GAUSS_MIN = saved
            complex_matmul._CALLS.clear()
    for who in ("blasdx", "torch"):
        if f"{who}_ms" in row:
            row[f"{who}_tflops"] = row["flops"] / row[f"{who}_ms"] / 1e9
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", type=int, default=[1024, 2048, 4096, 8192])
    parser.add_argument("--types", nargs="*", default=list(TYPES), choices=list(TYPES))
    parser.add_argument("--four", action="store_true", help="also the four-products path")
    parser.add_argument("--json", default="benchmarks/results/complex_matmul.json")
    args = parser.parse_args(argv)
    sm = cuda_sm()
    if sm is None:
        return 0
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    print("| type | size | blasdx ms | TFLOP/s | error | torch ms | TFLOP/s | error | torch / blasdx | plan |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.types:
        for size in args.sizes:
            r = run_case(name, size, gen, args.four)
            rows.append(r)
            torch.cuda.empty_cache()
            cells = [name, str(size), f"{r['blasdx_ms']:.3f}" if "blasdx_ms" in r else r.get("check", "n/a"),
                     f"{r.get('blasdx_tflops', 0):.1f}", f"{r.get('blasdx_error', float('nan')):.1e}",
                     f"{r['torch_ms']:.3f}", f"{r['torch_tflops']:.1f}", f"{r['torch_error']:.1e}",
                     f"{r['ratio']:.2f}" if "ratio" in r else "n/a", r.get("plan", "")]
            if "ratio 4M" in r:
                cells[-1] += f" (4M: {r['blasdx 4M_ms']:.3f} ms, {r['ratio 4M']:.2f}x, error {r['blasdx 4M_error']:.1e})"
            print("| " + " | ".join(cells) + " |", flush=True)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "sm": sm, "torch": torch.__version__,
            "operation": "x @ y, square row-major complex operands", "ratio": "torch time / blasdx time per call"}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"JSON: {out}")
    return 1 if any("check" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

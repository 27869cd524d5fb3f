"""float64 GEMM on int8 tensor cores (mantissa_bits -> int8 residue products) against cuBLAS's float64.

    python benchmarks/emulated_f64.py [--sizes 4096 8192] [--bits 52 48 44] [--json PATH]

For each square size, on the same random float64 operands (normal values; with --wide-range
spread per element over 2^-10 .. 2^10): time per call and TFLOP/s of torch.matmul in float64
(DMMA), bx.matmul in float64 (DMMA, the engine's wide path) and bx.matmul(x, y,
mantissa_bits=b) for each b; and each one's error against an extended-precision product (host
long double, 64-bit mantissa) of 16 sampled rows by 512 sampled columns: the largest
|got - ref| / (|x| |y|) over the sample (elementwise, the scheme's own measure) and the
normwise ||got - ref|| / ||ref||. Also the time of each stage of one emulated call.
--accuracy K... measures only the errors of 256 x 256 x K products (the accuracy study of
docs/performance.md), the reference checked against exact rational arithmetic on 4 elements.
Prints a table with ratios to torch float64 and writes JSON.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import blasdx as bx  # noqa: E402
from batched import emulation_parser, time_ms, write_record  # noqa: E402
from blasdx.calls import matmul as array_gemm  # noqa: E402


def _operands(size: int, wide_range: bool, gen):
    import torch

    x = torch.randn(size, size, device="cuda", generator=gen, dtype=torch.float64)
    y = torch.randn(size, size, device="cuda", generator=gen, dtype=torch.float64)
    if wide_range:
        x = x * torch.exp2(torch.randint(-10, 11, x.shape, device="cuda", generator=gen).double())
        y = y * torch.exp2(torch.randint(-10, 11, y.shape, device="cuda", generator=gen).double())
    return x, y


class Sample:
    """The extended-precision reference on sampled rows and columns, and the two error measures."""

    def __init__(self, x, y, gen) -> None:
        import torch

        size = x.shape[0]
        self.rows = torch.randperm(size, device="cuda", generator=gen)[:16].sort().values
        self.cols = torch.randperm(y.shape[1], device="cuda", generator=gen)[:512].sort().values
        xs = x[self.rows].cpu().numpy()
        ys = y[:, self.cols].cpu().numpy()
        self.ref = xs.astype(np.longdouble) @ ys.astype(np.longdouble)
        self.scale = np.abs(xs) @ np.abs(ys)

    def errors(self, got) -> tuple[float, float]:
        g = got[self.rows][:, self.cols].cpu().numpy().astype(np.longdouble)
        diff = np.abs(g - self.ref)
        elementwise = float(np.max(diff / self.scale))
        normwise = float(np.sqrt(np.sum(diff**2)) / np.sqrt(np.sum(self.ref**2)))
        return elementwise, normwise


def case(size: int, bits: list[int], wide_range: bool, gen) -> dict:
    import torch

    x, y = _operands(size, wide_range, gen)
    sample = Sample(x, y, gen)
    flops = 2.0 * size**3
    calls = {"torch f64": lambda: torch.matmul(x, y), "bx f64 (DMMA)": lambda: bx.matmul(x, y)}
    for b in bits:
        calls[f"bx int8 {b} bits"] = (lambda b=b: bx.matmul(x, y, mantissa_bits=b))
    out: dict = {"size": size, "wide_range": wide_range}
    for name, call in calls.items():
        elementwise, normwise = sample.errors(call())
        ms = time_ms(call, 10)
        out[name] = {"ms": ms, "tflops": flops / ms / 1e9, "elementwise": elementwise, "normwise": normwise}
        if name.startswith("bx int8"):
            plan = next(p for p in reversed(list(array_gemm._CALLS.values())) if p.scheme.name == "ozaki")
            out[name]["plan"] = plan.describe()
            out[name]["products"] = plan.scheme.products
            out[name]["stages"] = stages(plan.kernel, x, y)
    return out


def stages(plan, x, y) -> dict:
    """Milliseconds of each stage of one emulated call (blasdx.engine.ozaki.OzakiPlan's stage methods, each timed
    alone on the call's own scratch): x's and y's shifts and residues, the int8 GEMMs, the combine."""
    import torch

    from blasdx import arrays
    from blasdx.launch import scratch

    device = x.device.index
    handle = arrays.resolve_stream(None, (x,))
    core = arrays.as_core_stream(None, handle)
    vx, vy = arrays.as_array(x, "x"), arrays.as_array(y, "y")
    out = torch.empty(x.shape[0], y.shape[1], device="cuda", dtype=torch.float64)
    vout = arrays.as_array(out, "out")
    whole = time_ms(lambda: plan.run(device, core, handle, vx, vy, None, vout, 1.0, 0.0), 5)
    m, n, count = plan.m, plan.n, plan.scheme.count
    with scratch.call_scratch(device, handle) as buffers:  # the addresses the call itself used
        shift_a, shift_b, res_a, res_b, products = plan.buffers(buffers)
    x_ms = time_ms(lambda: plan.residues(device, handle, vx, False, shift_a, res_a), 5)
    y_ms = time_ms(lambda: plan.residues(device, handle, vy, True, shift_b, res_b), 5)
    products_ms = time_ms(lambda: plan.products(device, core, handle, res_a, res_b, products), 5)
    combine_ms = time_ms(lambda: plan.combine(device, handle, products, shift_a, shift_b, None, vout, 1.0, 0.0), 5)
    return {"whole": whole, "int8 products": products_ms, "residues and combine": whole - products_ms,
            "residues x": x_ms, "residues y": y_ms, "combine": combine_ms,
            "int8 TOPS": 2.0 * m * n * plan.k * count / products_ms / 1e9}


def _exact_check(xs: np.ndarray, ys: np.ndarray, ref: np.ndarray, gen: np.random.Generator) -> float:
    """Largest |long double reference - exact rational product| / (|x| |y|) over 4 elements."""
    from fractions import Fraction

    worst = 0.0
    for _ in range(4):
        i, j = int(gen.integers(xs.shape[0])), int(gen.integers(ys.shape[1]))
        exact = sum(Fraction(float(a)) * Fraction(float(b)) for a, b in zip(xs[i], ys[:, j]))
        scale = float(np.abs(xs[i]) @ np.abs(ys[:, j]))
        worst = max(worst, abs(float(Fraction(float(ref[i, j])) - exact)) / scale if scale else 0.0)
    return worst


def accuracy(ks: list[int], bits: list[int], wide_range: bool, gen) -> list[dict]:
    """Errors of 256 x 256 x K products against the long double reference, every path (no timing)."""
    import torch

    rows = []
    check = np.random.default_rng(0)
    for k in ks:
        x = torch.randn(256, k, device="cuda", generator=gen, dtype=torch.float64)
        y = torch.randn(k, 256, device="cuda", generator=gen, dtype=torch.float64)
        if wide_range:
            x = x * torch.exp2(torch.randint(-10, 11, x.shape, device="cuda", generator=gen).double())
            y = y * torch.exp2(torch.randint(-10, 11, y.shape, device="cuda", generator=gen).double())
        xs, ys = x[:64].cpu().numpy(), y.cpu().numpy()
        ref = xs.astype(np.longdouble) @ ys.astype(np.longdouble)
        scale = np.abs(xs) @ np.abs(ys)
        row: dict = {"k": k, "wide_range": wide_range, "reference vs exact": _exact_check(xs, ys, ref, check)}

        def measure(got) -> dict:
            diff = np.abs(got[:64].cpu().numpy().astype(np.longdouble) - ref)
            return {"elementwise": float(np.max(diff / scale)),
                    "normwise": float(np.sqrt(np.sum(diff**2)) / np.sqrt(np.sum(ref**2)))}

        row["torch f64"] = measure(torch.matmul(x, y))
        for b in bits:
            row[f"bx int8 {b} bits"] = measure(bx.matmul(x, y, mantissa_bits=b))
        rows.append(row)
        print(f"K {k:6d} {'wide' if wide_range else 'normal':>6} (reference off exact by "
              f"{row['reference vs exact']:.1e}): " + ", ".join(
                  f"{n} {v['elementwise']:.2e} / {v['normwise']:.2e}" for n, v in row.items() if isinstance(v, dict)))
    return rows


def main() -> int:
    parser = emulation_parser(__doc__.splitlines()[0], "emulated_f64", [4096, 8192], 10)
    parser.add_argument("--bits", nargs="*", type=int, default=[52, 48, 44])
    args = parser.parse_args()
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    if args.accuracy is not None:
        ks = args.accuracy or [64, 256, 1024, 4096, 16384, 65536]
        print("errors: elementwise max |got - ref| / (|x| |y|) / normwise ||got - ref|| / ||ref||")
        study = [r for wide in (False, True) for r in accuracy(ks, args.bits, wide, gen)]
        write_record(args.json, accuracy=study)
        return 0
    results = []
    for wide in (False, True) if args.wide_range else (False,):
        for size in args.sizes:
            r = case(size, args.bits, wide, gen)
            results.append(r)
            base = r["torch f64"]
            print(f"\n{size}^3 {'wide-range' if wide else 'normal'} operands")
            print(f"{'path':<22} {'ms':>8} {'TFLOP/s':>8} {'vs torch':>9} {'elementwise':>12} {'normwise':>10}")
            for name, v in r.items():
                if not isinstance(v, dict):
                    continue
                print(f"{name:<22} {v['ms']:8.3f} {v['tflops']:8.1f} {base['ms'] / v['ms']:8.2f}x "
                      f"{v['elementwise']:12.2e} {v['normwise']:10.2e}")
                if "stages" in v:
                    s = v["stages"]
                    print(f"{'':<22} {v['products']} int8 products {s['int8 products']:.3f} ms "
                          f"({s['int8 TOPS']:.0f} TOPS), residues + combine {s['residues and combine']:.3f} ms "
                          f"(x {s['residues x']:.3f}, y {s['residues y']:.3f}, combine {s['combine']:.3f})")
    write_record(args.json, results=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

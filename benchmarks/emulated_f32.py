"""float32 GEMM on tf32 tensor cores (mantissa_bits=21 and 23 -> 3xtf32 promoted every 2 / every stage) against cuBLAS.

    python benchmarks/emulated_f32.py [--sizes 1024 2048 4096 8192] [--configs] [--json PATH]

For each square size, on the same random float32 operands (normal values, and with
--wide-range values spread over 2^-20 .. 2^20): time per call and TFLOP/s of
bx.matmul(x, y, mantissa_bits=21) and (=23), torch.matmul in float32 (tf32 off: FFMA), torch.matmul
with tf32 allowed, and bx.matmul(bx.tf32(x), bx.tf32(y)); and each one's normwise
relative error against the float64 product (torch float64 on the GPU, 256 sampled rows).
--configs also times every split configuration of the engine (blasdx/engine/hopper.py CONFIGS).
--accuracy K... measures only the errors of 256 x 256 x K products (the accuracy study of
docs/performance.md; with --configs, of every split configuration too). Prints tables with ratios to torch float32 and writes JSON.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import blasdx as bx  # noqa: E402
from batched import emulation_parser, time_ms, write_record  # noqa: E402
from blasdx.calls import matmul as array_gemm  # noqa: E402
from blasdx import arrays
from blasdx.engine import hopper
from blasdx.base import dtypes as dt  # noqa: E402


def _operands(size: int, wide_range: bool, gen):
    import torch

    x = torch.randn(size, size, device="cuda", generator=gen)
    y = torch.randn(size, size, device="cuda", generator=gen)
    if wide_range:  # every element scaled by its own power of two in 2^-20 .. 2^20
        x = x * torch.exp2(torch.randint(-20, 21, x.shape, device="cuda", generator=gen).float())
        y = y * torch.exp2(torch.randint(-20, 21, y.shape, device="cuda", generator=gen).float())
    return x, y


def _error(got, x, y, rows) -> float:
    import torch

    ref = x[rows].double() @ y.double()
    return (torch.linalg.norm(got[rows].double() - ref) / torch.linalg.norm(ref)).item()


def _config_call(x, y, config):
    """bx.matmul's engine with one configuration forced (for --configs)."""
    import torch

    vx, vy = arrays.as_array(x, "x"), arrays.as_array(y, "y")
    mx, my = array_gemm._matrix(vx, "x"), array_gemm._matrix(vy, "y")
    out = torch.empty(x.shape[0], y.shape[1], device="cuda")
    vout = arrays.as_array(out, "out")
    device = array_gemm._device_info(out.device.index)
    engine, why = array_gemm._engine_plan(vx, vy, mx, my, dt.float32, mx.rows, my.cols, mx.cols, 1, device, vout,
                                          config, 1, "3xtf32")
    if engine is None:
        raise RuntimeError(why)
    handle = arrays.resolve_stream(None, (out,))
    core = arrays.as_core_stream(None, handle)
    return (lambda: engine.run(out.device.index, core, handle, vx, vy, None, vout, 1.0, 0.0)), out


def case(size: int, wide_range: bool, configs: bool, gen) -> dict:
    import torch

    x, y = _operands(size, wide_range, gen)
    rows = torch.randint(0, size, (min(size, 256),), device="cuda", generator=gen)
    flops = 2.0 * size**3

    def torch_f32():
        torch.backends.cuda.matmul.allow_tf32 = False
        return torch.matmul(x, y)

    def torch_tf32():
        torch.backends.cuda.matmul.allow_tf32 = True
        return torch.matmul(x, y)

    calls = {
        "bx 3xtf32": lambda: bx.matmul(x, y, mantissa_bits=21),
        "bx 23 bits": lambda: bx.matmul(x, y, mantissa_bits=23),
        "torch f32": torch_f32,
        "torch tf32": torch_tf32,
        "bx tf32": lambda: bx.matmul(bx.tf32(x), bx.tf32(y)),
    }
    out = {"size": size, "wide_range": wide_range}
    for name, call in calls.items():
        err = _error(call(), x, y, rows)
        ms = time_ms(call, 10)
        out[name] = {"ms": ms, "tflops": flops / ms / 1e9, "error": err}
    torch.backends.cuda.matmul.allow_tf32 = False
    plans = [p for p in array_gemm._CALLS.values() if p.shape == (size, size) and p.scheme.name == "3xtf32"]
    out["plan"] = next(p.describe() for p in plans if p.scheme.mantissa_bits == 21)
    out["plan 23 bits"] = next((p.describe() for p in plans if p.scheme.mantissa_bits == 23), "native float32")
    if configs:
        out["configs"] = {}
        for name, config in hopper.CONFIGS.items():
            if not config.split_tf32:
                continue
            call, result = _config_call(x, y, config)
            call()
            ms = time_ms(call, 10)
            out["configs"][name] = {"ms": ms, "tflops": flops / ms / 1e9, "error": _error(result, x, y, rows)}
    return out


def accuracy(ks: list[int], wide_range: bool, gen, configs: bool = False) -> list[dict]:
    """Normwise errors of 256 x 256 x K products, each K, every path (no timing); ``configs``: also every
    split configuration of the engine (its promotion interval), one K split."""
    import torch

    rows = []
    for k in ks:
        x = torch.randn(256, k, device="cuda", generator=gen)
        if wide_range:
            x = x * torch.exp2(torch.randint(-20, 21, x.shape, device="cuda", generator=gen).float())
        y = torch.randn(k, 256, device="cuda", generator=gen)
        if wide_range:
            y = y * torch.exp2(torch.randint(-20, 21, y.shape, device="cuda", generator=gen).float())
        everything = torch.arange(256, device="cuda")
        row = {"k": k, "wide_range": wide_range}
        torch.backends.cuda.matmul.allow_tf32 = False
        row["torch f32"] = _error(torch.matmul(x, y), x, y, everything)
        torch.backends.cuda.matmul.allow_tf32 = True
        row["torch tf32"] = _error(torch.matmul(x, y), x, y, everything)
        torch.backends.cuda.matmul.allow_tf32 = False
        row["bx 3xtf32"] = _error(bx.matmul(x, y, mantissa_bits=21), x, y, everything)
        row["bx 23 bits"] = _error(bx.matmul(x, y, mantissa_bits=23), x, y, everything)
        row["bx tf32"] = _error(bx.matmul(bx.tf32(x), bx.tf32(y)), x, y, everything)
        plan = array_gemm._CALLS.get(array_gemm._key(arrays.as_array(x, "x"), arrays.as_array(y, "y"), None,
                                                     ("matmul", 21, False)))
        row["bx 3xtf32 plan"] = plan.describe() if plan is not None else "n/a"
        if configs:
            for name, config in hopper.CONFIGS.items():
                if config.split_tf32:
                    call, result = _config_call(x, y, config)
                    call()
                    row[f"config {name}"] = _error(result, x, y, everything)
        rows.append(row)
        print(f"K {k:6d} {'wide' if wide_range else 'normal':>6}: " + ", ".join(
            f"{n} {row[n]:.2e}" for n in ("bx 3xtf32", "bx 23 bits", "torch f32", "torch tf32", "bx tf32"))
            + f"  (3xtf32 / torch f32: 21 bits {row['bx 3xtf32'] / row['torch f32']:.2f}x, "
              f"23 bits {row['bx 23 bits'] / row['torch f32']:.2f}x)"
            + "".join(f", {n[7:]} {v:.2e}" for n, v in row.items() if n.startswith("config ")))
    return rows


def main() -> int:
    parser = emulation_parser(__doc__.splitlines()[0], "emulated_f32", [1024, 2048, 4096, 8192], 20)
    parser.add_argument("--configs", action="store_true", help="time every split configuration")
    args = parser.parse_args()
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    if args.accuracy is not None:
        study = [r for wide in (False, True) for r in accuracy(args.accuracy or [16, 64, 256, 1024, 4096, 16384, 65536],
                                                                 wide, gen, args.configs)]
        write_record(args.json, accuracy=study)
        return 0
    results = []
    print(f"{'size':>6} {'range':>6} | {'bx 21 bits':>22} | {'bx 23 bits':>22} | {'torch f32':>22} | "
          f"{'torch tf32':>22} | {'bx tf32':>22} | 21 / 23 bits against torch f32")
    for wide in ([False, True] if args.wide_range else [False]):
        for size in args.sizes:
            r = case(size, wide, args.configs, gen)
            results.append(r)
            cells = " | ".join(f"{r[n]['tflops']:6.1f} TF/s err {r[n]['error']:.1e}"
                               for n in ("bx 3xtf32", "bx 23 bits", "torch f32", "torch tf32", "bx tf32"))
            against = ", ".join(f"{r['torch f32']['ms'] / r[n]['ms']:.2f}x speed {r[n]['error'] / r['torch f32']['error']:.2f}x error"
                                for n in ("bx 3xtf32", "bx 23 bits"))
            print(f"{size:6d} {'wide' if wide else 'normal':>6} | {cells} | {against}")
            for name, c in r.get("configs", {}).items():
                print(f"         {name:16s} {c['tflops']:6.1f} TF/s err {c['error']:.1e}")
    write_record(args.json, results=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

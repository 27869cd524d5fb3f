"""Does Strassen-Winograd pay over blasdx's Hopper engine? Time and error, one and two levels.

    python benchmarks/strassen.py [--sizes 4096 8192 16384] [--cases f32-3xtf32 bf16 f16] [--json PATH]

Each level replaces one n x n product by seven (n/2)^3 products of the engine (bx.matmul on
quadrant views, no copies for the operands' own quadrants) and 15 additions of (n/2)^2
matrices (torch elementwise kernels, in the operands' type for the sums of A and B and in
the result's type for the sums of products). Against bx.matmul of the whole product on
the same operands: median time per call, and normwise relative error on 256 sampled rows
against the float64 product. Prints a table and writes JSON; docs/performance.md keeps the
figures. Nothing in blasdx uses Strassen: it is enabled nowhere unless it wins at equal
accuracy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import blasdx as bx  # noqa: E402
from batched import time_ms, write_record  # noqa: E402

CASES = {  # name: (torch input dtype, bx.matmul keyword arguments)
    "f32-3xtf32": ("float32", {"mantissa_bits": 23}),
    "bf16": ("bfloat16", {}),
    "f16": ("float16", {}),
}


def winograd(x, y, levels: int, product):
    """x @ y by Strassen-Winograd with ``levels`` levels of recursion over ``product``."""
    if levels == 0 or x.shape[0] % 2 or x.shape[1] % 2 or y.shape[1] % 2:
        return product(x, y)
    m, k = x.shape
    n = y.shape[1]
    h, kk, w = m // 2, k // 2, n // 2
    a11, a12, a21, a22 = x[:h, :kk], x[:h, kk:], x[h:, :kk], x[h:, kk:]
    b11, b12, b21, b22 = y[:kk, :w], y[:kk, w:], y[kk:, :w], y[kk:, w:]
    s1 = a21 + a22
    s2 = s1 - a11
    s3 = a11 - a21
    s4 = a12 - s2
    t1 = b12 - b11
    t2 = b22 - t1
    t3 = b22 - b12
    t4 = t2 - b21
    m1 = winograd(a11, b11, levels - 1, product)
    m2 = winograd(a12, b21, levels - 1, product)
    m3 = winograd(s4, b22, levels - 1, product)
    m4 = winograd(a22, t4, levels - 1, product)
    m5 = winograd(s1, t1, levels - 1, product)
    m6 = winograd(s2, t2, levels - 1, product)
    m7 = winograd(s3, t3, levels - 1, product)
    u2 = m1 + m6
    u3 = u2 + m7
    u4 = u2 + m5
    import torch

    out = torch.empty((m, n), device=x.device, dtype=m1.dtype)
    torch.add(m1, m2, out=out[:h, :w])
    torch.add(u4, m3, out=out[:h, w:])
    torch.sub(u3, m4, out=out[h:, :w])
    torch.add(u3, m5, out=out[h:, w:])
    return out


def measure(case: str, size: int, levels: int, gen) -> dict:
    import torch

    dtype, kwargs = CASES[case]
    x = torch.randn(size, size, device="cuda", generator=gen).to(getattr(torch, dtype))
    y = torch.randn(size, size, device="cuda", generator=gen).to(getattr(torch, dtype))
    rows = torch.randint(0, size, (256,), device="cuda", generator=gen)
    ref = x[rows].double() @ y.double()

    def product(a, b):
        return bx.matmul(a, b, **kwargs)

    def call():
        return winograd(x, y, levels, product)

    got = call()
    err = (torch.linalg.norm(got[rows].double() - ref) / torch.linalg.norm(ref)).item()
    ms = time_ms(call, 5)
    return {"case": case, "size": size, "levels": levels, "ms": ms, "tflops": 2.0 * size**3 / ms / 1e9,
            "error": err}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", type=int, default=[4096, 8192, 16384])
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--levels", type=int, default=2)
    parser.add_argument("--json", default="benchmarks/results/strassen.json")
    args = parser.parse_args()
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    print(f"{'case':>11} {'size':>6} {'levels':>6} {'ms':>9} {'TFLOP/s':>8} {'error':>9} {'vs plain':>9} "
          f"{'error vs plain':>14}")
    for case in args.cases:
        for size in args.sizes:
            plain = None
            for levels in range(args.levels + 1):
                r = measure(case, size, levels, gen)
                rows.append(r)
                if levels == 0:
                    plain = r
                print(f"{case:>11} {size:6d} {levels:6d} {r['ms']:9.3f} {r['tflops']:8.1f} {r['error']:9.2e} "
                      f"{plain['ms'] / r['ms']:8.2f}x {r['error'] / plain['error']:13.2f}x")
                torch.cuda.empty_cache()
    write_record(args.json, results=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

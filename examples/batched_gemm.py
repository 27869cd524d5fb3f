"""A million small GEMMs in one call: compose a descriptor, compile it, run it, check it.

    python examples/batched_gemm.py [--batch N] [--size S]

Without a GPU the script still composes the descriptor, compiles the kernel with NVRTC
and reports its resources, then says that it skipped the run.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import blasdx as bx
from blasdx.reference import assert_close, random_operand, reference_gemm, tolerance


def main() -> int:
    from gpu_device import batch_parser, compile_and_report, device_sm  # examples/ is on sys.path

    parser = batch_parser(__doc__, "products", batch=1_000_000, check=2000)
    parser.add_argument("--size", type=int, default=32, help="M = N = K of each product")
    args = parser.parse_args()

    sm = device_sm()
    gemm = (
        bx.Size(args.size, args.size, args.size)
        + bx.Precision(bx.float16, bx.float16, bx.float32)
        + bx.Type.real
        + bx.Function.MM
        + bx.Arrangement(bx.row_major, bx.col_major, bx.col_major)
        + bx.MaxAlignment
        + bx.SM(sm or 90)
        + bx.Block()
    )
    compile_and_report(gemm)
    if sm is None:
        print("no GPU found: skipped the run (the kernel above is what a GPU would execute)")
        return 0

    rng = np.random.default_rng()
    m = n = k = args.size
    a = random_operand(bx.float16, (args.batch, m, k), rng)  # row-major A
    b = random_operand(bx.float16, (args.batch, n, k), rng).transpose(0, 2, 1)  # column-major B (K x N)
    c = np.empty((args.batch, n, m), np.float32).transpose(0, 2, 1)  # column-major C (M x N)
    da, db, dc = bx.to_device(a), bx.to_device(b), bx.to_device(c)

    from cuda.core import Device

    device = Device()
    gemm.execute(da, db, dc)  # warm-up: loads the module
    device.sync()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        gemm.execute(da, db, dc)
        device.sync()
        times.append(time.perf_counter() - start)
    ms = 1e3 * sorted(times)[len(times) // 2]  # median, launch and sync included
    moved = a.nbytes + b.nbytes + c.nbytes
    flops = 2.0 * m * n * k * args.batch
    print(f"{args.batch} products of {m}x{n}x{k}: {ms:.3f} ms, {moved / ms / 1e6:.0f} GB/s, {flops / ms / 1e9:.1f} TFLOP/s")

    got = bx.from_device(dc)
    pick = rng.choice(args.batch, size=min(args.check, args.batch), replace=False)
    ref = reference_gemm(a[pick], b[pick])
    assert_close(got[pick], ref, tolerance(bx.float16, bx.float32, k))
    print(f"checked {len(pick)} random problems against the float64 reference: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Many small triangular solves: a TRSM descriptor run on a batch, then the same with bx.solve_triangular.

    python examples/triangular_solve.py [--batch N] [--size S] [--rhs R]

Solves A_p X_p = B_p for lower triangular A_p (S x S) and B_p (S x R), in place with the
descriptor's execute and into a new array with bx.solve_triangular, and checks a sample of
problems against an extended-precision solution. Without a GPU the script still composes
the descriptor, compiles the kernel with NVRTC and reports its resources.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import blasdx as bx
from blasdx.reference import random_operand, relative_error
from blasdx.reference.trsm import (
    backward_error,
    condition_number,
    forward_bound,
    random_triangular,
    residual_bound,
    solve_reference,
)


def check(system, b_host: np.ndarray, x: np.ndarray, pick: np.ndarray, what: str) -> None:
    """Backward error within 2 n u and forward error within 2 n u cond(A), on the sampled problems."""
    exact, rhs, got = system.exact[pick], b_host[pick], x[pick]
    size = exact.shape[-1]
    eta = backward_error(exact, got, rhs, left=True)
    err = relative_error(got, solve_reference(exact, rhs, left=True, lower=True))
    bound = forward_bound(bx.float64, size, condition_number(exact))
    print(f"{what}: backward error {eta:.1e} (bound {residual_bound(bx.float64, size):.1e}), forward error "
          f"{err:.1e} (bound {bound:.1e})")
    if eta > residual_bound(bx.float64, size) or err > bound:
        raise SystemExit(f"{what}: wrong result")


def main() -> int:
    from gpu_device import batch_parser, compile_and_report, device_sm  # examples/ is on sys.path

    parser = batch_parser(__doc__, "systems", batch=20_000, check=200)
    parser.add_argument("--size", type=int, default=32, help="S: A is S x S")
    parser.add_argument("--rhs", type=int, default=8, help="R: right-hand sides per system")
    args = parser.parse_args()

    sm = device_sm()
    trsm = (
        bx.Size(args.size, args.rhs)  # B is S x R; with Side.left, A is S x S
        + bx.Precision(bx.float64)
        + bx.Function.TRSM
        + bx.Side.left
        + bx.FillMode.lower
        + bx.Diag.non_unit
        + bx.Arrangement(bx.row_major, bx.row_major)
        + bx.SM(sm or 90)
        + bx.Block()
    )
    compile_and_report(trsm, f"{trsm.max_threads_per_block} threads for {trsm.batches_per_block} systems a block")
    if sm is None:
        print("no GPU found: skipped the run (the kernel above is what a GPU would execute)")
        return 0

    rng = np.random.default_rng()
    system = random_triangular(rng, args.batch, args.size, bx.float64, is_complex=False, lower=True, unit=False)
    b_host = random_operand(bx.float64, (args.batch, args.size, args.rhs), rng)
    pick = rng.choice(args.batch, size=min(args.check, args.batch), replace=False)
    a = bx.to_device(system.stored)  # the upper triangle holds NaN: it is never read

    from cuda.core import Device

    b = bx.to_device(b_host)
    trsm.execute(a, b)  # X overwrites b
    Device().sync()
    check(system, b_host, bx.from_device(b), pick, "execute")

    b = bx.to_device(b_host)
    x = bx.solve_triangular(a, b, lower=True)  # a new array; b is unchanged
    Device().sync()
    check(system, b_host, bx.from_device(x), pick, "solve_triangular")
    np.testing.assert_array_equal(bx.from_device(b), b_host)

    times = []
    for _ in range(5):
        start = time.perf_counter()
        trsm.execute(a, b)
        Device().sync()
        times.append(time.perf_counter() - start)
    best = min(times)
    moved = args.batch * (args.size * args.size + 2 * args.size * args.rhs) * 8
    print(f"{args.batch} solves of {args.size} x {args.size} with {args.rhs} right-hand sides: {best * 1e3:.3f} ms "
          f"({moved / best / 1e9:.0f} GB/s of A, B and X, wall clock)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A host model of the engine's 3xtf32 error: which promotion interval keeps float32's accuracy.

    python benchmarks/tf32_sum_model.py [--ks 16 64 256 1024] [--wide-range] [--rows 32] [--cols 64]

No GPU. The operands are split as kernels/blasdx/split_tf32.cuh splits them (hi and lo rounded
to nearest tf32); every wgmma step (8 products deep) adds its exact products to the running sum
and truncates the result to float32 (toward zero: the tensor core's f32 sums do not round to
nearest). Within a stage the small terms (lo x hi, hi x lo) come before the large ones, and
every ``P`` stages (32 K each) the sum is added into a float32 accumulator with a rounded add,
as hopper/gemm.cuh's multiply_promoted does. Prints the normwise error against the float64
product for promotion every 1, 2 and 4 stages, beside a sequential float32 FMA sum and the
split's own floor (the three products summed exactly). The model reproduces the measured
figures of docs/performance.md (float32 at float32 accuracy) within about 15%.
"""

from __future__ import annotations

import argparse

import numpy as np


def round_tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to tf32 (to nearest, ties away), as split_tf32.cuh's round_tf32."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hi = round_tf32(x)
    return hi, round_tf32((x - hi).astype(np.float32))


def truncate_f32(x: np.ndarray) -> np.ndarray:
    """float64 values truncated toward zero to float32."""
    y = x.astype(np.float32)
    over = np.abs(y.astype(np.float64)) > np.abs(x)
    y[over] = np.nextafter(y[over], np.float32(0))
    return y


def step(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One wgmma K step: acc + a @ b, products exact, the sum truncated to float32."""
    return truncate_f32(acc.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64))


def three_tf32(x: np.ndarray, y: np.ndarray, promote_stages: int) -> np.ndarray:
    """The engine's 3xtf32 product of x [M, K] and y [K, N] promoted every ``promote_stages`` stages."""
    k = x.shape[1]
    xh, xl = split(x)
    yh, yl = split(y)
    acc = np.zeros((x.shape[0], y.shape[1]), np.float32)
    part = np.zeros_like(acc)
    stages = (k + 31) // 32
    for s in range(stages):
        steps = range(32 * s, min(k, 32 * s + 32), 8)
        for lo_x, lo_y in ((xl, yh), (xh, yl), (xh, yh)):  # the small terms first
            for j in steps:
                part = step(part, lo_x[:, j:j + 8], lo_y[j:j + 8])
        if (s + 1) % promote_stages == 0 or s + 1 == stages:
            acc = (acc.astype(np.float64) + part.astype(np.float64)).astype(np.float32)  # a rounded add
            part[:] = 0
    return acc


def sequential_f32(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """float32 FMAs in K order (a CUDA-core dot product)."""
    acc = np.zeros((x.shape[0], y.shape[1]), np.float32)
    for j in range(x.shape[1]):
        acc = (acc.astype(np.float64) + x[:, j:j + 1].astype(np.float64) * y[j:j + 1]).astype(np.float32)
    return acc


def error(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", nargs="*", type=int, default=[16, 64, 256, 1024])
    parser.add_argument("--wide-range", action="store_true", help="each element scaled by 2^-20 .. 2^20")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--cols", type=int, default=64)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    print(f"{'K':>6} | {'f32 FMA':>8} | {'floor':>8} | {'p1':>8} | {'p2':>8} | {'p4':>8}")
    for k in args.ks:
        x, y = rng.standard_normal((args.rows, k)), rng.standard_normal((k, args.cols))
        if args.wide_range:
            x = x * 2.0 ** rng.integers(-20, 21, x.shape)
            y = y * 2.0 ** rng.integers(-20, 21, y.shape)
        x, y = x.astype(np.float32), y.astype(np.float32)
        ref = x.astype(np.float64) @ y.astype(np.float64)
        (xh, xl), (yh, yl) = split(x), split(y)
        floor = xh.astype(np.float64) @ yh + xh.astype(np.float64) @ yl + xl.astype(np.float64) @ yh
        cells = [error(sequential_f32(x, y), ref), error(floor, ref)]
        cells += [error(three_tf32(x, y, p), ref) for p in (1, 2, 4)]
        print(f"{k:>6} | " + " | ".join(f"{c:.2e}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

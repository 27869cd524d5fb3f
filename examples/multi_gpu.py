"""One large batch of small GEMMs split over every visible GPU: a thread per GPU, no NCCL.

    python examples/multi_gpu.py [--batch N] [--size S] [--repeats R] [--check C]

The batch is cut into one contiguous shard per GPU. ``bx.precompile(..., devices="all")``
compiles the kernel once and loads it on every GPU; then each thread copies its shard to
its GPU, runs ``GEMM.execute`` on a stream of that GPU and times it. The calls need no
device switching by the caller: a kernel runs on its operands' device. Per-GPU and total
throughput are printed, and random problems of every shard are checked against the
float64 reference. Without a GPU the script compiles the kernel and says it skipped the run.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time

import numpy as np

import blasdx as bx
from blasdx.reference import assert_close, reference_gemm, tolerance


def gpus() -> list[tuple[int, int, str]]:
    """(ordinal, compute capability as 90, name) of every visible GPU; empty without one."""
    try:
        from cuda.core import Device, system

        found = []
        for ordinal in range(system.get_num_devices()):
            device = Device(ordinal)
            major, minor = device.compute_capability
            found.append((ordinal, 10 * major + minor, device.name))
        return found
    except Exception:
        return []


def gemm_for(sm: int, size: int) -> bx.Descriptor:
    """f16 x f16 -> f32, row-major A and column-major B and C (what the host arrays below are)."""
    return (
        bx.Size(size, size, size) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM
        + bx.Arrangement(bx.row_major, bx.col_major, bx.col_major) + bx.MaxAlignment + bx.SM(sm) + bx.Block()
    )


def shard(rng: np.random.Generator, count: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Fresh random A (count, s, s) row-major and B column-major, in float16."""
    a = rng.standard_normal((count, size, size), dtype=np.float32).astype(np.float16)
    b = rng.standard_normal((count, size, size), dtype=np.float32).astype(np.float16).transpose(0, 2, 1)
    return a, b


class Worker(threading.Thread):
    """Runs one GPU's shard: copies it, launches ``repeats`` times on a stream of that GPU, copies C back."""

    def __init__(self, ordinal: int, gemm: bx.Descriptor, a: np.ndarray, b: np.ndarray, repeats: int,
                 start: threading.Barrier) -> None:
        super().__init__(name=f"gpu-{ordinal}")
        self.ordinal, self.gemm, self.a, self.b, self.repeats, self.start_line = ordinal, gemm, a, b, repeats, start
        self.seconds: list[float] = []
        self.c: np.ndarray | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            from cuda.core import Device

            device = Device(self.ordinal)
            device.set_current()  # this thread's CUDA calls (the stream below) default to its GPU
            stream = device.create_stream()
            size = self.gemm.m
            da = bx.to_device(self.a, self.ordinal, stream=stream)
            db = bx.to_device(self.b, self.ordinal, stream=stream)
            dc = bx.to_device(np.empty((len(self.a), size, size), np.float32).transpose(0, 2, 1), self.ordinal)
            self.gemm.execute(da, db, dc, stream=stream)  # warm-up
            stream.sync()
            for _ in range(self.repeats):
                self.start_line.wait()  # every GPU starts each round together
                begin = time.perf_counter()
                self.gemm.execute(da, db, dc, stream=stream)
                stream.sync()
                self.seconds.append(time.perf_counter() - begin)
            self.c = bx.from_device(dc, stream=stream)
        except BaseException as exc:  # reported by the main thread
            self.error = exc
            self.start_line.abort()


def main() -> int:
    from gpu_device import batch_parser  # examples/ is on sys.path when run as a script

    parser = batch_parser(__doc__, "products", batch=131_072, check=500, checked="checked per GPU")
    parser.add_argument("--size", type=int, default=32, help="M = N = K of each product (default 32)")
    parser.add_argument("--repeats", type=int, default=10, help="timed launches per GPU (default 10)")
    args = parser.parse_args()

    found = gpus()
    sms = sorted({sm for _, sm, _ in found}) or [90]
    gemms = {sm: gemm_for(sm, args.size) for sm in sms}
    start = time.perf_counter()
    bx.precompile(list(gemms.values()), devices="all" if found else None)
    where = f"loaded on {len(found)} GPU(s)" if found else "compiled"
    print(f"{gemms[sms[0]]!r}: {where} in {time.perf_counter() - start:.2f} s")
    if not found:
        print("no GPU found: skipped the run (the kernel above is what each GPU would execute)")
        return 0

    rng = np.random.default_rng()
    counts = [len(part) for part in np.array_split(np.arange(args.batch), len(found))]
    shards = [shard(rng, count, args.size) for count in counts]
    line = threading.Barrier(len(found))
    workers = [
        Worker(ordinal, gemms[sm], a, b, args.repeats, line) for (ordinal, sm, _), (a, b) in zip(found, shards)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    failed = [w.error for w in workers if w.error is not None]
    if failed:  # the cause first: the other workers only saw the start line broken
        raise sorted(failed, key=lambda e: isinstance(e, threading.BrokenBarrierError))[0]

    s = args.size
    print(f"{args.batch} products of {s}x{s}x{s} f16 -> f32 over {len(found)} GPU(s), median of {args.repeats}:")
    slowest = 0.0
    for worker, (ordinal, _, name), count in zip(workers, found, counts):
        seconds = statistics.median(worker.seconds)
        slowest = max(slowest, seconds)
        moved = count * s * s * (2 + 2 + 4)
        flops = 2.0 * s * s * s * count
        print(f"  GPU {ordinal} ({name}): {count} products in {seconds * 1e3:.3f} ms, "
              f"{moved / seconds / 1e9:.0f} GB/s, {flops / seconds / 1e12:.1f} TFLOP/s")
    moved, flops = args.batch * s * s * 8, 2.0 * s**3 * args.batch
    print(f"  all GPUs: {slowest * 1e3:.3f} ms (the slowest shard), {moved / slowest / 1e9:.0f} GB/s, "
          f"{flops / slowest / 1e12:.1f} TFLOP/s")

    tol = tolerance(bx.float16, bx.float32, s)
    for worker in workers:
        pick = rng.choice(len(worker.a), size=min(args.check, len(worker.a)), replace=False)
        ref = reference_gemm(worker.a[pick], worker.b[pick])
        assert_close(worker.c[pick], ref, tol, what=f"C on GPU {worker.ordinal}")
    print(f"checked {min(args.check, min(counts))}+ random problems of every GPU against the float64 reference: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

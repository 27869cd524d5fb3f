"""Triton persistent TMA matmul: the Triton competitor of ``bx.matmul`` on Hopper.

    python benchmarks/triton_matmul.py [--sizes 4096 8192] [--types f16 bf16 tf32] [--tune] [--json PATH]
    python benchmarks/triton_matmul.py --compile-only [--capability 90]      (no GPU needed)

The kernel follows the structure of Triton's persistent-matmul tutorial
(``python/tutorials/09-persistent-matmul.py``): a persistent grid of one program per SM that
walks the output tiles in grouped order (``GROUP_M`` row tiles in a row use the same B column
tiles while those are still in L2), A, B and C moved by TMA through tensor descriptors built
on the host (``triton.tools.tensor_descriptor.TensorDescriptor``), and an epilogue that
stores C in ``SUBTILES`` column slices, so that the staging buffer of C takes less shared
memory and more of it is left for the operand pipeline.

``triton_matmul(a, b)`` takes 2-D CUDA torch tensors with unit inner stride (A is M x K,
B is K x N, both row-major in the sense of the leading stride) and returns C = A @ B
with float32 accumulation. Result types follow blasdx's table: float16 -> float16,
bfloat16 -> float32, float32 (run as tf32) -> float32; ``out_dtype`` overrides it.

Tile shapes: a fixed default per input type (``DEFAULTS``) or, with ``tune()`` (or
``triton_matmul(..., autotune=True)``), the fastest of at most four candidates (``CANDIDATES``)
on the caller's operands, within a time budget (20 s by default, compiles included). The
candidates are the ones that compile for sm_90 within the 227 KB of shared memory a block
may have (``--compile-only`` lists their shared memory and checks for wgmma and TMA in the PTX).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from batched import time_ms  # noqa: E402  (the benchmarks' one CUDA-event timer)

# Bytes of shared memory a Hopper block may opt in to (cudaDevAttrMaxSharedMemoryPerBlockOptin).
HOPPER_SHARED_BYTES = 232448


@dataclass(frozen=True)
class Config:
    """One tile configuration of the kernel; a frozen value, used as a cache key.

    block_m, block_n, block_k: the output tile and the K step (elements).
    stages: operand buffers in flight (Triton's software pipeline depth).
    warps: warps per program (8 = two warpgroups on Hopper).
    group_m: row tiles per group of the tile order (L2 reuse of B).
    subtiles: C is stored in this many column slices of block_n / subtiles (1, 2 or 4).
    """

    block_m: int
    block_n: int
    block_k: int
    stages: int
    warps: int
    group_m: int = 8
    subtiles: int = 2

    def __post_init__(self) -> None:
        if self.subtiles not in (1, 2, 4) or self.block_n % self.subtiles:
            raise ValueError(f"subtiles must be 1, 2 or 4 and divide block_n={self.block_n}; got {self.subtiles}")

    def label(self) -> str:
        return f"{self.block_m}x{self.block_n}x{self.block_k} s{self.stages} w{self.warps} sub{self.subtiles}"


# Input types, keyed by the benchmarks' names: (torch dtype name, Triton type string, default result).
INPUTS = {"f16": ("float16", "fp16", "float16"), "bf16": ("bfloat16", "bf16", "float32"),
          "tf32": ("float32", "fp32", "float32")}
_TRITON_TYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}

DEFAULTS = {  # per input type: the usual Hopper choice (two consumer warpgroups, 128 x 256 tile)
    "float16": Config(128, 256, 64, 3, 8),
    "bfloat16": Config(128, 256, 64, 3, 8),
    "float32": Config(128, 256, 32, 3, 8),
}
CANDIDATES = {  # tried by tune(), default first
    "float16": [DEFAULTS["float16"], Config(128, 256, 64, 4, 8, subtiles=4), Config(128, 128, 64, 4, 8),
                Config(128, 128, 64, 4, 4)],
    "bfloat16": [DEFAULTS["bfloat16"], Config(128, 256, 64, 4, 8, subtiles=4), Config(128, 128, 64, 4, 8),
                 Config(128, 128, 64, 4, 4)],
    "float32": [DEFAULTS["float32"], Config(128, 128, 32, 4, 8), Config(128, 128, 32, 3, 4),
                Config(128, 64, 32, 4, 4)],
}


# ---------------------------------------------------------------------------------------------
# the kernel
# ---------------------------------------------------------------------------------------------


@triton.jit
def _tile_coordinates(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(row tile, column tile) of linear tile number ``tile`` in grouped order."""
    tiles_per_group = GROUP_M * tiles_n
    first_m = (tile // tiles_per_group) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    within = tile % tiles_per_group
    return first_m + within % rows, within // rows


@triton.jit
def _halves(x, WIDTH: tl.constexpr):
    """The left and right column halves of a (rows, WIDTH) block."""
    ROWS: tl.constexpr = x.shape[0]
    x = tl.reshape(x, (ROWS, 2, WIDTH // 2))
    return tl.split(tl.permute(x, (0, 2, 1)))


@triton.jit
def _store_tile(c_desc, acc, off_m, off_n, BLOCK_N: tl.constexpr, SUBTILES: tl.constexpr):
    """Store the float32 tile ``acc`` into C, converted to C's type, in SUBTILES column slices."""
    tl.static_assert(SUBTILES == 1 or SUBTILES == 2 or SUBTILES == 4, "SUBTILES must be 1, 2 or 4")
    if SUBTILES == 1:
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
    elif SUBTILES == 2:
        left, right = _halves(acc, BLOCK_N)
        c_desc.store([off_m, off_n], left.to(c_desc.dtype))
        c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(c_desc.dtype))
    else:
        left, right = _halves(acc, BLOCK_N)
        q0, q1 = _halves(left, BLOCK_N // 2)
        q2, q3 = _halves(right, BLOCK_N // 2)
        c_desc.store([off_m, off_n], q0.to(c_desc.dtype))
        c_desc.store([off_m, off_n + BLOCK_N // 4], q1.to(c_desc.dtype))
        c_desc.store([off_m, off_n + 2 * (BLOCK_N // 4)], q2.to(c_desc.dtype))
        c_desc.store([off_m, off_n + 3 * (BLOCK_N // 4)], q3.to(c_desc.dtype))


@triton.jit
def _persistent_tma_matmul(a_desc, b_desc, c_desc, M, N, K,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr, SUBTILES: tl.constexpr, NUM_SMS: tl.constexpr):
    """C = A @ B; program p computes output tiles p, p + NUM_SMS, ... with a float32 accumulator."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    # The epilogue walks its own copy of the tile counter: after the loop nest is flattened and
    # software-pipelined, the loads of the next tile run ahead of this tile's store.
    store_tile = tl.program_id(0) - NUM_SMS
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, NUM_SMS, flatten=True):
        pid_m, pid_n = _tile_coordinates(tile, tiles_m, tiles_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(k_steps):
            a = a_desc.load([off_m, step * BLOCK_K])
            b = b_desc.load([step * BLOCK_K, off_n])
            acc = tl.dot(a, b, acc, input_precision="tf32")  # tf32 for float32 inputs; ignored otherwise
        store_tile += NUM_SMS
        pid_m, pid_n = _tile_coordinates(store_tile, tiles_m, tiles_n, GROUP_M)
        _store_tile(c_desc, acc, pid_m * BLOCK_M, pid_n * BLOCK_N, BLOCK_N, SUBTILES)


# ---------------------------------------------------------------------------------------------
# host side
# ---------------------------------------------------------------------------------------------


def _torch():
    import torch

    return torch


def result_dtype(a_dtype, out_dtype=None):
    """The torch dtype of C: ``out_dtype`` if given, else blasdx's result type for A's type."""
    torch = _torch()
    name = str(a_dtype).replace("torch.", "")
    if name not in _TRITON_TYPE:
        raise TypeError(f"triton_matmul: inputs must be float16, bfloat16 or float32 (run as tf32); got {a_dtype}")
    if out_dtype is None:
        return getattr(torch, {"float16": "float16", "bfloat16": "float32", "float32": "float32"}[name])
    if str(out_dtype).replace("torch.", "") not in _TRITON_TYPE:
        raise TypeError(f"triton_matmul: out_dtype must be float16, bfloat16 or float32; got {out_dtype}")
    return out_dtype


def _check_tma_operand(x, name: str) -> None:
    """TMA's rules for a 2-D operand: CUDA, unit inner stride, 16-byte aligned base and leading stride."""
    if x.dim() != 2 or not x.is_cuda:
        raise ValueError(f"triton_matmul: {name} must be a 2-D CUDA tensor; got shape {tuple(x.shape)} on {x.device}")
    size = x.element_size()
    if x.stride(1) != 1 or (x.stride(0) * size) % 16 or x.data_ptr() % 16:
        raise ValueError(
            f"triton_matmul: {name} (shape {tuple(x.shape)}, strides {tuple(x.stride())}, {x.dtype}) is not TMA-ready: "
            f"it needs inner stride 1, a leading stride of a multiple of 16 bytes ({16 // size} elements) and a "
            f"16-byte aligned address. Pass x.contiguous(), or pad the inner dimension to a multiple of {16 // size}.")


_SM_COUNT: dict[int, int] = {}


def _sm_count(device) -> int:
    index = device.index if device.index is not None else _torch().cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = _torch().cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNT[index]


def _launch(a, b, c, cfg: Config) -> None:
    """One kernel launch writing A @ B into C (all checked by the caller)."""
    (m, k), n = a.shape, b.shape[1]
    a_desc = TensorDescriptor(a, [m, k], [a.stride(0), 1], [cfg.block_m, cfg.block_k])
    b_desc = TensorDescriptor(b, [k, n], [b.stride(0), 1], [cfg.block_k, cfg.block_n])
    c_desc = TensorDescriptor(c, [m, n], [c.stride(0), 1], [cfg.block_m, cfg.block_n // cfg.subtiles])
    sms = _sm_count(a.device)
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    _persistent_tma_matmul[(min(sms, tiles),)](
        a_desc, b_desc, c_desc, m, n, k,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        SUBTILES=cfg.subtiles, NUM_SMS=sms, num_warps=cfg.warps, num_stages=cfg.stages)


def _prepare(a, b, out_dtype):
    """Checked operands and a new C of the result type."""
    torch = _torch()
    _check_tma_operand(a, "a")
    _check_tma_operand(b, "b")
    if a.dtype != b.dtype:
        raise TypeError(f"triton_matmul: a and b must have one type; got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"triton_matmul: a is {tuple(a.shape)} and b is {tuple(b.shape)}: inner dimensions differ")
    if a.device != b.device:
        raise ValueError(f"triton_matmul: a is on {a.device} and b on {b.device}")
    c_dtype = result_dtype(a.dtype, out_dtype)
    c = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=c_dtype)
    _check_tma_operand(c, f"C ({c_dtype}, N = {b.shape[1]})")
    return c


def _key(a, b, c) -> tuple:
    return (tuple(a.shape), tuple(b.shape), a.stride(0), b.stride(0), a.dtype, c.dtype, a.device.index)


_TUNED: dict[tuple, Config] = {}


def triton_matmul(a, b, out_dtype=None, config: Config | None = None, autotune: bool = False):
    """C = A @ B through the persistent TMA kernel (float32 accumulation).

    ``config`` picks the tiles; else a configuration ``tune()`` found for this shape and these
    types, else (``autotune=True``) one found now, else ``DEFAULTS`` for the input type.
    """
    c = _prepare(a, b, out_dtype)
    if config is None:
        config = _TUNED.get(_key(a, b, c))
    if config is None and autotune:
        config = tune(a, b, out_dtype).best
    _launch(a, b, c, config or DEFAULTS[str(a.dtype).replace("torch.", "")])
    return c


class TuneResult(NamedTuple):
    best: Config
    timings: dict  # Config -> milliseconds, or the reason it was not timed


def tune(a, b, out_dtype=None, candidates: list[Config] | None = None, budget_s: float = 20.0) -> TuneResult:
    """Time the candidates on these operands (compiles included in ``budget_s``); remember the fastest.

    A candidate that does not compile or does not fit in shared memory is skipped with its
    reason; once the budget is spent the remaining ones are skipped too.
    """
    torch = _torch()
    c = _prepare(a, b, out_dtype)
    name = str(a.dtype).replace("torch.", "")
    started = time.perf_counter()
    timings: dict[Config, Any] = {}
    for cfg in candidates or CANDIDATES[name]:
        if time.perf_counter() - started > budget_s and timings:
            timings[cfg] = f"skipped: tuning budget of {budget_s:.0f} s spent"
            continue
        try:
            _launch(a, b, c, cfg)
            torch.cuda.synchronize()
            timings[cfg] = time_ms(lambda cfg=cfg: _launch(a, b, c, cfg), repeats=10)
        except Exception as exc:  # OutOfResources, compile errors: a result of tuning
            timings[cfg] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    timed = {cfg: ms for cfg, ms in timings.items() if isinstance(ms, float)}
    if not timed:
        raise RuntimeError(f"triton_matmul.tune: no candidate ran for {tuple(a.shape)} x {tuple(b.shape)}: {timings}")
    best = min(timed, key=timed.get)
    _TUNED[_key(a, b, c)] = best
    return TuneResult(best, timings)


# ---------------------------------------------------------------------------------------------
# compile without a GPU
# ---------------------------------------------------------------------------------------------


def compile_for_target(cfg: Config, in_dtype: str, out_dtype: str, capability: int = 90):
    """Compile the kernel for a CUDA target without a GPU (``triton.compile`` on an ASTSource).

    ``in_dtype`` / ``out_dtype``: "float16", "bfloat16" or "float32". Returns the
    CompiledKernel (``.metadata.shared``, ``.asm["ptx"]``, ``.asm["cubin"]``).
    """
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    a_t, c_t = _TRITON_TYPE[in_dtype], _TRITON_TYPE[out_dtype]
    signature = {
        "a_desc": f"tensordesc<{a_t}[{cfg.block_m}, {cfg.block_k}]>",
        "b_desc": f"tensordesc<{a_t}[{cfg.block_k}, {cfg.block_n}]>",
        "c_desc": f"tensordesc<{c_t}[{cfg.block_m}, {cfg.block_n // cfg.subtiles}]>",
        "M": "i32", "N": "i32", "K": "i32",
        "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr", "GROUP_M": "constexpr",
        "SUBTILES": "constexpr", "NUM_SMS": "constexpr",
    }
    constexprs = {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "GROUP_M": cfg.group_m,
                  "SUBTILES": cfg.subtiles, "NUM_SMS": 132}
    source = ASTSource(fn=_persistent_tma_matmul, signature=signature, constexprs=constexprs)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32),
                          options={"num_warps": cfg.warps, "num_stages": cfg.stages})


def compile_report(capability: int = 90) -> list[dict]:
    """Every candidate of every input type compiled for ``capability``: shared memory, wgmma/TMA in the PTX."""
    rows = []
    for name, (in_dtype, _, default_out) in INPUTS.items():
        outs = [default_out] + (["float16"] if in_dtype == "bfloat16" else [])
        for out_dtype in outs:
            for cfg in CANDIDATES[in_dtype]:
                row = {"type": name, "out": out_dtype, "config": cfg.label()}
                start = time.perf_counter()
                try:
                    kernel = compile_for_target(cfg, in_dtype, out_dtype, capability)
                    ptx = kernel.asm["ptx"]
                    row.update(shared=kernel.metadata.shared, fits=kernel.metadata.shared <= HOPPER_SHARED_BYTES,
                               wgmma="wgmma.mma_async" in ptx, tma="cp.async.bulk.tensor" in ptx,
                               cubin_bytes=len(kernel.asm["cubin"]))
                except Exception as exc:  # reported, not raised: this is a survey
                    row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                row["seconds"] = round(time.perf_counter() - start, 1)
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


# ---------------------------------------------------------------------------------------------
# stand-alone check and benchmark
# ---------------------------------------------------------------------------------------------


CHECK_SHAPES = [(512, 768, 1024), (1000, 1032, 520), (136, 264, 64), (4096, 4096, 4096)]


def _tolerance(in_dtype: str, out_dtype, k: int) -> float:
    """Normwise relative error allowed (blasdx.reference.tolerance's figures for these types)."""
    base = 5e-3 if in_dtype == "float32" else 1e-5  # tf32 operands keep 10 mantissa bits
    if str(out_dtype) == "torch.float16":
        base += 2e-3  # rounding to 11 mantissa bits
    elif str(out_dtype) == "torch.bfloat16":
        base += 8e-3  # rounding to 8 mantissa bits
    return base


def check(a, b, c, rows: int = 64, gen=None) -> float:
    """Normwise relative error of ``rows`` sampled rows of C against the float64 reference."""
    torch = _torch()
    pick = torch.randint(0, a.shape[0], (min(rows, a.shape[0]),), device=a.device, generator=gen)
    ref = a[pick].double() @ b.double()
    got = c[pick].double()
    if not torch.isfinite(got).all():
        return math.inf
    return float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref))


def _operands(name: str, m: int, n: int, k: int, gen):
    torch = _torch()
    dtype = getattr(torch, INPUTS[name][0])
    a = torch.randn(m, k, device="cuda", generator=gen).to(dtype)
    b = torch.randn(k, n, device="cuda", generator=gen).to(dtype)
    return a, b


def _torch_call(name: str, a, b):
    torch = _torch()
    torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
    return lambda: torch.matmul(a, b)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", type=int, default=[4096, 8192])
    parser.add_argument("--types", nargs="*", default=list(INPUTS), choices=list(INPUTS))
    parser.add_argument("--tune", action="store_true", help="time the candidates per shape (<= 20 s each)")
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--compile-only", action="store_true", help="compile every candidate for --capability")
    parser.add_argument("--capability", type=int, default=90)
    args = parser.parse_args(argv)
    if args.compile_only:
        rows = compile_report(args.capability)
        bad = [r for r in rows if "error" in r or not r.get("fits")]
        print(f"{len(rows) - len(bad)} of {len(rows)} configurations compile for sm_{args.capability} and fit")
        return 0
    torch = _torch()
    if not torch.cuda.is_available():
        print("skipped: needs a CUDA GPU (try --compile-only)")
        return 0
    gen = torch.Generator(device="cuda").manual_seed(0)
    failures = 0
    print("correctness (sampled rows against the float64 reference):")
    for name in args.types:
        for m, n, k in CHECK_SHAPES:
            a, b = _operands(name, m, n, k, gen)
            c = triton_matmul(a, b)
            err, tol = check(a, b, c, gen=gen), _tolerance(INPUTS[name][0], c.dtype, k)
            failures += not err <= tol
            print(f"  {name:5s} {m}x{n}x{k} -> {str(c.dtype)[6:]}: relative error {err:.2e} (tolerance {tol:.0e})"
                  f"{'' if err <= tol else '  WRONG'}")
    rows = []
    print("\n| type | size | config | Triton TFLOP/s | torch TFLOP/s | Triton / torch |")
    print("|---|---|---|---|---|---|")
    for name in args.types:
        for size in args.sizes:
            a, b = _operands(name, size, size, size, gen)
            tuned = tune(a, b) if args.tune else None
            cfg = tuned.best if tuned else DEFAULTS[INPUTS[name][0]]
            c = triton_matmul(a, b, config=cfg)
            err, tol = check(a, b, c, gen=gen), _tolerance(INPUTS[name][0], c.dtype, size)
            flops = 2.0 * size**3
            ms = time_ms(lambda a=a, b=b, cfg=cfg: triton_matmul(a, b, config=cfg))
            ms_t = time_ms(_torch_call(name, a, b))
            row = {"type": name, "size": size, "config": asdict(cfg), "ms": ms, "tflops": flops / ms / 1e9,
                   "torch_ms": ms_t, "torch_tflops": flops / ms_t / 1e9, "ratio": ms_t / ms, "error": err,
                   "ok": err <= tol}
            if tuned:
                row["tuning"] = {c.label(): v for c, v in tuned.timings.items()}
            failures += not row["ok"]
            rows.append(row)
            print(f"| {name} | {size} | {cfg.label()} | {row['tflops']:.1f} | {row['torch_tflops']:.1f} | "
                  f"{row['ratio']:.2f}x |{'' if row['ok'] else ' WRONG'}", flush=True)
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                "ratio": "torch time / Triton time (> 1: Triton faster)"}
        out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        print(f"JSON: {out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

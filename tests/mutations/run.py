"""Mutation check of the GPU tests: deliberate bugs that the tests must catch.

Each mutant is a few exact text edits to the kernels or the library (each edit's pattern must
occur exactly once, so a mutant that no longer applies fails loudly instead of testing nothing).
For each, the tree is copied to a temporary folder, the edits applied there, and a small
selection of GPU tests run on the copy with ``-x``; the mutant is caught when one of them fails.
An unmodified copy runs the union of the selections first-hand as the baseline, which must pass.
Mutants run in parallel (one GPU, several processes). Writes ``mutations.json`` and a Markdown
table (mutant, the tests that caught it) to ``--logs``.

    python3 tests/mutations/run.py --logs DIR [--budget SECONDS] [--jobs N] [--only NAME ...]

Needs a Hopper GPU (sm_90), PyTorch and pytest on the machine; run from the repository root.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mutant:
    """A named bug: (path, pattern, replacement) edits and the tests expected to catch it."""

    name: str
    what: str
    edits: tuple[tuple[str, str, str], ...]
    tests: tuple[str, ...]


MUTANTS = [
    Mutant(
        "hopper-tile-edge-element",
        "Hopper engine epilogue: the last element of each 64 x 128 output tile's last row gets the wrong sign",
        (("kernels/blasdx/hopper/epilogue.cuh",
          "        v0 *= alpha;\n        v1 *= alpha;\n",
          "        v0 *= alpha;\n        v1 *= alpha;\n        if ((row & 63) == 63 && (col & 127) == 126) v1 = -v1;\n"),),
        ("tests/test_gpu_hopper.py::test_alpha_beta_and_strided_c_d",
         "tests/test_gpu_hopper.py::test_matmul_result_and_plan"),
    ),
    Mutant(
        "hopper-skipped-k-tail",
        "Hopper scheduler: K steps rounded down, so a K that is not a multiple of BK loses its last partial step",
        (("kernels/blasdx/hopper/scheduler.cuh",
          "        steps = (k + BK - 1) / BK;\n",
          "        steps = k / BK;\n"),),
        ("tests/test_gpu_hopper.py::test_alpha_beta_and_strided_c_d",
         "tests/test_gpu_hopper.py::test_repacked_operands"),
    ),
    Mutant(
        "scaled-mm-row-scale",
        "scaled_mm epilogue: row 7 of x takes row 8's scale factor",
        (("kernels/blasdx/hopper/scaling.cuh",
          "f *= __ldg(sx + min(row, m - 1) * sx_stride);",
          "f *= __ldg(sx + min(row + (row == 7), m - 1) * sx_stride);"),),
        ("tests/test_gpu_hopper_8bit.py::test_scaled_mm_every_scaling[row-column-float16]",
         "tests/test_gpu_hopper_8bit.py::test_scaled_mm_every_scaling[row-tensor-float32]"),
    ),
    Mutant(
        "block-store-past-view",
        "batched block GEMM: the store of C writes one element past the last one of each problem's view",
        (("kernels/blasdx/copy.cuh",
          "        *reinterpret_cast<Vec*>(dst + i64(r) * LDG + c) = *reinterpret_cast<const Vec*>(src + r * LDS + c);\n",
          ("        *reinterpret_cast<Vec*>(dst + i64(r) * LDG + c) = *reinterpret_cast<const Vec*>(src + r * LDS + c);\n"
           "        if (r == OUTER - 1 && c + VEC_BYTES / int(sizeof(T)) >= INNER) dst[i64(r) * LDG + INNER] = src[r * LDS];\n")),
         ("kernels/batched_gemm.cu",
          "        scale_store(dst, alpha, beta, read_c, value);\n    };\n",
          ("        scale_store(dst, alpha, beta, read_c, value);\n"
           "        if ((Cfg::c_row_major ? row : col) == Cfg::c_outer - 1 && (Cfg::c_row_major ? col : row) == Cfg::c_inner - 1)\n"
           "            dst[1] = dst[0];\n    };\n"))),
        ("tests/test_gpu_gemm.py::test_explicit_leading_dimensions_and_alignment",
         "tests/test_gpu_gemm.py::test_batch_broadcast"),
    ),
    Mutant(
        "execute-wrong-stream",
        "Descriptor.execute launches on the legacy default stream instead of the resolved one",
        (("blasdx/run/execute.py",
          "        device_plan.launch(batch, handle, launch[4])\n",
          "        device_plan.launch(batch, 1, launch[4])  # CU_STREAM_LEGACY\n"),),
        ("tests/test_gpu_gemm.py::test_torch_stream_orders_work",
         "tests/test_gpu_gemm.py::test_default_stream_uses_torch_current_stream"),
    ),
    Mutant(
        "matmul-wrong-stream",
        "bx.matmul / bx.mma run the Hopper engine on the legacy default stream instead of the call's",
        (("blasdx/calls/matmul.py",
          "            plan.kernel.run(plan.device_id, core, handle, x_view, y_view, vacc, vout, 1.0, float(plan.beta))\n",
          ("            plan.kernel.run(plan.device_id, _arrays.as_core_stream(None, 1), 1, x_view, y_view, vacc, vout, 1.0,"
           " float(plan.beta))\n")),),
        ("tests/test_gpu_hopper.py::test_streams_and_repeat_calls",),
    ),
]


@dataclass
class Outcome:
    name: str
    caught_by: list[str] = field(default_factory=list)
    passed: int = 0
    returncode: int | None = None
    seconds: float = 0.0
    note: str = ""


def apply(tree: Path, mutant: Mutant) -> None:
    """The mutant's edits in ``tree``; ValueError when a pattern does not occur exactly once."""
    for path, old, new in mutant.edits:
        file = tree / path
        text = file.read_text()
        count = text.count(old)
        if count != 1:
            raise ValueError(f"{mutant.name}: {path}: the pattern occurs {count} times (expected once)")
        file.write_text(text.replace(old, new))


def copy_tree(dst: Path) -> None:
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", ".venv", "*.egg-info", ".pytest_cache", ".hypothesis", "results", "docs", "*.png"))


def run_one(mutant: Mutant, tests: tuple[str, ...], timeout: float, logs: Path) -> Outcome:
    """Copy, mutate, run ``tests`` with -x on the copy; who failed."""
    started = time.monotonic()
    outcome = Outcome(mutant.name)
    with tempfile.TemporaryDirectory(prefix=f"blasdx-mutant-{mutant.name}-") as folder:
        tree = Path(folder) / "tree"
        copy_tree(tree)
        try:
            apply(tree, mutant)
        except ValueError as exc:
            outcome.note = str(exc)
            return outcome
        env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
        env.pop("BLASDX_MARGINS_JSON", None)
        cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-x", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
               "-rfE", *tests]
        try:
            done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout,
                                  check=False)
            output, outcome.returncode = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired as exc:
            output = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            outcome.note = f"timed out after {timeout:.0f} s"
    (logs / f"mutant-{mutant.name}.txt").write_text(output)
    for line in output.splitlines():
        found = re.match(r"^(FAILED|ERROR) (\S+)(?: - (.*))?", line)
        if found:
            outcome.caught_by.append(f"{found.group(2)}: {(found.group(3) or found.group(1))[:160]}")
    passed = re.search(r"(\d+) passed", output)
    outcome.passed = int(passed.group(1)) if passed else 0
    if outcome.returncode not in (0, 1) and not outcome.note:
        outcome.note = f"pytest exit {outcome.returncode}"
    outcome.seconds = time.monotonic() - started
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, default=Path("mutation-logs"))
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the whole check")
    parser.add_argument("--jobs", type=int, default=7)
    parser.add_argument("--only", nargs="*", default=None, help="mutant names to run (default: all)")
    args = parser.parse_args(argv)
    args.logs.mkdir(parents=True, exist_ok=True)
    mutants = [m for m in MUTANTS if args.only is None or m.name in args.only]
    baseline = Mutant("baseline", "the tree as it is", (), ())
    union = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
    jobs = [(baseline, union)] + [(m, m.tests) for m in mutants]
    timeout = max(args.budget - 5, 10)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        outcomes = list(pool.map(lambda job: run_one(job[0], job[1], timeout, args.logs), jobs))
    base, results = outcomes[0], outcomes[1:]
    table = ["| mutant | what | caught by |", "|---|---|---|"]
    for mutant, outcome in zip(mutants, results):
        caught = "<br>".join(outcome.caught_by) if outcome.caught_by else f"NOT CAUGHT {outcome.note}".strip()
        table.append(f"| {mutant.name} | {mutant.what} | {caught} |")
    base_ok = base.returncode == 0 and not base.caught_by
    summary = (f"baseline: {'passed' if base_ok else 'FAILED'} ({base.passed} passed, {base.seconds:.0f} s) "
               f"{'; '.join(base.caught_by)} {base.note}".strip())
    print(summary)
    print("\n".join(table))
    (args.logs / "mutations.md").write_text(summary + "\n\n" + "\n".join(table) + "\n")
    (args.logs / "mutations.json").write_text(json.dumps(
        {"baseline": base.__dict__, "mutants": [dict(o.__dict__, what=m.what, tests=m.tests)
                                                for m, o in zip(mutants, results)]}, indent=1))
    all_caught = all(o.caught_by for o in results)
    return 0 if base_ok and all_caught else 1


if __name__ == "__main__":
    sys.exit(main())

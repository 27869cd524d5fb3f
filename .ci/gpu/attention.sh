#!/usr/bin/env bash
# GPU job of the flash-attention forward: correctness first, then a short benchmark.
# Run from the repo root with PYTHONPATH=. set; logs and JSON go to "$LOGS".
set -uo pipefail
LOGS="${LOGS:-gpu-logs}"; mkdir -p "$LOGS"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
# compile the example's kernels in parallel into the disk cache, so that test workers find them
timeout 16 python3 - > "$LOGS/build.log" 2>&1 <<'PY'
import sys; sys.path.insert(0, "examples")
from concurrent.futures import ProcessPoolExecutor
import blasdx as bx, flash_attention as fa
CASES = [(d, dt, c, True, 128) for d in (64, 128) for dt in ("float16", "bfloat16") for c in (False, True)]
CASES += [(d, "float16", c, False, 128) for d in (64, 128) for c in (False, True)]
CASES += [(d, "float16", c, True, 64) for d in (64, 128) for c in (False, True)]
def build(case):
    d, dt, c, pipe, bn = case
    k = fa.build(d, fa.DTYPES[dt], c, pipe, bn)
    return f"D={d} {dt} causal={c} pipelined={pipe} block_n={bn}: {k.registers} registers, {k.local_memory} B local"
with ProcessPoolExecutor(12) as pool:
    for line in pool.map(build, CASES): print(line)
PY
echo "build rc=$?"; tail -17 "$LOGS/build.log"
timeout 24 python3 -m pytest -m gpu -q -x -p no:cacheprovider -n 6 tests/test_gpu_flash_attention.py \
  > "$LOGS/tests.log" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|Error" "$LOGS/tests.log" | tail -12
timeout 14 python3 benchmarks/attention.py --seq 1024 4096 --head-dim 64 128 --causal both --unpipelined --block-n 64 \
  --out "$LOGS/attention.json" > "$LOGS/bench.log" 2>&1
echo "bench rc=$?"; tail -12 "$LOGS/bench.log"

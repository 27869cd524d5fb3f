#!/usr/bin/env bash
# The engine's float64 / float32 path (blasdx.engine.wide): its GPU tests (every tile, small ones included, and
# bx.tune on it), then blocked solves with and without the small tiles in one process, and the LLM suite's f32 /
# f64 subset against torch. Runs from the repository root with PYTHONPATH set; logs and JSON go to "$LOGS".
# budget: 200
set -uo pipefail
LOGS=${LOGS:-/tmp/wide-logs}
mkdir -p "$LOGS"
timeout 90 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider -n 12 tests/test_gpu_hopper_wide.py \
  tests/test_gpu_engine_tune.py >"$LOGS/tests.log" 2>&1
echo "tests: rc=$?"; tail -2 "$LOGS/tests.log"
grep -h "^FAILED\|^E  " "$LOGS/tests.log" | cut -c1-200 | head -12
timeout 50 python3 -u benchmarks/trsm.py --large --small-tiles --types f32 f64 --sizes 1024 2048 \
  --json "$LOGS/trsm_large.json" >"$LOGS/trsm_large.log" 2>&1
echo "trsm --small-tiles: rc=$?"; grep -h "batch\|tiles only\|FAILED" "$LOGS/trsm_large.log" | cut -c1-200 | head -12
timeout 45 python3 -u benchmarks/llm_shapes.py --types f32 f64 --layouts nk --budget 35 \
  --json "$LOGS/llm_shapes_f32_f64.json" >"$LOGS/llm_shapes.log" 2>&1
echo "llm_shapes f32 f64: rc=$?"; grep -E "^\| f(32|64)|geomean" "$LOGS/llm_shapes.log" | cut -c1-120

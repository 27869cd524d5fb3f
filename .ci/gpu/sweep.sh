#!/usr/bin/env bash
# The engine's configuration sweep of the LLM suite's shape classes (benchmarks/llm_shapes.py --sweep: every
# candidate tile, cluster and split count timed by CUDA-graph replay, the rule's choice marked, torch beside), the
# figures blasdx/engine/hopper.py's rule is set from. Runs from the repository root with PYTHONPATH set; logs and
# JSON go to "$LOGS".
# budget: 330
set -uo pipefail
LOGS=${LOGS:-/tmp/sweep-logs}
mkdir -p "$LOGS"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache-sweep}"
timeout 320 python3 -u benchmarks/llm_shapes.py --no-suite --sweep --budget 290 --workers 16 \
  --json "$LOGS/llm_shapes_sweep.json" >"$LOGS/sweep.log" 2>&1
echo "sweep: rc=$?"; grep -E "^  best|out of time" "$LOGS/sweep.log" | cut -c1-170

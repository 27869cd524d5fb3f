#!/usr/bin/env bash
# GPU checks of the numerics work: blocked triangular solves first, then complex products and
# 3xtf32 accuracy. Runs from the repository root with PYTHONPATH set; logs go to "$LOGS".
set -uo pipefail
LOGS=${LOGS:-/tmp/numerics-logs}
mkdir -p "$LOGS"
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
timeout 45 python3 -m pytest -m gpu -q -x -p no:cacheprovider -n 8 tests/test_gpu_blocked_trsm.py \
  >"$LOGS/blocked_trsm.log" 2>&1
echo "blocked trsm: rc=$?"; tail -15 "$LOGS/blocked_trsm.log"

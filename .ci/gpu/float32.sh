#!/usr/bin/env bash
# float32 on tf32 tensor cores (3xtf32, blasdx.engine.emulation): its GPU tests, the accuracy study
# (K = 16 .. 65536, 21 and 23 bits against torch float32) and the speed at 4096^3 / 8192^3 beside
# torch float32 and tf32. Runs from the repository root with PYTHONPATH set; logs and JSON go to "$LOGS".
# budget: 150
set -uo pipefail
LOGS=${LOGS:-/tmp/float32-logs}
mkdir -p "$LOGS"
timeout 70 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider -n 8 tests/test_gpu_emulation.py >"$LOGS/tests.log" 2>&1
echo "tests: rc=$?"; tail -2 "$LOGS/tests.log"
grep -h "^FAILED\|^E  " "$LOGS/tests.log" | cut -c1-200 | head -12
timeout 35 python3 -u benchmarks/emulated_f32.py --accuracy 16 64 256 1024 4096 16384 65536 \
  --json "$LOGS/emulated_f32_accuracy.json" >"$LOGS/accuracy.log" 2>&1
echo "accuracy: rc=$?"; grep -h "^K" "$LOGS/accuracy.log" | sed 's/, torch tf32.*(3x/ (3x/' | cut -c1-150
timeout 40 python3 -u benchmarks/emulated_f32.py --sizes 4096 8192 --json "$LOGS/emulated_f32.json" \
  >"$LOGS/speed.log" 2>&1
echo "speed: rc=$?"; grep -h "normal\|wide" "$LOGS/speed.log" | sed 's/ TF\/s err /@/g' | cut -c1-220

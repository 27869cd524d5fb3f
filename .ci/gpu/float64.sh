#!/usr/bin/env bash
# float64 on int8 tensor cores (blasdx.engine.ozaki): its GPU tests, then each stage of a call timed apart
# (x's and y's residues, the byte-residue int8 GEMMs, the combine) beside torch float64 at 4096^3 and 8192^3.
# Runs from the repository root with PYTHONPATH set; logs and JSON go to "$LOGS".
# budget: 200
set -uo pipefail
LOGS=${LOGS:-/tmp/float64-logs}
mkdir -p "$LOGS"
timeout 100 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider -n 8 tests/test_gpu_ozaki.py >"$LOGS/tests.log" 2>&1
echo "tests: rc=$?"; tail -2 "$LOGS/tests.log"
grep -h "^FAILED\|^E  " "$LOGS/tests.log" | cut -c1-200 | head -12
timeout 90 python3 -u benchmarks/emulated_f64.py --sizes 4096 8192 --bits 52 44 --json "$LOGS/emulated_f64.json" \
  >"$LOGS/emulated_f64.log" 2>&1
echo "emulated_f64: rc=$?"; tail -20 "$LOGS/emulated_f64.log"

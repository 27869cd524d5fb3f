#!/usr/bin/env bash
# bx.grouped_mm on the GPU: the tests that prove it (tests/test_gpu_grouped_mm.py). Run from the
# repository root with PYTHONPATH=. and $LOGS an existing folder.
set -u
LOGS=${LOGS:-/tmp}
timeout 55 python3 -m pytest -m gpu -v -x -p no:cacheprovider -n 8 -o faulthandler_timeout=50 \
    tests/test_gpu_grouped_mm.py --junitxml="$LOGS/junit.xml" > "$LOGS/tests.txt" 2>&1
echo "tests rc=$?"
echo "passed: $(grep -c ' PASSED ' "$LOGS/tests.txt")"
grep -E "^(FAILED|ERROR) " "$LOGS/tests.txt" | head -20
grep -E "^E  " "$LOGS/tests.txt" | cut -c1-200 | sort | uniq -c | sort -rn | head -8
tail -n 2 "$LOGS/tests.txt"

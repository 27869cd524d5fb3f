#!/usr/bin/env bash
# TRSM on the GPU machine: the GPU tests, compute-sanitizer memcheck and racecheck on small
# TRSM cases (batched kernel and device API), then benchmarks/trsm.py. Runs from the repo root
# with PYTHONPATH=. and logs everything under "$OUT" (one .log per step, trsm.json); about
# five minutes on an H100/H200. Exit status: 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache}"
logs="${OUT:?set OUT to a folder for the logs}"
mkdir -p "$logs"
status=0
run() {  # run NAME CMD...: log to $logs/NAME.log, keep going, remember a failure
  local name=$1; shift
  echo "=== $name: $*"
  local start=$SECONDS
  "$@" > "$logs/$name.log" 2>&1; local rc=$?
  tail -n 4 "$logs/$name.log"; echo "=== $name exit $rc ($((SECONDS - start)) s)"
  [ $rc -eq 0 ] || status=1
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$logs/gpu.txt" 2>&1
run trsm-gpu-tests python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_trsm.py
# small cases: multi-panel f64 on DMMA, a partial block of several problems with a shared A,
# several right-hand sides per thread, one-panel complex, and the device API on a larger block
run trsm-memcheck compute-sanitizer --tool memcheck --error-exitcode 1 \
  python3 -m pytest -m gpu -q -x -p no:cacheprovider tests/test_gpu_trsm.py -k sanitize
run trsm-racecheck compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 -m pytest -m gpu -q -x -p no:cacheprovider tests/test_gpu_trsm.py -k sanitize
run trsm-bench python3 benchmarks/trsm.py --gbytes 0.5 --json "$logs/trsm.json"
exit $status

#!/usr/bin/env bash
# GPU check of this branch's changes: the fusion tests' kernels now come from one place
# (tests/fusion_kernels.py: a load_ab helper, the shared-memory API loading C first), so run
# them on the GPU against the float64 reference. Most informative first; logs in $LOGS.
set -uo pipefail
logs="${LOGS:-gpu-logs}"; mkdir -p "$logs"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache}"
run() {  # run NAME CMD...: log to $logs/NAME.log, print its summary line
  local name=$1; shift
  "$@" > "$logs/$name.log" 2>&1; local rc=$?
  echo "$name: exit $rc: $(grep -E 'passed|failed|error' "$logs/$name.log" | tail -n 1)"
}
# every type through the register and shared-memory API (one module fixture compiles them all)
run fusion-types python3 -m pytest -m gpu -q -x -p no:cacheprovider tests/test_gpu_fusion.py \
  -k "register_and_shared_memory_api_every_type"
# the wgmma forms (register_api, twice, elements, user_fill, shared_api), each op, two cases: compiled
# on demand in each worker (the module compiles only the selected cases under xdist)
run wgmma-fusion python3 -m pytest -m gpu -q -x -p no:cacheprovider -n 4 tests/test_gpu_wgmma_fusion.py \
  -k "every_api_form and 64x64x64 and (float16xfloat16-float32-rcr or float8_e4m3xfloat8_e4m3-float32)"

#!/usr/bin/env bash
# Device handling on a machine with two GPUs: the multi-GPU tests, the GPU tests of the code
# paths device handling changed, examples/multi_gpu.py and benchmarks/launch_overhead.py.
#
#   OUT=/some/folder bash benchmarks/multi_gpu_job.sh        (from the repository root)
#
# Every step writes <step>.log under $OUT and a line "<step>: rc=<exit status> (<seconds> s)"
# to $OUT/summary.txt; launch_overhead.json lands there too. Each step has a time limit so
# that the whole job stays under about six minutes; a step that hits it reports rc=124.
# PYTHON picks the interpreter (default: python); the repository root is put on PYTHONPATH.

set -u
: "${OUT:?set OUT to the folder the logs go to}"
PY="${PYTHON:-python}"
export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
: > "$OUT/summary.txt"

step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: rc=$rc ($((SECONDS - start)) s)" | tee -a "$OUT/summary.txt"
}

{ nvidia-smi -L; "$PY" -c "import cuda.core, torch; print('cuda.core', cuda.core.__version__, 'torch', torch.__version__)"; } \
    > "$OUT/machine.txt" 2>&1

step multi_gpu_tests 110 "$PY" -m pytest -q -p no:cacheprovider -m multigpu tests/test_multi_gpu.py
step device_cpu_tests 40 "$PY" -m pytest -q -p no:cacheprovider tests/test_devices.py tests/test_structure.py \
    tests/test_execute_validation.py
step gpu_tests_touched 150 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu_gemm.py \
    tests/test_gpu_array_gemm.py tests/test_gpu_fusion.py tests/test_execute_validation.py tests/test_arrays.py \
    tests/test_compiler.py
step multi_gpu_example 45 "$PY" examples/multi_gpu.py
step launch_overhead 60 "$PY" benchmarks/launch_overhead.py --rounds 11 --out "$OUT/launch_overhead.json"

echo "logs in $OUT"

#!/usr/bin/env bash
# blasdx GEMMs inside kernels of other JITs: the Numba bridge (blasdx.numba) and LTO-IR entry points
# linked with cuda.core, then one case of the Numba benchmark against nvmath.device. Runs from the repo
# root with $LOGS set; the carried wheels give numba-cuda a numpy it imports under and nvmath-python its
# libmathdx. Budget: $NUMBA_JOB_SECONDS (default 60).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site LD_LIBRARY_PATH=/tmp/site/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
set -uo pipefail
logs="${LOGS:-gpu-logs}"; mkdir -p "$logs"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache-numba}" PYTHONUNBUFFERED=1
budget="${NUMBA_JOB_SECONDS:-60}"
start=$SECONDS
left() { echo $(( budget - (SECONDS - start) - 2 )); }

# 1. Numba kernels with blasdx GEMMs (one case per kind of instruction, both APIs) and the examples,
#    then LTO-IR linked by cuda.core's Linker into a kernel compiled apart (the example and two cases)
timeout "$(( $(left) * 60 / 100 ))" python3 -m pytest -m gpu -v -rf --tb=short -p no:cacheprovider -n 8 -x \
  tests/test_gpu_numba.py tests/test_gpu_ltoir.py \
  -k "float16xfloat16-float32-32x32x32-rrr-sm90a or bfloat16xbfloat16-float32-64x64x64-ccc or float64xfloat64-float64-128x128x64-ccc or int8xint8-int32-64x64x64-ccc-sm90a or float32xfloat32-float32-17x33x9-rcc or complex-float64 or examples_run or cuda_core_example or (test_entry_points and (float16xfloat16-float32 or int8))" \
  > "$logs/test_gpu.log" 2>&1
echo "=== tests exit $? ($((SECONDS - start)) s)"
grep -cE "PASSED" "$logs/test_gpu.log" | sed 's/^/passed: /'
grep -E "^FAILED|^E  |ERROR" "$logs/test_gpu.log" | head -12 | cut -c1-240

# 2. one case of the same Numba kernel with blasdx and with nvmath.device (progress printed as it goes)
timeout "$(left)" python3 benchmarks/numba_gemm.py --cases "f16->f32" --sizes 64x64x64 --kinds compute \
  --json "$logs/numba_gemm.json" > "$logs/numba_gemm.log" 2>&1
echo "=== benchmarks/numba_gemm.py exit $? ($((SECONDS - start)) s)"; cut -c1-200 "$logs/numba_gemm.log" | tail -n 12

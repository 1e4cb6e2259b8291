#!/bin/bash
# Builds and tests the Python package on the GPU machine (torch, transformers and CUDA are there):
#   bash tests/python/run_on_gpu.sh            # from the repository root; logs go to $OUT (or /tmp)
# 1. pip install --no-build-isolation (CUDA backends for sm_90a only, to keep the build short);
# 2. a preflight: a library error raised through Python with and without torch imported (a crash here was
#    seen once on the GPU machine, see docs/python.md), with a native backtrace when it crashes;
# 3. the Python tests file by file, so that a crash in one file does not hide the results of the others.
# Set LIMIT_S (default 560) to the seconds the whole script may take.
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp}
limit=${LIMIT_S:-560}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-16} PYTHONUNBUFFERED=1
start=$(date +%s)

if ! python3 -m pip install --no-build-isolation --no-deps -C cmake.define.FLASHATTN_CUDA_ARCHS=90a . \
    > "$out/build.log" 2>&1; then
  grep -E " error|Error" "$out/build.log" | head -20
  exit 1
fi
echo "build: $(( $(date +%s) - start ))s"

probe='
import sys
if sys.argv[1] == "torch": import torch
import numpy as np, flashattn
k = np.zeros((1, 4, 1, 16), np.float32)
try:
    flashattn.flash_attn_func(k[0], k, k)
except ValueError as e:
    print("ValueError raised as expected")
'
status=0
for mode in plain torch; do
  (cd /tmp && python3 -X faulthandler -c "$probe" "$mode" > "$out/preflight_$mode.txt" 2>&1)
  rc=$?
  echo "preflight ($mode): rc=$rc $(head -c 200 "$out/preflight_$mode.txt" | tr '\n' ' ')"
  if [ $rc -ne 0 ]; then
    status=1
    (cd /tmp && timeout 90 cuda-gdb -batch -ex run -ex bt --args python3 -c "$probe" "$mode" 2>&1 |
       grep -E "^#|SIG" | head -30)
  fi
done

for group in test_errors.py "test_numpy_*.py" test_paged_varlen.py test_compat_alias.py test_torch_attention.py \
    test_torch_kvcache.py test_torch_distributed.py test_torch_transformers.py; do
  left=$(( limit - ($(date +%s) - start) ))
  if [ $left -lt 20 ]; then echo "no time left for $group"; status=1; break; fi
  echo "=== $group (limit ${left}s)"
  # shellcheck disable=SC2086  # the group is a glob on purpose
  timeout $left python3 -m pytest tests/python/$group -q -rs -p no:cacheprovider 2>&1 |
    tee -a "$out/pytest.log" | grep -vE "^\s*$" | tail -40
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
exit $status

#!/usr/bin/env bash
# On the GPU machine: build, then CUDA tests, CUDA benchmark or the CPU benchmark. Logs go to
# $OUT (or ./gpu_out).
# Usage: tools/gpu_session.sh [test|bench|cuda|cpubench|all] [pytest -k expression, default cuda]
#   test      the CUDA tests (about 4 minutes at most)
#   bench     the CUDA benchmark: --device cuda --world-sizes 1,2,4 (about 3 minutes at most)
#   cuda      test, then bench: fits one call of the device tool (10 minutes)
#   cpubench  the CPU benchmark on the machine's cores, 2/4/8 ranks beside Open MPI, timed like
#             the docs command (5 rounds of 0.2 s, 3 passes, best pass kept: small-message times
#             there varied 2x from run to run); up to 9 minutes, so give it a call of its own
#   all       everything, for a machine without the tool's 10-minute limit
set -uo pipefail
out=${OUT:-gpu_out}; mkdir -p "$out"
what=${1:-all}
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}
# The image's CXX (/opt/gcc/bin/g++) puts libstdc++ code into the extension: its copy of the
# iostream/locale code then meets the system libstdc++'s facets and crashes (c10::str of an int).
echo "CXX was ${CXX:-unset}"; head -c 600 /opt/gcc/bin/g++ 2>/dev/null | strings | head -8
export CXX=${DC_CXX:-g++}
SECONDS=0
{ nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'; nproc; } 2>&1
python3 -m pip install --no-build-isolation --no-deps -q -e . >/tmp/build.log 2>&1 \
  || { cp /tmp/build.log "$out/"; grep -B2 -A8 "error" /tmp/build.log | head -80; exit 1; }
echo "build: ${SECONDS}s"
if [[ $what == test || $what == cuda || $what == all ]]; then
  SECONDS=0
  timeout 240 python3 -m pytest tests -q -p no:cacheprovider -k "${2:-cuda}" 2>&1 | tee "$out/tests.log" | tail -25
  echo "tests: ${SECONDS}s"
fi
if [[ $what == bench || $what == cuda || $what == all ]]; then
  SECONDS=0
  timeout 200 python3 -m dummy_collectives.bench --device cuda --world-sizes "${BENCH_WS:-1,2,4}" \
    --sizes "${BENCH_SIZES:-4,64K,1M,16M,64M,256M}" --rounds 3 --round-time 0.1 --peers none \
    --out "$out/bench" --no-plot > "$out/bench.log" 2>&1; tail -3 "$out/bench.log"
  echo "bench: ${SECONDS}s"
fi
if [[ $what == cpubench || $what == all ]]; then
  SECONDS=0
  timeout "${CPU_BENCH_TIMEOUT:-480}" python3 -m dummy_collectives.bench --world-sizes 2,4,8 \
    --sizes "${CPU_BENCH_SIZES:-4,4K,64K,1M,16M,64M}" --rounds 5 --passes "${CPU_BENCH_PASSES:-3}" \
    --peers openmpi --out "$out/cpubench" --no-plot > "$out/cpubench.log" 2>&1
  tail -3 "$out/cpubench.log"
  echo "cpubench: ${SECONDS}s"
fi

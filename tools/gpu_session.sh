#!/usr/bin/env bash
# On the GPU machine: build, then CUDA tests, CUDA benchmark or the CPU benchmark. Logs go to
# $OUT (or ./gpu_out).
# Usage: tools/gpu_session.sh [STAGE[,STAGE...]|cuda|all] [pytest -k expression, default cuda]
#   test      the CUDA tests, those across namespaced hosts included (CUDA memory through UCX:
#             carry .iproute and .libucx, tools/carry_iproute.sh and tools/carry_libucx.sh;
#             about 4 minutes at most)
#   bench     the CUDA benchmark: --device cuda --world-sizes 1,2,4 (about 3 minutes at most)
#   kernel    tools/fold_kernel_bench.cu: shapes of the shared-GPU fold against the copy bound
#   hosts     the benchmark across 4 namespaced hosts x 4 ranks, unshaped then 1 Gbit/s links
#             (HOSTS_PASSES passes, default 1; about 4 minutes). The image has no iproute2:
#             `tools/carry_iproute.sh fetch` here, then carry .iproute in the device call
#   cpubench  the CPU benchmark on the machine's cores, 2/4/8 ranks beside Open MPI, timed like
#             the docs command (5 rounds of 0.2 s, 3 passes, best pass kept: small-message times
#             there varied 2x from run to run); up to 9 minutes, so give it a call of its own
#   cuda      test,bench: fits one call of the device tool (10 minutes)
#   all       everything, for a machine without the tool's 10-minute limit
set -uo pipefail
out=${OUT:-gpu_out}; mkdir -p "$out"
what=${1:-all}
[[ $what == cuda ]] && what=test,bench
[[ $what == all ]] && what=test,bench,kernel,hosts,cpubench
wants() { [[ ,$what, == *,$1,* ]]; }
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
# Namespaced hosts need ip and tc, which the image lacks: carried (tools/carry_iproute.sh).
if ! command -v ip >/dev/null && [[ -d .iproute ]]; then source tools/carry_iproute.sh; fi
# CUDA tensors across hosts stay in CUDA memory only where UCX loads with its CUDA modules: the
# libucx wheel's, carried (tools/carry_libucx.sh) where the image has none.
if ! python3 -c 'import libucx' 2>/dev/null; then source tools/carry_libucx.sh; fi
if wants kernel; then
  SECONDS=0
  nvcc -O3 -std=c++17 -arch=sm_90 tools/fold_kernel_bench.cu -o /tmp/fold_kernel_bench &&
    timeout 120 /tmp/fold_kernel_bench > "$out/kernel.log" 2>&1
  # Per message size and rank count: the shipped shape and the three fastest.
  python3 - "$out/kernel.log" <<'PY'
import sys
section = []
def show():
    if section:
        rows = sorted(section[1:], key=lambda line: float(line.split()[-2].rstrip("x")))
        print(section[0], *[r for r in section[1:] if "shipped" in r], *rows[:3], sep="\n")
for line in open(sys.argv[1]).read().splitlines() + [""]:
    if "host calls" in line:
        show(); section = []; print(line); continue
    if line.startswith("  cuda"):
        print(line); continue
    if "MiB" in line or not line.strip():
        show(); section = [line] if line.strip() else []
    else:
        section.append(line)
PY
  echo "kernel: ${SECONDS}s"
fi
if wants test; then
  SECONDS=0
  timeout 240 python3 -m pytest tests -q -p no:cacheprovider -k "${2:-cuda}" 2>&1 | tee "$out/tests.log" | tail -25
  echo "tests: ${SECONDS}s"
fi
if wants bench; then
  SECONDS=0
  timeout 200 python3 -m benchmarks.bench --device cuda --world-sizes "${BENCH_WS:-1,2,4}" \
    --sizes "${BENCH_SIZES:-4,64K,1M,16M,64M,256M}" --rounds 3 --round-time 0.1 --peers none \
    --out "$out/bench" --no-plot > "$out/bench.log" 2>&1; tail -3 "$out/bench.log"
  echo "bench: ${SECONDS}s"
fi
if wants hosts; then
  SECONDS=0
  python3 -c 'from tools import namespaced_hosts as n; print("namespaces:", n.available())'
  for rate in "" 1gbit; do
    timeout 200 python3 -m benchmarks.bench --hosts 4 --ranks-per-host 4 \
      --sizes 4,4K,64K,1M,4M,16M,64M --passes "${HOSTS_PASSES:-1}" ${rate:+--link-rate $rate} \
      --out "$out/hosts${rate}" --no-plot > "$out/hosts${rate}.log" 2>&1
    echo "== hosts ${rate:-unshaped}: exit $?"; grep -E "^\| .*(PASS|FAIL)" "$out/hosts${rate}/report.md"
  done
  echo "hosts: ${SECONDS}s"
fi
if wants cpubench; then
  SECONDS=0
  timeout "${CPU_BENCH_TIMEOUT:-480}" python3 -m benchmarks.bench --world-sizes 2,4,8 \
    --sizes "${CPU_BENCH_SIZES:-4,4K,64K,1M,16M,64M}" --rounds 5 --passes "${CPU_BENCH_PASSES:-3}" \
    --peers openmpi --out "$out/cpubench" --no-plot > "$out/cpubench.log" 2>&1
  tail -3 "$out/cpubench.log"
  echo "cpubench: ${SECONDS}s"
fi

#!/usr/bin/env bash
# GPU machine: dummy's CUDA allreduce against the staging-buffer size, and the GPU's own copy
# and add bandwidth in one process (what the device path can at best reach).
set -uo pipefail
out=${OUT:-gpu_out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 - <<'PY'
import torch
x = torch.ones(16 << 20, device="cuda"); y = torch.ones_like(x); z = torch.empty_like(x)
for name, fn, traffic in (("copy 64MiB", lambda: z.copy_(x), 2), ("add 64MiB", lambda: torch.add(x, y, out=z), 3)):
    for _ in range(3): fn()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    torch.cuda.synchronize(); s.record()
    for _ in range(20): fn()
    e.record(); torch.cuda.synchronize()
    ms = s.elapsed_time(e) / 20
    print(f"{name}: {ms*1000:.1f} us, {traffic * 64 / 1024 / (ms / 1000):.0f} GiB/s of traffic")
PY
for bytes in ${PROBE_BUFFERS:-8388608 33554432 134217728}; do
  DUMMY_COLLECTIVES_CUDA_BUFFER_BYTES=$bytes timeout 100 python3 -m benchmarks.bench \
    --device cuda --world-sizes 2,4 --sizes 4,1M,64M,256M --backends dummy --rounds 3 \
    --round-time 0.1 --peers none --out "/tmp/probe$bytes" --no-plot > "/tmp/probe$bytes.log" 2>&1
  echo "== buffer $bytes"
  grep -E "^\| (4B|1MiB|64MiB|256MiB) " "/tmp/probe$bytes/report.md" | cut -d'|' -f1-4 | head -8
done

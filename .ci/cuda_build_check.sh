#!/usr/bin/env bash
# CUDA compile check: builds the extension against a CUDA torch (torch==2.14.1, CUDA 13.0) and
# the CUDA toolkit, as setup.py's CUDAExtension (DUMMY_COLLECTIVES_WITH_CUDA defined), and
# imports it. Needs nvcc, not a GPU.
#
# The torch goes into a virtualenv outside the clone, $DC_CUDA_VENV or
# /var/tmp/dummy_collectives-ci/venv-cuda-torch-2.14.1 (about 5.5 GB; made if missing, reused
# after), the build into a temporary copy of the tree (tracked and untracked files, not ignored
# ones), so the CPU build's in-place _C is left alone.
# .ci/run calls this when DC_CI_CUDA_BUILD=1 (by default its torch 2.15 stage compiles the CUDA
# sources instead).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${DC_CUDA_VENV:-/var/tmp/dummy_collectives-ci/venv-cuda-torch-2.14.1}
torch_spec=torch==2.14.1

# torch takes CUDA_HOME, else the parent of the nvcc on PATH, which can be a wrapper script
# outside the toolkit (/usr/local/bin/nvcc: CUDA_HOME=/usr/local, then "cannot find -lcudart").
if [[ -z ${CUDA_HOME:-} && -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDA_HOME=/usr/local/cuda
fi
echo "CUDA_HOME=${CUDA_HOME:-(unset)}"

SECONDS=0
mkdir -p "$(dirname "$venv")"
[[ -x $venv/bin/python ]] || python -m venv "$venv"
"$venv/bin/python" -m pip install --progress-bar off "$torch_spec" ninja numpy
"$venv/bin/python" -c 'import torch; assert torch.version.cuda, torch.__version__
print("torch", torch.__version__, "CUDA", torch.version.cuda)'
install_s=$SECONDS

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$repo" ls-files -z --cached --others --exclude-standard |
  tar -C "$repo" --null -T - --ignore-failed-read -cf - | tar -C "$work" -xf -

SECONDS=0
(cd "$work" && "$venv/bin/python" setup.py build_ext --inplace)
build_s=$SECONDS

# setup.py chose CUDAExtension: the define is in the compile flags.
if ! grep -q -- '-DDUMMY_COLLECTIVES_WITH_CUDA=1' "$work"/build/objects-*/build.ninja; then
  echo "setup.py did not make a CUDA build (no -DDUMMY_COLLECTIVES_WITH_CUDA=1); CUDA_HOME?" >&2
  exit 1
fi

# It loads, and runs a one-rank collective (on a CPU tensor: no GPU needed).
(cd "$work" && "$venv/bin/python" -c '
import torch, torch.distributed as dist
import dummy_collectives
dist.init_process_group("dummy", store=dist.HashStore(), rank=0, world_size=1)
t = torch.ones(8)
dist.all_reduce(t)
assert t.eq(1).all(), t
dist.destroy_process_group()
print("CUDA build imports and runs:", dummy_collectives.__file__)
')

echo "cuda build check passed: install ${install_s}s, build ${build_s}s"

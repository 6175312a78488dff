#!/usr/bin/env bash
# The project on another torch than the README's: builds it and runs the test suite in a
# virtualenv with that torch (default: the newest release, torch==2.15.0), and fails if the
# install step changes the venv's torch. By default it runs a quick mode: whole, the files that
# use torch's own APIs (DDP, FSDP2, DTensor, the profiler, registration, 2.15's reconfigure);
# without their `slow` tests, the files of each collective's c10d face and of Work, timeouts and
# the flight recorder. The rest of the suite tests our own code, which no torch release changes,
# and running it twice made CI overrun its hour on 2 cores. DC_TORCH_CHECK_TESTS=all runs every
# test (the full check, outside CI). Then checks that the system python (the README's torch)
# refuses the build made for this one with a clear ImportError, not an undefined symbol.
#
# torch 2.15's wheel on PyPI is a CUDA build (about 5 GB with its CUDA libraries; no GPU needed to
# run on the CPU): where nvcc is installed, setup.py makes a CUDA build, so this also shows that
# the CUDA sources compile against 2.15 (.ci/cuda_build_check.sh does the same for 2.14.1).
#
# The venv lives outside the clone: $DC_TORCH_VENV, or /var/tmp/dummy_collectives-ci/venv-<spec>
# (made if missing, reused after). The build happens in a temporary copy of the tree (tracked and
# untracked files, not ignored ones), so the clone's own in-place build is left alone.
#   .ci/torch_version_check.sh [torch==2.15.0]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
torch_spec=${1:-torch==2.15.0}
venv=${DC_TORCH_VENV:-/var/tmp/dummy_collectives-ci/venv-${torch_spec//[^A-Za-z0-9.]/-}}
test_cmd=(python -m pytest -q -p no:cacheprovider)
release_sensitive=(tests/test_stack.py tests/test_recovery.py tests/test_trace.py
  tests/test_registration.py)
# What the c10d face exposes to torch's Python side, each collective and Work (quick tests).
c10d_face=(tests/test_allreduce.py tests/test_allgather.py tests/test_broadcast.py
  tests/test_barrier.py tests/test_async.py tests/test_timeout.py tests/test_sparse.py
  tests/test_flight_recorder.py tests/test_lifecycle.py tests/test_bad_input.py)

if [[ -z ${CUDA_HOME:-} && -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDA_HOME=/usr/local/cuda
fi

SECONDS=0
mkdir -p "$(dirname "$venv")"
[[ -x $venv/bin/python ]] || python -m venv "$venv"
# This machine's pip configuration may cap torch below the newest release; lift it for this
# venv only (the cap is a local constraints file, not the project's).
PIP_CONSTRAINT=/dev/null "$venv/bin/python" -m pip install --progress-bar off \
  "$torch_spec" ninja pytest numpy "setuptools>=64" wheel
torch_version() { "$venv/bin/python" -c 'import torch; print(torch.__version__)'; }
before=$(torch_version)
echo "torch $before in $venv (install ${SECONDS}s)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$repo" ls-files -z --cached --others --exclude-standard |
  tar -C "$repo" --null -T - --ignore-failed-read -cf - | tar -C "$work" -xf -

SECONDS=0
# The README's install command, as a user runs it in that environment.
(cd "$work" && PIP_CONSTRAINT=/dev/null "$venv/bin/python" -m pip install --progress-bar off \
  --no-build-isolation -e .)
after=$(torch_version)
if [[ $after != "$before" ]]; then
  echo "installing dummy_collectives changed the environment's torch: $before -> $after" >&2
  exit 1
fi
echo "build ${SECONDS}s; torch still $after"

SECONDS=0
if [[ ${DC_TORCH_CHECK_TESTS:-} == all ]]; then
  (cd "$work" && PATH="$venv/bin:$PATH" "${test_cmd[@]}" tests)
else
  (cd "$work" && PATH="$venv/bin:$PATH" "${test_cmd[@]}" -m "not slow" "${c10d_face[@]}" &&
    PATH="$venv/bin:$PATH" "${test_cmd[@]}" -m slow "${release_sensitive[@]}")
fi
echo "tests on torch $after: ${SECONDS}s"

# The system python's torch is another release: importing this build must say so.
if [[ $(python -c 'import torch; print(torch.__version__.split("+")[0])') != "${after%%+*}" ]]; then
  out=$(cd /tmp && PYTHONPATH="$work" python -c 'import dummy_collectives' 2>&1) && {
    echo "a build for torch $after imported into another torch without an error" >&2
    exit 1
  }
  grep -q "built for torch $after" <<<"$out" || {
    echo "importing a build for torch $after into another torch did not say why:" >&2
    echo "$out" | tail -5 >&2
    exit 1
  }
  echo "another torch refuses this build: $(tail -1 <<<"$out")"
fi

#!/usr/bin/env bash
# The GPU machine has no libucx wheel and no index to fetch one from, and the cross-host path of
# CUDA tensors needs UCX with its CUDA modules. Two halves:
#   here:  tools/carry_libucx.sh fetch   the libucx wheel's runtime libraries and modules (its
#                                        CUDA ones need only the driver) into .libucx/ (ignored
#                                        by git; name it in the device tool's carry)
#   there: source tools/carry_libucx.sh  points the extension at them (DUMMY_COLLECTIVES_UCX_LIBRARY)
if [[ ${1:-} == fetch ]]; then
  set -euo pipefail
  cd "$(dirname "$0")/.."
  lib=$(python -c 'import dummy_collectives._ucx as u; print(u.wheel_library_dir())')
  [[ -n $lib ]] || { echo "no libucx wheel here: pip install libucx-cu12" >&2; exit 1; }
  mkdir -p .libucx/ucx .git/info
  grep -qx '/.libucx/' .git/info/exclude 2>/dev/null || echo '/.libucx/' >> .git/info/exclude
  for so in libucp libucs libuct libucm libucs_signal; do cp -L "$lib/$so.so.0" .libucx/; done
  # UCX loads its modules from ucx/ beside libucs, by either name.
  for so in libuct_cuda libucm_cuda libuct_cma; do
    cp -L "$lib/ucx/$so.so.0" .libucx/ucx/ && cp -L "$lib/ucx/$so.so.0" ".libucx/ucx/$so.so"
  done
  du -sh .libucx
  exit 0
fi
if [[ -f .libucx/libucp.so.0 ]]; then
  export DUMMY_COLLECTIVES_UCX_LIBRARY=$PWD/.libucx/libucp.so.0
  echo "UCX: $DUMMY_COLLECTIVES_UCX_LIBRARY"
fi

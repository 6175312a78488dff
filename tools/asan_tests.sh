#!/usr/bin/env bash
# Runs tests against an AddressSanitizer build of the extension, in a copy of the tree (the
# checkout's own build stays as it is). Every process the tests start (spawned ranks, torchrun
# on namespaced hosts) inherits the sanitizer through LD_PRELOAD and writes any report under
# the copy's asan-reports/; the script fails if there is one.
#
#   tools/asan_tests.sh                                   # the cross-host tests
#   tools/asan_tests.sh tests/test_random_program.py -k 2_hosts
#
# Why: a use after free in the agreement (53da62e) gave a host's non-leader ranks the wrong
# last bytes of a small allreduce, and only a random program caught it, one run in two.
set -euo pipefail

root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
copy=${DC_ASAN_TREE:-/var/tmp/dummy_collectives-asan}
mkdir -p "$copy"
# The work tree as git sees it: tracked files with their uncommitted changes, and new files
# not ignored (build outputs stay behind).
(cd "$root" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$copy"
(cd "$copy" && DUMMY_COLLECTIVES_SANITIZE=address DUMMY_COLLECTIVES_CUDA=0 \
  python setup.py -q build_ext --inplace)

reports="$copy/asan-reports"
rm -rf "$reports" && mkdir -p "$reports"
# libstdc++ preloaded too: otherwise the sanitizer cannot find __cxa_throw and aborts at the
# first C++ exception. Leaks are not checked (Python and torch keep memory until exit).
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so.6)"
export ASAN_OPTIONS="detect_leaks=0:alloc_dealloc_mismatch=0:halt_on_error=1:log_path=$reports/asan"
export PYTHONPATH="$copy${PYTHONPATH:+:$PYTHONPATH}"
if [ $# -eq 0 ]; then
  set -- tests/test_multihost.py tests/test_across_hosts.py tests/test_random_program.py
fi
status=0
(cd "$copy" && python -m pytest -q -p no:cacheprovider "$@") || status=$?
unset LD_PRELOAD
if compgen -G "$reports/asan.*" > /dev/null; then
  echo "AddressSanitizer reports:" >&2
  head -n 60 "$reports"/asan.* >&2
  exit 1
fi
exit "$status"

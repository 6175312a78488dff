#!/usr/bin/env bash
# Packaging, as a user meets it (needs the README's install done first, as .ci/run does):
#  - `pip wheel --no-build-isolation .` makes a wheel that pins the torch it was built for, and
#    that installs into a fresh environment with that torch and runs the demo from another folder;
#  - the sdist carries every file the build reads (sources, their lists, headers, CUDA sources);
#  - `pip install .` (build isolation) stops with a message that says what to do, instead of
#    building against a torch of its own that then fails to load.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
release=$(python -c 'import torch; print(torch.__version__.split("+")[0])')

echo "--- wheel"
python -m pip wheel --no-build-isolation --no-deps --progress-bar off -q . -w "$work/wheels"
wheel=$(ls "$work"/wheels/dummy_collectives-*.whl)
requires=$(unzip -p "$wheel" '*.dist-info/METADATA' | grep '^Requires-Dist: torch' || true)
[[ $requires == "Requires-Dist: torch==$release" ]] || {
  echo "the wheel should require torch==$release, it says: ${requires:-nothing}" >&2
  exit 1
}
echo "$(basename "$wheel"): $requires, $(du -h "$wheel" | cut -f1)"

# A fresh environment that has the same torch (the system's, seen through system site-packages,
# where the editable install of this clone sits too: the venv's own copy must win).
python -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --progress-bar off -q "$wheel"
(cd /tmp && "$work/venv/bin/python" - <<'PY'
import dummy_collectives, sys
assert dummy_collectives.__file__.startswith(sys.prefix), dummy_collectives.__file__
print("imports from", dummy_collectives.__file__, "version", dummy_collectives.__version__)
PY
)
(cd /tmp && "$work/venv/bin/python" "$repo/examples/demo.py") | tail -3

echo "--- sdist"
python setup.py -q sdist -d "$work/sdist" >/dev/null 2>&1
sdist=$(ls "$work"/sdist/dummy_collectives-*.tar.gz)
listing=$(tar -tzf "$sdist" | sed 's|^[^/]*/||')
missing=()
while read -r needed; do
  grep -qxF "$needed" <<<"$listing" || missing+=("$needed")
done < <(
  grep -hv '^#' csrc/sources.txt csrc/cuda_sources.txt csrc/binding_sources.txt |
    sed '/^[[:space:]]*$/d'
  git ls-files csrc include third_party CMakeLists.txt LICENSE
)
if ((${#missing[@]})); then
  echo "the sdist lacks: ${missing[*]}" >&2
  exit 1
fi
echo "$(basename "$sdist") carries every file the build reads"

echo "--- pip install . (build isolation)"
if out=$(python -m pip install --progress-bar off --dry-run . 2>&1); then
  echo "an isolated build should stop and say why; it went through:" >&2
  echo "$out" | tail -5 >&2
  exit 1
fi
grep -q -- "--no-build-isolation" <<<"$out" || {
  echo "an isolated build failed without saying to build without isolation:" >&2
  echo "$out" | tail -20 >&2
  exit 1
}
echo "an isolated build stops with: $(grep -o 'dummy_collectives: this build cannot import torch[^.]*' <<<"$out" | head -1)"

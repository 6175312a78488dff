#!/usr/bin/env bash
# Packaging, as a user meets it (needs the README's install done first, as .ci/run does):
#  - `pip wheel --no-build-isolation .` makes a wheel that pins the torch it was built for, and
#    that installs into a fresh environment with that torch and runs the demo from another folder;
#  - the wheel holds the backend's modules (and its perftest, dummy_collectives/perf.py) and
#    nothing else: the team's benchmarks/ and tools/ (the namespaced hosts) stay in the clone;
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

# Exactly the package's tracked modules, the build's record of its torch and the extension.
shipped=$(unzip -Z1 "$wheel" | grep -v -e '\.dist-info/' -e '/$' | sort)  # files, not folders
wanted=$({ git ls-files 'dummy_collectives/*.py'; echo dummy_collectives/_build_info.py; } | sort)
extension=$(grep -xE 'dummy_collectives/_C\.[^/]*\.so' <<<"$shipped" || true)
unexpected=$(comm -23 <(grep -vxF "$extension" <<<"$shipped") <(echo "$wanted"))
absent=$(comm -13 <(echo "$shipped") <(echo "$wanted"))
if [[ -n $unexpected || -n $absent || -z $extension ]]; then
  echo "the wheel should hold the dummy_collectives modules and the extension, and only them" >&2
  [[ -z $unexpected ]] || echo "it holds besides:" $unexpected >&2
  [[ -z $absent ]] || echo "it lacks:" $absent >&2
  [[ -n $extension ]] || echo "it lacks the extension (dummy_collectives/_C.*.so)" >&2
  exit 1
fi
echo "it holds $(wc -l <<<"$shipped") files, all under dummy_collectives/:" $shipped

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

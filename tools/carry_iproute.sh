#!/usr/bin/env bash
# The GPU machine's image has no iproute2 (ip, tc), which namespaced hosts need. Two halves:
#   here:  tools/carry_iproute.sh fetch    Debian's iproute2 and its libraries into .iproute/
#                                          (ignored by git; name it in the device tool's carry)
#   there: source tools/carry_iproute.sh   unpacks them under /tmp/ipr and puts ip and tc on PATH
if [[ ${1:-} == fetch ]]; then
  set -euo pipefail
  cd "$(dirname "$0")/.."
  mkdir -p .iproute .git/info
  grep -qx '/.iproute/' .git/info/exclude 2>/dev/null || echo '/.iproute/' >> .git/info/exclude
  (cd .iproute && apt-get download iproute2 libmnl0 libbpf1 libxtables12 libelf1 libtirpc3 \
    libcap2 libdb5.3 libbsd0)
  exit 0
fi
mkdir -p /tmp/ipr/wrap
for deb in .iproute/*.deb; do dpkg -x "$deb" /tmp/ipr; done
ipr_lib=/tmp/ipr/lib/x86_64-linux-gnu:/tmp/ipr/usr/lib/x86_64-linux-gnu
# The libraries only for these two: torch must not load Debian's copies.
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec /tmp/ipr/bin/ip "$@"\n' "$ipr_lib" > /tmp/ipr/wrap/ip
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec /tmp/ipr/sbin/tc "$@"\n' "$ipr_lib" > /tmp/ipr/wrap/tc
chmod +x /tmp/ipr/wrap/ip /tmp/ipr/wrap/tc
export PATH=$PATH:/tmp/ipr/wrap
ip -V

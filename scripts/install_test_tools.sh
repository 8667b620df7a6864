#!/usr/bin/env bash
# System tools the test suite drives for real: Debian's chromium (the HTML reports are
# checked in a real headless browser) and etcd (an etcd-v2 rendezvous). Installed with
# apt-get when missing and we are root; otherwise the tests that need them skip with a reason.
set -uo pipefail
want=()
command -v chromium >/dev/null 2>&1 || want+=(chromium)
command -v etcd >/dev/null 2>&1 || want+=(etcd-server)
[ ${#want[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "install: apt-get install ${want[*]} (for the browser and etcd rendezvous tests)"
  export DEBIAN_FRONTEND=noninteractive
  (apt-get install -y -q "${want[@]}" >/tmp/torchsmith-apt.log 2>&1 ||
   { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "${want[@]}" >/tmp/torchsmith-apt.log 2>&1; }) ||
    echo "install: could not install ${want[*]} (see /tmp/torchsmith-apt.log); those tests will skip"
else
  echo "install: ${want[*]} missing and not root; the tests that need them will skip"
fi
exit 0

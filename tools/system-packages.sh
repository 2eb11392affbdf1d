#!/usr/bin/env bash
# The Debian packages the test suite runs for real, installed when missing (make test
# calls this; so does .ci/run): fuse3 for the power-cut tests (tests/reliability/lazyfs.py),
# chromium and chromium-driver for the console's browser tests, zookeeper for the
# replication tests, kcat for the Kafka front's tests. Nothing is installed when everything is there already.
set -euo pipefail

missing=()
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "the tests need these Debian packages: ${missing[*]}" >&2
    echo "install them (as root: apt-get install ${missing[*]}) and run make test again" >&2
    exit 1
fi
echo "installing Debian packages the tests need: ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"

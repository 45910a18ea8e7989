#!/bin/sh
# Install the system packages the sandbox backends and the browser test need (Debian/Ubuntu;
# run as root, e.g. in CI).
# Idempotent: does nothing when every tool is already on PATH.
set -eu

missing=""
command -v bwrap >/dev/null 2>&1 || missing="$missing bubblewrap"
# the bwrap sandbox's anchor runs the python3 it sees: one under /usr, whatever runs the host
[ -x /usr/bin/python3 ] || [ -x /usr/local/bin/python3 ] || missing="$missing python3-minimal"
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
# pytest checks inside bwrap run the python3 under /usr (tests/sandbox/test_pytest_checks.py)
/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || missing="$missing python3-pytest"
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"  # the multi-host rig's namespaces
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"  # the TLS engine's certificates

if [ -z "$missing" ]; then
    echo "system deps: all present (bwrap, python3 and its pytest under /usr, chromium, ip, openssl)"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "system deps: need root to install:$missing" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "system deps: no apt-get here; install manually:$missing" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes
# Another process holding the package manager's lock is waited for (bounded), not a reason to
# go without the packages.
apt_get="sh $(dirname "$0")/apt-get-waiting.sh"
$apt_get update -qq
# shellcheck disable=SC2086  # the package list is meant to split into words
$apt_get install -y -qq --no-install-recommends $missing >/dev/null
echo "system deps: installed$missing"

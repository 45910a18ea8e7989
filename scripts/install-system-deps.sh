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
# pytest checks inside bwrap run the python3 under /usr (tests/runtime/sandbox/test_pytest_checks.py)
/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || missing="$missing python3-pytest"
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"  # the multi-host rig's namespaces
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"  # the TLS engine's certificates
# the docker backend over DOCKER_HOST=ssh:// is tested against a private sshd the test starts
# (tests/runtime/sandbox/test_docker_ssh.py); the package's own service is not started (below)
[ -x /usr/sbin/sshd ] || missing="$missing openssh-server"

if [ -z "$missing" ]; then
    echo "system deps: all present (bwrap, python3 and its pytest under /usr, chromium, ip, openssl, sshd)"
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
# Only the binaries are wanted: openssh-server's package would start (and enable) an sshd on
# port 22 for every address. A policy-rc.d that denies every start (Debian's mechanism, the
# one Docker's images ship) is put in place for the install if there is none, and an ssh
# service that systemd would start at boot is disabled again.
policy=/usr/sbin/policy-rc.d
case "$missing" in *openssh-server*)
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# put here by hermes-envgen install-system-deps.sh for one install\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        trap 'rm -f "$policy"' EXIT
    fi
    ;;
esac
# shellcheck disable=SC2086  # the package list is meant to split into words
$apt_get install -y -qq --no-install-recommends $missing >/dev/null
case "$missing" in *openssh-server*)
    if [ -d /run/systemd/system ]; then systemctl disable --now --quiet ssh.service ssh.socket 2>/dev/null || true; fi
    ;;
esac
echo "system deps: installed$missing"

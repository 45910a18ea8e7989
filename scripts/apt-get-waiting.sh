#!/bin/sh
# apt-get ARGS, waiting while another process (unattended-upgrades, a second set-up) holds the
# package manager's lock, instead of failing at once as apt-get does.
#
#   sh scripts/apt-get-waiting.sh install -y bubblewrap
#
# The wait is bounded: HERMES_ENVGEN_APT_LOCK_WAIT seconds (default 600), then the lock error
# stands. It is said once, on stderr, with what holds the lock; apt-get's own output and exit
# code are kept.
set -u

wait_seconds=${HERMES_ENVGEN_APT_LOCK_WAIT:-600}
case $wait_seconds in
    '' | *[!0-9]*)
        echo "apt-get-waiting: HERMES_ENVGEN_APT_LOCK_WAIT must be a number of seconds" >&2
        exit 2
        ;;
esac
deadline=$(($(date +%s) + wait_seconds))
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
said=""
while :; do
    apt-get "$@" 2>"$errors"
    code=$?
    if [ "$code" -eq 0 ] || ! grep -q "Could not get lock" "$errors"; then
        cat "$errors" >&2
        exit "$code"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        cat "$errors" >&2
        echo "apt-get-waiting: the package manager's lock is still held after ${wait_seconds} s" >&2
        exit "$code"
    fi
    if [ -z "$said" ]; then
        holder=$(sed -n 's/.*It is held by \(process [0-9]* ([^)]*)\).*/\1/p' "$errors" | head -n 1)
        echo "apt-get-waiting: waiting for the package manager's lock" \
            "(held by ${holder:-another process}), up to ${wait_seconds} s" >&2
        said=yes
    fi
    sleep 2
done

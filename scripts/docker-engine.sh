#!/usr/bin/env bash
# A Docker engine for the test suite, private to one test run.
#
#   eval "$(scripts/docker-engine.sh up)"  # exports DOCKER_HOST (and where its state is) for
#                                          # an engine that answers: the caller's, or one
#                                          # started here
#   scripts/docker-engine.sh down          # stops the engine `up` started (nothing else)
#
# `up` uses an engine that already answers (DOCKER_HOST or the default socket). Otherwise,
# as root on Debian, it installs docker.io (Debian's 20.10) and starts dockerd on a private
# socket with no iptables and no bridge (containers run with --network none), its own data
# and exec roots, and the overlay2 storage driver when the data root's filesystem can mount
# overlayfs (a container is created in 0.1 s) else vfs (every container copies the image: 2-3 s). The data root lives under
# ~/.cache/hermes-envgen/docker so images built there survive to the next run; when another
# run holds it, this run gets a throw-away one. Exit 1 with a reason on stderr when no engine
# can be had; the docker tests then skip. An `up` that fails or is interrupted once dockerd
# started stops it again.
set -euo pipefail

CACHE="${HERMES_ENVGEN_SYSTEM_CACHE:-$HOME/.cache/hermes-envgen}/docker"
# The started engine's socket, pid and log; `up` exports it for `down`.
STATE="${HERMES_ENVGEN_DOCKER_STATE:-/tmp/hermes-envgen-docker.$$}"
START_TIMEOUT=60

log() { echo "docker engine: $*" >&2; }

# overlay2 if an overlayfs mounts in $1 (the data root), else vfs.
storage_driver() {
    local probe
    probe="$(mktemp -d "$1/overlay-probe.XXXXXX")"
    mkdir "$probe/lower" "$probe/upper" "$probe/work" "$probe/merged"
    local driver=vfs
    if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
        "$probe/merged" 2>/dev/null; then
        umount "$probe/merged"
        driver=overlay2
    fi
    rm -rf "$probe"
    echo "$driver"
}

answers() { timeout 20 docker info >/dev/null 2>&1; }

install_engine() {
    command -v dockerd >/dev/null 2>&1 && return 0
    if [ "$(id -u)" -ne 0 ]; then
        log "none answers, and installing docker.io needs root"
        return 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        log "none answers, and there is no apt-get to install docker.io"
        return 1
    fi
    log "installing docker.io"
    export DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes
    # apt-get that waits (bounded) for a package manager's lock another process holds
    apt_get="sh $(dirname "$0")/apt-get-waiting.sh"
    $apt_get update -qq
    # The package's own service is never started here (no systemd); dockerd is run below.
    $apt_get install -y -qq --no-install-recommends docker.io >/dev/null
}

up() {
    if command -v docker >/dev/null 2>&1 && answers; then
        log "using the engine that answers${DOCKER_HOST:+ at $DOCKER_HOST}"
        return 0
    fi
    install_engine
    command -v docker >/dev/null 2>&1 || { log "no docker client"; return 1; }
    if [ "$(id -u)" -ne 0 ]; then
        log "none answers, and starting dockerd needs root"
        return 1
    fi
    mkdir -p "$CACHE" "$STATE"
    local data_root="$CACHE/data-root"
    # dockerd inherits fd 9 and so holds the lock for as long as it runs.
    exec 9>"$CACHE/data-root.lock"
    if ! flock --nonblock 9; then
        data_root="$STATE/data-root"
        log "$CACHE/data-root is in use; this run gets its own"
    fi
    mkdir -p "$data_root"
    echo "$data_root" >"$STATE/dockerd.data-root"
    local socket="$STATE/docker.sock" driver
    driver="$(storage_driver "$data_root")"
    setsid dockerd \
        --host "unix://$socket" \
        --data-root "$data_root" \
        --exec-root "$STATE/exec" \
        --pidfile "$STATE/dockerd.pid" \
        --storage-driver "$driver" \
        --iptables=false --ip-masq=false --bridge none \
        --log-level warn \
        </dev/null >"$STATE/dockerd.log" 2>&1 &
    echo $! >"$STATE/dockerd.started"
    # Until it answers and the caller knows of it, a failure or an interruption (Ctrl-C while
    # waiting) stops it here: nobody would stop it later.
    trap down EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    export DOCKER_HOST="unix://$socket"
    local waited=0
    until answers; do
        if ! kill -0 "$(cat "$STATE/dockerd.started")" 2>/dev/null; then
            log "dockerd exited; its log:"
            tail -n 20 "$STATE/dockerd.log" >&2
            return 1
        fi
        if [ "$waited" -ge "$START_TIMEOUT" ]; then
            log "dockerd did not answer within ${START_TIMEOUT}s"
            return 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
    # A run that was killed may have left containers in the cached data root.
    docker ps --all --quiet | xargs --no-run-if-empty docker rm --force >/dev/null 2>&1 || true
    log "dockerd $(docker version --format '{{.Server.Version}}') ($driver) answers at $DOCKER_HOST after ${SECONDS}s"
    echo "export DOCKER_HOST=$DOCKER_HOST HERMES_ENVGEN_DOCKER_STATE=$STATE"
    trap - EXIT INT TERM
}

down() {
    local pidfile="$STATE/dockerd.started"
    [ -f "$pidfile" ] || return 0
    local pid
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
        DOCKER_HOST="unix://$STATE/docker.sock" docker ps --all --quiet 2>/dev/null |
            xargs --no-run-if-empty env DOCKER_HOST="unix://$STATE/docker.sock" docker rm --force >/dev/null 2>&1 || true
        kill -TERM "$pid"
        for _ in $(seq 1 30); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 1
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    # dockerd bind-mounts its data root on itself; stopped before it finished starting (or
    # killed), it leaves that mount, and rm could then remove nothing below it.
    local data_root
    data_root="$(cat "$STATE/dockerd.data-root" 2>/dev/null || true)"
    if [ -n "$data_root" ]; then
        awk -v root="$data_root" '$2 == root || index($2, root "/") == 1 { print $2 }' /proc/self/mounts |
            sort -r | xargs --no-run-if-empty -n 1 umount --lazy 2>/dev/null || true
    fi
    rm -f "$pidfile"
    # The throw-away data root (if any) goes; vfs layers are plain directories.
    rm -rf "$STATE"
    log "stopped"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac

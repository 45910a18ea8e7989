#!/usr/bin/env bash
# Build the image the docker tests run in, with no registry: a Debian minbase root filesystem
# (bash, coreutils, python3, procps) made by debootstrap and loaded with `docker import`.
#
#   scripts/docker-test-image.sh    # prints the image's name (hermes-envgen-test:<recipe hash>)
#
# Cached by content: the tag and the cached root filesystem tarball
# (~/.cache/hermes-envgen/docker/rootfs-<hash>.tar) are keyed by a hash of the recipe (the
# suite, the packages and the build_rootfs and import_image functions below), so a later run
# finds the image in the engine, or imports the tarball, instead of running debootstrap again.
# Needs DOCKER_HOST (or the default socket) to answer; debootstrap needs root.
set -euo pipefail

SUITE=bookworm
PACKAGES=python3,procps
MIRROR="${HERMES_ENVGEN_DEBIAN_MIRROR:-}"
CACHE="${HERMES_ENVGEN_SYSTEM_CACHE:-$HOME/.cache/hermes-envgen}/docker"

log() { echo "docker test image: $*" >&2; }

# The root filesystem in directory $1, with what a sandbox never needs removed.
build_rootfs() {
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$1" "$MIRROR" \
        >"$1.log" 2>&1 || { tail -n 20 "$1.log" >&2; rm -f "$1.log"; return 1; }
    rm -f "$1.log"
    rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* \
        "$1"/usr/share/doc "$1"/usr/share/man "$1"/usr/share/info "$1"/usr/share/locale
    chmod 755 "$1"  # mktemp made it 0700; it becomes the image's /
}

# Tarball $1 into the engine as image $2.
import_image() {
    docker import --change 'CMD ["bash"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        "$1" "$2" >/dev/null
}

install_debootstrap() {
    command -v debootstrap >/dev/null 2>&1 && return 0
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        log "debootstrap is missing and cannot be installed here (needs root and apt-get)"
        return 1
    fi
    log "installing debootstrap"
    export DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes
    # apt-get that waits (bounded) for a package manager's lock another process holds
    apt_get="sh $(dirname "$0")/apt-get-waiting.sh"
    $apt_get install -y -qq --no-install-recommends debootstrap >/dev/null 2>&1 ||
        { $apt_get update -qq && $apt_get install -y -qq --no-install-recommends debootstrap >/dev/null; }
}

# The mirror apt already uses here (deb822 or one-line sources), else Debian's.
if [ -z "$MIRROR" ]; then
    MIRROR="$(sed -n 's/^URIs: *\([^ ]*\/debian\)$/\1/p; s/^deb \(\[[^]]*\] \)\?\([^ ]*\/debian\) .*/\2/p' \
        /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -n 1 || true)"
    MIRROR="${MIRROR:-http://deb.debian.org/debian}"
fi

recipe_hash="$({ echo "$SUITE $PACKAGES"; declare -f build_rootfs import_image; } |
    sha256sum | cut -c1-12)"
image="hermes-envgen-test:$recipe_hash"
tarball="$CACHE/rootfs-$recipe_hash.tar"

if docker image inspect "$image" >/dev/null 2>&1; then
    log "$image is in the engine already"
    echo "$image"
    exit 0
fi

if [ ! -f "$tarball" ]; then
    install_debootstrap
    mkdir -p "$CACHE"
    root="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
    trap 'rm -rf "$root" "$root.log" "$tarball.partial"' EXIT
    log "debootstrap $SUITE (minbase + $PACKAGES) from $MIRROR"
    build_rootfs "$root"
    tar --numeric-owner -C "$root" -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"  # only a whole tarball is ever cached
    rm -rf "$root"
    trap - EXIT
    # Tarballs of older recipes are dead weight.
    find "$CACHE" -maxdepth 1 -name 'rootfs-*.tar' ! -name "rootfs-$recipe_hash.tar" -delete
fi

log "importing $tarball as $image"
import_image "$tarball" "$image"
# Images of older recipes are dead weight in the engine's (cached) data root.
docker images hermes-envgen-test --format '{{.Repository}}:{{.Tag}}' | grep -vxF "$image" |
    xargs --no-run-if-empty docker rmi >/dev/null 2>&1 || true
log "$image ready after ${SECONDS}s"
echo "$image"

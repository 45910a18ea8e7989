#!/usr/bin/env bash
# Build the image the docker tests run in, with no registry: a Debian minbase root filesystem
# (bash, coreutils, python3) made by debootstrap and loaded with `docker import`.
#
#   scripts/docker-test-image.sh    # prints the image's name (hermes-envgen-test:<recipe hash>)
#
# Cached by content: the tag and the cached root filesystem tarball
# (~/.cache/hermes-envgen/docker/rootfs-<hash>.tar) are keyed by a hash of this recipe, so a
# later run imports the tarball (or finds the image already in the engine) instead of running
# debootstrap again. Needs DOCKER_HOST (or the default socket) to answer; debootstrap needs root.
set -euo pipefail

SUITE=bookworm
PACKAGES=python3,procps
MIRROR="${HERMES_ENVGEN_DEBIAN_MIRROR:-}"
CACHE="${HERMES_ENVGEN_SYSTEM_CACHE:-$HOME/.cache/hermes-envgen}/docker"

log() { echo "docker test image: $*" >&2; }

# The mirror apt already uses here (deb822 or one-line sources), else Debian's.
if [ -z "$MIRROR" ]; then
    MIRROR="$(sed -n 's/^URIs: *\([^ ]*\/debian\)$/\1/p; s/^deb \(\[[^]]*\] \)\?\([^ ]*\/debian\) .*/\2/p' \
        /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -n 1 || true)"
    MIRROR="${MIRROR:-http://deb.debian.org/debian}"
fi

recipe_hash="$(printf '%s\n' "$SUITE" "$PACKAGES" | cat - "$0" | sha256sum | cut -c1-12)"
image="hermes-envgen-test:$recipe_hash"
tarball="$CACHE/rootfs-$recipe_hash.tar"

if docker image inspect "$image" >/dev/null 2>&1; then
    log "$image is in the engine"
    echo "$image"
    exit 0
fi

if [ ! -f "$tarball" ]; then
    if ! command -v debootstrap >/dev/null 2>&1; then
        if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
            log "debootstrap is missing and cannot be installed here (needs root and apt-get)"
            exit 1
        fi
        log "installing debootstrap"
        export DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes
        apt-get install -y -qq --no-install-recommends debootstrap >/dev/null ||
            { apt-get update -qq && apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }
    fi
    mkdir -p "$CACHE"
    root="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
    trap 'rm -rf "$root" "$tarball.partial"' EXIT
    log "debootstrap $SUITE (minbase + $PACKAGES) from $MIRROR"
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$MIRROR" \
        >"$root.log" 2>&1 || { tail -n 20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
    rm -f "$root.log"
    # What a sandbox never needs: downloaded packages, apt lists, documentation, locales.
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
        "$root"/usr/share/doc "$root"/usr/share/man "$root"/usr/share/info \
        "$root"/usr/share/locale
    chmod 755 "$root"  # mktemp made it 0700; it becomes the image's /
    tar --numeric-owner -C "$root" -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"  # only a whole tarball is ever cached
    rm -rf "$root"
    trap - EXIT
    # Tarballs of older recipes are dead weight.
    find "$CACHE" -maxdepth 1 -name 'rootfs-*.tar' ! -name "rootfs-$recipe_hash.tar" -delete
fi

log "importing $tarball as $image"
docker import --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$tarball" "$image" >/dev/null
echo "$image"

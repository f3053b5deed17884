#!/usr/bin/env bash
# Build `evolve-terminal:1`, the image every task of the terminal seed names in its
# environment/Dockerfile (`FROM evolve-terminal:1`), from Debian's own packages: no
# registry is involved. debootstrap makes a minbase bookworm root file system with the
# packages below, and `docker import` loads it.
#
# Cached under $EVOLVE_CI_CACHE (default /var/cache/evolve-ci): the root file system's
# tarball and a digest file holding the sha256 of the package list and of this script. A
# rerun with the same digest skips debootstrap and only imports the tarball when the image
# is missing; with the image present too it does nothing. Change a package or the script
# and the digest changes, so the next run rebuilds both.
#
# Usage: build-image.sh [--force]   (--force: rebuild the tarball and re-import)
set -euo pipefail

IMAGE="${EVOLVE_TERMINAL_IMAGE:-evolve-terminal:1}"
CACHE="${EVOLVE_CI_CACHE:-/var/cache/evolve-ci}"
MIRROR="${EVOLVE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
# What the 25 tasks' solve.sh and tests/test.sh run, beyond minbase's essential set (which
# already has bash, coreutils, grep, sed, tar, gzip, findutils, diffutils and mawk):
# python3 for the agent and the Python verifiers, gawk for awk scripts written for it.
PACKAGES=(python3 gawk)

say() { echo "build-image: $*"; }
die() { echo "build-image: $*" >&2; exit 1; }

force=false
case "${1:-}" in
  "") ;;
  --force) force=true ;;
  *) die "unknown argument '$1' (expected nothing or --force)" ;;
esac

if ! command -v docker >/dev/null 2>&1; then
  die "docker is not installed: the docker engine's tasks need it (install Docker, then rerun $0)"
fi
if ! docker info >/dev/null 2>&1; then
  die "docker is installed but its daemon does not answer (is dockerd running, and may this user use it?)"
fi

script_sum="$(sha256sum "$0" | cut -d' ' -f1)"
digest="$(printf '%s\n' "suite=$SUITE" "packages=${PACKAGES[*]}" "script=$script_sum" | sha256sum | cut -d' ' -f1)"
tarball="$CACHE/evolve-terminal-rootfs.tar"
digest_file="$CACHE/evolve-terminal-rootfs.sha256"

have_image() { docker image inspect "$IMAGE" >/dev/null 2>&1; }
# The image records which tarball it came from as a label, so a stale image (an older
# package list) is replaced even when the tarball is rebuilt by hand.
image_digest() { docker image inspect -f '{{index .Config.Labels "evolve.rootfs-digest"}}' "$IMAGE" 2>/dev/null || true; }

cached=false
if ! $force && [ -f "$tarball" ] && [ "$(cat "$digest_file" 2>/dev/null)" = "$digest" ]; then
  cached=true
fi

if $cached && have_image && [ "$(image_digest)" = "$digest" ]; then
  exit 0
fi

if ! $cached; then
  [ "$(id -u)" = 0 ] || die "debootstrap needs root (run as root, or build once as root to fill $CACHE)"
  if ! command -v debootstrap >/dev/null 2>&1; then
    say "installing debootstrap"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  mkdir -p "$CACHE"
  work="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  say "debootstrap $SUITE (minbase + ${PACKAGES[*]}) from $MIRROR"
  include="$(IFS=,; echo "${PACKAGES[*]}")"
  if ! debootstrap --variant=minbase --include="$include" "$SUITE" "$work/rootfs" "$MIRROR" \
      >"$work/debootstrap.log" 2>&1; then
    tail -n 20 "$work/debootstrap.log" >&2
    die "debootstrap failed (log above; is $MIRROR reachable?)"
  fi
  # The package caches and lists only make the image bigger.
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  mkdir -p "$work/rootfs/app"
  tar -C "$work/rootfs" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  echo "$digest" > "$digest_file"
  rm -rf "$work"
  trap - EXIT
fi

docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'WORKDIR /app' \
  -c 'CMD ["/bin/bash"]' \
  -c "LABEL evolve.rootfs-digest=$digest" \
  "$tarball" "$IMAGE" >/dev/null
say "imported $IMAGE from $tarball ($(du -h "$tarball" | cut -f1))"

#!/usr/bin/env bash
# Build the gitsync container image with buildah from a local base, then run it: `gitsync --version`
# and `gitsync demo` inside the image (buildah run).
#
# No Docker engine and no registry are needed: the base is a debootstrap rootfs
# of Debian bookworm + python3 (pip, venv), imported with `podman import`; the build uses vfs
# storage, chroot isolation and --pull=never. The Dockerfile is the one users build with docker.
#
# Needs: root, debootstrap, buildah, podman (Debian: apt-get install debootstrap buildah podman),
# and network access to a Debian mirror (debootstrap, the Dockerfile's apt-get) and to PyPI (the
# Dockerfile's build stage installs `build`, which fetches hatchling).
#
# Usage:  scripts/build-image.sh [TAG]          (default TAG: localhost/gitsync:<version>)
# Env:    GITSYNC_IMAGE_CACHE   where the base rootfs tarball is kept (default /var/tmp/gitsync-image)
#         DEBIAN_MIRROR         (default http://deb.debian.org/debian)
#         BASE_IMAGE            an existing local base to use instead of building one
#         EXTRA_CA_DIR          *.crt files the base trusts too (default: the host's own local CAs in
#                               /usr/local/share/ca-certificates, e.g. an egress proxy's; empty: none)
# Not part of the test suite: a first run takes minutes (debootstrap), later ones reuse the base.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -n1)
TAG=${1:-localhost/gitsync:$VERSION}
CACHE=${GITSYNC_IMAGE_CACHE:-/var/tmp/gitsync-image}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE=${BASE_IMAGE:-localhost/gitsync-base:bookworm}
EXTRA_CA_DIR=${EXTRA_CA_DIR-/usr/local/share/ca-certificates}
STORAGE=(--storage-driver=vfs)
mkdir -p "$CACHE"

say() { printf '%s [%4ds] %s\n' "$(date +%T)" "$SECONDS" "$*"; }
die() { say "error: $*" >&2; exit 1; }

for tool in buildah podman; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install buildah podman debootstrap)"
done

# 1. the base image: Debian bookworm + python3, like python:3.11-slim (`python`, pip that may
#    install into the system: the image is the one Python environment it runs).
if podman "${STORAGE[@]}" image exists "$BASE"; then
  say "base $BASE exists; reusing it"
else
  [ -n "${BASE_IMAGE:-}" ] && die "BASE_IMAGE=$BASE_IMAGE is not in local storage"
  command -v debootstrap >/dev/null || die "debootstrap is missing"
  tarball="$CACHE/bookworm-python3.tar"
  if [ ! -s "$tarball" ]; then
    rootfs="$CACHE/rootfs"
    rm -rf "$rootfs"
    say "debootstrap bookworm (minbase + python3) from $MIRROR into $rootfs"
    debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates \
      bookworm "$rootfs" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
      || { tail -n 20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
    rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
    if [ -n "$EXTRA_CA_DIR" ] && compgen -G "$EXTRA_CA_DIR/*.crt" >/dev/null; then
      say "the base trusts the host's local CAs too: $(cd "$EXTRA_CA_DIR" && echo *.crt)"
      cp "$EXTRA_CA_DIR"/*.crt "$rootfs/usr/local/share/ca-certificates/"
      chroot "$rootfs" update-ca-certificates >/dev/null
    fi
    chroot "$rootfs" apt-get clean
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
    say "packing the rootfs"
    tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  say "podman import $tarball as $BASE"
  podman "${STORAGE[@]}" import --change 'CMD ["python3"]' "$tarball" "$BASE" >/dev/null
fi

# 2. the image, from the repo's own Dockerfile.
say "buildah bud $TAG (BASE_IMAGE=$BASE, vfs, chroot isolation, --pull=never)"
buildah "${STORAGE[@]}" bud --isolation=chroot --pull=never --format=docker \
  --build-arg "BASE_IMAGE=$BASE" -f "$ROOT/Dockerfile" -t "$TAG" "$ROOT"

# 3. run it: the version, then the whole demo loop inside the image (loopback only).
ctr=$(buildah "${STORAGE[@]}" from --pull=never "$TAG")
trap 'buildah "${STORAGE[@]}" rm "$ctr" >/dev/null' EXIT
got=$(buildah "${STORAGE[@]}" run --isolation=chroot "$ctr" -- gitsync --version)
say "buildah run $TAG -- gitsync --version: $got"
[ "$got" = "gitsync $VERSION" ] || die "expected 'gitsync $VERSION'"
if buildah "${STORAGE[@]}" run --isolation=chroot "$ctr" -- gitsync demo >"$CACHE/demo.out" 2>&1; then
  say "buildah run $TAG -- gitsync demo: $(grep -m1 '^done in' "$CACHE/demo.out")"
else
  tail -n 20 "$CACHE/demo.out" >&2
  die "gitsync demo failed inside the image (output: $CACHE/demo.out)"
fi
say "image $TAG: $(buildah "${STORAGE[@]}" images --format '{{.Size}}' "$TAG")"

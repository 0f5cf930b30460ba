#!/usr/bin/env bash
# Build the gitsync container image from this checkout's Dockerfile, then check it: `gitsync
# --version` must print this checkout's version and `gitsync demo` must pass, both run in the image
# the way a user runs it (`podman run` / `docker run`).
#
#   scripts/build-image.sh [--engine podman|docker] [--base debian|registry|IMAGE] [--rebuild]
#                          [--no-check] [TAG]
#
# TAG        default localhost/gitsync:<version>, the version read from gitsync/__init__.py
#            (pyproject.toml takes it from there), also tagged localhost/gitsync:latest (compose).
# --engine   podman (rootful or rootless; `podman build` is buildah) or docker (needs an engine).
#            Default: podman when it is installed, else docker.
# --base     what the Dockerfile's BASE_IMAGE is:
#              registry  the Dockerfile's default, docker.io/library/python:3.11-slim-bookworm
#                        (the default with docker, and with rootless podman);
#              debian    a Debian bookworm + python3 rootfs made here with mmdebstrap (or debootstrap)
#                        and imported as localhost/gitsync-base:bookworm, for machines that reach a
#                        Debian mirror and PyPI but no container registry (the default with podman
#                        run as root; needs root);
#              IMAGE     any other image (kept as given: name it fully, e.g. docker.io/…, quay.io/…).
#            The rootfs is cached as a tarball in $GITSYNC_IMAGE_CACHE and the base image is kept in
#            the engine's storage: only the first build on a machine pays for making it.
# --rebuild  build even when the image TAG was already built from these very sources (the script
#            labels each image with a digest of what it was built from, base image included, and
#            otherwise reuses it).
# --no-check skip the two checks.
#
# Env:  GITSYNC_IMAGE_CACHE  the base's rootfs tarball, the demo's output (default /var/tmp/gitsync-image)
#       DEBIAN_MIRROR        (default http://deb.debian.org/debian)
#       EXTRA_CA_DIR         *.crt files the debian base trusts too (default: the host's own local CAs
#                            in /usr/local/share/ca-certificates, e.g. an egress proxy's; empty: none)
#       GITSYNC_RUN_FLAGS    the flags the checks give `podman run` (default: `--run-flags`' answer)
#
#   scripts/build-image.sh --run-flags
#            prints the flags `podman run` needs on this machine, none on most (docs/operations.md,
#            "As a container"): `--runtime=runc` where the cgroup hierarchy is not cgroup v2 only
#            (crun 1.8, Debian 12's, refuses v1 and hybrid ones); `--ulimit nofile=1024:1024 --ulimit
#            nproc=4096:4096` as root without CAP_SYS_RESOURCE (rootful podman would raise both limits
#            to ~1M, which then fails); `--no-healthcheck` where systemd is not running (podman runs
#            a HEALTHCHECK from systemd timers).
#
# Needs: podman (Debian: apt-get install podman; plus mmdebstrap for --base debian) or docker;
# network access to PyPI (the Dockerfile's build stage installs `build`, which fetches hatchling)
# and a Debian mirror (the Dockerfile's apt-get, mmdebstrap).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VERSION=$(sed -n 's/^__version__ = "\([^"]*\)"$/\1/p' "$ROOT/gitsync/__init__.py")
CACHE=${GITSYNC_IMAGE_CACHE:-/var/tmp/gitsync-image}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
EXTRA_CA_DIR=${EXTRA_CA_DIR-/usr/local/share/ca-certificates}
LOCAL_BASE=localhost/gitsync-base:bookworm
REGISTRY_BASE=$(sed -n 's/^ARG BASE_IMAGE=//p' "$ROOT/Dockerfile")

say() { printf '%s [%4ds] %s\n' "$(date +%T)" "$SECONDS" "$*"; }
die() { say "error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

# The flags `podman run` needs here (see the header); each one for a condition this can see.
podman_run_flags() {
  local flags=()
  if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" != cgroup2fs ] && command -v runc >/dev/null; then
    flags+=(--runtime=runc)
  fi
  local caps
  caps=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)
  if [ "$(id -u)" -eq 0 ] && [ -n "$caps" ] && (( (16#$caps >> 24 & 1) == 0 )); then
    flags+=(--ulimit nofile=1024:1024 --ulimit nproc=4096:4096)
  fi
  [ -d /run/systemd/system ] || flags+=(--no-healthcheck)
  echo "${flags[*]}"
}

engine= base= tag= rebuild=0 check=1
while [ $# -gt 0 ]; do
  case $1 in
    --engine) engine=${2:?--engine needs podman or docker}; shift ;;
    --engine=*) engine=${1#*=} ;;
    --base) base=${2:?--base needs debian, registry or an image}; shift ;;
    --base=*) base=${1#*=} ;;
    --rebuild) rebuild=1 ;;
    --no-check) check=0 ;;
    --run-flags) podman_run_flags; exit 0 ;;
    -h|--help) usage 0 ;;
    -*) say "unknown option $1" >&2; usage 2 ;;
    *) [ -z "$tag" ] || usage 2; tag=$1 ;;
  esac
  shift
done

[ -n "$VERSION" ] || die "no __version__ = \"…\" line in gitsync/__init__.py"
[ -n "$REGISTRY_BASE" ] || die "no ARG BASE_IMAGE= line in the Dockerfile"
also=()  # the default tag comes with :latest, the name examples/compose/compose.yaml runs
[ -n "$tag" ] || { tag=localhost/gitsync:$VERSION; also=(localhost/gitsync:latest); }
if [ -z "$engine" ]; then
  if command -v podman >/dev/null; then engine=podman
  elif command -v docker >/dev/null; then engine=docker
  else die "neither podman nor docker is installed (Debian: apt-get install podman mmdebstrap)"
  fi
fi
case $engine in
  podman) ;;
  docker) docker info >/dev/null 2>&1 || die "docker cannot reach a Docker engine (docker info failed); use --engine podman" ;;
  *) die "--engine must be podman or docker, not $engine" ;;
esac
command -v "$engine" >/dev/null || die "$engine is not installed"
if [ -z "$base" ]; then
  if [ "$engine" = podman ] && [ "$(id -u)" -eq 0 ]; then base=debian; else base=registry; fi
fi

# 1. the base image.
make_debian_base() {
  [ "$(id -u)" -eq 0 ] || die "--base debian runs mmdebstrap or debootstrap as root; use --base registry"
  # mmdebstrap fetches with apt, in parallel: about a minute here where debootstrap takes three.
  local strap
  strap=$(command -v mmdebstrap || command -v debootstrap) \
    || die "mmdebstrap (or debootstrap) is missing: apt-get install mmdebstrap"
  mkdir -p "$CACHE"
  local tarball="$CACHE/bookworm-python3.tar" rootfs="$CACHE/rootfs"
  if [ ! -s "$tarball" ]; then
    rm -rf "$rootfs"
    say "$(basename "$strap") bookworm (minbase + python3) from $MIRROR into $rootfs"
    local options=()
    if [ "$(basename "$strap")" = mmdebstrap ]; then
      # As debootstrap: no recommended packages, /usr merged without the usrmerge package (and perl).
      options=(--aptopt='APT::Install-Recommends "false"')
      [ -d /usr/share/mmdebstrap/hooks/merged-usr ] && options+=(--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr)
    fi
    "$strap" ${options[@]+"${options[@]}"} --variant=minbase \
      --include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates \
      bookworm "$rootfs" "$MIRROR" >"$CACHE/bootstrap.log" 2>&1 \
      || { tail -n 20 "$CACHE/bootstrap.log" >&2; die "$strap failed (log: $CACHE/bootstrap.log)"; }
    # Like python:3.11-slim: the image is the one Python environment it runs, pip may install there.
    rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
    if [ -n "$EXTRA_CA_DIR" ] && compgen -G "$EXTRA_CA_DIR/*.crt" >/dev/null; then
      say "the base trusts the host's local CAs too: $(cd "$EXTRA_CA_DIR" && echo *.crt)"
      cp "$EXTRA_CA_DIR"/*.crt "$rootfs/usr/local/share/ca-certificates/"
      chroot "$rootfs" update-ca-certificates >/dev/null
    fi
    chroot "$rootfs" apt-get clean
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
    say "packing the rootfs into $tarball"
    tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  say "importing $tarball as $LOCAL_BASE"
  "$engine" import --change 'CMD ["python3"]' "$tarball" "$LOCAL_BASE" >/dev/null
}

case $base in
  debian)
    if "$engine" image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
      say "base $LOCAL_BASE exists; reusing it"
    else
      make_debian_base
    fi
    base_image=$LOCAL_BASE ;;
  registry)
    base_image=$REGISTRY_BASE
    if ! "$engine" image inspect "$base_image" >/dev/null 2>&1; then
      say "pulling $base_image"
      "$engine" pull "$base_image" >/dev/null \
        || die "cannot pull $base_image; without a registry, build on a local Debian base: --base debian"
    fi ;;
  *)
    base_image=$base
    "$engine" image inspect "$base_image" >/dev/null 2>&1 || "$engine" pull "$base_image" >/dev/null \
      || die "$base_image is neither local nor pullable" ;;
esac
base_id=$("$engine" image inspect --format '{{.Id}}' "$base_image")

# 2. the image, from the repo's own Dockerfile; skipped when TAG was built from these very sources.
# What the build reads (the Dockerfile's COPY lines and itself), with the base it starts from.
digest=$(
  cd "$ROOT" &&
  { printf 'base %s\n' "$base_id"
    find Dockerfile .dockerignore pyproject.toml README.md gitsync sample-repo -type f \
      ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  } | sha256sum | cut -d' ' -f1
)
built=$("$engine" image inspect --format '{{ index .Config.Labels "io.gitsync.source-digest" }}' "$tag" \
  2>/dev/null || true)
replaced=$("$engine" image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
if [ "$rebuild" -eq 0 ] && [ "$built" = "$digest" ]; then
  say "image $tag was built from these sources (digest ${digest:0:12}); reusing it (--rebuild to build anew)"
else
  say "$engine build $tag (BASE_IMAGE=$base_image)"
  build=("$engine" build --build-arg "BASE_IMAGE=$base_image"
         --label "io.gitsync.source-digest=$digest" --label "org.opencontainers.image.version=$VERSION"
         -f "$ROOT/Dockerfile" -t "$tag")
  # podman: the Dockerfile's RUN steps in a chroot, no OCI runtime or network namespace needed
  # (works where the runtime cannot start a build container, e.g. inside another container);
  # a docker image format, for its HEALTHCHECK (OCI images have none).
  [ "$engine" = podman ] && build+=(--pull=never --isolation=chroot --format=docker --layers)
  "${build[@]}" "$ROOT"
fi
for name in ${also[@]+"${also[@]}"}; do "$engine" tag "$tag" "$name"; done
# The image this build replaced under TAG, if nothing else names or runs it: not left behind, one
# for every build (the build's layer cache stays; `podman image prune` clears it).
if [ -n "$replaced" ] && [ "$replaced" != "$("$engine" image inspect --format '{{.Id}}' "$tag")" ]; then
  "$engine" image rm "$replaced" >/dev/null 2>&1 || true
fi

# 3. run it as a user does: the version, then the whole demo loop inside the image (loopback only).
if [ "$check" -eq 1 ]; then
  mkdir -p "$CACHE"
  if [ "$engine" = podman ]; then
    read -r -a run_flags <<<"${GITSYNC_RUN_FLAGS-$(podman_run_flags)}"
    say "podman run flags for this machine: ${run_flags[*]:-(none)}"
  else
    read -r -a run_flags <<<"${GITSYNC_RUN_FLAGS:-}"
  fi
  run=("$engine" run --rm --network=none ${run_flags[@]+"${run_flags[@]}"})
  got=$("${run[@]}" "$tag" --version) || die "$engine run $tag --version failed"
  say "$engine run $tag --version: $got"
  [ "$got" = "gitsync $VERSION" ] || die "expected 'gitsync $VERSION'"
  if "${run[@]}" "$tag" demo >"$CACHE/demo.out" 2>&1; then
    say "$engine run $tag demo: $(grep -m1 '^done in' "$CACHE/demo.out" || echo 'exit 0')"
  else
    tail -n 20 "$CACHE/demo.out" >&2
    die "gitsync demo failed inside the image (output: $CACHE/demo.out)"
  fi
fi
say "image $tag ($("$engine" image inspect --format '{{.Size}}' "$tag") bytes)"

#!/usr/bin/env bash
# Build the CI base image gpulab/base:bookworm without Docker Hub: a minimal Debian 12 rootfs with
# python3.11 made by debootstrap from the Debian mirror apt already uses, then `docker import`ed.
# Skips when the image exists (--force rebuilds). Needs root and a Docker engine (scripts/dockerd).
#
# Why debootstrap: Docker Hub is unreachable here, the Debian mirror is; minbase + python3 takes about a
# minute and ~120 MB once apt's caches, docs and locales are dropped. Debian's python3 is 3.11, like the
# platform's, so the grading image built on it differs from the GPU one only in the wheels it installs.
set -euo pipefail

IMAGE=${GPULAB_BASE_IMAGE:-gpulab/base:bookworm}
SUITE=bookworm

if [ "${1:-}" != "--force" ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "base-image: $IMAGE exists"
  exit 0
fi

mirror=${GPULAB_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  # The first Debian archive URI apt is configured with (deb822 "URIs:" or one-line "deb URI bookworm").
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | awk '/^URIs:/ {print $2} /^deb / {print $2}' | grep -E '/debian/?$' | head -n1 || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

command -v debootstrap >/dev/null 2>&1 || {
  echo "base-image: installing debootstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
}

rootfs=$(mktemp -d /var/tmp/gpulab-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "base-image: debootstrap $SUITE from $mirror"
debootstrap --variant=minbase --include=python3 "$SUITE" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
  tail -n 20 "$rootfs.log" >&2
  rm -f "$rootfs.log"
  echo "base-image: debootstrap failed" >&2
  exit 1
}
rm -f "$rootfs.log"
# What a grading image never needs: downloaded debs, package lists, docs, man pages, translations.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
  "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/var/log/*.log
find "$rootfs"/usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'C.*' -exec rm -rf {} +
chroot "$rootfs" python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
  || { echo "base-image: the rootfs has no Python 3.11" >&2; exit 1; }

echo "base-image: importing as $IMAGE"
tar -C "$rootfs" --numeric-owner -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  - "$IMAGE" >/dev/null
echo "base-image: $IMAGE ready ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%d MB", $1/1e6}'))"

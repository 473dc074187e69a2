#!/usr/bin/env bash
# Make a stand-in for python:3.11.9-slim-bookworm from Debian packages, for machines that cannot
# pull the public base (no registry reachable). Same Python minor version (Debian bookworm's 3.11),
# same paths: `python`, `python3` and `pip` in /usr/local/bin, packages in
# /usr/local/lib/python3.11/site-packages (a venv at /usr/local, as the python image has its own
# interpreter there), apt working for Dockerfiles that install Debian packages, the same PATH and
# LANG. Prints the image name; cached by the hash of this script (a second run returns at once).
#
#   images/local-base.sh BUILDAH_ARGS...     e.g. --root DIR --runroot DIR (buildah's storage)
#
# Needs root, mmdebstrap and buildah (Debian packages).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tag=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)
name="localhost/kubetrain/python:3.11-bookworm-$tag"
buildah=(buildah "$@")

if "${buildah[@]}" inspect --type image "$name" >/dev/null 2>&1; then
    echo "$name"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "local-base: making $name with mmdebstrap" >&2
# Debian's python3 without its recommends; ca-certificates for TLS; a venv at /usr/local gives the
# python image's layout (its own site-packages, pip in /usr/local/bin). As debian:bookworm-slim
# (the python image's base): no documentation, manual pages or translations, now or from later apt
# installs (the dpkg options stay in the image), copyright files kept; /usr merged by mmdebstrap's
# hook rather than the usrmerge package, which brought perl. About 100 MB the images never use.
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --customize-hook='chroot "$1" python3 -m venv /usr/local' \
    --customize-hook='chroot "$1" ln -sf python3 /usr/local/bin/python' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    bookworm "$work/rootfs.tar" >&2
container=$("${buildah[@]}" from scratch)
mount=$("${buildah[@]}" mount "$container")
tar -xf "$work/rootfs.tar" -C "$mount" --exclude='./dev/*'
"${buildah[@]}" umount "$container" >/dev/null
"${buildah[@]}" config \
    --env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 \
    --cmd python3 \
    --label org.opencontainers.image.description="python 3.11 from Debian bookworm packages (kubetrain images/local-base.sh)" \
    "$container"
"${buildah[@]}" commit --rm --quiet "$container" "$name" >/dev/null
echo "$name"

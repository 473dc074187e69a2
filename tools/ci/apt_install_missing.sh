#!/usr/bin/env bash
# Install the named Debian packages that are not installed yet, in one apt transaction.
#   apt_install_missing.sh [--no-recommends] PACKAGE...
# Prints one line naming what it installs; installs nothing (and touches no apt list) when every
# package is there, so a warm machine pays nothing.
set -euo pipefail
opts=()
if [ "${1:-}" = --no-recommends ]; then opts+=(--no-install-recommends); shift; fi
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
echo "apt: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${opts[@]}" "${missing[@]}" >/dev/null

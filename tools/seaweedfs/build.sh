#!/usr/bin/env bash
# Build SeaweedFS's `weed` (the S3 store KFP 2.17's manifests ship, in place of MinIO) from the
# wrapper module here: go.mod requires the pinned seaweedfs pseudo-version and repeats its `replace`
# (a dependency's replace directives do not apply in another main module), go.sum checksums
# everything. The binary lands in ~/.cache/kubetrain/seaweedfs/<hash of this module, this script and
# the toolchain>/bin/weed; the bin dir is printed last. Only what is missing is built.
#
# Usage: build.sh               builds if needed, prints the bin dir
#        build.sh --print-bin   prints where the bin dir is (or would be) and builds nothing
#        build.sh --list        prints the piece (`module dir<TAB>binary<TAB>package`), builds nothing
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# -dwarf=false: see tools/controlplane/build.sh.
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath -buildvcs=false -gcflags=all=-dwarf=false" CGO_ENABLED=0
export PATH="$PATH:/usr/local/go/bin"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kubetrain/seaweedfs"
toolchain="$(go version) $GOFLAGS CGO_ENABLED=$CGO_ENABLED"
key=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" <(echo "$toolchain") | sha256sum | cut -c1-16)
bin="$cache/$key/bin"
if [ "${1:-}" = --print-bin ]; then  # the one place the key is computed: callers ask here
  echo "$bin"
  exit 0
fi
if [ "${1:-}" = --list ]; then  # the piece, as bench/go_compile_units.py reads every build script's
  printf '%s\t%s\t%s\n' "$here" weed github.com/seaweedfs/seaweedfs/weed
  exit 0
fi
if [ ! -x "$bin/weed" ]; then
  echo "seaweedfs: building weed" >&2
  mkdir -p "$bin"
  t0=$SECONDS start=$(date -u +%T)
  if ! (cd "$here" && go build -p "${KUBETRAIN_GO_JOBS:-2}" -ldflags "-s -w" -o "$bin/weed.tmp" \
          github.com/seaweedfs/seaweedfs/weed); then
    echo "seaweedfs: FAILED building weed (github.com/seaweedfs/seaweedfs/weed, module tools/seaweedfs)"
    exit 1
  fi
  mv "$bin/weed.tmp" "$bin/weed"
  echo "phase build:weed: start $start end $(date -u +%T) $((SECONDS - t0)) s"
fi
echo "$bin"

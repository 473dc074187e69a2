#!/usr/bin/env bash
# Build the Kubeflow Pipelines backend and Argo Workflows binaries the e2e tier runs, from the source
# archives pinned in pins.env (the Go module proxy refuses both repositories; every other module
# comes from the proxy). KFP's go.mod is pointed at the extracted Argo tree and at its own
# third_party/ml-metadata with `replace` directives, and the patches in patches/ are applied. The
# binaries land in ~/.cache/kubetrain/kfp/<hash of pins, patches and this script>/bin (printed
# last); only what is missing is built, so a second run returns at once.
#
# Usage: build.sh [compiler]   `compiler` builds only the pipeline compiler (the `make test` check).
#        build.sh --print-bin   prints where the binaries are (or would be) and builds nothing.
#        build.sh --list        prints each piece (`module dir<TAB>binary<TAB>package`), builds nothing.
# The archives are looked for in $KUBETRAIN_UPSTREAM_DIR, then ../shared/upstream beside the
# checkout, then /work/shared/upstream.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
source "$here/pins.env"
# -dwarf=false: see tools/controlplane/build.sh.
export GOTOOLCHAIN=local GOFLAGS="-mod=mod -trimpath -buildvcs=false -gcflags=all=-dwarf=false"
export PATH="$PATH:/usr/local/go/bin"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kubetrain/kfp"
# The toolchain is part of the key: a binary built by another Go is never reused.
key=$(cat "$here/pins.env" "$here/build.sh" "$here"/patches/* <(go version) | sha256sum | cut -c1-16)
root="$cache/$key"
bin="$root/bin"
jobs="${KUBETRAIN_GO_JOBS:-2}"
if [ "${1:-}" = --print-bin ]; then  # the one place the key is computed: callers ask here
  echo "$bin"
  exit 0
fi
mode=${1:-}
[ "$mode" = --list ] || mkdir -p "$bin"

find_archive() {  # find_archive NAME SHA256 -> path
  local name=$1 sum=$2 dir
  for dir in "${KUBETRAIN_UPSTREAM_DIR:-}" "$repo/../shared/upstream" /work/shared/upstream; do
    [ -n "$dir" ] && [ -f "$dir/$name" ] || continue
    if [ "$(sha256sum "$dir/$name" | cut -d' ' -f1)" != "$sum" ]; then
      echo "kfp: $dir/$name is not the pinned archive (sha256 differs from pins.env); refusing it" >&2
      exit 2
    fi
    echo "$dir/$name"; return
  done
  echo "kfp: source archive $name not found; set KUBETRAIN_UPSTREAM_DIR to the folder holding it" >&2
  exit 2
}

extract() {  # the two trees, patched and wired together, once per key
  [ -f "$root/src/.ready" ] && return
  rm -rf "$root/src"; mkdir -p "$root/src"
  tar -xzf "$(find_archive "$KFP_ARCHIVE" "$KFP_ARCHIVE_SHA256")" -C "$root/src"
  tar -xzf "$(find_archive "$ARGO_ARCHIVE" "$ARGO_ARCHIVE_SHA256")" -C "$root/src"
  mv "$root/src/kubeflow-pipelines-$KFP_VERSION" "$root/src/pipelines"
  mv "$root/src/argo-workflows-${ARGO_VERSION#v}" "$root/src/argo-workflows"
  local patch
  for patch in "$here"/patches/*.patch; do
    patch -s -p1 -d "$root/src/pipelines" < "$patch"
  done
  (cd "$root/src/pipelines" &&
    go mod edit -replace "github.com/argoproj/argo-workflows/v4=../argo-workflows" \
                -replace "github.com/kubeflow/pipelines/third_party/ml-metadata=./third_party/ml-metadata")
  touch "$root/src/.ready"
}

build() {  # build TREE OUTPUT PACKAGE CGO
  local tree=$1 out=$2 pkg=$3 cgo=$4
  if [ "$mode" = --list ]; then printf '%s\t%s\t%s\n' "$root/src/$tree" "$out" "$pkg"; return; fi
  [ -x "$bin/$out" ] && return
  echo "kfp: building $out ($tree $pkg)" >&2
  local t0=$SECONDS start; start=$(date -u +%T)
  if ! (cd "$root/src/$tree" &&
        CGO_ENABLED=$cgo go build -p "$jobs" -tags netgo -ldflags "-s -w" -o "$bin/$out.tmp" "$pkg"); then
    echo "kfp: FAILED building $out ($tree $pkg)"
    exit 1
  fi
  mv "$bin/$out.tmp" "$bin/$out"
  echo "phase build:$out: start $start end $(date -u +%T) $((SECONDS - t0)) s"
}

extract
if [ "$mode" = "" ]; then
  # Both trees' module graphs download in the background while the first binaries compile.
  (for tree in pipelines argo-workflows; do (cd "$root/src/$tree" && go mod download >/dev/null 2>&1); done) &
  prefetch=$!
  trap 'kill $prefetch 2>/dev/null || true' EXIT
fi
build pipelines kfp-compiler ./backend/src/v2/cmd/compiler 0
if [ "$mode" != compiler ]; then
  # Driver, launcher and argoexec are copied into pods (the launcher into the user's own image),
  # so they are static. So is the API server: patches/apiserver-without-cgo.patch drops the one
  # sqlite3 reference that needed cgo (it runs against MariaDB).
  build pipelines driver ./backend/src/v2/cmd/driver 0
  build pipelines launcher-v2 ./backend/src/v2/cmd/launcher-v2 0
  build pipelines persistence-agent ./backend/src/agent/persistence 0
  build pipelines apiserver ./backend/src/apiserver 0
  # Argo's two commands keep Argo's own module graph: built in KFP's (client-go v0.35) they fail,
  # since k8s.io/api v0.35 dropped the gogo-protobuf methods Argo v4.0.5's API client calls
  # (`*v1.Event does not implement protoiface.MessageV1`); bench/go_compile_units.py counts what
  # that repeats.
  build argo-workflows workflow-controller ./cmd/workflow-controller 0
  build argo-workflows argoexec ./cmd/argoexec 0
fi
[ "$mode" = --list ] || echo "$bin"

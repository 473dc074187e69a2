#!/usr/bin/env bash
# Build SeaweedFS's `weed` (the S3 store KFP 2.17's manifests ship, in place of MinIO) trimmed to what
# the KFP tier runs (`weed server -filer -s3`: master, volume server, filer on leveldb2, the S3 gateway
# with its IAM API, and the IAM server), from main.go here against a patched copy of the pinned
# seaweedfs tree. Upstream's `weed` links every command, filer store, queue, remote storage and KMS
# with their cloud SDKs (1,478 packages outside the standard library); this links 506 (docs/testing.md).
#
# go.mod requires the pinned seaweedfs pseudo-version and repeats its `replace` (a dependency's
# replace directives do not apply in another main module); go.mod and go.sum are tidied against the
# unpatched tree, so they are a superset of what the trimmed build needs and `go mod tidy` here keeps
# working. The tree is copied from the module cache into <cache>/src/seaweedfs, with only the kept
# commands' files in weed/command (command_files below) and patches/*.patch applied (each says what
# it drops and why); the module here is copied beside it with a `replace` pointing at it. The binary
# lands in ~/.cache/kubetrain/seaweedfs/<hash of this module, its patches, this script and the
# toolchain>/bin/weed; the bin dir is printed last. Only what is missing is prepared or built.
#
# Usage: build.sh               builds if needed, prints the bin dir
#        build.sh --print-bin   prints where the bin dir is (or would be) and builds nothing
#        build.sh --list        prepares the patched tree, prints the piece (`module dir<TAB>binary
#                               <TAB>package`) and builds nothing
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# -dwarf=false: see tools/controlplane/build.sh.
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath -buildvcs=false -gcflags=all=-dwarf=false" CGO_ENABLED=0
export PATH="$PATH:/usr/local/go/bin"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kubetrain/seaweedfs"
toolchain="$(go version) $GOFLAGS CGO_ENABLED=$CGO_ENABLED"
key=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" "$here/build.sh" "$here"/patches/*.patch <(echo "$toolchain") |
      sha256sum | cut -c1-16)
root="$cache/$key"
bin="$root/bin"
src="$root/src"
upstream_module=github.com/seaweedfs/seaweedfs
# The files of weed/command that are kept: the commands in patches/commands.patch's list, what
# `weed server` and `weed filer` start (WebDAV and SFTP stay: 15 packages, and taking them out would
# patch both commands), and shutdown.go, their common shutdown.
command_files="command.go filer.go iam.go master.go s3.go server.go sftp.go shutdown.go version.go volume.go webdav.go"
if [ "${1:-}" = --print-bin ]; then  # the one place the key is computed: callers ask here
  echo "$bin"
  exit 0
fi

prepare() {  # the patched tree and the module beside it, once per key
  [ -f "$src/.ready" ] && return
  rm -rf "$src"
  mkdir -p "$src/seaweedfs/telemetry" "$src/wrapper"
  local dir file patch
  dir=$(cd "$here" && go mod download "$upstream_module" && go list -m -f '{{.Dir}}' "$upstream_module")
  # weed/ is the Go tree; telemetry/proto is the one package outside it that weed/ imports.
  cp -R "$dir/go.mod" "$dir/LICENSE" "$dir/weed" "$src/seaweedfs/"
  cp -R "$dir/telemetry/proto" "$src/seaweedfs/telemetry/"
  chmod -R u+w "$src/seaweedfs"  # the module cache's files are read-only
  find "$src/seaweedfs" -name '*_test.go' -delete
  for file in "$src/seaweedfs/weed/command/"*; do
    case " $command_files " in *" ${file##*/} "*) ;; *) rm -rf "$file" ;; esac
  done
  for patch in "$here"/patches/*.patch; do
    if ! patch -s -p1 -d "$src/seaweedfs" < "$patch"; then
      echo "seaweedfs: FAILED applying ${patch##*/} to $upstream_module (was the pin moved?)"
      exit 1
    fi
  done
  cp "$here/go.mod" "$here/go.sum" "$here/main.go" "$src/wrapper/"
  (cd "$src/wrapper" && go mod edit -replace "$upstream_module=../seaweedfs")
  touch "$src/.ready"
}

prepare
if [ "${1:-}" = --list ]; then  # the piece, as bench/go_compile_units.py reads every build script's
  printf '%s\t%s\t%s\n' "$src/wrapper" weed kubetrain.local/seaweedfs
  exit 0
fi
if [ ! -x "$bin/weed" ]; then
  echo "seaweedfs: building weed" >&2
  mkdir -p "$bin"
  t0=$SECONDS start=$(date -u +%T)
  if ! (cd "$src/wrapper" && go build -p "${KUBETRAIN_GO_JOBS:-2}" -ldflags "-s -w" -o "$bin/weed.tmp" .); then
    echo "seaweedfs: FAILED building weed (tools/seaweedfs/main.go against the patched tree in $src)"
    exit 1
  fi
  mv "$bin/weed.tmp" "$bin/weed"
  echo "phase build:weed: start $start end $(date -u +%T) $((SECONDS - t0)) s"
fi
echo "$bin"

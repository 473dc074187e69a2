#!/usr/bin/env bash
# Build hdrproxy, the pod-facing listener of the multi-user KFP tier that deletes the
# `kubeflow-userid` header (main.go says why), and run its Go tests. Standard library only: its
# go.mod requires nothing, so the build compiles one package beyond the toolchain's own (docs/testing.md).
# The binary lands in ~/.cache/kubetrain/hdrproxy/<hash of go.mod, main.go, this script and the
# toolchain>/bin/hdrproxy; the bin dir is printed last. Only what is missing is built.
#
# Usage: build.sh               builds if needed, prints the bin dir
#        build.sh --print-bin   prints where the bin dir is (or would be) and builds nothing
#        build.sh --list        prints the piece (`module dir<TAB>binary<TAB>package`), builds nothing
#        build.sh --test        runs `go test` (make test's go-tests phase)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# The flags of the other pieces (tools/controlplane/build.sh says why), so their build cache serves.
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath -buildvcs=false -gcflags=all=-dwarf=false" CGO_ENABLED=0
export PATH="$PATH:/usr/local/go/bin"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kubetrain/hdrproxy"
toolchain="$(go version) $GOFLAGS CGO_ENABLED=$CGO_ENABLED"
key=$(cat "$here/go.mod" "$here/main.go" "$here/build.sh" <(echo "$toolchain") | sha256sum | cut -c1-16)
bin="$cache/$key/bin"
case "${1:-}" in
  --print-bin) echo "$bin"; exit 0 ;;
  --list) printf '%s\t%s\t%s\n' "$here" hdrproxy kubetrain.local/hdrproxy; exit 0 ;;
  --test) cd "$here" && exec go test -p "${KUBETRAIN_GO_JOBS:-2}" -count=1 -timeout 120s . ;;
esac
if [ ! -x "$bin/hdrproxy" ]; then
  echo "hdrproxy: building hdrproxy" >&2
  mkdir -p "$bin"
  t0=$SECONDS start=$(date -u +%T)
  if ! (cd "$here" && go build -p "${KUBETRAIN_GO_JOBS:-2}" -ldflags "-s -w" -o "$bin/hdrproxy.tmp" .); then
    echo "hdrproxy: FAILED building hdrproxy (tools/hdrproxy)"
    exit 1
  fi
  mv "$bin/hdrproxy.tmp" "$bin/hdrproxy"
  echo "phase build:hdrproxy: start $start end $(date -u +%T) $((SECONDS - t0)) s"
fi
echo "$bin"

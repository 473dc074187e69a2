#!/usr/bin/env bash
# Build the multi-user tier's user-facing identity front (docs/design/multi-user.md, "Identity
# flows") from the Go module proxy: oauth2-proxy (the only user-facing entry: OIDC code flow, a
# session cookie, `kubeflow-userid` from the `email` claim) and zitadel/oidc's `example/server`, the
# OIDC provider with a login form and users from a USERS_FILE (Dex, kubeflow/manifests' provider, is
# not on the proxy at a usable version). tools/cluster/kfp/identity.py runs both as host processes.
#
# The pins are two wrapper modules, each requiring one release and naming its command with a `tool`
# directive: oauth2-proxy/go.mod (oauth2-proxy v7.15.6) and oidc-provider/go.mod (zitadel/oidc
# v3.52.0); go.sum checksums everything. A module each keeps oauth2-proxy on exactly the versions
# its release pins: one graph for both would raise its go-jose and x/oauth2 to the provider's and
# save 3 compile units of 285 (bench/go_compile_units.py). The binaries land in
# ~/.cache/kubetrain/identity/<hash of both modules, this script and the toolchain>/bin/{oauth2-proxy,
# oidc-provider}; the bin dir is printed last. Only what is missing is built.
#
# Usage: build.sh               builds if needed, prints the bin dir
#        build.sh --print-bin   prints where the bin dir is (or would be) and builds nothing
#        build.sh --list        prints each piece (`module dir<TAB>binary<TAB>package`), builds nothing
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# -dwarf=false: see tools/controlplane/build.sh.
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath -buildvcs=false -gcflags=all=-dwarf=false" CGO_ENABLED=0
export PATH="$PATH:/usr/local/go/bin"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kubetrain/identity"
toolchain="$(go version) $GOFLAGS CGO_ENABLED=$CGO_ENABLED"
key=$(cat "$here"/*/go.mod "$here"/*/go.sum "$here/build.sh" <(echo "$toolchain") | sha256sum | cut -c1-16)
bin="$cache/$key/bin"
jobs="${KUBETRAIN_GO_JOBS:-2}"
proxy_module=github.com/oauth2-proxy/oauth2-proxy/v7
if [ "${1:-}" = --print-bin ]; then  # the one place the key is computed: callers ask here
  echo "$bin"
  exit 0
fi
mode=${1:-}

build() {  # build OUTPUT PACKAGE [LDFLAGS]: in the module named after OUTPUT
  local out=$1 pkg=$2 ldflags=${3:--s -w}
  if [ "$mode" = --list ]; then printf '%s\t%s\t%s\n' "$here/$out" "$out" "$pkg"; return; fi
  [ -x "$bin/$out" ] && return
  echo "identity: building $out ($pkg)" >&2
  mkdir -p "$bin"
  local t0=$SECONDS start; start=$(date -u +%T)
  if ! (cd "$here/$out" && go build -p "$jobs" -ldflags "$ldflags" -o "$bin/$out.tmp" "$pkg"); then
    echo "identity: FAILED building $out ($pkg, module tools/identity/$out)"
    exit 1
  fi
  mv "$bin/$out.tmp" "$bin/$out"
  echo "phase build:$out: start $start end $(date -u +%T) $((SECONDS - t0)) s"
}

# oauth2-proxy's own release build stamps its version the same way (its Makefile's `build` target).
proxy_version=$(cd "$here/oauth2-proxy" && go list -m -f '{{.Version}}' "$proxy_module")
build oauth2-proxy "$proxy_module" "-s -w -X $proxy_module/pkg/version.VERSION=$proxy_version"
build oidc-provider github.com/zitadel/oidc/v3/example/server
[ "$mode" = --list ] || echo "$bin"

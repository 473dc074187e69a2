#!/usr/bin/env bash
# Build the control-plane binaries from the Go module proxy, pinned by pins.env and the go.mod/go.sum
# files here. Each piece (one wrapper module) is cached by the hash of its own pins under
# ~/.cache/kubetrain/controlplane/pieces/<dir>-<hash>/, so changing or adding one piece rebuilds only
# that piece. The bin directory printed last, ~/.cache/kubetrain/controlplane/<hash of all pins>/bin,
# holds links to the pieces' binaries. Only what is missing is built; a second run returns at once.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
source "$here/pins.env"
# -gcflags=all=-dwarf=false: `-s -w` drops the debug info at link time only; not generating it
# at all saves about 15% of every piece's compile CPU (docs/testing.md), for the same binary.
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath -gcflags=all=-dwarf=false" CGO_ENABLED=0
export PATH="$PATH:/usr/local/go/bin"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kubetrain/controlplane"
# Every key also holds the toolchain and the flags, so a binary built another way is never reused.
toolchain="$(go version) $GOFLAGS CGO_ENABLED=$CGO_ENABLED"
files() { find "$@" -type f -print0 | sort -z | xargs -0 cat; }  # every file below, in a fixed order
hash=$(cat "$here/pins.env" <(files "$here"/*/) <(echo "$toolchain") | sha256sum | cut -c1-16)
bin="$cache/$hash/bin"
# --list: print each piece as `module dir<TAB>binary<TAB>package` and build nothing (the one list of
# pieces; bench/go_compile_units.py reads it).
list=0
if [ "${1:-}" = --list ]; then list=1; shift; fi
[ "$list" = 1 ] || mkdir -p "$bin"
jobs="${KUBETRAIN_GO_JOBS:-2}"

k8s_ldflags() {
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  echo "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1" \
       "-X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
       "-X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
}

build() {  # build DIR OUTPUT PACKAGE [LDFLAGS]
  local dir=$1 out=$2 pkg=$3 ldflags=${4:--s -w}
  local key piece
  if [ "$list" = 1 ]; then printf '%s\t%s\t%s\n' "$here/$dir" "$out" "$pkg"; return; fi
  # Every file of the wrapper module (go.mod, go.sum, any source, in subfolders too) and the link flags.
  key=$(cat "$here/pins.env" <(files "$here/$dir") <(echo "$ldflags $toolchain") | sha256sum | cut -c1-16)
  piece="$cache/pieces/$dir-$key"
  if [ ! -x "$piece/$out" ]; then
    echo "controlplane: building $out ($pkg)" >&2
    mkdir -p "$piece"
    local t0=$SECONDS start; start=$(date -u +%T)
    if ! (cd "$here/$dir" && go build -p "$jobs" -ldflags "$ldflags" -o "$piece/$out.tmp" "$pkg"); then
      echo "controlplane: FAILED building $out ($pkg, module tools/controlplane/$dir)"
      exit 1
    fi
    mv "$piece/$out.tmp" "$piece/$out"
    echo "phase build:$out: start $start end $(date -u +%T) $((SECONDS - t0)) s"
  fi
  ln -sfn "$piece/$out" "$bin/$out"
}

# Module downloads are network-bound: fetch every wrapper module's graph in the background while
# the first pieces compile (Go's module cache is safe to share between concurrent commands).
if [ "$list" = 0 ]; then
  (for d in "$here"/*/; do [ -f "$d/go.mod" ] && (cd "$d" && go mod download >/dev/null 2>&1); done) &
  prefetch=$!
  trap 'kill $prefetch 2>/dev/null || true' EXIT
fi

build k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$(k8s_ldflags)"
build k8s kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$(k8s_ldflags)"
build k8s kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$(k8s_ldflags)"
build k8s kubectl k8s.io/kubernetes/cmd/kubectl "$(k8s_ldflags)"
build k8s etcd kubetrain.local/k8sbins/etcd

# kwok and the operators, from the same module as the control plane (k8s/go.mod requires each
# pinned release and names its command with a `tool` directive; go.sum checksums everything): one
# module graph, so the Kubernetes libraries they share compile once. training-operator keeps a
# module of its own (k8s/go.mod says why). `go install pkg@v` is not used: it asks the proxy for
# the module's version list, which the proxy refuses for some.
build k8s kwok sigs.k8s.io/kwok/cmd/kwok
build k8s kwokctl sigs.k8s.io/kwok/cmd/kwokctl
build k8s mpi-operator github.com/kubeflow/mpi-operator/cmd/mpi-operator
build k8s jobset-controller sigs.k8s.io/jobset
build k8s trainer-controller-manager github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
build training-operator training-operator github.com/kubeflow/training-operator/cmd/training-operator.v1

# The real node (`build.sh node`, or KUBETRAIN_NODE=1): kubelet and kube-proxy (the control plane's
# module), containerd with its runc shim, the CNI plugins, CoreDNS, the image registry the node
# pulls from, and a pause process for pod sandboxes.
if [ "${1:-}" = node ] || [ "${KUBETRAIN_NODE:-0}" = 1 ]; then
  build k8s kubelet k8s.io/kubernetes/cmd/kubelet "$(k8s_ldflags)"
  build k8s kube-proxy k8s.io/kubernetes/cmd/kube-proxy "$(k8s_ldflags)"
  ctrd="github.com/containerd/containerd/v2"
  ctrd_ldflags="-s -w -X $ctrd/version.Version=$CONTAINERD_VERSION -X $ctrd/version.Package=$ctrd"
  for cmd in containerd containerd-shim-runc-v2 ctr; do
    build containerd "$cmd" "$ctrd/cmd/$cmd" "$ctrd_ldflags"
  done
  for plugin in ipam/host-local main/bridge main/loopback meta/portmap; do
    build cni "cni-${plugin#*/}" "github.com/containernetworking/plugins/plugins/$plugin"
  done
  build coredns coredns kubetrain.local/coredns
  build registry registry kubetrain.local/registry
  build pause pause kubetrain.local/pause
fi
[ "$list" = 1 ] || echo "$bin"

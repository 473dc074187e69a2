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
hash=$(cat "$here/pins.env" "$here"/*/* <(echo "$toolchain") | sha256sum | cut -c1-16)
bin="$cache/$hash/bin"
mkdir -p "$bin"
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
  # Every file of the wrapper module (go.mod, go.sum, any source) and the link flags.
  key=$(cat "$here/pins.env" "$here/$dir"/* <(echo "$ldflags $toolchain") | sha256sum | cut -c1-16)
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
(for d in "$here"/*/; do [ -f "$d/go.mod" ] && (cd "$d" && go mod download >/dev/null 2>&1); done) &
prefetch=$!
trap 'kill $prefetch 2>/dev/null || true' EXIT

build k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$(k8s_ldflags)"
build k8s kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$(k8s_ldflags)"
build k8s kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$(k8s_ldflags)"
build k8s kubectl k8s.io/kubernetes/cmd/kubectl "$(k8s_ldflags)"
build etcd etcd kubetrain.local/etcd

# kwok and the operators: each from its own wrapper module (its go.mod requires the pinned release
# and names the command with a `tool` directive; go.sum checksums everything). `go install pkg@v`
# is not used: it asks the proxy for the module's version list, which the proxy refuses for some.
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
build kwok kwokctl sigs.k8s.io/kwok/cmd/kwokctl
build training-operator training-operator github.com/kubeflow/training-operator/cmd/training-operator.v1
build mpi-operator mpi-operator github.com/kubeflow/mpi-operator/cmd/mpi-operator
build jobset jobset-controller sigs.k8s.io/jobset
build trainer trainer-controller-manager github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager

# The real node (`build.sh node`, or KUBETRAIN_NODE=1): kubelet and kube-proxy from their own module
# (so the control plane's pins did not change), containerd with its runc shim, the CNI plugins,
# CoreDNS, the image registry the node pulls from, and a pause process for pod sandboxes.
if [ "${1:-}" = node ] || [ "${KUBETRAIN_NODE:-0}" = 1 ]; then
  build kubelet kubelet k8s.io/kubernetes/cmd/kubelet "$(k8s_ldflags)"
  build kubelet kube-proxy k8s.io/kubernetes/cmd/kube-proxy "$(k8s_ldflags)"
  ctrd="github.com/containerd/containerd/v2"
  ctrd_ldflags="-s -w -X $ctrd/version.Version=$CONTAINERD_VERSION -X $ctrd/version.Package=$ctrd"
  for cmd in containerd containerd-shim-runc-v2 ctr; do
    build containerd "$cmd" "$ctrd/cmd/$cmd" "$ctrd_ldflags"
  done
  for plugin in ipam/host-local main/bridge main/loopback meta/portmap; do
    build cni "cni-${plugin#*/}" "github.com/containernetworking/plugins/plugins/$plugin"
  done
  build coredns coredns kubetrain.local/coredns
  build registry registry github.com/distribution/distribution/v3/cmd/registry
  build pause pause kubetrain.local/pause
fi
echo "$bin"

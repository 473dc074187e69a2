#!/usr/bin/env bash
# Build (and optionally push) kubetrain's images, tagged with the package version: the same
# references the components and presets use (kubetrain.presets.image_ref), so a compiled pipeline
# pulls exactly these. Run from anywhere; the build context is the repository root.
#
#   images/build.sh                      build all four: launcher pytorch chainermn ps
#   images/build.sh --push               build and push to REGISTRY
#   images/build.sh pytorch ps           build some
#   images/build.sh --dry-run            print the commands only
#   images/build.sh --base local         build on a python 3.11 base made from Debian packages
#                                        (images/local-base.sh), for machines that cannot pull
#   images/build.sh --mirror HOST:PORT   also push to a plain-HTTP registry under the same paths
#                                        (kubetrain/<name>:<version>), to serve as a mirror of REGISTRY
#
# REGISTRY (default ghcr.io/kubetrain) changes where they go; the committed YAML names
# ghcr.io/kubetrain, so with another registry write YAML for it (`kubetrain compile --registry
# REGISTRY --out DIR`, or KUBETRAIN_REGISTRY=REGISTRY when compiling your own pipelines).
# BUILDER (docker, podman or buildah; default: docker when its daemon answers, else the first
# of podman and buildah installed) is the build tool.
# Without docker, podman and buildah build daemonless with runc (BUILDAH_STORAGE, default
# ~/.cache/kubetrain/images, holds their storage and pip's download cache), and every RUN step
# sees CA_BUNDLE (default: this machine's bundle) and a pip.conf naming it, for a TLS proxy.
# TORCH_INDEX_URL, when set, is passed to the pytorch and ps builds (e.g. a CUDA index).
# LAUNCHER_EXTRAS (e.g. s3,gcs), when set, adds those kubetrain extras to the launcher image
# (download_dataset's s3:// and gs:// sources); without it the launcher has no object-store driver.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
registry="${REGISTRY:-ghcr.io/kubetrain}"
version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$root/src/kubetrain/__init__.py")"
if [[ -z "$version" ]]; then
    echo "build.sh: cannot read __version__ from src/kubetrain/__init__.py" >&2
    exit 2
fi

push=0
dry=0
base=""
mirror=""
names=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --push) push=1 ;;
        --dry-run) dry=1 ;;
        --base) base="${2:?--base needs an image or 'local'}"; shift ;;
        --mirror) mirror="${2:?--mirror needs HOST:PORT}"; shift ;;
        launcher|pytorch|chainermn|ps) names+=("$1") ;;
        -h|--help) sed -n '2,25p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "build.sh: unknown argument '$1' (expected --push, --dry-run, --base, --mirror or an image name)" >&2; exit 2 ;;
    esac
    shift
done
[[ ${#names[@]} -gt 0 ]] || names=(launcher pytorch chainermn ps)

builder="${BUILDER:-}"
if [[ -z "$builder" ]]; then
    # docker only with a daemon to talk to (a CLI alone cannot build).
    if command -v docker >/dev/null && docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
        builder=docker
    else
        for candidate in podman buildah; do
            if command -v "$candidate" >/dev/null; then builder=$candidate; break; fi
        done
    fi
    builder=${builder:-docker}
fi

run() {
    echo "+ $*"
    [[ $dry -eq 1 ]] || "$@"
}

build_args=()
engine=("$builder")
case "$builder" in
    docker)
        build=(env DOCKER_BUILDKIT=1 docker build) ;;
    podman|buildah)
        storage="${BUILDAH_STORAGE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubetrain/images}"
        engine=("$builder" --root "$storage/storage" --runroot "$storage/runroot")
        ca="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
        # buildah keeps `RUN --mount=type=cache` directories (pip's downloads) under TMPDIR.
        export TMPDIR="$storage/tmp"
        if [[ $dry -eq 0 ]]; then
            mkdir -p "$TMPDIR"
            printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$storage/pip.conf"
        fi
        # runc: crun refuses hosts with cgroup v1; host network: no firewall rules for builds.
        build=("${engine[@]}" build --runtime runc --network host --layers
               --volume "$ca:/etc/ssl/certs/ca-certificates.crt:ro" --volume "$storage/pip.conf:/etc/pip.conf:ro") ;;
    *) echo "build.sh: BUILDER must be docker, podman or buildah, not '$builder'" >&2; exit 2 ;;
esac
if [[ "$base" == local ]]; then
    if [[ "$builder" == docker ]]; then
        echo "build.sh: --base local needs buildah or podman (BUILDER=buildah)" >&2
        exit 2
    fi
    if [[ $dry -eq 1 ]]; then
        base="localhost/kubetrain/python:3.11-bookworm"
    else
        base=$("$root/images/local-base.sh" --root "$storage/storage" --runroot "$storage/runroot")
    fi
fi
[[ -n "$base" ]] && build_args+=(--build-arg "BASE_IMAGE=$base")

for name in "${names[@]}"; do
    ref="$registry/$name:$version"
    start=$(date +%s)
    # Each image is a stage of images/Dockerfile (BuildKit reads images/Dockerfile.dockerignore,
    # keeping the context small); pytorch and ps are one stage, torch, with their own extras.
    target=$name
    image_args=("${build_args[@]}")
    case "$name" in
        pytorch) target=torch; image_args+=(--build-arg "TORCH_EXTRAS=torch") ;;
        ps) target=torch; image_args+=(--build-arg "TORCH_EXTRAS=torch,ps") ;;
    esac
    if [[ -n "${TORCH_INDEX_URL:-}" && $target == torch ]]; then
        image_args+=(--build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL")
    fi
    if [[ -n "${LAUNCHER_EXTRAS:-}" && $name == launcher ]]; then
        image_args+=(--build-arg "LAUNCHER_EXTRAS=$LAUNCHER_EXTRAS")
    fi
    run "${build[@]}" "${image_args[@]}" -f "$root/images/Dockerfile" --target "$target" -t "$ref" "$root"
    if [[ $dry -eq 0 && "$builder" != docker ]]; then
        size=$("${engine[@]}" images --noheading --format '{{.Size}}' "$ref" 2>/dev/null || echo "?")
        echo "build.sh: $ref built in $(( $(date +%s) - start ))s, $size" >&2
    fi
    if [[ $push -eq 1 ]]; then
        run "${engine[@]}" push "$ref"
    fi
    if [[ -n "$mirror" ]]; then
        # Uncompressed: the layers are pulled once, over the loopback, by the node's containerd.
        case "$builder" in
            docker) run docker tag "$ref" "$mirror/kubetrain/$name:$version"; run docker push "$mirror/kubetrain/$name:$version" ;;
            *) run "${engine[@]}" push --tls-verify=false --disable-compression "$ref" "docker://$mirror/kubetrain/$name:$version" ;;
        esac
    fi
done

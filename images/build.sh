#!/usr/bin/env bash
# Build (and optionally push) kubetrain's images, tagged with the package version: the same
# references the components and presets use (kubetrain.presets.image_ref), so a compiled pipeline
# pulls exactly these. Run from anywhere; the build context is the repository root.
#
#   images/build.sh                 build all four: launcher pytorch chainermn ps
#   images/build.sh --push          build and push
#   images/build.sh pytorch ps      build some
#   images/build.sh --dry-run       print the commands only
#
# REGISTRY (default ghcr.io/kubetrain) changes where they go; the compiled YAML and the presets
# name ghcr.io/kubetrain, so with another registry either mirror the images under those names or
# pass `image=` to the training components (the launcher image is the components' base_image).
# DOCKER (default docker; podman works) is the build tool.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
registry="${REGISTRY:-ghcr.io/kubetrain}"
docker="${DOCKER:-docker}"
version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$root/src/kubetrain/__init__.py")"
if [[ -z "$version" ]]; then
    echo "build.sh: cannot read __version__ from src/kubetrain/__init__.py" >&2
    exit 2
fi

push=0
dry=0
names=()
for arg in "$@"; do
    case "$arg" in
        --push) push=1 ;;
        --dry-run) dry=1 ;;
        launcher|pytorch|chainermn|ps) names+=("$arg") ;;
        -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "build.sh: unknown argument '$arg' (expected --push, --dry-run or an image name)" >&2; exit 2 ;;
    esac
done
[[ ${#names[@]} -gt 0 ]] || names=(launcher pytorch chainermn ps)

run() {
    echo "+ $*"
    [[ $dry -eq 1 ]] || "$@"
}

for name in "${names[@]}"; do
    ref="$registry/$name:$version"
    # BuildKit reads images/<name>/Dockerfile.dockerignore, keeping the context small.
    run env DOCKER_BUILDKIT=1 "$docker" build -f "$root/images/$name/Dockerfile" -t "$ref" "$root"
    if [[ $push -eq 1 ]]; then
        run "$docker" push "$ref"
    fi
done

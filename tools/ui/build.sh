#!/usr/bin/env bash
# Build the Kubeflow Pipelines 2.17 web UI (the frontend/ of the source archive pinned in
# tools/kfp/pins.env, read here and never changed) with npm, for the e2e tier's UI server. The result,
# ~/.cache/kubetrain/ui/<hash of the pins, this script, the lock fix and the node/npm versions>/app,
# holds build/ (the static page) and server/ (the UI's Node server: dist/ and its node_modules), and
# is printed last. Only what is missing is built; a second run returns at once.
#
# Usage: build.sh               builds if needed, prints the app dir
#        build.sh --print-dir   prints where the app dir is (or would be) and builds nothing
# The archive is looked for in $KUBETRAIN_UPSTREAM_DIR, then ../shared/upstream beside the checkout,
# then /work/shared/upstream.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
source "$repo/tools/kfp/pins.env"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kubetrain/ui"
fail() { echo "ui: FAILED $*"; exit 1; }
command -v node >/dev/null && command -v npm >/dev/null || fail "node and npm are needed (apt-get install nodejs npm)"
key=$(cat "$repo/tools/kfp/pins.env" "$here/build.sh" "$here/drop-fs-placeholder.js" \
          <(node --version; npm --version) | sha256sum | cut -c1-16)
root="$cache/$key"
app="$root/app"
if [ "${1:-}" = --print-dir ]; then  # the one place the key is computed: callers ask here
  echo "$app"
  exit 0
fi
if [ -f "$app/.ready" ]; then
  echo "$app"
  exit 0
fi

archive=""
for dir in "${KUBETRAIN_UPSTREAM_DIR:-}" "$repo/../shared/upstream" /work/shared/upstream; do
  [ -n "$dir" ] && [ -f "$dir/$KFP_ARCHIVE" ] && { archive="$dir/$KFP_ARCHIVE"; break; }
done
[ -n "$archive" ] || fail "source archive $KFP_ARCHIVE not found; set KUBETRAIN_UPSTREAM_DIR to the folder holding it"
[ "$(sha256sum "$archive" | cut -d' ' -f1)" = "$KFP_ARCHIVE_SHA256" ] ||
  fail "$archive is not the pinned archive (sha256 differs from tools/kfp/pins.env)"

t0=$SECONDS start=$(date -u +%T)
rm -rf "$root/src" "$app" "$cache"/.trash-*
mkdir -p "$root/src"
log="$root/build.log"
tar -xzf "$archive" -C "$root/src" "kubeflow-pipelines-$KFP_VERSION/frontend"
src="$root/src/kubeflow-pipelines-$KFP_VERSION/frontend"
node "$here/drop-fs-placeholder.js" "$src"
# package.json pins node 24.14.0 and .npmrc makes that strict; Node 20.19+ builds and serves it
# (Vite 8's floor). The frontend's playwright devDependency would download no browser, but say so.
export npm_config_engine_strict=false npm_config_fund=false npm_config_audit=false
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 PUPPETEER_SKIP_DOWNLOAD=1 CYPRESS_INSTALL_BINARY=0
# `npm ci`'s postinstall also installs server/ (and mock-backend/). The full `npm run build` adds
# lint and typecheck (~140 s); tailwind + vite build give the same build/.
if ! (cd "$src" && npm ci >"$log" 2>&1 && npm run build:tailwind >>"$log" 2>&1 &&
      npx vite build >>"$log" 2>&1 && cd server && npm run build >>"$log" 2>&1 &&
      npm prune --omit=dev >>"$log" 2>&1); then
  fail "building the KFP $KFP_VERSION frontend (log: $log, last line: $(tail -n 1 "$log"))"
fi
# Only the static build and the server (with its runtime dependencies) are needed to serve the UI.
mkdir -p "$app/server"
mv "$src/build" "$app/build"
mv "$src/server/dist" "$src/server/node_modules" "$src/server/package.json" "$app/server/"
# The server's artifact handler checks in ML Metadata that an artifact belongs to the caller's
# namespace (multi-user) with these generated modules, where upstream's Dockerfile puts them;
# without them it logs "[SECURITY] MLMD proto bundle could not be loaded" and the check fails open.
mkdir -p "$app/server/src/third_party/mlmd"
mv "$src/src/third_party/mlmd/generated" "$app/server/src/third_party/mlmd/generated"
printf '{"type":"commonjs"}\n' > "$app/server/src/third_party/mlmd/generated/package.json"
# node_modules is ~900 MB of small files: removing them takes minutes on a busy disk, so they are
# moved aside and removed in the background (a leftover is removed by the next build of any key).
mv "$root/src" "$cache/.trash-$key-$$"
(rm -rf "$cache/.trash-$key-$$" >/dev/null 2>&1 &)
touch "$app/.ready"
echo "phase build:ui: start $start end $(date -u +%T) $((SECONDS - t0)) s"
echo "$app"

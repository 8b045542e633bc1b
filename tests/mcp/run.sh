#!/usr/bin/env bash
# `gyre mcp` with the official MCP TypeScript SDK client (node:test). Usage: tests/mcp/run.sh GYRE_BIN
# Installs the pinned SDK (package-lock.json) with `npm ci` when node_modules is missing.
set -u
GYRE=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
if [ ! -d "$HERE/node_modules/@modelcontextprotocol/sdk" ]; then
  log=$(mktemp)
  (cd "$HERE" && npm ci --no-audit --no-fund --prefer-offline >"$log" 2>&1) || {
    echo "run.sh: npm ci failed:"; cat "$log"; exit 1; }
fi
cd "$HERE" && GYRE_BIN=$GYRE GYRE_ROOT=$ROOT node --test --test-reporter=spec mcp_client.test.mjs

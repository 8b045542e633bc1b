#!/usr/bin/env bash
# `gyre mcp` with the official MCP TypeScript SDK client (node:test), over stdio and over the
# streamable HTTP transport. Usage: tests/mcp/run.sh GYRE_BIN
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
# A server with trace windows on, for the trace_serve_window tool.
sout=$(mktemp); tdir=$(mktemp -d)
(cd "$ROOT" && exec "$GYRE" serve --model tests/fixtures/glm5_tiny --port 0 --kv-memory 16M --trace-dir "$tdir") \
  >"$sout" 2>/dev/null &
spid=$!
surl=""
for _ in $(seq 1 300); do
  surl=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$sout" 2>/dev/null | sed 's/listening on //')
  [ -n "$surl" ] && break
  sleep 0.1
done
[ -n "$surl" ] || { echo "run.sh: gyre serve did not start"; kill -9 $spid 2>/dev/null; exit 1; }
cd "$HERE" && GYRE_BIN=$GYRE GYRE_ROOT=$ROOT GYRE_SERVE_URL=$surl node --test --test-reporter=spec mcp_client.test.mjs
rc=$?
kill -TERM $spid; wait $spid 2>/dev/null; rm -rf "$tdir" "$sout"
# The streamable HTTP transport: a server on a free loopback port with an API key.
out=$(mktemp)
(cd "$ROOT" && exec "$GYRE" mcp --http 0 --api-key mcp-test-key) >"$out" 2>/dev/null &
pid=$!
url=""
for _ in $(seq 1 100); do
  url=$(grep -o 'http://127.0.0.1:[0-9]*/mcp' "$out" 2>/dev/null)
  [ -n "$url" ] && break
  sleep 0.1
done
if [ -z "$url" ]; then echo "run.sh: gyre mcp --http did not print its URL"; kill -9 $pid 2>/dev/null; exit 1; fi
GYRE_MCP_URL=$url GYRE_MCP_KEY=mcp-test-key node --test --test-reporter=spec mcp_http.test.mjs || rc=1
kill -TERM $pid
for _ in $(seq 1 50); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then echo "run.sh: FAIL gyre mcp --http did not exit on SIGTERM"; kill -9 $pid; rc=1;
else wait $pid || { echo "run.sh: FAIL gyre mcp --http exited non-zero on SIGTERM"; rc=1; }; fi
exit $rc

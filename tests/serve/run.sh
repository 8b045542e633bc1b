#!/usr/bin/env bash
# Integration test of `gyre serve` with the official OpenAI Node client.
# Usage: tests/serve/run.sh GYRE_BIN MODEL_DIR
#
# Starts the servers on loopback with --port 0 (main; --api-key; a one-request queue for 429; image
# inputs; glm5_mini with and without MTP speculative decoding), waits for /health, runs the
# *.test.mjs files with node:test, then stops the servers with
# SIGTERM and checks that each exits 0 (graceful shutdown). Installs the pinned npm packages
# (package-lock.json) with `npm ci` when node_modules is missing. Exit code: node's, or 1.
set -u
GYRE=$(realpath "$1")
MODEL=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TMP=$(mktemp -d)
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

if [ ! -d "$HERE/node_modules/openai" ]; then
  (cd "$HERE" && npm ci --no-audit --no-fund --prefer-offline >"$TMP/npm.log" 2>&1) || {
    echo "run.sh: npm ci failed:"; cat "$TMP/npm.log"; exit 1; }
fi

# start NAME ARGS...: starts a server, waits until it listens and answers /health; sets URL.
start() {
  local name=$1
  shift
  # Run from the repo root so the bundled chat template is found when the model has none.
  (cd "$ROOT" && exec "$GYRE" serve --model "$MODEL" --host 127.0.0.1 --port 0 "$@") \
    >"$TMP/$name.out" 2>"$TMP/$name.err" &
  local pid=$!
  PIDS+=("$pid")
  eval "PID_$name=$pid"
  local port=""
  for _ in $(seq 1 600); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$TMP/$name.out" 2>/dev/null | sed 's/.*://')
    [ -n "$port" ] && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "run.sh: server $name exited early:"; cat "$TMP/$name.out" "$TMP/$name.err"; exit 1
    fi
    sleep 0.1
  done
  [ -n "$port" ] || { echo "run.sh: server $name did not print its port"; cat "$TMP/$name.err"; exit 1; }
  URL="http://127.0.0.1:$port"
  # It prints the line once listening; /health confirms it serves.
  node -e "fetch('$URL/health').then(r => process.exit(r.status === 200 ? 0 : 1), () => process.exit(1))" || {
    echo "run.sh: server $name does not answer /health"; exit 1; }
  echo "run.sh: $name: $(head -1 "$TMP/$name.out")"
}

MAX_MODEL_LEN=1024
NAME=gyre-test-model
KEY=test-key-123
start main --served-model-name "$NAME" --max-model-len "$MAX_MODEL_LEN" --kv-memory 64M
URL_MAIN=$URL
start auth --served-model-name "$NAME" --api-key "$KEY" --kv-memory 16M --max-model-len 512
URL_AUTH=$URL
start smallq --served-model-name "$NAME" --max-num-seqs 1 --max-waiting 1 --kv-memory 16M --max-model-len 512
URL_SMALLQ=$URL
# Image inputs (images.test.mjs): a copy of the model whose config moves the image placeholder ids
# into the tiny vocabulary (the real ids 154830/154854/154831 are outside its 1024 tokens).
VISION_MODEL="$TMP/vision_model"
mkdir -p "$VISION_MODEL"
for f in "$MODEL"/*; do [ "$(basename "$f")" = config.json ] || ln -s "$f" "$VISION_MODEL/"; done
node -e "const fs=require('fs');const c=JSON.parse(fs.readFileSync('$MODEL/config.json'));
Object.assign(c,{image_token_id:1010,image_start_token_id:1011,image_end_token_id:1012});
fs.writeFileSync('$VISION_MODEL/config.json',JSON.stringify(c));"
MEDIA_DIR="$ROOT/tests/fixtures/images"
MODEL_SAVED=$MODEL
MODEL=$VISION_MODEL
start vision --served-model-name "$NAME" --kv-memory 16M --max-model-len 1024 \
  --allowed-local-media-path "$MEDIA_DIR"
URL_VISION=$URL
MODEL=$MODEL_SAVED

# MTP speculative decoding (speculative.test.mjs): the trained glm5_mini (it has an MTP layer),
# with and without --speculative-config.
MINI="$ROOT/tests/fixtures/glm5_mini"
MODEL_SAVED=$MODEL
MODEL=$MINI
start mtp --served-model-name "$NAME" --kv-memory 32M --max-model-len 1024 \
  --speculative-config '{"method":"mtp","num_speculative_tokens":2}'
URL_MTP=$URL
start mtpplain --served-model-name "$NAME" --kv-memory 32M --max-model-len 1024
URL_MTP_PLAIN=$URL
MODEL=$MODEL_SAVED
# A model without an MTP layer refuses the method at startup, with the reason.
if (cd "$ROOT" && "$GYRE" serve --model "$MODEL" --host 127.0.0.1 --port 0 \
      --speculative-config '{"method":"mtp","num_speculative_tokens":1}') >"$TMP/nomtp.out" 2>"$TMP/nomtp.err"; then
  echo "run.sh: FAIL a model without an MTP layer started with method mtp"; exit 1
fi
grep -q "MTP layer" "$TMP/nomtp.err" || { echo "run.sh: FAIL no reason given:"; cat "$TMP/nomtp.err"; exit 1; }

(cd "$HERE" && GYRE_URL=$URL_MAIN GYRE_URL_AUTH=$URL_AUTH GYRE_URL_SMALLQ=$URL_SMALLQ GYRE_MODEL_NAME=$NAME \
  GYRE_API_KEY=$KEY GYRE_MAX_MODEL_LEN=$MAX_MODEL_LEN GYRE_URL_VISION=$URL_VISION GYRE_MEDIA_DIR=$MEDIA_DIR \
  GYRE_URL_MTP=$URL_MTP GYRE_URL_MTP_PLAIN=$URL_MTP_PLAIN \
  node --test --test-reporter=spec openai_client.test.mjs images.test.mjs speculative.test.mjs)
rc=$?

# Graceful shutdown: SIGTERM → exit 0 within a few seconds.
for name in main auth smallq vision mtp mtpplain; do
  eval "pid=\$PID_$name"
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "run.sh: FAIL server $name did not exit after SIGTERM"; rc=1
  else
    wait "$pid"
    src=$?
    if [ "$src" -ne 0 ]; then echo "run.sh: FAIL server $name exited $src after SIGTERM"; cat "$TMP/$name.err"; rc=1; fi
  fi
done
[ "$rc" -eq 0 ] && echo "run.sh: all passed" || echo "run.sh: FAILED"
exit "$rc"

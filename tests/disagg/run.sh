#!/usr/bin/env bash
# Greedy outputs of `gyre serve --role local-pair` (prefill and decode on two runners, the cache
# moved over TCP loopback by the transfer protocol) equal those of the colocated server, through
# the OpenAI API: /v1/completions plain and streamed, prompts short, long (chunked prefill) and
# several at once. Usage: run.sh GYRE_BINARY MODEL_DIR
set -euo pipefail
gyre="$1"
model="$2"
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
disagg_workdir

start() {  # start NAME ARGS...: starts a server, sets PORT_<NAME>
  local name="$1"
  shift
  "$gyre" serve --model "$model" --port 0 --served-model-name m --max-num-batched-tokens 32 --kv-page-tokens 16 "$@" \
    >"$work/$name.out" 2>"$work/$name.err" &
  pids+=($!)
  for _ in $(seq 1 300); do
    if grep -q "listening on http://" "$work/$name.out" 2>/dev/null; then
      local port
      port="$(grep -o 'listening on http://[^ ]*' "$work/$name.out" | head -1 | sed 's/.*://')"
      eval "PORT_$name=$port"
      return 0
    fi
    sleep 0.1
  done
  echo "server $name did not start:"; cat "$work/$name.err"; exit 1
}

start colo
start pair --role local-pair
grep -q "disaggregated" "$work/pair.out" || { echo "local-pair server did not report disaggregation"; exit 1; }

python3 - "$PORT_colo" "$PORT_pair" <<'PY'
import json, sys, threading, urllib.request
colo, pair = sys.argv[1], sys.argv[2]
def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        raw = r.read().decode()
    if not body.get("stream"):
        return json.loads(raw)["choices"][0]["text"]
    text = ""
    for line in raw.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            ch = json.loads(line[6:])["choices"]
            if ch: text += ch[0].get("text", "")
    return text
prompts = ["Hello", "The quick brown fox jumps over the lazy dog " * 4, "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16",
           "Once upon a time, in a land far away, there lived a " * 3]
passed = failed = 0
for stream in (False, True):
    for p in prompts:
        body = {"model": "m", "prompt": p, "max_tokens": 12, "temperature": 0, "ignore_eos": True, "stream": stream}
        a, b = post(colo, body), post(pair, body)
        ok = a == b and len(a) > 0
        passed += ok; failed += not ok
        if not ok: print(f"MISMATCH stream={stream} prompt={p[:30]!r}: {a!r} vs {b!r}")
# Several requests at once on the disaggregated server (batched steps mixing prefill and decode).
want = [post(colo, {"model": "m", "prompt": p, "max_tokens": 12, "temperature": 0, "ignore_eos": True}) for p in prompts]
got = [None] * len(prompts)
def run(i): got[i] = post(pair, {"model": "m", "prompt": prompts[i], "max_tokens": 12, "temperature": 0, "ignore_eos": True})
ts = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
[t.start() for t in ts]; [t.join() for t in ts]
for i in range(len(prompts)):
    ok = got[i] == want[i]
    passed += ok; failed += not ok
    if not ok: print(f"MISMATCH concurrent prompt {i}: {want[i]!r} vs {got[i]!r}")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY

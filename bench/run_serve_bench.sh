#!/usr/bin/env bash
# Serving benchmark on this machine with the bundled model: throughput and TTFT/ITL at
# concurrency 1, 8 and 32 through `gyre serve`, plus `gyre generate` for the server's overhead per
# token, and a trace of the engine steps. Results go to bench/results/serve_*.json.
# Usage: bench/run_serve_bench.sh [GYRE_BIN]
set -euo pipefail
cd "$(dirname "$0")/.."
GYRE=${1:-build/cpu/gyre}
MODEL=tests/fixtures/glm5_tiny
OUT=bench/results
PORT=18471
"$GYRE" serve --model "$MODEL" --port $PORT --max-num-seqs 32 >/tmp/gyre_serve_bench.log 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf localhost:$PORT/health >/dev/null && break; sleep 0.1; done
for c in 1 8 32; do
  "$GYRE" bench serve --url http://127.0.0.1:$PORT --num-prompts $((c * 4 > 16 ? c * 4 : 16)) \
    --max-concurrency $c --input-len 64 --output-len 32 --token-id-range 1000 --seed 1 \
    --slo-ttft-ms 500 --slo-tpot-ms 50 --json $OUT/serve_c$c.json
done
curl -s localhost:$PORT/metrics >$OUT/serve_metrics_after.txt
kill $PID; wait $PID 2>/dev/null || true
# The same work without HTTP: one generate of 64 prompt + 32 new tokens (greedy, no EOS stop).
python3 - "$GYRE" "$MODEL" <<'PY' >$OUT/serve_generate_baseline.json
import json, random, subprocess, sys, time
gyre, model = sys.argv[1], sys.argv[2]
random.seed(1)
runs = []
for i in range(5):
    ids = ",".join(str(random.randrange(1000)) for _ in range(64))
    t0 = time.time()
    out = subprocess.run([gyre, "generate", "--model", model, "--ids", ids, "--max-tokens", "32", "--json"],
                         check=True, capture_output=True, text=True).stdout
    dt = time.time() - t0
    runs.append({"seconds": dt, "tokens": len(json.loads(out)["ids"])})
print(json.dumps({"what": "gyre generate, 64-token prompt, 32 new tokens, process start included", "runs": runs}, indent=1))
PY
# A trace of engine steps under concurrency 8 (in-process, same model): which part dominates.
"$GYRE" generate --model "$MODEL" --ids "$(python3 -c 'import random; random.seed(2); print(",".join(str(random.randrange(1000)) for _ in range(64)))')" \
  --max-tokens 32 --json --trace /tmp/gyre_generate_trace.json >/dev/null
"$GYRE" analyze /tmp/gyre_generate_trace.json --json >$OUT/serve_generate_trace_analysis.json
echo "done: $OUT/serve_c{1,8,32}.json"

#!/usr/bin/env bash
# Serving benchmarks on the GPU (scripts/gpu_check.sh step `servebench`; issue 9's figures):
# `gyre bench serve` against `gyre serve --backend cuda --config F --random-weights` for the 4-layer
# default-shape model and the full-depth 32-expert model, chat-like (1,024-token prompts, 256 new
# tokens) at concurrency 1, 16, 64, 256, a long-context case (32k prompts, 128 new tokens), an
# interference run (Poisson long prompts among running decodes) at two chunk sizes, each server
# traced (GPU busy/idle per step from CUDA events; `gyre analyze`), and the bare decode step of
# `gyre bench model` at the same batches for the serving-overhead comparison.
# Usage: tools/gpu/serve_bench.sh GYRE OUTDIR [configs...]
set -uo pipefail
GYRE=$1
OUT=$2
shift 2
CONFIGS=${*:-"glm5_next_4layer glm5_next_fulldepth_32experts"}
mkdir -p "$OUT"
status=0

serve() {  # serve NAME CONFIG CHUNK: starts a traced server, sets PORT and PID
  local name=$1 cfg=$2 chunk=$3
  # A tokenizer covering the model's whole vocabulary, so that every sampled id streams text.
  local vocab
  vocab=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('vocab_size', 154880))" "bench/configs/$cfg.json")
  [[ -f /tmp/tok_$vocab.json ]] || python3 tools/bench/synthetic_tokenizer.py --vocab "$vocab" --out "/tmp/tok_$vocab.json"
  "$GYRE" serve --backend cuda --config "bench/configs/$cfg.json" --random-weights --port 0 --tokenizer "/tmp/tok_$vocab.json" \
    --max-num-seqs 256 --max-num-batched-tokens "$chunk" --gpu-memory-utilization 0.85 --max-model-len 40960 \
    --trace "/tmp/trace_$name.json" > "/tmp/serve_$name.out" 2> "/tmp/serve_$name.err" &
  PID=$!
  PORT=""
  for _ in $(seq 600); do
    PORT=$(grep -oE 'listening on http://[^ ]+:[0-9]+' "/tmp/serve_$name.out" 2>/dev/null | grep -oE '[0-9]+$')
    [[ -n "$PORT" ]] && break
    kill -0 $PID 2>/dev/null || break
    sleep 0.2
  done
  if [[ -z "$PORT" ]]; then echo "server $name did not start:"; tail -5 "/tmp/serve_$name.err"; status=1; return 1; fi
  grep "gyre serve" "/tmp/serve_$name.out"
}
stop() {  # stop NAME: SIGTERM, then analyze the trace
  local name=$1
  kill -TERM $PID; wait $PID
  "$GYRE" analyze "/tmp/trace_$name.json" --json > "$OUT/analyze_$name.json" 2>/dev/null || status=1
  # GPU idle between consecutive steps (CUDA events): percentiles over the steps while requests ran
  # (gaps > 20 ms are the server waiting between benchmark phases and are counted apart).
  python3 - "/tmp/trace_$name.json" "$OUT/idle_$name.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"] if isinstance(t, dict) else t
idle = sorted(e["dur"] for e in ev if e.get("name") == "gpu.idle")
busy = [e["dur"] for e in ev if e.get("name") == "gpu.busy"]
steady = [x for x in idle if x <= 20000]
pct = lambda v, q: v[min(len(v) - 1, int(q / 100 * len(v)))] if v else None
r = {"steps": len(busy), "busy_us_total": sum(busy), "idle_gaps": len(idle), "steady_gaps": len(steady),
     "waiting_gaps_over_20ms": len(idle) - len(steady), "idle_us_p50": pct(steady, 50), "idle_us_p90": pct(steady, 90),
     "idle_us_p99": pct(steady, 99), "idle_us_mean": sum(steady) / len(steady) if steady else None,
     "idle_fraction_of_busy": sum(steady) / sum(busy) if busy else None}
json.dump(r, open(sys.argv[2], "w"), indent=1)
print("   GPU idle between steps (us): p50 %s p90 %s p99 %s mean %.1f over %d steps; %.2f%% of busy time" %
      (r["idle_us_p50"], r["idle_us_p90"], r["idle_us_p99"], r["idle_us_mean"] or 0, len(steady), 100 * (r["idle_fraction_of_busy"] or 0)))
PY
  python3 - "$OUT/analyze_$name.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ops = {o["name"]: o for o in r.get("ops", [])}
for k in ("gpu.busy", "gpu.idle", "engine.step"):
    o = ops.get(k)
    if o: print(f"   {k:12s} n={o.get('count')} self {o.get('self_us', 0)/1e3:.1f} ms, mean {o.get('self_us', 0)/max(o.get('count', 1), 1):.1f} us")
PY
}
bench() {  # bench NAME C N IN OUTLEN [extra]
  local name=$1 c=$2 n=$3 in=$4 outl=$5
  shift 5
  timeout 400 "$GYRE" bench serve --url "http://127.0.0.1:$PORT" --num-prompts "$n" --max-concurrency "$c" \
    --input-len "$in" --output-len "$outl" --token-id-range 150000 --seed 1 --json "$OUT/serve_$name.json" "$@" \
    > "/tmp/bench_$name.log" 2>&1 || { echo "bench $name failed"; tail -3 "/tmp/bench_$name.log"; status=1; }
  python3 - "$OUT/serve_$name.json" "$name" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("  ", sys.argv[2], "no result", e); sys.exit(0)
m = r.get("metrics", r)
f = lambda k: (f"{m[k]:.2f}" if isinstance(m.get(k), (int, float)) else "?")
print(f"   {sys.argv[2]:28s} done {m.get('completed')} failed {m.get('failed')} out tok/s {f('output_throughput')}  "
      f"TTFT p50 {f('ttft_ms_p50')}  TPOT p50 {f('tpot_ms_p50')}  ITL p50 {f('itl_ms_p50')} p99 {f('itl_ms_p99')} ms")
PY
}

for cfg in $CONFIGS; do
  echo "== $cfg: bare decode steps (gyre bench model)"
  timeout 500 "$GYRE" bench model --backend cuda --config "bench/configs/$cfg.json" --random-weights \
    --batches 1,16,64,256 --context 1024 --steps 32 --prompt-lens 1024 --prefill-chunk 2048 \
    --out "$OUT/model_$cfg.json" > "/tmp/model_$cfg.log" 2>&1 || { echo "bench model failed"; tail -3 "/tmp/model_$cfg.log"; status=1; }
  grep -E "decode batch|prefill" "/tmp/model_$cfg.log" | head -8
  echo "== $cfg: serving, chunk 2048"
  serve "$cfg" "$cfg" 2048 || continue
  if [[ $cfg == glm5_next_4layer ]]; then
    bench "${cfg}_c1" 1 8 1024 256
    bench "${cfg}_c16" 16 32 1024 256
    bench "${cfg}_c64" 64 128 1024 256
    bench "${cfg}_c256" 256 512 1024 256
    bench "${cfg}_long32k" 1 4 32768 128
  else
    bench "${cfg}_c1" 1 3 1024 256
    bench "${cfg}_c16" 16 16 1024 256
    bench "${cfg}_c64" 64 64 1024 256
    bench "${cfg}_c256" 256 256 1024 256
    bench "${cfg}_long32k" 1 2 32768 128
  fi
  stop "$cfg"
done

# Interference (4-layer): 32 running chat decodes; Poisson arrivals of 8k-token prompts beside them.
for chunk in 512 2048; do
  name=interf_chunk$chunk
  echo "== interference, chunk $chunk"
  serve "$name" glm5_next_4layer "$chunk" || continue
  ( bench "${name}_long" 8 12 8192 8 --request-rate 2 ) &
  LONG=$!
  bench "${name}_decodes" 32 64 128 512
  wait $LONG
  stop "$name"
done
exit $status

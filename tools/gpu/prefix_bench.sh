#!/usr/bin/env bash
# Prefix cache on vs off on the GPU (scripts/gpu_check.sh step `prefixbench`; issue 15's figures):
# bench/prefix_multiturn.py (a multi-turn chat, each turn extending the last, with each later turn's
# new text also timed alone) against `gyre serve --backend cuda --config F --random-weights`, once
# with prefix caching (the default) and once with --no-enable-prefix-caching.
# Usage: tools/gpu/prefix_bench.sh GYRE OUTDIR [configs...]
set -uo pipefail
GYRE=$1
OUT=$2
shift 2
CONFIGS=${*:-"glm5_next_fulldepth_32experts"}
mkdir -p "$OUT"
status=0
for cfg in $CONFIGS; do
  vocab=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('vocab_size', 154880))" "bench/configs/$cfg.json")
  [[ -f /tmp/tok_$vocab.json ]] || python3 tools/bench/synthetic_tokenizer.py --vocab "$vocab" --out "/tmp/tok_$vocab.json"
  for mode in on off; do
    # The checkpoint budget is auto: on cuda a tenth of the memory budget (serve_command.cc). The older
    # auto, max(256M, 4 states), held 4 of this model's 152 MB states, which the 4 conversations evicted
    # before their next turn (0 hits); an explicit 24G held ~160 (bench/results/gpu_prefix_cache_f822c06).
    extra=""
    [[ $mode == off ]] && extra="--no-enable-prefix-caching"
    name=${cfg}_$mode
    "$GYRE" serve --backend cuda --config "bench/configs/$cfg.json" --random-weights --port 0 --tokenizer "/tmp/tok_$vocab.json" \
      --max-num-seqs 16 --gpu-memory-utilization 0.85 --max-model-len 40960 $extra \
      > "/tmp/prefix_$name.out" 2> "/tmp/prefix_$name.err" &
    pid=$!
    port=""
    for _ in $(seq 600); do
      port=$(grep -oE 'listening on http://[^ ]+:[0-9]+' "/tmp/prefix_$name.out" 2>/dev/null | grep -oE '[0-9]+$')
      [[ -n "$port" ]] && break
      kill -0 $pid 2>/dev/null || break
      sleep 0.2
    done
    if [[ -z "$port" ]]; then echo "server $name did not start:"; tail -5 "/tmp/prefix_$name.err"; status=1; continue; fi
    echo "== prefix cache $mode, $cfg"
    timeout 600 python3 bench/prefix_multiturn.py --url "http://127.0.0.1:$port" --conversations 4 --turns 6 \
      --new-words 200 --max-tokens 16 --label "$name" --new-only > "$OUT/prefix_$name.json" || status=1
    python3 - "$OUT/prefix_$name.json" "$mode" <<'PY' || status=1
import json, sys
r = json.load(open(sys.argv[1]))
t = r["turns_after_first"]
a = r.get("new_text_alone", {})
print("   turns 2+: TTFT p50 %.1f ms p99 %.1f ms, prefill computed %d of %d prompt tokens; new text alone p50 %.1f ms (ratio %.2f); checkpoint bytes %d"
      % (t["ttft_ms_p50"], t["ttft_ms_p99"], t["prefill_tokens_computed_total"], t["prompt_tokens_total"],
         a.get("ttft_ms_p50", float("nan")), a.get("turn_ttft_over_new_text_alone_p50", float("nan")), r["kda_checkpoint_bytes"]))
# With the cache on, later turns must reuse their history: computing more than half of their prompt
# tokens means the checkpoints were evicted (the old auto budget's failure).
if sys.argv[2] == "on" and t["prefill_tokens_computed_total"] > 0.5 * t["prompt_tokens_total"]:
    print("   FAIL: the prefix cache computed %d of %d prompt tokens of turns 2+" %
          (t["prefill_tokens_computed_total"], t["prompt_tokens_total"]))
    sys.exit(1)
PY
    kill -TERM $pid; wait $pid
  done
done
exit $status

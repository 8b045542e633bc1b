#!/usr/bin/env bash
# CLI contract tests: drive the real `gyre` binary on the bundled fixtures and check the output
# formats other tools depend on, and that bad input gives a clear error and a non-zero exit.
# Usage: tests/cli_contracts.sh PATH/TO/gyre SOURCE_DIR
set -u
GYRE=$1
SRC=$2
FX=$SRC/tests/fixtures
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
pass() { echo "ok   - $1"; }
fail() { echo "FAIL - $1"; fails=$((fails + 1)); }

# expect_fail NAME EXPECTED_RC PATTERN -- command...
expect_fail() {
  local name=$1 want_rc=$2 pattern=$3
  shift 4
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -ne "$want_rc" ]; then fail "$name: exit $rc, want $want_rc ($(head -c 300 "$TMP/err"))"; return; fi
  if ! grep -q -- "$pattern" "$TMP/err"; then fail "$name: stderr lacks '$pattern': $(head -c 300 "$TMP/err")"; return; fi
  pass "$name"
}

# generate --json with ids
out=$("$GYRE" generate --model "$FX/glm5_tiny" --ids 5,6,7,8 --max-tokens 6 --json) || fail "generate --ids --json exit"
python3 - "$out" <<'PY' && pass "generate --json shape" || fail "generate --json shape: $out"
import json, sys
o = json.loads(sys.argv[1])
assert isinstance(o["ids"], list) and 1 <= len(o["ids"]) <= 6 and all(isinstance(i, int) for i in o["ids"])
assert isinstance(o["text"], str)
PY
# generate without a tokenizer: no "text"
out=$("$GYRE" generate --model "$FX/kimi_tiny" --ids 5,6,7 --max-tokens 3 --json) || fail "generate kimi exit"
python3 -c 'import json,sys; o=json.loads(sys.argv[1]); assert "text" not in o and len(o["ids"])>=1' "$out" \
  && pass "generate --json without tokenizer has no text" || fail "generate without tokenizer: $out"
# generate streams text and is deterministic for a seed
a=$("$GYRE" generate --model "$FX/glm5_tiny" --prompt "Hello world" --max-tokens 8 --temperature 0.8 --seed 3)
b=$("$GYRE" generate --model "$FX/glm5_tiny" --prompt "Hello world" --max-tokens 8 --temperature 0.8 --seed 3)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "generate stream deterministic for a seed" || fail "generate stream: '$a' vs '$b'"

# forward: [T, vocab] float32 LE equal to the golden logits
python3 - "$FX/glm5_tiny/golden_fp32.safetensors" >"$TMP/ids" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); o = h["input_ids"]["data_offsets"]
ids = struct.unpack("<%di" % ((o[1] - o[0]) // 4), b[8 + n + o[0]:8 + n + o[1]])
print(",".join(map(str, ids)))
PY
if "$GYRE" forward --model "$FX/glm5_tiny" --ids "$(cat "$TMP/ids")" --logits-out "$TMP/logits.bin" 2>/dev/null; then
  python3 - "$FX/glm5_tiny/golden_fp32.safetensors" "$TMP/logits.bin" <<'PY' && pass "forward logits file = golden (rel-L2 < 1e-3)" || fail "forward logits differ"
import json, math, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); e = h["logits"]; o = e["data_offsets"]
ref = struct.unpack("<%df" % (e["shape"][0] * e["shape"][1]), b[8 + n + o[0]:8 + n + o[1]])
got = open(sys.argv[2], "rb").read()
assert len(got) == 4 * len(ref), (len(got), len(ref))
got = struct.unpack("<%df" % len(ref), got)
num = math.sqrt(sum((x - y) ** 2 for x, y in zip(got, ref))); den = math.sqrt(sum(y * y for y in ref))
assert num / den < 1e-3, num / den
PY
else
  fail "forward exit"
fi

# tokenize round trip, incl. CJK, emoji and a special token
printf 'Hello 世界 👋🏽 <|user|> x' >"$TMP/text"
ids=$("$GYRE" tokenize --tokenizer "$FX/tokenizer" <"$TMP/text") || fail "tokenize exit"
text=$(echo "$ids" | "$GYRE" tokenize --tokenizer "$FX/tokenizer/tokenizer.json" --decode) || fail "decode exit"
python3 -c 'import json,sys; t=json.loads(sys.argv[1])["text"]; assert t==open(sys.argv[2]).read(), t' "$text" "$TMP/text" \
  && pass "tokenize/decode round trip" || fail "round trip: $ids -> $text"

# inspect
"$GYRE" inspect --model "$FX/glm5_tiny" >"$TMP/inspect" && grep -q "6 KDA, 2 DSA" "$TMP/inspect" \
  && grep -q "bytes per token" "$TMP/inspect" && grep -q "bytes per sequence" "$TMP/inspect" \
  && pass "inspect" || fail "inspect: $(cat "$TMP/inspect")"
"$GYRE" inspect --model "$FX/kimi_tiny" --json | python3 -c 'import json,sys; o=json.load(sys.stdin); assert o["layers_by_kind"]["mla"]==1 and o["params_active_per_token"]<o["params_total"]' \
  && pass "inspect --json" || fail "inspect --json"

# eval: perplexity over ctx windows; the --json figures agree with each other
printf 'The quick brown fox jumps over the lazy dog. Hello world! A small text for gyre eval.\n' >"$TMP/eval.txt"
out=$("$GYRE" eval --model "$FX/glm5_tiny" --text "$TMP/eval.txt" --ctx 8 --json) || fail "eval exit"
python3 - "$out" <<'PY' && pass "eval --json figures" || fail "eval --json: $out"
import json, math, sys
o = json.loads(sys.argv[1])
assert o["backend"] == "cpu" and o["ctx"] == 8 and o["mtp"] is None, o
n = o["tokens_in_file"]
assert n >= 10 and o["tokens_evaluated"] == n and o["tokens_scored"] == n - 1, o
assert o["windows"] == math.ceil((n - 1) / 8), o
assert abs(o["mean_nll"] - o["nll_total"] / o["tokens_scored"]) < 1e-9
assert abs(o["perplexity"] - math.exp(o["mean_nll"])) < 1e-6 * o["perplexity"]
assert abs(o["bits_per_byte"] - o["nll_total"] / math.log(2) / o["bytes"]) < 1e-9
assert o["bytes"] == 86 and o["wall_s"] > 0 and o["tokens_per_s"] > 0
PY
"$GYRE" eval --model "$FX/glm5_tiny" --text "$TMP/eval.txt" | grep -q "perplexity" && pass "eval text output" \
  || fail "eval text output"
# eval with an MTP layer: glm5_tiny plus random MTP tensors (layers.8.*, bf16); SKIP names one to leave out.
cat >"$TMP/add_mtp.py" <<'PY'
import json, random, struct, sys
d, skip = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
cfg = json.load(open(d + "/config.json")); tc = cfg["text_config"]; tc["num_nextn_predict_layers"] = 1
json.dump(cfg, open(d + "/config.json", "w"), indent=2)
p = d + "/model.safetensors"; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); data = bytearray(b[8 + n:])
D, V, H, I = tc["hidden_size"], tc["vocab_size"], tc["num_attention_heads"], tc["intermediate_size"]
ql, kl, nope, v = tc["q_lora_rank"], tc["kv_lora_rank"], tc["qk_nope_head_dim"], tc["v_head_dim"]
shapes = {"enorm.weight": [D], "hnorm.weight": [D], "eh_proj.weight": [D, 2 * D], "input_layernorm.weight": [D],
          "post_attention_layernorm.weight": [D], "self_attn.q_a_proj.weight": [ql, D],
          "self_attn.q_a_layernorm.weight": [ql], "self_attn.q_b_proj.weight": [H * nope, ql],
          "self_attn.kv_a_proj_with_mqa.weight": [kl, D], "self_attn.kv_a_layernorm.weight": [kl],
          "self_attn.kv_b_proj.weight": [H * (nope + v), kl], "self_attn.o_proj.weight": [D, H * v],
          "mlp.gate_proj.weight": [I, D], "mlp.up_proj.weight": [I, D], "mlp.down_proj.weight": [D, I],
          "shared_head.norm.weight": [D], "shared_head.head.weight": [V, D]}
rng = random.Random(1)
for name, shape in shapes.items():
    if name == skip:
        continue
    cnt = shape[0] * (shape[1] if len(shape) > 1 else 1)
    vals = [1 + 0.1 * rng.gauss(0, 1) if len(shape) == 1 else rng.gauss(0, 1) / shape[1] ** 0.5 for _ in range(cnt)]
    raw = b"".join(struct.pack("<f", x)[2:] for x in vals)
    h["model.language_model.layers.%d.%s" % (tc["num_hidden_layers"], name)] = {
        "dtype": "BF16", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
hs = json.dumps(h).encode(); hs += b" " * ((8 - len(hs) % 8) % 8)
open(p, "wb").write(struct.pack("<Q", len(hs)) + hs + bytes(data))
PY
cp -r "$FX/glm5_tiny" "$TMP/mtp" && python3 "$TMP/add_mtp.py" "$TMP/mtp"
out=$("$GYRE" eval --model "$TMP/mtp" --text "$TMP/eval.txt" --ctx 16 --json) || fail "eval with MTP exit"
python3 - "$out" <<'PY' && pass "eval --json with an MTP layer" || fail "eval with MTP: $out"
import json, sys
o = json.loads(sys.argv[1]); m = o["mtp"]
assert m["evaluated"] is True and m["positions"] == o["tokens_scored"] - o["windows"], o
assert 0 <= m["acceptance"] <= 1 and m["accepted"] <= m["positions"] and m["mean_nll"] > 0, o
PY
"$GYRE" inspect --model "$TMP/mtp" | grep -q "MTP layer" && pass "inspect shows the MTP layer" || fail "inspect MTP"

# ---- bad input: clear error, non-zero exit ----
expect_fail "missing model folder" 1 "config.json" -- "$GYRE" generate --model "$TMP/nope" --ids 1
cp -r "$FX/kimi_tiny" "$TMP/trunc"
head -c 100000 "$FX/kimi_tiny/model.safetensors" >"$TMP/trunc/model.safetensors"
expect_fail "truncated safetensors" 1 "model.safetensors" -- "$GYRE" generate --model "$TMP/trunc" --ids 1
cp -r "$FX/kimi_tiny" "$TMP/corrupt"
printf '\xff\xff\xff\xff\xff\xff\xff\x7f{garbage' >"$TMP/corrupt/model.safetensors"
expect_fail "corrupt safetensors header" 1 "header" -- "$GYRE" inspect --model "$TMP/corrupt"
cp -r "$FX/kimi_tiny" "$TMP/missing"
python3 - "$TMP/missing/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
h["model.layers.2.self_attn.renamed.weight"] = h.pop("model.layers.2.self_attn.o_proj.weight")
hs = json.dumps(h).encode(); hs += b" " * ((8 - len(hs) % 8) % 8)
open(p, "wb").write(struct.pack("<Q", len(hs)) + hs + b[8 + n:])
PY
expect_fail "missing tensor is named" 1 "model.layers.2.self_attn.o_proj.weight" -- "$GYRE" generate --model "$TMP/missing" --ids 1
cp -r "$FX/kimi_tiny" "$TMP/shape"
sed -i 's/"intermediate_size": 128/"intermediate_size": 96/' "$TMP/shape/config.json"
expect_fail "shape mismatch names tensor, expected, found" 1 "expected shape \[96, 64\], found \[128, 64\]" -- "$GYRE" inspect --model "$TMP/shape"
cp -r "$FX/kimi_tiny" "$TMP/mtype"
sed -i 's/"model_type": "kimi_linear"/"model_type": "llama"/' "$TMP/mtype/config.json"
expect_fail "unsupported model_type" 1 "unsupported model_type 'llama'" -- "$GYRE" inspect --model "$TMP/mtype"
cp -r "$FX/kimi_tiny" "$TMP/dtype"
python3 - "$TMP/dtype/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
e = h["model.norm.weight"]; e["dtype"] = "I16"
hs = json.dumps(h).encode(); hs += b" " * ((8 - len(hs) % 8) % 8)
open(p, "wb").write(struct.pack("<Q", len(hs)) + hs + b[8 + n:])
PY
expect_fail "unsupported dtype" 1 "unsupported dtype I16" -- "$GYRE" inspect --model "$TMP/dtype"
expect_fail "id out of vocabulary" 1 "outside the vocabulary" -- "$GYRE" generate --model "$FX/kimi_tiny" --ids 1,5000
expect_fail "non-integer id" 1 "not an integer" -- "$GYRE" forward --model "$FX/kimi_tiny" --ids 1,x --logits-out "$TMP/x"
expect_fail "empty prompt" 2 "required" -- "$GYRE" generate --model "$FX/glm5_tiny" --prompt ""
expect_fail "usage error" 2 "" -- "$GYRE" generate
expect_fail "decode bad json" 1 "not valid JSON" -- sh -c "echo '{oops' | '$GYRE' tokenize --tokenizer '$FX/tokenizer' --decode"
expect_fail "decode id out of range" 1 "" -- sh -c "echo '{\"ids\": [99999]}' | '$GYRE' tokenize --tokenizer '$FX/tokenizer' --decode"
expect_fail "missing tokenizer" 1 "" -- sh -c "echo hi | '$GYRE' tokenize --tokenizer '$TMP/none.json'"
expect_fail "unknown backend" 2 "" -- "$GYRE" generate --model "$FX/glm5_tiny" --ids 1 --backend tpu
cp -r "$FX/glm5_tiny" "$TMP/mtp_partial" && python3 "$TMP/add_mtp.py" "$TMP/mtp_partial" shared_head.head.weight
expect_fail "MTP layer with a missing tensor" 1 "missing tensor 'model.language_model.layers.8.shared_head.head.weight'" \
  -- "$GYRE" eval --model "$TMP/mtp_partial" --text "$TMP/eval.txt"
expect_fail "eval missing text file" 1 "cannot open --text" -- "$GYRE" eval --model "$FX/glm5_tiny" --text "$TMP/none.txt"
: >"$TMP/empty.txt"
expect_fail "eval empty text" 1 "is empty" -- "$GYRE" eval --model "$FX/glm5_tiny" --text "$TMP/empty.txt"
expect_fail "eval ctx 0" 1 "ctx must be >= 1" -- "$GYRE" eval --model "$FX/glm5_tiny" --text "$TMP/eval.txt" --ctx 0
printf 'a' >"$TMP/one.txt"
expect_fail "eval one-token text" 1 "at least 2" -- "$GYRE" eval --model "$FX/glm5_tiny" --text "$TMP/one.txt"
expect_fail "eval without a tokenizer" 1 "tokenizer.json" -- "$GYRE" eval --model "$FX/kimi_tiny" --text "$TMP/eval.txt"
expect_fail "eval without --text" 2 "" -- "$GYRE" eval --model "$FX/glm5_tiny"
expect_fail "eval unknown backend" 2 "" -- "$GYRE" eval --model "$FX/glm5_tiny" --text "$TMP/eval.txt" --backend tpu
# Without a GPU (CI), the CUDA paths fail cleanly: "built without CUDA" in the CPU build, a named CUDA
# error (no device) in a CUDA build.
if ! command -v nvidia-smi > /dev/null 2>&1; then
  expect_fail "generate --backend cuda without a GPU" 1 "CUDA" -- "$GYRE" generate --model "$FX/glm5_tiny" --ids 1 --backend cuda
  expect_fail "verify model without a GPU" 1 "CUDA" -- "$GYRE" verify model --model "$FX/glm5_tiny"
  expect_fail "verify parallel --backend cuda without a GPU" 1 "CUDA" -- "$GYRE" verify parallel --backend cuda --plan tp=2 --model "$FX/glm5_tiny"
  expect_fail "eval --backend cuda without a GPU" 1 "CUDA" -- "$GYRE" eval --model "$FX/glm5_tiny" --text "$TMP/eval.txt" --backend cuda
  expect_fail "bench model --backend cuda without a GPU" 1 "CUDA" -- "$GYRE" bench model --backend cuda --config "$SRC/bench/configs/glm5_next_4layer.json"
  expect_fail "serve --vision-backend cuda without a GPU" 1 "CUDA" -- "$GYRE" serve --model "$FX/glm5_tiny" --vision-backend cuda --port 0
fi
expect_fail "serve --vision-backend unknown" 2 "" -- "$GYRE" serve --model "$FX/glm5_tiny" --vision-backend tpu

# vLLM launch-line habits: refused flags say what to use and exit 2 before anything loads.
v=$("$GYRE" --version) && [[ "$v" == gyre\ * ]] && pass "--version" || fail "--version: '$v'"
expect_fail "verify parallel: cuda-only flags on cpu" 2 "need --backend cuda" -- "$GYRE" verify parallel --plan tp=2 --inject-fault
expect_fail "verify ops: --shape without --op" 2 "needs --op" -- "$GYRE" verify ops --shape T=4
expect_fail "verify ops: --shape names an unknown dim" 2 "no dimension 'Q'" -- "$GYRE" verify ops --op dsa.select --shape Q=4
expect_fail "verify length: no model" 2 "--model DIR or --config FILE" -- "$GYRE" verify length --tokens 100
expect_fail "verify length: bad chunk list" 2 "--chunks" -- "$GYRE" verify length --model "$FX/glm5_tiny" --chunks 64,x
expect_fail "verify length: bf16 weights on cpu" 2 "need --backend cuda" -- "$GYRE" verify length --model "$FX/glm5_tiny" --weights bf16
expect_fail "verify length: tail >= tokens" 1 "tail < tokens" -- "$GYRE" verify length --model "$FX/glm5_tiny" --tokens 40 --tail 40
if out=$("$GYRE" verify length --model "$FX/kimi_tiny" --tokens 200 --chunks 64,7 --tail 30 --head 5 --json) &&
   grep -q '^  "pass": true' <<<"$out" && [[ $(grep -c '"chunk":' <<<"$out") == 2 ]]; then
  pass "verify length on the cpu (kimi_tiny, 200 tokens)"
else
  fail "verify length on the cpu: $out"
fi
expect_fail "verify parallel --backend cuda: cp plan refused" 2 "tp=N, ep=N or pp=N" -- "$GYRE" verify parallel --backend cuda --plan cp=2
expect_fail "verify parallel --backend cuda: tp=0 refused" 2 "tp=N, ep=N or pp=N" -- "$GYRE" verify parallel --backend cuda --plan tp=0
expect_fail "serve -tp 2 on the cpu backend refused" 2 "runs on --backend cuda" -- "$GYRE" serve -tp 2
expect_fail "serve -pp 2 on the cpu backend refused" 2 "runs on --backend cuda" -- "$GYRE" serve -pp 2
expect_fail "serve: -tp and -pp together refused" 2 "one of the two" -- "$GYRE" serve --backend cuda -tp 2 -pp 2
expect_fail "serve: --enable-expert-parallel without -tp refused" 2 "needs --tensor-parallel-size" -- "$GYRE" serve --backend cuda --enable-expert-parallel
expect_fail "serve: --tp-shared-gpu without ranks refused" 2 "needs --tensor-parallel-size" -- "$GYRE" serve --backend cuda --tp-shared-gpu
expect_fail "serve: -tp 0 refused" 2 ">= 1" -- "$GYRE" serve --backend cuda -tp 0
expect_fail "serve --kv-cache-dtype fp8 on the cpu backend refused" 2 "run on --backend cuda" -- "$GYRE" serve --kv-cache-dtype fp8
expect_fail "serve --kv-cache-policy on the cpu backend refused" 2 "run on --backend cuda" -- "$GYRE" serve --kv-cache-policy p.json
expect_fail "serve --kv-cache-dtype fp8_e5m2 refused" 2 "expected one of" -- "$GYRE" serve --backend cuda --kv-cache-dtype fp8_e5m2
expect_fail "serve: --kv-cache-policy with --kv-cache-dtype refused" 2 "give one of the two" -- "$GYRE" serve --backend cuda --kv-cache-policy p.json --kv-cache-dtype bf16
expect_fail "serve: --prefix-cache-checkpoint-bytes not a size" 2 "not a byte size" -- "$GYRE" serve --prefix-cache-checkpoint-bytes lots
expect_fail "serve: checkpoint budget without prefix caching" 2 "needs prefix caching" -- "$GYRE" serve --no-enable-prefix-caching --prefix-cache-checkpoint-bytes 1G
expect_fail "serve: checkpoint budget below one KDA state" 1 "holds no KDA state checkpoint" -- "$GYRE" serve "$FX/glm5_tiny" --port 0 --prefix-cache-checkpoint-bytes 1
expect_fail "serve: model given twice" 2 "given twice" -- "$GYRE" serve "$FX/glm5_tiny" --model "$FX/kimi_tiny"
expect_fail "serve: positional model that does not exist" 1 "nope" -- "$GYRE" serve "$TMP/nope"
expect_fail "router: --prefill and --decode required" 2 "prefill" -- "$GYRE" router --decode http://127.0.0.1:1
expect_fail "router: a bad instance URL" 2 "--prefill" -- "$GYRE" router --prefill ftp://x --decode http://127.0.0.1:1
expect_fail "serve: --role local-pair on cuda refused" 1 "cpu backend only" -- "$GYRE" serve --backend cuda --config "$FX/glm5_tiny/config.json" --role local-pair
expect_fail "serve: --role decode under TP refused" 1 "does not export" -- "$GYRE" serve --backend cuda --config "$FX/glm5_tiny/config.json" --role decode -tp 2
expect_fail "serve: --log-level verbose refused" 2 "debug, info, warning, error" -- "$GYRE" serve --log-level verbose
expect_fail "serve: --log-format xml refused" 2 "text, json" -- "$GYRE" serve --log-format xml
expect_fail "serve: malformed --allowed-origins" 2 "not a JSON list" -- "$GYRE" serve --allowed-origins '["https://a.example"'
# --max-model-len beyond config.json's max_position_embeddings (1048576) is refused before listening.
expect_fail "serve: --max-model-len beyond max_position_embeddings" 2 "max_position_embeddings (1048576" -- \
  "$GYRE" serve "$FX/glm5_tiny" --port 0 --max-model-len 2000000
# A --max-num-seqs whose KDA state slots cannot fit in memory is a usage error, not an abort.
expect_fail "serve: --max-num-seqs beyond memory" 2 "at most" -- "$GYRE" serve "$FX/glm5_tiny" --port 0 --max-num-seqs 100000000000
# gate --repeats must be positive (0 used to fall back to the file's count in silence).
expect_fail "gate: --repeats 0 refused" 2 "repeats" -- "$GYRE" gate bench/gates/cpu_engine.json --repeats 0

# serve_start NAME ARGS...: `gyre serve --port 0 ARGS` in the background (SERVE_PID), its port in
# SERVE_PORT once it prints the listening line. Extra environment goes before the call (env ...).
serve_start() {
  local name=$1
  shift
  "$@" --port 0 >"$TMP/$name.out" 2>"$TMP/$name.err" &
  SERVE_PID=$!
  SERVE_PORT=""
  for _ in $(seq 1 300); do
    SERVE_PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$TMP/$name.out" 2>/dev/null | sed 's/.*://')
    [ -n "$SERVE_PORT" ] && return 0
    sleep 0.1
  done
  return 1
}
serve_stop() { kill -TERM "$SERVE_PID" 2>/dev/null; wait "$SERVE_PID" 2>/dev/null; }
# http_status PORT PATH [AUTH_KEY]: the HTTP status of GET PATH (with a bearer key when given).
http_status() {
  python3 - "$@" <<'PY'
import sys, urllib.request, urllib.error
port, path = sys.argv[1], sys.argv[2]
req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
if len(sys.argv) > 3:
    req.add_header("Authorization", "Bearer " + sys.argv[3])
try:
    print(urllib.request.urlopen(req, timeout=10).status)
except urllib.error.HTTPError as e:
    print(e.code)
PY
}

# The API key comes from $GYRE_API_KEY unless --api-key is given; the flag wins.
if serve_start env_key env GYRE_API_KEY=from-env "$GYRE" serve "$FX/glm5_tiny"; then
  a=$(http_status "$SERVE_PORT" /v1/models) b=$(http_status "$SERVE_PORT" /v1/models from-env)
  [ "$a" = 401 ] && [ "$b" = 200 ] && pass "serve: GYRE_API_KEY guards /v1" || fail "serve: GYRE_API_KEY: $a $b"
  serve_stop
  grep -q ' INFO access id=req-[A-Za-z0-9]* method=GET path=/v1/models status=401 ' "$TMP/env_key.err" \
    && pass "serve: text access log line" || fail "serve: no text access line: $(head -c 300 "$TMP/env_key.err")"
else
  fail "serve with GYRE_API_KEY did not start: $(head -c 300 "$TMP/env_key.err")"; serve_stop
fi
if serve_start flag_key env GYRE_API_KEY=from-env "$GYRE" serve "$FX/glm5_tiny" --api-key from-flag --log-format json; then
  a=$(http_status "$SERVE_PORT" /v1/models from-env) b=$(http_status "$SERVE_PORT" /v1/models from-flag)
  [ "$a" = 401 ] && [ "$b" = 200 ] && pass "serve: --api-key wins over GYRE_API_KEY" || fail "serve: --api-key: $a $b"
  serve_stop
  python3 - "$TMP/flag_key.err" <<'PY' && pass "serve: --log-format json access lines" || fail "serve: json access lines"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
access = [l for l in lines if l.get("event") == "access"]
assert [l["status"] for l in access] == [401, 200], access
assert all(l["path"] == "/v1/models" and l["method"] == "GET" for l in access)
PY
else
  fail "serve with --api-key did not start: $(head -c 300 "$TMP/flag_key.err")"; serve_stop
fi

# --allow-long-max-model-len lets it through (the KV budget must still hold it).
if serve_start long_len "$GYRE" serve "$FX/glm5_tiny" --max-model-len 1100000 --allow-long-max-model-len --kv-memory 560M \
    --disable-log-requests; then
  grep -q "max model len 1100000" "$TMP/long_len.out" && pass "serve: --allow-long-max-model-len" \
    || fail "serve: --allow-long-max-model-len: $(head -c 300 "$TMP/long_len.out")"
  h=$(http_status "$SERVE_PORT" /health)
  serve_stop
  [ "$h" = 200 ] && ! grep -q "access" "$TMP/long_len.err" && pass "serve: --disable-log-requests" \
    || fail "serve: --disable-log-requests: $h $(head -c 300 "$TMP/long_len.err")"
else
  fail "serve --allow-long-max-model-len did not start: $(head -c 300 "$TMP/long_len.err")"; serve_stop
fi

# plan: the memory planner (docs/planning.md). 0 fits; 1 inconsistent or does not fit; 2 usage.
FULL=$SRC/configs/glm5_3_flash.json
"$GYRE" inspect --config "$FULL" | grep -q "313326816766 total" && pass "inspect --config: full model 313,326,816,766 params" \
  || fail "inspect --config full model"
"$GYRE" plan --config "$FULL" --gpus 8 --gpu-memory 141G --tp 8 --ep 8 --max-num-seqs 48 --max-model-len 32768 --json \
  | python3 -c 'import json,sys; o=json.load(sys.stdin); s=o["stages"][0]; assert o["fits"] and s["weights"]["routed_experts"]==42*36*25165824*2 and s["dsa_cache_bytes_per_token"]==11*(2*512+4*2*128+4*128//16) and o["max_seqs_at_max_model_len"]>=48, o' \
  && pass "plan --json: 8 GPUs tp8 ep8 fits, exact expert bytes" || fail "plan --json 8xH200"
"$GYRE" plan --config "$FULL" --gpus 8 --gpu-memory 141G --tp 8 --ep 8 | grep -q "longest single request" \
  && pass "plan text" || fail "plan text"
"$GYRE" plan --config "$FULL" --gpus 8 --gpu-memory 141G --tp 8 --ep 8 --project "$SRC/bench/results/gpu_model_bench_4layer_2026-12-02.json" \
  | grep -q "NOT measured on several GPUs" && pass "plan --project" || fail "plan --project"
expect_fail "plan: does not fit, reason given" 1 "refused: weights" -- "$GYRE" plan --config "$FULL" --gpus 1 --gpu-memory 80G
expect_fail "plan: inconsistent tp" 1 "not a multiple of tp" -- "$GYRE" plan --config "$FULL" --gpus 8 --gpu-memory 141G --tp 3
expect_fail "plan: cache too large for 1M x 256" 1 "sequences of that length fit" -- "$GYRE" plan --config "$FULL" --gpus 8 --gpu-memory 141G --tp 8 --ep 8 --max-num-seqs 256 --max-model-len 1048576
expect_fail "plan: --gpu-memory not a size" 2 "not a byte size" -- "$GYRE" plan --config "$FULL" --gpus 8 --gpu-memory lots
expect_fail "plan: no --gpus" 2 "gpus" -- "$GYRE" plan --config "$FULL" --gpu-memory 141G
expect_fail "plan: both --config and --model" 2 "exactly one" -- "$GYRE" plan --config "$FULL" --model "$FX/glm5_tiny" --gpus 1 --gpu-memory 1G
expect_fail "plan: bad --weights" 2 "" -- "$GYRE" plan --config "$FULL" --gpus 8 --gpu-memory 141G --weights fp4
expect_fail "plan: missing config file" 1 "cannot open" -- "$GYRE" plan --config "$TMP/none.json" --gpus 1 --gpu-memory 1G
"$GYRE" plan --model "$FX/glm5_tiny" --gpus 1 --gpu-memory 8G --max-model-len 4096 >/dev/null && pass "plan --model DIR" || fail "plan --model DIR"

# Quantization (docs/quantization.md): quantize, inspect the scheme, run the quantized model.
for s in fp8-block int8; do
  "$GYRE" quantize --model "$FX/glm5_tiny" --out "$TMP/q_$s" --scheme "$s" >/dev/null || fail "quantize $s exit"
  "$GYRE" inspect --model "$TMP/q_$s" --json | python3 -c 'import json,sys; o=json.load(sys.stdin)["quantization"]; assert o["scheme"]==sys.argv[1] and o["bytes_quantized"]>0 and o["bytes_by_layer"]["embed_tokens"]["quantized"]==0' "$s" \
    && pass "inspect shows $s" || fail "inspect $s"
  "$GYRE" generate --model "$TMP/q_$s" --ids 5,6,7 --max-tokens 3 --json >/dev/null && pass "generate on $s" \
    || fail "generate on $s"
done
"$GYRE" quantize-eval --model "$FX/glm5_tiny" --quantized "$TMP/q_int8" --text "$TMP/eval.txt" --ctx 8 --weight-only --json \
  | python3 -c 'import json,sys; r=json.load(sys.stdin)["results"]; assert len(r)==2 and r[1]["weight_only"] and all(0<=x["top1_agreement"]<=1 and x["mean_kl"]>=0 and x["num_positions"]>0 for x in r)' \
  && pass "quantize-eval --json" || fail "quantize-eval --json"
expect_fail "quantize unknown scheme" 2 "" -- "$GYRE" quantize --model "$FX/glm5_tiny" --out "$TMP/q_x" --scheme int4
expect_fail "quantize twice" 1 "already quantized" -- "$GYRE" quantize --model "$TMP/q_int8" --out "$TMP/q_again" \
  --scheme fp8-block

echo "cli contracts: $fails failure(s)"
[ "$fails" -eq 0 ]

#!/usr/bin/env bash
# The whole GPU check in one go (docs/cuda.md).
#
#   scripts/gpu_check.sh --pack     On the build machine, after
#                                     cmake --preset cuda && cmake --build build/cuda -j2 --target gyre gyre_cuda_bench
#                                   (and test_engine, test_transfer, test_quant_gpu, test_device_comm when built)
#                                   bundles gyre, gyre_cuda_bench and the shared libraries a plain CUDA image
#                                   lacks (OpenBLAS, gfortran, utf8proc, ...) into build/gpu_pack (~15 MB).
#   scripts/gpu_check.sh OUTDIR     On the GPU machine (build/gpu_pack carried along, or nvcc there):
#                                   1. nvidia-smi snapshot                        -> OUTDIR/gpu_nvidia_smi.txt
#                                   2. gyre verify ops --backend cuda (2 seeds)   -> OUTDIR/gpu_verify.json
#                                   3. gyre_cuda_bench: self-check vs fp64, ceilings, decode, prefill
#                                                                                 -> OUTDIR/gpu_kda_bench.json
#                                   4. compute-sanitizer memcheck and racecheck on the verify shapes
#                                                                                 -> OUTDIR/gpu_sanitizer.log
#                                   and prints a short summary last. Exit 0 iff every check passed.
# With no pack, it builds gyre_cuda_bench alone with nvcc (the full gyre needs the Debian -dev packages);
# step 2 and 3 are then skipped.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PACK=${GYRE_PACK_DIR:-$ROOT/build/gpu_pack}  # GYRE_PACK_DIR: another folder under the repo (for carry)

# ---- pack mode (build machine) -------------------------------------------------------------------
if [[ "${1:-}" == "--pack" ]]; then
  set -e
  BUILD=$ROOT/build/cuda
  rm -rf "$PACK" && mkdir -p "$PACK/lib"
  bins=(gyre gyre_cuda_bench)
  [[ -x "$BUILD/test_engine" ]] && bins+=(test_engine)
  [[ -x "$BUILD/test_transfer" ]] && bins+=(test_transfer)
  [[ -x "$BUILD/test_quant_gpu" ]] && bins+=(test_quant_gpu)
  [[ -x "$BUILD/test_kv_cache_gpu" ]] && bins+=(test_kv_cache_gpu)
  [[ -x "$BUILD/test_vision_gpu" ]] && bins+=(test_vision_gpu)
  [[ -x "$BUILD/test_device_comm" ]] && bins+=(test_device_comm)
  for f in "$BUILD"/gyre_*_bench; do [[ -x "$f" ]] && bins+=("$(basename "$f")"); done
  for b in "${bins[@]}"; do
    strip --strip-debug -o "$PACK/$b" "$BUILD/$b"
  done
  # Everything ldd resolves except the C/C++ runtime and CUDA (the GPU image has newer ones).
  (cd "$PACK" && ldd "${bins[@]}") | awk '/=>/ {print $1, $3}' | sort -u | while read -r name path; do
    case "$name" in
      libc.so*|libm.so*|libstdc++*|libgcc_s*|ld-linux*|libpthread*|libdl.so*|librt.so*|libcublas*|libcudart*|libnccl*) ;;  # NCCL: 200+ MB, from the GPU machine
      *) cp -L "$path" "$PACK/lib/$name" ;;
    esac
  done
  (cd "$PACK/lib" && tar -cJf ../libs.tar.xz ./*) && rm -rf "$PACK/lib"
  # The binaries travel compressed too (the working tree and the pack share a 64 MiB budget).
  (cd "$PACK" && tar -cf - "${bins[@]}" | xz -T2 -9 > bins.tar.xz && rm -f "${bins[@]}")
  commit=$(git -C "$ROOT" rev-parse --short=12 HEAD)
  git -C "$ROOT" diff --quiet HEAD -- src CMakeLists.txt 2>/dev/null || commit="$commit+dirty"
  echo "$commit" > "$PACK/COMMIT"
  du -sh "$PACK"/*
  exit 0
fi

# ---- check mode (GPU machine) --------------------------------------------------------------------
OUT=${1:?usage: scripts/gpu_check.sh OUTDIR | --pack}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
cd "$ROOT"
COMMIT=$(cat "$PACK/COMMIT" 2>/dev/null || git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
echo "== gyre GPU check, commit $COMMIT, $(date -u +%FT%TZ)"
# Steps to run (comma list): verify (ops), model (fixture parity), length (gyre verify length on glm5_mini, dsa.select at
# 1M context), longctx (opt-in, not in the default: verify length at 1M tokens, ~2 min), longserve (opt-in: a 1M-token
# request through gyre serve on the full-depth model, H200), tp (tensor parallelism on one GPU), vision (test_vision_gpu + gyre_vision_bench), disagg (router over cuda instances, images through an encode instance with the tower on cuda), encodebench (bench/encode_role.sh: image TTFT colocated vs encode-prefill-decode over cuda instances), dgate (issue 12's prefill-throughput gate on cuda: bench/gates/gpu_disagg_prefill.json), quant (W8A8: tools/gpu/quant_check.sh), kvcache (KV cache dtypes: test_kv_cache_gpu + bench model per dtype), eval, trace (CUPTI device timeline), kda (gyre_cuda_bench), mla, moe,
# sampling (their microbenchmarks), sanitizer, modelbench (4-layer random bf16 glm5_next), hf (transformers on
# the same config). Default: all. E.g. GYRE_CHECK_STEPS=verify,model,sanitizer for correctness only.
STEPS=${GYRE_CHECK_STEPS:-verify,model,length,quant,kvcache,eval,trace,vision,engine,devcomm,tp,disagg,encodebench,dgate,serve,kda,mla,moe,sampling,sanitizer,modelbench,servebench,prefixbench,hf}
has_step() { [[ ",$STEPS," == *",$1,"* ]]; }

# cuBLASLt comes from the machine's CUDA install (or the pip wheel PyTorch uses).
if ! ldconfig -p | grep -q 'libcublasLt.so.13'; then
  lt=$(find /usr/local /usr/lib /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
  [[ -n "$lt" ]] && export LD_LIBRARY_PATH=$(dirname "$lt")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# NCCL too (not packed: 200+ MB): gyre links it for tensor parallelism, test_device_comm for its tests.
if ! ldconfig -p | grep -q 'libnccl.so.2'; then
  nccl=$(find /usr/local /usr/lib /opt -name 'libnccl.so.2*' 2>/dev/null | head -1)
  [[ -n "$nccl" ]] && export LD_LIBRARY_PATH=$(dirname "$nccl")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

GYRE="" BENCH=""
[[ -f "$PACK/bins.tar.xz" ]] && tar -xJf "$PACK/bins.tar.xz" -C "$PACK"
if [[ -f "$PACK/libs.tar.xz" ]]; then
  mkdir -p /tmp/gyre_pack_lib && tar -xJf "$PACK/libs.tar.xz" -C /tmp/gyre_pack_lib
  export LD_LIBRARY_PATH=/tmp/gyre_pack_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  "$PACK/gyre" --help > /dev/null 2>&1 && GYRE=$PACK/gyre || { echo "packed gyre does not run:"; ldd "$PACK/gyre" | grep 'not found'; }
  [[ -x "$PACK/gyre_cuda_bench" ]] && ! ldd "$PACK/gyre_cuda_bench" | grep -q 'not found' && BENCH=$PACK/gyre_cuda_bench
fi
if [[ -z "$BENCH" ]] && has_step kda; then
  echo "== building gyre_cuda_bench with nvcc here"
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  objs=()
  for f in src/ops/cuda/{sm90_kda_recurrent,sm90_kda_chunk,kda_cuda,cublaslt_gemm,kda_cuda_bench}.cu; do
    o=/tmp/gyre_bench_$(basename "$f" .cu).o
    "$NVCC" -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc -c "$f" -o "$o" &
    objs+=("$o")
  done
  wait
  "$NVCC" -std=c++20 -O3 -Isrc src/core/status.cc "${objs[@]}" -lcublasLt -o /tmp/gyre_cuda_bench && BENCH=/tmp/gyre_cuda_bench
fi

# ---- 1. the card as found ----
{ nvidia-smi; nvidia-smi --query-gpu=name,driver_version,pstate,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv; } \
  > "$OUT/gpu_nvidia_smi.txt" 2>&1
head -20 "$OUT/gpu_nvidia_smi.txt"

status=0
# ---- 2. verify ops on the GPU (fresh random inputs, two seeds) ----
if [[ -n "$GYRE" ]] && has_step verify; then
  echo "== gyre verify ops --backend cuda (every op)"
  files=()
  for seed in 1 $RANDOM$RANDOM; do
    f=/tmp/gyre_verify_$seed.json
    timeout 120 "$GYRE" verify ops --backend cuda --seed "$seed" --json > "$f" || status=1
    files+=("$f")
  done
  python3 - "$OUT/gpu_verify.json" "${files[@]}" <<'EOF'
import json, sys
runs = [json.load(open(f)) for f in sys.argv[2:]]
checks = [dict(c, seed=r["seed"]) for r in runs for c in r["checks"]]
json.dump({"backend": "cuda", "failed": sum(not c["pass"] for c in checks), "checks": checks}, open(sys.argv[1], "w"), indent=1)
for c in checks:
    print(f'  {"ok  " if c["pass"] else "FAIL"} {c["op"]:14s} {c["shape"]:22s} seed {c["seed"]:>10} rel-L2 {c["rel_l2"]} '
          f'(tol {c["tolerance"]}) unwritten {c["num_unwritten"]} {c["error"]}')
EOF
elif [[ -z "$GYRE" ]]; then
  echo "== no runnable gyre: verify ops, model parity and sanitizer skipped"
  status=1
fi

# ---- 2b. the GPU model vs the transformers goldens and the CPU engine, every fixture ----
if [[ -n "$GYRE" ]] && has_step model; then
  echo "== gyre verify model --backend cuda"
  for fx in glm5_tiny glm5_flat kimi_tiny glm5_mini; do
    timeout 120 "$GYRE" verify model --backend cuda --model "tests/fixtures/$fx" --json > "/tmp/gyre_parity_$fx.json" \
      || status=1
  done
  # A config the CPU engine runs but the kernels cannot (head sizes 20 / 12) is refused at load.
  "$GYRE" bench model --backend cuda --config bench/configs/glm5_tiny_odd_heads.json --random-weights \
    > /tmp/gyre_odd.log 2>&1
  if [[ $? -eq 1 ]] && grep -q "does not run on the GPU backend (num_attention_heads" /tmp/gyre_odd.log; then
    echo "  ok   odd head sizes refused at load: $(grep -o 'mla.attention: [^;]*' /tmp/gyre_odd.log | head -1)"
  else
    echo "  FAIL odd head sizes not refused at load:"; tail -3 /tmp/gyre_odd.log; status=1
  fi
  python3 - "$OUT/gpu_parity.json" /tmp/gyre_parity_*.json <<'EOF2'
import json, sys
reps = []
for f in sys.argv[2:]:
    try:
        reps.append(json.load(open(f)))
    except Exception as e:  # an error exit leaves no JSON
        reps.append({"file": f, "error": str(e), "pass": False})
json.dump({"backend": "cuda", "failed": sum(not r.get("pass") for r in reps), "fixtures": reps}, open(sys.argv[1], "w"), indent=1)
for r in reps:
    if "error" in r:
        print("  FAIL", r["file"], r["error"]); continue
    print(f'  {"ok  " if r["pass"] else "FAIL"} {r["model"]}: golden logits rel-L2 {r["golden_logits"]["rel_l2"]:.2e}, '
          f'cpu {r["cpu_logits"]["rel_l2"]:.2e}, greedy golden {r["greedy"]["match_golden"]} cpu {r["greedy"]["match_cpu"]}, '
          f'ragged {r["ragged_batch"]["worst_rel_l2"]:.2e}')
EOF2
fi

# ---- 2b'. correctness at length (issue 22 item 2; gyre verify length, feedback/length_check.h) ----
# The model against itself: chunk-size invariance of the last logits and KDA states, decode vs
# prefill at the start and end of the prompt. glm5_mini here (fp32 and bf16 weights); the 1M-token
# run on the full-width model is the opt-in step `longctx`. The DSA selection at 1M context is
# checked against the fp64 reference (verify ops dsa.select at T = 2^20, the model's shapes).
if [[ -n "$GYRE" ]] && has_step length; then
  echo "== gyre verify length --backend cuda (glm5_mini, 6000 tokens)"
  timeout 300 "$GYRE" verify length --backend cuda --model tests/fixtures/glm5_mini --weights f32 --tokens 6000 \
    --chunks 1024,333,4096 --tail 80 --head 16 --tol-logits 1e-4 --tol-state 1e-4 --out "$OUT/gpu_length_f32.json" \
    || status=1
  timeout 300 "$GYRE" verify length --backend cuda --model tests/fixtures/glm5_mini --weights bf16 --tokens 6000 \
    --chunks 1024,333,4096 --tail 80 --head 16 --tol-logits 1e-2 --tol-state 1e-2 --tol-worst 5e-2 --kv-cache-dtype bf16 \
    --out "$OUT/gpu_length_bf16.json" || status=1
  echo "== gyre verify ops dsa.select at 1M context (fp64 reference)"
  timeout 300 "$GYRE" verify ops --backend cuda --op dsa.select --seed 22 --json \
    --shape S=4,T=1048576,M=16,TOPK=2048,IH=32,ID=128 > "$OUT/gpu_select_1m.json" || status=1
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); [print(f'  {\"ok  \" if c[\"pass\"] else \"FAIL\"} dsa.select {c[\"shape\"]} rel-L2 {c[\"rel_l2\"]} {c[\"error\"]}') for c in r['checks']]" \
    "$OUT/gpu_select_1m.json" || status=1
fi
if [[ -n "$GYRE" ]] && has_step longctx; then
  # GYRE_LONGCTX_WEIGHTS: bf16 (default; three chunkings, ~2 min on an H100 at 1M), f32 (the exact path:
  # FFMA GEMMs and attention, fp32 cache; one chunking; over 330 s at 1M), or both. GYRE_LONGCTX_TOKENS
  # (default 1,048,576), GYRE_LONGCTX_CHUNKS (bf16) and GYRE_LONGCTX_TAIL (decoded rows at the end,
  # default 64) change the sizes; the results name them.
  W=${GYRE_LONGCTX_WEIGHTS:-bf16} N=${GYRE_LONGCTX_TOKENS:-1048576} TAIL=${GYRE_LONGCTX_TAIL:-64}
  if [[ "$W" == bf16 || "$W" == both ]]; then
    echo "== gyre verify length at $N tokens (4 layers, full width, 32 experts, bf16 weights)"
    timeout 560 "$GYRE" verify length --backend cuda --config bench/configs/glm5_next_4layer_32experts.json --weights bf16 \
      --tokens "$N" --chunks "${GYRE_LONGCTX_CHUNKS:-8192,32768,5000}" --tail "$TAIL" --head 16 --tol-logits 1e-2 \
      --tol-state 1e-2 --tol-worst 0.5 --out "$OUT/gpu_length_${N}_bf16.json" || status=1
  fi
  if [[ "$W" == f32 || "$W" == both ]]; then
    echo "== gyre verify length at $N tokens (4 layers, full width, 32 experts, fp32 weights)"
    timeout 330 "$GYRE" verify length --backend cuda --config bench/configs/glm5_next_4layer_32experts.json --weights f32 \
      --tokens "$N" --chunks 8192 --tail "$TAIL" --head 0 --tol-logits 1e-4 --tol-state 1e-4 --tol-worst 1e-3 \
      --out "$OUT/gpu_length_${N}_f32.json" || status=1
  fi
fi

# Opt-in `longserve`: one request of GYRE_LONG_TOKENS (default 1,048,576; a comma list sends several
# at once, GYRE_LONG_STAGGER_S apart, each generating GYRE_LONG_MAX_NEW tokens) through `gyre serve`
# on the full-depth 32-expert config with a bf16 DSA cache (tools/gpu/long_context.py; needs an
# H200); GYRE_LONG_CONFIG names another config (e.g. bench/configs/glm5_next_4layer_32experts.json,
# any GPU).
if [[ -n "$GYRE" ]] && has_step longserve; then
  echo "== tools/gpu/long_context.py: ${GYRE_LONG_TOKENS:-1048576} tokens through gyre serve (${GYRE_LONG_CONFIG:-full depth, 32 experts})"
  timeout 580 python3 tools/gpu/long_context.py "$GYRE" "$OUT/long_context" --tokens "${GYRE_LONG_TOKENS:-1048576}" \
    --stagger-s "${GYRE_LONG_STAGGER_S:-0}" --max-new "${GYRE_LONG_MAX_NEW:-16}" \
    --kv-cache-dtype bf16 --timeout 540 --config "${GYRE_LONG_CONFIG:-bench/configs/glm5_next_fulldepth_32experts.json}" \
    || status=1
fi

# ---- 2c. the trained model's held-out perplexity on both engines (gyre eval) ----
if [[ -n "$GYRE" ]] && has_step eval; then
  echo "== gyre eval (tests/fixtures/glm5_mini, held-out text) on cuda and cpu"
  for be in cuda cpu; do
    timeout 300 "$GYRE" eval --backend $be --model tests/fixtures/glm5_mini \
      --text tests/fixtures/glm5_mini/heldout_eval.txt --ctx 1024 --json > "$OUT/gpu_eval_$be.json" || status=1
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(f'   {sys.argv[2]}: mean NLL {r[\"mean_nll\"]:.6f} ppl {r[\"perplexity\"]:.3f} over {r[\"tokens_scored\"]} tokens, {r[\"tokens_per_s\"]:.0f} tok/s')" \
      "$OUT/gpu_eval_$be.json" $be || status=1
  done
fi

# ---- 2d. the device timeline (CUPTI): the known-answer check, then a traced generate, analyzed ----
if [[ -n "$GYRE" ]] && has_step trace; then
  if [[ -z "${GYRE_CUPTI_LIB:-}" ]] && ! ldconfig -p | grep -q 'libcupti.so'; then
    cupti=$(find /usr/local/cuda*/ /usr/local/lib /usr/lib /opt -name 'libcupti.so*' 2>/dev/null | sort | tail -1)
    [[ -n "$cupti" ]] && export GYRE_CUPTI_LIB=$cupti
  fi
  echo "== gyre verify trace (CUPTI: ${GYRE_CUPTI_LIB:-from the loader path})"
  mkdir -p "$OUT/trace"
  timeout 120 "$GYRE" verify trace --out-dir "$OUT/trace" --json > "$OUT/gpu_trace_check.json" || status=1
  python3 - "$OUT/gpu_trace_check.json" <<'PY' || status=1
import json, sys
r = json.load(open(sys.argv[1]))
for c in r["checks"]:
    print(f'   {c["name"]:22s} {"PASS" if c["pass"] else "FAIL"}  {c["detail"]}')
o = r["overhead"]
print(f'   launch cost {o["us_per_launch_off"]:.2f} us off, {o["us_per_launch_on"]:.2f} us traced; CUPTI {r["cupti"]} v{r["cupti_version"]}')
sys.exit(0 if r["pass"] else 1)
PY
  echo "== gyre generate --backend cuda --trace (glm5_mini), then gyre analyze"
  timeout 120 "$GYRE" generate --backend cuda --model tests/fixtures/glm5_mini --prompt "The history of the river" \
    --max-tokens 48 --trace "$OUT/trace/generate.json" > "$OUT/trace/generate.txt" 2>&1 || status=1
  timeout 120 "$GYRE" analyze "$OUT/trace/generate.json" --overlap memcpy,kernel --json > "$OUT/trace/generate_analyze.json" || status=1
  timeout 120 "$GYRE" analyze "$OUT/trace/generate.json" --overlap memcpy,kernel --top 12 > "$OUT/trace/generate_analyze.txt" || status=1
  sed 's/^/   /' "$OUT/trace/generate_analyze.txt" | grep -E 'GPU|gap|overlap' | head -12
  echo "== a trace window of a running server (POST /debug/trace, tools/gpu/trace_window_check.py)"
  timeout 300 python3 tools/gpu/trace_window_check.py --gyre "$GYRE" --out "$OUT/gpu_trace_window.json" || status=1
fi

# ---- 3. self-check, ceilings and microbenchmarks ----
# ---- the engine over the CUDA runner, and the server on loopback ----
# W8A8 (docs/quantization.md "GPU"): the W8A8 verify ops, test_quant_gpu (quantized glm5_mini,
# CUDA vs CPU), and gyre_cuda_bench --w8a8-only, from the pack -> OUTDIR/quant/.
if has_step quant; then
  if [[ -x "$PACK/test_quant_gpu" && -n "$GYRE" && -n "$BENCH" ]]; then
    echo "== W8A8 (tools/gpu/quant_check.sh)"
    timeout 1800 tools/gpu/quant_check.sh "$OUT/quant" "$PACK" || status=1
  else
    echo "== no packed test_quant_gpu / gyre / gyre_cuda_bench: W8A8 step skipped"; status=1
  fi
fi
# KV cache dtypes (docs/quantization.md "KV cache dtype"): accuracy per dtype on glm5_mini, then the
# 4-layer default-shape model's decode at a 16k context per dtype -> OUTDIR/kvcache/.
if has_step kvcache; then
  if [[ -x "$PACK/test_kv_cache_gpu" && -n "$GYRE" ]]; then
    echo "== KV cache dtypes (test_kv_cache_gpu, bench model --kv-cache-dtype)"
    mkdir -p "$OUT/kvcache"
    GYRE_KV_REPORT="$OUT/kvcache/accuracy.json" timeout 600 "$PACK/test_kv_cache_gpu" \
      --gtest_output="json:$OUT/kvcache/test.json" 2>&1 | tee "$OUT/kvcache/test.log" | grep -E "^\[kv|OK|FAILED|PASSED|Failure|rel-L2" || true
    [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
    for kv in fp32 bf16 fp8 int8; do
      timeout ${GYRE_KV_BENCH_TIMEOUT:-240} "$GYRE" bench model --backend cuda --config bench/configs/glm5_next_4layer.json \
        --random-weights --batches ${GYRE_KV_BENCH_BATCHES:-1,16,64} --context ${GYRE_KV_BENCH_CONTEXT:-16384} \
        --prefill-chunk ${GYRE_KV_BENCH_CONTEXT:-16384} --prompt-lens 4096 --steps 16 --kv-cache-dtype $kv \
        --out "$OUT/kvcache/bench_model_$kv.json" 2> "$OUT/kvcache/bench_model_$kv.err" || status=1
      echo "-- --kv-cache-dtype $kv"; tail -4 "$OUT/kvcache/bench_model_$kv.err"
    done
    tools/gpu/kv_bench_table.py "$OUT/kvcache" || true
    # The mixed policy from data (glm5_mini's 2 attention layers), then perplexity per policy.
    FX=tests/fixtures/glm5_mini
    timeout 300 "$GYRE" kv-policy-search --model $FX --text $FX/heldout_eval.txt --max-tokens 512 \
      --out "$OUT/kvcache/policy.json" --report "$OUT/kvcache/policy_search.json" || status=1
    for p in fp32 bf16 int8 fp8 policy; do
      flag="--kv-cache-dtype $p"; [[ $p == policy ]] && flag="--kv-cache-policy $OUT/kvcache/policy.json"
      timeout 300 "$GYRE" eval --backend cuda --model $FX --text $FX/heldout_eval.txt --ctx 1024 --max-tokens 8192 \
        $flag --json > "$OUT/kvcache/eval_$p.json" || status=1
      python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('eval', sys.argv[2], {k: r[k] for k in r if k in ('perplexity','tokens_scored','mean_nll')})" \
        "$OUT/kvcache/eval_$p.json" $p || true
    done
  else
    echo "== no packed test_kv_cache_gpu / gyre: kvcache step skipped"; status=1
  fi
fi
# ---- the vision tower on the GPU (issue 17): parity tests, then its benchmark ----
if has_step vision; then
  if [[ -x "$PACK/test_vision_gpu" ]]; then
    echo "== test_vision_gpu (goldens, the CPU tower, refusals)"
    timeout 300 "$PACK/test_vision_gpu" --gtest_output="json:$OUT/gpu_vision_tests.json" > "$OUT/gpu_vision_tests.log" 2>&1
    rc=$?
    grep -E '^\[(cuda vision|  PASSED|  FAILED)' "$OUT/gpu_vision_tests.log" | head -20
    [[ $rc -ne 0 ]] && { echo "  FAIL test_vision_gpu: exit $rc"; status=1; }
  else
    echo "== no packed test_vision_gpu"; status=1
  fi
  if [[ -x "$PACK/gyre_vision_bench" ]]; then
    echo "== gyre_vision_bench"
    timeout 300 "$PACK/gyre_vision_bench" --out "$OUT/gpu_vision_bench.json" --commit "$COMMIT" ${GYRE_VISION_BENCH_ARGS:-} \
      2> "$OUT/gpu_vision_bench.log" || { echo "  FAIL gyre_vision_bench"; tail -3 "$OUT/gpu_vision_bench.log"; status=1; }
    cat "$OUT/gpu_vision_bench.log" | tail -6
  fi
fi
if has_step engine; then
  if [[ -x "$PACK/test_engine" ]]; then
    echo "== test_engine on the CUDA runner"
    timeout 600 "$PACK/test_engine" --gtest_filter='*cuda*' --gtest_output="json:$OUT/gpu_engine_tests.json" \
      > "$OUT/gpu_engine_tests.log" 2>&1 || status=1
    grep -E '^\[  (PASSED|FAILED) |^\[       OK|FAILED  \]' "$OUT/gpu_engine_tests.log" | head -20
  else
    echo "== no packed test_engine"; status=1
  fi
  # Disaggregation on the CUDA model: export after prefill, TCP transfer, import, decode equals
  # colocated decoding (src/transfer/disagg_equivalence_test.cc).
  if [[ -x "$PACK/test_transfer" ]]; then
    echo "== test_transfer on the CUDA runner"
    timeout 300 "$PACK/test_transfer" --gtest_filter='*cuda*' --gtest_output="json:$OUT/gpu_transfer_tests.json" \
      > "$OUT/gpu_transfer_tests.log" 2>&1 || status=1
    grep -E '^\[  (PASSED|FAILED) |^\[       OK|FAILED  \]' "$OUT/gpu_transfer_tests.log" | head -20
  fi
fi
# ---- device communicators: NCCL with one rank, ranks as threads sharing this GPU, timeouts ----
# (src/parallel/device_comm_gpu_test.cc). NCCL is not packed: it comes from this machine.
if has_step devcomm; then
  if [[ -x "$PACK/test_device_comm" ]]; then
    echo "== test_device_comm (NCCL world 1, SharedDeviceGroup 1/2/4 ranks, timeouts)"
    timeout 600 "$PACK/test_device_comm" --gtest_output="json:$OUT/gpu_device_comm_tests.json" \
      > "$OUT/gpu_device_comm_tests.log" 2>&1 || status=1
    grep -E '^\[  (PASSED|FAILED) |^\[       OK|FAILED  \]|error while loading' "$OUT/gpu_device_comm_tests.log" | head -20
  else
    echo "== no packed test_device_comm"; status=1
  fi
fi
# ---- tensor parallelism of the CUDA model, ranks as threads sharing this GPU (docs/parallel.md) ----
if [[ -n "$GYRE" ]] && has_step tp; then
  echo "== gyre verify parallel --backend cuda (TP vs the unsharded CUDA model)"
  rm -f /tmp/gyre_tp_*.json
  i=0
  for spec in "glm5_mini tp=2 f32" "glm5_mini tp=4 f32" "glm5_mini tp=2 bf16" "glm5_mini tp=4 bf16" "kimi_tiny tp=2 f32" \
              "glm5_tiny tp=2 f32" "glm5_flat tp=2 f32" "glm5_mini tp=3 f32" "glm5_mini ep=2 f32" "glm5_mini ep=4 f32" \
              "glm5_mini ep=4 bf16" "kimi_tiny ep=2 f32" "glm5_mini ep=3 f32" "glm5_mini tp=1 f32 nccl" \
              "glm5_mini pp=2 f32" "glm5_mini pp=3 f32" "glm5_mini pp=6 f32" "glm5_mini pp=2 bf16" "kimi_tiny pp=2 f32"; do
    read -r fx plan dt comm <<< "$spec"
    i=$((i + 1))
    timeout 300 "$GYRE" verify parallel --backend cuda --plan $plan --model tests/fixtures/$fx --dtype $dt --seed $((i * 7919)) \
      --comm ${comm:-shared} --json > /tmp/gyre_tp_$i.json 2> /tmp/gyre_tp_$i.err
    rc=$?
    echo "  $plan $fx $dt ${comm:-shared}: exit $rc $(tail -c 300 /tmp/gyre_tp_$i.err)"
    [[ $rc -ne 0 ]] && status=1
  done
  # Negative control: the MLP partial sums not all-reduced must fail the check (exit 1).
  timeout 300 "$GYRE" verify parallel --backend cuda --plan tp=2 --model tests/fixtures/glm5_mini --inject-fault --seed 5 \
    --json > /tmp/gyre_tp_fault.json 2> /tmp/gyre_tp_fault.err
  rc=$?
  if [[ $rc -eq 1 ]]; then echo "  ok   injected fault caught (exit 1)"; else echo "  FAIL injected fault: exit $rc"; status=1; fi
  python3 - "$OUT/gpu_tp_verify.json" /tmp/gyre_tp_[0-9]*.json /tmp/gyre_tp_fault.json <<'EOF3'
import json, sys
reps = []
for f in sys.argv[2:]:
    try:
        reps.append(json.load(open(f)))
    except Exception as e:
        reps.append({"file": f, "error": str(e), "pass": False})
json.dump({"runs": reps}, open(sys.argv[1], "w"), indent=1)
for r in reps:
    if "error" in r:
        print("  FAIL", r["file"], r["error"]); continue
    g = r["greedy"]
    print(f'  {"pass" if r["pass"] else "FAIL"} {r["plan"]} {r["communicator"][:4]} {r["model"]} {r["weights"]} fault={r["injected_fault"]}: '
          f'ragged rel-L2 {r["ragged_logits"]["worst_rel_l2"]:.2e} (tol {r["tolerance"]:.2e}), greedy {g["mismatches"]} '
          f'mismatches / {g["near_ties"]} near ties, sampled identical {r["sampled"]["identical"]}, '
          f'decode ms/step {r.get("decode_step_ms", {}).get("unsharded", 0):.2f} -> tp {r.get("decode_step_ms", {}).get("tp", 0):.2f}'
          + (f', bf16 accuracy vs fp32: unsharded {r["bf16_accuracy"]["unsharded_bf16"]:.2e}, tp {r["bf16_accuracy"]["tp_bf16"]:.2e}'
             if "bf16_accuracy" in r else ''))
EOF3
  # The server under TP (2 ranks sharing the GPU) gives the one-rank server's greedy completions.
  timeout 300 python3 tools/gpu/tp_serve_check.py --gyre "$GYRE" --out "$OUT/gpu_tp_serve.json" || status=1
fi
# ---- disaggregation on GPU instances: gyre router over a cuda prefill and a cuda decode instance ----
if [[ -n "$GYRE" ]] && has_step disagg; then
  echo "== tests/disagg/router.sh with --backend cuda instances (prefill, decode, colocated)"
  GYRE_SERVE_EXTRA="--backend cuda --gpu-memory-utilization 0.05" timeout 300 tests/disagg/router.sh "$GYRE" \
    tests/fixtures/glm5_tiny > "$OUT/gpu_disagg_router.log" 2>&1
  rc=$?
  tail -3 "$OUT/gpu_disagg_router.log"
  [[ $rc -ne 0 ]] && { echo "  FAIL disagg router on cuda: exit $rc"; status=1; }
fi
# ---- issue 17's benchmark on the GPU: image TTFT, colocated vs through the encode role ----
if [[ -n "$GYRE" ]] && has_step encodebench; then
  echo "== bench/encode_role.sh with --backend cuda instances (the encoder's tower on cuda)"
  GYRE_SERVE_EXTRA="--backend cuda --gpu-memory-utilization 0.05" timeout 300 bench/encode_role.sh "$GYRE" \
    tests/fixtures/glm5_tiny 20 > "$OUT/gpu_encode_role.json" 2> "$OUT/gpu_encode_role.log"
  rc=$?
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('  TTFT medians ms', {k: {c: v[c]['median_ms'] for c in v} for k, v in r['cases'].items()})" \
    "$OUT/gpu_encode_role.json" || tail -5 "$OUT/gpu_encode_role.log"
  [[ $rc -ne 0 ]] && { echo "  FAIL encode-role bench on cuda: exit $rc"; status=1; }
fi
# ---- issue 12's gate on the GPU: prefill throughput with the cache transfer on vs off ----
if [[ -n "$GYRE" ]] && has_step dgate; then
  echo "== gyre gate bench/gates/gpu_disagg_prefill.json (glm5_mini on cuda)"
  timeout 400 "$GYRE" gate bench/gates/gpu_disagg_prefill.json --model tests/fixtures/glm5_mini --json \
    > "$OUT/gate_gpu_disagg_prefill.json" 2> "$OUT/gate_gpu_disagg_prefill.log"
  rc=$?
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); [print('  %-13s %s estimate %.4g ci %s' % (p['verdict'], p['id'], p['evidence'].get('estimate') or 0, p['evidence'].get('ci'))) for p in r['predicates']]" \
    "$OUT/gate_gpu_disagg_prefill.json" || tail -5 "$OUT/gate_gpu_disagg_prefill.log"
  [[ $rc -ne 0 ]] && { echo "  FAIL gpu disagg gate: exit $rc"; status=1; }
fi
if [[ -n "$GYRE" ]] && has_step serve; then
  echo "== gyre serve --backend cuda vs the CPU server (tools/gpu/serve_check.py)"
  timeout 600 python3 tools/gpu/serve_check.py --gyre "$GYRE" --out "$OUT/gpu_serve_check.json" || status=1
fi

if has_step kda && [[ -n "$BENCH" ]]; then
  echo "== gyre_cuda_bench"
  timeout ${GYRE_BENCH_TIMEOUT:-240} "$BENCH" --out "$OUT" --commit "$COMMIT" ${GYRE_BENCH_ARGS:-} || status=1
elif has_step kda; then
  echo "== no gyre_cuda_bench"
  status=1
fi
# ---- 4. memory errors and shared-memory races on the same shapes (all ops; non-CUDA ops skip) ----
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
if [[ -n "$GYRE" && -n "$SAN" ]] && has_step sanitizer; then
  echo "== compute-sanitizer"
  for tool in memcheck racecheck; do
    echo "-- $tool" >> "$OUT/gpu_sanitizer.log"
    timeout ${GYRE_SANITIZER_TIMEOUT:-120} "$SAN" --tool "$tool" --error-exitcode 9 "$GYRE" verify ops --backend cuda --seed 7 \
      >> "$OUT/gpu_sanitizer.log" 2>&1
    rc=$?
    summary=$(grep -E '(ERROR|RACECHECK) SUMMARY' "$OUT/gpu_sanitizer.log" | tail -1)
    echo "   $tool: rc $rc; $summary"
    [[ $rc -eq 9 || $rc -ge 124 || -z "$summary" ]] && status=1
  done
  # memcheck_gtest LABEL BINARY FILTER: one gtest binary's filtered tests under memcheck.
  memcheck_gtest() {
    [[ -x "$2" ]] || { echo "   no packed $(basename "$2"): memcheck ($1) skipped"; status=1; return; }
    echo "-- memcheck $1" >> "$OUT/gpu_sanitizer.log"
    timeout ${GYRE_SANITIZER_TIMEOUT:-120} "$SAN" --tool memcheck --error-exitcode 9 "$2" --gtest_filter="$3" \
      >> "$OUT/gpu_sanitizer.log" 2>&1
    local rc=$? summary
    summary=$(grep -E 'ERROR SUMMARY' "$OUT/gpu_sanitizer.log" | tail -1)
    echo "   memcheck ($1): rc $rc; $summary"
    [[ $rc -ne 0 || -z "$summary" ]] && status=1
  }
  # The CUDA model's speculative path (ring stash, ragged recurrent kernel, batched folds): the
  # runner-level ReplaySSM test on the small fixtures.
  memcheck_gtest "test_engine ReplaySSM" "$PACK/test_engine" '*CommitEqualsPlainRecurrence*tiny_cuda*'
  # MTP drafts: key rows through pos_shift, the chain's scratch pages and setup, commits.
  memcheck_gtest "test_engine MTP drafts" "$PACK/test_engine" '*DraftsMatchTheCpuRunner*cuda*'
  # Image inputs: the prompt-embedding rows scattered over the embedding output.
  memcheck_gtest "test_engine prompt embeddings" "$PACK/test_engine" '*PromptEmbedsOn.RunnerLogits*cuda*'
  # The vision tower: the golden images (two segments) and the refusals.
  memcheck_gtest "test_vision_gpu" "$PACK/test_vision_gpu" 'CudaVisionGolden.*:CudaVisionTower.Refuses*'
fi
# ---- 5. microbenchmarks of the MLA/DSA, MoE and sampling kernels ----
for b in mla moe sampling; do
  exe=$PACK/gyre_${b}_cuda_bench
  if has_step "$b" && [[ -x "$exe" ]]; then
    echo "== gyre_${b}_cuda_bench"
    extra="GYRE_${b^^}_BENCH_ARGS"  # e.g. GYRE_MLA_BENCH_ARGS="--contexts 1048576 --batches 1,4 --quick"
    timeout ${GYRE_BENCH_TIMEOUT:-240} "$exe" --out "$OUT" ${!extra:-} || status=1
  fi
done
# ---- 6. the 4-layer model (3 KDA + 1 DSA, default shapes, random bf16 weights), then transformers ----
if [[ -n "$GYRE" ]] && has_step modelbench; then
  echo "== gyre bench model --backend cuda"
  timeout ${GYRE_MODEL_BENCH_TIMEOUT:-300} "$GYRE" bench model --backend cuda --config bench/configs/glm5_next_4layer.json \
    --random-weights --batches 1,16,64,256 --context 1024 --steps 32 --out "$OUT/gpu_model_bench.json" || status=1
fi
if [[ -n "$GYRE" ]] && has_step servebench; then
  echo "== serving benchmarks (tools/gpu/serve_bench.sh)"
  timeout ${GYRE_SERVE_BENCH_TIMEOUT:-1500} tools/gpu/serve_bench.sh "$GYRE" "$OUT/servebench" ${GYRE_SERVE_BENCH_CONFIGS:-} || status=1
fi
if [[ -n "$GYRE" ]] && has_step prefixbench; then
  echo "== prefix cache on vs off (tools/gpu/prefix_bench.sh)"
  timeout ${GYRE_PREFIX_BENCH_TIMEOUT:-900} tools/gpu/prefix_bench.sh "$GYRE" "$OUT/prefixbench" ${GYRE_PREFIX_BENCH_CONFIGS:-} || status=1
fi
# Opt-in `specbench`: speculative decoding with ReplaySSM on the CUDA model (issue 15): verify step
# vs decode step at k = 1..4, serving tokens/s with n-gram drafts vs without, outputs identical.
if has_step specbench; then
  if [[ -x "$PACK/gyre_specdec_cuda_bench" ]]; then
    for cfg in ${GYRE_SPEC_BENCH_CONFIGS:-tests/fixtures/glm5_mini/config.json bench/configs/glm5_next_fulldepth_32experts.json}; do
      name=$(basename "$(dirname "$cfg")")
      [[ $name == configs ]] && name=$(basename "$cfg" .json)
      echo "== speculative decoding bench: $cfg"
      timeout ${GYRE_SPEC_BENCH_TIMEOUT:-300} "$PACK/gyre_specdec_cuda_bench" "$cfg" ${GYRE_SPEC_BENCH_ARGS:-} \
        > "$OUT/specdec_$name.json" 2> "$OUT/specdec_$name.err" || { echo "   FAILED (see specdec_$name.err)"; status=1; }
      tail -3 "$OUT/specdec_$name.err"
    done
  else
    echo "== no packed gyre_specdec_cuda_bench"; status=1
  fi
fi
# Opt-in `mtpbench`: MTP drafts on the CUDA model (issue 15): the trained glm5_mini at batch 1, 16,
# 64 on held-out text, plain vs MTP k = 1, 3 vs n-gram, fp32 (outputs must equal plain) and bf16.
if has_step mtpbench; then
  if [[ -x "$PACK/gyre_specdec_cuda_bench" ]]; then
    for prec in fp32 bf16; do
      echo "== MTP drafts bench: glm5_mini $prec"
      flag=""; [[ $prec == fp32 ]] && flag="--fp32"
      timeout ${GYRE_SPEC_BENCH_TIMEOUT:-300} "$PACK/gyre_specdec_cuda_bench" --model tests/fixtures/glm5_mini $flag \
        ${GYRE_MTP_BENCH_ARGS:-} > "$OUT/specdec_mtp_glm5_mini_$prec.json" 2> "$OUT/specdec_mtp_glm5_mini_$prec.err" \
        || { echo "   FAILED (see specdec_mtp_glm5_mini_$prec.err)"; status=1; }
      tail -3 "$OUT/specdec_mtp_glm5_mini_$prec.err"
    done
  else
    echo "== no packed gyre_specdec_cuda_bench"; status=1
  fi
fi
if has_step hf; then
  echo "== transformers' chunked KDA at the KDA prefill shapes"
  PYTHONUNBUFFERED=1 timeout ${GYRE_HF_TIMEOUT:-300} python3 tools/bench/hf_kda_prefill_bench.py --out "$OUT/hf_kda_prefill.json" \
    || echo "   (transformers KDA run failed or timed out)"
  echo "== transformers on the same config"
  PYTHONUNBUFFERED=1 timeout ${GYRE_HF_TIMEOUT:-300} python3 tools/bench/hf_glm5_next_bench.py \
    --config bench/configs/glm5_next_4layer.json --out "$OUT/hf_model_bench.json" || echo "   (transformers run failed or timed out)"
fi
echo "== gpu_check: $([[ $status -eq 0 ]] && echo PASS || echo FAIL)"
exit $status

#!/usr/bin/env bash
# The W8A8 GPU check alone (issue 14; docs/quantization.md "GPU"), from an existing CUDA build:
# builds nothing. On the GPU machine, after `cmake --build build/cuda --target gyre test_quant_gpu
# gyre_cuda_bench`:
#
#   tools/gpu/quant_check.sh OUTDIR [BUILD_DIR]        (BUILD_DIR default: build/cuda)
#
#   1. gyre verify ops --backend cuda on the W8A8 ops, seeds 1 and 2   -> OUTDIR/gpu_quant_verify_<seed>.json
#   2. test_quant_gpu: glm5_mini fp8-block / int8, CUDA vs CPU logits and greedy ids
#                                                                      -> OUTDIR/gpu_quant_test.{json,log}
#   3. gyre verify model --backend cuda on the unquantized glm5_mini (the bf16 / fp32 path unchanged)
#                                                                      -> OUTDIR/gpu_quant_parity_glm5_mini.json
#   4. gyre_cuda_bench --w8a8-only: self-check vs a plain fp32 kernel, FP8 / INT8 vs bf16 GEMM rates,
#      MoE experts, copy bandwidth                                     -> OUTDIR/gpu_w8a8_bench.json
# Prints one line per step and exits 0 iff every step passed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?usage: tools/gpu/quant_check.sh OUTDIR [BUILD_DIR]}
BUILD=${2:-$ROOT/build/cuda}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$ROOT"
exec > >(tee "$OUT/gpu_quant_check.log") 2>&1
# The pack's COMMIT file names the binaries' commit; the device's copy of .git may be older.
if [ -f "$BUILD/COMMIT" ]; then COMMIT=$(head -c 12 "$BUILD/COMMIT"); else COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown); fi
echo "== W8A8 GPU check, commit $COMMIT, build $BUILD, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 | tail -1
status=0
step() {  # step NAME RC
  if [[ $2 -eq 0 ]]; then echo "  ok   $1"; else echo "  FAIL $1 (exit $2)"; status=1; fi
}

echo "== 1. verify ops --backend cuda (W8A8 ops)"
for seed in 1 2; do
  f=$OUT/gpu_quant_verify_$seed.json
  echo '{"runs": [' > "$f"
  first=1
  for op in quant.fp8_act quant.int8_act gemm.fp8_block gemm.int8 gemm.fp8_block_grouped gemm.int8_grouped \
            moe.experts_fp8 moe.experts_int8; do
    [[ $first -eq 1 ]] || echo ',' >> "$f"
    first=0
    timeout 300 "$BUILD/gyre" verify ops --backend cuda --op "$op" --seed "$seed" --json >> "$f"
    rc=$?
    step "verify $op seed $seed" $rc
  done
  echo ']}' >> "$f"
done
python3 - "$OUT"/gpu_quant_verify_1.json "$OUT"/gpu_quant_verify_2.json <<'PY' || true
import json, sys
for f in sys.argv[1:]:
    try:
        runs = json.load(open(f))["runs"]
    except Exception as e:
        print("  (unreadable", f, e, ")"); continue
    for r in runs:
        for c in r.get("checks", []):
            print(f'  {"ok  " if c["pass"] else "FAIL"} {c["op"]:24s} {c["shape"]:24s} seed {r.get("seed")} '
                  f'rel-L2 {c["rel_l2"]} (tol {c["tolerance"]}) unwritten {c["num_unwritten"]} {c["error"]} {c["note"]}')
PY

echo "== 2. test_quant_gpu"
timeout 600 "$BUILD/test_quant_gpu" --gtest_output=json:"$OUT/gpu_quant_test.json" > "$OUT/gpu_quant_test.log" 2>&1
rc=$?
grep -E '^\[(fp8|int8)\]|OK \]|FAILED|Failure|error' "$OUT/gpu_quant_test.log" | head -40
step "test_quant_gpu" $rc

echo "== 3. verify model --backend cuda glm5_mini (unquantized)"
timeout 300 "$BUILD/gyre" verify model --backend cuda --model tests/fixtures/glm5_mini --json \
  > "$OUT/gpu_quant_parity_glm5_mini.json" 2> "$OUT/gpu_quant_parity_glm5_mini.err"
step "verify model glm5_mini" $?

echo "== 4. gyre_cuda_bench --w8a8-only"
timeout 900 "$BUILD/gyre_cuda_bench" --w8a8-only --out "$OUT" --commit "$COMMIT"
step "gyre_cuda_bench --w8a8-only" $?

echo "== W8A8 GPU check: $([[ $status -eq 0 ]] && echo PASS || echo FAIL)"
exit $status

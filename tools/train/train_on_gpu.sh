#!/usr/bin/env bash
# The whole training run of the bundled model in one device call (see docs/training.md):
#   prepare (tokenizer + token arrays) -> piece 1 -> piece 2 (a new process resuming from the
#   checkpoint) -> export (bf16 glm5_next checkpoint + MTP layer) -> goldens -> transformers eval.
# Usage (repository root, on the GPU machine):
#   tools/train/train_on_gpu.sh full|smoke CORPUS_TAR OUTDIR
# smoke: seconds-long pieces and a short eval, to check the pipeline end to end.
set -euo pipefail
mode=$1 corpus=$2 out=$3
work=/tmp/glm5_mini_work
rm -rf "$work" && mkdir -p "$work" "$out"
py="python3 -u tools/train/glm5_mini.py"
export TRANSFORMERS_VERBOSITY=error PYTHONUNBUFFERED=1
case "$mode" in
  full) p1=185 p2=185 total=350 evalmax=16384 ;;
  smoke) p1=25 p2=15 total=40 evalmax=3000 ;;  # fp32 eval reads the whole text
  *) echo "mode must be full or smoke" >&2; exit 2 ;;
esac
t0=$(date +%s)
$py prepare --corpus "$corpus" --work "$work" 2>&1 | tee "$out/prepare.log"
$py train --work "$work" --piece-seconds "$p1" --total-seconds "$total" 2>&1 | tee "$out/train_piece1.log"
$py train --work "$work" --piece-seconds "$p2" --total-seconds "$total" 2>&1 | tee "$out/train_piece2.log"
$py export --work "$work" --out "$out/glm5_mini" 2>&1 | tee "$out/export.log"
$py goldens --model "$out/glm5_mini" --work "$work" 2>&1 | tee "$out/goldens.log"
cp "$work/heldout_eval.txt" "$work/data.json" "$out/glm5_mini/"
# fp32 on the whole eval text (the figure gyre eval must agree with), bf16 on its first part.
$py eval --model "$out/glm5_mini" --text "$work/heldout_eval.txt" --ctx 1024 --dtype fp32 \
  --json-out "$out/hf_eval_fp32.json" 2>&1 | tee -a "$out/eval.log"
$py eval --model "$out/glm5_mini" --text "$work/heldout_eval.txt" --ctx 1024 --dtype bf16 \
  --max-tokens "$evalmax" --json-out "$out/hf_eval_bf16.json" 2>&1 | tee -a "$out/eval.log"
# The reference for gyre's own eval test: the first 4097 held-out tokens (4 windows of 1024).
$py eval --model "$out/glm5_mini" --text "$work/heldout_eval.txt" --ctx 1024 --dtype fp32 \
  --max-tokens 4097 --json-out "$out/glm5_mini/eval_reference.json" 2>&1 | tee -a "$out/eval.log"
echo "total $(( $(date +%s) - t0 )) s" | tee -a "$out/eval.log"

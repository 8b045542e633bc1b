# Shell helpers shared by the disaggregation test scripts and bench/encode_role.sh (sourced).
#
# disagg_workdir: sets $work (a new temporary folder) and $pids (background processes to kill), and
# kills them and removes the folder on exit.
disagg_workdir() {
  work="$(mktemp -d)"
  pids=()
  trap disagg_cleanup EXIT
}
disagg_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

# copy_vision_model SRC DST: DST holds SRC's files as symlinks and a config.json whose image
# placeholder ids are moved into a tiny vocabulary (1010 / 1011 / 1012, as tests/serve/run.sh does)
# when the model's vocabulary does not reach the real ids (154830 / 154854 / 154831).
copy_vision_model() {
  local src="$1" dst="$2" f
  mkdir -p "$dst"
  for f in "$src"/*; do
    [ "$(basename "$f")" = config.json ] || ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$dst/"
  done
  python3 - "$src/config.json" "$dst/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
if c.get("vocab_size", 0) <= 154854:
    c.update(image_token_id=1010, image_start_token_id=1011, image_end_token_id=1012)
json.dump(c, open(sys.argv[2], "w"))
PY
}

# wait_port NAME: waits for "listening on http://HOST:PORT" in $work/NAME.out and sets PORT_<NAME>.
wait_port() {
  local name="$1"
  for _ in $(seq 1 300); do
    if grep -q "listening on http://" "$work/$name.out" 2>/dev/null; then
      eval "PORT_$name=$(grep -o 'listening on http://[^ ]*' "$work/$name.out" | head -1 | sed 's/.*://')"
      return 0
    fi
    sleep 0.1
  done
  echo "$name did not start:"
  cat "$work/$name.err"
  exit 1
}

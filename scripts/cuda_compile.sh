#!/usr/bin/env bash
# CI's CUDA stage: on a machine with nvcc and no GPU, compile every translation unit that holds
# CUDA code — each .cu file and each .cc file that mentions GYRE_CUDA (the registry's CUDA path,
# the CUDA model and parity, the device trace, the CLI's --backend cuda) — with the `cuda` preset
# (nvcc 13, sm_90a), and nothing else. The CPU parts of that build are the same sources the test
# stage already compiled, so this keeps CI's CUDA cost to 218 s (39 units, tests that mention
# GYRE_CUDA included; measured in the clean-clone CI run of 4603e72 on the 2-core machine) instead of
# a second full build.
#
# What it does not do: link the CUDA binaries. `scripts/gpu_check.sh --pack` builds and links them
# all (gyre, the CUDA benches, test_quant_gpu, ...) before every GPU check.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "cuda_compile: no CUDA toolkit at /usr/local/cuda: skipped"
  exit 0
fi
start=$SECONDS
cmake --preset cuda > /dev/null
mapfile -t objs < <(python3 - <<'PY'
import json, re
seen = set()
for e in json.load(open("build/cuda/compile_commands.json")):
    f = e["file"]
    if f in seen:
        continue
    cuda = f.endswith(".cu")
    if not cuda and f.endswith(".cc"):
        with open(f, encoding="utf-8", errors="replace") as src:
            cuda = "GYRE_CUDA" in src.read()
    m = re.search(r"\s-o\s+(\S+)", e["command"])
    if cuda and m:
        seen.add(f)
        print(m.group(1))
PY
)
[ "${#objs[@]}" -gt 0 ] || { echo "cuda_compile: no CUDA translation unit found" >&2; exit 1; }
echo "cuda_compile: ${#objs[@]} translation units"
ninja -C build/cuda -j"$(nproc)" "${objs[@]}"
echo "cuda_compile: ${#objs[@]} units compiled in $((SECONDS - start)) s"

#!/usr/bin/env bash
# TTFT of a one-image chat request, colocated vs encode → prefill → decode (issue 17's benchmark,
# docs/vision.md "Encode role"), and what the embedding cache saves. Starts, on this machine:
# a colocated `gyre serve`, a prefill, a decode and an encode instance, and `gyre router --encode`;
# then sends the same sequence of requests, one at a time, to the colocated server and through the
# router: N requests whose image bytes are new each time (a cache miss: the tower runs) and N
# whose image repeats (a hit), and N text-only ones (through the router: prefill → decode alone),
# streamed, max_tokens 1. TTFT = until the first content or reasoning delta. Then the encoder's own
# exchange (a cached image's rows sent to both instances or to one), as the router makes it. Prints
# one JSON object (machine, commit, config, medians and p90s in ms).
#
#   bench/encode_role.sh [GYRE_BINARY] [MODEL_DIR] [N] > bench/results/cpu_encode_role.json
#
# Default model: tests/fixtures/glm5_tiny with its image placeholder ids moved into the tiny
# vocabulary (as tests/serve/run.sh does). CPU backend (the tower runs on the CPU). GYRE_SERVE_EXTRA
# (word-split) is added to the colocated, prefill and decode instances, e.g. "--backend cuda
# --gpu-memory-utilization 0.05" (scripts/gpu_check.sh step `encodebench`); the encode instance
# then runs its tower on the GPU (--vision-backend cuda), as the colocated cuda server does.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
gyre="${1:-$root/build/cpu/gyre}"
src_model="${2:-$root/tests/fixtures/glm5_tiny}"
n="${3:-20}"
# shellcheck source=../tests/disagg/lib.sh
source "$root/tests/disagg/lib.sh"
disagg_workdir
model="$work/model"
copy_vision_model "$src_model" "$model"
start() {  # start NAME ARGS...
  local name="$1" extra="${GYRE_SERVE_EXTRA:-}"
  shift
  if [[ "$name" == encode ]]; then  # (no language model: the tower on the GPU with cuda instances)
    [[ "$extra" == *"--backend cuda"* ]] && extra="--vision-backend cuda" || extra=""
  fi
  # shellcheck disable=SC2086
  "$gyre" serve --model "$model" --port 0 --served-model-name m --disable-log-requests "$@" $extra \
    >"$work/$name.out" 2>"$work/$name.err" &
  pids+=($!)
}
start colo
start prefill --role prefill
start decode --role decode
start encode --role encode
for name in colo prefill decode encode; do wait_port "$name" >&2; done
"$gyre" router --port 0 --prefill "http://127.0.0.1:$PORT_prefill" --decode "http://127.0.0.1:$PORT_decode" \
  --encode "http://127.0.0.1:$PORT_encode" --poll-ms 100 >"$work/router.out" 2>"$work/router.err" &
pids+=($!)
wait_port router >&2
sleep 0.3  # (the router's first poll)

commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
python3 - "$PORT_colo" "$PORT_router" "$n" "$commit" "$src_model" "$root/tests/fixtures/images/rgb_140x112.png" \
  "$PORT_encode" "$PORT_prefill" "$PORT_decode" "${GYRE_SERVE_EXTRA:-}" <<'PY'
import base64, http.client, json, os, platform, random, statistics, sys, time
colo, router, n, commit, model, png_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
encode, prefill, decode, extra = sys.argv[7:11]
png = open(png_path, "rb").read()

def ttft(port, image):
    content = [{"type": "text", "text": "What is in the picture?"}]
    if image is not None:
        content.append({"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(image).decode()}})
    body = {"model": "m", "max_tokens": 1, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": content}]}
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=120)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"HTTP {r.status}: {r.read()[:300]}")
    first = None
    for line in r:
        line = line.decode().strip()
        if first is None and line.startswith("data: {"):
            delta = json.loads(line[6:])["choices"]
            if delta and (delta[0].get("delta", {}).get("content") or delta[0].get("delta", {}).get("reasoning_content")):
                first = time.perf_counter() - t0
    total = time.perf_counter() - t0
    c.close()
    if first is None:
        raise SystemExit("no content delta in the stream")
    return first * 1e3, total * 1e3

def summary(xs):
    xs = sorted(xs)
    return {"median_ms": round(statistics.median(xs), 3), "p90_ms": round(xs[int(0.9 * (len(xs) - 1))], 3),
            "min_ms": round(xs[0], 3)}

out = {"benchmark": "encode_role_ttft", "commit": commit, "model": os.path.basename(model.rstrip("/")),
       "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                   "system": platform.platform()},
       "config": {"requests_per_case": n, "max_tokens": 1, "stream": True, "image": "rgb_140x112.png (20 image tokens)",
                  "backend": "cuda" if "--backend cuda" in extra else "cpu",
                  "instance_flags": extra, "vision_tower": "cuda" if "--backend cuda" in extra else "cpu",
                  "one request at a time": True},
       "cases": {}}
# Warm-up: one of each path.
ttft(colo, png + b"warm-c")
ttft(router, png + b"warm-r")
for label, port in (("colocated", colo), ("encode_prefill_decode", router)):
    fresh = [ttft(port, png + f"{label}-{i}".encode())[0] for i in range(n)]  # new bytes: the tower runs
    repeat = [ttft(port, png + f"{label}-0".encode())[0] for _ in range(n)]    # the first one again: a cache hit
    text = [ttft(port, None)[0] for _ in range(n)]  # no image: through the router, prefill → decode only
    out["cases"][label] = {"new_image": summary(fresh), "repeated_image": summary(repeat), "text_only": summary(text)}
# The encoder's own exchange, as the router makes it (the rows of a cached image sent to the
# prefill and decode instances, or to one of them): how much of the hop is the sends.
def transfer_address(port):
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
    c.request("GET", "/disagg/status")
    return json.loads(c.getresponse().read())["transfer_address"]
def encode_only(to):
    body = {"model": "m", "max_tokens": 1, "temperature": 0, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is in the picture?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}]}]}
    c = http.client.HTTPConnection("127.0.0.1", int(encode), timeout=60)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json",
              "X-Gyre-Images-Id": str(random.randrange(1, 2**62)), "X-Gyre-Images-To": to})
    r = c.getresponse()
    r.read()
    if r.status != 200:
        raise SystemExit(f"encoder answered {r.status}")
    return (time.perf_counter() - t0) * 1e3
p_addr, d_addr = transfer_address(prefill), transfer_address(decode)
out["encoder_exchange"] = {"to_prefill_and_decode": summary([encode_only(p_addr + "," + d_addr) for _ in range(n)]),
                           "to_decode_only": summary([encode_only(d_addr) for _ in range(n)])}
out["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
c, e = out["cases"]["colocated"], out["cases"]["encode_prefill_decode"]
out["ratios"] = {
    "epd_over_colocated_new_image": round(e["new_image"]["median_ms"] / c["new_image"]["median_ms"], 3),
    "epd_over_colocated_repeated_image": round(e["repeated_image"]["median_ms"] / c["repeated_image"]["median_ms"], 3),
    "colocated_repeated_over_new": round(c["repeated_image"]["median_ms"] / c["new_image"]["median_ms"], 3),
    "pd_over_colocated_text_only": round(e["text_only"]["median_ms"] / c["text_only"]["median_ms"], 3),
}
# What the encode hop adds, estimated as a difference of differences of medians: (image - text)
# through the router minus (image - text) colocated. The colocated difference holds what an image
# request costs anyway (the tower on a miss, 22 more prompt tokens, no prefix-cache hit: text
# requests here repeat and hit it), so the rest is the hop: router -> encoder, the two sends of the
# rows and their acknowledgements, and the targets' checks.
out["encode_hop_ms_estimate"] = {
    k: round((e[k]["median_ms"] - e["text_only"]["median_ms"]) - (c[k]["median_ms"] - c["text_only"]["median_ms"]), 3)
    for k in ("new_image", "repeated_image")}
print(json.dumps(out, indent=2))
PY

#!/usr/bin/env bash
# Disaggregated serving across processes: `gyre router` over a `gyre serve --role prefill` and a
# `--role decode` instance gives the colocated server's greedy outputs byte for byte through the
# OpenAI API (completions and chat, plain and streamed, a prompt prefilled in chunks, prompts
# ending exactly on a page boundary, concurrent requests); both instances' pools return to zero;
# a router whose preferred decode instance cannot take transfers retries on the other (and, with
# --max-retries 0, answers the prefill's 503), and one whose preferred prefill instance has gone
# sends the request to the other; then with the decode instance killed the router and
# the prefill instance answer with an error status and the prefill instance's pools return to zero. An image request is refused through a
# router without an encode instance (400, saying one is needed); through a router with one
# (`gyre serve --role encode`, `gyre router --encode`) image requests give the colocated server's
# outputs byte for byte (one and two images, plain and streamed, a repeated image served from the
# encoder's embedding cache), a corrupt image is the encoder's 400, the image rows are counted on
# all three instances, and a failed image send is retried with another decode instance. Usage: router.sh GYRE_BINARY MODEL_DIR
# GYRE_SERVE_EXTRA (optional, word-split) is added to every `gyre serve`: with "--backend cuda ..."
# the same checks run on GPU instances (scripts/gpu_check.sh step `disagg`); the encode instance
# then runs its tower on the GPU (--vision-backend cuda), like the colocated cuda server.
set -euo pipefail
gyre="$1"
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
disagg_workdir
# A copy of the model whose config moves the image placeholder ids into the tiny vocabulary (as
# tests/serve/run.sh does), so that image inputs are accepted by the colocated server.
model="$work/model"
copy_vision_model "$2" "$model"
media="$(cd "$(dirname "$0")/../fixtures/images" && pwd)"

start() {  # start NAME ARGS...: a gyre serve
  local name="$1" extra="${GYRE_SERVE_EXTRA:-}"
  shift
  # --role encode loads no language model (so no --backend); with cuda instances its tower runs on
  # the GPU too, as the colocated cuda server's does (the same rows, so the same outputs).
  if [[ "$name" == encode ]]; then
    [[ "$extra" == *"--backend cuda"* ]] && extra="--vision-backend cuda" || extra=""
  fi
  # shellcheck disable=SC2086
  "$gyre" serve --model "$model" --port 0 --served-model-name m --max-num-batched-tokens 32 --kv-page-tokens 16 "$@" \
    $extra \
    >"$work/$name.out" 2>"$work/$name.err" &
  pids+=($!)
  eval "PID_$name=$!"
}

start colo
start prefill --role prefill
start decode --role decode --transfer-port 0
wait_port colo; wait_port prefill; wait_port decode
start encode --role encode
wait_port encode
if [[ "${GYRE_SERVE_EXTRA:-}" == *"--backend cuda"* ]]; then
  for n in colo prefill decode; do  # the instances really run the CUDA model
    for _ in $(seq 1 50); do grep -q "backend cuda (" "$work/$n.out" && break; sleep 0.1; done
    grep -q "backend cuda (" "$work/$n.out" || { echo "$n is not on cuda:"; cat "$work/$n.out"; exit 1; }
  done
  echo "instances on cuda: $(grep -h -o 'backend cuda ([^;]*' "$work/prefill.out" | head -1)"
fi
"$gyre" router --port 0 --prefill "http://127.0.0.1:$PORT_prefill" --decode "http://127.0.0.1:$PORT_decode" --poll-ms 100 \
  >"$work/router.out" 2>"$work/router.err" &
pids+=($!)
wait_port router

GYRE_WORK="$work" python3 - "$PORT_colo" "$PORT_router" "$PORT_prefill" "$PORT_decode" "$PID_decode" "$media" "${GYRE_SERVE_EXTRA:-}" "$gyre" "$PORT_encode" <<'PY'
import base64, json, os, signal, sys, threading, time, urllib.error, urllib.request
colo, router, prefill, decode, decode_pid, media, extra, gyre, encode = sys.argv[1:10]
cuda = "--backend cuda" in extra
failures = []
def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)

def http(port, path, body=None, headers=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()

def spawn_router(what, *args):
    """A `gyre router --port 0 ARGS`: (process, port), the port read from its first line."""
    import subprocess
    proc = subprocess.Popen([gyre, "router", "--port", "0", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    port = line.split("listening on http://")[1].split()[0].rsplit(":", 1)[1] if "listening on" in line else None
    check(port is not None, f"{what} started: {line!r}")
    return proc, port

def generate(port, path, body):
    status, raw = http(port, path, body)
    if status != 200:
        return f"HTTP {status}: {raw}"
    chat = path.endswith("chat/completions")
    if not body.get("stream"):
        c = json.loads(raw)["choices"][0]
        if chat:  # (the GLM template opens a thinking block: the text may all be reasoning)
            m = c["message"]
            return (m.get("reasoning_content") or "") + "|" + (m.get("content") or ""), c["finish_reason"]
        return c["text"], c["finish_reason"]
    text, reasoning, reason, chunks = "", "", None, 0
    for line in raw.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            ch = json.loads(line[6:])["choices"]
            chunks += 1
            if ch:
                if chat:
                    reasoning += ch[0].get("delta", {}).get("reasoning_content") or ""
                    text += ch[0].get("delta", {}).get("content") or ""
                else:
                    text += ch[0].get("text", "")
                reason = ch[0].get("finish_reason") or reason
    check(chunks > 1 and raw.rstrip().endswith("data: [DONE]"), f"stream of {len(raw)} bytes is complete")
    return (reasoning + "|" + text if chat else text), reason

# Prompts: short; long enough to be prefilled in chunks of 32 tokens; ids ending exactly on a
# page boundary (16 and 48 tokens); a chat conversation.
prompts = ["Hello", "The quick brown fox jumps over the lazy dog " * 6, list(range(100, 116)),
           list(range(200, 248)), "Once upon a time, in a land far away, there lived a " * 3]
cases = []
for stream in (False, True):
    for p in prompts:
        cases.append(("/v1/completions", {"model": "m", "prompt": p, "max_tokens": 10, "temperature": 0,
                                          "ignore_eos": True, "stream": stream}))
    cases.append(("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "Say something."}],
                                           "max_tokens": 10, "temperature": 0, "stream": stream}))
# max_tokens 1: the decode instance emits the transferred token and stops.
cases.append(("/v1/completions", {"model": "m", "prompt": "Hello there", "max_tokens": 1, "temperature": 0}))
want = [generate(colo, path, body) for path, body in cases]
for (path, body), w in zip(cases, want):
    got = generate(router, path, body)
    check(got == w and isinstance(w, tuple) and len(w[0].strip("|")) > 0,
          f"{path} stream={body.get('stream')} prompt={str(body.get('prompt', 'chat'))[:24]!r}: {w!r} vs {got!r}")

# Concurrent requests through the router.
got = [None] * len(cases)
def run(i): got[i] = generate(router, *cases[i])
ts = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
[t.start() for t in ts]; [t.join() for t in ts]
for i in range(len(cases)):
    check(got[i] == want[i], f"concurrent case {i}: {want[i]!r} vs {got[i]!r}")

# Logprobs: the first token's (sampled by the prefill instance, emitted by the decode instance)
# and its alternatives travel with the cache, so the router's answer has the colocated logprobs.
def logprob_rows(port, path, body):
    status, raw = http(port, path, body)
    if status != 200:
        return f"HTTP {status}: {raw}"
    events = [json.loads(l[6:]) for l in raw.splitlines() if l.startswith("data: ") and l != "data: [DONE]"] \
        if body.get("stream") else [json.loads(raw)]
    rows = []  # (token, logprob, {alternative: logprob})
    for ev in events:
        for ch in ev["choices"]:
            lp = ch.get("logprobs")
            if not lp:
                continue
            if "content" in lp:  # chat
                rows += [(e["token"], e["logprob"], {a["token"]: a["logprob"] for a in e["top_logprobs"]})
                         for e in lp["content"] or []]
            else:
                rows += list(zip(lp["tokens"], lp["token_logprobs"], [t or {} for t in lp["top_logprobs"]]))
    return rows

def close_rows(a, b, tol):
    if isinstance(a, str) or isinstance(b, str) or len(a) != len(b):
        return False
    for (ta, la, aa), (tb, lb, ab) in zip(a, b):
        if ta != tb or abs(la - lb) > tol or aa.keys() != ab.keys() or any(abs(aa[k] - ab[k]) > tol for k in aa):
            return False
    return True

lp_tol = 2e-2 if cuda else 1e-4  # (the same computation; cuda batches may differ in reduction order)
for stream in (False, True):
    for path, body in (("/v1/completions", {"model": "m", "prompt": "The quick brown fox", "max_tokens": 4,
                                            "temperature": 0, "ignore_eos": True, "logprobs": 3}),
                       ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "Say something."}],
                                                 "max_tokens": 4, "temperature": 0, "logprobs": True,
                                                 "top_logprobs": 2})):
        body = dict(body, stream=stream)
        w, g = logprob_rows(colo, path, body), logprob_rows(router, path, body)
        check(not isinstance(w, str) and len(w) == 4 and w[0][1] < 0 and len(w[0][2]) >= 2,
              f"{path} stream={stream}: the colocated server's logprobs {w!r}")
        check(close_rows(w, g, lp_tol), f"{path} stream={stream}: logprobs through the router {g!r} vs {w!r}")

# An error of an instance is passed through with its status.
status, raw = http(router, "/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 0})
check(status == 400 and "error" in json.loads(raw), f"bad request through the router: {status} {raw}")

# Images with disaggregation need an encode instance: without one the router's request is refused
# with a 400 that says so (a decode instance that recomputes a preempted prompt needs the image
# rows too); the colocated server answers the same request.
png = base64.b64encode(open(os.path.join(media, "rgb_140x112.png"), "rb").read()).decode()
jpg = base64.b64encode(open(os.path.join(media, "rgb_140x112.jpg"), "rb").read()).decode()
def image_part(b64, mime="image/png"):
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64," + b64}}
image_chat = {"model": "m", "max_tokens": 2, "temperature": 0, "messages": [{"role": "user", "content": [
    {"type": "text", "text": "What is this?"}, image_part(png)]}]}
status, raw = http(colo, "/v1/chat/completions", image_chat)
check(status == 200, f"image request on the colocated server: {status} {raw[:200]}")
for stream in (False, True):
    status, raw = http(router, "/v1/chat/completions", {**image_chat, "stream": stream})
    check(status == 400 and "need an encode instance" in raw,
          f"image request through the router without an encoder (stream={stream}): {status} {raw[:300]}")

# Encode-prefill-decode: a router with --encode sends an image request to the encode instance,
# which runs the tower and sends the rows to the prefill and the decode instance; the answer is
# the colocated server's, byte for byte.
eproc, erouter = spawn_router("a router with an encode instance", "--prefill", f"http://127.0.0.1:{prefill}",
                              "--decode", f"http://127.0.0.1:{decode}", "--encode", f"http://127.0.0.1:{encode}",
                              "--poll-ms", "100")
def enc_status():
    return json.loads(http(encode, "/disagg/status")[1])
e0 = enc_status()
check(e0["role"] == "encode", f"the encode instance reports its role: {e0}")
banner = open(os.path.join(os.environ["GYRE_WORK"], "encode.out")).read()
check("no language model loaded" in banner, f"the encode instance loads no language model: {banner[:300]}")
status, raw = http(encode, "/v1/chat/completions", image_chat)
check(status == 400 and "this is an encode instance" in raw, f"a plain request to the encode instance: {status} {raw[:200]}")
image_cases = [
    {**image_chat, "max_tokens": 6},
    {**image_chat, "max_tokens": 6},  # the same image again: the encoder's embedding cache
    {"model": "m", "max_tokens": 6, "temperature": 0, "messages": [{"role": "user", "content": [
        image_part(jpg, "image/jpeg"), {"type": "text", "text": "and"}, image_part(png)]}]},
]
for stream in (False, True):
    for i, body in enumerate(image_cases):
        body = {**body, "stream": stream}
        w, g = generate(colo, "/v1/chat/completions", body), generate(erouter, "/v1/chat/completions", body)
        check(isinstance(w, tuple) and g == w, f"image case {i} through encode-prefill-decode (stream={stream}): {w!r} vs {g!r}")
e1 = enc_status()
n_img = 2 * len(image_cases)
check(e1["image_transfers"] - e0["image_transfers"] == 2 * n_img and e1["image_transfer_failures"] == 0,
      f"the encoder sent each request's rows to both instances: {e0} -> {e1}")
for port, what in ((prefill, "prefill"), (decode, "decode")):
    st = json.loads(http(port, "/disagg/status")[1])
    check(st["image_transfers"] >= n_img and st["image_transfer_failures"] == 0 and st["receiver_held_bytes"] == 0,
          f"the {what} instance took the image rows: {st}")
emetrics = http(encode, "/metrics")[1]
hits = [l for l in emetrics.splitlines() if l.startswith("gyre_image_cache_hits_total")]
check(hits and float(hits[0].split()[-1]) >= n_img - 2,
      f"the encoder encoded each distinct image once (embedding cache hits): {hits}")
# A corrupt image: the encoder's 400 naming the field, passed through.
bad = {**image_chat, "messages": [{"role": "user", "content": [image_part(png[:300])]}]}
status, raw = http(erouter, "/v1/chat/completions", bad)
check(status == 400 and "messages[0].content[0].image_url" in raw, f"a corrupt image through the encoder: {status} {raw[:300]}")
# Text requests through the same router skip the encoder.
w = generate(colo, "/v1/completions", cases[0][1])
check(generate(erouter, "/v1/completions", cases[0][1]) == w, "a text request through the router with an encoder")
check(enc_status()["image_transfers"] == e1["image_transfers"], "a text request did not go to the encoder")
# The instances refuse the encoder's headers where they do not belong.
status, raw = http(decode, "/v1/chat/completions", image_chat, {"X-Gyre-Images-Id": "5", "X-Gyre-Images-To": "127.0.0.1:1"})
check(status >= 400 and "encode instance" in raw, f"X-Gyre-Images-To on a decode instance: {status} {raw[:200]}")
# Image rows that never arrive: the prefill instance answers 503 after its wait (the router would
# try again), naming them, and counts the failure.
d_addr = json.loads(http(decode, "/disagg/status")[1])["transfer_address"]
p_before = json.loads(http(prefill, "/disagg/status")[1])["image_transfer_failures"]
status, raw = http(prefill, "/v1/chat/completions", image_chat,
                   {"X-Gyre-Transfer-Id": "77", "X-Gyre-Transfer-To": d_addr, "X-Gyre-Images-Id": "999"})
check(status == 503 and "image-row transfer 999" in raw, f"image rows that never came: {status} {raw[:300]}")
check(json.loads(http(prefill, "/disagg/status")[1])["image_transfer_failures"] == p_before + 1,
      "the prefill instance counted the missing rows")
eproc.terminate()
eproc.wait(10)

# Prefix routing: a conversation's later turns are routed by their prefix (one prefill instance
# here, so this checks the router's record and counters; test_cli's PrefixAffinity tests cover the
# choice between instances). Turn 1 is long enough for several 256-byte blocks.
def router_prefix():
    return json.loads(http(router, "/disagg/status")[1])["prefix_routing"]
before = router_prefix()
check(before["enabled"] and before["block_bytes"] == 256, f"router prefix routing status: {before}")
conv = [{"role": "user", "content": "Tell me about the rivers of the north. " * 20}]
for turn in range(3):
    status, raw = http(router, "/v1/chat/completions", {"model": "m", "messages": conv, "max_tokens": 4, "temperature": 0})
    check(status == 200, f"conversation turn {turn}: {status} {raw[:200]}")
    reply = json.loads(raw)["choices"][0]["message"] if status == 200 else {}
    conv += [{"role": "assistant", "content": (reply.get("content") or "") + "."},
             {"role": "user", "content": f"And turn {turn + 2}?"}]
after = router_prefix()
check(after["prefill_requests"] - before["prefill_requests"] == 3 and
      after["routed_by_prefix"] - before["routed_by_prefix"] == 2 and
      after["matched_blocks"] - before["matched_blocks"] >= 2 * 3,
      f"turns 2 and 3 routed by prefix: {before} -> {after}")
inst = [i for i in json.loads(http(router, "/disagg/status")[1])["instances"] if i["role"] == "prefill"]
check(inst and inst[0]["prefix_blocks"] >= 3, f"the prefill instance's recorded blocks: {inst}")
status, _ = http(router, "/v1/completions", {"model": "m", "prompt": "Hi", "max_tokens": 1})
check(router_prefix()["routed_by_prefix"] == after["routed_by_prefix"], "a prompt under one block is not routed by prefix")

def pools_zero(port, what):
    for _ in range(100):
        st = json.loads(http(port, "/disagg/status")[1])
        if st["kv_pages_used"] == 0 and st["kda_slots_used"] == 0 and st["exported_held"] == 0 \
                and st.get("transfers_in_flight", 0) == 0:
            return st
        time.sleep(0.05)
    check(False, f"{what} pools back to zero: {st}")
    return st

pst = pools_zero(prefill, "prefill")
dst = pools_zero(decode, "decode")
n_ok = 2 * len(cases)
check(pst["transfers_completed"] >= n_ok and pst["transfer_pages"] > 0 and pst["transfer_bytes"] > 0,
      f"prefill counted its transfers: {pst}")
check(dst["transfers_completed"] >= n_ok and dst["receiver_held_bytes"] == 0, f"decode counted its imports: {dst}")
metrics = http(prefill, "/metrics")[1]
check("gyre_disagg_transfer_latency_seconds_count" in metrics and "gyre_disagg_transfers_total{" in metrics,
      "the prefill instance exports transfer metrics")

# Retries: a router whose first choice of decode instance is a fake that reports itself healthy,
# idle and with the most free pages, and a transfer address nobody listens on. The prefill's
# transfer to it fails (503) and the router tries the real decode instance: the client gets the
# colocated output. With --max-retries 0 the same request ends with the prefill's 503.
import socket, subprocess
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # (not `import http`: http() is ours)
probe = socket.socket()
probe.bind(("127.0.0.1", 0))
dead_port = probe.getsockname()[1]
probe.close()
class FakeDecode(BaseHTTPRequestHandler):
    def reply(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self.reply(200, {"role": "decode", "num_running": 0, "num_waiting": 0, "kv_pages_free": 10**9,
                         "transfer_address": f"127.0.0.1:{dead_port}"})
    def do_POST(self):
        self.reply(503, {"error": {"message": "fake decode instance", "type": "service_unavailable"}})
    def log_message(self, *args):
        pass
fake = ThreadingHTTPServer(("127.0.0.1", 0), FakeDecode)
threading.Thread(target=fake.serve_forever, daemon=True).start()
def start_router(*extra_args):
    return spawn_router("a router with a fake decode instance", "--prefill", f"http://127.0.0.1:{prefill}",
                        "--decode", f"http://127.0.0.1:{fake.server_port}", "--decode", f"http://127.0.0.1:{decode}",
                        "--poll-ms", "100", *extra_args)
retry_router, rport = start_router()
body = {"model": "m", "prompt": "Hello there, retry", "max_tokens": 6, "temperature": 0}
want = generate(colo, "/v1/completions", body)
for stream in (False, True):
    got = generate(rport, "/v1/completions", {**body, "stream": stream})
    check(got == want, f"router retries on the real decode instance (stream={stream}): {got} vs {want}")
rst = json.loads(http(rport, "/disagg/status")[1])
check(rst["handoff_retries"] == 2 and rst["max_retries"] == 2, f"the router counted its retries: {rst}")
retry_router.terminate()
retry_router.wait(10)
no_retry, nport = start_router("--max-retries", "0")
status, raw = http(nport, "/v1/completions", body)
check(status == 503 and "transfer" in raw, f"without retries the failed handoff is the answer: {status} {raw}")
no_retry.terminate()
no_retry.wait(10)
# The same with an image request through an encoder: its send to the fake's transfer address fails,
# it answers 503, and the router tries the real decode instance (the rows are encoded and sent
# again, under a fresh id): the colocated output, one retry, one failed image send.
e_before = json.loads(http(encode, "/disagg/status")[1])
iproc, iport = spawn_router("a router with an encoder and a fake decode instance", "--prefill",
                            f"http://127.0.0.1:{prefill}", "--decode", f"http://127.0.0.1:{fake.server_port}",
                            "--decode", f"http://127.0.0.1:{decode}", "--encode", f"http://127.0.0.1:{encode}",
                            "--poll-ms", "100")
ibody = {**image_chat, "max_tokens": 5}
w, g = generate(colo, "/v1/chat/completions", ibody), generate(iport, "/v1/chat/completions", ibody)
check(isinstance(w, tuple) and g == w, f"an image request retried after a failed image send: {w!r} vs {g!r}")
ist = json.loads(http(iport, "/disagg/status")[1])
e_after = json.loads(http(encode, "/disagg/status")[1])
check(ist["handoff_retries"] == 1 and ist["image_requests"] == 1, f"the router retried the image request once: {ist}")
check(e_after["image_transfer_failures"] - e_before["image_transfer_failures"] == 1,
      f"the encoder counted its failed send: {e_before} -> {e_after}")
iproc.terminate()
iproc.wait(10)
fake.shutdown()
# A prefill instance that was healthy at the router's last poll and is gone when a request comes
# (nobody listens on its port any more): the request goes to the other prefill instance.
class FakePrefill(FakeDecode):
    def do_GET(self):
        self.reply(200, {"role": "prefill", "num_running": 0, "num_waiting": 0, "kv_pages_free": 10**9})
gone = ThreadingHTTPServer(("127.0.0.1", 0), FakePrefill)
threading.Thread(target=gone.serve_forever, daemon=True).start()
proc, gport = spawn_router("a router with a vanishing prefill instance", "--prefill",
                           f"http://127.0.0.1:{gone.server_port}", "--prefill", f"http://127.0.0.1:{prefill}",
                           "--decode", f"http://127.0.0.1:{decode}", "--poll-ms", "60000")
gone.shutdown()
gone.server_close()  # (its one poll said healthy; the next is a minute away)
got = generate(gport, "/v1/completions", body)
check(got == want, f"a request skips a prefill instance that cannot be reached: {got} vs {want}")
gst = json.loads(http(gport, "/disagg/status")[1])
check(gst["handoff_retries"] == 1 and not gst["instances"][0]["healthy"], f"the vanished instance is marked: {gst}")
proc.terminate()
proc.wait(10)
pools_zero(prefill, "prefill after the retries")
pools_zero(decode, "decode after the retries")

# The decode instance dies: the prefill's transfer fails (503, its pools return to zero) and the
# router answers with an error status, never with output.
os.kill(int(decode_pid), signal.SIGKILL)
time.sleep(0.2)
body = {"model": "m", "prompt": "Hello", "max_tokens": 10, "temperature": 0}
status, raw = http(prefill, "/v1/completions", body,
                   {"X-Gyre-Transfer-Id": "12345", "X-Gyre-Transfer-To": dst["transfer_address"]})
check(status == 503 and "transfer" in raw, f"prefill with a dead decode instance: {status} {raw}")
for stream in (False, True):
    status, raw = http(router, "/v1/completions", {**body, "stream": stream})
    check(status in (502, 503) and "error" in json.loads(raw), f"router with a dead decode instance: {status} {raw}")
pools_zero(prefill, "prefill after the failures")
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
PY

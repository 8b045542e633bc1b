#!/usr/bin/env python3
"""Long requests end to end through `gyre serve --backend cuda` (issue 22 items 1 and 3).

    tools/gpu/long_context.py GYRE OUTDIR [--tokens 1048576[,524288,...]] [--stagger-s 0] [--max-new 16]
                              [--kv-cache-dtype bf16] [--config FILE] [--short-max-s 30]

Starts the server on the full-depth 32-expert benchmark config (random bf16 weights; another with
--config) with --max-model-len the longest request + --max-new + 64, chunked prefill (--max-num-batched-tokens
8192, the default --long-prefill-token-threshold) and the page pool from --gpu-memory-utilization.
Sends one streamed greedy /v1/completions request per --tokens entry (prompts of random token ids,
--max-new new tokens each, the i-th sent i * --stagger-s after the first: several long requests at
once, e.g. 131072,524288,1048576), and while they prefill a 64-token request every 5 s. Records the
server's startup line (memory: weights, KV pool, state slots, scratch), each long request's TTFT and
inter-token latencies (split into gaps while another long request was still prefilling and gaps
once every long request was decoding: decode at batch > 1 at that context), the prefill progress
every 2 s from /metrics (`prefill_marks`: seconds to 128k / 256k / 512k / 1M prefilled tokens in
all), the short requests' latencies, and the outcome, in OUTDIR/long_context.json (OUTDIR/
progress.json is rewritten every poll, so a killed run keeps its progress). ok = every long
request's usage counts its prompt tokens and every short request was answered within --short-max-s
(no starvation). Needs no reference; correctness at length is `gyre verify length`.
Runs: bench/results/long_context_89141d2/ (H200, full depth, 1,048,576 tokens: TTFT 273 s, 14.9 ms per
token, and a short request starved 268 s, fixed in 5690138), bench/results/gpu_check_5690138/long_context/
(H100, 4 layers: short requests answered in <= 1.3 s during the 1M prefill), bench/results/gpu_check_1bfb276/
and gpu_check_7bcea96/ (H100, 4 layers, four long requests at once: a short request waited 38 s, then
<= 1.43 s after the admission-room fix).
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import urllib.request


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gyre")
    ap.add_argument("out")
    ap.add_argument("--tokens", default="1048576", help="prompt length of each long request, comma-separated")
    ap.add_argument("--stagger-s", type=float, default=0.0, help="seconds between the long requests' sends")
    ap.add_argument("--max-new", type=int, default=16, help="tokens each long request generates")
    ap.add_argument("--kv-cache-dtype", default="bf16")
    ap.add_argument("--config", default="bench/configs/glm5_next_fulldepth_32experts.json")
    ap.add_argument("--chunk", type=int, default=8192)
    ap.add_argument("--timeout", type=float, default=480)
    ap.add_argument("--short-max-s", type=float, default=30,
                    help="every short request sent during the long one must be answered within this (starvation)")
    a = ap.parse_args()
    longs = [int(x) for x in str(a.tokens).split(",") if x]
    if not longs or min(longs) < 1:
        ap.error("--tokens: one or more positive lengths")
    os.makedirs(a.out, exist_ok=True)
    cfg = json.load(open(a.config))
    vocab = cfg.get("vocab_size", 154880)
    tok = f"/tmp/tok_{vocab}.json"  # a synthetic tokenizer of the config's vocabulary (prompts are ids)
    if not os.path.exists(tok):
        subprocess.run([sys.executable, "tools/bench/synthetic_tokenizer.py", "--vocab", str(vocab), "--out", tok],
                       check=True)
    log = open(os.path.join(a.out, "serve.log"), "w")
    cmd = [a.gyre, "serve", "--backend", "cuda", "--config", a.config, "--random-weights", "--port", "0",
           "--kv-cache-dtype", a.kv_cache_dtype, "--max-model-len", str(max(longs) + a.max_new + 64), "--allow-long-max-model-len",
           "--max-num-batched-tokens", str(a.chunk), "--max-num-seqs", str(max(4, len(longs) + 2)), "--gpu-memory-utilization", "0.95",
           "--no-enable-prefix-caching", "--served-model-name", "m", "--tokenizer", tok]
    res = {"command": " ".join(cmd), "tokens": longs[0] if len(longs) == 1 else longs, "stagger_s": a.stagger_s, "kv_cache_dtype": a.kv_cache_dtype, "ok": False}
    srv = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port, lines = None, []
    t0 = time.time()
    while time.time() - t0 < 240:
        line = srv.stdout.readline()
        if not line:
            break
        lines.append(line)
        log.write(line)
        log.flush()
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    res["startup"] = [l.rstrip() for l in lines[-6:]]
    res["startup_s"] = time.time() - t0
    if port is None:
        res["error"] = "server did not start"
        json.dump(res, open(os.path.join(a.out, "long_context.json"), "w"), indent=2)
        srv.kill()
        return 1
    threading.Thread(target=lambda: [log.write(l) for l in srv.stdout], daemon=True).start()

    def post(body, stream):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        return urllib.request.urlopen(req, timeout=a.timeout)

    rng = random.Random(22)
    prompts = [[rng.randrange(vocab) for _ in range(n)] for n in longs]
    done = threading.Event()
    shorts = []

    def short_loop():
        while not done.is_set():
            t = time.time()
            try:
                r = post({"model": "m", "prompt": [rng.randrange(vocab) for _ in range(64)], "max_tokens": 4,
                          "temperature": 0}, False)
                r.read()
                shorts.append({"at_s": t - t_long, "latency_s": time.time() - t, "status": r.status})
            except Exception as e:  # noqa: BLE001
                shorts.append({"at_s": t - t_long, "error": str(e)})
            done.wait(5)

    progress = []  # (seconds since the first long request, gyre_prefill_tokens_computed_total, GPU MiB used)

    def poll_loop():
        while not done.is_set():
            t = time.time() - t_long
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
                m = re.search(r"^gyre_prefill_tokens_computed_total(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.M)
                used = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                      capture_output=True, text=True, timeout=10).stdout.strip()
                progress.append((round(t, 2), float(m.group(1)) if m else None, used))
                json.dump(progress, open(os.path.join(a.out, "progress.json"), "w"))  # survives a kill
            except Exception as e:  # noqa: BLE001
                progress.append((round(t, 2), None, str(e)))
            done.wait(2)

    def long_request(i, rec):
        time.sleep(i * a.stagger_s)
        rec["sent_s"] = time.time() - t_long
        times = []
        try:
            r = post({"model": "m", "prompt": prompts[i], "max_tokens": a.max_new, "temperature": 0, "stream": True,
                      "ignore_eos": True, "stream_options": {"include_usage": True}}, True)
            usage = None
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if ev.get("usage"):
                    usage = ev["usage"]
                if ev.get("choices") and ev["choices"][0].get("text") is not None:
                    times.append(time.time() - t_long)
            rec["usage"] = usage
            rec["ok"] = bool(times) and usage is not None and usage.get("prompt_tokens") == longs[i]
        except Exception as e:  # noqa: BLE001
            rec["error"] = str(e)
            rec["ok"] = False
        rec["token_times_s"] = times  # since the first long request was sent
        rec["ttft_s"] = times[0] - rec["sent_s"] if times else None
        rec["prefill_tokens_per_s"] = longs[i] / rec["ttft_s"] if times else None

    t_long = time.time()
    threading.Thread(target=short_loop, daemon=True).start()
    threading.Thread(target=poll_loop, daemon=True).start()
    recs = [{"tokens": n} for n in longs]
    threads = [threading.Thread(target=long_request, args=(i, recs[i])) for i in range(len(longs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Inter-token gaps of each long request, split at the moment every long request had its first
    # token: before it, this request decoded beside another's long prefill; after it, every long
    # request decodes together (batch = the number still generating).
    all_first = max((r["token_times_s"][0] for r in recs if r.get("token_times_s")), default=None)
    for r in recs:
        tt = r.get("token_times_s") or []
        gaps = [(b, 1e3 * (b - a_)) for a_, b in zip(tt, tt[1:])]
        r["itl_ms"] = [g for _, g in gaps]
        if len(recs) > 1 and all_first is not None:
            r["itl_ms_beside_prefill"] = [g for t, g in gaps if t <= all_first]
            r["itl_ms_all_decoding"] = [g for t, g in gaps if t > all_first]
    main_rec = max(recs, key=lambda r: r["tokens"])
    res["long_requests"] = recs
    res["usage"] = main_rec.get("usage")
    res["ttft_s"] = main_rec.get("ttft_s")
    res["itl_ms"] = main_rec.get("itl_ms", [])
    res["prefill_tokens_per_s"] = main_rec.get("prefill_tokens_per_s")
    res["ok"] = all(r.get("ok") for r in recs)
    if any(r.get("error") for r in recs):
        res["error"] = "; ".join(f"{r['tokens']}: {r['error']}" for r in recs if r.get("error"))
    done.set()
    res["short_requests"] = shorts
    res["prefill_progress"] = progress
    lat = [x.get("latency_s") for x in shorts]
    res["short_requests_max_latency_s"] = max((x for x in lat if x is not None), default=None)
    res["short_requests_ok"] = bool(shorts) and all(x is not None and x <= a.short_max_s for x in lat)
    res["ok"] = res["ok"] and res["short_requests_ok"]
    # When the server had computed 128k / 512k / 1M prefill tokens (first poll at or past each; the
    # short requests add 64 tokens each, noted in `short_requests`): the prefill time of a prefix.
    marks = {}
    for mark in (131072, 262144, 524288, 1048576):
        if mark > sum(longs):
            continue
        hit = next((p for p in progress if p[1] is not None and p[1] >= mark), None)
        if hit:
            marks[str(mark)] = {"seconds": hit[0], "tokens_per_s": hit[1] / hit[0] if hit[0] > 0 else None}
    res["prefill_marks"] = marks
    try:
        res["metrics"] = [l for l in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
                          .decode().splitlines() if l.startswith("gyre_") and ("kv" in l or "page" in l)][:20]
    except Exception as e:  # noqa: BLE001
        res["metrics_error"] = str(e)
    srv.terminate()
    try:
        srv.wait(20)
    except subprocess.TimeoutExpired:
        srv.kill()
    json.dump(res, open(os.path.join(a.out, "long_context.json"), "w"), indent=2)
    print(json.dumps({k: res.get(k) for k in ("ok", "tokens", "ttft_s", "prefill_tokens_per_s", "short_requests_ok",
                                              "short_requests_max_latency_s", "error")}))
    for r in recs:
        print(f"long {r['tokens']}: sent {r.get('sent_s', 0):.1f} s, ttft {r.get('ttft_s')}, ok {r.get('ok')}, itl_ms",
              [round(x, 1) for x in r.get("itl_ms", [])][:40])
        if "itl_ms_all_decoding" in r and r["itl_ms_all_decoding"]:
            v = sorted(r["itl_ms_all_decoding"])
            print(f"   all decoding: median {v[len(v) // 2]:.1f} ms over {len(v)} gaps")
    print("prefill marks", json.dumps(marks))
    print("short requests", [(round(s["at_s"], 1), round(s.get("latency_s", -1), 2)) for s in shorts])
    print("\n".join(res["startup"]))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

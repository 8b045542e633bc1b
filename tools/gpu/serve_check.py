#!/usr/bin/env python3
"""GPU serving check (scripts/gpu_check.sh step `serve`): `gyre serve --backend cuda` on loopback.

Starts a CUDA server and a CPU server on each fixture, then checks through HTTP (stdlib only, no
openai package on the GPU machine):
  1. greedy /v1/completions and /v1/chat/completions, non-streaming and streaming: the CUDA
     server's text and token ids are byte-identical to the CPU server's;
  2. a streamed response reassembles to the non-streamed one and ends with [DONE] and usage;
  3. seeded sampling (temperature 0.8, top_p 0.9, top_k 50) is reproducible across two runs and
     with 8 concurrent other requests in flight; two seeds differ;
  4. logprobs / top_logprobs come back; greedy top-1 equals the sampled token;
  5. stop strings end the text; cancellation (client closes a stream) returns both pools to zero
     (/metrics kv_cache_pages_used and kda_state_slots_used);
  6. errors: 400 for an out-of-vocabulary id, 400 for a too-long request.
Writes a JSON report; exit 1 when any check fails.
"""
import argparse, http.client, json, os, re, signal, socket, subprocess, sys, threading, time


def start(gyre, args, log):
    p = subprocess.Popen([gyre, "serve", "--port", "0", *args], stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)
    lines = []
    t0 = time.time()
    while time.time() - t0 < 120:
        line = p.stdout.readline()
        if not line:
            if p.poll() is not None:
                raise RuntimeError(f"server exited {p.returncode}: {open(log).read()[-2000:]}")
            continue
        lines.append(line.strip())
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            # read the backend line too
            lines.append(p.stdout.readline().strip())
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, port, lines
    raise RuntimeError("server did not start in 120 s")


def req(port, method, path, body=None, timeout=300):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"content-type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        return r.status, json.loads(data)
    except Exception:
        return r.status, data.decode("utf-8", "replace")


def stream(port, path, body, stop_after=None):
    """SSE: returns (chunks, done_seen). stop_after=N closes the connection after N chunks."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", path, body=json.dumps({**body, "stream": True}), headers={"content-type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        return r.status, [], False
    chunks, done, buf = [], False, b""
    while True:
        line = r.fp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        payload = line[6:]
        if payload == b"[DONE]":
            done = True
            break
        chunks.append(json.loads(payload))
        if stop_after is not None and len(chunks) >= stop_after:
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
            return 200, chunks, False
    c.close()
    return 200, chunks, done


def metric(port, name):
    _, text = req(port, "GET", "/metrics")
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gyre", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fixtures", default="glm5_tiny,glm5_flat,kimi_tiny,glm5_mini")
    a = ap.parse_args()
    report = {"checks": [], "servers": {}}
    ok_all = True

    def check(name, ok, **detail):
        nonlocal ok_all
        ok_all &= bool(ok)
        report["checks"].append({"name": name, "pass": bool(ok), **detail})
        print(f"  {'ok  ' if ok else 'FAIL'} {name} {json.dumps(detail)[:300] if not ok else ''}", flush=True)

    for fx in a.fixtures.split(","):
        model = f"tests/fixtures/{fx}"
        # Fixtures without a tokenizer share glm5_tiny's (the same 1024-token vocabulary).
        extra = [] if os.path.exists(f"{model}/tokenizer.json") else ["--tokenizer", "tests/fixtures/glm5_tiny/tokenizer.json"]
        gpu, gport, glines = start(a.gyre, ["--backend", "cuda", "--model", model, "--max-num-seqs", "8",
                                            "--gpu-memory-utilization", "0.05", *extra], f"/tmp/gyre_serve_gpu_{fx}.log")
        cpu, cport, clines = start(a.gyre, ["--model", model, "--max-num-seqs", "8", *extra],
                                   f"/tmp/gyre_serve_cpu_{fx}.log")
        report["servers"][fx] = {"cuda": glines, "cpu": clines}
        try:
            prompts = ["The quick brown fox", "Hello, world! 1 2 3", "zz top", "a"]
            for i, p in enumerate(prompts):
                body = {"prompt": p, "max_tokens": 24, "temperature": 0, "ignore_eos": True, "logprobs": 2}
                sg, g = req(gport, "POST", "/v1/completions", body)
                sc, c = req(cport, "POST", "/v1/completions", body)
                same = sg == 200 and sc == 200 and g["choices"][0]["text"] == c["choices"][0]["text"]
                check(f"{fx}: greedy completion {i} identical to the CPU server", same,
                      gpu=g if not same else None, cpu=c if not same else None)
                if sg == 200:
                    lp = g["choices"][0].get("logprobs") or {}
                    tops = lp.get("top_logprobs") or []
                    toks = lp.get("tokens") or []
                    good = len(tops) == len(toks) == 24 and all(len(t) >= 1 for t in tops)
                    check(f"{fx}: logprobs {i} present (24 tokens, top_logprobs 2)", good, n=len(toks))
                    if good and sc == 200:
                        glp = lp.get("token_logprobs") or []
                        clp = (c["choices"][0].get("logprobs") or {}).get("token_logprobs") or []
                        close = len(glp) == len(clp) and all(abs(x - y) < 1e-3 for x, y in zip(glp, clp))
                        check(f"{fx}: logprobs {i} match the CPU server within 1e-3", close)
                # streaming reassembles to the same text
                st, chunks, done = stream(gport, "/v1/completions", {**body, "stream_options": {"include_usage": True}})
                text = "".join(ch["choices"][0]["text"] for ch in chunks if ch.get("choices"))
                usage = [ch["usage"] for ch in chunks if ch.get("usage")]
                check(f"{fx}: stream {i} equals the non-streamed text, [DONE], usage", st == 200 and done and sg == 200 and
                      text == g["choices"][0]["text"] and usage and usage[-1]["completion_tokens"] == 24)
            # chat
            cbody = {"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 16, "temperature": 0}
            sg, g = req(gport, "POST", "/v1/chat/completions", cbody)
            sc, c = req(cport, "POST", "/v1/chat/completions", cbody)
            check(f"{fx}: greedy chat identical to the CPU server", sg == sc == 200 and
                  g["choices"][0]["message"]["content"] == c["choices"][0]["message"]["content"])
            # seeded sampling
            sbody = {"prompt": [5, 6, 7, 8, 9, 10, 11], "max_tokens": 32, "temperature": 0.8, "top_p": 0.9, "top_k": 50,
                     "seed": 42, "ignore_eos": True, "logprobs": 0}
            ids = lambda r: r["choices"][0]["text"] if isinstance(r, dict) else r
            _, r1 = req(gport, "POST", "/v1/completions", sbody)
            _, r2 = req(gport, "POST", "/v1/completions", sbody)
            results = {}
            def crowd(k):
                results[k] = req(gport, "POST", "/v1/completions", {**sbody, "seed": 1000 + k, "prompt": [3] * (5 + 9 * k)})
            threads = [threading.Thread(target=crowd, args=(k,)) for k in range(8)]
            for t in threads: t.start()
            _, r3 = req(gport, "POST", "/v1/completions", sbody)
            for t in threads: t.join()
            _, r4 = req(gport, "POST", "/v1/completions", {**sbody, "seed": 43})
            check(f"{fx}: seeded sampling reproducible alone and in a crowd", ids(r1) == ids(r2) == ids(r3),
                  a=ids(r1), b=ids(r2), c=ids(r3))
            check(f"{fx}: another seed gives other tokens", ids(r4) != ids(r1))
            # stop string: take the greedy text's 3rd..5th characters as a stop
            _, g = req(gport, "POST", "/v1/completions", {"prompt": "The quick brown fox", "max_tokens": 24,
                                                         "temperature": 0, "ignore_eos": True})
            full = g["choices"][0]["text"]
            if len(full) >= 8:
                stop = full[4:7]
                _, s = req(gport, "POST", "/v1/completions", {"prompt": "The quick brown fox", "max_tokens": 24,
                                                             "temperature": 0, "ignore_eos": True, "stop": [stop]})
                check(f"{fx}: stop string ends the text", s["choices"][0]["finish_reason"] == "stop" and
                      stop not in s["choices"][0]["text"] and full.startswith(s["choices"][0]["text"]))
            # cancellation: close streams early; pools return to zero
            for k in range(4):
                stream(gport, "/v1/completions", {"prompt": [4] * 20, "max_tokens": 2000, "ignore_eos": True,
                                                  "temperature": 0}, stop_after=3)
            t0 = time.time()
            while time.time() - t0 < 10:
                used = (metric(gport, "gyre_kv_cache_pages_used"), metric(gport, "gyre_kda_state_slots_used"),
                        metric(gport, "gyre_num_requests_running"))
                if used == (0.0, 0.0, 0.0):
                    break
                time.sleep(0.1)
            check(f"{fx}: cancelled streams return both pools to zero", used == (0.0, 0.0, 0.0), used=used)
            # errors
            sg, g = req(gport, "POST", "/v1/completions", {"prompt": [10 ** 7], "max_tokens": 4})
            check(f"{fx}: out-of-vocabulary id is a 400", sg == 400, status=sg)
            sg, g = req(gport, "POST", "/v1/completions", {"prompt": [1, 2], "max_tokens": 10 ** 8})
            check(f"{fx}: too-long request is a 400", sg == 400, status=sg)
        finally:
            for p in (gpu, cpu):
                p.send_signal(signal.SIGTERM)
            for name, p in (("cuda", gpu), ("cpu", cpu)):
                try:
                    rc = p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    rc = "killed"
                check(f"{fx}: {name} server exits 0 on SIGTERM", rc == 0, rc=rc)
    report["pass"] = ok_all
    json.dump(report, open(a.out, "w"), indent=1)
    print("serve_check:", "PASS" if ok_all else "FAIL")
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()

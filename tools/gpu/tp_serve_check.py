#!/usr/bin/env python3
"""TP serving check (scripts/gpu_check.sh step `tp`): `gyre serve --backend cuda
--tensor-parallel-size 2 --tp-shared-gpu` (two ranks as threads sharing this GPU) against the
one-rank CUDA server on the same checkpoint, and the same with --enable-expert-parallel, and
--pipeline-parallel-size 3 (stages sharing the GPU), through HTTP:
  1. greedy /v1/completions (24 tokens) on four prompts, batched concurrently: identical text (TP
     and TP + EP against one rank);
  2. a streamed greedy chat completion: identical text to the non-streamed one of the 1-rank server;
  3. seeded sampling (temperature 0.8, top_p 0.9): the TP server gives the same text twice;
  4. /metrics pools return to zero after the requests.
  5. refusals: --tensor-parallel-size on the cpu backend exits 2; over NCCL with more ranks than
     GPUs (4 ranks, when this machine has fewer) the server exits 1 naming the GPU count.
Writes a JSON report; exit 1 when any check fails.
"""
import argparse, json, subprocess, sys, threading

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from serve_check import start, req, stream, metric  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gyre", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="tests/fixtures/glm5_mini")
    a = ap.parse_args()
    report = {"checks": [], "servers": {}}
    ok_all = True

    def check(name, ok, **detail):
        nonlocal ok_all
        ok_all &= bool(ok)
        report["checks"].append({"name": name, "pass": bool(ok), **detail})
        print(f"  {'ok  ' if ok else 'FAIL'} {name} {json.dumps(detail)[:300] if not ok else ''}", flush=True)

    common = ["--backend", "cuda", "--model", a.model, "--max-num-seqs", "8", "--gpu-memory-utilization", "0.05"]
    one, p1, l1 = start(a.gyre, common, "/tmp/gyre_tp_serve_1.log")
    two, p2, l2 = start(a.gyre, [*common, "--tensor-parallel-size", "2", "--tp-shared-gpu"], "/tmp/gyre_tp_serve_2.log")
    ep, p3, l3 = start(a.gyre, [*common, "--tensor-parallel-size", "2", "--tp-shared-gpu", "--enable-expert-parallel"],
                       "/tmp/gyre_tp_serve_ep2.log")
    pp, p4, l4 = start(a.gyre, [*common, "--pipeline-parallel-size", "3", "--tp-shared-gpu"],
                       "/tmp/gyre_tp_serve_pp3.log")
    report["servers"] = {"tp1": l1, "tp2": l2, "ep2": l3, "pp3": l4}
    try:
        prompts = ["The quick brown fox", "Hello, world! 1 2 3", "zz top", "a"]
        res = {}

        def run(port, key, p):
            res[key] = req(port, "POST", "/v1/completions",
                           {"prompt": p, "max_tokens": 24, "temperature": 0, "ignore_eos": True})

        threads = [threading.Thread(target=run, args=(port, (port, i), p))
                   for port in (p1, p2, p3, p4) for i, p in enumerate(prompts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i in range(len(prompts)):
            s1, r1 = res[(p1, i)]
            s2, r2 = res[(p2, i)]
            same = s1 == 200 and s2 == 200 and r1["choices"][0]["text"] == r2["choices"][0]["text"]
            check(f"greedy completion {i}: tp=2 identical to tp=1", same, tp1=r1 if not same else None,
                  tp2=r2 if not same else None)
            s3, r3 = res[(p3, i)]
            same = s1 == 200 and s3 == 200 and r1["choices"][0]["text"] == r3["choices"][0]["text"]
            check(f"greedy completion {i}: tp=2 + expert parallel identical to tp=1", same,
                  tp1=r1 if not same else None, ep2=r3 if not same else None)
            s4, r4 = res[(p4, i)]
            same = s1 == 200 and s4 == 200 and r1["choices"][0]["text"] == r4["choices"][0]["text"]
            check(f"greedy completion {i}: 3 pipeline stages identical to one GPU", same,
                  tp1=r1 if not same else None, pp3=r4 if not same else None)
        body = {"messages": [{"role": "user", "content": "Tell me about rivers."}], "max_tokens": 20,
                "temperature": 0, "ignore_eos": True}
        s1, r1 = req(p1, "POST", "/v1/chat/completions", body)
        st, chunks, done = stream(p2, "/v1/chat/completions", body)
        text = "".join((c.get("choices") or [{}])[0].get("delta", {}).get("content") or "" for c in chunks)
        same = s1 == 200 and st == 200 and done and text == r1["choices"][0]["message"]["content"]
        check("streamed chat on tp=2 equals the tp=1 chat", same, tp1=r1 if not same else None,
              tp2=text if not same else None)
        sb = {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0.8, "top_p": 0.9, "seed": 11}
        a1 = req(p2, "POST", "/v1/completions", sb)
        a2 = req(p2, "POST", "/v1/completions", sb)
        ok = a1[0] == 200 and a2[0] == 200 and a1[1]["choices"][0]["text"] == a2[1]["choices"][0]["text"]
        check("seeded sampling on tp=2 reproducible", ok)
        used = (metric(p2, "gyre_kv_cache_pages_used"), metric(p2, "gyre_kda_state_slots_used"))
        check("tp=2 pools back to zero", used == (0.0, 0.0), used=used)
    finally:
        for p in (one, two, ep, pp):
            p.terminate()
            try:
                p.wait(timeout=30)
            except Exception:
                p.kill()
    cpu = subprocess.run([a.gyre, "serve", "--model", a.model, "--tensor-parallel-size", "2", "--port", "0"],
                         capture_output=True, text=True, timeout=120)
    check("--tensor-parallel-size on the cpu backend: exit 2", cpu.returncode == 2, stderr=cpu.stderr[-300:])
    gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU ")
    if gpus < 4:
        nccl = subprocess.run([a.gyre, "serve", *common, "--tensor-parallel-size", "4", "--port", "0"],
                              capture_output=True, text=True, timeout=120)
        check("NCCL TP with more ranks than GPUs: exit 1 naming the GPUs",
              nccl.returncode == 1 and "GPUs" in nccl.stderr, rc=nccl.returncode, stderr=nccl.stderr[-300:])
    report["pass"] = ok_all
    json.dump(report, open(a.out, "w"), indent=1)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())

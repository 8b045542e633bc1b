#!/usr/bin/env python3
"""Multi-turn chat workload against a running `gyre serve`: prefix cache on vs off.

Each of C conversations runs T turns; turn k's prompt is turn k-1's prompt, its completion and U
new words (a chat that extends its history). Conversations are interleaved round-robin, one
request at a time, so each request's TTFT and its computed prefill tokens (the delta of
gyre_prefill_tokens_computed_total on /metrics) belong to it alone. Prints one JSON object.

  bench/prefix_multiturn.py --url http://127.0.0.1:8000 [--conversations 4] [--turns 6]
      [--new-words 48] [--max-tokens 24] [--label on]

With --new-only, each later turn is followed by a request whose prompt is only that turn's new
text (the last completion and the new words), the "TTFT of its new tokens alone" of issue 15's
target (turn-k TTFT within 1.2x of it); the report gives the ratio of the medians. Those requests
are new text, so they hit at most blocks that happen to repeat.

Python 3 standard library only. Greedy (temperature 0), so on and off runs see the same texts.
"""
import argparse
import http.client
import json
import random
import statistics
import time
import urllib.parse

WORDS = ("the river ran past the old mill and into the valley where the farmers kept their sheep "
         "in winter a cold wind came down from the hills and the children stayed inside by the fire "
         "reading stories of kings and ships and distant cities across the sea").split()


def metric(conn_args, name):
    host, port = conn_args
    c = http.client.HTTPConnection(host, port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise SystemExit(f"metric {name} not found")


def complete(conn_args, model, prompt, max_tokens):
    """Streams one completion; returns (ttft seconds, text)."""
    host, port = conn_args
    c = http.client.HTTPConnection(host, port, timeout=600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "ignore_eos": True})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"content-type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"HTTP {r.status}: {r.read()[:300]}")
    ttft, text = None, []
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        piece = chunk["choices"][0].get("text", "")
        if piece and ttft is None:
            ttft = time.perf_counter() - t0
        text.append(piece)
    return ttft if ttft is not None else time.perf_counter() - t0, "".join(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--conversations", type=int, default=4)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--new-words", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--label", default="")
    ap.add_argument("--new-only", action="store_true", help="also time each later turn's new text alone")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    conn = (u.hostname, u.port or 80)
    c = http.client.HTTPConnection(*conn, timeout=60)
    c.request("GET", "/v1/models")
    model = json.loads(c.getresponse().read())["data"][0]["id"]
    rng = random.Random(7)
    convos = [" ".join(rng.choice(WORDS) for _ in range(a.new_words)) for _ in range(a.conversations)]
    per_turn = [[] for _ in range(a.turns)]  # (ttft, computed, prompt tokens)
    new_only = []  # (ttft, prompt tokens) of each later turn's new text alone
    last_new = list(convos)
    for turn in range(a.turns):
        for i in range(a.conversations):
            before = metric(conn, "gyre_prefill_tokens_computed_total")
            p_before = metric(conn, "gyre_prompt_tokens_total")
            ttft, text = complete(conn, model, convos[i], a.max_tokens)
            computed = metric(conn, "gyre_prefill_tokens_computed_total") - before
            prompt_tokens = metric(conn, "gyre_prompt_tokens_total") - p_before
            per_turn[turn].append((ttft, computed, prompt_tokens))
            if a.new_only and turn > 0:
                p_before = metric(conn, "gyre_prompt_tokens_total")
                alone, _ = complete(conn, model, last_new[i], a.max_tokens)
                new_only.append((alone, metric(conn, "gyre_prompt_tokens_total") - p_before))
            last_new[i] = text + " " + " ".join(rng.choice(WORDS) for _ in range(a.new_words))
            convos[i] += last_new[i]
    later = [x for t in per_turn[1:] for x in t]
    out = {
        "label": a.label,
        "workload": {"conversations": a.conversations, "turns": a.turns, "new_words_per_turn": a.new_words,
                     "max_tokens": a.max_tokens, "temperature": 0},
        "per_turn": [{"turn": k, "ttft_ms_p50": 1e3 * statistics.median(x[0] for x in t),
                      "prompt_tokens_mean": statistics.mean(x[2] for x in t),
                      "prefill_tokens_computed_mean": statistics.mean(x[1] for x in t)} for k, t in enumerate(per_turn)],
        "turns_after_first": {
            "ttft_ms_p50": 1e3 * statistics.median(x[0] for x in later),
            "ttft_ms_p99": 1e3 * sorted(x[0] for x in later)[max(0, int(0.99 * len(later)) - 1)],
            "prompt_tokens_total": sum(x[2] for x in later),
            "prefill_tokens_computed_total": sum(x[1] for x in later),
        },
        "prefix_cache_hits_total": metric(conn, "gyre_prefix_cache_hits_total"),
        "prefix_cache_queries_total": metric(conn, "gyre_prefix_cache_queries_total"),
        "kda_checkpoint_bytes": metric(conn, "gyre_kda_checkpoint_bytes"),
    }
    if new_only:
        alone_p50 = 1e3 * statistics.median(x[0] for x in new_only)
        out["new_text_alone"] = {"ttft_ms_p50": alone_p50, "prompt_tokens_mean": statistics.mean(x[1] for x in new_only),
                                 "turn_ttft_over_new_text_alone_p50": out["turns_after_first"]["ttft_ms_p50"] / alone_p50,
                                 "target": "<= 1.2 (issue 15)"}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

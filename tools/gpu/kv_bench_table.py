#!/usr/bin/env python3
"""Summarizes scripts/gpu_check.sh's kvcache step: one `gyre bench model --kv-cache-dtype X` JSON per
dtype in DIR (bench_model_<dtype>.json) -> a table on stdout and DIR/summary.json.

Per dtype: the page pool's bytes (same token capacity for every dtype, so the ratio is the cache's
size ratio), prefill tokens/s, and per decode batch the graph step time, tokens/s and the eager
step's mla.attention time (the op that reads the latent rows)."""
import json
import os
import sys


def main(d):
    rows = []
    for kv in ("fp32", "bf16", "fp8", "int8"):
        p = os.path.join(d, f"bench_model_{kv}.json")
        if not os.path.exists(p):
            continue
        j = json.load(open(p))
        r = {"kv_cache_dtype": kv, "kv_bytes": j["model"]["kv_bytes"],
             "prefill_tokens_per_s": {str(x["prompt_tokens"]): x["tokens_per_s"] for x in j["prefill"]},
             "prefill_mla_attention_ms": {str(x["prompt_tokens"]): x["last_chunk_op_ms"].get("dsa/mla.attention")
                                          for x in j["prefill"]},
             "decode": []}
        for x in j["decode"]:
            r["decode"].append({"batch": x["batch"], "context": x["context"], "step_ms": x["step_ms_median"],
                                "tokens_per_s": x["tokens_per_s"],
                                "eager_mla_attention_ms": x["eager_step_op_ms"].get("dsa/mla.attention"),
                                "eager_dsa_pool_keys_ms": x["eager_step_op_ms"].get("dsa/dsa.pool_keys")})
        rows.append(r)
    if not rows:
        print("kv_bench_table: no bench_model_<dtype>.json in", d)
        return 1
    base = rows[0]
    print(f"{'dtype':6} {'kv MiB':>8} {'vs fp32':>7} | decode batch: step ms / mla.attention ms (eager)")
    for r in rows:
        dec = "  ".join(f"b{x['batch']}: {x['step_ms']:.3f} / {x['eager_mla_attention_ms']:.3f}" for x in r["decode"])
        print(f"{r['kv_cache_dtype']:6} {r['kv_bytes'] / 2**20:8.1f} {r['kv_bytes'] / base['kv_bytes']:7.3f} | {dec}")
    json.dump({"gpu": json.load(open(os.path.join(d, f"bench_model_{rows[0]['kv_cache_dtype']}.json")))["gpu"],
               "rows": rows}, open(os.path.join(d, "summary.json"), "w"), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

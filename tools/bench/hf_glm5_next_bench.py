#!/usr/bin/env python3
"""transformers 5.17 side of `gyre bench model --backend cuda` (run on the GPU machine).

Builds Glm5NextForConditionalGeneration from a gyre bench config (text fields; a tiny vision tower
so that only the text model costs memory) with random bf16 weights on the GPU, then times, like
gyre: prefill of one prompt per length (logits of the last token only) and decode steps with the
KV cache at several batch sizes after `--context` tokens of history. Every measurement is guarded:
an error (out of memory, unsupported path) or a measurement over the time budget is recorded and
the next one runs.

  python3 tools/bench/hf_glm5_next_bench.py --config bench/configs/glm5_next_4layer.json --out hf.json
"""
import argparse
import json
import statistics
import time
import traceback

import torch

TINY_VISION = dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=64,
                   projection_intermediate_size=128)


def sync():
    torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompt-lens", default="4096,32768")
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=60.0, help="skip larger sizes once one takes longer")
    ap.add_argument("--max-forward-tokens", type=int, default=4096,
                    help="tokens per forward call; longer prompts and batched contexts are fed in pieces "
                         "through the cache (the torch KDA fallback needs O(tokens) x 64 x 64 x K memory)")
    a = ap.parse_args()

    import transformers
    from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration

    torch.backends.cuda.matmul.allow_tf32 = False
    text = json.load(open(a.config))
    text.pop("model_type", None)
    cfg = Glm5NextConfig(vision_config=dict(TINY_VISION), **text)
    res = {"transformers": transformers.__version__, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "config_file": a.config, "errors": []}
    t0 = time.time()
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Glm5NextForConditionalGeneration._from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    sync()
    res["build_s"] = time.time() - t0
    res["params"] = sum(p.numel() for p in model.parameters())
    V = cfg.text_config.vocab_size
    res["max_forward_tokens"] = a.max_forward_tokens

    def feed(ids):
        """Prefill `ids` [B, T] in pieces of at most max_forward_tokens tokens; returns the last output."""
        B, T = ids.shape
        step = max(1, a.max_forward_tokens // B)
        pkv, out = None, None
        for p in range(0, T, step):
            out = model(input_ids=ids[:, p:p + step], past_key_values=pkv, use_cache=True, logits_to_keep=1)
            pkv = out.past_key_values
        return out

    res["prefill"] = []
    for T in [int(x) for x in a.prompt_lens.split(",") if x]:
        try:
            ids = torch.randint(0, V, (1, T), device="cuda")
            times = []
            for _ in range(2):
                sync()
                s = time.time()
                with torch.no_grad():
                    feed(ids)
                sync()
                times.append(time.time() - s)
                if times[-1] > a.budget_s:
                    break
            res["prefill"].append({"prompt_tokens": T, "seconds": min(times), "tokens_per_s": T / min(times)})
            print(f"hf prefill {T}: {T / min(times):.0f} tokens/s", flush=True)
            if min(times) > a.budget_s:
                res["errors"].append(f"prefill: stopped after {T} tokens (over the {a.budget_s} s budget)")
                break
        except Exception as e:  # noqa: BLE001 (recorded, the next measurement runs)
            res["errors"].append(f"prefill {T}: {type(e).__name__}: {str(e)[:300]}")
            traceback.print_exc()
            torch.cuda.empty_cache()
            break

    res["decode"] = []
    for B in [int(x) for x in a.batches.split(",") if x]:
        try:
            ids = torch.randint(0, V, (B, a.context), device="cuda")
            with torch.no_grad():
                out = feed(ids)
                pkv = out.past_key_values
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                times = []
                for i in range(a.steps + 2):
                    sync()
                    s = time.time()
                    out = model(input_ids=nxt, past_key_values=pkv, use_cache=True)
                    pkv = out.past_key_values
                    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                    sync()
                    if i >= 2:
                        times.append(time.time() - s)
            step = statistics.median(times)
            res["decode"].append({"batch": B, "context": a.context, "step_ms_median": step * 1e3, "tokens_per_s": B / step})
            print(f"hf decode batch {B}: {B / step:.1f} tokens/s ({step * 1e3:.2f} ms/step)", flush=True)
            del pkv, out
            torch.cuda.empty_cache()
            if step * a.steps > a.budget_s:
                res["errors"].append(f"decode: stopped after batch {B} (over the budget)")
                break
        except Exception as e:  # noqa: BLE001
            res["errors"].append(f"decode {B}: {type(e).__name__}: {str(e)[:300]}")
            traceback.print_exc()
            torch.cuda.empty_cache()
            break
    json.dump(res, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()

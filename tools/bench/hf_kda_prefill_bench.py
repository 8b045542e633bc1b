#!/usr/bin/env python3
"""transformers' KDA chunked prefill at gyre's benchmark shapes (run on the GPU machine).

Times the pure-torch chunked KDA that transformers 5.17 falls back to without flash-linear-attention
(`chunk_kimi_delta_attention` in modeling_glm5_next), batch 1, H = 64, K = V = 128, fp32 inputs like
gyre's kernels, for each T; records tokens/s or the error (the fallback materialises per-chunk
[64, 64, K] decay tensors and runs out of memory at long T). The function's signature is read at
run time and written to the output, so a changed signature is visible rather than guessed.

  python3 tools/bench/hf_kda_prefill_bench.py --out hf_kda.json [--lens 4096,16384,65536]
"""
import argparse
import inspect
import json
import time
import traceback

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--lens", default="4096,16384,65536")
    ap.add_argument("--heads", type=int, default=64)
    ap.add_argument("--dim", type=int, default=128)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    import transformers
    from transformers.models.glm5_next import modeling_glm5_next as m

    fn = m.chunk_kimi_delta_attention
    sig = inspect.signature(fn)
    res = {"transformers": transformers.__version__, "gpu": torch.cuda.get_device_name(0), "function":
           f"{fn.__module__}.{fn.__name__}{sig}", "heads": a.heads, "dim": a.dim, "runs": [], "errors": []}
    names = list(sig.parameters)
    H, K = a.heads, a.dim
    for T in [int(x) for x in a.lens.split(",") if x]:
        try:
            torch.manual_seed(0)
            q = torch.randn(1, T, H, K, device="cuda")
            k = torch.randn(1, T, H, K, device="cuda")
            v = torch.randn(1, T, H, K, device="cuda")
            g = -torch.rand(1, T, H, K, device="cuda") * 0.1
            beta = torch.rand(1, T, H, device="cuda")
            kw = {}
            for n, val in (("initial_state", None), ("output_final_state", True), ("use_qk_l2norm_in_kernel", True)):
                if n in names:
                    kw[n] = val
            times = []
            for _ in range(3):
                torch.cuda.synchronize()
                s = time.time()
                with torch.no_grad():
                    fn(q, k, v, g, beta, **kw)
                torch.cuda.synchronize()
                times.append(time.time() - s)
            best = min(times[1:]) if len(times) > 1 else times[0]
            res["runs"].append({"T": T, "seconds": best, "tokens_per_s": T / best})
            print(f"transformers chunk KDA T={T}: {T / best:.0f} tokens/s", flush=True)
        except Exception as e:  # noqa: BLE001 (recorded; the next length runs)
            res["errors"].append(f"T={T}: {type(e).__name__}: {str(e)[:300]}")
            traceback.print_exc()
        torch.cuda.empty_cache()
    json.dump(res, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()

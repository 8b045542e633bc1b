#!/usr/bin/env python3
"""Wraps `gyre quantize-eval --json` output into bench/results/cpu_quant_accuracy.json with the
machine, the commit and the configuration (docs/quantization.md "Accuracy").

usage: accuracy_report.py EVAL.json[,EVAL2.json ...] COMMIT[,COMMIT2 ...] COMMAND OUT.json [DIR=POLICY ...]

Several eval files (one commit each) are merged: each result records its commit, and a result
whose label (folder, plus " (weight-only)") already came from an earlier file is dropped.

Each DIR=POLICY names the policy of a quantized folder (e.g. the --keep patterns used); it is
added to that result as "policy".
"""
import json
import os
import platform
import subprocess
import sys


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    eval_paths, commits, command, out_path = sys.argv[1:5]
    policies = dict(a.split("=", 1) for a in sys.argv[5:])
    res, seen = None, set()
    for path, commit in zip(eval_paths.split(","), commits.split(",")):
        one = json.load(open(path))
        if res is None:
            res = dict(one, results=[])
        for r in one["results"]:
            if r["model"] in seen:
                continue
            seen.add(r["model"])
            r["commit"] = commit
            res["results"].append(r)
    commit = commits
    for r in res["results"]:
        base = r["model"].replace(" (weight-only)", "")
        r["policy"] = policies.get(base, "quant/policy.h default")
        if r.get("weight_only"):
            r["policy"] += "; weight-only ablation (activations not quantized)"
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    report = {
        "what": "W8A8 accuracy vs the unquantized model on held-out text (gyre quantize-eval)",
        "machine": {"cpu": cpu_model(), "threads": os.cpu_count(), "os": platform.platform(),
                    "loadavg_1m_at_end": load, "note": "shared machine; OMP_NUM_THREADS=2"},
        "commit": commit,
        "command": command,
        "config": {
            "model": "tests/fixtures/glm5_mini (trained, docs/training.md)",
            "text": res["text"], "ctx": res["ctx"],
            "activations": "fp32 (CPU Model, --act f32)",
            "schemes": {
                "fp8-block": "weights e4m3 + fp32 scale_inv per 128x128 block; activations e4m3 per token "
                             "per 128-channel group (dynamic); quant_method fp8",
                "int8": "weights int8 per output channel (symmetric); activations int8 per token "
                        "(dynamic, symmetric); int32 sums; quant_method gyre-int8"},
            "kept_high_precision": "embeddings, lm_head, MTP shared_head, MoE router + bias, norms, "
                                   "hyper-connections, KDA gate path (f_a/f_b, b_proj, g_a/g_b, A_log, "
                                   "dt_bias, conv), indexer weights_proj/compress gate/ape (quant/policy.h)",
        },
        "results": res["results"],
    }
    json.dump(report, open(out_path, "w"), indent=2)
    open(out_path, "a").write("\n")


if __name__ == "__main__":
    main()

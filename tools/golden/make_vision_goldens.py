#!/usr/bin/env python3
"""Record vision-tower goldens for tests/fixtures/glm5_tiny from transformers.

Usage:  python3 tools/golden/make_vision_goldens.py OUTDIR [--fixture tests/fixtures/glm5_tiny]

Needs torch, transformers 5.17 (glm5_next) and safetensors; CUDA if available (else CPU). No network.
Reads the existing fixture (its vision weights are already on disk) and writes
  OUTDIR/vision_golden.safetensors   inputs + reference outputs (fp32)
  OUTDIR/vision_golden.json          shapes, seeds, ids, versions, notes
  OUTDIR/make_vision_goldens.log     this run's log

Tensors:
  pixel_values [N, 1176] f32, grid_thw [n_img, 3] i32       inputs (seeded uniform floats, not zeros)
  patch_embed [N, D], block0 [N, D], post_layernorm [N, D]   tower intermediates
  downsample [N/4, O]                                        downsample conv output (last_hidden_state)
  image_embeds [N/4, O]                                      merged output, one row per LLM image token
  rope_cos, rope_sin [N, head_dim]                           the tower's rotary tables
  input_ids [T] i32, logits [T, V] f32                       full model, prompt with image placeholders

The tiny text vocabulary (1024) cannot embed the real placeholder ids (154830 / 154854 / 154831), so the
run overrides image_token_id in the loaded config and uses trained ids as image start / end stand-ins; the ids
used are recorded in the json ("ids").
"""

import argparse
import json
import os
import sys
import time
import traceback

import torch

GRIDS = [[1, 4, 6], [1, 2, 4]]
PIXEL_SEED = 20261204
PROMPT_SEED = 20261205
# Stand-ins inside the tiny vocabulary (trained ids 0..1013); the random text avoids them.
IMAGE_TOKEN = 1010
IMAGE_START = 1011
IMAGE_END = 1012
TEXT_ID_MAX = 1000  # text ids drawn from [0, 1000)

LOG_PATH = None


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    if LOG_PATH:
        with open(LOG_PATH, "a", encoding="utf-8") as f:
            f.write(s + "\n")


def versions():
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": sys.version.split()[0],
    }


def make_pixels(vcfg):
    per_patch = vcfg.in_channels * vcfg.temporal_patch_size * vcfg.patch_size * vcfg.patch_size
    n = sum(t * h * w for t, h, w in GRIDS)
    g = torch.Generator().manual_seed(PIXEL_SEED)
    # Roughly the range of CLIP-normalised pixels.
    return (torch.rand(n, per_patch, generator=g) * 4.0 - 2.0).to(torch.float32)


def make_prompt(merge):
    g = torch.Generator().manual_seed(PROMPT_SEED)

    def text(k):
        return torch.randint(0, TEXT_ID_MAX, (k,), generator=g).tolist()

    ids = text(5)
    for t, h, w in GRIDS:
        ids += [IMAGE_START] + [IMAGE_TOKEN] * (t * h * w // (merge * merge)) + [IMAGE_END]
        ids += text(4)
    return torch.tensor(ids, dtype=torch.long)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--fixture", default=os.path.join(here, "..", "..", "tests", "fixtures", "glm5_tiny"))
    args = ap.parse_args()
    out = os.path.abspath(args.outdir)
    os.makedirs(out, exist_ok=True)
    global LOG_PATH
    LOG_PATH = os.path.join(out, "make_vision_goldens.log")

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    log(f"versions: {versions()} device={dev}")
    t0 = time.time()

    from safetensors.torch import save_file
    from transformers import Glm5NextForConditionalGeneration

    fx = os.path.abspath(args.fixture)
    model = Glm5NextForConditionalGeneration.from_pretrained(fx, dtype=torch.float32, attn_implementation="sdpa")
    if isinstance(model, tuple):
        model = model[0]
    model = model.to(dev).eval()
    for c in {id(model.config): model.config, id(model.model.config): model.model.config}.values():
        c.image_token_id = IMAGE_TOKEN
    vis = model.model.visual
    vcfg = vis.config
    merge = vcfg.spatial_merge_size

    pixel_values = make_pixels(vcfg)
    grid_thw = torch.tensor(GRIDS, dtype=torch.long)

    caps = {}

    def hook(name):
        def fn(_m, _a, o):
            caps[name] = (o[0] if isinstance(o, tuple) else o).detach().float().cpu().clone()

        return fn

    hs = [
        vis.patch_embed.register_forward_hook(hook("patch_embed")),
        vis.blocks[0].register_forward_hook(hook("block0")),
        vis.post_layernorm.register_forward_hook(hook("post_layernorm")),
        vis.rotary_pos_emb.register_forward_hook(
            lambda _m, _a, o: caps.update(rope_cos=o[0].detach().float().cpu(), rope_sin=o[1].detach().float().cpu())
        ),
    ]
    with torch.no_grad():
        feats = model.model.get_image_features(pixel_values.to(dev), grid_thw.to(dev))
    for h in hs:
        h.remove()
    image_embeds = torch.cat(list(feats.pooler_output), dim=0).float().cpu()
    downsample = feats.last_hidden_state.float().cpu()
    log(f"image_embeds {tuple(image_embeds.shape)} downsample {tuple(downsample.shape)}")

    prompt = make_prompt(merge)
    n_img_tok = int((prompt == IMAGE_TOKEN).sum())
    assert n_img_tok == image_embeds.shape[0], (n_img_tok, image_embeds.shape)
    with torch.no_grad():
        o = model(
            input_ids=prompt[None].to(dev),
            pixel_values=pixel_values.to(dev),
            image_grid_thw=grid_thw.to(dev),
            use_cache=False,
        )
        o_text = model(input_ids=prompt[None].to(dev), use_cache=False)
    logits = o.logits[0].float().cpu()
    logits_text = o_text.logits[0].float().cpu()
    d_img = (logits[-1] - logits_text[-1]).abs().max().item()
    log(f"logits {tuple(logits.shape)}; last-token |with images - placeholder embeddings| max {d_img:.3e}")

    # Cross-check the tower on the CPU (fp32) when the golden came from CUDA.
    cpu_check = None
    if dev == "cuda":
        try:
            vis_cpu = vis.to("cpu")
            with torch.no_grad():
                o_cpu = vis_cpu(pixel_values, grid_thw=grid_thw).pooler_output.float()
            cpu_check = ((o_cpu - image_embeds).norm() / image_embeds.norm()).item()
            log(f"tower CPU vs CUDA rel-L2 {cpu_check:.3e}")
        except Exception:
            log(f"CPU cross-check failed:\n{traceback.format_exc()}")

    t = {
        "pixel_values": pixel_values.contiguous(),
        "grid_thw": grid_thw.to(torch.int32).contiguous(),
        "patch_embed": caps["patch_embed"].contiguous(),
        "block0": caps["block0"].contiguous(),
        "post_layernorm": caps["post_layernorm"].contiguous(),
        "downsample": downsample.contiguous(),
        "image_embeds": image_embeds.contiguous(),
        "rope_cos": caps["rope_cos"].contiguous(),
        "rope_sin": caps["rope_sin"].contiguous(),
        "input_ids": prompt.to(torch.int32).contiguous(),
        "logits": logits.contiguous(),
        "logits_text_only": logits_text.contiguous(),
    }
    save_file(t, os.path.join(out, "vision_golden.safetensors"), metadata={"format": "pt"})
    meta = {
        "tensors": {k: [str(v.dtype).replace("torch.", ""), list(v.shape)] for k, v in t.items()},
        "grids": GRIDS,
        "pixel_seed": PIXEL_SEED,
        "pixel_rule": "torch.rand(N, 1176, Generator(seed)) * 4 - 2, fp32",
        "prompt_seed": PROMPT_SEED,
        "ids": {"image_token_id": IMAGE_TOKEN, "image_start": IMAGE_START, "image_end": IMAGE_END},
        "input_ids": prompt.tolist(),
        "device": dev,
        "dtype": "float32 (from_pretrained dtype=float32, bf16 weights upcast), TF32 off, sdpa",
        "tower_cpu_vs_device_rel_l2": cpu_check,
        "last_logit_max_change_from_images": d_img,
        "versions": versions(),
        "notes": "image_token_id overridden in the loaded config (the fixture's 154854 is outside the tiny vocab); "
        "image start/end are stand-in trained ids. logits_text_only: the same ids without pixel_values "
        "(placeholder embeddings kept). block0 = output of visual.blocks[0]; downsample = last_hidden_state.",
    }
    with open(os.path.join(out, "vision_golden.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    log(f"done in {time.time() - t0:.1f}s -> {out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        log(f"FAILED:\n{traceback.format_exc()}")
        sys.exit(1)

#!/usr/bin/env python3
"""Train gyre's bundled model: a small glm5_next checkpoint with an MTP layer, on real English text.

Runs on the GPU machine (torch 2.11, transformers 5.17, tokenizers 0.23; no network). Subcommands:

  prepare --corpus build/corpus/corpus.tar.xz --work W
      train the byte-level BPE tokenizer on the training split, tokenize both splits to uint16 arrays
  train --work W --piece-seconds S [--total-seconds T]
      one resumable piece: loads W/ckpt.pt if present, trains until S seconds have passed (or the
      schedule ends), saves W/ckpt.pt. The first piece times its first steps and fixes the schedule
      length (total_steps) from --total-seconds; later pieces read it from the checkpoint.
  export --work W --out DIR
      bf16 checkpoint in the glm5_next format (sharded safetensors + index), the MTP layer appended as
      layers.{num_hidden_layers}.*, tokenizer files, chat template, loss curve
  goldens --model DIR --work W
      reference outputs of transformers (fp32, TF32 off) for the parity tests: golden_fp32.safetensors
      (the make_goldens.py format, plus MTP logits) and golden_long.safetensors (a >=2k-token prompt)
  eval --model DIR --text FILE [--ctx N]
      held-out loss and MTP acceptance measured with transformers, windows as `gyre eval` makes them

The MTP layer (transformers has none; the structure is ours, see docs/engine.md "MTP layer"):
  x_t = eh_proj(cat[enorm(embed(ids[t+1])), hnorm(h_t)]), h_t = the stream mean before the final norm;
  x += MLA(input_layernorm(x)) (NoPE, dense causal, no indexer); x += MLP(post_attention_layernorm(x));
  logits_t = shared_head.head(shared_head.norm(x_t)), a guess of ids[t+2]. In training, shared_head.head
  is lm_head (DeepSeek-V3 shares it); export stores the copy under the checkpoint's name.
"""

import argparse
import json
import lzma
import math
import os
import shutil
import sys
import tarfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools", "golden"))
import make_goldens as mg  # noqa: E402  (tokenizer split pattern, special tokens, golden helpers)

SEED = 20261203
VOCAB_TOTAL = 4096
SEQ = 1024  # training context (tokens per row; each row reads SEQ + 2 tokens for the MTP target)
BATCH = 16
MTP_WEIGHT = 0.3
BIAS_UPDATE = 1e-3  # aux-loss-free balancing: e_score_correction_bias += u * sign(mean load - load)
LR = 2e-3
LR_MIN_FRAC = 0.1
WARMUP = 60
WEIGHT_DECAY = 0.1
CLIP = 1.0
KEEP_FP32 = ("e_score_correction_bias", "conv1d", "dt_bias", "A_log")

TEXT = dict(
    vocab_size=VOCAB_TOTAL,
    hidden_size=256,
    intermediate_size=512,
    moe_intermediate_size=64,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=4,
    q_lora_rank=128,
    kv_lora_rank=128,
    qk_nope_head_dim=64,
    v_head_dim=64,
    qk_rope_head_dim=0,
    index_n_heads=4,
    index_head_dim=32,
    index_topk=128,  # 32 pools of 4: sparse beyond 131 visible tokens, well inside the 1024 context
    index_kpool=4,
    linear_num_heads=4,
    linear_head_dim=64,
    linear_conv_kernel_dim=4,
    n_routed_experts=8,
    num_experts_per_tok=2,
    n_shared_experts=1,
    n_group=1,
    topk_group=1,
    hc_mult=4,
    layer_types=["linear_attention", "linear_attention", "deepseek_sparse_attention"] * 2,
    mlp_layer_types=["dense"] + ["sparse"] * 5,
    max_position_embeddings=1048576,
)
# GLM-4.5V's image / video placeholders, so the config's media ids lie inside this vocabulary.
MEDIA_TOKENS = {"image_start_token_id": "<|begin_of_image|>", "image_end_token_id": "<|end_of_image|>",
                "image_token_id": "<|image|>", "video_start_token_id": "<|begin_of_video|>",
                "video_end_token_id": "<|end_of_video|>", "video_token_id": "<|video|>"}
VISION = dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=256,
              projection_intermediate_size=128)


def log(*a):
    print(*a, flush=True)


def jdump(obj, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


# ----------------------------------------------------------------------------------------------
# Data and tokenizer
# ----------------------------------------------------------------------------------------------


def read_corpus(path):
    """train / heldout documents from the corpus tarball (tools/corpus/build_corpus.sh)."""
    docs = {"train": [], "heldout": []}
    manifest = None
    with tarfile.open(path, "r:xz") as tf:
        for m in tf.getmembers():
            name = os.path.basename(m.name)
            f = tf.extractfile(m)
            if f is None:
                continue
            if name == "manifest.json":
                manifest = json.load(f)
            for split in docs:
                if name == f"{split}.jsonl":
                    for line in f:
                        docs[split].append(json.loads(line)["text"])
    return docs, manifest


def train_tokenizer(texts, outdir):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials, added = mg.SPECIAL_TOKENS + list(MEDIA_TOKENS.values()), mg.NONSPECIAL_ADDED
    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(mg.SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trained = VOCAB_TOTAL - len(specials) - len(added)
    trainer = trainers.BpeTrainer(vocab_size=trained, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    t0 = time.time()
    tok.train_from_iterator(texts, trainer=trainer)
    assert tok.get_vocab_size(with_added_tokens=False) == trained
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in added])
    assert tok.get_vocab_size(with_added_tokens=True) == VOCAB_TOTAL
    os.makedirs(outdir, exist_ok=True)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                 model_max_length=1048576, clean_up_tokenization_spaces=False)
    hf.save_pretrained(outdir)
    disk = Tokenizer.from_file(os.path.join(outdir, "tokenizer.json"))
    cases = []
    for text in mg.TOKENIZER_CASES + [t[:2000] for t in texts[:3] + texts[-1:]]:
        enc = disk.encode(text, add_special_tokens=False)
        cases.append({"text": text, "ids": list(enc.ids), "tokens": list(enc.tokens),
                      "decoded": disk.decode(list(enc.ids), skip_special_tokens=False),
                      "decoded_skip_special": disk.decode(list(enc.ids), skip_special_tokens=True)})
    jdump(cases, os.path.join(outdir, "cases.json"))
    log(f"[tok] trained {trained} merges+alphabet in {time.time() - t0:.1f}s")
    return disk


def cmd_prepare(a):
    os.makedirs(a.work, exist_ok=True)
    docs, manifest = read_corpus(a.corpus)
    log(f"[data] {len(docs['train'])} train / {len(docs['heldout'])} held-out documents")
    tok = train_tokenizer(docs["train"], os.path.join(a.work, "tokenizer"))
    eos = tok.token_to_id("<|endoftext|>")
    stats = {}
    for split, texts in docs.items():
        t0 = time.time()
        encs = tok.encode_batch(texts, add_special_tokens=False)
        arr = np.fromiter((i for e in encs for i in (*e.ids, eos)), dtype=np.uint16)
        arr.tofile(os.path.join(a.work, f"{split}.u16"))
        nbytes = sum(len(t.encode("utf-8")) for t in texts)
        stats[split] = {"documents": len(texts), "tokens": int(arr.size), "bytes": nbytes,
                        "bytes_per_token": nbytes / max(1, arr.size - len(texts))}
        log(f"[data] {split}: {arr.size} tokens ({stats[split]['bytes_per_token']:.2f} B/token) "
            f"in {time.time() - t0:.1f}s")
    # Held-out text for `gyre eval`: the first held-out documents, about 64k tokens.
    sample, n = [], 0
    for t in docs["heldout"]:
        sample.append(t)
        n += len(tok.encode(t, add_special_tokens=False).ids)
        if n > 65536:
            break
    with open(os.path.join(a.work, "heldout_eval.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(sample))
    jdump({"corpus_manifest": manifest, "tokenized": stats, "eval_text_documents": len(sample)},
          os.path.join(a.work, "data.json"))


# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------


def build_config(tok_dir):
    from tokenizers import Tokenizer
    from transformers import Glm5NextConfig

    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    eot, user, obs = (tok.token_to_id(s) for s in ("<|endoftext|>", "<|user|>", "<|observation|>"))
    text = dict(TEXT, pad_token_id=eot, bos_token_id=None, eos_token_id=[eot, user, obs])
    media = {k: tok.token_to_id(v) for k, v in MEDIA_TOKENS.items()}
    return Glm5NextConfig(text_config=text, vision_config=dict(VISION), tie_word_embeddings=False, **media)


class RMSNorm(nn.Module):
    """The text RMSNorm of glm5_next: w * (x * rsqrt(mean(x^2) + eps)) rounded to x's dtype first."""

    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


class MtpAttention(nn.Module):
    """NoPE MLA with the checkpoint's projection names, dense causal, no indexer."""

    def __init__(self, tc):
        super().__init__()
        D, H = tc.hidden_size, tc.num_attention_heads
        self.H, self.nope, self.v = H, tc.qk_nope_head_dim, tc.v_head_dim
        self.q_a_proj = nn.Linear(D, tc.q_lora_rank, bias=False)
        self.q_a_layernorm = RMSNorm(tc.q_lora_rank, tc.rms_norm_eps)
        self.q_b_proj = nn.Linear(tc.q_lora_rank, H * self.nope, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(D, tc.kv_lora_rank, bias=False)
        self.kv_a_layernorm = RMSNorm(tc.kv_lora_rank, tc.rms_norm_eps)
        self.kv_b_proj = nn.Linear(tc.kv_lora_rank, H * (self.nope + self.v), bias=False)
        self.o_proj = nn.Linear(H * self.v, D, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(B, T, self.H, self.nope).transpose(1, 2)
        kv = self.kv_b_proj(self.kv_a_layernorm(self.kv_a_proj_with_mqa(x))).view(B, T, self.H, self.nope + self.v)
        k, v = kv.transpose(1, 2).split([self.nope, self.v], dim=-1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.nope ** -0.5)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.H * self.v))


class MtpLayer(nn.Module):
    def __init__(self, tc):
        super().__init__()
        D, eps = tc.hidden_size, tc.rms_norm_eps
        self.enorm, self.hnorm = RMSNorm(D, eps), RMSNorm(D, eps)
        self.eh_proj = nn.Linear(2 * D, D, bias=False)
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(D, eps), RMSNorm(D, eps)
        self.self_attn = MtpAttention(tc)
        I = tc.intermediate_size
        self.mlp = nn.ModuleDict(dict(gate_proj=nn.Linear(D, I, bias=False), up_proj=nn.Linear(D, I, bias=False),
                                      down_proj=nn.Linear(I, D, bias=False)))
        self.shared_head = nn.ModuleDict(dict(norm=RMSNorm(D, eps)))

    def forward(self, h, e_next, head_weight):
        """h [B, T, D] pre-norm hidden at t, e_next [B, T, D] embedding of ids[t+1] -> logits for ids[t+2]."""
        x = self.eh_proj(torch.cat([self.enorm(e_next), self.hnorm(h)], dim=-1))
        x = x + self.self_attn(self.input_layernorm(x))
        y = self.post_attention_layernorm(x)
        x = x + self.mlp["down_proj"](F.silu(self.mlp["gate_proj"](y)) * self.mlp["up_proj"](y))
        return F.linear(self.shared_head["norm"](x), head_weight)


class Captures:
    """Forward hooks: the stream mean entering the final norm, and the routers' choices."""

    def __init__(self, model):
        tm = model.model.language_model
        self.prenorm = None
        self.loads = {}
        self.handles = [tm.norm.register_forward_hook(self._norm)]
        self.routers = {}
        for name, mod in model.named_modules():
            if type(mod).__name__.endswith("TopkRouter"):
                self.routers[name] = mod
                self.handles.append(mod.register_forward_hook(self._router(name)))

    def _norm(self, mod, inp, out):
        self.prenorm = inp[0]

    def _router(self, name):
        def hook(mod, inp, out):
            idx = next(t for t in out if torch.is_tensor(t) and not t.is_floating_point()).detach().reshape(-1)
            c = torch.bincount(idx, minlength=mod.num_experts).float()
            self.loads[name] = self.loads.get(name, 0) + c
        return hook

    @torch.no_grad()
    def update_biases(self):
        """Aux-loss-free balancing (DeepSeek-V3): push under-loaded experts up, over-loaded down."""
        imbalance = {}
        for name, c in self.loads.items():
            mod = self.routers[name]
            mod.e_score_correction_bias += BIAS_UPDATE * torch.sign(c.mean() - c)
            imbalance[name] = float(c.max() / c.mean())
        self.loads = {}
        return max(imbalance.values()) if imbalance else 0.0


def build_model(tok_dir, device="cuda"):
    from transformers import Glm5NextForConditionalGeneration

    torch.manual_seed(SEED)
    cfg = build_config(tok_dir)
    model = Glm5NextForConditionalGeneration(cfg).to(device)
    mtp = MtpLayer(cfg.text_config).to(device)
    for m in mtp.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=cfg.text_config.initializer_range)
    return cfg, model, mtp


def lm_losses(model, mtp, caps, x):
    """x [B, SEQ + 2] -> (main CE over SEQ positions, MTP CE over SEQ positions)."""
    inp = x[:, :SEQ]
    out = model(input_ids=inp, use_cache=False)
    V = out.logits.shape[-1]
    main = F.cross_entropy(out.logits.float().reshape(-1, V), x[:, 1:SEQ + 1].reshape(-1))
    e_next = model.model.language_model.embed_tokens(x[:, 1:SEQ + 1])
    ml = mtp(caps.prenorm, e_next, model.lm_head.weight)
    mtp_loss = F.cross_entropy(ml.float().reshape(-1, V), x[:, 2:SEQ + 2].reshape(-1))
    return main, mtp_loss


def batch_at(data, step, gen_seed):
    """Rows for step `step`: deterministic in (seed, step), so a resumed run reads what it would have."""
    g = np.random.default_rng([gen_seed, step])
    starts = g.integers(0, data.size - SEQ - 2, size=BATCH)
    rows = np.stack([data[s:s + SEQ + 2] for s in starts]).astype(np.int64)
    return torch.from_numpy(rows).cuda(non_blocking=True)


def lr_at(step, total):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    p = min(1.0, (step - WARMUP) / max(1, total - WARMUP))
    return LR * (LR_MIN_FRAC + (1 - LR_MIN_FRAC) * 0.5 * (1 + math.cos(math.pi * p)))


def make_optimizer(model, mtp):
    decay, no_decay = [], []
    for m in (model, mtp):
        for n, p in m.named_parameters():
            if not p.requires_grad:
                continue
            (decay if p.dim() >= 2 and "embed" not in n else no_decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                              {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=(0.9, 0.95), eps=1e-8,
                             fused=True)


@torch.no_grad()
def heldout_loss(model, mtp, caps, held, n_rows=16):
    model.eval()
    mtp.eval()
    g = np.random.default_rng([SEED, 999])
    starts = g.integers(0, held.size - SEQ - 2, size=n_rows)
    x = torch.from_numpy(np.stack([held[s:s + SEQ + 2] for s in starts]).astype(np.int64)).cuda()
    saved = caps.loads
    with torch.autocast("cuda", dtype=torch.bfloat16):
        main, m = lm_losses(model, mtp, caps, x)
    caps.loads = saved  # evaluation batches do not steer the router biases
    model.train()
    mtp.train()
    return float(main), float(m)


def cmd_train(a):
    t_start = time.time()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    tok_dir = os.path.join(a.work, "tokenizer")
    cfg, model, mtp = build_model(tok_dir)
    caps = Captures(model)
    opt = make_optimizer(model, mtp)
    data = np.fromfile(os.path.join(a.work, "train.u16"), dtype=np.uint16)
    held = np.fromfile(os.path.join(a.work, "heldout.u16"), dtype=np.uint16)
    ck_path = os.path.join(a.work, "ckpt.pt")
    state = {"step": 0, "total_steps": None, "curve": [], "pieces": []}
    if os.path.exists(ck_path):
        ck = torch.load(ck_path, map_location="cuda", weights_only=False)
        model.load_state_dict(ck["model"])
        mtp.load_state_dict(ck["mtp"])
        opt.load_state_dict(ck["opt"])
        state = ck["state"]
        log(f"[train] resumed at step {state['step']} of {state['total_steps']}")
    n_params = sum(p.numel() for p in model.model.language_model.parameters()) + model.lm_head.weight.numel()
    log(f"[train] text params {n_params}, mtp {sum(p.numel() for p in mtp.parameters())}, "
        f"{data.size} train tokens, batch {BATCH}x{SEQ}")
    model.train()
    state.setdefault("experts_implementation", mg.get_experts_impl(model))
    piece = {"start_step": state["step"], "t0": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    t_loop = time.time()
    timed_from = None
    while True:
        step = state["step"]
        if state["total_steps"] is not None and step >= state["total_steps"]:
            break
        if time.time() - t_start > a.piece_seconds:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step, state["total_steps"] or 10 ** 9)
        x = batch_at(data, step, SEED)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            main, m = lm_losses(model, mtp, caps, x)
            loss = main + MTP_WEIGHT * m
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(list(model.parameters()) + list(mtp.parameters()), CLIP)
        opt.step()
        imb = caps.update_biases()
        state["step"] = step + 1
        if step == 3:
            torch.cuda.synchronize()
            timed_from = (time.time(), step + 1)
        if state["total_steps"] is None and step == 13:
            torch.cuda.synchronize()
            per = (time.time() - timed_from[0]) / (step + 1 - timed_from[1])
            remaining = a.total_seconds - (time.time() - t_start)
            state["total_steps"] = int(step + 1 + remaining / per)
            state["step_seconds_measured"] = per
            log(f"[train] {per * 1000:.0f} ms/step -> total_steps {state['total_steps']} "
                f"({state['total_steps'] * BATCH * SEQ / 1e6:.1f}M tokens)")
        if step % 25 == 0 or step + 1 == state["total_steps"]:
            rec = {"step": step, "loss": main.item(), "mtp_loss": m.item(), "lr": lr_at(step, state["total_steps"] or 1),
                   "grad_norm": gnorm.item(), "router_max_over_mean": imb,
                   "tokens": (step + 1) * BATCH * SEQ, "elapsed_s": time.time() - t_start}
            if step % 100 == 0 or step + 1 == state["total_steps"]:
                rec["heldout_loss"], rec["heldout_mtp_loss"] = heldout_loss(model, mtp, caps, held)
            state["curve"].append(rec)
            log("[train] " + json.dumps(rec))
    torch.cuda.synchronize()
    piece.update({"end_step": state["step"], "seconds": time.time() - t_start,
                  "loop_seconds": time.time() - t_loop, "device": torch.cuda.get_device_name()})
    state["pieces"].append(piece)
    torch.save({"model": model.state_dict(), "mtp": mtp.state_dict(), "opt": opt.state_dict(), "state": state},
               ck_path + ".tmp")
    os.replace(ck_path + ".tmp", ck_path)
    log(f"[train] piece done: steps {piece['start_step']}..{piece['end_step']} in {piece['seconds']:.0f}s")


# ----------------------------------------------------------------------------------------------
# Export, goldens, eval
# ----------------------------------------------------------------------------------------------


def mtp_prefix(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        n = json.load(f)["text_config"]["num_hidden_layers"]
    return f"model.language_model.layers.{n}."


def cmd_export(a):
    from safetensors.torch import save_file

    tok_dir = os.path.join(a.work, "tokenizer")
    cfg, model, mtp = build_model(tok_dir)
    ck = torch.load(os.path.join(a.work, "ckpt.pt"), map_location="cuda", weights_only=False)
    model.load_state_dict(ck["model"])
    mtp.load_state_dict(ck["mtp"])
    os.makedirs(a.out, exist_ok=True)
    model.to(torch.bfloat16)
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if any(k in name for k in KEEP_FP32):  # as transformers keeps them, and as released checkpoints store them
            t.data = t.data.float()
    model.load_state_dict(ck["model"])  # exact fp32 values where the tensor stayed fp32
    model.save_pretrained(a.out, max_shard_size="9MB")
    # The MTP layer as its own shard, named as DeepSeek-V3 / GLM-4.5 checkpoints name theirs.
    prefix = mtp_prefix(a.out)
    tensors = {prefix + k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in mtp.state_dict().items()}
    tensors[prefix + "shared_head.head.weight"] = model.lm_head.weight.detach().to(torch.bfloat16).contiguous().cpu()
    mtp_file = "model-mtp.safetensors"
    save_file(tensors, os.path.join(a.out, mtp_file), metadata={"format": "pt"})
    idx_path = os.path.join(a.out, "model.safetensors.index.json")
    if not os.path.exists(idx_path):  # a single shard: write an index so both files are listed
        from safetensors import safe_open
        with safe_open(os.path.join(a.out, "model.safetensors"), "pt") as f:
            index = {"metadata": {}, "weight_map": {k: "model.safetensors" for k in f.keys()}}
    else:
        with open(idx_path) as f:
            index = json.load(f)
    for k in tensors:
        index["weight_map"][k] = mtp_file
    index["metadata"]["total_size"] = sum(os.path.getsize(os.path.join(a.out, fn))
                                          for fn in set(index["weight_map"].values()))
    jdump(index, idx_path)
    with open(os.path.join(a.out, "config.json")) as f:
        c = json.load(f)
    c["text_config"]["num_nextn_predict_layers"] = 1
    jdump(c, os.path.join(a.out, "config.json"))
    for fn in os.listdir(tok_dir):
        if fn != "cases.json":
            shutil.copy(os.path.join(tok_dir, fn), os.path.join(a.out, fn))
    shutil.copy(os.path.join(tok_dir, "cases.json"), os.path.join(a.out, "tokenizer_cases.json"))
    shutil.copy(os.path.join(REPO, "src/serve/testdata/chat_templates/glm5.jinja"),
                os.path.join(a.out, "chat_template.jinja"))
    mg.ensure_generation_config(a.out, c["text_config"]["eos_token_id"], c["text_config"]["pad_token_id"])
    mg.write_keys(a.out)
    st = ck["state"]
    with open(os.path.join(a.work, "data.json")) as f:
        data_info = json.load(f)
    jdump({"seed": SEED, "hyper": {"batch": BATCH, "seq": SEQ, "lr": LR, "lr_min_frac": LR_MIN_FRAC,
                                   "warmup": WARMUP, "weight_decay": WEIGHT_DECAY, "clip": CLIP,
                                   "mtp_weight": MTP_WEIGHT, "router_bias_update": BIAS_UPDATE},
           "total_steps": st["total_steps"], "steps_done": st["step"], "pieces": st["pieces"],
           "step_seconds_measured": st.get("step_seconds_measured"), "data": data_info, "curve": st["curve"],
           "versions": mg.versions()}, os.path.join(a.out, "training.json"))
    log(f"[export] wrote {sorted(os.listdir(a.out))}")


def load_reference(model_dir, dtype):
    from safetensors import safe_open
    from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration

    model, _ = mg.load_model(Glm5NextForConditionalGeneration, model_dir, dtype)
    tc = Glm5NextConfig.from_pretrained(model_dir).text_config
    mtp = MtpLayer(tc)
    prefix = mtp_prefix(model_dir)
    sd = {}
    with safe_open(os.path.join(model_dir, "model-mtp.safetensors"), "pt") as f:
        for k in f.keys():
            sd[k[len(prefix):]] = f.get_tensor(k)
    head = sd.pop("shared_head.head.weight").to(dtype).cuda()
    mtp.load_state_dict(sd)
    return model, mtp.to(dtype).cuda().eval(), head


@torch.no_grad()
def mtp_logits_for(model, mtp, head, ids):
    """Main logits [T, V], MTP logits [T-1, V] and the pre-norm hidden [T, D] of one sequence."""
    caps = Captures(model)
    out = model(input_ids=ids[None], use_cache=False)
    h = caps.prenorm
    e_next = model.model.language_model.embed_tokens(ids[None, 1:])
    ml = mtp(h[:, :-1], e_next, head)
    for hd in caps.handles:
        hd.remove()
    return out.logits[0].float(), ml[0].float(), h[0].float()


@torch.no_grad()
def cmd_goldens(a):
    from safetensors.torch import save_file
    from tokenizers import Tokenizer

    mg.setup_torch()
    model, mtp, head = load_reference(a.model, torch.float32)
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    with open(os.path.join(a.work, "heldout_eval.txt"), encoding="utf-8") as f:
        held_ids = tok.encode(f.read(), add_special_tokens=False).ids
    with open(os.path.join(a.model, "config.json")) as f:
        tcj = json.load(f)["text_config"]
    eos = tcj["eos_token_id"]
    # Short golden: the make_goldens.py format on held-out text, at the first tie-free offset.
    tries = []
    for k in range(12):
        off = 4096 + 997 * k
        prompt = torch.tensor(held_ids[off:off + mg.T_PROMPT], dtype=torch.long)
        res = mg.run_suite(model, prompt, eos, tcj.get("n_group", 1))
        why = mg.margins_ok(res)
        tries.append({"offset": off, "rejected": why})
        if not why:
            break
    else:
        raise SystemExit(f"no tie-free prompt: {tries}")
    meta = mg.write_golden(os.path.join(a.model, "golden_fp32.safetensors"), prompt, res)
    logits, ml, h = mtp_logits_for(model, mtp, head, prompt.cuda())
    from safetensors.torch import load_file
    g = load_file(os.path.join(a.model, "golden_fp32.safetensors"))
    g["mtp_logits"] = ml.cpu().contiguous()
    g["prenorm_hidden"] = h.cpu().contiguous()
    save_file(g, os.path.join(a.model, "golden_fp32.safetensors"), metadata={"format": "pt"})
    # Long golden: one >= 2k-token held-out window, logits of the last 64 positions, plus the same
    # positions with the context cut to the last 256 tokens (the trained state must matter).
    L = 2304
    ids = torch.tensor(held_ids[:L], dtype=torch.long).cuda()
    full = model(input_ids=ids[None], use_cache=False).logits[0, -64:].float()
    cut = model(input_ids=ids[None, -256:], use_cache=False).logits[0, -64:].float()
    tgt = ids[-63:]
    nll_full = F.cross_entropy(full[:-1], tgt).item()
    nll_cut = F.cross_entropy(cut[:-1], tgt).item()
    save_file({"input_ids": ids.to(torch.int32).cpu(), "tail_logits": full.cpu().contiguous(),
               "tail_logits_cut256": cut.cpu().contiguous()},
              os.path.join(a.model, "golden_long.safetensors"), metadata={"format": "pt"})
    mg.jdump({"source": "tools/train/glm5_mini.py goldens", "short": {"offset": tries[-1]["offset"], "tries": tries,
              "tensors": meta, "margins": mg.strip_margins(res["margins"]),
              "extra": {"mtp_logits": "[T-1, V]: MTP guess of ids[t+2] from h_t and ids[t+1]",
                        "prenorm_hidden": "[T, D]: stream mean before the final norm"}},
              "long": {"tokens": L, "tail": 64, "nll_tail_full_context": nll_full, "nll_tail_cut256": nll_cut,
                       "max_abs_logit_diff_full_vs_cut": float((full - cut).abs().max())},
              "versions": mg.versions()}, os.path.join(a.model, "golden.json"))
    log(f"[goldens] short at offset {tries[-1]['offset']}; long tail NLL {nll_full:.3f} (cut to 256: {nll_cut:.3f})")


@torch.no_grad()
def cmd_eval(a):
    from tokenizers import Tokenizer

    mg.setup_torch()
    dtype = torch.float32 if a.dtype == "fp32" else torch.bfloat16
    model, mtp, head = load_reference(a.model, dtype)
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    ids = tok.encode(text, add_special_tokens=False).ids
    if a.max_tokens:
        ids = ids[:a.max_tokens]
        text = tok.decode(ids)  # bits per byte over the bytes the used tokens cover
    nll = mtp_nll = 0.0
    scored = mtp_pos = mtp_hit = 0
    t0 = time.time()
    for s in range(0, len(ids), a.ctx):
        w = torch.tensor(ids[s:s + a.ctx + 1], dtype=torch.long).cuda()
        if w.numel() < 2:
            continue
        logits, ml, _ = mtp_logits_for(model, mtp, head, w[:-1])
        nll += float(F.cross_entropy(logits, w[1:], reduction="sum"))
        scored += w.numel() - 1
        L = w.numel()
        if L >= 3:
            guess = ml[:L - 2].argmax(-1)
            main_next = logits[1:L - 1].argmax(-1)
            mtp_hit += int((guess == main_next).sum())
            mtp_pos += L - 2
            mtp_nll += float(F.cross_entropy(ml[:L - 2], w[2:], reduction="sum"))
    torch.cuda.synchronize()
    res = {"reference": "transformers " + mg.versions().get("transformers", "?"), "dtype": a.dtype, "ctx": a.ctx,
           "tokens_in_file": len(ids), "tokens_scored": scored, "mean_nll": nll / scored,
           "perplexity": math.exp(nll / scored), "bits_per_byte": nll / math.log(2) / len(text.encode("utf-8")),
           "mtp_acceptance": mtp_hit / max(1, mtp_pos), "mtp_positions": mtp_pos,
           "mtp_mean_nll": mtp_nll / max(1, mtp_pos), "seconds": time.time() - t0}
    print(json.dumps(res))
    if a.json_out:
        jdump(res, a.json_out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("prepare")
    s.add_argument("--corpus", required=True)
    s.add_argument("--work", required=True)
    s = sub.add_parser("train")
    s.add_argument("--work", required=True)
    s.add_argument("--piece-seconds", type=float, required=True)
    s.add_argument("--total-seconds", type=float, default=540.0)
    s = sub.add_parser("export")
    s.add_argument("--work", required=True)
    s.add_argument("--out", required=True)
    s = sub.add_parser("goldens")
    s.add_argument("--model", required=True)
    s.add_argument("--work", required=True)
    s = sub.add_parser("eval")
    s.add_argument("--model", required=True)
    s.add_argument("--text", required=True)
    s.add_argument("--ctx", type=int, default=1024)
    s.add_argument("--max-tokens", type=int, default=0)
    s.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    s.add_argument("--json-out")
    a = p.parse_args()
    {"prepare": cmd_prepare, "train": cmd_train, "export": cmd_export, "goldens": cmd_goldens,
     "eval": cmd_eval}[a.cmd](a)


if __name__ == "__main__":
    main()

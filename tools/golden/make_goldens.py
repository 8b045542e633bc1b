#!/usr/bin/env python3
"""Build tiny random checkpoints + a tokenizer and record golden outputs from transformers.

Usage:  python3 make_goldens.py OUTDIR [--only glm5_tiny,glm5_flat,kimi_tiny,tokenizer] [--max-seeds N]

Needs: torch (CUDA), transformers 5.17 (glm5_next, kimi_linear), tokenizers 0.23, safetensors.
No network. Everything is seeded; see README.md in this folder for how it is run (device tool).

OUTDIR gets one folder per fixture:
  tokenizer/   tokenizer.json, tokenizer_config.json (+ whatever PreTrainedTokenizerFast writes), cases.json
  glm5_tiny/   nested glm5_next checkpoint (+ tiny vision tower on disk) + tokenizer files
  glm5_flat/   flat (text-only) glm5_next config.json, sharded weights + index
  kimi_tiny/   kimi_linear checkpoint
Each model folder: config.json, generation_config.json, *.safetensors, KEYS.txt, resolved_config.json,
golden_fp32.safetensors, golden_bf16.safetensors, golden.json.
"""

import argparse
import glob
import json
import math
import os
import shutil
import sys
import time
import traceback

import torch
from torch.overrides import TorchFunctionMode

T_PROMPT = 80  # full-forward prompt length
T_GEN_PROMPT = 40  # greedy prompt length
N_GEN = 24  # greedy new tokens
PROMPT_SEED = 20260101
SEED_BASE = {"glm5_tiny": 1000, "glm5_flat": 2000, "kimi_tiny": 3000}

THR_INDEXER = 1e-4  # relative to max(1, max |score| of the row)
THR_ROUTER = 1e-5  # absolute, on sigmoid(logit) + bias
THR_GREEDY = 1e-3  # absolute logit gap top1 - top2

LOG_PATH = None


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    if LOG_PATH:
        with open(LOG_PATH, "a", encoding="utf-8") as f:
            f.write(s + "\n")


def jdump(obj, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False, default=str)
        f.write("\n")


# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<think>",
    "</think>",
]
NONSPECIAL_ADDED = ["<tool_call>"]
VOCAB_TOTAL = 1024
VOCAB_TRAINED = VOCAB_TOTAL - len(SPECIAL_TOKENS) - len(NONSPECIAL_ADDED)  # 1014

SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

MULTILINGUAL = """\
The quick brown fox jumps over the lazy dog. I'm sure they'll come; we've said it's fine, hasn't it? You'd agree.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 256 1024 2048 65536 3.14159 2.71828 1,234,567.89 -17 +3e-5 0x1F 2026-01-01 12:30:45
你好，世界！今天天气很好。我们一起去公园散步吧。人工智能正在改变世界，语言模型可以理解和生成文本。
中文的句子通常没有空格。这个分词器需要处理汉字、标点符号和数字，例如：第3章、共12页、价格￥99.5元。
日本語のテキストです。ひらがなとカタカナと漢字が混ざっています。東京は日本の首都です。ありがとうございます。
한국어 문장입니다. 안녕하세요, 만나서 반갑습니다. 서울은 대한민국의 수도입니다. 감사합니다!
Русский текст: Привет, как дела? Всё хорошо, спасибо. Москва — столица России. Съешь ещё этих мягких булок.
العربية: مرحبا بالعالم. كيف حالك؟ أنا بخير، شكرا. اللغة العربية جميلة.
Ελληνικά: Γειά σου κόσμε. Ἡ γλῶσσα. हिन्दी: नमस्ते दुनिया। ไทย: สวัสดีชาวโลก Tiếng Việt: Xin chào thế giới.
Deutsch: Grüße aus München! Straße, Größe, Übermäßig. Français: Ça va? Où est la bibliothèque? Très bien, merci.
Español: ¿Dónde está el baño? ¡Hola! Niño, año, corazón. Português: Não, obrigado. Ação e coração.
Emoji: 😀 😃 😄 😁 😆 🎉 🎊 👍 👍🏻 👍🏽 👍🏿 ❤️ 🔥 ✨ 🚀 🌍 👨‍👩‍👧‍👦 👩🏽‍💻 🏳️‍🌈 🇯🇵 🇺🇸 ☕ ⭐
Math: ∑ ∫ √ ∞ ≠ ≤ ≥ ± × ÷ → ← ↔ ∀ ∃ ∈ ∉ ⊂ ⊃ ∪ ∩ α β γ δ ε λ μ π σ ω Ω
Code: def f(x):\n    return x ** 2 + 1  # square\nfor i in range(10):\n\tprint(f"{i}: {f(i)}")\n
int main(void) { printf("hello\\n"); return 0; }  const x = () => { return [1, 2, 3].map(v => v * 2); };
<html><body><div class="x">Hi &amp; bye</div></body></html>  {"key": "value", "list": [1, 2, 3], "ok": true}
SELECT id, name FROM users WHERE age >= 18 ORDER BY name;  git commit -m "fix: handle CRLF\\r\\n"
"""


def build_corpus():
    import sysconfig

    texts = [MULTILINGUAL] * 40
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))
    total = 0
    for fn in files:
        try:
            with open(fn, encoding="utf-8", errors="replace") as f:
                s = f.read()
        except OSError:
            continue
        texts.append(s)
        total += len(s)
        if total > 3_000_000:
            break
    log(f"[tok] corpus: {len(texts)} pieces, {total} chars of stdlib source from {stdlib}")
    return texts


TOKENIZER_CASES = [
    "",
    "Hello, world!",
    "I'm sure they'll say we've done it, didn't we? You'd think so.",
    "DON'T SHOUT, IT'S LOUD AND WE'RE HERE",
    "1234567 and 3.14159 and 2024-06-01 and 007",
    "   leading spaces and trailing spaces   ",
    "tabs\tand\t\tmore\ttabs\t",
    "line one\r\nline two\r\n\r\nline four\n",
    "multiple\n\n\nnewlines\n  \n indented",
    "def foo(x):\n    return x * 2  # comment\n\nclass Bar:\n\tpass\n",
    "你好，世界！这是一个测试。",
    "日本語のテキストです。カタカナとひらがな。",
    "한국어 텍스트입니다.",
    "Привет, как дела? Всё хорошо.",
    "مرحبا بالعالم",
    "emoji 😀🎉 and 👍🏽 skin tone",
    "ZWJ 👨\u200d👩\u200d👧\u200d👦 and 🏳\ufe0f\u200d🌈 and 👩🏽\u200d💻",
    "e\u0301 cafe\u0301 (decomposed) vs caf\u00e9",
    "A\u030a \u00c5ngstr\u00f6m \u212b",
    "Hangul jamo \u1100\u1161\u11a8",
    "<|user|>hi<|assistant|>hello<|endoftext|>",
    "[gMASK]<sop><|system|>You are helpful.<|user|>2+2?<|assistant|><think>easy</think>4",
    'call <tool_call>{"name": "f"}</tool_call> done',
    "<|user|><|user|>",
    "<|notatoken|> <|user |> < |user|> <|user",
    "\u0000\u0001 control chars \u007f",
    "odd chars: \ufffd \u200b zero width \u00a0nbsp",
    "mixed: abc123def 456ghi",
    "URL https://example.com/path?q=1&r=2#frag",
    "    ",
    "\n",
    " \n ",
    "x" * 50,
    "\uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 \uff21\uff22\uff23",
    "\ufb01 ligature \ufb02",
    "Ελληνικά κείμενα",
    "हिन्दी पाठ",
    "math ∑∫√∞ ≠ ≤ ≥ and arrows → ←",
    "<think>\nreasoning\n</think>\n\nanswer",
    "trailing newline and spaces  \n  ",
    "It's 10:30am; costs $1,234.56 (approx.)!!!",
    "\u2019curly quotes\u2019 \u201cdouble\u201d \u2014 em dash \u2026 ellipsis",
]


def make_tokenizer(outdir):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TRAINED,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    t0 = time.time()
    tok.train_from_iterator(build_corpus(), trainer=trainer)
    log(f"[tok] trained in {time.time() - t0:.1f}s, base vocab {tok.get_vocab_size(with_added_tokens=False)}")
    assert tok.get_vocab_size(with_added_tokens=False) == VOCAB_TRAINED, tok.get_vocab_size(False)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in NONSPECIAL_ADDED])
    assert tok.get_vocab_size(with_added_tokens=True) == VOCAB_TOTAL, tok.get_vocab_size(True)

    os.makedirs(outdir, exist_ok=True)
    wrapped_ok = False
    try:
        from transformers import PreTrainedTokenizerFast

        hf = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            eos_token="<|endoftext|>",
            pad_token="<|endoftext|>",
            model_max_length=131072,
            clean_up_tokenization_spaces=False,
        )
        hf.save_pretrained(outdir)
        wrapped_ok = True
    except Exception:
        log("[tok] PreTrainedTokenizerFast.save_pretrained failed:\n" + traceback.format_exc())
    if not wrapped_ok or not os.path.exists(os.path.join(outdir, "tokenizer.json")):
        tok.save(os.path.join(outdir, "tokenizer.json"))
    if not os.path.exists(os.path.join(outdir, "tokenizer_config.json")):
        jdump(
            {
                "eos_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "model_max_length": 131072,
                "clean_up_tokenization_spaces": False,
                "tokenizer_class": "PreTrainedTokenizerFast",
            },
            os.path.join(outdir, "tokenizer_config.json"),
        )
    log(f"[tok] wrote {sorted(os.listdir(outdir))}")

    # Cases from the tokenizer.json exactly as written to disk.
    disk = Tokenizer.from_file(os.path.join(outdir, "tokenizer.json"))
    assert disk.get_vocab_size(with_added_tokens=True) == VOCAB_TOTAL
    cases = []
    for text in TOKENIZER_CASES:
        enc = disk.encode(text, add_special_tokens=False)
        ids = list(enc.ids)
        cases.append(
            {
                "text": text,
                "ids": ids,
                "tokens": list(enc.tokens),
                "decoded": disk.decode(ids, skip_special_tokens=False),
                "decoded_skip_special": disk.decode(ids, skip_special_tokens=True),
            }
        )
    jdump(cases, os.path.join(outdir, "cases.json"))
    ids = {s: disk.token_to_id(s) for s in SPECIAL_TOKENS + NONSPECIAL_ADDED}
    log(f"[tok] added token ids: {ids}")
    return ids


def copy_tokenizer_files(tokdir, dst):
    for fn in os.listdir(tokdir):
        if fn == "cases.json":
            continue
        shutil.copy(os.path.join(tokdir, fn), os.path.join(dst, fn))


# ----------------------------------------------------------------------------------------------
# Model configs
# ----------------------------------------------------------------------------------------------


def glm5_text_kwargs(tok_ids, **over):
    d = dict(
        vocab_size=VOCAB_TOTAL,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=48,
        kv_lora_rank=32,
        qk_nope_head_dim=32,
        v_head_dim=32,
        qk_rope_head_dim=0,
        index_n_heads=8,
        index_head_dim=16,
        index_topk=32,
        index_kpool=4,
        linear_num_heads=4,
        linear_head_dim=16,
        linear_conv_kernel_dim=4,
        n_routed_experts=16,
        num_experts_per_tok=4,
        n_shared_experts=1,
        hc_mult=4,
        pad_token_id=tok_ids["<|endoftext|>"],
        bos_token_id=None,
        eos_token_id=tok_ids["<|endoftext|>"],
    )
    d.update(over)
    return d


GLM5_TINY_VISION = dict(
    depth=1,
    hidden_size=32,
    num_heads=2,
    intermediate_size=64,
    out_hidden_size=64,
    projection_intermediate_size=128,
)


def build_glm5_tiny_config(tok_ids):
    from transformers import Glm5NextConfig

    eos = [tok_ids["<|endoftext|>"], tok_ids["<|user|>"], tok_ids["<|observation|>"]]
    text = glm5_text_kwargs(tok_ids, eos_token_id=eos)
    return Glm5NextConfig(text_config=text, vision_config=dict(GLM5_TINY_VISION))


GLM5_FLAT_TEXT_OVERRIDES = dict(
    num_hidden_layers=6,
    layer_types=[
        "deepseek_sparse_attention",
        "deepseek_sparse_attention",
        "linear_attention",
        "deepseek_sparse_attention",
        "linear_attention",
        "linear_attention",
    ],
    indexer_types=["full", "shared", "full", "full", "full", "full"],
    mlp_layer_types=["dense", "sparse", "sparse", "sparse", "sparse", "sparse"],
    linear_attn_config={"gate_lower_bound": None, "safe_gate": False},
    n_group=2,
    topk_group=1,
    index_kpool_always_select_tail=True,
)


def build_glm5_flat_config(tok_ids):
    """In-memory: text kwargs at the top level (flat form); a tiny vision config so the model stays small."""
    from transformers import Glm5NextConfig

    text = glm5_text_kwargs(tok_ids, **GLM5_FLAT_TEXT_OVERRIDES)
    cfg = Glm5NextConfig(vision_config=dict(GLM5_TINY_VISION), **text)
    tc = cfg.text_config
    assert tc.num_hidden_layers == 6 and tc.hidden_size == 64, (tc.num_hidden_layers, tc.hidden_size)
    assert tc.linear_lower_bound is None, tc.linear_lower_bound
    assert tc.n_group == 2 and tc.topk_group == 1
    assert list(tc.indexer_types) == GLM5_FLAT_TEXT_OVERRIDES["indexer_types"], tc.indexer_types
    return cfg


def build_kimi_config(tok_ids):
    from transformers import KimiLinearConfig

    common = dict(
        vocab_size=VOCAB_TOTAL,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=None,
        kv_lora_rank=32,
        qk_nope_head_dim=32,
        qk_rope_head_dim=16,
        v_head_dim=32,
        moe_intermediate_size=32,
        intermediate_size=128,
        linear_attn_config={
            "kda_layers": [1, 2, 3],
            "full_attn_layers": [4],
            "head_dim": 16,
            "num_heads": 4,
            "short_conv_kernel_size": 4,
        },
        first_k_dense_replace=1,
        routed_scaling_factor=2.446,
        pad_token_id=tok_ids["<|endoftext|>"],
        bos_token_id=None,
        eos_token_id=tok_ids["<|endoftext|>"],
    )
    variants = [
        dict(num_experts=8, num_experts_per_token=2),
        dict(num_local_experts=8, num_experts_per_tok=2),
    ]
    last = None
    for v in variants:
        try:
            cfg = KimiLinearConfig(**common, **v)
            ok = cfg.num_local_experts == 8 and cfg.num_experts_per_tok == 2
            log(f"[kimi] config variant {v}: num_local_experts={cfg.num_local_experts} top_k={cfg.num_experts_per_tok}")
            if ok:
                return cfg, v
        except Exception as e:  # noqa: BLE001
            last = e
            log(f"[kimi] config variant {v} raised {e!r}")
    raise RuntimeError(f"no kimi config variant gives 8 experts / top-2 (last error {last!r})")


# ----------------------------------------------------------------------------------------------
# Random re-initialisation
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def randomize_(model, seed):
    g = torch.Generator().manual_seed(seed)
    mods = dict(model.named_modules())
    unknown, skipped_buffers = [], []
    for name, p in model.named_parameters():
        parent, leaf = name.rsplit(".", 1) if "." in name else ("", name)
        mod = mods[parent]
        cls = type(mod).__name__
        shape = tuple(p.shape)

        def n():
            return torch.randn(shape, generator=g)

        def u(a, b):
            return torch.rand(shape, generator=g) * (b - a) + a

        if leaf == "A_log":
            v = torch.log(u(1.0, 16.0))
        elif leaf == "dt_bias":
            if getattr(mod, "safe_gate_lower_bound", None) is not None:
                v = u(-2.0, 0.5)  # g = lb * sigmoid(exp(A_log) * (proj + dt_bias)) spans (lb, 0)
            else:
                v = u(-6.0, -1.0)  # g = -exp(A_log) * softplus(proj + dt_bias) spans ~[-15, -3e-4]
        elif "Norm" in cls:  # RMSNorm, RMSNormGated, LayerNorm (indexer k_norm, vision merger)
            v = 1.0 + 0.1 * n() if leaf == "weight" else 0.1 * n()
        elif cls.endswith("HyperConnection"):
            v = 0.05 * n() if leaf == "fn" else 0.5 * n()  # base / scale
        elif leaf == "index_kpool_compress_ape":
            v = 0.5 * n()
        elif leaf == "index_kpool_compress_gate":
            v = n() / math.sqrt(shape[1])
        elif cls.endswith("Experts"):
            v = n() / math.sqrt(shape[-1])  # gate_up [E, 2I, D], down [E, D, I]
        elif cls == "Embedding":
            v = n()
        elif name == "lm_head.weight":
            v = 2.0 * n() / math.sqrt(shape[1])
        elif leaf == "weight" and len(shape) >= 2:
            v = n() / math.sqrt(math.prod(shape[1:]))
        elif leaf == "bias":
            v = 0.02 * n()
        else:
            v = 0.1 * n()
            unknown.append(name)
        p.copy_(v.to(p.dtype))
    for name, b in model.named_buffers():
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "e_score_correction_bias":
            b.copy_((0.05 * torch.randn(tuple(b.shape), generator=g)).to(b.dtype))
        else:
            skipped_buffers.append(name)
    return {"params_with_fallback_init": unknown, "buffers_not_randomized": skipped_buffers}


# ----------------------------------------------------------------------------------------------
# Tie recording
# ----------------------------------------------------------------------------------------------


class TopkRecorder(TorchFunctionMode):
    """Records the inputs of every topk call made inside an indexer or router forward."""

    def __init__(self):
        super().__init__()
        self.ctx = None
        self.records = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.ctx is not None and func in (torch.topk, torch.Tensor.topk):
            x = args[0]
            k = args[1] if len(args) > 1 else kwargs.get("k")
            self.records.append((self.ctx, x.detach().float().clone(), int(k)))
        return func(*args, **kwargs)


def install_ctx_hooks(model, rec):
    handles = []
    for name, mod in model.named_modules():
        cls = type(mod).__name__
        kind = "indexer" if cls.endswith("Indexer") else "router" if cls.endswith("TopkRouter") else None
        if kind is None:
            continue

        def pre(m, a, kw=None, _k=kind, _n=name):
            rec.ctx = (_k, _n)

        def post(m, a, o, _k=kind):
            rec.ctx = None

        handles.append(mod.register_forward_pre_hook(pre))
        handles.append(mod.register_forward_hook(post))
    return handles


def summarize_records(records, n_group):
    """Min top-k boundary gaps. Indexer: relative to max(1, max|valid score|); router: absolute."""
    big_neg = torch.finfo(torch.float32).min / 2
    out = {}

    def upd(key, gaps, where):
        if gaps.numel() == 0:
            return
        thr = THR_INDEXER if key.startswith("indexer") else THR_ROUTER
        e = out.setdefault(key, {"min_gap": float("inf"), "rows_checked": 0, "rows_below_threshold": 0, "argmin": None})
        mi = int(torch.argmin(gaps))
        if float(gaps[mi]) < e["min_gap"]:
            e["min_gap"] = float(gaps[mi])
            e["argmin"] = f"{where} row {mi}"
        e["rows_checked"] += int(gaps.numel())
        e["rows_below_threshold"] += int((gaps <= thr).sum())

    for (kind, name), x, k in records:
        if kind == "router" and x.dim() != 2:
            continue  # the per-group top-2 values: only values are used, ties are harmless
        x2 = x.reshape(-1, x.shape[-1])
        if k >= x2.shape[-1]:
            continue
        s = x2.sort(dim=-1, descending=True).values
        a, b = s[:, k - 1], s[:, k]
        if kind == "indexer":
            keep = b > big_neg  # more than k valid candidates
            if not bool(keep.any()):
                continue
            sv = s[keep]
            scale = torch.where(sv > big_neg, sv.abs(), torch.zeros_like(sv)).max(dim=-1).values.clamp_min(1.0)
            upd("indexer", (a[keep] - b[keep]) / scale, name)
        else:
            keep = torch.isfinite(b)
            # Distinguish the group selection ([N, n_group]) from the expert selection ([N, n_experts]).
            key = "router_group" if x2.shape[-1] == n_group else "router"
            if bool(keep.any()):
                upd(key, a[keep] - b[keep], name)
    return out


# ----------------------------------------------------------------------------------------------
# Reference runs
# ----------------------------------------------------------------------------------------------


def text_model_of(model):
    inner = model.model
    return inner.language_model if hasattr(inner, "language_model") else inner


def install_capture_hooks(tm, caps):
    handles = []

    def mk(key):
        def hook(m, a, o):
            t = o[0] if isinstance(o, (tuple, list)) else o
            caps[key] = t.detach()[0].float().cpu().contiguous()

        return hook

    handles.append(tm.embed_tokens.register_forward_hook(mk("embed_tokens")))
    handles.append(tm.norm.register_forward_hook(mk("norm")))
    for i, layer in enumerate(tm.layers):
        handles.append(layer.register_forward_hook(mk(f"layers.{i}")))
        for sub in ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp"):
            handles.append(getattr(layer, sub).register_forward_hook(mk(f"layers.{i}.{sub}")))
    return handles


def get_experts_impl(model):
    try:
        return model.get_experts_implementation()
    except Exception as e:  # noqa: BLE001
        return f"unknown ({e!r})"


@torch.no_grad()
def run_suite(model, prompt, eos_ids, n_group):
    """Full forward with captures, then cached greedy generation, plus tie margins."""
    dev = next(model.parameters()).device
    ids = prompt.to(dev)[None]
    tm = text_model_of(model)
    caps = {}

    rec = TopkRecorder()
    ctx_h = install_ctx_hooks(model, rec)
    cap_h = install_capture_hooks(tm, caps)
    try:
        with rec:
            out = model(input_ids=ids, use_cache=False)
    finally:
        for h in cap_h:
            h.remove()
    logits = out.logits[0].float().cpu()
    margins_full = summarize_records(rec.records, n_group)
    rec.records = []

    try:
        with rec:
            gen = model.generate(
                ids[:, :T_GEN_PROMPT],
                attention_mask=torch.ones_like(ids[:, :T_GEN_PROMPT]),
                max_new_tokens=N_GEN,
                do_sample=False,
                use_cache=True,
                return_dict_in_generate=True,
                output_logits=True,
                output_scores=True,
            )
    finally:
        for h in ctx_h:
            h.remove()
    margins_gen = summarize_records(rec.records, n_group)
    seq = gen.sequences[0].cpu()
    new = seq[T_GEN_PROMPT:]
    dec_logits = torch.stack([l[0].float().cpu() for l in gen.logits])
    top2 = dec_logits.topk(2, dim=-1).values
    greedy_gaps = (top2[:, 0] - top2[:, 1]).tolist()

    # Consistency: a no-cache forward over prompt + generated tokens vs the cached decode logits.
    full2 = model(input_ids=seq[None, : T_GEN_PROMPT + N_GEN - 1].to(dev), use_cache=False).logits[0].float().cpu()
    nocache = full2[T_GEN_PROMPT - 1 :]
    n = min(nocache.shape[0], dec_logits.shape[0])
    dec_vs_full = float((nocache[:n] - dec_logits[:n]).abs().max())
    argmax_agree = bool((nocache[:n].argmax(-1) == dec_logits[:n].argmax(-1)).all())

    eos = set(eos_ids)
    res = {
        "logits": logits,
        "caps": caps,
        "greedy_ids": new.to(torch.int32),
        "decode_logits": dec_logits,
        "margins": {
            "full_forward": margins_full,
            "generate": margins_gen,
            "greedy_min_gap": min(greedy_gaps) if greedy_gaps else None,
            "greedy_gaps": greedy_gaps,
        },
        "n_new": int(new.numel()),
        "eos_in_greedy": any(int(t) in eos for t in new.tolist()),
        "nan": bool(torch.isnan(logits).any() or torch.isnan(dec_logits).any()),
        "decode_vs_nocache_max_abs_diff": dec_vs_full,
        "decode_vs_nocache_argmax_agree": argmax_agree,
        "experts_implementation": get_experts_impl(model),
        "logits_std": float(logits.std()),
    }
    return res


def margins_ok(res):
    m = res["margins"]
    reasons = []
    if res["nan"]:
        reasons.append("nan")
    if res["n_new"] != N_GEN or res["eos_in_greedy"]:
        reasons.append(f"generation stopped/eos (n_new={res['n_new']}, eos={res['eos_in_greedy']})")
    for phase in ("full_forward", "generate"):
        for key, e in m[phase].items():
            if e["rows_below_threshold"] > 0:
                reasons.append(f"{phase}.{key} min_gap={e['min_gap']:.3g} ({e['rows_below_threshold']} rows)")
    if m["greedy_min_gap"] is None or m["greedy_min_gap"] <= THR_GREEDY:
        reasons.append(f"greedy gap {m['greedy_min_gap']}")
    return reasons


def write_golden(path, prompt, res):
    from safetensors.torch import save_file

    t = {"input_ids": prompt.to(torch.int32).contiguous(), "logits": res["logits"].contiguous()}
    for k, v in res["caps"].items():
        t[k] = v.contiguous()
    t["greedy_ids"] = res["greedy_ids"].contiguous()
    t["decode_logits"] = res["decode_logits"].contiguous()
    save_file(t, path, metadata={"format": "pt"})
    return {k: [str(v.dtype).replace("torch.", ""), list(v.shape)] for k, v in t.items()}


def load_model(cls, d, dtype, **kw):
    m = cls.from_pretrained(d, dtype=dtype, attn_implementation="sdpa", **kw)
    if isinstance(m, tuple):
        m, info = m
    else:
        info = None
    m = m.to("cuda").eval()
    return m, info


def write_keys(d):
    from safetensors import safe_open

    lines = []
    total = 0
    for fn in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        base = os.path.basename(fn)
        if base.startswith("golden"):
            continue
        with safe_open(fn, "pt") as f:
            for k in sorted(f.keys()):
                sl = f.get_slice(k)
                shape = list(sl.get_shape())
                lines.append(f"{k}\t{sl.get_dtype()}\t{shape}\t{base}")
                total += math.prod(shape) if shape else 1
    with open(os.path.join(d, "KEYS.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return len(lines), total


def ensure_generation_config(d, eos, pad):
    from transformers import GenerationConfig

    p = os.path.join(d, "generation_config.json")
    existed = os.path.exists(p)
    gc = GenerationConfig.from_pretrained(d) if existed else GenerationConfig()
    changed = False
    if gc.eos_token_id is None:
        gc.eos_token_id = eos
        changed = True
    if gc.pad_token_id is None:
        gc.pad_token_id = pad
        changed = True
    if changed or not existed:
        gc.save_pretrained(d)
    with open(p) as f:
        return {"written_by_save_pretrained": existed, "patched": changed, "content": json.load(f)}


def make_prompt(seed_offset):
    g = torch.Generator().manual_seed(PROMPT_SEED + seed_offset)
    return torch.randint(0, VOCAB_TRAINED, (T_PROMPT,), generator=g)  # no special / added ids


def setup_torch():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def strip_margins(m):
    return {
        "full_forward": m["full_forward"],
        "generate": m["generate"],
        "greedy_min_gap": m["greedy_min_gap"],
        "greedy_gaps": m["greedy_gaps"],
    }


# ----------------------------------------------------------------------------------------------
# Fixtures
# ----------------------------------------------------------------------------------------------


def seed_search(name, build_cfg, cls, save_dir, prompt, eos_ids, n_group, max_seeds, save_kwargs=None):
    """Try seeds until the fp32 reference (reloaded from disk) is tie-free. Returns (seed, fp32 result, tries)."""
    tries = []
    best = None
    for i in range(max_seeds):
        seed = SEED_BASE[name] + i
        t0 = time.time()
        torch.manual_seed(seed)
        cfg = build_cfg()
        model = cls(cfg).eval()
        init_report = randomize_(model, seed)
        model.to(torch.bfloat16)
        if os.path.exists(save_dir):
            shutil.rmtree(save_dir)
        model.save_pretrained(save_dir, **(save_kwargs or {}))
        del model
        ref, _ = load_model(cls, save_dir, torch.float32)
        res = run_suite(ref, prompt, eos_ids, n_group)
        del ref
        torch.cuda.empty_cache()
        reasons = margins_ok(res)
        tries.append({"seed": seed, "ok": not reasons, "reasons": reasons, "secs": round(time.time() - t0, 2)})
        log(f"[{name}] seed {seed}: {'OK' if not reasons else 'reject: ' + '; '.join(reasons)} ({time.time() - t0:.1f}s)")
        if not reasons:
            return seed, res, tries, init_report
        best = (seed, res, init_report)
    log(f"[{name}] WARNING: no tie-free seed in {max_seeds} tries; keeping the last one")
    # Re-save the last seed is already on disk.
    return best[0], best[1], tries, best[2]


def finish_fixture(name, cls, d, prompt, res32, eos_ids, pad, n_group, seed, tries, init_report, extra_notes):
    info = {}
    info["keys"], info["n_params_on_disk"] = write_keys(d)
    info["generation_config"] = ensure_generation_config(d, eos_ids if len(eos_ids) > 1 else eos_ids[0], pad)
    # Resolved config from a fresh fp32 load.
    ref32, _ = load_model(cls, d, torch.float32)
    jdump(ref32.config.to_dict(), os.path.join(d, "resolved_config.json"))
    if res32 is None:
        res32 = run_suite(ref32, prompt, eos_ids, n_group)
    del ref32
    shapes = write_golden(os.path.join(d, "golden_fp32.safetensors"), prompt, res32)

    ref16, _ = load_model(cls, d, torch.bfloat16)
    fp32_kept = sorted({n for n, p in ref16.named_parameters() if p.dtype == torch.float32})
    fp32_kept += sorted({n for n, b in ref16.named_buffers() if b.dtype == torch.float32})
    res16 = run_suite(ref16, prompt, eos_ids, n_group)
    del ref16
    torch.cuda.empty_cache()
    write_golden(os.path.join(d, "golden_bf16.safetensors"), prompt, res16)

    def run_info(dtype, fn, r):
        return {
            "dtype": dtype,
            "file": fn,
            "attn_implementation": "sdpa",
            "experts_implementation": r["experts_implementation"],
            "greedy_ids": r["greedy_ids"].tolist(),
            "tie_margins": strip_margins(r["margins"]),
            "tie_free": not margins_ok(r),
            "tie_problems": margins_ok(r),
            "decode_vs_nocache_max_abs_diff": r["decode_vs_nocache_max_abs_diff"],
            "decode_vs_nocache_argmax_agree": r["decode_vs_nocache_argmax_agree"],
            "logits_std": r["logits_std"],
        }

    greedy_agree = res32["greedy_ids"].tolist() == res16["greedy_ids"].tolist()
    d32 = float((res32["logits"] - res16["logits"]).abs().max())
    meta = {
        "fixture": name,
        "prompt_len": T_PROMPT,
        "greedy_prompt_len": T_GEN_PROMPT,
        "greedy_new_tokens": N_GEN,
        "prompt_ids": prompt.tolist(),
        "weight_seed": seed,
        "prompt_seed": PROMPT_SEED + list(SEED_BASE).index(name),
        "seeds_tried": tries,
        "thresholds": {"indexer_rel": THR_INDEXER, "router_abs": THR_ROUTER, "greedy_abs": THR_GREEDY},
        "dtype_runs": [
            run_info("float32", "golden_fp32.safetensors", res32),
            run_info("bfloat16", "golden_bf16.safetensors", res16),
        ],
        "tie_margins": strip_margins(res32["margins"]),
        "tie_margins_bf16": strip_margins(res16["margins"]),
        "fp32_vs_bf16": {"logits_max_abs_diff": d32, "greedy_ids_equal": greedy_agree},
        "golden_tensors": shapes,
        "bf16_load_fp32_tensors": fp32_kept,
        "init": init_report,
        "versions": versions(),
        "notes": extra_notes,
    }
    meta.update(info)
    jdump(meta, os.path.join(d, "golden.json"))
    log(
        f"[{name}] done: fp32 tie-free={not margins_ok(res32)} bf16 problems={margins_ok(res16)} "
        f"fp32-vs-bf16 logits diff={d32:.3g} greedy equal={greedy_agree}"
    )


def versions():
    import tokenizers
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": sys.version.split()[0],
    }


def do_glm5_tiny(out, tok_ids, tokdir, max_seeds):
    from transformers import Glm5NextForConditionalGeneration as C

    name = "glm5_tiny"
    d = os.path.join(out, name)
    prompt = make_prompt(list(SEED_BASE).index(name))
    eos = [tok_ids["<|endoftext|>"], tok_ids["<|user|>"], tok_ids["<|observation|>"]]
    seed, res32, tries, init = seed_search(
        name, lambda: build_glm5_tiny_config(tok_ids), C, d, prompt, eos, n_group=1, max_seeds=max_seeds
    )
    copy_tokenizer_files(tokdir, d)
    notes = (
        "Nested glm5_next config (text_config + tiny vision_config); vision weights are on disk and unused by text. "
        "Default layer_types (DSA at 3, 7), mlp_layer_types (0-2 dense), indexer_types (all full), lower-bound gate -5. "
        "fp32 golden = from_pretrained(dtype=float32) on CUDA, TF32 off, sdpa. bf16 golden = dtype=bfloat16. "
        "Captures are forward-hook outputs of the text model (model.model.language_model), batch dim removed; "
        "layers.{i} is the mHC stream [T, hc_mult, D]; layers.{i}.self_attn is element 0 of the attention output."
    )
    finish_fixture(name, C, d, prompt, res32, eos, tok_ids["<|endoftext|>"], 1, seed, tries, init, notes)


def write_sharded(tensors, d, shard_bytes):
    from safetensors.torch import save_file

    names = sorted(tensors)
    shards, cur, cur_b = [], [], 0
    for k in names:
        nb = tensors[k].numel() * tensors[k].element_size()
        if cur and cur_b + nb > shard_bytes:
            shards.append(cur)
            cur, cur_b = [], 0
        cur.append(k)
        cur_b += nb
    if cur:
        shards.append(cur)
    wm, total = {}, 0
    for i, ks in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({k: tensors[k].contiguous() for k in ks}, os.path.join(d, fn), metadata={"format": "pt"})
        for k in ks:
            wm[k] = fn
            total += tensors[k].numel() * tensors[k].element_size()
    jdump({"metadata": {"total_size": total}, "weight_map": wm}, os.path.join(d, "model.safetensors.index.json"))
    return len(shards)


def read_all_tensors(d):
    from safetensors.torch import load_file

    t = {}
    for fn in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        if os.path.basename(fn).startswith("golden"):
            continue
        t.update(load_file(fn))
    return t


def flat_config_dict(nested_cfg_json, text_cfg_dict):
    flat = {}
    for k, v in text_cfg_dict.items():
        if k.startswith("_") or k in ("model_type", "transformers_version", "architectures"):
            continue
        flat[k] = v
    for k, v in nested_cfg_json.items():
        if k in ("text_config", "vision_config"):
            continue
        if k not in flat or k in ("architectures", "transformers_version", "dtype"):
            flat[k] = v
    flat["model_type"] = "glm5_next"
    flat["architectures"] = ["Glm5NextForConditionalGeneration"]
    flat["linear_attn_config"] = {"gate_lower_bound": None, "safe_gate": False}
    order = ["architectures", "model_type"]
    return {**{k: flat[k] for k in order}, **{k: flat[k] for k in sorted(flat) if k not in order}}


def do_glm5_flat(out, tok_ids, max_seeds):
    from transformers import Glm5NextForConditionalGeneration as C

    name = "glm5_flat"
    d = os.path.join(out, name)
    work = os.path.join(out, "_work_glm5_flat_nested")
    prompt = make_prompt(list(SEED_BASE).index(name))
    eos = [tok_ids["<|endoftext|>"]]
    seed, res_nested, tries, init = seed_search(
        name,
        lambda: build_glm5_flat_config(tok_ids),
        C,
        work,
        prompt,
        eos,
        n_group=2,
        max_seeds=max_seeds,
        save_kwargs={"max_shard_size": "400KB"},
    )
    with open(os.path.join(work, "config.json")) as f:
        sp_cfg = json.load(f)
    sp_files = sorted(os.listdir(work))
    log(f"[{name}] save_pretrained (in-memory flat config) wrote {sp_files}; top-level config keys: {sorted(sp_cfg)}")

    tensors = read_all_tensors(work)
    text_only = {k: v for k, v in tensors.items() if not k.startswith("model.visual.")}
    flat_names = {
        ("model." + k[len("model.language_model.") :] if k.startswith("model.language_model.") else k): v
        for k, v in text_only.items()
    }
    # The text config as resolved in memory (from the nested reload).
    ref_cfg, _ = load_model(C, work, torch.float32)
    text_dict = ref_cfg.config.text_config.to_dict()
    del ref_cfg
    flat_cfg = flat_config_dict(sp_cfg, text_dict)

    attempts = [
        ("flat config + flat weight names (model.layers.*)", flat_names),
        ("flat config + nested weight names (model.language_model.layers.*)", text_only),
    ]
    chosen, attempt_log = None, []
    for label, tens in attempts:
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(d)
        jdump(flat_cfg, os.path.join(d, "config.json"))
        for fn in ("generation_config.json",):
            if os.path.exists(os.path.join(work, fn)):
                shutil.copy(os.path.join(work, fn), os.path.join(d, fn))
        nshards = write_sharded(tens, d, 400 * 1024)
        entry = {"attempt": label, "shards": nshards}
        try:
            m, info = load_model(C, d, torch.float32, output_loading_info=True)
            missing = sorted(k for k in (info or {}).get("missing_keys", []) if ".visual." not in k)
            unexpected = sorted((info or {}).get("unexpected_keys", []))
            entry["missing_text_keys"] = missing[:50]
            entry["n_missing_text_keys"] = len(missing)
            entry["unexpected_keys"] = unexpected[:50]
            entry["n_missing_visual_keys"] = len([k for k in (info or {}).get("missing_keys", []) if ".visual." in k])
            entry["loaded_text_config_layers"] = m.config.text_config.num_hidden_layers
            with torch.no_grad():
                lg = m(input_ids=prompt.to("cuda")[None], use_cache=False).logits[0].float().cpu()
            entry["logits_max_abs_diff_vs_nested"] = float((lg - res_nested["logits"]).abs().max())
            del m
            torch.cuda.empty_cache()
            ok = not missing and entry["logits_max_abs_diff_vs_nested"] < 1e-4
        except Exception:
            entry["error"] = traceback.format_exc()[-3000:]
            ok = False
        entry["ok"] = ok
        attempt_log.append(entry)
        log(f"[{name}] {label}: {'OK' if ok else 'FAILED'} {json.dumps({k: v for k, v in entry.items() if k != 'error'}, default=str)[:1500]}")
        if "error" in entry:
            log(entry["error"])
        if ok:
            chosen = label
            break
    if chosen is None:
        # Fall back to what save_pretrained wrote (nested config + nested names).
        if os.path.exists(d):
            shutil.rmtree(d)
        shutil.copytree(work, d)
        chosen = "FALLBACK: save_pretrained output (config as written, nested weight names)"
        log(f"[{name}] {chosen}")

    shutil.rmtree(work, ignore_errors=True)
    notes = {
        "layout": chosen,
        "flat_attempts": attempt_log,
        "save_pretrained_config_json_of_in_memory_flat_config": sp_cfg,
        "save_pretrained_files": sp_files,
        "how": (
            "Model built in memory as Glm5NextConfig(vision_config=<tiny>, **text_kwargs) (no text_config key), "
            "randomized, cast to bf16, save_pretrained(max_shard_size=400KB). The fixture's config.json is then "
            "written by hand: the resolved text-config fields at the top level, model_type glm5_next, no text_config "
            "and no vision_config (so transformers builds a default, randomly initialised vision tower that the text "
            "path never touches). Weights: text tensors only (model.visual.* dropped), names per 'layout', re-sharded "
            "by hand at ~400 KB with model.safetensors.index.json. Goldens come from loading this folder."
        ),
        "features": "softplus gate (linear_lower_bound None via linear_attn_config safe_gate False), n_group 2 / "
        "topk_group 1, DSA layers 0 (full), 1 (shared: reuses layer 0 top-k, no indexer weights), 3 (full); "
        "layer 0 dense MLP, others MoE; index_kpool_always_select_tail true.",
    }
    # Goldens from the final folder (fp32 + bf16), loading it fresh.
    finish_fixture(name, C, d, prompt, None, eos, tok_ids["<|endoftext|>"], 2, seed, tries, init, notes)


def do_kimi(out, tok_ids, max_seeds):
    from transformers import KimiLinearForCausalLM as C

    name = "kimi_tiny"
    d = os.path.join(out, name)
    prompt = make_prompt(list(SEED_BASE).index(name))
    eos = [tok_ids["<|endoftext|>"]]
    variant = {}

    def build():
        cfg, v = build_kimi_config(tok_ids)
        variant.update(v)
        return cfg

    seed, res32, tries, init = seed_search(name, build, C, d, prompt, eos, n_group=1, max_seeds=max_seeds)
    with open(os.path.join(d, "config.json")) as f:
        written = json.load(f)
    notes = {
        "config_kwargs_variant_used": variant,
        "linear_attn_config_in_written_config": written.get("linear_attn_config"),
        "first_k_dense_replace_in_written_config": written.get("first_k_dense_replace"),
        "note": "kimi_linear: KDA layers 0-2 (softplus gate), MLA (NoPE) layer 3; layer 0 dense MLP, 1-3 MoE (8 experts, "
        "top-2, routed_scaling_factor 2.446, n_group 1). kv_a_layernorm uses the module default eps (1e-6).",
    }
    finish_fixture(name, C, d, prompt, res32, eos, tok_ids["<|endoftext|>"], 1, seed, tries, init, notes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--only", default="tokenizer,glm5_tiny,glm5_flat,kimi_tiny")
    ap.add_argument("--max-seeds", type=int, default=12)
    args = ap.parse_args()
    only = set(args.only.split(","))
    out = os.path.abspath(args.outdir)
    os.makedirs(out, exist_ok=True)
    global LOG_PATH
    LOG_PATH = os.path.join(out, "make_goldens.log")
    setup_torch()
    log(f"versions: {versions()}")
    t0 = time.time()
    tokdir = os.path.join(out, "tokenizer")
    tok_ids = make_tokenizer(tokdir)  # always (model vocab + special ids depend on it)
    failures = []
    for name, fn in (
        ("glm5_tiny", lambda: do_glm5_tiny(out, tok_ids, tokdir, args.max_seeds)),
        ("kimi_tiny", lambda: do_kimi(out, tok_ids, args.max_seeds)),
        ("glm5_flat", lambda: do_glm5_flat(out, tok_ids, args.max_seeds)),
    ):
        if name not in only:
            continue
        t1 = time.time()
        try:
            fn()
        except Exception:
            failures.append(name)
            log(f"[{name}] FAILED:\n{traceback.format_exc()}")
        log(f"[{name}] {time.time() - t1:.1f}s")
    if "tokenizer" not in only:
        shutil.rmtree(tokdir, ignore_errors=True)
    log(f"total {time.time() - t0:.1f}s; failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

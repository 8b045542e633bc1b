#!/usr/bin/env python3
"""A byte-level BPE tokenizer.json whose vocabulary covers every id of a large random-weight model.

Random-weight serving benchmarks (tools/gpu/serve_bench.sh) send token-id prompts and decode
whatever ids the model samples; with a small tokenizer most sampled ids would decode to nothing and
streamed chunks (the client's inter-token latency) would vanish. This writes a tokenizer in the HF
`tokenizers` format with `--vocab` entries: the 256 byte-level symbols, then one distinct short
word per id (" w<base-36 id>"), no merges (encoding text yields bytes only; decoding any id yields
text). It is a benchmark instrument, not a language tokenizer.
Usage: synthetic_tokenizer.py --vocab 154880 --out DIR/tokenizer.json
"""
import argparse, json


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def base36(i):
    d = "0123456789abcdefghijklmnopqrstuvwxyz"
    s = ""
    while True:
        s = d[i % 36] + s
        i //= 36
        if i == 0:
            return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    for i in range(256, a.vocab):
        word = "".join(b2u[c] for c in (" w" + base36(i)).encode())
        vocab[word] = i
    assert len(vocab) == a.vocab
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    json.dump(tok, open(a.out, "w"), ensure_ascii=False)


if __name__ == "__main__":
    main()

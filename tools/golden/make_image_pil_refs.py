#!/usr/bin/env python3
"""Pillow references for src/image/image_test.cc (decode, RGB conversion, bicubic resize).

Usage:  /usr/bin/python3 tools/golden/make_image_pil_refs.py tests/fixtures/images/pil

Runs on this machine with Debian's python3-pil (9.4) and python3-numpy. For every seed image of
src/image/testdata/fuzz_image_decode/ it writes <name>.white.rgb (transformers' convert_to_rgb:
RGBA composited on opaque white) and <name>.drop.rgb (PIL's convert("RGB")), raw uint8 [H][W][3];
for a seeded random RGB source it writes Pillow's BICUBIC resize to several sizes. manifest.json
lists the files and sizes. The transformers processor goldens are tools/gpu/image_goldens.py.
"""
import json
import os
import sys

import numpy as np
import PIL
from PIL import Image

SEEDS = "src/image/testdata/fuzz_image_decode"


def white(img):
    rgba = img.convert("RGBA")
    bg = Image.new("RGBA", rgba.size, (255, 255, 255))
    return Image.alpha_composite(bg, rgba).convert("RGB")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    man = {"pillow": PIL.__version__, "decode": [], "resize": []}
    for fn in sorted(os.listdir(SEEDS)):
        img = Image.open(os.path.join(SEEDS, fn))
        img.load()
        base = os.path.splitext(fn)[0] + "_" + os.path.splitext(fn)[1][1:]
        w = np.asarray(white(img) if img.mode != "RGB" else img, dtype=np.uint8)
        d = np.asarray(img.convert("RGB"), dtype=np.uint8)
        open(os.path.join(out, base + ".white.rgb"), "wb").write(w.tobytes())
        open(os.path.join(out, base + ".drop.rgb"), "wb").write(d.tobytes())
        man["decode"].append({"file": fn, "name": base, "mode": img.mode, "w": img.size[0], "h": img.size[1]})
    rng = np.random.default_rng(20261205)
    src = rng.integers(0, 256, size=(47, 61, 3), dtype=np.uint8)
    open(os.path.join(out, "resize_src_61x47.rgb"), "wb").write(src.tobytes())
    for w, h in [(30, 20), (128, 90), (61, 100), (200, 47), (7, 5), (61, 47), (13, 160)]:
        r = np.asarray(Image.fromarray(src, "RGB").resize((w, h), Image.BICUBIC), dtype=np.uint8)
        name = f"resize_{w}x{h}.rgb"
        open(os.path.join(out, name), "wb").write(r.tobytes())
        man["resize"].append({"file": name, "w": w, "h": h})
    json.dump(man, open(os.path.join(out, "manifest.json"), "w"), indent=1)


if __name__ == "__main__":
    main()

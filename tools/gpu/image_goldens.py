#!/usr/bin/env python3
"""Image-preprocessing goldens from the transformers 5.17 glm5_next image processor.

Usage:  python3 tools/gpu/image_goldens.py OUTDIR
(the device returns at most 8 files of 16 MiB: everything but the json and the log is packed into
OUTDIR/image_goldens.tar.gz; unpack it with `tar xzf`)

Needs numpy, PIL and transformers 5.17 (glm5_next); no network, no GPU (the processor runs on the CPU).
Generates a dozen test images deterministically (seeded numpy; varied sizes, modes, aspect ratios,
PNG and JPEG), opens each file with PIL as a user would, and runs every image processor class of the
glm5_next package (the PIL / slow one is the reference for gyre; a torch / fast one, if present, is
recorded too). Writes:
  OUTDIR/<name>.png|.jpg                 the encoded test images (the inputs)
  OUTDIR/<name>.rgb.npy                   PIL's decode + the processor's RGB conversion, uint8 [H, W, 3]
  OUTDIR/<name>.<Class>.pixel_values.npy  float32 [N, 1176] (only when under 4 MB; larger ones keep the
                                          sha256 and <name>.<Class>.pixel_u8.npy, round((pv·std+mean)·255)
                                          as uint8, with the check that it reproduces pv recorded in the json)
  OUTDIR/<name>.<Class>.grid_thw.npy      int64 [1, 3]
  OUTDIR/image_goldens.json               per image: file, mode, size, grid, sha256 of pixel_values, errors;
                                          processor classes with their to_dict(); versions
  OUTDIR/src/*.py                         the glm5_next package sources (to read the exact resize rule)
  OUTDIR/image_goldens.log                this run's log
"""

import hashlib
import inspect
import io
import json
import os
import pkgutil
import shutil
import sys
import traceback

import numpy as np
from PIL import Image

OUT = None
SEED = 20261205


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    with open(os.path.join(OUT, "image_goldens.log"), "a", encoding="utf-8") as f:
        f.write(s + "\n")


def smooth(rng, h, w, c):
    """A smooth random field plus a little noise: compresses well, but every pixel differs."""
    ys = np.linspace(0, 1, h)[:, None, None]
    xs = np.linspace(0, 1, w)[None, :, None]
    f = rng.uniform(1, 6, size=(1, 1, c))
    p = rng.uniform(0, 6.28, size=(1, 1, c))
    base = 0.5 + 0.35 * np.sin(f * (ys * 3 + xs * 2) + p) * np.cos(f * xs * 4 - p)
    noise = rng.uniform(-0.08, 0.08, size=(h, w, c))
    return np.clip(base + noise, 0, 1)


def blocky(rng, h, w, c, k):
    """smooth() at 1/k resolution, repeated k×k: large images whose PNG stays small."""
    a = smooth(rng, h // k + 1, w // k + 1, c)
    return np.repeat(np.repeat(a, k, axis=0), k, axis=1)[:h, :w]


def make_images(rng):
    """(name, PIL image, save kwargs). Sizes cover: no resize + pad, upscale below the minimum,
    downscale above the budget, extreme aspect ratios, every PIL mode the converter meets."""
    out = []

    def u8(a):
        return (a * 255).round().astype(np.uint8)

    out.append(("rgb_100x150", Image.fromarray(u8(smooth(rng, 100, 150, 3)), "RGB"), "png", {}))
    out.append(("rgb_336x336", Image.fromarray(u8(smooth(rng, 336, 336, 3)), "RGB"), "png", {}))
    out.append(("rgb_tiny_20x30", Image.fromarray(u8(smooth(rng, 20, 30, 3)), "RGB"), "png", {}))
    out.append(("rgb_wide_40x900", Image.fromarray(u8(smooth(rng, 40, 900, 3)), "RGB"), "png", {}))
    # Above the pixel budget: must be downscaled with bicubic.
    out.append(("rgb_big_2400x2800", Image.fromarray(u8(blocky(rng, 2400, 2800, 3, 4)), "RGB"), "png", {}))
    out.append(("grey_L_64x200", Image.fromarray(u8(smooth(rng, 64, 200, 1))[:, :, 0], "L"), "png", {}))
    rgba = u8(smooth(rng, 120, 300, 4))
    rgba[:10, :, 3] = 0  # fully transparent rows
    rgba[10:20, :, 3] = 255
    out.append(("rgba_120x300", Image.fromarray(rgba, "RGBA"), "png", {}))
    la = u8(smooth(rng, 90, 70, 2))
    out.append(("grey_alpha_LA_90x70", Image.fromarray(la, "LA"), "png", {}))
    pal = Image.fromarray(u8(smooth(rng, 77, 131, 3)), "RGB").quantize(colors=37, method=Image.Quantize.MEDIANCUT)
    pal.info["transparency"] = 5
    out.append(("palette_P_77x131", pal, "png", {"transparency": 5}))
    g16 = (smooth(rng, 90, 90, 1)[:, :, 0] * 65535).round().astype(np.uint16)
    g16[:45] //= 300  # half the rows stay below 256 (I;16 → 8 bit clips in PIL)
    out.append(("grey16_I16_90x90", Image.fromarray(g16, "I;16"), "png", {}))
    out.append(("jpeg_420_375x500", Image.fromarray(u8(smooth(rng, 375, 500, 3)), "RGB"), "jpeg",
                {"quality": 90, "subsampling": 2}))
    out.append(("jpeg_444_201x157", Image.fromarray(u8(smooth(rng, 201, 157, 3)), "RGB"), "jpeg",
                {"quality": 95, "subsampling": 0}))
    out.append(("jpeg_grey_123x77", Image.fromarray(u8(smooth(rng, 123, 77, 1))[:, :, 0], "L"), "jpeg",
                {"quality": 85}))
    out.append(("jpeg_big_2100x1500", Image.fromarray(u8(smooth(rng, 2100, 1500, 3)), "RGB"), "jpeg",
                {"quality": 80}))
    return out


def processor_classes():
    import transformers.models.glm5_next as pkg

    pkg_dir = os.path.dirname(pkg.__file__)
    os.makedirs(os.path.join(OUT, "src"), exist_ok=True)
    for f in sorted(os.listdir(pkg_dir)):
        if f.endswith(".py"):
            shutil.copy(os.path.join(pkg_dir, f), os.path.join(OUT, "src", f))
    classes = {}
    for m in pkgutil.iter_modules([pkg_dir]):
        if "image_processing" not in m.name:
            continue
        try:
            mod = __import__(pkg.__name__ + "." + m.name, fromlist=["*"])
        except Exception as e:  # noqa: BLE001 - record and go on (a torchvision-only module, say)
            log("import", m.name, "failed:", repr(e))
            continue
        for name, obj in inspect.getmembers(mod, inspect.isclass):
            if "ImageProcessor" in name and obj.__module__ == mod.__name__:
                classes[name] = obj
    return classes


def main():
    global OUT
    OUT = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)
    import PIL
    import transformers

    meta = {"versions": {"transformers": transformers.__version__, "PIL": PIL.__version__,
                         "numpy": np.__version__, "python": sys.version.split()[0]},
            "seed": SEED, "processors": {}, "images": {}}
    try:
        import torch

        meta["versions"]["torch"] = torch.__version__
    except Exception:  # noqa: BLE001
        pass
    log("versions", meta["versions"])
    classes = processor_classes()
    log("processor classes", sorted(classes))
    procs = {}
    for name, cls in classes.items():
        try:
            p = cls()
            procs[name] = p
            d = p.to_dict()
            meta["processors"][name] = json.loads(json.dumps(d, default=str))
            log(name, json.dumps(meta["processors"][name], default=str))
        except Exception as e:  # noqa: BLE001
            log("instantiate", name, "failed:", repr(e))
    rng = np.random.default_rng(SEED)
    for name, img, fmt, kw in make_images(rng):
        ext = "png" if fmt == "png" else "jpg"
        fn = f"{name}.{ext}"
        img.save(os.path.join(OUT, fn), format=fmt.upper(), **kw)
        rec = {"file": fn, "format": fmt, "size_wh": list(img.size), "source_mode": img.mode, "outputs": {}}
        opened = Image.open(os.path.join(OUT, fn))
        opened.load()
        rec["opened_mode"] = opened.mode
        try:
            from transformers.image_transforms import convert_to_rgb

            rgb = np.asarray(convert_to_rgb(opened.copy()))
            rec["rgb_sha256"] = hashlib.sha256(rgb.tobytes()).hexdigest()
            pil = np.asarray(opened.convert("RGB"))
            rec["pil_convert_rgb_sha256"] = hashlib.sha256(pil.tobytes()).hexdigest()
            if rgb.size <= 4_000_000:
                np.save(os.path.join(OUT, f"{name}.rgb.npy"), rgb)
                np.save(os.path.join(OUT, f"{name}.pil_convert_rgb.npy"), pil)
        except Exception as e:  # noqa: BLE001
            rec["rgb_error"] = repr(e)
        for pname, p in procs.items():
            o = {}
            try:
                r = p(images=[Image.open(os.path.join(OUT, fn))], return_tensors="np")
                pv = np.asarray(r["pixel_values"], dtype=np.float32)
                g = np.asarray(r["image_grid_thw"]).astype(np.int64)
                np.save(os.path.join(OUT, f"{name}.{pname}.grid_thw.npy"), g)
                o = {}
                if pv.nbytes <= 4_000_000:
                    np.save(os.path.join(OUT, f"{name}.{pname}.pixel_values.npy"), pv)
                else:
                    mean = np.array(p.image_mean, np.float32)
                    std = np.array(p.image_std, np.float32)
                    ch = np.repeat(np.arange(3), pv.shape[1] // 3)  # rows are [C][T][P][P]
                    q = np.round((pv * std[ch] + mean[ch]) * 255.0)
                    o["pixel_u8_range"] = [float(q.min()), float(q.max())]
                    q8 = np.clip(q, 0, 255).astype(np.uint8)
                    back = ((q8.astype(np.float32) / np.float32(255.0) - mean[ch]) / std[ch]).astype(np.float32)
                    o["pixel_u8_max_abs_err"] = float(np.abs(back - pv).max())
                    np.save(os.path.join(OUT, f"{name}.{pname}.pixel_u8.npy"), q8)
                o.update({"pixel_values_shape": list(pv.shape), "grid_thw": g.tolist(),
                     "pixel_values_sha256": hashlib.sha256(np.ascontiguousarray(pv).tobytes()).hexdigest(),
                     "keys": sorted(r.keys())})
            except Exception as e:  # noqa: BLE001
                o = {"error": repr(e), "trace": traceback.format_exc()}
            rec["outputs"][pname] = o
            log(name, pname, json.dumps({k: v for k, v in o.items() if k != "trace"}))
        meta["images"][name] = rec
    with open(os.path.join(OUT, "image_goldens.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, default=str)
    log("done:", len(meta["images"]), "images,", len(procs), "processors")
    # Pack (the device hands back at most 8 files): keep the json and the log beside the archive.
    import tarfile

    keep = {"image_goldens.json", "image_goldens.log", "image_goldens.tar.gz"}
    names = sorted(n for n in os.listdir(OUT) if n not in keep)
    with tarfile.open(os.path.join(OUT, "image_goldens.tar.gz"), "w:gz") as t:
        for n in names:
            t.add(os.path.join(OUT, n), arcname=n)
    for n in names:
        path = os.path.join(OUT, n)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    log("archive bytes", os.path.getsize(os.path.join(OUT, "image_goldens.tar.gz")))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bench/kquant_model.py — a K-quant copy of a GGUF model, the input of the K-quant load
benchmark (bench/results/kquant.md).

No model hub is reachable here and no K-quant GGUF is cached, so this requantizes one: every
tensor of --src is dequantized with gguf-py, then each matrix whose rows are a multiple of 256
long becomes Q4_K (--type Q5_K: Q5_K) with the simple quantizer below, and the other matrices
become --fallback (default Q5_0, what llama.cpp's quantizer falls back to for Q4_K when a row
does not split into super-blocks; `keep`: their source type). token_embd.weight and 1-D tensors
keep their source type and bytes. All metadata is copied.

The quantizer (not llama.cpp's; quality is not the point, the file is a benchmark input): per
group j of 32 values, lo_j = min(0, min x), hi_j = max(0, max x), scale_j = (hi_j - lo_j) /
(2^bits - 1), min_j = -lo_j; per super-block d = max scale_j / 63, dmin = max min_j / 63 (as
f16); sc_j = round(scale_j / d), m_j = round(min_j / dmin) (6 bits); q = round((x + dmin m_j) /
(d sc_j)) clipped to the q range. The layout is ggml's (kernels/cpu/quant.h).

SmolLM2-135M (the default model) has 576-wide rows everywhere but in ffn_down (1536), so its
K-quant copy is Q4_K in ffn_down and the fallback elsewhere, as a real Q4_K_M of it would be.

Usage: .venv/bin/python bench/kquant_model.py [--src FILE] --out FILE [--type Q4_K|Q5_K]
           [--fallback Q5_0|Q8_0|keep]
"""
import argparse
import pathlib
import subprocess
import sys

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize, quantize

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "reference"))
from tiny_gguf import f16_bytes, pack_scales  # noqa: E402


def quantize_k(x, five):
    """x [rows][cols] float32 (cols % 256 == 0) -> raw Q4_K / Q5_K bytes [rows][cols/256 * size]."""
    rows, cols = x.shape
    g = x.reshape(rows, cols // 256, 8, 32).astype(np.float32)
    qmax = 31 if five else 15
    lo = np.minimum(g.min(axis=-1), 0.0)
    hi = np.maximum(g.max(axis=-1), 0.0)
    scale, mins = (hi - lo) / qmax, -lo
    d = (scale.max(axis=-1) / 63).astype(np.float16)
    dmin = (mins.max(axis=-1) / 63).astype(np.float16)
    df, dminf = d.astype(np.float32)[..., None], dmin.astype(np.float32)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.rint(scale / df), 0).clip(0, 63).astype(np.uint8)
        mn = np.where(dminf > 0, np.rint(mins / dminf), 0).clip(0, 63).astype(np.uint8)
        d1 = (df * sc)[..., None]
        m1 = (dminf * mn)[..., None]
        q = np.where(d1 > 0, np.rint((g + m1) / d1), 0).clip(0, qmax).astype(np.uint8)
    lo4 = q & 15
    qs = (lo4[..., 0::2, :] | (lo4[..., 1::2, :] << 4)).reshape(rows, cols // 256, 128)
    parts = [f16_bytes(d), f16_bytes(dmin), pack_scales(sc, mn)]
    if five:
        hi1 = q >> 4
        parts.append(np.bitwise_or.reduce(hi1 << np.arange(8, dtype=np.uint8)[:, None], axis=-2))
    parts.append(qs)
    return np.concatenate(parts, axis=-1).reshape(rows, -1)


def copy_metadata(r, w):
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = GGUFValueType(f.types[0])
        sub = GGUFValueType(f.types[1]) if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), vtype, sub_type=sub)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", help="source GGUF (default: scripts/fetch-model's)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--type", default="Q4_K", choices=["Q4_K", "Q5_K"])
    ap.add_argument("--fallback", default="Q5_0", choices=["Q5_0", "Q8_0", "keep"])
    a = ap.parse_args()
    src = a.src or subprocess.run(["scripts/fetch-model"], check=True, capture_output=True,
                                  text=True).stdout.strip().splitlines()[-1]
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(a.out, arch)
    copy_metadata(r, w)
    kt = QT[a.type]
    counts = {}
    for t in r.tensors:
        ne = [int(x) for x in t.shape]
        if len(ne) != 2 or t.name == "token_embd.weight":
            w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
            continue
        x = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(ne[1], ne[0])
        if ne[0] % 256 == 0:
            raw, qt = quantize_k(x, a.type == "Q5_K"), kt
        elif a.fallback == "keep":
            raw, qt = np.asarray(t.data), t.tensor_type
        else:
            raw, qt = quantize(x, QT[a.fallback]), QT[a.fallback]
        w.add_tensor(t.name, raw, raw_dtype=qt)
        counts[qt.name] = counts.get(qt.name, 0) + 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{a.out}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())), file=sys.stderr)


if __name__ == "__main__":
    main()

"""Models whose matrices are K-quants, which pagoda re-blocks at load (Q4_K -> Q4_1, Q5_K ->
Q5_1: each group of 32 keeps its 4/5-bit values, d' = f16(d * sc), m' = f16(-dmin * m); see
kernels/cpu/quant.h), checked against gguf-py's dequantization of the same bytes.

Every tiny random model (written here with the gguf package's writer) gets a twin file holding
the Q4_1 / Q5_1 blocks the rule gives, built here in numpy from the format description. Checks:
  - the weights: gguf-py's dequantization of the twin equals that of the K-quant file within
    the rule's error bound, |y' - y| <= q * e(d * sc) + e(dmin * m) + f32 rounding, e(x) =
    max(2^-11 |x|, 2^-25) half an f16 ulp (exactly equal when d and dmin are powers of two: then
    d * sc and dmin * m are f16 numbers and nothing rounds);
  - the logits: pagoda's on the K-quant file against the float64 reference model (ref_model.py)
    on the twin within 1e-4 (the f32 arithmetic tolerance of test_forward_synthetic.py: the same
    weights); with power-of-two d and dmin also against the reference on the K-quant file
    itself within 1e-4. The old conversion (to Q8_0 through f32) is off by 2e-3 to 2e-2 there.
    With random d and dmin the twin's weights differ from the file's by ~5e-4 (relative L2:
    the rounding is relative to d sc q and dmin m, not to their smaller difference), under a
    third of what requantizing to Q8_0 costs (asserted per matrix); this tiny random model
    amplifies that ~10x in its logits (measured 4e-3 to 7e-3), so the direct comparison there
    is only a sanity bound, 2e-2.
"""
import pathlib
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from tiny_gguf import f16_bytes, pack_scales, start_model  # noqa: E402
from ref_model import RefModel  # noqa: E402

E, H, HKV, FF, LAYERS, CTX, VOCAB = 256, 4, 2, 512, 2, 256, 258


def kquant(rng, rows, cols, five, pow2):
    """Random [rows][cols] Q4_K / Q5_K blocks and their Q4_1 / Q5_1 twin, as raw bytes, plus the
    error bound of each element of the twin."""
    nsb = cols // 256
    shape = (rows, nsb)
    # y = d sc q - dmin m, sc and m up to 63, q up to 15 (31); dmin m near d sc 7.5 (15.5)
    # centres each group: weights about within +-0.25, standard deviation about 0.07
    scale, mscale = (2.0 ** -12, 16.0) if five else (2.0 ** -11, 8.0)
    if pow2:
        d = scale * 2.0 ** -rng.integers(0, 2, size=shape)
        dmin = mscale * scale * 2.0 ** -rng.integers(0, 2, size=shape)
    else:
        d = scale * rng.uniform(0.75, 1.25, size=shape)
        dmin = mscale * scale * rng.uniform(0.75, 1.25, size=shape)
    d, dmin = d.astype(np.float16), dmin.astype(np.float16)
    sc = rng.integers(0, 64, size=(*shape, 8), dtype=np.uint8)
    mn = np.clip(sc.astype(np.int64) * d.astype(np.float64)[..., None] / dmin[..., None] *
                 (15.5 if five else 7.5) + rng.integers(-3, 4, size=sc.shape), 0, 63)
    mn = mn.round().astype(np.uint8)
    q = rng.integers(0, 32 if five else 16, size=(*shape, 8, 32), dtype=np.uint8)  # [j][l]

    # the K-quant block: group j in nibble j % 2 of qs[32 (j // 2) + l]; fifth bit j of qh[l]
    lo = q & 15
    qs = (lo[..., 0::2, :] | (lo[..., 1::2, :] << 4)).reshape(*shape, 128)
    parts = [f16_bytes(d), f16_bytes(dmin), pack_scales(sc, mn)]
    if five:
        hi = (q >> 4).astype(np.uint8)
        parts.append(np.bitwise_or.reduce(hi << np.arange(8, dtype=np.uint8)[:, None], axis=-2))
    parts.append(qs)
    kq = np.concatenate(parts, axis=-1).reshape(rows, -1)

    # the twin: one 32-block per group, d' = f16(d sc), m' = f16(-(dmin m)); element l in the
    # low nibble of qs[l], element l + 16 in its high nibble; bit l of the 32-bit qh: fifth bit
    d1 = d.astype(np.float32)[..., None] * sc.astype(np.float32)  # exact in f32
    m1 = dmin.astype(np.float32)[..., None] * mn.astype(np.float32)
    tparts = [f16_bytes(d1.astype(np.float16)), f16_bytes((-m1).astype(np.float16))]
    if five:
        bits = ((q >> 4).astype(np.uint32) << np.arange(32, dtype=np.uint32)).sum(axis=-1)
        tparts.append(np.ascontiguousarray(bits.astype("<u4")).view(np.uint8).reshape(
            *shape, 8, 4))
    tparts.append(lo[..., :16] | (lo[..., 16:] << 4))
    twin = np.concatenate(tparts, axis=-1).reshape(rows, -1)

    def e(x):
        return np.maximum(np.abs(x.astype(np.float64)) * 2.0 ** -11, 2.0 ** -25)
    bound = q * e(d1)[..., None] + e(m1)[..., None]
    return kq, twin, bound.reshape(rows, cols)


def write_pair(kpath, tpath, arch, five, pow2, tied, seed=0):
    """The same random model as a K-quant file and as its Q4_1 / Q5_1 twin; returns the largest
    weight error of the twin relative to its bound."""
    rng = np.random.default_rng(seed)
    kqt, tqt = (QT.Q5_K, QT.Q5_1) if five else (QT.Q4_K, QT.Q4_1)
    qwen3 = arch == "qwen3"
    D = 2 * E // H if qwen3 else E // H
    writers = []
    for path in (kpath, tpath):
        w = start_model(path, arch, embd=E, ff=FF, heads=H, heads_kv=HKV, layers=LAYERS,
                        ctx=CTX, rope_base=10000.0 if arch == "llama" else 1000000.0,
                        rms_eps=1e-6, pre="llama-bpe" if arch == "llama" else "qwen2")
        if qwen3:
            w.add_key_length(D)
            w.add_value_length(D)
        writers.append(w)
    worst = [0.0]

    def mat(name, rows, cols):
        kq, twin, bound = kquant(rng, rows, cols, five, pow2)
        writers[0].add_tensor(name, kq, raw_dtype=kqt)
        writers[1].add_tensor(name, twin, raw_dtype=tqt)
        y = dequantize(kq, kqt).astype(np.float64).reshape(rows, cols)
        y2 = dequantize(twin, tqt).astype(np.float64).reshape(rows, cols)
        err = np.abs(y2 - y)
        if pow2:
            assert np.array_equal(y, y2), name
        else:
            lim = bound + (np.abs(y) + np.abs(y2)) * 2.0 ** -24
            assert (err <= lim).all(), f"{name}: {err.max()} > bound"
            worst[0] = max(worst[0], float((err / lim).max()))
            # against the old conversion, f32 then Q8_0 (per 32: d = max|y| / 127)
            y8 = dequantize(quantize(y.astype(np.float32), QT.Q8_0), QT.Q8_0).astype(np.float64)
            rel8 = np.linalg.norm(y8 - y) / np.linalg.norm(y)
            assert np.linalg.norm(y2 - y) / np.linalg.norm(y) < rel8 / 3, name

    def vec(name, n, s=1.0):
        v = ((1 + rng.standard_normal(n) * 0.1) * s).astype(np.float32)
        for w in writers:
            w.add_tensor(name, v)

    mat("token_embd.weight", VOCAB, E)
    if not tied:
        mat("output.weight", VOCAB, E)
    vec("output_norm.weight", E)
    for l in range(LAYERS):
        p = f"blk.{l}."
        vec(p + "attn_norm.weight", E)
        mat(p + "attn_q.weight", H * D, E)
        mat(p + "attn_k.weight", HKV * D, E)
        mat(p + "attn_v.weight", HKV * D, E)
        if qwen3:
            vec(p + "attn_q_norm.weight", D)
            vec(p + "attn_k_norm.weight", D)
        mat(p + "attn_output.weight", E, H * D)
        vec(p + "ffn_norm.weight", E)
        mat(p + "ffn_gate.weight", FF, E)
        mat(p + "ffn_up.weight", FF, E)
        mat(p + "ffn_down.weight", E, FF)
    for w in writers:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return worst[0]


def rel_err(got, want):
    return np.linalg.norm(got - want, axis=-1) / np.linalg.norm(want, axis=-1)


VARIANTS = [  # arch, Q5_K (else Q4_K), power-of-two d and dmin, tied output
    ("llama", False, True, False),
    ("llama", False, False, True),
    ("qwen3", True, False, False),
    ("llama", True, True, True),
]


@pytest.mark.parametrize("arch,five,pow2,tied", VARIANTS)
def test_kquant_logits(run_pagoda, tmp_path, arch, five, pow2, tied):
    kpath, tpath = tmp_path / "kquant.gguf", tmp_path / "twin.gguf"
    worst = write_pair(kpath, tpath, arch, five, pow2, tied)
    if not pow2:
        assert worst > 0.05  # the twin really differs from the K-quant file by the rounding
    rng = np.random.default_rng(7)
    tokens = [int(t) for t in rng.integers(0, 256, size=24)]
    out = tmp_path / "logits.bin"
    run_pagoda("eval", "--model", kpath, "--out", out, "--chunk", 9, "--block-size", 8,
               "--kv-cache-dtype", "f32", *tokens)
    got = np.fromfile(out, dtype=np.float32).reshape(len(tokens), VOCAB).astype(np.float64)
    want_twin = RefModel(str(tpath)).forward(tokens)
    want_k = RefModel(str(kpath)).forward(tokens)
    name = f"{arch} {'Q5_K' if five else 'Q4_K'}{' pow2' if pow2 else ''}"
    err = rel_err(got, want_twin)
    assert err.max() <= 1e-4, f"{name} vs the twin: per-position relative L2 {err}"
    err_k = rel_err(got, want_k)
    lim = 1e-4 if pow2 else 2e-2
    assert err_k.max() <= lim, f"{name} vs the K-quant file: per-position relative L2 {err_k}"

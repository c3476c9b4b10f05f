#!/usr/bin/env python3
"""tests/gpu/make_gguf.py OUTDIR — tiny Llama GGUF files, one per weight type the CUDA backend
dequantizes (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), written
with the gguf package's writer (an implementation independent of pagoda's reader), for
tests/gpu/test_cuda_forward.c's test_gguf_types: every 2D weight in the file's type, norms in
f32. The types gguf-py quantizes are quantized from random f32 matrices; for the K-quants (which
it only dequantizes) each block is random bytes with its f16 scales set to small finite values,
as a quantizer could have written. Float weights are N(0, 0.05^2) (0.125 for the embedding):
larger ones make the logits ill-conditioned, the bf16 rounding of activations alone then moving
them by several percent. Shapes: 1 layer, 256 wide, 4 heads of 64 over 2 KV heads
(the tensor-core attention's shapes), FFN 512, a byte-level vocabulary padded to 1,500 ids (the
test's V). Also tiny-qwen3-F16.gguf: the same sizes as a Qwen3 (general.architecture "qwen3":
heads of 128, wider than 256 / 4, and each query and key head RMS-normed before NEOX RoPE by
attn_q_norm / attn_k_norm) in F16, and tiny-qwen3moe-Q4_K.gguf: that Qwen3 with a mixture of
experts instead of the dense FFN (general.architecture "qwen3moe": 8 experts 256 wide, 2 a token,
the 3-D expert tensors in Q4_K, the router in f32 as quantizers leave it), and tiny-Q4_K_M.gguf:
the Llama in Q4_K but for attn_v, ffn_down and output in Q6_K, as llama.cpp's Q4_K_M mixes them
(--gpu-weights q4 keeps the Q4_K matrices in 4 bits, the Q and K parts of the fused QKV too, and
the Q6_K ones in 8), and tiny-Q4_K_V8.gguf: the Llama in Q4_K but for attn_v in Q8_0 (a QKV of
4- and 8-bit parts whose values both devices hold exactly, so the logits agree as closely as the
Q4_K file's: its seed makes every row well conditioned; with seeds 993-995 a row or two of logits
moved by 2e-2 to 2e-1 on every GPU form, bf16 included, the others by 1e-4, as the bf16
activations' rounding met a near-cancelling hidden state) — all four written first:
tiny-Q6_K.gguf stays the last file written.
Deterministic: the same files every run (about 27 MB in all). Run by `make test-cuda-emu` and
`scripts/gpu-deps` (which carries them to a GPU machine in .gpu-deps/gguf)."""
import pathlib
import sys

import gguf
import numpy as np
from gguf.quants import quantize

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "reference"))
from tiny_gguf import start_model  # noqa: E402

E, H, HKV, FF, LAYERS, CTX, VOCAB = 256, 4, 2, 512, 1, 512, 1504
T = gguf.GGMLQuantizationType
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K",
         "Q5_K", "Q6_K"]
# K-quants: (byte offset of d, of dmin or None) in a block, and the scale of d (weights of
# about 0.05 rms, as the float ones)
K_SCALES = {"Q2_K": (80, 82, 2e-3), "Q3_K": (108, None, 1.2e-3), "Q4_K": (0, 2, 2e-4),
            "Q5_K": (0, 2, 1e-4), "Q6_K": (208, None, 4e-5)}


def mat(rng, wtype, rows, cols, scale, n=0, tame=False):
    """(array, type) for add_tensor: a rows x cols matrix in wtype (n > 0: n of them, [n, rows,
    cols]: a 3-D expert tensor). tame: a Q6_K's sixteen 8-bit sub-block scales of one magnitude
    (16..31, either sign), as a quantizer writes them for smooth weights, not random bytes whose
    neighbours differ a hundredfold (which no requantization into blocks of 32 survives)."""
    qt = T[wtype]
    if n:  # the experts' matrices one after another, as rows of one matrix
        arr, qt = mat(rng, wtype, n * rows, cols, scale, tame=tame)
        return arr.reshape(n, rows, arr.shape[-1]), qt
    if wtype in K_SCALES:
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qt]
        n_blocks = cols // block_elems
        raw = rng.integers(0, 256, size=(rows, n_blocks, block_bytes), dtype=np.uint8)
        at_d, at_m, s = K_SCALES[wtype]
        for at in (at_d, at_m):
            if at is None:
                continue
            f = (rng.uniform(0.5, 1.5, size=(rows, n_blocks)) * s).astype(np.float16)
            raw[:, :, at:at + 2] = f.view(np.uint8).reshape(rows, n_blocks, 2)
        if tame and wtype == "Q6_K":  # scales: int8 [16] at byte 192
            shape = (rows, n_blocks, 16)
            sc = rng.integers(16, 32, size=shape) * rng.choice([-1, 1], size=shape)
            raw[:, :, 192:208] = sc.astype(np.int8).view(np.uint8)
        return raw.reshape(rows, n_blocks * block_bytes), qt
    a = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    if wtype == "F32":
        return a, qt
    if wtype == "F16":
        return a.astype(np.float16), qt
    return quantize(a, qt), qt


N_EXP, N_USED, FF_EXP = 8, 2, 256  # the qwen3moe file's experts


def write(path, wtype, seed, arch="llama", mix=None):
    """mix: {tensor name suffix: type} for tensors not in wtype."""
    rng = np.random.default_rng(seed)
    mix = mix or {}
    type_of = lambda name: mix.get(name.split(".")[-2], wtype)  # noqa: E731
    qwen3 = arch in ("qwen3", "qwen3moe")
    moe = arch == "qwen3moe"
    w = start_model(path, arch, embd=E, ff=FF, heads=H, heads_kv=HKV, layers=LAYERS, ctx=CTX,
                    rope_base=1000000.0 if qwen3 else 10000.0, rms_eps=1e-6 if qwen3 else 1e-5,
                    pre="qwen2" if qwen3 else "llama-bpe", vocab=VOCAB)
    vec = lambda n: (1 + rng.standard_normal(n) * 0.1).astype(np.float32)  # noqa: E731

    def add(name, rows, cols, scale, n=0):
        arr, qt = mat(rng, type_of(name), rows, cols, scale, n, tame=bool(mix))
        w.add_tensor(name, arr, raw_dtype=qt)

    D = 2 * E // H if qwen3 else E // H  # qwen3: heads wider than E / H, as Qwen3-0.6B's
    if qwen3:
        w.add_key_length(D)
        w.add_value_length(D)
    if moe:
        w.add_expert_count(N_EXP)
        w.add_expert_used_count(N_USED)
        w.add_expert_feed_forward_length(FF_EXP)
    # the vocabulary's last 4 rows (padding 1500 ids to 1504, a multiple of 8, as 8-bit weights
    # on the GPU once wanted) from a source of their own, so that every other value stays what
    # the files held with 1500 ids
    extra = np.random.default_rng(seed + 77)
    for name, scale in (("token_embd.weight", 0.125), ("output.weight", 0.05)):
        arr, qt = mat(rng, type_of(name), VOCAB - 4, E, scale, tame=bool(mix))
        tail, _ = mat(extra, type_of(name), 4, E, scale, tame=bool(mix))
        w.add_tensor(name, np.concatenate([arr, tail]), raw_dtype=qt)
    w.add_tensor("output_norm.weight", vec(E))
    for layer in range(LAYERS):
        p = f"blk.{layer}."
        w.add_tensor(p + "attn_norm.weight", vec(E))
        add(p + "attn_q.weight", H * D, E, 0.05)
        add(p + "attn_k.weight", HKV * D, E, 0.05)
        add(p + "attn_v.weight", HKV * D, E, 0.05)
        if qwen3:  # spread widely, so that a norm left out or swapped changes the logits
            w.add_tensor(p + "attn_q_norm.weight",
                         vec(D) * np.linspace(0.5, 2, D, dtype=np.float32))
            w.add_tensor(p + "attn_k_norm.weight",
                         vec(D) * np.linspace(2, 0.5, D, dtype=np.float32))
        add(p + "attn_output.weight", E, H * D, 0.05)
        w.add_tensor(p + "ffn_norm.weight", vec(E))
        if moe:  # router logits of a few units: the chosen experts stand well apart
            w.add_tensor(p + "ffn_gate_inp.weight",
                         (rng.standard_normal((N_EXP, E)) * 0.3).astype(np.float32))
            add(p + "ffn_gate_exps.weight", FF_EXP, E, 0.05, N_EXP)
            add(p + "ffn_up_exps.weight", FF_EXP, E, 0.05, N_EXP)
            add(p + "ffn_down_exps.weight", E, FF_EXP, 0.05, N_EXP)
            continue
        add(p + "ffn_gate.weight", FF, E, 0.05)
        add(p + "ffn_up.weight", FF, E, 0.05)
        add(p + "ffn_down.weight", E, FF, 0.05)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    write(out / "tiny-qwen3-F16.gguf", "F16", seed=999, arch="qwen3")
    write(out / "tiny-qwen3moe-Q4_K.gguf", "Q4_K", seed=998, arch="qwen3moe")
    write(out / "tiny-Q4_K_M.gguf", "Q4_K", seed=997,
          mix={"attn_v": "Q6_K", "ffn_down": "Q6_K", "output": "Q6_K"})
    write(out / "tiny-Q4_K_V8.gguf", "Q4_K", seed=996, mix={"attn_v": "Q8_0"})
    for i, t in enumerate(TYPES):
        write(out / f"tiny-{t}.gguf", t, seed=1000 + i)
    return 0


if __name__ == "__main__":
    sys.exit(main())

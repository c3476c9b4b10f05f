"""The header of a tiny random-weight model written with the gguf package's writer, shared by the
tests that write such models (tests/reference/test_forward_synthetic.py, tests/gpu/make_gguf.py):
the hyper-parameters and a byte-level vocabulary — the 256 byte tokens, "ab" with its merge,
padding ids up to `vocab`, then "<|end|>" (EOS) last. Also the byte packing of K-quant blocks
(pack_scales, f16_bytes) that tests/reference/test_forward_kquant.py and bench/kquant_model.py
write their Q4_K / Q5_K tensors with."""
import gguf
import numpy as np

from byte_level import bytes_to_unicode


def start_model(path, arch, *, embd, ff, heads, heads_kv, layers, ctx, rope_base, rms_eps, pre,
                vocab=258):
    """A GGUFWriter for `path` with the metadata set; the caller adds the tensors and writes."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(layers)
    w.add_embedding_length(embd)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(heads_kv)
    w.add_context_length(ctx)
    w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(rms_eps)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    table = bytes_to_unicode()
    toks = [table[b] for b in range(256)] + ["ab"]
    toks += [f"<pad{i}>" for i in range(vocab - len(toks) - 1)] + ["<|end|>"]
    w.add_token_list(toks)
    w.add_token_types([1] * 257 + [3] * (vocab - 257))
    w.add_token_merges(["a b"])
    w.add_eos_token_id(vocab - 1)
    return w


def pack_scales(sc, mn):
    """ggml's packing of eight 6-bit scales and mins [..., 8] into [..., 12] bytes."""
    out = np.zeros((*sc.shape[:-1], 12), dtype=np.uint8)
    out[..., 0:4] = sc[..., 0:4] | ((sc[..., 4:8] >> 4) << 6)
    out[..., 4:8] = mn[..., 0:4] | ((mn[..., 4:8] >> 4) << 6)
    out[..., 8:12] = (sc[..., 4:8] & 15) | ((mn[..., 4:8] & 15) << 4)
    return out


def f16_bytes(x):
    return np.ascontiguousarray(x.astype("<f2")).view(np.uint8).reshape(*x.shape, 2)

"""Dummy weights (`--load-format dummy --model-preset ...`) are exactly the weights their spec
describes: this file re-implements the counter hash, the per-tensor scales and the Llama 3
RoPE frequency factors from engine/model/dummy.h, common/counter_hash.h and Meta's published
formula, writes those weights into a GGUF file with the gguf package, and checks that pagoda's
logits from the preset equal, bit for bit, its logits from that file, and match the float64
reference model (ref_model.py) within 1e-4. Five tiny presets: Llama with "llama3" rope scaling
and an untied output, Qwen2 (Q/K/V biases, NEOX RoPE, tied output), Qwen3 (q/k head norms,
heads wider than hidden / heads), and the mixtures of experts Qwen3-MoE and Mixtral (router and
expert tensors from their own id range, each 3-D tensor hashed as one matrix)."""
import json
import math
import pathlib
import sys

import gguf
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from ref_model import RefModel  # noqa: E402

SEED = 0x70A60DA5EED  # PGD_DUMMY_SEED
U64 = np.uint64


def hash64(x):
    """splitmix64's finalizer on uint64 arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> U64(30))
        x = x * U64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> U64(27))
        x = x * U64(0x94D049BB133111EB)
        x = x ^ (x >> U64(31))
    return x


def dummy_values(tensor, n, shift):
    i = np.arange(n, dtype=np.uint64)
    h = hash64(U64(SEED) ^ hash64((U64(tensor) << U64(40)) ^ i))
    v = 2 * (h >> U64(57)).astype(np.int64) - 127  # odd integers in [-127, 127]
    return v.astype(np.float64) / 2.0 ** shift


def matrix_shift(cols):
    return int(round(math.log2(73.6 * math.sqrt(cols))))


def llama3_factors(rope_dim, base, factor, low, high, orig):
    out = []
    low_wavelen, high_wavelen = orig / low, orig / high
    for i in range(rope_dim // 2):
        freq = base ** (-2.0 * i / rope_dim)
        wavelen = 2.0 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append(1.0 / ((1.0 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


PRESETS = {
    "llama3": {
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 300, "max_position_embeddings": 256, "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    },
    "qwen2": {
        "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 80,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
        "vocab_size": 300, "max_position_embeddings": 256, "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "rope_scaling": None,
    },
    "qwen3": {
        "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 80,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "vocab_size": 300, "max_position_embeddings": 256,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        "attention_bias": False, "rope_scaling": None,
    },
    "qwen3_moe": {
        "model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 80,
        "moe_intermediate_size": 48, "num_experts": 6, "num_experts_per_tok": 2,
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "vocab_size": 300, "max_position_embeddings": 256,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "rope_scaling": None,
    },
    "mixtral": {
        "model_type": "mixtral", "hidden_size": 64, "intermediate_size": 40,
        "num_local_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
        "max_position_embeddings": 256, "rope_theta": 1000000.0, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False, "rope_scaling": None,
    },
}
GGUF_ARCH = {"qwen3_moe": "qwen3moe", "mixtral": "llama"}


def write_gguf(path, p):
    """The preset's dummy weights as a GGUF file (F16 matrices, F32 vectors)."""
    arch = GGUF_ARCH.get(p["model_type"], p["model_type"])
    E, FF, L = p["hidden_size"], p["intermediate_size"], p["num_hidden_layers"]
    NX = p.get("num_experts", p.get("num_local_experts", 0))
    FX = p.get("moe_intermediate_size", FF)
    H, HKV, V = p["num_attention_heads"], p["num_key_value_heads"], p["vocab_size"]
    D = p.get("head_dim", E // H)
    w = gguf.GGUFWriter(str(path), arch)
    if "head_dim" in p:
        w.add_key_length(D)
        w.add_value_length(D)
    w.add_block_count(L)
    w.add_embedding_length(E)
    w.add_feed_forward_length(FF)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_context_length(p["max_position_embeddings"])
    w.add_rope_freq_base(p["rope_theta"])
    w.add_layer_norm_rms_eps(p["rms_norm_eps"])
    w.add_vocab_size(V)
    if NX:
        w.add_expert_count(NX)
        w.add_expert_used_count(p["num_experts_per_tok"])
        if arch == "qwen3moe":
            w.add_expert_feed_forward_length(FX)
    w.add_tokenizer_model("llama")
    toks = [f"<0x{b:02X}>" for b in range(256)] + ["<s>", "</s>"]
    w.add_token_list(toks)
    w.add_token_types([6] * 256 + [3, 3])
    w.add_bos_token_id(256)
    w.add_eos_token_id(257)

    def mat(name, tensor, rows, cols, shift):
        a = dummy_values(tensor, rows * cols, shift).reshape(rows, cols)
        w.add_tensor(name, a.astype(np.float16), raw_dtype=gguf.GGMLQuantizationType.F16)

    def experts(name, tensor, rows, cols, shift):
        a = dummy_values(tensor, NX * rows * cols, shift).reshape(NX, rows, cols)
        w.add_tensor(name, a.astype(np.float16), raw_dtype=gguf.GGMLQuantizationType.F16)

    def vec(name, tensor, n, base):
        w.add_tensor(name, (base + dummy_values(tensor, n, 10)).astype(np.float32))

    mat("token_embd.weight", 0, V, E, 7)
    vec("output_norm.weight", 1, E, 1.0)
    if not p["tie_word_embeddings"]:
        mat("output.weight", 2, V, E, matrix_shift(E))
    rs = p["rope_scaling"]
    if rs:
        w.add_tensor("rope_freqs.weight", llama3_factors(
            D, p["rope_theta"], rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"],
            rs["original_max_position_embeddings"]))
    for l in range(L):
        t = lambda which: 16 + 16 * l + which
        b = f"blk.{l}."
        vec(b + "attn_norm.weight", t(0), E, 1.0)
        mat(b + "attn_q.weight", t(1), H * D, E, matrix_shift(E))
        mat(b + "attn_k.weight", t(2), HKV * D, E, matrix_shift(E))
        mat(b + "attn_v.weight", t(3), HKV * D, E, matrix_shift(E))
        mat(b + "attn_output.weight", t(4), E, H * D, matrix_shift(H * D))
        if arch == "qwen2":
            vec(b + "attn_q.bias", t(5), H * D, 0.0)
            vec(b + "attn_k.bias", t(6), HKV * D, 0.0)
            vec(b + "attn_v.bias", t(7), HKV * D, 0.0)
        if arch.startswith("qwen3"):
            vec(b + "attn_q_norm.weight", t(12), D, 1.0)
            vec(b + "attn_k_norm.weight", t(13), D, 1.0)
        vec(b + "ffn_norm.weight", t(8), E, 1.0)
        if NX:  # pgd_dummy_moe_id: 2^23 + 4 l + (router, gate, up, down)
            x = lambda which: (1 << 23) + 4 * l + which
            mat(b + "ffn_gate_inp.weight", x(0), NX, E, matrix_shift(E))
            experts(b + "ffn_gate_exps.weight", x(1), FX, E, matrix_shift(E))
            experts(b + "ffn_up_exps.weight", x(2), FX, E, matrix_shift(E))
            experts(b + "ffn_down_exps.weight", x(3), E, FX, matrix_shift(FX))
            continue
        mat(b + "ffn_gate.weight", t(9), FF, E, matrix_shift(E))
        mat(b + "ffn_up.weight", t(10), FF, E, matrix_shift(E))
        mat(b + "ffn_down.weight", t(11), E, FF, matrix_shift(FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def eval_logits(run_pagoda, out, tokens, vocab, *model_args):
    meta = json.loads(run_pagoda("eval", *model_args, "--out", out, "--chunk", 7,
                                 "--block-size", 8, "--kv-cache-dtype", "f32", *tokens).stdout)
    assert meta["tokens"] == tokens and meta["n_vocab"] == vocab
    return np.fromfile(out, dtype=np.float32).reshape(len(tokens), vocab)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_dummy_weights_are_the_spec(run_pagoda, tmp_path, name):
    p = PRESETS[name]
    preset = tmp_path / f"{name}.json"
    preset.write_text(json.dumps(p))
    model = tmp_path / f"{name}.gguf"
    write_gguf(model, p)
    tokens = [int(t) for t in np.random.default_rng(11).integers(0, 256, size=30)]
    V = p["vocab_size"]
    from_preset = eval_logits(run_pagoda, tmp_path / "a.bin", tokens, V, "--load-format", "dummy",
                              "--model-preset", preset)
    from_file = eval_logits(run_pagoda, tmp_path / "b.bin", tokens, V, "--model", model)
    assert np.array_equal(from_preset, from_file), np.abs(from_preset - from_file).max()
    want = RefModel(str(model)).forward(tokens)
    got = from_preset.astype(np.float64)
    err = np.linalg.norm(got - want, axis=-1) / np.linalg.norm(want, axis=-1)
    assert err.max() <= 1e-4, f"{name}: per-position relative L2 {err}"
    # the weights are live: logits vary from position to position
    assert np.std(from_preset, axis=0).mean() > 1e-3


def test_builtin_presets_generate(run_pagoda):
    """Every built-in preset's shapes load (the smallest two also generate, deterministically)."""
    for name in ("smollm2-135m", "qwen2.5-0.5b", "qwen3-0.6b"):
        runs = [json.loads(run_pagoda("generate", "--model-preset", name, "--prompt", "hi",
                                      "--max-tokens", "6", "--temperature", "0",
                                      "--ignore-eos", "--json").stdout) for _ in range(2)]
        assert runs[0]["token_ids"] == runs[1]["token_ids"] and len(runs[0]["token_ids"]) == 6
        assert runs[0]["prompt_token_ids"] == [104, 105]  # the byte tokenizer

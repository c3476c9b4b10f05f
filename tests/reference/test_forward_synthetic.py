"""Model variants the default model does not exercise, on tiny random-weight GGUFs written here
with the gguf package's writer: Qwen2 (Q/K/V biases, NEOX-style RoPE), Qwen3 (an RMSNorm of
every query and key head before NEOX-style RoPE, and heads wider than embedding / heads, as
Qwen3's 128-wide heads are), Llama with
rope_freqs.weight (Llama 3.1-style frequency factors), untied output, F16 and Q8_0 weights, and
mixtures of experts: Qwen3-MoE (qwen3moe: experts narrower than the dense feed-forward size the
metadata also gives) and Mixtral (llama with expert_count).
pagoda's logits at every position must match the float64 reference model (ref_model.py) within
1e-4, over an f32 KV cache (the f16 cache's rounding is checked in test_forward.py and
tests/unit/test_cpu_ops.c)."""
import json
import pathlib
import sys

import gguf
import numpy as np
import pytest
from gguf.quants import quantize

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from tiny_gguf import start_model  # noqa: E402
from ref_model import RefModel  # noqa: E402

E, H, HKV, FF, LAYERS, CTX = 64, 4, 2, 128, 2, 256
# experts: (count, used per token, feed-forward size of one) by architecture
EXPERTS = {"qwen3moe": (8, 3, 32), "mixtral": (4, 2, FF)}


def write_model(path, arch, wtype, rope_freqs=False, tied=True, seed=0, meta=None,
                exp_rows_extra=0):
    n_exp, n_used, ff_exp = EXPERTS.get(arch, (0, 0, 0))
    if arch == "mixtral":  # Mixtral's GGUFs are llama ones with experts
        arch = "llama"
    rng = np.random.default_rng(seed)
    w = start_model(path, arch, embd=E, ff=FF, heads=H, heads_kv=HKV, layers=LAYERS, ctx=CTX,
                    rope_base=10000.0 if arch == "llama" else 1000000.0, rms_eps=1e-6,
                    pre="llama-bpe" if arch == "llama" else "qwen2")
    vocab = 258
    qwen3 = arch in ("qwen3", "qwen3moe")
    D = 2 * E // H if qwen3 else E // H  # qwen3: heads wider than E / H
    if n_exp:
        w.add_expert_count(n_exp)
        w.add_expert_used_count(n_used)
        if arch == "qwen3moe":
            w.add_expert_feed_forward_length(ff_exp)
    if meta:
        meta(w)
    if qwen3:
        w.add_key_length(D)
        w.add_value_length(D)

    def mat(rows, cols, scale, n=0):  # n > 0: n matrices [n, rows, cols] (experts)
        a = (rng.standard_normal((n, rows, cols) if n else (rows, cols)) * scale).astype(np.float32)
        if wtype == "F16":
            return a.astype(np.float16), gguf.GGMLQuantizationType.F16
        if wtype == "Q8_0":
            return quantize(a, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0
        return a, gguf.GGMLQuantizationType.F32

    def add(name, arr_type):
        arr, qt = arr_type
        w.add_tensor(name, arr, raw_dtype=qt)

    vec = lambda n, s=1.0: ((1 + rng.standard_normal(n) * 0.1) * s).astype(np.float32)
    add("token_embd.weight", mat(vocab, E, 0.5))
    if not tied:
        add("output.weight", mat(vocab, E, 0.2))
    w.add_tensor("output_norm.weight", vec(E))
    if rope_freqs:
        w.add_tensor("rope_freqs.weight", np.linspace(1, 8, D // 2).astype(np.float32))
    for l in range(LAYERS):
        p = f"blk.{l}."
        w.add_tensor(p + "attn_norm.weight", vec(E))
        add(p + "attn_q.weight", mat(H * D, E, 0.2))
        add(p + "attn_k.weight", mat(HKV * D, E, 0.2))
        add(p + "attn_v.weight", mat(HKV * D, E, 0.2))
        if arch == "qwen2":
            w.add_tensor(p + "attn_q.bias", (rng.standard_normal(H * D) * 0.1).astype(np.float32))
            w.add_tensor(p + "attn_k.bias", (rng.standard_normal(HKV * D) * 0.1).astype(np.float32))
            w.add_tensor(p + "attn_v.bias", (rng.standard_normal(HKV * D) * 0.1).astype(np.float32))
        if qwen3:  # spread widely, so that a norm left out changes the logits
            w.add_tensor(p + "attn_q_norm.weight", vec(D) * np.linspace(0.5, 2, D, dtype=np.float32))
            w.add_tensor(p + "attn_k_norm.weight", vec(D) * np.linspace(2, 0.5, D, dtype=np.float32))
        add(p + "attn_output.weight", mat(E, H * D, 0.2))
        w.add_tensor(p + "ffn_norm.weight", vec(E))
        if n_exp:  # the router stays F32, as quantizers leave it
            w.add_tensor(p + "ffn_gate_inp.weight",
                         (rng.standard_normal((n_exp, E)) * 0.5).astype(np.float32))
            add(p + "ffn_gate_exps.weight", mat(ff_exp + exp_rows_extra, E, 0.2, n_exp))
            add(p + "ffn_up_exps.weight", mat(ff_exp, E, 0.2, n_exp))
            add(p + "ffn_down_exps.weight", mat(E, ff_exp, 0.4, n_exp))
        else:
            add(p + "ffn_gate.weight", mat(FF, E, 0.2))
            add(p + "ffn_up.weight", mat(FF, E, 0.2))
            add(p + "ffn_down.weight", mat(E, FF, 0.2))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return vocab


VARIANTS = [
    ("qwen3", "F32", False, True),
    ("qwen3", "Q8_0", False, False),
    ("qwen2", "F32", False, True),
    ("qwen2", "Q8_0", False, False),
    ("llama", "F16", True, True),
    ("llama", "Q8_0", True, False),
    ("qwen3moe", "F32", False, True),
    ("qwen3moe", "Q8_0", False, False),
    ("mixtral", "F16", False, False),
]


@pytest.mark.parametrize("arch,wtype,rope_freqs,tied", VARIANTS)
def test_variant_logits(run_pagoda, tmp_path, arch, wtype, rope_freqs, tied):
    path = tmp_path / f"{arch}-{wtype}.gguf"
    vocab = write_model(path, arch, wtype, rope_freqs=rope_freqs, tied=tied)
    info = json.loads(run_pagoda("info", "--model", path, "--json").stdout)
    n_exp, n_used, ff_exp = EXPERTS.get(arch, (0, 0, 0))
    assert (info["n_expert"], info["n_expert_used"], info["n_ff_exp"]) == (n_exp, n_used, ff_exp)
    if arch == "mixtral":
        arch = "llama"
    assert info["architecture"] == arch and info["qkv_bias"] is (arch == "qwen2")
    assert info["qk_norm"] is arch.startswith("qwen3")
    assert info["rope_style"] == ("normal" if arch == "llama" else "neox")
    assert info["tied_output"] is tied
    rng = np.random.default_rng(7)
    tokens = [int(t) for t in rng.integers(0, 256, size=40)]
    out = tmp_path / "logits.bin"
    meta = json.loads(run_pagoda("eval", "--model", path, "--out", out, "--chunk", 9,
                                 "--block-size", 8, "--kv-cache-dtype", "f32", *tokens).stdout)
    assert meta["tokens"] == tokens and meta["n_vocab"] == vocab
    got = np.fromfile(out, dtype=np.float32).reshape(len(tokens), vocab).astype(np.float64)
    want = RefModel(str(path)).forward(tokens)
    err = np.linalg.norm(got - want, axis=-1) / np.linalg.norm(want, axis=-1)
    assert err.max() <= 1e-4, f"{arch} {wtype}: per-position relative L2 {err}"


@pytest.mark.parametrize("arch", ["qwen3moe", "mixtral"])
def test_experts_batch_invariant(run_pagoda, tmp_path, arch):
    """A token's logits do not depend on which tokens share its step: the experts' rows are
    gathered per expert (so an expert's batch changes with the step) and summed in expert
    order; one token per step and nine per step give the same bits."""
    path = tmp_path / f"{arch}.gguf"
    vocab = write_model(path, arch, "Q8_0", seed=3)
    tokens = [int(t) for t in np.random.default_rng(5).integers(0, 256, size=30)]
    got = []
    for chunk in (1, 9):
        out = tmp_path / f"logits{chunk}.bin"
        run_pagoda("eval", "--model", path, "--out", out, "--chunk", chunk, "--block-size", 8,
                   *tokens)
        got.append(np.fromfile(out, dtype=np.float32).reshape(len(tokens), vocab))
    assert np.array_equal(got[0], got[1]), np.abs(got[0] - got[1]).max()


def test_unsupported_experts_refused(run_pagoda, tmp_path):
    """Shared experts (Qwen2-MoE, DeepSeek) and an expert tensor of the wrong shape are refused
    with a message naming them, not run wrongly."""
    cases = [(dict(meta=lambda w: w.add_expert_shared_count(1)), "shared experts"),
             (dict(exp_rows_extra=1), "ffn_gate_exps.weight")]
    for i, (kw, want) in enumerate(cases):
        path = tmp_path / f"bad{i}.gguf"
        write_model(path, "qwen3moe", "F32", **kw)
        res = run_pagoda("generate", "--model", path, "--prompt", "a", "--max-tokens", 2,
                         check=False)
        err = res.stderr.decode()
        assert res.returncode != 0 and want in err, err


def test_experts_greedy_through_the_scheduler(run_pagoda, tmp_path):
    """`pagoda generate` (the scheduler: chunked prefill, then one-token decode steps over the
    paged cache) continues a prompt on a Qwen3-MoE GGUF with the reference model's greedy
    tokens."""
    path = tmp_path / "qwen3moe.gguf"
    write_model(path, "qwen3moe", "Q8_0", seed=4)
    res = json.loads(run_pagoda("generate", "--model", path, "--prompt", "pagoda MoE: 12, 7",
                                "--max-tokens", 12, "--temperature", 0, "--ignore-eos",
                                "--max-num-batched-tokens", 5, "--block-size", 4,
                                "--kv-cache-dtype", "f32", "--json").stdout)
    want = RefModel(str(path)).greedy(res["prompt_token_ids"], 12)
    assert res["token_ids"] == want

"""`pagoda info` on the default model, checked against the file's own metadata as read by the
gguf Python package (an independent GGUF reader)."""
import json

import gguf
import pytest


@pytest.fixture(scope="module")
def info(run_pagoda, model_path):
    return json.loads(run_pagoda("info", "--model", model_path, "--json").stdout)


def test_issue_numbers(info):
    # The numbers the issue names for SmolLM2-135M-Instruct.
    assert info["n_layer"] == 30
    assert info["n_embd"] == 576
    assert info["n_head"] == 9
    assert info["n_head_kv"] == 3
    assert info["n_vocab"] == 49152


def test_matches_gguf_package(info, model_path):
    r = gguf.GGUFReader(model_path)
    f = lambda k: r.fields[k].contents()
    assert info["architecture"] == f("general.architecture") == "llama"
    assert info["n_ff"] == f("llama.feed_forward_length")
    assert info["n_ctx_train"] == f("llama.context_length")
    assert info["rope_base"] == pytest.approx(f("llama.rope.freq_base"))
    assert info["rms_eps"] == pytest.approx(f("llama.attention.layer_norm_rms_epsilon"))
    assert info["n_tensors"] == len(r.tensors)
    counts = {}
    for t in r.tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    assert info["tensor_types"] == counts
    assert info["n_params"] == sum(int(t.n_elements) for t in r.tensors)
    assert info["tied_output"] is ("output.weight" not in {t.name for t in r.tensors})
    assert info["n_merges"] == len(r.fields["tokenizer.ggml.merges"].data)
    tokens = r.fields["tokenizer.ggml.tokens"]
    text = lambda i: bytes(tokens.parts[tokens.data[i]]).decode()
    assert info["special_tokens"]["bos"] == {"id": 1, "text": text(1)}
    assert info["special_tokens"]["eos"] == {"id": 2, "text": text(2)}
    assert info["tokenizer_model"] == "gpt2" and info["tokenizer_pre"] == "smollm"
    assert info["chat_template"] == "chatml"


def test_text_output(run_pagoda, model_path):
    out = run_pagoda("info", "--model", model_path).stdout.decode()
    for line in ("layers: 30", "embedding: 576", "heads: 9", "kv heads: 3", "vocabulary: 49152",
                 "chat template: chatml"):
        assert line in out, out


def test_errors(run_pagoda, tmp_path):
    p = run_pagoda("info", "--model", tmp_path / "missing.gguf", check=False)
    assert p.returncode == 1 and b"missing.gguf" in p.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 8)
    p = run_pagoda("info", "--model", bad, check=False)
    assert p.returncode == 1 and p.stderr.strip()
    p = run_pagoda("info", check=False)
    assert p.returncode == 2

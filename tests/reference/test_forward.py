"""pagoda's forward pass against the numpy float64 reference model (ref_model.py).

- Logits at every position of 5 prompts: relative L2 error <= 1e-3 with f32 weights (--f32,
  which keeps an f32 KV cache), <= 2e-2 with the default kernels (GGUF-typed weights: Q4_1 /
  Q8_0 blocks dequantized on the fly, f32 activations) over an f32 KV cache, <= 1e-2 over the
  default f16 KV cache (measured worst 1.9e-3), <= 0.3 with int8 activation blocks
  (--int8-activations: an opt-in trade of accuracy for speed; measured worst 0.20 on these
  prompts, where a few channels with large activations take most of a block's 8-bit range). The int8 integer kernels themselves
  are checked bit for bit against their scalar reference in tests/unit/test_matmul.c.
- Greedy 64-token continuations of 8 prompts (chat and plain) equal the reference's, token for
  token (EOS ignored so every continuation is 64 tokens long).
The prompts are fed to `pagoda eval` in small chunks so the KV cache is paged across steps.
"""
import json
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from ref_model import RefModel  # noqa: E402

LOGIT_PROMPTS = [
    "The quick brown fox jumps over the lazy dog. In 1905, Einstein",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "Les capitales européennes: Paris, Berlin, Madrid,",
    "1 + 1 = 2, 2 + 2 = 4, 3 + 3 =",
    "<|im_start|>user\nWrite a haiku about autumn.<|im_end|>\n<|im_start|>assistant\n",
]

GREEDY = [
    ("chat", [{"role": "user", "content": "What is the capital of France?"}]),
    ("chat", [{"role": "system", "content": "You are a terse assistant."},
              {"role": "user", "content": "Name three primary colors."}]),
    ("chat", [{"role": "user", "content": "Write a Python function that reverses a string."}]),
    ("chat", [{"role": "user", "content": "Hi!"},
              {"role": "assistant", "content": "Hello! How can I help you today?"},
              {"role": "user", "content": "Tell me a fun fact about octopuses."}]),
    ("plain", "Once upon a time, in a small village by the sea,"),
    ("plain", "The three laws of thermodynamics are"),
    ("plain", "import numpy as np\n\ndef softmax(x):"),
    ("plain", "Q: What is 12 times 12?\nA:"),
]


@pytest.fixture(scope="module")
def ref(model_path):
    return RefModel(model_path)


_greedy_cache = {}


def ref_greedy(ref, prompt_ids, n):
    """The reference's greedy continuation, computed once per prompt for both modes."""
    key = (tuple(prompt_ids), n)
    if key not in _greedy_cache:
        _greedy_cache[key] = ref.greedy(prompt_ids, n)
    return _greedy_cache[key]


def rel_l2(a, b):
    return np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)


def pagoda_logits(run_pagoda, model_path, tmp_path, prompt, *flags):
    out = tmp_path / "logits.bin"
    special = ["--special"] if prompt.startswith("<|") else []
    meta = json.loads(run_pagoda("eval", "--model", model_path, "--out", out, "--chunk", 7,
                                 "--prompt", prompt, *flags).stdout)
    logits = np.fromfile(out, dtype=np.float32).reshape(meta["n_tokens"], meta["n_vocab"])
    return meta["tokens"], logits


@pytest.mark.parametrize("mode,flags,tol", [("f32", ["--f32"], 1e-3),
                                            ("quantized-f32-kv", ["--kv-cache-dtype", "f32"], 2e-2),
                                            ("quantized", [], 1e-2),
                                            ("int8", ["--int8-activations"], 0.3)])
def test_logits_every_position(ref, run_pagoda, model_path, tmp_path, mode, flags, tol):
    worst = []
    for prompt in LOGIT_PROMPTS:
        tokens, logits = pagoda_logits(run_pagoda, model_path, tmp_path, prompt, *flags)
        expected = ref.forward(tokens)
        err = rel_l2(logits.astype(np.float64), expected)
        worst.append(float(err.max()))
        assert err.max() <= tol, f"{mode}: {prompt!r}: per-position errors {err}"
    print(f"{mode}: worst relative L2 per prompt: {worst}")


def pagoda_greedy(run_pagoda, model_path, kind, prompt, *flags):
    src = ["--chat", json.dumps(prompt)] if kind == "chat" else ["--prompt", prompt]
    out = run_pagoda("generate", "--model", model_path, *src, "--temperature", 0,
                     "--max-tokens", 64, "--ignore-eos", "--json", "--max-num-batched-tokens", 16,
                     *flags).stdout
    return json.loads(out)


@pytest.mark.parametrize("mode,flags", [("f32", ["--f32"]),
                                        ("quantized-f32-kv", ["--kv-cache-dtype", "f32"]),
                                        ("quantized", [])])
def test_greedy_continuations(ref, run_pagoda, model_path, mode, flags):
    for kind, prompt in GREEDY:
        got = pagoda_greedy(run_pagoda, model_path, kind, prompt, *flags)
        assert len(got["token_ids"]) == 64 and got["finish_reason"] == "length"
        want = ref_greedy(ref, got["prompt_token_ids"], 64)
        assert got["token_ids"] == want, f"{mode} {kind} {prompt!r}"

"""`pagoda generate` driven as a user would: output shape, stop strings, seeds, limits, errors."""
import json

import pytest

CHAT = json.dumps([{"role": "user", "content": "Write a short poem about the sea."}])


def gen(run_pagoda, model_path, *args, check=True):
    p = run_pagoda("generate", "--model", model_path, *args, check=check)
    return p


def gen_json(run_pagoda, model_path, *args):
    return json.loads(gen(run_pagoda, model_path, *args, "--json").stdout)


def test_json_shape_and_text(run_pagoda, model_path):
    out = gen_json(run_pagoda, model_path, "--chat", CHAT, "--temperature", 0, "--max-tokens", 24)
    assert set(out) >= {"text", "token_ids", "finish_reason", "usage", "timings"}
    u = out["usage"]
    assert u["completion_tokens"] == len(out["token_ids"]) <= 24
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert out["finish_reason"] in ("stop", "length")
    # The text is the detokenized output (an end-of-turn token contributes no text).
    ids = [t for t in out["token_ids"] if t not in (0, 1, 2)]
    text = run_pagoda("detokenize", "--model", model_path, *ids).stdout.decode()
    assert out["text"] == text
    assert out["timings"]["prompt_tokens_per_s"] > 0


def test_streamed_text_equals_json_text(run_pagoda, model_path):
    args = ["--prompt", "The sea is", "--temperature", 0, "--max-tokens", 20]
    streamed = gen(run_pagoda, model_path, *args).stdout.decode()
    assert streamed == gen_json(run_pagoda, model_path, *args)["text"] + "\n"


def test_max_tokens_gives_length(run_pagoda, model_path):
    out = gen_json(run_pagoda, model_path, "--prompt", "Count: one, two, three,",
                   "--temperature", 0, "--max-tokens", 7, "--ignore-eos")
    assert out["finish_reason"] == "length" and len(out["token_ids"]) == 7


def test_stop_string_cuts_text(run_pagoda, model_path):
    base = gen_json(run_pagoda, model_path, "--prompt", "Once upon a time", "--temperature", 0,
                    "--max-tokens", 40, "--ignore-eos")
    text = base["text"]
    # A stop string taken from the middle of the greedy text, spanning a token boundary.
    stop = text[len(text) // 2: len(text) // 2 + 5]
    assert len(stop) == 5
    out = gen_json(run_pagoda, model_path, "--prompt", "Once upon a time", "--temperature", 0,
                   "--max-tokens", 40, "--ignore-eos", "--stop", stop)
    assert out["finish_reason"] == "stop"
    assert out["text"] == text[: text.index(stop)]


def test_seed_reproducible(run_pagoda, model_path):
    args = ["--prompt", "My favourite colour is", "--temperature", 1.0, "--max-tokens", 16,
            "--ignore-eos"]
    a = gen_json(run_pagoda, model_path, *args, "--seed", 42)["token_ids"]
    b = gen_json(run_pagoda, model_path, *args, "--seed", 42)["token_ids"]
    c = gen_json(run_pagoda, model_path, *args, "--seed", 43)["token_ids"]
    assert a == b
    assert a != c


@pytest.mark.parametrize("args,code,msg", [
    (["--prompt", "x", "--temperature", "-1"], 1, "temperature"),
    (["--prompt", "x", "--top-p", "0"], 1, "top_p"),
    (["--prompt", "x", "--temperature", "abc"], 2, "--temperature"),
    (["--prompt", "x", "--chat", CHAT], 2, "exactly one"),
    (["--chat", "[not json"], 1, "JSON"),
    (["--chat", '[{"role":"robot","content":"hi"}]'], 1, "robot"),
    (["--prompt", "word " * 300, "--ctx-size", "64"], 1, "context"),
    (["--bogus"], 2, "--bogus"),
])
def test_errors(run_pagoda, model_path, args, code, msg):
    p = gen(run_pagoda, model_path, *args, check=False)
    assert p.returncode == code, p.stderr
    assert msg in p.stderr.decode(), p.stderr

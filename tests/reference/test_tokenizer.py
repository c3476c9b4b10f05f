"""`pagoda tokenize` / `pagoda detokenize` against llama.cpp's ids for the default model.

tokenizer_corpus.json holds the strings; tokenizer_expected.json the ids llama.cpp gives them
(made by gen_tokenizer_expected.py, which also cross-checks them with Hugging Face tokenizers).
For every string: pagoda's ids equal the expected ones (control-token text typed as plain
text stays plain text), the strings marked "special" equal the expected ids with special
parsing on, and decoding pagoda's ids gives back the exact bytes. Texts go through stdin, so
NUL bytes, leading dashes and trailing newlines are tested as they are. The pagoda calls run
in parallel once per session; the parametrized tests only compare.
"""
import concurrent.futures
import hashlib
import json
import os
import pathlib
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = json.loads((HERE / "tokenizer_corpus.json").read_text(encoding="utf-8"))["strings"]
EXPECTED = json.loads((HERE / "tokenizer_expected.json").read_text(encoding="utf-8"))
EXP = {c["name"]: c for c in EXPECTED["cases"]}
NAMES = [c["name"] for c in CORPUS]
SPECIAL_NAMES = [c["name"] for c in CORPUS if c.get("special")]
TEXT = {c["name"]: c["text"] for c in CORPUS}


def run(pagoda_bin, args, data):
    p = subprocess.run([pagoda_bin, *args], input=data, capture_output=True)
    if p.returncode != 0:
        raise AssertionError(f"pagoda {' '.join(args[:1])} exited {p.returncode}: "
                             f"{p.stderr.decode(errors='replace')}")
    return p.stdout


@pytest.fixture(scope="session")
def results(pagoda_bin, model_path):
    """name -> {"ids", "ids_special", "decoded", "decoded_special"} from pagoda."""
    if pathlib.Path(model_path).name != EXPECTED["model"]["file"]:
        pytest.skip(f"expected ids are for {EXPECTED['model']['file']}, not {model_path}")

    def one(c):
        data = c["text"].encode("utf-8")
        out = {"ids": json.loads(run(pagoda_bin, ["tokenize", "--model", model_path, "-"], data))}
        out["decoded"] = run(pagoda_bin, ["detokenize", "--model", model_path, "-"],
                             json.dumps(out["ids"]).encode())
        if c.get("special"):
            out["ids_special"] = json.loads(run(
                pagoda_bin, ["tokenize", "--model", model_path, "--special", "-"], data))
            out["decoded_special"] = run(
                pagoda_bin, ["detokenize", "--model", model_path, "--special", "-"],
                json.dumps(out["ids_special"]).encode())
        return c["name"], out

    workers = min(8, (os.cpu_count() or 2) * 2)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
        return dict(ex.map(one, CORPUS))


def test_corpus_and_expected_in_sync():
    assert len(CORPUS) >= 200
    assert sorted(EXP) == sorted(NAMES), "regenerate tokenizer_expected.json"
    for c in CORPUS:
        want = EXP[c["name"]]["text_sha256"]
        got = hashlib.sha256(c["text"].encode("utf-8")).hexdigest()[:16]
        assert got == want, f"{c['name']} changed since tokenizer_expected.json was generated"
        assert ("ids_special" in EXP[c["name"]]) == bool(c.get("special"))


@pytest.mark.parametrize("name", NAMES)
def test_ids_match_llama_cpp(results, name):
    assert results[name]["ids"] == EXP[name]["ids"], repr(TEXT[name][:200])


@pytest.mark.parametrize("name", SPECIAL_NAMES)
def test_special_ids_match_llama_cpp(results, name):
    assert results[name]["ids_special"] == EXP[name]["ids_special"], repr(TEXT[name][:200])


@pytest.mark.parametrize("name", NAMES)
def test_roundtrip(results, name):
    assert results[name]["decoded"] == TEXT[name].encode("utf-8")


@pytest.mark.parametrize("name", SPECIAL_NAMES)
def test_roundtrip_special(results, name):
    assert results[name]["decoded_special"] == TEXT[name].encode("utf-8")


def test_special_parsing_changes_something():
    """The special cases are not vacuous: most of them parse differently with special on."""
    differ = sum(EXP[n]["ids"] != EXP[n]["ids_special"] for n in SPECIAL_NAMES)
    assert differ >= len(SPECIAL_NAMES) // 2


# ---- the CLI's contract ----------------------------------------------------------------------

def test_text_argument_equals_stdin(run_pagoda, model_path):
    text = "Hello, wörld! 123"
    a = run_pagoda("tokenize", "--model", model_path, text).stdout
    b = run_pagoda("tokenize", "--model", model_path, "-", input=text.encode()).stdout
    assert a == b and a.endswith(b"\n")


def test_stdin_keeps_trailing_newline(run_pagoda, model_path):
    with_nl = json.loads(run_pagoda("tokenize", "--model", model_path, "-",
                                    input=b"hi\n").stdout)
    without = json.loads(run_pagoda("tokenize", "--model", model_path, "-", input=b"hi").stdout)
    assert with_nl[:-1] == without and len(with_nl) == len(without) + 1


def test_bos_flag(run_pagoda, model_path):
    plain = json.loads(run_pagoda("tokenize", "--model", model_path, "hi").stdout)
    bos = json.loads(run_pagoda("tokenize", "--model", model_path, "--bos", "hi").stdout)
    assert bos == [1] + plain  # SmolLM2: bos = <|im_start|> = 1


def test_detokenize_special_flag(run_pagoda, model_path):
    assert run_pagoda("detokenize", "--model", model_path, "1", "2").stdout == b""
    out = run_pagoda("detokenize", "--model", model_path, "--special", "1", "2").stdout
    assert out == b"<|im_start|><|im_end|>"


def test_detokenize_no_newline_added(run_pagoda, model_path):
    ids = json.loads(run_pagoda("tokenize", "--model", model_path, "a b").stdout)
    out = run_pagoda("detokenize", "--model", model_path, *map(str, ids)).stdout
    assert out == b"a b"


@pytest.mark.parametrize("bad", ["49152", "-1", "abc", "99999999999"])
def test_detokenize_bad_id(run_pagoda, model_path, bad):
    p = run_pagoda("detokenize", "--model", model_path, bad, check=False)
    assert p.returncode == 1 and p.stdout == b""
    assert bad[:5].encode() in p.stderr


def test_bad_model(run_pagoda, tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    for cmd, arg in (("tokenize", "hi"), ("detokenize", "1")):
        p = run_pagoda(cmd, "--model", junk, arg, check=False)
        assert p.returncode == 1 and p.stderr
        p = run_pagoda(cmd, "--model", tmp_path / "missing.gguf", arg, check=False)
        assert p.returncode == 1 and p.stderr


@pytest.mark.parametrize("args", [["tokenize"], ["tokenize", "--model"], ["detokenize", "1"],
                                  ["tokenize", "--model", "M", "--frobnicate", "x"],
                                  ["detokenize", "--model", "M", "--bos", "1"]])
def test_usage_errors(run_pagoda, model_path, args):
    args = [model_path if a == "M" else a for a in args]
    p = run_pagoda(*args, check=False)
    assert p.returncode == 2 and p.stderr


def test_tokenize_needs_one_text(run_pagoda, model_path):
    p = run_pagoda("tokenize", "--model", model_path, "a", "b", check=False)
    assert p.returncode == 2

"""`pagoda tokenize` / `pagoda detokenize` against llama.cpp's ids for the default model.

tokenizer_corpus.json holds the strings; tokenizer_expected.json the ids llama.cpp gives them
(made by gen_tokenizer_expected.py, which also cross-checks them with Hugging Face tokenizers).
For every string: pagoda's ids equal the expected ones (control-token text typed as plain
text stays plain text), the strings marked "special" equal the expected ids with special
parsing on, and decoding pagoda's ids gives back the exact bytes. Texts go through stdin, so
NUL bytes, leading dashes and trailing newlines are tested as they are. The pagoda calls run
in parallel once per session; the parametrized tests only compare.

The pre-tokenizers (GPT-2, Llama-3, Qwen2, SmolLM) are also checked on a synthetic "pairs"
vocabulary where every piece boundary shows in the ids (metadata-only GGUF files written with
gguf-py, see gen_tokenizer_expected.write_vocab_variants), against llama.cpp's ids for the same
files; the corpus strings go ten at a time there, joined by newlines. The same texts check the
SentencePiece-style path on a small SentencePiece BPE vocabulary with byte fallback (stored in
tokenizer_expected.json) against the ids of the sentencepiece package itself.
"""
import concurrent.futures
import hashlib
import importlib.util
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
VARIANTS = EXPECTED["variants"]
SPM = EXPECTED["spm"]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_tokenizer_expected",
                                                  HERE / "gen_tokenizer_expected.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pmap(fn, items):
    workers = min(8, (os.cpu_count() or 2) * 2)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(fn, items))


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

    return dict(pmap(one, CORPUS))


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


@pytest.fixture(scope="session")
def variant_results(pagoda_bin, model_path, tmp_path_factory):
    """pre -> pagoda's ids for each variant text, on the pairs vocabulary with that `pre`."""
    pytest.importorskip("gguf")
    if pathlib.Path(model_path).name != EXPECTED["model"]["file"]:
        pytest.skip(f"expected ids are for {EXPECTED['model']['file']}, not {model_path}")
    gen = _generator()
    texts = gen.variant_texts(CORPUS)
    got = [hashlib.sha256(t.encode("utf-8")).hexdigest()[:16] for t in texts]
    assert got == EXPECTED["variants_text_sha256"], "regenerate tokenizer_expected.json"
    tmp = tmp_path_factory.mktemp("vocab")
    paths = {pre: tmp / f"vocab-{pre}.gguf" for pre in VARIANTS}
    gen.write_vocab_variants(model_path, paths)
    jobs = [(pre, i) for pre in VARIANTS for i in range(len(texts))]

    def one(job):
        pre, i = job
        out = run(pagoda_bin, ["tokenize", "--model", str(paths[pre]), "-"],
                  texts[i].encode("utf-8"))
        return job, json.loads(out)

    res = {pre: [None] * len(texts) for pre in VARIANTS}
    for (pre, i), ids in pmap(one, jobs):
        res[pre][i] = ids
    return res, texts


@pytest.mark.parametrize("pre", sorted(VARIANTS))
def test_pretokenizer_variants_match_llama_cpp(variant_results, pre):
    res, texts = variant_results
    bad = [i for i, want in enumerate(VARIANTS[pre]) if res[pre][i] != want]
    assert not bad, f"{pre}: {len(bad)} texts differ, e.g. {[texts[i][:80] for i in bad[:3]]}"


def test_variants_are_not_vacuous():
    """The pre-tokenizers give different ids on the pairs vocabulary (each pair differs)."""
    pres = sorted(VARIANTS)
    assert len(pres) >= 4
    for a in pres:
        for b in pres:
            if a < b:
                assert VARIANTS[a] != VARIANTS[b], (a, b)


@pytest.fixture(scope="session")
def spm_results(pagoda_bin, tmp_path_factory):
    """pagoda's ids and decoded bytes for each variant text on the SentencePiece vocabulary."""
    pytest.importorskip("gguf")
    gen = _generator()
    texts = gen.variant_texts(CORPUS)
    path = tmp_path_factory.mktemp("spm") / "spm.gguf"
    gen.write_spm_gguf(path, SPM["vocab"])

    def one(t):
        ids = json.loads(run(pagoda_bin, ["tokenize", "--model", str(path), "-"],
                             t.encode("utf-8")))
        dec = run(pagoda_bin, ["detokenize", "--model", str(path), "-"], json.dumps(ids).encode())
        return ids, dec

    return pmap(one, texts), texts


def test_spm_matches_sentencepiece(spm_results):
    res, texts = spm_results
    assert len(res) == len(SPM["ids"])
    bad = [i for i, (ids, _) in enumerate(res) if ids != SPM["ids"][i]]
    assert not bad, f"{len(bad)} texts differ, e.g. {[texts[i][:80] for i in bad[:3]]}"
    # Not vacuous: byte fallback and multi-character pieces both occur.
    types = SPM["vocab"]["types"]
    flat = [t for ids in SPM["ids"] for t in ids]
    assert any(types[t] == 6 for t in flat)
    assert any(len(SPM["vocab"]["tokens"][t]) > 2 for t in flat)


def test_spm_roundtrip(spm_results):
    res, texts = spm_results
    bad = [i for i, (_, dec) in enumerate(res) if dec != texts[i].encode("utf-8")]
    assert not bad, f"{len(bad)} texts do not round-trip, e.g. {[texts[i][:80] for i in bad[:3]]}"


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

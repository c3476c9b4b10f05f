#!/usr/bin/env python3
"""Regenerate tests/reference/tokenizer_expected.json from tokenizer_corpus.json.

Not run in CI: it needs the packages of requirements-regen.txt (llama-cpp-python builds
llama.cpp from source). The expected ids come from llama.cpp, an implementation independent of
pagoda's:

    llama_cpp.Llama(model_path, vocab_only=True).tokenize(text.encode(), add_bos=False,
                                                           special=False / True)

As a second, independent opinion the script builds a Hugging Face `tokenizers` BPE from the
GGUF's own vocabulary and merges with SmolLM2's published pre-tokenizer
(Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)])
and the model's control tokens as added special tokens, and records every string on which the
two references disagree (the expected ids stay llama.cpp's; the test skips nothing).

Pre-tokenizer variants: SmolLM2's vocabulary hides most pre-tokenizer differences (its merges
never cross the boundaries the GPT-2 regex draws), so the pre-tokenizers are also checked on a
synthetic "pairs" vocabulary where every ordered pair of byte-level characters is a token
(65,536 merges in a fixed scrambled order): every piece boundary then shows in the ids. The
default model's metadata is written again (no tensors) with that vocabulary and
tokenizer.ggml.pre set to each of VARIANT_PRES, and llama.cpp's ids for the corpus (without the
long-* strings) are recorded under "variants" (test_tokenizer.py writes the same files with
write_vocab_variants). To keep the test quick the strings go VARIANT_CHUNK at a time, joined by
newlines (variant_texts).

    usage: gen_tokenizer_expected.py [--model PATH] [--check]
    --check  compare with the committed JSON instead of writing it (exit 1 on a difference)
"""
import argparse
import hashlib
import json
import pathlib
import re
import subprocess
import sys
import tempfile

from byte_level import bytes_to_unicode  # tests/reference/, beside this script

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CORPUS = HERE / "tokenizer_corpus.json"
EXPECTED = HERE / "tokenizer_expected.json"
VARIANT_PRES = ["gpt-2", "llama-bpe", "qwen2", "smollm"]


VARIANT_CHUNK = 10


def variant_texts(corpus):
    """The corpus strings (not the long-* ones) joined by newlines, VARIANT_CHUNK at a time."""
    texts = [c["text"] for c in corpus if not c["name"].startswith("long-")]
    return ["\n".join(texts[i:i + VARIANT_CHUNK]) for i in range(0, len(texts), VARIANT_CHUNK)]


def pairs_vocab():
    """(tokens, types, merges, control id): the 256 byte characters (id = byte), every ordered
    pair of them as a merge (rank order: pair index * 40503 mod 65536, a fixed permutation),
    then one control token."""
    ch = bytes_to_unicode()
    tokens = [ch[b] for b in range(256)]
    merges = []
    for p in sorted(range(65536), key=lambda p: (p * 40503) % 65536):
        a, b = ch[p >> 8], ch[p & 255]
        tokens.append(a + b)
        merges.append(a + " " + b)
    tokens.append("<|endoftext|>")
    types = [1] * (len(tokens) - 1) + [3]
    return tokens, types, merges, len(tokens) - 1


def gguf_fields(src):
    """The metadata of GGUF `src` other than tokenizer.*, as (key, type, subtype, value); [] for
    None. llama.cpp needs a model's hyper-parameters even to load only its vocabulary."""
    if src is None:
        return []
    import gguf
    r = gguf.GGUFReader(src)
    return [(k, f.types[0], f.types[-1], f.contents()) for k, f in r.fields.items()
            if not k.startswith("GGUF.") and not k.startswith("tokenizer.")
            and k != "general.architecture"]


def write_gguf(dst, fields, arch="llama"):
    """A metadata-only GGUF file (no tensors)."""
    import gguf
    w = gguf.GGUFWriter(str(dst), arch)
    for k, t, sub, v in fields:
        if t == gguf.GGUFValueType.ARRAY:
            w.add_key_value(k, v, t, sub_type=sub)
        else:
            w.add_key_value(k, v, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def pairs_fields(pre):
    from gguf import GGUFValueType as T
    tokens, types, merges, ctrl = pairs_vocab()
    return [("tokenizer.ggml.model", T.STRING, T.STRING, "gpt2"),
            ("tokenizer.ggml.pre", T.STRING, T.STRING, pre),
            ("tokenizer.ggml.tokens", T.ARRAY, T.STRING, tokens),
            ("tokenizer.ggml.token_type", T.ARRAY, T.INT32, types),
            ("tokenizer.ggml.merges", T.ARRAY, T.STRING, merges),
            ("tokenizer.ggml.bos_token_id", T.UINT32, T.UINT32, ctrl),
            ("tokenizer.ggml.eos_token_id", T.UINT32, T.UINT32, ctrl),
            ("tokenizer.ggml.add_bos_token", T.BOOL, T.BOOL, False)]


def write_vocab_variants(src, dsts):
    """For each pre, dsts[pre]: src's metadata (when src is given) with the pairs vocabulary and
    tokenizer.ggml.pre = pre."""
    base = gguf_fields(src)
    for pre, dst in dsts.items():
        write_gguf(dst, base + pairs_fields(pre))


# ---- SentencePiece ------------------------------------------------------------------------

SPM_TYPES = {"normal": 1, "unknown": 2, "control": 3, "unused": 5, "byte": 6}


def spm_fields(vocab):
    from gguf import GGUFValueType as T
    return [("tokenizer.ggml.model", T.STRING, T.STRING, "llama"),
            ("tokenizer.ggml.tokens", T.ARRAY, T.STRING, vocab["tokens"]),
            ("tokenizer.ggml.scores", T.ARRAY, T.FLOAT32, vocab["scores"]),
            ("tokenizer.ggml.token_type", T.ARRAY, T.INT32, vocab["types"]),
            ("tokenizer.ggml.bos_token_id", T.UINT32, T.UINT32, vocab["bos"]),
            ("tokenizer.ggml.eos_token_id", T.UINT32, T.UINT32, vocab["eos"]),
            ("tokenizer.ggml.unknown_token_id", T.UINT32, T.UINT32, vocab["unk"]),
            ("tokenizer.ggml.add_bos_token", T.BOOL, T.BOOL, True),
            ("tokenizer.ggml.add_space_prefix", T.BOOL, T.BOOL, True)]


def write_spm_gguf(dst, vocab, src=None):
    write_gguf(dst, gguf_fields(src) + spm_fields(vocab))


def train_spm(corpus):
    """A small SentencePiece BPE model with byte fallback, trained on the corpus lines; returns
    (processor, vocab as GGUF arrays). Identity normalization and kept whitespace, so encoding
    is the plain score-driven BPE that pagoda and llama.cpp implement."""
    import io
    import sentencepiece as spm
    lines = [ln for c in corpus for ln in c["text"].split("\n") if ln.strip()]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, model_type="bpe", vocab_size=800,
        byte_fallback=True, character_coverage=0.995, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=True, allow_whitespace_only_pieces=True,
        split_digits=True, num_threads=1, max_sentence_length=100000, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    n = sp.get_piece_size()

    def kind(i):
        for name in ("unknown", "control", "unused", "byte"):
            if getattr(sp, "is_" + name)(i):
                return SPM_TYPES[name]
        return SPM_TYPES["normal"]

    vocab = {"tokens": [sp.id_to_piece(i) for i in range(n)],
             "scores": [sp.get_score(i) for i in range(n)],
             "types": [kind(i) for i in range(n)],
             "bos": sp.bos_id(), "eos": sp.eos_id(), "unk": sp.unk_id()}
    return sp, vocab, spm.__version__


def default_model():
    out = subprocess.run([str(ROOT / "scripts" / "fetch-model")], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def text_hash(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def llama_reference(model_path):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)

    def encode(text, special):
        return list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=special))

    def decode(ids):
        return llm.detokenize(ids)

    return encode, decode, llama_cpp.__version__


def hf_reference(model_path):
    """A tokenizers.Tokenizer built from the GGUF arrays; returns (plain, with_special)."""
    import gguf
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers

    r = gguf.GGUFReader(model_path)

    def field(key):
        return r.fields[key].contents()

    assert field("tokenizer.ggml.model") == "gpt2", "the HF cross-check is for byte-level BPE"
    tokens = field("tokenizer.ggml.tokens")
    types = field("tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field("tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}

    def build(with_special):
        tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
        tok.decoder = decoders.ByteLevel()
        if with_special:
            tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False)
                                    for t, ty in zip(tokens, types) if ty == 3])
        return tok

    return build(False), build(True), tokenizers.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    model = args.model or default_model()

    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))["strings"]
    encode, decode, llama_version = llama_reference(model)
    hf_plain, hf_special, hf_version = hf_reference(model)

    cases, disagree, roundtrip_fail = [], [], []
    for c in corpus:
        text = c["text"]
        entry = {"name": c["name"], "text_sha256": text_hash(text), "ids": encode(text, False)}
        hf = hf_plain.encode(text, add_special_tokens=False).ids
        if hf != entry["ids"]:
            disagree.append({"name": c["name"], "special": False, "llama_cpp": entry["ids"],
                             "hf_tokenizers": hf})
        if decode(entry["ids"]) != text.encode("utf-8"):
            roundtrip_fail.append(c["name"])
        if c.get("special"):
            entry["ids_special"] = encode(text, True)
            hfs = hf_special.encode(text, add_special_tokens=False).ids
            if hfs != entry["ids_special"]:
                disagree.append({"name": c["name"], "special": True,
                                 "llama_cpp": entry["ids_special"], "hf_tokenizers": hfs})
        cases.append(entry)

    variants = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {pre: pathlib.Path(tmp) / f"vocab-{pre}.gguf" for pre in VARIANT_PRES}
        write_vocab_variants(model, paths)
        for pre, path in paths.items():
            enc, _, _ = llama_reference(str(path))
            variants[pre] = [enc(t, False) for t in variant_texts(corpus)]

    sp, spm_vocab, spm_version = train_spm(corpus)
    spm_cases, spm_disagree = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "spm.gguf"
        write_spm_gguf(path, spm_vocab, src=model)
        enc, _, _ = llama_reference(str(path))
        for i, t in enumerate(variant_texts(corpus)):
            ids = sp.encode(t)
            spm_cases.append(ids)
            assert sp.decode(ids) == t, f"sentencepiece round trip of chunk {i}"
            if enc(t, False) != ids:
                spm_disagree.append(i)

    doc = {
        "description": "Expected ids for tokenizer_corpus.json, generated by "
                       "gen_tokenizer_expected.py (llama.cpp via llama-cpp-python, vocab only, "
                       "add_bos=False). Do not edit by hand. llama_cpp_roundtrip_failures is "
                       "informational: llama-cpp-python's detokenize truncates very long pieces.",
        "model": {"file": pathlib.Path(model).name, "sha256": sha256_file(model)},
        "generator": {"llama_cpp_python": llama_version, "tokenizers": hf_version,
                      "sentencepiece": spm_version},
        "hf_tokenizers_disagreements": disagree,
        "llama_cpp_roundtrip_failures": roundtrip_fail,
        "cases": cases,
        "variants_vocab": "pairs (see pairs_vocab)",
        "variants_text_sha256": [text_hash(t) for t in variant_texts(corpus)],
        "variants": variants,
        "spm": {
            "description": "SentencePiece BPE (byte fallback) trained on the corpus by "
                           "train_spm; ids from sentencepiece itself for variant_texts; "
                           "llama_cpp_disagreements lists the chunks where llama.cpp differs.",
            "sentencepiece": spm_version,
            "llama_cpp_disagreements": spm_disagree,
            "ids": spm_cases,
            "vocab": spm_vocab,
        },
    }
    print(f"{len(cases)} strings, {sum('ids_special' in c for c in cases)} with special parsing; "
          f"HF tokenizers disagrees on {len(disagree)}; llama.cpp decode(encode(s)) != s for "
          f"{len(roundtrip_fail)}", file=sys.stderr)
    for d in disagree:
        print(f"  disagreement: {d['name']} special={d['special']}", file=sys.stderr)
    print(f"SentencePiece: {len(spm_cases)} chunks, llama.cpp disagrees on {len(spm_disagree)}",
          file=sys.stderr)

    text = json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
    # One line per list of numbers (the character class cannot backtrack badly).
    text = re.sub(r"\[[\d\s,.eE+\-]*\]", lambda m: json.dumps(json.loads(m.group(0))), text)
    if args.check:
        old = EXPECTED.read_text(encoding="utf-8") if EXPECTED.exists() else ""
        if old != text:
            print(f"{EXPECTED} is out of date", file=sys.stderr)
            return 1
        return 0
    EXPECTED.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

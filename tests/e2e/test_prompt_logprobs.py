"""echo + logprobs on /v1/completions: the prompt tokens' logprobs (scoring, as lm-eval's
loglikelihood and HELM ask for them), through the openai SDK and raw HTTP.

The numbers are checked against the numpy float64 reference model (tests/reference/ref_model.py):
prompt token i's logprob is log_softmax of the reference's logits at position i - 1, and its top
alternatives are the reference's most probable tokens there. Also: max_tokens 0 (the prompt
alone, nothing generated), lm-eval's request shape (batched token prompts, max_tokens 1,
logprobs 1), n > 1, streaming (the prompt comes first, with its logprobs), the prefix cache
not serving such prompts (the numbers are the same however often asked, alone or beside other
requests), and prompts longer than one step's budget (chunked prefill). vLLM's prompt_logprobs
(chat and completions: each prompt token's logprob and rank, and its alternatives by rank) are
checked against the same reference, and against echo's numbers in the same answer.
"""
import concurrent.futures as cf
import json
import pathlib
import sys

import numpy as np
import pytest

from pagoda_e2e import assert_error_body, openai_client

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "reference"))
from ref_model import RefModel  # noqa: E402

NAME = "smol-lp"
TEXTS = [
    "The quick brown fox jumps over the lazy dog. In 1905, Einstein published",
    "Question: What is the capital city of France, and which river runs through it?\n"
    "Answer: Paris, on the Seine",
]
# Logprobs of the default build (Q4_1 / Q8_0 weights, f16 KV cache) against float64: measured
# worst 0.0055 (mean 0.0008) on these prompts.
TOL = 0.02


@pytest.fixture(scope="module")
def srv(start_server):
    # a step of 16 tokens: every prompt here is computed in several chunks
    return start_server("--served-model-name", NAME, "--max-num-batched-tokens", "16")


@pytest.fixture(scope="module")
def client(srv):
    return openai_client(srv)


@pytest.fixture(scope="module")
def ids(srv):
    out = []
    for t in TEXTS:
        st, _, body = srv.post_json("/tokenize", {"prompt": t})
        assert st == 200, body
        out.append(body["tokens"])
    assert all(len(x) > 16 for x in out)
    return out


@pytest.fixture(scope="module")
def ref_lsm(model_path, ids):
    """The reference's log_softmax rows [T, V] for each prompt."""
    ref = RefModel(model_path)
    out = []
    for x in ids:
        logits = ref.forward(x)
        m = logits.max(axis=-1, keepdims=True)
        out.append(logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True)))
    return out


def post(srv, body):
    st, _, data = srv.post_json("/v1/completions", {"model": NAME, **body}, timeout=120)
    assert st == 200, data
    return data


def check_against_reference(lp, prompt, lsm, k):
    """Legacy logprobs of a prompt (its first len(prompt) entries) against the reference."""
    toks, lps, tops = lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]
    assert lps[0] is None and tops[0] is None
    errs = []
    for i in range(1, len(prompt)):
        want = lsm[i - 1][prompt[i]]
        errs.append(abs(lps[i] - want))
        assert lps[i] == pytest.approx(want, abs=TOL), (i, toks[i])
        # the alternatives (the k best; the prompt token is added when not among them): the
        # reference's k best, compared by value (near-ties make the ids ambiguous)
        assert len(tops[i]) in (k, k + 1)
        assert tops[i][toks[i]] == pytest.approx(lps[i], abs=1e-6)
        best = np.sort(lsm[i - 1])[::-1][:k]
        np.testing.assert_allclose(sorted(tops[i].values(), reverse=True)[:k], best, atol=TOL)
    return float(np.mean(errs)), float(np.max(errs))


def test_prompt_alone_matches_reference(srv, ids, ref_lsm):
    """max_tokens 0 with echo: the prompt's text, its logprobs, nothing generated."""
    for x, lsm, text in zip(ids, ref_lsm, TEXTS):
        r = post(srv, {"prompt": x, "max_tokens": 0, "echo": True, "logprobs": 3})
        c = r["choices"][0]
        assert c["text"] == text
        assert c["finish_reason"] == "length"
        u = r["usage"]
        assert (u["prompt_tokens"], u["completion_tokens"], u["total_tokens"]) == \
            (len(x), 0, len(x))
        lp = c["logprobs"]
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == \
            len(lp["text_offset"]) == len(x)
        assert "".join(lp["tokens"]) == text
        offs = lp["text_offset"]
        assert offs[0] == 0 and offs == [sum(len(t) for t in lp["tokens"][:i])
                                         for i in range(len(x))]
        mean, worst = check_against_reference(lp, x, lsm, 3)
        print(f"prompt of {len(x)} tokens: |logprob - reference| mean {mean:.4f} worst {worst:.4f}")


def test_lm_eval_request_shape(srv, ids):
    """lm-eval's loglikelihood request: token prompts in a batch, max_tokens 1, logprobs 1,
    echo: each choice holds the prompt's entries and one generated token's; the prompt's equal
    those of the prompt alone, asked again (no prefix-cache hit changes them)."""
    alone = [post(srv, {"prompt": x, "max_tokens": 0, "echo": True, "logprobs": 1})
             ["choices"][0]["logprobs"] for x in ids]
    r = post(srv, {"prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": 1,
                   "seed": 1234, "echo": True})
    assert [c["index"] for c in r["choices"]] == [0, 1]
    assert r["usage"]["completion_tokens"] == 2
    for c, x, a in zip(r["choices"], ids, alone):
        lp = c["logprobs"]
        assert len(lp["token_logprobs"]) == len(x) + 1
        assert lp["tokens"][:len(x)] == a["tokens"]
        np.testing.assert_allclose(lp["token_logprobs"][1:len(x)], a["token_logprobs"][1:],
                                   atol=1e-5)
        # lm-eval's is_greedy check reads the top dict of each prompt token
        assert all(1 <= len(t) <= 2 for t in lp["top_logprobs"][1:])
        # the generated token is greedy: the best of its own alternatives
        last = lp["top_logprobs"][-1]
        assert max(last, key=last.get) == lp["tokens"][-1]


def test_sdk_and_n_choices(client, ids, ref_lsm):
    """Through the SDK, with n = 2: every choice starts with the same prompt entries."""
    x = ids[1]
    r = client.completions.create(model=NAME, prompt=x, max_tokens=3, temperature=0, n=2,
                                  echo=True, logprobs=2)
    assert len(r.choices) == 2
    a, b = (c.logprobs for c in r.choices)
    assert a.tokens[:len(x)] == b.tokens[:len(x)]
    assert a.token_logprobs[:len(x)] == b.token_logprobs[:len(x)]
    assert len(a.tokens) == len(x) + 3
    assert r.choices[0].text.startswith(TEXTS[1])
    lp = {"tokens": a.tokens, "token_logprobs": a.token_logprobs, "top_logprobs": a.top_logprobs}
    check_against_reference(lp, x, ref_lsm[1], 2)


def test_stream_sends_the_prompt_first(client, srv, ids):
    x = ids[0]
    whole = post(srv, {"prompt": x, "max_tokens": 4, "temperature": 0, "echo": True,
                       "logprobs": 2})["choices"][0]
    chunks = list(client.completions.create(model=NAME, prompt=x, max_tokens=4, temperature=0,
                                            echo=True, logprobs=2, stream=True))
    first = chunks[0].choices[0]
    assert first.text == TEXTS[0]
    assert first.logprobs.tokens == whole["logprobs"]["tokens"][:len(x)]
    assert first.logprobs.token_logprobs[0] is None
    np.testing.assert_allclose(first.logprobs.token_logprobs[1:],
                               whole["logprobs"]["token_logprobs"][1:len(x)], atol=1e-5)
    text, toks, offs = "", [], []
    for ch in chunks:
        for c in ch.choices:
            text += c.text
            if c.logprobs and c.logprobs.tokens:
                toks += c.logprobs.tokens
                offs += c.logprobs.text_offset
    assert text == whole["text"]
    assert toks == whole["logprobs"]["tokens"]
    assert offs == whole["logprobs"]["text_offset"]
    assert chunks[-1].choices[0].finish_reason == "length"
    # the prompt alone, streamed: its chunk, then the finish
    chunks = list(client.completions.create(model=NAME, prompt=x, max_tokens=0, echo=True,
                                            logprobs=0, stream=True))
    assert chunks[0].choices[0].text == TEXTS[0]
    assert len(chunks[0].choices[0].logprobs.tokens) == len(x)
    assert "".join(c.choices[0].text for c in chunks) == TEXTS[0]
    assert chunks[-1].choices[0].finish_reason == "length"


def test_concurrent_requests_agree(srv, ids):
    """Beside other requests (shared steps, cached prefixes of the same prompt) the numbers do
    not move."""
    want = post(srv, {"prompt": ids[0], "max_tokens": 0, "echo": True, "logprobs": 0})
    want = want["choices"][0]["logprobs"]["token_logprobs"]
    body = {"prompt": ids[0], "max_tokens": 0, "echo": True, "logprobs": 0}
    other = {"prompt": TEXTS[0], "max_tokens": 12, "temperature": 0.8}
    with cf.ThreadPoolExecutor(6) as ex:
        futs = [ex.submit(post, srv, body if i % 2 == 0 else other) for i in range(6)]
        res = [f.result() for f in futs]
    for r in res[::2]:
        np.testing.assert_allclose(r["choices"][0]["logprobs"]["token_logprobs"][1:], want[1:],
                                   atol=1e-5)


def test_single_token_and_text_prompt(srv):
    """A one-token prompt has no logprob to report (null); echo without logprobs and
    max_tokens 0 is the prompt alone."""
    r = post(srv, {"prompt": [504], "max_tokens": 0, "echo": True, "logprobs": 1})
    lp = r["choices"][0]["logprobs"]
    assert lp["token_logprobs"] == [None] and lp["top_logprobs"] == [None]
    r = post(srv, {"prompt": "Hello there", "max_tokens": 0, "echo": True})
    assert r["choices"][0]["text"] == "Hello there"
    assert r["choices"][0]["logprobs"] is None
    assert r["usage"]["completion_tokens"] == 0


@pytest.mark.parametrize("body,param,contains", [
    ({"prompt": "x", "max_tokens": 0}, "max_tokens", "echo"),
    ({"prompt": "x", "max_tokens": -1, "echo": True}, "max_tokens", ">= 0"),
    ({"prompt": "x", "prompt_logprobs": 1, "stream": True}, "prompt_logprobs", "stream"),
    ({"prompt": "x", "prompt_logprobs": 21}, "prompt_logprobs", "0 to 20"),
])
def test_refusals(srv, body, param, contains):
    st, _, data = srv.post_json("/v1/completions", {"model": NAME, **body})
    assert_error_body(data, 400, param=param, contains=(contains,))
    assert st == 400
    st, _, data = srv.post_json("/v1/chat/completions", {
        "model": NAME, "max_tokens": 0, "messages": [{"role": "user", "content": "hi"}]})
    assert st == 400 and data["error"]["param"] == "max_tokens", json.dumps(data)


def rank_bounds(row, tok):
    """The ranks a token may have when logprobs are known to within TOL."""
    x = row[tok]
    return 1 + int((row > x + TOL).sum()), 1 + int((row > x - TOL).sum())


def check_vllm_prompt_logprobs(plp, prompt, lsm, k):
    assert len(plp) == len(prompt) and plp[0] is None
    for i in range(1, len(prompt)):
        d, key = plp[i], str(prompt[i])
        assert next(iter(d)) == key  # the prompt token first
        lo, hi = rank_bounds(lsm[i - 1], prompt[i])
        assert lo <= d[key]["rank"] <= hi, (i, d[key], lo, hi)
        assert d[key]["logprob"] == pytest.approx(lsm[i - 1][prompt[i]], abs=TOL)
        best = np.sort(lsm[i - 1])[::-1]
        # the k alternatives: every other entry, and the prompt token when it is one of them
        alts = sorted((v["rank"], v["logprob"]) for t, v in d.items() if t != key or
                      v["rank"] <= k)
        assert len(alts) == k and all(1 <= r <= k for r, _ in alts), d
        for r, v in alts:
            assert v == pytest.approx(best[r - 1], abs=TOL)


def test_vllm_prompt_logprobs_completions(srv, ids, ref_lsm):
    """vLLM's prompt_logprobs beside echo's logprobs in one answer: each view its own count of
    alternatives, the same numbers, the same token texts; both against the reference."""
    x, lsm = ids[0], ref_lsm[0]
    r = post(srv, {"prompt": x, "max_tokens": 2, "temperature": 0, "echo": True,
                   "logprobs": 1, "prompt_logprobs": 3})
    c = r["choices"][0]
    check_vllm_prompt_logprobs(c["prompt_logprobs"], x, lsm, 3)
    lp = c["logprobs"]
    for i in range(1, len(x)):
        e = c["prompt_logprobs"][i][str(x[i])]
        assert lp["token_logprobs"][i] == pytest.approx(e["logprob"], abs=1e-6)
        assert lp["tokens"][i] == e["decoded_token"]
        assert len(lp["top_logprobs"][i]) <= 2
    # without echo: the prompt's logprobs all the same, the answer only the completion
    r = post(srv, {"prompt": x, "max_tokens": 2, "temperature": 0, "prompt_logprobs": 0,
                   "n": 2})
    for c in r["choices"]:
        assert not c["text"].startswith(TEXTS[0])
        plp = c["prompt_logprobs"]
        assert [list(d) for d in plp[1:]] == [[str(t)] for t in x[1:]]
        for i in range(1, len(x)):
            assert plp[i][str(x[i])]["logprob"] == pytest.approx(lsm[i - 1][x[i]], abs=TOL)


def test_vllm_prompt_logprobs_chat(srv, model_path):
    """On chat, after usage: the rendered prompt's tokens (as /tokenize renders the messages)."""
    msgs = [{"role": "user", "content": "Name the largest planet of the solar system."}]
    st, _, tok = srv.post_json("/tokenize", {"messages": msgs})
    assert st == 200, tok
    x = tok["tokens"]
    st, _, r = srv.post_json("/v1/chat/completions", {"model": NAME, "messages": msgs,
                                                      "max_tokens": 2, "temperature": 0,
                                                      "prompt_logprobs": 2}, timeout=120)
    assert st == 200, r
    assert list(r)[-1] == "prompt_logprobs" and r["usage"]["prompt_tokens"] == len(x)
    logits = RefModel(model_path).forward(x)
    m = logits.max(axis=-1, keepdims=True)
    lsm = logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))
    check_vllm_prompt_logprobs(r["prompt_logprobs"], x, lsm, 2)
    # not asked: not there
    st, _, r = srv.post_json("/v1/chat/completions", {"model": NAME, "messages": msgs,
                                                      "max_tokens": 1})
    assert st == 200 and "prompt_logprobs" not in r

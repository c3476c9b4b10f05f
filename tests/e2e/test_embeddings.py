"""POST /v1/embeddings with the default model (SmolLM2-135M-Instruct): the vectors, their two
encodings, batching, the errors, and a server that stays healthy.

The references are independent of the endpoint under test:
- the numpy float64 reference model (tests/reference/ref_model.py, RefModel.hidden: the final
  hidden states after the output RMSNorm) on the token ids the server uses (/tokenize, or the
  ids sent as the input): the vector is its last row (--pooling last, this model's default as its
  GGUF names no pooling_type) or the mean of its rows (--pooling mean), scaled to unit length;
- the float32 values themselves: the float and base64 encodings must hold the very same ones,
  `dimensions` must be the full vector's first values renormalized;
- the same input computed another way must give the very same bits (the CPU backend is
  batch-invariant): alone, in a batch of inputs of other lengths (some longer than a step's 512
  tokens: chunked prefill), served from the prefix cache, beside a streaming chat completion, as
  token ids instead of text;
- OpenAI's documented shapes and errors; /metrics for KV blocks given back.

Tolerance against the reference: the reference dequantizes the very same Q4_1 / Q8_0 weights, so
the server differs from it only by float32 arithmetic and its f16 KV cache (activations stay
f32 unless --int8-activations). Measured over the short texts below (both poolings) and the
long one (759 tokens): |server - reference| at most 1.3e-4 in any component and 5e-4 in L2 norm
(cosine >= 1 - 1.3e-7); with --kv-cache-dtype f32 both fall under 1e-6, so the f16 KV cache is
what they are made of (with --int8-activations they reach 1e-2 / 4e-2, outside). Allowed: 5e-4
per component (4x) and 1.5e-3 in L2 (3x; cosine >= 1 - 1.1e-6). That is still tight: another
input's vector is >= 0.58 away in L2, the second-to-last token's state >= 0.70, the mean of a
short input with one row fewer >= 0.03, the mean of either step of the long input >= 0.09
(all checked below, so that the tolerance cannot pass a wrong pooling).
"""
import base64
import concurrent.futures as cf
import json
import pathlib
import socket
import sys
import time

import numpy as np
import pytest

from pagoda_e2e import assert_error_body, http, metric, openai_client, poll

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "reference"))
from ref_model import RefModel  # noqa: E402

NAME = "smol-emb"
MEAN_NAME = "smol-emb-mean"
MEAN_CTX = 1024  # the mean server's context: the inputs' limit is MEAN_CTX - 1 tokens
N_EMBD = 576

MAX_ABS = 5e-4  # per component (measured worst 1.3e-4)
MAX_L2 = 1.5e-3  # L2 norm of the difference (measured worst 5e-4)

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Question: What is the capital city of France, and which river runs through it?\n"
    "Answer: Paris, on the Seine",
    "hi",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "In 1905, Albert Einstein published four groundbreaking papers on the photoelectric effect, "
    "Brownian motion, special relativity and mass-energy equivalence.",
]

# Varied text (prose, code, a table, numbers, French, Japanese) of more than one step's 512
# tokens (759 with this tokenizer) and fewer than MEAN_CTX.
LONG_TEXT = (
    "The history of the lighthouse begins in the ancient Mediterranean, where the Pharos of "
    "Alexandria, completed around 280 BC, guided ships into the harbour with a fire that burned "
    "on its summit. For nearly two thousand years it was counted among the Seven Wonders of the "
    "World, until a series of earthquakes between 956 and 1323 left it in ruins.\n\n"
    "Modern lighthouses differ in almost every respect. A Fresnel lens, invented by Augustin-Jean "
    "Fresnel in 1822, concentrates the light of a small lamp into a beam visible for more than "
    "twenty nautical miles; each station has its own signature of flashes (for example Fl(3) 15s: "
    "three flashes every fifteen seconds) so that a navigator can tell one coast from another.\n\n"
    "def visible_range(height_m, eye_m=5.0):\n"
    "    # the geographic range in nautical miles, ignoring refraction\n"
    "    return 2.08 * (height_m ** 0.5 + eye_m ** 0.5)\n\n"
    "print(round(visible_range(60), 1))  # about 20.8\n\n"
    "Keepers lived hard lives. Logbooks from the nineteenth century record storms that lasted "
    "for weeks, supply boats that could not land, and the endless work of trimming wicks, "
    "polishing brass and winding the clockwork that turned the lens. In 1838 Grace Darling, the "
    "daughter of the keeper at Longstone, rowed with her father through heavy seas to rescue "
    "nine survivors of the steamer Forfarshire; she became a national heroine overnight.\n\n"
    "| Station        | Built | Height (m) | Range (nm) |\n"
    "|----------------|-------|------------|------------|\n"
    "| Bell Rock      | 1810  | 35         | 18         |\n"
    "| Eddystone      | 1882  | 49         | 17         |\n"
    "| Cordouan       | 1611  | 68         | 22         |\n\n"
    "Today almost every light is automatic. Solar panels charge batteries, LED lanterns replace "
    "incandescent bulbs, and a remote monitoring system reports faults to a control centre "
    "hundreds of kilometres away. Some towers have become museums or holiday cottages; others "
    "stand empty, their lenses removed to collections in Paris, Edinburgh or Washington.\n\n"
    "Questions for discussion: Why did the Fresnel lens spread so quickly after 1823? How did "
    "the change from oil to electricity alter a keeper's daily routine? Which lights near your "
    "own coast are still staffed, and what would be lost if the last keepers retired?\n\n"
    "Fun facts: the tallest traditional lighthouse, at Jeddah, rises 133 metres; the oldest "
    "still working, the Tower of Hercules in A Coruña, dates from the second century; and the "
    "word 'pharology' — the study of lighthouses — comes straight from the island of Pharos. "
    "Les phares de Bretagne, comme Ar-Men ou La Vieille, sont célèbres pour leurs tempêtes. "
    "灯台は日本でも明治時代に多く建てられた。 Numbers to close: 3.14159, 2.71828, 1.61803, "
    "42, 1024, 65536 and 0x7fffffff."
)


def random_ids(seed, n):
    """n ordinary token ids (no special ones), the same for a seed."""
    return [int(t) for t in np.random.default_rng(seed).integers(100, 49000, size=n)]


# ---- servers and references ------------------------------------------------------------------

@pytest.fixture(scope="module")
def srv(start_server):
    """The default pooling: this model's GGUF has no pooling_type, so the last token's."""
    return start_server("--served-model-name", NAME)


@pytest.fixture(scope="module")
def mean_srv(start_server):
    """Mean pooling, and a context of MEAN_CTX tokens (for the too-long input)."""
    return start_server("--served-model-name", MEAN_NAME, "--pooling", "mean",
                        "--ctx-size", MEAN_CTX)


@pytest.fixture(scope="module")
def client(srv):
    return openai_client(srv)


@pytest.fixture(scope="module")
def ref(model_path):
    return RefModel(model_path)


def tokenize(srv, text):
    st, _, body = srv.post_json("/tokenize", {"prompt": text})
    assert st == 200, body
    assert body["count"] == len(body["tokens"])
    return body["tokens"]


@pytest.fixture(scope="module")
def ids(srv):
    return [tokenize(srv, t) for t in TEXTS]


@pytest.fixture(scope="module")
def long_ids(srv):
    x = tokenize(srv, LONG_TEXT)
    assert 512 < len(x) < MEAN_CTX - 1, len(x)
    return x


@pytest.fixture(scope="module")
def hidden(ref, ids):
    """The reference's output-normed hidden states [T, n_embd] of each text."""
    return [ref.hidden(x) for x in ids]


@pytest.fixture(scope="module")
def long_hidden(ref, long_ids):
    h = ref.hidden(long_ids)  # the costly one (~20 s): computed once for both poolings
    assert h.shape == (len(long_ids), N_EMBD)
    return h


def unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def last_of(h):
    return unit(h[-1])


def mean_of(h):
    return unit(h.mean(axis=0))


def distance(got, want):
    d = np.asarray(got, dtype=np.float64) - want
    return float(np.abs(d).max()), float(np.linalg.norm(d))


def close(got, want):
    mx, l2 = distance(got, want)
    return mx <= MAX_ABS and l2 <= MAX_L2


def assert_close(got, want, what=""):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape, (what, got.shape)
    mx, l2 = distance(got, want)
    print(f"{what}: |server - reference| max {mx:.2e}, L2 {l2:.2e}, cos {got @ want:.9f}")
    assert mx <= MAX_ABS and l2 <= MAX_L2, (what, mx, l2)


def embed(srv, body, status=200, timeout=120):
    st, _, data = srv.post_json("/v1/embeddings", body, timeout=timeout)
    assert st == status, data
    return data


def b64_vectors(data):
    """The base64 vectors of an answer: their raw strings and float32 arrays."""
    raw = [d["embedding"] for d in data["data"]]
    assert all(isinstance(s, str) for s in raw), raw
    return raw, [np.frombuffer(base64.b64decode(s, validate=True), dtype="<f4") for s in raw]


def float_vectors(data):
    out = []
    for d in data["data"]:
        v = d["embedding"]
        # (JSON numbers: %.9g prints a value of exactly 1 or 0 without a point)
        assert isinstance(v, list) and all(isinstance(x, (int, float)) and
                                           not isinstance(x, bool) for x in v), v[:4]
        out.append(np.array(v, dtype=np.float64))
    return out


def check_answer(data, n, model, prompt_tokens):
    assert list(data) == ["object", "data", "model", "usage"], list(data)
    assert data["object"] == "list" and data["model"] == model
    assert data["usage"] == {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    assert [d["index"] for d in data["data"]] == list(range(n))
    for d in data["data"]:
        assert list(d) == ["object", "index", "embedding"] and d["object"] == "embedding", d


# ---- 1. the vectors against the reference ----------------------------------------------------

def test_sdk_default_base64_matches_reference(client, ids, hidden):
    """The SDK asks for base64 when not told otherwise and decodes it: the last token's state
    of each input, normalized, as the reference computes it. Another input's vector, or the
    second-to-last token's, is far outside the tolerance."""
    raw = client.embeddings.with_raw_response.create(model=NAME, input=TEXTS)
    sent = json.loads(raw.http_request.content)
    assert sent["encoding_format"] == "base64"  # what the SDK asked for
    assert all(isinstance(d["embedding"], str) for d in raw.http_response.json()["data"])
    r = raw.parse()
    assert r.model == NAME and r.object == "list"
    assert [d.index for d in r.data] == list(range(len(TEXTS)))
    assert r.usage.prompt_tokens == r.usage.total_tokens == sum(map(len, ids))
    want = [last_of(h) for h in hidden]
    for i, d in enumerate(r.data):
        assert len(d.embedding) == N_EMBD
        assert_close(d.embedding, want[i], f"text {i} ({len(ids[i])} tokens), last")
        for j in range(len(TEXTS)):
            if j != i:
                assert distance(d.embedding, want[j])[1] > 100 * MAX_L2, (i, j)
        if len(ids[i]) > 1:
            assert distance(d.embedding, unit(hidden[i][-2]))[1] > 100 * MAX_L2, i


def test_sdk_float_matches_reference(client, ids, hidden):
    r = client.embeddings.create(model=NAME, input=TEXTS[:2], encoding_format="float")
    assert len(r.data) == 2
    for i, d in enumerate(r.data):
        assert_close(d.embedding, last_of(hidden[i]), f"text {i}, float")
    # one string, not a list
    r = client.embeddings.create(model=NAME, input=TEXTS[3], encoding_format="float")
    assert len(r.data) == 1 and r.usage.prompt_tokens == len(ids[3])
    assert_close(r.data[0].embedding, last_of(hidden[3]), "one string")


def test_token_id_inputs_match_reference(srv, ids, hidden):
    """Token ids as the input ([[int]] and [int]) are used as they are; without "model" the
    served model answers."""
    data = embed(srv, {"input": ids[:3], "encoding_format": "float"})
    check_answer(data, 3, NAME, sum(map(len, ids[:3])))
    for i, v in enumerate(float_vectors(data)):
        assert_close(v, last_of(hidden[i]), f"ids {i}")
    data = embed(srv, {"input": ids[4], "model": NAME})
    check_answer(data, 1, NAME, len(ids[4]))
    assert_close(float_vectors(data)[0], last_of(hidden[4]), "[int]")


def test_mean_pooling_matches_reference(mean_srv, ids, hidden):
    """--pooling mean: the mean of every prompt token's state. A mean with a row fewer (the
    first or the last left out), or the last token's state, is outside the tolerance."""
    data = embed(mean_srv, {"input": TEXTS, "encoding_format": "float"})
    check_answer(data, len(TEXTS), MEAN_NAME, sum(map(len, ids)))
    for i, v in enumerate(float_vectors(data)):
        h = hidden[i]
        assert_close(v, mean_of(h), f"text {i} ({len(h)} tokens), mean")
        if len(h) > 1:
            for wrong in (h[1:].mean(axis=0), h[:-1].mean(axis=0), h[-1]):
                assert not close(v, unit(wrong)), i


# ---- 2. encodings, dimensions, usage -----------------------------------------------------------

def test_float_and_base64_hold_the_same_values(srv, ids):
    """The float form prints each float32 so that it reads back exactly: the same values as
    the base64 bytes. Unit norms."""
    inputs = [TEXTS[0], TEXTS[2], TEXTS[1]]
    n_tok = len(ids[0]) + len(ids[2]) + len(ids[1])
    f = embed(srv, {"input": inputs, "encoding_format": "float"})
    b = embed(srv, {"input": inputs, "encoding_format": "base64"})
    d = embed(srv, {"input": inputs})  # the default: float
    for data in (f, b, d):
        check_answer(data, 3, NAME, n_tok)
    _, bv = b64_vectors(b)
    for fv, bb, dv in zip(float_vectors(f), bv, float_vectors(d)):
        assert bb.shape == (N_EMBD,)
        f32 = fv.astype(np.float32)
        assert np.array_equal(f32, bb)  # the very same float32 values
        assert np.array_equal(dv, fv)
        assert abs(np.linalg.norm(bb.astype(np.float64)) - 1) < 1e-5


@pytest.mark.parametrize("dim", [1, 7, 64, 575, N_EMBD])
def test_dimensions_cut_then_normalize(srv, dim):
    inputs = [TEXTS[1], TEXTS[3]]
    full = [v.astype(np.float64) for v in b64_vectors(embed(
        srv, {"input": inputs, "encoding_format": "base64"}))[1]]
    cut = embed(srv, {"input": inputs, "encoding_format": "float", "dimensions": dim})
    cut64 = embed(srv, {"input": inputs, "encoding_format": "base64", "dimensions": dim})
    check_answer(cut, 2, NAME, cut["usage"]["prompt_tokens"])
    for fv, v, bb in zip(full, float_vectors(cut), b64_vectors(cut64)[1]):
        assert len(v) == dim and bb.shape == (dim,)
        assert np.array_equal(v.astype(np.float32), bb)
        want = unit(fv[:dim])
        np.testing.assert_allclose(v, want, rtol=0, atol=1e-6)
        assert abs(np.linalg.norm(v) - 1) < 1e-5
        if dim == 1:
            assert v[0] == np.sign(fv[0])
        if dim < N_EMBD:  # not the full vector's values: really renormalized
            assert np.abs(v - fv[:dim]).max() > 1e-5


def test_usage_counts_every_input(srv, ids, long_ids):
    """usage counts every input's tokens (as /tokenize counts a text's); user, priority and
    unknown fields are accepted."""
    data = embed(srv, {"input": [TEXTS[2], LONG_TEXT, TEXTS[0]], "encoding_format": "base64",
                       "user": "someone", "priority": 3, "unknown_field": {"x": 1}})
    check_answer(data, 3, NAME, len(ids[2]) + len(long_ids) + len(ids[0]))
    data = embed(srv, {"input": [ids[1], [504]], "model": NAME})
    check_answer(data, 2, NAME, len(ids[1]) + 1)


# ---- 3. the same bits however computed -----------------------------------------------------------

def hits(srv):
    return metric(srv.metrics(), "pagoda_prefix_cache_hits_total")


def test_batch_invariance_and_prefix_cache(srv):
    """An input's bits do not depend on what shares its steps, nor on the prefix cache:
    - X computed alone, from scratch;
    - a batch [Y (long, new), X (now cached), Z (short, new), Y again, W (long, new)]: Y and W
      run in chunks of a 512-token step beside the others;
    - Y, Z, W alone afterwards (their prefixes cached);
    - the batch again (every prompt but its last block from the cache)."""
    X, Y, Z, W = random_ids(1, 600), random_ids(2, 700), random_ids(3, 23), random_ids(4, 530)
    bx = embed(srv, {"input": [X], "encoding_format": "base64"})["data"][0]["embedding"]
    h0 = hits(srv)
    batch = embed(srv, {"input": [Y, X, Z, Y, W], "encoding_format": "base64"})
    check_answer(batch, 5, NAME, 700 + 600 + 23 + 700 + 530)
    by, bx2, bz, by2, bw = b64_vectors(batch)[0]
    assert hits(srv) - h0 >= 592  # X's first 37 blocks came from the cache
    assert bx2 == bx
    assert by2 == by
    for x, b in ((Y, by), (Z, bz), (W, bw)):
        h0 = hits(srv)
        alone = embed(srv, {"input": [x], "encoding_format": "base64"})["data"][0]["embedding"]
        assert alone == b
        if len(x) > 16:
            assert hits(srv) - h0 >= 16 * ((len(x) - 1) // 16)
    h0 = hits(srv)
    again = embed(srv, {"input": [Y, X, Z, Y, W], "encoding_format": "base64"})
    assert b64_vectors(again)[0] == [by, bx, bz, by, bw]
    assert hits(srv) - h0 >= 4 * 512
    # the inputs differ: a mix-up of rows would show
    assert len({by, bx, bz, bw}) == 4


def test_text_and_token_ids_give_the_same_bits(srv, ids, long_ids):
    texts = [TEXTS[4], LONG_TEXT, TEXTS[2]]
    toks = [ids[4], long_ids, ids[2]]
    a = b64_vectors(embed(srv, {"input": texts, "encoding_format": "base64"}))[0]
    b = b64_vectors(embed(srv, {"input": toks, "encoding_format": "base64"}))[0]
    assert a == b
    one = embed(srv, {"input": TEXTS[4], "encoding_format": "base64"})["data"][0]["embedding"]
    one_ids = embed(srv, {"input": ids[4], "encoding_format": "base64"})["data"][0]["embedding"]
    assert one == one_ids == a[0]


def test_mean_pooling_batch_invariance(mean_srv, ids):
    """Mean pooling uses no prefix cache (every row is pooled): the same bits alone, in a
    batch with a long input, and repeated."""
    X, Y = random_ids(11, 600), random_ids(12, 40)
    alone = [embed(mean_srv, {"input": [x], "encoding_format": "base64"})["data"][0]["embedding"]
             for x in (X, Y)]
    for _ in range(2):
        got = b64_vectors(embed(mean_srv, {"input": [Y, X, ids[1]],
                                           "encoding_format": "base64"}))[0]
        assert got[:2] == alone[::-1]


def test_concurrent_requests_agree(srv, ids):
    """Several clients at once (their inputs share steps): each gets what it gets alone."""
    bodies = [{"input": [ids[i % len(ids)], random_ids(20 + i, 40 + 90 * i)],
               "encoding_format": "base64"} for i in range(6)]
    want = [b64_vectors(embed(srv, b))[0] for b in bodies]
    with cf.ThreadPoolExecutor(6) as ex:
        got = list(ex.map(lambda b: b64_vectors(embed(srv, b))[0], bodies))
    assert got == want


# ---- 4. inputs longer than a step against the reference --------------------------------------

def test_long_input_last_pooling(srv, long_ids, long_hidden):
    data = embed(srv, {"input": LONG_TEXT, "encoding_format": "float"})
    check_answer(data, 1, NAME, len(long_ids))
    v = float_vectors(data)[0]
    assert_close(v, last_of(long_hidden), f"long input ({len(long_ids)} tokens), last")
    assert not close(v, unit(long_hidden[-2]))


def test_long_input_mean_pooling(mean_srv, long_ids, long_hidden):
    data = embed(mean_srv, {"input": [LONG_TEXT, TEXTS[2]], "encoding_format": "float"})
    check_answer(data, 2, MEAN_NAME, len(long_ids) + 1)
    a = float_vectors(data)[0]
    data = embed(mean_srv, {"input": [long_ids], "encoding_format": "float"})
    assert np.array_equal(float_vectors(data)[0], a)
    assert_close(a, mean_of(long_hidden), f"long input ({len(long_ids)} tokens), mean")
    # the mean of only one step's rows (the first 512 or the rest) is far off
    assert not close(a, mean_of(long_hidden[:512]))
    assert not close(a, mean_of(long_hidden[512:]))


# ---- 5. errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("body,param,contains", [
    ({}, "input", "required"),
    ({"input": None}, "input", "required"),
    ({"input": []}, "input", "empty"),
    ({"input": [[]]}, "input[0]", "empty"),
    ({"input": [[1], []]}, "input[1]", "empty"),
    ({"input": 5}, "input", "got an integer"),
    ({"input": {"text": "x"}}, "input", "must be"),
    ({"input": ["a", 1]}, "input[1]", "string"),
    ({"input": [1, "a"]}, "input[1]", "token id"),
    ({"input": [[1], [2, "x"]]}, "input[1][1]", "token id"),
    ({"input": [[1], [2, -1]]}, "input[1][1]", "token id"),
    ({"input": [True]}, "input[0]", ""),
    ({"input": ""}, "input", ""),
    ({"input": [1, 49152]}, "input", "49152"),
    ({"input": [[5], [2 ** 31 - 1]]}, "input", "out of range"),
    ({"input": ["a"] * 2049}, "input", "2048"),
    ({"input": [[1]] * 2049}, "input", "2048"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format", "int8"),
    ({"input": "a", "encoding_format": "FLOAT"}, "encoding_format", ""),
    ({"input": "a", "encoding_format": 1}, "encoding_format", "string"),
    ({"input": "a", "dimensions": 0}, "dimensions", ">= 1"),
    ({"input": "a", "dimensions": -3}, "dimensions", ">= 1"),
    ({"input": "a", "dimensions": N_EMBD + 1}, "dimensions", str(N_EMBD)),
    ({"input": "a", "dimensions": 2 ** 40}, "dimensions", ""),
    ({"input": "a", "dimensions": 1.5}, "dimensions", "integer"),
    ({"input": "a", "dimensions": "3"}, "dimensions", "integer"),
    ({"input": "a", "dimensions": True}, "dimensions", "integer"),
    ({"input": "a", "user": 5}, "user", "string"),
    ({"input": "a", "priority": "x"}, "priority", "integer"),
    ({"input": "a", "model": 5}, "model", "string"),
])
def test_refusals(srv, body, param, contains):
    st, _, data = srv.post_json("/v1/embeddings", body)
    assert st == 400, data
    assert_error_body(data, 400, param=param, type_="invalid_request_error",
                      contains=(contains,) if contains else ())


def test_other_refusals(srv):
    st, _, data = srv.post_json("/v1/embeddings", {"input": "a", "model": "no-such-model"})
    assert st == 404
    assert_error_body(data, 404, param="model", code="model_not_found")
    st, hd, raw = http(srv.port, "GET", "/v1/embeddings")
    assert st == 405 and hd.get("allow") == "POST"
    assert_error_body(raw, 405)
    for raw_body in (b"not json", b"{\"input\": \"a\"", b"[1, 2]", b""):
        st, _, raw = http(srv.port, "POST", "/v1/embeddings", raw_body,
                          {"Content-Type": "application/json"})
        assert st == 400, (raw_body, raw)
        assert_error_body(raw, 400, param=None, type_="invalid_request_error")


def test_input_longer_than_the_context(mean_srv, long_ids):
    """An input must leave room in the context: MEAN_CTX tokens are refused (as ids, as text,
    beside a valid input); the whole request is refused, nothing computed."""
    too_long = random_ids(30, MEAN_CTX)
    text = LONG_TEXT + " " + LONG_TEXT  # > MEAN_CTX tokens
    for inp in ([too_long], too_long, text, [TEXTS[0], text], [long_ids, too_long]):
        st, _, data = mean_srv.post_json("/v1/embeddings", {"input": inp})
        assert st == 400, data
        assert_error_body(data, 400, param="input", type_="invalid_request_error",
                          contains=("maximum context length", str(MEAN_CTX)))
    # the longest allowed input is computed
    data = embed(mean_srv, {"input": [random_ids(31, MEAN_CTX - 1)], "dimensions": 8})
    assert data["usage"]["prompt_tokens"] == MEAN_CTX - 1


def test_counted_in_metrics(srv, ids):
    """One answered request of several inputs is one request under its route, its inputs'
    tokens the prompt tokens, nothing generated; a refusal is counted under its status."""
    def routed(m, status):  # 0 before the first such request
        return sum(v for (n, ls), v in m.items() if n == "pagoda_http_requests_total" and
                   {("route", "/v1/embeddings"), ("status", status)} <= ls)

    def counts():
        m = srv.metrics()
        return (routed(m, "200"), routed(m, "400"),
                metric(m, "pagoda_prompt_tokens_total"),
                metric(m, "pagoda_request_success_total", finished_reason="stop"),
                metric(m, "pagoda_request_generation_tokens_sum"))
    c0 = counts()
    embed(srv, {"input": ids[:3]})
    srv.post_json("/v1/embeddings", {"input": []})
    c1 = counts()
    assert [b - a for a, b in zip(c0, c1)] == [1, 1, sum(map(len, ids[:3])), 1, 0]


def test_server_answers_after_refusals(srv, hidden):
    data = embed(srv, {"input": TEXTS[0], "encoding_format": "float"})
    assert_close(float_vectors(data)[0], last_of(hidden[0]), "after refusals")
    assert srv.request("GET", "/health")[0] == 200
    m = srv.metrics()
    assert metric(m, "pagoda_kv_cache_usage_perc") == 0


# ---- 6. a healthy server -----------------------------------------------------------------------

def raw_post(port, body, path="/v1/embeddings", send_all=True):
    b = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(b),
                                                 b if send_all else b[:len(b) // 2]))
    return s


def gauges(srv):
    m = srv.metrics()
    return {k: metric(m, "pagoda_" + k) for k in (
        "requests_aborted_total", "num_requests_running", "num_requests_waiting",
        "kv_cache_usage_perc")}


def wait_idle(srv, timeout=30):
    def ok():
        g = gauges(srv)
        return g if (g["num_requests_running"], g["num_requests_waiting"],
                     g["kv_cache_usage_perc"]) == (0, 0, 0) else False
    return poll(ok, timeout=timeout, interval=0.05, msg="running / waiting / KV never back to 0")


def test_embeddings_answer_while_a_chat_streams(srv, ids):
    """A long streamed chat completion runs; embeddings requests (new inputs longer than a
    step, so computed in chunks beside the stream's decode steps) answer meanwhile, with the
    bits they have alone afterwards; the stream still flows; once it is closed every KV block
    is back."""
    wait_idle(srv)
    a0 = gauges(srv)["requests_aborted_total"]
    bodies = [{"input": [ids[1], random_ids(60, 700)], "encoding_format": "base64"},
              {"input": [random_ids(61, 600), ids[2]], "encoding_format": "base64"}]
    s = raw_post(srv.port, {"model": NAME, "stream": True, "max_tokens": 4000, "ignore_eos": True,
                            "messages": [{"role": "user", "content": "Tell me a long story."}]},
                 path="/v1/chat/completions")
    try:
        s.settimeout(60)
        got = b""
        while got.count(b"data: ") < 3:
            d = s.recv(65536)
            assert d, got[-500:]
            got += d
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
        during = []
        for body in bodies:
            t0 = time.monotonic()
            during.append(b64_vectors(embed(srv, body, timeout=60))[0])
            assert time.monotonic() - t0 < 30
            assert gauges(srv)["num_requests_running"] == 1  # the stream goes on
        n = len(got)
        while len(got) < n + 200:
            d = s.recv(65536)
            assert d
            got += d
        assert b"[DONE]" not in got
    finally:
        s.close()
    g = wait_idle(srv)
    assert g["requests_aborted_total"] == a0 + 1
    for body, d in zip(bodies, during):
        assert b64_vectors(embed(srv, body))[0] == d


def test_client_leaves_mid_request(srv):
    """A client that sends a large embeddings request (inputs of 1000 tokens, several seconds
    of work) and closes its connection once the work runs: the inputs are aborted and every
    KV block goes back; the server then answers as before."""
    want = embed(srv, {"input": TEXTS[2], "encoding_format": "base64"})["data"][0]["embedding"]
    wait_idle(srv)
    a0 = gauges(srv)["requests_aborted_total"]
    s = raw_post(srv.port, {"input": [random_ids(40 + i, 1000) for i in range(8)],
                            "encoding_format": "float"})
    try:
        poll(lambda: gauges(srv)["num_requests_running"] >= 1, timeout=30, interval=0.02,
             msg="the embeddings never ran")
    finally:
        s.close()
    g = wait_idle(srv)
    assert g["requests_aborted_total"] > a0
    got = embed(srv, {"input": TEXTS[2], "encoding_format": "base64"})["data"][0]["embedding"]
    assert got == want


def test_client_leaves_mid_body(srv):
    """Half a body, then the client goes: nothing runs, nothing is held."""
    s = raw_post(srv.port, {"input": [random_ids(50, 4000)]}, send_all=False)
    time.sleep(0.2)
    s.close()
    time.sleep(0.2)
    wait_idle(srv)
    assert srv.request("GET", "/health")[0] == 200
    assert srv.alive()


# ---- 7. --pooling ---------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["max", "LAST", "", "cls"])
def test_bad_pooling_value_refused(run_pagoda, model_path, value):
    p = run_pagoda("serve", "--model", model_path, "--port", "0", "--pooling", value,
                   check=False)
    assert p.returncode == 2, (p.returncode, p.stderr)
    err = p.stderr.decode(errors="replace")
    assert f"pooling '{value}'" in err, err
    assert b"listening" not in p.stdout


@pytest.mark.parametrize("value", ["auto", "last"])
def test_pooling_auto_and_last(start_server, srv, mean_srv, value):
    """This GGUF names no pooling_type: auto pools the last token, as --pooling last and the
    default do (the same bits), not the mean."""
    auto = start_server("--served-model-name", NAME, "--pooling", value)
    body = {"input": [TEXTS[0], TEXTS[3]], "encoding_format": "base64"}
    a = b64_vectors(embed(auto, body))[0]
    assert a == b64_vectors(embed(srv, body))[0]
    assert a[0] != b64_vectors(embed(mean_srv, body))[0][0]

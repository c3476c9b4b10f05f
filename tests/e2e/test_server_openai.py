"""`pagoda serve` through the official `openai` Python SDK: chat and completions, streamed and not,
n=2, logprobs, stop strings, seeds, stream_options.include_usage, developer messages, JSON mode,
structured output (a pydantic model through the SDK's parse()), the refusal of suffix /
schema keywords not followed; greedy text equal to `pagoda generate`'s for the same
request; /v1/models and /v1/models/{id} with --served-model-name; /tokenize and /detokenize
round trips.

One server for the module (served as "smol-e2e").
"""
import json
import os
import subprocess

import pytest

from pagoda_e2e import http, openai_client

NAME = "smol-e2e"
CHAT = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Write a short poem about the sea."}]
PROMPT = "Once upon a time, in a small village by the sea,"
N = 24  # max_tokens of most requests: small, the machine is shared


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server("--served-model-name", NAME)


@pytest.fixture(scope="module")
def client(srv):
    return openai_client(srv)


def collect_chat_stream(stream, n=1):
    """Content per choice index, finish reasons, the usage chunk, every chunk."""
    texts, finish, usage, chunks = [""] * n, [None] * n, None, []
    for ch in stream:
        chunks.append(ch)
        assert ch.object == "chat.completion.chunk"
        if not ch.choices:
            assert ch.usage is not None
            usage = ch.usage
            continue
        assert ch.usage is None
        for c in ch.choices:
            assert finish[c.index] is None, "a chunk after the finish chunk"
            if c.delta.content:
                texts[c.index] += c.delta.content
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    return texts, finish, usage, chunks


def collect_completion_stream(stream, n=1):
    texts, finish, usage, chunks = [""] * n, [None] * n, None, []
    for ch in stream:
        chunks.append(ch)
        assert ch.object == "text_completion"
        if not ch.choices:
            assert ch.usage is not None
            usage = ch.usage
            continue
        for c in ch.choices:
            assert finish[c.index] is None, "a chunk after the finish chunk"
            texts[c.index] += c.text
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    return texts, finish, usage, chunks


# ---- models, tokenize ------------------------------------------------------------------------

def test_models_lists_served_name(client, srv):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert ids == [NAME]
    m = models.data[0]
    assert m.object == "model" and m.owned_by == "pagoda" and m.created > 0
    st, _, raw = srv.post_json("/v1/chat/completions", {
        "model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    assert st == 200, raw
    assert raw["model"] == NAME
    # The file's own name is not served any more.
    import openai
    with pytest.raises(openai.NotFoundError) as ei:
        client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", max_tokens=1,
                                       messages=[{"role": "user", "content": "hi"}])
    assert ei.value.body["code"] == "model_not_found"


def test_models_retrieve(client, srv):
    """GET /v1/models/{id}: the list's own object for the served name, 404 model_not_found for
    any other (the SDK's models.retrieve)."""
    import openai
    m = client.models.retrieve(NAME)
    assert m.model_dump() == client.models.list().data[0].model_dump()
    with pytest.raises(openai.NotFoundError) as ei:
        client.models.retrieve("SmolLM2-135M-Instruct.Q4_1")
    assert ei.value.body["code"] == "model_not_found" and ei.value.body["param"] == "model"
    st, _, raw = srv.request("HEAD", "/v1/models/" + NAME)
    assert st == 200


def test_tokenize_detokenize_round_trip(srv, run_pagoda, model_path):
    text = "Hello, world! Naïve café — 日本語 🏯"
    st, _, tok = srv.post_json("/tokenize", {"prompt": text, "model": NAME})
    assert st == 200, tok
    assert tok["count"] == len(tok["tokens"]) > 0
    assert tok["max_model_len"] == 8192
    # The same ids as the CLI tokenizer.
    cli = run_pagoda("tokenize", "--model", model_path, text).stdout
    assert tok["tokens"] == json.loads(cli)
    st, _, det = srv.post_json("/detokenize", {"tokens": tok["tokens"], "model": NAME})
    assert st == 200, det
    assert det == {"prompt": text}
    # Chat messages render with the template (ending in the assistant header) and round-trip.
    st, _, chat = srv.post_json("/tokenize", {"messages": CHAT})
    assert st == 200, chat
    st, _, det = srv.post_json("/detokenize", {"tokens": chat["tokens"]})
    assert st == 200
    assert "Write a short poem about the sea." in det["prompt"]
    st, _, det = srv.post_json("/detokenize", {"tokens": []})
    assert (st, det) == (200, {"prompt": ""})


# ---- greedy == pagoda generate ---------------------------------------------------------------

def test_chat_greedy_equals_generate(client, generate):
    want = generate(chat=CHAT, max_tokens=N)
    r = client.chat.completions.create(model=NAME, messages=CHAT, max_tokens=N, temperature=0)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == NAME
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0 and c.message.role == "assistant"
    assert c.message.content == want["text"]
    assert c.finish_reason == want["finish_reason"]
    assert r.usage.prompt_tokens == want["usage"]["prompt_tokens"]
    assert r.usage.completion_tokens == want["usage"]["completion_tokens"]
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_developer_message_is_a_system_message(client, generate):
    want = generate(chat=CHAT, max_tokens=N)
    dev = [{"role": "developer", "content": CHAT[0]["content"]}, CHAT[1]]
    r = client.chat.completions.create(model=NAME, messages=dev, max_tokens=N, temperature=0)
    assert r.choices[0].message.content == want["text"]
    assert r.usage.prompt_tokens == want["usage"]["prompt_tokens"]


def test_schema_keywords_and_suffix_are_refused_by_name(client, generate):
    """Not ignored: a 400 naming the field, through the SDK; the fields' "off" values pass and
    change nothing. (Tools: test_tools.py.)"""
    import openai
    refused = [(dict(tool_choice="required"), "tool_choice", "needs tools"),
               (dict(response_format={"type": "json_schema", "json_schema": {
                   "name": "w", "schema": {"type": "string", "pattern": "^a"}}}),
                "response_format.json_schema.schema", "not supported"),
               (dict(messages=[*CHAT, {"role": "function", "name": "f", "content": "20C"}]),
                "messages[2].role", "not supported")]
    for kw, param, says in refused:
        kw = {"messages": CHAT, **kw}
        with pytest.raises(openai.BadRequestError) as ei:
            client.chat.completions.create(model=NAME, max_tokens=1, **kw)
        assert ei.value.body["param"] == param
        assert says in ei.value.body["message"]
    with pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model=NAME, prompt=PROMPT, suffix="The end.", max_tokens=1)
    assert ei.value.body["param"] == "suffix"
    want = generate(chat=CHAT, max_tokens=N)
    r = client.chat.completions.create(model=NAME, messages=CHAT, max_tokens=N, temperature=0,
                                       tools=[], tool_choice="none",
                                       response_format={"type": "text"})
    assert r.choices[0].message.content == want["text"]


def test_json_mode(client):
    """response_format {"type": "json_object"}: every answer that ends is one JSON object —
    Python's json module parses it — sampled (temperature 0.7) or greedy, streamed or not (the
    same text for the same seed), and on /v1/completions too; most end within 160 tokens."""
    msgs = [{"role": "user", "content": "Describe a cat as a JSON object with a name and an age."}]
    fmt = {"type": "json_object"}
    stopped = 0
    for seed in range(8):
        kw = dict(model=NAME, messages=msgs, max_tokens=160, temperature=0.7, seed=seed,
                  response_format=fmt)
        c = client.chat.completions.create(**kw).choices[0]
        assert c.finish_reason in ("stop", "length")
        assert c.message.content.lstrip().startswith("{")
        if c.finish_reason == "stop":
            assert isinstance(json.loads(c.message.content), dict), c.message.content
            stopped += 1
        if seed < 2:
            (text,), (finish,), _, _ = collect_chat_stream(
                client.chat.completions.create(stream=True, **kw))
            assert (text, finish) == (c.message.content, c.finish_reason)
    assert stopped >= 6
    c = client.chat.completions.create(model=NAME, messages=msgs, max_tokens=160, temperature=0,
                                       response_format=fmt).choices[0]
    assert c.finish_reason == "stop" and isinstance(json.loads(c.message.content), dict)
    r = client.completions.create(model=NAME, prompt='A cat as JSON: ', max_tokens=160,
                                  temperature=0, extra_body={"response_format": fmt})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].text), dict)
    else:
        assert r.choices[0].text.lstrip().startswith("{")


def check_schema(pagoda_bin, tmp_path, schema, doc):
    """The recognizer's verdict on doc: whole, prefix or refused."""
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    tool = os.path.join(os.path.dirname(pagoda_bin), "json_schema_tool")
    p = subprocess.run([tool, "check", str(path)], input=json.dumps(doc) + "\n",
                       capture_output=True, text=True, check=True)
    return p.stdout.strip()


def test_structured_output(client, pagoda_bin, tmp_path):
    """response_format {"type": "json_schema"} through the SDK's parse(): a pydantic model in,
    an instance of it out — the SDK sends the model's strict schema and validates the answer
    with pydantic. Sampled (5 seeds, streamed too); a union of models; a recursive model; a schema on
    /v1/completions, checked by the jsonschema package."""
    import enum
    from typing import Annotated, Literal, Optional, Union

    import jsonschema
    from pydantic import BaseModel, Field

    class Mood(str, enum.Enum):
        happy = "happy"
        grumpy = "grumpy"

    class Cat(BaseModel):
        name: str = Field(max_length=12)
        age: int = Field(ge=0, le=30)
        weight_kg: float = Field(gt=0, le=12.5)
        mood: Mood
        indoor: bool
        toys: list[Annotated[str, Field(max_length=16)]] = Field(max_length=2)
        owner: Optional[Annotated[str, Field(max_length=16)]] = None

    msgs = [{"role": "user", "content": "Describe a cat as JSON."}]
    for seed in range(5):
        kw = dict(model=NAME, messages=msgs, max_tokens=200, temperature=0.7, seed=seed,
                  response_format=Cat)
        c = client.chat.completions.parse(**kw).choices[0]
        assert c.finish_reason == "stop"
        assert isinstance(c.message.parsed, Cat), c.message.content
        assert len(c.message.parsed.name) <= 12 and len(c.message.parsed.toys) <= 2
        # keys in the model's order, all of them (strict)
        assert list(json.loads(c.message.content)) == list(Cat.model_fields)
        if seed < 1:
            with client.chat.completions.stream(**kw) as s:
                final = s.get_final_completion().choices[0]
            assert final.message.content == c.message.content
            assert final.message.parsed == c.message.parsed

    class Purr(BaseModel):
        kind: Literal["purr"]
        loudness: int = Field(ge=1, le=10)

    class Hiss(BaseModel):
        kind: Literal["hiss", "growl"]
        at: str = Field(max_length=12)

    class Sounds(BaseModel):
        sounds: list[Union[Purr, Hiss]] = Field(min_length=1, max_length=3)

    for seed in range(2):  # a union of models: the discriminator picks the branch
        c = client.chat.completions.parse(model=NAME, messages=msgs, max_tokens=120, seed=seed,
                                          temperature=0.7, response_format=Sounds).choices[0]
        assert c.finish_reason == "stop" and isinstance(c.message.parsed, Sounds), \
            c.message.content

    class Tree(BaseModel):
        label: str = Field(max_length=8)
        kids: list["Tree"] = Field(max_length=2)

    # this small model nests trees without end: the answer cut at max_tokens is a prefix of a
    # document the schema allows (the recognizer's verdict, tests/tools/json_schema_tool)
    from openai.lib._pydantic import to_strict_json_schema
    fmt = {"type": "json_schema", "json_schema": {"name": "t", "strict": True,
                                                  "schema": to_strict_json_schema(Tree)}}
    c = client.chat.completions.create(model=NAME, messages=msgs, max_tokens=120, temperature=0,
                                       response_format=fmt).choices[0]
    verdict = check_schema(pagoda_bin, tmp_path, fmt["json_schema"]["schema"], c.message.content)
    assert (c.finish_reason, verdict) in (("length", "prefix"), ("stop", "whole")), verdict

    schema = {"type": "object", "properties": {
        "colors": {"type": "array", "items": {"enum": ["red", "green", "blue"]},
                   "minItems": 1, "maxItems": 3},
        "count": {"type": ["integer", "null"]}}, "required": ["colors", "count"],
        "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "c", "schema": schema, "strict": True}}
    for seed in range(3):
        r = client.completions.create(model=NAME, prompt="Colors as JSON: ", max_tokens=120,
                                      temperature=1.0, seed=seed,
                                      extra_body={"response_format": fmt})
        assert r.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(r.choices[0].text), schema)


def test_chat_stream_greedy_equals_generate(client, generate):
    want = generate(chat=CHAT, max_tokens=N)
    stream = client.chat.completions.create(model=NAME, messages=CHAT, max_tokens=N,
                                            temperature=0, stream=True)
    (text,), (finish,), usage, chunks = collect_chat_stream(stream)
    assert text == want["text"]
    assert finish == want["finish_reason"]
    assert usage is None  # not asked for
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert {c.model for c in chunks} == {NAME}


def test_completion_greedy_equals_generate(client, generate):
    want = generate(prompt=PROMPT, max_tokens=N)
    r = client.completions.create(model=NAME, prompt=PROMPT, max_tokens=N, temperature=0)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert r.choices[0].text == want["text"]
    assert r.choices[0].finish_reason == want["finish_reason"]
    assert r.usage.prompt_tokens == want["usage"]["prompt_tokens"]
    assert r.usage.completion_tokens == want["usage"]["completion_tokens"]

    stream = client.completions.create(model=NAME, prompt=PROMPT, max_tokens=N, temperature=0,
                                       stream=True)
    (text,), (finish,), usage, _ = collect_completion_stream(stream)
    assert text == want["text"] and finish == want["finish_reason"] and usage is None


def test_completion_token_prompt_and_prompt_list(client, generate, srv):
    want = generate(prompt=PROMPT, max_tokens=8)
    st, _, tok = srv.post_json("/tokenize", {"prompt": PROMPT, "add_special_tokens": False})
    assert st == 200
    r = client.completions.create(model=NAME, prompt=tok["tokens"], max_tokens=8, temperature=0)
    assert r.choices[0].text == want["text"]
    # Two prompts: one choice each, in order.
    other = "The capital of France is"
    r = client.completions.create(model=NAME, prompt=[PROMPT, other], max_tokens=8,
                                  temperature=0)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].text == want["text"]
    assert r.choices[1].text == generate(prompt=other, max_tokens=8)["text"]
    assert r.usage.completion_tokens == 16


def test_completion_echo(client, generate):
    """echo: the prompt, then the completion (streamed: the prompt is the first chunk)."""
    want = generate(prompt=PROMPT, max_tokens=8)["text"]
    r = client.completions.create(model=NAME, prompt=PROMPT, max_tokens=8, temperature=0,
                                  echo=True)
    assert r.choices[0].text == PROMPT + want
    assert r.usage.completion_tokens == 8
    (text,), _, _, chunks = collect_completion_stream(client.completions.create(
        model=NAME, prompt=PROMPT, max_tokens=8, temperature=0, echo=True, stream=True))
    assert text == PROMPT + want
    assert chunks[0].choices[0].text == PROMPT


def test_multibyte_text_streams_whole_characters(client, generate):
    """Emoji and CJK text: the streamed pieces join to the same text as the whole answer and
    `pagoda generate`, and no piece holds a broken character."""
    msgs = [{"role": "user", "content": "Write five emoji and the Japanese word for cat (猫)."}]
    want = generate(chat=msgs, max_tokens=40)["text"]
    assert any(ord(ch) > 0xFFFF for ch in want), want  # the model really answers with emoji
    r = client.chat.completions.create(model=NAME, messages=msgs, max_tokens=40, temperature=0)
    assert r.choices[0].message.content == want
    pieces = []
    for ch in client.chat.completions.create(model=NAME, messages=msgs, max_tokens=40,
                                             temperature=0, stream=True):
        for c in ch.choices:
            if c.delta.content:
                pieces.append(c.delta.content)
    assert "".join(pieces) == want
    # U+FFFD only where the whole answer has one (a character cut by max_tokens at the end).
    assert sum(p.count("\ufffd") for p in pieces) == want.count("\ufffd")


# ---- stream_options.include_usage ------------------------------------------------------------

def test_chat_stream_include_usage(client):
    kw = dict(model=NAME, messages=CHAT, max_tokens=N, temperature=0)
    full = client.chat.completions.create(**kw)
    stream = client.chat.completions.create(**kw, stream=True,
                                            stream_options={"include_usage": True})
    (text,), (finish,), usage, chunks = collect_chat_stream(stream)
    assert text == full.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert usage.prompt_tokens == full.usage.prompt_tokens
    assert usage.completion_tokens == full.usage.completion_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_completion_stream_include_usage(client):
    kw = dict(model=NAME, prompt=PROMPT, max_tokens=N, temperature=0)
    full = client.completions.create(**kw)
    stream = client.completions.create(**kw, stream=True, stream_options={"include_usage": True})
    (text,), _, usage, chunks = collect_completion_stream(stream)
    assert text == full.choices[0].text
    assert chunks[-1].choices == []
    assert (usage.prompt_tokens, usage.completion_tokens) == (full.usage.prompt_tokens,
                                                              full.usage.completion_tokens)


# ---- n = 2 -----------------------------------------------------------------------------------

def test_chat_n2_greedy(client, generate):
    want = generate(chat=CHAT, max_tokens=N)
    r = client.chat.completions.create(model=NAME, messages=CHAT, max_tokens=N, temperature=0,
                                       n=2)
    assert [c.index for c in r.choices] == [0, 1]
    assert [c.message.content for c in r.choices] == [want["text"]] * 2
    assert r.usage.completion_tokens == 2 * want["usage"]["completion_tokens"]
    assert r.usage.prompt_tokens == want["usage"]["prompt_tokens"]


def test_chat_n2_sampled_stream_equals_non_stream(client):
    kw = dict(model=NAME, messages=CHAT, max_tokens=16, temperature=1.0, seed=7, n=2,
              extra_body={"ignore_eos": True})
    r = client.chat.completions.create(**kw)
    texts = [c.message.content for c in r.choices]
    assert texts[0] != texts[1], "n=2 with a seed gives two different samples"
    assert all(c.finish_reason == "length" for c in r.choices)
    stream = client.chat.completions.create(**kw, stream=True,
                                            stream_options={"include_usage": True})
    s_texts, finish, usage, chunks = collect_chat_stream(stream, n=2)
    assert s_texts == texts
    assert finish == ["length", "length"]
    assert usage.completion_tokens == 32
    # Each choice starts with its own role chunk.
    roles = [c.choices[0].index for c in chunks if c.choices and c.choices[0].delta.role]
    assert sorted(roles) == [0, 1]


def test_completion_n2_stream(client, generate):
    want = generate(prompt=PROMPT, max_tokens=8)
    stream = client.completions.create(model=NAME, prompt=PROMPT, max_tokens=8, temperature=0,
                                       n=2, stream=True)
    texts, finish, _, _ = collect_completion_stream(stream, n=2)
    assert texts == [want["text"]] * 2
    assert finish == [want["finish_reason"]] * 2


# ---- seeds -----------------------------------------------------------------------------------

def test_seed_reproducible_chat_and_completion(client):
    def chat(seed, stream=False):
        kw = dict(model=NAME, messages=CHAT, max_tokens=16, temperature=1.0, seed=seed,
                  extra_body={"ignore_eos": True})
        if stream:
            return collect_chat_stream(client.chat.completions.create(**kw, stream=True))[0][0]
        return client.chat.completions.create(**kw).choices[0].message.content

    def comp(seed):
        return client.completions.create(model=NAME, prompt=PROMPT, max_tokens=16,
                                         temperature=1.0, seed=seed,
                                         extra_body={"ignore_eos": True}).choices[0].text
    a, b, c = chat(42), chat(42), chat(43)
    assert a == b
    assert a != c
    assert chat(42, stream=True) == a
    a, b, c = comp(1234), comp(1234), comp(1235)
    assert a == b
    assert a != c


# ---- stop strings ----------------------------------------------------------------------------

def test_stop_strings(client, generate):
    base = generate(prompt=PROMPT, max_tokens=40, extra=["--ignore-eos"])["text"]
    stop = base[len(base) // 2: len(base) // 2 + 5]
    assert len(stop) == 5
    want = base[: base.index(stop)]
    kw = dict(model=NAME, prompt=PROMPT, max_tokens=40, temperature=0,
              extra_body={"ignore_eos": True})
    r = client.completions.create(**kw, stop=[stop, "never-ever-there"])
    assert r.choices[0].text == want
    assert r.choices[0].finish_reason == "stop"
    (text,), (finish,), _, _ = collect_completion_stream(
        client.completions.create(**kw, stop=stop, stream=True))
    assert (text, finish) == (want, "stop")
    # vLLM's include_stop_str_in_output: the matched string ends the text
    inc = dict(kw, extra_body={"ignore_eos": True, "include_stop_str_in_output": True})
    r = client.completions.create(**inc, stop=[stop, "never-ever-there"])
    assert (r.choices[0].text, r.choices[0].finish_reason) == (want + stop, "stop")
    (text,), (finish,), _, _ = collect_completion_stream(
        client.completions.create(**inc, stop=stop, stream=True))
    assert (text, finish) == (want + stop, "stop")

    # Chat: stop at a word of the greedy answer.
    full = generate(chat=CHAT, max_tokens=40, extra=["--ignore-eos"])["text"]
    words = full.split()
    stop = " " + words[len(words) // 2]
    want = full[: full.index(stop)]
    ckw = dict(model=NAME, messages=CHAT, max_tokens=40, temperature=0, stop=stop,
               extra_body={"ignore_eos": True})
    r = client.chat.completions.create(**ckw)
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == (want, "stop")
    (text,), (finish,), _, _ = collect_chat_stream(
        client.chat.completions.create(**ckw, stream=True))
    assert (text, finish) == (want, "stop")


def test_stop_token_ids(client, srv, generate):
    """vLLM's stop_token_ids: the greedy answer ends at the first of its tokens that is one of
    them — that token's text not emitted, finish "stop", the token counted — whole and streamed;
    an id past the vocabulary is a 400 naming the field."""
    base = generate(prompt=PROMPT, max_tokens=12, extra=["--ignore-eos"])["token_ids"]
    k = next(i for i in range(4, 12) if base[i] not in base[:i])
    want = generate(prompt=PROMPT, max_tokens=k, extra=["--ignore-eos"])["text"]
    kw = dict(model=NAME, prompt=PROMPT, max_tokens=12, temperature=0,
              extra_body={"ignore_eos": False, "stop_token_ids": [base[k], 49151]})
    r = client.completions.create(**kw)
    assert (r.choices[0].text, r.choices[0].finish_reason) == (want, "stop")
    assert r.usage.completion_tokens == k + 1
    (text,), (finish,), _, _ = collect_completion_stream(
        client.completions.create(**kw, stream=True))
    assert (text, finish) == (want, "stop")
    st, _, body = http(srv.port, "POST", "/v1/completions", json.dumps(
        {"model": NAME, "prompt": PROMPT, "max_tokens": 4, "stop_token_ids": [1 << 30]}).encode(),
        {"Content-Type": "application/json"})
    assert st == 400 and json.loads(body)["error"]["param"] == "stop_token_ids", body


def test_max_tokens_gives_length(client):
    r = client.completions.create(model=NAME, prompt="Count: one, two, three,", max_tokens=5,
                                  temperature=0, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 5
    r = client.chat.completions.create(model=NAME, messages=CHAT, max_completion_tokens=3,
                                       temperature=0)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3


# ---- logprobs --------------------------------------------------------------------------------

def check_chat_logprobs(content, text, k):
    assert content, "no logprobs"
    assert "".join(t.token for t in content) == text
    assert b"".join(bytes(t.bytes) for t in content) == text.encode()
    for t in content:
        assert t.logprob <= 0
        assert len(t.top_logprobs) == k
        lps = [x.logprob for x in t.top_logprobs]
        assert lps == sorted(lps, reverse=True)
        # Greedy: the chosen token is the most likely one.
        assert t.top_logprobs[0].token == t.token
        assert t.top_logprobs[0].logprob == pytest.approx(t.logprob, abs=1e-6)
        assert all(x.bytes == list(x.token.encode()) for x in t.top_logprobs)


def test_chat_logprobs(client):
    kw = dict(model=NAME, messages=CHAT, max_tokens=10, temperature=0, logprobs=True,
              top_logprobs=3)
    r = client.chat.completions.create(**kw)
    c = r.choices[0]
    assert c.finish_reason == "length"
    assert len(c.logprobs.content) == r.usage.completion_tokens == 10
    check_chat_logprobs(c.logprobs.content, c.message.content, 3)

    # Streamed: the same entries, spread over the chunks.
    entries, text = [], ""
    for ch in client.chat.completions.create(**kw, stream=True):
        for x in ch.choices:
            text += x.delta.content or ""
            if x.logprobs and x.logprobs.content:
                entries += x.logprobs.content
    assert text == c.message.content
    assert [(e.token, round(e.logprob, 4)) for e in entries] == \
        [(e.token, round(e.logprob, 4)) for e in c.logprobs.content]

    # logprobs without top_logprobs: the chosen tokens only.
    r = client.chat.completions.create(model=NAME, messages=CHAT, max_tokens=4, temperature=0,
                                       logprobs=True)
    assert len(r.choices[0].logprobs.content) == 4
    assert all(t.top_logprobs == [] for t in r.choices[0].logprobs.content)
    # Not asked: null.
    r = client.chat.completions.create(model=NAME, messages=CHAT, max_tokens=2, temperature=0)
    assert r.choices[0].logprobs is None


def test_completion_logprobs(client):
    r = client.completions.create(model=NAME, prompt=PROMPT, max_tokens=10, temperature=0,
                                  logprobs=3)
    c = r.choices[0]
    lp = c.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == \
        len(lp.text_offset) == 10
    assert "".join(lp.tokens) == c.text
    offs = lp.text_offset
    assert offs == sorted(offs)
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert l <= 0
        assert 1 <= len(top) <= 3
        best = max(top, key=top.get)
        assert best == tok and top[best] == pytest.approx(l, abs=1e-6)

    entries = []
    text = ""
    for ch in client.completions.create(model=NAME, prompt=PROMPT, max_tokens=10,
                                        temperature=0, logprobs=3, stream=True):
        for x in ch.choices:
            text += x.text
            if x.logprobs and x.logprobs.tokens:
                entries += list(zip(x.logprobs.tokens, x.logprobs.token_logprobs))
    assert text == c.text
    assert [(t, round(v, 4)) for t, v in entries] == \
        [(t, round(v, 4)) for t, v in zip(lp.tokens, lp.token_logprobs)]


def test_server_still_healthy(srv):
    assert srv.alive()
    assert srv.request("GET", "/health")[0] == 200

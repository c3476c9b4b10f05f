"""Stored responses of POST /v1/responses (api/responses.h, server/resp_store.h): `store`
(default true), GET and DELETE /v1/responses/{id}, `previous_response_id`, the memory bound
`--responses-store-mb` (least recently used dropped first; 0 keeps none), one store per tenant.
The default model (SmolLM2-135M-Instruct), greedy, so that every answer is reproducible.

The references are independent of the feature under test:
- the object the POST returned (or, streamed, the `response` of its last event
  response.completed / response.incomplete): what GET must give back, key for key;
- the same conversation sent whole, without previous_response_id (the earlier turns' input
  items, their answers' `output` items as they came back, then this turn's input; this turn's
  instructions only) with `store: false`: a continued turn must have the same prompt
  (usage.input_tokens) and the same greedy answer;
- /v1/chat/completions with the equivalent chat messages;
- OpenAI's documented behaviour: the error bodies (400 `previous_response_not_found` naming
  previous_response_id, 404 `not_found` with param null), DELETE's
  {"id", "object": "response", "deleted": true}, the SDK's retrieve / delete / create.
The memory bound is checked with inputs that are large in bytes but cheap in tokens (runs of
'-': 64 characters a token; they share a prefix, so the server's prefix cache computes it once):
a kept response holds its input, so it counts at least that many bytes against the bound.
"""
import hashlib
import json
import re
import signal
import socket

import pytest

from pagoda_e2e import assert_error_body, http, metric, openai_client, poll

NAME = "smol-store"
TERSE = "You are a terse assistant. Answer in one short sentence."
PIRATE = "You are a pirate. Answer like a pirate, briefly."
FRANCE = "What is the capital of France?"
ANN = "My name is Ann and I live in Oslo."
R_CITY = {"type": "function", "name": "get_weather",
          "description": "Get the current weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}
NAMED = {"type": "function", "name": "get_weather"}

KEYS = {"acme": "sk-store-acme", "beta": "sk-store-beta"}
ADMIN = "sk-store-admin"


def chat_tool(t):
    return {"type": "function", "function": {"name": t["name"], "description": t["description"],
                                             "parameters": t["parameters"]}}


# ---- servers ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def srv(start_server):
    return start_server("--served-model-name", NAME)


@pytest.fixture(scope="module")
def client(srv):
    return openai_client(srv)


@pytest.fixture(scope="module")
def srv0(start_server):
    return start_server("--served-model-name", NAME, "--responses-store-mb", "0")


@pytest.fixture(scope="module")
def small(start_server):
    return start_server("--served-model-name", NAME, "--responses-store-mb", "1")


def write_tenants(path, keys):
    """A tenants file: each tenant (name -> its key) in the order given, and the admin key."""
    sha = lambda k: hashlib.sha256(k.encode()).hexdigest()  # noqa: E731
    path.write_text(json.dumps({
        "tenants": [{"name": n, "keys_sha256": [sha(k)]} for n, k in keys.items()],
        "admin_keys_sha256": [sha(ADMIN)]}))


@pytest.fixture(scope="module")
def tfile(tmp_path_factory):
    path = tmp_path_factory.mktemp("tenants") / "tenants.json"
    write_tenants(path, KEYS)
    return path


@pytest.fixture(scope="module")
def tsrv(start_server, tfile):
    return start_server("--served-model-name", NAME, "--tenants", str(tfile))


# ---- helpers ---------------------------------------------------------------------------------

def auth(key):
    return {"Authorization": f"Bearer {key}"} if key else {}


def post(srv, body, key=None, path="/v1/responses"):
    st, hd, raw = http(srv.port, "POST", path, json.dumps(body).encode(),
                       {"Content-Type": "application/json", **auth(key)}, 120)
    return st, hd, raw


def get(srv, rid, key=None):
    st, hd, raw = http(srv.port, "GET", f"/v1/responses/{rid}", None, auth(key), 60)
    return st, json.loads(raw) if raw else None


def delete(srv, rid, key=None):
    st, hd, raw = http(srv.port, "DELETE", f"/v1/responses/{rid}", None, auth(key), 60)
    return st, json.loads(raw) if raw else None


def check_obj(r, sent, store=None):
    """The shape of a finished response object and the storage fields it repeats."""
    from openai.types.responses import Response
    Response.model_validate(r)
    assert re.fullmatch(r"resp_[0-9A-Za-z]+", r["id"]), r["id"]
    assert r["object"] == "response" and r["model"] == NAME
    want_store = (sent.get("store") is not False) if store is None else store
    assert r["store"] is want_store, (r["store"], sent.get("store"))
    assert r["previous_response_id"] == sent.get("previous_response_id"), r
    assert r["instructions"] == sent.get("instructions"), r["instructions"]
    assert r["status"] in ("completed", "incomplete"), r
    assert r["error"] is None and r["output"], r
    u = r["usage"]
    assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"], u


def respond(srv, body, key=None, store=None):
    """A whole answer (the raw object)."""
    st, _, raw = post(srv, {"model": NAME, "temperature": 0, **body}, key)
    assert st == 200, raw
    r = json.loads(raw)
    check_obj(r, body, store)
    return r


def stream_events(raw):
    """A streamed response's events (`event: <type>\\ndata: <json>`, numbered 0, 1, ...)."""
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter
    adapter = TypeAdapter(ResponseStreamEvent)
    assert raw.endswith(b"\n\n") and b"[DONE]" not in raw, raw[-200:]
    events = []
    for block in raw[:-2].split(b"\n\n"):
        if block == b": ping":
            continue
        name, data = block.split(b"\n")
        assert name.startswith(b"event: ") and data.startswith(b"data: "), block[:200]
        e = json.loads(data[len(b"data: "):])
        assert e["type"] == name[len(b"event: "):].decode(), e
        adapter.validate_python(e)
        events.append(e)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


def stream(srv, body, key=None, store=None):
    """A streamed answer: the `response` of its last event (checked against the first)."""
    st, hd, raw = post(srv, {"model": NAME, "temperature": 0, **body, "stream": True}, key)
    assert st == 200, raw
    assert hd["content-type"].startswith("text/event-stream"), hd
    events = stream_events(raw)
    first, last = events[0], events[-1]
    assert first["type"] == "response.created", first
    r = last["response"]
    assert last["type"] == {"completed": "response.completed",
                            "incomplete": "response.incomplete"}[r["status"]], last["type"]
    assert r["id"] == first["response"]["id"]
    for e in (first, last):  # what the stream says from its start
        assert e["response"]["store"] == r["store"]
        assert e["response"]["previous_response_id"] == body.get("previous_response_id")
    check_obj(r, body, store)
    return r


def answer(srv, body, streamed, key=None, store=None):
    return (stream if streamed else respond)(srv, body, key, store)


def full_input(turns):
    """The whole conversation as input items: for each (input, response) its input items then
    the response's output items as they came back."""
    items = []
    for inp, r in turns:
        items += [{"role": "user", "content": inp}] if isinstance(inp, str) else list(inp)
        if r is not None:
            items += r["output"]
    return items


def text_of(r):
    return "".join(c["text"] for it in r["output"] if it["type"] == "message"
                   for c in it["content"] if c["type"] == "output_text")


def calls_of(r):
    return [(it["name"], json.loads(it["arguments"])) for it in r["output"]
            if it["type"] == "function_call"]


def assert_same_answer(r, ref):
    """A continued response against the same conversation sent whole: the same prompt and the
    same greedy answer."""
    assert r["usage"]["input_tokens"] == ref["usage"]["input_tokens"], (r["usage"], ref["usage"])
    assert r["usage"]["output_tokens"] == ref["usage"]["output_tokens"], (r["usage"],
                                                                           ref["usage"])
    assert text_of(r) == text_of(ref), (text_of(r), text_of(ref))
    assert calls_of(r) == calls_of(ref)
    assert r["status"] == ref["status"] and r["incomplete_details"] == ref["incomplete_details"]
    assert [it["type"] for it in r["output"]] == [it["type"] for it in ref["output"]]


def chat(srv, messages, max_tokens, key=None, **extra):
    st, _, raw = post(srv, {"model": NAME, "messages": messages,
                            "max_completion_tokens": max_tokens, "temperature": 0, **extra},
                      key, path="/v1/chat/completions")
    assert st == 200, raw
    return json.loads(raw)


def assert_chat_equivalent(r, c):
    ch = c["choices"][0]
    assert r["usage"]["input_tokens"] == c["usage"]["prompt_tokens"], (r["usage"], c["usage"])
    assert r["usage"]["output_tokens"] == c["usage"]["completion_tokens"]
    assert text_of(r) == (ch["message"]["content"] or "")
    assert calls_of(r) == [(t["function"]["name"], json.loads(t["function"]["arguments"]))
                           for t in ch["message"].get("tool_calls") or []]
    assert (r["status"] == "incomplete") == (ch["finish_reason"] == "length"), (r, ch)


def assert_kept(srv, r, key=None):
    """GET gives back exactly the object answered (its keys in the same order)."""
    st, g = get(srv, r["id"], key)
    assert st == 200, g
    assert g == r
    assert list(g) == list(r)


def assert_not_found(srv, rid, key=None):
    """GET and DELETE: 404 not_found; previous_response_id: 400 previous_response_not_found."""
    st, body = get(srv, rid, key)
    assert st == 404, body
    assert_error_body(body, status=404, code="not_found", param=None)
    st, body = delete(srv, rid, key)
    assert st == 404, body
    assert_error_body(body, status=404, code="not_found", param=None)
    assert_prev_not_found(srv, rid, key)


def assert_prev_not_found(srv, rid, key=None):
    for streamed in (False, True):  # a refusal is JSON, never SSE
        st, hd, raw = post(srv, {"model": NAME, "input": "Hi", "max_output_tokens": 4,
                                 "previous_response_id": rid, "stream": streamed}, key)
        assert st == 400, raw
        assert hd["content-type"].startswith("application/json"), hd
        assert_error_body(raw, status=400, type_="invalid_request_error",
                          param="previous_response_id", code="previous_response_not_found")


# ---- store, GET ------------------------------------------------------------------------------

def test_kept_by_default_and_get_returns_it(srv, client):
    body = dict(input=FRANCE, instructions=TERSE, max_output_tokens=24,
                metadata={"k": "v"}, user="u-1", tools=[R_CITY], tool_choice="none")
    r = respond(srv, body)
    assert r["store"] is True and r["previous_response_id"] is None
    st, hd, raw = http(srv.port, "GET", f"/v1/responses/{r['id']}")
    assert st == 200, raw
    assert hd["content-type"].startswith("application/json"), hd
    g = json.loads(raw)
    assert g == r and list(g) == list(r)
    # explicit store: true, the SDK: retrieve gives the created object
    made = client.responses.create(model=NAME, input=FRANCE, max_output_tokens=8, temperature=0,
                                   store=True)
    assert made.store is True
    got = client.responses.retrieve(made.id)
    assert got.model_dump(mode="json") == made.model_dump(mode="json")
    # reading it changes nothing: asked twice, the same
    assert client.responses.retrieve(made.id).model_dump() == got.model_dump()


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "stream"])
def test_store_false_is_not_kept(srv, streamed):
    r = answer(srv, dict(input=FRANCE, max_output_tokens=8, store=False), streamed)
    assert r["store"] is False
    assert_not_found(srv, r["id"])


STREAM_CASES = {  # the last event's object is what GET gives back, whatever the answer
    "completed": dict(input=FRANCE, instructions=TERSE, max_output_tokens=32),
    "incomplete": dict(input="Write a short poem about the sea.", max_output_tokens=8),
    "function-call": dict(input="What is the weather in Oslo?", tools=[R_CITY],
                          tool_choice=NAMED, max_output_tokens=32),
}


@pytest.mark.parametrize("case", list(STREAM_CASES))
def test_streamed_response_kept_as_its_last_event(srv, case):
    body = STREAM_CASES[case]
    r = stream(srv, body)
    want = {"completed": "completed", "incomplete": "incomplete",
            "function-call": "completed"}[case]
    assert r["status"] == want, r
    if case == "function-call":
        assert [it["type"] for it in r["output"]] == ["function_call"], r["output"]
    assert r["store"] is True
    assert_kept(srv, r)
    # the whole answer to the same request: the same output, another id
    w = respond(srv, body)
    assert w["id"] != r["id"]
    assert_same_answer(w, r)


@pytest.mark.parametrize("rid", ["resp_doesnotexist0123456789", "nope", "msg_1", "resp_"])
def test_unknown_id_is_404(srv, client, rid):
    import openai
    st, body = get(srv, rid)
    assert st == 404, body
    assert_error_body(body, status=404, type_="invalid_request_error", code="not_found",
                      param=None)
    st, body = delete(srv, rid)
    assert st == 404, body
    assert_error_body(body, status=404, code="not_found", param=None)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(rid)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(rid)


def test_item_id_is_not_a_response_id(srv):
    r = respond(srv, dict(input=FRANCE, max_output_tokens=4))
    assert_not_found(srv, r["output"][0]["id"])
    assert_kept(srv, r)


# ---- DELETE ----------------------------------------------------------------------------------

def test_delete(srv, client):
    import openai
    r = respond(srv, dict(input=FRANCE, max_output_tokens=8))
    other = respond(srv, dict(input=ANN, max_output_tokens=8))
    st, hd, raw = http(srv.port, "DELETE", f"/v1/responses/{r['id']}")
    assert st == 200, raw
    assert hd["content-type"].startswith("application/json"), hd
    assert json.loads(raw) == {"id": r["id"], "object": "response", "deleted": True}
    assert_not_found(srv, r["id"])
    assert_kept(srv, other)  # only that one
    # the SDK: delete (no body to read), then retrieve is a 404
    assert client.responses.delete(other["id"]) is None
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(other["id"])
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(model=NAME, input="Hi", max_output_tokens=4,
                                previous_response_id=other["id"])
    assert ei.value.status_code == 400
    assert ei.value.code == "previous_response_not_found"
    assert ei.value.param == "previous_response_id"


def test_deleting_an_earlier_turn_keeps_the_later_one(srv):
    """A kept response holds its whole conversation: its previous response deleted, it still
    continues, as the whole conversation sent again."""
    r1 = respond(srv, dict(input=ANN, max_output_tokens=16))
    r2 = respond(srv, dict(input="Where do I live?", previous_response_id=r1["id"],
                           max_output_tokens=16))
    assert delete(srv, r1["id"])[0] == 200
    assert_not_found(srv, r1["id"])
    assert_kept(srv, r2)
    q3 = "And what is my name?"
    r3 = respond(srv, dict(input=q3, previous_response_id=r2["id"], max_output_tokens=16))
    ref = respond(srv, dict(input=full_input([(ANN, r1), ("Where do I live?", r2), (q3, None)]),
                            max_output_tokens=16, store=False))
    assert_same_answer(r3, ref)


# ---- previous_response_id --------------------------------------------------------------------

@pytest.mark.parametrize("streamed", [(False, False), (True, False), (False, True)],
                         ids=["whole-whole", "stream-whole", "whole-stream"])
def test_previous_response_equals_whole_conversation(srv, streamed):
    """The second turn by id: the first turn's input and output before the new input, not the
    first turn's instructions — the same prompt and answer as the conversation sent whole, and
    as chat's for the same messages."""
    s1, s2 = streamed
    r1 = answer(srv, dict(input=ANN, instructions=PIRATE, max_output_tokens=24), s1)
    q = "What is my name?"
    r2 = answer(srv, dict(input=q, previous_response_id=r1["id"], max_output_tokens=24), s2)
    assert r2["previous_response_id"] == r1["id"] and r2["instructions"] is None
    ref = respond(srv, dict(input=full_input([(ANN, r1), (q, None)]), max_output_tokens=24,
                            store=False))
    assert_same_answer(r2, ref)
    c = chat(srv, [{"role": "user", "content": ANN},
                   {"role": "assistant", "content": text_of(r1)},
                   {"role": "user", "content": q}], 24)
    assert_chat_equivalent(r2, c)
    # the first turn's instructions, had they been carried, make another prompt
    with_pirate = respond(srv, dict(input=full_input([(ANN, r1), (q, None)]),
                                    instructions=PIRATE, max_output_tokens=24, store=False))
    assert with_pirate["usage"]["input_tokens"] != r2["usage"]["input_tokens"]
    # the continued response is kept too, as answered, naming its previous one
    assert_kept(srv, r2)
    assert_kept(srv, r1)


def test_instructions_of_this_turn_come_first(srv, client):
    """This turn's instructions are the system message before the kept conversation (through
    the SDK)."""
    r1 = client.responses.create(model=NAME, input=ANN, instructions=PIRATE,
                                 max_output_tokens=16, temperature=0)
    q = "Where do I live?"
    r2 = client.responses.create(model=NAME, input=q, instructions=TERSE,
                                 previous_response_id=r1.id, max_output_tokens=24,
                                 temperature=0)
    assert r2.previous_response_id == r1.id and r2.instructions == TERSE and r2.store is True
    d1 = r1.model_dump(mode="json")
    ref = respond(srv, dict(input=full_input([(ANN, d1), (q, None)]), instructions=TERSE,
                            max_output_tokens=24, store=False))
    assert_same_answer(r2.model_dump(mode="json"), ref)
    c = chat(srv, [{"role": "system", "content": TERSE}, {"role": "user", "content": ANN},
                   {"role": "assistant", "content": r1.output_text},
                   {"role": "user", "content": q}], 24)
    assert_chat_equivalent(r2.model_dump(mode="json"), c)
    assert client.responses.retrieve(r2.id).model_dump(mode="json") == \
        r2.model_dump(mode="json")


def test_chain_of_turns(srv):
    """Four turns, each continuing the last by id, streamed and whole in turn, instructions
    changing, one answer cut by max_output_tokens (its partial text carried on), list and
    string inputs, the last one not kept: each turn equals the conversation so far sent whole;
    the last equals chat's."""
    turns = [
        (False, "My favourite colour is green.", TERSE, 16),
        (True, [{"role": "user", "content": [{"type": "input_text",
                                              "text": "Write a short poem about it."}]}],
         None, 6),  # cut
        (False, [{"type": "message", "role": "user", "content": "Now in one word?"}],
         PIRATE, 12),
        (True, "What is my favourite colour?", TERSE, 16),
    ]
    done, prev = [], None
    for i, (streamed, inp, instr, n) in enumerate(turns):
        body = dict(input=inp, max_output_tokens=n)
        if instr:
            body["instructions"] = instr
        if prev:
            body["previous_response_id"] = prev["id"]
        if i == len(turns) - 1:
            body["store"] = False
        r = answer(srv, body, streamed)
        ref_body = dict(input=full_input(done + [(inp, None)]), max_output_tokens=n,
                        store=False)
        if instr:
            ref_body["instructions"] = instr
        ref = respond(srv, ref_body)
        assert_same_answer(r, ref)
        if i == 1:
            assert r["status"] == "incomplete", r  # the case covers what it claims to
        done.append((inp, r))
        prev = r
    for _, r in done[:-1]:
        assert_kept(srv, r)
    assert_not_found(srv, done[-1][1]["id"])  # store: false — its previous ones stay
    assert_kept(srv, done[-2][1])
    msgs = [{"role": "system", "content": TERSE}]
    for inp, r in done:
        text = inp if isinstance(inp, str) else (
            inp[0]["content"] if isinstance(inp[0]["content"], str)
            else inp[0]["content"][0]["text"])
        msgs.append({"role": "user", "content": text})
        if r is not done[-1][1]:
            msgs.append({"role": "assistant", "content": text_of(r)})
    assert_chat_equivalent(done[-1][1], chat(srv, msgs, 16))


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "stream"])
def test_function_call_then_its_output(srv, streamed):
    """The previous answer is a function call; this turn gives its output only: the same as the
    question, the call and its output sent whole, and as chat's tool messages."""
    q = "What is the weather in Oslo?"
    r1 = answer(srv, dict(input=q, tools=[R_CITY], tool_choice=NAMED, max_output_tokens=48),
                streamed)
    assert r1["status"] == "completed" and [it["type"] for it in r1["output"]] == \
        ["function_call"], r1["output"]
    fc = r1["output"][0]
    out = [{"type": "function_call_output", "call_id": fc["call_id"],
            "output": "12 degrees and raining"}]
    r2 = answer(srv, dict(input=out, previous_response_id=r1["id"], tools=[R_CITY],
                          max_output_tokens=24), not streamed)
    ref = respond(srv, dict(input=full_input([(q, r1), (out, None)]), tools=[R_CITY],
                            max_output_tokens=24, store=False))
    assert_same_answer(r2, ref)
    c = chat(srv, [{"role": "user", "content": q},
                   {"role": "assistant", "content": None, "tool_calls": [{
                       "id": fc["call_id"], "type": "function",
                       "function": {"name": fc["name"], "arguments": fc["arguments"]}}]},
                   {"role": "tool", "tool_call_id": fc["call_id"],
                    "content": "12 degrees and raining"}],
             24, tools=[chat_tool(R_CITY)])
    assert_chat_equivalent(r2, c)
    assert_kept(srv, r1)
    assert_kept(srv, r2)


def test_previous_input_keeps_its_own_messages(srv):
    """The previous turn's input items all come back — a developer message among them — but its
    instructions do not."""
    items = [{"role": "developer", "content": TERSE}, {"role": "user", "content": ANN}]
    r1 = respond(srv, dict(input=items, instructions=PIRATE, max_output_tokens=16))
    q = "Where do I live?"
    r2 = respond(srv, dict(input=q, previous_response_id=r1["id"], max_output_tokens=16))
    ref = respond(srv, dict(input=full_input([(items, r1), (q, None)]), max_output_tokens=16,
                            store=False))
    assert_same_answer(r2, ref)


def test_empty_previous_answer(srv):
    """A previous answer cut at its start (one empty message) is carried as an empty assistant
    turn, as its output items sent back are."""
    r1 = respond(srv, dict(input=FRANCE, max_output_tokens=8, stop=["The"]))
    assert text_of(r1) == "" and [it["type"] for it in r1["output"]] == ["message"], r1
    q = "Please answer."
    r2 = respond(srv, dict(input=q, previous_response_id=r1["id"], max_output_tokens=12))
    ref = respond(srv, dict(input=full_input([(FRANCE, r1), (q, None)]), max_output_tokens=12,
                            store=False))
    assert_same_answer(r2, ref)
    c = chat(srv, [{"role": "user", "content": FRANCE}, {"role": "assistant", "content": ""},
                   {"role": "user", "content": q}], 12)
    assert_chat_equivalent(r2, c)


def test_two_continuations_of_one_response(srv):
    """One kept response continued twice at once: both as the conversation sent whole; the
    first is kept unchanged."""
    import concurrent.futures
    r1 = respond(srv, dict(input=ANN, max_output_tokens=12))
    qs = ["What is my name?", "Where do I live?"]
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        got = list(ex.map(lambda q: respond(srv, dict(input=q, previous_response_id=r1["id"],
                                                      max_output_tokens=12)), qs))
    for q, r in zip(qs, got):
        ref = respond(srv, dict(input=full_input([(ANN, r1), (q, None)]), max_output_tokens=12,
                                store=False))
        assert_same_answer(r, ref)
        assert_kept(srv, r)
    assert_kept(srv, r1)


def test_field_types(srv):
    """null counts as absent (kept, nothing continued); other types are 400s naming the
    field."""
    r = respond(srv, dict(input=FRANCE, max_output_tokens=4, store=None,
                          previous_response_id=None))
    assert r["store"] is True and r["previous_response_id"] is None
    assert_kept(srv, r)
    for field, value in (("previous_response_id", 5), ("previous_response_id", [r["id"]]),
                         ("store", "yes"), ("store", 1)):
        st, _, raw = post(srv, {"model": NAME, "input": "Hi", "max_output_tokens": 4,
                                field: value})
        assert st == 400, (field, value, raw)
        assert_error_body(raw, status=400, param=field)


def test_previous_response_not_found(srv, client):
    import openai
    for rid in ("resp_doesnotexist0123456789", "not-an-id"):
        assert_prev_not_found(srv, rid)
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(model=NAME, input="Hi", max_output_tokens=4,
                                previous_response_id="resp_nothere0000")
    assert ei.value.code == "previous_response_not_found"
    assert ei.value.param == "previous_response_id"
    # a refused request keeps nothing, and the server answers on
    r = client.responses.create(model=NAME, input=FRANCE, max_output_tokens=4, temperature=0)
    assert client.responses.retrieve(r.id).id == r.id


def test_anonymous_callers_share_one_store(srv):
    """Without tenants every caller is the same owner, whatever key it sends."""
    r = respond(srv, dict(input=FRANCE, max_output_tokens=8), key="sk-one")
    assert_kept(srv, r, key="sk-two")
    assert_kept(srv, r)
    r2 = respond(srv, dict(input="Why?", previous_response_id=r["id"], max_output_tokens=8),
                 key="sk-three")
    assert r2["previous_response_id"] == r["id"]


@pytest.mark.parametrize("value", ["conv_123", {"id": "conv_123"}])
def test_conversation_still_refused(srv, value):
    for streamed in (False, True):
        st, hd, raw = post(srv, {"model": NAME, "input": "Hi", "max_output_tokens": 4,
                                 "conversation": value, "stream": streamed})
        assert st == 400, raw
        assert hd["content-type"].startswith("application/json"), hd
        assert_error_body(raw, status=400, param="conversation")


def test_aborted_stream_is_not_kept(srv):
    """A client that leaves a stream mid-way: its response (named by response.created) is not
    kept."""
    aborted0 = metric(srv.metrics(), "pagoda_requests_aborted_total")
    body = json.dumps({"model": NAME, "input": "Tell me a long story.", "stream": True,
                       "max_output_tokens": 2000, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    try:
        s.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body))
        got = b""
        while got.count(b"event: response.output_text.delta") < 3:
            d = s.recv(65536)
            assert d, got[-500:]
            got += d
    finally:
        s.close()
    m = re.search(rb'"type":\s*"response.created".*?"id":\s*"(resp_[0-9A-Za-z]+)"', got)
    assert m, got[:1000]
    rid = m.group(1).decode()
    poll(lambda: metric(srv.metrics(), "pagoda_requests_aborted_total") == aborted0 + 1,
         timeout=30, msg="the left stream was not counted as an abort")
    poll(lambda: metric(srv.metrics(), "pagoda_num_requests_running") == 0, timeout=30)
    assert_not_found(srv, rid)


# ---- --responses-store-mb 0 ------------------------------------------------------------------

def test_store_0_keeps_nothing(srv0, srv):
    """Every answer says "store": false, even when asked to store; nothing to GET or DELETE;
    previous_response_id is a 400 saying responses are not kept."""
    rs = [respond(srv0, dict(input=FRANCE, max_output_tokens=4), store=False),
          respond(srv0, dict(input=FRANCE, max_output_tokens=4, store=True), store=False),
          stream(srv0, dict(input=FRANCE, max_output_tokens=4, store=True), store=False)]
    for r in rs:
        assert r["store"] is False
        for st, body in (get(srv0, r["id"]), delete(srv0, r["id"])):
            assert st == 404, body
            assert_error_body(body, status=404, code="not_found", param=None)
    elsewhere = respond(srv, dict(input=FRANCE, max_output_tokens=4))  # kept by another server
    for rid in (rs[0]["id"], elsewhere["id"], "resp_123"):
        for streamed in (False, True):
            st, hd, raw = post(srv0, {"model": NAME, "input": "Hi", "max_output_tokens": 4,
                                      "previous_response_id": rid, "stream": streamed})
            assert st == 400, raw
            assert hd["content-type"].startswith("application/json"), hd
            e = assert_error_body(raw, status=400, param="previous_response_id")
            assert re.search(r"stor|kept|keep", e["message"], re.I), e
    assert_error_body(post(srv0, {"model": NAME, "input": "Hi", "conversation": "c"})[2],
                      status=400, param="conversation")
    assert http(srv0.port, "GET", "/health")[0] == 200


# ---- the memory bound ------------------------------------------------------------------------

PAD = "-" * 64000  # 64,000 bytes, 1,000 tokens; 17 of them are more than 1 MiB
MIB = 1 << 20


def big(srv, i, tag, store=True, **extra):
    r = respond(srv, dict(input=f"{PAD} {tag}{i}", max_output_tokens=1, store=store, **extra))
    assert r["usage"]["input_tokens"] > 1000
    return r


def kept(srv, rid):
    st, body = get(srv, rid)
    assert st in (200, 404), body
    return st == 200


def test_least_recently_used_dropped_first(small):
    """--responses-store-mb 1 filled with responses of 64,000-byte inputs: the oldest go, the
    newest stay, and those kept are the most recent ones; a response used since (read by GET, or
    continued by previous_response_id) outlives those made after it but not used."""
    n = 20
    rs = [big(small, i, "a") for i in range(n)]
    # Probe from the oldest to the newest: a miss changes nothing, and hits in creation order
    # leave the order of use as it was.
    alive = [kept(small, r["id"]) for r in rs]
    first = alive.index(True)
    assert alive == [False] * first + [True] * (n - first), alive  # a suffix: the newest
    n_kept = n - first
    assert n_kept * len(PAD) <= MIB, alive  # at most what 1 MiB holds
    assert n_kept >= 8, alive  # the bytes counted are not far more than the responses hold
    assert not alive[0] and alive[-1]
    assert_kept(small, rs[-1])
    # Use the two oldest kept ones: GET, then continue one by id.
    a, b = rs[first], rs[first + 1]
    assert_kept(small, a)
    t = respond(small, dict(input="Hi", previous_response_id=b["id"], max_output_tokens=1))
    # Now (most recent first): t, b, a, the rest of rs. n_kept - 4 new ones fill the store
    # short of one response.
    more = [big(small, i, "b") for i in range(n_kept - 4)]
    for r in (more[-1], t, a, b):
        assert kept(small, r["id"]), (r["id"], [kept(small, x["id"]) for x in rs])
    assert not kept(small, rs[first + 2]["id"])  # made after a and b, not used since
    assert not kept(small, rs[0]["id"])
    assert_prev_not_found(small, rs[first + 2]["id"])
    assert_kept(small, more[-1])
    # Answers not kept take no room: all that is kept now is kept after more large ones.
    now = [r for r in rs + more + [t] if kept(small, r["id"])]
    for i in range(4):
        r = big(small, i, "c", store=False)
        assert r["store"] is False
    for r in now:
        assert kept(small, r["id"]), r["id"]


def test_store_gauges(small, srv0):
    """responses_stored counts the answers a GET finds, responses_store_bytes what they take of
    the 1 MiB (each at least its 64,000-byte input, kept in its conversation); both move with a
    new answer and a DELETE; a server without a store shows 0."""
    def gauges(s):
        m = s.metrics()
        return metric(m, "pagoda_responses_stored"), metric(m, "pagoda_responses_store_bytes")

    rs = [big(small, i, "g") for i in range(3)]
    n0, b0 = gauges(small)
    assert 3 <= n0 and n0 * len(PAD) <= b0 <= MIB, (n0, b0)
    assert all(kept(small, r["id"]) for r in rs)
    st, body = delete(small, rs[-1]["id"])
    assert st == 200, body
    n1, b1 = gauges(small)
    assert n1 == n0 - 1 and b0 - b1 >= len(PAD), (n0, b0, n1, b1)
    r = respond(small, dict(input="Hi", max_output_tokens=1))
    n2, b2 = gauges(small)
    assert n2 == n1 + 1 and 0 < b2 - b1 < len(PAD), (n1, b1, n2, b2)
    assert kept(small, r["id"])
    respond(srv0, dict(input="Hi", max_output_tokens=1), store=False)
    assert gauges(srv0) == (0, 0)


# ---- tenants ---------------------------------------------------------------------------------

def test_tenants_see_only_their_own(tsrv):
    import openai
    a, b = KEYS["acme"], KEYS["beta"]
    r = respond(tsrv, dict(input=ANN, max_output_tokens=16), key=a)
    assert r["store"] is True
    assert_kept(tsrv, r, key=a)
    # beta: GET / DELETE 404, previous_response_id 400 not found
    assert_not_found(tsrv, r["id"], key=b)
    cb = openai_client(tsrv, api_key=b)
    with pytest.raises(openai.NotFoundError):
        cb.responses.retrieve(r["id"])
    with pytest.raises(openai.BadRequestError) as ei:
        cb.responses.create(model=NAME, input="Hi", max_output_tokens=4,
                            previous_response_id=r["id"])
    assert ei.value.code == "previous_response_not_found"
    # ... and beta's tries took nothing from acme: it still gets and continues it
    assert_kept(tsrv, r, key=a)
    q = "What is my name?"
    r2 = respond(tsrv, dict(input=q, previous_response_id=r["id"], max_output_tokens=16), key=a)
    ref = respond(tsrv, dict(input=full_input([(ANN, r), (q, None)]), max_output_tokens=16,
                             store=False), key=a)
    assert_same_answer(r2, ref)
    # beta's own, invisible to acme; the admin key is no tenant either
    rb = respond(tsrv, dict(input=FRANCE, max_output_tokens=8), key=b)
    assert_not_found(tsrv, rb["id"], key=a)
    assert_kept(tsrv, rb, key=b)
    for k in (None, ADMIN, "sk-nobody"):
        st, _ = get(tsrv, r["id"], key=k)
        assert st in (401, 403, 404), st
    # acme deletes its own
    ca = openai_client(tsrv, api_key=a)
    assert ca.responses.delete(r["id"]) is None
    assert_not_found(tsrv, r["id"], key=a)
    assert_kept(tsrv, r2, key=a)
    assert_kept(tsrv, rb, key=b)


def test_tenants_keep_their_own_across_a_reload(tsrv, tfile):
    """The owner is the tenant, not its place in the file nor its key: after a SIGHUP reload
    that lists the tenants the other way round and gives acme a new key, acme (by its new key)
    still has its response and beta still does not."""
    r = respond(tsrv, dict(input=FRANCE, max_output_tokens=8), key=KEYS["acme"])
    rb = respond(tsrv, dict(input=ANN, max_output_tokens=8), key=KEYS["beta"])
    n_reloads = tsrv.log().count("tenants reloaded")
    write_tenants(tfile, {"beta": KEYS["beta"], "acme": "sk-store-acme-2"})
    tsrv.proc.send_signal(signal.SIGHUP)
    poll(lambda: tsrv.log().count("tenants reloaded") > n_reloads, timeout=10,
         msg="no reload")
    assert get(tsrv, r["id"], key=KEYS["acme"])[0] == 401  # the old key is gone
    assert_kept(tsrv, r, key="sk-store-acme-2")
    assert_not_found(tsrv, r["id"], key=KEYS["beta"])
    assert_kept(tsrv, rb, key=KEYS["beta"])
    assert_not_found(tsrv, rb["id"], key="sk-store-acme-2")
    write_tenants(tfile, KEYS)
    tsrv.proc.send_signal(signal.SIGHUP)
    poll(lambda: tsrv.log().count("tenants reloaded") > n_reloads + 1, timeout=10,
         msg="no reload")

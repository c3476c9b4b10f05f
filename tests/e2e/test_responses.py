"""POST /v1/responses (OpenAI's Responses API, api/responses.h) with the default model
(SmolLM2-135M-Instruct, greedy so that every answer is reproducible), checked through the openai
SDK (typed `Response` objects, the `responses.stream()` helper that checks the events' order
itself, `responses.parse()` with a pydantic model) and raw HTTP (the error bodies, the SSE
framing, the response object's keys and their order).

The references are independent of the endpoint under test:
- /v1/chat/completions for the equivalent chat request (messages [system = instructions, ...],
  max_completion_tokens = max_output_tokens, chat-shaped tools, response_format, logprobs):
  the same greedy text, the same prompt and completion token counts, finish "length" exactly
  when the response is "incomplete" (reason "max_output_tokens"), the same forced tool calls, the
  same logprobs (within 1e-4). A history given as Responses items (function_call,
  function_call_output, assistant output_text parts) must render the prompt of the equivalent
  chat messages: the same input token count and the same answer.
- the model's raw text for the chat prompt (/tokenize with the chat messages and tools, then
  /v1/completions on those token ids) read by Python: the tool calls an "auto" answer carries.
- the tools' parameters and the text.format schemas, checked with the jsonschema package; the
  SDK's pydantic models (Response, the stream event union) for the object's and events' shapes.
- OpenAI's documented behaviour: ids "resp_" / "msg_" / "fc_" / "call_", store as asked, the
  stream's events "event: <type>\\ndata: <json>" numbered 0, 1, ... from response.created and
  response.in_progress to response.completed / response.incomplete, without "data: [DONE]";
  deltas that add up to the *.done events and to the final object.
- refused fields are 400s with OpenAI's error body naming the field by its Responses name (and
  a message that quotes no chat-only name), JSON even when stream is true, counted under the
  route /v1/responses in /metrics; the server answers afterwards. With --api-key the route needs
  the key. A client that leaves a stream mid-way is counted as one abort (its sequence and KV
  blocks released) and leaves the server healthy.
- logprobs: one entry per output token, chat's entries (so an answer ended by the model's
  end-of-turn token has that token's entry last, counted in output_tokens, as chat and vLLM do).
"""
import json
import re
import socket
import time

import jsonschema
import pytest

from pagoda_e2e import assert_error_body, http, metric, openai_client, poll

NAME = "smol-responses"

# Tools in the Responses (flattened) shape, and the chat shape of the same tools.
R_CITY = {"type": "function", "name": "get_weather",
          "description": "Get the current weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}
R_WEATHER = {"type": "function", "name": "get_weather",
             "description": "Get the current weather in a city",
             "parameters": {"type": "object", "properties": {
                 "city": {"type": "string", "maxLength": 40},
                 "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                 "required": ["city", "unit"]}}
R_ADD = {"type": "function", "name": "add", "description": "Add integers",
         "parameters": {"type": "object", "properties": {
             "xs": {"type": "array", "items": {"type": "integer"}, "maxItems": 4}},
             "required": ["xs"]}}

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0,
                                                   "maximum": 150}},
          "required": ["name", "age"], "additionalProperties": False}

FRANCE = "What is the capital of France?"
TERSE = "You are a terse assistant. Answer in one short sentence."

# The keys of a response object, in the order api/responses.h gives.
KEYS_HEAD = ["id", "object", "created_at", "status", "background", "error", "incomplete_details",
             "instructions", "max_output_tokens", "max_tool_calls", "model", "output",
             "parallel_tool_calls", "previous_response_id", "reasoning"]
KEYS_TAIL = ["store", "temperature", "text", "tool_choice", "tools", "top_logprobs", "top_p",
             "truncation", "usage", "user", "metadata", "safety_identifier", "prompt_cache_key"]


def chat_tool(t):
    return {"type": "function", "function": {"name": t["name"], "description": t["description"],
                                             "parameters": t["parameters"]}}


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server("--served-model-name", NAME)


@pytest.fixture(scope="module")
def client(srv):
    return openai_client(srv)


# ---- helpers ---------------------------------------------------------------------------------

def post(srv, path, body, timeout=120):
    st, hd, data = http(srv.port, "POST", path, json.dumps(body).encode(),
                        {"Content-Type": "application/json"}, timeout)
    return st, hd, data


def post_json(srv, path, body):
    st, _, data = post(srv, path, body)
    return st, json.loads(data)


def respond(srv, body):
    """A whole (not streamed) response: the object, checked for its shape."""
    st, r = post_json(srv, "/v1/responses", {"model": NAME, **body})
    assert st == 200, r
    check_response(r, body)
    return r


def chat(srv, messages, max_tokens, **extra):
    """The greedy chat answer for the same conversation (the reference)."""
    st, r = post_json(srv, "/v1/chat/completions", {
        "model": NAME, "messages": messages, "max_completion_tokens": max_tokens,
        "temperature": 0, **extra})
    assert st == 200, r
    return r


def raw_text(srv, messages, tools, max_tokens):
    """The model's greedy text for the chat prompt pagoda renders (/tokenize, then the token ids
    as a plain completion: nothing parsed) and the prompt's token count."""
    st, tok = post_json(srv, "/tokenize", {"model": NAME, "messages": messages, "tools": tools})
    assert st == 200, tok
    st, r = post_json(srv, "/v1/completions", {"model": NAME, "prompt": tok["tokens"],
                                               "max_tokens": max_tokens, "temperature": 0})
    assert st == 200, r
    return r["choices"][0]["text"], tok["count"]


def hermes_calls(text):
    """Python's own reading of Hermes <tool_call> blocks: [(name, arguments dict)]."""
    out = []
    for body in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.S):
        o = json.loads(body)
        out.append((o["name"], o.get("arguments", {})))
    return out


def output_text(r):
    """What the SDK's `output_text` is, from a raw object: the messages' output_text parts."""
    return "".join(c["text"] for it in r["output"] if it["type"] == "message"
                   for c in it["content"] if c["type"] == "output_text")


def calls_of(r):
    return [(it["name"], json.loads(it["arguments"])) for it in r["output"]
            if it["type"] == "function_call"]


def check_usage(u):
    assert set(u) >= {"input_tokens", "input_tokens_details", "output_tokens",
                      "output_tokens_details", "total_tokens"}, u
    assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"], u
    assert isinstance(u["input_tokens_details"]["cached_tokens"], int), u
    assert 0 <= u["input_tokens_details"]["cached_tokens"] <= u["input_tokens"], u
    assert u["output_tokens_details"]["reasoning_tokens"] == 0, u


def check_item(it, final=True):
    if it["type"] == "message":
        assert re.fullmatch(r"msg_[0-9A-Za-z]+", it["id"]), it
        assert it["role"] == "assistant", it
        if final:
            assert it["status"] in ("completed", "incomplete"), it
            assert it["content"], it
        for c in it["content"]:
            assert c["type"] == "output_text", c
            assert isinstance(c["text"], str) and c["annotations"] == [], c
            assert isinstance(c["logprobs"], list), c
    else:
        assert it["type"] == "function_call", it
        assert re.fullmatch(r"fc_[0-9A-Za-z]+", it["id"]), it
        assert re.fullmatch(r"call_[0-9A-Za-z]+", it["call_id"]), it
        assert isinstance(it["name"], str) and it["name"], it
        assert isinstance(it["arguments"], str), it
        if final:  # completed with whole arguments; incomplete when cut inside them
            try:
                whole = isinstance(json.loads(it["arguments"]), dict)
            except json.JSONDecodeError:
                whole = False
            assert it["status"] == ("completed" if whole else "incomplete"), it


def check_response(r, sent, streamed_start=False):
    """The response object's shape (api/responses.h, OpenAI's Response) and the fields it repeats
    from the request `sent`."""
    from openai.types.responses import Response
    Response.model_validate(r)  # the SDK's own model of the object
    want_keys = KEYS_HEAD + (["service_tier"] if "service_tier" in sent else []) + KEYS_TAIL
    assert list(r) == want_keys, list(r)
    assert re.fullmatch(r"resp_[0-9A-Za-z]+", r["id"]), r["id"]
    assert r["object"] == "response"
    assert isinstance(r["created_at"], int) and abs(r["created_at"] - time.time()) < 120, r
    assert r["model"] == NAME
    # the server keeps responses (the default --responses-store-mb) unless asked not to
    assert r["background"] is False and r["store"] is (sent.get("store") is not False)
    assert r["previous_response_id"] is None
    assert r["reasoning"] == {"effort": None, "summary": None}, r["reasoning"]
    assert r["truncation"] == "disabled"
    # echoed as sent, or OpenAI's defaults
    for k, default in [("instructions", None), ("max_output_tokens", None), ("tools", []),
                       ("tool_choice", "auto"), ("parallel_tool_calls", True), ("user", None),
                       ("max_tool_calls", None), ("safety_identifier", None),
                       ("prompt_cache_key", None)]:
        want = sent.get(k)
        assert r[k] == (default if want is None else want), (k, r[k])
    for k in ("temperature", "top_p", "top_logprobs", "service_tier"):
        if sent.get(k) is not None:
            assert r[k] == sent[k], (k, r[k])
    if sent.get("metadata") is not None:
        assert r["metadata"] == sent["metadata"]
    else:
        assert r["metadata"] in ({}, None), r["metadata"]
    assert r["text"]["format"] == ((sent.get("text") or {}).get("format")
                                   or {"type": "text"}), r["text"]
    if streamed_start:
        assert r["status"] == "in_progress" and r["output"] == [] and r["usage"] is None, r
        return
    if r["status"] == "incomplete":
        assert r["incomplete_details"] == {"reason": "max_output_tokens"}, r
    else:
        assert r["status"] == "completed" and r["incomplete_details"] is None, r
    assert r["error"] is None
    check_usage(r["usage"])
    assert r["output"], r
    for it in r["output"]:
        check_item(it)
    if r["status"] == "completed":
        assert all(it["status"] == "completed" for it in r["output"]), r["output"]


def response_events(raw):
    """The SSE body of a streamed response: every event `event: <type>\\ndata: <json>\\n\\n`
    (`: ping` comments allowed), "type" equal to the event name, sequence numbers 0, 1, ...,
    no [DONE]. Returns the data objects."""
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter
    adapter = TypeAdapter(ResponseStreamEvent)
    assert raw.endswith(b"\n\n"), raw[-200:]
    assert b"[DONE]" not in raw
    events = []
    for block in raw[:-2].split(b"\n\n"):
        if block == b": ping":
            continue
        lines = block.split(b"\n")
        assert len(lines) == 2, block[:300]
        assert lines[0].startswith(b"event: ") and lines[1].startswith(b"data: "), block[:300]
        name = lines[0][len(b"event: "):].decode()
        data = json.loads(lines[1][len(b"data: "):])
        assert data["type"] == name, (name, data)
        adapter.validate_python(data)  # the SDK's model of the event
        events.append(data)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


def check_stream(events, sent):
    """The order and contents of a stream's events (api/responses.h, OpenAI's streaming
    reference); returns the final response object."""
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"], types
    first = events[0]["response"]
    for e in events[:2]:
        check_response(e["response"], sent, streamed_start=True)
        assert e["response"]["id"] == first["id"]
    i, items = 2, []
    while events[i]["type"] == "response.output_item.added":
        e = events[i]
        idx, item = len(items), e["item"]
        assert e["output_index"] == idx, e
        check_item(item, final=False)
        i += 1
        if item["type"] == "message":
            assert item["status"] == "in_progress" and item["content"] == [], item
            e = events[i]
            assert e["type"] == "response.content_part.added", types
            assert (e["item_id"], e["output_index"], e["content_index"]) == (item["id"], idx, 0)
            assert e["part"]["type"] == "output_text" and e["part"]["text"] == "", e
            assert e["part"]["annotations"] == [], e
            i += 1
            text, lps = "", []
            while events[i]["type"] == "response.output_text.delta":
                e = events[i]
                assert (e["item_id"], e["output_index"], e["content_index"]) == \
                    (item["id"], idx, 0), e
                assert isinstance(e["delta"], str), e
                text += e["delta"]
                lps += e["logprobs"]
                i += 1
            e = events[i]
            assert e["type"] == "response.output_text.done", types
            assert (e["item_id"], e["output_index"], e["content_index"]) == (item["id"], idx, 0)
            assert e["text"] == text
            assert e["logprobs"] == lps
            i += 1
            e = events[i]
            assert e["type"] == "response.content_part.done", types
            assert (e["item_id"], e["output_index"], e["content_index"]) == (item["id"], idx, 0)
            assert e["part"]["type"] == "output_text" and e["part"]["text"] == text, e
            assert e["part"]["logprobs"] == lps, e
            part = e["part"]
            i += 1
            e = events[i]
            assert e["type"] == "response.output_item.done", types
            assert e["output_index"] == idx
            done = e["item"]
            assert done["id"] == item["id"] and done["content"] == [part], done
        else:
            assert item["arguments"] == "", item
            assert item.get("status", "in_progress") == "in_progress", item
            args = ""
            while events[i]["type"] == "response.function_call_arguments.delta":
                e = events[i]
                assert (e["item_id"], e["output_index"]) == (item["id"], idx), e
                args += e["delta"]
                i += 1
            e = events[i]
            assert e["type"] == "response.function_call_arguments.done", types
            assert (e["item_id"], e["output_index"]) == (item["id"], idx), e
            assert e["arguments"] == args and e["name"] == item["name"], (e, args)
            i += 1
            e = events[i]
            assert e["type"] == "response.output_item.done", types
            assert e["output_index"] == idx
            done = e["item"]
            assert done["arguments"] == args, done
            assert (done["id"], done["call_id"], done["name"]) == \
                (item["id"], item["call_id"], item["name"]), done
        check_item(done)
        items.append(done)
        i += 1
    assert i == len(events) - 1, types[i:]
    last = events[i]
    final = last["response"]
    check_response(final, sent)
    assert last["type"] == ("response.incomplete" if final["status"] == "incomplete"
                            else "response.completed"), (last["type"], final["status"])
    assert final["id"] == first["id"] and final["created_at"] == first["created_at"]
    assert final["output"] == items
    return final


def stream(srv, body):
    st, hd, raw = post(srv, "/v1/responses", {"model": NAME, **body, "stream": True})
    assert st == 200, raw
    assert hd["content-type"].startswith("text/event-stream"), hd
    return check_stream(response_events(raw), body)


def assert_chat_equivalent(r, c):
    """A response `r` against the chat completion `c` of the same conversation."""
    ch = c["choices"][0]
    assert r["usage"]["input_tokens"] == c["usage"]["prompt_tokens"], (r["usage"], c["usage"])
    assert r["usage"]["output_tokens"] == c["usage"]["completion_tokens"], (r["usage"],
                                                                             c["usage"])
    if ch["finish_reason"] == "length":
        assert r["status"] == "incomplete", r
        assert r["incomplete_details"] == {"reason": "max_output_tokens"}
    else:
        assert r["status"] == "completed", r
    assert output_text(r) == (ch["message"]["content"] or "")
    want_calls = [(t["function"]["name"], t["function"]["arguments"])
                  for t in ch["message"].get("tool_calls") or []]
    assert [(it["name"], it["arguments"]) for it in r["output"]
            if it["type"] == "function_call"] == want_calls


# ---- the same answers as chat ----------------------------------------------------------------

EQUIV = {
    # id: (Responses request fields, the chat messages, finish the chat answer has)
    "string": (dict(input=FRANCE, instructions=TERSE, max_output_tokens=24),
               [{"role": "system", "content": TERSE}, {"role": "user", "content": FRANCE}],
               "stop"),
    "parts-cut": (dict(input=[{"type": "message", "role": "user", "content": [
                      {"type": "input_text", "text": "Write a short poem"},
                      {"type": "input_text", "text": " about the sea."}]}],
                       max_output_tokens=12),
                  [{"role": "user", "content": [{"type": "text", "text": "Write a short poem"},
                                                {"type": "text", "text": " about the sea."}]}],
                  "length"),
    "assistant-history": (
        dict(input=[{"role": "user", "content": "My name is Ann."},
                    {"type": "message", "role": "assistant", "content": [
                        {"type": "output_text", "text": "Hello Ann! How can I help you today?"}]},
                    {"role": "user", "content": [{"type": "input_text",
                                                  "text": "What is my name?"}]}],
             instructions=TERSE, max_output_tokens=24),
        [{"role": "system", "content": TERSE},
         {"role": "user", "content": "My name is Ann."},
         {"role": "assistant", "content": [{"type": "text",
                                            "text": "Hello Ann! How can I help you today?"}]},
         {"role": "user", "content": [{"type": "text", "text": "What is my name?"}]}],
        None),
    "developer": (dict(input=[{"role": "developer", "content": TERSE},
                              {"role": "user", "content": "What colour is the sky?"}],
                       max_output_tokens=16),
                  [{"role": "system", "content": TERSE},
                   {"role": "user", "content": "What colour is the sky?"}],
                  None),
}


@pytest.mark.parametrize("case", list(EQUIV))
def test_same_answer_as_chat(srv, client, case):
    body, messages, finish = EQUIV[case]
    c = chat(srv, messages, body["max_output_tokens"])
    if finish:  # the case covers what it claims to
        assert c["choices"][0]["finish_reason"] == finish
    r = client.responses.create(model=NAME, temperature=0, **body)
    assert r.output_text == (c["choices"][0]["message"]["content"] or "")
    assert r.usage.input_tokens == c["usage"]["prompt_tokens"]
    assert r.usage.output_tokens == c["usage"]["completion_tokens"]
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    if c["choices"][0]["finish_reason"] == "length":
        assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    else:
        assert r.status == "completed" and r.incomplete_details is None
    assert [it.type for it in r.output] == ["message"]
    assert r.instructions == body.get("instructions")


def test_response_object_echoes_the_request(srv, client):
    """Every field the response repeats, as sent; the keys in the spec's order; the SDK's typed
    object agrees with the raw one."""
    from openai.types.responses import Response
    body = dict(input=FRANCE, instructions=TERSE, max_output_tokens=16, temperature=0, top_p=0.5,
                metadata={"k": "v", "n": "2"}, tools=[R_CITY], tool_choice="none",
                parallel_tool_calls=False, text={"format": {"type": "text"},
                                                 "verbosity": "medium"},
                user="u-42", max_tool_calls=3, service_tier="default", safety_identifier="sid-1",
                prompt_cache_key="pck-1", top_logprobs=0, truncation="disabled", store=True)
    r = respond(srv, body)
    assert r["text"]["verbosity"] == "medium"
    (msg,) = r["output"]
    assert msg["type"] == "message" and msg["role"] == "assistant"
    assert msg["content"][0]["type"] == "output_text"
    assert msg["content"][0]["annotations"] == [] and msg["content"][0]["logprobs"] == []
    # tool_choice "none": the model is not shown the tools, the answer is the plain one
    c = chat(srv, [{"role": "system", "content": TERSE}, {"role": "user", "content": FRANCE}], 16)
    assert_chat_equivalent(r, c)
    typed = client.responses.create(model=NAME, **body)
    assert isinstance(typed, Response)
    assert typed.id != r["id"] and typed.id.startswith("resp_")
    assert typed.output_text == output_text(r)
    assert typed.metadata == body["metadata"] and typed.user == "u-42"
    assert typed.tools[0].type == "function" and typed.tools[0].name == "get_weather"
    assert typed.store is True
    assert typed.output[0].id.startswith("msg_")


def test_defaults_and_nulls(srv):
    """Fields left out (or null, which counts as absent) echo OpenAI's defaults."""
    base = respond(srv, {"input": FRANCE, "max_output_tokens": 8, "temperature": 0})
    r = respond(srv, {"input": FRANCE, "max_output_tokens": 8, "temperature": 0,
                      "instructions": None, "tools": None, "metadata": None, "user": None,
                      "text": None, "include": None, "tool_choice": None})
    assert output_text(r) == output_text(base)
    assert r["usage"]["input_tokens"] == base["usage"]["input_tokens"]
    assert r["id"] != base["id"]
    d = respond(srv, {"input": FRANCE, "max_output_tokens": 4})
    assert (d["temperature"], d["top_p"], d["metadata"]) == (1, 1, {}), d
    assert d["text"] == {"format": {"type": "text"}, "verbosity": "medium"}, d["text"]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "stream"])
def test_empty_answer_has_one_message(srv, streamed):
    """A stop string that cuts the answer at its start: one empty message, as chat's ''
    (streamed: its added / part / done events, no delta needed)."""
    c = chat(srv, [{"role": "user", "content": FRANCE}], 8, stop=["The"])
    assert c["choices"][0]["message"]["content"] == ""
    body = {"input": FRANCE, "max_output_tokens": 8, "temperature": 0, "stop": ["The"]}
    r = stream(srv, body) if streamed else respond(srv, body)
    assert_chat_equivalent(r, c)
    assert [it["type"] for it in r["output"]] == ["message"]
    assert output_text(r) == "" and r["status"] == "completed"


# ---- streaming -------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["string", "parts-cut"])
def test_stream_events(srv, case):
    """The raw SSE events, their order, and the text they add up to: the same as the whole
    answer (greedy)."""
    body = dict(EQUIV[case][0], temperature=0)
    whole = respond(srv, body)
    final = stream(srv, body)
    assert output_text(final) == output_text(whole)
    assert final["status"] == whole["status"]
    assert final["incomplete_details"] == whole["incomplete_details"]
    assert final["usage"]["input_tokens"] == whole["usage"]["input_tokens"]
    assert final["usage"]["output_tokens"] == whole["usage"]["output_tokens"]
    assert final["id"] != whole["id"]


def test_stream_sdk_helper(srv, client):
    """The SDK's stream helper (it raises on events out of order, and needs response.created
    first and response.completed last)."""
    body = EQUIV["string"][0]
    whole = client.responses.create(model=NAME, temperature=0, **body)
    with client.responses.stream(model=NAME, temperature=0, **body) as s:
        types, text = [], ""
        for ev in s:
            types.append(ev.type)
            if ev.type == "response.output_text.delta":
                text += ev.delta
                assert ev.snapshot == text
        final = s.get_final_response()
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert "response.output_text.done" in types
    assert final.status == "completed"
    assert final.output_text == text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens


# ---- tool calls ------------------------------------------------------------------------------

NAMED = {"type": "function", "name": "get_weather"}


def test_stream_sdk_helper_function_call(client):
    """The SDK's stream helper on a forced call: the arguments' deltas build the item's
    arguments (the helper asserts the item is a function_call); they come as the model writes
    them, not whole at the end."""
    with client.responses.stream(model=NAME, input="Is it raining in Lisbon?",
                                 tools=[R_WEATHER], tool_choice=NAMED, max_output_tokens=48,
                                 temperature=0) as s:
        types, args = [], ""
        for ev in s:
            types.append(ev.type)
            if ev.type == "response.function_call_arguments.delta":
                args += ev.delta
                assert ev.snapshot == args
        final = s.get_final_response()
    assert "response.function_call_arguments.done" in types
    assert types.count("response.function_call_arguments.delta") >= 3, types
    assert [it.type for it in final.output] == ["function_call"]
    assert final.output[0].arguments == args
    jsonschema.validate(json.loads(args), R_WEATHER["parameters"])


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "stream"])
def test_named_tool_choice(srv, streamed):
    """A named function: one function_call item whose arguments follow its parameters, the same
    call chat makes for the same request."""
    q = "Is it raining in Lisbon?"
    body = dict(input=q, tools=[R_ADD, R_WEATHER], tool_choice=NAMED, max_output_tokens=48,
                temperature=0)
    r = stream(srv, body) if streamed else respond(srv, body)
    assert r["tool_choice"] == NAMED and r["tools"] == [R_ADD, R_WEATHER]
    assert [it["type"] for it in r["output"]] == ["function_call"], r["output"]
    fc = r["output"][0]
    assert fc["name"] == "get_weather" and fc["status"] == "completed"
    jsonschema.validate(json.loads(fc["arguments"]), R_WEATHER["parameters"])
    assert r["status"] == "completed"
    c = chat(srv, [{"role": "user", "content": q}], 48,
             tools=[chat_tool(R_ADD), chat_tool(R_WEATHER)],
             tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert c["choices"][0]["finish_reason"] == "tool_calls"
    assert_chat_equivalent(r, c)


def test_required_tool_choice(srv, client):
    q = "Weather in Berlin, please."
    r = client.responses.create(model=NAME, input=q, tools=[R_WEATHER], tool_choice="required",
                                parallel_tool_calls=False, max_output_tokens=48, temperature=0)
    assert r.status == "completed"
    assert [it.type for it in r.output] == ["function_call"]
    fc = r.output[0]
    assert fc.name == "get_weather" and fc.call_id.startswith("call_") and fc.id.startswith("fc_")
    jsonschema.validate(json.loads(fc.arguments), R_WEATHER["parameters"])
    assert r.output_text == ""
    c = chat(srv, [{"role": "user", "content": q}], 48, tools=[chat_tool(R_WEATHER)],
             tool_choice="required", parallel_tool_calls=False)
    assert_chat_equivalent(r.model_dump(mode="json"), c)


# The few-shot history in Responses items, and as chat messages: a call answered by a tool and
# the assistant, then a call with no result yet; the small model then calls too.
FEW_SHOT_ITEMS = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"type": "function_call", "call_id": "call_0", "name": "get_weather",
     "arguments": json.dumps({"city": "Paris"}), "id": "fc_0", "status": "completed"},
    {"type": "function_call_output", "call_id": "call_0",
     "output": [{"type": "input_text", "text": "20 "}, {"type": "input_text", "text": "degrees"}]},
    {"type": "message", "role": "assistant",
     "content": [{"type": "output_text", "text": "It is 20 degrees in Paris."}]},
    {"role": "user", "content": "What is the weather in Rome?"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather",
     "arguments": '{"city":"Rome"}'},
    {"role": "user", "content": "What is the weather in London?"},
]
FEW_SHOT_CHAT = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_0", "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
    {"role": "tool", "tool_call_id": "call_0",
     "content": [{"type": "text", "text": "20 "}, {"type": "text", "text": "degrees"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "It is 20 degrees in Paris."}]},
    {"role": "user", "content": "What is the weather in Rome?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'}}]},
    {"role": "user", "content": "What is the weather in London?"},
]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "stream"])
def test_auto_call_matches_raw_text(srv, streamed):
    """tool_choice "auto" after a history of calls and results given as Responses items: the
    calls equal what Python reads in the model's raw text for the equivalent chat prompt, and
    the prompt is that chat prompt (the same token count)."""
    text, n_prompt = raw_text(srv, FEW_SHOT_CHAT, [chat_tool(R_CITY)], 48)
    want = hermes_calls(text)
    assert want == [("get_weather", {"city": "London"})], text  # what the model writes here
    body = dict(input=FEW_SHOT_ITEMS, tools=[R_CITY], tool_choice="auto", max_output_tokens=48,
                temperature=0)
    r = stream(srv, body) if streamed else respond(srv, body)
    assert r["usage"]["input_tokens"] == n_prompt
    assert calls_of(r) == want
    assert [it["type"] for it in r["output"]] == ["function_call"], r["output"]
    assert r["status"] == "completed"
    c = chat(srv, FEW_SHOT_CHAT, 48, tools=[chat_tool(R_CITY)])
    assert_chat_equivalent(r, c)


def test_round_trip(srv, client):
    """The documented loop: the call the model made, and the tool's output, fed back as input
    (the SDK's own output items); the answer is chat's for the equivalent messages."""
    q = {"role": "user", "content": "What is the weather in Oslo?"}
    r1 = client.responses.create(model=NAME, input=[q], tools=[R_CITY], tool_choice=NAMED,
                                 max_output_tokens=48, temperature=0)
    assert r1.status == "completed" and [it.type for it in r1.output] == ["function_call"]
    fc = r1.output[0]
    result = "12 degrees and raining"
    r2 = client.responses.create(
        model=NAME, tools=[R_CITY], max_output_tokens=24, temperature=0,
        input=[q, *r1.output, {"type": "function_call_output", "call_id": fc.call_id,
                               "output": result}])
    assert r2.status == "completed"
    assert r2.output[0].type == "message" and r2.output_text
    c = chat(srv, [q, {"role": "assistant", "content": None, "tool_calls": [{
        "id": fc.call_id, "type": "function",
        "function": {"name": fc.name, "arguments": fc.arguments}}]},
        {"role": "tool", "tool_call_id": fc.call_id, "content": result}],
        24, tools=[chat_tool(R_CITY)])
    assert c["choices"][0]["finish_reason"] == "stop"
    assert_chat_equivalent(r2.model_dump(mode="json"), c)


def test_calls_join_the_assistant_message(srv):
    """Calls that follow an assistant message (and each other) are that message's tool_calls;
    two results are two tool messages: the prompt equals chat's for those messages."""
    items = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
        {"type": "function_call", "call_id": "call_a", "name": "get_weather",
         "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "call_b", "name": "get_weather",
         "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "20 degrees"},
        {"type": "function_call_output", "call_id": "call_b", "output": "25 degrees"},
    ]
    msgs = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me check."}],
         "tool_calls": [
             {"id": "call_a", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
             {"id": "call_b", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "20 degrees"},
        {"role": "tool", "tool_call_id": "call_b", "content": "25 degrees"},
    ]
    r = respond(srv, dict(input=items, tools=[R_CITY], max_output_tokens=16, temperature=0))
    c = chat(srv, msgs, 16, tools=[chat_tool(R_CITY)])
    assert_chat_equivalent(r, c)


# ---- structured output -----------------------------------------------------------------------

BOB = "Bob is 30 years old. Give his name and age as JSON."


def test_json_schema_format(srv):
    fmt = {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
    r = respond(srv, dict(input=BOB, text={"format": fmt}, max_output_tokens=48, temperature=0))
    assert r["text"]["format"] == fmt
    assert r["status"] == "completed"
    jsonschema.validate(json.loads(output_text(r)), PERSON)
    c = chat(srv, [{"role": "user", "content": BOB}], 48, response_format={
        "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON,
                                               "strict": True}})
    assert_chat_equivalent(r, c)


def test_sdk_parse_with_pydantic_model(client):
    import pydantic

    class Person(pydantic.BaseModel):
        name: str
        age: int

    r = client.responses.parse(model=NAME, input=BOB, text_format=Person, max_output_tokens=48,
                               temperature=0)
    assert r.status == "completed"
    assert isinstance(r.output_parsed, Person)
    assert r.output_parsed == Person.model_validate_json(r.output_text)
    assert r.text.format.type == "json_schema" and r.text.format.name == "Person"


def test_json_object_format(srv):
    q = 'Give a JSON object with the key "ok" set to true.'
    r = respond(srv, dict(input=q, text={"format": {"type": "json_object"}},
                          max_output_tokens=32, temperature=0))
    assert r["text"]["format"] == {"type": "json_object"}
    assert r["status"] == "completed"
    assert isinstance(json.loads(output_text(r)), dict)
    c = chat(srv, [{"role": "user", "content": q}], 32, response_format={"type": "json_object"})
    assert_chat_equivalent(r, c)


# ---- logprobs --------------------------------------------------------------------------------

def assert_logprobs_equal(got, want, n_top):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g["token"] == w["token"] and g["bytes"] == w["bytes"], (g, w)
        assert abs(g["logprob"] - w["logprob"]) <= 1e-4, (g, w)
        assert len(g["top_logprobs"]) == n_top, g
        assert [t["token"] for t in g["top_logprobs"]] == \
            [t["token"] for t in w["top_logprobs"]], (g, w)
        for gt, wt in zip(g["top_logprobs"], w["top_logprobs"]):
            assert gt["bytes"] == wt["bytes"], (gt, wt)
            assert abs(gt["logprob"] - wt["logprob"]) <= 1e-4, (gt, wt)


LOGPROB_CASES = {"stop": (FRANCE, 12), "cut": ("Write a short poem about the sea.", 8)}


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("case", list(LOGPROB_CASES))
def test_logprobs_match_chat(srv, case, streamed):
    """One entry per output token, each with 2 alternatives, equal to chat's logprobs for the
    same greedy request. The tokens' bytes spell the text; an answer that ends at the model's
    end-of-turn token has that token's entry last (chat's too: it is counted in output_tokens,
    as vLLM counts and reports it)."""
    q, n = LOGPROB_CASES[case]
    body = dict(input=q, max_output_tokens=n, temperature=0, top_logprobs=2,
                include=["message.output_text.logprobs"])
    r = stream(srv, body) if streamed else respond(srv, body)
    (msg,) = r["output"]
    (part,) = msg["content"]
    lps = part["logprobs"]
    assert len(lps) == r["usage"]["output_tokens"]
    for lp in lps:
        assert set(lp) >= {"token", "logprob", "bytes", "top_logprobs"}, lp
        assert lp["logprob"] <= 0
    spelled = b"".join(bytes(lp["bytes"]) for lp in lps)
    if case == "cut":
        assert r["status"] == "incomplete"
        assert spelled.decode() == part["text"]
    else:
        assert r["status"] == "completed"
        assert lps[-1]["token"] == "<|im_end|>", lps[-1]
        assert spelled.decode() == part["text"] + "<|im_end|>"
    c = chat(srv, [{"role": "user", "content": q}], n, logprobs=True, top_logprobs=2)
    assert part["text"] == c["choices"][0]["message"]["content"]
    assert_logprobs_equal(lps, c["choices"][0]["logprobs"]["content"], 2)


def test_no_logprobs_without_include(srv):
    r = respond(srv, dict(input=FRANCE, max_output_tokens=8, temperature=0, top_logprobs=2))
    assert r["top_logprobs"] == 2
    assert r["output"][0]["content"][0]["logprobs"] == []


# ---- errors ----------------------------------------------------------------------------------

DEL = object()
CHAT_ONLY_NAMES = ["max_completion_tokens", "response_format", "messages[", "json_schema.schema",
                   ".function.", "'logprobs'"]
ERRORS = [
    # (id, changes to a good body (DEL removes), the param(s) the error may name)
    ("no-input", {"input": DEL}, "input"),
    ("empty-input", {"input": []}, "input"),
    ("reasoning-content", {"input": [{"type": "reasoning", "id": "rs_1", "summary": [],
                                      "content": [{"type": "summary_text", "text": "x"}]}]},
     "input[0].content[0]"),
    ("item-reference", {"input": [{"role": "user", "content": "hi"},
                                  {"type": "item_reference", "id": "msg_1"}]}, "input[1].type"),
    ("builtin-call-item", {"input": [{"type": "web_search_call", "id": "ws_1",
                                      "status": "completed"}]}, "input[0].type"),
    ("input-image", {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}]},
     "input[0].content[1].type"),
    ("bad-call-arguments", {"input": [
        {"role": "user", "content": "x"},
        {"type": "function_call", "call_id": "c", "name": "get_weather", "arguments": "{x"}]},
     "input[1].arguments"),
    ("web-search-tool", {"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ("file-search-tool", {"tools": [R_CITY, {"type": "file_search",
                                             "vector_store_ids": ["vs_1"]}]}, "tools[1].type"),
    ("unknown-function", {"tools": [R_CITY], "tool_choice": {"type": "function", "name": "nope"}},
     "tool_choice.name"),
    ("tool-name", {"tools": [dict(R_CITY, name="a b")]}, "tools[0].name"),
    ("tool-parameters", {"tools": [{"type": "function", "name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": "^a"}}}}],
        "tool_choice": "required"}, "tools[0].parameters"),
    ("required-without-tools", {"tool_choice": "required"}, "tool_choice"),
    ("content-number", {"input": [{"role": "user", "content": 5}]}, "input[0].content"),
    ("instructions-number", {"instructions": 5}, "instructions"),
    ("max-output-tokens-0", {"max_output_tokens": 0}, "max_output_tokens"),
    ("temperature-3", {"temperature": 3}, "temperature"),
    ("schema-missing", {"text": {"format": {"type": "json_schema", "name": "x"}}},
     "text.format.schema"),
    ("schema-unsupported", {"text": {"format": {"type": "json_schema", "name": "x", "schema": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": "^a"}}}}}},
     "text.format.schema"),
    ("verbosity-low", {"text": {"format": {"type": "text"}, "verbosity": "low"}},
     "text.verbosity"),
    ("previous-response-id", {"previous_response_id": "resp_123"}, "previous_response_id"),
    ("conversation", {"conversation": "conv_123"}, "conversation"),
    ("background", {"background": True}, "background"),
    ("stored-prompt", {"prompt": {"id": "pmpt_123"}}, "prompt"),
    ("truncation-auto", {"truncation": "auto"}, "truncation"),
    ("reasoning-effort", {"reasoning": {"effort": "high"}}, ("reasoning", "reasoning.effort")),
    ("reasoning-summary", {"reasoning": {"summary": "auto"}}, ("reasoning", "reasoning.summary")),
    ("include-bogus", {"include": ["bogus"]}, ("include", "include[0]")),
    ("top-logprobs-21", {"top_logprobs": 21}, "top_logprobs"),
    ("metadata-17-keys", {"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
]


@pytest.mark.parametrize("changes,param", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_refused_requests(srv, changes, param):
    def refused():  # 400s counted on the route, by its own name
        try:
            return metric(srv.metrics(), "pagoda_http_requests_total", route="/v1/responses",
                          status="400")
        except AssertionError:  # no such sample yet
            return 0
    n400 = refused()
    body = {"model": NAME, "input": "Hi", "max_output_tokens": 4}
    for k, v in changes.items():
        if v is DEL:
            del body[k]
        else:
            body[k] = v
    for streamed in (False, True):  # a refusal is JSON, never SSE
        st, hd, raw = post(srv, "/v1/responses", dict(body, stream=True) if streamed else body)
        assert st == 400, raw
        assert hd["content-type"].startswith("application/json"), hd
        e = assert_error_body(raw, status=400)
        accepted = param if isinstance(param, tuple) else (param,)
        assert e["param"] in accepted, e
        for chat_name in CHAT_ONLY_NAMES:  # the message speaks of the Responses fields
            assert chat_name not in e["message"], e
    assert srv.alive()
    assert refused() == n400 + 2


def test_forced_call_cut_short_keeps_its_arguments(srv):
    """A forced call cut by max_output_tokens is still the call: a function_call item,
    incomplete, with the arguments written so far (the beginning of the uncut call's), as chat
    gives it; the response incomplete."""
    body = dict(input="Weather in Oslo?", tools=[R_WEATHER], tool_choice=NAMED,
                max_output_tokens=3, temperature=0)
    r = respond(srv, body)
    full = respond(srv, body | {"max_output_tokens": 80})
    c = chat(srv, [{"role": "user", "content": "Weather in Oslo?"}], 3,
             tools=[chat_tool(R_WEATHER)],
             tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert c["choices"][0]["finish_reason"] == "length"
    assert_chat_equivalent(r, c)
    assert r["status"] == "incomplete"
    (it,) = r["output"]
    assert it["type"] == "function_call" and it["status"] == "incomplete", it
    (whole,) = full["output"]
    assert whole["status"] == "completed", whole
    assert it["arguments"].startswith("{") and whole["arguments"].startswith(it["arguments"])
    assert len(it["arguments"]) < len(whole["arguments"])


def test_api_key_guards_the_route(start_server):
    keyed = start_server("--served-model-name", NAME, "--api-key", "sekret")
    body = {"model": NAME, "input": FRANCE, "max_output_tokens": 4}
    st, _, raw = post(keyed, "/v1/responses", body)
    assert st == 401, raw
    assert_error_body(raw, status=401)
    r = openai_client(keyed, api_key="sekret").responses.create(**body)
    assert r.status in ("completed", "incomplete") and r.output_text


def test_server_answers_after_refusals(srv, client):
    r = client.responses.create(model=NAME, input=FRANCE, max_output_tokens=8, temperature=0)
    assert r.output_text and r.usage.output_tokens >= 1
    assert http(srv.port, "GET", "/health")[0] == 200


def test_accepted_include_values(srv):
    """The include values OpenAI defines for outputs this server never makes are accepted."""
    r = respond(srv, dict(input=FRANCE, max_output_tokens=4, temperature=0, include=[
        "reasoning.encrypted_content", "message.input_image.image_url"],
        reasoning={"effort": None, "summary": None}))
    assert r["output"][0]["content"][0]["logprobs"] == []


# ---- a client that leaves --------------------------------------------------------------------

def test_client_leaves_mid_stream(srv, client):
    m0 = srv.metrics()
    aborted0 = metric(m0, "pagoda_requests_aborted_total")
    abort_reason0 = metric(m0, "pagoda_request_success_total", finished_reason="abort")
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
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
    finally:
        s.close()

    def settled():
        m = srv.metrics()
        return (metric(m, "pagoda_requests_aborted_total") - aborted0,
                metric(m, "pagoda_request_success_total", finished_reason="abort")
                - abort_reason0,
                metric(m, "pagoda_num_requests_running"),
                metric(m, "pagoda_num_requests_waiting"),
                metric(m, "pagoda_kv_cache_usage_perc"))
    poll(lambda: settled() == (1, 1, 0, 0, 0), timeout=30, interval=0.05,
         msg="the left stream was not counted as one abort")
    # the server still answers, the same as before
    r = client.responses.create(model=NAME, input=FRANCE, max_output_tokens=8, temperature=0)
    c = chat(srv, [{"role": "user", "content": FRANCE}], 8)
    assert_chat_equivalent(r.model_dump(mode="json"), c)
    assert http(srv.port, "GET", "/health")[0] == 200

"""Tool calling on /v1/chat/completions through the openai SDK, with the default model
(SmolLM2-135M-Instruct, greedy so that every answer is reproducible).

- tool_choice "auto": the model writes Hermes <tool_call> blocks (a few-shot history of calls
  makes the small model write one); the answer's tool_calls must equal what Python parses out of
  the same model's raw text for the same prompt (/tokenize with the tools, then /v1/completions
  on those token ids), whole and streamed; a plain answer passes through unchanged.
- tool_choice naming a function, and "required": the output is constrained, so the arguments
  must follow the tool's parameters (checked with the jsonschema package); the SDK's parse()
  turns a strict pydantic tool's arguments back into the model.
- the prompt: the tools reach it as Python's json.dumps writes them; tool results and earlier
  calls render in the Hermes format.
- bad tools and choices are 400s naming the parameter.
"""
import json
import re

import jsonschema
import pytest

from pagoda_e2e import assert_error_body, http, openai_client

NAME = "smol-tools"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add integers",
    "parameters": {"type": "object", "properties": {
        "xs": {"type": "array", "items": {"type": "integer"}, "maxItems": 4}},
        "required": ["xs"]}}}
CITY = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


def few_shot(question):
    """Two earlier questions each answered by a call: the small model then calls too."""
    msgs = []
    for i, city in enumerate(["Paris", "Rome"]):
        msgs += [{"role": "user", "content": f"What is the weather in {city}?"},
                 {"role": "assistant", "content": None, "tool_calls": [{
                     "id": f"call_{i}", "type": "function",
                     "function": {"name": "get_weather",
                                  "arguments": json.dumps({"city": city})}}]}]
    return msgs + [{"role": "user", "content": question}]


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server("--served-model-name", NAME)


@pytest.fixture(scope="module")
def client(srv):
    return openai_client(srv)


def post(srv, path, body):
    st, _, data = http(srv.port, "POST", path, json.dumps(body).encode(),
                       {"Content-Type": "application/json"})
    return st, json.loads(data)


def raw_text(srv, messages, tools, max_tokens):
    """The model's greedy text for the chat prompt pagoda renders: /tokenize, then the token
    ids as a plain completion (nothing parsed)."""
    st, tok = post(srv, "/tokenize", {"model": NAME, "messages": messages, "tools": tools})
    assert st == 200, tok
    st, r = post(srv, "/v1/completions", {"model": NAME, "prompt": tok["tokens"],
                                          "max_tokens": max_tokens, "temperature": 0})
    assert st == 200, r
    return r["choices"][0]["text"], r["choices"][0]["finish_reason"]


def hermes_calls(text):
    """Python's own reading of Hermes blocks: [(name, arguments dict)]."""
    out = []
    for body in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.S):
        o = json.loads(body)
        out.append((o["name"], o.get("arguments", {})))
    return out


def hermes_raw_arguments(text):
    """The arguments' text of each Hermes block, as the model wrote it."""
    out = []
    for body in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.S):
        at = re.search(r'"arguments"\s*:\s*', body).end()
        _, end = json.JSONDecoder().raw_decode(body, at)
        out.append(body[at:end])
    return out


def collect_stream(stream):
    """Content, tool calls {index: [id, name, arguments]} and the finish reason of choice 0."""
    content, calls, finish = "", {}, None
    for ch in stream:
        for c in ch.choices:
            assert finish is None, "a chunk after the finish chunk"
            content += c.delta.content or ""
            for tc in c.delta.tool_calls or []:
                cur = calls.setdefault(tc.index, ["", "", ""])
                cur[0] += tc.id or ""
                cur[1] += tc.function.name or ""
                cur[2] += tc.function.arguments or ""
            finish = c.finish_reason or finish
    return content, calls, finish


def test_prompt_carries_tools_as_json_dumps(srv):
    """The definitions appear in the prompt as json.dumps(tool, ensure_ascii=False) writes them
    (what a chat template's tojson writes under Hugging Face's settings)."""
    tool = {"type": "function", "function": {
        "name": "wetter", "description": "Wetter für eine Stadt — \"jetzt\"\n",
        "parameters": {"type": "object", "properties": {"t": {"type": "number", "minimum": 0.1,
                                                             "maximum": 1e+16}}}}}
    msgs = [{"role": "user", "content": "hi"}]
    st, a = post(srv, "/tokenize", {"messages": msgs, "tools": [tool]})
    assert st == 200, a
    st, b = post(srv, "/tokenize", {"messages": msgs})
    assert st == 200 and a["count"] > b["count"]
    st, d = post(srv, "/detokenize", {"tokens": a["tokens"]})
    assert st == 200
    assert "\n" + json.dumps(tool, ensure_ascii=False) + "\n</tools>" in d["prompt"]
    st, none = post(srv, "/tokenize", {"messages": msgs, "tools": [tool], "tool_choice": "none"})
    assert st == 200 and none["tokens"] == b["tokens"]  # "none": the model is not shown them


def test_history_renders_calls_and_results(srv, client):
    msgs = few_shot("What is the weather in Oslo?")[:2] + [
        {"role": "tool", "tool_call_id": "call_0", "content": "20 degrees"},
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
        {"role": "user", "content": "Thanks. And in Oslo?"}]
    st, tok = post(srv, "/tokenize", {"messages": msgs, "tools": [CITY]})
    assert st == 200, tok
    st, d = post(srv, "/detokenize", {"tokens": tok["tokens"]})
    # (detokenized: the control tokens <|im_start|> / <|im_end|> leave no text)
    assert ('\nassistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
            '\n</tool_call>\nuser\n<tool_response>\n20 degrees\n</tool_response>\n'
            '<tool_response>\nsunny\n</tool_response>\nuser\nThanks. And in Oslo?\nassistant\n'
            ) in d["prompt"]
    r = client.chat.completions.create(model=NAME, messages=msgs, tools=[CITY], max_tokens=8,
                                       temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_auto_call_matches_raw_text(srv, client):
    msgs = few_shot("What is the weather in London?")
    text, _ = raw_text(srv, msgs, [CITY], 60)
    want = hermes_calls(text)
    assert want == [("get_weather", {"city": "London"})], text  # what the model writes here
    r = client.chat.completions.create(model=NAME, messages=msgs, tools=[CITY], max_tokens=60,
                                       temperature=0)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.content is None
    got = [(t.function.name, json.loads(t.function.arguments)) for t in ch.message.tool_calls]
    assert got == want
    # the arguments as the model wrote them
    assert [t.function.arguments for t in ch.message.tool_calls] == hermes_raw_arguments(text)
    assert all(t.type == "function" and re.fullmatch(r"call_[0-9a-f]{24}", t.id)
               for t in ch.message.tool_calls)
    # streamed: the same call and no content; the id and name come first, then the arguments
    # in pieces as the model writes them (not whole at the end)
    chunks = list(client.chat.completions.create(
        model=NAME, messages=msgs, tools=[CITY], max_tokens=60, temperature=0, stream=True))
    content, calls, finish = collect_stream(chunks)
    assert content == "" and finish == "tool_calls"
    assert [(c[1], json.loads(c[2])) for _, c in sorted(calls.items())] == want
    assert calls[0][2] == ch.message.tool_calls[0].function.arguments
    assert re.fullmatch(r"call_[0-9a-f]{24}", calls[0][0])
    deltas = [tc for c in chunks for x in c.choices for tc in x.delta.tool_calls or []]
    assert deltas[0].id == calls[0][0] and deltas[0].function.name == "get_weather"
    assert all(d.id is None and d.function.name is None for d in deltas[1:])
    assert len([d for d in deltas if d.function.arguments]) >= 3, deltas


def test_auto_plain_answer_passes_through(srv, client):
    msgs = [{"role": "user", "content": "Say hello to my friend Ann."}]
    text, reason = raw_text(srv, msgs, [CITY], 24)
    assert "<tool_call>" not in text
    r = client.chat.completions.create(model=NAME, messages=msgs, tools=[CITY], max_tokens=24,
                                       temperature=0)
    ch = r.choices[0]
    assert ch.message.tool_calls is None
    assert ch.message.content == text
    assert ch.finish_reason == reason
    content, calls, finish = collect_stream(client.chat.completions.create(
        model=NAME, messages=msgs, tools=[CITY], max_tokens=24, temperature=0, stream=True))
    assert content == ch.message.content and calls == {} and finish == reason


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_named_choice_follows_parameters(client, stream):
    msgs = [{"role": "user", "content": "Is it raining in Lisbon?"}]
    kw = dict(model=NAME, messages=msgs, tools=[ADD, WEATHER], max_tokens=80, temperature=0,
              tool_choice={"type": "function", "function": {"name": "get_weather"}})
    if stream:
        content, calls, finish = collect_stream(client.chat.completions.create(stream=True, **kw))
        assert content == "" and len(calls) == 1
        name, args = calls[0][1], calls[0][2]
    else:
        ch = client.chat.completions.create(**kw).choices[0]
        finish = ch.finish_reason
        assert ch.message.content is None and len(ch.message.tool_calls) == 1
        name, args = ch.message.tool_calls[0].function.name, ch.message.tool_calls[0].function.arguments
    assert finish == "tool_calls"
    assert name == "get_weather"
    jsonschema.validate(json.loads(args), WEATHER["function"]["parameters"])


def test_named_choice_sampled_n(client):
    """n = 2 sampled answers: each one a valid call of the named tool."""
    r = client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "Add some numbers."}], tools=[ADD],
        tool_choice={"type": "function", "function": {"name": "add"}}, n=2, seed=7,
        temperature=0.8, max_tokens=80)
    assert len(r.choices) == 2
    for ch in r.choices:
        assert ch.finish_reason == "tool_calls", ch
        (tc,) = ch.message.tool_calls
        assert tc.function.name == "add"
        jsonschema.validate(json.loads(tc.function.arguments), ADD["function"]["parameters"])


def test_required_one_tool(client):
    kw = dict(model=NAME, messages=[{"role": "user", "content": "Weather in Berlin, please."}],
              tools=[WEATHER], tool_choice="required", parallel_tool_calls=False, temperature=0)
    r = client.chat.completions.create(max_tokens=80, **kw)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None
    (tc,) = ch.message.tool_calls
    assert tc.function.name == "get_weather"
    jsonschema.validate(json.loads(tc.function.arguments), WEATHER["function"]["parameters"])
    # streamed: the same call, its arguments in deltas as they are written
    chunks = list(client.chat.completions.create(max_tokens=80, stream=True, **kw))
    content, calls, finish = collect_stream(chunks)
    assert content == "" and finish == "tool_calls"
    assert [c[1:] for c in calls.values()] == [["get_weather", tc.function.arguments]]
    deltas = [d for c in chunks for x in c.choices for d in x.delta.tool_calls or []]
    assert len([d for d in deltas if d.function.arguments]) >= 3, deltas
    # cut inside the arguments (a few tokens before the answer's end): the call keeps what was
    # written
    cut = client.chat.completions.create(max_tokens=r.usage.completion_tokens - 6,
                                         **kw).choices[0]
    assert cut.finish_reason == "length" and cut.message.content is None
    (ct,) = cut.message.tool_calls
    assert ct.function.name == "get_weather"
    assert tc.function.arguments.startswith(ct.function.arguments)
    assert len(ct.function.arguments) < len(tc.function.arguments)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_required_several_tools(client, seed):
    """Tools of different parameters, sampled: the call's arguments follow the parameters of
    the tool it names (one call: a sampled list may run past max_tokens)."""
    tools = {t["function"]["name"]: t for t in (WEATHER, ADD, CITY | {"function": {
        **CITY["function"], "name": "get_city"}})}
    r = client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "What is 2 plus 3, and the weather?"}],
        tools=list(tools.values()), tool_choice="required", parallel_tool_calls=False,
        max_tokens=160, temperature=1.0, seed=seed)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None, ch
    assert len(ch.message.tool_calls) == 1
    for tc in ch.message.tool_calls:
        jsonschema.validate(json.loads(tc.function.arguments),
                            tools[tc.function.name]["function"]["parameters"])


def test_forced_call_cut_short_keeps_its_arguments(client):
    """A forced call cut by max_tokens is still the call, with the arguments written so far (as
    OpenAI's cut calls are): the beginning of the uncut call's arguments, not yet JSON; the same
    streamed."""
    kw = dict(model=NAME, messages=[{"role": "user", "content": "Weather in Oslo?"}],
              tools=[WEATHER], temperature=0,
              tool_choice={"type": "function", "function": {"name": "get_weather"}})
    whole = client.chat.completions.create(max_tokens=80, **kw).choices[0]
    assert whole.finish_reason == "tool_calls"
    full = whole.message.tool_calls[0].function.arguments
    ch = client.chat.completions.create(max_tokens=3, **kw).choices[0]
    assert ch.finish_reason == "length" and ch.message.content is None
    (tc,) = ch.message.tool_calls
    args = tc.function.arguments
    assert tc.function.name == "get_weather" and args.startswith("{")
    assert full.startswith(args) and len(args) < len(full), (args, full)
    with pytest.raises(json.JSONDecodeError):
        json.loads(args)
    content, calls, finish = collect_stream(
        client.chat.completions.create(max_tokens=3, stream=True, **kw))
    assert content == "" and finish == "length"
    assert [c[1:] for c in calls.values()] == [["get_weather", args]]


def test_sdk_parse_with_pydantic_tool(client):
    """The SDK's parse(): a strict pydantic tool, named; its arguments come back as the model."""
    import openai
    import pydantic

    class Booking(pydantic.BaseModel):
        city: str
        nights: int

    r = client.chat.completions.parse(
        model=NAME, messages=[{"role": "user", "content": "Book two nights in Rome."}],
        tools=[openai.pydantic_function_tool(Booking)], max_tokens=60, temperature=0,
        tool_choice={"type": "function", "function": {"name": "Booking"}})
    (tc,) = r.choices[0].message.tool_calls
    assert isinstance(tc.function.parsed_arguments, Booking)


@pytest.mark.parametrize("body,param", [
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
    ({"tools": [CITY, CITY]}, "tools[1].function.name"),
    ({"tools": [{"type": "code_interpreter"}]}, "tools[0].type"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [CITY], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name"),
    ({"tools": [CITY], "tool_choice": "required", "response_format": {"type": "json_object"}},
     "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": "^a"}}}}}],
      "tool_choice": "required"}, "tools[0].function.parameters"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{x"}}]}]},
     "messages[1].tool_calls[0].function.arguments"),
])
def test_bad_tools_are_400s(srv, body, param):
    st, r = post(srv, "/v1/chat/completions",
                 {"model": NAME, "messages": [{"role": "user", "content": "x"}], **body})
    assert st == 400
    assert_error_body(r, param=param)


def test_tools_on_completions_are_refused(srv):
    st, r = post(srv, "/v1/completions", {"model": NAME, "prompt": "x", "tools": [CITY]})
    assert st == 400
    assert_error_body(r, param="tools")

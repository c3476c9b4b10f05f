"""Tool calls streamed in the order the model writes them, on a tiny Qwen3-style GGUF whose
greedy answer is fixed (test_reasoning.py's model, with another chain of tokens):

  "Sure.<tool_call>\\n{"name": "get_weather", "arguments": {"   '"city": '   '"Paris"}'
  "}\\n</tool_call>"   "OK"   "<|im_end|>"

Its first token holds content, the opening tag and the call's whole head: the content goes out
before the call, the call opens at that token (id and name), its arguments follow in a delta a
token, and the content after the call comes after them. Checked through the openai SDK on chat
completions (the chunks' order; the whole answer) and on /v1/responses (the stream's items and
events in that order, its final response equal to the whole one's)."""
import json

import pytest

from pagoda_e2e import openai_client
from test_reasoning import WEATHER, write_model

ANSWER = ['Sure.<tool_call>\n{"name": "get_weather", "arguments": {', '"city": ', '"Paris"}',
          "}\n</tool_call>", "OK", "<|im_end|>"]
ARGS = '{"city": "Paris"}'
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]
R_WEATHER = {"type": "function", **WEATHER["function"]}


@pytest.fixture(scope="module")
def client(start_server, tmp_path_factory):
    path = tmp_path_factory.mktemp("order") / "order.gguf"
    write_model(path, answer=ANSWER)
    return openai_client(start_server("--model", path, "--served-model-name", "order"))


def test_chat_stream_in_the_model_order(client):
    kw = dict(model="order", messages=MSGS, tools=[WEATHER], temperature=0, max_tokens=16)
    whole = client.chat.completions.create(**kw).choices[0]
    assert whole.message.content == "Sure.OK" and whole.finish_reason == "tool_calls"
    (tc,) = whole.message.tool_calls
    assert (tc.function.name, tc.function.arguments) == ("get_weather", ARGS)
    events = []  # ("content", text) and ("call", index, id, name, arguments), in order
    finish = None
    for ch in client.chat.completions.create(stream=True, **kw):
        for c in ch.choices:
            if c.delta.content:
                events.append(("content", c.delta.content))
            for d in c.delta.tool_calls or []:
                events.append(("call", d.index, d.id, d.function.name, d.function.arguments))
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert events == [
        ("content", "Sure."),
        ("call", 0, events[1][2], "get_weather", "{"),
        ("call", 0, None, None, '"city": '),
        ("call", 0, None, None, '"Paris"}'),
        ("content", "OK"),
    ], events
    assert events[1][2].startswith("call_")


def test_responses_stream_in_the_model_order(client):
    body = dict(model="order", input="What is the weather in Paris?", tools=[R_WEATHER],
                temperature=0, max_output_tokens=16)
    whole = client.responses.create(**body)
    with client.responses.stream(**body) as s:
        types = [ev.type for ev in s]
        final = s.get_final_response()
    items = [(it.type, it.content[0].text if it.type == "message" else it.arguments)
             for it in final.output]
    assert items == [("message", "Sure."), ("function_call", ARGS), ("message", "OK")]
    # the whole response holds the same items, in the same order
    assert [(it.type, it.content[0].text if it.type == "message" else it.arguments)
            for it in whole.output] == items
    assert types.count("response.function_call_arguments.delta") == 3, types
    added = [t for t in types if t == "response.output_item.added"]
    assert len(added) == 3
    # the call's events lie between the two messages' text
    first_text = types.index("response.output_text.delta")
    call_delta = types.index("response.function_call_arguments.delta")
    last_text = len(types) - 1 - types[::-1].index("response.output_text.delta")
    assert first_text < call_delta < last_text, types
    json.loads(final.output[1].arguments)

"""Reasoning models' thinking on /v1/chat/completions (--reasoning-parser; api/reasoning.h),
through the openai SDK, on a tiny Qwen3-style GGUF written here whose greedy answer is fixed:

  "<think>" "Hm" "</think>" "<tool_call>" CALL "</tool_call>" "<|im_end|>"

Each of those is one token of its vocabulary (the tags as Qwen3's GGUFs have them: user-defined
added tokens, printed as text), and the weights make each token's only likely successor the
next one: the one layer adds nothing to the residual (its output projections are zero), so a
position's logits are its token's embedding (a unit vector of its own) times an output matrix
that maps it to its successor. The chat prompt (Qwen3's own template, stored in
tests/reference/templates/qwen3.jinja) ends in "\\n", whose successor is "<think>".

Checked: with the vocabulary's <think> / </think> tokens the parser is on by default
(--reasoning-parser auto): message.reasoning_content holds "Hm" and the content the rest, in one
answer and streamed (delta.reasoning_content chunks, then content), the same with n = 2 and with
logprobs (every token's entry once, in order); with tools offered the call after the reasoning
is a tool call; cut by max_tokens inside the reasoning, the content is null; --reasoning-parser
none leaves the text as the model wrote it; a bad --reasoning-parser value stops the server;
/v1/responses gives a reasoning item; the web page shows the thinking in a block of its own.

A second model, the same but for its chat template (Qwen3-Thinking-2507's, stored in
tests/reference/templates/qwen3-thinking-2507.jinja) and its chain, answers

  "Hm" "</think>" "OK" "<|im_end|>"

after the prompt's last token "\\n": that template ends the prompt in "<think>\\n", so the answer
starts inside the reasoning block (the server finds the prompt's last <think> token). Checked:
reasoning_content "Hm" and content "OK", in one answer and streamed, and its reasoning tokens
("Hm" "</think>") counted."""
import json
import pathlib
import subprocess
import sys

import gguf
import numpy as np
import pytest

from pagoda_e2e import http, openai_client

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "reference"))
from byte_level import bytes_to_unicode  # noqa: E402

CALL = '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
ANSWER = ["<think>", "Hm", "</think>", "<tool_call>", CALL, "</tool_call>", "<|im_end|>"]
TEXT = "".join(ANSWER[:-1])
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]
THINKING = ["Hm", "</think>", "OK", "<|im_end|>"]  # Thinking-2507's: its prompt opens <think>


def write_model(path, answer=ANSWER, template="qwen3.jinja"):
    """The model whose greedy chain is "\\n" then `answer` (each one token), chatting with the
    template of that name in tests/reference/templates/."""
    E, H, FF = 64, 4, 64
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_block_count(1)
    w.add_embedding_length(E)
    w.add_feed_forward_length(FF)
    w.add_head_count(H)
    w.add_head_count_kv(H)
    w.add_context_length(2048)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    table = bytes_to_unicode()
    toks = [table[b] for b in range(256)]
    types = [1] * 256
    added = [("<|im_start|>", 3), ("<|im_end|>", 3), ("<think>", 4), ("</think>", 4),
             ("<tool_call>", 4), ("</tool_call>", 4)]
    merges = []
    for t in answer:  # the answer's other tokens: plain text, two-letter ones merged
        text = "".join(table[b] for b in t.encode())
        if all(text != a for a, _ in added):
            added.append((text, 1))
            if len(text) == 2:
                merges.append(" ".join(text))
    for t, ty in added:
        toks.append(t)
        types.append(ty)
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)
    im_end = toks.index("<|im_end|>")
    w.add_eos_token_id(im_end)
    w.add_chat_template((ROOT / "tests/reference/templates" / template).read_text())
    V = len(toks)
    rng = np.random.default_rng(3)
    ids = [toks.index("".join(table[b] for b in t.encode())) for t in ["\n", *answer]]
    emb = (rng.standard_normal((V, E)) * 0.02).astype(np.float32)
    out = np.zeros((V, E), dtype=np.float32)
    for k, (cur, nxt) in enumerate(zip(ids, ids[1:])):
        emb[cur] = 0
        emb[cur, k] = 1.0  # position k of the chain: a unit vector of its own
        out[nxt, k] = 10.0
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output.weight", out)
    w.add_tensor("output_norm.weight", np.ones(E, dtype=np.float32))
    D = E // H
    p = "blk.0."
    w.add_tensor(p + "attn_norm.weight", np.ones(E, dtype=np.float32))
    for name, rows in (("attn_q", E), ("attn_k", E), ("attn_v", E)):
        w.add_tensor(p + name + ".weight", (rng.standard_normal((rows, E)) * 0.1)
                     .astype(np.float32))
    w.add_tensor(p + "attn_q_norm.weight", np.ones(D, dtype=np.float32))
    w.add_tensor(p + "attn_k_norm.weight", np.ones(D, dtype=np.float32))
    w.add_tensor(p + "attn_output.weight", np.zeros((E, E), dtype=np.float32))
    w.add_tensor(p + "ffn_norm.weight", np.ones(E, dtype=np.float32))
    w.add_tensor(p + "ffn_gate.weight", (rng.standard_normal((FF, E)) * 0.1).astype(np.float32))
    w.add_tensor(p + "ffn_up.weight", (rng.standard_normal((FF, E)) * 0.1).astype(np.float32))
    w.add_tensor(p + "ffn_down.weight", np.zeros((E, FF), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("reasoning") / "think.gguf"
    write_model(path)
    return path


@pytest.fixture(scope="module")
def client(start_server, model):
    return openai_client(start_server("--model", model, "--served-model-name", "think"))


@pytest.fixture(scope="module")
def raw(start_server, model):
    return openai_client(start_server("--model", model, "--served-model-name", "think",
                                      "--reasoning-parser", "none"))


def chat(client, **kw):
    kw.setdefault("max_tokens", 16)
    return client.chat.completions.create(model="think", messages=MSGS, temperature=0, **kw)


def test_parser_off_the_text_as_written(raw):
    r = chat(raw)
    m = r.choices[0].message
    assert m.content == TEXT and r.choices[0].finish_reason == "stop"
    assert getattr(m, "reasoning_content", None) is None
    assert r.usage.completion_tokens == len(ANSWER)
    assert r.usage.completion_tokens_details is None


def test_reasoning_apart(client):
    r = chat(client)
    m = r.choices[0].message
    assert m.reasoning_content == "Hm"
    assert m.content == "".join(ANSWER[3:-1]) and not m.tool_calls
    assert r.choices[0].finish_reason == "stop"
    # <think> Hm </think>: the reasoning's tokens, tags included
    assert r.usage.completion_tokens_details.reasoning_tokens == 3
    assert r.usage.completion_tokens == len(ANSWER)
    last = list(chat(client, stream=True, stream_options={"include_usage": True}))[-1]
    assert last.usage.completion_tokens_details.reasoning_tokens == 3
    two = chat(client, n=2)
    assert two.usage.completion_tokens_details.reasoning_tokens == 6


def test_reasoning_then_tool_call(client):
    r = chat(client, tools=[WEATHER])
    m = r.choices[0].message
    assert m.reasoning_content == "Hm" and m.content is None
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [
        ("get_weather", {"city": "Paris"})]
    assert r.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("tools", [False, True])
def test_streamed_like_whole(client, tools):
    extra = {"tools": [WEATHER]} if tools else {}
    whole = chat(client, **extra).choices[0].message
    reasoning, content, calls, order = "", "", [], []
    for ch in chat(client, stream=True, **extra):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        r = getattr(d, "reasoning_content", None)
        if r:
            reasoning += r
            order.append("r")
        if d.content:
            content += d.content
            order.append("c")
        if d.tool_calls:
            calls += d.tool_calls
            order.append("t")
    assert reasoning == whole.reasoning_content == "Hm"
    assert content == (whole.content or "")
    assert order == sorted(order, key="rct".index) and order[0] == "r"  # reasoning first
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        (c.function.name, c.function.arguments) for c in whole.tool_calls or []]


def test_logprobs_once_each(client):
    r = chat(client, logprobs=True)
    assert [t.token for t in r.choices[0].logprobs.content][:6] == ANSWER[:-1]
    got = []
    for ch in chat(client, logprobs=True, stream=True):
        if ch.choices and ch.choices[0].logprobs and ch.choices[0].logprobs.content:
            got += [t.token for t in ch.choices[0].logprobs.content]
    assert got == [t.token for t in r.choices[0].logprobs.content]


def test_n_choices_each_split(client):
    r = chat(client, n=2)
    assert [c.message.reasoning_content for c in r.choices] == ["Hm", "Hm"]


def test_cut_inside_reasoning(client):
    r = chat(client, max_tokens=2)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "length"
    assert m.reasoning_content == "Hm" and m.content is None
    assert r.usage.completion_tokens_details.reasoning_tokens == 2


def test_bad_parser_name(pagoda_bin, model):
    p = subprocess.run([pagoda_bin, "serve", "--model", str(model), "--port", "0",
                        "--reasoning-parser", "deepthink"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0 and "--reasoning-parser 'deepthink'" in p.stderr


def test_tokenize_enable_thinking(start_server, model):
    """/tokenize renders as a chat request does: enable_thinking false closes an empty block."""
    s = start_server("--model", model, "--served-model-name", "think")
    body = {"messages": MSGS}
    on = json.loads(http(s.port, "POST", "/tokenize", json.dumps(body))[2])
    body["chat_template_kwargs"] = {"enable_thinking": False}
    off = json.loads(http(s.port, "POST", "/tokenize", json.dumps(body))[2])
    assert off["tokens"][:on["count"]] == on["tokens"]
    tail = json.loads(http(s.port, "POST", "/detokenize",
                           json.dumps({"tokens": off["tokens"][on["count"]:]}))[2])
    assert tail["prompt"] == "<think>\n\n</think>\n\n"
    body["chat_template_kwargs"] = {"enable_thinking": "no"}
    st, _, err = http(s.port, "POST", "/tokenize", json.dumps(body))
    assert st == 400 and json.loads(err)["error"]["param"] == \
        "chat_template_kwargs.enable_thinking"


def test_responses_reasoning_item(client):
    """/v1/responses: the reasoning is an item of its own before the answer, whole and
    streamed; given back as input it is accepted."""
    r = client.responses.create(model="think", input="What is the weather in Paris?",
                                max_output_tokens=16, temperature=0)
    assert [o.type for o in r.output] == ["reasoning", "message"]
    rs = r.output[0]
    assert rs.id.startswith("rs_") and rs.summary == [] and rs.status == "completed"
    assert [(c.type, c.text) for c in rs.content] == [("reasoning_text", "Hm")]
    assert r.output_text == "".join(ANSWER[3:-1])
    assert r.usage.output_tokens_details.reasoning_tokens == 3

    t = client.responses.create(model="think", input="What is the weather in Paris?",
                                max_output_tokens=16, temperature=0,
                                tools=[{"type": "function", **WEATHER["function"]}])
    assert [o.type for o in t.output] == ["reasoning", "function_call"]
    assert t.output[1].name == "get_weather"
    assert json.loads(t.output[1].arguments) == {"city": "Paris"}

    types, deltas, final = [], "", None
    for ev in client.responses.create(model="think", input="What is the weather in Paris?",
                                      max_output_tokens=16, temperature=0, stream=True):
        types.append(ev.type)
        if ev.type == "response.reasoning_text.delta":
            deltas += ev.delta
        if ev.type == "response.completed":
            final = ev.response
    assert deltas == "Hm" and types.index("response.reasoning_text.done") < \
        types.index("response.output_text.delta")
    assert [o.type for o in final.output] == ["reasoning", "message"]
    assert final.usage.output_tokens_details.reasoning_tokens == 3
    assert final.output[0].content[0].text == "Hm" and final.output_text == r.output_text

    cut = client.responses.create(model="think", input="What is the weather in Paris?",
                                  max_output_tokens=2, temperature=0)
    assert cut.status == "incomplete" and [o.type for o in cut.output] == ["reasoning"]

    # the output given back as input items, then a new question; and previous_response_id
    back = client.responses.create(
        model="think", max_output_tokens=4, temperature=0,
        input=[{"role": "user", "content": "What is the weather in Paris?"},
               *[o.model_dump(exclude_none=True) for o in t.output],
               {"type": "function_call_output", "call_id": t.output[1].call_id,
                "output": "sunny"}])
    assert back.status in ("completed", "incomplete")
    nxt = client.responses.create(model="think", input="And in Rome?", max_output_tokens=4,
                                  temperature=0, previous_response_id=r.id)
    assert nxt.previous_response_id == r.id


def test_web_page_shows_thinking(start_server, model):
    """The chat page on the real server: the thinking in its own block above the answer."""
    chromium_page = pytest.importorskip("chromium_page")  # skips without selenium
    if not (chromium_page.CHROMIUM and chromium_page.CHROMEDRIVER):
        pytest.skip("chromium and chromedriver are needed")
    from selenium.webdriver.common.by import By
    s = start_server("--model", model, "--served-model-name", "think")
    d = chromium_page.start_chromium("--disable-gpu", "--window-size=1200,860")
    try:
        d.set_page_load_timeout(30)
        d.get(s.url + "/")
        chromium_page.wait(d, lambda: chromium_page.model_options(d) == ["think"], timeout=20)
        chromium_page.type_and_enter(d, "What is the weather in Paris?")
        chromium_page.wait(d, lambda: d.find_element(By.ID, "send").is_enabled() and
                           chromium_page.assistants(d), timeout=20)
        msg = chromium_page.assistants(d)[0]
        chromium_page.wait(d, lambda: chromium_page.text_of(msg) == "".join(ANSWER[3:-1]),
                           timeout=20)
        r = msg.find_element(By.CSS_SELECTOR, ".thinking .reasoning")
        assert r.get_property("textContent") == "Hm"
    finally:
        d.quit()


@pytest.fixture(scope="module")
def thinking_2507(start_server, tmp_path_factory):
    path = tmp_path_factory.mktemp("reasoning") / "thinking-2507.gguf"
    write_model(path, THINKING, "qwen3-thinking-2507.jinja")
    return start_server("--model", path, "--served-model-name", "think")


def test_prompt_opens_reasoning(thinking_2507):
    """Thinking-2507: the template opens the block, the answer is reasoning up to </think>."""
    st, _, prompt = thinking_2507.post_json("/tokenize", {"messages": MSGS})
    assert st == 200
    st, _, tail = thinking_2507.post_json("/detokenize", {"tokens": prompt["tokens"][-2:]})
    assert st == 200 and tail["prompt"] == "<think>\n"  # the template opened the block
    client = openai_client(thinking_2507)
    r = chat(client)
    m = r.choices[0].message
    assert (getattr(m, "reasoning_content", None), m.content) == ("Hm", "OK")
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == len(THINKING)
    assert r.usage.completion_tokens_details.reasoning_tokens == 2  # "Hm" "</think>"
    reasoning, content, order, last = "", "", [], None
    for ch in chat(client, stream=True, stream_options={"include_usage": True}):
        last = ch
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        if getattr(d, "reasoning_content", None):
            reasoning += d.reasoning_content
            order.append("r")
        if d.content:
            content += d.content
            order.append("c")
    assert reasoning == "Hm" and content == "OK"
    assert order == sorted(order, key="rc".index) and order[0] == "r"  # reasoning first
    assert last.usage.completion_tokens_details.reasoning_tokens == 2

"""vLLM's min_tokens (and stop_token_ids beside it) through the openai SDK, on test_reasoning.py's
tiny Qwen3-style GGUF whose greedy answer is the fixed chain

  "<think>" "Hm" "</think>" "<tool_call>" CALL "</tool_call>" "<|im_end|>"

(served with --reasoning-parser none: the text as written). min_tokens keeps the end ids from
being drawn before the output has that many tokens — the answer then runs past its <|im_end|>
— and no stop string ends it before them; stop_token_ids end it at their first token."""
import json

import pytest

from pagoda_e2e import http, openai_client
from test_reasoning import ANSWER, MSGS, TEXT, write_model


@pytest.fixture(scope="module")
def srv(start_server, tmp_path_factory):
    path = tmp_path_factory.mktemp("min_tokens") / "chain.gguf"
    write_model(path)
    return start_server("--model", path, "--served-model-name", "chain", "--reasoning-parser",
                        "none")


@pytest.fixture(scope="module")
def client(srv):
    return openai_client(srv)


def chat(client, **kw):
    r = client.chat.completions.create(model="chain", messages=MSGS, temperature=0, **kw)
    return r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens


def streamed(client, **kw):
    text, finish = "", None
    for ch in client.chat.completions.create(model="chain", messages=MSGS, temperature=0,
                                             stream=True, **kw):
        for c in ch.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    return text, finish


def end_think_id(srv):
    """</think>'s id: write_model's vocabulary is the 256 byte tokens, then <|im_start|>,
    <|im_end|>, <think>, </think>, ... (checked through /detokenize)."""
    tid = 256 + 3
    st, _, body = http(srv.port, "POST", "/detokenize", json.dumps({"tokens": [tid]}).encode())
    assert st == 200 and json.loads(body)["prompt"] == "</think>", body
    return tid


def test_without_min_tokens_the_chain_ends_at_its_eos(client):
    assert chat(client, max_tokens=12) == (TEXT, "stop", len(ANSWER))


def test_min_tokens_runs_past_the_eos(client):
    n = len(ANSWER) + 2
    text, finish, used = chat(client, max_tokens=n, extra_body={"min_tokens": n})
    assert (finish, used) == ("length", n)
    assert text.startswith(TEXT) and len(text) > len(TEXT)  # <|im_end|> was not drawn
    assert streamed(client, max_tokens=n, extra_body={"min_tokens": n}) == (text, finish)
    # min_tokens below the chain's length (its <|im_end|> the token after them) changes nothing
    assert chat(client, max_tokens=12, extra_body={"min_tokens": len(ANSWER) - 1}) == (
        TEXT, "stop", len(ANSWER))


def test_no_stop_string_before_min_tokens(client):
    assert chat(client, max_tokens=12, stop=["Hm"]) == ("<think>", "stop", 2)
    # "Hm" is the 2nd token: within min_tokens 2 it stops nothing
    assert chat(client, max_tokens=12, stop=["Hm"], extra_body={"min_tokens": 2}) == (
        TEXT, "stop", len(ANSWER))
    assert streamed(client, max_tokens=12, stop=["Hm"], extra_body={"min_tokens": 2}) == (
        TEXT, "stop")


def test_stop_token_ids_and_min_tokens(client, srv):
    end_think = end_think_id(srv)
    ids = {"stop_token_ids": [end_think]}
    assert chat(client, max_tokens=12, extra_body=ids) == ("<think>Hm", "stop", 3)
    assert streamed(client, max_tokens=12, extra_body=ids) == ("<think>Hm", "stop")
    # min_tokens 3: the 3rd token may not be an end id, so </think> is not drawn there
    text, finish, used = chat(client, max_tokens=12, extra_body={**ids, "min_tokens": 3})
    assert used > 3 and text.startswith("<think>Hm") and "</think>" not in text, (text, used)


def test_bad_min_tokens_are_400s(srv):
    for body in ({"min_tokens": 9, "max_tokens": 8}, {"min_tokens": -1},
                 {"min_tokens": 2, "response_format": {"type": "json_object"}}):
        st, _, raw = http(srv.port, "POST", "/v1/chat/completions", json.dumps(
            {"model": "chain", "messages": MSGS, **body}).encode(),
            {"Content-Type": "application/json"})
        assert st == 400 and json.loads(raw)["error"]["param"] == "min_tokens", (body, raw)

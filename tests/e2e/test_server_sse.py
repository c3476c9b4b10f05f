"""The SSE framing of streamed answers, byte for byte, as `curl -N` receives it.

Every event is `data: <one-line JSON>\\n\\n` (a `: ping\\n\\n` comment event is allowed between
them); a chat stream is: one chunk per choice with delta {"role":"assistant","content":""},
content deltas, a finish chunk per choice (empty delta, finish_reason set), the usage chunk
(choices [] and usage) when stream_options.include_usage is set, then exactly `data: [DONE]\\n\\n`
and nothing after. Every chunk carries the same id, created and model. The response has
Content-Type text/event-stream and Cache-Control no-cache.
"""
import json
import shutil
import subprocess
import time

import pytest

from pagoda_e2e import sse_events

CURL = shutil.which("curl")
pytestmark = pytest.mark.skipif(not CURL, reason="curl is needed")

CHAT = [{"role": "user", "content": "Name three colours of the rainbow."}]
PROMPT = "The three primary colours are"


def curl_stream(srv, path, body, extra=()):
    """POST with `curl -sS -N -i`: (status line, headers dict lower-case, raw body bytes)."""
    p = subprocess.run([CURL, "-sS", "-N", "-i", "--max-time", "60", "-H",
                        "Content-Type: application/json", "--data-binary", json.dumps(body),
                        *extra, srv.url + path], capture_output=True, timeout=90)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    head, sep, raw = p.stdout.partition(b"\r\n\r\n")
    assert sep, p.stdout[:300]
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return lines[0], headers, raw


def check_stream_headers(status, headers):
    assert status.startswith("HTTP/1.1 200"), status
    assert headers["content-type"] == "text/event-stream"
    assert headers["cache-control"] == "no-cache"
    assert headers.get("transfer-encoding") == "chunked"


def check_frame(raw):
    """The raw body: SSE events only, ending with exactly one `data: [DONE]\\n\\n`. Returns the
    parsed JSON chunks."""
    assert raw.endswith(b"\n\ndata: [DONE]\n\n") or raw == b"data: [DONE]\n\n", raw[-300:]
    assert raw.count(b"data: [DONE]") == 1
    assert b"\r" not in raw
    data, _pings = sse_events(raw)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    for d, c in zip(data, chunks):
        assert json.dumps(c, ensure_ascii=False, separators=(",", ":")).count("\n") == 0
        assert "\n" not in d
    return chunks


def check_common(chunks, obj, model):
    assert chunks
    ids = {c["id"] for c in chunks}
    created = {c["created"] for c in chunks}
    models = {c["model"] for c in chunks}
    assert len(ids) == 1 and len(created) == 1 and models == {model}, (ids, created, models)
    assert all(c["object"] == obj for c in chunks)
    assert isinstance(next(iter(created)), int)
    prefix = "chatcmpl-" if obj == "chat.completion.chunk" else "cmpl-"
    assert next(iter(ids)).startswith(prefix)


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server()


@pytest.fixture(scope="module")
def model_name(srv):
    st, _, body = srv.request("GET", "/v1/models")
    return json.loads(body)["data"][0]["id"]


@pytest.mark.parametrize("include_usage", [True, False])
def test_chat_stream_bytes(srv, model_name, generate, include_usage):
    body = {"model": model_name, "messages": CHAT, "max_tokens": 12, "temperature": 0,
            "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    status, headers, raw = curl_stream(srv, "/v1/chat/completions", body)
    check_stream_headers(status, headers)
    chunks = check_frame(raw)
    check_common(chunks, "chat.completion.chunk", model_name)

    first = chunks[0]
    assert first["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                 "logprobs": None, "finish_reason": None}]
    rest = chunks[1:]
    if include_usage:
        usage_chunk, rest = rest[-1], rest[:-1]
        assert usage_chunk["choices"] == []
        u = usage_chunk["usage"]
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
        # Every other chunk says usage null, as OpenAI's do.
        assert all(c["usage"] is None for c in chunks[:-1])
    else:
        assert all(c.get("usage") is None for c in chunks)
    finish, content = rest[-1], rest[:-1]
    assert len(finish["choices"]) == 1
    assert finish["choices"][0]["delta"] == {}
    assert finish["choices"][0]["finish_reason"] in ("stop", "length")
    assert content, "no content deltas"
    text = ""
    for c in content:
        (ch,) = c["choices"]
        assert ch["index"] == 0 and ch["finish_reason"] is None
        assert set(ch["delta"]) == {"content"}
        assert ch["delta"]["content"] != ""
        text += ch["delta"]["content"]
    want = generate(chat=CHAT, max_tokens=12)
    assert text == want["text"]
    assert finish["choices"][0]["finish_reason"] == want["finish_reason"]
    if include_usage:
        assert usage_chunk["usage"]["completion_tokens"] == want["usage"]["completion_tokens"]
        assert usage_chunk["usage"]["prompt_tokens"] == want["usage"]["prompt_tokens"]


@pytest.mark.parametrize("include_usage", [True, False])
def test_completion_stream_bytes(srv, model_name, generate, include_usage):
    body = {"model": model_name, "prompt": PROMPT, "max_tokens": 12, "temperature": 0,
            "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    status, headers, raw = curl_stream(srv, "/v1/completions", body)
    check_stream_headers(status, headers)
    chunks = check_frame(raw)
    check_common(chunks, "text_completion", model_name)
    if include_usage:
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
        chunks = chunks[:-1]
    finish = chunks[-1]["choices"]
    assert len(finish) == 1 and finish[0]["text"] == "" and finish[0]["finish_reason"]
    text = ""
    for c in chunks[:-1]:
        (ch,) = c["choices"]
        assert ch["finish_reason"] is None and ch["index"] == 0
        text += ch["text"]
    assert text == generate(prompt=PROMPT, max_tokens=12)["text"]


def test_chat_stream_n2_bytes(srv, model_name):
    body = {"model": model_name, "messages": CHAT, "max_tokens": 6, "temperature": 1.0,
            "seed": 3, "n": 2, "stream": True, "stream_options": {"include_usage": True}}
    status, headers, raw = curl_stream(srv, "/v1/chat/completions", body)
    check_stream_headers(status, headers)
    chunks = check_frame(raw)
    check_common(chunks, "chat.completion.chunk", model_name)
    assert chunks[-1]["choices"] == []
    seen_role, finished = set(), set()
    for c in chunks[:-1]:
        (ch,) = c["choices"]
        i = ch["index"]
        assert i in (0, 1) and i not in finished
        if ch["delta"].get("role"):
            assert ch["delta"] == {"role": "assistant", "content": ""} and i not in seen_role
            seen_role.add(i)
            continue
        assert i in seen_role
        if ch["finish_reason"]:
            assert ch["delta"] == {}
            finished.add(i)
    assert seen_role == finished == {0, 1}


def test_http10_stream_closes_at_end(srv, model_name):
    """An HTTP/1.0 client gets the same events, the end marked by the closed connection."""
    body = {"model": model_name, "messages": CHAT, "max_tokens": 4, "stream": True}
    status, headers, raw = curl_stream(srv, "/v1/chat/completions", body, ["--http1.0"])
    assert status.startswith("HTTP/1.") and " 200" in status
    assert headers["content-type"] == "text/event-stream"
    check_frame(raw)


def test_errors_are_json_not_sse(srv):
    """A request refused before the stream starts is a plain JSON error, not an event stream."""
    body = {"messages": CHAT, "max_tokens": 0, "stream": True}
    status, headers, raw = curl_stream(srv, "/v1/chat/completions", body)
    assert " 400" in status
    assert headers["content-type"].startswith("application/json")
    assert json.loads(raw)["error"]["param"] == "max_tokens"


def test_pings_while_queued_are_whole_events(start_server):
    """A stream that waits (here: behind another one, with --max-num-seqs 1) gets `: ping`
    comment events about every second; they are whole events and the stream is otherwise the
    same."""
    import socket
    import threading
    one = start_server("--max-num-seqs", "1")
    long_body = json.dumps({"messages": CHAT, "max_tokens": 4000, "ignore_eos": True,
                            "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", one.port), timeout=30)
    out = {}
    try:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(long_body),
                                                                        long_body))
        got = b""
        while got.count(b"data: ") < 2:
            d = s.recv(65536)
            assert d
            got += d
        body = {"messages": CHAT, "max_tokens": 6, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        t = threading.Thread(target=lambda: out.update(
            r=curl_stream(one, "/v1/chat/completions", body)))
        t.start()
        time.sleep(2.6)  # two ping intervals while queued
    finally:
        s.close()
    t.join(timeout=60)
    status, headers, raw = out["r"]
    check_stream_headers(status, headers)
    # The role chunk at once, then pings while queued, then the answer.
    first, _, rest = raw.partition(b"\n\n")
    assert first.startswith(b"data: ") and rest.startswith(b": ping\n\n: ping\n\n"), raw[:400]
    data, pings = sse_events(raw)
    assert pings >= 2
    chunks = check_frame(raw)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6


def test_keep_alive_after_streams(srv):
    """Streams, whole answers and errors one after another on one keep-alive connection."""
    import http.client as httpclient
    conn = httpclient.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    try:
        for _ in range(2):
            conn.request("POST", "/v1/chat/completions", json.dumps(
                {"messages": CHAT, "max_tokens": 3, "stream": True}),
                {"Content-Type": "application/json"})
            r = conn.getresponse()
            assert r.status == 200 and not r.will_close
            check_frame(r.read())
            conn.request("POST", "/v1/completions", json.dumps(
                {"prompt": PROMPT, "max_tokens": 3}), {"Content-Type": "application/json"})
            r = conn.getresponse()
            assert r.status == 200 and json.loads(r.read())["usage"]["completion_tokens"] == 3
            conn.request("POST", "/v1/chat/completions", b"{bad",
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            assert r.status == 400 and "error" in json.loads(r.read())
    finally:
        conn.close()

"""Bad input of every kind: each gets its HTTP status and an OpenAI-shaped error body
{"error":{"message","type","param","code"}} with `param` where one applies, and the server never
crashes (alive and healthy after the matrix, exit 0 on SIGTERM at the end of the module).

Servers: the default one; one with small limits (--ctx-size 64 --max-body-mb 1
--request-timeout 2); one with --api-key; one with a one-slot queue (--max-waiting 1
--max-num-seqs 1) and one with a two-slot queue (--max-waiting 2 --max-num-seqs 1).
"""
import json
import socket
import threading
import time

import pytest

from pagoda_e2e import assert_error_body, metric, poll, read_response, send_chunked

MSG = [{"role": "user", "content": "Hi"}]
API_KEY = "sk-e2e-secret"


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server()


@pytest.fixture(scope="module")
def small(start_server):
    return start_server("--ctx-size", "64", "--max-body-mb", "1", "--request-timeout", "2")


@pytest.fixture(scope="module")
def keyed(start_server):
    return start_server("--api-key", API_KEY)


@pytest.fixture(scope="module")
def queue1(start_server):
    return start_server("--max-waiting", "1", "--max-num-seqs", "1")


def chat(**kw):
    return {"messages": MSG, "max_tokens": 2, **kw}


def comp(**kw):
    return {"prompt": "Hi", "max_tokens": 2, **kw}


C, P, T, D = "/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"
BIG = 10 ** 30

# (id, method, path, body: bytes | JSON-able, status, param, code, message must contain)
CASES = [
    # The body itself.
    ("broken-json", "POST", C, b'{"messages": [', 400, None, None, "not valid JSON"),
    ("trailing-garbage", "POST", C, b'{"messages": []} x', 400, None, None, "JSON"),
    ("empty-body", "POST", C, b"", 400, None, None, "empty"),
    ("array-body", "POST", C, b"[1, 2]", 400, None, None, "JSON object"),
    ("invalid-utf8", "POST", C, b'{"messages":[{"role":"user","content":"\xff\xfe"}]}', 400,
     None, None, "UTF-8"),
    ("deep-nesting", "POST", C, b"[" * 100000, 400, None, None, "depth"),
    # Chat messages.
    ("messages-missing", "POST", C, {"max_tokens": 2}, 400, "messages", None, "messages"),
    ("messages-wrong-type", "POST", C, {"messages": "hi"}, 400, "messages", None, "array"),
    ("messages-empty", "POST", C, {"messages": []}, 400, "messages", None, "empty"),
    ("message-not-object", "POST", C, {"messages": ["hi"]}, 400, "messages[0]", None, ""),
    ("role-missing", "POST", C, {"messages": [{"content": "x"}]}, 400, "messages[0].role",
     None, "role"),
    ("role-unknown", "POST", C, {"messages": [{"role": "robot", "content": "x"}]}, 400,
     "messages", None, "robot"),
    ("content-wrong-type", "POST", C, {"messages": [{"role": "user", "content": 5}]}, 400,
     "messages[0].content", None, "content"),
    ("content-part-image", "POST", C,
     {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     400, "messages[0].content[0].type", None, "image_url"),
    ("role-function", "POST", C, {"messages": [*MSG, {"role": "function", "content": "4"}]},
     400, "messages[1].role", None, "not supported"),
    ("tool-name", "POST", C, chat(tools=[{"type": "function", "function": {"name": "f g"}}]),
     400, "tools[0].function.name", None, "letters"),
    ("tool-choice-required", "POST", C, chat(tool_choice="required"), 400, "tool_choice", None,
     "required"),
    # What the server does not do: refused by name, not ignored.
    ("response-format-xml", "POST", C, chat(response_format={"type": "xml"}), 400,
     "response_format", None, "json_schema"),
    ("response-format-schema-unsupported", "POST", C,
     chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
         "type": "object", "properties": {"n": {"type": "number", "multipleOf": 0.5}}}}}),
     400, "response_format.json_schema.schema", None, "'multipleOf' is not supported"),
    ("response-format-schema-missing", "POST", P, comp(response_format={"type": "json_schema"}),
     400, "response_format.json_schema", None, "json_schema"),
    ("suffix", "POST", P, comp(suffix="end"), 400, "suffix", None, "suffix"),
    ("best-of", "POST", P, comp(best_of=4), 400, "best_of", None, "best_of"),
    # Sampling and output parameters: types and ranges.
    ("model-wrong-type", "POST", C, chat(model=5), 400, "model", None, "model"),
    ("temperature-range", "POST", C, chat(temperature=5), 400, "temperature", None, "0 and 2"),
    ("temperature-type", "POST", C, chat(temperature="hot"), 400, "temperature", None, "number"),
    ("top-p-zero", "POST", C, chat(top_p=0), 400, "top_p", None, "top_p"),
    ("top-k-range", "POST", C, chat(top_k=-2), 400, "top_k", None, "top_k"),
    ("min-p-range", "POST", C, chat(min_p=2), 400, "min_p", None, "min_p"),
    ("presence-penalty", "POST", C, chat(presence_penalty=3), 400, "presence_penalty", None,
     "-2 and 2"),
    ("frequency-penalty", "POST", C, chat(frequency_penalty=-2.5), 400, "frequency_penalty",
     None, "-2 and 2"),
    ("repetition-penalty", "POST", C, chat(repetition_penalty=0), 400, "repetition_penalty",
     None, "greater than 0"),
    ("max-tokens-zero", "POST", C, chat(max_tokens=0), 400, "max_tokens", None, ">= 1"),
    ("max-tokens-negative", "POST", P, comp(max_tokens=-1), 400, "max_tokens", None, ">= 0"),
    ("max-tokens-fraction", "POST", C, chat(max_tokens=5.5), 400, "max_tokens", None, "integer"),
    ("max-tokens-string", "POST", C, chat(max_tokens="ten"), 400, "max_tokens", None, "integer"),
    ("max-tokens-int64-max", "POST", C, chat(max_tokens=2 ** 63 - 1), 400, "max_tokens", None,
     "8192"),
    ("max-tokens-bignum", "POST", C, chat(max_tokens=BIG), 400, None, None, "JSON"),
    ("max-tokens-over-context", "POST", C, chat(max_tokens=100000), 400, "max_tokens", None,
     "maximum context length is 8192 tokens"),
    ("max-completion-tokens-over-context", "POST", C, chat(max_completion_tokens=8190), 400,
     "max_tokens", None, "8192"),
    ("n-zero", "POST", C, chat(n=0), 400, "n", None, "1 to 16"),
    ("n-too-many", "POST", C, chat(n=17), 400, "n", None, "1 to 16"),
    ("seed-type", "POST", C, chat(seed="abc"), 400, "seed", None, "integer"),
    ("stop-type", "POST", C, chat(stop=123), 400, "stop", None, "string"),
    ("stop-too-many", "POST", C, chat(stop=[str(i) for i in range(17)]), 400, "stop", None,
     "16"),
    ("stop-empty-string", "POST", C, chat(stop=[""]), 400, "stop", None, ""),
    ("logprobs-type", "POST", C, chat(logprobs="yes"), 400, "logprobs", None, "boolean"),
    ("top-logprobs-range", "POST", C, chat(logprobs=True, top_logprobs=21), 400,
     "top_logprobs", None, "0 to 20"),
    ("top-logprobs-without-logprobs", "POST", C, chat(top_logprobs=3), 400, "top_logprobs",
     None, "logprobs"),
    ("logit-bias-value", "POST", C, chat(logit_bias={"5": 200}), 400, "logit_bias", None,
     "-100 and 100"),
    ("logit-bias-token", "POST", C, chat(logit_bias={"999999": 1}), 400, "logit_bias", None,
     "999999"),
    ("logit-bias-key", "POST", C, chat(logit_bias={"abc": 1}), 400, "logit_bias", None, ""),
    ("stream-type", "POST", C, chat(stream="yes"), 400, "stream", None, "boolean"),
    ("stream-options-without-stream", "POST", C, chat(stream_options={"include_usage": True}),
     400, "stream_options", None, "stream"),
    ("stream-options-type", "POST", C, chat(stream=True, stream_options={"include_usage": "y"}),
     400, "stream_options.include_usage", None, "boolean"),
    ("unknown-model", "POST", C, chat(model="gpt-4o"), 404, "model", "model_not_found",
     "gpt-4o"),
    # Completions prompts.
    ("prompt-missing", "POST", P, {"max_tokens": 2}, 400, "prompt", None, "prompt"),
    ("prompt-wrong-type", "POST", P, comp(prompt=5), 400, "prompt", None, "prompt"),
    ("prompt-empty-string", "POST", P, comp(prompt=""), 400, "prompt", None, "empty"),
    ("prompt-empty-array", "POST", P, comp(prompt=[]), 400, "prompt", None, "empty"),
    ("prompt-mixed-list", "POST", P, comp(prompt=["a", 5]), 400, "prompt[1]", None, "string"),
    ("prompt-negative-token", "POST", P, comp(prompt=[[-1]]), 400, "prompt[0][0]", None,
     "token id"),
    ("prompt-token-out-of-vocab", "POST", P, comp(prompt=[5, 999999]), 400, "prompt", None,
     "999999"),
    ("prompt-over-context", "POST", P, comp(prompt="word " * 9000), 400, "prompt", None,
     "maximum context length is 8192 tokens"),
    ("completion-logprobs-range", "POST", P, comp(logprobs=21), 400, "logprobs", None, "0 to 20"),
    ("echo-type", "POST", P, comp(echo="x"), 400, "echo", None, "boolean"),
    ("max-tokens-0-without-echo", "POST", P, comp(max_tokens=0), 400, "max_tokens", None,
     "echo"),
    ("completion-unknown-model", "POST", P, comp(model="davinci"), 404, "model",
     "model_not_found", "davinci"),
    # /tokenize and /detokenize.
    ("tokenize-empty", "POST", T, {}, 400, "prompt", None, "required"),
    ("tokenize-both", "POST", T, {"prompt": "x", "messages": MSG}, 400, "messages", None, "both"),
    ("tokenize-prompt-type", "POST", T, {"prompt": 5}, 400, "prompt", None, "string"),
    ("tokenize-bad-role", "POST", T, {"messages": [{"role": "robot", "content": "x"}]}, 400,
     "messages", None, "robot"),
    ("tokenize-broken-json", "POST", T, b"nope", 400, None, None, "JSON"),
    ("tokenize-unknown-model", "POST", T, {"prompt": "x", "model": "nope"}, 404, "model",
     "model_not_found", "nope"),
    ("detokenize-missing", "POST", D, {}, 400, "tokens", None, "required"),
    ("detokenize-type", "POST", D, {"tokens": "abc"}, 400, "tokens", None, "array"),
    ("detokenize-negative", "POST", D, {"tokens": [-1]}, 400, "tokens[0]", None, "token id"),
    ("detokenize-fraction", "POST", D, {"tokens": [1.5]}, 400, "tokens[0]", None, "token id"),
    ("detokenize-out-of-vocab", "POST", D, {"tokens": [1, 99999999]}, 400, "tokens", None,
     "99999999"),
    # Routes and methods.
    ("unknown-route", "GET", "/v1/nope", None, 404, None, None, "/v1/nope"),
    ("unknown-route-post", "POST", "/v1/chat/completions/extra", {}, 404, None, None, "Unknown"),
    ("route-case", "POST", "/V1/CHAT/COMPLETIONS", chat(), 404, None, None, "Unknown"),
    ("wrong-method-chat", "GET", C, None, 405, None, None, "GET"),
    ("wrong-method-models", "POST", "/v1/models", {}, 405, None, None, "POST"),
    ("wrong-method-model", "DELETE", "/v1/models/x", None, 405, None, None, "DELETE"),
    ("model-retrieve-unknown", "GET", "/v1/models/gpt-4o", None, 404, "model", "model_not_found",
     "gpt-4o"),
    ("model-retrieve-empty-id", "GET", "/v1/models/", None, 404, None, None, "Unknown"),
    ("wrong-method-health", "DELETE", "/health", None, 405, None, None, "DELETE"),
    ("wrong-method-tokenize", "PUT", T, {"prompt": "x"}, 405, None, None, "PUT"),
]


def send(srv, method, path, body, headers=None):
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
    h = {"Content-Type": "application/json"} if body is not None else {}
    h.update(headers or {})
    return srv.request(method, path, body, h, timeout=30)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input(srv, case):
    _, method, path, body, status, param, code, contains = case
    st, headers, raw = send(srv, method, path, body)
    assert st == status, raw
    assert headers["content-type"].startswith("application/json")
    assert_error_body(raw, status=status, param=param, code=code, contains=contains)
    if status == 405:
        allow = {C: "POST", T: "POST", "/v1/models": "GET", "/v1/models/x": "GET",
                 "/health": "GET"}[path]
        assert headers.get("allow") == allow


def test_context_limits_give_the_numbers(small):
    """With --ctx-size 64: prompts that do not fit, and prompt + max_tokens that do not fit,
    are 400s whose message holds the limit and the counts."""
    long_msg = [{"role": "user", "content": "Tell me everything about " + "the sea, " * 40}]
    st, _, tok = small.post_json("/tokenize", {"messages": long_msg})
    assert st == 200
    n = tok["count"]
    assert n > 64 and tok["max_model_len"] == 64
    st, _, body = small.post_json(C, {"messages": long_msg, "max_tokens": 4})
    assert st == 400
    e = assert_error_body(body, status=400, param="messages")
    assert "64" in e["message"] and str(n) in e["message"], e

    st, _, body = small.post_json(P, {"prompt": "word " * 100, "max_tokens": 4})
    assert st == 400
    e = assert_error_body(body, status=400, param="prompt")
    st, _, tok = small.post_json("/tokenize", {"prompt": "word " * 100})
    assert "64" in e["message"] and str(tok["count"]) in e["message"], e

    # A prompt that fits, with max_tokens that does not.
    st, _, tok = small.post_json("/tokenize", {"messages": MSG})
    np_ = tok["count"]
    assert np_ < 64
    st, _, body = small.post_json(C, {"messages": MSG, "max_tokens": 60})
    assert st == 400
    e = assert_error_body(body, status=400, param="max_tokens")
    for num in ("64", str(np_), "60", str(np_ + 60)):
        assert num in e["message"], (num, e)
    # ... and exactly at the limit it is served.
    st, _, body = small.post_json(C, {"messages": MSG, "max_tokens": 64 - np_,
                                      "temperature": 0})
    assert st == 200, body
    assert body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"] <= 64


def test_ctx_prompt_exactly_full(small):
    """A prompt of exactly ctx-size tokens leaves no room for a completion."""
    ids = [19556] * 64
    st, _, body = small.post_json(P, {"prompt": ids, "max_tokens": 1})
    assert st == 400
    e = assert_error_body(body, status=400, param="prompt")
    assert "64" in e["message"]


def test_oversized_body_content_length(srv, small):
    """A Content-Length over the limit is refused with 413 before the body is read."""
    for server, limit in ((srv, 4 << 20), (small, 1 << 20)):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                      % (limit + 1))
            st, headers, body = read_response(s)
        assert st == 413, body
        assert_error_body(body, status=413, param=None, contains=str(limit))


def test_oversized_body_sent_whole(small):
    """The same with the whole 1.5 MiB body sent, and with a chunked body."""
    payload = json.dumps({"messages": [{"role": "user", "content": "x" * (3 << 19)}]}).encode()
    with socket.create_connection(("127.0.0.1", small.port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nContent-Length: %d\r\n\r\n" % len(payload))
        try:
            s.sendall(payload)
        except OSError:
            pass  # the server may answer and close before reading it all
        st, _, body = read_response(s)
    assert st == 413
    assert_error_body(body, status=413)
    with socket.create_connection(("127.0.0.1", small.port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            for i in range(0, len(payload), 65536):
                part = payload[i:i + 65536]
                s.sendall(b"%x\r\n%s\r\n" % (len(part), part))
            s.sendall(b"0\r\n\r\n")
        except OSError:
            pass
        st, _, body = read_response(s)
    assert st == 413
    assert_error_body(body, status=413)
    # Just under the limit is fine (it is a 200 or a context error, not a 413).
    st, _, _ = small.request("POST", C, json.dumps(chat()).encode(),
                             {"Content-Type": "application/json"})
    assert st == 200


def test_oversized_chunked_body_then_the_client_leaves(srv):
    """A client that sends a chunked body past the limit (4 MiB here), reads its 413 and closes
    its sending side at once: the server closes the connection within a moment (it had waited
    for its idle timeout, 30 s, when the end of file came in behind the last bytes it read)."""
    payload = b"x" * (5 << 20)
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            send_chunked(s, payload, end=False)  # past twice the limit the server stops reading
            st, _, body = read_response(s)
            assert st == 413, body
            s.shutdown(socket.SHUT_WR)
            t0 = time.monotonic()
            s.settimeout(10)
            try:
                while s.recv(65536):
                    pass
            except OSError:
                pass  # a reset is an end too
            assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("mib", [3, 16])
def test_oversized_chunked_body_far_over_the_limit(small, mib):
    """A chunked body of several times --max-body-mb (1 MiB) gets the same 413 JSON as one
    with a Content-Length, sent as soon as the limit is passed; the server then reads on a
    little and closes (the client sending the rest sees the connection end)."""
    payload = json.dumps({"messages": [{"role": "user", "content": "x" * (mib << 20)}]}).encode()
    with socket.create_connection(("127.0.0.1", small.port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            for i in range(0, len(payload), 65536):
                part = payload[i:i + 65536]
                s.sendall(b"%x\r\n%s\r\n" % (len(part), part))
            s.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server closed after its answer
        st, headers, body = read_response(s)
    assert st == 413, body
    assert headers.get("connection", "").lower() == "close"
    assert_error_body(body, status=413, param=None, contains=str(1 << 20))
    assert small.request("GET", "/health")[0] == 200


@pytest.mark.parametrize("part", ["headers", "body"])
def test_slow_client_is_cut_off(small, part):
    """A request trickled one byte every 0.25 s (the whole of it would take ~25 s) — its
    headers, or its body after complete headers: the server closes the connection once
    --request-timeout (2 s) has passed."""
    body = json.dumps({"messages": MSG, "max_tokens": 2, "pad": "x" * 40}).encode()
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n"
            b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n" % len(body))
    s = socket.create_connection(("127.0.0.1", small.port), timeout=10)
    t0 = time.monotonic()
    if part == "body":
        s.sendall(head)
        req = body
    else:
        req = head + body
    closed_at, answer = None, b""
    try:
        for i in range(len(req)):
            try:
                s.send(req[i:i + 1])
            except OSError:
                closed_at = time.monotonic() - t0
                break
            time.sleep(0.25)
            s.setblocking(False)
            try:
                d = s.recv(4096)
                if not d:
                    closed_at = time.monotonic() - t0
                    break
                answer += d
            except BlockingIOError:
                pass
            except OSError:
                closed_at = time.monotonic() - t0
                break
            finally:
                s.setblocking(True)
    finally:
        s.close()
    assert closed_at is not None, "the server never closed the trickling connection"
    assert 1.5 <= closed_at <= 6, closed_at
    # Closed without an answer, or with an error status (never a 200).
    assert answer == b"" or not answer.startswith(b"HTTP/1.1 2"), answer
    assert small.request("GET", "/health")[0] == 200


def raw_exchange(port, data, timeout=15):
    """Send raw bytes, read until the server closes (or the timeout): the bytes received."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        got = b""
        try:
            while True:
                d = s.recv(65536)
                if not d:
                    break
                got += d
        except OSError:
            pass
    return got


HUGE_HEADER = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Long: " + b"x" * 100000 + b"\r\n\r\n"
HUGE_URL = b"GET /v1/models?" + b"x" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize("data,status", [(HUGE_HEADER, 431), (HUGE_URL, 414)],
                         ids=["header-too-big", "url-too-long"])
def test_oversized_head(srv, data, status):
    """Request targets over 16 KiB and heads over 32 KiB are refused; the server lives on."""
    got = raw_exchange(srv.port, data)
    assert got.startswith(b"HTTP/1.1 %d " % status), got[:200]
    assert srv.request("GET", "/health")[0] == 200


def test_http11_without_host_is_400(srv):
    """HTTP/1.1 requires Host (RFC 9112 3.2): 400 with an OpenAI error body; HTTP/1.0 may omit
    it."""
    got = raw_exchange(srv.port, b"GET /v1/models HTTP/1.1\r\n\r\n")
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), got[:200]
    assert_error_body(body, status=400)
    got = raw_exchange(srv.port, b"GET /v1/models HTTP/1.0\r\n\r\n")
    assert got.startswith(b"HTTP/1.0 200 ") or got.startswith(b"HTTP/1.1 200 "), got[:200]
    assert srv.request("GET", "/health")[0] == 200


@pytest.mark.parametrize("data", [HUGE_HEADER, HUGE_URL], ids=["header-too-big", "url-too-long"])
def test_oversized_head_error_is_json(srv, data):
    """The 431 and the 414 are OpenAI-shaped JSON like every other error (the server's own
    limits answer them, below libmicrohttpd's, whose answer is HTML)."""
    got = raw_exchange(srv.port, data)
    head, _, body = got.partition(b"\r\n\r\n")
    assert b"application/json" in head.lower()
    assert_error_body(body, status=431 if data is HUGE_HEADER else 414,
                      contains="too large" if data is HUGE_HEADER else "too long")


@pytest.mark.parametrize("value,status", [
    (b"-5", 400), (b"abc", 400), (b"5, 5", 400), (b"", 400), (b"1e3", 400),
    (b"99999999999999999999999", 413),
])
def test_bad_content_length(srv, value, status):
    """A Content-Length that is not a number of bytes gets one 400 (one that does not fit in 64
    bits, one 413) with an OpenAI error body — not libmicrohttpd's HTML, sent with its header
    block twice — and the connection closes."""
    got = raw_exchange(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                 b"Content-Type: application/json\r\nContent-Length: " + value +
                                 b"\r\n\r\n")
    assert got.count(b"HTTP/1.") == 1, got
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), got
    assert b"application/json" in head.lower() and b"connection: close" in head.lower()
    e = assert_error_body(body, status=status)
    if status == 400:
        assert "Content-Length" in e["message"]
    assert srv.request("GET", "/health")[0] == 200


@pytest.mark.parametrize("auth,ok", [
    (None, False),
    ("Bearer wrong-key", False),
    ("Bearer " + API_KEY + "x", False),
    ("Bearer " + API_KEY[:-1], False),
    ("Basic " + API_KEY, False),
    (API_KEY, False),
    ("Bearer " + API_KEY, True),
])
def test_api_key(keyed, auth, ok):
    h = {"Authorization": auth} if auth else {}
    for method, path, body in (("POST", C, chat()), ("POST", P, comp()), ("GET", "/v1/models",
                                                                         None),
                               ("POST", T, {"prompt": "x"}), ("POST", D, {"tokens": [1]})):
        st, headers, raw = send(keyed, method, path, body, h)
        if ok:
            assert st == 200, (path, raw)
        else:
            assert st == 401, (path, raw)
            assert_error_body(raw, status=401, code="invalid_api_key")
            assert headers.get("www-authenticate", "").startswith("Bearer")
    # Health, metrics and the page stay open.
    for path in ("/health", "/metrics", "/"):
        assert keyed.request("GET", path)[0] == 200


def start_long_stream(srv, wait_tokens=True):
    """A streamed chat that runs for a long time, on a raw socket (close it to abort it);
    returned once it produced tokens (or, without wait_tokens, once its headers came)."""
    body = json.dumps({"messages": MSG, "max_tokens": 3000, "ignore_eos": True,
                       "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    got = b""
    while (got.count(b"data: ") < 3) if wait_tokens else (b"\r\n\r\n" not in got):
        d = s.recv(65536)
        assert d, got
        got += d
    return s


def test_queue_full_gives_503(queue1):
    """--max-num-seqs 1 --max-waiting 1: while one request runs and one waits, the others get
    503 with Retry-After (the server is overloaded: no caller's rate limit, so not a 429); once
    the queue moves they are served again."""
    s = start_long_stream(queue1)
    results = []
    try:
        def one():
            results.append(queue1.post_json(C, {"messages": MSG, "max_tokens": 2}))
        threads = [threading.Thread(target=one) for _ in range(5)]
        for t in threads:
            t.start()
        # The 503s come at once; the accepted one waits until the stream above is cut.
        deadline = time.monotonic() + 20
        while len(results) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(results) == 4, results
        for st, headers, body_ in results:
            assert st == 503, body_
            assert headers.get("retry-after") == "1"
            assert_error_body(body_, status=503, type_="server_error", param=None)
    finally:
        s.close()  # abort the long stream: the waiting request gets its turn
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 5
    st, _, body_ = results[4]
    assert st == 200, body_


def aborts(srv):
    m = srv.metrics()
    return (metric(m, "pagoda_requests_aborted_total"),
            metric(m, "pagoda_request_success_total", finished_reason="abort"))


def test_more_prompts_than_the_queue_holds_is_400(queue1):
    """--max-waiting 1: a completions request of three prompts (three engine requests that
    would all wait at once) can never be admitted, idle server or not: a 400 naming "prompt"
    that says why — not a 503 whose Retry-After would have the client retry forever — and
    no abort in the metrics."""
    a0 = aborts(queue1)
    for stream in (False, True):
        st, headers, body_ = queue1.post_json(P, {"prompt": ["a", "b", "c"],
                                                  "max_tokens": 2, "stream": stream})
        assert st == 400, body_
        assert "retry-after" not in headers
        assert_error_body(body_, status=400, param="prompt", contains="max_waiting")
    # As many prompts as may wait is fine.
    st, _, body_ = queue1.post_json(P, {"prompt": ["a"], "max_tokens": 2})
    assert st == 200, body_
    time.sleep(0.3)
    assert aborts(queue1) == a0


def test_aborted_multi_prompt_request_counts_once(srv):
    """A streamed completions request of two prompts with n=2 (two engine requests, four
    choices) cut by its client is one aborted request in the metrics."""
    a0 = aborts(srv)
    body = json.dumps({"prompt": ["Once upon a time", "Hello"], "n": 2, "max_tokens": 3000,
                       "ignore_eos": True, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        got = b""
        while got.count(b"data: ") < 8:
            d = s.recv(65536)
            assert d, got
            got += d
    finally:
        s.close()
    poll(lambda: aborts(srv) != a0, timeout=10, msg="the abort was not counted")
    time.sleep(0.3)
    assert aborts(srv) == (a0[0] + 1, a0[1] + 1)


@pytest.fixture(scope="module")
def queue2(start_server):
    return start_server("--max-waiting", "2", "--max-num-seqs", "1")


def test_queue_full_multi_prompt(queue2):
    """--max-waiting 2, one request running and one waiting: a completions request of two
    prompts does not fit now, so it is 503 with Retry-After, refused whole — it was never
    admitted, so it is no abort (requests_aborted_total, request_success_total{abort}) — and
    the queue is not left holding part of it: once the others end, requests are served."""
    s = start_long_stream(queue2)
    w = start_long_stream(queue2, wait_tokens=False)
    try:
        poll(lambda: metric(queue2.metrics(), "pagoda_num_requests_waiting") == 1, timeout=10,
             msg="the second stream never waited")
        a0 = aborts(queue2)
        for stream in (False, True):
            st, headers, body_ = queue2.post_json(P, {"prompt": ["a", "b"],
                                                      "max_tokens": 2, "stream": stream})
            assert st == 503, body_
            assert headers.get("retry-after") == "1"
            assert_error_body(body_, status=503)
        time.sleep(0.5)  # an abort would be counted as soon as the scheduler answers it
        assert aborts(queue2) == a0
    finally:
        s.close()
        w.close()

    def served():
        st, _, body_ = queue2.post_json(P, {"prompt": ["a", "b"], "max_tokens": 2})
        assert st in (200, 503), body_
        return st == 200
    poll(served, timeout=30, interval=0.2, msg="the queue never accepted a request again")
    poll(lambda: metric(queue2.metrics(), "pagoda_num_requests_waiting") == 0 and
         metric(queue2.metrics(), "pagoda_num_requests_running") == 0, timeout=10,
         msg="requests left behind")
    # The two streams cut above are the only aborts.
    poll(lambda: aborts(queue2) == (a0[0] + 2, a0[1] + 2), timeout=10,
         msg="aborts not counted once per request")


def test_servers_survived(srv, small, keyed, queue1, queue2):
    for s in (srv, small, keyed, queue1, queue2):
        assert s.alive(), s.log()
        st, _, body = s.request("GET", "/health")
        assert (st, json.loads(body)) == (200, {"status": "ready"})
    # And still generate.
    st, _, body = srv.post_json(C, chat(temperature=0))
    assert st == 200 and body["choices"][0]["message"]["content"]


def test_matrix_is_big_enough():
    assert len(CASES) >= 25

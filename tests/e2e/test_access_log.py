"""The access log: one logfmt line on stderr per request as it ends — what was asked and
answered, and for a completion its id, tokens, time to the first token and how it ended, the
same numbers the response's usage gives (through the openai SDK) — also for answers the transport
gives itself (413), for a stream whose client left, and for a path with control bytes (still one
line); a client's X-Request-Id echoed and logged; none with --no-access-log.
"""
import json
import pathlib
import re
import socket
import time

import pytest

from pagoda_e2e import openai_client, poll, read_response, send_chunked

LINE = re.compile(r"^pagoda serve: access (.*)$")
MSG = [{"role": "user", "content": "Name three colors."}]


def access_lines(srv):
    text = pathlib.Path(srv.log_path).read_text(errors="replace")
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            out.append(dict(kv.split("=", 1) for kv in m.group(1).split(" ")))
    return out


def wait_line(srv, pred, msg):
    found = []

    def check():
        found[:] = [x for x in access_lines(srv) if pred(x)]
        return found
    poll(check, timeout=20, msg=msg)
    assert len(found) == 1, found
    return found[0]


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server("--max-body-mb", "1")


def test_plain_route(srv):
    st, _, _ = srv.request("GET", "/v1/models")
    assert st == 200
    line = wait_line(srv, lambda x: x["path"] == "/v1/models", "no line for GET /v1/models")
    assert line["method"] == "GET" and line["status"] == "200" and line["end"] == "completed"
    assert re.fullmatch(r"127\.0\.0\.1:\d+", line["remote"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["ts"])
    assert int(line["ms"]) >= 0
    assert "id" not in line and "tenant" not in line


def served_name(srv):
    return json.loads(srv.request("GET", "/v1/models")[2])["data"][0]["id"]


def test_completion_numbers_equal_its_usage(srv):
    client = openai_client(srv)
    for stream in (False, True):
        kw = dict(model=served_name(srv), messages=MSG, max_tokens=9, temperature=0)
        if stream:
            chunks = list(client.chat.completions.create(
                stream=True, stream_options={"include_usage": True}, **kw))
            rid, usage = chunks[0].id, chunks[-1].usage
        else:
            r = client.chat.completions.create(**kw)
            rid, usage = r.id, r.usage
        line = wait_line(srv, lambda x: x.get("id") == rid, f"no line for {rid}")
        assert line["method"] == "POST" and line["path"] == "/v1/chat/completions"
        assert line["status"] == "200" and line["end"] == "completed"
        assert int(line["prompt_tokens"]) == usage.prompt_tokens
        assert int(line["completion_tokens"]) == usage.completion_tokens == 9
        assert int(line["cached_tokens"]) == usage.prompt_tokens_details.cached_tokens
        assert line["finish"] == "length"
        assert 0 <= int(line["ttft_ms"]) <= int(line["ms"])


def test_client_gone_mid_stream(srv):
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 4000, "stream": True,
                       "ignore_eos": True}).encode()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while got.count(b"data: ") < 6:
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk
        rid = re.search(rb'"id":"(cmpl-[0-9a-f]+)"', got).group(1).decode()
    line = wait_line(srv, lambda x: x.get("id") == rid, f"no line for {rid}")
    assert line["status"] == "200" and line["end"] == "client_gone"
    assert line["finish"] == "abort"
    assert 5 <= int(line["completion_tokens"]) < 4000
    assert "cached_tokens" not in line  # the engine had not finished it yet


def test_transport_answers_and_odd_paths_are_one_line(srv):
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n")
        assert read_response(s)[0] == 413
    wait_line(srv, lambda x: x["status"] == "413" and x["path"] == "/v1/completions",
              "no line for the 413")
    # A chunked body past the limit: answered on the socket behind libmicrohttpd's back.
    payload = b"x" * (3 << 19)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                  b"chunked\r\n\r\n")
        send_chunked(s, payload)  # the server answers and closes before reading it all
        assert read_response(s)[0] == 413
    wait_line(srv, lambda x: x["status"] == "413" and x["path"] == "/v1/chat/completions",
              "no line for the chunked 413")
    st, _, _ = srv.request("GET", "/odd%0Apath%20with%22quote")
    assert st == 404
    wait_line(srv, lambda x: x["path"] == "/odd%0Apath%20with%22quote", "no line for the path")
    text = pathlib.Path(srv.log_path).read_text(errors="replace")
    assert "\npath with" not in text


def test_request_id_comes_back_and_is_logged(srv):
    """A client's X-Request-Id (a proxy's trace id) is echoed on whatever answer it gets — a
    route's, an error, a stream, the transport's own 413 — and logged; one that is not a
    printable word is ignored."""
    for method, path, body, status in (("GET", "/v1/models", None, 200),
                                       ("GET", "/nope", None, 404)):
        st, h, _ = srv.request(method, path, body, {"X-Request-Id": f"trace-{status}"})
        assert st == status and h["x-request-id"] == f"trace-{status}"
        wait_line(srv, lambda x: x.get("request_id") == f"trace-{status}",
                  f"no line with request_id=trace-{status}")
    body = json.dumps({"messages": MSG, "max_tokens": 3, "stream": True}).encode()
    st, h, raw = srv.request("POST", "/v1/chat/completions", body,
                             {"Content-Type": "application/json", "X-Request-Id": "req.7_a-Z"})
    assert st == 200 and h["x-request-id"] == "req.7_a-Z"
    line = wait_line(srv, lambda x: x.get("request_id") == "req.7_a-Z", "no stream line")
    assert line["id"].startswith("chatcmpl-") and line["finish"] == "length"
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: big-1\r\n"
                  b"Content-Length: 99999999\r\n\r\n")
        st, h, _ = read_response(s)
    assert st == 413 and h["x-request-id"] == "big-1"
    for bad in ("two words", "x" * 129):
        st, h, _ = srv.request("GET", "/v1/models", None, {"X-Request-Id": bad})
        assert st == 200 and "x-request-id" not in h


def test_no_access_log(start_server):
    s = start_server("--no-access-log")
    assert s.request("GET", "/v1/models")[0] == 200
    time.sleep(0.3)
    assert access_lines(s) == []

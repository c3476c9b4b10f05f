"""Many streams at once: 32 concurrent SDK streams each equal their own solo greedy run (no
cross-talk between sequences batched together), and 100 streams cut by the client half-way are
all aborted, their KV blocks all return to the pool, and the server still answers correctly.
"""
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pagoda_e2e import metric, openai_client, poll

N_STREAMS = 32
N_CUT = 100
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server()


@pytest.fixture(scope="module")
def model_name(srv):
    return json.loads(srv.request("GET", "/v1/models")[2])["data"][0]["id"]


def prompt(i):
    topics = ["the sea", "a cat", "the moon", "bread", "a train", "winter", "music", "a river"]
    return [{"role": "user",
             "content": f"In one sentence, tell me fact number {i} about {topics[i % 8]}."}]


def test_32_concurrent_streams_match_solo_runs(srv, model_name):
    client = openai_client(srv)
    solo = []
    for i in range(N_STREAMS):
        r = client.chat.completions.create(model=model_name, messages=prompt(i),
                                           max_tokens=MAX_TOKENS, temperature=0)
        solo.append((r.choices[0].message.content, r.choices[0].finish_reason))
    assert len({t for t, _ in solo}) > N_STREAMS // 2, "prompts should give different answers"

    running_seen = []

    def stream(i):
        text, finish = "", None
        s = client.chat.completions.create(model=model_name, messages=prompt(i),
                                           max_tokens=MAX_TOKENS, temperature=0, stream=True)
        for ch in s:
            for c in ch.choices:
                assert c.index == 0
                text += c.delta.content or ""
                finish = c.finish_reason or finish
        return text, finish

    def watch():
        # Sample the running gauge while the streams run: they must really share batches.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not done:
            running_seen.append(metric(srv.metrics(), "pagoda_num_requests_running"))
            time.sleep(0.05)

    done = False
    with ThreadPoolExecutor(N_STREAMS + 1) as ex:
        w = ex.submit(watch)
        futs = [ex.submit(stream, i) for i in range(N_STREAMS)]
        results = [f.result(timeout=180) for f in futs]
        done = True
        w.result(timeout=70)
    for i, (got, want) in enumerate(zip(results, solo)):
        assert got == want, f"stream {i}: {got!r} != solo {want!r}"
    assert max(running_seen, default=0) > 1, f"the streams never ran together: {running_seen}"


def open_and_cut(port, model_name, i, n_events=3, timeout=60):
    """POST a long streamed chat on a raw socket, read until `n_events` data events came, then
    close the socket. Returns the number of events seen."""
    body = json.dumps({"model": model_name, "messages": prompt(i), "max_tokens": 4000,
                       "ignore_eos": True, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body))
        got = b""
        while got.count(b"data: ") < n_events:
            d = s.recv(65536)
            assert d, f"stream {i} ended early: {got[-300:]!r}"
            got += d
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
        assert b"[DONE]" not in got
        return got.count(b"data: ")
    finally:
        s.close()


def test_100_cut_streams_are_aborted_and_blocks_return(srv, model_name, generate):
    before = srv.metrics()
    aborted0 = metric(before, "pagoda_requests_aborted_total")
    abort_reason0 = metric(before, "pagoda_request_success_total", finished_reason="abort")
    with ThreadPoolExecutor(10) as ex:
        counts = list(ex.map(lambda i: open_and_cut(srv.port, model_name, i), range(N_CUT)))
    assert len(counts) == N_CUT and min(counts) >= 3

    def state():  # (aborted since, running, waiting, KV usage)
        m = srv.metrics()
        return (metric(m, "pagoda_requests_aborted_total") - aborted0,
                metric(m, "pagoda_num_requests_running"),
                metric(m, "pagoda_num_requests_waiting"),
                metric(m, "pagoda_kv_cache_usage_perc"))
    try:
        poll(lambda: state() == (N_CUT, 0, 0, 0), timeout=30, interval=0.1)
    except AssertionError:
        raise AssertionError(f"(aborted, running, waiting, kv usage) = {state()}, not "
                             f"({N_CUT}, 0, 0, 0)") from None
    # Exactly 100: nothing counted twice later.
    time.sleep(0.3)
    m = srv.metrics()
    assert metric(m, "pagoda_requests_aborted_total") - aborted0 == N_CUT
    # vLLM counts them as finished too, with finished_reason="abort".
    assert metric(m, "pagoda_request_success_total", finished_reason="abort") - abort_reason0 \
        == N_CUT

    # The server still answers, correctly.
    client = openai_client(srv)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    r = client.chat.completions.create(model=model_name, messages=msgs, max_tokens=10,
                                       temperature=0)
    assert r.choices[0].message.content == generate(chat=msgs, max_tokens=10)["text"]
    assert srv.request("GET", "/health")[0] == 200


# ---- other ways for a client to leave ----------------------------------------------------------

@pytest.fixture(scope="module")
def one_seq(start_server):
    """One sequence at a time: a second request waits in the queue."""
    return start_server("--max-num-seqs", "1")


def raw_post(port, body, path="/v1/chat/completions"):
    b = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(b), b))
    return s


def gauges(srv):
    m = srv.metrics()
    return {k: metric(m, "pagoda_" + k) for k in (
        "requests_aborted_total", "num_requests_running", "num_requests_waiting",
        "kv_cache_usage_perc")}


def wait_gauges(srv, timeout=20, **want):
    def ok():
        g = gauges(srv)
        return g if all(g[k] == v for k, v in want.items()) else False
    return poll(ok, timeout=timeout, interval=0.05, msg=f"metrics never reached {want}")


LONG = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 4000,
        "ignore_eos": True}


@pytest.mark.parametrize("how", ["close", "reset"])
def test_client_leaves_non_streamed_request(one_seq, how):
    """A non-streamed request waits for its whole answer with its connection suspended: a
    client that closes or resets it is noticed at once (a close looks like a half-close until
    the server writes: it sends an interim 100 Continue, which a closed socket answers with a
    reset)."""
    a0 = gauges(one_seq)["requests_aborted_total"]
    s = raw_post(one_seq.port, LONG)
    try:
        wait_gauges(one_seq, num_requests_running=1)
        if how == "reset":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        s.close()
        wait_gauges(one_seq, requests_aborted_total=a0 + 1, num_requests_running=0,
                    kv_cache_usage_perc=0)
    finally:
        s.close()


def read_all(s, timeout=60):
    s.settimeout(timeout)
    got = b""
    while True:
        d = s.recv(65536)
        if not d:
            return got
        got += d


def final_response(raw):
    """(status, head, body) of the final response in `raw`, after any 1xx interim ones."""
    while True:
        head, _, rest = raw.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if status >= 200:
            return status, head, rest
        raw = rest


@pytest.mark.parametrize("stream", [False, True])
def test_half_closed_client_gets_its_answer(one_seq, stream):
    """A client that sends its request and then half-closes (shutdown(SHUT_WR), like `nc -N`)
    still gets the whole answer — a JSON body, or a whole stream to `data: [DONE]` and the
    last chunk — and nothing is counted as aborted. (A non-streamed answer may be preceded by
    an interim 100 Continue.)"""
    a0 = gauges(one_seq)["requests_aborted_total"]
    s = raw_post(one_seq.port, {"messages": [{"role": "user", "content": "Hi"}],
                                "max_tokens": 40, "ignore_eos": True, "stream": stream})
    try:
        s.shutdown(socket.SHUT_WR)
        raw = read_all(s)
    finally:
        s.close()
    status, head, body = final_response(raw)
    assert status == 200, raw[:500]
    if stream:
        assert b"transfer-encoding: chunked" in head.lower()
        assert body.endswith(b"0\r\n\r\n"), body[-200:]
        assert b"data: [DONE]" in body
        assert b'"finish_reason":"length"' in body
    else:
        assert json.loads(body)["usage"]["completion_tokens"] == 40
    assert gauges(one_seq)["requests_aborted_total"] == a0


def test_half_closed_then_gone_is_noticed(one_seq):
    """A client that half-closes while its long non-streamed request runs, then closes without
    reading (the interim 100 Continue is left unread, so its close is a reset), is noticed at
    once: the request is aborted and its blocks go back."""
    a0 = gauges(one_seq)["requests_aborted_total"]
    s = raw_post(one_seq.port, LONG)
    try:
        wait_gauges(one_seq, num_requests_running=1)
        s.shutdown(socket.SHUT_WR)
        time.sleep(0.3)
        assert gauges(one_seq)["num_requests_running"] == 1  # a half-close is no abort
        s.close()
        wait_gauges(one_seq, requests_aborted_total=a0 + 1, num_requests_running=0,
                    kv_cache_usage_perc=0)
    finally:
        s.close()


@pytest.mark.parametrize("stream", [True, False])
def test_client_leaves_while_queued(one_seq, stream):
    """A request waiting behind another one is aborted when its client leaves; the running
    one goes on."""
    a0 = gauges(one_seq)["requests_aborted_total"]
    first = raw_post(one_seq.port, dict(LONG, stream=True))
    try:
        wait_gauges(one_seq, num_requests_running=1)
        second = raw_post(one_seq.port, dict(LONG, stream=stream))
        wait_gauges(one_seq, num_requests_running=1, num_requests_waiting=1)
        second.close()
        wait_gauges(one_seq, requests_aborted_total=a0 + 1, num_requests_running=1,
                    num_requests_waiting=0)
        first.settimeout(10)
        assert first.recv(65536)  # the first stream still flows
    finally:
        first.close()
    wait_gauges(one_seq, requests_aborted_total=a0 + 2, num_requests_running=0,
                num_requests_waiting=0, kv_cache_usage_perc=0)

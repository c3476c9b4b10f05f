"""GET /metrics: Prometheus' own checker (promtool check metrics), the metric names the issue
lists (vLLM's), a model_name label on every series, and counters that move with the requests
(token totals equal to the usage the responses reported).

The default prefix is "pagoda_", so promtool must find nothing at all. promtool 2.42 lints ':' in
metric names (colons are meant for recording rules): with --metrics-prefix "pagoda:" (vLLM's
"vllm:" style) the colon lint must be the only finding.
"""
import json
import re
import shutil
import socket
import subprocess

import pytest

from pagoda_e2e import metric, openai_client, parse_metrics, poll

PROMTOOL = shutil.which("promtool")
NAME = "smol-metrics"

HISTOGRAMS = ["time_to_first_token_seconds", "inter_token_latency_seconds",
              "e2e_request_latency_seconds", "request_queue_time_seconds",
              "request_prompt_tokens", "request_generation_tokens"]
COUNTERS = ["prompt_tokens_total", "generation_tokens_total", "request_success_total",
            "num_preemptions_total", "prefix_cache_queries_total", "prefix_cache_hits_total",
            "requests_aborted_total", "http_requests_total"]
GAUGES = ["num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "build_info",
          "responses_stored", "responses_store_bytes"]


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server("--served-model-name", NAME)


@pytest.fixture(scope="module")
def srv_colon(start_server):
    return start_server("--metrics-prefix", "pagoda:")


def exercise(srv, model):
    """A few requests of each kind, so every family has samples."""
    c = openai_client(srv)
    msgs = [{"role": "user", "content": "Say hello."}]
    c.chat.completions.create(model=model, messages=msgs, max_tokens=4, temperature=0)
    for _ in c.chat.completions.create(model=model, messages=msgs, max_tokens=4, stream=True):
        pass
    c.completions.create(model=model, prompt="One, two,", max_tokens=3)


def promtool(text):
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(), capture_output=True,
                       timeout=60)
    out = (p.stdout + p.stderr).decode()
    return p.returncode, [line for line in out.splitlines() if line.strip()]


@pytest.mark.skipif(not PROMTOOL, reason="promtool is needed (apt-get install prometheus)")
def test_promtool_clean_with_default_prefix(srv):
    exercise(srv, NAME)
    text = srv.metrics_text()
    assert "pagoda_time_to_first_token_seconds_bucket" in text
    assert "pagoda:" not in text
    rc, lines = promtool(text)
    assert (rc, lines) == (0, [])


@pytest.mark.skipif(not PROMTOOL, reason="promtool is needed (apt-get install prometheus)")
def test_promtool_colon_prefix_only_colon_lint(srv_colon):
    model = json.loads(srv_colon.request("GET", "/v1/models")[2])["data"][0]["id"]
    exercise(srv_colon, model)
    text = srv_colon.metrics_text()
    assert "pagoda:time_to_first_token_seconds_bucket" in text
    rc, lines = promtool(text)
    families = {m.group(1) for m in re.finditer(r"^# TYPE (\S+) ", text, re.M)}
    colon = re.compile(r"^(pagoda:[a-z0-9_]+) metric names should not contain ':'$")
    others = [line for line in lines if not colon.match(line)]
    assert others == [], others
    # One colon finding per family, and nothing else: a real format problem would show here.
    assert {colon.match(line).group(1) for line in lines} == families
    assert rc != 0  # promtool reports lint problems with a non-zero status


def test_content_type_and_names(srv):
    exercise(srv, NAME)
    st, headers, raw = srv.request("GET", "/metrics")
    assert st == 200
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    text = raw.decode()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    for h in HISTOGRAMS:
        assert types.get("pagoda_" + h) == "histogram", h
    for c in COUNTERS:
        assert types.get("pagoda_" + c) == "counter", c
    for g in GAUGES:
        assert types.get("pagoda_" + g) == "gauge", g
    helps = set(re.findall(r"^# HELP (\S+) \S", text, re.M))
    assert set(types) <= helps
    samples = parse_metrics(text)
    for (name, labels) in samples:
        assert ("model_name", NAME) in labels, (name, labels)
    assert metric(samples, "pagoda_build_info") == 1
    (bi,) = [ls for (n, ls) in samples if n == "pagoda_build_info"]
    assert dict(bi).get("version")
    for reason in ("stop", "length", "abort"):
        metric(samples, "pagoda_request_success_total", finished_reason=reason)
    for h in HISTOGRAMS:
        buckets = sorted(((float(dict(ls)["le"]), v) for (n, ls), v in samples.items()
                          if n == f"pagoda_{h}_bucket"), key=lambda x: x[0])
        assert buckets and buckets[-1][0] == float("inf")
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), h  # cumulative
        assert buckets[-1][1] == metric(samples, f"pagoda_{h}_count")
        assert metric(samples, f"pagoda_{h}_count") > 0, h


def test_counters_follow_requests(srv):
    """After a set of requests, the counters rose by what the responses reported."""
    c = openai_client(srv)
    before = srv.metrics()
    usage = []  # (prompt, completion, cached, finish reasons)
    msgs = [{"role": "user", "content": "What is two plus two?"}]
    r = c.chat.completions.create(model=NAME, messages=msgs, max_tokens=6, temperature=0)
    usage.append((r.usage, [x.finish_reason for x in r.choices]))
    r = c.chat.completions.create(model=NAME, messages=msgs, max_tokens=5, temperature=0.8,
                                  seed=1, n=2)
    usage.append((r.usage, [x.finish_reason for x in r.choices]))
    r = c.completions.create(model=NAME, prompt="Paris is the capital of", max_tokens=7,
                             temperature=0, extra_body={"ignore_eos": True})
    usage.append((r.usage, [x.finish_reason for x in r.choices]))
    finish, u = None, None
    for ch in c.chat.completions.create(model=NAME, messages=msgs, max_tokens=64, temperature=0,
                                        stream=True, stream_options={"include_usage": True}):
        if ch.usage:
            u = ch.usage
        for x in ch.choices:
            finish = x.finish_reason or finish
    usage.append((u, [finish]))
    n_req = len(usage)
    prompt = sum(x.prompt_tokens for x, _ in usage)
    gen = sum(x.completion_tokens for x, _ in usage)
    cached = sum(x.prompt_tokens_details.cached_tokens if x.prompt_tokens_details else 0
                 for x, _ in usage)
    # A request's finished_reason is its first choice's.
    reasons = [f[0] for _, f in usage]

    def delta(name, **labels):
        return metric(srv.metrics(), name, **labels) - metric(before, name, **labels)

    poll(lambda: delta("pagoda_generation_tokens_total") == gen, timeout=15,
         msg="generation_tokens_total")
    assert delta("pagoda_prompt_tokens_total") == prompt
    assert delta("pagoda_generation_tokens_total") == gen
    assert delta("pagoda_request_prompt_tokens_sum") == prompt
    assert delta("pagoda_request_generation_tokens_sum") == gen
    for h in ("request_prompt_tokens", "request_generation_tokens", "e2e_request_latency_seconds",
              "request_queue_time_seconds", "time_to_first_token_seconds"):
        assert delta(f"pagoda_{h}_count") == n_req, h
    assert delta("pagoda_inter_token_latency_seconds_count") > 0
    for reason in ("stop", "length"):
        assert delta("pagoda_request_success_total", finished_reason=reason) == \
            reasons.count(reason), reason
    assert delta("pagoda_requests_aborted_total") == 0
    assert delta("pagoda_prefix_cache_queries_total") == prompt
    assert delta("pagoda_prefix_cache_hits_total") == cached
    assert cached > 0, "the repeated prompt should hit the prefix cache"
    m = srv.metrics()
    assert metric(m, "pagoda_num_requests_running") == 0
    assert metric(m, "pagoda_num_requests_waiting") == 0
    assert metric(m, "pagoda_kv_cache_usage_perc") == 0


def test_http_requests_by_route_and_status(srv):
    """http_requests_total counts every request as it ends, by method, route (the route's own
    name, "{id}" for a model's; "other" for any unknown path: bounded labels) and status —
    those the server answers before any route too (a 413), and "none" when the client left
    before an answer."""
    before = srv.metrics()
    sends = [("GET", "/v1/models", None, 200), ("GET", "/v1/models/" + NAME, None, 200),
             ("GET", "/v1/models/nope", None, 404), ("GET", "/no/such/" + "x" * 40, None, 404),
             ("GET", "/another/unknown", None, 404), ("PUT", "/v1/models", None, 405),
             ("POST", "/v1/chat/completions", b"{", 400), ("HEAD", "/health", None, 200)]
    for method, path, body, status in sends:
        h = {"Content-Type": "application/json"} if body else {}
        assert srv.request(method, path, body, h)[0] == status, (method, path)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n"
                  b"\r\n")
        assert s.recv(1024).startswith(b"HTTP/1.1 413")
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:  # leaves unanswered
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{")

    def count(samples, method, route, status):
        want = {("method", method), ("route", route), ("status", status)}
        return sum(v for (n, ls), v in samples.items()
                   if n == "pagoda_http_requests_total" and want <= ls)

    def delta(method, route, status):
        return count(srv.metrics(), method, route, status) - count(before, method, route, status)

    poll(lambda: delta("POST", "/v1/completions", "none") == 1, timeout=15,
         msg="the unanswered request was not counted")
    assert delta("GET", "/v1/models", "200") == 1
    assert delta("GET", "/v1/models/{id}", "200") == 1
    assert delta("GET", "/v1/models/{id}", "404") == 1
    assert delta("GET", "other", "404") == 2
    assert delta("PUT", "/v1/models", "405") == 1
    assert delta("POST", "/v1/chat/completions", "400") == 1
    assert delta("HEAD", "/health", "200") == 1
    assert delta("POST", "/v1/completions", "413") == 1
    routes = {dict(ls)["route"] for (n, ls) in srv.metrics() if n == "pagoda_http_requests_total"}
    assert not any("x" * 40 in r or "unknown" in r for r in routes), routes


def test_gauges_while_running(srv):
    """While a long stream runs: num_requests_running 1 and some KV cache in use."""
    import threading
    c = openai_client(srv)
    seen = {}
    stop = threading.Event()

    def run():
        s = c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}],
                                      max_tokens=400, stream=True,
                                      extra_body={"ignore_eos": True})
        for _ in s:
            if stop.is_set():
                s.close()
                return
    t = threading.Thread(target=run)
    t.start()
    try:
        def busy():
            m = srv.metrics()
            if metric(m, "pagoda_num_requests_running") == 1:
                seen["kv"] = metric(m, "pagoda_kv_cache_usage_perc")
                return seen["kv"] > 0
            return False
        poll(busy, timeout=20, interval=0.02, msg="never saw the request running")
        assert 0 < seen["kv"] < 1
    finally:
        stop.set()
        t.join(timeout=60)
    poll(lambda: metric(srv.metrics(), "pagoda_num_requests_running") == 0
         and metric(srv.metrics(), "pagoda_kv_cache_usage_perc") == 0, timeout=20,
         msg="the stream's blocks did not return")

"""The server's life: /health 503 while the model loads, a model that cannot load, settings from
a config file and PAGODA_* environment variables (and their precedence), and graceful shutdown:
SIGTERM during active streams ends each of them cleanly (a finish chunk, or an SSE error event
when --shutdown-timeout cuts it, then `data: [DONE]`, and a complete HTTP response), refuses new
connections, and the process exits 0. A second signal aborts at once.
"""
import http.client as httpclient
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from pagoda_e2e import (assert_error_body, free_port, http, metric, openai_client, poll,
                        sse_events)

MSG = [{"role": "user", "content": "Tell me a long story about a dragon."}]


# ---- loading ---------------------------------------------------------------------------------

def test_health_503_while_loading(start_server):
    """--f32 converts every weight at load, which takes long enough to see the loading state
    (polled from the moment the port is printed)."""
    s = start_server("--f32", wait_ready=False)
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        st, hd, body = http(s.port, "GET", "/health", timeout=30)
        if st != 200:
            # While loading: the API answers 503 too, with an OpenAI error body; both say when
            # to come back (Retry-After), as loading ends by itself.
            assert (st, json.loads(body)) == (503, {"status": "loading"})
            assert hd.get("retry-after") == "1", hd
            # (max_tokens: the load may end between the two requests.)
            cst, chd, cbody = http(s.port, "POST", "/v1/chat/completions",
                                   json.dumps({"messages": MSG, "max_tokens": 1}).encode(),
                                   {"Content-Type": "application/json"}, timeout=30)
            if cst == 503:
                assert_error_body(cbody, status=503, contains="loading")
                assert chd.get("retry-after") == "1", chd
            else:
                assert cst == 200, cbody
            # /metrics answers (503 until the model's metrics exist).
            mst, _, _ = http(s.port, "GET", "/metrics", timeout=30)
            assert mst in (200, 503)
        seen.append(st)
        if st == 200:
            break
        time.sleep(0.005)
    assert seen and seen[-1] == 200, "never ready"
    if seen[0] == 200:
        pytest.skip("the model loaded before the first /health answer (load too fast to see "
                    "the 503 'loading' state on this machine)")
    assert seen[0] == 503
    # Once ready, it serves (f32 weights).
    st, _, body = s.post_json("/v1/chat/completions", {"messages": MSG, "max_tokens": 2})
    assert st == 200, body


def test_warmup_before_ready(start_server):
    """Before it says ready, the server runs a few short sequences (scheduler/offline.h) and
    says so on stderr; none of it shows in the metrics (no request, no token, no prefix-cache
    query) or holds a KV block, and the first request is served as usual. --no-warmup skips it
    and says that instead."""
    s = start_server()
    log = s.log()
    m = re.search(r"pagoda serve: warm-up: 2 runs, 6 steps, 88 tokens in ([0-9.]+) s\n", log)
    assert m, log
    assert log.index("warm-up:") < log.index("ready ("), log
    samples = s.metrics()
    for name in ["prompt_tokens_total", "generation_tokens_total", "request_success_total",
                 "prefix_cache_queries_total", "prefix_cache_hits_total",
                 "kv_cache_usage_perc", "num_requests_running"]:
        assert metric(samples, "pagoda_" + name) == 0, name
    st, _, body = s.post_json("/v1/chat/completions", {"messages": MSG, "max_tokens": 4})
    assert st == 200, body
    usage = body["usage"]
    samples = s.metrics()
    assert metric(samples, "pagoda_prompt_tokens_total") == usage["prompt_tokens"]
    assert metric(samples, "pagoda_prefix_cache_hits_total") == 0
    assert metric(samples, "pagoda_request_success_total") == 1

    s2 = start_server("--no-warmup")
    log2 = s2.log()
    assert "pagoda serve: no warm-up (--no-warmup)\n" in log2, log2
    assert "warm-up:" not in log2
    st, _, body = s2.post_json("/v1/chat/completions", {"messages": MSG, "max_tokens": 4})
    assert st == 200, body


def test_model_that_cannot_load(start_server, tmp_path):
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"this is not a GGUF file" * 100)
    s = start_server("--model", bad, wait_ready=False)
    s.expect_exit = True
    rc = s.proc.wait(timeout=60)
    assert rc == 1
    assert "cannot load" in s.log()


def test_port_in_use(pagoda_bin, model_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        p = subprocess.run([pagoda_bin, "serve", "--model", model_path, "--port", str(port)],
                           capture_output=True, timeout=60)
    assert p.returncode == 1
    assert b"cannot listen" in p.stderr


# ---- configuration ---------------------------------------------------------------------------

def models_of(s, key=None):
    h = {"Authorization": f"Bearer {key}"} if key else {}
    st, _, body = s.request("GET", "/v1/models", headers=h)
    return st, (json.loads(body)["data"][0]["id"] if st == 200 else json.loads(body))


def test_config_file(start_server, model_path, tmp_path):
    port = free_port()
    cfg = tmp_path / "pagoda.json"
    cfg.write_text(json.dumps({"model": model_path, "port": port,
                               "served_model_name": "from-config", "max-num-seqs": 4,
                               "f32": False, "shutdown_timeout": 5}))
    s = start_server("--config", cfg, model=False, port=False)
    assert s.port == port
    assert models_of(s) == (200, "from-config")
    st, _, body = s.post_json("/v1/chat/completions", {"model": "from-config", "messages": MSG,
                                                       "max_tokens": 2})
    assert st == 200 and body["model"] == "from-config"


def test_env_overrides_config_and_flags_override_env(start_server, model_path, tmp_path):
    cfg = tmp_path / "pagoda.json"
    cfg.write_text(json.dumps({"model": model_path, "served_model_name": "from-config",
                               "api_key": "key-from-config", "port": 1}))
    # PAGODA_CONFIG names the file; PAGODA_* env beats the file; flags beat env.
    s = start_server("--served-model-name", "from-flag", model=False, port=False,
                     env={"PAGODA_CONFIG": str(cfg), "PAGODA_PORT": "0",
                          "PAGODA_SERVED_MODEL_NAME": "from-env",
                          "PAGODA_API_KEY": "key-from-env"})
    assert s.port != 1
    assert models_of(s, "key-from-env") == (200, "from-flag")
    st, body = models_of(s, "key-from-config")
    assert st == 401
    assert_error_body(body, status=401, code="invalid_api_key")
    assert models_of(s)[0] == 401


def test_api_key_and_name_from_env(start_server):
    s = start_server(env={"PAGODA_API_KEY": "sk-env", "PAGODA_SERVED_MODEL_NAME": "env-name"})
    assert models_of(s)[0] == 401
    assert models_of(s, "sk-env") == (200, "env-name")
    st, _, body = s.post_json("/v1/chat/completions", {"messages": MSG, "max_tokens": 2},
                              headers={"Authorization": "Bearer sk-env"})
    assert st == 200 and body["model"] == "env-name"


def test_kv_cache_dtype(start_server):
    """f16 (the default) holds twice the KV blocks of f32 in the same --kv-cache-mb; both serve."""
    blocks = {}
    for flags, dtype in (([], "f16"), (["--kv-cache-dtype", "f32"], "f32"),
                         (["--kv-cache-dtype", "f16"], "f16")):
        # (--ctx-size: 64 MiB of f32 blocks hold ~1400 tokens, not the model's 8192)
        s = start_server("--kv-cache-mb", "64", "--ctx-size", "1024", *flags)
        m = re.search(r"(\d+) KV blocks of 16 tokens, (\w+)\)", s.log())
        assert m and m[2] == dtype, s.log()
        blocks.setdefault(dtype, set()).add(int(m[1]))
        st, _, body = s.post_json("/v1/chat/completions", {"messages": MSG, "max_tokens": 4,
                                                           "temperature": 0})
        assert st == 200 and body["usage"]["completion_tokens"] == 4, body
        s.stop()
    assert len(blocks["f16"]) == 1
    (n16,), (n32,) = blocks["f16"], blocks["f32"]
    assert n32 > 16 and abs(n16 - 2 * n32) <= 1, blocks


@pytest.mark.parametrize("args,env,config,msg", [
    ([], {"PAGODA_PORT": "abc"}, None, "PAGODA_PORT"),
    (["--port", "-1"], {}, None, "port"),
    (["--port", "70000"], {}, None, "out of range"),
    (["--bogus"], {}, None, "--bogus"),
    ([], {}, {"no_such_setting": 1}, "no_such_setting"),
    ([], {}, {"port": "x"}, "port"),
    ([], {}, "{not json", "config"),
    (["--kv-cache-dtype", "fp8"], {}, None, "use auto, f16 or f32"),
    (["--device", "cuda:x"], {}, None, "cuda:N wants a device index 0 to 63"),
    ([], {"PAGODA_DEVICE": "gpu"}, None, "use auto, cpu, cuda or cuda:N"),
    (["--gpu-weights", "fp8"], {}, None, "--gpu-weights: GPU weights 'fp8': use auto, bf16, q8_0 or q4"),
    ([], {"PAGODA_GPU_WEIGHTS": "q4_0"}, None, "use auto, bf16, q8_0 or q4"),
    ([], {"PAGODA_KV_CACHE_DTYPE": "int4"}, None, "kv-cache-dtype"),
    # 0 would silently mean "the default" for these: refused, whatever the source.
    (["--block-size", "0"], {}, None, "--block-size must be at least 1"),
    (["--max-num-seqs", "0"], {}, None, "--max-num-seqs must be at least 1"),
    ([], {"PAGODA_MAX_WAITING": "0"}, None, "--max-waiting must be at least 1"),
    ([], {}, {"kv_cache_mb": 0}, "--kv-cache-mb must be at least 1"),
    (["--max-num-batched-tokens=0"], {}, None, "--max-num-batched-tokens must be at least 1"),
    (["--allowed-origins", "http://localhost:3000/"], {}, None,
     "'http://localhost:3000/' is not an origin"),
    ([], {"PAGODA_ALLOWED_ORIGINS": "localhost:3000"}, None, "'localhost:3000' is not an origin"),
])
def test_bad_settings_exit_2(pagoda_bin, model_path, tmp_path, args, env, config, msg):
    argv = [pagoda_bin, "serve", "--model", model_path, *args]
    if config is not None:
        cfg = tmp_path / "bad.json"
        cfg.write_text(config if isinstance(config, str) else json.dumps(config))
        argv += ["--config", str(cfg)]
    e = {k: v for k, v in os.environ.items() if not k.startswith("PAGODA_")}
    e.update(env)
    p = subprocess.run(argv, capture_output=True, timeout=60, env=e)
    assert p.returncode == 2, p.stderr
    assert msg in p.stderr.decode(), p.stderr
    assert p.stdout == b""  # never started listening


@pytest.mark.parametrize("args,want", [
    (["--kv-cache-mb", "1"],
     ["whole context (8192 tokens, the model's)", "--kv-cache-mb 1 gives 2 KV blocks of 16 tokens",
      "room for 17 tokens", "8192 tokens need 513 blocks", "raise --kv-cache-mb to at least 181",
      "set --ctx-size to 17 or less"]),
    (["--kv-cache-mb", "1", "--ctx-size", "64"],
     ["whole context (64 tokens, --ctx-size)", "64 tokens need 5 blocks",
      "raise --kv-cache-mb to at least 2", "lower --ctx-size to 17 or less"]),
])
def test_kv_cache_too_small_refused_at_start(start_server, args, want):
    """A KV pool that cannot hold one request of the whole context (the model's, or
    --ctx-size) would refuse every long request forever: the server refuses to start, exit 1,
    with the arithmetic."""
    s = start_server(*args, wait_ready=False)
    s.expect_exit = True
    rc = s.proc.wait(timeout=60)
    log = s.log()
    assert rc == 1, log
    for w in want:
        assert w in log, (w, log)
    assert "ready" not in log


def test_clamped_flags_say_so(start_server):
    """Flags the engine lowers to what it can do are not silent: a note on stderr, and the
    server serves with the lowered value."""
    s = start_server("--ctx-size", "100000", "--max-num-seqs", "100000")
    log = s.log()
    assert "note: --ctx-size 100000 is more than the model's context; using 8192" in log, log
    assert "note: --max-num-seqs 100000 is more than" in log, log
    st, _, body = s.request("GET", "/v1/models")
    assert st == 200 and json.loads(body)["data"][0]["max_model_len"] == 8192


def test_serve_help_columns_align(pagoda_bin):
    """Every help text of `pagoda serve --help` starts in one column (a flag too long for it
    gets its help on the next line), and no line is longer than 100 characters."""
    p = subprocess.run([pagoda_bin, "serve", "--help"], capture_output=True, timeout=30)
    assert p.returncode == 0
    lines = p.stdout.decode().splitlines()
    col = None
    n_flags = 0
    for i, line in enumerate(lines):
        assert len(line) <= 100, line
        if not line.startswith("  --"):
            continue
        n_flags += 1
        flag, sep, rest = line[2:].partition("  ")
        if not sep:  # too long for the column: its help is the next line
            nxt = lines[i + 1]
            start = len(nxt) - len(nxt.lstrip(" "))
        else:
            start = len(line) - len(rest.lstrip(" "))
        col = col if col is not None else start
        assert start == col, (line, start, col)
    assert n_flags >= 30
    # Continuation lines of a wrapped help start in the same column.
    for line in lines:
        if line.startswith(" " * col) and line.strip():
            assert line[col] != " ", line


# ---- graceful shutdown -----------------------------------------------------------------------

class Stream(threading.Thread):
    """A streamed chat read with http.client in a thread; `started` is set once `n_events` data
    events arrived; `raw` is the whole body, `error` what went wrong reading it."""

    def __init__(self, port, max_tokens, n_events=2, include_usage=True):
        super().__init__(daemon=True)
        self.port, self.max_tokens, self.n_events = port, max_tokens, n_events
        self.include_usage = include_usage
        self.started = threading.Event()
        self.raw, self.error, self.status, self.ended_at = b"", None, None, None
        self.start()

    def run(self):
        body = {"messages": MSG, "max_tokens": self.max_tokens, "ignore_eos": True,
                "stream": True}
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        conn = None
        try:
            conn = httpclient.HTTPConnection("127.0.0.1", self.port, timeout=120)
            conn.request("POST", "/v1/chat/completions", json.dumps(body).encode(),
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            self.status = r.status
            while True:
                d = r.read1(65536)  # chunked decoding; raises IncompleteRead on a cut body
                if not d:
                    break
                self.raw += d
                if self.raw.count(b"data: ") >= self.n_events:
                    self.started.set()
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = e
        finally:
            self.ended_at = time.monotonic()
            self.started.set()
            if conn:
                conn.close()

    def events(self):
        data, _ = sse_events(self.raw)
        assert data[-1] == "[DONE]"
        assert self.raw.endswith(b"data: [DONE]\n\n") and self.raw.count(b"[DONE]") == 1
        return [json.loads(d) for d in data[:-1]]


def start_streams(srv, n, max_tokens):
    streams = [Stream(srv.port, max_tokens) for _ in range(n)]
    for s in streams:
        assert s.started.wait(60), "stream did not start"
        assert s.error is None and s.status == 200, (s.error, s.status, s.raw[:300])
    return streams


def assert_refuses_connections(port):
    with pytest.raises(OSError):
        http(port, "GET", "/health", timeout=5)


def check_finished(s):
    """A stream that ended normally: content, finish chunk, usage chunk, [DONE]."""
    assert s.error is None, s.error
    ev = s.events()
    assert not any("error" in e for e in ev), ev[-3:]
    assert ev[-1]["choices"] == [] and ev[-1]["usage"]["completion_tokens"] == s.max_tokens
    assert ev[-2]["choices"][0]["finish_reason"] == "length"


def check_cut(s):
    """A stream cut by the shutdown: some content, then an SSE error event, then [DONE]."""
    assert s.error is None, s.error
    ev = s.events()
    assert "error" in ev[-1], ev[-2:]
    e = assert_error_body(ev[-1], status=503)
    assert "shutting down" in e["message"]
    assert not any(c.get("choices") and c["choices"][0].get("finish_reason") for c in ev[:-1])
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in ev[:-1] if
                   c.get("choices"))
    assert text


def test_sigterm_streams_finish_within_timeout(start_server):
    srv = start_server("--shutdown-timeout", "20")
    streams = start_streams(srv, 4, max_tokens=24)
    t0 = time.monotonic()
    srv.terminate()
    for s in streams:
        s.join(timeout=60)
        assert not s.is_alive()
    assert_refuses_connections(srv.port)
    for s in streams:
        check_finished(s)
    assert srv.proc.wait(timeout=30) == 0
    assert time.monotonic() - t0 < 20, "it waited for the whole shutdown timeout"


def test_sigterm_streams_cut_by_timeout(start_server):
    srv = start_server("--shutdown-timeout", "2")
    streams = start_streams(srv, 4, max_tokens=5000)
    t0 = time.monotonic()
    srv.terminate()
    time.sleep(0.3)
    assert all(s.is_alive() for s in streams), "streams ended before the shutdown timeout"
    assert_refuses_connections(srv.port)
    for s in streams:
        s.join(timeout=60)
        assert not s.is_alive()
    for s in streams:
        assert 1.5 <= s.ended_at - t0 <= 15, s.ended_at - t0
        check_cut(s)
    assert srv.proc.wait(timeout=30) == 0
    assert "aborting 4 in-flight requests" in srv.log()


def test_sigterm_mixed_streams(start_server):
    """Two short streams finish, two long ones are cut at the deadline (10 s: the short ones'
    last 10 tokens take seconds on a sanitizer build; 5000 tokens take minutes on any)."""
    srv = start_server("--shutdown-timeout", "10")
    long_ = start_streams(srv, 2, max_tokens=5000)
    short = start_streams(srv, 2, max_tokens=12)
    srv.terminate()
    for s in short + long_:
        s.join(timeout=60)
        assert not s.is_alive()
    for s in short:
        check_finished(s)
    for s in long_:
        check_cut(s)
    assert srv.proc.wait(timeout=30) == 0


def test_second_signal_aborts_at_once(start_server):
    srv = start_server("--shutdown-timeout", "60")
    streams = start_streams(srv, 4, max_tokens=5000)
    srv.terminate()
    time.sleep(0.5)
    assert all(s.is_alive() for s in streams)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGINT)
    for s in streams:
        s.join(timeout=30)
        assert not s.is_alive()
        check_cut(s)
    assert srv.proc.wait(timeout=30) == 0
    assert time.monotonic() - t0 < 10


def test_sigterm_with_pending_non_streamed_request(start_server):
    """A non-streamed request cut by the shutdown gets a 503 error body."""
    srv = start_server("--shutdown-timeout", "1")
    result = {}

    def run():
        result["r"] = srv.post_json("/v1/chat/completions",
                                    {"messages": MSG, "max_tokens": 5000, "ignore_eos": True})
    t = threading.Thread(target=run)
    t.start()
    poll(lambda: metric(srv.metrics(), "pagoda_num_requests_running") == 1, timeout=20,
         msg="the request never ran")
    srv.terminate()
    t.join(timeout=60)
    st, _, body = result["r"]
    assert st == 503
    assert_error_body(body, status=503, contains="shutting down")
    assert srv.proc.wait(timeout=30) == 0


def test_request_still_tokenizing_at_the_deadline(start_server):
    """A request still being tokenized when --shutdown-timeout expires must not start after
    the in-flight requests were aborted (it would run to its end and hold the shutdown up).
    With a one-thread libuv pool busy tokenizing two huge prompts (refused afterwards: over the
    context), a streamed request waits for the tokenizer past the 1 s deadline; it then gets
    a 503 (or, on a machine fast enough to tokenize before the deadline, its stream is cut
    like the others)."""
    srv = start_server("--shutdown-timeout", "1", "--max-body-mb", "64",
                       env={"UV_THREADPOOL_SIZE": "1"})
    table = bytes((b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJ      ,."[i % 44]) for i in range(256))
    big = b'{"max_tokens": 1, "prompt": "' + os.urandom(40 << 20).translate(table) + b'"}'
    results = {}

    def post(key, body):
        try:
            results[key] = http(srv.port, "POST", "/v1/completions", body,
                                {"Content-Type": "application/json"}, timeout=120)
        except OSError as e:
            results[key] = e
    bigs = [threading.Thread(target=post, args=(f"big{i}", big)) for i in range(2)]
    for t in bigs:
        t.start()
    time.sleep(1.5)  # both big prompts are parsed; the tokenizer works on them
    small = json.dumps({"prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": True,
                        "stream": True}).encode()
    ts = threading.Thread(target=post, args=("small", small))
    ts.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    srv.terminate()
    assert srv.proc.wait(timeout=120) == 0
    took = time.monotonic() - t0
    for t in bigs + [ts]:
        t.join(timeout=60)
    st, _, body = results["small"]
    print(f"the small request: {st}; shutdown took {took:.1f} s")
    if st == 503:
        assert_error_body(body, status=503, contains="shutting down")
    else:
        assert st == 200
        data, _ = sse_events(body)
        assert data[-1] == "[DONE]" and "error" in json.loads(data[-2]), data[-2:]
    # 3000 tokens take far longer than this; the tokenizer's work bounds it.
    assert took < 30, took
    for i in range(2):
        assert results[f"big{i}"][0] in (400, 503), results[f"big{i}"]


def test_sdk_sees_the_shutdown_error_event(start_server):
    """The SSE error event that ends a stream cut by the shutdown is raised by the openai SDK
    as an APIError carrying the server's message."""
    import openai
    srv = start_server("--shutdown-timeout", "1")
    client = openai_client(srv)
    model = client.models.list().data[0].id
    stream = client.chat.completions.create(model=model, messages=MSG, max_tokens=5000,
                                            stream=True, extra_body={"ignore_eos": True})
    n = 0
    with pytest.raises(openai.APIError) as ei:
        for _ in stream:
            n += 1
            if n == 3:
                srv.terminate()
    assert n >= 3
    assert "shutting down" in str(ei.value)
    assert srv.proc.wait(timeout=30) == 0


# ---- a device lost for good --------------------------------------------------------------------

@pytest.mark.parametrize("stream", [True, False])
def test_device_lost_stops_the_server(start_server, stream):
    """A device that fails for good (a GPU's sticky error; here the runner's test hook,
    PGD_FAULT_DEVICE_LOST=4: its 4th step and every later one fail so) ends the request in
    flight with a 503 naming it — a stream after the tokens of the first steps: an SSE error
    event, then [DONE]; a plain request: the error body — and the server stops (it refuses
    connections) with exit status 1, its log saying why, so that a supervisor restarts it."""
    srv = start_server("--no-warmup", env={"PGD_FAULT_DEVICE_LOST": "4"})
    srv.expect_exit = True
    if stream:
        s = Stream(srv.port, 64)
        s.join(timeout=60)
        assert not s.is_alive() and s.error is None and s.status == 200, (s.error, s.raw[-300:])
        ev = s.events()
        e = assert_error_body(ev[-1], status=503)
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in ev[:-1]
                       if c.get("choices"))
        assert text  # the tokens of steps 1 to 3 came first
    else:
        st, _, body = srv.post_json("/v1/chat/completions", {"messages": MSG, "max_tokens": 64})
        assert st == 503, body
        e = assert_error_body(json.dumps(body).encode(), status=503)
    assert "the device is lost (injected at step 4" in e["message"], e
    assert srv.proc.wait(timeout=30) == 1
    assert_refuses_connections(srv.port)
    log = srv.log()
    assert re.search(r"the device failed: the device is lost \(injected at step 4: "
                     r"PGD_FAULT_DEVICE_LOST\); nothing more can run: stopping \(exit status 1\)",
                     log), log

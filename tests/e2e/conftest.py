"""Fixtures and helpers for the end-to-end tests of `pagoda serve` (tests/e2e/test_server*.py).

A test module starts the servers it needs with the `start_server` factory (module scope, so one
server serves a whole module): `pagoda serve --port 0 ...` is started, the bound port is read
from its first stdout line ("pagoda serve: listening on http://127.0.0.1:PORT (model loading)")
and GET /health is polled until it answers 200. At teardown every server still running gets
SIGTERM and must exit 0 within a few seconds (an assertion: a crash or a hang fails the module);
a server that does not stop is killed.

Helpers: `http()` (one request with http.client, a fresh connection, a timeout),
`sse_events()` (SSE framing of a raw body), `parse_metrics()` / `metric()` (the Prometheus text
exposition), `assert_error_body()` (the OpenAI error shape), `openai_client()`.
"""
import http.client as httpclient
import json
import os
import pathlib
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

LISTEN_RE = re.compile(rb"^pagoda serve: listening on http://([0-9.]+):(\d+) \(model loading\)$")


class Server:
    """One `pagoda serve` process."""

    def __init__(self, argv, env, log_path, ready_timeout=60.0, wait_ready=True):
        self.argv = argv
        self.log_path = log_path
        self.expect_exit = False  # set when a test stops it (or expects it to fail)
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, env=env,
                                     stdin=subprocess.DEVNULL)
        self.stdout_lines = queue.Queue()
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        try:
            line = self.stdout_lines.get(timeout=ready_timeout)
        except queue.Empty:
            self.kill()
            raise AssertionError(f"no 'listening' line from {argv}:\n{self.log()}")
        m = LISTEN_RE.match(line.rstrip(b"\n")) if line else None
        if not m:
            self.kill()
            raise AssertionError(f"unexpected first stdout line {line!r}:\n{self.log()}")
        self.host = m.group(1).decode()
        self.port = int(m.group(2))
        self.url = f"http://{self.host}:{self.port}"
        if wait_ready:
            try:
                self.wait_ready(ready_timeout)
            except BaseException:
                self.kill()
                raise

    def _read_stdout(self):
        for line in iter(self.proc.stdout.readline, b""):
            self.stdout_lines.put(line)
        self.stdout_lines.put(None)

    def wait_ready(self, timeout=60.0):
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, f"server exited {self.proc.returncode}:\n{self.log()}"
            try:
                st, _, _ = http(self.port, "GET", "/health", timeout=10)
                if st == 200:
                    return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"/health never answered 200:\n{self.log()}"
            time.sleep(0.02)

    def alive(self):
        return self.proc.poll() is None

    def log(self):
        """The tail of the server's stderr."""
        try:
            self._log.flush()
        except ValueError:
            pass  # closed
        try:
            return pathlib.Path(self.log_path).read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def terminate(self):
        """SIGTERM (the test checks the exit itself)."""
        self.expect_exit = True
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout=20.0):
        """SIGTERM, wait; returns the exit status (kills it and fails when it hangs)."""
        self.terminate()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"server did not exit within {timeout} s of SIGTERM:\n"
                                 f"{self.log()}")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._close()

    def _close(self):
        try:
            self._log.close()
        except OSError:
            pass

    # ---- conveniences ----
    def request(self, method, path, body=None, headers=None, timeout=60):
        return http(self.port, method, path, body, headers, timeout)

    def post_json(self, path, obj, headers=None, timeout=60):
        st, hd, raw = http(self.port, "POST", path, json.dumps(obj).encode(),
                           {"Content-Type": "application/json", **(headers or {})}, timeout)
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = raw
        return st, hd, data

    def metrics_text(self):
        st, _, raw = http(self.port, "GET", "/metrics", timeout=30)
        assert st == 200, raw
        return raw.decode()

    def metrics(self):
        return parse_metrics(self.metrics_text())


@pytest.fixture(scope="module")
def start_server(pagoda_bin, model_path, tmp_path_factory):
    """start_server(*flags, env=None, model=True, port=True, wait_ready=True) -> Server.

    Flags are strings (e.g. "--ctx-size", "64"); "--port 0" and "--model M" are added unless
    given (or turned off with port=False / model=False). The environment is the test's without
    any PAGODA_* variable, plus `env`. At the end of the module every server still running gets
    SIGTERM and must exit 0; one that exited on its own (a crash) without the test expecting it
    (Server.terminate() or expect_exit = True) fails the module too."""
    servers = []
    logdir = tmp_path_factory.mktemp("serve")

    def start(*flags, env=None, model=True, port=True, wait_ready=True, ready_timeout=60.0):
        flags = [str(f) for f in flags]
        argv = [pagoda_bin, "serve"]
        if model and "--model" not in flags:
            argv += ["--model", model_path]
        if port and "--port" not in flags:
            argv += ["--port", "0"]
        argv += flags
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("PAGODA_"):
                del e[k]  # the server reads PAGODA_* settings: only what the test gives
        for k, v in (env or {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        s = Server(argv, e, logdir / f"server{len(servers)}.log", ready_timeout, wait_ready)
        servers.append(s)
        return s

    yield start
    failures = []
    for s in servers:
        if not s.alive():
            if not s.expect_exit:
                failures.append(f"{s.argv}: died with {s.proc.returncode}:\n{s.log()}")
            s.kill()
            continue
        try:
            rc = s.stop(timeout=20)
        except AssertionError as e:
            failures.append(str(e))
            continue
        finally:
            s.kill()
        if rc != 0:
            failures.append(f"{s.argv}: exit status {rc} after SIGTERM:\n{s.log()}")
    assert not failures, "\n\n".join(failures)


@pytest.fixture(scope="session")
def generate(pagoda_bin, model_path):
    """generate(chat=MESSAGES | prompt=TEXT, max_tokens=N, extra=(flags...)) -> the output of
    `pagoda generate --temperature 0 --json` (a dict), cached per command line."""
    cache = {}

    def run(chat=None, prompt=None, max_tokens=16, extra=()):
        args = [pagoda_bin, "generate", "--model", model_path, "--temperature", "0",
                "--max-tokens", str(max_tokens), "--json", *map(str, extra)]
        if chat is not None:
            args += ["--chat", json.dumps(chat)]
        else:
            args += ["--prompt", prompt]
        key = tuple(args)
        if key not in cache:
            p = subprocess.run(args, capture_output=True, timeout=120)
            assert p.returncode == 0, p.stderr.decode(errors="replace")
            cache[key] = json.loads(p.stdout)
        return cache[key]
    return run


# ---- helpers ---------------------------------------------------------------------------------

def http(port, method, path, body=None, headers=None, timeout=60, host="127.0.0.1"):
    """One request on a fresh connection: (status, headers dict with lower-case names, body)."""
    conn = httpclient.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


def read_response(s, timeout=30):
    """Read one HTTP response from a raw socket: (status, headers, body)."""
    s.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            break
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        d = s.recv(65536)
        if not d:
            break
        rest += d
    return status, headers, rest[:n]


def send_chunked(s, payload, chunk=65536, end=True):
    """Send `payload` on a raw socket as chunked transfer coding (then the last chunk when
    `end`); a server that answers and closes part way (a 413) ends it quietly."""
    try:
        for i in range(0, len(payload), chunk):
            part = payload[i:i + chunk]
            s.sendall(b"%x\r\n%s\r\n" % (len(part), part))
        if end:
            s.sendall(b"0\r\n\r\n")
    except OSError:
        pass


def openai_client(srv, api_key="none", **kw):
    import openai
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=api_key, timeout=120, max_retries=0,
                         **kw)


def assert_error_body(body, status=None, param=..., code=..., type_=None, contains=()):
    """`body` (bytes, str or dict) is {"error": {"message", "type", "param", "code"}}."""
    if isinstance(body, (bytes, str)):
        body = json.loads(body)
    assert isinstance(body, dict) and set(body) == {"error"}, body
    e = body["error"]
    assert set(e) == {"message", "type", "param", "code"}, e
    assert isinstance(e["message"], str) and e["message"], e
    assert isinstance(e["type"], str) and e["type"], e
    assert e["param"] is None or isinstance(e["param"], str), e
    assert e["code"] is None or isinstance(e["code"], str), e
    if type_ is None and status is not None:
        type_ = {401: "invalid_request_error", 429: "rate_limit_error"}.get(
            status, "server_error" if status >= 500 else "invalid_request_error")
    if type_ is not None:
        assert e["type"] == type_, e
    if param is not ...:
        assert e["param"] == param, e
    if code is not ...:
        assert e["code"] == code, e
    for s in (contains if isinstance(contains, (list, tuple)) else [contains]):
        assert s in e["message"], (s, e)
    return e


def sse_events(raw):
    """Split an SSE body into its events (the text between blank lines), checking that it is
    made only of `data: ...\\n\\n` and `: ping\\n\\n` events. Returns the data strings (pings
    dropped) and the number of pings."""
    assert isinstance(raw, bytes)
    assert raw.endswith(b"\n\n"), raw[-200:]
    parts = raw[:-2].split(b"\n\n")
    data, pings = [], 0
    for p in parts:
        if p == b": ping":
            pings += 1
            continue
        assert p.startswith(b"data: "), p[:200]
        payload = p[len(b"data: "):]
        assert b"\n" not in payload and b"\r" not in payload, p[:200]
        data.append(payload.decode("utf-8"))
    return data, pings


METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """{(name, frozenset(label items)): float} of every sample line."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_LINE.match(line)
        assert m, f"bad sample line {line!r}"
        labels = frozenset(LABEL_RE.findall(m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def metric(samples, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`."""
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    assert found, f"no sample {name} {labels}"
    return sum(found)


def poll(pred, timeout=20.0, interval=0.05, msg="condition not met"):
    """Call pred() until it returns a truthy value (returned) or the timeout passes."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"{msg} (last: {last!r})")
        time.sleep(interval)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The helpers above are imported by the test modules as `from pagoda_e2e import ...`: conftest
# modules outside packages are all named "conftest" (tests/ has one too), so give this one a
# stable name of its own.
sys.modules.setdefault("pagoda_e2e", sys.modules[__name__])

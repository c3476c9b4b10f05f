"""bench/serve.py against a real `pagoda serve`: tiny loads in every prompt mode, JSON checked.

One server for the module (PAGODA_BIN / PAGODA_MODEL as in conftest.py), on --port 0; its port
comes from the first stdout line; SIGTERM at the end.
"""
import importlib.util
import json
import math
import os
import pathlib
import selectors
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVE_PY = ROOT / "bench" / "serve.py"
LISTEN = "pagoda serve: listening on http://"


def _read_first_line(proc, timeout):
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not sel.select(left):
            raise AssertionError(f"no listening line from pagoda serve within {timeout}s")
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            raise AssertionError(f"pagoda serve exited ({proc.wait()}) before listening")
        buf += chunk
    return buf.split(b"\n", 1)[0].decode()


@pytest.fixture(scope="module")
def bench_server(pagoda_bin, model_path, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "stderr.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([pagoda_bin, "serve", "--model", model_path, "--port", "0"],
                                stdout=subprocess.PIPE, stderr=err)
    try:
        line = _read_first_line(proc, 30)
        assert line.startswith(LISTEN) and line.endswith(" (model loading)"), line
        base = "http://" + line[len(LISTEN):].split()[0]
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            assert proc.poll() is None, f"pagoda serve died:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"/health never 200:\n{log.read_text()}"
            time.sleep(0.2)
        yield base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()
    assert proc.returncode == 0, f"pagoda serve exited {proc.returncode}:\n{log.read_text()}"


def bench(base_url, tmp_path, *args, expect_rc=0):
    out = tmp_path / "result.json"
    out.unlink(missing_ok=True)
    p = subprocess.run([sys.executable, str(SERVE_PY), "--base-url", base_url, "--quiet",
                        "--json", str(out), *map(str, args)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == expect_rc, f"rc {p.returncode}\n{p.stdout}\n{p.stderr}"
    if expect_rc and not out.exists():
        return None, p.stdout + p.stderr
    return json.loads(out.read_text()), p.stdout


def check_ok(d, n, gen_len, prompt_len):
    assert d["completed"] == n and d["failed"] == 0, d["errors"]
    assert d["errors"] == [""] * n
    assert d["total_output_tokens"] == n * gen_len
    assert d["output_lens"] == [gen_len] * n
    assert d["usage_missing"] == 0
    # pagoda counts exactly the tokens we aimed at (checked via /tokenize, or token ids).
    assert d["prompt_lengths_checked"] and d["prompt_length_misses"] == 0
    assert d["input_lens"] == d["expected_input_lens"]
    assert d["mean_input_tokens"] == pytest.approx(prompt_len)
    assert d["total_input_tokens"] == sum(d["input_lens"])
    assert d["duration"] > 0
    for k in ("request_throughput", "output_throughput", "total_token_throughput"):
        assert d[k] > 0, k
    assert d["total_token_throughput"] > d["output_throughput"]
    for m in ("ttft", "tpot", "itl", "e2el"):
        p50, p90, p99 = d[f"p50_{m}_ms"], d[f"p90_{m}_ms"], d[f"p99_{m}_ms"]
        assert 0 < p50 <= p90 <= p99, (m, p50, p90, p99)
        assert p50 == d[f"median_{m}_ms"]
        assert d[f"mean_{m}_ms"] > 0 and d[f"std_{m}_ms"] >= 0
    # Per request: TTFT < E2EL, and ITLs fit inside the request.
    for ttft, e2el, itl in zip(d["ttfts"], d["e2els"], d["itls"]):
        assert 0 < ttft < e2el
        assert len(itl) <= gen_len - 1
        assert sum(itl) <= e2el - ttft + 1e-6


@pytest.mark.parametrize("mode", ["token-ids", "text"])
def test_fixed_concurrency(bench_server, tmp_path, mode):
    extra = ["--token-ids"] if mode == "token-ids" else []
    d, out = bench(bench_server, tmp_path, "--num-prompts", 6, "--prompt-len", 16, "--gen-len", 8,
                   "--concurrency", 3, *extra)
    check_ok(d, 6, 8, 16)
    assert d["max_concurrency"] == 3 and d["request_rate"] == "inf"
    # The table has vLLM's rows.
    for row in ("Successful requests:", "Failed requests:", "Maximum request concurrency:",
                "Benchmark duration (s):", "Total input tokens:", "Total generated tokens:",
                "Request throughput (req/s):", "Output token throughput (tok/s):",
                "Total token throughput (tok/s):", "Mean TTFT (ms):", "Median TPOT (ms):",
                "P99 ITL (ms):", "P90 E2EL (ms):"):
        assert row in out, row


def test_poisson_rate_with_shared_prefix(bench_server, tmp_path):
    d, out = bench(bench_server, tmp_path, "--num-prompts", 6, "--prompt-len", 16, "--gen-len", 8,
                   "--request-rate", 20, "--shared-prefix-len", 32, "--seed", 3)
    check_ok(d, 6, 8, 48)
    assert d["request_rate"] == 20 and "Request rate configured (RPS):" in out


def test_chat_endpoint(bench_server, tmp_path):
    # Lengths include the chat template's tokens (pagoda's /tokenize counts messages).
    d, _ = bench(bench_server, tmp_path, "--endpoint", "/v1/chat/completions", "--num-prompts", 4,
                 "--prompt-len", 48, "--gen-len", 8, "--concurrency", 2)
    check_ok(d, 4, 8, 48)


def test_failures_are_counted(bench_server, tmp_path):
    d, _ = bench(bench_server, tmp_path, "--model", "no-such-model", "--no-test-request",
                 "--num-prompts", 3, "--prompt-len", 8, "--gen-len", 4, expect_rc=1)
    assert d["completed"] == 0 and d["failed"] == 3
    assert all("HTTP 404" in e for e in d["errors"])


def test_percentile_matches_numpy():
    np = pytest.importorskip("numpy")
    spec = importlib.util.spec_from_file_location("bench_serve", SERVE_PY)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[spec.name]
    vals = sorted([3.0, 1.5, 9.25, 4.0, 4.0, 7.5, 0.5])
    for p in (0, 10, 50, 90, 99, 100):
        assert math.isclose(mod.percentile(vals, p), float(np.percentile(vals, p)))
    assert mod.percentile([], 50) == 0.0


def test_server_without_tokenize(tmp_path):
    """The stand-in server (no /tokenize, chat only, API key): lengths are estimates, the
    counts come from its usage, the key is sent."""
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from mock_openai_server import MockOpenAI
    mock = MockOpenAI(api_key="sekret", first_token_delay=0.02, token_interval=0.01).start()
    try:
        d, _ = bench(mock.url, tmp_path, "--endpoint", "/v1/chat/completions", "--api-key",
                     "sekret", "--num-prompts", 3, "--prompt-len", 8, "--gen-len", 4,
                     "--concurrency", 3)
        assert d["completed"] == 3 and d["failed"] == 0, d["errors"]
        assert not d["prompt_lengths_checked"] and d["tokenizer_api"] is None
        assert d["usage_missing"] == 0 and d["output_lens"] == [4, 4, 4]
        # Without the key: the test request fails, and the run stops there.
        d, out = bench(mock.url, tmp_path, "--endpoint", "/v1/chat/completions",
                       "--num-prompts", 2, "--prompt-len", 8, "--gen-len", 4, expect_rc=1)
        assert d is None and "HTTP 401" in out, out
    finally:
        mock.stop()

"""A stand-in for pagoda's HTTP API, for browser tests of the web page (server/web/index.html).

Standard library only (http.server + a threading server). It serves:
  GET  /, /index.html        the page
  GET  /v1/models            one model, "mock-model"
  POST /v1/chat/completions  a streamed answer (SSE over chunked HTTP/1.1), or an error

What the answer is depends on the last user message:
  "[error-http]" in it   400 with an OpenAI error body {"error": {"message", "type", ...}}
  "[error-sse]"          three tokens, then `data: {"error": {...}}` mid-stream, then [DONE]
  "[drop]"               three tokens, then the socket is closed abruptly (no [DONE])
  "[slow]"               SLOW_TOKENS tokens, one every slow_interval seconds, with ": ping" lines
                         between them (for Stop: the client's disconnect is noticed at a write)
  "[think]"              a thinking model's answer: THOUGHT as delta.reasoning_content tokens
                         (as pagoda streams a Qwen3 model's <think> text), then REPLY
  anything else          REPLY (with multi-byte UTF-8 characters), one token per event, after a
                         first-token delay filled with ": ping" lines; every event's bytes are
                         written in small pieces with short pauses, so the client's reads end
                         inside lines and inside UTF-8 characters
Streams end with a usage chunk (stream_options.include_usage) and `data: [DONE]`. max_tokens is
honoured (finish_reason "length"). With api_key set, requests without `Authorization: Bearer
<api_key>` get 401.

Every chat request is recorded (MockOpenAI.requests): its body, headers, tokens sent (with the
time.monotonic() at which each was fully written) and how it ended — "done", "error", "dropped", or "disconnected" when a write failed because the client had
gone (that is how an aborted fetch shows up at a server). wait_for() waits on these records.

Every response says `Connection: close`, so no keep-alive connection outlives stop().

Run alone for manual testing:  python3 tests/e2e/mock_openai_server.py --port 8000
"""
import argparse
import json
import pathlib
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
PAGE = ROOT / "server" / "web" / "index.html"
MODEL = "mock-model"
REPLY = ("Hello! Naïve café — 日本語のテキスト, emoji 🏯🍵 and “quotes”.\n"
         "A second line, with a tab\tand a backslash \\ too.")
SLOW_TOKENS = 200
THOUGHT = "The user greets me.\nI should greet back, briefly."


def tokens_of(text):
    """Split text into word-ish tokens that keep their leading whitespace."""
    return re.findall(r"\s*\S+|\s+$", text)


class MockOpenAI:
    def __init__(self, host="127.0.0.1", port=0, api_key=None, first_token_delay=0.3,
                 token_interval=0.05, slow_interval=0.1, piece_size=5):
        self.api_key = api_key
        self.first_token_delay = first_token_delay
        self.token_interval = token_interval
        self.slow_interval = slow_interval
        self.piece_size = piece_size
        self.requests = []
        self.cond = threading.Condition()
        self.httpd = ThreadingHTTPServer((host, port), _make_handler(self))
        self.httpd.daemon_threads = True
        self.thread = None
        self.stopped = False

    @property
    def url(self):
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self):
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        """Stop serving (idempotent); the port refuses connections afterwards."""
        if self.stopped:
            return
        self.stopped = True
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.thread:
            self.thread.join(5)

    def wait_for(self, pred, timeout=10.0):
        """Wait until pred(requests) is true; returns its value (or raises TimeoutError)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                value = pred(self.requests)
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("mock: condition not met; requests: "
                                       + json.dumps(self.summary(), ensure_ascii=False))
                self.cond.wait(left)

    def summary(self):
        return [{k: r[k] for k in ("id", "state", "sent_tokens", "mode")} for r in self.requests]

    def _record(self, rec, **changes):
        with self.cond:
            rec.update(changes)
            self.cond.notify_all()


class _ClientGone(Exception):
    pass


def _make_handler(mock):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "mock-openai/1"

        def log_message(self, fmt, *args):  # quiet
            pass

        # ---- plumbing ------------------------------------------------------------------
        def _send_json(self, status, obj):
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

        def _error(self, status, message, etype, param=None, code=None):
            self._send_json(status, {"error": {"message": message, "type": etype,
                                               "param": param, "code": code}})

        def _chunk(self, data):
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            except OSError as e:  # BrokenPipe, ConnectionReset, ...
                raise _ClientGone() from e

        def _event(self, data, pieces=True):
            raw = data.encode() if isinstance(data, str) else data
            if not pieces or mock.piece_size <= 0:
                self._chunk(raw)
                return
            for i in range(0, len(raw), mock.piece_size):
                self._chunk(raw[i:i + mock.piece_size])
                time.sleep(0.002)

        def _sse(self, obj, pieces=True):
            self._event("data: " + json.dumps(obj, ensure_ascii=False) + "\n\n", pieces)

        def _authorized(self):
            if not mock.api_key:
                return True
            if self.headers.get("Authorization") == f"Bearer {mock.api_key}":
                return True
            self._error(401, "Invalid or missing API key.", "authentication_error",
                        code="invalid_api_key")
            return False

        # ---- routes --------------------------------------------------------------------
        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                data = PAGE.read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                self.close_connection = True
            elif path == "/v1/models":
                if self._authorized():
                    self._send_json(200, {"object": "list", "data": [
                        {"id": MODEL, "object": "model", "created": 0, "owned_by": "pagoda"}]})
            else:
                self._error(404, f"No route for GET {path}", "not_found_error")

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if path != "/v1/chat/completions":
                self._error(404, f"No route for POST {path}", "not_found_error")
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._error(400, "The body is not JSON.", "invalid_request_error")
                return
            msgs = body.get("messages") or []
            last_user = next((m.get("content", "") for m in reversed(msgs)
                              if m.get("role") == "user"), "")
            mode = "normal"
            for tag in ("error-http", "error-sse", "drop", "slow", "think"):
                if f"[{tag}]" in last_user:
                    mode = tag
                    break
            with mock.cond:
                rec = {"id": len(mock.requests) + 1, "body": body, "headers": dict(self.headers),
                       "mode": mode, "state": "streaming", "sent_tokens": 0,
                       "total_tokens": None, "token_times": []}
                mock.requests.append(rec)
                mock.cond.notify_all()
            if not self._authorized():
                mock._record(rec, state="unauthorized")
                return
            if mode == "error-http":
                mock._record(rec, state="error")
                self._error(400, "max_tokens is too large for this model's context (mock).",
                            "invalid_request_error", param="max_tokens")
                return
            try:
                self._stream(rec, body, mode)
            except _ClientGone:
                mock._record(rec, state="disconnected")

        def _stream(self, rec, body, mode):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

            if mode == "slow":
                toks = [f" word{i}" for i in range(SLOW_TOKENS)]
            else:
                toks = tokens_of(REPLY)
            thought = tokens_of(THOUGHT) if mode == "think" else []
            toks = [("reasoning_content", t) for t in thought] + [("content", t) for t in toks]
            max_tokens = body.get("max_tokens")
            finish = "stop"
            if isinstance(max_tokens, int) and 0 < max_tokens < len(toks):
                toks, finish = toks[:max_tokens], "length"
            rec["total_tokens"] = len(toks)
            rid = f"chatcmpl-mock-{rec['id']}"
            created = int(time.time())

            def chunk(delta, finish_reason=None):
                return {"id": rid, "object": "chat.completion.chunk", "created": created,
                        "model": MODEL, "choices": [{"index": 0, "delta": delta,
                                                     "finish_reason": finish_reason}]}

            # "Prefill": pings while the first token is on its way.
            self._event(": ping\n\n", pieces=False)
            self._sse(chunk({"role": "assistant", "content": ""}))
            waited = 0.0
            while waited < mock.first_token_delay:
                step = min(0.1, mock.first_token_delay - waited)
                time.sleep(step)
                waited += step
                self._event(": ping\n\n", pieces=False)

            interval = mock.slow_interval if mode == "slow" else mock.token_interval
            for i, tok in enumerate(toks):
                if mode in ("error-sse", "drop") and i == 3:
                    if mode == "error-sse":
                        self._sse({"error": {"message": "The KV cache is full (mock).",
                                             "type": "server_error", "param": None,
                                             "code": "kv_cache_full"}})
                        self._event("data: [DONE]\n\n")
                        self._chunk(b"")
                        mock._record(rec, state="error")
                    else:
                        try:
                            self.connection.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                        mock._record(rec, state="dropped")
                    return
                # Piecewise for the normal reply (splits lines and UTF-8 characters); whole
                # events for the slow one, so each token is visible as soon as it is sent.
                self._sse(chunk({tok[0]: tok[1]}), pieces=(mode == "normal"))
                rec["token_times"].append(time.monotonic())
                mock._record(rec, sent_tokens=i + 1)
                if mode == "slow":
                    time.sleep(interval / 2)
                    self._event(": ping\n\n", pieces=False)
                    time.sleep(interval / 2)
                else:
                    time.sleep(interval)
            self._sse(chunk({}, finish))
            n_prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
            self._sse({"id": rid, "object": "chat.completion.chunk", "created": created,
                       "model": MODEL, "choices": [],
                       "usage": {"prompt_tokens": n_prompt, "completion_tokens": len(toks),
                                 "total_tokens": n_prompt + len(toks)}})
            self._event("data: [DONE]\n\n")
            self._chunk(b"")
            mock._record(rec, state="done")

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--api-key")
    args = ap.parse_args()
    mock = MockOpenAI(args.host, args.port, api_key=args.api_key).start()
    print(f"mock OpenAI server on {mock.url}/ (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        mock.stop()


if __name__ == "__main__":
    main()

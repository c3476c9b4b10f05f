"""Cross-origin requests (--allowed-origins, server/cors.h): the preflight and the headers on
every kind of answer, over raw HTTP; and a real browser — headless Chromium on a page served from
another origin — calling the API with fetch: its chat streams in with the listed origin, and the
browser itself refuses it without the flag or from an origin not listed.

The browser part needs chromium, chromedriver and selenium (skipped without them).
"""
import http.server
import json
import socket
import threading

import pytest

from pagoda_e2e import assert_error_body, free_port, read_response, sse_events

KEY = "sk-cors-e2e"
APP = "http://app.example:3000"  # an allowed origin that is not the browser page's
CHAT = {"messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 12, "temperature": 0}


class Page:
    """A one-file site on its own port: the browser's page, an origin unlike the server's."""

    def __init__(self):
        body = b"<!doctype html><title>another origin</title><p>app</p>"

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.port = free_port()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.origin = f"http://127.0.0.1:{self.port}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def page():
    p = Page()
    yield p
    p.close()


@pytest.fixture(scope="module")
def listed(start_server, page):
    return start_server("--api-key", KEY, "--allowed-origins", f"{page.origin}, {APP}")


@pytest.fixture(scope="module")
def anyone(start_server):
    return start_server(env={"PAGODA_ALLOWED_ORIGINS": "*"})


@pytest.fixture(scope="module")
def plain(start_server):
    return start_server("--api-key", KEY)


def preflight(srv, path, origin, method="POST", headers="authorization, content-type"):
    h = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        h["Access-Control-Request-Headers"] = headers
    return srv.request("OPTIONS", path, None, h)


def post(srv, body, origin=None, key=KEY):
    h = {"Content-Type": "application/json"}
    if origin:
        h["Origin"] = origin
    if key:
        h["Authorization"] = "Bearer " + key
    return srv.request("POST", "/v1/chat/completions", json.dumps(body).encode(), h)


# ---- raw HTTP --------------------------------------------------------------------------------

def test_preflight_of_a_listed_origin(listed):
    st, h, body = preflight(listed, "/v1/chat/completions", APP)
    assert st == 204 and body == b""
    assert h["access-control-allow-origin"] == APP
    assert "POST" in h["access-control-allow-methods"].split(", ")
    assert h["access-control-allow-headers"] == "authorization, content-type"
    assert int(h["access-control-max-age"]) > 0
    assert h["vary"] == "Origin"
    # No key is asked of a preflight (a browser sends none), and it tells nothing of routes: an
    # unknown path gets the same answer (the request that follows gets its 401 or 404).
    st, h, _ = preflight(listed, "/no/such/route", APP, method="GET", headers=None)
    assert st == 204 and h["access-control-allow-origin"] == APP
    assert "access-control-allow-headers" not in h
    # Header lists that are not lists of names are not echoed.
    st, h, _ = preflight(listed, "/v1/models", APP, headers="a:b")
    assert st == 204 and "access-control-allow-headers" not in h


def test_preflight_of_another_origin_is_403(listed):
    for origin in ("http://app.example:3001", "https://app.example:3000", "null"):
        st, h, body = preflight(listed, "/v1/chat/completions", origin)
        assert st == 403, origin
        assert_error_body(body, status=403, type_="permission_error", contains="--allowed-origins")
        assert "access-control-allow-origin" not in h


def test_answers_to_a_listed_origin_say_so(listed):
    st, h, body = post(listed, CHAT, origin=APP)
    assert st == 200, body
    assert h["access-control-allow-origin"] == APP and h["vary"] == "Origin"
    assert "Retry-After" in h["access-control-expose-headers"]
    # Errors too, so the page can read them: no key (401), a bad field (400), a route (404).
    st, h, body = post(listed, CHAT, origin=APP, key=None)
    assert st == 401 and h["access-control-allow-origin"] == APP
    assert_error_body(body, status=401)
    st, h, _ = post(listed, {**CHAT, "temperature": 9}, origin=APP)
    assert st == 400 and h["access-control-allow-origin"] == APP
    st, h, _ = listed.request("GET", "/nope", None, {"Origin": APP, "Authorization": "Bearer " + KEY})
    assert st == 404 and h["access-control-allow-origin"] == APP
    # A stream's headers carry it.
    st, h, body = post(listed, {**CHAT, "stream": True}, origin=APP)
    assert st == 200 and h["access-control-allow-origin"] == APP
    assert h["content-type"].startswith("text/event-stream")
    assert sse_events(body)[0][-1] == "[DONE]"


def test_transport_errors_carry_it_too(listed):
    """The transport's own answers (here a 413 for a Content-Length over the limit, sent before
    any route runs) carry the header as well: the page can read why."""
    with socket.create_connection(("127.0.0.1", listed.port), timeout=30) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: " + APP.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: 99999999\r\n\r\n")
        st, h, _ = read_response(s)
    assert st == 413 and h["access-control-allow-origin"] == APP, h


def test_other_origins_are_answered_without_it(listed):
    # CORS is not access control: the request is served (with its key), the browser keeps the
    # answer from the page.
    st, h, body = post(listed, CHAT, origin="http://elsewhere.example")
    assert st == 200, body
    assert "access-control-allow-origin" not in h and h["vary"] == "Origin"
    st, h, _ = post(listed, CHAT)
    assert st == 200 and "access-control-allow-origin" not in h


def test_any_origin(anyone):
    st, h, _ = preflight(anyone, "/v1/completions", "http://whatever.example:9")
    assert st == 204 and h["access-control-allow-origin"] == "*"
    assert "vary" not in h
    for origin in ("http://whatever.example:9", None):
        hd = {"Origin": origin} if origin else {}
        st, h, _ = anyone.request("GET", "/v1/models", None, hd)
        assert st == 200 and h["access-control-allow-origin"] == "*"


def test_off_by_default(plain):
    st, h, _ = post(plain, CHAT, origin=APP)
    assert st == 200 and "access-control-allow-origin" not in h
    st, h, _ = preflight(plain, "/v1/chat/completions", APP)
    assert st == 401  # no preflight answer: an OPTIONS without a key, like any other request
    assert "access-control-allow-origin" not in h


# ---- a real browser --------------------------------------------------------------------------

FETCH_STREAM = """
const [url, key, body, done] = arguments;
(async () => {
  try {
    const r = await fetch(url + '/v1/chat/completions', {method: 'POST',
      headers: {'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'},
      body: JSON.stringify(body)});
    const reader = r.body.getReader(), dec = new TextDecoder();
    let raw = '';
    for (;;) {
      const {value, done: end} = await reader.read();
      if (end) break;
      raw += dec.decode(value, {stream: true});
    }
    done({status: r.status, raw: raw});
  } catch (e) {
    done({error: String(e)});
  }
})();
"""


@pytest.fixture(scope="module")
def browser(page):
    chromium_page = pytest.importorskip("chromium_page")
    if not (chromium_page.CHROMIUM and chromium_page.CHROMEDRIVER):
        pytest.skip("chromium and chromedriver are needed")
    d = chromium_page.start_chromium("--disable-gpu")
    d.set_page_load_timeout(30)
    d.set_script_timeout(60)
    d.get(page.origin + "/")
    yield d
    d.quit()


def browser_chat(d, srv):
    return d.execute_async_script(FETCH_STREAM, srv.url, KEY, {**CHAT, "stream": True})


def test_browser_page_of_a_listed_origin_streams(browser, listed):
    got = browser_chat(browser, listed)
    assert "error" not in got, got
    assert got["status"] == 200
    events, _ = sse_events(got["raw"].encode())
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                   for e in events[:-1] if json.loads(e)["choices"])
    st, _, body = post(listed, CHAT)
    assert st == 200 and text == json.loads(body)["choices"][0]["message"]["content"]


@pytest.mark.parametrize("which", ["plain", "listed-elsewhere"])
def test_browser_refuses_without_the_flag_or_the_origin(browser, start_server, plain, which):
    srv = plain if which == "plain" else start_server("--api-key", KEY, "--allowed-origins", APP)
    got = browser_chat(browser, srv)
    assert "error" in got and "Failed to fetch" in got["error"], got

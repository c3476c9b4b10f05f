"""The chat page (server/web/index.html) in headless Chromium against the mock OpenAI server.

Checks: the page is self-contained (no external resources); its SSE parser survives chunks split
anywhere (inside lines, CRLFs and UTF-8 characters); a chat streams in, with TTFT and tok/s shown
and the conversation, system prompt, model, temperature, max_tokens and stream options sent;
Enter sends and Shift+Enter does not; Stop aborts the fetch and the mock sees the client
disconnect while the partial answer stays, marked stopped; HTTP errors, SSE error events,
dropped connections and an unreachable server are shown readably; the API key is sent as a
Bearer token; New chat starts over; a thinking model's reasoning streams into a block of its own
above the answer and stays out of the next turn's conversation.

Needs chromium, chromedriver (Debian: chromium, chromium-driver) and selenium; skipped without
them. PAGODA_WEB_SCREENSHOT=path.png saves a screenshot of a chat in progress (never committed).
"""
import functools
import os
import re
import sys
import time
import pathlib

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from mock_openai_server import MODEL, PAGE, REPLY, THOUGHT, MockOpenAI  # noqa: E402

import chromium_page  # noqa: E402
from chromium_page import (assistants, model_options, needs_chromium, start_chromium,  # noqa: E402
                           text_of, type_and_enter)
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

pytestmark = needs_chromium


# ---- fixtures --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def driver():
    d = start_chromium("--disable-gpu", "--window-size=1200,860", "--force-prefers-reduced-motion")
    d.set_script_timeout(30)
    yield d
    d.quit()


@pytest.fixture
def mock():
    m = MockOpenAI().start()
    yield m
    m.stop()


wait = functools.partial(chromium_page.wait, timeout=10)


def open_page(d, mock):
    d.get(mock.url + "/")
    d.execute_script("localStorage.clear(); sessionStorage.clear();")
    d.get(mock.url + "/")
    wait(d, lambda: model_options(d) == [MODEL], msg="model list not loaded")
    return d


def status(d):
    return d.find_element(By.ID, "status").text


# ---- tests -----------------------------------------------------------------------------------

def test_page_is_self_contained(driver, mock):
    html = PAGE.read_text(encoding="utf-8")
    # No external resources: no absolute URLs in src/href/url()/@import, no protocol-relative.
    assert not re.search(r"""(src|href|action)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert not re.search(r"""url\(\s*["']?\s*(https?:)?//|@import""", html, re.I)
    for id_ in ("messages", "prompt", "send", "stop", "system", "model", "temperature",
                "max-tokens", "api-key", "status", "new-chat"):
        assert f'id="{id_}"' in html, id_
    d = open_page(driver, mock)
    origins = d.execute_script(
        "return performance.getEntriesByType('resource').map(e => new URL(e.name).origin)")
    assert set(origins) <= {mock.url}, origins
    # Every form control has a label.
    unlabelled = d.execute_script("""
        return [...document.querySelectorAll('input, select, textarea')]
          .filter(e => !e.labels || e.labels.length === 0).map(e => e.id);""")
    assert unlabelled == []
    assert d.find_element(By.ID, "stop").get_property("disabled") is True


def test_sse_parser_handles_any_split(driver, mock):
    """Feed the page's own SSEParser + TextDecoder(stream) with an SSE byte stream cut at every
    position (and at every pair of positions): the events must always be the same."""
    d = open_page(driver, mock)
    result = d.execute_script(r"""
        const stream = ': ping\n\n' +
          'data: {"a":"naïve café 日本 🏯"}\n\n' +
          'data: {"b":1}\r\n\r\n' +
          ':ping with CR\r\r' +
          'event: message\ndata: line1\ndata: line2\n\n' +
          'data:no-space\r\rdata: 🍵\n' +
          '\n' +
          'data: [DONE]\n\n';
        const bytes = new TextEncoder().encode(stream);
        function run(cuts) {
          const out = [];
          const p = new SSEParser((type, data) => out.push(type + '|' + data));
          const dec = new TextDecoder('utf-8');
          let prev = 0;
          for (const c of [...cuts, bytes.length]) {
            p.feed(dec.decode(bytes.subarray(prev, c), { stream: true }));
            prev = c;
          }
          p.feed(dec.decode());
          p.end();
          return JSON.stringify(out);
        }
        const whole = run([]);
        const bad = [];
        for (let i = 0; i <= bytes.length; i++) {
          if (run([i]) !== whole) bad.push([i]);
          for (let j = i; j <= bytes.length; j += 3)
            if (run([i, j]) !== whole) bad.push([i, j]);
        }
        const bytewise = run([...Array(bytes.length).keys()]);
        return { whole: JSON.parse(whole), bad: bad.slice(0, 10), bytewise: bytewise === whole };
    """)
    assert result["whole"] == [
        'message|{"a":"naïve café 日本 🏯"}',
        'message|{"b":1}',
        "message|line1\nline2",
        "message|no-space",
        "message|🍵",
        "message|[DONE]",
    ]
    assert result["bad"] == []
    assert result["bytewise"] is True


def test_chat_streams_with_stats_and_history(driver, mock):
    d = open_page(driver, mock)
    d.find_element(By.ID, "system").send_keys("You are terse.")
    temp = d.find_element(By.ID, "temperature")
    temp.clear()
    temp.send_keys("0.2")
    mt = d.find_element(By.ID, "max-tokens")
    mt.clear()
    mt.send_keys("100")

    # Shift+Enter is a newline, not a send.
    box = d.find_element(By.ID, "prompt")
    box.send_keys("Hello")
    ActionChains(d).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
    box.send_keys("there")
    assert box.get_property("value") == "Hello\nthere"
    time.sleep(0.2)
    assert mock.requests == []

    box.send_keys(Keys.ENTER)
    wait(d, lambda: len(assistants(d)) == 1)
    msg = assistants(d)[0]
    assert msg.get_attribute("class").split()[:2] == ["msg", "assistant"]
    assert d.find_element(By.ID, "stop").is_enabled()
    assert not d.find_element(By.ID, "send").is_enabled()
    assert box.get_property("value") == ""

    # Watch the text grow: several distinct prefixes of the reply before the end.
    seen = set()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        t = text_of(msg)
        assert REPLY.startswith(t), t
        seen.add(t)
        if t == REPLY:
            break
        if len(seen) == 4 and os.environ.get("PAGODA_WEB_SCREENSHOT"):
            d.save_screenshot(os.environ["PAGODA_WEB_SCREENSHOT"])
        time.sleep(0.01)
    assert text_of(msg) == REPLY
    assert len([s for s in seen if s and s != REPLY]) >= 3, "the answer did not stream"
    wait(d, lambda: d.find_element(By.ID, "send").is_enabled())
    assert not d.find_element(By.ID, "stop").is_enabled()

    # TTFT (the mock waits 0.3 s before the first token) and tok/s: (n - 1) tokens over the
    # time from the first to the last, close to what the mock measured on its side.
    st = status(d)
    m = re.search(r"TTFT (\d+) ms · ([\d.]+) tok/s · (\d+) tokens", st)
    assert m, st
    ttft, rate, n = int(m.group(1)), float(m.group(2)), int(m.group(3))
    assert 290 <= ttft < 5000
    rec = mock.requests[0]
    assert n == rec["total_tokens"] == rec["sent_tokens"]
    tt = rec["token_times"]
    server_rate = (len(tt) - 1) / (tt[-1] - tt[0])
    assert abs(rate - server_rate) <= 0.25 * server_rate, (rate, server_rate)
    assert st in msg.find_element(By.CSS_SELECTOR, ".meta").text
    assert "stopped" not in msg.get_attribute("class")
    assert "error" not in msg.get_attribute("class")

    body = rec["body"]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["model"] == MODEL
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 100
    assert body["messages"] == [{"role": "system", "content": "You are terse."},
                                {"role": "user", "content": "Hello\nthere"}]
    assert "Authorization" not in rec["headers"]

    # The second turn carries the whole conversation.
    type_and_enter(d, "And again")
    mock.wait_for(lambda rs: len(rs) == 2 and rs[1]["state"] == "done")
    wait(d, lambda: d.find_element(By.ID, "send").is_enabled())
    assert mock.requests[1]["body"]["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hello\nthere"},
        {"role": "assistant", "content": REPLY},
        {"role": "user", "content": "And again"},
    ]
    assert [text_of(m) for m in assistants(d)] == [REPLY, REPLY]

    # max_tokens cut: finish "length" is shown.
    mt.clear()
    mt.send_keys("3")
    type_and_enter(d, "Short please")
    mock.wait_for(lambda rs: len(rs) == 3 and rs[2]["state"] == "done")
    wait(d, lambda: d.find_element(By.ID, "send").is_enabled())
    assert "finish: length" in status(d)
    assert text_of(assistants(d)[-1]) == "Hello! Naïve café"

    # New chat: an empty page, and the next request starts over.
    d.find_element(By.ID, "new-chat").click()
    assert d.find_elements(By.CSS_SELECTOR, "#messages .msg") == []
    type_and_enter(d, "Fresh start")
    mock.wait_for(lambda rs: len(rs) == 4 and rs[3]["state"] == "done")
    assert mock.requests[3]["body"]["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Fresh start"}]


def test_reasoning_shown_apart(driver, mock):
    d = open_page(driver, mock)
    type_and_enter(d, "Hi [think]")
    wait(d, lambda: len(assistants(d)) == 1)
    msg = assistants(d)[0]
    # the thinking streams first, in its own block; the answer's text stays empty meanwhile
    wait(d, lambda: msg.find_elements(By.CSS_SELECTOR, ".thinking .reasoning"))
    block = msg.find_element(By.CSS_SELECTOR, ".thinking")
    assert block.tag_name == "details" and block.get_property("open")
    wait(d, lambda: text_of(msg) == REPLY, msg="the answer did not arrive")
    assert block.find_element(By.CSS_SELECTOR, ".reasoning").get_property("textContent") == THOUGHT
    assert block.find_element(By.CSS_SELECTOR, "summary").text == "Thinking"
    mock.wait_for(lambda rs: rs[0]["state"] == "done")
    wait(d, lambda: d.find_element(By.ID, "send").is_enabled())
    n = len(re.findall(r"\S+", THOUGHT)) + len(re.findall(r"\S+", REPLY))
    assert re.search(rf"· {n} tokens", status(d)), status(d)  # thinking's tokens count too
    # the next turn carries the answer, not the thinking
    type_and_enter(d, "Thanks")
    mock.wait_for(lambda rs: len(rs) == 2 and rs[1]["state"] == "done")
    assert mock.requests[1]["body"]["messages"] == [
        {"role": "user", "content": "Hi [think]"},
        {"role": "assistant", "content": REPLY},
        {"role": "user", "content": "Thanks"}]
    assert assistants(d)[1].find_elements(By.CSS_SELECTOR, ".thinking") == []


def test_stop_aborts_and_keeps_partial_answer(driver, mock):
    d = open_page(driver, mock)
    type_and_enter(d, "[slow] count for me")
    wait(d, lambda: len(assistants(d)) == 1)
    msg = assistants(d)[0]
    wait(d, lambda: text_of(msg).count("word") >= 3, msg="no streamed text before Stop")
    d.find_element(By.ID, "stop").click()
    wait(d, lambda: "stopped" in msg.get_attribute("class").split(), msg="not marked stopped")
    partial = text_of(msg)
    assert partial.startswith(" word0 word1 word2")
    assert "error" not in msg.get_attribute("class").split()
    assert "Stopped" in msg.find_element(By.CSS_SELECTOR, ".meta").text
    assert status(d).startswith("Stopped.")
    assert d.find_element(By.ID, "send").is_enabled()
    assert not d.find_element(By.ID, "stop").is_enabled()

    # The mock notices the closed connection at its next write and stops generating.
    rec = mock.wait_for(lambda rs: rs and rs[0]["state"] == "disconnected" and rs[0], timeout=5)
    assert rec["sent_tokens"] < rec["total_tokens"]
    time.sleep(0.3)
    assert text_of(msg) == partial  # nothing more arrives after Stop

    # The partial answer is part of the conversation.
    type_and_enter(d, "go on")
    mock.wait_for(lambda rs: len(rs) == 2 and rs[1]["state"] == "done")
    assert mock.requests[1]["body"]["messages"][-2:] == [
        {"role": "assistant", "content": partial}, {"role": "user", "content": "go on"}]

    # Escape stops too.
    type_and_enter(d, "[slow] again")
    wait(d, lambda: len(assistants(d)) == 3 and text_of(assistants(d)[2]).count("word") >= 2)
    d.find_element(By.ID, "prompt").send_keys(Keys.ESCAPE)
    wait(d, lambda: "stopped" in assistants(d)[2].get_attribute("class").split())
    mock.wait_for(lambda rs: len(rs) == 3 and rs[2]["state"] == "disconnected", timeout=5)


def test_errors_are_shown(driver, mock):
    d = open_page(driver, mock)

    # An HTTP error: the OpenAI error body's message, the user's turn not kept, text offered back.
    type_and_enter(d, "[error-http] please")
    wait(d, lambda: len(assistants(d)) == 1 and "error" in assistants(d)[0].get_attribute("class"))
    msg = assistants(d)[0]
    err = msg.find_element(By.CSS_SELECTOR, ".errtext").text
    assert "HTTP 400" in err and "max_tokens is too large" in err
    assert "invalid_request_error" in err
    assert "max_tokens is too large" in status(d)
    assert "error" in d.find_element(By.ID, "status").get_attribute("class")
    assert d.find_element(By.ID, "prompt").get_property("value") == "[error-http] please"
    assert "unsent" in d.find_elements(By.CSS_SELECTOR, "#messages .msg.user")[0].get_attribute(
        "class")

    # An error event mid-stream: the partial text stays, the error is shown.
    d.find_element(By.ID, "prompt").clear()
    type_and_enter(d, "[error-sse] go")
    wait(d, lambda: len(assistants(d)) == 2 and "error" in assistants(d)[1].get_attribute("class"))
    msg = assistants(d)[1]
    assert text_of(msg) == "Hello! Naïve café"
    assert "The KV cache is full (mock)." in msg.find_element(By.CSS_SELECTOR, ".errtext").text
    assert "The KV cache is full" in status(d)
    assert "stopped" not in msg.get_attribute("class")

    # The failed HTTP turn was not sent again; the SSE-error turn's partial answer was kept.
    type_and_enter(d, "[drop] then")
    wait(d, lambda: len(assistants(d)) == 3 and "error" in assistants(d)[2].get_attribute("class"))
    sent = mock.requests[2]["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"] == "[error-sse] go"
    # A dropped connection mid-stream.
    msg = assistants(d)[2]
    assert text_of(msg) == "Hello! Naïve café"
    assert "Connection lost" in msg.find_element(By.CSS_SELECTOR, ".errtext").text

    # The server is gone: a network error.
    mock.stop()
    d.find_element(By.ID, "prompt").clear()
    type_and_enter(d, "anyone there?")
    wait(d, lambda: len(assistants(d)) == 4 and "error" in assistants(d)[3].get_attribute("class"))
    assert "Network error" in assistants(d)[3].find_element(By.CSS_SELECTOR, ".errtext").text
    assert "Network error" in status(d)


def test_api_key_sent_as_bearer():
    m = MockOpenAI(api_key="sk-test").start()
    try:
        d = start_chromium()
        try:
            d.get(m.url + "/")
            # Without the key the model list fails readably.
            wait(d, lambda: "401" in status(d) and "Invalid or missing API key" in status(d))
            key = d.find_element(By.ID, "api-key")
            assert key.get_attribute("type") == "password"
            key.send_keys("sk-test")
            d.find_element(By.ID, "system").click()  # blur: change event reloads the models
            wait(d, lambda: model_options(d) == [MODEL])
            assert status(d) == ""
            type_and_enter(d, "hi")
            m.wait_for(lambda rs: rs and rs[0]["state"] == "done")
            assert m.requests[0]["headers"].get("Authorization") == "Bearer sk-test"
            assert "system" not in [x["role"] for x in m.requests[0]["body"]["messages"]]
        finally:
            d.quit()
    finally:
        m.stop()

"""The chat page served by the REAL server (GET /), in headless Chromium: it lists the served
model, a message streams in (the same text as `pagoda generate`), Stop aborts the stream and the
server counts the abort (pagoda_requests_aborted_total) and frees the request's KV blocks; with
--api-key the page works once the key is typed in.

Needs chromium, chromedriver (Debian: chromium, chromium-driver) and selenium; skipped without
them.
"""
import functools
import time

import pytest

from pagoda_e2e import metric, poll

import chromium_page
from chromium_page import (assistants, model_options, needs_chromium, start_chromium, text_of,
                           type_and_enter)
from selenium.webdriver.common.by import By  # noqa: E402

pytestmark = needs_chromium
NAME = "smol-web"
LONG = "Write a very long story about a dragon who lives in a castle."


@pytest.fixture(scope="module")
def driver():
    d = start_chromium("--disable-gpu", "--window-size=1200,860")
    d.set_page_load_timeout(30)
    d.set_script_timeout(30)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server("--served-model-name", NAME)


wait = functools.partial(chromium_page.wait, timeout=20)


def open_page(d, srv):
    d.get(srv.url + "/")
    d.execute_script("localStorage.clear(); sessionStorage.clear();")
    d.get(srv.url + "/")
    wait(d, lambda: model_options(d) == [NAME], msg="model list not loaded")
    return d


def set_field(d, id_, value):
    el = d.find_element(By.ID, id_)
    el.clear()
    el.send_keys(value)


def test_page_served(srv):
    st, headers, body = srv.request("GET", "/")
    assert st == 200
    assert headers["content-type"].startswith("text/html")
    for id_ in ("messages", "prompt", "send", "stop", "system", "model", "temperature",
                "max-tokens", "api-key", "status", "new-chat"):
        assert f'id="{id_}"'.encode() in body, id_


def test_chat_streams_the_greedy_answer(driver, srv, generate):
    d = open_page(driver, srv)
    set_field(d, "temperature", "0")
    set_field(d, "max-tokens", "24")
    question = "What is the capital of France?"
    type_and_enter(d, question)
    wait(d, lambda: len(assistants(d)) == 1)
    msg = assistants(d)[0]
    wait(d, lambda: d.find_element(By.ID, "send").is_enabled(), timeout=60,
         msg="the answer never finished")
    want = generate(chat=[{"role": "user", "content": question}], max_tokens=24)
    assert text_of(msg) == want["text"]
    cls = msg.get_attribute("class").split()
    assert "error" not in cls and "stopped" not in cls
    status = d.find_element(By.ID, "status").text
    assert "TTFT" in status and "tok/s" in status, status


def test_stop_aborts_on_the_server(driver, srv):
    d = open_page(driver, srv)
    set_field(d, "temperature", "0")
    set_field(d, "max-tokens", "4000")
    before = metric(srv.metrics(), "pagoda_requests_aborted_total")
    type_and_enter(d, LONG)
    wait(d, lambda: len(assistants(d)) == 1)
    msg = assistants(d)[0]
    # Text streams in: at least three different, growing, non-empty texts seen.
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(seen) < 3:
        t = text_of(msg)
        if t and (not seen or t != seen[-1]):
            assert not seen or t.startswith(seen[-1]), (seen[-1], t)
            seen.append(t)
        time.sleep(0.01)
    assert len(seen) >= 3, f"the answer did not stream: {seen}"
    assert "stopped" not in msg.get_attribute("class").split()
    assert metric(srv.metrics(), "pagoda_num_requests_running") == 1
    d.find_element(By.ID, "stop").click()
    wait(d, lambda: "stopped" in msg.get_attribute("class").split(), msg="not marked stopped")
    assert d.find_element(By.ID, "status").text.startswith("Stopped.")
    partial = text_of(msg)
    assert partial

    # The server saw the client leave: one abort, and the KV cache is free again.
    poll(lambda: metric(srv.metrics(), "pagoda_requests_aborted_total") == before + 1,
         timeout=20, msg="requests_aborted_total did not rise")
    poll(lambda: metric(srv.metrics(), "pagoda_num_requests_running") == 0 and
         metric(srv.metrics(), "pagoda_kv_cache_usage_perc") == 0, timeout=20,
         msg="the aborted request still holds KV blocks")
    time.sleep(0.3)
    assert text_of(msg) == partial  # nothing arrives after Stop
    assert metric(srv.metrics(), "pagoda_requests_aborted_total") == before + 1


def chat_with_key(d, srv, key):
    """The page reports the missing key, then works once `key` is typed in."""
    d.get(srv.url + "/")
    d.execute_script("localStorage.clear(); sessionStorage.clear();")
    d.get(srv.url + "/")
    wait(d, lambda: "401" in d.find_element(By.ID, "status").text,
         msg="the missing key is not reported")
    d.find_element(By.ID, "api-key").send_keys(key)
    d.find_element(By.ID, "system").click()  # blur: the page reloads the model list
    wait(d, lambda: model_options(d) == [NAME], msg="model list not loaded with the key")
    set_field(d, "max-tokens", "4")
    type_and_enter(d, "Hello")
    wait(d, lambda: len(assistants(d)) == 1)
    wait(d, lambda: d.find_element(By.ID, "send").is_enabled(), timeout=60)
    msg = assistants(d)[0]
    assert "error" not in msg.get_attribute("class").split()
    assert text_of(msg)


def test_page_with_api_key(driver, start_server):
    keyed = start_server("--served-model-name", NAME, "--api-key", "sk-web")
    chat_with_key(driver, keyed, "sk-web")


def test_page_with_a_tenant_key(driver, start_server, tmp_path):
    """--tenants with the page left open: a missing key is reported, and the page works once a
    tenant's key is typed in."""
    import hashlib
    import json
    f = tmp_path / "tenants.json"
    f.write_text(json.dumps({
        "tenants": [{"name": "web", "keys_sha256": [hashlib.sha256(b"sk-tenant-web").hexdigest()],
                     "limits": {"rpm": 100}}],
        "unauthenticated": ["/health", "/"]}))
    s = start_server("--served-model-name", NAME, "--tenants", str(f))
    chat_with_key(driver, s, "sk-tenant-web")

"""Shared helpers of the chat-page tests (test_server_web.py against the real server,
test_web_page_mock.py against the mock): headless Chromium through selenium, waiting on the page,
and the page's parts.

Importing this module skips the importing test module when selenium is missing; mark tests with
`needs_chromium` to skip them without chromium and chromedriver.
"""
import shutil

import pytest

pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which(
    "google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                    reason="chromium and chromedriver are needed (apt-get install "
                                           "chromium chromium-driver)")
HEADLESS = ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage")


def start_chromium(*args):
    """A headless Chromium with the HEADLESS flags and `args`; the caller quits it."""
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in HEADLESS + args:
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def wait(d, pred, timeout, msg=""):
    return WebDriverWait(d, timeout, poll_frequency=0.02).until(lambda _: pred(), msg)


def model_options(d):
    """The model list's values, read in one script call: the page may replace the options while
    they are read (element by element, an option replaced in between is a stale reference)."""
    return d.execute_script(
        "return [...document.querySelectorAll('#model option')].map(o => o.value)")


def assistants(d):
    return d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")


def text_of(el):
    return el.find_element(By.CSS_SELECTOR, ".content").get_property("textContent")


def type_and_enter(d, text):
    box = d.find_element(By.ID, "prompt")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)

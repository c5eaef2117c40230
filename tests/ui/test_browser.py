"""The web view in a real headless Chromium (the system's, through its chromedriver): every page
loads with no console error, the demo session's timeline shows its 88 turns, a click and the
keyboard reach verified frames, a diff shows what changed, and the as-of view of a file shows
its older text."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from context_os.context.frames import frame_docs
from context_os.store import Store
from context_os.store.sqlite import SqliteStore
from tests.ui.browser import console_errors

pytestmark = pytest.mark.e2e


@pytest.fixture
def site(demo_db: Path, serve: Callable[[Store], str], browser: Any) -> Iterator[tuple[str, Store]]:
    with SqliteStore(demo_db) as store:
        base = serve(store)
        console_errors(browser)  # what earlier tests left
        yield base, store
        assert console_errors(browser) == []


def _open(browser: Any, url: str) -> None:
    browser.get(url)
    WebDriverWait(browser, 60).until(lambda d: d.execute_script("return document.readyState") == "complete")


def _wait_url(browser: Any, part: str) -> None:
    WebDriverWait(browser, 60).until(ec.url_contains(part))
    WebDriverWait(browser, 60).until(lambda d: d.execute_script("return document.readyState") == "complete")


def _most_versioned_file(store: Store) -> str:
    return max((v.id for v in store.find("file")), key=lambda i: len(store.history(i, with_docs=False)))


def test_every_page_loads_without_a_console_error(site: tuple[str, Store], browser: Any) -> None:
    base, store = site
    file = _most_versioned_file(store)
    for path in (
        "/",
        "/session?id=demo",
        "/frame?session=demo&turn=40",
        "/diff?session=demo&a=39&b=40",
        f"/object?id={quote(file)}",
        f"/object?id={quote(file)}&a=1&b=3",
    ):
        _open(browser, base + path)
        assert browser.title.endswith("· context_os"), path
        assert console_errors(browser) == [], path
        # the stylesheet applied (a CSP or MIME mistake would leave the page unstyled)
        header = browser.find_element(By.TAG_NAME, "header")
        assert header.value_of_css_property("display") == "flex", path


def test_the_timeline_shows_88_turns_and_a_click_opens_a_verified_frame(site: tuple[str, Store], browser: Any) -> None:
    base, store = site
    _open(browser, base + "/")
    browser.find_element(By.LINK_TEXT, "demo").click()
    _wait_url(browser, "/session?id=demo")
    rows = browser.find_elements(By.CSS_SELECTOR, "table.timeline tbody tr")
    assert len(rows) == 88
    assert [r.get_attribute("data-turn") for r in rows] == [str(t) for t in range(1, 89)]
    bars = browser.find_elements(By.CSS_SELECTOR, "tr#turn-40 svg.bar rect")
    assert {b.get_attribute("class") for b in bars} >= {"full", "pool-chat", "pool-active"}
    browser.find_element(By.CSS_SELECTOR, "tr#turn-40 td a").click()
    _wait_url(browser, "turn=40")
    verdict = browser.find_element(By.ID, "verdict")
    recorded = frame_docs(store, "demo")[39]["content"]["rendered_hash"]
    assert "verified" in verdict.text and recorded in verdict.text
    assert "verdict ok" in verdict.get_attribute("class")
    messages = browser.find_elements(By.CSS_SELECTOR, "ol.messages li.msg")
    assert len(messages) == frame_docs(store, "demo")[39]["content"]["messages"]
    # each block links to its object at the version shown
    link = browser.find_element(By.CSS_SELECTOR, "li.msg.origin-block a.obj")
    assert "tx=" in link.get_attribute("href")


def test_keyboard_moves_between_turns(site: tuple[str, Store], browser: Any) -> None:
    base, _ = site
    _open(browser, base + "/session?id=demo")
    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys("j", Keys.ARROW_DOWN, "j", "k")  # turn 1 → 4 → 3
    assert browser.find_element(By.CSS_SELECTOR, "tr.selected").get_attribute("data-turn") == "3"
    body.send_keys(Keys.ENTER)
    _wait_url(browser, "turn=3")
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_RIGHT)
    _wait_url(browser, "turn=4")
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_LEFT)
    _wait_url(browser, "turn=3")
    assert "verified" in browser.find_element(By.ID, "verdict").text
    browser.find_element(By.TAG_NAME, "body").send_keys("d")
    _wait_url(browser, "/diff?session=demo&a=2&b=3")


def test_enter_on_a_rows_state_changes_unfolds_them_and_opens_no_frame(site: tuple[str, Store], browser: Any) -> None:
    """Enter on the focused summary of a row's state changes unfolds them (it opened the frame of
    the selected row, turn 1, instead)."""
    base, _ = site
    _open(browser, base + "/session?id=demo")
    summary = browser.find_elements(By.CSS_SELECTOR, "table.timeline td.changes summary")[2]
    details = summary.find_element(By.XPATH, "..")
    assert details.get_attribute("open") is None
    browser.execute_script("arguments[0].focus()", summary)
    summary.send_keys(Keys.ENTER)
    WebDriverWait(browser, 10).until(lambda _: details.get_attribute("open") is not None)
    assert "/session?id=demo" in browser.current_url and "/frame" not in browser.current_url
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ENTER)  # elsewhere, Enter opens the frame
    _wait_url(browser, "/frame?session=demo&turn=1")


def test_the_diff_of_two_turns_shows_the_change(site: tuple[str, Store], browser: Any) -> None:
    base, store = site
    docs = frame_docs(store, "demo")
    # the first pair where files entered the active pool, and what the frames say entered
    a, b = next(
        (d["content"]["turn"] - 1, d["content"]["turn"])
        for k, d in enumerate(docs)
        if k and {i for i in d["content"]["active"] if i.startswith("file:")} - set(docs[k - 1]["content"]["active"])
    )
    entered = set(docs[b - 1]["content"]["active"]) - set(docs[a - 1]["content"]["active"])
    _open(browser, base + "/session?id=demo")
    form = browser.find_element(By.CSS_SELECTOR, "form[action='/diff']")
    for name, value in (("a", a), ("b", b)):
        field = form.find_element(By.NAME, name)
        field.clear()
        field.send_keys(str(value))
    form.find_element(By.TAG_NAME, "button").click()
    _wait_url(browser, f"a={a}&b={b}")
    active = browser.find_element(By.ID, "active").text
    for oid in entered:
        assert f"+ {oid}" in active
    prefix = browser.find_element(By.ID, "prefix").text
    assert "byte" in prefix
    assert browser.find_elements(By.CSS_SELECTOR, "section.hunk pre.ins")


def test_the_as_of_view_shows_a_files_older_text(site: tuple[str, Store], browser: Any) -> None:
    base, store = site
    file = _most_versioned_file(store)
    versions = store.history(file, with_docs=True)
    first, last = versions[0].doc["content"], versions[-1].doc["content"]  # type: ignore[index]
    assert first != last
    _open(browser, base + f"/object?id={quote(file)}")
    assert f"version {len(versions)} of {len(versions)}" in browser.find_element(By.ID, "asof-result").text
    # drag the valid-time slider back to the first version's time (as a user's drag ends: change)
    slider = browser.find_element(By.CSS_SELECTOR, "#asof input[name=vt]")
    browser.execute_script(
        "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'));"
        "arguments[0].dispatchEvent(new Event('change'));",
        slider,
        str(versions[0].valid_time),
    )
    _wait_url(browser, f"vt={versions[0].valid_time}")
    assert f"version 1 of {len(versions)}" in browser.find_element(By.ID, "asof-result").text
    shown = browser.find_element(By.ID, "content").get_attribute("textContent")
    assert shown == first[: len(shown)] and shown.splitlines()[:20] == first.splitlines()[:20]
    assert shown != last[: len(shown)]


def test_a_browser_opens_the_address_with_the_token_and_browses_on_with_its_cookie(demo_db: Path, browser: Any) -> None:
    import threading

    from context_os.server.ui import make_ui_server

    with SqliteStore(demo_db) as store:
        httpd = make_ui_server(store, 0, token="browser-token-0123456789")
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{httpd.server_address[1]}"
        try:
            console_errors(browser)  # what earlier tests left
            _open(browser, base + "/session?id=demo")
            assert "needs its token" in browser.find_element(By.TAG_NAME, "body").text
            console_errors(browser)  # the 401 is a console error of its own
            _open(browser, base + "/session?id=demo&token=browser-token-0123456789")
            # the token left the address; the page is under the web view's own path (the cookie's)
            assert re.fullmatch(re.escape(base) + r"/[0-9a-f]{24}/session\?id=demo", browser.current_url)
            assert len(browser.find_elements(By.CSS_SELECTOR, "table.timeline tbody tr")) == 88
            header = browser.find_element(By.TAG_NAME, "header")
            assert header.value_of_css_property("display") == "flex"  # the stylesheet came with the cookie
            browser.find_element(By.CSS_SELECTOR, "tr#turn-40 td a").click()
            _wait_url(browser, "turn=40")
            assert "verified" in browser.find_element(By.ID, "verdict").text
            assert console_errors(browser) == []
            # another server on 127.0.0.1 the browser opens (another port) is not sent the token
            other, cookies = _recording_server()
            try:
                _open(browser, f"http://127.0.0.1:{other.server_address[1]}/")
                assert browser.find_element(By.TAG_NAME, "body").text == "another app"
            finally:
                other.shutdown()
                other.server_close()
            assert cookies == [None]
        finally:
            browser.delete_all_cookies()
            httpd.shutdown()
            httpd.server_close()


def _recording_server() -> tuple[Any, list[str | None]]:
    """Another local app's HTTP server on a free port, which keeps the Cookie header of each
    request to its page."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    cookies: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server naming
            if self.path == "/":
                cookies.append(self.headers.get("Cookie"))
            body = b"<html><body>another app</body></html>"
            self.send_response(200 if self.path == "/" else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, cookies

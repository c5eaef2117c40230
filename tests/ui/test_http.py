"""The web view over HTTP, on every store: each page, the guard (Host, Origin, methods), errors,
paging on a 50,000-message session, and ``ctxos ui`` itself."""

from __future__ import annotations

import html
import http.client
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from context_os.context.load import object_states
from context_os.server.ui import make_ui_server
from context_os.server.ui.app import CSP, _root
from context_os.store import Store, Version
from context_os.store.sqlite import SqliteStore
from tests.helpers import overfill, wait_for
from tests.ui.recorded import record_demo

PAGES = [
    "/",
    "/session?id={sid}",
    "/session?id={sid}&turn=7",
    "/frame?session={sid}&turn=5",
    "/frame?session={sid}&turn=5&from=10",
    "/diff?session={sid}&a=3&b=6",
    "/diff?session={sid}&b=6",
    "/object?id={file}",
    "/object?id={file}&a=1&b=2",
    "/object?id={file}&vt={vt}",
    "/object?id={file}&tx={tx}",
    "/object?id=session:{sid}",
]


def _text(html: str) -> str:
    """What a page says, its tags left out."""
    return re.sub(r"<[^>]+>", "", html)


def _rows(html: str) -> int:
    return len(re.findall(r'<tr id="turn-\d+"', html))


@pytest.fixture
def served(store: Store, uid: str, serve: Callable[[Store], str]) -> tuple[Store, str, str]:
    sid = record_demo(store, f"{uid}-ui", 40)
    return store, sid, serve(store)


def _a_file(store: Store, sid: str) -> tuple[str, int, int]:
    """A file the session read that has two versions or more: id, first valid time, first tx."""
    for v in store.find("file"):
        versions = store.history(v.id, with_docs=False)
        if len(versions) >= 2:
            return v.id, versions[0].valid_time, versions[0].tx_id
    raise AssertionError("no file with two versions")


def test_every_page_answers_and_nothing_is_written(served: tuple[Store, str, str]) -> None:
    store, sid, base = served
    file, vt, tx = _a_file(store, sid)
    before = store.latest_tx()
    with httpx.Client(base_url=base) as client:
        for page in PAGES:
            r = client.get(page.format(sid=sid, file=file, vt=vt, tx=tx))
            assert r.status_code == 200, (page, r.text[:500])
            assert r.headers["content-type"] == "text/html; charset=utf-8"
            assert "script-src 'self'" in r.headers["content-security-policy"]
            assert r.headers["x-content-type-options"] == "nosniff"
            for link in re.findall(r'(?:href|src|action)="([^"]*)"', r.text):
                assert link.startswith(("/", "#", "data:")), (page, link)  # nothing from elsewhere
        assert client.get("/static/ui.css").headers["content-type"].startswith("text/css")
        assert "javascript" in client.get("/static/ui.js").headers["content-type"]
        timeline = client.get(f"/session?id={sid}").text
        frame = client.get(f"/frame?session={sid}&turn=5").text
        head = client.head(f"/session?id={sid}")
    assert store.latest_tx() == before
    assert _rows(timeline) == int(re.search(r"(\d+) turns", timeline).group(1))  # type: ignore[union-attr]
    assert "✓ verified" in frame
    assert head.status_code == 200 and head.content == b"" and int(head.headers["content-length"]) > 0


def test_errors_are_pages_with_reasons(served: tuple[Store, str, str]) -> None:
    _, sid, base = served
    with httpx.Client(base_url=base) as client:
        cases = {
            "/nope": (404, "no page"),
            "/session?id=no-such-session": (404, "no session"),
            f"/frame?session={sid}&turn=999": (404, "no frame for turn 999"),
            f"/frame?session={sid}&turn=x": (400, "turn must be a whole number"),
            f"/frame?session={sid}": (400, "needs turn="),
            "/object?id=file:nothing": (404, "no object"),
            f"/object?id=session:{sid}&vt=yesterday": (400, "vt"),
            f"/object?id=session:{sid}&tx=-5": (400, "tx must be at least 0, got -5"),
            f"/object?id=session:{sid}&tx=999999999": (400, "tx must be at most"),
            f"/object?id=session:{sid}&a=1&b=100000": (400, "b must be at most"),
            f"/object?id=session:{sid}&a=0": (400, "a must be at least 1"),
        }
        for path, (status, text) in cases.items():
            r = client.get(path)
            assert r.status_code == status, path
            assert text in r.text, (path, r.text[:400])
    # a path that climbs out of the static files (http.client sends it as written)
    conn = http.client.HTTPConnection(base.removeprefix("http://"))
    try:
        for path in ("/static/../app.py", "/static/../templates/base.html", "/static/%2e%2e/app.py"):
            conn.request("GET", path)
            answer = conn.getresponse()
            assert answer.status == 404 and b"no static file" in answer.read(), path
    finally:
        conn.close()


def test_a_number_too_long_for_int_is_a_400_not_a_server_error(tmp_path: Path, serve: Callable[[Store], str]) -> None:
    """int() refuses a string of more than 4,300 digits: such a number in the address is a bad
    request, said as such (it was a 500 page with Python's ValueError)."""
    huge = "9" * 5000
    with SqliteStore(tmp_path / "store.db") as store:
        sid = record_demo(store, "huge", 6)
        base = serve(store)
        for name, path in [
            ("from", f"/?from={huge}"),
            ("turn", f"/frame?session={sid}&turn={huge}"),
            ("from", f"/session?id={sid}&from={huge}"),
            ("tx", f"/object?id=session:{sid}&tx=-{huge}"),
        ]:
            r = httpx.get(base + path)
            assert r.status_code == 400, (path, r.text[:400])
            assert f"{name} must be a whole number of fewer digits" in r.text
            assert "ValueError" not in r.text


def test_the_guard_refuses_other_hosts_origins_and_writes(served: tuple[Store, str, str]) -> None:
    _, _, base = served
    port = base.rsplit(":", 1)[1]
    with httpx.Client(base_url=base) as client:
        assert client.get("/", headers={"Host": "evil.example"}).status_code == 403
        assert client.get("/", headers={"Host": f"evil.example:{port}"}).status_code == 403
        assert client.get("/", headers={"Host": f"localhost:{port}"}).status_code == 200
        assert client.get("/", headers={"Origin": "http://evil.example"}).status_code == 403
        for method in ("POST", "PUT", "DELETE", "PATCH", "TRACE", "PROPFIND"):
            r = client.request(method, "/", content=b"{}")
            assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD", method


def test_a_50k_message_session_pages(long_db: Path, serve: Callable[[Store], str]) -> None:
    """No page loads more than it shows: 100 turns, 200 messages of a 50,000-message frame."""
    with SqliteStore(long_db) as store, httpx.Client(base_url=serve(store), timeout=120) as client:
        first = client.get("/session?id=long")
        second = client.get("/session?id=long&from=101")
        frame = client.get("/frame?session=long&turn=200")
        last = client.get("/frame?session=long&turn=200&from=49800")
        for r in (first, second, frame, last):
            assert r.status_code == 200
            assert len(r.content) < 500_000, (r.url, len(r.content))
        assert _rows(first.text) == 100 and 'turn-1"' in first.text and 'turn-100"' in first.text
        assert _rows(second.text) == 100 and 'turn-101"' in second.text and 'turn-200"' in second.text
        assert "200 turns" in first.text
        for page in (frame.text, last.text):
            assert page.count('<li class="msg') == 200
            assert "✓ verified" in page
        assert 'id="m0"' in frame.text and 'id="m199"' in frame.text and 'id="m200"' not in frame.text
        assert 'id="m49800"' in last.text
        assert re.search(r"messages 1–200 of 50,\d{3}", frame.text)
        # an object with hundreds of versions (the session document: one per write) pages too
        versions = store.history("session:long", with_docs=False)
        assert len(versions) > 200
        latest = client.get("/object?id=session:long")
        oldest = client.get("/object?id=session:long&from=0&vt=" + str(versions[0].valid_time))
        for r in (latest, oldest):
            assert r.status_code == 200 and len(r.content) < 500_000
            assert len(re.findall(r"<tr( class=\"focus\")?>\s*<td class=\"n\"><a href=\"/object", r.text)) == 100
            assert len(re.findall(r"<option value=", r.text)) <= 2 * 200  # slider marks, thinned
        assert f"version {len(versions)} of {len(versions)}" in _text(latest.text)
        assert f"version 1 of {len(versions)}" in _text(oldest.text)
        assert ">1</a></td>" in oldest.text and f">{len(versions)}</a></td>" in latest.text


def test_ctxos_ui_serves_until_stopped(demo_db: Path) -> None:
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "ctxos"), "--store", str(demo_db), "ui", "--port", "0", "--session", "demo"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        url = re.search(r"(http://127\.0\.0\.1:\d+)(/session\?id=demo)&token=([\w-]+) ", line)
        assert url, line
        base, page, token = url.groups()
        assert httpx.get(base + page).status_code == 401  # the address without its token
        with httpx.Client(follow_redirects=True) as browser:
            r = browser.get(url.group(0).strip())
            assert r.status_code == 200 and _rows(r.text) == 88
            # the token went from the address to a cookie, the page to the web view's own path
            root = str(r.url).removeprefix(base).removesuffix(page)
            assert str(r.url) == base + root + page and re.fullmatch(r"/[0-9a-f]{24}", root) and token not in root
            assert browser.get(base + root + "/").status_code == 200
    finally:
        proc.terminate()
        assert proc.wait(30) == 0  # SIGTERM: a clean stop
        if proc.stderr:
            proc.stderr.close()


def test_a_store_that_is_down_is_a_503_page(serve: Callable[[Store], str]) -> None:
    from context_os.store import open_store

    with open_store("xtdb+http://127.0.0.1:1") as store:  # nothing listens on port 1
        r = httpx.get(serve(store) + "/session?id=x")
    assert r.status_code == 503
    assert "The store cannot answer" in r.text and "cannot be reached" in r.text


def test_a_frame_that_no_longer_verifies_says_why(tmp_path: Path, serve: Callable[[Store], str]) -> None:
    """An evicted object (a leaked secret erased) leaves the frames that showed it unverifiable:
    the frame page says so in red, naming what is missing, and still shows the rest."""
    from context_os.context.evict import evict
    from context_os.context.frames import EVICTED_BLOCK, frame_docs

    with SqliteStore(tmp_path / "store.db") as store:
        sid = record_demo(store, "evicted", 40)
        docs = frame_docs(store, sid)
        turn, file = next(
            (d["content"]["turn"], i)
            for d in docs
            if d["content"]["managed"]  # a file shows in a block from then on
            for i in d["content"]["active"]
            if i.startswith("file:")
        )
        base = serve(store)
        assert "✓ verified" in httpx.get(f"{base}/frame?session={sid}&turn={turn}").text
        sent = frame_docs(store, sid)[turn - 1]["content"]["messages"]
        evict(store, file, reason="test")
        r = httpx.get(f"{base}/frame?session={sid}&turn={turn}")
        diff = httpx.get(f"{base}/diff?session={sid}&a={turn - 1}&b={turn}")
        gone = httpx.get(f"{base}/object?id={file}")  # the frame's link to what it showed
    assert r.status_code == 200
    assert "✗ does not verify" in r.text and 'class="verdict bad"' in r.text
    assert "is not in the store" in r.text
    # as `ctxos frames show` says: the eviction alone explains it, and what else could be checked
    # part by part was; every message it sent is shown, the erased block marked as such (it said
    # "none shown": the missing block stopped the re-render)
    page = _text(r.text)
    assert "it showed what was evicted since (nothing else is wrong)" in page
    assert "checked part by part instead" in page
    assert f"{sent:,} sent, none shown" not in page and "<code>None</code>" not in r.text
    assert html.escape(EVICTED_BLOCK) in r.text
    assert re.search(rf"messages\s*{sent:,}\b", page), page
    assert "does NOT verify" in diff.text
    assert "not compared" not in diff.text
    assert gone.status_code == 404
    assert f"no object &#39;{file}&#39;" in gone.text and "it was evicted at" in gone.text and "(test)" in gone.text


def test_an_object_links_its_session_only_when_that_has_a_timeline(
    store: Store, uid: str, serve: Callable[[Store], str]
) -> None:
    """A mesh message's ``meta.session`` is the agent's scope (``mesh:bob``), not a session: the
    object page names it without a link to a timeline that would be a 404."""
    from context_os.objects import SourceDoc
    from context_os.store.base import Put

    sid = record_demo(store, f"{uid}-linked", 5)
    scoped = SourceDoc(id=f"message:{uid}:1", kind="message", content="hi", meta={"session": f"mesh:{uid}"})
    store.submit([Put(scoped.to_doc())])
    base = serve(store)
    with httpx.Client(base_url=base) as client:
        page = client.get(f"/object?id=message:{uid}:1")
        assert page.status_code == 200 and f"mesh:{uid}" in page.text
        links = re.findall(r'href="(/session\?[^"]*)"', page.text)
        assert links == [] and client.get(f"/session?id=mesh:{uid}").status_code == 404
        chat = re.search(r'href="/object\?id=(chat%3A[^"&]*)', client.get(f"/frame?session={sid}&turn=1").text)
        assert chat is not None
        linked = client.get(f"/object?id={chat.group(1)}").text
        assert f'href="/session?id={sid}"' in linked.replace("&amp;", "&"), linked[:2000]


def test_a_diff_too_long_to_show_says_how_much_is_left_out(
    store: Store, uid: str, serve: Callable[[Store], str]
) -> None:
    """The object page shows a diff up to ``CONTENT_CHARS`` characters, as it shows content; the
    rest was left out without a word (the content's cut names what is left and how to see it)."""
    from context_os.objects import SourceDoc
    from context_os.server.ui.app import CONTENT_CHARS
    from context_os.store.base import Put

    oid = f"message:{uid}:long"
    for n in range(2):  # every line differs: the diff holds both texts whole
        text = "".join(f"v{n} line {k}\n" for k in range(CONTENT_CHARS // 10))
        store.submit([Put(SourceDoc(id=oid, kind="message", content=text, meta={}).to_doc())])
    page = httpx.get(f"{serve(store)}/object", params={"id": oid, "a": 1, "b": 2}).text
    cut = re.search(r"… ([\d,]+) more characters: <code>ctxos objects inspect [^<]* --diff 1 2</code>", page)
    assert cut is not None, page[-3000:]
    assert 0 < int(cut.group(1).replace(",", "")) < 2 * CONTENT_CHARS  # both texts, less what was shown


def test_a_calls_object_arguments_show_as_the_json_the_model_was_sent(
    tmp_path: Path, serve: Callable[[Store], str]
) -> None:
    """Not HTML-safe JSON (``&&`` as ``\\u0026\\u0026``): the page escapes HTML itself."""
    from context_os import Session
    from context_os.harness import AnthropicHook

    command = "cd /w && make 2>&1 | tee 'out.log' < /dev/null"
    with SqliteStore(tmp_path / "store.db") as store:
        hook = AnthropicHook(Session.open(store, "args", harness="anthropic"))
        call = {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": command}}
        result = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}
        hook.transform_context(
            [
                {"role": "user", "content": "build it"},
                {"role": "assistant", "content": [call]},
                {"role": "user", "content": [result]},
            ]
        )
        page = httpx.get(f"{serve(store)}/frame?session=args&turn=1").text
        shown = subprocess.run(
            [str(Path(sys.executable).parent / "ctxos"), "--store", str(tmp_path / "store.db"), "frames", "show"]
            + ["args", "1", "--messages"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    escaped = command.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#39;")
    assert f"bash({{&#34;command&#34;: &#34;{escaped}&#34;}})" in page and "\\u00" not in page
    assert f'→ bash({{"command": "{command}"}})' in shown


def test_with_a_token_every_page_needs_it_and_the_address_that_carries_it_leaves_a_cookie(demo_db: Path) -> None:
    with SqliteStore(demo_db) as store:
        httpd = make_ui_server(store, 0, token="t0ken-of-the-test-1234")
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{httpd.server_address[1]}"
        try:
            for path in ("/", "/session?id=demo", "/static/ui.css", "/nope"):
                refused = httpx.get(base + path)
                assert refused.status_code == 401 and "needs its token" in refused.text
            assert "is wrong" in httpx.get(base + "/?token=guess").text
            first = httpx.get(base + "/session?id=demo&token=t0ken-of-the-test-1234")
            root = first.headers["location"].removesuffix("/session?id=demo")
            assert first.status_code == 303 and re.fullmatch(r"/[0-9a-f]{24}", root), first.headers["location"]
            cookie = first.headers["set-cookie"]
            assert cookie.startswith(f"ctxos_ui_{httpd.server_address[1]}=t0ken-of-the-test-1234;")
            # the redirect carries every answer's headers too (it had no CSP, no nosniff)
            assert (
                first.headers["x-content-type-options"] == "nosniff"
                and "default-src 'none'" in first.headers["content-security-policy"]
            )
            # sent by a browser to that path only, on any port: no other local server is asked for it
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and f"Path={root};" in cookie + ";"
            name = cookie.split("=", 1)[0]
            jar = {name: "t0ken-of-the-test-1234"}
            assert httpx.get(base + root + "/session?id=demo", cookies=jar).status_code == 200
            assert httpx.get(base + root, cookies=jar).status_code == 200
            assert httpx.get(base + root + "/static/ui.css", cookies=jar).status_code == 200
            # its links stay under that path
            page = httpx.get(base + root + "/", cookies=jar).text
            assert f'href="{root}/static/ui.css"' in page and f'href="{root}/session?id=demo"' in page
            assert 'href="/session' not in page and 'action="/' not in page
            # a page outside it is not one, cookie or not (the cookie would not come with it)
            assert httpx.get(base + "/session?id=demo", cookies=jar).status_code == 401
            assert httpx.get(base + root + "x/", cookies=jar).status_code == 401
            assert httpx.get(base + root + "/", cookies={name: "wrong"}).status_code == 401
            # the same token, another start: the same path (an address kept from before answers)
            assert _root("t0ken-of-the-test-1234") == root and _root("t0ken-of-the-test-12345") != root
            # other local apps' cookies come along (a browser sends them to every port): ours is read
            odd = f'x={{"k":"v"}}; a[b]=1; foo=bar baz; name=va"lue; k=v;; {name}=t0ken-of-the-test-1234'
            assert httpx.get(base + root + "/", headers={"Cookie": odd}).status_code == 200
            # another web view's cookie (another port) is not this one's
            assert httpx.get(base + root + "/", cookies={"ctxos_ui_1": "t0ken-of-the-test-1234"}).status_code == 401
            # the redirect stays on this server: a browser reads `/\\host` in a Location as `//host`
            conn = http.client.HTTPConnection(base.removeprefix("http://"))
            try:
                for path in ("/\\evil.example/", "/\\/evil.example", "//evil.example/", "/%5Cevil.example"):
                    conn.request("GET", path + "?token=t0ken-of-the-test-1234")
                    answer = conn.getresponse()
                    answer.read()
                    location = answer.getheader("Location") or ""
                    assert answer.status == 303 and location.startswith("/"), (path, location)
                    assert location[1:2] not in ("/", "\\") and "\\" not in location, (path, location)
            finally:
                conn.close()
        finally:
            httpd.shutdown()
            httpd.server_close()


def test_a_request_without_the_token_is_not_told_the_path_the_pages_live_under(demo_db: Path) -> None:
    """The path derived from the token keeps its cookie from other local servers only while it is
    not known: no answer to a request that was not admitted (no token, a foreign Host, a write, a
    request line that cannot be read) names it."""

    token = "t0ken-of-the-test-1234"
    root = _root(token)
    with SqliteStore(demo_db) as store:
        httpd = make_ui_server(store, 0, token=token)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        port = httpd.server_address[1]
        base = f"http://127.0.0.1:{port}"
        try:
            answers = [
                httpx.get(base + "/"),
                httpx.get(base + "/session?id=demo&token=guess"),
                httpx.get(base + root + "/", headers={"Host": "evil.example"}),
                httpx.post(base + root + "/", content=b"x"),
            ]
            assert [a.status_code for a in answers] == [401, 401, 403, 405]
            for answer in answers:
                assert root not in answer.text, answer.request.url
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(b"NOT A REQUEST LINE\r\n\r\n")
                raw = b""
                while chunk := sock.recv(65536):
                    raw += chunk
            assert raw.startswith(b"HTTP/1.1 400") and root.encode() not in raw
            # once admitted, its pages link under it
            jar = {f"ctxos_ui_{port}": token}
            assert f'href="{root}/"' in httpx.get(base + root + "/nope", cookies=jar).text
        finally:
            httpd.shutdown()
            httpd.server_close()


def test_the_log_of_requests_does_not_hold_the_token(demo_db: Path, caplog: pytest.LogCaptureFixture) -> None:
    """`ctxos ui -v` logs each request line: the one that brings the token in its address is
    logged without it (a log kept in a file, a supervisor's journal, held the token)."""
    import logging

    caplog.set_level(logging.INFO, logger="context_os")
    token = "t0ken-of-the-test-1234"
    with SqliteStore(demo_db) as store:
        httpd = make_ui_server(store, 0, token=token)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{httpd.server_address[1]}"
        try:
            assert httpx.get(f"{base}/session?id=demo&token={token}").status_code == 303
            assert httpx.get(f"{base}/?token={token}x").status_code == 401
        finally:
            httpd.shutdown()
            httpd.server_close()
    logged = [r.getMessage() for r in caplog.records]
    assert any("/session?id=demo&token=***" in line for line in logged), logged
    assert not any(token in line for line in logged), logged


def test_the_sessions_page_says_what_a_replay_was_recorded_from(tmp_path: Path, serve: Callable[[Store], str]) -> None:
    """A replayed SWE-agent session goes through the OpenAI adapter: its row says `openai (replay
    of swe-agent)`, as `ctxos sessions` does, not a bare `openai` like a live session's."""
    from context_os import Session
    from context_os.harness import OpenAIHook

    with SqliteStore(tmp_path / "store.db") as store:
        with Session.open(store, "swe", harness="openai", source="swe-agent") as session:
            OpenAIHook(session).transform_context([{"role": "user", "content": "hi"}])
        with Session.open(store, "live", harness="openai") as session:
            OpenAIHook(session).transform_context([{"role": "user", "content": "hi"}])
        page = _text(httpx.get(serve(store) + "/").text)
    assert re.search(r"swe\s*openai \(replay of swe-agent\)", page), page
    assert re.search(r"live\s*openai\s*1", page) and page.count("replay of") == 1


def _links(html: str) -> list[str]:
    """The pages a page links to (not its forms, anchors or static files)."""
    return [
        link.replace("&amp;", "&")
        for link in re.findall(r'<a [^>]*href="([^"]*)"', html)
        if not link.startswith(("#", "/static/"))
    ]


def test_a_reversed_diff_and_a_page_past_the_end_link_only_to_pages_that_answer(
    served: tuple[Store, str, str],
) -> None:
    """A diff of a later turn with an earlier one, and a `from` past the end (a link kept from a
    longer list, or typed): the page shows the end, and each link on it answers."""
    store, sid, base = served
    with httpx.Client(base_url=base) as client:
        turns = int(re.search(r"(\d+) turns", client.get(f"/session?id={sid}").text).group(1))  # type: ignore[union-attr]
        assert turns >= 4
        pages = {
            f"/diff?session={sid}&a={turns}&b=1": None,
            f"/diff?session={sid}&a={turns - 1}&b=2": None,
            f"/frame?session={sid}&turn={turns}&from=99999": 'id="m',
            f"/session?id={sid}&from=99999": f'id="turn-{turns}"',
            # (the last page of every session the store holds: on a shared node, others' too)
            "/?from=99999": "/session?id=",
        }
        for page, shows in pages.items():
            r = client.get(page)
            assert r.status_code == 200, page
            if shows is not None:
                assert shows in r.text, page  # the last page, not an empty one
            for link in _links(r.text):
                assert client.get(link).status_code == 200, (page, link)
        # an object's versions past the end: their last page, not the last version alone
        n = len(store.history(f"session:{sid}", with_docs=False))
        past = client.get(f"/object?id=session:{sid}&from=99999").text
        rows = re.findall(r'<tr(?: class="focus")?>\s*<td class="n"><a href="/object[^"]*">(\d+)</a>', past)
        last = (n - 1) // 100 * 100
        assert n > 1 and [int(v) for v in rows] == list(range(last + 1, n + 1))


def test_a_browser_that_leaves_before_its_page_is_no_server_error(
    demo_db: Path, serve: Callable[[Store], str], capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Clicking on before a page has loaded (→ held down on a frame) closes the connection the
    server is writing to: that is logged as a client that left, not a traceback on stderr."""
    import logging
    import struct

    caplog.set_level(logging.INFO, logger="context_os")
    with SqliteStore(demo_db) as store:
        base = serve(store)
        host, port = base.removeprefix("http://").split(":")
        for turn in range(80, 89):
            s = socket.create_connection((host, int(port)))
            s.sendall(f"GET /frame?session=demo&turn={turn} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset, not a clean close
            s.close()
        assert httpx.get(base + "/session?id=demo").status_code == 200  # it serves on
        for _ in range(50):  # the server threads answer on their own time
            if sum("left before its answer" in r.getMessage() for r in caplog.records) >= 1:
                break
            threading.Event().wait(0.1)
    assert any("left before its answer" in r.getMessage() for r in caplog.records)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err


def _raw(base: str, request: bytes) -> tuple[str, dict[str, str], str]:
    """Send ``request`` as it is over a socket: the status line, headers and body of the answer."""

    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.decode(errors="replace").partition("\r\n\r\n")
    status, *lines = head.split("\r\n")
    return status, {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}, body


def test_a_request_http_server_cannot_read_gets_the_pages_headers(demo_db: Path, serve: Callable[[Store], str]) -> None:
    """A request line or header http.server cannot read itself is answered with the web view's
    error page and headers (the CSP, nosniff...), not http.server's bare page (which, for a
    request line it could not parse, came without even a status line)."""
    with SqliteStore(demo_db) as store:
        base = serve(store)
        host = base.removeprefix("http://").encode()
        requests = {
            b"GARBAGE\r\n\r\n": "400",
            b"GET / HTTP/9.9\r\n\r\n": "505",
            b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n": "414",
            b"GET / HTTP/1.1\r\nHost: " + host + b"\r\nX: " + b"y" * 70_000 + b"\r\n\r\n": "431",
            b"GET / HTTP/1.1\r\nHost: " + host + b"\r\n" + b"X: 1\r\n" * 120 + b"\r\n": "431",
        }
        for request, code in requests.items():
            status, headers, body = _raw(base, request)
            assert status.startswith(f"HTTP/1.1 {code} "), (request[:40], status)
            assert headers.get("connection") == "close", request[:40]
            assert headers.get("content-security-policy", "").startswith("default-src 'none'"), request[:40]
            assert headers.get("x-content-type-options") == "nosniff"
            assert headers.get("referrer-policy") == "no-referrer"
            assert f"{code} ·" in body and "Error code explanation" not in body
        assert httpx.get(base + "/").status_code == 200  # it serves on


class _CountingStore(SqliteStore):
    """An SQLite store that counts the frames read by id (what a sessions page costs per row)."""

    frames_read = 0

    def get(self, id: str, valid_time: int | None = None, tx_id: int | None = None) -> Version | None:
        if id.startswith("frame:"):
            self.frames_read += 1
        return super().get(id, valid_time, tx_id)


def test_the_sessions_page_reads_only_the_sessions_it_shows(tmp_path: Path) -> None:
    """With more sessions than a page shows, a page reads the latest frame of its own rows only
    (it read every session's to sort them), newest first, and the next page has the rest."""
    from context_os import Session
    from context_os.harness import OpenAIHook
    from context_os.server.ui.app import PAGE_SESSIONS, UiApp

    n = PAGE_SESSIONS + 20
    with _CountingStore(tmp_path / "store.db") as store:
        for k in range(n):
            with Session.open(store, f"s{k:03d}", harness="openai") as session:
                OpenAIHook(session).transform_context([{"role": "user", "content": f"hi {k}"}])
        app = UiApp(store)
        pages = []
        for query in ("/", f"/?from={PAGE_SESSIONS}", "/"):
            store.frames_read = 0
            page = app.respond(query)
            assert page.status == 200
            pages.append(re.findall(r"/session\?id=(s\d+)", page.body.decode()))
            assert store.frames_read == len(set(pages[-1])), (query, store.frames_read)
    first, second, again = (list(dict.fromkeys(p)) for p in pages)
    assert first == [f"s{k:03d}" for k in range(n - 1, n - 1 - PAGE_SESSIONS, -1)]
    assert second == [f"s{k:03d}" for k in range(19, -1, -1)]
    assert again == first


def test_an_objects_state_changes_page(tmp_path: Path, serve: Callable[[Store], str]) -> None:
    """An object with more state changes than a page shows: its page lists the newest page of
    them, says how many there are, and links to the others, each a page of its own."""
    from context_os import Session
    from context_os.harness import OpenAIHook

    page = 100  # changes a page shows (docs/ui.md)
    with SqliteStore(tmp_path / "store.db") as store:
        with Session.open(store, "st", harness="openai") as session:
            call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            msgs = [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "out"},
            ]
            OpenAIHook(session).transform_context(msgs)
            (oid,) = [v.id for v in store.find("toolcall")]
            for k in range(page + 29):
                if k % 2:
                    session.activate(oid, reason=f"change {k}")
                else:
                    session.deactivate(oid, reason=f"change {k}")
        total = len(object_states(store, oid))
        assert total >= page + 29
        with httpx.Client(base_url=serve(store)) as client:
            newest = client.get(f"/object?id={oid}")
            oldest = client.get(f"/object?id={oid}&changes_from=0")
            past = client.get(f"/object?id={oid}&changes_from=99999")

    def changes(page: str) -> list[str]:
        return re.findall(r"<td>(change \d+|[a-z ]+)</td></tr>", page.split('id="states"')[1])

    assert f"State changes ({total})" in newest.text
    assert len(changes(newest.text)) == total - page and changes(newest.text)[-1] == f"change {page + 28}"
    assert len(changes(oldest.text)) == page and "change 0" not in changes(newest.text)
    assert changes(past.text) == changes(newest.text)
    assert f"changes 1–{page} of {total}" in _text(oldest.text)
    assert "changes_from=0#states" in newest.text.replace("&amp;", "&")
    assert f"changes_from={page}#states" in oldest.text.replace("&amp;", "&")


def test_a_session_with_no_turn_yet_is_a_page_that_says_so(
    store: Store, uid: str, serve: Callable[[Store], str]
) -> None:
    """A session opened and never called (a harness started, a test's session) is listed on the
    sessions page: its link answers with a page saying it has no turns, not a 404."""
    from context_os import Session

    Session.open(store, f"{uid}-idle", harness="openai").close()
    base = serve(store)
    with httpx.Client(base_url=base) as client:
        page = client.get(f"/session?id={uid}-idle")
        assert page.status_code == 200 and "No turns yet" in page.text, page.text[:2000]
        assert client.get(f"/session?id={uid}-idle&turn=1").status_code == 404
        assert "has no turns yet, not 1" in client.get(f"/session?id={uid}-idle&turn=1").text
        listed = client.get("/?from=99999").text + client.get("/").text
        for link in re.findall(r'href="(/session\?id=[^"]*)"', listed):
            assert client.get(html.unescape(link)).status_code == 200, link


def test_connections_that_never_finish_their_headers_are_bounded_and_closed(tmp_path: Path) -> None:
    """Slowloris on the web view: each connection held a thread for as long as its client
    trickled its headers in, and there was no bound on their number. Now, as ``ctxos serve
    --http``: at most ``max_connections`` are served at once (one more is answered 503 at once,
    with the web view's error page), and one whose headers are not all in within
    ``header_seconds`` is closed."""
    with SqliteStore(tmp_path / "s.db") as store:
        httpd = make_ui_server(store, 0, max_connections=4, header_seconds=1.0)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        port = httpd.server_address[1]
        try:
            head, body = overfill(port, f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n")
            assert head.split()[1] == b"503", head
            assert b"text/html" in head and b"too many connections" in body
            # with the headers of every page of the web view, error pages too (docs/ui.md)
            fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
            assert fields[b"Content-Security-Policy"] == CSP.encode(), head
            assert fields[b"X-Content-Type-Options"] == b"nosniff" and fields[b"Referrer-Policy"] == b"no-referrer"
            assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 200  # the slots are free again
        finally:
            httpd.shutdown()
            httpd.server_close()


def test_open_starts_the_browser_without_the_token_on_its_command_line(demo_db: Path, tmp_path: Path) -> None:
    """`ctxos ui --open` started the browser with the address and its token as an argument, which
    any local user can read (``/proc/PID/cmdline``): it now names a page only this user can read,
    which sends the browser on, removed when the web view stops. It is stopped (SIGTERM) while
    the browser it started still runs, which ``webbrowser`` waits for: a clean stop all the same
    (it exited 130, Ctrl-C's status, when the stop came before it served: once in a CI run)."""
    said = tmp_path / "browser-args"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\nprintf "%s" "$1" > {said}\nsleep 1\n')
    browser.chmod(0o700)
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "ctxos"), "--store", str(demo_db), "ui", "--port", "0", "--open"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "BROWSER": str(browser)},
    )
    try:
        assert proc.stderr is not None
        token = re.search(r"token=([\w-]+) ", proc.stderr.readline())
        assert token, "no address printed"
        wait_for(lambda: said.exists() and said.read_text(), what="the browser started")
        arg = said.read_text()
        assert token.group(1) not in arg and arg.startswith("file:///")
        page = Path(arg.removeprefix("file://"))
        assert page.stat().st_mode & 0o777 == 0o600 and page.parent.stat().st_mode & 0o777 == 0o700
        assert f"?token={token.group(1)}" in page.read_text()
    finally:
        proc.terminate()
        status = proc.wait(30)
        if proc.stderr:
            proc.stderr.close()
    assert status == 0
    assert not page.parent.exists()


def test_pages_come_on_one_kept_alive_connection_and_a_body_left_unread_closes_it(
    demo_db: Path, serve: Callable[[Store], str]
) -> None:
    """The web view answers HTTP/1.1: a browser fetches a page and what it links to on one
    connection (each answer was HTTP/1.0, its connection closed, until 2026-12-06). A request
    that carries a body the web view does not read is answered and its connection closed: the
    body would be read as the next request."""
    with SqliteStore(demo_db) as store:
        base = serve(store)
        host, port = base.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        socks = []
        for path in ("/", "/session?id=demo", "/frame?session=demo&turn=3"):
            conn.request("GET", path)
            r = conn.getresponse()
            assert (r.status, r.version) == (200, 11) and r.read()
            socks.append(conn.sock)
        assert socks[0] is not None and socks == [socks[0]] * 3  # never closed, never reopened
        conn.close()
        second = f"GET /session?id=demo HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
        for framing in (f"Content-Length: {len(second)}", "Transfer-Encoding: chunked"):
            with socket.create_connection((host, int(port)), timeout=30) as s:
                s.sendall(f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\n{framing}\r\n\r\n".encode() + second)
                answer = b""
                while chunk := s.recv(65536):
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 ") and answer.count(b"HTTP/1.1 ") == 1, answer[:300]
            assert b"\r\nConnection: close\r\n" in answer.partition(b"\r\n\r\n")[0] + b"\r\n"

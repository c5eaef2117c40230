"""The web view's pages: one method per page, each reading a bounded slice of the store.

``UiApp.respond(path)`` answers one GET; ``make_ui_server`` puts it behind an HTTP server on
loopback. A page shows at most one page of rows (``PAGE_TURNS`` turns, ``PAGE_MESSAGES``
messages, ``PAGE_VERSIONS`` versions, ``PAGE_STATES`` state changes, ``PAGE_SESSIONS``
sessions): a session of 50,000 messages pages like a short one.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import mimetypes
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit, urlunsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape

from ...context.evict import no_object
from ...context.frames import FrameCheck, get_frame, verify_frame
from ...context.load import content_lines, object_state_page, unified_diff, version_row
from ...context.timeline import frame_diff, frame_messages, session_page, turn_count, turn_rows, version_at
from ...context.view import POOLS, arguments_text
from ...errors import ConfigError, ContextOSError, InputError, NotFound
from ...store.base import DocMemo, Store, Version
from ...times import display, iso, now_ms, parse_time
from ..protocol import log
from ..transports import (
    BODY_SECONDS,
    HEADER_SECONDS,
    MAX_CONNECTIONS,
    BoundedHTTPServer,
    DeadlineHandler,
    HttpGuard,
    _is_loopback,
    bind,
)

__all__ = ["PAGE_MESSAGES", "PAGE_SESSIONS", "PAGE_STATES", "PAGE_TURNS", "PAGE_VERSIONS", "UiApp", "make_ui_server"]

PAGE_SESSIONS = 100
PAGE_TURNS = 100
PAGE_MESSAGES = 200
PAGE_VERSIONS = 100
PAGE_STATES = 100
ROW_LIST = 6
"""A timeline row lists this many of its state changes (its frame has all)."""
ACTIVE_TITLE = 20
"""A timeline row names this many of its active objects (on hover; its frame has all)."""
CONTENT_CHARS = 200_000
"""A version's content is shown up to this many characters (the rest is named, not sent)."""
MESSAGE_CHARS = 200_000
"""A message on a frame page is shown up to this many characters (``ctxos frames show`` prints it
whole)."""
HUNK_CHARS = 4000
"""A message in a frame diff is shown up to this many characters (the frames have it whole)."""
CHECK_CACHE = 8
"""Re-rendered frames kept, so paging through one frame's messages renders it once."""

_HERE = Path(__file__).parent
_STATIC = _HERE / "static"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)


@dataclass(frozen=True)
class Page:
    """One answer: status, content type and body."""

    status: int
    content_type: str
    body: bytes
    cache: bool = False


def _int(
    q: dict[str, str], name: str, default: int | None = None, *, low: int = 0, high: tuple[int, str] | None = None
) -> int:
    """A whole-number query parameter from ``low`` up to ``high`` (the highest, and what it is)."""
    raw = q.get(name, "")
    if raw == "":
        if default is None:
            raise InputError(f"the query needs {name}=<number>")
        return default
    if not raw.removeprefix("-").isdigit() or not raw.isascii():
        raise InputError(f"{name} must be a whole number, got {raw!r}")
    try:
        value = int(raw)
    except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits())
        raise InputError(f"{name} must be a whole number of fewer digits, got {len(raw):,} characters") from None
    if value < low:
        raise InputError(f"{name} must be at least {low}, got {value}")
    if high is not None and value > high[0]:
        raise InputError(f"{name} must be at most {high[0]} ({high[1]}), got {value}")
    return value


def _required(q: dict[str, str], name: str) -> str:
    value = q.get(name, "")
    if not value:
        raise InputError(f"the query needs {name}=…")
    return value


def _change_label(state: str, collapsed: bool) -> str:
    """What a state change did, in a word: activated, dropped, collapsed or deactivated."""
    if state == "active":
        return "activated"
    if state == "absent":
        return "dropped"
    return "collapsed" if collapsed else "deactivated"


def _labelled(changes: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """How many of ``changes`` did what (``_change_label``), by label."""
    counts = Counter(_change_label(c["state"], bool(c.get("collapsed"))) for c in changes)
    return sorted(counts.items())


class UiApp:
    """The pages of the web view over one store."""

    def __init__(self, store: Store, root: str = ""):
        self.store = store
        self.root = root
        """The path every page's address starts with ("": none; see ``make_ui_server``)."""
        self.env = Environment(
            loader=FileSystemLoader(_HERE / "templates"),
            autoescape=select_autoescape(default=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.globals.update(
            url=lambda path, **params: _url(root + path, **params),
            root=root,
            pools=POOLS,
            store_url=store.url,
            short=_short,
        )
        self.env.filters["num"] = lambda n: "" if n is None else f"{n:,}"
        self.env.filters["args"] = arguments_text
        self.env.filters["pct"] = lambda x, y: "" if x is None or not y else f"{100 * x / y:.0f}%"
        self._routes: dict[str, Callable[[dict[str, str]], Page]] = {
            "/": self.sessions_page,
            "/session": self.timeline_page,
            "/frame": self.frame_page,
            "/diff": self.diff_page,
            "/object": self.object_page,
        }
        self._checks: OrderedDict[str, FrameCheck] = OrderedDict()
        self._lock = threading.Lock()
        # the session documents the sessions page parsed, kept for its next load
        self._session_docs: DocMemo = {}
        self._sessions_lock = threading.Lock()

    # --- dispatch --------------------------------------------------------------------------------

    def respond(self, target: str) -> Page:
        """The answer to ``GET target`` (a path with its query)."""
        parts = urlsplit(target)
        q = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        route = self._routes.get(parts.path)
        try:
            if parts.path.startswith("/static/"):
                return self.static(parts.path.removeprefix("/static/"))
            if route is None:
                raise NotFound(f"no page {parts.path!r}: the pages are /, /session, /frame, /diff and /object")
            return route(q)
        except NotFound as e:
            return self._error(404, "Not found", str(e))
        except InputError as e:
            return self._error(400, "Bad request", str(e))
        except ContextOSError as e:  # the store is down, or damaged
            log.warning("ui: %s: %s", target, e)
            return self._error(503, "The store cannot answer", str(e))

    def _html(self, template: str, **values: Any) -> Page:
        body = self.env.get_template(template).render(**values)
        return Page(200, "text/html; charset=utf-8", body.encode())

    def _error(self, status: int, title: str, message: str, *, outside: bool = False) -> Page:
        """An error page; ``outside``: for a request not admitted (no token, a refused Host or
        Origin, a method or request refused before the token is checked), which is not told the
        path the pages live under (it keeps the token's cookie from any other local server)."""
        values: dict[str, Any] = {"root": ""} if outside else {}
        page = self._html("error.html", title=title, message=message, status=status, **values)
        return Page(status, page.content_type, page.body)

    def static(self, name: str) -> Page:
        path = (_STATIC / name).resolve()
        if path.parent != _STATIC.resolve() or not path.is_file():
            raise NotFound(f"no static file {name!r}")
        ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype.endswith("javascript"):
            ctype += "; charset=utf-8"
        return Page(200, ctype, path.read_bytes(), cache=True)

    # --- pages -----------------------------------------------------------------------------------

    def sessions_page(self, q: dict[str, str]) -> Page:
        start = _int(q, "from", 0)
        with self._sessions_lock:
            total, rows = session_page(self.store, start, PAGE_SESSIONS, docs=self._session_docs)
            if not rows and total:  # past the end: the last page
                start = _past_end(start, total, PAGE_SESSIONS)
                total, rows = session_page(self.store, start, PAGE_SESSIONS, docs=self._session_docs)
        return self._html(
            "sessions.html",
            title="Sessions",
            rows=rows,
            total=total,
            start=start,
            page=PAGE_SESSIONS,
        )

    def timeline_page(self, q: dict[str, str]) -> Page:
        session = _required(q, "id")
        turns = turn_count(self.store, session)  # NotFound: no such session
        focus = _int(q, "turn", 0)
        if turns == 0 and not focus:  # a session the sessions page lists, before its first model call
            return self._html("timeline.html", title=f"Session {session}", session=session, rows=[], turns=0)
        if focus > turns:
            has = f"turns 1–{turns}" if turns else "no turns yet"
            raise NotFound(f"session {session!r} has {has}, not {focus}")
        default_first = ((focus - 1) // PAGE_TURNS) * PAGE_TURNS + 1 if focus else 1
        first = _past_end(_int(q, "from", default_first, low=1) - 1, turns, PAGE_TURNS) + 1
        rows = turn_rows(self.store, session, first, PAGE_TURNS)
        scale = max((r.row.tokens_full for r in rows), default=1) or 1
        shown = []
        for r in rows:
            shown.append(
                {
                    "row": r.row,
                    "bar": _bar(r.row.pools, r.row.tokens_assembled, r.row.tokens_full, scale),
                    "changes": r.changes[:ROW_LIST],
                    "listed": len(r.changes),
                    "labels": _labelled(r.changes),
                    "active_title": "\n".join(r.active_ids[:ACTIVE_TITLE])
                    + (f"\n… {len(r.active_ids) - ACTIVE_TITLE} more" if len(r.active_ids) > ACTIVE_TITLE else ""),
                }
            )
        return self._html(
            "timeline.html",
            title=f"Session {session}",
            session=session,
            rows=shown,
            turns=turns,
            first=first,
            page=PAGE_TURNS,
            focus=focus,
        )

    def _verified(self, frame: dict[str, Any]) -> FrameCheck:
        """``frame`` re-rendered and verified (kept for the next few requests while the store has
        no newer transaction: one may have evicted what the frame showed)."""
        latest = self.store.latest_tx()
        key = f"{frame['id']}@{frame['object_hash']}@{latest.id if latest else 0}"
        with self._lock:
            hit = self._checks.get(key)
            if hit is not None:
                self._checks.move_to_end(key)
                return hit
        check = verify_frame(self.store, frame)
        with self._lock:
            self._checks[key] = check
            while len(self._checks) > CHECK_CACHE:
                self._checks.popitem(last=False)
        return check

    def frame_page(self, q: dict[str, str]) -> Page:
        session = _required(q, "session")
        turn = _int(q, "turn", low=1)
        frame = get_frame(self.store, session, turn)
        check = self._verified(frame)
        count = check.rendered.message_count if check.rendered is not None else 0
        start = _past_end(_int(q, "from", 0), count, PAGE_MESSAGES)
        total, messages = frame_messages(self.store, frame, check, start, start + PAGE_MESSAGES)
        c = frame["content"]
        return self._html(
            "frame.html",
            title=f"Turn {turn} of {session}",
            session=session,
            turn=turn,
            turns=turn_count(self.store, session),
            frame=frame,
            content=c,
            check=check,
            messages=messages,
            total=total,
            start=start,
            page=PAGE_MESSAGES,
            pool_bar=_bar(c.get("pools"), c["tokens"], c["tokens_full"], c["tokens_full"] or 1),
            changes=c.get("changes", []),
            changes_total=c.get("changes_total", 0),
            label=_change_label,
            clip=_clip,
            time=iso(frame["content"]["valid_time"]),
        )

    def diff_page(self, q: dict[str, str]) -> Page:
        session = _required(q, "session")
        b = _int(q, "b", low=1)
        a = _int(q, "a", max(1, b - 1), low=1)
        diff = frame_diff(self.store, session, a, b, check=self._verified)
        return self._html(
            "diff.html",
            title=f"Turn {a} → {b} of {session}",
            session=session,
            diff=diff,
            turns=turn_count(self.store, session),
            page=PAGE_MESSAGES,
            cut=_cut,
        )

    def _with_doc(self, v: Version) -> Version:
        """``v`` (from a history read without documents) with its document."""
        got = self.store.get(v.id, v.valid_time, v.tx_id)
        return got if got is not None and (got.valid_time, got.tx_id) == (v.valid_time, v.tx_id) else v

    def _has_timeline(self, session: object) -> bool:
        """Whether ``session`` (an object's ``meta.session``) is a session with turns: a mesh
        message's or a memory entry's is a scope (``mesh:alice``), with no timeline to link to."""
        if not isinstance(session, str) or not session:
            return False
        try:
            return turn_count(self.store, session) > 0
        except NotFound:
            return False

    def object_page(self, q: dict[str, str]) -> Page:
        obj_id = _required(q, "id")
        vt = parse_time(q["vt"], "vt") if q.get("vt") else None
        # the history without documents: only the versions the page shows are read whole
        versions = self.store.history(obj_id, with_docs=False)
        if not versions:
            raise no_object(self.store, obj_id)
        n = len(versions)
        latest_tx = self.store.latest_tx()
        newest = latest_tx.id if latest_tx else versions[-1].tx_id
        tx = _int(q, "tx", high=(newest, "the store's newest transaction")) if q.get("tx") else None
        as_of = n if vt is None and tx is None else version_at(self.store, obj_id, versions, vt, tx)
        shown = self._with_doc(versions[as_of - 1]) if as_of else None
        text = "".join(content_lines(shown.doc)) if shown else ""
        versions_n = (n, f"{obj_id} has {n} version{'s' if n != 1 else ''}")
        b = _int(q, "b", n, low=1, high=versions_n)
        a = _int(q, "a", max(1, b - 1), low=1, high=versions_n)
        old, new = self._with_doc(versions[a - 1]), self._with_doc(versions[b - 1])
        diff = unified_diff(content_lines(old.doc), content_lines(new.doc), f"v{a}", f"v{b}")
        start = _past_end(_int(q, "from", max(0, n - PAGE_VERSIONS)), n, PAGE_VERSIONS)
        rows = []
        for k, v in enumerate(versions[start : start + PAGE_VERSIONS], start + 1):
            v = self._with_doc(v)
            rows.append(version_row(k, v) | {"path": (v.doc or {}).get("meta", {}).get("path")})
        changes_from = _int(q, "changes_from") if q.get("changes_from") else None  # None: the newest
        states_total, states_start, states = object_state_page(self.store, obj_id, changes_from, PAGE_STATES)
        latest = self._with_doc(versions[-1]).doc or {}
        meta = latest.get("meta", {})
        return self._html(
            "object.html",
            title=obj_id,
            obj_id=obj_id,
            kind=latest.get("kind", obj_id.split(":", 1)[0]),
            meta=meta,
            timeline=self._has_timeline(meta.get("session")),
            versions=rows,
            total=n,
            start=start,
            page=PAGE_VERSIONS,
            states=states,
            states_total=states_total,
            states_start=states_start,
            states_page=PAGE_STATES,
            as_of=as_of,
            shown=version_row(as_of, shown) if shown else None,
            text=text[:CONTENT_CHARS],
            cut=max(0, len(text) - CONTENT_CHARS),
            vt=vt,
            tx=tx,
            vt_shown=display(vt) if vt is not None else "now",
            vt_min=versions[0].valid_time,
            vt_max=max(now_ms(), versions[-1].valid_time),
            tx_min=versions[0].tx_id,
            tx_max=newest,
            marks_vt=_marks(sorted({v.valid_time for v in versions})),
            marks_tx=_marks(sorted({v.tx_id for v in versions})),
            a=a,
            b=b,
            diff=diff[:CONTENT_CHARS],
            diff_cut=max(0, len(diff) - CONTENT_CHARS),
        )


def _past_end(start: int, total: int, page: int) -> int:
    """``start``, or the first row of the last page if it is past the ``total`` rows: a link kept
    from a longer list (or typed) shows the end, not an empty page."""
    return start if start < total else max(0, (total - 1) // page * page)


def _marks(points: list[int], most: int = 200) -> list[int]:
    """At most ``most`` of ``points`` (evenly spread, first and last kept): a slider's tick marks."""
    if len(points) <= most:
        return points
    step = (len(points) - 1) / (most - 1)
    return [points[round(k * step)] for k in range(most)]


def _url(path: str, **params: Any) -> str:
    """A link to one of the pages, its query built from ``params`` (None: left out)."""
    return _link(path, tuple((k, v) for k, v in params.items() if v is not None))


@functools.lru_cache(maxsize=8192)
def _link(path: str, params: tuple[tuple[str, Any], ...]) -> str:
    # a timeline page links the same objects from many rows: each link is encoded once
    query = urlencode(params)
    return f"{path}?{query}" if query else path


def _cut(text: str | None, limit: int = HUNK_CHARS) -> str:
    """A message's text up to ``limit`` characters, then how much more there is."""
    text = text or ""
    return text if len(text) <= limit else f"{text[:limit]}\n… {len(text) - limit:,} more characters"


def _clip(text: str | None) -> str:
    return _cut(text, MESSAGE_CHARS)


def _short(h: str | None, n: int = 12) -> str:
    """A hash shortened for tables: ``b3:`` and its first ``n`` hex digits."""
    return "" if not h else h[: 3 + n] if h.startswith("b3:") else h[:n]


BAR_WIDTH = 360


def _bar(pools: dict[str, int] | None, assembled: int, full: int, scale: int) -> dict[str, Any]:
    """The stacked bar of one turn: its pools (or one segment if the frame has none) against the
    naive transcript, in pixels of ``BAR_WIDTH`` for ``scale`` tokens."""
    px = BAR_WIDTH / max(1, scale)
    segments = []
    x = 0.0
    for pool, tokens in [(p, pools.get(p, 0)) for p in POOLS] if pools else [("assembled", assembled)]:
        if tokens <= 0:
            continue
        segments.append({"pool": pool, "x": round(x, 1), "w": round(max(tokens * px, 0.5), 1), "tokens": tokens})
        x += tokens * px
    return {"width": BAR_WIDTH, "full": round(full * px, 1), "segments": segments}


def make_ui_server(
    store: Store,
    port: int = 0,
    *,
    host: str = "127.0.0.1",
    token: str | None = None,
    max_connections: int = MAX_CONNECTIONS,
    header_seconds: float = HEADER_SECONDS,
    body_seconds: float = BODY_SECONDS,
) -> BoundedHTTPServer:
    """An HTTP server for the web view of ``store``, bound to loopback (``port`` 0: any free).
    It serves ``max_connections`` at once, and closes one whose request line and headers took
    over ``header_seconds`` to arrive (or a body ``body_seconds``), as ``ctxos serve --http`` does.

    ``token``: every page needs it (None: none does). A browser brings it once, in the address
    (``?token=…``, what ``ctxos ui`` prints): the answer is a redirect to the same page without it
    that sets it as a cookie (HttpOnly, SameSite=Strict, named after the port, so that two web
    views on one host keep theirs apart), which every later request carries. With a token the
    pages live under a path derived from it (``_root``), the cookie's ``Path``: a browser sends
    cookies of 127.0.0.1 to every port, and this one only to addresses under that path, which no
    other server on the machine is asked for without knowing it."""
    if not _is_loopback(host):
        raise ConfigError(f"the web view binds to a loopback address only, not {host!r}")
    root = _root(token) if token is not None else ""
    app = UiApp(store, root)

    class Handler(DeadlineHandler):
        server_version = "context_os-ui"
        protocol_version = "HTTP/1.1"  # a page's next request (its styles, a link) on the same connection

        def _answer(self, page: Page, *, head: bool = False) -> None:
            try:
                self._write(page, head=head)
            except (BrokenPipeError, ConnectionResetError):  # the browser left (another link clicked)
                self.close_connection = True
                log.info("ui: client %s left before its answer (%d)", self.client_address[0], page.status)

        def _write(self, page: Page, *, head: bool) -> None:
            self.send_response(page.status)
            self.send_header("Content-Type", page.content_type)
            self.send_header("Content-Length", str(len(page.body)))
            self.send_header("Content-Security-Policy", CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("Cache-Control", "max-age=300" if page.cache else "no-store")
            if page.status == 405:
                self.send_header("Allow", "GET, HEAD")
            self.end_headers()
            if not head:
                self.wfile.write(page.body)

        def _get(self, head: bool) -> None:
            self.close_connection = self.close_connection or self.declares_body()  # (left unread)
            refusal = httpd.guard.refusal("GET", self.headers)
            if refusal is not None:
                log.warning("ui: GET refused: %s", refusal[1])
                self.close_connection = True
                self._answer(app._error(refusal[0], "Refused", refusal[1], outside=True), head=head)
                return
            target = self.path if token is None else self._admitted(head)
            if target is None:
                return
            try:
                page = app.respond(target)
            except Exception as e:  # a bug: the browser gets a page saying so, the log the traceback
                log.exception("ui: GET %s failed", self.path)
                page = app._error(500, "Internal error", f"{type(e).__name__}: {e} (the server's log has the details)")
            self._answer(page, head=head)

        def _admitted(self, head: bool) -> str | None:
            """The page to answer (its path within the web view, with its query) if the request
            carries the token (its cookie) and names a page under the web view's root; else None,
            answered: a token in the address with a redirect to the page under the root that
            sets the cookie, no token, or a wrong one, with 401."""
            assert token is not None
            cookie_name = f"ctxos_ui_{httpd.server_address[1]}"
            parts = urlsplit(self.path)
            query = parse_qs(parts.query, keep_blank_values=True)
            given = query.pop("token", None)
            inner = _within(parts.path, root)
            if given is not None and _same(given[-1], token):
                self.send_response(303)
                page = _local_path(inner if inner is not None else parts.path)
                back = urlunsplit(("", "", root + page, urlencode(query, doseq=True), ""))
                self.send_header("Location", back)
                self.send_header("Set-Cookie", f"{cookie_name}={token}; HttpOnly; SameSite=Strict; Path={root}")
                for name, value in _UiServer.busy_headers:  # every answer's: CSP, nosniff, no referrer, no store
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            if (
                given is None
                and inner is not None
                and any(_same(value, token) for value in _cookies(self.headers, cookie_name))
            ):
                return urlunsplit(("", "", inner, parts.query, ""))
            why = "the token in the address is wrong" if given is not None else "this web view needs its token"
            self.close_connection = True
            error = app._error(
                401, "Token needed", f"{why}: open the address `ctxos ui` printed, which carries it", outside=True
            )
            self._answer(error, head=head)
            return None

        def do_GET(self) -> None:  # noqa: N802 - http.server naming
            self._get(False)

        def do_HEAD(self) -> None:  # noqa: N802 - http.server naming
            self._get(True)

        def _read_only(self) -> None:
            self.close_connection = True
            self._answer(
                app._error(405, "Read-only", f"{self.command} refused: this web view only reads", outside=True)
            )

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _read_only  # noqa: N815

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            # what http.server answers itself (a request line or header it cannot read, a path
            # too long): the web view's error page with its headers, not http.server's bare one
            # (which, for a request line it could not read, came without even a status line)
            self.close_connection = True
            if self.request_version == "HTTP/0.9":
                self.request_version = "HTTP/1.0"
            phrase = self.responses.get(code, ("Error", ""))[0]
            page = app._error(code, phrase, message or phrase, outside=True)
            self._answer(page, head=self.command == "HEAD")

        def __getattr__(self, name: str) -> Any:
            # any other method (TRACE, CONNECT, made-up ones) is refused the same way, not with
            # http.server's bare 501 page without the headers above
            if name.startswith("do_"):
                return self._read_only
            raise AttributeError(name)

        def log_message(self, format: str, *args: Any) -> None:
            # a request line carries the token the first time (``?token=``): the log does not
            said = format % args
            if token is not None:
                said = said.replace(token, "***")
            log.info("ui %s - %s", self.client_address[0], said)

    httpd = bind(_UiServer, host, port, Handler)
    httpd.bound(max_connections, header_seconds, body_seconds)
    httpd.app = app
    bound_host, bound_port = httpd.server_address[:2]
    httpd.guard = HttpGuard.for_address(str(bound_host), bound_port, None)
    return httpd


def _root(token: str) -> str:
    """The path the pages of a web view with ``token`` live under (and its cookie's ``Path``):
    derived from the token, so an address kept from an earlier start with the same token still
    answers, and not the token (it shows in the address bar)."""
    return "/" + hashlib.sha256(b"context_os web view\0" + token.encode()).hexdigest()[:24]


def _within(path: str, root: str) -> str | None:
    """``path`` as a page of a web view under ``root`` (``/`` and on); None if it is not under it."""
    if path == root:
        return "/"
    return path[len(root) :] if path.startswith(root + "/") else None


def _local_path(path: str) -> str:
    """``path`` as a path on this server for a ``Location``: one leading slash, and a backslash or
    anything else a browser would read as part of an address escaped (``/\\evil.example/``, which a
    browser takes for ``//evil.example/``, another site, stays a path here)."""
    return "/" + quote(path, safe="/%:@!$&'()*+,;=~").lstrip("/")


def _cookies(headers: Any, name: str) -> list[str]:
    """The values of the cookies named ``name`` in a request's ``Cookie`` headers, read by hand:
    a browser sends every cookie of 127.0.0.1 to every port, and ``http.cookies`` stops reading
    at the first it dislikes (another local app's JSON value, a space), losing ours."""
    out = []
    for header in headers.get_all("Cookie") or ():
        for pair in header.split(";"):
            key, eq, value = pair.strip().partition("=")
            if eq and key == name:
                out.append(value.strip().strip('"'))
    return out


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


class _UiServer(BoundedHTTPServer):
    guard: HttpGuard
    app: UiApp
    busy_headers = (
        ("Content-Security-Policy", CSP),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("Cache-Control", "no-store"),
    )

    def busy(self) -> tuple[str, bytes]:
        why = "too many connections at once: reload when a page has loaded"
        page = self.app._error(503, "Busy", why, outside=True)
        return page.content_type, page.body

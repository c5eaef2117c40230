"""The XTDB backend's own concerns, against a real node: the document ↔ EDN mapping, each known
XTDB 1.x pitfall, batching, and how transport failures are translated and retried.

The bitemporal semantics themselves are pinned for every backend by tests/store/test_store_contract.py.
"""

from __future__ import annotations

import base64
import math
import socket
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import edn_format
import httpx
import pytest

from context_os.errors import ConfigError, StoreError, StoreUnavailable
from context_os.store import Delete, Evict, Match, Put, _http, open_store
from context_os.store.base import now_ms
from context_os.store.edn import Keyword
from context_os.store.outbox import OutboxStore
from context_os.store.xtdb import XtdbStore, _iso, _ms, _read_edn
from tests._xtdb_node import CuttableProxy

pytestmark = pytest.mark.xtdb

DAY_MS = 86_400_000


@pytest.fixture
def xs(xtdb_url: str, xtdb_sidecar: Path) -> Iterator[XtdbStore]:
    s = XtdbStore(xtdb_url, text_index_path=xtdb_sidecar)
    try:
        yield s
    finally:
        s.close()


def _raw(xs: XtdbStore, method: str, endpoint: str, **kw: Any) -> httpx.Response:
    """Talk to the node directly, to see what XTDB itself stores and answers, once it has indexed
    what ``xs`` wrote: a submit of puts and deletes returns before the node indexes it, and only
    the store's own reads wait for that (a raw ``entity-tx`` right after a submit answered "not
    found" one clean-clone run in three)."""
    xs.sync()
    headers = {"Accept": "application/edn", **kw.pop("headers", {})}
    return httpx.request(method, f"{xs.base}/_xtdb/{endpoint}", headers=headers, timeout=30, **kw)


def _raw_submit(xs: XtdbStore, tx_ops: str) -> httpx.Response:
    r = _raw(
        xs,
        "POST",
        "submit-tx",
        content=("{:tx-ops [" + tx_ops + "]}").encode(),
        headers={"Content-Type": "application/edn", "Accept": "application/edn"},
    )
    if r.status_code == 202:
        tx_id = edn_format.loads(r.text)[edn_format.Keyword("xtdb.api/tx-id")]
        assert _raw(xs, "GET", "await-tx", params={"tx-id": tx_id}).status_code == 200
    return r


TRICKY_STRINGS = [
    "",
    "plain",
    'quote " and backslash \\ and \\n literal',
    "newline\n tab\t cr\r formfeed\f backspace\b",
    "control \x00 \x01 \x1f \x7f",
    "unicode é ü 中文 עברית 😀 🏳️‍🌈 e\u0301",
    "\u2028 line separator",
    ":looks-like-a-keyword",
    '#inst "2020-01-01T00:00:00Z"',
    "nil",
    '#xtdb/id "00"',
    "\\u00e9 escaped-looking",
]


def _rich_doc(doc_id: str, path: str) -> dict[str, Any]:
    return {
        "id": doc_id,
        "kind": "file",
        "content": {
            "strings": TRICKY_STRINGS,
            "numbers": [0, -1, 2**62, 2**63 + 5, -(2**70), 1.0, -2.5, 1e-7, 1.5e300, 0.1 + 0.2],
            "nested": {"a": {"b": {"c": [None, True, False, [], {}, [[]], {"": None}]}}},
            "many_keys": {f"k{i}": i for i in range(20)},
            "null": None,
        },
        "meta": {
            "path": path,
            "size": 1234,
            "ratio": 0.25,
            "flag": False,
            "nothing": None,
            "tags": ["a", "b"],
            "nested": {"x": [1, {"y": "z"}]},
            "with space": 1,
            "with/slash": 2,
            "1digit": 3,
            "": 4,
            "ünï": 5,
            "xt/id": "not the id",
            "dotted.key": 6,
        },
        "content_hash": "b3:00",
        "meta_hash": "b3:01",
        "object_hash": "b3:02",
        "extra top/level": {"kept": True},
    }


def _same_types(a: Any, b: Any) -> bool:
    """Equal values of equal types all the way down (1 vs 1.0 vs True matter here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_types(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_types(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)))


# -- the document mapping ----------------------------------------------------------------------


def test_documents_round_trip_exactly(xs: XtdbStore, uid: str) -> None:
    doc = _rich_doc(f"file:{uid}", f"src/{uid}.py")
    xs.put(doc, valid_from=1_600_000_000_000)
    got = xs.doc(doc["id"])
    assert got == doc
    assert _same_types(got, doc)
    [v] = xs.history(doc["id"])
    assert _same_types(v.doc, doc)
    [found] = xs.find("file", {"path": f"src/{uid}.py", "with space": 1})
    assert found.id == doc["id"] and _same_types(found.doc, doc)


def test_dicts_come_back_with_sorted_keys_like_sqlite(xs: XtdbStore, uid: str) -> None:
    # XTDB keeps maps of more than 8 entries as hash maps: key order is lost, so both stores
    # return sorted keys at every level.
    doc: dict[str, Any] = {
        "id": f"x:{uid}",
        "meta": {"z": 1, "a": 2},
        "kind": "k",
        "content": {f"k{i}": i for i in (9, 3, 7)},
    }
    xs.put(doc)
    got = xs.doc(doc["id"])
    assert got is not None
    assert list(got) == sorted(doc)
    assert list(got["meta"]) == ["a", "z"]
    assert list(got["content"]) == ["k3", "k7", "k9"]


def test_empty_and_absent_meta_stay_distinct(xs: XtdbStore, uid: str) -> None:
    xs.submit([Put({"id": f"a:{uid}", "kind": "k", "meta": {}}), Put({"id": f"b:{uid}", "kind": "k"})])
    assert xs.doc(f"a:{uid}") == {"id": f"a:{uid}", "kind": "k", "meta": {}}
    assert xs.doc(f"b:{uid}") == {"id": f"b:{uid}", "kind": "k"}


def test_documents_that_are_not_json_are_refused_before_sending(xs: XtdbStore, uid: str) -> None:
    before = xs.latest_tx()
    bad: list[Any] = [
        {"id": f"x:{uid}", "meta": {"n": math.nan}},
        {"id": f"x:{uid}", "meta": {1: "int key"}},
        {"id": f"x:{uid}", "content": {"a set": {1, 2}}},
        {"id": 42},
        {"kind": "no id"},
    ]
    for doc in bad:
        with pytest.raises(StoreError):
            xs.put(doc)
    with pytest.raises(StoreError, match="valid_from"):
        xs.put({"id": f"x:{uid}"}, valid_from=1.5)  # type: ignore[arg-type]
    assert xs.latest_tx() == before
    assert xs.get(f"x:{uid}") is None


# -- each known pitfall -----------------------------------------------------------------------


def test_pitfall_document_keys_must_be_keywords(xs: XtdbStore, uid: str) -> None:
    # XTDB refuses string keys outright...
    r = _raw_submit(xs, f'[:xtdb.api/put {{"xt/id" "raw:{uid}" "kind" "k"}}]')
    assert r.status_code == 400
    assert "invalid doc" in r.text
    # ...so ours are written as keywords, and meta attributes are plain Datalog attributes.
    xs.put({"id": f"kw:{uid}", "kind": "k", "meta": {"path": f"p-{uid}", "with space": 1}})
    stored = _raw(xs, "GET", "entity", params={"eid-edn": f'"kw:{uid}"'}).text
    assert ':xt/id "kw:' in stored and ":kind " in stored and f':meta/path "p-{uid}"' in stored
    q = f'{{:query {{:find [e] :where [[e :meta/path "p-{uid}"]]}}}}'
    r = _raw(xs, "POST", "query", content=q.encode(), headers={"Content-Type": "application/edn"})
    assert edn_format.loads(r.text) == ((f"kw:{uid}",),) or list(map(list, edn_format.loads(r.text))) == [[f"kw:{uid}"]]


def test_pitfall_inst_has_millisecond_precision(xs: XtdbStore, uid: str) -> None:
    times = [1_700_000_000_123, 1_700_000_000_999, 1, 0, -1, -62_135_596_800_000 + 7]  # ms edges, year 1
    for i, t in enumerate(times):
        xs.put({"id": f"t:{uid}:{i}", "kind": "k"}, valid_from=t)
        v = xs.get(f"t:{uid}:{i}", valid_time=t)
        assert v is not None and v.valid_time == t
        assert xs.get(f"t:{uid}:{i}", valid_time=t - 1) is None
    # The conversions are exact integer arithmetic both ways.
    for t in [0, 1, -1, 999, 1_000, 1_699_999_999_999, 253_402_300_799_999]:
        text = _iso(t)
        assert len(text.split(".")[1]) == 4  # "mmmZ"
        assert _ms(datetime.fromisoformat(text.replace("Z", "+00:00"))) == t
    with pytest.raises(StoreError, match="outside the years"):
        _iso(253_402_300_800_000)


def test_pitfall_responses_carry_xtdb_id_tags(xs: XtdbStore, uid: str) -> None:
    xs.submit([Put({"id": f"h:{uid}", "kind": "k"}, valid_from=1_000), Delete(f"h:{uid}", valid_from=2_000)])
    raw = _raw(xs, "GET", "entity-tx", params={"eid-edn": f'"h:{uid}"', "valid-time": _iso(1_500)}).text
    assert "#xtdb/id" in raw
    # Read through the tag handler: the deletion is recognised by XTDB's nil content hash.
    versions = xs.history(f"h:{uid}", with_docs=False)
    assert [(v.valid_time, v.deleted, v.doc) for v in versions] == [(1_000, False, None), (2_000, True, None)]


def test_pitfall_id_type_is_part_of_identity(xs: XtdbStore, uid: str) -> None:
    n = int(uid, 16) % 10**9
    assert _raw_submit(xs, f'[:xtdb.api/put {{:xt/id {n} :kind "int-id"}}]').status_code == 202
    assert xs.get(str(n)) is None  # the string "123" is another entity than the integer 123
    xs.put({"id": str(n), "kind": "string-id"})
    assert xs.doc(str(n)) == {"id": str(n), "kind": "string-id"}
    with pytest.raises(StoreError, match="ids are strings"):
        xs.get(n)  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="ids are strings"):
        xs.submit([Delete(n)])  # type: ignore[arg-type]


def test_a_document_another_client_nested_too_deeply_to_read_is_a_store_error_naming_it(
    xs: XtdbStore, uid: str
) -> None:
    """The node takes a document nested 1,500 levels deep (its threads' 4 MB stacks: with the
    JVM's default a submit of 800 levels was an HTTP 500 StackOverflowError; 3,000 levels passed
    on a node warmed up by the tests before and overflowed on a fresh one); this store cannot
    walk one (it refuses to write one) and said so as a bare ``RecursionError`` in get, history
    and find of its whole kind."""
    deep = "[" * 1_500 + "1" + "]" * 1_500
    r = _raw_submit(xs, f'[:xtdb.api/put {{:xt/id "deep:{uid}" :kind "deep-{uid}" :v {deep}}}]')
    assert r.status_code == 202, r.text
    try:
        xs.put({"id": f"fine:{uid}", "kind": f"deep-{uid}"})
        for read in (
            lambda: xs.get(f"deep:{uid}"),
            lambda: xs.history(f"deep:{uid}", with_docs=True),
            lambda: xs.find(f"deep-{uid}"),
        ):
            with pytest.raises(StoreError, match="nested too deeply to read"):
                read()
        assert xs.get(f"fine:{uid}") is not None
    finally:
        # the node is the whole run's: a test that reads every document of it (tests/context/
        # test_evict.py) would meet this one and fail, when it runs after this file
        assert _raw_submit(xs, f'[:xtdb.api/evict "deep:{uid}"]').status_code == 202


def test_pitfall_history_stops_at_the_queried_valid_time(xs: XtdbStore, uid: str) -> None:
    doc_id = f"f:{uid}"
    future = now_ms() + DAY_MS
    xs.submit([Put({"id": doc_id, "kind": "k", "v": 1}, valid_from=1_000)])
    xs.submit([Put({"id": doc_id, "kind": "k", "v": 2}, valid_from=future)])
    # The future version exists...
    assert xs.doc(doc_id, valid_time=future) == {"id": doc_id, "kind": "k", "v": 2}
    # ...but history is read as of now: ascending ends there, descending starts there.
    assert [v.valid_time for v in xs.history(doc_id, "asc")] == [1_000]
    assert [v.valid_time for v in xs.history(doc_id, "desc")] == [1_000]
    assert [v.valid_time for v in xs.history(doc_id, "desc", start_valid_time=future + 1)] == [1_000]


def test_pitfall_edn_not_json(xs: XtdbStore, uid: str) -> None:
    # JSON answers cut times to whole seconds; every request asks for EDN.
    assert xs._client.headers["Accept"] == "application/edn"
    r = _raw(xs, "GET", "latest-completed-tx", headers={"Accept": "application/edn"})
    assert "#inst" in r.text
    xs.put({"id": f"j:{uid}", "kind": "k"}, valid_from=1_234_567)
    v = xs.get(f"j:{uid}", valid_time=1_234_567)
    assert v is not None and v.valid_time == 1_234_567


# -- transactions -----------------------------------------------------------------------------


def test_a_batch_is_one_transaction(xs: XtdbStore, uid: str) -> None:
    ops = [Put({"id": f"b:{uid}:{i}", "kind": "batch", "meta": {"batch": uid, "i": i}}) for i in range(50)]
    tx = xs.submit(ops)
    assert tx.committed
    found = xs.find("batch", {"batch": uid})
    assert len(found) == 50
    assert {v.tx_id for v in found} == {tx.id}
    assert {v.tx_time for v in found} == {tx.time}
    latest = xs.latest_tx()
    assert latest is not None and latest.id >= tx.id


def test_failed_match_is_a_recorded_uncommitted_tx(xs: XtdbStore, uid: str) -> None:
    doc: dict[str, Any] = {"id": f"m:{uid}", "kind": "k", "meta": {"n": 1}}
    xs.put(doc)
    current = xs.doc(doc["id"])
    ok = xs.submit([Match(doc["id"], current), Put({**doc, "meta": {"n": 2}})])
    assert ok.committed
    failed = xs.submit([Match(doc["id"], current), Put({**doc, "meta": {"n": 3}})])
    assert not failed.committed
    assert failed.id > ok.id
    assert xs.doc(doc["id"]) == {**doc, "meta": {"n": 2}}
    assert xs.submit([Match(f"absent:{uid}", None)]).committed
    assert not xs.submit([Match(doc["id"], None)]).committed


def test_evict_erases_every_version(xs: XtdbStore, uid: str) -> None:
    doc_id = f"secret:{uid}"
    xs.submit([Put({"id": doc_id, "kind": "k", "content": "leaked"}, valid_from=1_000)])
    xs.submit([Put({"id": doc_id, "kind": "k", "content": "still leaked"})])
    tx = xs.submit([Evict(doc_id)])
    assert tx.committed
    assert xs.get(doc_id) is None
    assert xs.get(doc_id, valid_time=1_500, tx_id=tx.id - 1) is None
    assert xs.history(doc_id) == []


def test_find_compares_values_as_the_sqlite_store_does(xs: XtdbStore, uid: str) -> None:
    values: dict[str, Any] = {"int": 1, "float": 1.0, "bool": True, "str": "1", "list": [1, 2], "none": None}
    xs.submit([Put({"id": f"n:{uid}:{k}", "kind": f"num-{uid}", "meta": {"n": v}}) for k, v in values.items()])

    def ids(where: dict[str, Any]) -> list[str]:
        return [v.id.rsplit(":", 1)[1] for v in xs.find(f"num-{uid}", where)]

    assert ids({"n": 1}) == ["float", "int"]  # XTDB alone would tell 1 from 1.0
    assert ids({"n": 1.0}) == ["float", "int"]
    assert ids({"n": True}) == ["bool"]
    assert ids({"n": "1"}) == ["str"]
    assert ids({"n": [1, 2]}) == ["list"]  # XTDB alone would match a list by its elements
    assert ids({"n": 2}) == []
    assert ids({"n": None}) == ["none"]
    assert ids({"missing": None}) == []
    assert len(xs.find(f"num-{uid}")) == len(values)


# -- transport: errors and retries ------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_nothing_listening_is_store_unavailable() -> None:
    url = f"xtdb+http://127.0.0.1:{_free_port()}"
    with XtdbStore(url, timeout=5) as s:
        s.BACKOFF_S = 0.01
        for call in (
            lambda: s.get("x"),
            lambda: s.put({"id": "x"}),
            lambda: s.history("x"),
            lambda: s.find("k"),
            lambda: s.latest_tx(),
            lambda: s.stats(),
        ):
            with pytest.raises(StoreUnavailable, match=r"http://127\.0\.0\.1:\d+ cannot be reached"):
                call()


def test_urls() -> None:
    assert XtdbStore("xtdb+http://127.0.0.1:3000/").base == "http://127.0.0.1:3000"
    assert XtdbStore("http://127.0.0.1:3000").url == "xtdb+http://127.0.0.1:3000"
    wrapped = open_store("xtdb+http://127.0.0.1:3000")  # behind an outbox (tests/store/test_xtdb_outbox.py)
    assert isinstance(wrapped, OutboxStore) and isinstance(wrapped.inner, XtdbStore)
    assert isinstance(open_store("xtdb+http://127.0.0.1:3000?outbox=off"), XtdbStore)
    with pytest.raises(ConfigError):
        XtdbStore("xtdb+ftp://x")


def test_a_url_may_name_several_nodes_of_a_cluster() -> None:
    s = XtdbStore("xtdb+http://u:secret@127.0.0.1:3000,127.0.0.1:3001/prefix")
    assert s.bases == ["http://127.0.0.1:3000/prefix", "http://127.0.0.1:3001/prefix"]
    assert s.base == s.bases[0] and "secret" not in s.url and s.url.startswith("xtdb+http://u:***@")
    wrapped = open_store("xtdb+http://127.0.0.1:3000,127.0.0.1:3001")  # one outbox for the cluster
    assert isinstance(wrapped, OutboxStore) and wrapped.inner.bases == [
        "http://127.0.0.1:3000",
        "http://127.0.0.1:3001",
    ]
    for bad, says in (
        ("xtdb+http://127.0.0.1:3000,127.0.0.1:3000", "named twice"),
        ("xtdb+http://127.0.0.1:3000,:3001", "no host"),
        ("xtdb+http://127.0.0.1:3000,127.0.0.1:99999", "Port out of range"),
    ):
        with pytest.raises(ConfigError, match=says):
            XtdbStore(bad)


def test_every_node_down_is_unreachable_naming_them_all(caplog: pytest.LogCaptureFixture) -> None:
    ports = [_free_port(), _free_port()]
    s = XtdbStore(f"xtdb+http://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}", timeout=2)
    s.BACKOFF_S = 0.01
    with caplog.at_level("WARNING", logger="context_os"):
        for _ in range(3):
            with pytest.raises(StoreUnavailable, match=r"every node"):
                s.get("x")
    # each node's failover said once, not at every retry of every request (twenty lines before)
    said = [r.getMessage() for r in caplog.records if "going on with" in r.getMessage()]
    assert len(said) == 2 and {m.split(" cannot")[0] for m in said} == {
        f"XTDB node at http://127.0.0.1:{p}" for p in ports
    }


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("xtdb+http://127.0.0.1:99999", "Port out of range"),
        ("xtdb+http://[::1", "Invalid IPv6 URL"),
        ("xtdb+http://127.0.0.1:x", "Port could not be cast"),
        ("xtdb+http://:3000", "no host"),
        ("xtdb+http://127.0.0.1:3000?outbox=off", "options"),
    ],
)
def test_a_malformed_url_is_a_config_error_naming_url_and_problem(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as e:
        XtdbStore(url)
    assert repr(url) in str(e.value)
    if "?" not in url:  # open_store reads the options itself
        with pytest.raises(ConfigError, match=says):
            open_store(url)


class _Echo(BaseHTTPRequestHandler):
    """Answers every request with 404, keeping the Authorization header it was sent."""

    seen: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.seen.append(self.headers.get("Authorization"))
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_credentials_go_as_basic_auth_and_are_never_shown() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        url = f"xtdb+http://bob:hunter%402@127.0.0.1:{port}"
        with XtdbStore(url) as s:
            assert s.url == f"xtdb+http://bob:***@127.0.0.1:{port}" and s.base == f"http://127.0.0.1:{port}"
            with pytest.raises(StoreError) as e:
                s.stats()
            assert "hunter" not in str(e.value)
        assert _Echo.seen[-1] == "Basic " + base64.b64encode(b"bob:hunter@2").decode()
        with open_store(f"{url}?outbox=off") as s:
            assert s.url == f"xtdb+http://bob:***@127.0.0.1:{port}"
        with pytest.raises(ConfigError) as e:
            open_store(f"{url}?outbx=1")
        assert "hunter" not in str(e.value) and "bob:***@" in str(e.value)
    finally:
        server.shutdown()
        server.server_close()


def _proxy_to(xs: XtdbStore, drop: int) -> CuttableProxy:
    return CuttableProxy(xs.base, drop=drop)


def test_reads_are_retried_after_a_dropped_connection(xs: XtdbStore, uid: str) -> None:
    xs.put({"id": f"r:{uid}", "kind": "k"})
    proxy = _proxy_to(xs, drop=2)
    try:
        with XtdbStore(f"xtdb+http://127.0.0.1:{proxy.port}") as flaky:
            flaky.BACKOFF_S = 0.01
            assert flaky.doc(f"r:{uid}") == {"id": f"r:{uid}", "kind": "k"}
        assert proxy.accepted >= 3
    finally:
        proxy.cut()


def test_reads_give_up_after_the_retries(xs: XtdbStore) -> None:
    proxy = _proxy_to(xs, drop=XtdbStore.RETRIES + 1)
    try:
        with XtdbStore(f"xtdb+http://127.0.0.1:{proxy.port}") as flaky:
            flaky.BACKOFF_S = 0.01
            with pytest.raises(StoreUnavailable, match="connection lost"):
                flaky.get("anything")
        assert proxy.accepted == XtdbStore.RETRIES + 1
    finally:
        proxy.cut()


def test_a_submit_is_not_retried_once_sent(xs: XtdbStore, uid: str) -> None:
    proxy = _proxy_to(xs, drop=1)
    try:
        with XtdbStore(f"xtdb+http://127.0.0.1:{proxy.port}") as flaky:
            flaky.BACKOFF_S = 0.01
            with pytest.raises(StoreUnavailable, match="connection lost during POST /_xtdb/submit-tx"):
                flaky.put({"id": f"once:{uid}", "kind": "k"})
        assert proxy.accepted == 1
    finally:
        proxy.cut()
    assert xs.get(f"once:{uid}") is None  # the proxy never forwarded it


class _OfficialApiOnly(BaseHTTPRequestHandler):
    """A node as the official REST server is: our front end's own endpoints (/_xtdb/context-os/)
    answer 404; everything else goes to the real node."""

    node = ""
    seen: list[str] = []

    def _forward(self) -> None:
        self.seen.append(f"{self.command} {self.path.split('?')[0]}")
        if self.path.startswith("/_xtdb/context-os/"):
            body, status, ctype = b"Not Found", 404, "text/plain"
        else:
            length = int(self.headers.get("Content-Length") or 0)
            r = httpx.request(
                self.command,
                self.node + self.path,
                content=self.rfile.read(length) if length else None,
                headers={k: v for k, v in self.headers.items() if k.lower() in ("accept", "content-type")},
                timeout=60,
            )
            body, status, ctype = r.content, r.status_code, r.headers.get("content-type", "")
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _forward

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def official(xs: XtdbStore, tmp_path: Any) -> Iterator[tuple[XtdbStore, list[str]]]:
    """A store reaching the node through _OfficialApiOnly; and the requests it made."""
    handler = type("Handler", (_OfficialApiOnly,), {"node": xs.base, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with XtdbStore(f"xtdb+http://127.0.0.1:{server.server_address[1]}", text_index_path=tmp_path / "i.db") as s:
            yield s, handler.seen
    finally:
        server.shutdown()
        server.server_close()


def test_without_our_endpoints_the_official_calls_give_the_same_answers(
    xs: XtdbStore, official: tuple[XtdbStore, list[str]], uid: str
) -> None:
    o, seen = official
    i = f"off:{uid}"
    doc = {"id": i, "kind": "k", "meta": {"n": 1}}
    txs = [
        o.submit([Put(doc, 1_000)]),
        o.submit([Put({**doc, "meta": {"n": 2}}, 2_000, 3_000)]),
        o.submit([Match(i, doc, 1_500), Delete(i, 5_000)]),
        o.submit([Match(i, {**doc, "kind": "other"})]),  # fails: not committed
    ]
    assert [t.committed for t in txs] == [True, True, True, False]
    # the official calls, once the node is known to lack ours (one 404, then none of them again);
    # puts and deletes alone go to the official submit-tx anyway, and are not awaited: the first
    # match's submit is, and that covers them (the log is indexed in order); the first read waits
    # for the log's newest transaction (one more await-tx)
    assert seen.count("POST /_xtdb/context-os/submit-tx") == 1 and seen.count("POST /_xtdb/submit-tx") == 4
    assert seen.count("GET /_xtdb/tx-committed") == 2 and seen.count("GET /_xtdb/latest-submitted-tx") == 1
    assert seen.count("GET /_xtdb/await-tx") == 3
    for vt in (500, 1_000, 1_999, 2_000, 2_500, 3_000, 4_999, 5_000, 9_000, None):
        for tx in (*(t.id for t in txs), None):
            assert o.get(i, vt, tx) == xs.get(i, vt, tx), (vt, tx)
    assert o.history(i) == xs.history(i)
    assert seen.count("GET /_xtdb/context-os/entity-version") == 0 and seen.count("GET /_xtdb/entity-tx") > 40
    latest = o.latest_tx()
    assert latest is not None and latest.id >= txs[-1].id and latest.committed is not None
    assert seen.count("GET /_xtdb/latest-completed-tx") == 1 and seen.count("GET /_xtdb/context-os/latest-tx") == 0
    # and our own endpoints were what xs used: one call per get, one per submit
    assert o._official == {o.base} and not xs._official


def test_history_read_as_json_is_the_history_read_as_edn(xs: XtdbStore, xtdb_url: str, uid: str) -> None:
    """Our front end answers a history in JSON (context-os/entity-history), which the store reads
    several times faster than EDN; where JSON would not keep a value (a keyword, a set: written
    by some other client) it answers 409 and the store reads the official EDN answer."""
    i = f"hj:{uid}"
    docs = [
        {"id": i, "kind": "k", "content": 'text\n\t\u0001 "quoted" \\ é 😀', "meta": {"n": 1, "b": None}},
        {"id": i, "kind": "k", "content": {"z": [1, 2.5, {"y": None, "x": True}], "a": 1e300, "m": -(2**62)}},
        {"id": i, "kind": "k", "content": [], "meta": {"odd key": {}, "l": [[], "s"], "f": -0.5}},
    ]
    xs.submit([Put(d, 1_000 * (n + 1)) for n, d in enumerate(docs)])
    xs.submit([Delete(i, 5_000)])
    xs.submit([Put({**docs[0], "meta": {}}, 7_000)])
    edn_store = XtdbStore(xtdb_url)
    edn_store._no_json_history.add(edn_store.base)  # as against a node without the endpoint
    try:
        for kw in (
            {},
            {"order": "desc"},
            {"with_docs": False},
            {"start_valid_time": 2_000, "end_valid_time": 7_000},
            {"start_tx_id": 0, "end_tx_id": 10**9},
        ):
            got = xs.history(i, **kw)  # type: ignore[arg-type]
            assert got == edn_store.history(i, **kw), kw  # type: ignore[arg-type]
        assert [v.deleted for v in xs.history(i)] == [False, False, False, True, False]
        second = xs.history(i)[1].doc
        assert second is not None and list(second["content"]) == ["a", "m", "z"]  # keys in order, as from EDN
        assert second["content"] == {"a": 1e300, "m": -(2**62), "z": [1, 2.5, {"x": True, "y": None}]}
        assert xs.history(f"none:{uid}") == []
        params = {"eid-edn": f'"{i}"', "history": "true", "sort-order": "asc", "with-docs": "true"}
        assert _raw(xs, "GET", "context-os/entity-history", params=params).status_code == 200
        # a document another client wrote with a keyword and a set in it: JSON would not keep them
        _raw_submit(xs, f'[:xtdb.api/put {{:xt/id "kw:{uid}" :kind "k" :content :a-keyword :tags #{{1 2}}}}]')
        params["eid-edn"] = f'"kw:{uid}"'
        assert _raw(xs, "GET", "context-os/entity-history", params=params).status_code == 409
        (v,) = xs.history(f"kw:{uid}")
        assert v.doc == edn_store.history(f"kw:{uid}")[0].doc
        assert v.doc is not None and v.doc["content"] == ":a-keyword" and v.doc["tags"] == [1, 2]
        # integers of every size a JSON submit-tx body makes (Integer, Long, BigInteger) are kept
        r = _raw(
            xs,
            "POST",
            "submit-tx",
            json={"tx-ops": [["put", {"xt/id": f"js:{uid}", "kind": "k", "n": [5, 2**40, 2**70, 1.5]}]]},
        )
        assert r.status_code == 202
        xs._await(int(_read_edn(r.text)[Keyword("xtdb.api/tx-id")]))
        params["eid-edn"] = f'"js:{uid}"'
        assert _raw(xs, "GET", "context-os/entity-history", params=params).status_code == 200
        (v,) = xs.history(f"js:{uid}")
        assert v.doc == edn_store.history(f"js:{uid}")[0].doc and v.doc is not None
        assert v.doc["n"] == [5, 2**40, 2**70, 1.5]
        assert not xs._no_json_history
    finally:
        edn_store.close()


def test_puts_return_once_the_log_has_them_and_reads_wait_for_them(xs: XtdbStore, uid: str) -> None:
    """A transaction of puts and deletes always commits: ``submit`` returns once the node took
    it, and the next read through the same store waits until the node has indexed it; one with a
    match (or an evict) is awaited by ``submit`` itself. ``sync`` makes every write readable by
    any other client of the node, and so does ``close``."""
    tx = xs.submit([Put({"id": f"pipe:{uid}", "kind": "k", "meta": {"n": 1}})])
    assert tx.committed and xs._unsettled == tx.id and xs.latest_tx_id() >= tx.id  # type: ignore[operator]
    v = xs.get(f"pipe:{uid}")
    assert v is not None and v.doc["meta"] == {"n": 1} and xs._unsettled == -1  # type: ignore[index]
    first = xs.submit([Put({"id": f"pipe:{uid}", "kind": "k", "meta": {"n": 2}})])
    matched = xs.submit([Match(f"pipe:{uid}", {"id": f"pipe:{uid}", "kind": "k", "meta": {"n": 2}})])
    assert matched.committed and matched.id > first.id and xs._unsettled == -1
    last = xs.submit([Delete(f"pipe:{uid}")])
    xs.sync()
    url = xs.base.replace("http", "xtdb+http", 1)
    with XtdbStore(url) as other:
        assert other.get(f"pipe:{uid}") is None and other.get(f"pipe:{uid}", tx_id=last.id - 1) is not None
    writer = XtdbStore(url)
    gone = writer.submit([Put({"id": f"pipe2:{uid}", "kind": "k"})])
    writer.close()
    assert xs.get(f"pipe2:{uid}", tx_id=gone.id) is not None
    # a client opened after a write was acknowledged reads it, unsynced, through any node
    third = XtdbStore(url)
    late = third.submit([Put({"id": f"pipe3:{uid}", "kind": "k"})])
    with XtdbStore(url) as reader:
        assert reader.get(f"pipe3:{uid}") is not None and reader._seen_tx >= late.id
    third.close()


def test_a_submit_not_indexed_in_time_is_taken_and_not_confirmed(xs: XtdbStore, uid: str) -> None:
    # a transaction that the node cannot index in 0 ms: our endpoint answers 202, indexed? false
    ops = " ".join(f'[:xtdb.api/put {{:xt/id "slow:{uid}:{n}"}}]' for n in range(2000))
    r = _raw(
        xs,
        "POST",
        "context-os/submit-tx",
        params={"timeout": "0"},
        content=("{:tx-ops [" + ops + "]}").encode(),
        headers={"Content-Type": "application/edn"},
    )
    assert r.status_code in (200, 202), r.text
    answer = _read_edn(r.text)
    if r.status_code == 202:
        assert answer[Keyword("context-os/indexed?")] is False and Keyword("tx-committed?") not in answer
    else:  # indexed within the timeout after all (a fast machine): committed
        assert answer[Keyword("tx-committed?")] is True
    assert isinstance(answer[Keyword("xtdb.api/tx-id")], int)


def test_a_match_the_node_did_not_index_while_it_waited_is_confirmed_by_the_store(
    xs: XtdbStore, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # our endpoint waits LOG_CHECK_S at most (1 ms here: 2,000 puts take longer to index), then
    # the store waits on itself and asks whether the match held
    monkeypatch.setattr(xs, "LOG_CHECK_S", 0.001)
    waits: list[float] = []
    await_ = xs._await

    def spy(tx_id: int, *, waited: float = 0.0) -> None:
        waits.append(waited)
        await_(tx_id, waited=waited)

    monkeypatch.setattr(xs, "_await", spy)

    def puts(run: str) -> list[Put]:
        return [Put({"id": f"slowm:{uid}:{run}:{n}", "kind": "k"}) for n in range(2000)]

    held = xs.submit([Match(f"slowm:{uid}:a:0", None), *puts("a")])
    assert held.committed and xs.get(f"slowm:{uid}:a:1999", tx_id=held.id) is not None
    failed = xs.submit([Match(f"slowm:{uid}:a:0", None), *puts("b")])
    assert not failed.committed and xs.get(f"slowm:{uid}:b:0", tx_id=failed.id) is None
    assert [w for w in waits if w] == [0.001, 0.001]  # each was left to the store by the node


class _NotXtdb(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = b"<html>not an XTDB node</html>"
        self.send_response(404 if "entity" in self.path else 200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_answers_that_are_not_edn_are_store_errors() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotXtdb)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with XtdbStore(f"xtdb+http://127.0.0.1:{server.server_address[1]}") as s:
            with pytest.raises(StoreError, match=r"not EDN .*text/html.*<html>") as e:
                s.stats()
            assert not isinstance(e.value, StoreUnavailable)
            # a 404 page from something else is not XTDB saying "no such entity"
            with pytest.raises(StoreError, match="HTTP 404"):
                s.get("anything")
    finally:
        server.shutdown()
        server.server_close()


def test_server_errors_name_the_node_and_the_reason(xs: XtdbStore) -> None:
    with pytest.raises(StoreError, match=rf"XTDB node at {xs.base}: .*HTTP 400.*"):
        xs._get("entity", {"eid-edn": "{"}, "entity of a broken id")


def _indexed_after(xs: XtdbStore, seconds: float) -> int:
    """A transaction submitted past the store (as another writer's is) that the node indexes
    only ``seconds`` after: a transaction function that sleeps. Its id."""
    fn = f"sleep-{uuid.uuid4().hex[:8]}"
    tx_fn = f"(fn [ctx] (Thread/sleep {int(seconds * 1000)}) [])"
    _raw_submit(xs, f"[:xtdb.api/put {{:xt/id :{fn} :xt/fn {tx_fn}}}]")
    r = httpx.post(
        f"{xs.base}/_xtdb/submit-tx",
        content=("{:tx-ops [[:xtdb.api/fn :" + fn + "]]}").encode(),
        headers={"Content-Type": "application/edn", "Accept": "application/edn"},
        timeout=30,
    )
    assert r.status_code == 202, r.text
    return int(edn_format.loads(r.text)[edn_format.Keyword("xtdb.api/tx-id")])


@pytest.mark.parametrize("read", ["get", "find", "ids", "count_kinds", "text_search"])
def test_a_read_as_of_another_writer_s_transaction_not_indexed_yet_waits_for_it(
    xtdb_url: str, xtdb_sidecar: Path, uid: str, read: str
) -> None:
    """Another writer's tx id can reach a reader (a frame's basis, a message of the mesh) before
    the node has indexed it: reading as of it waits for it, as reading one's own writes does.
    The node says "node out of sync" to a basis it has not indexed, which the store passed on:
    a reader given such an id failed or not by a race (the search model test found it)."""
    id = f"file:{uid}"
    with XtdbStore(xtdb_url, text_index_path=xtdb_sidecar) as reader:
        reader.put({"id": id, "kind": "file", "meta": {}, "content": f"amber{uid}"})
        assert reader.get(id) is not None  # it has read: what the log holds later is not waited for
        tx_id = _indexed_after(reader, 1.0)
        calls = {
            "get": lambda: reader.get(id, tx_id=tx_id) is not None,
            "find": lambda: id in [v.id for v in reader.find("file", tx_id=tx_id)],
            "ids": lambda: id in reader.ids(tx_id=tx_id),
            "count_kinds": lambda: reader.count_kinds(tx_id=tx_id).get("file", 0) >= 1,
            "text_search": lambda: [h.id for h in reader.text_search(f"amber{uid}", tx_id=tx_id)] == [id],
        }
        assert calls[read]()
        # past the newest transaction of the log: an error, as on every store, naming the newest
        with pytest.raises(StoreError, match=rf"tx {tx_id + 1000} is past the newest transaction \({tx_id}\)"):
            reader.get(id, tx_id=tx_id + 1000)


def test_sync_with_a_tx_time_awaits_that_time_as_the_official_server_does(xs: XtdbStore, uid: str) -> None:
    """The official ``/_xtdb/sync`` takes ``tx-time`` (``await-tx-time`` then, ``sync`` without
    it); ours took no notice of it and answered at once with what the node had indexed."""
    tx = xs.put({"id": f"sync:{uid}", "kind": "k"})
    xs.sync()
    r = _raw(xs, "GET", "sync", params={"tx-time": _iso(tx.time)})
    assert r.status_code == 200 and _ms(_read_edn(r.text)[Keyword("xtdb.api/tx-time")]) >= tx.time
    # a time no transaction has reached yet: awaited until the timeout, as await-tx-time is
    later = _iso(now_ms() + 3_600_000)
    r = _raw(xs, "GET", "sync", params={"tx-time": later, "timeout": "300"})
    assert r.status_code == 500 and "TimeoutException" in r.text, r.text
    assert _raw(xs, "GET", "await-tx-time", params={"tx-time": later, "timeout": "300"}).text == r.text


def test_stats_report_the_node(xs: XtdbStore) -> None:
    stats = xs.stats()
    assert stats["backend"] == "xtdb"
    assert stats["url"] == xs.url
    assert stats["xtdb.version/version"].startswith("1.")


@pytest.mark.parametrize(
    ("status", "body", "kind", "says"),
    [
        # a cluster node whose PostgreSQL is out of reach: an outage, whose writes can wait
        (500, '{:error "HikariPool-1 - Connection is not available, request timed out"}', StoreUnavailable, "Hikari"),
        (503, "busy", StoreUnavailable, "busy"),
        (500, '{:xtdb.error/message "boom"}', StoreError, "boom"),
        # another server's page: what it is, not its HTML
        (404, "<!DOCTYPE HTML>\n<html><body>Not Found</body></html>", StoreError, "not an XTDB node's answer"),
    ],
)
def test_a_failed_answer_is_one_line_and_an_outage_when_the_database_is_down(
    status: int, body: str, kind: type[StoreError], says: str
) -> None:
    store = XtdbStore("xtdb+http://127.0.0.1:1")
    ctype = "application/edn" if body.startswith("{") else "text/html"
    with pytest.raises(kind, match=says) as e:
        answer = _http.Response(status, {"content-type": ctype}, body.encode(), "POST", f"{store.base}/_xtdb/query")
        store._fail(answer, "find")
    assert "\n" not in str(e.value) and "<html" not in str(e.value)
    assert kind is StoreUnavailable or not isinstance(e.value, StoreUnavailable)


def test_a_session_whose_node_goes_away_raises_what_ended_its_block(xtdb_url: str, uid: str) -> None:
    """A session's block that ends with an error while the node is gone: closing it cannot give
    its lease back either, and that error (logged) does not replace the one that ended the block."""
    from context_os import Session

    proxy = CuttableProxy(xtdb_url)
    try:
        with XtdbStore(proxy.url) as store:
            store.BACKOFF_S = 0.01
            with pytest.raises(ValueError, match="the harness failed"), Session.open(store, f"gone-{uid}"):
                proxy.cut()
                raise ValueError("the harness failed")
    finally:
        proxy.cut()

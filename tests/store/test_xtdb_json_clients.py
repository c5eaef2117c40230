"""The JSON flavour of the XTDB 1.x REST API (xtdb/src/context_os/xtdb_http.clj), through two
third-party Python clients from PyPI, used unchanged:

* ``py-xtdb`` 0.5.1 (module ``py_xtdb``): ``requests`` with ``accept: application/json``;
* ``xtdb`` 0.6.2 (xtdb-py, ``xtdb.session.XTDBClient`` and its ORM): JSON tx-ops, EDN queries
  with JSON answers.

They live in their own virtualenv, ``<repo>/.cache/json-clients/venv`` (gitignored), made once
with ``python -m venv`` and pip (py-xtdb pins ``cytoolz<0.12``, which has no wheel for this
Python: it is compiled, with ``Cython<3``, so the first run takes ~20 s) and reused after. A
script run in it prints what each call answered, as JSON; the tests check it. Under
``CI=true`` a venv that cannot be made fails the tests; elsewhere they skip, saying why. On
Python 3.13 cytoolz 0.11.2 does not compile (its C uses CPython internals 3.13 changed), so
there they skip (or fail under ``CI=true``).

The node is the shared one of the ``xtdb_url`` fixture, possibly the official image: every
expectation here is the official server's behaviour (modules/http-server, 1.x branch).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import unavailable
from tests.venvs import made_venv, venv_python

pytestmark = pytest.mark.xtdb

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".cache" / "json-clients" / "venv"
CLIENTS = ("py-xtdb==0.5.1", "xtdb==0.6.2")
# to compile cytoolz 0.11.2 (its shipped C predates 3.11); setuptools is its build backend, which a
# venv made by Python 3.12 or later no longer holds (and --no-build-isolation brings none)
BUILD_TOOLS = ("Cython<3", "wheel", "setuptools")
PIP_TIMEOUT_S = 480
SCRIPT_TIMEOUT_S = 120

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
"""How the official server writes a date in JSON (jsonista's default): UTC, whole seconds."""
HEX_ID = re.compile(r"^[0-9a-f]{40}$")


def _recipe() -> str:
    return json.dumps({"python": sys.version, "clients": CLIENTS, "build": BUILD_TOOLS})


@pytest.fixture(scope="module")
def clients_python() -> Path:
    try:
        # cytoolz 0.11.2 is compiled with the build tools installed first (no build isolation)
        installs = [BUILD_TOOLS, ["--no-build-isolation", *CLIENTS]]
        return venv_python(made_venv(VENV, _recipe(), installs, PIP_TIMEOUT_S))
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        unavailable("a virtualenv with py-xtdb 0.5.1 and xtdb 0.6.2", e)


@pytest.fixture(scope="module")
def base_url(xtdb_url: str) -> str:
    """http://host:port of the (first) node."""
    return xtdb_url.removeprefix("xtdb+").split(",")[0].rstrip("/")


CLIENT_SCRIPT = textwrap.dedent(
    r'''
    """Runs in the clients' venv: every call through the clients, answers printed as JSON."""
    import dataclasses
    import json
    import sys
    from datetime import datetime, timezone

    import py_xtdb
    from py_xtdb.xt import request_builder
    from xtdb.exceptions import XTDBException
    from xtdb.orm import Base, Fn
    from xtdb.query import Query
    from xtdb.session import Operation, XTDBClient, XTDBSession

    host, uid = sys.argv[1], sys.argv[2]
    out = {}
    janitor = XTDBClient(f"{host}/_xtdb")


    def caught(f):
        try:
            return {"ok": f()}
        except Exception as e:  # what the client raised, for the test to judge
            return {"error": type(e).__name__, "message": str(e)}


    def ours():
        """Every entity this run made: ids that start with uid, and the ORM's people of its group."""
        by_id = janitor.query(
            '{:query {:find [e] :where [[e :xt/id] [(str e) s] [(clojure.string/starts-with? s "%s")]]}}' % uid)
        people = janitor.query('{:query {:find [e] :where [[e :JsonClientPerson/group "%s"]]}}' % uid)
        return sorted({row[0] for row in by_id + people})


    def run():
        # -- py-xtdb: module functions, and request_builder (its own building block) for the rest
        a1, a2 = f"{uid}-a1", f"{uid}-a2"
        v1 = {"xt/id": a1, "uid": uid, "name": "Ada", "n": 1, "ratio": 0.5, "ok": True, "none": None,
              "big": 3000000000, "tags": ["x", "y"], "nested": {"k": "v", "deep": [1, {"z": 2}]}}
        v2 = {**v1, "n": 10, "tags": ["z"]}
        a = out["py_xtdb"] = {"docs": [v1, v2]}
        a["status"] = py_xtdb.status(host=host)
        a["tx1"] = py_xtdb.submit_tx(host=host, docs=[v1, {"xt/id": a2, "uid": uid, "n": 2}],
                                     fn_pluck_valid_time=lambda doc: "2020-01-01T00:00:00Z")
        a["await1"] = request_builder("/_xtdb/await-tx")(host=host, params={"tx-id": a["tx1"]["txId"]})
        a["tx2"] = py_xtdb.submit_tx(host=host, docs=[v2], fn_pluck_valid_time=lambda doc: "2021-01-01T00:00:00Z")
        a["await2"] = request_builder("/_xtdb/await-tx")(host=host, params={"txId": a["tx2"]["txId"], "timeout": 10000})
        a["committed"] = request_builder("/_xtdb/tx-committed")(host=host, params={"tx-id": a["tx2"]["txId"]})
        a["entity"] = py_xtdb.entity_json(host=host, params={"eid": a1})
        a["entity_2020"] = py_xtdb.entity_json(host=host, params={"eid": a1, "valid-time": "2020-06-01T00:00:00Z"})
        a["entity_tx1"] = py_xtdb.entity_json(host=host, params={"eid": a1, "tx-id": a["tx1"]["txId"]})
        a["history"] = py_xtdb.entity_json(
            host=host, params={"eid": a1, "history": "true", "sortOrder": "asc", "withDocs": "true"})
        a["entity_tx"] = request_builder("/_xtdb/entity-tx")(host=host, params={"eid-json": json.dumps(a1)})
        a["rows"] = py_xtdb.query_edn(
            host=host, data='{:query {:find [e n] :where [[e :uid "%s"] [e :n n]]}}' % uid)
        a["keyed_rows"] = py_xtdb.query_edn(
            host=host,
            data='{:query {:find [e n] :keys [id n] :in [u] :where [[e :uid u] [e :n n]]} :in-args ["%s"]}' % uid)
        a["latest_completed"] = py_xtdb.latest_completed_tx(host=host)
        a["latest_submitted"] = py_xtdb.latest_submitted_tx(host=host)
        a["sync"] = request_builder("/_xtdb/sync")(host=host)
        a["attribute_stats"] = py_xtdb.attribute_stats(host=host)
        a["recent_queries"] = py_xtdb.recent_queries(host=host)
        a["active_queries"] = py_xtdb.active_queries(host=host)
        a["slowest_queries"] = py_xtdb.slowest_queries(host=host)

        # -- xtdb (xtdb-py): XTDBClient and its ORM session
        client = XTDBClient(f"{host}/_xtdb")
        b = out["xtdb"] = {}
        b1, b2, b3 = f"{uid}-b1", f"{uid}-b2", f"{uid}-b3"
        ub = f"{uid}-xtdb"  # its documents' "uid", apart from py-xtdb's
        w1 = {"xt/id": b1, "uid": ub, "name": "Bo", "n": 1, "tags": ["p"]}
        w2 = {**w1, "name": "Bo 2", "n": 20}
        b["docs"] = [w1, w2]
        b["status"] = caught(lambda: dataclasses.asdict(client.status()))
        client.submit_tx([Operation.put(w1, datetime(2020, 1, 1, tzinfo=timezone.utc)),
                          Operation.put({"xt/id": b2, "uid": ub, "n": 3})])
        b["tx1"] = client.get_latest_completed_transaction()
        client.submit_tx([Operation.put(w2, datetime(2021, 1, 1, tzinfo=timezone.utc)), Operation.delete(b2)])
        b["tx2"] = client.get_latest_completed_transaction()
        client.await_transaction(b["tx2"]["txId"], timeout=10000)
        b["latest_submitted"] = client.get_latest_submitted_transaction()
        b["committed"] = client.get_transaction_committed(b["tx2"]["txId"])
        client.submit_tx([Operation.match({**w1, "name": "not so"}), Operation.put({"xt/id": b3, "uid": ub})])
        b["failed_match_tx"] = client.get_latest_submitted_transaction()
        b["failed_match_committed"] = client.get_transaction_committed(b["failed_match_tx"]["txId"])
        b["entity_b3"] = caught(lambda: client.get_entity(b3))
        client.submit_tx([Operation.match(w2), Operation.put({"xt/id": b3, "uid": ub, "n": 4})])
        b["matched_tx"] = client.get_latest_submitted_transaction()
        b["matched_committed"] = client.get_transaction_committed(b["matched_tx"]["txId"])
        b["entity"] = client.get_entity(b1)
        b["entity_2020"] = client.get_entity(b1, valid_time=datetime(2020, 6, 1, tzinfo=timezone.utc))
        b["entity_tx1"] = client.get_entity(b1, tx_id=b["tx1"]["txId"])
        b["deleted"] = caught(lambda: client.get_entity(b2))
        b["entity_b3_matched"] = client.get_entity(b3)
        b["entity_tx"] = client.get_entity_transactions(b1)
        b["history"] = client.get_entity_history(b1, with_docs=True)
        b["history_desc"] = client.get_entity_history(b1, sort_order="desc")
        b["rows"] = client.query('{:query {:find [e n] :where [[e :uid "%s"] [e :n n]]}}' % ub)
        b["sync"] = client.sync(timeout=10000)
        client.await_transaction_time(datetime(2000, 1, 1, tzinfo=timezone.utc))
        b["attribute_stats"] = client.get_attribute_stats()
        b["tx_log"] = client.get_transaction_log(after_tx_id=b["tx1"]["txId"] - 1, with_ops=True)
        b["recent_queries"] = client.get_recent_queries()
        b["active_queries"] = client.get_active_queries()
        b["slowest_queries"] = client.get_slowest_queries()

        # a transaction function, put and called through the ORM types
        fn_id, made = f"{uid}-fn", f"{uid}-made"
        with XTDBSession(f"{host}/_xtdb") as session:
            session.put(Fn(function="(fn [ctx eid u] [[:xtdb.api/put {:xt/id eid :uid u :made-by \"fn\"}]])",
                           identifier=fn_id))
        client.submit_tx([Operation.fn(fn_id, made, ub)])
        b["fn_doc"] = client.get_entity(fn_id)
        b["made_by_fn"] = client.get_entity(made)


        # the ORM: documents with namespaced keys, read back through pull [*]
        @dataclasses.dataclass
        class JsonClientPerson(Base):
            name: str
            group: str


        session = XTDBSession(f"{host}/_xtdb")
        with session:
            for name in ("Ann", "Cy"):
                session.put(JsonClientPerson(name=name, group=uid))
        people = session.query(Query(JsonClientPerson).where(JsonClientPerson, group=uid))
        b["people"] = sorted(p.name for p in people)
        b["people_ids"] = [p.id for p in people]


    # The node is shared with context_os's own tests, whose tools expect context_os documents
    # only: whatever this run made is evicted (through the client: one more call) before it ends.
    try:
        run()
    finally:
        made_here = sorted(set(ours()) | {f"{uid}-b2"})  # b2 is deleted: no query finds it now
        janitor.submit_tx([Operation.evict(i) for i in made_here])
        out["evicted"] = made_here
        out["left_after_evict"] = ours()
    print(json.dumps(out))
    '''
)


@pytest.fixture(scope="module")
def answers(clients_python: Path, base_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    script = tmp_path_factory.mktemp("json-clients") / "clients.py"
    script.write_text(CLIENT_SCRIPT)
    uid = uuid.uuid4().hex[:12]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    r = subprocess.run(
        [str(clients_python), str(script), base_url, uid],
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
        env=env,
        check=False,
    )
    assert r.returncode == 0, f"the client script failed against {base_url}:\n{r.stderr[-5000:]}"
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    out["uid"] = uid
    return out


def _is_tx(tx: dict[str, Any], *, with_time: bool = True) -> None:
    assert set(tx) == ({"txId", "txTime"} if with_time else {"txId"}), tx
    assert isinstance(tx["txId"], int)
    if with_time:
        assert TIME.match(tx["txTime"]), tx


def _query_states(states: Any) -> None:
    assert isinstance(states, list)
    for s in states:
        assert {"queryId", "query", "status", "startedAt", "finishedAt", "error"} <= set(s), s
        assert isinstance(s["query"], str) and s["query"].startswith("{"), s  # the query's EDN text


# -- py-xtdb ------------------------------------------------------------------------------------


def test_py_xtdb_status(answers: dict[str, Any]) -> None:
    status = answers["py_xtdb"]["status"]
    # the status map's keys camelCased by name, as the official server writes them
    assert {"version", "revision", "indexVersion", "consumerState", "kvStore", "estimateNumKeys", "size"} <= set(status)
    assert status["version"].startswith("1.")
    assert isinstance(status["indexVersion"], int)
    assert all("/" not in k and "-" not in k for k in status), status


def test_py_xtdb_writes_and_awaits(answers: dict[str, Any]) -> None:
    a = answers["py_xtdb"]
    _is_tx(a["tx1"])
    _is_tx(a["tx2"])
    assert a["tx2"]["txId"] > a["tx1"]["txId"]
    assert a["await1"]["txId"] >= a["tx1"]["txId"]
    assert a["await2"]["txId"] >= a["tx2"]["txId"]
    _is_tx(a["await2"])
    assert a["committed"] == {"txCommitted?": True}
    _is_tx(a["latest_completed"])
    _is_tx(a["latest_submitted"], with_time=False)
    assert a["latest_completed"]["txId"] >= a["tx2"]["txId"]
    assert a["latest_submitted"]["txId"] >= a["tx2"]["txId"]
    assert set(a["sync"]) == {"txTime"} and TIME.match(a["sync"]["txTime"])


def test_py_xtdb_documents_round_trip(answers: dict[str, Any]) -> None:
    a = answers["py_xtdb"]
    v1, v2 = a["docs"]
    assert a["entity"] == v2  # "xt/id" and every value as sent: ints, floats, null, lists, maps
    assert a["entity_2020"] == v1
    assert a["entity_tx1"] == v1


def test_py_xtdb_history_and_entity_tx(answers: dict[str, Any]) -> None:
    a = answers["py_xtdb"]
    v1, v2 = a["docs"]
    history = a["history"]
    assert [h["txId"] for h in history] == [a["tx1"]["txId"], a["tx2"]["txId"]]
    assert [h["validTime"] for h in history] == ["2020-01-01T00:00:00Z", "2021-01-01T00:00:00Z"]
    assert [h["doc"] for h in history] == [v1, v2]
    assert all(set(h) == {"txTime", "txId", "validTime", "contentHash", "doc"} for h in history)
    assert all(HEX_ID.match(h["contentHash"]) for h in history)

    etx = a["entity_tx"]
    assert set(etx) == {"id", "contentHash", "validTime", "txTime", "txId"}
    assert HEX_ID.match(etx["id"])  # the id's hash, as the official server writes it
    assert etx["contentHash"] == history[-1]["contentHash"]
    assert etx["validTime"] == "2021-01-01T00:00:00Z"
    assert etx["txId"] == a["tx2"]["txId"]


def test_py_xtdb_queries(answers: dict[str, Any]) -> None:
    a, uid = answers["py_xtdb"], answers["uid"]
    assert sorted(a["rows"]) == [[f"{uid}-a1", 10], [f"{uid}-a2", 2]]
    assert sorted(a["keyed_rows"], key=lambda r: r["id"]) == [{"id": f"{uid}-a1", "n": 10}, {"id": f"{uid}-a2", "n": 2}]
    # attribute -> count, keys as they are ("xt/id"): the node counts in the background, so a
    # fresh node may not have counted anything yet
    assert all(isinstance(n, int) for n in a["attribute_stats"].values())
    for k in ("recent_queries", "active_queries", "slowest_queries"):
        _query_states(a[k])
    assert any(uid in s["query"] for s in a["recent_queries"])


# -- xtdb (xtdb-py) -----------------------------------------------------------------------------


def test_xtdb_py_status_is_the_official_one(answers: dict[str, Any]) -> None:
    # XTDBStatus takes exactly the seven keys of XTDB 1.21's status; since 1.23.1 the node's
    # status also has :ingester-failed?, which the official server sends as "ingesterFailed?"
    # and so do we. xtdb 0.6.2's status() therefore raises against any 1.23.1+ server.
    status = answers["xtdb"]["status"]
    assert status.get("error") == "TypeError", status
    assert "ingesterFailed?" in status["message"]
    assert answers["py_xtdb"]["status"]["ingesterFailed?"] is False


def test_xtdb_py_writes_and_reads(answers: dict[str, Any]) -> None:
    b, uid = answers["xtdb"], answers["uid"]
    ub = f"{uid}-xtdb"
    w1, w2 = b["docs"]
    _is_tx(b["tx1"])
    _is_tx(b["tx2"])
    assert b["tx2"]["txId"] > b["tx1"]["txId"]
    _is_tx(b["latest_submitted"], with_time=False)
    assert b["committed"] == {"txCommitted?": True}
    assert b["entity"] == w2
    assert b["entity_2020"] == w1
    assert b["entity_tx1"] == w1
    assert b["deleted"]["error"] == "XTDBException" and "404" in b["deleted"]["message"]

    # match: a failed one aborts its transaction, a good one lets it through
    assert b["failed_match_committed"] == {"txCommitted?": False}
    assert b["entity_b3"]["error"] == "XTDBException"
    assert b["matched_tx"]["txId"] > b["failed_match_tx"]["txId"]
    assert b["matched_committed"] == {"txCommitted?": True}
    assert b["entity_b3_matched"] == {"xt/id": f"{uid}-b3", "uid": ub, "n": 4}

    # a transaction function sent as EDN text in "xt/fn", then called with JSON arguments
    assert b["fn_doc"]["xt/id"] == f"{uid}-fn" and b["fn_doc"]["xt/fn"].startswith("(fn [ctx eid u]")
    assert b["made_by_fn"] == {"xt/id": f"{uid}-made", "uid": ub, "made-by": "fn"}


def test_xtdb_py_history_and_entity_tx(answers: dict[str, Any]) -> None:
    b = answers["xtdb"]
    w1, w2 = b["docs"]
    history = b["history"]
    assert [h["txId"] for h in history] == [b["tx1"]["txId"], b["tx2"]["txId"]]
    assert [h["validTime"] for h in history] == ["2020-01-01T00:00:00Z", "2021-01-01T00:00:00Z"]
    assert [h["doc"] for h in history] == [w1, w2]
    assert [h["txId"] for h in b["history_desc"]] == [b["tx2"]["txId"], b["tx1"]["txId"]]
    assert all("doc" not in h for h in b["history_desc"])
    assert b["entity_tx"]["txId"] == b["tx2"]["txId"]
    assert b["entity_tx"]["validTime"] == "2021-01-01T00:00:00Z"


def test_xtdb_py_queries_and_log(answers: dict[str, Any]) -> None:
    b, uid = answers["xtdb"], answers["uid"]
    assert sorted(b["rows"]) == [[f"{uid}-b1", 20], [f"{uid}-b3", 4]]
    assert b["people"] == ["Ann", "Cy"]  # ORM documents ("JsonClientPerson/name", ...) via pull [*]
    assert all(isinstance(i, str) for i in b["people_ids"])
    assert set(b["sync"]) == {"txTime"}
    assert isinstance(b["attribute_stats"], dict)
    for k in ("recent_queries", "active_queries", "slowest_queries"):
        _query_states(b[k])

    log = {tx["txId"]: tx for tx in b["tx_log"]}
    assert all(set(tx) == {"txId", "txTime", "txOps"} for tx in log.values())
    first = log[b["tx1"]["txId"]]["txOps"]
    assert [op[0] for op in first] == ["put", "put"]
    assert first[0][1] == b["docs"][0] and first[0][2] == "2020-01-01T00:00:00Z"
    assert [op[0] for op in log[b["tx2"]["txId"]]["txOps"]] == ["put", "delete"]


def test_xtdb_py_evicts_what_the_run_made(answers: dict[str, Any]) -> None:
    uid = answers["uid"]
    ours = {f"{uid}-{k}" for k in ("a1", "a2", "b1", "b2", "b3", "fn", "made")}
    assert set(answers["evicted"]) == ours | set(answers["xtdb"]["people_ids"])
    assert answers["left_after_evict"] == []


# -- content negotiation: EDN stays the default ------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "json_answer"),
    [
        (None, False),
        ("*/*", False),
        ("application/edn", False),
        ("text/html", False),
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("application/edn;q=0.5, application/json", True),
        ("application/json;q=0.5, application/edn", False),
        ("*/*, application/json;q=0.9", True),  # muuntaja: */* is no format of its own
    ],
)
def test_accept_negotiation(base_url: str, accept: str | None, json_answer: bool) -> None:
    with httpx.Client(timeout=10) as client:
        if accept is None:
            del client.headers["Accept"]  # httpx sends */* unless told otherwise
        else:
            client.headers["Accept"] = accept
        r = client.get(f"{base_url}/_xtdb/latest-submitted-tx")
    assert r.status_code in (200, 404)
    ctype = r.headers["content-type"]
    if json_answer:
        assert ctype.startswith("application/json")
        assert "txId" in r.json() or "error" in r.json()
    else:
        assert ctype.startswith("application/edn")
        assert r.text.startswith("{:")


def test_a_query_answers_every_row_in_both_formats_as_the_official_server_does(base_url: str) -> None:
    """The official server answers a query from ``open-q`` whatever the format: two entities
    with one value are two rows. Until 2026-12-02 the EDN answer was ``xt/q``'s set (one row)."""
    attr = f"dup-{uuid.uuid4().hex[:12]}"
    tx_ops = "[" + " ".join(f'[:xtdb.api/put {{:xt/id "{attr}-{n}" :{attr} 7}}]' for n in range(2)) + "]"
    with httpx.Client(timeout=30) as client:
        r = client.post(
            f"{base_url}/_xtdb/submit-tx",
            content="{:tx-ops " + tx_ops + "}",
            headers={"Content-Type": "application/edn", "Accept": "application/json"},
        )
        assert r.status_code == 202, r.text
        tx_id = r.json()["txId"]
        client.get(f"{base_url}/_xtdb/await-tx", params={"tx-id": tx_id, "timeout": 20_000}).raise_for_status()
        query = {"query-edn": "{:find [v] :where [[e :" + attr + " v]]}", "tx-id": tx_id}
        edn = client.get(f"{base_url}/_xtdb/query", params=query, headers={"Accept": "application/edn"})
        as_json = client.get(f"{base_url}/_xtdb/query", params=query, headers={"Accept": "application/json"})
    assert edn.status_code == 200 and edn.text.strip() == "([7] [7])"
    assert as_json.status_code == 200 and as_json.json() == [[7], [7]]

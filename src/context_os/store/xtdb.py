"""The XTDB 1.x backend: the store contract over a node's REST API, spoken in EDN.

Any XTDB 1.x node with the REST API will do (``xtdb/start`` runs one; so does the official
Docker image in docker-compose.yml); scale-out is XTDB's own (several nodes sharing a
transaction log and a document store: ``xtdb/start --cluster N`` runs them over PostgreSQL).
A store URL may name several nodes of one cluster (``xtdb+http://h1:3000,h2:3001``): requests go
to one, and to the next when it cannot be reached, which is first brought up to the newest
transaction this store wrote or waited for (a read never misses an acknowledged write).

**Documents.** Our documents are JSON-able dicts; XTDB documents are EDN maps with keyword
keys. The mapping, chosen so that ``kind`` and every ``meta`` attribute are plain Datalog
attributes and the original dict comes back exactly:

* ``id`` → ``:xt/id`` (always a string: the type of an id is part of its identity in XTDB);
* another top-level key ``k`` → ``:k`` (e.g. ``:kind``, ``:content``, ``:object_hash``);
* ``meta`` (a mapping) → one attribute per key, ``:meta/k``, plus ``:ctxos/meta-keys``, the set
  of meta keys, so that an empty or absent ``meta`` comes back as it went in;
* a key that is not a plain identifier (spaces, ``/``, non-ASCII, a leading digit...) is
  hex-encoded instead: ``:ctxos.x/x<hex>`` at the top level, ``:meta.x/x<hex>`` in meta;
* values (nested maps with string keys, lists, strings, numbers, booleans, None) are written
  as native EDN and read back as Python values. Dicts come back with sorted keys at every level
  (as the SQLite store returns them): XTDB does not keep the key order of maps.

**Pitfalls this module handles** (each has a test in tests/store/test_xtdb_store.py):

* document keys must be keywords (string keys are rejected as an invalid tx op);
* ``#inst`` has millisecond precision: times go over the wire as ``...T..:..:..mmmZ`` built
  from integer epoch milliseconds, never through floats;
* responses carry ``#xtdb/id`` tags (content hashes, hashed ids): the reader is given a handler;
* the type of an id is part of its identity (``"1"`` and ``1`` are two entities): ids are
  always sent as EDN strings (``eid-edn``), and non-string ids are refused;
* history is read from a db whose valid time is "now": ascending history ends there and
  descending history starts there (the contract says the same);
* the JSON API cuts times to whole seconds: only EDN is used, both ways;
* XTDB stores ``-0.0`` as ``0.0`` (the SQLite store does the same): ``find`` looks for ``0.0``.

A connection that cannot be opened raises ``StoreUnreachable`` (nothing was sent); any later
failure of a submit raises plain ``StoreUnavailable``, because the node may have taken it. The
outbox (store/outbox.py) relies on that distinction to queue only what surely did not land.

Reads (GET and the query POST) are retried on connection-level failures and on a node that does
not answer in time (on the next node at once, then, for connection failures, with a short
backoff); a submit is retried only when the connection could not be opened (nothing was sent),
and one a node did not answer in time fails (it may still land) with what follows sent to the
next node. Transport (store/_http.py) and
EDN errors never leave this module untranslated.

This module must stay free of anything above the store (context, harness, objects).
"""

from __future__ import annotations

import json
import json.encoder
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, NoReturn
from urllib.parse import unquote, urlsplit

from ..errors import ConfigError, HashError, InputError, StoreError, StoreUnavailable, StoreUnreachable
from ..hashing import MAX_DEPTH, TOO_DEEP, canonical_json, int_problem
from ..times import iso
from . import _http, edn, mask_url, node_file, text_index
from .base import (
    Delete,
    DocMemo,
    Evict,
    Match,
    Op,
    Put,
    Store,
    TextHit,
    TextPart,
    Tx,
    Version,
    check_after_evict,
    check_find,
)

__all__ = ["XtdbStore"]

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
# XTDB's content hash of "no document": what a deletion's history entry carries.
_NIL_HASH = "0" * 40
# Keys written as plain keywords; anything else is hex-encoded (see the module docstring).
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]+)*\Z")
_META_NS = "meta"
_META_HEX_NS = "meta.x"
_TOP_HEX_NS = "ctxos.x"
_META_KEYS = "ctxos/meta-keys"
_SAFE_INT = 2**53


# -- EDN out ------------------------------------------------------------------------------------


class _Keyword(str):
    """A keyword to write (the text is its name, e.g. ``xt/id``)."""


class _Symbol(str):
    """A symbol to write (Datalog logic variables)."""


class _Inst(int):
    """An instant to write, in epoch milliseconds."""


class _Raw(str):
    """EDN text written as is (pre-rendered Datalog clauses)."""


# A JSON string literal is an EDN one: the same escapes (\" \\ \n \t \r \b \f and \u with four hex digits), and
# the C encoder writes it far faster than a regex with a callback (documents are mostly text).
_string_literal: Callable[[str], str] = json.encoder.encode_basestring  # what JSONEncoder.encode calls


def _iso(ms: int) -> str:
    """Epoch ms → ``2024-01-02T03:04:05.678Z`` (exact: integer arithmetic, ms precision)."""
    try:
        return iso(ms)
    except InputError as e:
        raise StoreError(str(e)) from None


def _to_edn(value: Any, path: str = "$", depth: int = 0) -> str:
    """EDN text for a JSON-able value (plus the marker types above) at ``depth`` in its document
    (past ``MAX_DEPTH``: ``TOO_DEEP``, as every store). Names the path on error."""
    try:
        try:
            return _edn(value, depth)
        except (StoreError, ValueError):  # (ValueError: an integer too long to write)
            return _edn_checked(value, path, depth)  # the same walk, keeping the path to say where
    except RecursionError:
        raise StoreError(f"{path}: {TOO_DEEP}") from None


def _edn(value: Any, depth: int = 0) -> str:
    """``_to_edn`` without the path: a document is mostly strings, dicts and lists of exactly
    those types, tested first by identity, and the path of each value was a string built for an
    error that almost never comes (it cost a third of the walk). Anything else (the marker types,
    floats, tuples, other mappings, a key that is not a string) goes to the walk that checks; if
    that raises, ``_to_edn`` walks again from the top to name the path."""
    t = type(value)
    if t is str:
        return _string_literal(value)
    if t is dict:
        if depth >= MAX_DEPTH:
            raise StoreError(TOO_DEEP)
        parts = []
        for k, v in value.items():
            if type(k) is not str:
                return _edn_checked(value, "$", depth)
            parts.append(_string_literal(k) + " " + _edn(v, depth + 1))
        return "{" + " ".join(parts) + "}"
    if t is list:  # (a loop, not a comprehension: one frame a level, as deep as hashing walks)
        if depth >= MAX_DEPTH:
            raise StoreError(TOO_DEEP)
        items = []
        for v in value:
            items.append(_edn(v, depth + 1))
        return "[" + " ".join(items) + "]"
    if value is None:
        return "nil"
    if t is bool:
        return "true" if value else "false"
    if t is int:
        return str(value)
    return _edn_checked(value, "$", depth)


def _edn_checked(value: Any, path: str, depth: int = 0) -> str:
    """``_to_edn``'s walk with the path of every value, to name it on error."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, _Inst):
        return f'#inst "{_iso(int(value))}"'
    if isinstance(value, int):
        if (problem := int_problem(value)) is not None:
            raise StoreError(f"{path}: {problem} cannot be stored")
        return str(int(value))
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise StoreError(f"{path}: {value!r} cannot be stored (not JSON)")
        return repr(value)
    if isinstance(value, _Keyword):
        return ":" + value
    if isinstance(value, _Symbol | _Raw):
        return str(value)
    if isinstance(value, str):
        return _string_literal(value)
    if isinstance(value, Mapping | list | tuple) and depth >= MAX_DEPTH:
        raise StoreError(f"{path}: {TOO_DEEP}")
    if isinstance(value, Mapping):
        parts = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise StoreError(f"{path}: key {k!r} is not a string (not JSON)")
            parts.append(_edn_checked(k, path) + " " + _edn_checked(v, f"{path}.{k}", depth + 1))
        return "{" + " ".join(parts) + "}"
    if isinstance(value, list | tuple):
        items = [_edn_checked(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
        return "[" + " ".join(items) + "]"
    raise StoreError(f"{path}: a {type(value).__name__} cannot be stored (not JSON)")


def _utf8(text: str, what: str) -> bytes:
    """``text`` as UTF-8 (``http.client`` would raise ``UnicodeEncodeError`` from inside a request);
    ``StoreError`` naming ``what`` if it is not valid Unicode text (a lone surrogate)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise StoreError(f"{what} is not valid Unicode text ({e.reason})") from None


def _key_keyword(key: str, plain_ns: str | None, hex_ns: str) -> _Keyword:
    if _PLAIN_KEY.match(key):
        return _Keyword(f"{plain_ns}/{key}" if plain_ns else key)
    return _Keyword(f"{hex_ns}/x{_utf8(key, f'key {key!r}').hex()}")


def _meta_attr(key: str) -> _Keyword:
    """The Datalog attribute that holds ``meta[key]``."""
    return _key_keyword(key, _META_NS, _META_HEX_NS)


def _check_id(id: Any) -> str:
    if not isinstance(id, str):
        # XTDB would accept it, as a different entity than its string form: refuse instead.
        raise StoreError(f"document ids are strings, got {id!r}")
    return id


def _doc_to_edn(doc: Mapping[str, Any]) -> str:
    """Our document → the EDN map XTDB stores (see the module docstring)."""
    if not isinstance(doc, Mapping):
        raise StoreError(f"a document must be a mapping, got {type(doc).__name__}")
    doc_id = _check_id(doc.get("id"))
    out: dict[str, Any] = {}
    depths: dict[str, int] = {}  # (a meta value is a level deeper in the document than its attribute)
    for k, v in doc.items():
        if not isinstance(k, str):
            raise StoreError(f"document {doc_id!r}: key {k!r} is not a string")
        if k == "id":
            out[_Keyword("xt/id")] = v
        elif k == "meta" and isinstance(v, Mapping):
            for mk, mv in v.items():
                if not isinstance(mk, str):
                    raise StoreError(f"document {doc_id!r}: meta key {mk!r} is not a string")
                out[_meta_attr(mk)] = mv
                depths[_meta_attr(mk)] = 2
            out[_Keyword(_META_KEYS)] = _Raw("#{" + " ".join(_to_edn(mk) for mk in v) + "}")
        else:
            out[_key_keyword(k, None, _TOP_HEX_NS)] = v
    parts = [":" + k + " " + _to_edn(v, f"{doc_id}.{k}", depths.get(k, 1)) for k, v in out.items()]
    return "{" + " ".join(parts) + "}"


# -- EDN in -------------------------------------------------------------------------------------


class _XtdbId(str):
    """The value of an ``#xtdb/id`` tag: a hex hash of a content or of a non-string id."""


class _Instant(int):
    """The value of an ``#inst`` tag, in epoch milliseconds (XTDB's precision)."""


_DAY_MS: dict[str, int] = {}
"""``#inst`` days already read (``2024-01-02``) → epoch ms of their midnight (UTC)."""


def _read_inst(text: Any) -> _Instant:
    """An ``#inst`` → epoch ms; fast for the form XTDB writes, ``2024-01-02T03:04:05.678-00:00``
    (an answer holds thousands: a datetime each cost a history of 1,000 versions 6 ms)."""
    if (
        isinstance(text, str)
        and len(text) == 29
        and text[23:] in ("-00:00", "+00:00")
        and text[10] == "T"
        and text[13] == text[16] == ":"
        and text[19] == "."
        and text[11:19].replace(":", "").isdigit()
        and text[20:23].isdigit()
    ):
        day = _DAY_MS.get(text[:10])
        if day is None:
            day = _ms(edn.read_inst(text[:10]))
            if len(_DAY_MS) < 100_000:
                _DAY_MS[text[:10]] = day
        h, mi, sec = int(text[11:13]), int(text[14:16]), int(text[17:19])
        if h < 24 and mi < 60 and sec < 60:
            return _Instant(day + h * 3_600_000 + mi * 60_000 + sec * 1000 + int(text[20:23]))
    if not isinstance(text, str):
        raise edn.EdnError(f"#inst takes a string, got {text!r}")
    return _Instant(_ms(edn.read_inst(text)))


_EDN_TAGS: dict[str, Callable[[Any], Any]] = {"xtdb/id": _XtdbId, "inst": _read_inst}


def _read_edn(text: str) -> Any:
    """An answer's EDN (store/edn.py: XTDB's ``#xtdb/id`` tags read as ``_XtdbId``)."""
    return edn.loads(text, _EDN_TAGS)


_kw = edn.Keyword
_DATABASE_DOWN = re.compile(
    r"Connection is not available, request timed out|Connection refused|connection attempt failed"
)
"""What a cluster node answers (HTTP 500) when the PostgreSQL holding its log and documents is out
of reach: a read that needs a document it has not cached fails so, as a write does."""


_K_TX_ID = _kw("xtdb.api/tx-id")
_K_TX_TIME = _kw("xtdb.api/tx-time")
_K_VALID_TIME = _kw("xtdb.api/valid-time")
_K_CONTENT_HASH = _kw("xtdb.api/content-hash")
_K_DOC = _kw("xtdb.api/doc")
_K_TX = _kw("xtdb.api/tx")
_K_COMMITTED = _kw("tx-committed?")
_K_INDEXED = _kw("context-os/indexed?")
_K_TX_OPS = _kw("xtdb.api/tx-ops")
_K_PUT = _kw("xtdb.api/put")
_K_XT_ID = _kw("xt/id")
_K_KIND = _kw("kind")
_NO_OWN = object()
"""What ``XtdbStore._own_get`` answers for a node without our endpoints."""


def _ms(value: Any) -> int:
    """An ``#inst`` as read (``_Instant``, or an aware datetime) → epoch ms."""
    if isinstance(value, _Instant):
        return int(value)
    if not isinstance(value, datetime):
        raise StoreError(f"expected an #inst from XTDB, got {value!r}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    ms: int = (value - _EPOCH) // _MS
    return ms


def _key_name(k: Any) -> str:
    if isinstance(k, edn.Keyword):
        return k.name
    return k if isinstance(k, str) else str(k)


def _from_edn(value: Any) -> Any:
    """EDN values as store/edn.py reads them → plain JSON-like Python values."""
    if value is None or isinstance(value, bool | int | float | str):
        if isinstance(value, _XtdbId):
            return str(value)
        return (_EPOCH + value * _MS).isoformat() if isinstance(value, _Instant) else value
    # (loops, not comprehensions: one frame a level, as deep as the writer and hashing go)
    if isinstance(value, Mapping):
        items = []
        for k, v in value.items():
            items.append((_key_name(k), _from_edn(v)))
        return dict(sorted(items))
    if isinstance(value, list | tuple):  # vectors and lists
        out = []
        for v in value:
            out.append(_from_edn(v))
        return out
    if isinstance(value, frozenset | set):
        return sorted((_from_edn(v) for v in value), key=lambda v: canonical_json(v))
    if isinstance(value, edn.Keyword):
        return ":" + value.name
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)  # symbols, chars: nothing context_os writes


def _unhex(name: str) -> str:
    return bytes.fromhex(name[1:]).decode("utf-8")


_ATTRS: dict[Any, tuple[int, str]] = {}
"""Document attributes already read (a keyword) → where they go: (_TOP, key), (_META, key),
(_ID, "id"), (_KEYS, ""): every answer names the same few attributes thousands of times."""
_TOP, _META, _ID, _KEYS = range(4)


def _place(name: str) -> tuple[int, str]:
    """Where the attribute named ``name`` (a keyword's ``ns/name``) goes in our document."""
    ns, _, local = name.rpartition("/")
    if name == "xt/id":
        return _ID, "id"
    if name == _META_KEYS:
        return _KEYS, ""
    if ns == _META_NS:
        return _META, local
    if ns == _META_HEX_NS:
        return _META, _unhex(local)
    if ns == _TOP_HEX_NS:
        return _TOP, _unhex(local)
    return _TOP, name


def _attr(k: Any) -> tuple[int, str]:
    if not isinstance(k, edn.Keyword):
        return _TOP, _key_name(k)
    where = _place(k.name)
    if len(_ATTRS) < 100_000:
        _ATTRS[k] = where
    return where


_PLAIN = (str, int, float, bool, type(None))


def _sorted_json(value: Any) -> Any:
    """A JSON value with every map's keys in order, as ``_from_edn`` gives an EDN one."""
    if type(value) is dict:
        return dict(sorted((k, _sorted_json(v)) for k, v in value.items()))
    if type(value) is list:
        return [_sorted_json(v) for v in value]
    return value


_JSON_ATTRS: dict[str, tuple[int, str]] = {}
"""Attribute names already read from JSON (``meta/turn``) → where they go (see ``_ATTRS``)."""


def _json_attr(name: str) -> tuple[int, str]:
    where = _place(name)
    if len(_JSON_ATTRS) < 100_000:
        _JSON_ATTRS[name] = where
    return where


_TOO_DEEP_TO_READ = (
    "deeper than Python's recursion limit lets a walk reach (another client wrote it: this store refuses to)"
)


def _doc_from(m: Any, from_json: bool) -> dict[str, Any]:
    """A document as XTDB stores it → our document (exactly what ``_doc_to_edn`` was given): read
    as EDN (attributes as keywords), or as our front end's JSON history writes it (attributes'
    names as keys)."""
    try:
        return _doc_from_walk(m, from_json)
    except RecursionError:  # another client's document (this store refuses to write one)
        eid = m.get("xt/id" if from_json else _kw("xt/id")) if isinstance(m, Mapping) else None
        raise StoreError(f"document {str(eid)!r} is nested too deeply to read: {_TOO_DEEP_TO_READ}") from None


def _doc_from_walk(m: Any, from_json: bool) -> dict[str, Any]:
    if not isinstance(m, Mapping):
        raise StoreError(f"expected a document map from XTDB, got {m!r}")
    top: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    meta_keys: Any = None
    for k, v in m.items():
        if from_json:
            where, key = _JSON_ATTRS.get(k) or _json_attr(k)
        else:
            where, key = _ATTRS.get(k) or _attr(k)
        if where == _KEYS:
            meta_keys = v
            continue
        if from_json:
            if type(v) is dict or type(v) is list:
                v = _sorted_json(v)  # maps with their keys in order, as _from_edn gives them
        elif type(v) not in _PLAIN:  # exactly: an _XtdbId or an _Instant is converted
            v = _from_edn(v)
        if where == _META:
            meta[key] = v
        else:
            top[key] = v
    if meta_keys is not None or meta:
        top["meta"] = dict(sorted(meta.items()))
    return dict(sorted(top.items()))


def _doc_from_edn(m: Any) -> dict[str, Any]:
    """The EDN map XTDB stores → our document."""
    return _doc_from(m, from_json=False)


# -- the store ----------------------------------------------------------------------------------


def _parse_url(url: str) -> tuple[str, str, tuple[str, str] | None]:
    """``xtdb+http://[user:pass@]host:port[/prefix]`` (or plain ``http://...``) → the base URL
    requests go to (no user info), the URL to show (password masked), and the basic auth.

    ``ConfigError`` naming the URL (password masked) and the problem: a malformed URL, a port
    out of range, no host, options (they belong to ``open_store``).
    """
    raw = url.removeprefix("xtdb+")
    shown = mask_url(url)
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - parsing the port is the check (out of range, not a number)
    except ValueError as e:
        raise ConfigError(f"invalid XTDB URL {shown!r}: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in raw):
        raise ConfigError(f"not an XTDB URL: {shown!r} (expected xtdb+http://host:port)")
    if not parts.hostname:
        raise ConfigError(f"invalid XTDB URL {shown!r}: no host")
    if parts.query or parts.fragment:
        raise ConfigError(f"invalid XTDB URL {shown!r}: options (?...) are read by open_store, not here")
    host = parts.netloc.rpartition("@")[2]
    base = f"{parts.scheme}://{host}{parts.path}".rstrip("/")
    auth = None
    if parts.username is not None:
        auth = (unquote(parts.username), unquote(parts.password or ""))
    return base, mask_url(f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")), auth


def _not_submitted(r: _http.Response) -> str | None:
    """Why nothing of a refused submit was written, if its answer says so
    (``:context-os/not-submitted``, from our front end); None if nothing is known."""
    try:
        body = _read_edn(r.text)
    except Exception:  # not our front end's answer
        return None
    if not isinstance(body, Mapping) or body.get(_kw("context-os/not-submitted")) is not True:
        return None
    return str(body.get(_kw("error"), "not submitted"))


def _parse_urls(url: str) -> tuple[list[str], str, tuple[str, str] | None]:
    """``xtdb+http://[user:pass@]host:port[,host:port...][/prefix]``: the base URL of each node (in
    the order given; the same user info and path for all), the URL to show, and the basic auth."""
    raw = url.removeprefix("xtdb+")
    scheme, sep, rest = raw.partition("://")
    netloc, slash, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if not sep or "," not in hosts:
        base, shown, auth = _parse_url(url)
        return [base], shown, auth
    bases, auth = [], None
    for host in hosts.split(","):
        base, _, auth = _parse_url(f"{scheme}://{userinfo}{at}{host}{slash}{path}")
        bases.append(base)
    if len(set(bases)) != len(bases):
        raise ConfigError(f"invalid XTDB URL {mask_url(url)!r}: a node is named twice")
    return bases, mask_url(raw.split("?", 1)[0].rstrip("/")), auth


class XtdbStore(Store):
    """The store contract over an XTDB 1.x node's REST API (EDN)."""

    RETRIES = 3
    """Extra attempts for a read whose connection failed (backoff 0.1 s, 0.2 s, 0.4 s)."""
    BACKOFF_S = 0.1
    LOG_CHECK_S = 1.0
    """How long a wait for a transaction goes before asking whether the node can
    read its log at all (``_await``)."""
    LOG_RETRY_S = 2.0
    """After a node said it cannot read its log, how long the store takes that as the answer
    (waits for its unindexed transactions fail at once) before asking again."""

    @property
    def _first_wait(self) -> float:
        """How long a wait for a transaction goes, on the node or here, before the log is asked:
        ``LOG_CHECK_S``, or the whole timeout when that is shorter."""
        return min(self.timeout, self.LOG_CHECK_S)

    def __init__(self, url: str, *, timeout: float = 30.0, text_index_path: Path | None = None) -> None:
        """``text_index_path``: the keyword index's sidecar file (default: one per node address
        under the user data dir, ``text-index/<host>_<port>.db``)."""
        # the base (what messages name) carries no credentials; they go in each request's auth
        self.bases, shown, self._auth = _parse_urls(url)
        self._opened = url
        """The URL as given, credentials and all (``reader``)."""
        self.base = self.bases[0]
        """The node requests go to now; the next in ``bases`` when it cannot be reached."""
        self.url = "xtdb+" + shown
        self._seen_tx = -1
        """The newest transaction this store wrote or waited for: a node failed over to is first
        brought up to it, so reads still see every write acknowledged before."""
        self._unsettled = -1
        """The newest transaction this store submitted without waiting for the node to index it
        (``submit``; -1: none): every read through this store waits for it first (``_settle``)."""
        self._settle_lock = threading.Lock()
        self._log_down_until = 0.0
        """Until when (monotonic) the store takes it that the node cannot read its log, as it said
        (``_newest_in_log``): waits for an unindexed transaction fail at once (``_await``)."""
        self._caught_up = False
        """Whether this store's first read has waited for what the log held then (``_catch_up_to_log``):
        a client opened after a write was acknowledged, through whichever node, reads it."""
        self._node_lock = threading.Lock()
        self._behind: set[str] = set()
        self._down: set[str] = set()
        """Nodes that failed since they last answered: a failover away from one is said once."""
        """Nodes failed over to that have not yet been brought up to ``_seen_tx``."""
        self._official: set[str] = set()
        """Nodes without our front end's own endpoints (/_xtdb/context-os/...: the official
        server answers 404): they get the official API's calls instead."""
        self._no_json_history: set[str] = set()
        """Nodes without our front end's JSON history (an older front end, the official server):
        ``history`` reads ``entity`` in EDN there."""
        self._unanswered = False
        """Whether the last request that ended, ended without an answer from the node (it timed
        out, or Ctrl-C cut it): ``close`` does not then wait for the node to index what this
        store wrote, which a node that hangs would make it wait out."""
        self.timeout = timeout
        self._client = self._init_client()
        self._text = text_index.SidecarIndex(text_index_path or node_file("text-index", url), self)

    def _init_client(self) -> _http.Client:
        return _http.Client(
            timeout=self.timeout,
            connect_timeout=min(self.timeout, 5.0),
            headers={"Accept": "application/edn", "User-Agent": "context_os"},
            auth=self._auth,
        )

    # -- HTTP ----------------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        endpoint: str,
        *,
        params: Mapping[str, str] | None = None,
        body: str | None = None,
        idempotent: bool = True,
        timeout: float | None = None,
    ) -> _http.Response:
        headers = {"Content-Type": "application/edn"} if body is not None else None
        what = f"{method} /_xtdb/{endpoint} (nothing was sent to {self.base}): an id, key or value"
        content = None if body is None else _utf8(body, what)
        for value in (params or {}).values():
            _utf8(value, what)
        if endpoint not in _BEFORE_SETTLED:
            if not self._caught_up:
                self._catch_up_to_log()
            if self._unsettled >= 0:
                self._settle()
        attempt = 0
        tried: set[str] = set()
        while True:
            base = self.base
            tried.add(base)
            if endpoint not in _BEFORE_SETTLED and base in self._behind:
                # left "behind" until it has caught up: a read after a failed catch-up waits again
                self._catch_up()
                self._behind.discard(base)
            last = attempt >= self.RETRIES
            try:
                r = self._client.request(
                    method, base, f"/_xtdb/{endpoint}", params=params, content=content, headers=headers, timeout=timeout
                )
            except KeyboardInterrupt:  # (Ctrl-C while the node has not answered)
                self._unanswered = True
                raise
            except _http.ConnectFailed as e:
                # Nothing was sent: safe to retry even a submit, at once on another node
                if self._fail_over(base, tried):
                    continue
                if last:
                    where = base if len(self.bases) == 1 else f"{', '.join(self.bases)} (every node)"
                    raise StoreUnreachable(f"XTDB node at {where} cannot be reached: {e}") from e
            except _http.TimedOut as e:
                # A node that accepts connections and answers nothing (stopped, a long collection,
                # a deadlock): a read goes on with another node; a write may have reached it and
                # may still land, so it is not sent again, but what follows goes to another node
                self._unanswered = True
                if self._fail_over(base, tried, "did not answer in time"):
                    if idempotent:
                        continue
                    raise StoreUnavailable(
                        f"XTDB node at {base} did not answer {method} /_xtdb/{endpoint} in time ({e!r}): what it"
                        f" was sent may still land; going on with {self.base}"
                    ) from e
                raise StoreUnavailable(
                    f"XTDB node at {base} did not answer {method} /_xtdb/{endpoint} in time: {e!r}"
                    + ("" if idempotent else " (what it was sent may still land)")
                ) from e
            except _http.ConnectionLost as e:
                # The connection broke mid-request: a read can be repeated (on another node if there
                # is one), a submit cannot (it may have reached the node)
                if not idempotent:
                    raise StoreUnavailable(
                        f"XTDB node at {base}: connection lost during {method} /_xtdb/{endpoint}: {e!r}"
                    ) from e
                if self._fail_over(base, tried):
                    continue
                if last:
                    raise StoreUnavailable(
                        f"XTDB node at {base}: connection lost during {method} /_xtdb/{endpoint}: {e!r}"
                    ) from e
            except _http.HttpError as e:
                raise StoreUnavailable(f"XTDB node at {base}: {method} /_xtdb/{endpoint} failed: {e!r}") from e
            else:
                self._down.discard(base)
                self._unanswered = False
                if r.status_code in (502, 503, 504) and idempotent and not last:
                    pass  # a proxy in front of a restarting node: try again
                else:
                    return r
            time.sleep(self.BACKOFF_S * 2**attempt)
            attempt += 1
            tried = set()

    def _fail_over(self, failed: str, tried: set[str], why: str = "cannot be reached") -> bool:
        """Send what follows to a node not yet tried for this request, if there is one (it is
        brought up to this store's newest transaction before it answers a read)."""
        with self._node_lock:
            if self.base == failed:
                untried = [b for b in self.bases if b not in tried]
                if not untried:
                    return False
                k = self.bases.index(failed)
                self.base = next(b for b in self.bases[k + 1 :] + self.bases[: k + 1] if b in untried)
                self._behind.add(self.base)
            said, self._down = failed in self._down, self._down | {failed}
        if not said:  # once a node is down, not at every request (nor between two that are)
            log.warning("XTDB node at %s %s: going on with %s", failed, why, self.base)
        return True

    def _catch_up(self) -> None:
        """Wait until the node just failed over to has indexed this store's newest transaction."""
        if self._seen_tx >= 0:
            self._await(self._seen_tx)

    def _edn(self, r: _http.Response) -> Any:
        where = f"{r.method} {urlsplit(r.url).path}, HTTP {r.status_code}"
        content_type = r.headers.get("content-type", "")
        if not content_type.startswith("application/edn"):
            # EDN reads almost anything (an HTML page is a list of symbols): trust the header.
            raise StoreError(
                f"XTDB node at {self.base} sent a response that is not EDN ({where}, Content-Type"
                f" {content_type!r}): is this an XTDB 1.x node? Body: {r.text[:200]!r}"
            )
        try:
            return _read_edn(r.text)
        except RecursionError:  # another client's document, nested past what Python walks
            raise StoreError(
                f"XTDB node at {self.base} sent an answer ({where}) nested too deeply to read: {_TOO_DEEP_TO_READ}"
            ) from None
        except Exception as e:  # EdnError; anything else would be the reader's bug, still translated
            raise StoreError(
                f"XTDB node at {self.base} sent a response that is not EDN ({where}): {e}; body: {r.text[:200]!r}"
            ) from e

    def _fail(self, r: _http.Response, what: str) -> NoReturn:
        detail = r.text[:500]
        edn = r.headers.get("content-type", "").startswith("application/edn")
        try:
            data = _read_edn(r.text)
            if isinstance(data, Mapping):
                for key in ("xtdb.error/message", "error", "class", "type"):
                    if (msg := data.get(_kw(key))) is not None:
                        detail = str(msg)
                        break
        except Exception:  # the body is only there to explain; keep it raw
            if not edn:  # another server's page: what it is, not its HTML
                kind = r.headers.get("content-type", "no content type").split(";")[0]
                detail = f"not an XTDB node's answer ({kind}, {len(r.content):,} bytes): is {self.base} an XTDB node?"
        detail = " ".join(detail.split())
        msg = f"XTDB node at {self.base}: {what} failed (HTTP {r.status_code}): {detail}"
        if r.status_code in (502, 503, 504) or _DATABASE_DOWN.search(r.text[:2000]):
            raise StoreUnavailable(msg)  # a cluster's PostgreSQL out of reach: its writes can wait
        raise StoreError(msg)

    def _get(self, endpoint: str, params: Mapping[str, str], what: str, *, missing_ok: bool = False) -> Any:
        """GET an endpoint and read its EDN; None for a 404 when ``missing_ok``."""
        r = self._request("GET", endpoint, params=params)
        if r.status_code == 404 and missing_ok and r.headers.get("content-type", "").startswith("application/edn"):
            return None  # XTDB's own "not found" (a 404 page from something else is an error)
        return self._answer(r, what)

    def _answer(self, r: _http.Response, what: str) -> Any:
        """The EDN of a 200 answer; any other status fails (``_fail``)."""
        if r.status_code != 200:
            self._fail(r, what)
        return self._edn(r)

    @staticmethod
    def _basis(valid_time: int | None, tx_id: int | None) -> dict[str, str]:
        params = {}
        if valid_time is not None:
            params["valid-time"] = _iso(_check_int("valid_time", valid_time))
        if tx_id is not None:
            params["tx-id"] = str(_check_int("tx_id", tx_id))
        return params

    # -- writes --------------------------------------------------------------------------------

    def submit(self, ops: Sequence[Op]) -> Tx:
        tx_ops = " ".join(_tx_op(op) for op in ops)  # every input error is raised before sending
        check_after_evict(ops)
        body = "{:tx-ops [" + tx_ops + "]}"
        if ops and not any(isinstance(op, Match | Evict) for op in ops):
            # Puts and deletes always commit (XTDB 1.x; we send no transaction functions): once
            # the node took the transaction into its log it is written, and only reads need it
            # indexed, so this store's next read waits for that (``_settle``), not the submit.
            # A session's turn goes on while the node indexes the one before.
            taken = self._request("POST", "submit-tx", body=body, idempotent=False)
            return self._submitted(taken, ops, awaited=False, settle=False)
        # one round trip: submit, await and (with a match) the committed check, on our front end;
        # the node waits ``LOG_CHECK_S`` at most, then this store waits on (``_await``: a node
        # that lost its log says so at once rather than at the timeout)
        r = self._own(
            "POST",
            "submit-tx",
            params={"timeout": str(max(1, int(self._first_wait * 1000)))},
            body=body,
            idempotent=False,
            timeout=self._first_wait + 10,
        )
        if r is not None:
            return self._submitted(r, ops, awaited=True)
        r = self._request("POST", "submit-tx", body=body, idempotent=False)
        return self._submitted(r, ops, awaited=False)

    def _own(self, method: str, endpoint: str, **kwargs: Any) -> _http.Response | None:
        """``endpoint`` of our front end's /_xtdb/context-os/, or None when the node has none of
        them (an official server answers 404, having written nothing): it gets the official API's
        calls from then on."""
        if self.base in self._official:
            return None
        r = self._request(method, f"context-os/{endpoint}", **kwargs)
        if r.status_code != 404:
            return r
        base = r.url.partition("/_xtdb/")[0]
        self._official.add(base)
        log.info("XTDB node at %s has no /_xtdb/context-os/ endpoints: using the official API", base)
        return None

    def _own_get(self, endpoint: str, params: Mapping[str, str], what: str) -> Any:
        """The EDN answer of one of our GET endpoints (``_own``), or ``_NO_OWN``."""
        r = self._own("GET", endpoint, params=params)
        return _NO_OWN if r is None else self._answer(r, what)

    def _flag(self, answer: Any, key: Any, what: str) -> bool:
        """A boolean an answer of the node must hold."""
        value = answer.get(key)
        if not isinstance(value, bool):
            raise StoreError(f"XTDB node at {self.base}: unexpected {what} answer {answer!r}")
        return value

    def _submitted(self, r: _http.Response, ops: Sequence[Op], *, awaited: bool, settle: bool = True) -> Tx:
        """The Tx of a submit's answer (``awaited``: our front end's, which also awaited it and
        says whether it committed; else the official ``submit-tx``'s, awaited here unless not
        ``settle``: a transaction of puts and deletes, which commits, left for reads to wait on)."""
        if r.status_code == 503 and (why := _not_submitted(r)) is not None:
            # the node could not reach its transaction log and says nothing was written (our
            # front end, xtdb/src): as safe to send again as a connection never opened
            raise StoreUnreachable(f"XTDB node at {self.base}: {why}")
        if r.status_code not in (200, 202):
            self._fail(r, "submit-tx")
        submitted = self._edn(r)
        try:
            tx_id = int(submitted[_K_TX_ID])
            tx_time = _ms(submitted[_K_TX_TIME])
        except (KeyError, TypeError) as e:
            raise StoreError(f"XTDB node at {self.base}: unexpected submit-tx answer {submitted!r}") from e
        if awaited and submitted.get(_K_INDEXED) is not False:
            committed = self._flag(submitted, _K_COMMITTED, "submit-tx")
            self._seen_tx = max(self._seen_tx, tx_id)
            self._settled(tx_id)  # indexed after every transaction before it
        elif not settle:
            committed = True
            self._seen_tx = max(self._seen_tx, tx_id)
            with self._settle_lock:
                self._unsettled = max(self._unsettled, tx_id)
        else:
            try:
                # our front end waited ``LOG_CHECK_S`` already (``submit``)
                self._await(tx_id, waited=self._first_wait if awaited else 0.0)
                # Only a failed match aborts a transaction of puts, deletes, matches and evictions
                # (XTDB 1.x; we send no transaction functions): ask the node only when there is one.
                committed = self._committed(tx_id) if any(isinstance(op, Match) for op in ops) else True
            except StoreUnavailable as e:
                # The node took the transaction: whatever failed now, it must not look unsent
                # (an outbox would send it again).
                raise StoreUnavailable(
                    f"XTDB node at {self.base} took transaction {tx_id} but could not confirm it: {e}"
                ) from e
        tx = Tx(tx_id, tx_time, committed)
        self._index_write(tx, ops)
        return tx

    def _index_write(self, tx: Tx, ops: Sequence[Op]) -> None:
        """Bring the landed transaction into the keyword index's sidecar."""
        try:
            self._text.note_write(tx, ops)
        except (sqlite3.Error, StoreError) as e:
            if any(isinstance(op, Evict) for op in ops):
                raise StoreError(
                    f"XTDB node at {self.base} evicted in transaction {tx.id}, but the keyword index"
                    f" {self._text.path} could not drop what it held of it ({e}): run `ctxos index rebuild`"
                ) from e
            # The write landed; the index only lags, and the next search catches up with it.

    def _settle(self) -> None:
        """Wait until the node has indexed every transaction this store submitted without waiting
        (a read sees this store's writes, as the store contract has it)."""
        pending = self._unsettled
        if pending >= 0:
            self._await(pending)

    def _catch_up_to_log(self) -> None:
        """Before this store's first read: the newest transaction of the log is one to wait for
        (``_settle``), as if this store had written it. A node out of reach raises, as the read
        would; any other trouble is the read's to say."""
        try:
            _, tx_id = self._newest_in_log()
        except StoreUnavailable:
            raise
        except StoreError:
            tx_id = None
        self._caught_up = True
        if tx_id is not None:
            with self._settle_lock:
                self._unsettled = max(self._unsettled, tx_id)

    def _settled(self, tx_id: int) -> None:
        with self._settle_lock:
            if self._unsettled <= tx_id:
                self._unsettled = -1

    def sync(self) -> None:
        self._settle()

    def latest_tx_id(self) -> int | None:
        known, tx_id = self._newest_in_log()
        if known:
            return tx_id
        # the node could not ask its log (a cluster's database is down): the newest transaction
        # it indexed is what it knows, and what every read answers from
        return super().latest_tx_id()

    def _newest_in_log(self) -> tuple[bool, int | None]:
        """Whether the node could ask its log (not when a cluster's database is down), and the id
        of the newest transaction there, indexed or not (None: nothing submitted yet)."""
        if time.monotonic() < self._log_down_until:
            return False, None  # it said so moments ago
        r = self._request("GET", "latest-submitted-tx")
        if r.status_code >= 500:
            self._log_down_until = time.monotonic() + self.LOG_RETRY_S
            return False, None
        if r.status_code == 404 and r.headers.get("content-type", "").startswith("application/edn"):
            return True, None
        tx = self._answer(r, "latest-submitted-tx")
        try:
            return True, int(tx[_K_TX_ID])
        except (KeyError, TypeError, ValueError) as e:
            raise StoreError(f"XTDB node at {self.base}: unexpected latest-submitted-tx answer {tx!r}") from e

    def _await(self, tx_id: int, *, waited: float = 0.0) -> None:
        """Wait until the node has indexed ``tx_id`` (``waited``: seconds the node waited for it
        already). A node that cannot index it because it cannot read its log (a cluster's
        database is down: the transaction is in the log, nothing is lost) raises
        ``StoreUnavailable`` after ``LOG_CHECK_S`` rather than at the timeout; in the
        ``LOG_RETRY_S`` after, a wait only asks whether it is indexed already."""
        # the node said moments ago it cannot read its log: whether it has indexed it already
        down = time.monotonic() < self._log_down_until
        first = 0.0 if down or waited else self._first_wait
        if not self._await_for(tx_id, first):
            known, _ = self._newest_in_log()
            if not known:
                raise self._log_down(tx_id)
            if not self._await_for(tx_id, self.timeout - first - waited):
                raise StoreError(
                    f"XTDB node at {self.base}: transaction {tx_id} was submitted but not indexed within"
                    f" {self.timeout:g} s; it may still commit"
                )
        self._seen_tx = max(self._seen_tx, tx_id)
        self._settled(tx_id)

    def _await_for(self, tx_id: int, seconds: float) -> bool:
        """One ``await-tx`` of at most ``seconds``: whether the node indexed ``tx_id`` in time."""
        r = self._request(
            "GET",
            "await-tx",
            params={"tx-id": str(tx_id), "timeout": str(max(1, int(seconds * 1000)))},
            timeout=seconds + 10,
        )
        if r.status_code == 200:
            return True
        if "TimeoutException" in r.text:
            return False
        self._fail(r, f"await-tx {tx_id}")

    def _log_down(self, tx_id: int) -> StoreUnavailable:
        return StoreUnavailable(
            f"XTDB node at {self.base} cannot read its transaction log (its database is out of reach), so"
            f" it has not indexed transaction {tx_id} of this store: reads wait until it can; the"
            " transaction is in the log, nothing is lost"
        )

    def _committed(self, tx_id: int) -> bool:
        answer = self._get("tx-committed", {"tx-id": str(tx_id)}, f"tx-committed {tx_id}")
        committed = answer.get(_kw("tx-committed?")) if isinstance(answer, Mapping) else None
        if not isinstance(committed, bool):
            raise StoreError(f"XTDB node at {self.base}: unexpected tx-committed answer {answer!r}")
        return committed

    # -- reads ---------------------------------------------------------------------------------

    def _reach(self, tx_id: int | None) -> None:
        """Before a read as of ``tx_id``: a transaction in the log that the node has not indexed
        yet (another writer's, submitted moments ago: its id may reach this process before the
        node indexes it) is waited for, as this store's own are; one past the newest in the log
        is an error, as the store contract has it (the node said "node out of sync" to both, so
        a reader given another writer's tx id failed at random)."""
        if tx_id is None or tx_id <= self._seen_tx:
            return
        known, newest = self._newest_in_log()
        if not known:
            return  # its log out of reach: the node answers with what it has indexed, or says why not
        if newest is None or tx_id > newest:
            raise StoreError(f"tx {tx_id} is past the newest transaction ({newest}) of {self.url}")
        self._await(tx_id)

    def get(self, id: str, valid_time: int | None = None, tx_id: int | None = None) -> Version | None:
        eid = _to_edn(_check_id(id))
        params = {"eid-edn": eid, **self._basis(valid_time, tx_id)}
        self._reach(tx_id)
        # one round trip: the version's coordinates and its document from one index snapshot
        v = self._own_get("entity-version", params, f"entity-version {id!r}")
        if v is not _NO_OWN:
            if v is None or str(v.get(_K_CONTENT_HASH)) == _NIL_HASH or v.get(_K_DOC) is None:
                return None  # no version, a deletion, or an evicted document
            vt, tx, tx_time = _ms(v[_K_VALID_TIME]), int(v[_K_TX_ID]), _ms(v[_K_TX_TIME])
            return Version(id, vt, tx, tx_time, _doc_from_edn(v[_K_DOC]))
        etx = self._get("entity-tx", params, f"entity-tx {id!r}", missing_ok=True)
        if etx is None or str(etx.get(_K_CONTENT_HASH)) == _NIL_HASH:
            return None
        vt, tx, tx_time = _ms(etx[_K_VALID_TIME]), int(etx[_K_TX_ID]), _ms(etx[_K_TX_TIME])
        # Read the document at the version's own coordinates: as of its tx, at its valid time,
        # it is the version in force whatever was written since (no race with other writers).
        doc = self._get("entity", {"eid-edn": eid, **self._basis(vt, tx)}, f"entity {id!r}", missing_ok=True)
        if doc is None:
            return None  # evicted between the two reads
        return Version(id, vt, tx, tx_time, _doc_from_edn(doc))

    def _history(
        self,
        id: str,
        order: Literal["asc", "desc"],
        *,
        with_docs: bool,
        start_valid_time: int | None,
        end_valid_time: int | None,
        start_tx_id: int | None,
        end_tx_id: int | None,
        with_corrections: bool,
    ) -> list[Version]:
        params = {
            "eid-edn": _to_edn(_check_id(id)),
            "history": "true",
            "sort-order": order,
            "with-docs": "true" if with_docs else "false",
        }
        if with_corrections:
            params["with-corrections"] = "true"
        for name, vt in (("start-valid-time", start_valid_time), ("end-valid-time", end_valid_time)):
            if vt is not None:
                params[name] = _iso(_check_int(name, vt))
        for name, tx in (("start-tx-id", start_tx_id), ("end-tx-id", end_tx_id)):
            if tx is not None:
                params[name] = str(_check_int(name, tx))
        rows = self._json_history(params) if self.base not in self._no_json_history else None
        from_json = rows is not None
        if rows is None:  # the official answer, in EDN: the same rows
            entries = self._get("entity", params, f"history of {id!r}") or ()
            rows = [
                [
                    _ms(e[_K_TX_TIME]),
                    int(e[_K_TX_ID]),
                    _ms(e[_K_VALID_TIME]),
                    str(e.get(_K_CONTENT_HASH)),
                    e.get(_K_DOC),
                ]
                for e in entries
            ]
        return [
            Version(
                id,
                vt,
                tx,
                tx_time,
                _doc_from(doc, from_json) if with_docs and doc is not None else None,
                deleted=content_hash == _NIL_HASH,
            )
            for tx_time, tx, vt, content_hash, doc in rows
        ]

    def _json_history(self, params: Mapping[str, str]) -> list[Any] | None:
        """An entity's history from our front end's JSON endpoint (its rows), or None when the
        node has no such endpoint (404: the official server, an older front end) or a document
        holds a value JSON would not keep (409): then ``entity`` answers in EDN."""
        r = self._request("GET", "context-os/entity-history", params=params)
        if r.status_code == 404:
            self._no_json_history.add(r.url.partition("/_xtdb/")[0])
            return None
        if r.status_code == 409:
            return None
        if r.status_code != 200:
            self._fail(r, f"history of {params['eid-edn']}")
        try:
            rows = json.loads(r.content)
            if not isinstance(rows, list) or not all(isinstance(e, list) and len(e) == 5 for e in rows):
                raise ValueError(f"expected a list of 5-element rows, got {r.text[:200]!r}")
        except RecursionError:
            raise StoreError(
                f"XTDB node at {self.base} sent a history of {params['eid-edn']} nested too deeply to read:"
                f" {_TOO_DEEP_TO_READ}"
            ) from None
        except ValueError as e:
            raise StoreError(f"XTDB node at {self.base} sent a history the JSON endpoint does not write: {e}") from e
        return rows

    def find(
        self,
        kind: str | None = None,
        where: Mapping[str, Any] | None = None,
        *,
        valid_time: int | None = None,
        tx_id: int | None = None,
        docs: DocMemo | None = None,
    ) -> list[Version]:
        where = check_find(kind, where)
        try:
            wanted = {k: canonical_json(v) for k, v in where.items()}
        except HashError as e:
            raise StoreError(f"find: a where value cannot be compared: {e}") from e
        clauses = _find_clauses(kind, where)
        # each document comes with its version's times: ``entity-tx`` called on the query's own
        # database (``$``, at the pinned basis) in the same answer, not one request per document
        # (a node whose queries may call only an allow-list of functions must allow it)
        clauses.append("[(xtdb.api/entity-tx $ e) etx]")
        query = " ".join(clauses)
        _utf8(query, "find: a kind, key or value")  # refused whatever the node holds, as when sent
        pinned = self._pinned(valid_time, tx_id)
        if pinned is None:
            return []
        rows = self._found(query, pinned, docs)
        matched = []
        for doc, etx in rows:
            # Datalog narrowed the candidates; equality is decided here, as the SQLite store
            # decides it (canonical JSON: 1 == 1.0, 1 != true, a list is not its elements).
            meta = doc.get("meta")
            if kind is not None and doc.get("kind") != kind:
                continue
            if wanted and not (
                isinstance(meta, Mapping) and all(k in meta and canonical_json(meta[k]) == w for k, w in wanted.items())
            ):
                continue
            if isinstance(doc.get("id"), str) and isinstance(etx, Mapping):
                matched.append(
                    Version(doc["id"], _ms(etx[_K_VALID_TIME]), int(etx[_K_TX_ID]), _ms(etx[_K_TX_TIME]), doc)
                )
        matched.sort(key=lambda v: v.id)
        return matched

    def find_meta(
        self,
        kind: str | None = None,
        where: Mapping[str, Any] | None = None,
        keys: Sequence[str] = (),
        *,
        valid_time: int | None = None,
        tx_id: int | None = None,
    ) -> list[tuple[str, dict[str, Any]]]:
        # the attributes asked for alone, and no ``entity-tx``: a tracker starting on 10,000 files
        # read them whole with their times (15 MB of EDN), where it needs five fields of each
        where = check_find(kind, where, keys)
        try:
            wanted = {k: canonical_json(v) for k, v in where.items()}
        except HashError as e:
            raise StoreError(f"find: a where value cannot be compared: {e}") from e
        names = [":xt/id", ":kind", *(":" + _meta_attr(k) for k in dict.fromkeys([*where, *keys]))]
        clauses = " ".join(_find_clauses(kind, where))
        query = "{:query {:find [(pull e [" + " ".join(names) + "])] :where [" + clauses + "]}}"
        _utf8(query, "find: a kind, key or value")
        pinned = self._pinned(valid_time, tx_id)
        if pinned is None:
            return []
        r = self._request("POST", "query", params=pinned, body=query)
        found = []
        for (row,) in self._answer(r, "find (Datalog query of meta fields)") or ():
            doc = _doc_from_edn(row)
            meta = doc.get("meta") or {}
            if kind is not None and doc.get("kind") != kind:
                continue
            if wanted and not all(
                # (a string is equal only to that same string: no canonical form to make)
                (meta[k] == where[k] if type(where[k]) is str else canonical_json(meta[k]) == w)
                if k in meta and (type(where[k]) is not str or type(meta[k]) is str)
                else False
                for k, w in wanted.items()
            ):
                continue
            if isinstance(doc.get("id"), str):
                found.append((doc["id"], {k: meta[k] for k in keys if k in meta}))
        found.sort(key=lambda f: f[0])
        return found

    def count_kinds(self, *, valid_time: int | None = None, tx_id: int | None = None) -> dict[str | None, int]:
        # two aggregates at one pinned basis: documents by string kind, and all documents (the
        # rest have another kind or none: another client's; XTDB indexes a vector by its
        # elements, so another client's document whose kind is a vector of strings counts
        # under each of them, where ``find`` would count it once, under None)
        pinned = self._pinned(valid_time, tx_id)
        if pinned is None:
            return {}
        by_kind = "{:query {:find [k (count e)] :where [[e :kind k] [(string? k)]]}}"
        r = self._request("POST", "query", params=pinned, body=by_kind)
        counts: dict[str | None, int] = {k: int(n) for k, n in self._answer(r, "count by kind") or ()}
        every = "{:query {:find [(count e)] :where [[e :xt/id _]]}}"
        r = self._request("POST", "query", params=pinned, body=every)
        total = sum(int(row[0]) for row in self._answer(r, "count of documents") or ())
        if (rest := total - sum(counts.values())) > 0:
            counts[None] = rest
        return counts

    def _pinned(self, valid_time: int | None, tx_id: int | None) -> dict[str, str] | None:
        """One basis (valid time and tx) for the several requests of one read, so that they
        agree; None when the node has indexed nothing yet."""
        params = self._basis(valid_time, tx_id)
        self._reach(tx_id)
        basis = self._get("db", params, "db basis")
        tx = basis.get(_K_TX) if isinstance(basis, Mapping) else None
        if not tx or tx.get(_K_TX_ID) is None:
            return None
        return {"valid-time": _iso(_ms(basis[_K_VALID_TIME])), "tx-id": str(int(tx[_K_TX_ID]))}

    def _found(self, where: str, pinned: Mapping[str, str], docs: DocMemo | None) -> list[tuple[dict[str, Any], Any]]:
        """The documents ``where`` finds at the pinned basis, each with its ``entity-tx``. With a
        memo, first the ids and their ``entity-tx`` alone, then the documents whose content hash
        it does not hold (a second query, for those ids only)."""
        if docs is None:
            query = "{:query {:find [(pull e [*]) etx] :where [" + where + "]}}"
            r = self._request("POST", "query", params=pinned, body=query)
            return [(_doc_from_edn(row[0]), row[1]) for row in self._answer(r, "find (Datalog query)") or ()]
        query = "{:query {:find [e etx] :where [" + where + "]}}"
        r = self._request("POST", "query", params=pinned, body=query)
        # (id, entity-tx, the content hash that keys the memo)
        heads = [(e, etx, etx[_K_CONTENT_HASH]) for e, etx in self._answer(r, "find (Datalog query)") or ()]
        missing = [e for e, _, h in heads if isinstance(e, str) and h not in docs]
        if missing:
            ids = " ".join(_to_edn(e) for e in missing)
            query = "{:query {:find [e (pull e [*])] :in [[e ...]]} :in-args [[" + ids + "]]}"
            r = self._request("POST", "query", params=pinned, body=query)
            pulled = dict(self._answer(r, "find (Datalog query of documents)") or ())
            for e, _, h in heads:
                if e in pulled:
                    docs[h] = _doc_from_edn(pulled[e])
        return [(docs[h], etx) for _, etx, h in heads if h in docs]

    def put_ids(self, after_tx_id: int, upto_tx_id: int, kinds: Sequence[str]) -> set[str]:
        """The ids of the documents of ``kinds`` put by the transactions after ``after_tx_id`` up
        to ``upto_tx_id``, read from the node's log (``tx-log`` with its ops): what the keyword
        index's catch-up reads the history of. Those not in force any more are among them (put,
        then deleted or put over at the same valid time): listed by ``find``, as before 2026-12-06,
        their texts never reached another process's sidecar, and its searches as of the time
        they were in force did not find them."""
        wanted = set(kinds)
        txs = self._get("tx-log", {"after-tx-id": str(after_tx_id), "with-ops?": "true"}, "tx-log") or ()
        ids: set[str] = set()
        for tx in txs:
            if int(tx[_K_TX_ID]) > upto_tx_id:
                break
            for op in tx.get(_K_TX_OPS) or ():
                if len(op) < 2 or op[0] != _K_PUT or not isinstance(op[1], Mapping):
                    continue
                doc_id, kind = op[1].get(_K_XT_ID), op[1].get(_K_KIND)
                if isinstance(doc_id, str) and kind in wanted:
                    ids.add(doc_id)
        return ids

    def latest_tx(self) -> Tx | None:
        # one round trip: the latest indexed transaction and whether it committed
        tx = self._own_get("latest-tx", {}, "latest-tx")
        if tx is not _NO_OWN:
            return (
                None
                if tx is None
                else Tx(int(tx[_K_TX_ID]), _ms(tx[_K_TX_TIME]), self._flag(tx, _K_COMMITTED, "latest-tx"))
            )
        tx = self._get("latest-completed-tx", {}, "latest-completed-tx", missing_ok=True)
        if tx is None:
            return None
        tx_id = int(tx[_K_TX_ID])
        return Tx(tx_id, _ms(tx[_K_TX_TIME]), self._committed(tx_id))

    def stats(self) -> dict[str, Any]:
        """The status of the node requests go to, and each node's state (``node_states``)."""
        status = self._get("status", {}, "status")
        if not isinstance(status, Mapping):
            raise StoreError(f"XTDB node at {self.base}: unexpected status answer {status!r}")
        out: dict[str, Any] = {"backend": "xtdb", "url": self.url}
        out.update((_key_name(k), _from_edn(v)) for k, v in status.items())
        out["nodes"] = self.node_states()
        return out

    NODE_STATE_TIMEOUT_S = 5.0
    """How long ``node_states`` waits for each answer of a node."""

    def node_states(self) -> list[dict[str, Any]]:
        """Each node of the store URL, in its order, as it answers now (for ``ctxos status``):
        ``url``; ``current`` (requests go to it); ``answers``; ``indexed_tx`` (``{id, time}``, the
        newest transaction it has indexed; None before any); ``log_tx_id`` (the newest in the
        transaction log it reads); ``lag_ms`` (how much older what it indexed is than the newest
        in its log: 0 when it has indexed everything; None when unknown, or when it has indexed
        nothing of it yet); ``error`` (why a value is missing). Each node is asked directly, never
        failed over, and this never raises."""
        return [self._node_state(base) for base in self.bases]

    def _node_state(self, base: str) -> dict[str, Any]:
        state: dict[str, Any] = {
            "url": base,
            "current": base == self.base,
            "answers": False,
            "indexed_tx": None,
            "log_tx_id": None,
            "lag_ms": None,
            "error": None,
        }

        def ask(endpoint: str, params: Mapping[str, str] | None = None) -> Any:
            """The node's EDN answer; None for its own 404 (nothing there yet)."""
            r = self._client.request(
                "GET", base, f"/_xtdb/{endpoint}", params=params, timeout=self.NODE_STATE_TIMEOUT_S
            )
            edn_answer = r.headers.get("content-type", "").startswith("application/edn")
            if r.status_code == 404 and edn_answer:
                return None
            if r.status_code != 200 or not edn_answer:
                said = " ".join(r.text[:200].split())
                if edn_answer:  # the node's own message, not its EDN map
                    with suppress(Exception):
                        body = _read_edn(r.text)
                        if isinstance(body, Mapping) and isinstance(body.get(_kw("error")), str):
                            said = " ".join(body[_kw("error")].split())
                raise StoreError(f"{endpoint}: HTTP {r.status_code}: {said}")
            return _read_edn(r.text)

        try:
            indexed = ask("latest-completed-tx")
            state["answers"] = True
            if indexed is not None:
                state["indexed_tx"] = {"id": int(indexed[_K_TX_ID]), "time": _ms(indexed[_K_TX_TIME])}
            newest = ask("latest-submitted-tx")
            if newest is None:
                state["lag_ms"] = 0  # an empty log: nothing to index
                return state
            log_id = state["log_tx_id"] = int(newest[_K_TX_ID])
            done = state["indexed_tx"]
            if done is not None and done["id"] >= log_id:
                state["lag_ms"] = 0
                return state
            # the newest transaction's time: the log after the one before it (ids only grow)
            txs = ask("tx-log", {"after-tx-id": str(log_id - 1)})
            newest_time = next((_ms(t[_K_TX_TIME]) for t in txs or () if int(t[_K_TX_ID]) == log_id), None)
            if newest_time is not None and done is not None:
                state["lag_ms"] = max(0, newest_time - done["time"])
        except _http.HttpError as e:
            state["error"] = f"cannot be reached: {e}" if not state["answers"] else repr(e)
        except StoreError as e:  # the node's refusal: what it could not do, in its own words
            # answering, it asks its transaction log for the rest (a cluster's: in PostgreSQL)
            state["error"] = f"its transaction log cannot be read: {e}" if state["answers"] else str(e)
        except Exception as e:  # an answer that is not what an XTDB node says: the state says so
            state["error"] = f"{type(e).__name__}: {e}"
        return state

    # -- the keyword index (a sidecar FTS5 file: see text_index.SidecarIndex) -----------------

    def _text_search(self, args: text_index.SearchArgs) -> list[TextHit]:
        """Over the sidecar index, each hit checked against the version in force; a scan when
        the sidecar is damaged, or was dropped as damaged (``index_status`` says so)."""
        self._reach(args.tx_id)
        try:
            hits = self._text.search(args)
        except text_index.FTS_ERRORS:
            hits = None
        return text_index.scan_search(self, args) if hits is None else hits

    def _text_parts(self, after_seq: int, limit: int) -> list[TextPart]:
        try:
            return self._text.parts(after_seq, limit)
        except sqlite3.Error as e:
            raise StoreError(f"the keyword index {self._text.path} failed: {e}; run `ctxos index rebuild`") from e

    def index_status(self) -> dict[str, Any]:
        try:
            return self._text.status()
        except text_index.FTS_ERRORS as e:
            latest = self.latest_tx()
            return {
                "backend": "fts5-sidecar",
                "path": str(self._text.path),
                "state": "corrupt",
                "parts": 0,
                "documents": 0,
                "last_seq": 0,
                "last_indexed_tx": None,
                "store_tx": None if latest is None else latest.id,
                "lags": True,
                "search": "scan",
                "tokenizer": text_index.TOKENIZER,
                "problem": str(text_index.damaged_fts(e) or e),
            }

    def rebuild_index(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Drop the sidecar and read every document of a searchable kind in force now, with its
        whole history, from the node again."""
        try:
            return self._text.rebuild(progress)
        except sqlite3.Error as e:
            raise StoreError(f"the keyword index {self._text.path} could not be rebuilt: {e}") from e

    def scrub(self) -> bool:
        """The node erases what it evicts; on this machine the keyword index's sidecar may still
        hold the text of an object whose eviction was cut short (Ctrl-C after the node took it,
        before the sidecar heard of it): its catch-up drops what every tombstone since names, and
        rebuilds the file without it."""
        try:
            self._text.catch_up()
        except sqlite3.Error as e:
            raise StoreError(f"the keyword index {self._text.path} could not be rebuilt: {e}") from e
        return True

    def check(self) -> None:
        """None: XTDB 1.x offers no integrity check over its HTTP API, so there is none to run
        from here (``verify`` still re-hashes every document it reads)."""
        return None

    def __enter__(self) -> XtdbStore:
        return self

    def reader(self) -> Callable[[], Store]:
        # the same nodes: once submitted, a write is in their log for every client
        with self._node_lock:  # the node it reads from now: one this store failed over from is not tried again
            return _Reader(self._opened, self.url, self.timeout, self._text.path, self.base, frozenset(self._down))

    def close(self) -> None:
        try:  # what this store wrote is readable by everyone once it is closed
            if self._unanswered and self._unsettled >= 0:
                # a node that did not answer the last request would hold this wait up to its timeout
                raise StoreUnavailable(f"XTDB node at {self.base} did not answer the last request; not waiting")
            self._settle()
        except StoreError as e:  # taken by the node's log all the same: nothing is lost
            log.warning("XTDB node at %s: closing before it indexed transaction %s: %s", self.base, self._unsettled, e)
        self._text.close()
        self._client.close()


class _Reader:
    """``XtdbStore.reader``'s callable: the store as given (credentials and all) opened again; its
    ``repr`` shows the URL with the password masked, as ``Store.url`` does."""

    def __init__(
        self,
        url: str,
        shown: str,
        timeout: float,
        text_index_path: Path,
        base: str | None = None,
        down: frozenset[str] = frozenset(),
    ) -> None:
        self.url, self.shown, self.timeout, self.text_index_path = url, shown, timeout, text_index_path
        self.base, self.down = base, down

    def __call__(self) -> XtdbStore:
        store = XtdbStore(self.url, timeout=self.timeout, text_index_path=self.text_index_path)
        # where the store it reads for stands: on the node it failed over to, knowing (and having
        # said) which were down, so each reader does not find out (and say) it again
        if self.base in store.bases:
            store.base = self.base
            store._down = set(self.down)
        return store

    def __repr__(self) -> str:
        return f"XtdbStore.reader({self.shown!r})"


_BEFORE_SETTLED = frozenset({"submit-tx", "context-os/submit-tx", "await-tx", "latest-submitted-tx"})
"""Requests that need not wait for this store's unindexed transactions: submits (the log keeps
their order), the wait itself, and the log's own newest id."""


def _check_int(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise StoreError(f"{name} must be an int (epoch ms or tx id), got {value!r}")
    return value


def _tx_op(op: Op) -> str:
    """One transaction operation as XTDB EDN."""
    if isinstance(op, Put):
        parts = [":xtdb.api/put", _doc_to_edn(op.doc)]
        if op.valid_from is not None or op.valid_to is not None:
            # nil start = the tx time, as XTDB reads it
            parts.append("nil" if op.valid_from is None else _to_edn(_Inst(_check_int("valid_from", op.valid_from))))
        if op.valid_to is not None:
            parts.append(_to_edn(_Inst(_check_int("valid_to", op.valid_to))))
        return "[" + " ".join(parts) + "]"
    if isinstance(op, Delete):
        parts = [":xtdb.api/delete", _to_edn(_check_id(op.id))]
        if op.valid_from is not None or op.valid_to is not None:
            parts.append("nil" if op.valid_from is None else _to_edn(_Inst(_check_int("valid_from", op.valid_from))))
        if op.valid_to is not None:
            parts.append(_to_edn(_Inst(_check_int("valid_to", op.valid_to))))
        return "[" + " ".join(parts) + "]"
    if isinstance(op, Match):
        expected = "nil" if op.expected is None else _doc_to_edn(op.expected)
        parts = [":xtdb.api/match", _to_edn(_check_id(op.id)), expected]
        if op.valid_time is not None:
            parts.append(_to_edn(_Inst(_check_int("valid_time", op.valid_time))))
        return "[" + " ".join(parts) + "]"
    if isinstance(op, Evict):
        return f"[:xtdb.api/evict {_to_edn(_check_id(op.id))}]"
    raise StoreError(f"unknown transaction operation {op!r}")


def _find_clauses(kind: str | None, where: Mapping[str, Any]) -> list[str]:
    """The Datalog clauses that narrow ``find`` to its candidates (``e``)."""
    clauses = []
    if kind is not None:
        clauses.append(f"[e :kind {_to_edn(kind)}]")
    clauses.extend(c for k, v in where.items() if (c := _where_clause(k, v)) is not None)
    if not clauses:
        clauses.append("[e :xt/id _]")
    return clauses


def _where_clause(key: str, value: Any) -> str | None:
    """A Datalog clause that narrows ``find`` to candidates for ``meta[key] == value``, if any.

    XTDB compares numbers by type (1 does not match 1.0), our contract by canonical JSON, so an
    integral number matches both forms. Lists and maps get no clause: XTDB indexes a vector by
    its elements, so a vector literal would not mean "equal to this list".
    """
    attr = ":" + _meta_attr(key)
    if value is None or isinstance(value, bool | str):
        return f"[e {attr} {_to_edn(value)}]"
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            return None
        if value == 0:
            value = 0.0 if isinstance(value, float) else 0  # XTDB stores -0.0 as 0.0
        # (the bound first: an integer past a double's range has no float to make)
        if abs(value) < _SAFE_INT and float(value).is_integer():
            return f"(or [e {attr} {int(value)}] [e {attr} {float(value)!r}])"
        return f"[e {attr} {_to_edn(value)}]"
    return None

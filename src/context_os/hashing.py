"""Canonical JSON and blake3 hashes (specified in docs/hashing.md, with test vectors).

Every hash context_os records is ``"b3:" + blake3(canonical_json(value)).hexdigest()``.
A document carries three of them:

* ``content_hash``  over the value of its ``content`` field;
* ``meta_hash``     over its ``meta`` mapping;
* ``object_hash``   over ``{"content_hash", "id", "kind", "meta_hash"}``, so a version can be
  verified from its metadata and content hash alone (an inactive object has no content loaded).

This module must stay dependency-free apart from blake3 and orjson: other implementations (the
Pi extension, XTDB-side tools) reproduce it from docs/hashing.md. orjson only writes, faster,
the values whose bytes it writes exactly as the standard encoder does (``_floats``: no floats
with an exponent, nothing to normalise but integral floats); the standard encoder writes the
rest (tests/test_hashing.py compares the two).

It never imports from the rest of the package.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Mapping
from json.encoder import encode_basestring
from typing import Any

import blake3
import orjson

from .errors import HashError

__all__ = [
    "MAX_DEPTH",
    "TOO_DEEP",
    "HASH_PREFIX",
    "canonical_form",
    "canonical_json",
    "compact_json",
    "content_hash",
    "doc_hashes",
    "encode_doc",
    "hash_bytes",
    "hash_value",
    "int_problem",
    "json_forms",
    "json_problem",
    "unicode_problem",
    "object_hash",
    "verify_doc",
]

HASH_PREFIX = "b3:"


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


_UNLIKE, _ALIKE, _INTEGRAL = 0, 1, 2


def _floats(value: Any, depth: int = 0) -> tuple[int, Any]:
    """How orjson writes ``value`` against the standard encoder, and ``value`` normalised when that
    is only making its integral floats integers. ``_ALIKE``, byte for byte, if it is made only of
    str/int/bool/None, lists, str-keyed dicts and floats that neither writes with an exponent
    (from 1e-4 to 1e16) and that normalising leaves alone; ``_INTEGRAL`` if some of its floats are
    integral (0.0, 2.0), which the canonical form writes as integers (``_normalise``) and a store
    as floats, each alike once made so; else ``_UNLIKE`` (-0.0, which a store writes as 0.0, is).
    The value normalised shares every part of ``value`` without an integral float (the same
    object when there is none). Leaves are tested in the loop, not by a call each: this runs on
    every document and message hashed, and most of their values are leaves."""
    t = type(value)
    if t is float:
        if value.is_integer() and abs(value) < 2**53:
            return (_INTEGRAL, int(value)) if value or math.copysign(1.0, value) > 0 else (_UNLIKE, value)
        return (_ALIKE if 1e-4 <= abs(value) < 1e16 else _UNLIKE), value
    if t is dict or t is list:
        if depth >= MAX_DEPTH:
            return _UNLIKE, value
        if t is dict:
            for k in value:
                if type(k) is not str:
                    return _UNLIKE, value
        kind, out = _ALIKE, None
        for k, v in value.items() if t is dict else enumerate(value):
            tv = type(v)
            if not (tv is str or tv is int or tv is bool or v is None):
                got, new = _floats(v, depth + 1)
                if got == _UNLIKE:
                    return _UNLIKE, value
                if new is not v:
                    kind = _INTEGRAL
                    if out is None:
                        out = dict(value) if t is dict else list(value)
                    out[k] = new
        return kind, value if out is None else out
    return (_ALIKE if t is str or t is int or t is bool or value is None else _UNLIKE), value


def _classed(value: Any) -> tuple[int, Any]:
    """``_floats(value)``; ``TOO_DEEP`` when the walk runs past Python's recursion limit (a call
    from deep in another walk)."""
    try:
        return _floats(value)
    except RecursionError:
        raise HashError(TOO_DEEP) from None


def compact_json(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``, keys in their order, as
    text: written by orjson when it writes it alike (``_floats``), else by the standard encoder
    (which raises what it raises)."""
    try:
        if _floats(value)[0] != _UNLIKE:
            return orjson.dumps(value).decode("utf-8")
    except (orjson.JSONEncodeError, RecursionError):  # an integer past 64 bits, a lone surrogate
        pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _check(value: Any, path: str) -> None:
    """Reject what has no single canonical encoding: NaN/Infinity, non-string keys and integers
    too long to write."""
    if isinstance(value, int) and not isinstance(value, bool):
        if (problem := int_problem(value)) is not None:
            raise HashError(f"{path or '$'}: {problem} has no canonical JSON form")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise HashError(f"{path or '$'}: {value!r} has no canonical JSON form")
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise HashError(f"{path or '$'}: key {k!r} is not a string")
            _check(v, f"{path}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _check(v, f"{path}[{i}]")


MAX_DEPTH = 256
"""How deeply a value may nest (lists and objects within each other, the outermost one level) to
have a canonical form: a fixed bound, where Python's recursion limit less the depth of the call
that walked it made one accepted from a shallow call unreadable from a deeper one (a document of
400 levels, written by a test, failed ``ctxos verify`` of the store, before 2026-12-02)."""

TOO_DEEP = f"nested too deeply to have a canonical JSON form (deeper than {MAX_DEPTH} levels)"
"""Why a value nested past ``MAX_DEPTH`` (or past what Python's recursion limit lets a walk reach)
has no canonical form: every store refuses such a document so."""


def canonical_json(value: Any) -> bytes:
    """UTF-8 JSON with sorted keys, no insignificant whitespace, non-ASCII kept as is.

    Floats that hold an integral value are written as integers (``1.0`` → ``1``) so that a
    document survives a round trip through stores that do not keep the distinction.
    """
    return canonical_form(value)[0]


def canonical_form(value: Any) -> tuple[bytes, bool]:
    """``canonical_json(value)``, and whether ``value`` is plain: nothing in it to normalise (no
    integral floats, tuples or other types), so that its canonical JSON is also exactly what
    ``json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))`` writes. What
    orjson writes alike (``_floats``) it writes, 16 times faster; the standard encoder the rest."""
    return _canonical(value, *_classed(value))


def json_forms(value: Any) -> tuple[bytes, bool, bytes | None]:
    """``canonical_form(value)`` and, from the same walk, what a store writes of ``value``
    (``json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))``, UTF-8;
    floats stay floats): the canonical JSON when plain, orjson's when it writes it alike, else
    None (the store encodes it the standard way)."""
    floats, normalised = _classed(value)
    canonical, plain = _canonical(value, floats, normalised)
    if plain:
        return canonical, True, canonical
    stored = None
    if floats == _INTEGRAL:
        with contextlib.suppress(orjson.JSONEncodeError):  # an integer past 64 bits
            stored = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return canonical, False, stored


def _canonical(value: Any, floats: int, normalised: Any) -> tuple[bytes, bool]:
    """``canonical_form`` of ``value``, which ``_floats`` classed as ``floats`` and normalised."""
    try:
        if floats != _UNLIKE:  # orjson writes it, integral floats made integers, as the standard encoder
            try:
                return orjson.dumps(normalised, option=orjson.OPT_SORT_KEYS), floats == _ALIKE
            except orjson.JSONEncodeError:  # an integer past 64 bits, a lone surrogate: the standard encoder says which
                value = normalised
        else:  # floats, tuples, mappings of other types, bad keys: normalise
            try:
                value = _normalise(value)
            except HashError:
                _check(value, "")  # says where (a path is built only when there is an error)
                raise
        try:
            text = _ENCODER.encode(value)
        except ValueError as e:  # an integer too long to write (int_problem)
            _check(value, "")  # says where
            raise HashError(str(e)) from None
    except RecursionError:
        raise HashError(TOO_DEEP) from None
    try:
        return text.encode("utf-8"), floats == _ALIKE
    except UnicodeEncodeError as e:  # a lone surrogate: not text any encoder agrees on
        raise HashError(f"not valid Unicode text ({e.reason} at position {e.start})") from None


def unicode_problem(text: str) -> str | None:
    """Why ``text`` is not valid Unicode text (a lone surrogate, which invalid UTF-8 read with
    ``surrogateescape`` or a JSON ``\\udcff`` escape leaves: no encoder agrees on it), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"not valid Unicode text ({e.reason} at position {e.start})"
    return None


def json_problem(value: Any) -> str | None:
    """Why ``value`` has no canonical JSON form where ``json.dumps`` writes one all the same: a key
    that is not a string, which it writes as one (``1`` as ``"1"``); the path and the problem, or
    None. A quick walk (no paths but on an error) that leaves to ``json.dumps`` what it refuses
    anyway (NaN, other types, an integer too long)."""
    try:
        if _floats(value)[0] != _UNLIKE or _string_keys(value):
            return None
        _check(value, "")
    except HashError as e:
        return str(e)
    except RecursionError:  # (as ``canonical_form`` says it)
        return TOO_DEEP
    return None


def _string_keys(value: Any, depth: int = 0) -> bool:
    """Whether every mapping in ``value`` has only string keys (leaves are tested by type in the
    loop, as in ``_floats``: most values are leaves); ``TOO_DEEP`` past ``MAX_DEPTH``."""
    t = type(value)
    if depth >= MAX_DEPTH and (t is list or t is tuple or isinstance(value, Mapping)):
        raise HashError(TOO_DEEP)
    if t is dict or (t is not list and t is not tuple and isinstance(value, Mapping)):
        for k, v in value.items():
            if type(k) is not str and not isinstance(k, str):
                return False
            tv = type(v)
            if not (tv is str or tv is int or tv is float or tv is bool or v is None or _string_keys(v, depth + 1)):
                return False
        return True
    if t is list or t is tuple:
        for v in value:
            tv = type(v)
            if not (tv is str or tv is int or tv is float or tv is bool or v is None or _string_keys(v, depth + 1)):
                return False
    return True


def int_problem(value: int) -> str | None:
    """What the integer ``value`` is if it cannot be written or read back (it has more decimal
    digits than Python converts: ``sys.get_int_max_str_digits()``, 4300 by default), or None."""
    try:
        int.__str__(value)
    except ValueError:
        return f"an integer longer than {sys.get_int_max_str_digits()} digits (Python's limit)"
    return None


def _normalise(value: Any, depth: int = 0) -> Any:
    """``value`` with integral floats as integers, tuples as lists, mappings as dicts; HashError
    for what has no canonical form (NaN, Infinity, a key that is not a string, other types)."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is float:
        if not math.isfinite(value):
            raise HashError(f"{value!r} has no canonical JSON form")
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, Mapping | list | tuple) and depth >= MAX_DEPTH:
        raise HashError(TOO_DEEP)
    if t is dict or isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise HashError(f"key {k!r} is not a string")
            out[k] = _normalise(v, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [_normalise(v, depth + 1) for v in value]
    if isinstance(value, bool | int | str):  # subclasses (an IntEnum, a str enum)
        return value
    if isinstance(value, float):
        return _normalise(float(value), depth)
    raise HashError(f"{type(value).__name__} has no canonical JSON form")


def sorted_keys(value: Any) -> Any:
    """``value`` with every object's keys in sorted order, as canonical JSON orders them and the
    store gives documents back; TypeError for keys that do not sort."""
    if isinstance(value, dict):
        return {k: sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sorted_keys(v) for v in value]
    return value


def hash_bytes(data: bytes) -> str:
    """``b3:`` + blake3 hex digest of ``data`` (already canonical JSON)."""
    return HASH_PREFIX + blake3.blake3(data).hexdigest()


def hash_value(value: Any) -> str:
    """``b3:`` + blake3 hex digest of the canonical JSON of ``value``."""
    return HASH_PREFIX + blake3.blake3(canonical_json(value)).hexdigest()


def content_hash(content: Any) -> str:
    """Hash of a document's ``content`` field."""
    return hash_value(content)


def object_hash(doc_id: str, kind: str, content_hash_: str, meta_hash: str) -> str:
    """Hash of a whole document, built from its id, kind and the two part hashes."""
    parts = (content_hash_, doc_id, kind, meta_hash)
    if not all(type(p) is str for p in parts):
        return hash_value({"content_hash": content_hash_, "id": doc_id, "kind": kind, "meta_hash": meta_hash})
    # the canonical JSON of that mapping, its keys in order, written out (every document hashes one)
    c, i, k, m = map(encode_basestring, parts)
    text = f'{{"content_hash":{c},"id":{i},"kind":{k},"meta_hash":{m}}}'
    try:
        return hash_bytes(text.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise HashError(f"not valid Unicode text ({e.reason} at position {e.start})") from None


def doc_hashes(doc: Mapping[str, Any]) -> dict[str, str]:
    """The three hashes a document should carry, computed from its fields (``encode_doc`` makes a
    document with them and its stored JSON at once)."""
    c = content_hash(doc.get("content"))
    m = hash_value(doc.get("meta", {}))
    return {"content_hash": c, "meta_hash": m, "object_hash": object_hash(doc["id"], doc["kind"], c, m)}


def hashed(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` (``id``, ``kind``, ``content``, ``meta``) with its three hashes: what every stored
    document carries, and ``ctxos verify`` checks (a bookkeeping document made as a plain dict,
    without them, is reported as damaged)."""
    return {**doc, **doc_hashes(doc)}


def encode_doc(
    doc_id: str,
    kind: str,
    content: Any,
    meta: Mapping[str, Any],
    content_json: tuple[bytes, bool] | None = None,
    content_stored: bytes | None = None,
) -> tuple[dict[str, Any], bytes | None]:
    """A document (``id``, ``kind``, ``content``, ``meta`` and its three hashes) and, when its
    content and meta are plain (nothing to normalise) or hold only floats orjson writes alike
    (``json_forms``), its whole JSON as a store writes it (``json.dumps(doc, sort_keys=True,
    ensure_ascii=False, separators=(",", ":"))``, UTF-8), built from the canonical JSON the hashes
    were computed over: a session encodes each document once, not once to hash it and again to
    store it. ``content_json``: the content's canonical JSON and whether the content is plain,
    when the caller has them (chat pages join their entries'); ``content_stored`` with it: the
    content's JSON as a store writes it (``json_forms``), when it is not plain and known."""
    if content_json is None:
        c_json, _, c_stored = json_forms(content)
    else:
        c_json, c_stored = content_json[0], content_json[0] if content_json[1] else content_stored
    m_json, _, m_stored = json_forms(meta)
    c, m = hash_bytes(c_json), hash_bytes(m_json)
    o = object_hash(doc_id, kind, c, m)
    doc = {"id": doc_id, "kind": kind, "content": content, "meta": meta}
    doc.update(content_hash=c, meta_hash=m, object_hash=o)
    if c_stored is None or m_stored is None or not (type(doc_id) is str and type(kind) is str):
        return doc, None
    # keys in sorted order; the hashes are "b3:" and hex digits, nothing to escape
    whole = b"".join(
        (
            b'{"content":',
            c_stored,
            b',"content_hash":"',
            c.encode(),
            b'","id":',
            _ENCODER.encode(doc_id).encode("utf-8"),
            b',"kind":',
            _ENCODER.encode(kind).encode("utf-8"),
            b',"meta":',
            m_stored,
            b',"meta_hash":"',
            m.encode(),
            b'","object_hash":"',
            o.encode(),
            b'"}',
        )
    )
    return doc, whole


def verify_doc(doc: Mapping[str, Any]) -> list[str]:
    """Names of the hash fields of ``doc`` that do not match its content (empty: all good)."""
    expected = doc_hashes(doc)
    return [name for name, value in expected.items() if doc.get(name) != value]

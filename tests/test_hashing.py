"""Canonical JSON and hashes: the vectors in docs/hashing.md, properties, tamper detection.

The vectors are parsed from the document itself, so the specification and the code cannot drift.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple

import blake3
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from context_os.errors import HashError
from context_os.hashing import (
    HASH_PREFIX,
    MAX_DEPTH,
    canonical_form,
    canonical_json,
    compact_json,
    content_hash,
    doc_hashes,
    encode_doc,
    hash_value,
    object_hash,
    verify_doc,
)
from context_os.objects import parse_doc
from context_os.store.sqlite import _exact_json

SPEC = Path(__file__).resolve().parent.parent / "docs" / "hashing.md"


class Vector(NamedTuple):
    id: str
    case: str
    input: str
    canonical: str
    nbytes: int
    hash: str


def _regions(tag: str) -> list[str]:
    return re.findall(rf"<!-- {tag} -->\n(.*?)<!-- /{tag} -->", SPEC.read_text("utf-8"), re.S)


def _unquote(cell: str) -> str:
    cell = cell.strip()
    return cell[1:-1] if len(cell) >= 2 and cell[0] == cell[-1] == "`" else cell


def _vectors() -> list[Vector]:
    rows = []
    for region in _regions("vectors"):
        for line in region.splitlines():
            if not line.startswith("|") or line.startswith(("| # ", "|---")):
                continue
            cells = [_unquote(c) for c in line.strip().strip("|").split("|")]
            assert len(cells) == 6, f"malformed vector row in {SPEC.name}: {line}"
            rows.append(Vector(cells[0], cells[1], cells[2], cells[3], int(cells[4]), cells[5]))
    return rows


def _documents() -> list[dict[str, Any]]:
    docs = []
    for region in _regions("document"):
        match = re.fullmatch(r"```json\n(.*)\n```\n", region, re.S)
        assert match, f"malformed document block in {SPEC.name}"
        docs.append(json.loads(match.group(1)))
    return docs


VECTORS = _vectors()
DOCUMENTS = _documents()


def test_spec_has_enough_vectors() -> None:
    assert len(VECTORS) >= 10
    assert len({v.id for v in VECTORS}) == len(VECTORS)
    assert {d["kind"] for d in DOCUMENTS} == {"file", "toolcall"}


@pytest.mark.parametrize("vector", VECTORS, ids=[v.id for v in VECTORS])
def test_vector(vector: Vector) -> None:
    value = json.loads(vector.input)
    expected = vector.canonical.encode("utf-8")
    assert canonical_json(value) == expected
    assert len(expected) == vector.nbytes
    assert hash_value(value) == vector.hash
    # The spec's hash column checked with nothing but blake3 over the spec's canonical column.
    assert vector.hash == "b3:" + blake3.blake3(expected).hexdigest()


@pytest.mark.parametrize("doc", DOCUMENTS, ids=[d["kind"] for d in DOCUMENTS])
def test_document_vector(doc: dict[str, Any]) -> None:
    assert verify_doc(doc) == []
    assert doc_hashes(doc) == {k: doc[k] for k in ("content_hash", "meta_hash", "object_hash")}
    # The document is what the typed model would store.
    assert parse_doc(doc).to_doc() == doc


def test_blake3_known_answer() -> None:
    # BLAKE3 reference test vector for empty input: guards against a wrong blake3 build.
    assert blake3.blake3(b"").hexdigest() == "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"


def test_hash_format() -> None:
    h = hash_value({"a": 1})
    assert h.startswith(HASH_PREFIX) and HASH_PREFIX == "b3:"
    assert re.fullmatch(r"b3:[0-9a-f]{64}", h)
    assert content_hash("x") == hash_value("x")


def test_string_escapes() -> None:
    assert canonical_json("\x7f\u2028/") == '"\x7f\u2028/"'.encode()  # DEL, LS, slash: raw
    assert canonical_json("\x1b") == b'"\\u001b"'  # lowercase hex
    assert canonical_json("e\u0301") != canonical_json("\u00e9")  # no Unicode normalisation


def test_tuples_are_arrays() -> None:
    assert canonical_json((1, (2.0, "x"))) == b'[1,[2,"x"]]'


@pytest.mark.parametrize("value", [b"bytes", {1, 2}, dt.datetime(2025, 1, 1), object()])
def test_unsupported_types_raise(value: Any) -> None:
    with pytest.raises(HashError, match=type(value).__name__):
        canonical_json({"a": [value]})


def test_error_names_the_path() -> None:
    with pytest.raises(HashError, match=r"^\.meta\.args\[2\]: inf "):
        canonical_json({"meta": {"args": [1, 2, math.inf]}})
    with pytest.raises(HashError, match=r"^\.a\[1\]: key 2 is not a string"):
        canonical_json({"a": [1, {2: 3}]})
    with pytest.raises(HashError, match=r"^\$: nan "):
        canonical_json(math.nan)


def test_an_integer_too_long_to_write_raises_hash_error_naming_where() -> None:
    """Python writes no integer longer than ``sys.get_int_max_str_digits()``: its ``ValueError``
    came out of ``canonical_json`` as it was, through every hash and document built on it."""
    huge = 10 ** (sys.get_int_max_str_digits() or 4300)
    with pytest.raises(HashError, match=r"^\.meta\.n\[1\]: an integer longer than \d+ digits"):
        canonical_json({"meta": {"n": [1, huge]}})
    with pytest.raises(HashError, match=r"^\.x: an integer longer"):
        canonical_json({"f": 1.5, "x": -huge})  # a value that is normalised first
    with pytest.raises(HashError, match="an integer longer"):
        encode_doc("note:1", "note", "text", {"n": huge})


def test_lone_surrogate_raises_hash_error() -> None:
    with pytest.raises(HashError):
        canonical_json({"a": "\ud800"})


# --- properties ---------------------------------------------------------------------------

json_leaves = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
)
json_values = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=25,
)


def _containing(bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Values with ``bad`` planted somewhere inside (or at the top)."""

    def in_list(t: tuple[list[Any], Any, int]) -> list[Any]:
        items, inner, i = t
        return [*items[:i], inner, *items[i:]]

    def in_dict(t: tuple[dict[str, Any], str, Any]) -> dict[str, Any]:
        mapping, key, inner = t
        return {**mapping, key: inner}

    return st.recursive(
        bad,
        lambda inner: (
            st.tuples(st.lists(json_values, max_size=3), inner, st.integers(0, 3)).map(in_list)
            | st.tuples(st.dictionaries(st.text(max_size=8), json_values, max_size=3), st.text(max_size=8), inner).map(
                in_dict
            )
        ),
        max_leaves=4,
    )


def _shuffled(value: Any, rnd: Any) -> Any:
    """The same value with every object's keys inserted in a random order."""
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: _shuffled(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


def _expected(value: Any) -> Any:
    """The normalisation docs/hashing.md specifies, written independently of hashing.py."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _expected(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_expected(v) for v in value]
    return value


def _typed(value: Any) -> Any:
    """A form in which ``1 != 1.0 != True``, for strict equality checks."""
    if isinstance(value, dict):
        return ("dict", sorted((k, _typed(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", [_typed(v) for v in value])
    return (type(value).__name__, value)


@settings(deadline=None)
@given(json_values)
def test_deterministic(value: Any) -> None:
    first = canonical_json(value)
    assert canonical_json(json.loads(json.dumps(value))) == first
    assert canonical_json(value) == first
    first.decode("utf-8")  # valid UTF-8


@settings(deadline=None)
@given(json_values, st.randoms(use_true_random=False))
def test_key_order_independent(value: Any, rnd: Any) -> None:
    assert canonical_json(_shuffled(value, rnd)) == canonical_json(value)
    assert hash_value(_shuffled(value, rnd)) == hash_value(value)


@settings(deadline=None)
@given(json_values)
def test_round_trip(value: Any) -> None:
    encoded = canonical_json(value)
    decoded = json.loads(encoded)
    assert _typed(decoded) == _typed(_expected(value))
    assert canonical_json(decoded) == encoded  # a fixed point


plain_leaves = st.none() | st.booleans() | st.integers() | st.integers(2**63 - 8, 2**64 + 8) | st.text(max_size=20)
plain_values = st.recursive(
    plain_leaves,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=25,
)


@settings(deadline=None, max_examples=500)
@given(plain_values)
def test_a_plain_value_is_what_the_standard_encoder_writes(value: Any) -> None:
    """A value with no floats or other types to normalise is written by a faster encoder; its
    bytes must be the standard library's, byte for byte (control characters, U+2028, keys past
    U+FFFF in code-point order, integers either side of 64 bits)."""
    standard = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    assert canonical_json(value) == standard


json_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.0, -0.0, 1.0, 1e-4, 9.999e-5, 1e16, 9.999999999999998e15, 2.0**53, 2.0**53 + 2, 1.2345, -7.5e-3]
)
float_values = st.recursive(
    plain_leaves | json_floats,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=25,
)


@settings(deadline=None, max_examples=500)
@given(float_values)
def test_a_value_with_floats_is_its_normalised_form_as_the_standard_encoder_writes_it(value: Any) -> None:
    """Floats orjson writes as the standard encoder does (no exponent) are written by it; the
    bytes must be the standard library's of the value normalised as docs/hashing.md says, and
    the value is plain only when normalising changes nothing."""
    standard = json.dumps(_expected(value), sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    before = _typed(value)
    text, plain = canonical_form(value)
    assert text == standard
    assert _typed(value) == before  # normalised in a copy: 1.0 is still a float in the value
    if plain:
        assert json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode() == standard


@settings(deadline=None, max_examples=300)
@given(float_values)
def test_compact_json_is_what_the_standard_encoder_writes_keys_in_their_order(value: Any) -> None:
    assert compact_json(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH])
def test_a_plain_value_nested_to_the_limit_is_written(depth: int) -> None:
    value: Any = "x"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    assert canonical_json(value) == json.dumps(value, separators=(",", ":")).encode()


@settings(deadline=None)
@given(_containing(st.sampled_from([math.nan, math.inf, -math.inf])))
def test_non_finite_floats_raise(value: Any) -> None:
    with pytest.raises(HashError):
        canonical_json(value)
    with pytest.raises(HashError):
        hash_value(value)


non_string_keys = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.tuples(st.integers())


@settings(deadline=None)
@given(_containing(st.dictionaries(non_string_keys, json_values, min_size=1, max_size=3)))
def test_non_string_keys_raise(value: Any) -> None:
    with pytest.raises(HashError, match="is not a string"):
        canonical_json(value)


# --- verify_doc -----------------------------------------------------------------------------


@pytest.fixture
def doc() -> dict[str, Any]:
    copy: dict[str, Any] = json.loads(json.dumps(DOCUMENTS[0]))
    return copy


@pytest.mark.parametrize(
    ("field", "new", "flagged"),
    [
        ("content", "tampered\n", ["content_hash", "object_hash"]),
        ("meta", {"path": "src/other.py"}, ["meta_hash", "object_hash"]),
        ("id", "file:other", ["object_hash"]),
        ("kind", "toolcall", ["object_hash"]),
        ("content_hash", "b3:" + "0" * 64, ["content_hash"]),
        ("meta_hash", "b3:" + "0" * 64, ["meta_hash"]),
        ("object_hash", "b3:" + "0" * 64, ["object_hash"]),
    ],
)
def test_verify_doc_detects_tampering(doc: dict[str, Any], field: str, new: Any, flagged: list[str]) -> None:
    doc[field] = new
    assert verify_doc(doc) == flagged


def test_verify_doc_detects_missing_hash(doc: dict[str, Any]) -> None:
    del doc["meta_hash"]
    assert verify_doc(doc) == ["meta_hash"]


def test_inactive_object_verifies_without_content(doc: dict[str, Any]) -> None:
    """The object hash needs only id, kind, meta and the recorded content hash."""
    inactive = {k: v for k, v in doc.items() if k != "content"}
    assert (
        object_hash(inactive["id"], inactive["kind"], inactive["content_hash"], hash_value(inactive["meta"]))
        == (doc["object_hash"])
    )


@settings(deadline=None)
@given(json_values, json_values)
def test_verify_doc_detects_any_content_change(original: Any, replacement: Any) -> None:
    stored: dict[str, Any] = {"id": "file:x", "kind": "file", "content": original, "meta": {"path": "a"}}
    stored.update(doc_hashes(stored))
    assert verify_doc(stored) == []
    stored["content"] = replacement
    changed = canonical_json(replacement) != canonical_json(original)
    assert verify_doc(stored) == (["content_hash", "object_hash"] if changed else [])


@settings(deadline=None, max_examples=300)
@given(float_values, float_values, st.text(), st.text())
@example({"n": 1.0, "s": [2.5, 0.0]}, 3.0, "note:1", "note")  # integral floats: 1.0 stays 1.0 there
@example({"n": -0.0}, 1.5, "note:1", "note")  # -0.0: a store writes 0.0
@example([2**64, 1.0], None, "note:1", "note")  # past 64 bits: no JSON from orjson
def test_encode_doc_is_to_doc_and_the_json_a_store_writes(
    content: Any, meta_value: Any, doc_id: str, kind: str
) -> None:
    """``encode_doc`` gives the document ``doc_hashes`` describes and, when nothing in it needs
    normalising, or only floats orjson writes as ``json.dumps`` does (no exponent: 1e-4 to 1e16,
    integral ones too, and 0.0), exactly the JSON ``json.dumps`` writes of it, floats kept as
    floats (the canonical form writes 1.0 as 1, a store keeps 1.0): what ``Put.json`` promises a
    store, which writes -0.0 as 0.0; else no JSON (the store encodes it)."""
    meta = {"m": meta_value}
    try:
        doc, encoded = encode_doc(doc_id, kind, content, meta)
    except HashError:
        return  # a lone surrogate: no document at all, as with doc_hashes
    expected = {"id": doc_id, "kind": kind, "content": content, "meta": meta}
    expected.update(doc_hashes(expected))
    assert doc == expected and list(doc) == list(expected)
    leaves = _leaves([content, meta_value])
    floats = [v for v in leaves if isinstance(v, float)]
    alike = all(1e-4 <= abs(f) < 1e16 or (f == 0 and math.copysign(1, f) > 0) for f in floats)
    in_64_bits = all(-(2**63) <= v < 2**64 for v in leaves if type(v) is int)
    if not floats or (alike and in_64_bits):
        assert encoded == json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
        assert encoded.decode() == _exact_json(doc)
    elif not alike:
        assert encoded is None


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list | tuple):
        return [x for v in value for x in _leaves(v)]
    return [value]


@settings(deadline=None)
@given(st.text(), st.text(), st.text(), st.text())
def test_object_hash_is_the_hash_of_its_mapping(doc_id: str, kind: str, c: str, m: str) -> None:
    """``object_hash`` writes the canonical JSON of its four fields out by hand: the same bytes as
    the encoder's, for any strings (quotes, controls, non-ASCII, lone surrogates refused alike)."""
    fields = {"content_hash": c, "id": doc_id, "kind": kind, "meta_hash": m}
    try:
        expected = hash_value(fields)
    except HashError:
        with pytest.raises(HashError):
            object_hash(doc_id, kind, c, m)
        return
    assert object_hash(doc_id, kind, c, m) == expected

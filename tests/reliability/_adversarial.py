"""Hypothesis strategies for bad input: adversarial values, and mutations of good input.

Two kinds of input reach a parser: anything at all (random structures, random bytes), and good
input with a few things wrong (a field gone, a value of the wrong type, a string cut short or
blown up, a structure nested thousands deep). The second kind gets past the first checks and
exercises everything behind them, so most examples here are mutations of real, valid
conversations and session files.

``FUZZ`` is the deterministic profile every fuzz test uses (no example database, derandomized);
``examples(n)`` scales a test's example count by ``$CTXOS_FUZZ_SCALE``.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st


def examples(n: int) -> int:
    """``n`` examples, times ``$CTXOS_FUZZ_SCALE`` (default 1) for a deeper run."""
    return max(1, int(n * float(os.environ.get("CTXOS_FUZZ_SCALE", "1"))))


FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,  # one store serves all examples of a test, on purpose
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


class _Big(str):
    """A huge string that says so when printed (hypothesis would print megabytes)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<{len(self):,} characters: {str.__repr__(self[:20])}...>"


OVER_CAP = _Big("x" * 2_000_001)
"""One character more than the default ``max_message_chars``."""


class _Deep(dict):  # type: ignore[type-arg]
    """A deeply nested value that says so when printed (hypothesis' reports would recurse)."""

    def __repr__(self) -> str:
        return f"<{self.depth} levels of nesting>"

    depth = 0


def _nested(depth: int, leaf: Any = "deep") -> Any:
    value: Any = leaf
    for i in range(depth - 1):
        value = [value] if i % 2 else {"k": value}
    out = _Deep(k=value)
    out.depth = depth
    return out


DEEP = _nested(5_000)
"""Nested far past Python's recursion limit."""

# Strings that are not text (lone surrogates), control characters, markup-ish noise, and size.
_SPECIAL_TEXT = [
    "",
    " ",
    "\x00",
    "\udc80",
    "a\ud800b",
    "\ufeff",
    "\u202e",
    "null",
    "[[[{",
    '{"role": "user"}',
    "é" * 1000,
    "\n" * 500,
]
_HUGE = [OVER_CAP, _Big("y" * 300_000), _Big("🙂" * 100_000)]

TEXT = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=()), max_size=40),  # surrogates included
    st.text(max_size=20),
    st.sampled_from(_SPECIAL_TEXT),
)
NUMBER = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),  # nan, inf, -0.0 too
    st.sampled_from([0, -1, 2**53 + 1, 1e308]),
)
SCALAR = st.one_of(st.none(), st.booleans(), NUMBER, TEXT)
JSON = st.recursive(SCALAR, lambda c: st.lists(c, max_size=4) | st.dictionaries(TEXT, c, max_size=4), max_leaves=10)
"""JSON-like values (with NaN, lone surrogates and huge ints, which JSON itself may not carry)."""

PY_ODDITIES = st.sampled_from(
    [
        b"bytes",
        bytearray(b"\xff"),
        (1, 2),
        {1, 2},
        frozenset(),
        object(),
        1 + 2j,
        {1: "int key"},
        {("tuple", "key"): 1},
        range(3),
        Ellipsis,
        float("nan"),
        [float("inf")],
    ]
)
"""Python values no JSON parser makes, for the Python API (a harness may hand anything over)."""

_DEEP_VALUES = [DEEP, _nested(60), [DEEP], {"content": DEEP}, _nested(900)]


def _pick(values: list[Any]) -> st.SearchStrategy[Any]:
    """One of ``values``, never repr'd by hypothesis for its labels (they are too deep or too big)."""
    return st.integers(0, len(values) - 1).map(lambda i: values[i])


ADVERSARIAL = st.one_of(SCALAR, JSON, _pick(_HUGE), _pick(_DEEP_VALUES), PY_ODDITIES)
"""A value to put where a field's value belongs."""


def _slots(value: Any, depth: int = 0, limit: int = 7) -> list[tuple[Any, Any]]:
    """(container, key or index) of every value inside ``value``, down to ``limit`` levels."""
    out: list[tuple[Any, Any]] = []
    if depth >= limit:
        return out
    if type(value) is dict:
        for k, v in value.items():
            out.append((value, k))
            out += _slots(v, depth + 1, limit)
    elif type(value) is list:
        for i, v in enumerate(value):
            out.append((value, i))
            out += _slots(v, depth + 1, limit)
    return out


def _fresh(value: Any) -> Any:
    """A copy of the plain lists and dicts of a drawn value (later mutations may change it; the
    shared values it was drawn from must not change), sharing what is too deep to copy."""
    if type(value) is dict:
        return {k: _fresh(v) for k, v in value.items()}
    if type(value) is list:
        return [_fresh(v) for v in value]
    return value


_MUTATIONS = ("replace", "replace", "replace", "delete", "cut", "blow-up", "wrap", "duplicate", "swap-type")


@st.composite
def mutated(draw: st.DrawFn, bases: list[Any], extra: st.SearchStrategy[Any] = ADVERSARIAL) -> Any:
    """One of ``bases`` (deep-copied) with one to four things wrong with it."""
    value = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(1, 4))):
        slots = _slots(value)
        if not slots:
            break
        # indices, not sampled_from: hypothesis would repr the values (some too deep to repr)
        container, key = slots[draw(st.integers(0, len(slots) - 1))]
        old = container[key]
        how = draw(st.sampled_from(_MUTATIONS))
        if how == "replace":
            container[key] = _fresh(draw(extra))
        elif how == "delete":
            del container[key]
        elif how == "cut" and isinstance(old, str | list):
            container[key] = old[: draw(st.integers(0, max(0, len(old) - 1)))]
        elif how == "blow-up" and isinstance(old, str):
            container[key] = _Big(old * (1 + 2_000_000 // max(1, len(old))))
        elif how == "wrap":
            container[key] = [old] if draw(st.booleans()) else {"value": old}
        elif how == "duplicate" and isinstance(container, list):
            container.insert(key, dict(old) if isinstance(old, dict) else list(old) if isinstance(old, list) else old)
        elif how == "swap-type":
            container[key] = draw(st.sampled_from([None, 0, "", [], {}, True]))
    return value


def lists_of(element: st.SearchStrategy[Any], bases: list[Any]) -> st.SearchStrategy[Any]:
    """Message lists: mutations of good lists (most), good lists with a random element added,
    random lists, and values that are not lists at all."""
    good = st.sampled_from(bases)
    return st.one_of(
        mutated(bases),
        mutated(bases),
        mutated(bases, TEXT),  # odd text where text or anything else was: gets further, often accepted
        mutated(bases, SCALAR),
        st.tuples(good, element, st.integers(0, 50)).map(lambda t: _inserted(*t)),
        st.lists(element, max_size=5),
        ADVERSARIAL,
    )


def _inserted(msgs: list[Any], element: Any, at: int) -> list[Any]:
    out = list(msgs)
    out.insert(at % (len(out) + 1), element)
    return out


# -- bytes on disk --------------------------------------------------------------------------------

_BYTE_MUTATIONS = ("truncate", "cut-line", "invalid-utf8", "random-bytes", "deep-line", "huge-line", "crlf", "nul")


class _Blob(bytes):
    """File bytes that print as their size (hypothesis would print megabytes)."""

    def __repr__(self) -> str:
        return f"<{len(self):,} bytes: {bytes.__repr__(self[:40])}...>"


@st.composite
def damaged_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` (a file's bytes) damaged the way files get damaged: cut off mid-write, a line cut
    short, bytes that are not UTF-8, noise, a line nested too deep or too long to read."""
    how = draw(st.sampled_from(_BYTE_MUTATIONS))
    if how == "truncate":
        return _Blob(data[: draw(st.integers(0, max(0, len(data) - 1)))])
    lines = data.split(b"\n")
    at = draw(st.integers(0, max(0, len(lines) - 1)))
    if how == "cut-line":
        lines[at] = lines[at][: draw(st.integers(0, max(0, len(lines[at]) - 1)))]
    elif how == "invalid-utf8":
        pos = draw(st.integers(0, len(lines[at])))
        bad = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe2\x82", b"\x80\x80"]))
        lines[at] = lines[at][:pos] + bad + lines[at][pos:]
    elif how == "random-bytes":
        lines.insert(at, draw(st.binary(max_size=64)))
    elif how == "deep-line":
        lines.insert(at, b"[" * 200_000 if draw(st.booleans()) else b'{"a":' * 100_000)
    elif how == "huge-line":
        lines.insert(at, b'{"type": "message", "message": {"role": "user", "content": "' + b"z" * 3_000_000 + b'"}}')
    elif how == "crlf":
        return _Blob(data.replace(b"\n", b"\r\n"))
    else:
        lines[at] = lines[at] + b"\x00"
    return _Blob(b"\n".join(lines))


def as_json(value: Any) -> bytes:
    """``value`` as JSON text: values JSON cannot carry are written as their repr (NaN as ``NaN``,
    which Python's reader takes), lone surrogates as ``\\udcxx`` escapes (valid JSON that decodes
    to text that is not Unicode), a value nested too deep for the writer as a line of brackets."""
    try:
        return json.dumps(value, default=repr, skipkeys=True).encode("ascii", "backslashreplace")
    except RecursionError:
        return b"[" * 100_000


def jsonl(entries: list[Any]) -> bytes:
    """Entries as JSON lines (see ``as_json``)."""
    return b"\n".join(as_json(e) for e in entries) + b"\n"

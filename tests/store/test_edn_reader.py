"""The EDN reader (store/edn.py): edge cases by hand, then random values written as Clojure writes
them (and in odder spellings), read back and compared with the values written and with what
``edn_format`` reads; the answers of a real node are compared with ``edn_format``'s reading too.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from typing import Any

import edn_format
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_os.store import Put
from context_os.store.edn import Char, EdnError, FrozenMap, Keyword, Symbol, Tagged, loads
from context_os.store.xtdb import XtdbStore, _Instant, _read_edn

K, S = Keyword, Symbol


# -- by hand --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("nil", None),
        ("true", True),
        ("false", False),
        ('""', ""),
        (r'"a\"b\\c\nd\te\rf\bg\fh"', 'a"b\\c\nd\te\rf\bg\fh'),
        (r'"\u00e9\u4e2d"', "é中"),
        (r'"\ud83d\ude00"', "😀"),  # a surrogate pair, as Java strings hold it
        (r'"\101\7"', "A\x07"),  # octal escapes, as Clojure's EDN reader takes them
        (r'"\101 \ud83d\ude00 \ud83d"', "A 😀 \ud83d"),  # the same pair with one
        ('"raw \x01 control\ncharacters"', "raw \x01 control\ncharacters"),
        ('"😀 é 中"', "😀 é 中"),
        (r'"\\"', "\\"),
        (r'"ends with a backslash \\" ', "ends with a backslash \\"),
        (r'"\"quoted\""', '"quoted"'),
        ("\\a", Char("a")),
        ("\\newline", Char("\n")),
        ("\\space", Char(" ")),
        ("\\u00e9", Char("é")),
        ("\\o101", Char("A")),
        ('\\"', Char('"')),
        ("\\\\", Char("\\")),
        ("\\(", Char("(")),
        ("\\\x1b", Char("\x1b")),
        ("0", 0),
        ("-17", -17),
        ("+5", 5),
        ("123456789012345678901234567890N", 123456789012345678901234567890),
        ("1N", 1),
        ("0x1F", 31),
        ("-0XffN", -255),
        ("017", 15),
        ("2r101", 5),
        ("36rZZ", 36 * 36 - 1),
        ("2.5", 2.5),
        ("-0.0", -0.0),
        ("1e10", 1e10),
        ("1.0E-7", 1e-7),
        ("1.", 1.0),
        ("1.50M", Decimal("1.50")),
        ("1M", Decimal("1")),
        ("1/3", Fraction(1, 3)),
        ("##Inf", math.inf),
        ("##-Inf", -math.inf),
        (":a", K("a")),
        (":xtdb.api/tx-id", K("xtdb.api/tx-id")),
        (":tx-committed?", K("tx-committed?")),
        (":a/b:c#d", K("a/b:c#d")),
        ("a'", S("a'")),
        ("sym", S("sym")),
        ("ns/sym", S("ns/sym")),
        ("?e", S("?e")),
        ("-", S("-")),
        ("/", S("/")),
        ("[]", []),
        ("()", ()),
        ("{}", {}),
        ("#{}", frozenset()),
        ("[1 [2 [3 []]]]", [1, [2, [3, []]]]),
        ("(1 (2) [3])", (1, (2,), [3])),
        ('{:a {:b {"c" [nil]}}}', {K("a"): {K("b"): {"c": [None]}}}),
        ("#{1 #{2} (3)}", frozenset({1, frozenset({2}), (3,)})),
        ("{[1 2] :v, {:k 1} :m}", {(1, 2): K("v"), FrozenMap({K("k"): 1}): K("m")}),
        ("#{[1] {:a 1}}", frozenset({(1,), FrozenMap({K("a"): 1})})),
        ("[1,2,,3]", [1, 2, 3]),
        ("[1 ; a comment ] with a bracket\n 2]", [1, 2]),
        ("; only a comment\n :x", K("x")),
        ("[1 #_ 2 3]", [1, 3]),
        ("[#_ #_ 1 2 3]", [3]),
        ("#_ [1 2] :after", K("after")),
        ('#inst "2024-01-02T03:04:05.678-00:00"', datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)),
        ('#inst "2024-01-02T03:04:05.678Z"', datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)),
        ('#inst "2024-01-02T03:04:05.123456789+02:00"', datetime(2024, 1, 2, 1, 4, 5, 123456, tzinfo=UTC)),
        ('#inst "2024-01-02"', datetime(2024, 1, 2, tzinfo=UTC)),
        ('#inst "2024"', datetime(2024, 1, 1, tzinfo=UTC)),
        ('#inst\n,"1969-12-31T23:59:59.999-00:00"', datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)),
        (
            '#uuid "f81d4fae-7dec-11d0-a765-00a0c91e6bf6"',
            uuid.UUID("f81d4fae-7dec-11d0-a765-00a0c91e6bf6"),
        ),
        ('#xtdb/id "abc"', Tagged("xtdb/id", "abc")),
        ("#my/tag [1 #other 2]", Tagged("my/tag", [1, Tagged("other", 2)])),
        ('#object[java.time.Instant 0x1f "x"]', Tagged("object", [S("java.time.Instant"), 31, "x"])),
        ("", None),
        ("  \n, ", None),
    ],
)
def test_reads(text: str, value: Any) -> None:
    got = loads(text)
    assert got == value
    assert _shape(got) == _shape(value)  # the types too: a char is not a string, 1 is not 1.0


def test_nan_and_negative_zero() -> None:
    assert math.isnan(loads("##NaN"))
    assert math.copysign(1, loads("-0.0")) == -1


def test_keywords_and_symbols_are_interned_and_distinct_from_strings() -> None:
    assert loads(":a/b") is K("a/b") is loads("[:a/b]")[0]
    assert loads('{:a 1 "a" 2 a 3}') == {K("a"): 1, "a": 2, S("a"): 3}
    assert K("a") != "a" and K("a") != S("a") and str(K("a")) == ":a" and str(S("a")) == "a"
    assert Char("a") == "a" and isinstance(loads("\\a"), Char) and not isinstance(loads('"a"'), Char)


def test_tag_handlers() -> None:
    assert loads('#xtdb/id "ab"', {"xtdb/id": lambda s: ("id", s)}) == ("id", "ab")
    assert loads('[#t 1 #t "x"]', {"t": lambda v: [v]}) == [[1], ["x"]]
    assert loads('#inst "2024-01-02T03:04:05.678-00:00"', {"inst": str}) == "2024-01-02T03:04:05.678-00:00"


@pytest.mark.parametrize(
    "text",
    [
        '"unterminated',
        '"a" "b',
        "[1 2",
        "{:a 1",
        "(1]",
        "[1}",
        "#{1)",
        "]",
        "}",
        "{:a}",
        "{:a 1 :b}",
        "1 2",
        ":a :b",
        "#",
        "#_",
        "[#_]",
        "#tag",
        "[#tag]",
        "::auto",
        ":",
        "\\nope",
        "\\u00zz",
        '"\\x"',
        '"\\/"',
        '"\\u12"',
        '"\\400"',
        "1.2.3",
        "12abc",
        "0xZ",
        "08",
        "2r102",
        "37r1",
        "1/0",
        "##Foo",
        "#:ns{:a 1}",
        "'quoted",
        "@deref",
        "^meta x",
        "`x",
        '#inst "not a date"',
        '#inst "2024-13-01T00:00:00.000-00:00"',
        '#inst "2024-01-01T24:00:00.000-00:00"',
        "#inst 5",
        '#uuid "nope"',
    ],
)
def test_refuses(text: str) -> None:
    with pytest.raises(EdnError):
        loads(text)


def test_store_reads_instants_as_epoch_ms() -> None:
    v = _read_edn('[#inst "2024-01-02T03:04:05.678-00:00" #inst "1969-12-31T23:59:59.999-00:00"]')
    assert v == [1704164645678, -1] and all(type(x) is _Instant for x in v)
    # other spellings are read exactly too (a whole day cached by the fast path must not leak)
    assert _read_edn('#inst "2024-01-02T03:04:05.678+00:00"') == 1704164645678
    assert _read_edn('#inst "2024-01-02T05:04:05.678+02:00"') == 1704164645678
    assert _read_edn('#inst "2024-01-02T03:04:05.6789Z"') == 1704164645678
    with pytest.raises(EdnError):
        _read_edn('#inst "2024-01-02T03:61:05.678-00:00"')


# -- random values --------------------------------------------------------------------------------
#
# A value is generated as Python data together with the EDN text that stands for it, written the
# way Clojure's printer writes it or, at random, in another spelling EDN allows (an escape instead
# of a character, commas and comments between forms, tags, discarded forms). The reader must give
# back that exact value; edn_format, read on the same text, must agree where both read it.

_NAME_START = "abcxyzABC*!_?$%&=<>."
_NAME_REST = _NAME_START + "0123456789+-#:"  # and ' (Clojure's reader takes it; edn_format does not)
_names = st.builds(
    lambda a, b: a + b,
    st.sampled_from(list(_NAME_START.replace(".", ""))),
    st.text(alphabet=_NAME_REST, max_size=6),
)
_qualified = st.one_of(_names, st.builds(lambda ns, n: f"{ns}/{n}", _names, _names))
_SEPARATORS = [" ", " ", " ", ", ", "\n", "\t", " ,, ", " ; a comment\n", "\r\n"]
_PLAIN_SEPARATORS = [" ", ", "]


def _string_text(s: str, draw: Any) -> str:
    out = []
    for ch in s:
        code = ord(ch)
        escapes = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}
        if ch in escapes:
            out.append(escapes[ch])
        elif draw(st.integers(0, 9)) == 0 and code < 0x10000:
            out.append(f"\\u{code:04x}" if draw(st.booleans()) else f"\\u{code:04X}")
        elif code < 0o400 and draw(st.integers(0, 19)) == 0:
            out.append(f"\\{code:03o}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


@st.composite
def _scalar(draw: Any, plain: bool = False) -> tuple[Any, str]:
    kind = draw(st.sampled_from(["nil", "bool", "str", "kw", "sym", "int", "bigint", "float", "dec", "char", "inst"]))
    if kind == "nil":
        return None, "nil"
    if kind == "bool":
        b = draw(st.booleans())
        return b, "true" if b else "false"
    if kind == "str":
        s = draw(st.text(st.characters(blacklist_categories=("Cs",)), max_size=30))
        return s, _string_text(s, draw)
    if kind == "kw":
        name = draw(_qualified)
        return K(name), ":" + name
    if kind == "sym":
        name = draw(_qualified)
        return S(name), name
    if kind == "int":
        i = draw(st.integers(-(2**63), 2**63 - 1))
        return i, str(i) if i < 0 or draw(st.booleans()) else f"+{i}"
    if kind == "bigint":
        i = draw(st.integers(-(2**100), 2**100))
        return i, f"{i}N"
    if kind == "float":
        f = draw(st.floats(allow_nan=False))
        if math.isinf(f):
            return f, "##Inf" if f > 0 else "##-Inf"
        text = repr(f)  # Python's repr is a shortest round trip, as Java's Double.toString nearly is
        return f, text.upper() if draw(st.booleans()) else text
    if kind == "dec":
        d = draw(st.decimals(allow_nan=False, allow_infinity=False, places=3))
        return d, f"{d:f}M"
    if kind == "char":
        c = draw(st.characters(blacklist_categories=("Cs",), max_codepoint=0xFFFF))
        named = {"\n": "newline", " ": "space", "\t": "tab", "\r": "return", "\f": "formfeed", "\b": "backspace"}
        if plain and c in "\f\b":  # edn_format knows no \\formfeed, \\backspace
            return Char(c), f"\\u{ord(c):04x}"
        if c in named:
            return Char(c), "\\" + named[c]
        if not c.isprintable() or c.isspace() or (plain and not c.isascii()) or draw(st.booleans()):
            return Char(c), f"\\u{ord(c):04x}"
        return Char(c), "\\" + c
    ms = draw(st.integers(-(10**12), 10**13))
    dt = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    if draw(st.booleans()):
        return dt, f'#inst "{dt.strftime("%Y-%m-%dT%H:%M:%S")}.{ms % 1000:03d}-00:00"'
    off = draw(st.integers(-12 * 60, 14 * 60))
    local = dt.astimezone(timezone(timedelta(minutes=off)))
    sign = "+" if off >= 0 else "-"
    return dt, f'#inst "{local.strftime("%Y-%m-%dT%H:%M:%S.%f")}{sign}{abs(off) // 60:02d}:{abs(off) % 60:02d}"'


def _hashable(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return FrozenMap({_hashable(k): _hashable(x) for k, x in v.items()})
    return v


def _join(draw: Any, parts: list[str], plain: bool) -> str:
    out = ""
    for i, p in enumerate(parts):
        if i:
            out += draw(st.sampled_from(_PLAIN_SEPARATORS if plain else _SEPARATORS))
        if not plain and draw(st.integers(0, 14)) == 0:  # a discarded form before it
            out += "#_ " + draw(_scalar())[1] + " "
        out += p
    return out


def _value(plain: bool = False) -> st.SearchStrategy[tuple[Any, str]]:
    """``plain``: only the separators Clojure's printer writes (no comments, no discards, no
    carriage returns: edn_format reads none of them)."""

    def extend(children: st.SearchStrategy[tuple[Any, str]]) -> st.SearchStrategy[tuple[Any, str]]:
        @st.composite
        def container(draw: Any) -> tuple[Any, str]:
            kind = draw(st.sampled_from(["vec", "list", "map", "set", "tag"]))
            items = draw(st.lists(children, max_size=5))
            if kind == "vec":
                return [v for v, _ in items], "[" + _join(draw, [t for _, t in items], plain) + "]"
            if kind == "list":
                return tuple(v for v, _ in items), "(" + _join(draw, [t for _, t in items], plain) + ")"
            if kind == "tag":
                v, t = draw(children)
                return Tagged("t/x", v), "#t/x " + t
            if kind == "set":
                # elements Python takes as equal (1, 1.0 and True; [1] and (1)) are one element of a
                # frozenset whatever EDN says: keep the first, as the reader does
                seen: dict[Any, str] = {}
                for v, t in items:
                    if not _has_nan(v) and _hashable(v) not in seen:
                        seen[_hashable(v)] = t
                return frozenset(seen), "#{" + _join(draw, list(seen.values()), plain) + "}"
            keys = draw(st.lists(children, min_size=len(items), max_size=len(items)))
            pairs: dict[Any, tuple[str, Any, str]] = {}
            for (k, kt), (v, vt) in zip(keys, items, strict=True):
                if not _has_nan(k) and _hashable(k) not in pairs:
                    pairs[_hashable(k)] = (kt, v, vt)
            return (
                {k: v for k, (_, v, _) in pairs.items()},
                "{" + _join(draw, [f"{kt} {vt}" for kt, _, vt in pairs.values()], plain) + "}",
            )

        return container()

    return st.recursive(_scalar(plain), extend, max_leaves=25)


def _has_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _shape(v: Any) -> Any:
    """A value as nested tuples naming every type (so that 1, 1.0 and True differ)."""
    if v is None or isinstance(v, bool):
        return ("atom", v)
    if isinstance(v, Char):
        return ("char", str(v))
    if isinstance(v, str):
        return ("str", v)
    if isinstance(v, Keyword):
        return ("kw", v.name)
    if isinstance(v, Symbol):
        return ("sym", v.name)
    if isinstance(v, int):
        return ("int", v)
    if isinstance(v, float):
        return ("float", "nan" if math.isnan(v) else repr(v))
    if isinstance(v, Decimal):  # by value: edn_format rounds to 28 digits (trailing zeros)
        return ("dec", str(v.normalize()))
    if isinstance(v, Fraction):
        return ("ratio", str(v))
    if isinstance(v, datetime):
        return ("inst", v.astimezone(UTC).isoformat())
    if isinstance(v, uuid.UUID):
        return ("uuid", str(v))
    if isinstance(v, Tagged):
        return ("tag", v.tag, _shape(v.value))
    if isinstance(v, list):
        return ("vec", tuple(_shape(x) for x in v))
    if isinstance(v, tuple):
        return ("list", tuple(_shape(x) for x in v))
    if isinstance(v, dict | FrozenMap):
        return ("map", frozenset((_shape(k), _shape(x)) for k, x in v.items()))
    if isinstance(v, frozenset):
        return ("set", frozenset(_shape(x) for x in v))
    raise AssertionError(f"unexpected {type(v)}: {v!r}")


def _shape_edn_format(v: Any) -> Any:
    """What edn_format reads, in _shape's terms (its vectors are ImmutableLists, its lists tuples)."""
    if isinstance(v, edn_format.Char):
        return ("char", str(v))
    if isinstance(v, edn_format.Keyword):
        return ("kw", v.name)
    if isinstance(v, edn_format.Symbol):
        return ("sym", v.name)
    if isinstance(v, edn_format.ImmutableList):
        return ("vec", tuple(_shape_edn_format(x) for x in v))
    if isinstance(v, tuple):
        return ("list", tuple(_shape_edn_format(x) for x in v))
    if isinstance(v, edn_format.ImmutableDict | dict):
        return ("map", frozenset((_shape_edn_format(k), _shape_edn_format(x)) for k, x in v.items()))
    if isinstance(v, frozenset):
        return ("set", frozenset(_shape_edn_format(x) for x in v))
    if isinstance(v, _EdnFormatTagged):
        return ("tag", v.tag, _shape_edn_format(v.value))
    return _shape(v)


def _frozen_shape(s: Any) -> Any:
    """Shapes compared where one side froze a vector key into a tuple: a list counts as a vector."""
    if isinstance(s, tuple) and s and s[0] in ("vec", "list"):
        return ("seq", tuple(_frozen_shape(x) for x in s[1]))
    if isinstance(s, tuple) and s and s[0] in ("map", "set"):
        return (s[0], frozenset(_frozen_shape(x) for x in s[1]))
    if isinstance(s, tuple) and s and s[0] == "tag":
        return ("tag", s[1], _frozen_shape(s[2]))
    if isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], tuple):
        return tuple(_frozen_shape(x) for x in s)
    return s


class _EdnFormatTagged:
    def __init__(self, tag: str, value: Any) -> None:
        self.tag, self.value = tag, value


@pytest.fixture(scope="module")
def edn_format_tags() -> Iterator[None]:
    edn_format.add_tag("t/x", lambda v: _EdnFormatTagged("t/x", v))
    edn_format.add_tag("xtdb/id", lambda v: _EdnFormatTagged("xtdb/id", v))
    try:
        yield
    finally:
        edn_format.remove_tag("t/x")
        edn_format.remove_tag("xtdb/id")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_value())
def test_random_values_read_back_exactly(case: tuple[Any, str]) -> None:
    value, text = case
    got = loads(text)
    assert _frozen_shape(_shape(got)) == _frozen_shape(_shape(value)), text
    # and with whitespace and a comment around the whole text
    assert _frozen_shape(_shape(loads(f" ,\n{text} ; end"))) == _frozen_shape(_shape(value))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_value(plain=True))
def test_random_values_read_as_edn_format_reads_them(edn_format_tags: None, case: tuple[Any, str]) -> None:
    _, text = case
    theirs = edn_format.loads(text)
    assert _frozen_shape(_shape(loads(text))) == _frozen_shape(_shape_edn_format(theirs)), text


# -- real answers ---------------------------------------------------------------------------------


@pytest.mark.xtdb
def test_node_answers_read_as_edn_format_reads_them(xtdb_url: str, edn_format_tags: None, tmp_path: Any) -> None:
    uid = uuid.uuid4().hex
    tricky = 'quotes " and \\ backslashes \\" \n\t\r\b\f é 中 😀 \x01 ; not a comment [ ] { } #_ :kw'
    with XtdbStore(xtdb_url, text_index_path=tmp_path / "index.db") as s:
        for v in range(5):
            s.submit(
                [
                    Put(
                        {
                            "id": f"edn:{uid}",
                            "kind": "note",
                            "content": tricky * (v + 1),
                            "meta": {
                                "n": v,
                                "f": v / 3,
                                "big": 2**70,
                                "neg": -(2**40),
                                "none": None,
                                "ok": True,
                                "nested": {"a": [1, 2.5, None, {"b": "c"}], "": "empty key", "é": "x"},
                            },
                        },
                        1_700_000_000_000 + v,
                    )
                ]
            )
    base = xtdb_url.removeprefix("xtdb+")
    eid = f'"edn:{uid}"'
    with httpx.Client(base_url=base, headers={"Accept": "application/edn"}, timeout=30) as c:
        answers = [
            c.get("/_xtdb/status"),
            c.get("/_xtdb/db"),
            c.get("/_xtdb/latest-completed-tx"),
            c.get("/_xtdb/attribute-stats"),
            c.get("/_xtdb/entity", params={"eid-edn": eid}),
            c.get("/_xtdb/entity-tx", params={"eid-edn": eid}),
            c.get("/_xtdb/context-os/entity-version", params={"eid-edn": eid}),
            c.get(
                "/_xtdb/entity",
                params={"eid-edn": eid, "history": "true", "sort-order": "desc", "with-docs": "true"},
            ),
            c.get("/_xtdb/tx-log", params={"with-ops?": "true"}),
            c.post(
                "/_xtdb/query",
                content='{:query {:find [(pull e [*]) e] :where [[e :kind "note"]]}}',
                headers={"Content-Type": "application/edn"},
            ),
            c.get("/_xtdb/entity", params={"eid-edn": '"no such entity"'}),
        ]
    for r in answers:
        assert r.headers["content-type"].startswith("application/edn"), r.text[:200]
        mine = loads(r.text)
        assert _frozen_shape(_shape(mine)) == _frozen_shape(_shape_edn_format(edn_format.loads(r.text))), r.url
    assert loads(answers[4].text)[K("content")] == tricky * 5
    assert answers[-1].status_code == 404 and loads(answers[-1].text) == {K("error"): "no such entity entity not found"}

"""A fast EDN reader, for what XTDB 1.x nodes answer (store/xtdb.py).

Why not ``edn_format``: it parses with PLY, a token at a time through Python-level grammar
actions; a history of 1,000 documents (1.6 MB) took about 260 ms to read. This reader leaves
the bytes to C: the text is split at double quotes (``str.split``), the rest is cut into tokens
by one regular expression (``re.findall``), strings are decoded by the ``json`` module's C
scanner, and containers are built with ``dict``/``zip``; the same history reads in about 20 ms.

What it reads: all of EDN (https://github.com/edn-format/edn) plus what Clojure's printer writes
for values outside it: ``nil true false``, strings (escapes ``\\t \\r \\n \\\\ \\" \\b \\f``,
``\\uXXXX`` and octal ``\\NNN``, as Clojure's EDN reader takes them), characters (``\\a``,
``\\newline``, ``\\u00e9``, ``\\o101``), integers (``N`` suffix: arbitrary precision; ``0x1F``,
``017``, ``2r101`` as Clojure reads them: ``#object[... 0x5e2de80c ...]`` holds one), floats
(exponents; ``M`` suffix: ``Decimal``), ``##Inf ##-Inf ##NaN``, ratios (``1/3``: ``Fraction``),
keywords and symbols (with namespaces), lists, vectors, maps, sets, tags (``#inst``, ``#uuid``,
and any other: handlers given by the caller, else a ``Tagged`` value), ``#_`` discards, ``;``
comments, commas as whitespace.

What it returns: ``None``, ``bool``, ``int``, ``float``, ``Decimal``, ``Fraction``, ``str``,
``Char`` (a ``str`` of one character), ``Keyword`` and ``Symbol`` (interned: one object per name,
so they compare and hash by identity, fast as dict keys), ``list`` for a vector, ``tuple`` for a
list, ``dict`` for a map, ``frozenset`` for a set, an aware UTC ``datetime`` for an ``#inst``
(microseconds: Python keeps no finer), ``uuid.UUID`` for a ``#uuid``. A vector or a map that is a
map key or a set element is returned frozen (``tuple``, ``FrozenMap``), as Python needs
hashable keys.

What it must never do: accept text that is not EDN as if it were (anything it cannot read raises
``EdnError`` with the offending token), or run code (tags only ever call the handlers given).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from json.decoder import scanstring  # type: ignore[attr-defined]  # the C scanner (_json)
from typing import Any, Self

__all__ = ["Char", "EdnError", "FrozenMap", "Keyword", "Symbol", "Tagged", "loads"]


class EdnError(ValueError):
    """The text is not EDN (or uses a part of it this reader does not take)."""


class _Interned:
    """A name read from EDN, one object per name (compared by identity)."""

    __slots__ = ("name",)
    _interned: dict[str, Any]
    name: str

    def __new__(cls, name: str) -> Self:
        got: Self | None = cls._interned.get(name)
        if got is None:
            got = object.__new__(cls)
            got.name = name
            got = cls._interned.setdefault(name, got)
        return got

    def __reduce__(self) -> tuple[type[_Interned], tuple[str]]:
        return (type(self), (self.name,))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Keyword(_Interned):
    """An EDN keyword; ``name`` is its text without the colon (``xt/id``). Interned."""

    __slots__ = ()
    _interned: dict[str, Keyword] = {}

    def __str__(self) -> str:
        return ":" + self.name


class Symbol(_Interned):
    """An EDN symbol (``?e``, ``xtdb.api/put``). Interned."""

    __slots__ = ()
    _interned: dict[str, Symbol] = {}

    def __str__(self) -> str:
        return self.name


class Char(str):
    """An EDN character (``\\a``): a ``str`` of length one, told apart from a string by its type."""

    __slots__ = ()


class Tagged:
    """A tagged value no handler was given for (``#object [...]``, ``#my/tag 1``)."""

    __slots__ = ("tag", "value")

    def __init__(self, tag: str, value: Any) -> None:
        self.tag = tag
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tagged) and (self.tag, self.value) == (other.tag, other.value)

    def __hash__(self) -> int:
        return hash((self.tag, _freeze(self.value)))

    def __repr__(self) -> str:
        return f"Tagged({self.tag!r}, {self.value!r})"


class FrozenMap(Mapping[Any, Any]):
    """A map that is a map key or a set element (hashable, read-only)."""

    __slots__ = ("_d", "_h")

    def __init__(self, items: Mapping[Any, Any]) -> None:
        self._d = dict(items)
        self._h = hash(frozenset(self._d.items()))

    def __getitem__(self, key: Any) -> Any:
        return self._d[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        return self._h

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self._d == dict(other.items())

    def __repr__(self) -> str:
        return f"FrozenMap({self._d!r})"


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return FrozenMap({_freeze(k): _freeze(v) for k, v in value.items()})
    return value


# How a text is cut into tokens. The text is first split at every double quote (str.split, in C),
# which separates the strings from the rest; the rest, joined with "" where each string was, is
# cut by _TOKENS into one token per match after whitespace and commas: "" (the next string), a
# tag with its string (#inst ""), an opening or closing delimiter, a dispatch (#{, #_, a tag,
# ##Inf), or an atom (number, keyword, symbol, nil/true/false). Strings are most of the bytes
# XTDB sends (documents' text), and a regular expression walks them a character at a time: this
# way they are only ever scanned in C by split and the string decoder.
#
# A comment or a character literal (where a double quote or a backslash may stand outside any
# string) sends the text to _GENERAL_TOKENS instead, which matches whole string literals, chars
# and comments too. In both, the last alternative takes any other single character (but
# whitespace), so that findall covers the whole text and nothing is skipped unseen.
_TOKENS = re.compile(
    r"""[\s,]*(
      [^\s,\[\]{}()";\\\#][^\s,\[\]{}()";\\]*
    | ""
    | [\[\]{}()]
    | \#[^\s,\[\]{}()";\\\#{_][^\s,\[\]{}()";\\\#]*[\s,]*""
    | \#[{_]
    | \#\#?[^\s,\[\]{}()";\\\#]+
    | [^\s,]
    )""",
    re.S | re.X,
)
_GENERAL_TOKENS = re.compile(
    r"""[\s,]*(
      "[^"\\]*(?:\\.[^"\\]*)*"
    | \\.[^\s,\[\]{}()";\\]*
    | ;[^\n]*
    | [\[\]{}()]
    | \#[{_]
    | \#\#?[^\s,\[\]{}()";\\\#]+
    | [^\s,\[\]{}()";\\\#][^\s,\[\]{}()";\\]*
    | [^\s,]
    )""",
    re.S | re.X,
)
# A string whose escapes are all ones JSON shares (what Clojure's printer writes): the C scanner
# reads it. Anything else (octal, an invalid escape) is read by _unescape.
_NON_JSON_ESCAPE = re.compile(r'\\[^nt"\\rbfu]|\\u(?![0-9a-fA-F]{4})')
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|([0-7]{1,3})|(.))", re.S)
_SIMPLE_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "b": "\b", "f": "\f"}
_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)N?\Z")
_CLOJURE_INT = re.compile(r"([-+]?)(?:0[xX]([0-9A-Fa-f]+)|0([0-7]+)|([1-9][0-9]?)[rR]([0-9A-Za-z]+))N?\Z")
_FLOAT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?M?\Z")
_RATIO = re.compile(r"[-+]?(?:0|[1-9][0-9]*)/[0-9]+\Z")
_SYMBOL = re.compile(
    r"(?:[A-Za-z*!_?$%&=<>|]|[-+.](?![0-9]))[A-Za-z0-9*!_?$%&=<>.|+\-#:']*"
    r"(?:/[A-Za-z*!_?$%&=<>.|+\-][A-Za-z0-9*!_?$%&=<>.|+\-#:']*)?\Z|/\Z"
)
_KEYWORD = re.compile(r"[A-Za-z0-9*!_?$%&=<>.|+\-#'][A-Za-z0-9*!_?$%&=<>.|+\-#:']*(?:/[^/\s]+)?\Z")
_NAMED_CHARS = {"newline": "\n", "return": "\r", "space": " ", "tab": "\t", "formfeed": "\f", "backspace": "\b"}
_SPECIAL_FLOATS = {"##Inf": float("inf"), "##-Inf": float("-inf"), "##NaN": float("nan")}
_INST = re.compile(
    r"(\d{4})(?:-(\d\d)(?:-(\d\d)(?:[Tt](\d\d)(?::(\d\d)(?::(\d\d)(?:\.(\d+))?)?)?)?)?)?"
    r"(?:([Zz])|([-+])(\d\d):(\d\d))?\Z"
)
_INST_MS = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.([0-9]{3})[-+]00:00\Z")
_DAYS: dict[str, datetime] = {}
"""``#inst`` day prefixes already read → midnight UTC of that day (answers repeat a few days)."""


def _unescape(body: str, token: str) -> str:
    def one(m: re.Match[str]) -> str:
        hex4, octal, other = m.groups()
        if hex4 is not None:
            return chr(int(hex4, 16))
        if octal is not None:
            code = int(octal, 8)
            if code > 0o377:
                raise EdnError(f"octal escape out of range in {token[:80]!r}")
            return chr(code)
        if other in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[other]
        raise EdnError(f"unsupported escape \\{other} in {token[:80]!r}")

    # a surrogate pair written as two \u escapes is one character (as the json path reads it); a
    # lone surrogate stays as it is
    return _ESCAPE.sub(one, body).encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


def _string(body: str) -> str:
    """A string literal's text between its quotes → the string it stands for."""
    if "\\" not in body:
        return body
    if _NON_JSON_ESCAPE.search(body) is None:
        s: str = scanstring(body + '"', 0, False)[0]
        return s
    return _unescape(body, body)


def _char(token: str) -> Char:
    body = token[1:]
    if len(body) == 1:
        return Char(body)
    if body in _NAMED_CHARS:
        return Char(_NAMED_CHARS[body])
    if body[0] == "u" and len(body) == 5:
        try:
            return Char(chr(int(body[1:], 16)))
        except ValueError:
            pass
    if body[0] == "o" and 2 <= len(body) <= 4 and all(c in "01234567" for c in body[1:]):
        code = int(body[1:], 8)
        if code <= 0o377:
            return Char(chr(code))
    raise EdnError(f"invalid character {token!r}")


def read_inst(text: str) -> datetime:
    """An ``#inst`` string (RFC 3339; a date alone, or fewer fields, as Clojure reads them) →
    an aware datetime in UTC. Fast for the one form Clojure prints:
    ``2024-01-02T03:04:05.678-00:00``."""
    fast = _INST_MS.match(text)
    if fast is not None:
        day_text, h, mi, sec, ms = fast.groups()
        day = _DAYS.get(day_text)
        if day is None:
            try:
                day = datetime(int(day_text[:4]), int(day_text[5:7]), int(day_text[8:]), tzinfo=UTC)
            except ValueError as e:
                raise EdnError(f"invalid #inst {text!r}: {e}") from None
            if len(_DAYS) >= 4096:
                _DAYS.clear()
            _DAYS[day_text] = day
        if int(h) < 24 and int(mi) < 60 and int(sec) < 60:
            return day + timedelta(hours=int(h), minutes=int(mi), seconds=int(sec), milliseconds=int(ms))
    m = _INST.match(text)
    if m is None:
        raise EdnError(f"invalid #inst {text!r}")
    y, mo, d, h, mi, s, frac, z, sign, oh, om = m.groups()
    try:
        value = datetime(
            int(y),
            int(mo or 1),
            int(d or 1),
            int(h or 0),
            int(mi or 0),
            int(s or 0),
            int((frac or "0")[:6].ljust(6, "0")),
            tzinfo=UTC
            if z or not sign
            else timezone((-1 if sign == "-" else 1) * timedelta(hours=int(oh), minutes=int(om))),
        )
    except ValueError as e:
        raise EdnError(f"invalid #inst {text!r}: {e}") from None
    return value.astimezone(UTC)


def _read_uuid(text: Any) -> uuid.UUID:
    if not isinstance(text, str):
        raise EdnError(f"#uuid takes a string, got {text!r}")
    try:
        return uuid.UUID(text)
    except ValueError as e:
        raise EdnError(f"invalid #uuid {text!r}: {e}") from None


def _inst(text: Any) -> datetime:
    if not isinstance(text, str):
        raise EdnError(f"#inst takes a string, got {text!r}")
    return read_inst(text)


_DEFAULT_TAGS: dict[str, Callable[[Any], Any]] = {"inst": _inst, "uuid": _read_uuid}


def _atom(token: str) -> Any:
    """A token that is not a string, character, delimiter, dispatch or keyword."""
    c = token[0]
    if c in "0123456789" or (c in "+-" and len(token) > 1 and token[1] in "0123456789"):
        if _INT.match(token):
            return int(token[:-1] if token[-1] == "N" else token)
        if m := _CLOJURE_INT.match(token):  # hex, octal, radix: Clojure's reader takes them
            sign, hex_digits, octal, radix, digits = m.groups()
            try:
                n = int(hex_digits, 16) if hex_digits else int(octal, 8) if octal else int(digits, int(radix))
            except ValueError:
                raise EdnError(f"invalid number {token!r}") from None
            return -n if sign == "-" else n
        if _FLOAT.match(token):
            if token[-1] == "M":
                try:
                    return Decimal(token[:-1])
                except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
                    raise EdnError(f"invalid number {token!r}") from None
            return float(token)
        if _RATIO.match(token):
            num, den = token.split("/")
            if int(den) == 0:
                raise EdnError(f"invalid ratio {token!r}")
            return Fraction(int(num), int(den))
        raise EdnError(f"invalid number {token!r}")
    if token == "nil":
        return None
    if token == "true":
        return True
    if token == "false":
        return False
    if _SYMBOL.match(token):
        return Symbol(token)
    raise EdnError(f"invalid token {token!r}")


class _Pending:
    """A tag or a discard waiting for the value it applies to."""

    __slots__ = ("tag",)

    def __init__(self, tag: str | None) -> None:
        self.tag = tag  # None: #_ (discard)


_CLOSERS = {"(": ")", "[": "]", "{": "}", "#{": "}"}
_KEYWORD_TOKENS: dict[str, Keyword] = {}
"""Keyword tokens already read (``:xt/id``) → their keyword."""


def _keyword(token: str) -> Keyword:
    if not _KEYWORD.match(token, 1):
        raise EdnError(f"invalid keyword {token!r}")
    kw = Keyword(token[1:])
    if len(_KEYWORD_TOKENS) < 65536:
        _KEYWORD_TOKENS[token] = kw
    return kw


def _split(text: str) -> tuple[list[str], list[str]]:
    """The tokens of ``text`` (each string literal as the token ``""``) and the strings' bodies, in
    order; see _TOKENS."""
    parts = text.split('"')
    if '\\"' not in text:
        bodies, rest = parts[1::2], parts[0::2]
        if len(parts) % 2 == 0:
            return _split_general(text)  # a lone quote: not EDN, or a \" char literal
    else:  # a quote inside a string, or a \" char literal: rejoin the pieces of each string
        bodies, rest = [], [parts[0]]
        i, n = 1, len(parts)
        while i < n:
            body = parts[i]
            while body.endswith("\\") and (len(body) - len(body.rstrip("\\"))) % 2 == 1:
                i += 1
                if i == n:
                    return _split_general(text)
                body += '"' + parts[i]
            if i + 1 == n:
                return _split_general(text)
            bodies.append(body)
            rest.append(parts[i + 1])
            i += 2
    outside = '""'.join(rest)
    if ";" in outside or "\\" in outside:
        return _split_general(text)  # a comment or a character literal
    return _TOKENS.findall(outside), bodies


def _split_general(text: str) -> tuple[list[str], list[str]]:
    tokens: list[str] = []
    bodies: list[str] = []
    for token in _GENERAL_TOKENS.findall(text):
        if token[0] == '"' and len(token) > 1:
            tokens.append('""')
            bodies.append(token[1:-1])
        elif token[0] == ";":
            continue  # a comment
        else:
            tokens.append(token)
    return tokens, bodies


def loads(text: str, tags: Mapping[str, Callable[[Any], Any]] | None = None) -> Any:
    """The one EDN value in ``text`` (None for text with no value, as edn_format reads it).

    ``tags``: handlers by tag name (``"xtdb/id"``), called with the tagged value; they add to or
    replace the defaults (``inst``, ``uuid``). ``EdnError`` for anything that is not EDN or
    holds more than one value.
    """
    handlers = _DEFAULT_TAGS if not tags else {**_DEFAULT_TAGS, **tags}
    keywords = _KEYWORD_TOKENS
    tokens, bodies = _split(text)
    next_body = iter(bodies).__next__
    tagged_strings: dict[str, tuple[str, Callable[[Any], Any] | None]] = {}  # '#inst ""' → its tag
    items: list[Any] = []  # the values of the innermost open container (or of the top level)
    append = items.append
    opener = ""  # its opening delimiter ("" at the top level)
    pending = 0  # how many _Pending markers items holds
    stack: list[tuple[list[Any], str, int]] = []
    value: Any
    # One branch per kind of token, the most frequent first (keywords, strings, maps).
    for token in tokens:
        c = token[0]
        if c == ":":
            value = keywords.get(token) or _keyword(token)
        elif token == '""':
            value = next_body()
            if "\\" in value:
                value = _string(value)
        elif c == "}" or c == "]" or c == ")":
            if pending:
                raise EdnError(f"a tag or #_ has no value before {token!r}")
            if opener == "{" and c == "}":
                if len(items) % 2:
                    raise EdnError("a map literal has an odd number of forms")
                try:
                    value = dict(zip(items[::2], items[1::2], strict=False))
                except TypeError:  # a key that Python cannot hash as read: a vector, a map
                    value = {_freeze(k): v for k, v in zip(items[::2], items[1::2], strict=False)}
            elif opener == "[" and c == "]":
                value = items
            elif opener == "(" and c == ")":
                value = tuple(items)
            elif opener == "#{" and c == "}":
                try:
                    value = frozenset(items)
                except TypeError:
                    value = frozenset(_freeze(v) for v in items)
            else:
                raise EdnError(f"unexpected {token!r}" + (f" closing {opener!r}" if opener else ""))
            items, opener, pending = stack.pop()
            append = items.append
        elif c == "{" or c == "[" or c == "(" or token == "#{":
            stack.append((items, opener, pending))
            items, opener, pending = [], token, 0
            append = items.append
            continue
        elif c == "#":
            if token[-1] == '"':  # a tag and its string: #inst "..."
                known = tagged_strings.get(token)
                if known is None:
                    tag = token[1:-2].rstrip(" \t\n\r\f\v,")
                    known = tagged_strings[token] = (tag, handlers.get(tag))
                arg = next_body()
                if "\\" in arg:
                    arg = _string(arg)
                value = known[1](arg) if known[1] is not None else Tagged(known[0], arg)
            elif token == "#_":
                append(_Pending(None))
                pending += 1
                continue
            elif token in _SPECIAL_FLOATS:
                value = _SPECIAL_FLOATS[token]
            elif len(token) == 1 or token[1] in "#:0123456789":
                raise EdnError(f"unsupported dispatch {token!r}")
            else:
                append(_Pending(token[1:]))
                pending += 1
                continue
        elif token.isdigit() and (c != "0" or len(token) == 1):
            value = int(token)
        elif c == "\\":
            value = _char(token)
        elif c in "\"',;`~^@" or c.isspace():
            raise EdnError('unterminated string (a lone ")' if c == '"' else f"unexpected {token!r}")
        else:
            value = _atom(token)
        if pending:  # apply the tags and discards waiting for it, innermost first
            while pending and type(items[-1]) is _Pending:
                marker = items.pop()
                pending -= 1
                if marker.tag is None:
                    break  # discarded
                handler = handlers.get(marker.tag)
                value = handler(value) if handler is not None else Tagged(marker.tag, value)
            else:
                append(value)
        else:
            append(value)
    if opener:
        raise EdnError(f"unexpected end of text: {opener!r} is not closed")
    if pending:
        raise EdnError("unexpected end of text: a tag or #_ has no value")
    if len(items) > 1:
        raise EdnError(f"more than one value ({len(items)}) in the text")
    return items[0] if items else None

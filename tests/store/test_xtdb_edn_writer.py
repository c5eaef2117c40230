"""The EDN the XTDB store writes (store/xtdb.py ``_to_edn``): the fast walk over plain JSON values
writes exactly what the walk that checks every value writes, reads back as the value, and a
value that cannot be stored is refused with its path, wherever it sits."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_os.errors import StoreError
from context_os.store.edn import loads
from context_os.store.xtdb import _doc_to_edn, _edn_checked, _Inst, _Keyword, _to_edn

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _plain(value: Any) -> Any:
    """``value`` as the EDN reader gives it back: maps as dicts, vectors as lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_the_fast_walk_writes_what_the_checked_walk_writes(value: Any) -> None:
    text = _to_edn(value)
    assert text == _edn_checked(value, "$")
    assert _plain(loads(text)) == value


def test_markers_tuples_and_floats_inside_plain_values_are_written_as_before() -> None:
    value = {"a": [1, 2.5, (3, "x")], "k": _Keyword("xt/id"), "t": _Inst(0), "n": None, "b": [True, False]}
    assert _to_edn(value) == _edn_checked(value, "$")
    assert (
        _to_edn(value)
        == '{"a" [1 2.5 [3 "x"]] "k" :xt/id "t" #inst "1970-01-01T00:00:00.000Z" "n" nil "b" [true false]}'
    )


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"id": "d", "content": {"rows": [1, {"v": float("nan")}]}}, r"d\.content\.rows\[1\]\.v: nan cannot be stored"),
        ({"id": "d", "content": [[{"x": {1, 2}}]]}, r"d\.content\[0\]\[0\]\.x: a set cannot be stored"),
        ({"id": "d", "content": {"a": {3: "three"}}}, r"d\.content\.a: key 3 is not a string"),
        ({"id": "d", "meta": {"m": [object()]}}, r"a object cannot be stored"),
    ],
)
def test_a_value_that_cannot_be_stored_is_refused_with_its_path(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(StoreError, match=message):
        _doc_to_edn(doc)

"""Text that is not Unicode (lone surrogates, e.g. from ``\\udc80`` escapes in a JSON request) at
the store boundary: every backend refuses it with ``StoreError`` and writes nothing.

The server fuzz (test_fuzz_server.py) reaches the store with such ids (``session.open`` with a
session named ``"\\ud800"``); this pins the store's part directly, on every backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from context_os.errors import InputError, StoreError
from context_os.store import Delete, Match, Put, Store

BAD = "\ud800"

CALLS: dict[str, Callable[[Store, str], Any]] = {
    "get": lambda s, u: s.get(f"note:{u}{BAD}"),
    "history": lambda s, u: s.history(f"note:{u}{BAD}"),
    "find kind": lambda s, u: s.find(f"note{BAD}"),
    "find where key": lambda s, u: s.find("note", {BAD: 1}),
    "find where value": lambda s, u: s.find("note", {"a": BAD}),
    "put id": lambda s, u: s.put({"id": f"note:{u}{BAD}", "kind": "note"}),
    "put content": lambda s, u: s.put({"id": f"note:{u}", "kind": "note", "content": BAD}),
    "put meta key": lambda s, u: s.put({"id": f"note:{u}", "kind": "note", "meta": {BAD: 1}}),
    "delete": lambda s, u: s.submit([Delete(f"note:{u}{BAD}")]),
    "match": lambda s, u: s.submit([Match(f"note:{u}", {"id": f"note:{u}", "x": BAD}), Put({"id": f"note:{u}"})]),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_text_that_is_not_unicode_gets_a_store_error(store: Store, uid: str, call: str) -> None:
    before = store.latest_tx()
    with pytest.raises(StoreError):
        CALLS[call](store, uid)
    assert store.latest_tx() == before


def test_a_search_for_a_session_id_that_is_not_unicode_is_an_input_error(store: Store) -> None:
    """Every store says so before it looks (the XTDB store's sidecar index once raised the
    encoder's own error, the SQLite store a StoreError)."""
    with pytest.raises(InputError, match="session .* is not valid Unicode text"):
        store.text_search("alpha", session=f"s{BAD}")

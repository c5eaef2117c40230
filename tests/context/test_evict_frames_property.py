"""Any eviction leaves every frame of a session checkable: a frame either verifies or is told to
have shown what was evicted since, never taken for damage, and it re-renders the messages it
had. Sessions and evictions drawn by hypothesis, on the embedded store (the conformance of the
stores is tests/context/test_evict.py's). Deterministic, as every fuzz test here
(``tests/reliability/_adversarial.FUZZ``); ``CTXOS_FUZZ_SCALE`` runs more examples."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from context_os import Session
from context_os.context.evict import evict
from context_os.context.frames import frame_docs, verify_frame
from context_os.context.policy import RetentionPolicy
from context_os.harness import OpenAIHook
from context_os.store.sqlite import SqliteStore
from tests.context._drawn import POLICIES, SESSIONS, messages
from tests.helpers import say, user
from tests.reliability._adversarial import FUZZ, examples


def _evict_some(store: SqliteStore, data: st.DataObject, most: int, label: str) -> None:
    """Evict up to ``most`` of the session's chat pages and tool calls, drawn."""
    ids = sorted(v.id for kind in ("chat", "toolcall") for v in store.find(kind, {"session": "s"}))
    for oid in data.draw(st.lists(st.sampled_from(ids), unique=True, max_size=most), label=label):
        evict(store, oid, reason="drawn")


@settings(FUZZ, max_examples=examples(120))
@given(turns=SESSIONS, policy=st.sampled_from(sorted(POLICIES)), live=st.booleans(), data=st.data())
def test_every_frame_verifies_or_names_the_eviction_that_explains_it(
    turns: list[list[tuple[str, int]]], policy: str, live: bool, data: st.DataObject
) -> None:
    """Evicted after the session closed, or (``live``) between turns of the running session,
    which writes the evicted pages back scrubbed and goes on."""
    with tempfile.TemporaryDirectory() as tmp, SqliteStore(Path(tmp) / "store.db") as store:
        msgs: list[dict[str, Any]] = [user("start")]
        with Session.open(store, "s", redact=False, policy=RetentionPolicy(**POLICIES[policy])) as s:
            hook = OpenAIHook(s)
            for n, turn in enumerate(messages(turns)):
                msgs += turn
                hook.transform_context(msgs)
                if live:
                    _evict_some(store, data, 2, f"evicted after turn {n + 1}")
        if not live:
            _evict_some(store, data, 4, "evicted")
        for f in frame_docs(store, "s"):
            check = verify_frame(store, f)
            assert check.ok or check.evicted_only, (f["id"], check.problems)
            assert check.ok or check.evicted, f["id"]
            assert check.rendered is not None and check.rendered.message_count == f["content"]["messages"]
        with Session.open(store, "s", redact=False) as s:  # and the session goes on
            assert [e["i"] for e in s.view.entries] == list(range(len(s.view.entries)))
            OpenAIHook(s).transform_context([*msgs, say("done"), user("next")])

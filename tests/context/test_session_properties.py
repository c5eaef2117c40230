"""Properties of sessions drawn by hypothesis (tests/context/_drawn.py): a session closed and
opened again at any turn sends what it would have sent had it run through, and the embedded store
and an XTDB node give one session the same contexts and the same frames. Deterministic, as every
fuzz test here (``tests/reliability/_adversarial.FUZZ``); ``CTXOS_FUZZ_SCALE`` runs more."""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from context_os import Session
from context_os.context.frames import frame_docs
from context_os.context.policy import RetentionPolicy
from context_os.harness import OpenAIHook
from context_os.store import Store
from context_os.store.sqlite import SqliteStore
from context_os.store.xtdb import XtdbStore
from tests.context._drawn import POLICIES, SESSIONS, messages
from tests.helpers import assert_frames_verify, user
from tests.reliability._adversarial import FUZZ, examples


def _run(
    store: Store, sid: str, turns: list[list[dict[str, Any]]], policy: str, reopen: int | None = None
) -> list[str]:
    """What the session ``sid`` sends at each turn (as JSON), closed and opened again before turn
    ``reopen`` (counting from 0) when given."""
    s = Session.open(store, sid, redact=False, harness="openai", policy=RetentionPolicy(**POLICIES[policy]))
    hook, msgs, sent = OpenAIHook(s), [user("start")], []
    try:
        for n, turn in enumerate(turns):
            msgs += turn
            if n == reopen:
                s.close()
                s = Session.open(store, sid, redact=False, harness="openai")  # its policy as stored
                hook = OpenAIHook(s)
            sent.append(json.dumps(hook.transform_context(msgs)))
    finally:
        s.close()
    return sent


@settings(FUZZ, max_examples=examples(100))
@given(turns=SESSIONS, policy=st.sampled_from(sorted(POLICIES)), data=st.data())
def test_a_session_opened_again_at_any_turn_sends_what_it_would_have(
    turns: list[list[tuple[str, int]]], policy: str, data: st.DataObject
) -> None:
    at = data.draw(st.integers(1, len(turns) - 1), label="opened again before turn (from 0)")
    with (
        tempfile.TemporaryDirectory() as tmp,
        SqliteStore(Path(tmp) / "through.db") as through,
        SqliteStore(Path(tmp) / "again.db") as again,
    ):
        sent = _run(through, "s", messages(turns), policy)
        assert _run(again, "s", messages(turns), policy, reopen=at) == sent
        assert_frames_verify(again, "s")


_examples = itertools.count()


@settings(FUZZ, max_examples=examples(60))
@given(turns=SESSIONS, policy=st.sampled_from(sorted(POLICIES)))
def test_both_stores_give_a_session_the_same_contexts_and_frames(
    xtdb_url: str, uid: str, turns: list[list[tuple[str, int]]], policy: str
) -> None:
    sid = f"{uid}-{next(_examples)}"  # a session of its own on the node every example writes to
    with tempfile.TemporaryDirectory() as tmp, XtdbStore(xtdb_url) as node, SqliteStore(Path(tmp) / "s.db") as embedded:
        assert _run(node, sid, messages(turns), policy) == _run(embedded, sid, messages(turns), policy)
        hashes = [[f["content"]["rendered_hash"] for f in frame_docs(s, sid)] for s in (embedded, node)]
        assert hashes[0] == hashes[1] and len(hashes[0]) == len(turns)

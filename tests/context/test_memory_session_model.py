"""Memory scopes in a session (``SourceTools(memory=...)``), drawn by hypothesis: the global and
project ``MEMORY.md`` written, appended to, emptied and deleted on disk between calls, facts
remembered through the agent's ``remember`` tool, the workspace trusted and untrusted, turns of
talk, the session closed and opened again. Every fact carries a marker of its own.

At every call the newest block of each index in the context (a changed index is a block after
its old one, which the prompt cache keeps) is the used scope's index as a fresh ``MemoryScopes``
offers it now, and there is none of an index no used scope holds (deleted, emptied, or of a
project no longer trusted); every frame verifies at the end.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from context_os import Session
from context_os.context.policy import RetentionPolicy
from context_os.context.source_tools import SourceTools
from context_os.harness import OpenAIHook
from context_os.sources.memory import MemoryScopes, trust_workspace, untrust_workspace
from context_os.store.sqlite import SqliteStore
from tests.helpers import assert_frames_verify, objects_shown, say, user
from tests.reliability._adversarial import FUZZ, examples

STEP = st.tuples(
    st.sampled_from(["write", "append", "empty", "delete", "remember", "trust", "untrust", "talk", "reopen"]),
    st.sampled_from(["global", "project"]),
    st.integers(1, 3),
)


@settings(FUZZ, max_examples=examples(60))
@given(calls=st.lists(st.lists(STEP, min_size=1, max_size=3), min_size=2, max_size=10))
def test_a_session_shows_the_memory_indexes_as_they_are_now(calls: list[list[tuple[str, str, int]]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        data, ws = base / "data", base / "repo"
        ws.mkdir()
        dirs = {"global": data / "memory", "project": ws / ".context_os" / "memory"}
        n = 0

        def facts(k: int) -> str:
            nonlocal n
            out = ""
            for _ in range(k):
                n += 1
                out += f"- fact F{n}x\n"
            return out

        def open_session(db: SqliteStore) -> tuple[Session, OpenAIHook, SourceTools]:
            session = Session.open(db, "s", redact=False, harness="openai", policy=RetentionPolicy())
            tools = SourceTools(session, memory=MemoryScopes(ws, data_dir=data))
            hook = OpenAIHook(session)
            tools.register(hook.registry)
            return session, hook, tools

        with SqliteStore(base / "s.db") as db:
            session, hook, tools = open_session(db)
            msgs: list[dict[str, Any]] = [user("start")]
            try:
                for steps in calls:
                    for what, scope, k in steps:
                        index = dirs[scope] / "MEMORY.md"
                        if what in ("write", "append"):
                            index.parent.mkdir(parents=True, exist_ok=True)
                            before = index.read_text() if what == "append" and index.exists() else ""
                            index.write_text(before + facts(k))
                        elif what == "empty" and index.exists():
                            index.write_text("\n")
                        elif what == "delete" and index.exists():
                            index.unlink()
                        elif what == "remember":
                            n += 1
                            said = hook.call_tool("remember", {"text": f"fact F{n}x", "scope": scope})
                            assert ('"appended"' in said) == (
                                scope == "global" or MemoryScopes(ws, data_dir=data).trusted
                            ), said
                        elif what == "trust":
                            trust_workspace(ws, data_dir=data)
                        elif what == "untrust":
                            untrust_workspace(ws, data_dir=data)
                        elif what == "reopen":
                            session.close()
                            session, hook, tools = open_session(db)
                        else:
                            msgs += [say(f"reply {n}"), user(f"question {n}")]
                    msgs += [say(f"turn {len(msgs)}"), user(f"next {len(msgs)}")]
                    items = {i.id: i.text for i in MemoryScopes(ws, data_dir=data).items("", 0)}
                    shown = objects_shown(hook.transform_context(msgs))
                    assert {oid: text for oid, (_, text) in shown.items() if oid.startswith("memory:")} == items
            finally:
                session.close()
            assert_frames_verify(db, "s")

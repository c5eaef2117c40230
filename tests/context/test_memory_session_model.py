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

import re
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.context.policy import RetentionPolicy
from context_os.context.source_tools import SourceTools
from context_os.harness import OpenAIHook
from context_os.sources.memory import MemoryScopes, trust_workspace, untrust_workspace
from context_os.store.sqlite import SqliteStore
from tests.helpers import say, user
from tests.reliability._adversarial import FUZZ, examples

BLOCK = re.compile(r'<object id="(memory:[^"]+)" kind="memory"[^>]*>\n(.*?)\n</object>', re.S)
STEP = st.tuples(
    st.sampled_from(["write", "append", "empty", "delete", "remember", "trust", "untrust", "talk", "reopen"]),
    st.sampled_from(["global", "project"]),
    st.integers(1, 3),
)


CHANGED = re.compile(
    r"(\S+)(?: \(now version \d+\))? changed: "
    r"(this replaces its block above|a patch of its block above, the rest of it stands):"
)
HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def memory_shown(out: list[dict[str, Any]]) -> dict[str, str]:
    """The text of each memory index as the context shows it last: its newest block, which may
    replace an older one, or patch it (``@@ -a,b +c,d @@`` hunks over the older block's lines)."""
    blocks: list[list[str]] = []
    holder: dict[str, int] = {}  # object id → the block that shows it
    for m in out:
        content = m["content"] if isinstance(m["content"], str) else ""
        if not content.startswith("<context_os>"):
            continue
        lines = content.split("\n")
        change = CHANGED.fullmatch(lines[1])
        if change is not None and change.group(2).startswith("a patch") and change.group(1) in holder:
            k = holder[change.group(1)]
            blocks[k] = patched(blocks[k], lines[2:-1])
            continue
        blocks.append(lines)
        for oid, _ in BLOCK.findall(content):
            holder[oid] = len(blocks) - 1
    return {oid: dict(BLOCK.findall("\n".join(blocks[k])))[oid] for oid, k in holder.items()}


def patched(old: list[str], hunks: list[str]) -> list[str]:
    """``old`` with the unified-diff ``hunks`` applied (line numbers from 1)."""
    out: list[str] = []
    at = 0  # lines of old taken
    for line in hunks:
        if (h := HUNK.fullmatch(line)) is not None:
            start = int(h.group(1)) - (0 if h.group(2) == "0" else 1)
            out += old[at:start]
            at = start
        elif line.startswith(" "):
            assert old[at] == line[1:], (old[at], line)
            out.append(line[1:])
            at += 1
        elif line.startswith("-"):
            assert old[at] == line[1:], (old[at], line)
            at += 1
        elif line.startswith("+"):
            out.append(line[1:])
        else:
            raise AssertionError(f"not a patch line: {line!r}")
    return out + old[at:]


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
                    last = memory_shown(hook.transform_context(msgs))
                    assert last == items
            finally:
                session.close()
            for f in frame_docs(db, "s"):
                check = verify_frame(db, f)
                assert check.ok, (f["id"], check.problems)

"""Properties of sessions with file tools, drawn by hypothesis: reads, writes and edits made for
real through ``FileTools`` in a real directory, files changed on disk behind the session's back
(seen when a tool looks at them), listings, greps and talk, under four retention settings. A
session closed and opened again before any turn sends what it would have sent run through; a
call that brings nothing new gets the context the last one got, no turn of its own; every frame
verifies. Deterministic, as every fuzz test here (``tests/reliability/_adversarial.FUZZ``);
``CTXOS_FUZZ_SCALE`` runs more."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from context_os.context.frames import frame_docs, verify_frame
from context_os.context.policy import RetentionPolicy
from context_os.store.sqlite import SqliteStore
from tests.context._drawn import POLICIES
from tests.files._agent import FileAgent
from tests.helpers import say, user
from tests.reliability._adversarial import FUZZ, examples

STEP = st.tuples(st.sampled_from(["read", "write", "edit", "disk", "ls", "grep", "talk", "retry"]), st.integers(0, 3))
TURNS = st.lists(st.lists(STEP, min_size=1, max_size=3), min_size=2, max_size=12)
FILES = 4


def _text(k: int, n: int) -> str:
    return "".join(f"line {i} of f{k}, revision {n}\n" for i in range(40))


def _arguments(step: str, k: int, n: int) -> dict[str, str]:
    path = f"f{k}.txt"
    return {
        "read": {"path": path},
        "write": {"path": path, "content": _text(k, n)},
        "edit": {"path": path, "oldText": f"line 3 of f{k}", "newText": f"LINE 3 of f{k}"},
        "ls": {"path": "."},
        "grep": {"pattern": "line 3 ", "path": "."},
    }[step]


def _run(
    store: SqliteStore, root: Path, turns: list[list[tuple[str, int]]], policy: str, reopen: int | None
) -> list[str]:
    """What the session sends at each turn (as JSON, file ids in order of appearance), closed and
    opened again before turn ``reopen`` (from 0) when given."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    for k in range(FILES):
        (root / f"f{k}.txt").write_text(_text(k, 0))

    agent = FileAgent(store, root, RetentionPolicy(**POLICIES[policy]))
    sent, n = [], 0
    try:
        for t, steps in enumerate(turns):
            if t == reopen:
                agent.reopen()
            retry = False
            for step, k in steps:
                n += 1
                if step == "disk":  # changed behind the session's back: seen when a tool looks at it
                    (root / f"f{k}.txt").write_text(_text(k, n))
                elif step == "talk":
                    agent.msgs += [say(f"reply {n}"), user(f"question {n}")]
                elif step == "retry":
                    retry = True
                else:
                    agent.tool(step, **_arguments(step, k, n))
            out = agent.turn()
            if retry:  # the client asks again: the same context, no turn of its own
                turn = agent.session.view.turn
                assert agent.turn() == out and agent.session.view.turn == turn
            sent.append(json.dumps(out))
    finally:
        agent.close()
    ids: dict[str, str] = {}  # a file's id is drawn at random: named by when it first shows
    return [re.sub(r"file:[0-9a-f]{32}", lambda m: ids.setdefault(m[0], f"file-{len(ids)}"), x) for x in sent]


@settings(FUZZ, max_examples=examples(80))
@given(turns=TURNS, policy=st.sampled_from(sorted(POLICIES)), data=st.data())
def test_a_session_with_file_tools_opened_again_at_any_turn_sends_what_it_would_have(
    turns: list[list[tuple[str, int]]], policy: str, data: st.DataObject
) -> None:
    at = data.draw(st.integers(1, len(turns) - 1), label="opened again before turn (from 0)")
    with tempfile.TemporaryDirectory() as tmp:
        sent = []
        for name, reopen in (("through", None), ("again", at)):
            with SqliteStore(Path(tmp) / f"{name}.db") as store:
                sent.append(_run(store, Path(tmp) / "ws", turns, policy, reopen))  # one path: the same ids
                for f in frame_docs(store, "s"):
                    check = verify_frame(store, f)
                    assert check.ok, (name, f["id"], check.problems)
        assert sent[0] == sent[1]

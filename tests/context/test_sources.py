"""Object sources in a session (context/sources.py): items become versioned objects with their
provenance, enter the metadata or the active pool by score and budget, keep their version and
block while unchanged, and show in frames; on both stores."""

from __future__ import annotations

from typing import Any

import pytest

from context_os import RetentionPolicy, Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.errors import InputError
from context_os.harness.openai import OpenAIHook
from context_os.sources import SourceItem, TextSource
from context_os.store.base import Store
from tests.helpers import blocks_text, say, user


def notes(uid: str) -> dict[str, str]:
    """Three notes, with ids unique to the test (stores are shared across tests)."""
    return {
        f"recall:{uid}:deploy": "deploy with make release after the tests pass on main",
        f"recall:{uid}:tokens": "the api tokens rotate every monday; never paste them in chat",
        f"recall:{uid}:cache": "the prompt cache keeps hitting while the prefix is unchanged",
    }


def hook(store: Store, sid: str, **feed: Any) -> OpenAIHook:
    session = Session.open(store, sid, harness="openai", policy=RetentionPolicy(manage_from_tokens=0))
    session.add_source(TextSource("notes", notes(sid)), **feed)
    return OpenAIHook(session)


def all_frames_verify(store: Store, session_id: str) -> bool:
    frames = frame_docs(store, session_id)
    return bool(frames) and all(verify_frame(store, f).ok for f in frames)


def test_items_enter_the_pools_by_score_and_budget_with_their_provenance(store: Store, uid: str) -> None:
    h = hook(store, uid, active_score=0.5, budget_tokens=100)
    h.transform_context([user("how do we deploy after the tests pass")])
    view = h.session.view
    deploy = view.objects[f"recall:{uid}:deploy"]
    assert deploy.state == "active" and deploy.kind == "recall"
    doc = store.doc(f"recall:{uid}:deploy")
    assert doc is not None and doc["meta"]["source"] == "notes" and doc["meta"]["rank"] == 1
    assert doc["meta"]["query"] == "how do we deploy after the tests pass" and doc["meta"]["score"] > 0.5
    # a weaker match enters the metadata pool only: one line the agent can activate
    cache = view.objects.get(f"recall:{uid}:cache")
    assert cache is not None and cache.state == "inactive"
    text = blocks_text(h.transform_context([user("how do we deploy after the tests pass"), say("ok")]))
    assert "make release" in text and f"- recall:{uid}:cache recall cache" in text and "prompt cache keeps" not in text
    reason = h.session.state_changes(f"recall:{uid}:deploy")[0].doc["meta"]["reason"]  # type: ignore[index]
    assert reason.startswith("notes: score")
    # the frame names the item's version: what recall put in front of the model at that turn
    frame = frame_docs(store, h.session.id)[0]
    assert any(r["id"] == f"recall:{uid}:deploy" for r in frame["content"]["refs"])
    assert all_frames_verify(store, h.session.id)


def test_the_budget_keeps_a_high_score_out_of_the_active_pool(store: Store, uid: str) -> None:
    h = hook(store, uid, active_score=0.1, budget_tokens=5)
    h.transform_context([user("deploy the tests")])
    assert h.session.view.objects[f"recall:{uid}:deploy"].state == "inactive"


def test_an_item_recalled_again_keeps_its_version_and_its_block(store: Store, uid: str) -> None:
    h = hook(store, uid, active_score=0.5)
    msgs = [user("deploy after the tests pass")]
    first = h.transform_context(msgs)
    msgs += [say("done"), user("and deploy again when the tests pass")]
    second = h.transform_context(msgs)
    assert len(store.history(f"recall:{uid}:deploy")) == 1  # the same text: nothing written
    # the block stayed where it was: the second call repeats the first as its prefix (cache hit)
    assert second[: len(first)] == first and "make release" in blocks_text(first)
    # recalled again counts as a use (the pool keeps it longest), and says for which query
    states = [v.doc for v in h.session.state_changes(f"recall:{uid}:deploy") if v.doc is not None]
    assert [d["content"]["state"] for d in states] == ["active", "active"]
    assert states[1]["meta"]["reason"] == "notes: score 0.571, rank 1"


def test_a_pinned_source_is_read_every_turn_and_follows_its_text(store: Store, uid: str) -> None:
    class Memory:
        name = "memory"

        def __init__(self) -> None:
            self.text: str | None = "- the user prefers tabs"

        def items(self, query: str, budget_tokens: int) -> list[SourceItem]:
            if self.text is None:  # the file was deleted
                return []
            return [SourceItem(f"memory:{uid}:MEMORY.md", "memory", self.text, 1.0, {"scope": "global"})]

    memory = Memory()
    session = Session.open(store, uid, harness="openai")  # default policy: managed once it has a source
    session.add_source(memory, pin=True, every_turn=True)
    h = OpenAIHook(session)
    msgs = [user("hi")]
    h.transform_context(msgs)
    obj = session.view.objects[f"memory:{uid}:MEMORY.md"]
    assert obj.pinned and obj.state == "active" and "prefers tabs" in blocks_text(h.transform_context(msgs))
    # read again unchanged: no new version, and nothing recorded (no state change per turn)
    recorded = len(session.state_changes(f"memory:{uid}:MEMORY.md"))
    h.transform_context(msgs)
    assert len(session.state_changes(f"memory:{uid}:MEMORY.md")) == recorded
    assert len(store.history(f"memory:{uid}:MEMORY.md")) == 1
    memory.text += "\n- tests run with make test"
    msgs += [say("hello")]
    text = blocks_text(h.transform_context(msgs))
    assert "make test" in text and len(store.history(f"memory:{uid}:MEMORY.md")) == 2
    memory.text = None
    msgs += [user("bye")]
    assert "make test" not in blocks_text(h.transform_context(msgs))
    obj = session.view.objects[f"memory:{uid}:MEMORY.md"]
    assert obj.state == "inactive" and not obj.pinned
    assert all_frames_verify(store, session.id)


def test_this_sessions_own_chat_is_not_recalled_into_it(store: Store, uid: str) -> None:
    class Echo:
        name = "echo"

        def items(self, query: str, budget_tokens: int) -> list[SourceItem]:
            return [
                SourceItem(
                    f"recall:chat:{uid}:00000#e0", "recall", query, 1.0, {"object": f"chat:{uid}:00000", "session": uid}
                ),
                SourceItem(
                    f"recall:chat:{uid}-other:00000#e3",
                    "recall",
                    "an older talk",
                    0.9,
                    {"object": f"chat:{uid}-other:00000", "session": f"{uid}-other"},
                ),
            ]

    session = Session.open(store, uid, harness="openai")
    session.add_source(Echo(), active_score=0.5)
    OpenAIHook(session).transform_context([user("what did we say")])
    assert f"recall:chat:{uid}:00000#e0" not in session.view.objects
    assert session.view.objects[f"recall:chat:{uid}-other:00000#e3"].state == "active"


def test_item_text_is_redacted_before_it_is_stored(store: Store, uid: str) -> None:
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    source = TextSource("notes", {f"recall:{uid}:key": f"the deploy token is {secret}"})
    session = Session.open(store, uid, harness="openai")
    session.add_source(source, active_score=0.1)
    OpenAIHook(session).transform_context([user("the deploy token")])
    doc = store.doc(f"recall:{uid}:key")
    assert doc is not None and secret not in doc["content"]


def test_a_source_without_a_name_is_refused(store: Store, uid: str) -> None:
    class Nameless:
        name = ""

        def items(self, query: str, budget_tokens: int) -> list[SourceItem]:
            return []

    session = Session.open(store, uid, harness="openai")
    with pytest.raises(InputError, match="name"):
        session.add_source(Nameless())

"""The read model of sessions over time (context/timeline.py), on every store: pools and prefix
recorded per frame, state changes per turn, pages of turns, frame messages tied to the versions
they show, and the diff of two turns."""

from __future__ import annotations

from typing import Any

import pytest

from context_os.context.frames import EVICTED_BLOCK, frame_basis, frame_docs, get_frame, verify_frame
from context_os.context.timeline import (
    FrameDiff,
    frame_diff,
    frame_messages,
    session_rows,
    turn_count,
    turn_rows,
    version_at,
)
from context_os.errors import NotFound
from context_os.hashing import canonical_json
from context_os.store import Store
from tests.ui.recorded import record_demo

MESSAGES = 70
"""The first messages of the bundled session: reads, edits and collapses in ~25 turns."""


@pytest.fixture
def recorded(store: Store, uid: str) -> tuple[Store, str]:
    return store, record_demo(store, f"{uid}-demo", MESSAGES)


def test_frames_record_pools_prefix_and_changes(recorded: tuple[Store, str]) -> None:
    store, sid = recorded
    docs = frame_docs(store, sid)
    assert len(docs) > 10
    for doc in docs:
        c = doc["content"]
        assert set(c["pools"]) == {"chat", "metadata", "active", "recall"}
        assert sum(c["pools"].values()) == c["tokens"], c["turn"]
        assert 0 <= c["prefix_tokens"] <= c["tokens"]
        assert c["changes_total"] == len(c["changes"])
    assert docs[0]["content"]["prefix_tokens"] == 0  # nothing came before the first turn
    assert any(d["content"]["prefix_tokens"] > 0 for d in docs[1:])
    assert any(d["content"]["pools"]["active"] > 0 for d in docs)
    changes = [ch for d in docs for ch in d["content"]["changes"]]
    assert any(ch["actor"] == "agent" and ch["state"] == "active" and ch["reason"] == "read" for ch in changes)
    assert any(ch["actor"] == "policy" and ch["collapsed"] for ch in changes)


def test_changes_are_the_state_versions_since_the_previous_frame(recorded: tuple[Store, str]) -> None:
    """What a frame says changed is what the audit trail holds as of its basis."""
    store, sid = recorded
    for doc in frame_docs(store, sid):
        c = doc["content"]
        for ch in c["changes"]:
            st = store.get(f"state:{sid}:{ch['id']}", c["valid_time"], frame_basis(store, doc))
            assert st is not None and st.doc is not None
            assert {k: st.doc["content"][k] for k in ("state", "pinned", "collapsed")} == {
                k: ch[k] for k in ("state", "pinned", "collapsed")
            }
            assert set(st.doc["content"]) <= {"state", "pinned", "collapsed", "file_text"}
            assert (st.doc["meta"]["actor"], st.doc["meta"]["reason"]) == (ch["actor"], ch["reason"])


def test_turn_rows_read_one_page(recorded: tuple[Store, str]) -> None:
    store, sid = recorded
    turns = turn_count(store, sid)
    rows = turn_rows(store, sid, 5, 4)
    assert [r.row.turn for r in rows] == [5, 6, 7, 8]
    docs = {d["content"]["turn"]: d for d in frame_docs(store, sid)}
    for r in rows:
        c = docs[r.row.turn]["content"]
        assert (r.row.tokens_assembled, r.row.tokens_full, r.row.pools) == (c["tokens"], c["tokens_full"], c["pools"])
        assert r.active_ids == c["active"] and r.changes == c["changes"]
    assert turn_rows(store, sid, turns + 1, 10) == []
    assert [r.row.turn for r in turn_rows(store, sid, turns - 1, 10)] == [turns - 1, turns]
    with pytest.raises(NotFound):
        turn_count(store, f"{sid}-missing")


def test_session_rows_name_the_last_turn(recorded: tuple[Store, str]) -> None:
    store, sid = recorded
    (row,) = [r for r in session_rows(store) if r.session == sid]
    last = get_frame(store, sid, row.turns)["content"]
    assert (row.tokens_assembled, row.tokens_full) == (last["tokens"], last["tokens_full"])
    assert row.harness == "openai" and row.messages > 0


def test_frame_messages_are_tied_to_versions_that_resolve(recorded: tuple[Store, str]) -> None:
    store, sid = recorded
    frame = get_frame(store, sid, turn_count(store, sid))
    check = verify_frame(store, frame)
    assert check.ok and check.rendered is not None
    total, messages = frame_messages(store, frame, check)
    assert total == len(messages) == len(check.rendered.messages)
    for m, rendered in zip(messages, check.rendered.messages, strict=True):
        assert (m.role, m.text) == (rendered["role"], rendered.get("text"))
        if m.object_id is not None:
            assert m.version is not None, m
            v = store.get(m.object_id, m.version["valid_time"], m.version["tx_id"])
            assert v is not None and v.doc is not None and v.doc["object_hash"] == m.version["object_hash"]
    pools = {m.pool for m in messages}
    assert {"chat", "active", "metadata"} <= pools
    assert any(m.origin == "block" and m.object_id and m.object_id.startswith("file:") for m in messages)
    # a page is the same messages as the slice of the whole
    _, page = frame_messages(store, frame, check, 3, 9)
    assert page == messages[3:9]


def _prompt(messages: list[Any]) -> bytes:
    return b"".join(canonical_json(m) + b"\n" for m in messages)


def test_frame_diff(recorded: tuple[Store, str]) -> None:
    store, sid = recorded
    same = frame_diff(store, sid, 4, 4)
    assert same.first_byte is None and same.b_extends_a and not same.hunks and not same.entered
    docs = {d["content"]["turn"]: d for d in frame_docs(store, sid)}
    # a pair where an object entered the active pool
    a, b = next(
        (t - 1, t)
        for t in sorted(docs)
        if t > 1 and set(docs[t]["content"]["active"]) - set(docs[t - 1]["content"]["active"])
    )
    diff = frame_diff(store, sid, a, b)
    assert set(diff.activated) == set(docs[b]["content"]["active"]) - set(docs[a]["content"]["active"])
    assert diff.tokens == (docs[a]["content"]["tokens"], docs[b]["content"]["tokens"])
    assert all(c.ok for c in diff.checks or ())
    pa = _prompt(verify_frame(store, docs[a]).rendered.messages)  # type: ignore[union-attr]
    pb = _prompt(verify_frame(store, docs[b]).rendered.messages)  # type: ignore[union-attr]
    assert diff.prompt_bytes == (len(pa), len(pb))
    if diff.first_byte is None:
        assert pa == pb
    else:
        assert pa[: diff.first_byte] == pb[: diff.first_byte]
        assert (
            diff.first_byte == len(pa)
            or pa[diff.first_byte : diff.first_byte + 1] != pb[diff.first_byte : diff.first_byte + 1]
        )
        assert diff.hunks
    assert diff.to_dict()["verified"] == [True, True]


def _grows(diff: FrameDiff) -> bool:
    """The later turn of ``diff`` repeats all of the earlier and adds to it."""
    return diff.b_extends_a and diff.first_byte is not None


def test_a_chat_page_that_filled_between_two_turns_changed_and_did_not_leave(recorded: tuple[Store, str]) -> None:
    """A frame names its full chat pages by count and hash: a page that filled between two turns
    was said to have left the context, and every full page was left out of what entered."""
    store, sid = recorded
    sealed = {
        turn: next(
            (r["sealed_pages"] for r in get_frame(store, sid, turn)["content"]["refs"] if "sealed_pages" in r), 0
        )
        for turn in range(1, turn_count(store, sid) + 1)
    }
    filled = [t for t in sealed if t > 1 and sealed[t] > sealed[t - 1]]
    assert filled, sealed
    for turn in filled:
        diff = frame_diff(store, sid, turn - 1, turn)
        assert not [r for r in diff.left if r["id"].startswith("chat:")], turn  # (one said each page it sealed)
    whole = frame_diff(store, sid, 1, max(sealed))
    assert not [r for r in whole.left if r["id"].startswith("chat:")]
    assert f"chat:{sid}:00001" in [r["id"] for r in whole.entered] + [a["id"] for a, _ in whole.changed]


def test_a_frame_diff_from_a_later_turn_to_one_it_extends(recorded: tuple[Store, str]) -> None:
    """From a turn back to one its prompt extends (``frames diff ID 12 11``), the prompts part
    where the earlier one ends: ``first_message`` named a message after the last of the earlier
    turn (the web view linked to it), and the text said the earlier prompt was 100% the later's
    prefix. It says the later turn repeats all of the earlier (``a_extends_b``), and names no
    message."""
    store, sid = recorded
    turns = sorted(d["content"]["turn"] for d in frame_docs(store, sid))
    a, b = next((t, t - 1) for t in turns if t > 1 and _grows(frame_diff(store, sid, t - 1, t)))
    forward, back = frame_diff(store, sid, b, a), frame_diff(store, sid, a, b)
    assert forward.b_extends_a and not forward.a_extends_b and forward.first_message == back.messages[1]
    assert back.a_extends_b and not back.b_extends_a
    assert back.first_byte == back.prompt_bytes[1] == forward.prompt_bytes[0] and back.first_message is None
    assert [(h["op"], h["a"], h["b"]) for h in back.hunks] == [("delete", h["b"], h["a"]) for h in forward.hunks]
    assert back.to_dict()["a_extends_b"] is True and forward.to_dict()["a_extends_b"] is False


def test_a_frame_diff_compares_frames_that_showed_an_evicted_object(store: Store, uid: str) -> None:
    """Frames that showed an evicted object are re-rendered with the erased blocks marked (they
    were not re-rendered at all, and their diff compared nothing): their diff does not verify, and
    compares what they still show."""
    from context_os.context.evict import evict

    sid = record_demo(store, f"{uid}-evicted", MESSAGES)
    docs = frame_docs(store, sid)
    turn, file = next(
        (d["content"]["turn"], i)
        for d in docs
        if d["content"]["managed"] and d["content"]["turn"] > 1  # a file shows in a block from then on
        for i in d["content"]["active"]
        if i.startswith("file:")
    )
    before = frame_diff(store, sid, turn - 1, turn)
    assert before.rendered == (True, True) == before.to_dict()["rendered"]
    evict(store, file, reason="test")
    same = frame_diff(store, sid, turn, turn)
    assert same.rendered == (True, True) and same.to_dict()["verified"] == [False, False]
    assert same.first_byte is None and same.hunks == []  # the same frame: the same bytes
    assert all(c.evicted_only for c in same.checks or ())
    diff = frame_diff(store, sid, turn - 1, turn)
    assert diff.rendered == (True, True) and diff.to_dict()["verified"][1] is False
    shown = [m.get("text") for h in diff.hunks for m in h["added"]]
    assert EVICTED_BLOCK in shown, shown
    # what it showed is still named exactly, each version by its transaction
    refs = [r for c in same.checks or () for r in c.refs if "sealed_pages" not in r]
    assert refs and all(isinstance(r["tx_id"], int) for r in refs)


def test_version_at_numbers_the_version_in_force(recorded: tuple[Store, str]) -> None:
    store, sid = recorded
    file_ids = [v.id for v in store.find("file")]
    versions = max((store.history(i, with_docs=True) for i in file_ids), key=len)
    assert len(versions) >= 2
    oid = versions[0].id
    assert version_at(store, oid, versions, versions[0].valid_time, None) == 1
    assert version_at(store, oid, versions, None, versions[0].tx_id) == 1
    assert version_at(store, oid, versions, None, None) == len(versions)
    assert version_at(store, oid, versions, versions[0].valid_time - 1, None) == 0

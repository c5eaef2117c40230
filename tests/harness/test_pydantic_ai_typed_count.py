"""A typed tool return (tool search, loading a capability) goes out whole even when the policy
collapses it (pydantic-ai reads its content): it is counted as it goes out. Until 2026-12-02 a
collapsed one counted as its one-line stub, a search's 9,600-character return 40 tokens instead
of 2,400: the frame's totals and the budget undercounted what the model received."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic_ai.messages import (
    BinaryContent,
    FilePart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    ToolSearchCallPart,
    ToolSearchReturnPart,
    UserPromptPart,
)

from context_os import RetentionPolicy, Session
from context_os.context.evict import evict
from context_os.context.frames import frame_docs, verify_frame
from context_os.harness.pairing import pairing_problems
from context_os.harness.pydantic_ai import PYDANTIC_AI_PAIRING, PydanticAIAdapter, PydanticAIHook
from context_os.store.sqlite import SqliteStore
from context_os.tokens import CHARS_PER_TOKEN, estimate_tokens, image_tokens, value_chars
from tests.helpers import EAGER, png

TS = datetime(2026, 1, 2, tzinfo=UTC)
FOUND = {
    "discovered_tools": [
        {"name": f"tool_{k:02d}", "description": "Runs one kind of query " + "q" * 60} for k in range(80)
    ],
    "message": "80 tools found",
}
"""A search that found many tools: about 9,600 characters as the model reads them."""
KEEP = {"keep_recent_results": 100, "collapse_after_turns": 100}
COLLAPSE = {"keep_recent_results": 0, "collapse_after_turns": 0}


def _hook(db: SqliteStore, session: str, **policy: Any) -> PydanticAIHook:
    rules = RetentionPolicy(**{**EAGER, "history_max_tokens": None, **policy})
    return PydanticAIHook(Session.open(db, session, harness="pydantic-ai", policy=rules))


def _history() -> list[ModelMessage]:
    """A tool search with a large return, then a plain call with a short one, then two user turns."""
    search = ToolSearchCallPart(args={"queries": ["db"]}, tool_call_id="ts1")
    found = ToolSearchReturnPart(content=FOUND, tool_call_id="ts1", timestamp=TS)
    return [
        ModelRequest(parts=[UserPromptPart("find a db tool", timestamp=TS)], timestamp=TS),
        ModelResponse(parts=[search], timestamp=TS),
        ModelRequest(parts=[found], timestamp=TS),
        ModelResponse(parts=[ToolCallPart("tool_07", {"sql": "select 1"}, "c1")], timestamp=TS),
        ModelRequest(parts=[ToolReturnPart("tool_07", "1", "c1", timestamp=TS)], timestamp=TS),
        ModelResponse(parts=[TextPart("found it")], timestamp=TS),
        ModelRequest(parts=[UserPromptPart("thanks", timestamp=TS)], timestamp=TS),
    ]


def _run(db: SqliteStore, session: str, **policy: Any) -> tuple[PydanticAIHook, list[ModelMessage]]:
    hook, msgs = _hook(db, session, **policy), _history()
    for n in (3, 5, len(msgs)):
        out = hook.transform_context(msgs[:n])
    return hook, out


def test_a_collapsed_typed_return_counts_what_is_sent(db):
    """The same bytes go out whether the search's return is collapsed or not: the same tokens
    are counted, in the frame's total and in its chat pool."""
    kept_hook, kept = _run(db, "kept", **KEEP)
    hook, out = _run(db, "collapsed", **COLLAPSE)
    found = next(o for o in hook.session.view.objects.values() if o.meta["call_id"] == "ts1")
    assert found.collapsed  # the policy collapsed it
    assert ModelMessagesTypeAdapter.dump_json(out) == ModelMessagesTypeAdapter.dump_json(kept)
    returns = [p for m in out if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolSearchReturnPart)]
    assert [p.content for p in returns] == [FOUND]
    frame, kept_frame = frame_docs(db, "collapsed")[-1]["content"], frame_docs(db, "kept")[-1]["content"]
    whole = estimate_tokens(len(returns[0].model_response_str()))
    assert whole > 2000
    assert frame["tokens"] == kept_frame["tokens"] > whole  # it counted 40 (its stub) before
    assert frame["pools"] == kept_frame["pools"]
    assert pairing_problems(PYDANTIC_AI_PAIRING, out) == []
    assert all(verify_frame(db, f).ok for s in ("kept", "collapsed") for f in frame_docs(db, s))
    assert kept_hook.session.view.objects  # (the sessions stay open to the end)


def test_collapsing_a_typed_return_frees_nothing_and_keeps_the_prefix(db):
    """Collapsing it changes nothing that goes out: it frees no tokens for the budget and the
    policy, and the context it is in stays a prefix of the next one."""
    hook = _hook(db, "p", **KEEP)
    msgs = _history()
    hook.transform_context(msgs[:5])
    view = hook.session.view
    found = next(o for o in view.objects.values() if o.meta["call_id"] == "ts1")
    assert view.collapse_gain(found) == 0
    before = view.render().tokens
    hook.session.deactivate(found.id)  # the agent collapses it
    assert found.collapsed and view.render().tokens == before
    hook.transform_context(msgs)
    last = frame_docs(db, "p")[-1]["content"]
    assert last["prefix_tokens"] >= before  # nothing before the new messages changed
    assert all(verify_frame(db, f).ok for f in frame_docs(db, "p"))


def test_an_evicted_typed_return_goes_out_as_a_plain_return(db):
    """Its content is kept with its tool-call object: evicted, it is erased with it, and the call
    is answered by a plain return saying so."""
    hook, _ = _run(db, "p", **COLLAPSE)
    found = next(o for o in hook.session.view.objects.values() if o.meta["call_id"] == "ts1")
    evict(db, found.id)
    out = hook.transform_context([*_history(), ModelResponse(parts=[TextPart("ok")], timestamp=TS)])
    sent = ModelMessagesTypeAdapter.dump_json(out).decode()
    assert "tool_42" not in sent and "erased" in sent
    assert pairing_problems(PYDANTIC_AI_PAIRING, out) == []


def test_what_the_providers_own_tools_and_files_put_in_front_of_the_model_counts() -> None:
    """A response's native tools' calls and returns (a web search's query and results) and the
    files it made (a generated image) go to the model at every later call: counted apart
    (``block_chars``), where they counted nothing before (only the response's text did)."""
    pages = [{"url": f"https://example.org/{k}", "title": f"Page {k}", "text": "t" * 2_000} for k in range(3)]
    image = BinaryContent(png(512, 512), media_type="image/png")
    search = NativeToolCallPart("web_search", {"query": "context windows"}, "ws1")
    found = NativeToolReturnPart("web_search", pages, "ws1", timestamp=TS)
    response = ModelResponse(parts=[search, found, FilePart(image), TextPart("Here.")], timestamp=TS)
    [m] = PydanticAIAdapter().translate(response, 0)
    assert m["text"] == "Here."
    assert (
        m["block_chars"]
        == value_chars({"query": "context windows"}) + value_chars(pages) + image_tokens(image.data) * CHARS_PER_TOKEN
    )
    assert m["block_chars"] > 6_000

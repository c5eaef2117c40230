"""The Responses API's items beyond messages, function calls and the built-in shells: those a
client adds for the responses after it (Codex's reasoning-effort changes, tools made available, a
request to compact), a tool search (the client's, or the provider's), and the provider's own
tools' items (a web search, a remote MCP server's tools and calls). Each is managed where it
made the whole conversation fail open before, goes upstream as it came, and counts."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from openai.types.responses import ResponseInputItemParam
from pydantic import TypeAdapter

from context_os import RetentionPolicy, Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.harness.openai import OpenAIAdapter, OpenAIHook
from context_os.harness.responses import to_chat, to_items
from context_os.server.proxy import derive_session
from context_os.store.sqlite import SqliteStore
from context_os.tokens import value_chars
from tests.helpers import EAGER, whole_png
from tests.proxy.running import Running, verified_frames
from tests.proxy.test_responses import TOOLS, codex_conversation, user
from tests.proxy.upstream import Upstream, call, upstream

pytestmark = pytest.mark.timeout(120)

_INPUT_ITEM: TypeAdapter[Any] = TypeAdapter(ResponseInputItemParam)
FOUND = [
    {"type": "function", "name": f"calendar_{k}", "description": "Calendar. " * 60, "parameters": {}} for k in range(8)
]
"""The tools a client's tool search found: 8 deferred tools, ~5k characters."""
SEARCH = [
    {"type": "tool_search_call", "call_id": "ts1", "execution": "client", "status": "completed",
     "arguments": {"query": "calendar", "limit": 8}},
    {"type": "tool_search_output", "call_id": "ts1", "execution": "client", "status": "completed", "tools": FOUND},
]  # fmt: skip
"""Codex looks up the tools of its apps and MCP servers it was not given at the start."""
MCP = [
    {"type": "mcp_list_tools", "id": "mcpl_0", "server_label": "docs",
     "tools": [{"name": "lookup", "input_schema": {"type": "object"}, "description": "Look it up."}]},
    {"type": "mcp_approval_request", "id": "mcpr_0", "server_label": "docs", "name": "lookup", "arguments": "{}"},
    {"type": "mcp_approval_response", "approval_request_id": "mcpr_0", "approve": True},
    {"type": "mcp_call", "id": "mcp_0", "server_label": "docs", "name": "lookup", "arguments": "{}",
     "output": "the docs page " * 100, "status": "completed"},
    {"type": "message", "role": "assistant", "content": "The docs say so."},
]  # fmt: skip
"""A remote MCP server the provider calls, once the client approved the call."""


def effort(level: str) -> dict[str, Any]:
    return {"type": "configuration_update", "reasoning": {"effort": level}}


def test_the_items_round_trip_and_each_keeps_its_kind() -> None:
    """Unit: a configuration update, tools added and a compaction request are developer messages
    without text; a client's tool search is a call and its output (the tools found as the text);
    the provider's tool search and MCP items stay among its response's; every item comes back as
    it came, each one the openai SDK types."""
    server_search = [{**i, "id": f"s{k}", "call_id": None, "execution": "server"} for k, i in enumerate(SEARCH)]
    items = [
        user("plan my week"),
        effort("high"),
        {"type": "additional_tools", "role": "developer", "tools": FOUND[:2]},
        *SEARCH,
        *server_search,
        *MCP,
        user("and next week?"),
        effort("low"),
        {"type": "compaction_trigger"},
    ]
    chat = to_chat(items)
    roles = [(m["role"], m.get("tool_calls", [{}])[0].get("function", {}).get("name")) for m in chat]
    assert roles == [("user", None), ("developer", None), ("developer", None), ("assistant", "tool_search"),
                     ("tool", None), ("assistant", None), ("user", None), ("developer", None),
                     ("developer", None)]  # fmt: skip
    assert json.loads(chat[4]["content"]) == FOUND and chat[1]["content"] == ""
    assert [i["type"] for i in chat[5]["ctxos_items"]] == [i["type"] for i in [*server_search, *MCP]]
    assert to_items(json.loads(json.dumps(chat))) == items
    for item in items:
        _INPUT_ITEM.validate_python(item)
    # collapsed by the engine, a tool search's output goes whole all the same: the tools found
    # are how the model calls them
    chat[4]["content"] = "[tool_search output, 1,300 tokens, collapsed]"
    assert to_items(chat)[4] == SEARCH[1]


def test_what_they_put_in_front_of_the_model_counts() -> None:
    """The tools an item adds count as a developer message's characters; an MCP server's tools
    and call among the response's items as the response's; a tool search's output by its tools."""
    added = {"type": "additional_tools", "role": "developer", "tools": FOUND}
    chat = to_chat([user("go"), added, *SEARCH, *MCP])
    adapter = OpenAIAdapter()
    msgs = [adapter.translate(m, k) for k, m in enumerate(chat)]
    assert msgs[1]["text"] == "" and msgs[1]["block_chars"] == value_chars(added) > 5_000
    assert msgs[4]["block_chars"] == sum(value_chars(i) for i in MCP[:4]) > 1_400
    assert msgs[3]["text"] == json.dumps(FOUND)


def test_a_tool_searchs_output_counts_whole_where_old_outputs_collapse(tmp_path: Path) -> None:
    """The engine is told that the tools found go upstream whole (``view.SENT_WHOLE``): it shows
    and counts them so, where it collapses the other old outputs (it counted a stub before)."""
    items = codex_conversation(30)
    items[3:3] = SEARCH
    with SqliteStore(tmp_path / "s.db") as store:
        hook = OpenAIHook(Session.open(store, "s", harness="openai", policy=RetentionPolicy(**EAGER)))
        out = hook.transform_context(to_chat(items))
    [found] = [m for m in out if m.get("tool_call_id") == "ts1"]
    assert found["content"] == json.dumps(FOUND)
    assert sum("collapsed" in str(m["content"]) for m in out if m["role"] == "tool") > 20


def test_a_codex_conversation_with_tool_search_and_effort_changes_is_managed(proxy: Running, up: Upstream) -> None:
    """Through the proxy, past the size context_os manages from: nothing fails open, old shell
    outputs go collapsed, the tool search's output goes whole, every configuration update goes
    in its order (behind no horizon), and every frame re-renders."""
    items = codex_conversation(60)
    items[3:3] = [effort("high"), *SEARCH, *MCP]
    items += [effort("low")]
    proxy.openai().responses.create(model="m", input=items, tools=TOOLS)  # type: ignore[arg-type]
    assert proxy.proxy.counts["failed_open"] == 0
    sent = up.requests[0]["input"]
    assert len(json.dumps(sent)) < 0.6 * len(json.dumps(items))
    assert [i["reasoning"]["effort"] for i in sent if i.get("type") == "configuration_update"] == ["high", "low"]
    assert [i for i in sent if i.get("type") == "tool_search_output"] == [SEARCH[1]]
    assert [i for i in sent if i.get("type", "").startswith("mcp_")] == MCP[:4]
    collapsed = [i for i in sent if i.get("type") == "function_call_output" and "collapsed" in i["output"]]
    assert len(collapsed) > 40
    assert verified_frames(proxy.store, derive_session("responses", {"input": items})) == 1


PROVIDER_TOOLS = [
    {"type": "web_search"},
    {"type": "mcp", "server_label": "docs", "server_url": "https://docs.example.org/mcp", "require_approval": "never"},
    {"type": "tool_search"},
]


def test_the_providers_own_items_stay_where_the_model_wrote_them_in_our_rounds(tmp_path: Path) -> None:
    """The model searches the web, calls an MCP server and searches its tools (the provider runs
    all three), then calls ``pin``: the proxy's next round holds those items before our call,
    once. Streamed, the client was given them too; in its next request the exchange is spliced
    after its copies, not before them (the API refuses an item twice: it was sent twice). Before,
    such a conversation failed open from then on."""
    replies = [call("pin", id="r2"), "pinned, done", call("pin", id="r2"), "held, done", "later"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            ask: dict[str, Any] = {"model": "m", "tools": [*TOOLS, *PROVIDER_TOOLS]}
            items: list[dict[str, Any]] = [user("what do the docs say?")]
            got = client.responses.create(input=items, **ask)
            assert got.output_text == "pinned, done"
            ids = [i.get("id") or i["type"] for i in up.requests[1]["input"]]
            assert ids[1:] == ["ws_1", "mcpl_1", "mcp_1", "tsc_1", "tso_1", "fc_1", "function_call_output"]
            items += [i.model_dump(exclude_none=True) for i in got.output]
            items.append(user("and the changelog?"))
            events = list(client.responses.create(input=items, stream=True, **ask))
            done = [e.item.model_dump(exclude_none=True) for e in events if e.type == "response.output_item.done"]
            served = ("ws", "mcpl", "mcp", "tsc", "tso")
            assert [i["id"] for i in done] == [*(f"{p}_{n}" for n in (3, 4) for p in served), "msg_4"]
            items += done
            client.responses.create(input=[*items, user("next")], **ask)
            assert len(up.requests) == 5  # every request accepted: no item twice
            ids = [i.get("id") or i["type"] for i in up.requests[-1]["input"]]
            at = ids.index("ws_3")
            assert ids[at : at + 8] == ["ws_3", "mcpl_3", "mcp_3", "tsc_3", "tso_3", "fc_3", "function_call_output",
                                        "ws_4"]  # fmt: skip
            assert running.proxy.counts["failed_open"] == 0
            sid = derive_session("responses", {"input": items})
            assert verified_frames(running.store, sid) == 5
        finally:
            running.close()


def screenshot() -> str:
    """A screenshot of 1,000 × 600 pixels as a ``data:`` URL (800 tokens as an image)."""
    return "data:image/png;base64," + base64.b64encode(whole_png(1_000, 600)).decode()


def computer_use(steps: int) -> list[dict[str, Any]]:
    """A computer-use loop of ``steps`` actions, each answered by a screenshot, a function call with
    a long output among them, as the Agents SDK's ``ComputerTool`` sends them."""
    items: list[dict[str, Any]] = [user("book the cheapest flight to Lisbon")]
    for n in range(steps):
        action = {"type": "click", "button": "left", "x": 100 + n, "y": 200}
        items.append({"type": "computer_call", "id": f"cu_{n}", "call_id": f"c{n}", "action": action,
                      "pending_safety_checks": [], "status": "completed"})  # fmt: skip
        items.append({"type": "computer_call_output", "call_id": f"c{n}", "acknowledged_safety_checks": [],
                      "output": {"type": "computer_screenshot", "image_url": screenshot()}})  # fmt: skip
        if n % 3 == 0:
            arguments = json.dumps({"query": f"fares {n}"})
            items.append({"type": "function_call", "call_id": f"f{n}", "name": "search_fares", "arguments": arguments})
            items.append({"type": "function_call_output", "call_id": f"f{n}", "output": f"fare {n}: " + "9" * 6_000})
    items.append({"type": "message", "role": "assistant", "content": "Booked."})
    return items


def test_a_computer_use_loop_round_trips_as_the_sdk_types_it() -> None:
    """Unit: a computer call (one action, or batched ``actions``) is a call of ``computer``, its
    screenshot (by URL or uploaded file) an image part of its output; both come back as they came."""
    items = computer_use(2)
    items[1] = {**{k: v for k, v in items[1].items() if k != "action"},
                "actions": [{"type": "type", "text": "Lisbon"}, {"type": "keypress", "keys": ["ENTER"]}]}  # fmt: skip
    items[2]["output"] = {"type": "computer_screenshot", "file_id": "file_shot"}
    chat = to_chat(items)
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "assistant", "tool", "assistant", "tool",
                                         "assistant"]  # fmt: skip
    assert chat[1]["tool_calls"][0]["function"]["name"] == "computer"
    assert json.loads(chat[1]["tool_calls"][0]["function"]["arguments"]) == {"actions": items[1]["actions"]}
    assert chat[2]["content"] == [{"type": "image_url", "image_url": {"url": "", "file_id": "file_shot"}}]
    assert to_items(json.loads(json.dumps(chat))) == items
    for item in items:
        _INPUT_ITEM.validate_python(item)


def test_a_computer_use_loop_is_managed_its_screenshots_sent_and_counted_whole(proxy: Running, up: Upstream) -> None:
    """Through the proxy, past the size context_os manages from: nothing fails open (it did at
    every call before); the function outputs collapse, but every screenshot goes as it came (the
    API takes nothing else as a computer call's output) and the engine counts it so."""
    items = computer_use(60)
    computer = {"type": "computer_use_preview", "display_width": 1000, "display_height": 600, "environment": "browser"}
    proxy.openai().responses.create(model="m", input=items, tools=[computer], truncation="auto")  # type: ignore[arg-type, list-item]
    assert proxy.proxy.counts["failed_open"] == 0
    sent = up.requests[0]["input"]
    shots = [i for i in sent if i.get("type") in ("computer_call", "computer_call_output")]
    assert shots == [i for i in items if i.get("type") in ("computer_call", "computer_call_output")]
    fares = [i for i in sent if i.get("type") == "function_call_output"]
    assert len(fares) == 20 and sum("collapsed" in f["output"] for f in fares) > 15
    sid = derive_session("responses", {"input": items})
    assert verified_frames(proxy.store, sid) == 1
    [frame] = frame_docs(proxy.store, sid)
    assert frame["content"]["tokens"] > 60 * 800  # every screenshot counted


def test_the_history_horizon_hides_old_screenshots_with_their_calls(tmp_path: Path) -> None:
    """A screenshot is never collapsed, but behind the history horizon it goes with its call: a
    long loop keeps the newest ones only, each still after its call."""
    items: list[dict[str, Any]] = []
    for item in computer_use(30):
        items.append(item)
        if item.get("type") == "computer_call_output" and item["call_id"] in ("c5", "c10", "c15", "c20", "c25"):
            items += [{"type": "message", "role": "assistant", "content": "ok"}, user(f"go on after {item['call_id']}")]
    policy = RetentionPolicy(**{**EAGER, "history_max_tokens": 3_000, "history_keep_percent": 30})
    with SqliteStore(tmp_path / "s.db") as store:
        hook = OpenAIHook(Session.open(store, "s", harness="openai", policy=policy))
        for n in range(10, len(items), 5):
            hook.transform_context(to_chat(items[:n]))
        sent = to_items(hook.transform_context(to_chat(items)))
        assert all(verify_frame(store, f).ok for f in frame_docs(store, "s"))
    assert hook.session.view.horizon > 0
    calls = [i["call_id"] for i in sent if i.get("type") == "computer_call"]
    shots = [i["call_id"] for i in sent if i.get("type") == "computer_call_output"]
    assert calls == shots and 0 < len(shots) < 15

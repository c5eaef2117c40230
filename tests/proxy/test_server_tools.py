"""Anthropic's server tools (web search, code execution: the provider runs them) through the
proxy: their blocks kept where the model wrote them, in our tools' rounds too, and counted in the
session's tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.proxy.running import Running
from tests.proxy.upstream import call, searched, upstream

WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}


def _ours(n: int, name: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": {"id": "r1"}}


def test_a_server_tools_blocks_stay_where_the_model_wrote_them_in_our_rounds(tmp_path: Path) -> None:
    """The model searches the web, then calls one of our tools: the next round sends its answer
    back whole, its search first (JSON, streamed), and the client's next request, which holds the
    search the stream gave it, sends each search once, where the model made it."""
    replies = [call("pin", id="r1"), "json done", call("unpin", id="r1"), "stream done", "later"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.anthropic()
            ask: dict[str, Any] = {"model": "m", "max_tokens": 2048, "tools": [WEB_SEARCH]}
            got = client.messages.create(messages=[{"role": "user", "content": "hi"}], **ask)
            assert [b.type for b in got.content] == ["server_tool_use", "web_search_tool_result", "text"]
            assert up.requests[1]["messages"][-2]["content"] == [*searched(1), _ours(1, "pin")]
            streamed = [{"role": "user", "content": "again"}]
            with client.messages.stream(messages=streamed, **ask) as s:  # type: ignore[arg-type]
                final = s.get_final_message()
            kinds = [b.type for b in final.content]
            assert kinds == ["server_tool_use", "web_search_tool_result"] * 2 + ["text"]
            assert up.requests[3]["messages"][-2]["content"] == [*searched(3), _ours(3, "unpin")]
            history = [*streamed, {"role": "assistant", "content": [b.model_dump() for b in final.content]}]
            client.messages.create(messages=[*history, {"role": "user", "content": "and now?"}], **ask)
            assert len(up.requests) == 5 and up.status == 200
            sent = up.requests[4]["messages"]
            assert [[b["type"] for b in m["content"]] for m in sent[-4:-1]] == [
                ["server_tool_use", "web_search_tool_result", "tool_use"],
                ["tool_result"],
                ["server_tool_use", "web_search_tool_result", "text"],
            ]
            assert sent[-4]["content"][:2] == list(searched(3))  # as the model wrote it, round 1
            assert [sent[-2]["content"][0]["id"], sent[-2]["content"][1]["tool_use_id"]] == ["srvtoolu_4"] * 2
        finally:
            running.close()

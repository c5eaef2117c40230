"""The tools a provider runs itself (Anthropic's server tools, the Responses API's hosted tools,
Gemini's code execution): their blocks kept where the model wrote them, in our tools' rounds too,
and counted in the session's tokens."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import pytest

from context_os.harness import gemini, responses
from context_os.harness.openai import OpenAIHook
from context_os.store.sqlite import SqliteStore
from tests.helpers import eager_hook
from tests.proxy.running import Running
from tests.proxy.upstream import Upstream, call, searched, upstream

WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}


@contextmanager
def _anthropic(tmp_path: Path, replies: list[Any]) -> Iterator[tuple[anthropic.Anthropic, Upstream]]:
    """An Anthropic client of a proxy in front of a scripted model replying ``replies``."""
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            yield running.anthropic(), up
        finally:
            running.close()


def _ours(n: int, name: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": {"id": "r1"}}


def test_a_server_tools_blocks_stay_where_the_model_wrote_them_in_our_rounds(tmp_path: Path) -> None:
    """The model searches the web, then calls one of our tools: the next round sends its answer
    back whole, its search first (JSON, streamed), and the client's next request, which holds the
    search the stream gave it, sends each search once, where the model made it."""
    replies = [call("pin", id="r1"), "json done", call("unpin", id="r1"), "stream done", "later"]
    with _anthropic(tmp_path, replies) as (client, up):
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


CODE = "import statistics\n" + "print(statistics.mean(range(1000)))\n" * 120
LOGS = "499.5\n" * 1_500

RESPONSES = (
    [{"type": "message", "role": "user", "content": "What is the mean?"}],
    {
        "type": "code_interpreter_call",
        "id": "ci_1",
        "status": "completed",
        "container_id": "cntr_1",
        "code": CODE,
        "outputs": [{"type": "logs", "logs": LOGS}],
    },  # fmt: skip
    [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is 499.5."}]}],
)
GEMINI = (
    [{"role": "user", "parts": [{"text": "What is the mean?"}]}],
    {
        "role": "model",
        "parts": [
            {"executableCode": {"language": "PYTHON", "code": CODE}},
            {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": LOGS}},
        ],
    },  # fmt: skip
    [{"role": "model", "parts": [{"text": "It is 499.5."}]}],
)


@pytest.mark.parametrize(("api", "conversation"), [("responses", RESPONSES), ("gemini", GEMINI)])
def test_the_code_a_provider_ran_counts_in_the_tokens(tmp_path: Path, api: str, conversation: Any) -> None:
    """The Responses API's code interpreter, Gemini's code execution: their code and output come
    back in the model's turn, which the model reads as it is, and count in what a call costs (by
    the characters of their JSON)."""
    first, ran, last = conversation
    chat = responses.to_chat if api == "responses" else gemini.to_chat
    with SqliteStore(tmp_path / "s.db") as store:
        hook = eager_hook(OpenAIHook, store, "ran", "openai")
        bare = eager_hook(OpenAIHook, store, "not", "openai")
        hook.transform_context(chat([*first, ran, *last]))
        bare.transform_context(chat([*first, *last]))
        assert hook.last is not None and bare.last is not None
        ran_tokens = (len(CODE) + len(LOGS)) // 4
        assert ran_tokens < hook.last.tokens_full - bare.last.tokens_full < ran_tokens + 40
        assert hook.last.tokens - bare.last.tokens == hook.last.tokens_full - bare.last.tokens_full


def test_an_image_the_provider_generated_counts_as_the_image_it_is(tmp_path: Path) -> None:
    """The Responses API's image generation: its image (base64 PNG) comes back in the model's
    turn, and counts as an image of its size (about width x height / 750 tokens), not as its text."""
    from tests.helpers import whole_png

    image = base64.b64encode(whole_png(600, 500)).decode()
    made = {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": image}
    first, _, last = RESPONSES
    with SqliteStore(tmp_path / "s.db") as store:
        hook = eager_hook(OpenAIHook, store, "drew", "openai")
        bare = eager_hook(OpenAIHook, store, "not", "openai")
        hook.transform_context(responses.to_chat([*first, made, *last]))
        bare.transform_context(responses.to_chat([*first, *last]))
        assert hook.last is not None and bare.last is not None
        assert hook.last.tokens_full - bare.last.tokens_full == 600 * 500 // 750


def test_the_code_gemini_ran_stays_where_the_model_wrote_it_in_our_rounds(tmp_path: Path) -> None:
    """Gemini runs code (its code execution tool), then calls one of our tools: the next round
    sends the code and its output back with the call (JSON, streamed), and the client's next
    request, which holds the code the stream gave it, sends each part once, where the model made
    it."""
    from google.genai import types

    from tests.proxy.upstream import ran_code

    replies: list[Any] = [call("pin", id="r1"), "json done", call("unpin", id="r1"), "stream done", "later"]
    tools = [types.Tool(code_execution=types.ToolCodeExecution())]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up, gemini_upstream=up.url)
        try:
            client = running.gemini()
            ask = types.GenerateContentConfig(tools=tools)  # type: ignore[arg-type]
            got = client.models.generate_content(model="gemini-2.5-pro", contents="hi", config=ask)
            assert got.text == "json done" and len(up.requests) == 2
            assert up.requests[1]["contents"][-2]["parts"][:2] == ran_code(1)
            contents: list[Any] = [{"role": "user", "parts": [{"text": "again"}]}]
            chunks = list(client.models.generate_content_stream(model="gemini-2.5-pro", contents=contents, config=ask))
            parts = [p for ch in chunks for p in ch.candidates[0].content.parts]  # type: ignore[index,union-attr]
            assert up.requests[3]["contents"][-2]["parts"][:2] == ran_code(3)
            ran = [p.model_dump(mode="json", by_alias=True, exclude_none=True) for p in parts]
            assert [next(iter(p)) for p in ran] == ["executableCode", "codeExecutionResult"] * 2 + ["text"] * 2
            contents += [{"role": "model", "parts": ran}, {"role": "user", "parts": [{"text": "and now?"}]}]
            client.models.generate_content(model="gemini-2.5-pro", contents=contents, config=ask)
            sent = up.requests[4]["contents"]
            assert [[next(iter(p)) for p in c["parts"]] for c in sent[-4:-1]] == [
                ["executableCode", "codeExecutionResult", "functionCall"],
                ["functionResponse"],
                ["executableCode", "codeExecutionResult", "text", "text"],  # (the stream's two)
            ]
            assert sent[-4]["parts"][:2] == ran_code(3) and sent[-2]["parts"][:2] == ran_code(4)
        finally:
            running.close()


def test_our_rounds_go_on_in_the_container_the_models_code_ran_in(tmp_path: Path) -> None:
    """Anthropic's code execution runs in a container, which a request names to go on in it: a
    round after one of our tools runs in the container of the round before (the files its code
    wrote are there), JSON and streamed, unless the client named one itself."""
    code = {"type": "code_execution_20250825", "name": "code_execution"}
    replies = [call("pin", id="r1"), "json done", call("unpin", id="r1"), "stream done", call("pin", id="r1"), "mine"]
    with _anthropic(tmp_path, replies) as (client, up):
        ask: dict[str, Any] = {"model": "m", "max_tokens": 100, "tools": [code]}
        got = client.messages.create(messages=[{"role": "user", "content": "hi"}], **ask)
        assert got.container is not None and got.container.id == "container_2"
        with client.messages.stream(messages=[{"role": "user", "content": "again"}], **ask) as s:  # type: ignore[arg-type]
            s.get_final_message()
        client.messages.create(messages=[{"role": "user", "content": "mine"}], container="container_x", **ask)
        assert [r.get("container") for r in up.requests] == [None, "container_1", None, "container_3"] + [
            "container_x"
        ] * 2

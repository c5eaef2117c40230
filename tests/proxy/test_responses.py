"""``ctxos proxy`` in front of the OpenAI Responses API (Codex CLI's only API), with the real
``openai`` SDK's ``responses`` client and the scripted provider of tests/proxy/upstream.py: the
provider gets the assembled context as input items, items context_os left alone go as they came
(reasoning in its place), streams come through, and what it cannot manage goes as it came."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseInputItemParam
from pydantic import TypeAdapter

from context_os import Session
from context_os.context.tools import CONTEXT_TOOLS
from context_os.errors import MalformedMessage
from context_os.harness.openai import OpenAIHook
from context_os.harness.responses import to_chat, to_items
from context_os.harness.toolnames import preset
from context_os.harness.virtual_files import VirtualFiles
from context_os.server.proxy import derive_session
from context_os.store.sqlite import SqliteStore
from tests.proxy.running import Running, verified_frames
from tests.proxy.upstream import ToolCall, Upstream, call, reasoning_item, upstream

pytestmark = pytest.mark.timeout(120)

INSTRUCTIONS = "You are Codex, a coding agent."
TOOLS = [
    {"type": "function", "name": "shell_command", "parameters": {"type": "object", "properties": {}}},
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch."},
]


def user(text: str, role: str = "user") -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


def codex_conversation(steps: int, output_chars: int = 4_000) -> list[dict[str, Any]]:
    """Input items as Codex sends them: its developer and environment messages, a task, then
    ``steps`` responses of a reasoning item and a shell call, each answered, and a patch."""
    items = [
        user("<permissions instructions>workspace-write</permissions instructions>", "developer"),
        user("<environment_context>\n  <cwd>/work/app</cwd>\n</environment_context>"),
        user("find why the build fails"),
    ]
    for n in range(steps):
        items.append(
            {"type": "reasoning", "summary": [], "content": None, "encrypted_content": f"gAAAA{n:04d}" + "Q" * 300}
        )
        arguments = json.dumps({"command": f"sed -n '1,200p' m{n}.py", "workdir": "."})
        items.append({"type": "function_call", "name": "shell_command", "arguments": arguments, "call_id": f"call_{n}"})
        output = f"Exit code: 0\nWall time: 0 seconds\nOutput:\n# module {n}\n" + "x = 1\n" * (output_chars // 6)
        items.append({"type": "function_call_output", "call_id": f"call_{n}", "output": output})
    patch = "*** Begin Patch\n*** Update File: m0.py\n@@\n-x = 1\n+x = 2\n*** End Patch"
    items.append(
        {"type": "custom_tool_call", "status": "completed", "call_id": "p1", "name": "apply_patch", "input": patch}
    )
    items.append(
        {
            "type": "custom_tool_call_output",
            "call_id": "p1",
            "output": "Success. Updated the following files:\nM m0.py\n",
        }
    )
    items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Fixed m0.py."}]})
    items.append(user("now run the tests"))
    return items


def well_formed(items: list[dict[str, Any]]) -> None:
    """Every output answers a call before it; a reasoning item is followed by the item it came before."""
    called: set[str] = set()
    for k, item in enumerate(items):
        kind = item.get("type", "message")
        calls = ("function_call", "custom_tool_call")
        assert kind in {"message", "reasoning", *calls, *(c + "_output" for c in calls)}
        if kind in calls:
            called.add(item["call_id"])
        if kind.endswith("_output"):
            assert item["call_id"] in called, item
        if kind == "reasoning":
            assert items[k + 1].get("type") in ("function_call", "custom_tool_call", "message", "reasoning")


def test_the_provider_gets_the_assembled_input_items(proxy: Running, up: Upstream, tmp_path: Path) -> None:
    items = codex_conversation(60)  # ~65k tokens: past manage_from_tokens
    got = proxy.openai().responses.create(model="m", instructions=INSTRUCTIONS, input=items, tools=TOOLS)  # type: ignore[arg-type]
    assert got.output_text == "first answer here"
    sent = up.requests[0]
    # everything but the input and the tools as it came: the client's tools, then ours (flat)
    assert (sent["model"], sent["instructions"], sent["tools"][:2]) == ("m", INSTRUCTIONS, TOOLS)
    assert {t["name"] for t in sent["tools"][2:]} == set(CONTEXT_TOOLS)
    assert all(t["type"] == "function" and "parameters" in t for t in sent["tools"][2:])
    well_formed(sent["input"])
    # what went upstream is what context_os assembles for this conversation (another store, the same bytes)
    with SqliteStore(tmp_path / "check.db") as check:
        sid = derive_session("responses", {"instructions": INSTRUCTIONS, "input": items})
        session = Session.open(check, sid, harness="openai")
        # Codex's shell reads and patches keep its files as objects, by the codex preset's names of its tools
        files = VirtualFiles(session, root=None, tool_names=preset("codex").only({"shell_command", "apply_patch"}))
        expected = to_items(OpenAIHook(session, on_sync=files.observe).transform_context(to_chat(items)))
    assert sent["input"] == json.loads(json.dumps(expected))
    assert len(json.dumps(sent["input"])) < 0.6 * len(json.dumps(items))
    # the newest items go as they came, reasoning included (a read's output, whose text its file
    # object shows, collapsed), then context_os's own messages: the files the reads showed (m0.py
    # as patched) and the list of objects
    ours = [i for i in sent["input"] if str(i.get("content")).startswith("<context_os>")]
    kept = sent["input"][: len(sent["input"]) - len(ours)]
    assert (kept[-7:-5], kept[-4:]) == (items[-7:-5], items[-4:])
    assert kept[-5]["output"].startswith("[shell_command output, ") and sent["input"][-len(ours) :] == ours
    assert any('path="m0.py" version="2">\nx = 2\n' in i["content"] for i in ours)
    # old outputs were collapsed: rebuilt items, their call ids kept
    collapsed = [i for i in sent["input"] if i.get("type") == "function_call_output" and len(i["output"]) < 1000]
    assert collapsed and all(i["call_id"].startswith("call_") for i in collapsed)
    assert verified_frames(proxy.store, sid) == 1


def test_a_short_conversation_goes_upstream_item_for_item(proxy: Running, up: Upstream) -> None:
    """Below the size context_os manages from, the input is unchanged: images, reasoning, a
    custom tool's call and output, the assistant's message, every field as the client sent it."""
    items = codex_conversation(3, output_chars=300)
    items.insert(3, {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "this screenshot"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
    ]})  # fmt: skip
    items.insert(4, {"role": "user", "content": "a plain message"})
    items.insert(
        8, {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "x"}}
    )
    proxy.openai().responses.create(model="m", instructions=INSTRUCTIONS, input=items)  # type: ignore[arg-type]
    assert up.requests[0]["input"] == items


def test_files_and_images_by_id_are_managed_and_keep_every_field(proxy: Running, up: Upstream) -> None:
    """A PDF or an image the client uploaded (``file_id``), a file by URL, an image's ``detail``:
    the conversation is managed, and a message context_os rewrote (a secret redacted in its text)
    goes upstream with all of them as the client sent them."""
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    attached = [
        {"type": "input_image", "file_id": "file-img", "detail": "high"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
        {"type": "input_file", "file_id": "file-pdf", "filename": "spec.pdf"},
        {"type": "input_file", "file_url": "https://example.com/spec.pdf"},
    ]
    items = codex_conversation(60)
    items.insert(
        2, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"token {token}"}, *attached]}
    )
    proxy.openai().responses.create(model="m", instructions=INSTRUCTIONS, input=items)  # type: ignore[arg-type]
    assert proxy.proxy.counts["failed_open"] == 0
    sent = [i for i in up.requests[0]["input"] if i.get("role") == "user" and len(i.get("content") or ()) == 5]
    assert len(sent) == 1 and sent[0]["content"][1:] == attached
    assert token not in json.dumps(up.requests[0]["input"])


def view_image(call_id: str, url: str) -> list[dict[str, Any]]:
    """Codex's ``view_image`` call and its output: the image as an ``input_image`` part."""
    arguments = json.dumps({"path": "shot.png"})
    return [
        {"type": "function_call", "name": "view_image", "arguments": arguments, "call_id": call_id},
        {"type": "function_call_output", "call_id": call_id,
         "output": [{"type": "input_text", "text": "shot.png"}, {"type": "input_image", "image_url": url}]},
    ]  # fmt: skip


def test_an_image_a_tool_gave_is_managed_as_its_output(proxy: Running, up: Upstream) -> None:
    """An output of an image (Codex's ``view_image``) is a tool output like any other: the
    conversation is managed (it went upstream unmanaged before, from that call on), the image goes
    as it came while its output shows whole, and an old one collapses with its output (the image
    counted while it was shown)."""
    old, new = "data:image/png;base64," + "A" * 40_000, "data:image/png;base64," + "B" * 400
    items = codex_conversation(60)
    items[3:3] = view_image("img_old", old)
    items[-1:-1] = view_image("img_new", new)
    proxy.openai().responses.create(model="m", instructions=INSTRUCTIONS, input=items)  # type: ignore[arg-type]
    assert proxy.proxy.counts["failed_open"] == 0
    sent = {i["call_id"]: i for i in up.requests[0]["input"] if i.get("type") == "function_call_output"}
    assert sent["img_new"] == items[-2]  # the image as it came
    assert isinstance(sent["img_old"]["output"], str) and "A" * 100 not in json.dumps(up.requests[0]["input"])


def test_a_stream_comes_through(proxy: Running, up: Upstream) -> None:
    stream = proxy.openai().responses.create(model="m", input=codex_conversation(60), stream=True)  # type: ignore[arg-type]
    events = list(stream)
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert (deltas, events[-1].type) == ("first answer here", "response.completed")
    assert len(json.dumps(up.requests[0]["input"])) < 0.6 * len(json.dumps(codex_conversation(60)))


def test_what_cannot_be_managed_goes_as_it_came(proxy: Running, up: Upstream) -> None:
    client = proxy.openai()
    # the provider holds the conversation: the input is only what is new
    client.responses.create(model="m", previous_response_id="resp_0", input="go on")
    assert up.requests[0]["input"] == "go on" and up.requests[0]["previous_response_id"] == "resp_0"
    assert proxy.store.find("session") == []
    # an item context_os does not manage: the request goes as it came (failing open)
    items = [*codex_conversation(2), {"type": "item_reference", "id": "msg_0"}]
    client.responses.create(model="m", input=items)  # type: ignore[arg-type]
    assert up.requests[1]["input"] == items
    assert proxy.proxy.counts["failed_open"] == 1


def test_a_conversation_goes_on_managed_after_a_remote_compaction(proxy: Running, up: Upstream) -> None:
    """Codex on OpenAI's provider compacts through ``/v1/responses/compact`` (forwarded as it
    came): its history is then its first messages, one encrypted ``compaction`` item for the
    turns it compacted, and the turns after it. The item goes upstream whole in its place, the
    old turns are retired, and the turns after it are managed as before."""
    client = proxy.openai()
    before = codex_conversation(60)
    client.responses.create(model="m", input=before, tools=TOOLS)  # type: ignore[arg-type]
    compacted = {"type": "compaction", "encrypted_content": "gAAAAB" + "Z" * 2_000}
    later = json.loads(re.sub(r'"call_(\d)', r'"later_\1', json.dumps(codex_conversation(60)[3:])))
    after = [*before[:3], compacted, user("go on"), *later]
    client.responses.create(model="m", input=after, tools=TOOLS)  # type: ignore[arg-type]
    assert proxy.proxy.counts["failed_open"] == 0
    sent = up.requests[1]["input"]
    assert sent[:5] == after[:5]  # the compaction item as it came, in its place
    assert not any(re.match(r"call_\d", str(i.get("call_id"))) for i in sent)  # the old turns are gone
    assert len(json.dumps(sent)) < 0.6 * len(json.dumps(after))
    sid = derive_session("responses", {"input": after})
    assert verified_frames(proxy.store, sid) == 2


def test_our_tools_run_inside_the_proxy_json_and_streamed(tmp_path: Path) -> None:
    """The model calls ``pin``: the proxy runs it, asks again with the call and its output after
    the response's own items, and the client sees only the answer; the next request gets the
    exchange spliced back in its place. Streamed, the client's own call comes through."""
    replies = [call("pin", id="r2"), "pinned it, done", call("pin", id="r2"), call("shell_command", command="ls"), "x"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            items: list[dict[str, Any]] = [
                user("check the log"),
                {"type": "function_call", "name": "shell_command", "arguments": "{}", "call_id": "t1"},
                {"type": "function_call_output", "call_id": "t1", "output": "log line\n" * 50},
            ]
            got = client.responses.create(model="m", input=items, tools=TOOLS)  # type: ignore[arg-type]
            assert got.output_text == "pinned it, done" and len(up.requests) == 2
            again = up.requests[1]["input"]
            [hidden] = [i for i in again if i.get("type") == "function_call" and i["name"] == "pin"]
            [result] = [
                i for i in again if i.get("type") == "function_call_output" and i["call_id"] == hidden["call_id"]
            ]
            assert "pinned" in result["output"] and hidden.get("id") == "fc_1"  # the response's own item
            well_formed(again)
            # streamed: our pin runs inside, the client's shell_command comes through
            said = {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "pinned it, done"}],
            }
            items += [said, user("and now?")]
            events = list(client.responses.create(model="m", input=items, tools=TOOLS, stream=True))  # type: ignore[arg-type]
            done = [e.item for e in events if e.type == "response.output_item.done"]
            assert [i.name for i in done if i.type == "function_call"] == ["shell_command"]
            assert len(up.requests) == 4
            # one response to the client: its end names the response its start did (the SDK's
            # stream helper refuses a stream whose response changes)
            [created] = [e.response.id for e in events if e.type == "response.created"]
            assert [e.response.id for e in events if e.type == "response.completed"] == [created]
            # and its events are numbered as one response's, in the order the client got them
            fourth = json.dumps(up.requests[3]["input"])
            # the first exchange spliced back before the client's later items, the second after them
            assert fourth.index('"pin"') < fourth.index("pinned it, done") < fourth.index("and now?")
            assert fourth.rindex('"pin"') > fourth.index("and now?")
            sid = derive_session("responses", {"input": items})
            assert verified_frames(running.store, sid) == 4
            assert running.proxy.counts["tool_calls"] == 2
        finally:
            running.close()


def test_with_a_reasoning_model_our_tool_rounds_keep_its_reasoning_items(tmp_path: Path) -> None:
    """A reasoning model (Codex asks for reasoning, ``store: false``): the round after our call
    goes back with the reasoning (and text) the call came with, and so do the client's later
    requests, where the exchange is spliced back after what the client has of that response,
    once; a reasoning item followed by our call never reaches the client, whose history would
    hold it without the item after it. The scripted provider refuses what the API refuses (an
    item twice, a call or a reasoning item without its companion). JSON and streamed."""
    said = ToolCall("pin", {"id": "r2"}, say="Pinning it.")  # reasoning, a preamble, our call
    replies = [call("pin", id="r2"), "pinned, done", said, "said, done", call("pin", id="r2"), "held, done", "later"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            ask: dict[str, Any] = {"model": "m", "tools": TOOLS, "reasoning": {"summary": "auto"}, "store": False}
            items: list[dict[str, Any]] = [user("check the log")]
            got = client.responses.create(input=items, **ask)
            assert got.output_text == "pinned, done" and up.requests[1]["input"][-3:-1] == [
                reasoning_item(1),
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "pin",
                 "arguments": '{"id": "r2"}', "status": "completed"},
            ]  # fmt: skip
            items += [i.model_dump(exclude_none=True) for i in got.output]

            def streamed(text: str) -> list[dict[str, Any]]:
                """What Codex keeps of a stream: each item done."""
                items.append(user(text))
                events = list(client.responses.create(input=items, stream=True, **ask))
                assert events[-1].type == "response.completed"
                return [e.item.model_dump(exclude_none=True) for e in events if e.type == "response.output_item.done"]

            # a preamble after the reasoning: both reach the client at once; our call never does
            kept = streamed("and the other log?")
            assert [i["id"] for i in kept] == ["rs_3", "msg_3", "rs_4", "msg_4"]
            items += kept
            # reasoning right before our call: it stays with the call
            kept = streamed("and the third?")
            assert [i["id"] for i in kept] == ["rs_6", "msg_6"]
            items += kept
            client.responses.create(input=[*items, user("next")], **ask)
            assert len(up.requests) == 7  # every request accepted
            ids = [i.get("id") or i["type"] for i in up.requests[-1]["input"]]
            # each round once, in order: what the client has of it, then our call and its output
            at = ids.index("rs_3")
            assert ids[at : at + 6] == ["rs_3", "msg_3", "fc_3", "function_call_output", "rs_4", "msg_4"]
            at = ids.index("rs_5")
            assert ids[at : at + 5] == ["rs_5", "fc_5", "function_call_output", "rs_6", "msg_6"]
        finally:
            running.close()


def test_items_round_trip_and_what_changed_is_rebuilt() -> None:
    """Unit: a response of a preamble, reasoning, an answer and two calls is one assistant
    message, and comes back item for item; what context_os changes comes back rebuilt."""
    preamble = {
        "type": "message",
        "role": "assistant",
        "id": "msg_a",
        "content": [{"type": "output_text", "text": "Looking."}],
    }
    answer = {
        "type": "message",
        "role": "assistant",
        "id": "msg_b",
        "content": [{"type": "output_text", "text": "Found it."}],
    }
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"}
    calls = [
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "exec_command", "arguments": '{"cmd": "ls"}'},
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
    ]
    outputs = [
        {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Success."},
    ]
    items = [user("go"), preamble, reasoning, answer, *calls, *outputs]
    chat = to_chat(items)
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "tool"]
    assert chat[1]["content"] == "Looking.\n\nFound it."
    assert json.loads(chat[1]["tool_calls"][1]["function"]["arguments"]) == {"input": "*** Begin Patch"}
    assert to_items(json.loads(json.dumps(chat))) == items
    # changed: the text, an argument elided, an output collapsed
    chat[1]["content"] = "Looking. Found it."
    chat[1]["tool_calls"][1]["function"]["arguments"] = "[elided]"
    chat[2]["content"] = "[collapsed]"
    back = to_items(chat)
    kinds = ["message", "message", "reasoning", "function_call", "custom_tool_call"]
    assert [i.get("type") for i in back] == [*kinds, "function_call_output", "custom_tool_call_output"]
    assert back[1] == {"type": "message", "role": "assistant", "content": "Looking. Found it."}
    assert back[4]["input"] == "[elided]" and back[4]["id"] == "ctc_1"
    assert back[5] == {**outputs[0], "output": "[collapsed]"} and back[6] == outputs[1]


def test_an_output_of_an_image_round_trips_and_counts_it() -> None:
    """Unit: an output of text and image parts is a tool message of chat parts, which the OpenAI
    hook counts (the image's size) and sends as they came while whole, and comes back item for
    item; collapsed, its text."""
    url = "data:image/png;base64," + "A" * 8_000
    items = [user("look at the screenshot"), *view_image("c1", url)]
    chat = to_chat(items)
    assert chat[-1]["content"] == [
        {"type": "text", "text": "shot.png"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    assert to_items(json.loads(json.dumps(chat))) == items
    incoming = OpenAIHook.adapter_class().translate(chat[-1], 2)
    assert incoming["text"] == "shot.png" and incoming.get("extra_chars", 0) > 0
    chat[-1]["content"] = "[collapsed]"
    assert to_items(chat)[-1] == {**items[-1], "output": "[collapsed]"}


def built_in_conversation(steps: int) -> list[dict[str, Any]]:
    """Input items of a client running the Responses API's built-in tools itself (the Agents SDK's
    shell and apply_patch tools, codex-mini's local shell): ``steps`` shell calls with long
    outputs of two chunks, a local shell call answered both ways, a patch and its output."""
    items = [user("find why the build fails")]
    for n in range(steps):
        action = {"commands": [f"sed -n '1,200p' m{n}.py"], "timeout_ms": 10_000, "max_output_length": 20_000}
        items.append(
            {"type": "shell_call", "id": f"sh_{n}", "call_id": f"call_{n}", "action": action, "status": "completed"}
        )
        chunks = [
            {"stdout": f"# module {n}\n" + "x = 1\n" * 600, "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
            {"stdout": "", "stderr": "warning: slow disk\n", "outcome": {"type": "exit", "exit_code": 0}},
        ]
        items.append({"type": "shell_call_output", "call_id": f"call_{n}", "output": chunks})
    local = {"type": "exec", "command": ["bash", "-lc", "ls"], "env": {}, "working_directory": "/work"}
    items += [
        {"type": "local_shell_call", "id": "ls_1", "call_id": "lc_1", "action": local, "status": "completed"},
        {"type": "local_shell_call_output", "id": "lc_1", "output": "m0.py\nm1.py\n"},
        {"type": "local_shell_call", "id": "ls_2", "call_id": "lc_2", "action": local, "status": "completed"},
        {"type": "function_call_output", "call_id": "lc_2", "output": "m0.py\nm1.py\n"},  # as Codex answers it
    ]
    operation = {"type": "update_file", "path": "m0.py", "diff": "@@\n-x = 1\n+x = 2\n"}
    items += [
        {"type": "apply_patch_call", "id": "ap_1", "call_id": "p1", "operation": operation, "status": "completed"},
        {"type": "apply_patch_call_output", "call_id": "p1", "status": "completed", "output": "Updated m0.py"},
        {"type": "apply_patch_call", "id": "ap_2", "call_id": "p2", "operation": operation, "status": "completed"},
        {"type": "apply_patch_call_output", "call_id": "p2", "status": "failed"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Fixed m0.py."}]},
        user("now run the tests"),
    ]  # fmt: skip
    return items


_INPUT_ITEM: TypeAdapter[Any] = TypeAdapter(ResponseInputItemParam)
BUILT_IN = {f"{tool}_call{end}" for tool in ("shell", "local_shell", "apply_patch") for end in ("", "_output")}


def test_built_in_tool_items_round_trip_and_what_changed_is_rebuilt_as_the_sdk_types_them() -> None:
    """Unit: the built-in tools' calls are tool calls (their action or operation the arguments),
    their outputs tool messages (a shell's chunks as one text), and they come back item for
    item; collapsed or elided, they come back rebuilt in the shapes the openai SDK types."""
    items = built_in_conversation(2)
    chat = to_chat(items)
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "assistant", "tool", *["assistant", "tool"] * 4,
                                         "assistant", "user"]  # fmt: skip
    assert chat[1]["tool_calls"][0]["function"]["name"] == "shell"
    assert json.loads(chat[1]["tool_calls"][0]["function"]["arguments"])["commands"] == ["sed -n '1,200p' m0.py"]
    assert chat[2]["content"] == items[2]["output"][0]["stdout"] + "warning: slow disk\n"
    assert [chat[k]["tool_call_id"] for k in (6, 8, 10, 12)] == ["lc_1", "lc_2", "p1", "p2"]
    assert chat[12]["content"] == ""  # a patch output without text
    assert to_items(json.loads(json.dumps(chat))) == items
    # changed: an output collapsed, a call's commands and a patch's diff elided (as the hook does)
    chat[2]["content"] = "[shell output, 1,000 tokens, collapsed]"
    chat[6]["content"] = "[local_shell output, collapsed]"
    shell = json.loads(chat[1]["tool_calls"][0]["function"]["arguments"])
    chat[1]["tool_calls"][0]["function"]["arguments"] = json.dumps({**shell, "commands": "[40 chars elided]"})
    patch = json.loads(chat[9]["tool_calls"][0]["function"]["arguments"])
    chat[9]["tool_calls"][0]["function"]["arguments"] = json.dumps({**patch, "diff": "[30 chars elided]"})
    back = to_items(chat)
    assert back[1] == {**items[1], "action": {**items[1]["action"], "commands": ["[40 chars elided]"]}}
    assert back[2] == {**items[2], "output": [{**items[2]["output"][-1], "stdout": chat[2]["content"], "stderr": ""}]}
    assert back[6] == {**items[6], "output": "[local_shell output, collapsed]"}
    assert back[9]["operation"] == {**items[9]["operation"], "diff": "[30 chars elided]"}
    assert [b for k, b in enumerate(back) if k not in (1, 2, 6, 9)] == [i for k, i in enumerate(items)
                                                                         if k not in (1, 2, 6, 9)]  # fmt: skip
    for item in back:
        if item["type"] in BUILT_IN:
            _INPUT_ITEM.validate_python(item)


def test_an_unanswered_call_is_answered_with_an_output_of_its_kind(tmp_path: Path) -> None:
    """A call the client never answered gets context_os's output, as every unanswered call: of
    its own kind for a custom tool's call (Codex's ``apply_patch``) and a built-in tool's, which
    the API refuses a ``function_call_output`` for (it was one for them all); failed, where an
    output has a status."""
    action = {"commands": ["ls"], "timeout_ms": None, "max_output_length": None}
    local = {"type": "exec", "command": ["bash", "-lc", "ls"], "env": {}, "working_directory": "/work"}
    operation = {"type": "update_file", "path": "m0.py", "diff": "@@\n-x = 1\n+x = 2\n"}
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": "patch it"},
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "function_call", "call_id": "f1", "name": "shell", "arguments": '{"command": ["ls"]}'},
        {"type": "shell_call", "id": "sh_1", "call_id": "s1", "action": action, "status": "completed"},
        {"type": "local_shell_call", "id": "ls_1", "call_id": "l1", "action": local, "status": "completed"},
        {"type": "apply_patch_call", "id": "ap_1", "call_id": "p1", "operation": operation, "status": "completed"},
        {"type": "message", "role": "user", "content": "never mind"},
    ]
    with SqliteStore(tmp_path / "s.db") as store:
        sent = to_items(OpenAIHook(Session.open(store, "s", harness="openai")).transform_context(to_chat(items)))
    outputs = {i.get("call_id", i.get("id")): i for i in sent if i["type"].endswith("_output")}
    assert {k: o["type"] for k, o in outputs.items()} == {
        "c1": "custom_tool_call_output",
        "f1": "function_call_output",
        "s1": "shell_call_output",
        "l1": "local_shell_call_output",
        "p1": "apply_patch_call_output",
    }
    assert outputs["p1"]["status"] == "failed" and outputs["s1"]["output"][0]["outcome"]["exit_code"] == 1
    assert "No result was recorded" in outputs["c1"]["output"] and "No result" in outputs["s1"]["output"][0]["stderr"]
    for item in sent:
        _INPUT_ITEM.validate_python(item)


def test_a_conversation_of_built_in_tools_is_managed(proxy: Running, up: Upstream) -> None:
    """Through the proxy: past the size context_os manages from, old shell outputs go collapsed
    (rebuilt chunks the SDK types), nothing fails open, and every frame re-renders."""
    items = built_in_conversation(60)  # ~60k tokens
    proxy.openai().responses.create(model="m", input=items)  # type: ignore[arg-type]
    assert proxy.proxy.counts["failed_open"] == 0
    sent = up.requests[0]["input"]
    assert len(json.dumps(sent)) < 0.5 * len(json.dumps(items))
    outputs = [i for i in sent if i.get("type") == "shell_call_output"]
    assert len(outputs) == 60 and "collapsed" in outputs[0]["output"][0]["stdout"]
    for item in sent:
        if item.get("type") in BUILT_IN:
            _INPUT_ITEM.validate_python(item)
    assert verified_frames(proxy.store, derive_session("responses", {"input": items})) == 1


_TEXT = st.text(max_size=20)
_ID = st.sampled_from("abc")


def _part(kind: str) -> Any:
    return lambda text: [{"type": kind, "text": text}]


_CHUNK = st.fixed_dictionaries({"stdout": _TEXT, "stderr": _TEXT, "outcome": st.just({"type": "timeout"})})
_ITEM = st.one_of(
    st.fixed_dictionaries({"type": st.just("message"), "role": st.sampled_from(["user", "developer", "system"]),
                           "content": _TEXT.map(_part("input_text"))}),
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": _TEXT}),
    st.fixed_dictionaries({"type": st.just("message"), "role": st.just("assistant"),
                           "content": _TEXT.map(_part("output_text"))}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "summary": st.just([]), "encrypted_content": _TEXT}),
    st.fixed_dictionaries({"type": st.just("compaction"), "encrypted_content": _TEXT}),
    st.fixed_dictionaries({"type": st.just("function_call"), "call_id": _ID, "name": st.just("f"), "arguments": _TEXT}),
    st.fixed_dictionaries({"type": st.just("custom_tool_call"), "call_id": _ID, "name": st.just("p"), "input": _TEXT}),
    st.fixed_dictionaries({"type": st.sampled_from(["function_call_output", "custom_tool_call_output"]),
                           "call_id": _ID, "output": _TEXT}),
    st.fixed_dictionaries({"type": st.sampled_from(["shell_call", "local_shell_call"]), "call_id": _ID,
                           "action": st.fixed_dictionaries({"commands": st.lists(_TEXT, max_size=2)})}),
    st.fixed_dictionaries({"type": st.just("apply_patch_call"), "call_id": _ID, "status": st.just("completed"),
                           "operation": st.fixed_dictionaries({"type": st.just("create_file"), "diff": _TEXT})}),
    st.fixed_dictionaries({"type": st.just("shell_call_output"), "call_id": _ID,
                           "output": st.lists(_CHUNK, max_size=3)}),
    st.fixed_dictionaries({"type": st.just("local_shell_call_output"), "id": _ID, "output": _TEXT}),
    st.fixed_dictionaries({"type": st.just("tool_search_call"), "call_id": _ID,
                           "execution": st.sampled_from(["client", "server"]),
                           "arguments": st.fixed_dictionaries({"query": _TEXT})}),
    st.fixed_dictionaries({"type": st.just("tool_search_output"), "call_id": _ID,
                           "execution": st.sampled_from(["client", "server"]),
                           "tools": st.lists(st.fixed_dictionaries({"type": st.just("function"), "name": _TEXT}),
                                             max_size=2)}),
    st.fixed_dictionaries({"type": st.sampled_from(["configuration_update", "additional_tools", "compaction_trigger"])},
                          optional={"reasoning": st.fixed_dictionaries({"effort": _TEXT})}),
    st.fixed_dictionaries({"type": st.just("mcp_call"), "id": _ID, "server_label": st.just("s"), "name": _TEXT,
                           "arguments": _TEXT}, optional={"output": _TEXT}),
    st.fixed_dictionaries({"type": st.just("apply_patch_call_output"), "call_id": _ID, "status": st.just("failed")},
                          optional={"output": _TEXT.filter(bool)}),
    st.dictionaries(st.sampled_from(["type", "role", "content", "call_id", "output"]),
                    st.one_of(_TEXT, st.none(), st.integers())),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(items=st.lists(_ITEM, max_size=12))
def test_any_input_round_trips_or_is_refused_cleanly(items: list[dict[str, Any]]) -> None:
    """Unit: items ``to_chat`` reads come back from ``to_items`` as they were sent; anything else
    is a ``MalformedMessage``."""
    try:
        chat = to_chat(items)
    except MalformedMessage:
        return
    assert to_items(json.loads(json.dumps(chat))) == items


def test_a_responses_conversation_is_the_session_its_cache_key_or_its_start_names(proxy: Running) -> None:
    """Codex's first user message is its environment, the same for every conversation in a
    directory: its ``prompt_cache_key`` (the conversation id) names the session; without one,
    everything before the model's first item does."""
    start = codex_conversation(0)[:3]
    client = proxy.openai()
    for key in ("conv-1", "conv-2", "conv-1"):
        client.responses.create(model="m", input=start, prompt_cache_key=key)  # type: ignore[arg-type]
    assert len(proxy.store.find("session")) == 2
    later = [*codex_conversation(2), user("and now?")]
    assert derive_session("responses", {"input": later}) == derive_session("responses", {"input": start})
    assert derive_session("responses", {"input": [user("another task")]}) != derive_session(
        "responses", {"input": start}
    )


def test_a_streamed_preamble_before_our_call_reaches_the_client_once(tmp_path: Path) -> None:
    """The model says something, then calls ours, in one streamed response: the client gets the
    text at once (and keeps it in its history); the exchange spliced back holds only our call and
    its output, so the next request says the text once."""
    replies = [ToolCall("pin", {"id": "r2"}, say="Pinning the log."), "pinned it", "next answer"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            items: list[dict[str, Any]] = [user("check the log")]
            events = list(client.responses.create(model="m", input=items, tools=TOOLS, stream=True))  # type: ignore[arg-type]
            done = [e.item for e in events if e.type == "response.output_item.done"]
            assert [i.type for i in done] == ["message", "message"]  # our call stayed in the proxy
            assert (
                "".join(e.delta for e in events if e.type == "response.output_text.delta")
                == "Pinning the log.pinned it"
            )
            indexes = [e.output_index for e in events if e.type == "response.output_item.added"]
            assert indexes == [0, 1]  # the second round's item numbered after the first's
            # and its events as one response's, in the order the client got them
            assert [e.sequence_number for e in events] == list(range(len(events)))
            items += [i.model_dump(exclude_none=True) for i in done] + [user("and now?")]
            client.responses.create(model="m", input=items, tools=TOOLS)  # type: ignore[arg-type]
            third = json.dumps(up.requests[2]["input"])
            assert third.count("Pinning the log.") == 1 and third.count('"pin"') == 1
            well_formed(up.requests[2]["input"])
        finally:
            running.close()


@pytest.mark.parametrize("stream", [False, True])
def test_the_clients_custom_call_beside_ours_is_dropped_as_its_function_calls_are(tmp_path: Path, stream: bool) -> None:
    """The model calls one of ours and the client's own custom tool (Codex's ``apply_patch``) in
    one response (parallel calls): ours runs, the client's is dropped (the model, seeing our
    result, calls it again), as a function call of the client's is. It went to a stream's client
    at once (Codex applied the patch), and stayed in the exchange: the provider was told the
    patch had no result (answered as a function's call, which the API refuses for a custom one),
    and at the next request, which holds the patch the client got, it was there twice (an id
    twice: refused), at every request after too."""
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
    replies = [ToolCall("history", {}, patch=patch), "patched", "next answer"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up)
        try:
            client = running.openai()
            items: list[dict[str, Any]] = [user("add a.txt")]
            if stream:
                events = list(client.responses.create(model="m", input=items, tools=TOOLS, stream=True))  # type: ignore[arg-type]
                done = [e.item for e in events if e.type == "response.output_item.done"]
                assert [e.response.output_text for e in events if e.type == "response.completed"] == ["patched"]
            else:
                done = client.responses.create(model="m", input=items, tools=TOOLS).output  # type: ignore[arg-type]
            assert [i.type for i in done] == ["message"]  # neither call reached the client
            second = up.requests[1]["input"]
            assert "custom_tool_call" not in json.dumps(second) and "call_p1" not in json.dumps(second)
            well_formed(second)
            items += [i.model_dump(exclude_none=True) for i in done] + [user("and now?")]
            got = client.responses.create(model="m", input=items, tools=TOOLS)  # type: ignore[arg-type]
            assert got.output_text == "next answer"
            assert json.dumps(up.requests[2]["input"]).count(patch.split("\n")[1]) == 0
            well_formed(up.requests[2]["input"])
        finally:
            running.close()

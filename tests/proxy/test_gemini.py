"""``ctxos proxy`` in front of the Gemini API (``generateContent``, ``streamGenerateContent``: Gemini
CLI's API), with the real ``google-genai`` SDK and the scripted provider of tests/proxy/upstream.py:
the provider gets the assembled context as contents, parts context_os left alone go as they came
(a call's ``thoughtSignature`` with it), streams come through, our tools run inside the proxy, and
what it cannot manage goes as it came."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.genai import errors, types
from hypothesis import given, settings
from hypothesis import strategies as st

from context_os import Session
from context_os.context.tools import CONTEXT_TOOLS
from context_os.errors import MalformedMessage
from context_os.harness.gemini import to_chat, to_contents
from context_os.harness.openai import OpenAIHook
from context_os.harness.toolnames import preset
from context_os.harness.virtual_files import VirtualFiles
from context_os.server.proxy import derive_session, error_body, stream_error
from context_os.server.proxy_tools import Call, JsonArrayStream, dialect, with_sse
from context_os.store.sqlite import SqliteStore
from tests.helpers import pairing_refused
from tests.proxy.running import KEY, Running, gemini_client, verified_frames
from tests.proxy.upstream import ToolCall, Upstream, call, signature, upstream

pytestmark = pytest.mark.timeout(120)

MODEL = "gemini-2.5-pro"
SYSTEM = "You are Gemini CLI, an interactive CLI agent."
TOOLS = [
    types.Tool(
        function_declarations=[
            types.FunctionDeclaration(
                name=name,
                description=f"The {name} tool.",
                parameters_json_schema={"type": "object", "properties": {"file_path": {"type": "string"}}},
            )
            for name in ("read_file", "replace")
        ]
    )
]


def config(**more: Any) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(system_instruction=SYSTEM, tools=TOOLS, **more)  # type: ignore[arg-type]


def sig(n: int) -> str:
    return base64.b64encode(f"turn {n}".encode()).decode()


def gemini_conversation(steps: int, output_chars: int = 4_000) -> list[dict[str, Any]]:
    """Contents as Gemini CLI sends them: its session context, a task, then ``steps`` model turns of
    one signed ``read_file`` call (no id: Gemini gives none), each answered by a response carrying
    Gemini CLI's own call id."""
    contents: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"text": "<session_context>\nToday's date is Friday.\n/work\n</session_context>"}]},
        {"role": "user", "parts": [{"text": "find why the build fails"}]},
    ]
    for n in range(steps):
        fc = {"name": "read_file", "args": {"file_path": f"/work/m{n}.py"}}
        contents.append({"role": "model", "parts": [{"functionCall": fc, "thoughtSignature": sig(n)}]})
        output = f"# module {n}\n" + "x = 1\n" * (output_chars // 6)
        fr = {"id": f"read_file-{n}", "name": "read_file", "response": {"output": output}}
        contents.append({"role": "user", "parts": [{"functionResponse": fr}]})
    return contents


@pytest.fixture
def gemini_up() -> Any:
    with upstream(replies=["first answer here", "second answer here"]) as u:
        yield u


@pytest.fixture
def proxied(tmp_path: Path, gemini_up: Upstream) -> Any:
    running = Running(tmp_path, gemini_up, gemini_upstream=gemini_up.url)
    yield running
    running.close()


def test_the_provider_gets_the_assembled_contents(proxied: Running, gemini_up: Upstream, tmp_path: Path) -> None:
    contents = gemini_conversation(60)  # ~65k tokens: past manage_from_tokens
    got = proxied.gemini().models.generate_content(model=MODEL, contents=contents, config=config())  # type: ignore[arg-type]
    assert got.text == "first answer here"
    sent = gemini_up.requests[0]
    assert pairing_refused("gemini", sent) is None
    # everything but the contents and the tools as it came: the client's tools, then ours
    assert sent["systemInstruction"]["parts"] == [{"text": SYSTEM}]
    assert [d["name"] for d in sent["tools"][0]["functionDeclarations"]] == ["read_file", "replace"]
    assert {d["name"] for d in sent["tools"][1]["functionDeclarations"]} == set(CONTEXT_TOOLS) - {"recall"}
    assert all("parametersJsonSchema" in d for d in sent["tools"][1]["functionDeclarations"])
    # what went upstream is what context_os assembles for this conversation (another store, the same bytes)
    system = {"parts": [{"text": SYSTEM}], "role": "user"}  # as the SDK sends it
    with SqliteStore(tmp_path / "check.db") as check:
        sid = derive_session("gemini", {"systemInstruction": system, "contents": contents})
        session = Session.open(check, sid, harness="openai")
        files = VirtualFiles(session, root=None, tool_names=preset("gemini-cli").only({"read_file", "replace"}))
        hook = OpenAIHook(session, on_sync=files.observe)
        expected, instruction = to_contents(hook.transform_context(to_chat(contents, system)))
    assert (sent["contents"], sent["systemInstruction"]) == (json.loads(json.dumps(expected)), instruction)
    assert len(json.dumps(sent["contents"])) < 0.3 * len(json.dumps(contents))
    # old outputs collapsed: rebuilt responses, Gemini CLI's ids kept; every call as it came, signed
    responses = [p["functionResponse"] for c in sent["contents"] for p in c["parts"] if "functionResponse" in p]
    assert [r["id"] for r in responses] == [f"read_file-{n}" for n in range(60)]
    assert responses[0]["response"]["output"].startswith("[read_file output, ")
    calls = [p for c in sent["contents"] for p in c["parts"] if "functionCall" in p]
    assert [p["thoughtSignature"] for p in calls] == [sig(n) for n in range(60)]
    assert all("id" not in p["functionCall"] for p in calls)  # the ids context_os made never go upstream
    # the files the reads showed, as objects, in context_os's own contents at the end
    ours = [c["parts"][0]["text"] for c in sent["contents"] if c["parts"][0].get("text", "").startswith("<context_os>")]
    assert ours and sent["contents"][-len(ours) :] == [{"role": "user", "parts": [{"text": t}]} for t in ours]
    assert any('path="/work/m59.py" version="1">\n# module 59\n' in t for t in ours)
    assert verified_frames(proxied.store, sid) == 1


def test_a_short_conversation_goes_upstream_content_for_content(proxied: Running, gemini_up: Upstream) -> None:
    """Below the size context_os manages from, the contents are unchanged: an image, thoughts and
    signatures, several calls in one turn answered in another order, a failed call, a response that
    is no output, the old ``function`` role, every field as the client sent it."""
    contents = gemini_conversation(2, output_chars=300)
    contents[1]["parts"].append({"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}})
    contents += [
        {"role": "model", "parts": [
            {"text": "Let me look at both.", "thought": True},
            {"text": "Reading both files."},
            {"functionCall": {"name": "read_file", "args": {"file_path": "/work/a.py"}}, "thoughtSignature": sig(7)},
            {"functionCall": {"name": "replace", "args": {"file_path": "/work/b.py"}}},
        ]},
        {"role": "function", "parts": [
            {"functionResponse": {"name": "replace", "response": {"error": "old_string not found"}}},
            {"functionResponse": {"name": "read_file", "response": {"content": "print(1)\n", "lines": 1}}},
        ]},
        {"role": "model", "parts": [{"text": "Both read.", "thoughtSignature": sig(8)}]},
        {"role": "user", "parts": [{"text": "thanks"}, {"fileData": {"mimeType": "application/pdf",
                                                                   "fileUri": "gs://b/spec.pdf"}}]},
    ]  # fmt: skip
    proxied.gemini().models.generate_content(model=MODEL, contents=contents, config=config())  # type: ignore[arg-type]
    direct = gemini_client(gemini_up.url)
    direct.models.generate_content(model=MODEL, contents=contents, config=config())  # type: ignore[arg-type]
    through, alone = gemini_up.requests
    assert through["contents"] == alone["contents"]  # as the SDK sends them without the proxy
    assert through["systemInstruction"] == alone["systemInstruction"]
    assert proxied.proxy.counts == {**proxied.proxy.counts, "assembled": 1, "failed_open": 0}


def test_a_stream_comes_through(proxied: Running, gemini_up: Upstream) -> None:
    contents = gemini_conversation(60)
    chunks = list(proxied.gemini().models.generate_content_stream(model=MODEL, contents=contents, config=config()))  # type: ignore[arg-type]
    assert "".join(c.text or "" for c in chunks) == "first answer here"
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]
    assert len(json.dumps(gemini_up.requests[0]["contents"])) < 0.3 * len(json.dumps(contents))


def test_our_tools_run_inside_the_proxy_json_and_streamed(tmp_path: Path) -> None:
    """The model calls ``pin`` (signed): the proxy runs it, asks again with the call (its signature
    kept) and its response, and the client sees only the answer; the next request gets the
    exchange spliced back in its place. Streamed, the model's preamble reaches the client once, and
    the client's own call comes through."""
    pin = ToolCall("pin", {"id": "r4"}, say="Pinning the log.")
    replies: list[str | ToolCall] = [call("pin", id="r4"), "pinned it, done", pin, call("read_file", file_path="a")]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up, gemini_upstream=up.url)
        try:
            c = running.gemini()
            contents = gemini_conversation(2, output_chars=600)
            got = c.models.generate_content(model=MODEL, contents=contents, config=config())  # type: ignore[arg-type]
            assert got.text == "pinned it, done" and len(up.requests) == 2
            again = up.requests[1]["contents"]
            assert pairing_refused("gemini", up.requests[1]) is None  # the signature came back with the call
            assert again[-2] == {"role": "model", "parts": [
                {"functionCall": {"name": "pin", "args": {"id": "r4"}}, "thoughtSignature": signature(1)}
            ]}  # fmt: skip
            [response] = again[-1]["parts"]
            assert response["functionResponse"]["name"] == "pin" and "id" not in response["functionResponse"]
            assert "pinned" in response["functionResponse"]["response"]["output"]
            # streamed: the preamble goes on at once, our pin runs inside, the client's read_file comes through
            contents += [
                {"role": "model", "parts": [{"text": "pinned it, done"}]},
                {"role": "user", "parts": [{"text": "and now?"}]},
            ]
            chunks = list(c.models.generate_content_stream(model=MODEL, contents=contents, config=config()))  # type: ignore[arg-type]
            parts = [p for ch in chunks for p in ch.candidates[0].content.parts]  # type: ignore[index,union-attr]
            assert [p.text for p in parts if p.text] == ["Pinning the log."]
            assert [p.function_call.name for p in parts if p.function_call] == ["read_file"]
            assert sum(ch.candidates[0].finish_reason is not None for ch in chunks) == 1  # type: ignore[index]
            assert len(up.requests) == 4 and pairing_refused("gemini", up.requests[3]) is None
            fourth = json.dumps(up.requests[3]["contents"])
            # the first exchange spliced back before the client's later contents, the second after them
            assert fourth.index('"pin"') < fourth.index("pinned it, done") < fourth.index("and now?")
            assert fourth.rindex('"pin"') > fourth.index("and now?")
            assert signature(3) in fourth  # the streamed call's signature, kept in the exchange
            sid = derive_session("gemini", {"systemInstruction": {"parts": [{"text": SYSTEM}], "role": "user"},
                                            "contents": contents})  # fmt: skip
            assert verified_frames(running.store, sid) == 4
            assert running.proxy.counts["tool_calls"] == 2
        finally:
            running.close()


@pytest.mark.parametrize("query", ["", "?alt=json", f"?key={KEY}"])
def test_a_stream_asked_for_as_a_json_array_runs_our_tools_too(tmp_path: Path, query: str) -> None:
    """A stream asked for without ``alt=sse`` is one JSON array, its answers its elements as they
    come (Google's REST examples, clients of the API without an SDK): it was offered none of our
    tools, the proxy reading their calls in events only. Now it goes upstream with ``alt=sse`` (its
    other parameters kept) and the client gets its array: our pin runs inside, the client reads
    the answer, in Google's content type, and a stream of no calls of ours is an array as well."""
    replies: list[str | ToolCall] = [call("pin", id="r4"), "pinned it, done", "plain answer"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up, gemini_upstream=up.url)
        try:
            headers = {} if "key=" in query else {"x-goog-api-key": KEY}
            path = f"/v1beta/models/{MODEL}:streamGenerateContent{query}"
            body: dict[str, Any] = {
                "contents": gemini_conversation(2, output_chars=600),
                "systemInstruction": {"parts": [{"text": SYSTEM}]},
                "tools": [{"functionDeclarations": [{"name": "read_file", "parameters": {"type": "object"}}]}],
            }
            got = httpx.post(running.url + path, json=body, headers=headers, timeout=60)
            assert got.status_code == 200 and got.headers["content-type"].startswith("application/json")
            answers = got.json()
            assert isinstance(answers, list) and len(answers) == 2
            parts = [p for a in answers for p in a["candidates"][0]["content"]["parts"]]
            assert "".join(p.get("text", "") for p in parts) == "pinned it, done"
            assert not any("functionCall" in p for p in parts)
            assert len(up.requests) == 2 and running.proxy.counts["tool_calls"] == 1
            assert "pin" in json.dumps(up.requests[0]["tools"])
            for sent in up.paths:
                params = sent.partition("?")[2].split("&")
                assert params.count("alt=sse") == 1 and "alt=json" not in params
                assert (f"key={KEY}" in params) == ("key=" in query)
            body["contents"] += [
                {"role": "model", "parts": [{"text": "pinned it, done"}]},
                {"role": "user", "parts": [{"text": "and now?"}]},
            ]
            again = httpx.post(running.url + path, json=body, headers=headers, timeout=60)
            texts = [p.get("text", "") for a in again.json() for p in a["candidates"][0]["content"]["parts"]]
            assert "".join(texts) == "plain answer" and len(up.requests) == 3
        finally:
            running.close()


def test_events_become_the_array_and_the_path_asks_for_events() -> None:
    """Each event's data (over several ``data:`` lines, CRLF or LF) is one element, an error event
    too; a stream of none is an empty array. The path keeps its parameters but ``alt``."""
    array = JsonArrayStream()
    got = array(b'data: {"candidates":\r\ndata: []}\r\n\r\n: a comment\n\n')
    got += array(b'data: {"n": 2}\n\n' + stream_error("gemini", 502, error_body("gemini", 502, "gone")))
    got += array.end()
    assert json.loads(got) == [
        {"candidates": []},
        {"n": 2},
        {"error": {"code": 502, "message": "gone", "status": "UNAVAILABLE"}},
    ]
    assert JsonArrayStream().end() == b"[]"
    assert with_sse("/v1beta/models/m:streamGenerateContent") == "/v1beta/models/m:streamGenerateContent?alt=sse"
    assert (
        with_sse("/x:streamGenerateContent?alt=json&key=k&$fields=a")
        == "/x:streamGenerateContent?key=k&$fields=a&alt=sse"
    )


def test_no_tools_of_ours_for_structured_output_and_what_cannot_be_managed_goes_as_it_came(
    proxied: Running, gemini_up: Upstream
) -> None:
    """Gemini CLI's checks on the side ask for JSON: they are managed, but offered no tools of ours
    (Gemini refuses tools with a JSON answer). A response that answers no call goes as it came."""
    c = proxied.gemini()
    json_config = types.GenerateContentConfig(response_mime_type="application/json")
    c.models.generate_content(model=MODEL, contents="is the user done?", config=json_config)
    assert "tools" not in gemini_up.requests[0] and proxied.proxy.counts["assembled"] == 1
    odd = [{"role": "user", "parts": [{"functionResponse": {"name": "read_file", "response": {"output": "x"}}}]}]
    with pytest.raises(errors.ClientError, match="function response turn comes immediately after"):
        c.models.generate_content(model=MODEL, contents=odd, config=config())  # type: ignore[arg-type]
    assert gemini_up.requests[1]["contents"] == odd  # the provider's to refuse
    assert proxied.proxy.counts["failed_open"] == 1


def test_errors_come_in_googles_shape(tmp_path: Path) -> None:
    """The provider's error reaches the SDK as it came; the proxy's own (a body that is not JSON)
    and an upstream out of reach are in Google's shape too, which the SDK reads."""
    with upstream(errors={1: 429}) as up:
        running = Running(tmp_path, up, gemini_upstream=up.url)
        try:
            c = running.gemini()
            with pytest.raises(errors.ClientError) as limited:
                c.models.generate_content(model=MODEL, contents="hi")
            assert (limited.value.code, limited.value.status) == (429, "RESOURCE_EXHAUSTED")
            bad = httpx.post(f"{running.url}/v1beta/models/{MODEL}:generateContent", content=b"[1, 2]",
                             headers={"Content-Type": "application/json", "x-goog-api-key": KEY})  # fmt: skip
            assert bad.status_code == 400 and bad.json()["error"]["status"] == "INVALID_ARGUMENT"
        finally:
            running.close()
    gone = Running(tmp_path / "gone", up, gemini_upstream="http://127.0.0.1:9")
    try:
        with pytest.raises(errors.ServerError) as unreachable:
            gone.gemini().models.generate_content(model=MODEL, contents="hi")
        assert (unreachable.value.code, unreachable.value.status) == (502, "UNAVAILABLE")
    finally:
        gone.close()


def test_count_tokens_and_other_endpoints_go_upstream_untouched(proxied: Running, gemini_up: Upstream) -> None:
    got = proxied.gemini().models.count_tokens(model=MODEL, contents="how many?")
    assert got.total_tokens == 7
    [seen] = gemini_up.other  # (the SDK counts on /v1, not /v1beta: a path without the key in its query)
    assert seen.endswith(f"/models/{MODEL}:countTokens") and gemini_up.requests == []


def test_two_conversations_that_start_alike_are_told_apart_by_their_first_reply(
    proxied: Running, gemini_up: Upstream
) -> None:
    """Gemini CLI's first content is its session context, the same for every conversation in one
    directory on one day, and it sends no key: two runs of one task are two sessions, by what the
    model first said in each."""
    c = proxied.gemini()
    start = gemini_conversation(0)
    for reply in ("I will read app.py.", "I will run the tests."):
        said = [*start, {"role": "model", "parts": [{"text": reply}]}, {"role": "user", "parts": [{"text": "go"}]}]
        c.models.generate_content(model=MODEL, contents=said, config=config())  # type: ignore[arg-type]
    assert len(proxied.store.find("session")) == 2


_TEXT = st.text(max_size=20)
_SIG = st.binary(min_size=1, max_size=6).map(lambda b: base64.b64encode(b).decode())
_NAME = st.sampled_from(["f", "g"])
_ARGS = st.dictionaries(st.sampled_from(["a", "b"]), st.one_of(_TEXT, st.integers(), st.lists(_TEXT, max_size=2)))
_MODEL_PART = st.one_of(
    st.fixed_dictionaries({"text": _TEXT}, optional={"thoughtSignature": _SIG}),
    st.fixed_dictionaries({"text": _TEXT, "thought": st.just(True)}),
    st.fixed_dictionaries({"functionCall": st.fixed_dictionaries({"name": _NAME}, optional={
                               "args": st.one_of(_ARGS, st.none()), "id": st.sampled_from(["c1", "c2"])})},
                          optional={"thoughtSignature": _SIG}),
    st.fixed_dictionaries({"executableCode": st.fixed_dictionaries({"language": st.just("PYTHON"), "code": _TEXT})}),
)  # fmt: skip
_RESPONSE = st.one_of(
    st.fixed_dictionaries({"output": _TEXT}),
    st.fixed_dictionaries({"error": _TEXT}),
    st.dictionaries(st.sampled_from(["output", "lines", "x"]), st.one_of(_TEXT, st.integers()), max_size=2),
)
_USER_PART = st.one_of(
    st.fixed_dictionaries({"text": _TEXT}),
    st.fixed_dictionaries({"inlineData": st.fixed_dictionaries({
        "mimeType": st.sampled_from(["image/png", "application/pdf"]), "data": _SIG})}),
    st.fixed_dictionaries({"fileData": st.fixed_dictionaries({"fileUri": _TEXT})}),
    st.fixed_dictionaries({"functionResponse": st.fixed_dictionaries(
        {"name": _NAME, "response": _RESPONSE}, optional={"id": st.sampled_from(["c1", "c2", "x"])})}),
    st.fixed_dictionaries({"functionCall": st.fixed_dictionaries({"name": _NAME})}),
)  # fmt: skip
_CONTENT = st.one_of(
    st.fixed_dictionaries({"role": st.just("model"), "parts": st.lists(_MODEL_PART, max_size=4)}),
    st.fixed_dictionaries({"role": st.sampled_from(["user", "function"]), "parts": st.lists(_USER_PART, max_size=4)}),
    st.fixed_dictionaries({"role": st.sampled_from(["system", "tool"]), "parts": st.lists(_USER_PART, max_size=1)}),
)


@settings(max_examples=400, deadline=None)
@given(
    contents=st.lists(_CONTENT, max_size=8), system=st.one_of(st.none(), _TEXT.map(lambda t: {"parts": [{"text": t}]}))
)
def test_any_contents_round_trip_or_are_refused_cleanly(contents: list[dict[str, Any]], system: Any) -> None:
    """Unit: contents ``to_chat`` reads come back from ``to_contents`` as they were sent (merged
    back into their contents, every field kept); anything else is a ``MalformedMessage``."""
    try:
        chat = to_chat(contents, system)
    except MalformedMessage:
        return
    assert to_contents(json.loads(json.dumps(chat))) == (contents, system)


def test_what_context_os_changed_is_rebuilt_with_the_parts_around_it() -> None:
    """Unit: a redacted text keeps its place and its part's signature, an elided argument is an
    object still, a collapsed output is the response's ``output``; a result context_os made for a
    call left unanswered answers it by name."""
    contents = [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [
            {"text": "my key is sk-1", "thoughtSignature": sig(1)},
            {"functionCall": {"name": "f", "args": {"a": "long"}}, "thoughtSignature": sig(2)},
            {"functionCall": {"name": "g", "args": {}}},
        ]},
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"content": "x", "n": 1}}}]},
    ]  # fmt: skip
    chat = to_chat(contents)
    assert [c["id"] for c in chat[1]["tool_calls"]] == ["call_1_1", "call_1_2"]
    chat[1]["content"] = "my key is [redacted]"
    chat[1]["tool_calls"][0]["function"]["arguments"] = json.dumps({"a": "[elided]"})
    chat[1]["tool_calls"][1]["function"]["arguments"] = "[elided, not JSON]"
    chat[2]["content"] = "[f output, collapsed]"
    chat.append({"role": "tool", "tool_call_id": "call_1_2", "content": "no result", "is_error": True})
    back, system = to_contents(chat)
    assert system is None
    assert back[1]["parts"] == [
        {"text": "my key is [redacted]", "thoughtSignature": sig(1)},
        {"functionCall": {"name": "f", "args": {"a": "[elided]"}}, "thoughtSignature": sig(2)},
        {"functionCall": {"name": "g", "args": {"_elided": "[elided, not JSON]"}}},
    ]
    assert back[2]["parts"] == [
        {"functionResponse": {"name": "f", "response": {"output": "[f output, collapsed]"}}},
        {"functionResponse": {"name": "g", "response": {"error": "no result"}}},
    ]


def test_an_exchange_drops_the_clients_calls_and_keeps_the_turns_signature_on_ours() -> None:
    """Unit: the model called the client's tool (signed, first) and ours in one turn: the exchange
    keeps its text and our call, which takes the turn's signature; our response names its call's
    id only if the model gave one."""
    theirs = {"functionCall": {"name": "read_file", "args": {"file_path": "a"}}, "thoughtSignature": sig(1)}
    ours = {"functionCall": {"name": "pin", "args": {"id": "r4"}}}
    output = [{"text": "Both."}, theirs, ours]
    model, user = dialect("gemini", {}).exchange(None, [Call("", "pin", {"id": "r4"})], ["pinned"], output)
    assert model == {"role": "model", "parts": [{"text": "Both."}, {**ours, "thoughtSignature": sig(1)}]}
    assert user == {"role": "user", "parts": [{"functionResponse": {"name": "pin", "response": {"output": "pinned"}}}]}
    assert output[2] == ours  # (the reply's own parts are left as they were)


def test_a_vertex_ai_request_is_managed_too(proxied: Running, gemini_up: Upstream) -> None:
    """Gemini on Vertex AI (Gemini CLI's GOOGLE_VERTEX_BASE_URL): the same contents under a
    project's path, its bearer token going upstream untouched."""
    path = f"/v1/projects/p/locations/us-central1/publishers/google/models/{MODEL}:generateContent"
    body = {"contents": gemini_conversation(60), "systemInstruction": {"parts": [{"text": SYSTEM}]}}
    got = httpx.post(proxied.url + path, json=body, headers={"Authorization": "Bearer ya29.token"}, timeout=60)
    assert got.status_code == 200 and got.json()["candidates"][0]["content"]["parts"] == [{"text": "first answer here"}]
    assert gemini_up.headers[0]["Authorization"] == "Bearer ya29.token"
    assert len(json.dumps(gemini_up.requests[0]["contents"])) < 0.3 * len(json.dumps(body["contents"]))
    assert proxied.proxy.counts["assembled"] == 1


def test_the_key_goes_upstream_untouched_and_is_never_stored_nor_logged(
    proxied: Running, gemini_up: Upstream, caplog: Any
) -> None:
    """Google's key in its header (the SDKs') or in the query (``?key=``, as Google's REST examples
    send it): upstream as it came; not in the store; not in the log, the request line at -v included."""
    with caplog.at_level("DEBUG", logger="context_os.proxy"):
        proxied.gemini().models.generate_content(model=MODEL, contents=gemini_conversation(60), config=config())  # type: ignore[arg-type]
        path = f"/v1beta/models/{MODEL}:generateContent?key={KEY}&alt=json"
        got = httpx.post(proxied.url + path, json={"contents": gemini_conversation(60)}, timeout=60)
    assert got.status_code == 200 and proxied.proxy.counts["assembled"] == 2
    assert gemini_up.headers[0]["x-goog-api-key"] == KEY
    assert KEY not in caplog.text and "key=[hidden]" in caplog.text
    proxied.store.close()
    assert KEY.encode() not in proxied.db.read_bytes()


def envelope(contents: list[dict[str, Any]]) -> dict[str, Any]:
    """A Code Assist request as Gemini CLI 0.61 makes one (``toGenerateContentRequest``)."""
    request = {"contents": contents, "systemInstruction": {"role": "user", "parts": [{"text": SYSTEM}]},
               "tools": [{"functionDeclarations": [{"name": "read_file", "parametersJsonSchema": {"type": "object"}}]}],
               "generationConfig": {"temperature": 0}, "session_id": "cli-session-1"}  # fmt: skip
    return {"model": MODEL, "project": "proj-1", "user_prompt_id": "prompt-1", "request": request}


def sse_answers(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def test_a_code_assist_request_is_managed_in_its_envelope(tmp_path: Path) -> None:
    """Gemini CLI logged in with a Google account speaks Google's Code Assist API: a Gemini request
    in an envelope, each answer in one. The request's contents are managed, the envelope goes
    upstream as it came; JSON and streamed, our tools run inside the proxy, the agent gets every
    answer in its envelope; its other methods go upstream untouched."""
    replies: list[str | ToolCall] = ["first answer here", ToolCall("pin", {"id": "r4"}, say="Pinning."), "done"]
    with upstream(replies=replies) as up:
        running = Running(tmp_path, up, code_assist_upstream=up.url)
        try:
            headers = {"Authorization": "Bearer ya29.oauth"}
            sent = envelope(gemini_conversation(60))
            got = httpx.post(f"{running.url}/v1internal:generateContent", json=sent, headers=headers, timeout=60)
            assert got.status_code == 200 and got.json()["traceId"] == "trace-1"
            assert got.json()["response"]["candidates"][0]["content"]["parts"] == [{"text": "first answer here"}]
            first = up.requests[0]
            assert {k: v for k, v in first.items() if k != "request"} == {
                k: v for k, v in sent.items() if k != "request"
            }
            assert (
                first["request"]["session_id"] == "cli-session-1"
                and up.headers[0]["Authorization"] == headers["Authorization"]
            )
            assert len(json.dumps(first["request"]["contents"])) < 0.3 * len(json.dumps(sent["request"]["contents"]))
            assert "activate" in json.dumps(first["request"]["tools"])
            # streamed: the model says something and calls pin; then it answers
            short = envelope(gemini_conversation(2, output_chars=600))
            path = "/v1internal:streamGenerateContent?alt=sse"
            streamed = httpx.post(running.url + path, json=short, headers=headers, timeout=60)
            answers = sse_answers(streamed.text)
            assert all(set(a) == {"response", "traceId"} for a in answers), answers
            parts = [p for a in answers for p in a["response"]["candidates"][0]["content"]["parts"]]
            assert "".join(p.get("text", "") for p in parts) == "Pinning.done" and len(up.requests) == 3
            again = up.requests[2]["request"]
            assert pairing_refused("gemini", again) is None and '"pin"' in json.dumps(again["contents"])
            # another method of the API: upstream untouched
            load = httpx.post(f"{running.url}/v1internal:loadCodeAssist", json={"metadata": {}}, headers=headers)
            assert load.status_code == 200 and up.other == ["POST /v1internal:loadCodeAssist"]
            assert running.proxy.counts["tool_calls"] == 1 and running.proxy.counts["failed_open"] == 0
        finally:
            running.close()

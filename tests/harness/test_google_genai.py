"""The Google Gen AI SDK integration: a loop over the real ``google-genai`` client's
``generate_content``, against the scripted model of tests/proxy/upstream.py (which refuses a
turn's calls sent back without their signature, as Gemini 3 does), with context_os assembling
what each call sends."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from google import genai
from google.genai import types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_os.context.frames import frame_docs, verify_frame
from context_os.harness.google_genai import GeminiHook
from tests.helpers import eager_hook, hashed_per_call, pairing_refused, stub_ref
from tests.proxy.upstream import Upstream, call, reads, upstream
from tests.proxy.upstream import gemini_outputs as outputs

pytestmark = pytest.mark.timeout(120)

MODEL = "gemini-2.5-pro"
STUB = "[read_file output, "
READ = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="read_file",
            description="Read a file.",
            parameters_json_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        )
    ]
)


@pytest.fixture
def clients() -> Iterator[list[genai.Client]]:
    made: list[genai.Client] = []
    yield made
    for c in made:
        c.close()


def loop(hook: GeminiHook, up: Upstream, made: list[genai.Client], prompt: str = "fix the bug") -> list[Any]:
    """The agent: its own ``read_file`` and our tools, until the model answers; its contents."""
    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=up.url))
    made.append(client)
    config = types.GenerateContentConfig(system_instruction="You are a coding agent.", tools=[READ, *hook.tools()])
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text=prompt)])]
    for _ in range(20):
        reply = client.models.generate_content(model=MODEL, contents=hook.transform_contents(contents), config=config)
        contents.append(reply.candidates[0].content)  # type: ignore[index]
        if not reply.function_calls:
            return contents
        parts = []
        for c in reply.function_calls:
            if hook.owns(c):
                parts.append(hook.run(c))
            else:
                text = f"# {c.args['path']}\n" + "x = 1\n" * 400  # type: ignore[index]
                parts.append(
                    types.Part(function_response=types.FunctionResponse(name=c.name, response={"output": text}))
                )
        contents.append(types.Content(role="user", parts=parts))
    raise AssertionError("the model never answered")


def test_a_loop_sends_stubs_for_old_outputs_and_keeps_its_own_contents(db: Any, clients: list[genai.Client]) -> None:
    hook = eager_hook(GeminiHook, db, "g1", "openai")
    with upstream(replies=[*reads(6), "done"]) as up:
        contents = loop(hook, up, clients)
    assert contents[-1].parts[0].text == "done" and len(up.requests) == 7
    sent = outputs(up.requests[-1])
    assert sent[0].startswith(STUB) and hook.session.resolve(stub_ref(sent[0]) or "")
    assert sent[-1].startswith("# m6.py")
    # every call went back with its signature (the scripted model refuses one without), the
    # loop's own contents are untouched: the real outputs
    assert all("thoughtSignature" in p for c in up.requests[-1]["contents"] for p in c["parts"] if "functionCall" in p)
    assert contents[2].parts[0].function_response.response["output"].startswith("# m1.py")
    frames = frame_docs(db, "g1")
    assert len(frames) == 7 and all(verify_frame(db, f).ok for f in frames)
    assert hook.hook.last.sync.new == 2 and not hook.hook.last.sync.rewritten
    assert hook.hook.last.tokens < hook.hook.last.tokens_full


def test_the_model_activates_a_collapsed_output_through_our_tool(db: Any, clients: list[genai.Client]) -> None:
    hook = eager_hook(GeminiHook, db, "g1", "openai")
    with upstream(replies=[*reads(5), call("activate", id="r2"), "done"]) as up:
        loop(hook, up, clients)
    after = up.requests[-1]
    assert json.loads(outputs(after)[-1])["status"] == "activated"
    assert "# m1.py" in json.dumps(after["contents"][-1])  # shown again, at the end


def test_a_call_reads_what_came_since_though_every_content_is_dumped_again(
    db: Any, clients: list[genai.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = eager_hook(GeminiHook, db, "g1", "openai")
    with upstream(replies=[*reads(10), "done"]) as up, hashed_per_call(hook.hook, monkeypatch) as counts:
        loop(hook, up, clients)
    assert len(counts) == 11 and counts[-1] == counts[3] <= 5, counts


def test_async_and_contents_as_dicts_give_the_same_assembly(db: Any) -> None:
    """``atransform_contents`` over the SDK's dict form gives what ``transform_contents`` gave over
    its objects, for a second session of the same contents."""
    contents = [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {"path": "a"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "read_file", "response": {"output": "x\n" * 900}}}]},
    ]
    one = eager_hook(GeminiHook, db, "g1", "openai").transform_contents(
        [types.Content.model_validate(c) for c in contents]
    )
    two = asyncio.run(eager_hook(GeminiHook, db, "g2", "openai").atransform_contents(contents))
    assert one == two and one[2].parts[0].function_response.response["output"] == "x\n" * 900


def test_contents_it_cannot_read_go_to_the_model_as_they_came_with_one_warning(db: Any, caplog: Any) -> None:
    hook = eager_hook(GeminiHook, db, "g1", "openai")
    odd = [{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"output": "x"}}}]}]
    with caplog.at_level("WARNING", logger="context_os.harness.google_genai"):
        assert hook.transform_contents(odd) == [types.Content.model_validate(odd[0])]
        assert hook.transform_contents(odd) == [types.Content.model_validate(odd[0])]
    assert len([r for r in caplog.records if "unmanaged" in r.getMessage()]) == 1
    assert frame_docs(db, "g1") == []


def test_an_older_content_put_anew_is_read_again_and_the_newest_is_read_at_every_call(db: Any) -> None:
    """The contents read before are taken as they were read while they are the same objects: one
    put anew in its place (its text changed) is read again, from there (a rewrite of the
    history); the newest is read again at every call (it may have changed in place)."""
    hook = eager_hook(GeminiHook, db, "g1", "openai")
    contents = [types.Content(role="user", parts=[types.Part(text=f"message {k}")]) for k in range(3)]
    hook.transform_contents(contents)
    contents[-1].parts[0].text = "message 2, changed in place"  # type: ignore[index]
    sent = hook.transform_contents(contents)
    assert sent[-1].parts[0].text == "message 2, changed in place"  # type: ignore[index]
    assert hook.hook.last.sync.gone == [2]  # the newest alone taken anew
    contents[0] = types.Content(role="user", parts=[types.Part(text="message 0, put anew")])
    sent = hook.transform_contents(contents)
    assert sent[0].parts[0].text == "message 0, put anew"  # type: ignore[index]
    assert len(hook.hook.last.sync.gone) == 3 and hook.hook.last.sync.gone[0] == 0  # from there on


_SESSIONS = itertools.count()
"""A session of its own for each example (they share the test's store)."""
_OUTPUT = st.integers(0, 3000).map(lambda n: "x" * n)
_TURN = st.one_of(
    st.text(min_size=1, max_size=30).map(lambda t: ("say", t)),
    st.lists(st.tuples(st.sampled_from(["read_file", "glob"]), _OUTPUT, st.booleans()), min_size=1, max_size=3).map(
        lambda calls: ("calls", calls)
    ),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(_TURN, min_size=1, max_size=14))
def test_whatever_it_collapses_every_call_it_sends_is_answered_and_signed(db: Any, turns: list[Any]) -> None:
    """A conversation of texts and turns of one to three signed calls (each answered, in its own
    order, with or without Gemini CLI's id), given a call at a time to a hook that collapses
    early: every assembly is one Gemini takes (``pairing_refused``: each call turn followed by as
    many responses, no empty turn, the current turn's first call signed) and ends with a user
    turn. (600 examples by hand: no failure; it fails if a rebuilt call loses its signature or a
    content's responses go back as contents of their own.)"""
    hook = eager_hook(GeminiHook, db, f"g{next(_SESSIONS)}", "openai", history_max_tokens=1_000, token_budget=3_000)
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "go"}]}]
    for n, (kind, value) in enumerate(turns):
        if kind == "say":
            contents += [{"role": "model", "parts": [{"text": value}]}, {"role": "user", "parts": [{"text": "more"}]}]
        else:
            calls = [
                {"functionCall": {"name": name, "args": {"path": f"f{n}_{k}"}}} for k, (name, _, _) in enumerate(value)
            ]
            calls[0]["thoughtSignature"] = base64.b64encode(f"turn {n}".encode()).decode()  # as Gemini 3 signs
            responses = [
                {"functionResponse": {**({"id": f"{name}-{n}-{k}"} if with_id else {}), "name": name,
                                      "response": {"output": output}}}
                for k, (name, output, with_id) in reversed(list(enumerate(value)))
            ]  # fmt: skip
            contents += [{"role": "model", "parts": calls}, {"role": "user", "parts": responses}]
        sent = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in hook.transform_contents(contents)]
        refused = pairing_refused("gemini", {"contents": sent})
        assert refused is None, (refused, sent)
        assert sent[-1]["role"] == "user"

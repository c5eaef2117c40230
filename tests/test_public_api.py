"""The names ``context_os`` exports are the ones we mean to support."""

from pathlib import Path

from mypy import api as mypy_api

import context_os


def test_public_names():
    assert sorted(context_os.__all__) == [
        "Assembly",
        "ContextHook",
        "ContextOSError",
        "OpenAIHook",
        "RetentionPolicy",
        "Session",
        "Store",
        "open_store",
    ]
    for name in context_os.__all__:
        assert getattr(context_os, name) is not None
    assert sorted(context_os._HOME) == sorted(context_os.__all__)  # every public name has its home


def test_every_library_error_is_a_context_os_error():
    from context_os import errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.ContextOSError)


SDK_LOOP = """
from typing import Any

from anthropic import Anthropic
from anthropic.types import MessageParam, ToolParam
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from context_os import Session, open_store
from context_os.harness import AnthropicHook, OpenAIHook

my_tools: list[ChatCompletionToolParam] = []
hook = OpenAIHook(Session.open(open_store(), "my-session", harness="openai"))
messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Fix the failing test"}]
context = hook.transform_context(messages)
reply = OpenAI().chat.completions.create(model="gpt-4.1", messages=context, tools=my_tools + hook.tools)
history: list[Any] = [*messages, reply.choices[0].message]
hook.transform_context(history)

ahook = AnthropicHook(Session.open(open_store(), "a1", harness="anthropic"))
amessages: list[MessageParam] = [{"role": "user", "content": "hi"}]
request = ahook.transform_request(amessages, system="You are a coding agent.")
atools: list[ToolParam] = []
response = Anthropic().messages.create(model="m", max_tokens=10, tools=[*atools, *ahook.tools], **request)
amessages.append({"role": "assistant", "content": response.content})
"""


def test_the_hooks_type_check_against_the_sdks_own_message_types(tmp_path: Path, monkeypatch) -> None:
    """A loop typed with the OpenAI and Anthropic SDKs' own message types passes ``mypy --strict``:
    their TypedDicts go in, and what comes out is what ``create(messages=...)`` takes. Before,
    the hooks took and returned ``dict[str, Any]``, which a TypedDict is not, so the README's
    loop failed to type-check on both sides of the call."""
    (tmp_path / "loop.py").write_text(SDK_LOOP)
    # the context_os under test, not one installed elsewhere
    monkeypatch.setenv("MYPYPATH", str(Path(context_os.__file__).resolve().parent.parent))
    out, err, status = mypy_api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(tmp_path / "loop.py")]
    )
    assert status == 0, out + err

"""Bad input to every harness adapter: a typed error or success, never a crash, never a partial write.

Each target gets hundreds of inputs (the ``FUZZ`` profile: deterministic), most of them real
conversations with one to four things wrong (see ``_adversarial``), the rest random structures
and values that are not message lists at all. For each input, on a fresh session of an SQLite
store (sometimes already holding the good conversation):

* the hook returns, or raises an error of ``context_os.errors`` (``InvalidOutput``, "an assembled
  context failed validation", would be a bug of ours and fails the test);
* after an error the store's newest transaction is the one before the call (nothing written),
  the session reloaded from the store holds exactly what the hook holds (nothing accepted lost),
  and the session goes on: the good conversation is accepted next.

The validators (``validate_openai``, ``validate_anthropic``) get lists of message objects with
anything in them: ``InvalidOutput`` or nothing.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from context_os import Session
from context_os.context.load import load_view
from context_os.errors import ContextOSError, InvalidOutput
from context_os.harness.anthropic import AnthropicHook, validate_anthropic
from context_os.harness.langchain import LangChainHook
from context_os.harness.openai import OpenAIHook, validate_openai
from context_os.harness.pi import PiHook
from context_os.harness.pydantic_ai import PydanticAIHook
from context_os.store.sqlite import SqliteStore
from tests.harness import pi_msgs as pi
from tests.helpers import call, coding_session, result, say, user
from tests.reliability._adversarial import ADVERSARIAL, FUZZ, JSON, TEXT, examples, lists_of, mutated
from tests.reliability.conftest import Counts

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

EXAMPLES = examples(400)
"""Inputs per hook target."""

_ids = itertools.count()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    """One store for all the examples of a test (each example opens a session of its own)."""
    s = SqliteStore(tmp_path / "fuzz.db")
    yield s
    s.close()


def _exercise(
    store: SqliteStore,
    counts: Counts,
    target: str,
    hook_for: Callable[[Session], Any],
    send: Callable[[Any, Any], Any],
    good: Any,
    bad: Any,
    primed: bool,
) -> None:
    """Send ``bad`` to a new session's hook (after ``good`` if ``primed``) and check the outcome."""
    sid = f"fuzz-{next(_ids)}"
    hook = hook_for(Session.open(store, sid, harness="generic"))
    if primed:
        send(hook, good)
    before = store.latest_tx()
    try:
        send(hook, bad)
    except InvalidOutput:
        raise  # the hook accepted the input and then built an invalid context: our bug
    except ContextOSError as e:
        assert store.latest_tx() == before, f"{type(e).__name__} after a write: {e}"
        reloaded = load_view(store, sid)  # what a resume would see: nothing of the refused input
        assert [x["h"] for x in reloaded.entries] == [x["h"] for x in hook.session.view.entries]
        send(hook, good)  # the session goes on
        counts.add(f"fuzz: {target}", inputs=1, typed_errors=1)
        counts.add(f"fuzz: {target} (errors)", **{type(e).__name__: 1})
    else:
        counts.add(f"fuzz: {target}", inputs=1, accepted=1)


def _send(hook: Any, messages: Any) -> Any:
    return hook.transform_context(messages)


# -- OpenAI chat completions -----------------------------------------------------------------------

_OPENAI_GOOD = [
    coding_session(2, output_chars=200),
    [
        {"role": "developer", "content": "Be brief.", "name": "ops"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "x"}}],
        },
        {
            "role": "assistant",
            "content": "two calls",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "read", "arguments": '{"path": "x.py"}'}},
                {"id": "b", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
            ],
        },
        result("a", "print(1)"),
        result("b", "ok"),
        say("done"),
        user("and now?"),
    ],
    [user("go"), call("c9", "bash", command="ls"), result("c9", "a.py\nb.py")],
]
_OPENAI_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system", "developer"]) | ADVERSARIAL},
    optional={
        "content": ADVERSARIAL | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": ADVERSARIAL})),
        "tool_calls": ADVERSARIAL
        | st.lists(
            st.fixed_dictionaries(
                {"id": TEXT, "function": st.fixed_dictionaries({"name": TEXT, "arguments": ADVERSARIAL})}
            ),
            max_size=2,
        ),
        "tool_call_id": TEXT | ADVERSARIAL,
        "name": ADVERSARIAL,
    },
)


@settings(FUZZ, max_examples=EXAMPLES)
@given(msgs=lists_of(_OPENAI_MESSAGE, _OPENAI_GOOD), primed=st.booleans())
def test_fuzz_openai_hook(store: SqliteStore, reliability: Counts, timed: None, msgs: Any, primed: bool) -> None:
    _exercise(
        store,
        reliability,
        "openai_hook",
        OpenAIHook,
        _send,
        _OPENAI_GOOD[0],
        msgs,
        primed,
    )


# -- Anthropic Messages ------------------------------------------------------------------------------

_ANTHROPIC_GOOD = [
    [
        {"role": "user", "content": "fix calc.py"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "read first", "signature": "sig"},
                {"type": "text", "text": "reading"},
                {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "calc.py"}},
                {"type": "tool_use", "id": "t2", "name": "bash", "input": {"command": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "def add(a, b):\n    return a - b\n"},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": [{"type": "text", "text": "calc.py"}, {"type": "image", "source": {"data": "x"}}],
                    "is_error": False,
                },
                {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}},
            ],
        },
        {"role": "assistant", "content": "Fixed."},
        {"role": "user", "content": "thanks"},
    ],
]
_ANTHROPIC_BLOCK = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "tool_result", "image", "thinking", "x"]) | ADVERSARIAL},
    optional={"text": ADVERSARIAL, "id": TEXT, "name": TEXT, "input": ADVERSARIAL, "tool_use_id": TEXT}
    | {"content": ADVERSARIAL, "is_error": ADVERSARIAL},
)
_ANTHROPIC_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system"]) | ADVERSARIAL},
    optional={"content": ADVERSARIAL | st.lists(_ANTHROPIC_BLOCK, max_size=3), "context_os_system_param": JSON},
)
_SYSTEM = st.one_of(
    st.none(),
    st.just("You are careful."),
    st.just([{"type": "text", "text": "You are careful.", "cache_control": {"type": "ephemeral"}}]),
    ADVERSARIAL,
    st.lists(ADVERSARIAL, max_size=2),
)


@settings(FUZZ, max_examples=EXAMPLES)
@given(msgs=lists_of(_ANTHROPIC_MESSAGE, _ANTHROPIC_GOOD), system=_SYSTEM, primed=st.booleans())
def test_fuzz_anthropic_hook(
    store: SqliteStore, reliability: Counts, timed: None, msgs: Any, system: Any, primed: bool
) -> None:
    good = _ANTHROPIC_GOOD[0]

    def send(hook: AnthropicHook, messages: Any) -> Any:
        # the good conversation goes with the good system prompt; a bad one with the drawn one
        return hook.transform_request(messages, system="You are careful." if messages is good else system)

    _exercise(store, reliability, "anthropic_hook", AnthropicHook, send, good, msgs, primed)


# -- pydantic-ai -----------------------------------------------------------------------------------

_PAI_GOOD_JSON: list[dict[str, Any]] = [
    {
        "kind": "request",
        "parts": [
            {"part_kind": "system-prompt", "content": "You are a coding agent."},
            {"part_kind": "user-prompt", "content": "fix calc.py"},
        ],
    },
    {
        "kind": "response",
        "parts": [
            {"part_kind": "text", "content": "reading"},
            {"part_kind": "tool-call", "tool_name": "read", "args": {"path": "calc.py"}, "tool_call_id": "t1"},
            {"part_kind": "tool-call", "tool_name": "bash", "args": '{"command": "ls"}', "tool_call_id": "t2"},
        ],
    },
    {
        "kind": "request",
        "parts": [
            {"part_kind": "tool-return", "tool_name": "read", "content": "def add(): ...", "tool_call_id": "t1"},
            {"part_kind": "retry-prompt", "tool_name": "bash", "content": "bad args", "tool_call_id": "t2"},
            {"part_kind": "user-prompt", "content": ["and", "this"]},
        ],
    },
    {"kind": "response", "parts": [{"part_kind": "text", "content": "Fixed."}]},
    {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "thanks"}]},
]
_PAI_GOOD = ModelMessagesTypeAdapter.validate_python(_PAI_GOOD_JSON)


def _loaded(data: Any) -> Any:
    """A mutated JSON form as pydantic-ai loads it; if it refuses (as the JSON-RPC server's decoder
    would, before any adapter sees it), the JSON itself (not messages at all)."""
    try:
        return ModelMessagesTypeAdapter.validate_python(data)
    except Exception:
        return data


def _part(cls: type, **fields: Any) -> Any:
    """A part built without validation (dataclasses take anything), or the fields if even that fails."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # RetryPromptPart: still what older runs hold
            return cls(**fields)
    except Exception:
        return fields


_A = ADVERSARIAL
_PAI_PART = st.one_of(
    st.builds(lambda c: _part(UserPromptPart, content=c), _A | st.lists(_A, max_size=3)),
    st.builds(lambda c: _part(SystemPromptPart, content=c), _A),
    st.builds(lambda n, c, i: _part(ToolReturnPart, tool_name=n, content=c, tool_call_id=i), _A, _A, _A),
    st.builds(lambda n, c, i: _part(RetryPromptPart, tool_name=n, content=c, tool_call_id=i), _A, _A, _A),
    st.builds(lambda c: _part(TextPart, content=c), _A),
    st.builds(lambda c: _part(ThinkingPart, content=c), _A),
    st.builds(lambda n, a, i: _part(ToolCallPart, tool_name=n, args=a, tool_call_id=i), _A, _A, _A),
    _A,
)
_PAI_MESSAGE = st.one_of(
    st.builds(lambda p: _part(ModelRequest, parts=p), st.lists(_PAI_PART, max_size=3)),
    st.builds(lambda p: _part(ModelResponse, parts=p), st.lists(_PAI_PART, max_size=3)),
    st.builds(lambda p: _part(ModelRequest, parts=p), _A),
    _A,
)
_PAI_MESSAGES = st.one_of(
    mutated([_PAI_GOOD_JSON]).map(_loaded),
    mutated([_PAI_GOOD_JSON]).map(_loaded),
    st.tuples(st.lists(_PAI_MESSAGE, max_size=3), st.integers(0, 5)).map(lambda t: [*_PAI_GOOD[: t[1]], *t[0]]),
    st.lists(_PAI_MESSAGE, max_size=4),
    _A,
)


@settings(FUZZ, max_examples=EXAMPLES)
@given(msgs=_PAI_MESSAGES, primed=st.booleans())
def test_fuzz_pydantic_ai_hook(store: SqliteStore, reliability: Counts, timed: None, msgs: Any, primed: bool) -> None:
    good: list[ModelMessage] = list(_PAI_GOOD)
    _exercise(store, reliability, "pydantic_ai_hook", PydanticAIHook, _send, good, msgs, primed)


# -- LangChain ---------------------------------------------------------------------------------------

_LC_GOOD_JSON: list[dict[str, Any]] = [
    {"type": "system", "data": {"content": "You are a coding agent."}},
    {"type": "human", "data": {"content": [{"type": "text", "text": "fix calc.py"}]}},
    {
        "type": "ai",
        "data": {
            "content": [{"type": "thinking", "thinking": "read it", "signature": "s"}, {"type": "text", "text": "ok"}],
            "tool_calls": [
                {"name": "read", "args": {"path": "calc.py"}, "id": "t1", "type": "tool_call"},
                {"name": "bash", "args": {"command": "ls"}, "id": "t2", "type": "tool_call"},
            ],
        },
    },
    {"type": "tool", "data": {"content": "def add(): ...", "tool_call_id": "t1", "name": "read"}},
    {"type": "tool", "data": {"content": "no such command", "tool_call_id": "t2", "status": "error"}},
    {"type": "ai", "data": {"content": "Fixed."}},
    {"type": "human", "data": {"content": "thanks"}},
]
_LC_GOOD = messages_from_dict(_LC_GOOD_JSON)


def _lc_loaded(data: Any) -> Any:
    """A mutated JSON form as LangChain loads it; if it refuses (as the JSON-RPC server's decoder
    would, before any adapter sees it), the JSON itself (not messages at all)."""
    try:
        return messages_from_dict(data)
    except Exception:
        return data


def _lc(cls: type[BaseMessage], **fields: Any) -> Any:
    """A message built without validation (``model_construct`` takes any field values)."""
    return cls.model_construct(**fields)


_LC_MESSAGE = st.one_of(
    st.builds(lambda c: _lc(HumanMessage, content=c), _A | st.lists(_A, max_size=3)),
    st.builds(lambda c: _lc(SystemMessage, content=c), _A),
    st.builds(lambda c, t: _lc(AIMessage, content=c, tool_calls=t), _A, _A | st.lists(_A, max_size=2)),
    st.builds(lambda c, i, n, st_: _lc(ToolMessage, content=c, tool_call_id=i, name=n, status=st_), _A, _A, _A, _A),
    st.builds(lambda c, r: _lc(ChatMessage, content=c, role=r), _A, _A),
    _A,
)
_LC_MESSAGES = st.one_of(
    mutated([_LC_GOOD_JSON]).map(_lc_loaded),
    st.tuples(st.lists(_LC_MESSAGE, max_size=3), st.integers(0, 7)).map(lambda t: [*_LC_GOOD[: t[1]], *t[0]]),
    st.lists(_LC_MESSAGE, max_size=4),
    _A,
)


@settings(FUZZ, max_examples=EXAMPLES)
@given(msgs=_LC_MESSAGES, primed=st.booleans())
def test_fuzz_langchain_hook(store: SqliteStore, reliability: Counts, timed: None, msgs: Any, primed: bool) -> None:
    _exercise(store, reliability, "langchain_hook", LangChainHook, _send, list(_LC_GOOD), msgs, primed)


# -- Pi ----------------------------------------------------------------------------------------------

_PI_GOOD = [
    [
        {"role": "system", "content": "You are Pi.", "sections": {"tools": "read, bash"}, "timestamp": 1},
        pi.user("fix calc.py"),
        pi.assistant(
            {"type": "thinking", "thinking": "read it", "thinkingSignature": "s"},
            {"type": "text", "text": "reading"},
            pi.tool_call("c1", "read", path="calc.py"),
        ),
        pi.result("c1", "read", "def add(a, b):\n    return a - b\n"),
        {
            "role": "toolResult",
            "toolCallId": "c0",
            "toolName": "bash",
            "content": [{"type": "text", "text": "x"}, {"type": "image", "data": "AA==", "mimeType": "image/png"}],
            "isError": True,
            "details": {"contextOs": True},
            "timestamp": 2,
        },
        {"role": "bashExecution", "command": "ls", "output": "a.py", "exitCode": 1, "timestamp": 3},
        {"role": "bashExecution", "command": "pwd", "output": "/", "excludeFromContext": True, "timestamp": 4},
        {"role": "custom", "customType": "note", "content": "remember", "display": True, "timestamp": 5},
        {"role": "branchSummary", "summary": "tried B", "fromId": "x", "timestamp": 6},
        {"role": "compactionSummary", "summary": "earlier work", "tokensBefore": 100, "timestamp": 7},
        *pi.step("c2", "edit", "ok", path="calc.py", oldText="a - b", newText="a + b"),
        pi.say("Fixed."),
        pi.user("thanks"),
    ],
]
_PI_BLOCK = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image", "thinking", "toolCall", "x"]) | _A},
    optional={"text": _A, "id": TEXT, "name": TEXT, "arguments": _A, "thinking": _A, "data": _A},
)
_PI_MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(
            ["user", "assistant", "toolResult", "system", "bashExecution", "custom", "branchSummary", "x"]
        )
        | _A
    },
    optional={"content": _A | st.lists(_PI_BLOCK, max_size=3), "toolCallId": TEXT | _A, "isError": _A}
    | {"timestamp": _A, "excludeFromContext": _A, "summary": _A, "command": _A, "output": _A, "sections": _A},
)
# the message list the Pi extension hands over crosses the JSON-RPC boundary as JSON: the same
# shapes as here (the server fuzz in tests/server/test_server.py covers the transport)


@settings(FUZZ, max_examples=EXAMPLES)
@given(msgs=lists_of(_PI_MESSAGE, _PI_GOOD), primed=st.booleans())
def test_fuzz_pi_hook(store: SqliteStore, reliability: Counts, timed: None, msgs: Any, primed: bool) -> None:
    _exercise(store, reliability, "pi_hook", PiHook, _send, _PI_GOOD[0], msgs, primed)


# -- the validators ----------------------------------------------------------------------------------

_ANY_MESSAGES = st.one_of(
    mutated(_OPENAI_GOOD), mutated(_ANTHROPIC_GOOD), st.lists(_OPENAI_MESSAGE | _ANTHROPIC_MESSAGE, max_size=4)
).map(lambda v: [m for m in v if isinstance(m, dict)] if isinstance(v, list) else [])


@settings(FUZZ, max_examples=EXAMPLES)
@given(msgs=_ANY_MESSAGES, last=st.sampled_from([None, "user", "assistant"]))
def test_fuzz_validators(reliability: Counts, timed: None, msgs: list[dict[str, Any]], last: str | None) -> None:
    for name, validate in (("validate_openai", validate_openai), ("validate_anthropic", validate_anthropic)):
        try:
            validate(msgs, last_input_role=last)
        except InvalidOutput:
            reliability.add(f"fuzz: {name}", inputs=1, typed_errors=1)
        else:
            reliability.add(f"fuzz: {name}", inputs=1, accepted=1)


# -- what the fuzz found, pinned ---------------------------------------------------------------------

_DEEP: dict[str, Any] = {"k": "leaf"}
for _ in range(3000):
    _DEEP = {"k": _DEEP}


_FOUND: dict[str, tuple[Callable[[Session], Any], Callable[[Any, Any], Any], Any]] = {
    "openai: not a list": (OpenAIHook, _send, None),
    "openai: a field nested too deep to hash": (OpenAIHook, _send, [user("hi") | {"name": _DEEP}]),
    "openai: two calls share an id": (
        OpenAIHook,
        _send,
        [user("go"), call("c1") | {"tool_calls": call("c1")["tool_calls"] * 2}, result("c1", "x")],
    ),
    "anthropic: a system that is not text": (
        AnthropicHook,
        lambda h, m: h.transform_request(m, system=False),
        [user("go")],
    ),
    "anthropic: not a list": (AnthropicHook, lambda h, m: h.transform_request(m), "go"),
    "anthropic: tool input nested too deep": (
        AnthropicHook,
        lambda h, m: h.transform_request(m),
        [
            user("go"),
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x", "input": _DEEP}]},
        ],
    ),
    "pydantic-ai: a response part that is not a part": (
        PydanticAIHook,
        _send,
        [_PAI_GOOD[0], ModelResponse(parts=[None])],  # type: ignore[list-item]
    ),
    "pydantic-ai: parts that are not a list": (PydanticAIHook, _send, [ModelRequest(parts={"0": None})]),  # type: ignore[arg-type]
    "langchain: a ChatMessage without a role": (LangChainHook, _send, [_lc(ChatMessage, content="", role=None)]),
    "pi: a role that is not a string": (PiHook, _send, [{"role": {"value": "user"}, "content": "x"}]),
    "pi: not a list": (PiHook, _send, 5),
}


@pytest.mark.parametrize("case", sorted(_FOUND))
def test_inputs_the_fuzz_found_get_a_typed_error_and_write_nothing(store: SqliteStore, case: str) -> None:
    hook_for, send, bad = _FOUND[case]
    hook = hook_for(Session.open(store, f"found-{next(_ids)}"))
    before = store.latest_tx()
    with pytest.raises(ContextOSError) as e:
        send(hook, bad)
    assert not isinstance(e.value, InvalidOutput)
    assert store.latest_tx() == before


def test_a_call_left_unanswered_before_a_stray_result_gets_its_result_in_place(store: SqliteStore) -> None:
    hook = OpenAIHook(Session.open(store, f"found-{next(_ids)}"))
    out = hook.transform_context([user("go"), call("c1"), result("other", "a.py")])
    validate_openai(out)
    assert [m["role"] for m in out[:4]] == ["user", "assistant", "tool", "user"]
    assert out[2]["tool_call_id"] == "c1" and "No result was recorded" in out[2]["content"]


@pytest.mark.parametrize(
    ("validate", "msgs"),
    [
        (validate_openai, [{"role": "assistant", "tool_calls": "c1"}]),
        (
            validate_openai,
            [{"role": "assistant", "tool_calls": [{"id": ["c1"]}]}, {"role": "tool", "tool_call_id": [1]}],
        ),
        (validate_anthropic, [{"role": "user", "content": 5}]),
        (validate_anthropic, [{"role": "assistant", "content": True}, {"role": "user", "content": "x"}]),
    ],
)
def test_validators_report_messages_of_the_wrong_shape(
    validate: Callable[[list[dict[str, Any]]], None], msgs: list[dict[str, Any]]
) -> None:
    with pytest.raises(InvalidOutput):
        validate(msgs)

"""pydantic-ai (``pydantic-ai-slim`` 2.x): context_os as a capability of an ``Agent``.

pydantic-ai 2 removed ``Agent(history_processors=...)``; its replacement, the ``ProcessHistory``
capability, writes what the processor returns back into the run's history. That suits trimming,
not context_os: the harness's history is our event source and must stay as the harness made it
(stubs and the volatile ``<context_os>`` part fed back in would read as a rewritten history every
turn). So ``ContextOS`` hooks ``prepare_model_request`` (after every ``before_model_request``
hook, history processors included) and replaces only the messages of the request being made; the
run's history keeps the real tool outputs. It also registers our tools
(activate, deactivate, pin, unpin) as a toolset::

    hook = PydanticAIHook(Session.open(store, "my-session", harness="pydantic-ai"))
    agent = Agent(model, capabilities=[hook.capability()])

``hook.transform_context`` (sync) and ``hook.atransform_context`` (async) are plain history
processors, ``list[ModelMessage] -> list[ModelMessage]``, for loops that call models directly.

Mapping. A ``ModelResponse`` is one assistant message: text parts are its text, ``ToolCallPart``s
its tool calls; the whole response is kept (JSON form) in ``extra`` and rendered back as it was,
each call's ``args`` from the neutral call (so collapsed calls' long arguments collapse too). A
``ModelRequest`` is split: each ``ToolReturnPart``, typed or not (and legacy ``RetryPromptPart`` that answers
a call) becomes one neutral ``tool`` message, then each run of the other parts becomes a
``system`` (system prompts, and the parts that say what later requests are made with:
``_STANDING``) or ``user`` message that keeps its parts verbatim. Rendering merges
consecutive requests back into one and names each rendered tool return after its call. A
response's ``ThinkingPart``s are counted (``extra_chars``) and left off past the session's
thinking horizon (``drop_thinking``), and, when one was an OpenAI Responses reasoning item, the
item ids of its other parts with them (``_without_reasoning``). Typed
tool parts (``tool_kind`` subclasses such as tool search) are calls and results too, each sent
whole as it came (pydantic-ai reads their content), which the engine is told (``SENT_WHOLE``), so
that it counts them whole even collapsed; native tool parts, which a response holds with their
returns, are passed through verbatim, never managed.

Parts the engine synthesises (a stub for a result whose call is no longer shown, a result for a
call that never got one, the ``<context_os>`` part) carry the Unix epoch as their timestamp, so
rendering stays a pure function of the session state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeGuard

from . import _pydantic_ai_version  # noqa: F401  first: an older pydantic-ai is refused, saying what to install

# isort: split
from pydantic_ai import messages as _messages
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ERROR_OUTCOMES,
    BaseToolCallPart,
    BaseToolReturnPart,
    BinaryContent,
    DocumentUrl,
    FilePart,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext, Tool, ToolDefinition
from pydantic_ai.toolsets import FunctionToolset

from ..context.entries import Incoming, Msg, ToolCall
from ..context.view import SENT_WHOLE
from ..errors import HashError, MalformedMessage
from ..hashing import hash_value
from ..tokens import CHARS_PER_TOKEN, document_tokens, image_tokens, value_chars
from .base import Adapter, ContextHook, MergeCache, check_message_list, check_utf8, fallback_hash, sorted_keys
from .pairing import Pairing, Reading

if TYPE_CHECKING:
    pass

__all__ = ["PYDANTIC_AI_PAIRING", "ContextOS", "PydanticAIAdapter", "PydanticAIHook"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""Timestamp of the parts context_os synthesises."""


def _dump(message: ModelMessage) -> dict[str, Any]:
    # warnings="error": a message pydantic cannot serialise raises (a ValueError) instead of
    # warning and dumping something else
    dumped: dict[str, Any] = ModelMessagesTypeAdapter.dump_python([message], mode="json", warnings="error")[0]
    return dumped


def _load(data: dict[str, Any]) -> ModelMessage:
    return ModelMessagesTypeAdapter.validate_python([data])[0]


def _is_call(part: Any) -> TypeGuard[BaseToolCallPart[Any]]:
    """A part that calls a tool the next request answers: a ``ToolCallPart`` or a typed one
    (``tool_kind``: tool search, loading a capability; any ``BaseToolCallPart`` but a native
    tool's, whose return the same response holds)."""
    return isinstance(part, BaseToolCallPart) and not isinstance(part, NativeToolCallPart)


def _is_typed(part: Any) -> bool:
    """A typed call or return (tool search's, a capability's load): pydantic-ai reads its content
    (the tools found, a capability's instructions), which is therefore sent as it came."""
    return type(part) not in (ToolCallPart, ToolReturnPart, RetryPromptPart)


def _is_result(part: Any) -> bool:
    """A part that answers a call (``_is_call``): a ``ToolReturnPart`` or a typed one (any
    ``BaseToolReturnPart`` but a native tool's), or a legacy ``RetryPromptPart`` that answers
    a call. Each is a neutral ``tool`` message: the history horizon never stands between it and
    its call."""
    if isinstance(part, RetryPromptPart):
        return part.tool_name is not None
    return isinstance(part, BaseToolReturnPart) and not isinstance(part, NativeToolReturnPart)


def _answered(part: Any) -> str | None:
    """The call id a part answers, else None."""
    return str(part.tool_call_id) if _is_result(part) else None


def _call_part(call_id: str) -> str:
    """A tool call id without the OpenAI Responses item id older pydantic-ai joined to it
    (``call_…|fc_…``, before ``ToolCallPart`` had an ``id``; its OpenAI Responses model still
    splits it there, and sends the item id)."""
    return call_id.split("|", 1)[0]


def _pairing(m: ModelMessage) -> Reading:
    """Every call of a response must be answered in the request(s) right after it: consecutive
    requests are one turn (rendering merges them), so each may carry returns. Ids are read
    without an item id joined to them (``_call_part``): a call rendered without its item id is
    answered by its returns, renamed after it in ``finalize``."""
    if isinstance(m, ModelRequest):
        return Reading(True, [_call_part(call_id) for p in m.parts if (call_id := _answered(p)) is not None])
    calls = [_call_part(p.tool_call_id) for p in m.parts if _is_call(p)]
    return Reading(False, opened=calls, is_response=isinstance(m, ModelResponse))


PYDANTIC_AI_PAIRING: Pairing[ModelMessage] = Pairing(
    _pairing, result="return", orphan="tool return {id!r} answers no call before it", response="a model response"
)
"""How pydantic-ai messages pair tool calls with tool returns."""


_STANDING: tuple[type, ...] = tuple(
    getattr(_messages, name)
    for name in (
        "InstructionBaselinePart",
        "InstructionDeltaPart",
        "ModelSettingsDeltaPart",
        "ToolAvailabilityDeltaPart",
        "CapabilityLoadDeltaPart",
    )
    if hasattr(_messages, name)  # (newer pydantic-ai: 2.78 has them all)
)
"""The request parts that say what the requests after them are made with: the instructions in
effect and their changes, a thinking effort (``run(model_settings={"thinking": ...})`` records
one), the tools and capabilities loaded. pydantic-ai reads them from the history it sends (the
effort in effect is its last ``ModelSettingsDeltaPart``; a model with a mid-conversation channel
sends it, the Responses API's ``configuration_update``): system messages to the engine, which no
history horizon hides. As user messages, the horizon hid them, and the run went on as if they
had never been made."""


def _kind(part: Any) -> str:
    return "system" if isinstance(part, (SystemPromptPart, *_STANDING)) else "user"


def _runs(parts: Sequence[Any]) -> list[list[int]]:
    """Indices of the parts that are not managed results, in runs of one neutral role."""
    runs: list[list[int]] = []
    for j, p in enumerate(parts):
        if _is_result(p):
            continue
        if runs and _kind(parts[runs[-1][-1]]) == _kind(p):
            runs[-1].append(j)
        else:
            runs.append([j])
    return runs


def _part_text(part: Any) -> str:
    if isinstance(part, UserPromptPart):
        c = part.content
        return c if isinstance(c, str) else "\n".join(x for x in c if isinstance(x, str))
    if isinstance(part, RetryFeedbackPart | RetryPromptPart):
        return part.model_response()
    content = getattr(part, "content", None)
    return content if isinstance(content, str) else ""


def _served_chars(parts: Sequence[Any], raw: list[dict[str, Any]]) -> int:
    """What a response's parts of the provider's own doing put in front of the model at every later
    call: its native tools' calls and returns (a web search's query and results, code and its
    output) by the characters of their keys and strings (``tokens.value_chars``), the files it
    made (a generated image) as the images they are."""
    n = 0
    for p, r in zip(parts, raw, strict=True):
        if isinstance(p, NativeToolCallPart):
            n += value_chars(r.get("args"))
        elif isinstance(p, NativeToolReturnPart):
            n += value_chars(r.get("content"))
        elif isinstance(p, FilePart):
            n += _media_chars(p.content)
    return n


def _media_chars(content: Any) -> int:
    """What the images and documents in a part's content (a ``BinaryContent``, an ``ImageUrl``, a
    ``DocumentUrl``, or a list holding them) put in front of the model, in characters
    (``tokens.image_tokens``, ``tokens.document_tokens``)."""
    n = 0
    for item in content if isinstance(content, list | tuple) else (content,):
        if isinstance(item, BinaryContent) and item.is_image:
            n += image_tokens(item.data) * CHARS_PER_TOKEN
        elif isinstance(item, BinaryContent) and item.is_document:
            n += document_tokens(item.data, item.media_type) * CHARS_PER_TOKEN
        elif isinstance(item, ImageUrl):
            n += image_tokens(item.url if item.url.startswith("data:") else None) * CHARS_PER_TOKEN
        elif isinstance(item, DocumentUrl):
            n += document_tokens(item.url if item.url.startswith("data:") else None) * CHARS_PER_TOKEN
    return n


def _ms(ts: Any) -> int | None:
    return int(ts.timestamp() * 1000) if isinstance(ts, datetime) else None


class PydanticAIAdapter(Adapter[ModelMessage]):
    """Translates pydantic-ai ``ModelRequest`` / ``ModelResponse`` messages."""

    name = "pydantic-ai"
    pairing = PYDANTIC_AI_PAIRING

    def __init__(self) -> None:
        self._merges: MergeCache[ModelMessage] = MergeCache()

    def hash_message(self, message: ModelMessage) -> str:
        try:
            return hash_value(_dump(message))
        except (HashError, ValueError, TypeError, RecursionError):  # pydantic_core errors are ValueErrors
            return fallback_hash(message)  # rejected by translate

    def count(self, message: ModelMessage) -> int:
        if not isinstance(message, ModelRequest) or not isinstance(message.parts, list | tuple):
            return 1  # translate refuses what is not a request with a list of parts
        results = sum(1 for p in message.parts if _is_result(p))
        return max(1, results + len(_runs(message.parts)))

    def translate(self, message: ModelMessage, index: int) -> list[Incoming]:
        if not isinstance(message, ModelRequest | ModelResponse):
            raise MalformedMessage(
                f"a message must be a ModelRequest or a ModelResponse, not {type(message).__name__}", index=index
            )
        try:
            dumped = _dump(message)
            _load(dumped)  # what is stored must load again when it is rendered (pydantic errors are ValueErrors)
        except (ValueError, TypeError) as e:
            raise MalformedMessage(f"cannot be serialised: {e}", index=index, field="parts") from None
        if isinstance(message, ModelResponse):
            return [self._response(message, dumped, index)]
        fields = {k: v for k, v in dumped.items() if k != "parts"}
        parts, raw = list(message.parts), dumped["parts"]
        out = [self._result(p, raw[j], fields, index, j) for j, p in enumerate(parts) if _is_result(p)]
        for run in _runs(parts):
            role = _kind(parts[run[0]])
            text = "\n".join(_part_text(parts[j]) for j in run)
            extra = {"request": fields, "parts": [raw[j] for j in run]}
            piece: Incoming = {"role": role, "text": check_utf8(text, index, "parts"), "h": "", "extra": extra}  # type: ignore[typeddict-item]
            if media := sum(_media_chars(getattr(parts[j], "content", None)) for j in run):
                piece["extra_chars"] = media
            out.append(piece)
        if not out:  # a request without parts still leaves a trace
            out.append({"role": "user", "text": None, "h": "", "extra": {"request": fields, "parts": []}})
        return out

    def _response(self, message: ModelResponse, dumped: dict[str, Any], index: int) -> Incoming:
        calls: list[ToolCall] = []
        texts = []
        for j, p in enumerate(message.parts):
            if isinstance(p, TextPart):
                texts.append(check_utf8(p.content, index, f"parts[{j}].content"))
            elif _is_call(p):
                if isinstance(p.args, str):
                    check_utf8(p.args, index, f"parts[{j}].args")
                calls.append(
                    {
                        "id": p.tool_call_id,
                        "name": p.tool_name,
                        "arguments": sorted_keys(p.args, index=index, field=f"parts[{j}].args"),
                    }
                )
                if not _is_typed(p):
                    dumped["parts"][j].pop("args", None)  # lives in the neutral call
        m: Incoming = {"role": "assistant", "text": "\n".join(texts), "h": "", "extra": {"response": dumped}}
        if calls:
            m["tool_calls"] = calls
        # the model's reasoning, sent back with the response: counted (left off past the thinking horizon)
        if reasoning := sum(len(p.content) for p in message.parts if isinstance(p, ThinkingPart)):
            m["extra_chars"] = reasoning
        if served := _served_chars(message.parts, dumped["parts"]):
            m["block_chars"] = served
        return m

    def _result(self, part: Any, raw: dict[str, Any], fields: dict[str, Any], index: int, j: int) -> Incoming:
        if not isinstance(part.content, str):
            # a structured output (a dict, a list of errors) reaches the model as JSON text: taken
            # with its keys in the order the store gives them back, so that a live session and one
            # resumed in another process send the same text (``sorted_keys``)
            raw = {**raw, "content": sorted_keys(raw.get("content"), index=index, field=f"parts[{j}].content")}
            part = _load({"kind": "request", "parts": [raw]}).parts[0]
        if isinstance(part, RetryPromptPart):
            text, is_error = part.model_response(), True
        else:
            text, is_error = part.model_response_str(), part.outcome in ERROR_OUTCOMES
        m: Incoming = {
            "role": "tool",
            "text": check_utf8(text, index, f"parts[{j}].content"),
            "tool_call_id": part.tool_call_id,
            "tool_name": part.tool_name or "",
            "h": "",
        }
        extra: dict[str, Any] = {"part": {k: v for k, v in raw.items() if k not in ("content", "outcome", "retry")}}
        # the request's own fields (its instructions, conversation id, timestamp), as its other
        # pieces keep them: a request of nothing but returns is rendered with them too
        extra["request"] = fields
        if _is_typed(part):
            # sent whole, collapsed or not: pydantic-ai reads its content, never a stub; the engine
            # counts it so (a collapsed one counted as its stub until 2026-12-02)
            extra["full"] = {"part": raw, SENT_WHOLE: True}
        elif not isinstance(part, ToolReturnPart) or not isinstance(part.content, str) or part.outcome != "success":
            # the part as given (files, structured content, native error outcome): shown only
            # while the result is shown in full; the text already says what the model must see
            extra["full"] = {"part": raw}
        m["extra"] = extra
        if media := _media_chars(part.content):
            m["extra_chars"] = media  # its images: counted while the result shows in full
        if is_error:
            m["is_error"] = True
        ts = _ms(part.timestamp)
        if ts is not None:
            m["ts"] = ts
        return m

    def render_msg(self, msg: Msg) -> ModelMessage:
        extra = msg.get("extra") or {}
        role, text = msg["role"], msg["text"] or ""
        if role == "assistant":
            return self._render_response(msg, extra)
        if role == "tool":
            full, request = extra.get("full"), extra.get("request", {})
            if isinstance(full, dict) and "part" in full:
                return _load({**request, "kind": "request", "parts": [full["part"]]})
            kept = extra.get("part")
            if isinstance(kept, dict):
                if "content" in kept:  # a typed part as sessions recorded before 2026-12-02 kept it: whole
                    return _load({**request, "kind": "request", "parts": [kept]})
                # shown without its part as given: a plain return of the text (a typed one whose
                # object was evicted loses its kind with its content, which its kind requires)
                plain = {k: v for k, v in kept.items() if k != "tool_kind"}
                return _load({**request, "kind": "request", "parts": [{**plain, "content": text}]})
            # a result rendered without its harness fields (one the engine made up has no name:
            # finalize names it after its call); an error is already spelled out in ``text``
            part = ToolReturnPart(
                tool_name=msg.get("tool_name", ""),
                content=text,
                tool_call_id=msg.get("tool_call_id", ""),
                timestamp=EPOCH,
            )
            return ModelRequest(parts=[part])
        if "parts" in extra:
            return _load({**extra.get("request", {}), "kind": "request", "parts": extra["parts"]})
        synthetic: ModelRequestPart = (
            SystemPromptPart(text, timestamp=EPOCH) if role == "system" else UserPromptPart(text, timestamp=EPOCH)
        )
        return ModelRequest(parts=[synthetic])

    def _render_response(self, msg: Msg, extra: dict[str, Any]) -> ModelMessage:
        calls = msg.get("tool_calls") or []
        response = extra.get("response")
        if not isinstance(response, dict):
            parts: list[Any] = [TextPart(msg["text"])] if msg["text"] else []
            parts += [ToolCallPart(c["name"], c["arguments"], c["id"]) for c in calls]
            return ModelResponse(parts=parts, timestamp=EPOCH)
        args = {c["id"]: c["arguments"] for c in calls}
        data = dict(response)
        data["parts"] = [
            {**p, "args": args.get(p.get("tool_call_id"))}
            if p.get("part_kind") == "tool-call" and "args" not in p
            else p
            for p in response["parts"]
        ]
        if msg.get("drop_thinking"):  # past the horizon
            data["parts"] = _without_reasoning(data["parts"], response.get("provider_name"))
        return _load(data)

    def finalize(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        out = merge_requests(messages, self._merges)
        self._merges.turn()
        return out

    def tool_definitions(self, tools: list[dict[str, Any]]) -> list[Any]:
        return [
            ToolDefinition(name=t["name"], description=t["description"], parameters_json_schema=t["parameters"])
            for t in tools
        ]


def _without_reasoning(parts: list[dict[str, Any]], provider: Any) -> list[dict[str, Any]]:
    """A response's parts (JSON form) without its thinking parts, and, where one of those was a
    provider's reasoning item (a ``ThinkingPart`` with an ``id``: OpenAI Responses' ``rs_…``),
    without the item ids of that provider's text and tool-call parts: OpenAI refuses an item sent
    by id without the reasoning item it followed (400 "Item 'fc_…' of type 'function_call' was
    provided without its required 'reasoning' item"); pydantic-ai sends a part without an id as
    new input (a ``function_call`` by its ``call_id``, a text as a plain assistant message). A
    call's item id is its ``id``, or, as older pydantic-ai kept it, joined to its call id
    (``call_…|fc_…``: the call is then ``call_…``, its returns renamed after it in ``finalize``)."""
    items = {p.get("provider_name") or provider for p in parts if p.get("part_kind") == "thinking" and p.get("id")}
    out = []
    for p in parts:
        kind = p.get("part_kind")
        if kind == "thinking":
            continue
        if kind in ("text", "tool-call") and (p.get("provider_name") or provider) in items:
            if p.get("id"):
                p = {**p, "id": None}
            if kind == "tool-call" and isinstance(p.get("tool_call_id"), str):
                p = {**p, "tool_call_id": _call_part(p["tool_call_id"])}
        out.append(p)
    return out


def merge_requests(
    messages: Sequence[ModelMessage], cache: MergeCache[ModelMessage] | None = None
) -> list[ModelMessage]:
    """Consecutive requests merged into one (the fields of the first that has a timestamp), and
    tool returns rendered without a tool name named after their call, or answering by an id its
    call was rendered without (``call_…|fc_…`` of a call ``call_…``: ``_without_reasoning``)
    renamed after it. Messages that need neither are returned as they are (not copied)."""
    start, out = cache.resume(messages) if cache is not None else (0, [])
    log: list[tuple[str, str]] = cache.log if cache is not None else []
    names = dict(log)  # call id -> tool name, of the calls before ``start``
    run: list[ModelMessage] = []

    def answers(part: Any) -> str:
        """The id of the call a return answers as that call was rendered."""
        call_id = str(part.tool_call_id)
        return _call_part(call_id) if call_id not in names and _call_part(call_id) in names else call_id

    def named(part: Any) -> Any:
        if not _is_result(part):
            return part
        if isinstance(part, ToolReturnPart) and not part.tool_name:
            part = dataclasses.replace(part, tool_name=names.get(answers(part), "tool"))
        if (call_id := answers(part)) != part.tool_call_id:
            part = dataclasses.replace(part, tool_call_id=call_id)
        return part

    def merged(requests: list[ModelMessage]) -> ModelMessage:
        parts = [named(p) for r in requests for p in r.parts]
        if len(requests) == 1 and all(a is b for a, b in zip(parts, requests[0].parts, strict=True)):
            return requests[0]
        base = next((r for r in requests if r.timestamp is not None), requests[0])
        assert isinstance(base, ModelRequest)
        return dataclasses.replace(base, parts=parts)

    def flush() -> None:
        if run and cache is not None:
            # a return without a tool name is named after its call, a return is renamed after
            # its call: the merge depends on those too
            parts: list[Any] = [p for r in run for p in r.parts if _is_result(p)]
            also = tuple(
                (names.get(answers(p), "tool"), answers(p)) for p in parts if not p.tool_name or "|" in p.tool_call_id
            )
            out.append(cache.get(run, merged, also))
        elif run:
            out.append(merged(run))
        run.clear()

    for k in range(start, len(messages)):
        m = messages[k]
        if isinstance(m, ModelRequest):
            if not run and cache is not None:
                cache.cut(k, len(out))
            run.append(m)
            continue
        flush()
        if cache is not None:
            cache.cut(k, len(out))
        for p in m.parts:
            if isinstance(p, ToolCallPart):
                names[p.tool_call_id] = p.tool_name
                log.append((p.tool_call_id, p.tool_name))
        out.append(m)
    flush()
    if cache is not None:
        cache.done(messages, out)
    return out


_RETRIED = ("timestamp", "run_id", "conversation_id")
"""The fields of a request that a run made again (``agent.run`` called anew after it failed)
gives new values: its parts' timestamps, the request's, its run's id and, in a run without a
history, the conversation's."""


def _retry_form(message: ModelMessage) -> Any:
    """A request as a run made again has it too: without the fields it makes anew (``_RETRIED``)."""
    try:
        dumped = _dump(message)
    except (ValueError, TypeError):
        return None  # refused by translate
    given = dumped.get("parts", [])
    if not isinstance(given, list) or not all(isinstance(p, dict) for p in given):
        return None  # (a part that is no part: ``parts=[None]``) refused by translate too
    parts = [{k: v for k, v in p.items() if k != "timestamp"} for p in given]
    return {**{k: v for k, v in dumped.items() if k not in _RETRIED}, "parts": parts}


class PydanticAIHook(ContextHook[ModelMessage]):
    """``transform_context`` for pydantic-ai message lists, and the ``ContextOS`` capability."""

    adapter_class = PydanticAIAdapter

    _newest: tuple[int, ModelRequest] | None = None
    """The newest message of the last call, when a request, and the length of its list."""

    def transform_context(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        """As ``ContextHook.transform_context``; a run made again after its model call failed (the
        caller's ``agent.run`` with the same prompt and history) is the same call again: its
        newest request, made anew with other timestamps and ids, is taken as the one it repeats
        (the same context, no new turn: a turn per try would age every result)."""
        check_message_list(messages)  # (not a list: refused as every hook refuses it, before it is read)
        newest, self._newest = self._newest, None
        last = messages[-1] if messages else None
        if isinstance(last, ModelRequest):
            if (
                newest is not None
                and newest[0] == len(messages)
                and last is not newest[1]
                and (form := _retry_form(last)) is not None  # (a request translate refuses matches none)
                and form == _retry_form(newest[1])
            ):
                # a copy only then (of the whole history at every call: 1.2x the cost at 20,000 messages)
                messages = [*messages[:-1], newest[1]]
                last = newest[1]
            self._newest = (len(messages), last)
        return super().transform_context(messages)

    def capability(self) -> ContextOS:
        """The capability to give an ``Agent``: assembles every model request, adds our tools."""
        return ContextOS(self)

    def toolset(self) -> FunctionToolset[Any]:
        """Our tools (activate, deactivate, pin, unpin; with ``files``, the file tools too) as a
        pydantic-ai toolset."""

        def tool(d: ToolDefinition) -> Tool[Any]:
            def run(**arguments: Any) -> str:
                return self.call_tool(d.name, arguments)

            return Tool.from_schema(run, d.name, d.description, d.parameters_json_schema)

        return FunctionToolset([tool(d) for d in self.tools])


_PER_ATTEMPT = hasattr(AbstractCapability, "prepare_model_request")
"""Whether this pydantic-ai has the ``prepare_model_request`` hook (the request of one attempt,
after every ``before_model_request`` hook); older 2.x releases only have ``before_model_request``."""


@dataclass
class ContextOS(AbstractCapability[Any]):
    """Replaces the messages of every model request with the context_os assembly (the run's own
    history is left as it is) and registers our tools.

    The assembly is made in ``prepare_model_request``: after every ``before_model_request`` hook
    (a ``ProcessHistory`` listed after this capability writes what it returns back into the run's
    history, which must never be the assembly), and only for the request going out. A further
    attempt (a fallback model, a retried request) assembles the same history again: the same
    context, no new turn."""

    hook: PydanticAIHook

    async def _assemble(self, request_context: ModelRequestContext) -> ModelRequestContext:
        request_context.messages = await self.hook.atransform_context(request_context.messages)
        return request_context

    if _PER_ATTEMPT:

        async def prepare_model_request(
            self, ctx: RunContext[Any], request_context: ModelRequestContext
        ) -> ModelRequestContext:
            return await self._assemble(request_context)

    else:  # pragma: no cover - a pydantic-ai before the per-attempt hook

        async def before_model_request(
            self, ctx: RunContext[Any], request_context: ModelRequestContext
        ) -> ModelRequestContext:
            return await self._assemble(request_context)

    def get_toolset(self) -> FunctionToolset[Any]:
        return self.hook.toolset()

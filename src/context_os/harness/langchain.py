"""LangChain (``langchain-core`` 1.x messages, ``langchain`` 1.x agents): context_os as the
middleware of a ``create_agent`` agent, or as a hook over a list of ``BaseMessage``::

    hook = LangChainHook(Session.open(store, "my-session", harness="langchain"))
    agent = create_agent(model, tools, middleware=[hook.middleware()])

The middleware's ``wrap_model_call`` replaces the messages of the request going out, and only
those: the agent's state keeps the messages as they came (the real tool outputs), which are the
session's event source. Were the assembly written back into the state (a ``before_model`` hook
returning messages), its stubs and its ``<context_os>`` part would be taken in again as new
messages. The middleware also gives the agent our tools (activate, deactivate, pin, unpin; with
``files``, the file tools). For loops that call ``model.invoke(messages)`` themselves,
``hook.transform_context(messages)`` (``atransform_context`` in async code) is the whole of it,
with ``hook.tools`` to bind (OpenAI-style tool dicts, which ``bind_tools`` takes).

Mapping. ``SystemMessage`` is a system message, ``HumanMessage`` a user message, ``AIMessage`` (and
a chunk of one) an assistant message whose ``tool_calls`` are its calls (their ``args``, keys
sorted, as the store gives objects back), ``ToolMessage`` a tool result (``status="error"``: a
failed one), ``ChatMessage`` by its role. A legacy ``FunctionMessage`` is kept as a user message,
never managed. Each message's JSON form (``model_dump``) is kept beside it and rendered back as the
same class with the same fields; only what context_os manages changes: a collapsed result's
content, a collapsed call's long arguments (also in the ``tool_use`` blocks of a content list,
which some providers send instead of ``tool_calls``), and reasoning past the thinking horizon.

Content given as a list of blocks is measured by its text blocks (joined as ``BaseMessage.text``
joins them); images and files in it are counted (``tokens.image_tokens``, ``document_tokens``)
and kept as they came while the message shows whole. An assistant message's reasoning
(``thinking``, ``reasoning`` and ``redacted_thinking`` blocks, ``additional_kwargs``'
``reasoning_content``) is counted and left off past the session's thinking horizon. A tool
message's ``artifact`` is never sent to a model: it is not kept (nor hashed), and a rendered
result has none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from pydantic import ValidationError

from ..context.entries import Incoming, Msg, ToolCall
from ..errors import ConfigError, HashError, MalformedMessage
from ..hashing import hash_value
from ..tokens import CHARS_PER_TOKEN, document_tokens, image_tokens, value_chars
from .anthropic import server_block
from .base import Adapter, ContextHook, check_utf8, fallback_hash, invalid, sorted_keys
from .pairing import CLOSES, SAYS, Pairing, Reading

if TYPE_CHECKING:
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.tools import BaseTool

__all__ = ["LANGCHAIN_PAIRING", "LangChainAdapter", "LangChainHook"]

_CLASSES: dict[str, type[BaseMessage]] = {
    "system": SystemMessage,
    "human": HumanMessage,
    "ai": AIMessage,
    "tool": ToolMessage,
    "chat": ChatMessage,
    "function": FunctionMessage,
}
"""The message class of each ``type`` a message is rendered back as (a chunk as its message)."""

_CHUNKS = {
    "SystemMessageChunk": "system",
    "HumanMessageChunk": "human",
    "AIMessageChunk": "ai",
    "ToolMessageChunk": "tool",
    "ChatMessageChunk": "chat",
    "FunctionMessageChunk": "function",
}
_CHUNK_FIELDS = ("tool_call_chunks", "chunk_position")
"""Fields only a chunk has: a chunk in the history is rendered as its message, without them."""

_CHAT_ROLES = {"system": "system", "developer": "system", "assistant": "assistant", "ai": "assistant"}
"""A ``ChatMessage``'s role → the neutral role (any other role: a user message)."""

_REASONING = ("thinking", "reasoning", "redacted_thinking")
"""Content block types that hold an assistant message's reasoning."""


def _dump(message: BaseMessage) -> dict[str, Any]:
    """A message's JSON form, without a tool message's ``artifact`` (never sent to a model).
    ``warnings="error"``: a field pydantic cannot write as JSON raises (a ValueError) instead of
    warning and writing something else."""
    exclude = {"artifact"} if isinstance(message, ToolMessage) else None
    dumped: dict[str, Any] = message.model_dump(mode="json", exclude=exclude, warnings="error")
    return dumped


def _kind(message: BaseMessage) -> str:
    """The ``type`` a message renders back as: its own, a chunk's message's."""
    kind = str(getattr(message, "type", ""))
    return _CHUNKS.get(kind, kind)


def _pairing(m: Any) -> Reading:
    """A ``ToolMessage`` answers one call; any other message closes the calls still open (every
    call of an ``AIMessage`` is answered by the tool messages right after it)."""
    if isinstance(m, ToolMessage):
        return Reading(True, (getattr(m, "tool_call_id", None),))
    if not isinstance(m, AIMessage):
        return CLOSES
    calls = getattr(m, "tool_calls", None)
    if not calls:
        return SAYS
    calls = calls if isinstance(calls, list) else [calls]
    return Reading(False, opened=[c.get("id") if isinstance(c, Mapping) else None for c in calls], is_response=True)


LANGCHAIN_PAIRING: Pairing[BaseMessage] = Pairing(
    _pairing, result="ToolMessage", response="an AIMessage", bad_ids="tool_calls must be calls with string ids"
)
"""How LangChain messages pair tool calls with tool messages."""


def _blocks_text(content: Any, index: int) -> tuple[str, list[Any] | None]:
    """(text, blocks) of a message's ``content``: a string is its text; a list of blocks is
    the text of its text blocks (and strings), joined as ``BaseMessage.text`` joins them."""
    if isinstance(content, str):
        return check_utf8(content, index, "content"), None
    if not isinstance(content, list):
        raise MalformedMessage(
            f"content must be a string or a list of blocks, not {type(content).__name__}", index=index, field="content"
        )
    texts = []
    for j, block in enumerate(content):
        if isinstance(block, str):
            texts.append(check_utf8(block, index, f"content[{j}]"))
        elif not isinstance(block, Mapping):
            raise MalformedMessage("content blocks must be strings or objects", index=index, field=f"content[{j}]")
        elif block.get("type") == "text":
            if not isinstance(block.get("text"), str):
                raise MalformedMessage("a text block without text", index=index, field=f"content[{j}].text")
            texts.append(check_utf8(block["text"], index, f"content[{j}].text"))
    return "".join(texts), list(content)


def _data_url(block: Mapping[str, Any]) -> str | None:
    """A media block's bytes as a ``data:`` URL, when it holds them: LangChain's standard block
    (``base64`` and ``mime_type``), its older one (``source_type: base64``, ``data``), OpenAI's
    (``image_url``), Anthropic's (``source`` of type ``base64``). None: a URL or an id."""
    url = block.get("image_url")
    url = url.get("url") if isinstance(url, Mapping) else url
    if isinstance(url, str):
        return url if url.startswith("data:") else None
    source = block.get("source")
    if isinstance(source, Mapping) and source.get("type") == "base64" and isinstance(source.get("data"), str):
        return f"data:{source.get('media_type') or ''};base64,{source['data']}"
    data = block.get("base64") or (block.get("data") if block.get("source_type") == "base64" else None)
    if isinstance(data, str):
        return f"data:{block.get('mime_type') or ''};base64,{data}"
    url = block.get("url")
    return url if isinstance(url, str) and url.startswith("data:") else None


def _media_chars(blocks: Sequence[Any]) -> int:
    """What the images and files among content blocks put in front of the model, in characters."""
    n = 0
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind in ("image", "image_url"):
            n += image_tokens(_data_url(block)) * CHARS_PER_TOKEN
        elif kind in ("file", "document"):
            n += document_tokens(_data_url(block)) * CHARS_PER_TOKEN
    return n


_SERVED = ("server_tool_call", "server_tool_result")
"""langchain-core's standard blocks of a tool the provider runs (a web search, code execution)."""


def _served(block: Any) -> bool:
    """Whether an assistant message's content block is a tool the provider ran: its call or its
    result, as langchain-core's standard blocks have them (``_SERVED``) or as the provider's
    integration keeps them (Anthropic's ``server_tool_use``, ``web_search_tool_result``, …)."""
    return server_block(block) or (isinstance(block, Mapping) and block.get("type") in _SERVED)


def _reasoning_chars(blocks: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """The characters of an assistant message's reasoning: its reasoning blocks (their text, a
    reasoning summary's parts, a redacted block's data) and ``additional_kwargs``'
    ``reasoning_content`` (the field some providers' integrations put it in)."""
    n = 0
    for block in blocks:
        if not isinstance(block, Mapping) or block.get("type") not in _REASONING:
            continue
        for key in ("thinking", "reasoning", "data"):
            if isinstance(block.get(key), str):
                n += len(block[key])
        summary = block.get("summary")
        if isinstance(summary, list):
            n += sum(len(s["text"]) for s in summary if isinstance(s, Mapping) and isinstance(s.get("text"), str))
    reasoning = kwargs.get("reasoning_content")
    return n + (len(reasoning) if isinstance(reasoning, str) else 0)


class LangChainAdapter(Adapter[BaseMessage]):
    """Translates LangChain ``BaseMessage``s (``langchain_core.messages``)."""

    name = "langchain"
    pairing = LANGCHAIN_PAIRING

    def hash_message(self, message: BaseMessage) -> str:
        """The hash of the message's JSON form (``_dump``): a history saved with
        ``messages_to_dict`` and loaded again in another process is the same history."""
        try:
            return hash_value(_dump(message))
        except (HashError, TypeError, ValueError, RecursionError, AttributeError):
            return fallback_hash(message)  # translate refuses it

    def translate(self, message: BaseMessage, index: int) -> Incoming:
        if not isinstance(message, BaseMessage):
            raise MalformedMessage(
                f"a message must be a LangChain BaseMessage, not {type(message).__name__}", index=index
            )
        kind = _kind(message)
        if kind not in _CLASSES:
            raise MalformedMessage(
                f"a {type(message).__name__} ({kind!r}) is not a message a model is sent", index=index, field="type"
            )
        try:
            data = _dump(message)
        except (ValueError, TypeError) as e:
            raise MalformedMessage(f"cannot be written as JSON: {e}", index=index) from None
        try:  # what is stored must make the message again when it is rendered
            _CLASSES[kind](**{k: v for k, v in data.items() if k not in ("type", *_CHUNK_FIELDS)})
        except ValidationError as e:
            raise invalid(e, index) from None
        text, blocks = _blocks_text(message.content, index)
        if kind == "chat":
            role = _CHAT_ROLES.get(str(getattr(message, "role", "")), "user")
        else:
            role = {"system": "system", "ai": "assistant", "tool": "tool"}.get(kind, "user")
        kept = {k: v for k, v in data.items() if k not in ("content", "type", "tool_calls", *_CHUNK_FIELDS)}
        extra: dict[str, Any] = {"type": kind, "message": kept}
        m: Incoming = {"role": role, "text": text, "h": ""}  # type: ignore[typeddict-item]
        if blocks is not None:
            # a tool output's blocks are shown as such only while it shows whole
            extra.update({"full": {"content": data["content"]}} if role == "tool" else {"content": data["content"]})
            if role in ("user", "tool") and (media := _media_chars(blocks)):
                m["extra_chars"] = media
        if isinstance(message, AIMessage):
            if message.tool_calls:
                m["tool_calls"] = self._calls(message.tool_calls, index)
            if reasoning := _reasoning_chars(blocks or (), message.additional_kwargs):
                m["extra_chars"] = reasoning
            if served := sum(value_chars(b) for b in blocks or () if _served(b)):
                m["block_chars"] = served  # the provider's own tools' blocks: sent at every call
        if isinstance(message, ToolMessage):
            if not isinstance(message.tool_call_id, str) or not message.tool_call_id:
                raise MalformedMessage("a ToolMessage needs a tool_call_id", index=index, field="tool_call_id")
            m["tool_call_id"] = message.tool_call_id
            if isinstance(message.name, str):
                m["tool_name"] = message.name
            if message.status == "error":
                m["is_error"] = True
        m["extra"] = extra
        return m

    def _calls(self, calls: Sequence[Any], index: int) -> list[ToolCall]:
        out: list[ToolCall] = []
        for j, c in enumerate(calls):
            if not isinstance(c, Mapping) or not isinstance(c.get("id"), str) or not isinstance(c.get("name"), str):
                raise MalformedMessage("a tool call needs an id and a name", index=index, field=f"tool_calls[{j}]")
            args = c.get("args")
            if not isinstance(args, Mapping):
                raise MalformedMessage(
                    "a tool call's args must be an object", index=index, field=f"tool_calls[{j}].args"
                )
            out.append(
                {
                    "id": c["id"],
                    "name": c["name"],
                    "arguments": sorted_keys(dict(args), index=index, field=f"tool_calls[{j}].args"),
                }
            )
        return out

    def render_msg(self, msg: Msg) -> BaseMessage:
        extra = msg.get("extra") or {}
        role, text = msg["role"], msg["text"] or ""
        data: dict[str, Any] = dict(extra.get("message") or {})
        kind = extra.get("type") or {"system": "system", "assistant": "ai", "tool": "tool"}.get(role, "human")
        content: Any = extra.get("content", text)
        full = extra.get("full")
        if role == "tool" and isinstance(full, Mapping) and "content" in full:
            content = full["content"]
        if role == "assistant":
            calls = msg.get("tool_calls") or []
            data["tool_calls"] = [
                {"name": c["name"], "args": c["arguments"], "id": c["id"], "type": "tool_call"} for c in calls
            ]
            content = _with_arguments(content, {c["id"]: c["arguments"] for c in calls})
            if msg.get("drop_thinking"):
                content = _without_reasoning(content)
                kwargs = data.get("additional_kwargs")
                if isinstance(kwargs, Mapping) and "reasoning_content" in kwargs:
                    data["additional_kwargs"] = {k: v for k, v in kwargs.items() if k != "reasoning_content"}
        if role == "tool":
            data["tool_call_id"] = msg.get("tool_call_id", "")
            data.setdefault("name", msg.get("tool_name") or None)
            data["status"] = "error" if msg.get("is_error") else "success"
        return _CLASSES[kind](**{**data, "content": content})

    def tool_definitions(self, tools: list[dict[str, Any]]) -> list[Any]:
        """OpenAI-style tool dicts: what ``bind_tools`` takes from any provider's chat model."""
        return [{"type": "function", "function": dict(t)} for t in tools]


def _with_arguments(content: Any, args: Mapping[str, Any]) -> Any:
    """An assistant message's content blocks with each ``tool_use`` block's input taken from its
    call (a collapsed call's long arguments collapse there too); a text content as it is."""
    if not isinstance(content, list) or not args:
        return content
    return [
        {**b, "input": args[b["id"]]}
        if isinstance(b, Mapping) and b.get("type") == "tool_use" and b.get("id") in args
        else b
        for b in content
    ]


def _without_reasoning(content: Any) -> Any:
    """Content blocks without the reasoning ones (past the thinking horizon)."""
    if not isinstance(content, list):
        return content
    return [b for b in content if not (isinstance(b, Mapping) and b.get("type") in _REASONING)]


class LangChainHook(ContextHook[BaseMessage]):
    """``transform_context`` for lists of LangChain messages, and the ``create_agent`` middleware."""

    adapter_class = LangChainAdapter

    def middleware(self) -> AgentMiddleware[Any, Any]:
        """The middleware to give ``create_agent``: assembles every model request, adds our tools.
        Needs the ``langchain`` package (``pip install 'context_os[langchain]'``)."""
        try:
            from ._langchain_agent import ContextOSMiddleware
        except ImportError as e:
            raise ConfigError(
                f"the LangChain middleware needs langchain 1.x: {e} (pip install 'langchain>=1.5,<2')"
            ) from None
        return ContextOSMiddleware(self)

    def langchain_tools(self) -> list[BaseTool]:
        """Our tools as LangChain tools (each runs through ``call_tool``)."""
        from langchain_core.tools import StructuredTool

        def tool(schema: dict[str, Any]) -> BaseTool:
            name = schema["name"]

            def run(**arguments: Any) -> str:
                return self.call_tool(name, arguments)

            return StructuredTool(
                name=name, description=schema["description"], args_schema=schema["parameters"], func=run
            )

        return [tool(s) for s in self.registry.schemas]

"""The Google Gen AI SDK (``google-genai``): context_os in your own loop over Gemini's
``generate_content``::

    hook = GeminiHook(Session.open(store, "my-session", harness="openai"))
    config = types.GenerateContentConfig(system_instruction=SYSTEM, tools=[*my_tools, *hook.tools()])
    while True:
        reply = client.models.generate_content(model=MODEL, contents=hook.transform_contents(contents), config=config)
        contents.append(reply.candidates[0].content)
        if not reply.function_calls:
            break
        contents.append(types.Content(role="user", parts=[
            hook.run(call) if hook.owns(call) else my_tool(call) for call in reply.function_calls
        ]))

``transform_contents(contents)`` gives the contents the model gets in place of yours (your list
stays as you made it: it is the session's event source). They are read as the chat messages they
stand for and given back by harness/gemini.py, as ``ctxos proxy`` reads Gemini's API: a content
context_os left as it was comes back equal to yours, a call's ``thought_signature`` with it (Gemini
3 refuses a turn's calls sent back without it); collapsed outputs, elided arguments and the
files the agent read are what it changed or added. The session is one of the OpenAI hook (its
harness ``openai``); the system instruction stays in your config, not in the session.

``tools()`` declares our tools (activate, deactivate, pin, unpin, lines, history; with ``files``,
the file tools) as one ``types.Tool``; ``run(call)`` runs a call of one of them (``owns(call)``)
and gives the part that answers it.

A call reads only the contents appended since the last one, and the newest it read again (you may
still change that one in place), as every hook reads its harness's list: the contents it read
before are taken as unchanged while they are the same objects in your list (checked at the
first, middle and newest ``WINDOW`` of them). To change an older one, put a new object in its
place: the contents are read again from there. Contents that cannot be read as chat messages (a
user part of another kind, a response that answers no call) go to the model as they came,
unmanaged, and a warning says so once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import operator
from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

from google.genai import types

from ..errors import MalformedMessage
from .base import WINDOW  # (as many as every hook checks of its list)
from .gemini import Pending, call_names, content_groups, group_content, read_content
from .openai import OpenAIHook

if TYPE_CHECKING:
    from ..context.session import Session
    from ..files.file_tools import FileTools
    from .registry import OnSync

__all__ = ["WINDOW", "GeminiHook"]

log = logging.getLogger(__name__)

Contents = Sequence[types.Content | types.ContentDict | dict[str, Any]]


class GeminiHook:
    """context_os for a loop over google-genai's ``generate_content`` (module docstring)."""

    def __init__(self, session: Session, *, files: FileTools | None = None, on_sync: OnSync | None = None):
        self.hook = OpenAIHook(session, files=files, on_sync=on_sync)
        self._warned = False
        self._contents: list[Any] = []
        """The contents read (the objects given), in order."""
        self._starts: list[int] = []
        """Where each one's chat messages start in ``_messages``."""
        self._pending: list[Pending] = []
        """The calls not yet answered after each."""
        self._messages: list[dict[str, Any]] = []
        self._built: dict[int, tuple[list[dict[str, Any]], types.Content | None]] = {}
        """The contents given back at the last call, by the messages each was made of (the hook's
        messages are shared from one call to the next while unchanged: read-only)."""

    @property
    def session(self) -> Session:
        return self.hook.session

    def _read(self, contents: Contents) -> list[dict[str, Any]] | None:
        """The contents as chat messages: those read before as they were read (the same message
        objects), the rest read now (None: not readable, said once)."""
        same = _kept(self._contents, contents)
        pending = list(self._pending[same - 1]) if same else []
        start = self._starts[same] if same < len(self._starts) else len(self._messages)
        # in place: a copy of what is kept would cost a pass over the history at every call
        del self._contents[same:], self._starts[same:], self._pending[same:], self._messages[start:]
        for k in range(same, len(contents)):
            c = contents[k]
            dumped = c.model_dump(mode="json", by_alias=True, exclude_none=True) if isinstance(c, types.Content) else c
            try:
                found = read_content(dumped, k, pending)
            except MalformedMessage as e:  # what is kept is the contents before it, read
                if not self._warned:
                    self._warned = True
                    log.warning("context_os: the contents hold %s: sent to the model unmanaged", e)
                return None
            self._starts.append(len(self._messages))
            self._messages.extend(found)
            self._pending.append(list(pending))
            self._contents.append(c)
        # the hook's own list, not a copy (a pass over the history at every call: 0.1 ms at
        # 20,000 messages); the hook keeps nothing of it past its call
        return self._messages

    def transform_contents(self, contents: Contents) -> list[types.Content]:
        """The contents the model gets in place of ``contents`` (recorded as a frame)."""
        messages = self._read(contents)
        if messages is None:
            return _as_given(contents)
        return self._given_back(self.hook.transform_context(messages))

    async def atransform_contents(self, contents: Contents) -> list[types.Content]:
        """``transform_contents`` off the event loop (the store's work runs in a thread)."""
        messages = self._read(contents)
        if messages is None:
            return _as_given(contents)
        return self._given_back(await self.hook.atransform_context(messages))

    def _given_back(self, messages: list[dict[str, Any]]) -> list[types.Content]:
        """The assembly as contents: one made of the very messages of one given back at the last
        call is that one; the others made anew (``gemini.group_content``)."""
        groups, _ = content_groups(messages)
        names: dict[str, str] | None = None
        built: dict[int, tuple[list[dict[str, Any]], types.Content | None]] = {}
        out: list[types.Content] = []
        for group in groups:
            key = id(group[0])
            hit = self._built.get(key)
            if hit is None or len(hit[0]) != len(group) or not all(map(operator.is_, hit[0], group)):
                names = call_names(messages) if names is None else names
                made = group_content(group, names)
                hit = (group, None if made is None else types.Content.model_validate(made))
            built[key] = hit
            if hit[1] is not None:
                out.append(hit[1])
        self._built = built
        return out

    def tools(self) -> list[types.Tool]:
        """Our tools, declared for Gemini (their parameters as JSON Schema)."""
        declarations = [
            types.FunctionDeclaration(
                name=s["name"], description=s["description"], parameters_json_schema=s["parameters"]
            )
            for s in self.hook.registry.schemas
        ]
        return [types.Tool(function_declarations=declarations)]

    def owns(self, call: types.FunctionCall) -> bool:
        """Whether ``call`` is of one of our tools."""
        return any(s["name"] == call.name for s in self.hook.registry.schemas)

    def run(self, call: types.FunctionCall) -> types.Part:
        """Run a call of one of our tools: the part that answers it (its id, if it had one)."""
        output = self.hook.call_tool(call.name or "", json.dumps(call.args or {}))
        return types.Part(
            function_response=types.FunctionResponse(id=call.id, name=call.name, response={"output": output})
        )

    async def arun(self, call: types.FunctionCall) -> types.Part:
        """``run`` off the event loop."""
        return await asyncio.to_thread(self.run, call)


def _kept(old: list[Any], new: Contents) -> int:
    """How many of ``new``'s first contents are those read before, as read: while they are the same
    objects (checked at the first, middle and newest ``WINDOW``), all but the newest read (which
    may have changed in place); else up to the first that is not."""
    n = min(len(old), len(new))
    half = WINDOW // 2
    marks = chain(
        range(min(n, WINDOW)), range(max(0, n // 2 - half), min(n, n // 2 + half)), range(max(0, n - WINDOW), n)
    )
    if all(old[i] is new[i] for i in marks):
        return max(n - 1, 0) if n == len(old) else n
    return next(i for i in range(n) if old[i] is not new[i])


def _as_given(contents: Contents) -> list[types.Content]:
    return [c if isinstance(c, types.Content) else types.Content.model_validate(c) for c in contents]

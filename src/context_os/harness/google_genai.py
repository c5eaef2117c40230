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

A content read again at the next call is not hashed again: one equal to the one at its place at
the last call is taken as that one (a pass over the list at every call). Contents that cannot be
read as chat messages (a user part of another kind, a response that answers no call) go to the
model as they came, unmanaged, and a warning says so once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from google.genai import types

from ..errors import MalformedMessage
from .base import reuse_equal
from .gemini import to_chat, to_contents
from .openai import OpenAIHook

if TYPE_CHECKING:
    from ..context.session import Session
    from ..files.file_tools import FileTools
    from .registry import OnSync

__all__ = ["GeminiHook"]

log = logging.getLogger(__name__)

Contents = Sequence[types.Content | types.ContentDict | dict[str, Any]]


class GeminiHook:
    """context_os for a loop over google-genai's ``generate_content`` (module docstring)."""

    def __init__(self, session: Session, *, files: FileTools | None = None, on_sync: OnSync | None = None):
        self.hook = OpenAIHook(session, files=files, on_sync=on_sync)
        self._last: list[dict[str, Any]] = []
        self._warned = False

    @property
    def session(self) -> Session:
        return self.hook.session

    def _read(self, contents: Contents) -> list[dict[str, Any]] | None:
        """The contents as chat messages, those equal to the last call's at their places being
        those (None: not readable, said once)."""
        dumped = [
            c.model_dump(mode="json", by_alias=True, exclude_none=True) if isinstance(c, types.Content) else dict(c)
            for c in contents
        ]
        try:
            messages = to_chat(dumped)
        except MalformedMessage as e:
            if not self._warned:
                self._warned = True
                log.warning("context_os: the contents hold %s: sent to the model unmanaged", e)
            return None
        self._last = reuse_equal(self._last, messages)
        return self._last

    def transform_contents(self, contents: Contents) -> list[types.Content]:
        """The contents the model gets in place of ``contents`` (recorded as a frame)."""
        messages = self._read(contents)
        if messages is None:
            return [types.Content.model_validate(c) for c in contents]
        return _contents(self.hook.transform_context(messages))

    async def atransform_contents(self, contents: Contents) -> list[types.Content]:
        """``transform_contents`` off the event loop (the store's work runs in a thread)."""
        messages = self._read(contents)
        if messages is None:
            return [types.Content.model_validate(c) for c in contents]
        return _contents(await self.hook.atransform_context(messages))

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


def _contents(messages: list[dict[str, Any]]) -> list[types.Content]:
    contents, _ = to_contents(messages)
    return [types.Content.model_validate(c) for c in contents]

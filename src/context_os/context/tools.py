"""The tools context_os gives the agent: one registry, one dispatcher.

A ``Tool`` is a neutral JSON schema (``name``, ``description``, ``parameters``) and the function
that runs it. A ``ToolRegistry`` holds the tools of one session and is the only place a tool
call is run: ``call(name, arguments)`` parses the arguments (a JSON string or a mapping), checks
them against the tool's schema, runs the tool, and returns its output as text; every failure
comes back the same way, as ``{"error": …, "type": …}`` (never raised), so any harness can hand
it to the model as a tool result. Adapters wrap ``schemas`` in their harness's tool format.

``context_tools(session)`` makes the registry of the context tools every session has
(``activate``, ``deactivate``, ``pin``, ``unpin``, and ``history``, which shows the conversation
behind the history horizon); the file tools (files/file_tools.py) register
theirs into it and replace those four with versions that also take a file path.

This module knows nothing of harnesses or files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import ContextOSError, InputError

if TYPE_CHECKING:
    from .session import Session

__all__ = ["CONTEXT_TOOLS", "Tool", "ToolRegistry", "context_tools", "object_schema"]

ToolResult = dict[str, Any] | str
"""What a tool returns: an object (sent as JSON) or text (sent as is)."""

_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "boolean": bool,
    "array": list,
    "object": dict,
    "number": (int, float),
}


def object_schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments: an object with exactly these properties."""
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


@dataclass(frozen=True)
class Tool:
    """One tool: its neutral schema and the function that runs it (called with the arguments as
    keywords, once they match ``parameters``)."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[..., ToolResult]

    @property
    def schema(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def with_run(self, run: Callable[..., ToolResult], *, description: str | None = None) -> Tool:
        """The same tool (same name and arguments) run by ``run``."""
        return replace(self, run=run, description=description or self.description)

    def check(self, args: Any) -> dict[str, Any]:
        """``args`` if they match ``parameters`` (the subset of JSON schema tools use: an object
        of typed properties, some required, no others, numbers within their ``minimum`` and
        ``maximum``), without the optional ones given as null; else a clear ``InputError``."""
        if not isinstance(args, dict):
            raise InputError(f"{self.name} takes a JSON object of arguments, got {_json_type(args)}")
        props: dict[str, Any] = self.parameters.get("properties", {})
        unknown = sorted(set(args) - set(props))
        if unknown and self.parameters.get("additionalProperties") is False:
            raise InputError(f"{self.name}: unknown argument(s) {unknown}; expected {sorted(props)}")
        required = self.parameters.get("required", ())
        missing = [k for k in required if k not in args]
        if missing:
            raise InputError(f"{self.name}: missing required argument(s) {missing}")
        # null for an optional argument is its default, as many models write it (`"limit": null`)
        given: dict[str, Any] = {k: v for k, v in args.items() if v is not None or k in required}
        for k, v in list(given.items()):
            prop = props.get(k, {})
            named = prop.get("type", "")
            names = named if isinstance(named, list) else [named]
            wanted = [_TYPES[n] for n in names if n in _TYPES]
            if "integer" in names and isinstance(v, float) and v.is_integer():
                # JSON has one number type, and JSON Schema's "integer" is any number whose
                # fraction is zero: `"start": 1.0`, as some models write it, is the integer 1
                given[k] = v = int(v)
            if wanted and not any(_is(v, want) for want in wanted):
                got = "null" if v is None else type(v).__name__
                raise InputError(f"{self.name}: argument {k!r} must be {' or '.join(names)}, got {got}")
            # the bounds the schema gives the model, which a model not held to it crosses (a
            # limit of -1 listed all but the last entry and counted one too many as left out)
            low, high = prop.get("minimum"), prop.get("maximum")
            if _is(v, (int, float)) and ((low is not None and v < low) or (high is not None and v > high)):
                bounds = (
                    f"at least {low}" if high is None else f"at most {high}" if low is None else f"from {low} to {high}"
                )
                raise InputError(f"{self.name}: argument {k!r} must be {bounds}, got {v}")
        return given


def _json_type(value: Any) -> str:
    """What ``value`` is in JSON's words (the model wrote JSON, not Python)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    return type(value).__name__


def _is(value: Any, want: type | tuple[type, ...]) -> bool:
    """Whether ``value`` is of a JSON schema type (a bool is no integer or number)."""
    return isinstance(value, want) and not (isinstance(value, bool) and want is not bool)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _unicode(text: str, *, json_text: bool = False) -> str:
    """``text`` as text any harness can send: a lone surrogate (a file name that is not UTF-8,
    as Python reads it: ``caf\\udce9.txt``) written as the escape of its byte (``caf\\xe9.txt``),
    or of itself. Left in, it made the harness's next request fail to encode, and every later
    ``transform_context`` refuse the history that held it. ``json_text``: ``text`` is JSON, whose
    strings hold the escape with its backslash escaped (before 2026-12-02 a bare ``\\x`` made
    the result no JSON)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        lead = "\\" if json_text else ""
        return _SURROGATE.sub(lambda m: lead + _escape(ord(m.group())), text)
    return text


def _escape(point: int) -> str:
    return f"\\x{point - 0xDC00:02x}" if 0xDC80 <= point <= 0xDCFF else f"\\u{point:04x}"


class ToolRegistry:
    """The tools of one session, by name, and the one way to run them.

    ``post``: applied to every output text before it is returned (the file tools set their
    workspace's redactor here)."""

    def __init__(self, tools: Mapping[str, Tool] | None = None, *, post: Callable[[str], str] | None = None):
        self._tools: dict[str, Tool] = dict(tools or {})
        self.post = post

    def register(self, tool: Tool) -> None:
        """Add ``tool``, or replace the tool of that name."""
        self._tools[tool.name] = tool

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def handles(self, name: str) -> bool:
        return name in self._tools

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._tools)

    @property
    def schemas(self) -> list[dict[str, Any]]:
        """Every tool's neutral schema, in registration order."""
        return [t.schema for t in self._tools.values()]

    def call(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        """Run one tool for the agent: its output text, or ``{"error": …, "type": …}`` as JSON."""
        result: ToolResult
        try:
            tool = self._tools.get(name)
            if tool is None:
                raise InputError(f"unknown tool {name!r}; known: {sorted(self._tools)}")
            if isinstance(arguments, str):
                try:
                    # some providers send "" for a call without arguments: that is no argument
                    args = json.loads(arguments) if arguments.strip() else {}
                except json.JSONDecodeError as e:
                    raise InputError(f"{name}: arguments are not valid JSON: {e}") from None
                except (ValueError, RecursionError) as e:  # a number of thousands of digits; nested too deep
                    raise InputError(f"{name}: arguments cannot be read: {e}") from None
            else:
                args = dict(arguments) if isinstance(arguments, Mapping) else arguments
            result = tool.run(**tool.check(args))
        except ContextOSError as e:
            result = {"error": e.for_model or str(e), "type": type(e).__name__}
        if isinstance(result, str):
            text = _unicode(result)
        else:
            text = _unicode(json.dumps(result, ensure_ascii=False, sort_keys=True), json_text=True)
        return self.post(text) if self.post is not None else text


_ID = object_schema(
    {"id": {"type": "string", "description": 'Object id (toolcall:…, file:…) or a collapsed result\'s ref ("r12")'}},
    ["id"],
)

CONTEXT_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "activate": ("Load an object's full content into your context (e.g. a collapsed tool result).", _ID),
    "deactivate": (
        "Collapse an object to its one-line metadata to free context. Chat cannot be deactivated.",
        _ID,
    ),
    "pin": ("Keep an object's content in context: pinned objects are never collapsed automatically.", _ID),
    "unpin": ("Undo pin: the object follows the retention policy again.", _ID),
    "lines": (
        "Show lines of an object's stored text as this tool's output: the part of a long tool result "
        "its clipped view leaves out, or any part of a file version. Changes nothing in your context.",
        object_schema(
            {
                **_ID["properties"],
                "start": {"type": "integer", "description": "First line to show, from 1 (default 1)"},
                "end": {"type": "integer", "description": "Last line to show (default: 200 lines from start)"},
                "column": {
                    "type": "integer",
                    "description": "Character of line start to begin at, from 1 (default 1): the rest of a line"
                    " too long to show at once",
                },
            },
            ["id"],
        ),
    ),
    "history": (
        "Show earlier messages of this conversation that are no longer in your context (behind its "
        "history horizon), by chat entry number: tool results as one-line stubs, activate(ref) loads one.",
        object_schema(
            {
                "start": {
                    "type": "integer",
                    "description": "First chat entry to show (default: the 40 before the horizon)",
                },
                "end": {"type": "integer", "description": "Show the entries before this one (default: the horizon)"},
            },
            [],
        ),
    ),
}
"""The context tools every session has: name → (description, argument schema)."""


def context_tools(session: Session) -> ToolRegistry:
    """A registry of the context tools, run against ``session``."""
    runs: dict[str, Callable[..., ToolResult]] = {
        "activate": lambda id: session.activate(id),
        "deactivate": lambda id: session.deactivate(id),
        "pin": lambda id: session.pin(id),
        "unpin": lambda id: session.unpin(id),
        "lines": lambda id, start=1, end=None, column=1: session.lines(id, start, end, column),
        "history": lambda start=None, end=None: session.history(start, end),
    }
    return ToolRegistry(
        {name: Tool(name, description, schema, runs[name]) for name, (description, schema) in CONTEXT_TOOLS.items()}
    )

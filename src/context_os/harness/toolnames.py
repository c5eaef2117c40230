"""Harness tool names → the canonical roles context_os knows: read, write, edit, bash, grep, find, ls.

Harnesses name the same tools differently (Claude Code's ``Read``/``Glob``, Pi's ``read``/``find``).
The file tools and the tool observers work on roles; a ``ToolNames`` mapping says which harness
tool plays which role. Names are matched exactly (harness tool names are case-sensitive); a tool
with no role is simply not managed as a file tool.

    names = preset("claude-code").extend({"MyRead": "read"})
    names.role("Glob")   # "find"
    names.names("edit")  # ("Edit", "MultiEdit")

This module only maps names: it knows nothing of any tool's arguments or behaviour.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Literal, get_args

from ..errors import ConfigError

__all__ = ["CANONICAL", "CLAUDE_CODE", "PI", "PRESETS", "ROLES", "ToolNames", "ToolRole", "preset", "tool_role"]

ToolRole = Literal["read", "write", "edit", "bash", "grep", "find", "ls"]
ROLES: tuple[ToolRole, ...] = get_args(ToolRole)


class ToolNames(Mapping[str, ToolRole]):
    """An immutable mapping of harness tool names to canonical roles (several names may share a role)."""

    __slots__ = ("_map",)

    def __init__(self, mapping: Mapping[str, str] | None = None):
        checked: dict[str, ToolRole] = {}
        for name, role in (mapping or {}).items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"tool names: a tool name must be a non-empty string, got {name!r}")
            if role not in ROLES:
                raise ConfigError(f"tool names: {name!r} maps to unknown role {role!r} (roles: {', '.join(ROLES)})")
            checked[name] = role
        self._map: Mapping[str, ToolRole] = MappingProxyType(checked)

    def __getitem__(self, name: str) -> ToolRole:
        return self._map[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __repr__(self) -> str:
        return f"ToolNames({dict(self._map)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._map) == dict(other)

    def __hash__(self) -> int:
        return hash(frozenset(self._map.items()))

    def role(self, tool_name: str) -> ToolRole | None:
        """The role of a harness tool, or None when it has none."""
        return self._map.get(tool_name)

    def names(self, role: str) -> tuple[str, ...]:
        """The harness tool names that play ``role``, in mapping order."""
        if role not in ROLES:
            raise ConfigError(f"tool names: unknown role {role!r} (roles: {', '.join(ROLES)})")
        return tuple(n for n, r in self._map.items() if r == role)

    def extend(self, mapping: Mapping[str, str]) -> ToolNames:
        """A new mapping with ``mapping``'s entries added (they win over existing ones)."""
        return ToolNames({**self._map, **mapping})


CANONICAL = ToolNames({r: r for r in ROLES})
"""Tools named after their roles (context_os's own naming, and the OpenAI examples)."""

CLAUDE_CODE = ToolNames(
    {
        "Read": "read",
        "Write": "write",
        "Edit": "edit",
        "MultiEdit": "edit",
        "Bash": "bash",
        "Grep": "grep",
        "Glob": "find",
        "LS": "ls",
    }
)
"""Claude Code's built-in tools (``MultiEdit`` and ``LS`` exist in older releases only;
``NotebookEdit`` edits notebook cells, not text, and has no role)."""

PI = ToolNames(
    {"read": "read", "write": "write", "edit": "edit", "bash": "bash", "grep": "grep", "find": "find", "ls": "ls"}
)
"""Pi's coding-agent tools (both ``@earendil-works/pi-coding-agent`` and the older
``@mariozechner/pi-coding-agent``)."""

PRESETS: Mapping[str, ToolNames] = MappingProxyType({"canonical": CANONICAL, "claude-code": CLAUDE_CODE, "pi": PI})
"""Presets by name, e.g. for a ``--tool-names`` option or a JSON-RPC parameter."""


def preset(name: str) -> ToolNames:
    """The preset called ``name`` (``canonical``, ``claude-code`` or ``pi``)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown tool-name preset {name!r} (known: {', '.join(PRESETS)})") from None


def tool_role(tool_name: str, names: Mapping[str, str] | str = CANONICAL) -> ToolRole | None:
    """The canonical role of ``tool_name`` under ``names`` (a mapping, or a preset's name)."""
    if isinstance(names, str):
        names = preset(names)
    elif not isinstance(names, ToolNames):
        names = ToolNames(names)
    return names.role(tool_name)

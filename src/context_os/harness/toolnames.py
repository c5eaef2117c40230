"""Harness tool names → the canonical roles context_os knows: read, write, edit, bash, grep, find, ls.

Harnesses name the same tools differently (Claude Code's ``Read``/``Glob``, Pi's ``read``/``find``).
The file tools and the tool observers work on roles; a ``ToolNames`` mapping says which harness
tool plays which role. Names are matched exactly (harness tool names are case-sensitive); a tool
with no role is simply not managed as a file tool.

    names = preset("claude-code").extend({"MyRead": "read"})
    names.role("Glob")   # "find"
    names.names("edit")  # ("Edit", "MultiEdit")

One tool may play several roles, chosen by one of its arguments: SWE-agent's and OpenHands'
``str_replace_editor`` views, creates or edits a file by its ``command``. Such a tool is mapped
``by_argument`` and its role is asked with the call's arguments:

    names = preset("swe-agent")
    names.role("str_replace_editor", {"command": "view", "path": "/repo/a.py"})  # "read"

Codex CLI's tools play their roles by what a call does: ``apply_patch`` writes a new file or edits
files by its patch, and a shell command that only prints a file (``sed -n '1,80p' app.js``) is a
read. Such tools are mapped ``by_content`` (harness/codex_tools.py reads the call):

    names = preset("codex")
    names.role("shell_command", {"command": "sed -n '1,80p' app.js"})  # "read"
    names.role("shell_command", {"command": "make test"})              # "bash"

This module only maps names; what a call's arguments say is read by harness/codex_tools.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Literal, get_args

from ..errors import ConfigError
from .codex_tools import content_role

__all__ = [
    "CANONICAL",
    "CLAUDE_CODE",
    "CLINE",
    "CODEX",
    "GEMINI_CLI",
    "OPENCODE",
    "OPENHANDS",
    "PI",
    "PRESETS",
    "QWEN_CODE",
    "ROLES",
    "SWE_AGENT",
    "ToolNames",
    "ToolRole",
    "for_tools",
    "preset",
    "preset_for",
    "tool_role",
]

ToolRole = Literal["read", "write", "edit", "bash", "grep", "find", "ls"]
ROLES: tuple[ToolRole, ...] = get_args(ToolRole)
CONTENT_KINDS = ("patch", "shell")
"""What a tool mapped ``by_content`` is: an ``apply_patch`` tool or a shell tool."""


def _checked(mapping: Mapping[str, str], what: str) -> dict[str, ToolRole]:
    checked: dict[str, ToolRole] = {}
    for name, role in mapping.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"tool names: a {what} must be a non-empty string, got {name!r}")
        if role not in ROLES:
            raise ConfigError(f"tool names: {name!r} maps to unknown role {role!r} (roles: {', '.join(ROLES)})")
        checked[name] = role
    return checked


class ToolNames(Mapping[str, ToolRole]):
    """An immutable mapping of harness tool names to canonical roles (several names may share a role).

    ``by_argument`` maps tools whose role depends on one argument: tool name → (argument name,
    {argument value: role}). They are not part of the mapping's keys (no one role is theirs);
    ``role(name, arguments)`` answers for them. ``by_content`` maps tools whose role depends on
    what the call does: tool name → ``patch`` (an ``apply_patch`` tool) or ``shell`` (a shell
    tool whose plain file reads and patches play read, write or edit); a call it does not
    recognise plays the tool's role in the mapping, if any."""

    __slots__ = ("_by_argument", "_by_content", "_map")

    def __init__(
        self,
        mapping: Mapping[str, str] | None = None,
        *,
        by_argument: Mapping[str, tuple[str, Mapping[str, str]]] | None = None,
        by_content: Mapping[str, str] | None = None,
    ):
        self._map: Mapping[str, ToolRole] = MappingProxyType(_checked(mapping or {}, "tool name"))
        dispatch: dict[str, tuple[str, Mapping[str, ToolRole]]] = {}
        for name, (argument, roles) in (by_argument or {}).items():
            if not isinstance(name, str) or not name or not isinstance(argument, str) or not argument:
                raise ConfigError(f"tool names: {name!r} needs a tool name and an argument name")
            dispatch[name] = (argument, MappingProxyType(_checked(roles, "argument value")))
        self._by_argument: Mapping[str, tuple[str, Mapping[str, ToolRole]]] = MappingProxyType(dispatch)
        for name, kind in (by_content or {}).items():
            if not isinstance(name, str) or not name or kind not in CONTENT_KINDS:
                kinds = ", ".join(CONTENT_KINDS)
                raise ConfigError(f"tool names: {name!r} by content must be one of {kinds}, got {kind!r}")
        self._by_content: Mapping[str, str] = MappingProxyType(dict(by_content or {}))

    def __getitem__(self, name: str) -> ToolRole:
        return self._map[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __repr__(self) -> str:
        extra = f", by_argument={self._dispatch()!r}" if self._by_argument else ""
        extra += f", by_content={dict(self._by_content)!r}" if self._by_content else ""
        return f"ToolNames({dict(self._map)!r}{extra})"

    def _dispatch(self) -> dict[str, tuple[str, dict[str, ToolRole]]]:
        return {name: (arg, dict(roles)) for name, (arg, roles) in self._by_argument.items()}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ToolNames):
            return (
                dict(self._map) == dict(other._map)
                and self._dispatch() == other._dispatch()
                and dict(self._by_content) == dict(other._by_content)
            )
        plain = not self._by_argument and not self._by_content
        return isinstance(other, Mapping) and plain and dict(self._map) == dict(other)

    def __hash__(self) -> int:
        return hash(frozenset(self._map.items()))

    @property
    def by_argument(self) -> Mapping[str, tuple[str, Mapping[str, ToolRole]]]:
        """The tools whose role one of their arguments picks: name → (argument, value → role)."""
        return self._by_argument

    @property
    def by_content(self) -> Mapping[str, str]:
        """The tools whose role what the call does picks: name → ``patch`` or ``shell``."""
        return self._by_content

    def role(self, tool_name: str, arguments: Any = None) -> ToolRole | None:
        """The role of a harness tool, or None when it has none. A tool mapped ``by_argument``
        needs the call's ``arguments`` (an object, or its JSON text as OpenAI gives it), and so
        does one mapped ``by_content``."""
        kind = self._by_content.get(tool_name)
        if kind is not None:
            by_content = content_role(kind, arguments)
            if by_content is not None:
                return by_content  # type: ignore[return-value]
        role = self._map.get(tool_name)
        if role is not None or tool_name not in self._by_argument:
            return role
        argument, roles = self._by_argument[tool_name]
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):
                return None
        value = arguments.get(argument) if isinstance(arguments, Mapping) else None
        return roles.get(value) if isinstance(value, str) else None

    def names(self, role: str) -> tuple[str, ...]:
        """The harness tool names that play ``role``, in mapping order."""
        if role not in ROLES:
            raise ConfigError(f"tool names: unknown role {role!r} (roles: {', '.join(ROLES)})")
        return tuple(n for n, r in self._map.items() if r == role)

    def extend(self, mapping: Mapping[str, str]) -> ToolNames:
        """A new mapping with ``mapping``'s entries added (they win over existing ones, those
        mapped by argument or by content too)."""
        by_argument = {n: d for n, d in self._by_argument.items() if n not in mapping}
        by_content = {n: k for n, k in self._by_content.items() if n not in mapping}
        return ToolNames({**self._map, **mapping}, by_argument=by_argument, by_content=by_content)

    def known(self) -> frozenset[str]:
        """Every tool name this mapping gives a role: mapped, by argument or by content."""
        return frozenset(self._map) | frozenset(self._by_argument) | frozenset(self._by_content)

    def only(self, names: Iterable[str]) -> ToolNames:
        """A new mapping of ``names``' tools alone (a harness's tools among the ones it offers)."""
        keep = set(names)
        return ToolNames(
            {n: r for n, r in self._map.items() if n in keep},
            by_argument={n: d for n, d in self._by_argument.items() if n in keep},
            by_content={n: k for n, k in self._by_content.items() if n in keep},
        )


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

_EDITOR = (
    "command",
    {"view": "read", "create": "write", "str_replace": "edit", "insert": "edit", "undo_edit": "edit"},
)
"""``str_replace_editor`` (Anthropic's text editor tool, as SWE-agent and OpenHands ship it): its
``command`` picks the role (``undo_edit`` changes the file in a way its call does not say)."""

SWE_AGENT = ToolNames(
    {
        "bash": "bash",
        "open": "read",
        "goto": "read",
        "scroll_up": "read",
        "scroll_down": "read",
        "set_cursors": "read",
        "create": "write",
        "edit": "edit",
        "insert": "edit",
        "search_file": "grep",
        "search_dir": "grep",
        "find_file": "find",
    },
    by_argument={"str_replace_editor": _EDITOR},
)
"""SWE-agent's tools: ``str_replace_editor`` and ``bash`` (1.x), and the windowed tools that act
on the open file (``open``/``goto``/``scroll_*`` show a window of it, as ``set_cursors`` does in
0.x's cursors configurations, ``create`` makes and shows a new one, ``edit`` replaces a line
range (0.x; the cursors' selection in those configurations) or a search string, ``insert`` adds
text).
``submit`` has no role."""

OPENHANDS = ToolNames(
    {"execute_bash": "bash", "terminal": "bash", "edit_file": "edit"},
    by_argument={"str_replace_editor": _EDITOR, "file_editor": _EDITOR},
)
"""OpenHands' CodeAct tools: ``str_replace_editor``, ``execute_bash``, and ``edit_file`` (an edit
by line range whose result the call does not say); V1's (the software agent SDK) ``file_editor``
and ``terminal``. ``think``, ``finish``, ``task_tracker``, ``execute_ipython_cell`` and the
browser have no role."""

_CODEX_SHELLS = ("shell", "shell_command", "exec_command", "local_shell", "container.exec")

CODEX = ToolNames(
    {**{name: "bash" for name in _CODEX_SHELLS}, "grep_files": "grep", "list_dir": "ls"},
    by_content={**{name: "shell" for name in _CODEX_SHELLS}, "apply_patch": "patch"},
)
"""Codex CLI's tools: its shell tools (``shell`` and ``local_shell`` take an argv, ``shell_command``
a script, ``exec_command`` a ``cmd``), ``apply_patch``, and the experimental ``grep_files`` and
``list_dir``. A shell call that only prints a file is a read, one that applies a patch a write or
an edit (harness/codex_tools.py). ``update_plan``, ``view_image`` and web search have no role."""

GEMINI_CLI = ToolNames(
    {
        "read_file": "read",
        "write_file": "write",
        "replace": "edit",
        "run_shell_command": "bash",
        "search_file_content": "grep",
        "grep_search": "grep",
        "glob": "find",
        "list_directory": "ls",
    }
)
"""Gemini CLI's built-in tools: ``read_file`` (``file_path``, before v0.14 ``absolute_path``; a
range by ``offset``/``limit``, from v0.31 ``start_line``/``end_line``), ``write_file``
(``file_path``, ``content``), ``replace`` (``file_path``, ``old_string``, ``new_string``),
``run_shell_command``, ``search_file_content`` (``grep_search`` in newer releases), ``glob`` and
``list_directory``. ``read_many_files`` (several files in one output), web search and fetch,
``save_memory`` and ``write_todos`` have no role."""

CLINE = ToolNames(
    {
        "read_file": "read",
        "write_to_file": "write",
        "new_rule": "write",
        "replace_in_file": "edit",
        "execute_command": "bash",
        "search_files": "grep",
        "list_files": "ls",
        "apply_diff": "edit",
        "edit": "edit",
        "edit_file": "edit",
        "search_replace": "edit",
        "search_and_replace": "edit",
        "insert_content": "edit",
    }
)
"""Cline's tools: ``read_file`` (``path``; a range by ``start_line``/``end_line``),
``write_to_file`` (``path`` or ``absolutePath``, ``content``; ``new_rule`` writes a rule file
the same way), ``replace_in_file`` (``path`` or ``absolutePath``, ``diff``: SEARCH/REPLACE
blocks), ``execute_command``, ``search_files``, ``list_files``; and Roo Code's, which share
those names: ``apply_diff`` (``path``, ``diff``: its SEARCH/REPLACE blocks with a
``:start_line:``), ``edit``, ``edit_file`` and ``search_replace`` (``file_path``,
``old_string``, ``new_string``), ``search_and_replace`` and ``insert_content`` of its older
releases. ``ask_followup_question``, ``attempt_completion``, ``plan_mode_respond``,
``use_subagents``, ``list_code_definition_names``, the browser, MCP and web tools, and Cline's
``apply_patch`` have no role."""

OPENCODE = ToolNames(
    {
        "read": "read",
        "write": "write",
        "edit": "edit",
        "multiedit": "edit",
        "bash": "bash",
        "grep": "grep",
        "glob": "find",
        "list": "ls",
    },
    by_content={"apply_patch": "patch"},
)
"""OpenCode's tools: ``read`` (``filePath``; a range by ``offset``/``limit``; its output the
numbered lines between ``<content>`` and ``</content>``), ``write`` (``filePath``, ``content``),
``edit`` (``filePath``, ``oldString``, ``newString``), ``bash``, ``grep``, ``glob``, and
``apply_patch`` (``patchText``: a Codex patch; offered to GPT models instead of ``edit`` and
``write``); ``list`` and ``multiedit`` (an ``edits`` list of ``oldString``/``newString``) of
older releases. ``task``, ``skill``, ``todowrite``, ``webfetch`` and ``websearch`` have no role."""

QWEN_CODE = ToolNames(
    {
        "read_file": "read",
        "write_file": "write",
        "edit": "edit",
        "run_shell_command": "bash",
        "grep_search": "grep",
        "glob": "find",
        "list_directory": "ls",
    }
)
"""Qwen Code's tools (a Gemini CLI fork): Gemini CLI's, but for ``edit`` (``file_path``,
``old_string``, ``new_string``) in the place of ``replace``; ``read_file`` (``file_path``; a part
of a file after ``Showing lines A-B of T total lines.``; a file read again unchanged answers
``[File … unchanged since last read …]``, no text of it). ``agent``, ``skill``, ``tool_search``,
``tool_call``, ``notebook_edit`` and the goal tools have no role."""

PRESETS: Mapping[str, ToolNames] = MappingProxyType(
    {
        "canonical": CANONICAL,
        "claude-code": CLAUDE_CODE,
        "codex": CODEX,
        "pi": PI,
        "swe-agent": SWE_AGENT,
        "openhands": OPENHANDS,
        "gemini-cli": GEMINI_CLI,
        "cline": CLINE,
        "opencode": OPENCODE,
        "qwen-code": QWEN_CODE,
    }
)
"""Presets by name, e.g. for a ``--tool-names`` option or a JSON-RPC parameter."""


def preset(name: str) -> ToolNames:
    """The preset called ``name`` (``canonical``, ``claude-code``, ``codex``, ``pi``, ``swe-agent``,
    ``openhands``, ``gemini-cli``, ``cline``, ``opencode``, ``qwen-code``)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown tool-name preset {name!r} (known: {', '.join(PRESETS)})") from None


def for_tools(names: Iterable[str]) -> ToolNames | None:
    """The tool names of the harness that offers the tools ``names``: the preset that gives the
    most of them a role (the first such in ``PRESETS``' order on a tie), restricted to them, so
    that a tool of another with the same name (the proxy's own ``read``) plays none; None when
    no preset knows any of them. What the proxy goes by, which sees a harness's tools but not
    its name."""
    offered = set(names)
    found = preset_for(offered)
    return PRESETS[found].only(offered) if found is not None else None


def preset_for(names: Iterable[str]) -> str | None:
    """The name of the preset that gives the most of the tools ``names`` a role (the first such
    in ``PRESETS``' order on a tie); None when no preset knows any of them."""
    offered = set(names)
    best, found = 0, None
    for name, candidate in PRESETS.items():
        n = len(candidate.known() & offered)
        if n > best:
            best, found = n, name
    return found


def tool_role(tool_name: str, names: Mapping[str, str] | str = CANONICAL, arguments: Any = None) -> ToolRole | None:
    """The canonical role of ``tool_name`` under ``names`` (a mapping, or a preset's name);
    ``arguments``, the call's, for a tool whose role one of them picks."""
    if isinstance(names, str):
        names = preset(names)
    elif not isinstance(names, ToolNames):
        names = ToolNames(names)
    return names.role(tool_name, arguments)

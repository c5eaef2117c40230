"""Harness tool names → canonical roles."""

from __future__ import annotations

import pytest

from context_os.errors import ConfigError
from context_os.harness.toolnames import (
    CANONICAL,
    CLAUDE_CODE,
    PI,
    PRESETS,
    ROLES,
    ToolNames,
    for_tools,
    preset,
    tool_role,
)


def test_roles_are_the_seven_canonical_ones():
    assert ROLES == ("read", "write", "edit", "bash", "grep", "find", "ls")
    assert dict(CANONICAL) == {r: r for r in ROLES}


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("Read", "read"),
        ("Write", "write"),
        ("Edit", "edit"),
        ("MultiEdit", "edit"),
        ("Bash", "bash"),
        ("Grep", "grep"),
        ("Glob", "find"),
        ("LS", "ls"),
        ("NotebookEdit", None),
        ("WebFetch", None),
        ("read", None),  # names are case-sensitive
    ],
)
def test_claude_code(name, role):
    assert CLAUDE_CODE.role(name) == role
    assert tool_role(name, "claude-code") == role


@pytest.mark.parametrize("role", ROLES)
def test_pi_names_its_tools_after_their_roles(role):
    assert PI.role(role) == role
    assert tool_role(role, PI) == role
    assert PI.role(role.capitalize()) is None


def test_several_names_may_share_a_role_and_reverse_lookup_keeps_their_order():
    assert CLAUDE_CODE.names("edit") == ("Edit", "MultiEdit")
    assert CLAUDE_CODE.names("find") == ("Glob",)
    assert PI.names("write") == ("write",)
    with pytest.raises(ConfigError, match="unknown role 'delete'"):
        PI.names("delete")


def test_extend_adds_and_overrides_without_changing_the_preset():
    mine = CLAUDE_CODE.extend({"MyRead": "read", "Bash": "bash", "LS": "find"})
    assert mine.role("MyRead") == "read" and mine.role("LS") == "find"
    assert CLAUDE_CODE.role("LS") == "ls" and "MyRead" not in CLAUDE_CODE
    assert isinstance(mine, ToolNames) and len(mine) == len(CLAUDE_CODE) + 1


def test_plain_dicts_are_checked_too():
    assert tool_role("cat", {"cat": "read"}) == "read"
    assert tool_role("nope", {"cat": "read"}) is None
    with pytest.raises(ConfigError, match="unknown role 'remove'"):
        tool_role("rm", {"rm": "remove"})


@pytest.mark.parametrize("bad", [{"": "read"}, {"x": "READ"}, {"x": None}])
def test_bad_mappings_are_config_errors(bad):
    with pytest.raises(ConfigError):
        ToolNames(bad)


def test_presets_by_name():
    known = {"canonical", "claude-code", "codex", "pi", "swe-agent", "openhands", "gemini-cli", "cline", "opencode"}
    known.add("qwen-code")
    assert set(PRESETS) == known
    assert preset("pi") is PI
    assert tool_role("grep") == "grep"  # canonical by default
    with pytest.raises(ConfigError, match="unknown tool-name preset 'cursor'"):
        preset("cursor")


def test_mappings_are_immutable_values():
    with pytest.raises(TypeError):
        CLAUDE_CODE["Read"] = "write"  # type: ignore[index]
    assert ToolNames({"a": "read"}) == {"a": "read"}
    assert hash(ToolNames({"a": "read"})) == hash(ToolNames({"a": "read"}))


@pytest.mark.parametrize(
    ("arguments", "role"),
    [
        ({"command": "view", "path": "/r/a.py"}, "read"),
        ({"command": "create", "path": "/r/a.py", "file_text": ""}, "write"),
        ({"command": "str_replace", "path": "/r/a.py"}, "edit"),
        ({"command": "insert", "path": "/r/a.py"}, "edit"),
        ({"command": "undo_edit", "path": "/r/a.py"}, "edit"),
        ('{"command": "view", "path": "/r/a.py"}', "read"),  # OpenAI gives arguments as JSON text
        ({"command": "explode"}, None),
        ({}, None),
        (None, None),
        ("not json", None),
    ],
)
def test_a_tool_may_play_several_roles_chosen_by_an_argument(arguments, role):
    for names in ("swe-agent", "openhands"):
        assert tool_role("str_replace_editor", names, arguments) == role
    assert "str_replace_editor" not in preset("swe-agent")  # no one role is its own
    assert preset("openhands").role("execute_bash") == "bash" and preset("swe-agent").role("open") == "read"


def test_by_argument_mappings_are_checked_compared_and_overridden():
    with pytest.raises(ConfigError, match="unknown role 'peek'"):
        ToolNames(by_argument={"ed": ("command", {"view": "peek"})})
    with pytest.raises(ConfigError, match="needs a tool name and an argument name"):
        ToolNames(by_argument={"ed": ("", {"view": "read"})})
    a = ToolNames({"x": "read"}, by_argument={"ed": ("command", {"view": "read"})})
    assert a == ToolNames({"x": "read"}, by_argument={"ed": ("command", {"view": "read"})})
    assert a != ToolNames({"x": "read"}) and a != {"x": "read"}
    assert a.extend({"ed": "bash"}).role("ed", {"command": "view"}) == "bash"
    assert a.extend({"y": "ls"}).role("ed", {"command": "view"}) == "read"
    assert "by_argument" in repr(a)


def test_a_tool_mapped_by_content_plays_the_role_its_call_does():
    names = ToolNames({"sh": "bash"}, by_content={"sh": "shell", "patch": "patch"})
    assert names.role("sh", {"command": "cat a.py"}) == "read"
    assert names.role("sh", {"command": "make"}) == "bash"  # not recognised: the mapped role
    assert names.role("patch", {"input": "*** Begin Patch\n*** Delete File: a.py\n*** End Patch"}) == "edit"
    assert names.role("patch", {"input": "no patch"}) is None  # no mapped role either
    assert names != {"sh": "bash"} and names == ToolNames({"sh": "bash"}, by_content={"sh": "shell", "patch": "patch"})
    assert "by_content={'sh': 'shell', 'patch': 'patch'}" in repr(names)
    assert names.extend({"sh": "read"}).role("sh", {"command": "make"}) == "read"  # a name mapped again wins
    with pytest.raises(ConfigError, match="'x' by content must be one of patch, shell, got 'diff'"):
        ToolNames(by_content={"x": "diff"})


@pytest.mark.parametrize(
    ("offered", "expected"),
    [
        ({"Read", "Write", "Edit", "Bash", "Glob", "Grep", "Task", "TodoWrite"}, "claude-code"),
        ({"shell_command", "apply_patch", "update_plan", "view_image"}, "codex"),
        ({"exec_command", "write_stdin", "apply_patch"}, "codex"),
        ({"read", "bash", "edit", "write", "grep", "find", "ls"}, "pi"),
        ({"str_replace_editor", "bash", "submit"}, "swe-agent"),
        ({"str_replace_editor", "execute_bash", "think", "finish"}, "openhands"),
    ],
)
def test_the_harness_is_told_from_the_tools_it_offers(offered: set[str], expected: str) -> None:
    """What the proxy goes by: the preset naming most of the offered tools, restricted to them."""
    got = for_tools(offered)
    assert got is not None and got == preset(expected).only(offered)
    assert got.known() == preset(expected).known() & offered


def test_a_tool_of_the_preset_not_offered_plays_no_role() -> None:
    """The proxy's own ``read`` beside Codex's tools is not a read of the agent's."""
    got = for_tools({"shell_command", "apply_patch", "read"})
    assert got is not None and got.role("read") is None
    assert got.role("shell_command", {"command": "cat a.py"}) == "read"
    assert got.role("apply_patch", {"input": "*** Begin Patch\n*** Add File: b.py\n+x\n*** End Patch"}) == "write"
    assert for_tools({"think", "finish"}) is None and for_tools([]) is None
    editor = preset("openhands").only({"str_replace_editor"})  # a tool mapped by argument alone
    assert len(editor) == 0 and editor.known() == {"str_replace_editor"}
    assert editor.role("str_replace_editor", {"command": "view", "path": "a"}) == "read"

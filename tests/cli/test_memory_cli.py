"""``ctxos memory``: one row per scope (``--json`` for scripts), trust and untrust, remember; on
real files, with the user data dir in a temp dir (the autouse fixture)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from context_os.cli import memory as memory_cli
from context_os.store import data_dir


@click.group()
@click.pass_context
def root(ctx: click.Context) -> None:
    """A root group like ``ctxos``'s, holding only ``memory``."""
    ctx.ensure_object(dict)


memory_cli.register(root)


def run(*args: str, ok: bool = True) -> Result:
    result = CliRunner().invoke(root, ["memory", *args])
    if ok:
        assert result.exit_code == 0, (result.output, result.exception)
    return result


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root_dir = tmp_path / "repo"
    (root_dir / ".context_os" / "memory" / "archive").mkdir(parents=True)
    (root_dir / ".context_os" / "memory" / "MEMORY.md").write_text("- project fact\n- [build](build.md)\n")
    (root_dir / ".context_os" / "memory" / "build.md").write_text("- detail\n")
    (root_dir / ".context_os" / "memory" / "archive" / "old.md").write_text("- old\n")
    g = data_dir() / "memory"
    g.mkdir(parents=True)
    (g / "MEMORY.md").write_text("".join(f"- fact {i:04d}\n" for i in range(300)))  # 300 lines: over the cap
    return root_dir


def test_json_has_one_row_per_scope(ws: Path) -> None:
    out = json.loads(run("--workspace", str(ws), "--json").stdout)  # `show` is the default
    assert (out["workspace"], out["trusted"], out["trusted_by"]) == (str(ws), False, None)
    assert (out["max_lines"], out["max_bytes"]) == (200, 8192)
    g, p = out["scopes"]
    assert g == {
        "scope": "global",
        "id": "memory:global:MEMORY.md",
        "path": str(data_dir() / "memory" / "MEMORY.md"),
        "exists": True,
        "used": True,
        "bytes": 3600,
        "lines": 300,
        "injected_bytes": 2400,
        "injected_lines": 200,
        "capped": True,
        "binary": False,
        "topics": 0,
        "archived": 0,
        "error": None,
    }
    assert (p["scope"], p["used"], p["exists"], p["bytes"], p["lines"], p["injected_bytes"]) == (
        "project",
        False,
        True,
        35,
        None,
        0,
    )
    assert (p["topics"], p["archived"]) == (1, 1)


def test_a_binary_index_is_called_binary_not_over_the_cap(ws: Path) -> None:
    (data_dir() / "memory" / "MEMORY.md").write_bytes(b"- a\n\x00\x01\x02")
    g = json.loads(run("-w", str(ws), "--json").stdout)["scopes"][0]
    assert (g["bytes"], g["injected_bytes"], g["capped"], g["binary"]) == (7, 0, False, True)
    human = run("-w", str(ws)).stdout
    assert "global: MEMORY.md is not a text file" in human and "over the cap" not in human


def test_trust_then_show_then_untrust(ws: Path) -> None:
    human = run("-w", str(ws)).stdout
    assert "trusted: no" in human and "ctxos memory trust" in human and "over the cap" in human

    out = json.loads(run("trust", "-w", str(ws), "--json").stdout)
    assert out == {"workspace": str(ws), "trusted": True}
    assert json.loads((data_dir() / "memory.json").read_text())["trusted_workspaces"] == [str(ws)]

    shown = json.loads(run("show", "-w", str(ws), "--json").stdout)
    assert (shown["trusted"], shown["trusted_by"]) == (True, str(ws))
    p = shown["scopes"][1]
    assert (p["used"], p["lines"], p["injected_bytes"], p["capped"]) == (True, 2, 35, False)
    assert f"yes (listed: {ws})" in run("-w", str(ws)).stdout

    assert json.loads(run("untrust", "-w", str(ws), "--json").stdout) == {
        "workspace": str(ws),
        "removed": True,
        "trusted": False,
    }
    assert "not listed" in run("untrust", "-w", str(ws)).stdout
    assert json.loads(run("-w", str(ws), "--json").stdout)["trusted"] is False


def test_the_workspace_may_be_named_as_an_argument(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ctxos memory trust .`` (as ``direnv allow .``) was refused: "Got unexpected extra argument"."""
    assert json.loads(run("trust", str(ws), "--json").stdout) == {"workspace": str(ws), "trusted": True}
    assert json.loads(run("show", str(ws), "--json").stdout)["trusted"] is True
    assert json.loads(run(str(ws), "--json").stdout)["trusted"] is True  # `show`, the default
    monkeypatch.chdir(ws)
    assert json.loads(run("untrust", ".", "--json").stdout)["removed"] is True
    assert json.loads(run("trust", ".", "-w", str(ws), "--json").stdout)["trusted"] is True  # the same one
    both = run("trust", str(ws), "-w", str(ws.parent), ok=False)
    assert both.exit_code == 2 and "two workspaces named" in both.output
    assert json.loads((data_dir() / "memory.json").read_text())["trusted_workspaces"] == [str(ws)]


def test_a_workspace_deleted_since_is_untrusted_and_a_clone_made_there_later_is_not_trusted(
    ws: Path, tmp_path: Path
) -> None:
    """``untrust`` refused a directory that is gone (``MemoryScopes`` asks for one) and the path
    stayed listed: a repository cloned there later was trusted, its memory put in the context."""
    gone = tmp_path / "gone"
    gone.mkdir()
    run("trust", "-w", str(gone))
    run("trust", "-w", str(tmp_path))  # a folder above, listed too
    gone.rmdir()
    out = json.loads(run("untrust", "-w", str(gone), "--json").stdout)
    assert out == {"workspace": str(gone), "removed": True, "trusted": True}  # through the folder above
    assert json.loads((data_dir() / "memory.json").read_text())["trusted_workspaces"] == [str(tmp_path)]
    run("untrust", "-w", str(tmp_path))
    assert "not listed" in run("untrust", "-w", str(gone)).stdout
    gone.mkdir()  # a clone at the same path
    assert json.loads(run("-w", str(gone), "--json").stdout)["trusted"] is False


def test_remember_through_the_cli(ws: Path) -> None:
    refused = run("remember", "x", "-w", str(ws), ok=False)
    assert refused.exit_code == 1 and "InputError" in refused.output and "not trusted" in refused.output

    out = json.loads(run("remember", "uses uv", "--scope", "global", "-w", str(ws), "--json").stdout)
    index = data_dir() / "memory" / "MEMORY.md"
    assert out == {"scope": "global", "path": str(index), "line": "- uses uv", "pointer": None, "index": str(index)}
    assert index.read_text().endswith("- fact 0299\n- uses uv\n")

    run("trust", "-w", str(ws))
    human = run("remember", "run make test", "--topic", "testing", "-w", str(ws)).stdout
    d = ws / ".context_os" / "memory"
    assert f"{d / 'testing.md'}: - run make test" in human and "- [testing](testing.md)" in human
    assert (d / "MEMORY.md").read_text() == "- project fact\n- [build](build.md)\n- [testing](testing.md)\n"

    bad = run("remember", "x", "--topic", "../evil", "-w", str(ws), ok=False)
    assert bad.exit_code == 1 and "topic" in bad.output
    assert not (ws / ".context_os" / "evil.md").exists()


def test_pi_scopes_shown_only_when_asked(ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "pi"))
    assert [r["scope"] for r in json.loads(run("-w", str(ws), "--json").stdout)["scopes"]] == ["global", "project"]
    rows = json.loads(run("-w", str(ws), "--pi", "--json").stdout)["scopes"]
    assert [r["scope"] for r in rows] == ["global", "pi-global", "project", "pi-project"]
    assert rows[1]["path"] == str(tmp_path / "pi" / "memory" / "MEMORY.md")


def test_a_workspace_that_does_not_exist_is_a_clean_error(tmp_path: Path) -> None:
    result = run("-w", str(tmp_path / "missing"), ok=False)
    assert result.exit_code != 0 and "Traceback" not in result.output


def test_every_command_has_a_one_line_help_and_json() -> None:
    group = root.commands["memory"]
    assert isinstance(group, click.Group)
    for name, cmd in group.commands.items():
        assert (cmd.help or "").strip().splitlines()[0].endswith("."), name
        assert "--json" in {o for p in cmd.params for o in p.opts}, name
    assert "Markdown memory scopes" in run("--help").stdout

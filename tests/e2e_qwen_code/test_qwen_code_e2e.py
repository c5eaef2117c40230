"""End to end through the real Qwen Code (``qwen -p``, from npm) pointed at ``ctxos proxy`` (the real
command) as its OpenAI-compatible provider. Only the model is scripted (tests/proxy/upstream.py):
Qwen Code, its read_file and edit tools, the proxy and the SQLite store are real, on real files in a
temp workspace. Qwen Code is installed on first use (its bundled CLI alone, the exact version
``cli/package.json`` names, without a lockfile: tests/helpers.py ``node_cli``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from context_os.store.sqlite import SqliteStore
from tests.helpers import APP, NodeCli, node_cli, provisioned
from tests.proxy.running import file_as_shown, only_session, scripted_proxy, verified_frames
from tests.proxy.upstream import ToolCall, call

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CLI = Path(__file__).resolve().parent / "cli"

FILES = 10
"""Reads of 400-line files before the edit: with Qwen Code's own system prompt and tools the
conversation passes the 50,000 tokens context_os manages from."""
SETTINGS = {
    "security": {"auth": {"selectedType": "openai"}},
    "general": {"disableAutoUpdate": True},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}
"""An OpenAI-compatible provider, nothing sent home."""


@pytest.fixture(scope="module")
def qwen() -> NodeCli:
    return provisioned("Qwen Code", lambda: node_cli(CLI, "@qwen-code/qwen-code", "qwen"))


def _run_qwen(qwen: NodeCli, work: Path, home: Path, url: str, prompt: str) -> subprocess.CompletedProcess[str]:
    """``qwen -p PROMPT`` in ``work``, its home ``home``, its OpenAI-compatible provider at ``url``."""
    env = {
        "PATH": qwen.path_env(),
        "HOME": str(home),
        "OPENAI_API_KEY": "sk-e2e",
        "OPENAI_BASE_URL": url,
        "OPENAI_MODEL": "qwen3-coder-plus",
        "NO_COLOR": "1",
        "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
    }
    return subprocess.run(
        qwen.command("-p", prompt, "--yolo", "--auth-type", "openai"),
        cwd=work, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_qwen_codes_own_read_and_edit_through_the_proxy_keep_the_file_as_an_object_equal_to_the_disk(
    qwen: NodeCli, tmp_path: Path
) -> None:
    """Qwen Code reads ten files, then reads app.py twice (its second read answers that the file is
    unchanged: no text of it) and edits it with its own edit tool: the provider is then shown
    app.py as a file object at the text the edit left on disk (taken for Gemini CLI's tools,
    Qwen Code's edit had no role, and the proxy showed the old text); every frame verified."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    (home / ".qwen").mkdir(parents=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(SETTINGS))
    (work / "app.py").write_text(APP)
    for n in range(FILES):
        (work / f"m{n}.txt").write_text(
            "".join(f"line {k} of m{n}: some text of the file to read\n" for k in range(400))
        )
    app = str(work / "app.py")
    reads = [call("read_file", file_path=str(work / f"m{n}.txt")) for n in range(FILES)]
    edit = call("edit", file_path=app, old_string="    return 7\n", new_string="    return 'seven'\n")
    script = [*reads, call("read_file", file_path=app), call("read_file", file_path=app), edit, "Done."]
    with scripted_proxy(tmp_path, script) as proxied:
        proc = _run_qwen(qwen, work, home, proxied.url, "fix f7 in app.py")
        requests = list(proxied.up.requests)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Done." in proc.stdout
    on_disk = (work / "app.py").read_text()
    assert "    return 'seven'\n" in on_disk  # Qwen Code's edit wrote it
    assert len(requests) == len(script)
    last = requests[-1]["messages"]
    assert file_as_shown(last, "app.py") == (2, on_disk)  # under the directory Qwen Code names
    outputs = [json.dumps(m["content"]) for m in last if m["role"] == "tool"]
    assert sum("unchanged since last read" in o for o in outputs) == 1  # as it came: no file text
    with SqliteStore(proxied.store) as s:
        assert verified_frames(s, only_session(s)) == len(requests)


def test_with_workspace_auto_the_directory_qwen_code_names_is_its_workspace(qwen: NodeCli, tmp_path: Path) -> None:
    """``ctxos proxy --workspace auto``: the proxy reads the directory Qwen Code works in from its
    first message, so its files there are read from the disk and tracked, as with ``--workspace``
    naming it."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    (home / ".qwen").mkdir(parents=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(SETTINGS))
    (work / "app.py").write_text(APP)
    script: list[str | ToolCall] = [call("read_file", file_path=str(work / "app.py")), "Done."]
    with scripted_proxy(tmp_path, script, "--workspace", "auto") as proxied:
        proc = _run_qwen(qwen, work, home, proxied.url, "read app.py")
        requests = list(proxied.up.requests)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Done." in proc.stdout and len(requests) == 2
    with SqliteStore(proxied.store) as s:
        (app,) = [v for v in s.find("file", {"abs_path": str(work.resolve() / "app.py")}) if v.doc]
        assert not app.doc["meta"].get("virtual") and app.doc["content"] == APP  # from the disk

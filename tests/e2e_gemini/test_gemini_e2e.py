"""End to end with the real Gemini CLI (``gemini -p``, from npm) against a scripted model behind the
Gemini API (model_server.py, the only fake): Gemini CLI, its read_file and replace tools and the
session file it writes are real, on real files in a temp workspace; then ``ctxos replay`` (the real
command) reads that file. Gemini CLI is installed on first use (its bundle, ``npm ci`` of
``cli/package-lock.json``: tests/helpers.py ``node_cli``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from context_os.replay.transcripts import read_session
from tests.helpers import APP, NodeCli, node_cli, provisioned
from tests.proxy.running import replayed

from .model_server import gemini_model

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CLI = Path(__file__).resolve().parent / "cli"

MODEL = "gemini-2.5-pro"
"""Named, so Gemini CLI asks no router model which one to use."""
SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "general": {"disableAutoUpdate": True},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}
"""An API key, no folder trust prompt (its approval mode would fall back to asking), nothing sent home."""


@pytest.fixture(scope="module")
def gemini() -> NodeCli:
    return provisioned("the Gemini CLI", lambda: node_cli(CLI, "@google/gemini-cli", "gemini"))


def test_gemini_clis_session_file_replays_as_gemini_cli_sent_it(gemini: NodeCli, tmp_path: Path) -> None:
    """Gemini CLI reads app.py, fixes f7 with its replace tool and reads notes.txt; the session
    file it wrote reads as the conversation it sent in its last request, text for text (its
    session context at the head: the replay left that out before 2026-12-04), then its answer; and
    replays with a verified frame per model call, the edit made with app.py's text in context."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    (work / "app.py").write_text(APP)
    (work / "notes.txt").write_text("f7 must return 'seven'\n")
    replies: list[Any] = [
        ("read_file", {"file_path": str(work / "app.py")}),
        ("replace", {"file_path": str(work / "app.py"), "old_string": "    return 7\n",
                     "new_string": "    return 'seven'\n", "instruction": "f7 returns 'seven'"}),
        ("read_file", {"file_path": str(work / "notes.txt")}),
        "Done: f7 returns 'seven'.",
    ]  # fmt: skip
    with gemini_model(replies) as model:
        env = {
            "PATH": gemini.path_env(),
            "HOME": str(home),
            "GEMINI_API_KEY": "e2e-key",
            "GOOGLE_GEMINI_BASE_URL": model.url,
            "NO_COLOR": "1",
        }
        proc = subprocess.run(
            gemini.command("-p", "fix f7 in app.py", "--yolo", "-m", MODEL),
            cwd=work, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        requests = list(model.requests)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Done: f7 returns 'seven'." in proc.stdout
    assert "    return 'seven'\n" in (work / "app.py").read_text()  # Gemini CLI's replace wrote it
    assert len(requests) == len(replies)

    (session,) = (home / ".gemini" / "tmp").glob("*/chats/session-*.json*")
    read = read_session(session)
    assert read.format == "gemini-cli"
    assert _conversation(read.messages) == [*_sent(requests[-1]["contents"]), ("text", replies[-1])]

    summary = replayed(session, tmp_path / "replay.db")
    assert summary["turns"] == summary["frames_verified"] == len(requests)
    assert summary["edits_total"] == summary["edits_with_target_text_shown"] == 1
    assert (summary["files"], summary["file_versions"]) == (2, 3)  # app.py as read, then as edited; notes.txt
    assert summary["orphaned_tool_results"] == 0 and summary["stale_file_views_assembled"] == 0


def _sent(contents: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """A Gemini request's conversation in order: texts, calls (name and args), results' outputs."""
    out: list[tuple[str, str]] = []
    for content in contents:
        for part in content["parts"]:
            if "text" in part:
                out.append(("text", part["text"]))
            elif "functionCall" in part:
                out.append(("call", json.dumps([part["functionCall"]["name"], part["functionCall"]["args"]])))
            elif "functionResponse" in part:
                out.append(("result", part["functionResponse"]["response"]["output"]))
    return out


def _conversation(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The same of the OpenAI messages a reader gives."""
    out: list[tuple[str, str]] = []
    for m in messages:
        if m["role"] == "tool":
            out.append(("result", m["content"]))
            continue
        if m.get("content"):
            out.append(("text", m["content"]))
        for c in m.get("tool_calls") or ():
            out.append(("call", json.dumps([c["function"]["name"], json.loads(c["function"]["arguments"])])))
    return out

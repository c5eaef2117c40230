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
from context_os.store.sqlite import SqliteStore
from tests.helpers import APP, NodeCli, node_cli, provisioned
from tests.proxy.running import file_as_shown, proxy_command, replayed, verified_frames

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


ACCOUNT = {"GOOGLE_GENAI_USE_GCA": "true", "GOOGLE_CLOUD_ACCESS_TOKEN": "ya29.e2e-token"}
"""Gemini CLI logged in with a Google account: an OAuth access token from the environment (its
look-up of the account's e-mail fails, as it may, and is skipped)."""


def _workspace(tmp_path: Path, auth: str = "gemini-api-key") -> tuple[Path, Path]:
    """A workspace holding app.py, and a home whose Gemini CLI settings ask nothing, ``auth`` its
    way to log in."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    (home / ".gemini").mkdir(parents=True)
    settings = {**SETTINGS, "security": {**SETTINGS["security"], "auth": {"selectedType": auth}}}
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    (work / "app.py").write_text(APP)
    return work, home


def _fix_f7(
    gemini: NodeCli, work: Path, home: Path, base_url: str, *, account: bool = False
) -> subprocess.CompletedProcess[str]:
    """``gemini -p "fix f7 in app.py"`` in ``work``, its Gemini API at ``base_url`` (``account``:
    logged in with a Google account, Google's Code Assist API there)."""
    api_key = {"GEMINI_API_KEY": "e2e-key", "GOOGLE_GEMINI_BASE_URL": base_url}
    login = {**ACCOUNT, "CODE_ASSIST_ENDPOINT": base_url} if account else api_key
    env = {"PATH": gemini.path_env(), "HOME": str(home), "NO_COLOR": "1", **login}
    return subprocess.run(
        gemini.command("-p", "fix f7 in app.py", "--yolo", "-m", MODEL),
        cwd=work, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_gemini_clis_session_file_replays_as_gemini_cli_sent_it(gemini: NodeCli, tmp_path: Path) -> None:
    """Gemini CLI reads app.py, fixes f7 with its replace tool and reads notes.txt; the session
    file it wrote reads as the conversation it sent in its last request, text for text (its
    session context at the head: the replay left that out before 2026-12-04), then its answer; and
    replays with a verified frame per model call, the edit made with app.py's text in context."""
    work, home = _workspace(tmp_path)
    (work / "notes.txt").write_text("f7 must return 'seven'\n")
    replies: list[Any] = [
        ("read_file", {"file_path": str(work / "app.py")}),
        ("replace", {"file_path": str(work / "app.py"), "old_string": "    return 7\n",
                     "new_string": "    return 'seven'\n", "instruction": "f7 returns 'seven'"}),
        ("read_file", {"file_path": str(work / "notes.txt")}),
        "Done: f7 returns 'seven'.",
    ]  # fmt: skip
    with gemini_model(replies) as model:
        proc = _fix_f7(gemini, work, home, model.url)
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


FILES = 10
"""Reads of 400-line files before the edit: with Gemini CLI's own system prompt and tools the
conversation passes the 50,000 tokens context_os manages from."""


@pytest.mark.parametrize("auth", ["gemini-api-key", "oauth-personal"])
def test_gemini_clis_own_read_and_edit_through_the_proxy_keep_the_file_as_an_object_equal_to_the_disk(
    gemini: NodeCli, tmp_path: Path, auth: str
) -> None:
    """Gemini CLI pointed at ``ctxos proxy``, with an API key (GOOGLE_GEMINI_BASE_URL: the Gemini
    API) or logged in with a Google account (CODE_ASSIST_ENDPOINT: Google's Code Assist API): it
    reads ten files, then app.py, fixes f7 with its replace tool and says it is done. The model is
    sent the assembled context: the old reads collapsed, app.py as a file object at the text the
    edit left on disk; every frame of the session verified."""
    work, home = _workspace(tmp_path, auth)
    for n in range(FILES):
        (work / f"m{n}.txt").write_text(
            "".join(f"line {k} of m{n}: some text of the file to read\n" for k in range(400))
        )
    app = str(work / "app.py")
    replies: list[Any] = [
        *(("read_file", {"file_path": str(work / f"m{n}.txt")}) for n in range(FILES)),
        ("read_file", {"file_path": app}),
        ("replace", {"file_path": app, "old_string": "    return 7\n", "new_string": "    return 'seven'\n",
                     "instruction": "f7 returns 'seven'"}),
        "Done: f7 returns 'seven'.",
    ]  # fmt: skip
    store, said = tmp_path / "proxy.db", list[str]()
    account = auth == "oauth-personal"
    upstream = "--code-assist-upstream" if account else "--gemini-upstream"
    with gemini_model(replies) as model, proxy_command(store, model.url, said, upstream, model.url) as url:
        proc = _fix_f7(gemini, work, home, url.removesuffix("/v1"), account=account)
        side = list(model.side)
        requests = list(model.requests)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Done: f7 returns 'seven'." in proc.stdout
    on_disk = (work / "app.py").read_text()
    assert "    return 'seven'\n" in on_disk  # Gemini CLI's replace wrote it
    assert len(requests) == len(replies)
    assert not [line for line in said if "failed" in line], said  # managed throughout, never failing open
    last = requests[-1]
    as_messages = [{"content": [p for p in c["parts"] if "text" in p]} for c in last["contents"]]
    assert file_as_shown(as_messages, "app.py") == (2, on_disk)  # under the directory Gemini CLI names
    outputs = [
        p["functionResponse"]["response"] for c in last["contents"] for p in c["parts"] if "functionResponse" in p
    ]
    assert sum(str(o.get("output", "")).startswith("[read_file output, ") for o in outputs) >= FILES - 2  # collapsed
    assert {d["name"] for t in last["tools"] for d in t.get("functionDeclarations", ())} >= {"read_file", "activate"}
    with SqliteStore(store) as s:
        sessions = [v.id.removeprefix("session:") for v in s.find("session")]
        frames = {sid: verified_frames(s, sid) for sid in sessions}
    assert max(frames.values()) == len(requests)  # (Gemini CLI's checks on the side are sessions of their own)
    if account:  # the API's other methods went upstream as they came
        assert "loadCodeAssist" in side


def test_with_workspace_auto_the_directory_gemini_cli_names_is_its_workspace(gemini: NodeCli, tmp_path: Path) -> None:
    """``ctxos proxy --workspace auto``: the proxy reads the directory Gemini CLI works in from its
    session context, so its files there are read from the disk (context_os's ``read`` offered
    beside its tools), as with ``--workspace`` naming it."""
    work, home = _workspace(tmp_path)
    replies: list[Any] = [("read_file", {"file_path": str(work / "app.py")}), "Read it."]
    store = tmp_path / "proxy.db"
    with gemini_model(replies) as model:
        options = ("--gemini-upstream", model.url, "--workspace", "auto")
        with proxy_command(store, model.url, None, *options) as url:
            proc = _fix_f7(gemini, work, home, url.removesuffix("/v1"))
            requests = list(model.requests)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(requests) == 2
    assert all("read" in {d["name"] for t in r["tools"] for d in t.get("functionDeclarations", ())} for r in requests)
    with SqliteStore(store) as s:
        (app,) = [v for v in s.find("file", {"abs_path": str(work.resolve() / "app.py")}) if v.doc]
        assert not app.doc["meta"].get("virtual")  # from the disk

"""End to end through the real Codex CLI (``codex exec``, from npm) pointed at ``ctxos proxy`` (the
real command) as a Responses API provider. Only the model is scripted (tests/proxy/upstream.py):
Codex, its shell tool, the proxy and the SQLite store are real, on real files in a temp workspace.
Codex is installed on first use (its npm shim and native binary, ``npm ci`` of ``cli/package-lock.json``:
tests/helpers.py ``node_cli``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from context_os.store.sqlite import SqliteStore
from tests.helpers import APP, NodeCli, node_cli, provisioned, whole_png
from tests.proxy.running import Proxied, file_as_shown, only_session, replayed, scripted_proxy, verified_frames
from tests.proxy.upstream import ToolCall, call

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CLI = Path(__file__).resolve().parent / "cli"

CTXOS = str(Path(sys.executable).parent / "ctxos")
READS = 24
"""Reads of a long file: Codex keeps about 10 kB of each output, so the conversation passes the
50,000 tokens context_os manages from at about the 19th."""


@pytest.fixture(scope="module")
def codex() -> NodeCli:
    return provisioned("the Codex CLI", lambda: node_cli(CLI, "@openai/codex", "codex"))


@pytest.fixture
def proxied(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Proxied]:
    """``ctxos proxy`` (the command) in front of a scripted model replying ``request.param``."""
    with scripted_proxy(tmp_path, request.param) as p:
        yield p


def run_codex(codex: NodeCli, proxied: Proxied, work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``codex exec ARGS`` in ``work`` (with a 700-line big.txt), its model the proxied one."""
    home = work.parent / "codex-home"
    work.mkdir(exist_ok=True)
    home.mkdir()
    (work / "big.txt").write_text("".join(f"line {i}: some text of the file to read\n" for i in range(700)))
    provider = f'{{name="ctxos", base_url="{proxied.url}", wire_api="responses", env_key="CTXOS_E2E_KEY"}}'
    options = ["-c", "model_provider=ctxos", "-c", f"model_providers.ctxos={provider}", "-c", "model=gpt-5.1-codex"]
    env = {
        **os.environ,
        "PATH": codex.path_env(),
        "CODEX_HOME": str(home),
        "CTXOS_E2E_KEY": "sk-e2e",
        "RUST_LOG": "error",
    }
    *flags, prompt = args
    return subprocess.run(
        codex.command("exec", "--skip-git-repo-check", *flags, *options, prompt),
        cwd=work, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip


SCRIPT = [call("exec_command", cmd="cat big.txt")] * 4 + [call("pin", id="r3")]
SCRIPT += [call("exec_command", cmd="cat big.txt")] * (READS - 4) + ["Done: big.txt has 700 lines."]


@pytest.mark.parametrize("proxied", [SCRIPT], indirect=True)
def test_codex_through_the_proxy_is_managed_and_never_sees_our_tools(
    codex: NodeCli, proxied: Proxied, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    proc = run_codex(codex, proxied, work, "--sandbox", "read-only", "how long is big.txt?")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Done: big.txt has 700 lines." in proc.stdout
    # what went upstream: one request more than Codex made (our pin, run inside the proxy)
    requests = list(proxied.up.requests)
    assert len(requests) == READS + 2
    sizes = [len(json.dumps(r["input"])) for r in requests]
    outputs = [[i for i in r["input"] if i.get("type") == "function_call_output"] for r in requests]
    # Codex never saw our tool: none of its outputs says it cannot run one
    assert not any("unsupported call" in o["output"] for r in outputs for o in r)
    # small at first: passed through whole; past 50k tokens: old outputs collapsed, the input shrinks
    assert not any("collapsed" in o["output"] for o in outputs[5])
    managed = next(k for k, r in enumerate(outputs) if any("collapsed" in o["output"] for o in r))
    assert sizes[managed] < 0.5 * sizes[managed - 1]
    assert sum("collapsed" in o["output"] for o in outputs[-1]) >= 10
    # one session, a frame per upstream call, each re-rendered to its hash
    with SqliteStore(proxied.store) as s:
        assert verified_frames(s, only_session(s)) == len(requests)


APP_LINES = APP.count("\n")
PATCH = "*** Begin Patch\n*** Update File: app.py\n@@ def f7():\n-    return 7\n+    return 'seven'\n*** End Patch\n"
FILE_SCRIPT: list[str | ToolCall] = [call("exec_command", cmd="cat big.txt")] * 20
FILE_SCRIPT += [
    call("exec_command", cmd=f"sed -n '1,{APP_LINES}p' app.py"),
    call("exec_command", cmd=f"apply_patch <<'PATCH'\n{PATCH}PATCH"),
]
FILE_SCRIPT += [call("exec_command", cmd="cat big.txt"), "Done: f7 returns 'seven'."]


@pytest.mark.parametrize("proxied", [FILE_SCRIPT], indirect=True)
def test_codexs_own_read_and_patch_keep_the_file_as_an_object_equal_to_the_disk(
    codex: NodeCli, proxied: Proxied, tmp_path: Path
) -> None:
    """Codex reads app.py with sed and patches it with its apply_patch: what the provider is then
    shown of app.py is one file object, at the text Codex's patch left on disk."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text(APP)
    # no sandbox: Codex's own apply_patch writes the file (the sandbox needs what a container may lack)
    proc = run_codex(codex, proxied, work, "--dangerously-bypass-approvals-and-sandbox", "fix f7")
    assert proc.returncode == 0, proc.stderr[-3000:]
    on_disk = (work / "app.py").read_text()
    assert "    return 'seven'\n" in on_disk  # Codex applied the patch itself
    after_patch = proxied.up.requests[-2]["input"]
    # what the model is shown of app.py is the disk's text (a range read leaves the end open)
    assert file_as_shown(after_patch, "app.py") == (2, _ranged(on_disk))
    # the read's output collapsed at once: the provider sees the file once
    assert sum("def f20():" in json.dumps(i) for i in after_patch) == 1
    with SqliteStore(proxied.store) as s:
        assert verified_frames(s, only_session(s)) == len(proxied.up.requests)

    # the rollout Codex wrote of this session replays as Codex's own tools read it
    (rollout,) = (tmp_path / "codex-home" / "sessions").glob("*/*/*/rollout-*.jsonl")
    store = tmp_path / "replay.db"
    summary = replayed(rollout, store)
    assert summary["format"] == "codex"
    assert summary["turns"] == summary["frames_verified"] == len(proxied.up.requests)
    assert summary["files"] == 1  # app.py: Codex cut every output of `cat big.txt` in its middle
    assert summary["edits_total"] == summary["edits_with_target_text_shown"] == 1
    assert summary["stale_file_views_full"] > 0 and summary["stale_file_views_assembled"] == 0
    assert summary["orphaned_tool_results"] == 0
    with SqliteStore(store) as s:
        (app,) = s.find("file", {"path": "app.py"})
        versions = [v.doc["content"] for v in s.history(app.id, with_docs=True) if v.doc]
    assert versions == [_ranged(APP), _ranged(on_disk)]  # as sed showed it, then as patched


def _ranged(text: str) -> str:
    """A file's text as known from a range read of its lines: the end left open."""
    return text.removesuffix("\n") + f"\n[context_os: lines after {APP_LINES} not read yet, if any]"


@pytest.mark.parametrize("proxied", [[call("view_image", path="shot.png"), "The button overlaps."]], indirect=True)
def test_an_image_codexs_view_image_gave_is_managed_and_replayed(
    codex: NodeCli, proxied: Proxied, tmp_path: Path
) -> None:
    """Codex's ``view_image`` answers with the image as an ``input_image`` part of its output: the
    proxy manages the conversation (a frame for every call; it went upstream unmanaged before), the
    image goes upstream as Codex sent it, and the rollout replays with the image counted."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "shot.png").write_bytes(whole_png(750, 400))
    proc = run_codex(codex, proxied, work, "--sandbox", "read-only", "what is wrong in shot.png?")
    assert proc.returncode == 0, proc.stderr[-3000:]
    requests = list(proxied.up.requests)
    (output,) = [i for i in requests[-1]["input"] if i.get("type") == "function_call_output"]
    assert [p["type"] for p in output["output"]][-1] == "input_image"
    with SqliteStore(proxied.store) as s:
        assert verified_frames(s, only_session(s)) == len(requests) == 2

    (rollout,) = (tmp_path / "codex-home" / "sessions").glob("*/*/*/rollout-*.jsonl")
    summary = replayed(rollout, tmp_path / "replay.db", "--per-turn")
    assert summary["turns"] == summary["frames_verified"] == 2
    first, second = (t["tokens_full"] for t in summary["per_turn"])
    assert second - first >= 400  # 750 × 400 pixels: about 400 tokens, sent with the second call


def test_with_workspace_auto_the_directory_codex_names_is_its_workspace(codex: NodeCli, tmp_path: Path) -> None:
    """``ctxos proxy --workspace auto``: the proxy reads the directory Codex works in from its
    environment context, so its files there are read from the disk and tracked (context_os's
    ``read`` offered beside its tools), as with ``--workspace`` naming it."""
    work = tmp_path / "work"
    replies: list[str | ToolCall] = [call("exec_command", cmd="sed -n '1,20p' big.txt"), "Read it."]
    with scripted_proxy(tmp_path, replies, "--workspace", "auto") as proxied:
        proc = run_codex(codex, proxied, work, "--sandbox", "read-only", "what does big.txt start with?")
    assert proc.returncode == 0, proc.stderr[-3000:]
    requests = list(proxied.up.requests)
    assert len(requests) == 2 and all("read" in {t.get("name") for t in r["tools"]} for r in requests)
    with SqliteStore(proxied.store) as s:
        (big,) = [v for v in s.find("file", {"abs_path": str(work.resolve() / "big.txt")}) if v.doc]
        assert not big.doc["meta"].get("virtual")  # from the disk

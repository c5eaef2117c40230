"""ADK's own command line: ``adk run AGENT QUERY`` loads an agent folder whose ``agent.py``
builds an ``App`` with ``ContextOSPlugin``, the model (ADK's ``Gemini``, reaching the scripted
model through ``GOOGLE_GEMINI_BASE_URL``) is sent context_os's assembly, and the session ADK kept
in the folder's ``.adk/session.db`` replays through ``ctxos replay``. Runs in the ADK venv
(tests/adk/test_beside_adk.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from context_os.context.frames import frame_docs, verify_frame
from context_os.store.sqlite import SqliteStore
from tests.helpers import replayed
from tests.proxy.upstream import gemini_outputs, reads, upstream

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

AGENT = textwrap.dedent(
    '''
    import os

    from google.adk.agents import LlmAgent
    from google.adk.apps import App

    from context_os.context.policy import RetentionPolicy
    from context_os.harness.adk import ContextOSPlugin
    from context_os.store import open_store


    def read_file(path: str) -> dict:
        """Read a file."""
        return {"output": f"# {path}\\n" + "x = 1\\n" * 400}


    policy = RetentionPolicy(manage_from_tokens=0, cache_break_percent=None)
    plugin = ContextOSPlugin(open_store(os.environ["CTXOS_STORE"]), policy=policy)
    root_agent = LlmAgent(
        name="coder",
        model="gemini-2.5-pro",
        instruction="You are a coding agent.",
        tools=[read_file, *plugin.tools()],
    )
    app = App(name="coder", root_agent=root_agent, plugins=[plugin])
    '''
)


def test_adk_run_sends_the_assembly_and_its_session_file_replays(tmp_path: Path) -> None:
    folder = tmp_path / "coder"
    folder.mkdir()
    (folder / "__init__.py").write_text("from . import agent\n")
    (folder / "agent.py").write_text(AGENT)
    store = tmp_path / "ctx.db"
    with upstream(replies=[*reads(5), "done"]) as up:
        env = {
            **os.environ,
            "GOOGLE_API_KEY": "k",
            "GOOGLE_GEMINI_BASE_URL": up.url,
            "CTXOS_STORE": f"sqlite://{store}",
            "TMPDIR": str(tmp_path),  # (where adk run writes its log)
        }
        env.pop("GOOGLE_GENAI_USE_VERTEXAI", None)
        # (run by this Python: the venv was built elsewhere and moved, so its scripts' #! lines are stale)
        adk = [sys.executable, str(Path(sys.executable).parent / "adk")]
        r = subprocess.run(
            [*adk, "run", "coder", "fix the bug"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[coder]: done" in r.stdout and len(up.requests) == 6
    sent = gemini_outputs(up.requests[-1])
    assert sent[0].startswith("[read_file output, ") and sent[-1].startswith("# m5.py")
    with SqliteStore(store) as db:
        (session,) = db.find("session")
        sid = session.id.removeprefix("session:")
        assert sid.startswith("adk:coder:test_user:") and sid.endswith(":coder")  # (adk run's user)
        frames = frame_docs(db, sid)
        assert len(frames) == 6 and all(verify_frame(db, f).ok for f in frames)
    result = replayed(folder / ".adk" / "session.db", tmp_path / "replayed.db")
    assert result["format"] == "adk" and result["turns"] == 6 == result["frames_verified"]

"""Pi's ``/tree`` (``ctx.navigateTree``) back past a read, through the real Pi CLI in RPC mode with
the context_os extension: the file only the branch left behind had read leaves the context, as
it leaves Pi's own; the one read before stays. Only the model is scripted (model_server.py)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import CTXOS, _setup
from .model_server import scripted_model, text, tool_call
from .provision import PiInstall

pytestmark = pytest.mark.e2e

# a test-side extension: ``/nav <entry id> [summarize]`` does what ``/tree`` does in the TUI
NAV_EXTENSION = """export default function (pi: any) {
  pi.registerCommand("nav", {
    description: "navigate the session tree",
    handler: async (args: string, ctx: any) => {
      const [id, sum] = args.trim().split(/\\s+/);
      await ctx.navigateTree(id, { summarize: sum === "summarize" });
    },
  });
}
"""


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


@pytest.mark.parametrize("summarize", [False, True], ids=["plain", "with-summary"])
def test_going_back_in_the_tree_takes_out_what_the_branch_left_read(
    pi: PiInstall, tmp_path: Path, summarize: bool
) -> None:
    nav = tmp_path / "nav.ts"
    nav.write_text(NAV_EXTENSION)
    script = [tool_call("read", path="calc.py"), text("A1."), tool_call("read", path="secret_plan.py"), text("B1.")]
    script += [text("## Branch summary\nread the plan")] if summarize else []
    script += [text("C1."), text("C2.")]
    files = {"calc.py": "def add(a, b):\n    return a - b\n", "secret_plan.py": "PLAN_B_TEXT = 1\n"}
    events: list[dict[str, Any]] = []
    with scripted_model(script) as (model, base_url):
        workspace, _, _, env, options = _setup(pi, tmp_path, base_url, files, CTXOS, None)
        proc = subprocess.Popen(
            pi.command("--mode", "rpc", *options, "-e", str(nav)),
            cwd=workspace,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

        def collect() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("{"):
                    events.append(json.loads(line))

        reader = threading.Thread(target=collect, daemon=True)
        reader.start()

        def wait_for(what: str, ready: Any) -> Any:
            deadline = time.monotonic() + 60
            while not (found := ready()):
                assert proc.poll() is None and time.monotonic() < deadline, what
                time.sleep(0.05)
            return found

        def send(command: dict[str, Any]) -> dict[str, Any]:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(command) + "\n")
            proc.stdin.flush()
            return wait_for(  # type: ignore[no-any-return]
                f"the response to {command}",
                lambda: next((e for e in events if e.get("type") == "response" and e.get("id") == command["id"]), None),
            )

        def prompt(n: int, message: str) -> None:
            ends = sum(e.get("type") == "agent_end" for e in events)
            send({"id": f"p{n}", "type": "prompt", "message": message})
            wait_for(f"the run of {message!r}", lambda: sum(e.get("type") == "agent_end" for e in events) > ends)

        try:
            prompt(1, "read calc.py")
            prompt(2, "read secret_plan.py")
            entries = send({"id": "e", "type": "get_entries"})["data"]["entries"]
            answers = [e for e in entries if e["type"] == "message" and e["message"]["role"] == "assistant"]
            calls = len(model.requests)
            target = f"/nav {answers[1]['id']}" + (" summarize" if summarize else "")
            send({"id": "n", "type": "prompt", "message": target})
            wait_for("the branch summary", lambda: len(model.requests) > calls or not summarize)
            prompt(3, "what next?")
            prompt(4, "and?")
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            reader.join(10)
            if proc.stdout is not None:
                proc.stdout.close()
    assert model.errors == []
    before, after = model.requests[3], model.requests[-2:]
    assert "PLAN_B_TEXT" in "\n".join(_texts(before["messages"]))
    for request in after:
        sent = "\n".join(_texts(request["messages"]))
        assert "<context_os>" in sent
        assert "return a - b" in sent  # read before the branch point: still shown
        assert "PLAN_B_TEXT" not in sent  # read on the branch left: gone, text and index line
        assert ("secret_plan" in sent) == summarize  # named only by Pi's own branch summary

"""Pi's ``/tree`` (``ctx.navigateTree``) back past a read, through the real Pi CLI in RPC mode with
the context_os extension: the file only the branch left behind had read leaves the context, as
it leaves Pi's own; the one read before stays. Only the model is scripted (model_server.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import Rpc, pi_rpc, texts
from .model_server import text, tool_call
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
    with pi_rpc(pi, tmp_path, script, files=files, events=events, session=True, extra=["-e", str(nav)]) as (
        proc,
        model,
        _,
    ):
        rpc = Rpc(proc, events)
        rpc.prompt("read calc.py", id="p1")
        rpc.prompt("read secret_plan.py", id="p2")
        entries = rpc.ask(id="e", type="get_entries")["data"]["entries"]
        answers = [e for e in entries if e["type"] == "message" and e["message"]["role"] == "assistant"]
        calls = len(model.requests)
        target = f"/nav {answers[1]['id']}" + (" summarize" if summarize else "")
        rpc.ask(id="n", type="prompt", message=target)
        rpc.wait_for("the branch summary", lambda: len(model.requests) > calls or not summarize)
        rpc.prompt("what next?", id="p3")
        rpc.prompt("and?", id="p4")
    assert model.errors == []
    before, after = model.requests[3], model.requests[-2:]
    assert "PLAN_B_TEXT" in "\n".join(texts(before["messages"]))
    for request in after:
        sent = "\n".join(texts(request["messages"]))
        assert "<context_os>" in sent
        assert "return a - b" in sent  # read before the branch point: still shown
        assert "PLAN_B_TEXT" not in sent  # read on the branch left: gone, text and index line
        assert ("secret_plan" in sent) == summarize  # named only by Pi's own branch summary

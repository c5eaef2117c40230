"""How the Gemini CLI test gets a runnable Gemini CLI: a Node (``scripts/node.sh``), then ``npm
ci`` in ``tests/e2e_gemini/cli`` when its ``node_modules`` is missing or holds another Gemini CLI
than the lockfile names (the first time needs the npm registry, later runs are offline):
tests/helpers.py ``node_cli``. Whatever fails raises ``Unavailable`` with the exact reason."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import NodeCli, node_cli

__all__ = ["CLI", "provision"]

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(__file__).resolve().parent / "cli"
PACKAGE = "@google/gemini-cli"


def provision() -> NodeCli:
    """The Gemini CLI (its bundled script), run with that node."""
    return node_cli(ROOT, CLI, PACKAGE, "gemini")

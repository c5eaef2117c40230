"""How the Codex test gets a runnable Codex CLI: a Node (``scripts/node.sh``) for the npm shim,
then ``npm ci`` in ``tests/e2e_codex/cli`` when its ``node_modules`` is missing or holds another
Codex than the lockfile names (the first time needs the npm registry, later runs are offline):
tests/helpers.py ``node_cli``. Whatever fails raises ``Unavailable`` with the exact reason."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import NodeCli, node_cli

__all__ = ["CLI", "provision"]

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(__file__).resolve().parent / "cli"
PACKAGE = "@openai/codex"


def provision() -> NodeCli:
    """The Codex CLI (its npm shim, which runs the native binary), run with that node."""
    return node_cli(ROOT, CLI, PACKAGE, "codex")

"""How the Qwen Code test gets a runnable Qwen Code: a Node (``scripts/node.sh``), then its bundled
CLI alone installed into ``tests/e2e_qwen_code/cli`` when its ``node_modules`` is missing or holds
another version than package.json names (the first time needs the npm registry, later runs are
offline): tests/helpers.py ``node_cli``. Whatever fails raises ``Unavailable`` with the exact reason."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import NodeCli, node_cli

__all__ = ["CLI", "provision"]

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(__file__).resolve().parent / "cli"
PACKAGE = "@qwen-code/qwen-code"


def provision() -> NodeCli:
    """Qwen Code (its bundled script), run with that node."""
    return node_cli(ROOT, CLI, PACKAGE, "qwen")

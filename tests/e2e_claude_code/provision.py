"""How the Claude Code test gets a runnable Claude Code CLI: ``npm ci`` in
``tests/e2e_claude_code/cli`` (tests/helpers.py ``npm_package``), then the native binary of this
platform that the package ships as an optional dependency (``@anthropic-ai/claude-code-linux-x64``
here), run directly (``native_cli``). Whatever fails raises ``Unavailable`` with the exact reason."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import NativeCli, native_cli

__all__ = ["CLI", "provision"]

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(__file__).resolve().parent / "cli"
PACKAGE = "@anthropic-ai/claude-code"


def provision() -> NativeCli:
    return native_cli(ROOT, CLI, PACKAGE, PACKAGE + "-{platform}-{arch}", "claude")

"""How the OpenCode test gets a runnable OpenCode: ``npm ci`` in ``tests/e2e_opencode/cli``
(tests/helpers.py ``npm_package``) of the native binary ``opencode-ai`` ships for linux-x64
(``opencode-linux-x64``, named directly: its other platforms' packages cannot be locked where the
registry lacks them), run directly (``native_cli``). Whatever fails raises ``Unavailable`` with
the exact reason (on another platform: npm installed no ``opencode-linux-x64``)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import NativeCli, native_cli

__all__ = ["CLI", "provision"]

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(__file__).resolve().parent / "cli"
PACKAGE = "opencode-linux-x64"


def provision() -> NativeCli:
    return native_cli(ROOT, CLI, PACKAGE, "opencode-{platform}-{arch}", "bin/opencode")

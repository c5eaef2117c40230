"""How the Claude Code test gets a runnable Claude Code CLI: ``npm ci`` in
``tests/e2e_claude_code/cli`` (tests/helpers.py ``npm_package``), then the native binary of this
platform that the package ships as an optional dependency (``@anthropic-ai/claude-code-linux-x64``
here), run directly: the package's install script, which only links it, is not needed. Whatever
fails raises ``Unavailable`` with the exact reason."""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import Unavailable, check_version, npm_package

__all__ = ["CLI", "ClaudeInstall", "provision"]

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(__file__).resolve().parent / "cli"
PACKAGE = "@anthropic-ai/claude-code"
ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}


@dataclass(frozen=True)
class ClaudeInstall:
    claude: Path
    """The native binary."""
    version: str

    def command(self, *args: str) -> list[str]:
        return [str(self.claude), *args]


def provision() -> ClaudeInstall:
    _, installed, want = npm_package(ROOT, CLI, PACKAGE)
    native = f"{PACKAGE}-{sys.platform}-{ARCH.get(platform.machine().lower(), platform.machine())}"
    claude = installed.parent.parent / native / "claude"
    if not claude.is_file():
        raise Unavailable(f"{claude} is missing: npm installed no {native} for this platform")
    install = ClaudeInstall(claude, want)
    check_version(install.command("--version"), want, cwd=CLI)
    return install

"""How the Codex test gets a runnable Codex CLI: a Node (``scripts/node.sh``) for the npm shim,
then ``npm ci`` in ``tests/e2e_codex/cli`` when its ``node_modules`` is missing or holds another
Codex than the lockfile names (the first time needs the npm registry, later runs are offline).
Whatever fails raises ``Unavailable`` with the exact reason."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import Unavailable, npm_package, run_step

__all__ = ["CLI", "CodexInstall", "provision"]

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(__file__).resolve().parent / "cli"
PACKAGE = "@openai/codex"


@dataclass(frozen=True)
class CodexInstall:
    node_bin: Path
    codex: Path
    """The CLI's entry point (the npm shim that runs the native binary), run with that node."""
    version: str

    def command(self, *args: str) -> list[str]:
        return [str(self.node_bin / "node"), str(self.codex), *args]

    def path_env(self) -> str:
        return f"{self.node_bin}{os.pathsep}{os.environ.get('PATH', '')}"


def provision() -> CodexInstall:
    node, installed, want = npm_package(ROOT, CLI, PACKAGE)
    env = {**os.environ, "PATH": f"{node}{os.pathsep}{os.environ.get('PATH', '')}"}
    codex = installed / json.loads((installed / "package.json").read_text())["bin"]["codex"]
    install = CodexInstall(node, codex, want)
    reported = run_step(install.command("--version"), cwd=CLI, env=env).strip()
    if want not in reported:
        raise Unavailable(f"{codex} --version says {reported!r}, expected {want}")
    return install

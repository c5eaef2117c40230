"""How the Pi tests get a runnable Pi with our extension (used by the ``pi`` fixture in conftest).

1. ``scripts/node.sh``: a Node new enough for Pi (the machine's, or one installed once into
   ``.node/`` from the npm registry);
2. ``npm ci`` in ``adapters/pi`` when its ``node_modules`` is missing or holds another Pi than the
   lockfile names (the first time needs the npm registry, later runs are offline).

Whatever fails raises ``PiUnavailable`` with the exact reason (the command and its output);
conftest turns that into a failure under ``CI=true`` and a skip elsewhere.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import Unavailable, node_bin, run_step

__all__ = ["ADAPTER", "PiInstall", "PiUnavailable", "provision"]

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "adapters" / "pi"
PI_PACKAGE = "@earendil-works/pi-coding-agent"


PiUnavailable = Unavailable
"""No runnable Pi could be had; the message says exactly why."""


@dataclass(frozen=True)
class PiInstall:
    node_bin: Path
    """Directory of a Node >= 22.19 (put first on PATH when running Pi)."""
    pi: Path
    """Pi's CLI entry point (run with that node)."""
    version: str
    extension: Path
    """Our extension's entry point, for ``pi -e``."""

    def command(self, *args: str) -> list[str]:
        return [str(self.node_bin / "node"), str(self.pi), *args]

    def path_env(self) -> str:
        return f"{self.node_bin}{os.pathsep}{os.environ.get('PATH', '')}"


def _say(msg: str) -> None:
    print(f"[pi] {msg}", file=sys.stderr, flush=True)


def _locked_version() -> str:
    lock = json.loads((ADAPTER / "package-lock.json").read_text())
    return str(lock["packages"][f"node_modules/{PI_PACKAGE}"]["version"])


def _installed_version() -> str | None:
    manifest = ADAPTER / "node_modules" / PI_PACKAGE / "package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def provision() -> PiInstall:
    """Node and Pi, installing what is missing (see the module docstring)."""
    node = node_bin(ROOT)
    env = {**os.environ, "PATH": f"{node}{os.pathsep}{os.environ.get('PATH', '')}"}

    want = _locked_version()
    if _installed_version() != want:
        _say(f"installing {PI_PACKAGE} {want} into {ADAPTER / 'node_modules'} (npm ci)")
        run_step(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=ADAPTER, env=env)
        if _installed_version() != want:
            raise PiUnavailable(f"npm ci finished but {PI_PACKAGE} {want} is not in {ADAPTER / 'node_modules'}")

    manifest = json.loads((ADAPTER / "node_modules" / PI_PACKAGE / "package.json").read_text())
    pi = ADAPTER / "node_modules" / PI_PACKAGE / manifest["bin"]["pi"]
    install = PiInstall(node_bin=node, pi=pi, version=want, extension=ADAPTER / "index.ts")
    reported = run_step(install.command("--version"), cwd=ADAPTER, env=env).strip()
    if reported != want:
        raise PiUnavailable(f"{pi} --version says {reported!r}, expected {want}")
    return install

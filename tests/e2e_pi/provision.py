"""How the Pi tests get a runnable Pi with our extension (used by the ``pi`` fixture in conftest).

1. ``scripts/node.sh``: a Node new enough for Pi (the machine's, or one installed once into
   ``.node/`` from the npm registry);
2. ``npm ci`` in ``adapters/pi`` when its ``node_modules`` is missing or holds another Pi than the
   lockfile names (the first time needs the npm registry, later runs are offline).

Whatever fails raises ``Unavailable`` (tests/helpers.py ``node_cli``) with the exact reason (the
command and its output); conftest turns that into a failure under ``CI=true`` and a skip
elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.helpers import NodeCli, node_cli

__all__ = ["ADAPTER", "PiInstall", "provision"]

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "adapters" / "pi"
PI_PACKAGE = "@earendil-works/pi-coding-agent"


@dataclass(frozen=True)
class PiInstall(NodeCli):
    """Pi's CLI (``entry``, run with ``node_bin``'s node) and our extension."""

    extension: Path = ADAPTER / "index.ts"
    """Our extension's entry point, for ``pi -e``."""


def provision() -> PiInstall:
    """Node and Pi, installing what is missing (see the module docstring)."""
    cli = node_cli(ADAPTER, PI_PACKAGE, "pi")
    return PiInstall(cli.node_bin, cli.entry, cli.version)

"""The command that installs one of context_os's optional extras into the running environment.

context_os is installed from its repository (``pip install -e .``, as ``make demo`` does): a
package of the same name on PyPI is another project's, so the advice names this checkout when
there is one."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

__all__ = ["install_hint"]


def install_hint(extra: str) -> str:
    """``python -m pip install -e '<checkout>[extra]'`` for this interpreter, or, installed from a
    wheel, the extra of the distribution it came from."""
    root = Path(__file__).resolve().parents[2]
    target = f"{root}[{extra}]" if (root / "pyproject.toml").is_file() else f"context_os[{extra}]"
    editable = ["-e"] if (root / "pyproject.toml").is_file() else []
    return shlex.join([sys.executable, "-m", "pip", "install", *editable, target])

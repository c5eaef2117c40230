"""Refuses a pydantic-ai older than the adapter works with, before its names fail to import.

Imported first by ``context_os.harness.pydantic_ai``: an old release would otherwise end in an
``ImportError`` naming one of its internals, or (2.60 to 2.63) import and then hand the assembled
context to a ``ProcessHistory`` listed after our capability, which writes it back into the run's
history, stubs and all.
"""

from __future__ import annotations

import re

import pydantic_ai

MINIMUM = (2, 64)
"""The oldest pydantic-ai (``pydantic-ai-slim``) release the adapter is tested with."""


def release(version: str) -> tuple[int, int]:
    """``"2.64.1"`` -> ``(2, 64)``; ``(0, 0)`` for a version that does not start with two numbers."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def check(version: str) -> None:
    """``ImportError`` saying what to install when ``version`` is older than :data:`MINIMUM`."""
    if release(version) < MINIMUM:
        wanted = ".".join(map(str, MINIMUM))
        raise ImportError(
            f"context_os's pydantic-ai adapter needs pydantic-ai {wanted} or later (installed: {version}): "
            f"pip install 'pydantic-ai-slim>={wanted},<3'"
        )


check(getattr(pydantic_ai, "__version__", "0"))

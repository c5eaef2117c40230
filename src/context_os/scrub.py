"""Which redaction a session, or a mesh agent, applies to what it stores (``redactor``).

Light on purpose: ``redact.py`` (detect-secrets, and the HTTP client it imports) is loaded only
when the default redaction is chosen, which keeps 0.2 s off every command that stores nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

__all__ = ["RedactFunction", "redactor"]

RedactFunction = Callable[[str], tuple[str, int]]
"""Removes secrets from a text: returns the cleaned text and how many were removed."""


def redactor(redact: RedactFunction | bool | None) -> RedactFunction | None:
    """The redaction ``redact`` chooses: None or True the default (``Redactor().redact``, one a
    process: it holds nothing of what it redacted), False none, a function that function."""
    if redact is False:
        return None
    if redact is None or redact is True:
        return _default()
    return redact


@functools.cache
def _default() -> RedactFunction:
    """The default redaction, made once a process: a ``Redactor`` each session made took 1-30 ms
    (its rules, their screen) and kept ~250 objects per session that every full collection of a
    proxy holding hundreds of conversations went through."""
    from .redact import Redactor

    return Redactor().redact

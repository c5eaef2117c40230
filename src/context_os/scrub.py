"""Which redaction a session, or a mesh agent, applies to what it stores (``redactor``).

Light on purpose: ``redact.py`` (detect-secrets, and the HTTP client it imports) is loaded only
when the default redaction is chosen, which keeps 0.2 s off every command that stores nothing.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["RedactFunction", "redactor"]

RedactFunction = Callable[[str], tuple[str, int]]
"""Removes secrets from a text: returns the cleaned text and how many were removed."""


def redactor(redact: RedactFunction | bool | None) -> RedactFunction | None:
    """The redaction ``redact`` chooses: None or True the default (``Redactor().redact``), False
    none, a function that function."""
    if redact is False:
        return None
    if redact is None or redact is True:
        from .redact import Redactor

        return Redactor().redact
    return redact

"""context_os: manages what an LLM agent sees.

Objects and references instead of an ever-growing transcript: every message, tool output and
file is a versioned, blake3-hashed document in a bitemporal store; the agent's context is
assembled from them each turn and recorded as a frame.

    from context_os import Session, open_store
    from context_os.harness import OpenAIHook

    hook = OpenAIHook(Session.open(open_store(), "my-session"))
    messages_for_model = hook.transform_context(messages)

Importing it has no side effects: nothing is opened, read or started at import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .context import Assembly, RetentionPolicy, Session
    from .errors import ContextOSError
    from .harness import ContextHook, OpenAIHook
    from .store import Store, open_store

_HOME = {
    "Assembly": "context",
    "ContextHook": "harness",
    "ContextOSError": "errors",
    "OpenAIHook": "harness",
    "RetentionPolicy": "context",
    "Session": "context",
    "Store": "store",
    "open_store": "store",
}
"""Where each public name lives: imported when first asked for (``ctxos --help`` and the light
commands load only what they use)."""


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'context_os' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])


__all__ = [
    "Assembly",
    "ContextHook",
    "ContextOSError",
    "OpenAIHook",
    "RetentionPolicy",
    "Session",
    "Store",
    "open_store",
]

__version__ = "0.1.0"

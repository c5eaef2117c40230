"""The context engine: sessions, pools, retention policy, rendering and frames.

Nothing in this package knows a harness format, a file on disk or a store backend."""

from ..tokens import estimate_tokens
from .entries import Entry, Incoming, Msg, ToolCall
from .frames import FrameCheck, FrameMemo, verify_frame
from .ingest import SyncReport
from .load import load_view
from .policy import RetentionPolicy, StateChange
from .session import Assembly, Session
from .tools import Tool, ToolRegistry, context_tools
from .view import Rendered, SessionView

__all__ = [
    "Assembly",
    "Entry",
    "FrameCheck",
    "FrameMemo",
    "Incoming",
    "Msg",
    "Rendered",
    "RetentionPolicy",
    "Session",
    "SessionView",
    "StateChange",
    "SyncReport",
    "Tool",
    "ToolRegistry",
    "ToolCall",
    "context_tools",
    "estimate_tokens",
    "load_view",
    "verify_frame",
]

"""Files as first-class objects: workspace policy, file objects, the agent's file tools, and the
watchdog tracker that keeps indexed files in sync with the disk.

    ws = Workspace("/path/to/repo")
    with FileTracker(store, ws) as tracker:
        tools = FileTools(session, ws, tracker=tracker)
        tools.call("read", {"path": "src/app.py"})

Depends on ``context`` (sessions) and ``store``; nothing below ``context`` imports this package.

It never writes a session's documents but through ``Session``; file documents only through
``index.py``.
"""

from .file_tools import FILE_TOOLS, FileTools, HostTool, apply_edits
from .index import FileIndex, Indexed
from .tracker import FileTracker, Trackers
from .workspace import FileSnapshot, Workspace

__all__ = [
    "FILE_TOOLS",
    "FileIndex",
    "FileSnapshot",
    "FileTools",
    "FileTracker",
    "HostTool",
    "Indexed",
    "Trackers",
    "Workspace",
    "apply_edits",
]

"""``ctxos ui``: a local, read-only web view of what the model saw.

Pages are rendered on the server from the same read model as the CLI and JSON-RPC
(context/timeline.py, context/frames.py, context/load.py); templates, styles and the little
JavaScript they use ship in this package (no build step, nothing fetched from elsewhere).
Every request passes the ``HttpGuard`` of the address the server bound (its ``Host`` header must
name it; a request from another origin is refused); only GET and HEAD are answered.

It must never write to the store.
"""

from .app import UiApp, make_ui_server

__all__ = ["UiApp", "make_ui_server"]

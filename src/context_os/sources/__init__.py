"""Object sources: recall, memory and mesh items that enter a session as objects
(context/sources.py shows them in sessions)."""

from .base import ObjectSource, SourceItem, TextSource

__all__ = ["ObjectSource", "SourceItem", "TextSource"]

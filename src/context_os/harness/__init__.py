"""Harness adapters: translate a harness's messages to and from the context engine.

``pydantic_ai``, ``langchain`` and ``openai_agents`` are imported on demand
(``context_os.harness.pydantic_ai``, ``.langchain``, ``.openai_agents``): they need pydantic-ai,
langchain-core and openai-agents.

No module here reaches the store but through a ``Session``.
"""

from .anthropic import AnthropicAdapter, AnthropicHook
from .base import Adapter, ContextHook
from .openai import OpenAIAdapter, OpenAIHook
from .toolnames import ToolNames, for_tools, tool_role
from .virtual_files import VirtualFiles

__all__ = [
    "Adapter",
    "AnthropicAdapter",
    "AnthropicHook",
    "ContextHook",
    "OpenAIAdapter",
    "OpenAIHook",
    "ToolNames",
    "VirtualFiles",
    "for_tools",
    "tool_role",
]

"""Harness adapters: translate a harness's messages to and from the context engine.

``pydantic_ai``, ``langchain``, ``openai_agents`` and ``google_genai`` are imported on demand
(``context_os.harness.pydantic_ai``, ``.langchain``, ``.openai_agents``, ``.google_genai``): they
need pydantic-ai, langchain-core, openai-agents and google-genai.

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

"""Harness adapters: translate a harness's messages to and from the context engine."""

from .base import Adapter, ContextHook
from .openai import OpenAIAdapter, OpenAIHook

__all__ = ["Adapter", "ContextHook", "OpenAIAdapter", "OpenAIHook"]

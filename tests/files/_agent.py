"""An agent's session with file tools, for tests that drive it turn by turn: the session under
the OpenAI hook with ``FileTools`` on a real directory, each tool call made for real and its call
and result appended to the harness's message list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from context_os import Session
from context_os.context.policy import RetentionPolicy
from context_os.files import FileTools, Workspace
from context_os.harness import OpenAIHook
from context_os.store import Store
from tests.helpers import call, result, user


class FileAgent:
    """Session ``s`` of ``store``, its workspace ``root``; ``msgs`` what the harness holds."""

    def __init__(self, store: Store, root: Path, policy: RetentionPolicy | None = None) -> None:
        self.store, self.root = store, root
        self.msgs: list[dict[str, Any]] = [user("start")]
        self.open(policy)

    def open(self, policy: RetentionPolicy | None = None) -> None:
        """The session opened (again: a process restarted, its messages kept); with ``policy``,
        another policy than the one it recorded."""
        self.session = Session.open(
            self.store, "s", harness="openai", workspace=str(self.root), redact=False, policy=policy
        )
        self.hook = OpenAIHook(self.session, files=FileTools(self.session, Workspace(self.root)))

    def reopen(self, policy: RetentionPolicy | None = None) -> None:
        self.close()
        self.open(policy)

    def tool(self, name: str, **args: str) -> None:
        n = len(self.msgs)
        self.msgs += [call(f"c{n}", name, **args), result(f"c{n}", self.hook.call_tool(name, args))]

    def turn(self) -> list[dict[str, Any]]:
        return self.hook.transform_context(self.msgs)

    def close(self) -> None:
        self.session.close()

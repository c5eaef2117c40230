"""The proxy under test: in this process (``Running``: the server on a thread, over a real SQLite
store) or as the ``ctxos proxy`` command (``proxy_command``), and SDK clients pointed at it."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import openai

from context_os.server.proxy import Proxy, make_proxy_server
from context_os.store.sqlite import SqliteStore
from tests.proxy.upstream import Upstream

__all__ = ["KEY", "OPEN", "Running", "anthropic_client", "openai_client", "proxy_command"]

KEY = "sk-test-0123456789abcdef-secret"
CTXOS = str(Path(sys.executable).parent / "ctxos")

OPEN: list[Any] = []
"""The SDK clients a test made: closed after it (conftest.py; their pooled sockets would
otherwise be closed, with a ResourceWarning, whenever the collector finds them: in some later
test)."""


def openai_client(base_url: str, **headers: str) -> openai.OpenAI:
    client = openai.OpenAI(base_url=base_url, api_key=KEY, default_headers=headers or None, max_retries=0)
    OPEN.append(client)
    return client


def anthropic_client(base_url: str, **headers: str) -> anthropic.Anthropic:
    client = anthropic.Anthropic(base_url=base_url, api_key=KEY, default_headers=headers or None, max_retries=0)
    OPEN.append(client)
    return client


class Running:
    def __init__(self, tmp_path: Path, up: Upstream, **options: Any):
        self.db = tmp_path / "proxy.db"
        self.store = SqliteStore(self.db)
        self.proxy = Proxy(self.store, up.url, **options)
        self.server = make_proxy_server(self.proxy, 0)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def openai(self, **headers: str) -> openai.OpenAI:
        return openai_client(f"{self.url}/v1", **headers)

    def anthropic(self, **headers: str) -> anthropic.Anthropic:
        return anthropic_client(self.url, **headers)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
        self.proxy.close()
        self.store.close()


@contextmanager
def proxy_command(store: Path, upstream_url: str) -> Iterator[str]:
    """``ctxos proxy`` (the command) on a free port in front of ``upstream_url``: its OpenAI base
    URL, read from the line it prints; stopped with SIGTERM after, which must be a clean stop."""
    cmd = [CTXOS, "--store", str(store), "proxy", "--upstream", upstream_url, "--port", "0", "--no-recall"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        m = re.search(r"OpenAI base URL (http://127\.0\.0\.1:\d+/v1)", line)
        assert m, line
        yield m.group(1)
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
        assert proc.stderr is not None
        proc.stderr.close()

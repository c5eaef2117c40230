"""The proxy under test: in this process (``Running``: the server on a thread, over a real SQLite
store) or as the ``ctxos proxy`` command (``proxy_command``, ``scripted_proxy``: the command in
front of a scripted model, for the end-to-end tests of real agents), SDK clients pointed at it,
``file_as_shown``: a file as the provider was shown it, and what a session recorded
(``only_session``, ``verified_frames``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anthropic
import httpx
import openai

from context_os.context.frames import frame_docs, verify_frame
from context_os.server.proxy import STATUS_PATH, Proxy, make_proxy_server
from context_os.store.base import Store
from context_os.store.sqlite import SqliteStore
from tests.proxy.upstream import ToolCall, Upstream, upstream

if TYPE_CHECKING:  # (imported when a test makes one: most never do)
    from google import genai

__all__ = [
    "KEY",
    "OPEN",
    "Proxied",
    "Running",
    "anthropic_client",
    "file_as_shown",
    "gemini_client",
    "only_session",
    "openai_client",
    "proxy_command",
    "scripted_proxy",
    "verified_frames",
]

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


def gemini_client(base_url: str) -> genai.Client:
    from google import genai
    from google.genai import types

    client = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=base_url))
    OPEN.append(client)
    return client


class Running:
    def __init__(
        self, tmp_path: Path, up: Upstream, users: frozenset[int] | None = None, *, serve: bool = True, **options: Any
    ):
        """``serve=False``: bound, accepting nothing until ``serve()``."""
        self.db = tmp_path / "proxy.db"
        self.store = SqliteStore(self.db)
        self.proxy = Proxy(self.store, up.url, **options)
        self.status_token = "status-token-of-this-test"
        self.server = make_proxy_server(self.proxy, 0, status_token=self.status_token, users=users)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        if serve:
            self.thread.start()

    def serve(self) -> None:
        self.thread.start()

    def openai(self, **headers: str) -> openai.OpenAI:
        return openai_client(f"{self.url}/v1", **headers)

    def anthropic(self, **headers: str) -> anthropic.Anthropic:
        return anthropic_client(self.url, **headers)

    def gemini(self) -> genai.Client:
        return gemini_client(self.url)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
        self.proxy.close()
        self.store.close()


@contextmanager
def proxy_command(store: Path, upstream_url: str, said: list[str] | None = None, *options: str) -> Iterator[str]:
    """``ctxos proxy`` (the command, given ``options`` too) on a free port in front of
    ``upstream_url``: its OpenAI base URL, read from the line it prints; stopped with SIGTERM
    after, which must be a clean stop. ``said`` gets the lines it wrote on stderr after the first."""
    cmd = [CTXOS, "--store", str(store), "proxy", "--upstream", upstream_url, "--port", "0", "--no-recall", *options]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    token_file: Path | None = None
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        m = re.search(r"OpenAI base URL (http://127\.0\.0\.1:\d+/v1)", line)
        assert m, line
        # the status's token, in a file its user alone reads, gone once the proxy stops
        named = re.search(r"\(status token in (.+)\)$", line.strip())
        assert named, line
        token_file = Path(named.group(1))
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        status = httpx.get(m.group(1).removesuffix("/v1") + STATUS_PATH, headers={"Authorization": f"Bearer {token}"})
        assert status.status_code == 200 and "sessions" in status.json(), status.text
        yield m.group(1)
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
        assert token_file is None or not token_file.exists()
        assert proc.stderr is not None
        if said is not None:
            said += proc.stderr.read().decode().splitlines()
        proc.stderr.close()


@dataclass
class Proxied:
    url: str
    """The proxy's OpenAI base URL (the Anthropic one without ``/v1``)."""
    store: Path
    up: Upstream
    """The scripted model, with the requests it received."""


@contextmanager
def scripted_proxy(tmp_path: Path, replies: list[str | ToolCall], *options: str) -> Iterator[Proxied]:
    """The ``ctxos proxy`` command (given ``options`` too) in front of a scripted model replying ``replies``."""
    with upstream(replies=replies) as up:
        store = tmp_path / "proxy.db"
        with proxy_command(store, up.url, None, *options) as url:
            yield Proxied(url, store, up)


def file_as_shown(messages: list[Any], path: str) -> tuple[int, str]:
    """(version, text) of the newest version of ``path``'s file object in what the provider was
    sent (``messages``: its input items or messages): its block, with the patch context_os sent
    after it when the file changed (the block stays in place for the prompt cache)."""
    texts: list[str] = []
    for m in messages:
        content = m.get("content")
        parts = content if isinstance(content, list) else [{"text": content}]
        texts += [p["text"] for p in parts if isinstance(p, dict) and str(p.get("text")).startswith("<context_os>")]
    [block] = [t for t in texts if t.startswith("<context_os>\nActive content:\n") and f'path="{path}"' in t]
    head = re.search(rf'<object id="(file:[^"]+)" kind="file" path="{re.escape(path)}" version="(\d+)">\n', block)
    assert head is not None, block[:300]
    heads = tuple(f"<context_os>\n{head.group(1)} ({w} version " for w in ("now", "still"))
    patches = [t for t in texts if t.startswith(heads)]
    if patches:
        block = _patched(block, patches[-1].split("\n", 2)[2].removesuffix("\n</context_os>"))
    found = re.search(r'version="(\d+)">\n(.*?)\n</object>', block[head.start() :], re.DOTALL)
    assert found is not None
    return int(found.group(1)), found.group(2)


def _patched(text: str, diff: str) -> str:
    """``text`` with a unified diff's hunks applied (context_os's patch of a block it showed)."""
    lines = text.split("\n")
    out: list[str] = []
    at = 0
    for hunk in re.split(r"^(?=@@ )", diff, flags=re.MULTILINE):
        if not hunk.startswith("@@ "):
            continue
        header, *body = hunk.removesuffix("\n").split("\n")
        start = int(re.match(r"@@ -(\d+)", header).group(1)) - 1  # type: ignore[union-attr]
        out += lines[at:start]
        at = start
        for row in body:
            if row[:1] in (" ", "-"):
                assert lines[at] == row[1:], (lines[at], row)
                at += 1
            if row[:1] in (" ", "+"):
                out.append(row[1:])
    return "\n".join(out + lines[at:])


def only_session(store: Store) -> str:
    """The id of the one session in ``store`` (asserting there is one)."""
    [session] = [v.id.removeprefix("session:") for v in store.find("session")]
    return session


def verified_frames(store: Store, session_id: str) -> int:
    """How many frames ``session_id`` recorded, asserting there are some and each re-renders to
    its hash."""
    frames = frame_docs(store, session_id)
    assert frames and all(verify_frame(store, f).ok for f in frames), session_id
    return len(frames)


def replayed(session_file: Path, store: Path, *options: str) -> dict[str, Any]:
    """``ctxos replay FILE --json`` (the command; ``options`` else ``--no-per-turn``) into the
    SQLite store at ``store``: its summary."""
    command = [CTXOS, "--store", f"sqlite:///{store}", "replay", str(session_file), "--json"]
    out = subprocess.run([*command, *(options or ["--no-per-turn"])], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]

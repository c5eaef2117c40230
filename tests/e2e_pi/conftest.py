"""Fixtures for the Pi end-to-end tests: a provisioned Pi (see provision.py), and Pi runs.

Under ``CI=true`` a Pi that cannot be provisioned fails the tests that need it; elsewhere they are
skipped with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import provisioned

from .model_server import Reply, ScriptedModel, scripted_model
from .provision import PiInstall, provision

CTXOS = str(Path(sys.executable).parent / "ctxos")
PI_RUN_TIMEOUT_S = 90


@pytest.fixture(scope="session")
def pi() -> PiInstall:
    return provisioned("Pi", provision)


@dataclass
class PiRun:
    """What one ``pi -p`` run left behind."""

    proc: subprocess.CompletedProcess[str]
    model: ScriptedModel
    workspace: Path
    agent_dir: Path
    store: Path

    @property
    def requests(self) -> list[dict]:
        return self.model.requests

    def session_file(self) -> Path:
        files = sorted((self.agent_dir / "sessions").rglob("*.jsonl"))
        assert len(files) == 1, f"expected one Pi session file, found {files}"
        return files[0]

    def session_id(self) -> str:
        header = json.loads(self.session_file().read_text().splitlines()[0])
        assert header["type"] == "session"
        return str(header["id"])


def _setup(
    pi: PiInstall,
    root: Path,
    base_url: str,
    files: dict[str, str | bytes],
    ctxos: str,
    env: dict[str, str] | None,
    model_input: list[str] | None = None,
) -> tuple[Path, Path, Path, dict[str, str], list[str]]:
    """A fresh workspace under ``root`` holding ``files``, Pi's agent dir pointing at the scripted
    model at ``base_url`` (``model_input``: what it takes, Pi's default ``["text"]`` if None):
    (workspace, agent dir, store, environment, Pi's options)."""
    workspace = root / "workspace"
    agent_dir = root / "pi-agent"
    store = root / "store.db"
    workspace.mkdir()
    agent_dir.mkdir()
    for name, text in files.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            (workspace / name).write_bytes(text)
        else:
            (workspace / name).write_text(text)
    model: dict[str, object] = {"id": "scripted-1", "contextWindow": 64000, "maxTokens": 2000}
    if model_input is not None:
        model["input"] = model_input
    provider = {"baseUrl": base_url, "api": "openai-completions", "apiKey": "scripted", "models": [model]}
    (agent_dir / "models.json").write_text(json.dumps({"providers": {"scripted": provider}}))
    run_env = {
        **os.environ,
        "PATH": pi.path_env(),
        "PI_CODING_AGENT_DIR": str(agent_dir),
        # no network but the scripted model: no catalog refresh, version check or telemetry
        "PI_OFFLINE": "1",
        "PI_SKIP_VERSION_CHECK": "1",
        "PI_TELEMETRY": "0",
        "XDG_DATA_HOME": str(root / "xdg-data"),
        "XDG_CONFIG_HOME": str(root / "xdg-config"),
        "XDG_CACHE_HOME": str(root / "xdg-cache"),
        "CTXOS_CMD": ctxos,
        "CTXOS_STORE": f"sqlite:///{store}",
        **(env or {}),
    }
    options = ["--offline", "--provider", "scripted", "--model", "scripted-1", "--no-extensions", "--no-skills"]
    options += ["--no-context-files", "-e", str(pi.extension)]
    return workspace, agent_dir, store, run_env, options


def run_pi(
    pi: PiInstall,
    root: Path,
    prompt: str,
    script: list[Reply],
    *,
    files: dict[str, str | bytes],
    ctxos: str = CTXOS,
    env: dict[str, str] | None = None,
    on_request: Callable[[int], None] | None = None,
    provider: Callable[[str], str] | None = None,
    model_input: list[str] | None = None,
) -> PiRun:
    """Runs the real Pi CLI in print mode in a fresh workspace under ``root`` holding ``files``,
    with our extension loaded, against a scripted model serving ``script`` (``on_request``: see
    ``ScriptedModel``). ``ctxos`` is the CTXOS_CMD (default: this venv's ctxos); the store is
    ``root/store.db``. ``provider``: Pi talks to the base URL it returns for the scripted
    model's (``ctxos proxy`` in between), without our extension. ``model_input``: what the
    scripted model takes (e.g. ``["text", "image"]``; default Pi's, text only)."""
    with scripted_model(script, on_request) as (model, base_url):
        via = provider(base_url) if provider is not None else base_url
        workspace, agent_dir, store, run_env, options = _setup(pi, root, via, files, ctxos, env, model_input)
        if provider is not None:
            options = options[: options.index("-e")]
        proc = pi_print(pi, workspace, run_env, *options, prompt)
    return PiRun(proc=proc, model=model, workspace=workspace, agent_dir=agent_dir, store=store)


def pi_print(pi: PiInstall, workspace: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``pi -p ARGS`` in ``workspace``, run to its end (its exit status is the caller's to check)."""
    return subprocess.run(
        pi.command("-p", *args),
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=PI_RUN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


@contextmanager
def pi_rpc(
    pi: PiInstall,
    root: Path,
    script: list[Reply],
    *,
    files: dict[str, str],
    env: dict[str, str] | None = None,
    events: list[dict] | None = None,
    ctxos: str = CTXOS,
    on_request: Callable[[int], None] | None = None,
    session: bool = False,
    extra: Sequence[str] = (),
) -> Iterator[tuple[subprocess.Popen[str], ScriptedModel, Path]]:
    """The real Pi CLI in RPC mode (a long-lived agent waiting on stdin) with our extension, against
    a scripted model; yields (process, model, store). Closing stdin ends it. ``events``: a list
    that receives each event and response Pi writes, as Pi writes it. ``ctxos``, ``on_request``:
    as for ``run_pi``. ``session``: Pi keeps a session file (its tree: ``/tree``), not
    ``--no-session``; ``extra``: more arguments of Pi's (another extension: ``-e FILE``)."""
    with scripted_model(script, on_request) as (model, base_url):
        workspace, _, store, run_env, options = _setup(pi, root, base_url, files, ctxos, env)
        proc = subprocess.Popen(
            pi.command("--mode", "rpc", *([] if session else ["--no-session"]), *options, *extra),
            cwd=workspace,
            env=run_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

        # read what Pi writes as it writes it: a full pipe would stall it
        def collect() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if events is not None and line.startswith("{"):
                    events.append(json.loads(line))

        assert proc.stderr is not None
        drains = [threading.Thread(target=collect, daemon=True), threading.Thread(target=proc.stderr.read, daemon=True)]
        for t in drains:
            t.start()
        try:
            yield proc, model, store
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            for t in drains:
                t.join(10)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


class Rpc:
    """Commands to a Pi in RPC mode (``pi_rpc``) and waits on the events it wrote."""

    def __init__(self, proc: subprocess.Popen[str], events: list[dict[str, Any]]):
        self.proc, self.events = proc, events

    def send(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def wait_for(self, what: str, ready: Callable[[], Any], timeout: float = 60) -> float:
        """Waits until ``ready()``; how long it took."""
        start = time.monotonic()
        while not ready():
            assert self.proc.poll() is None and time.monotonic() < start + timeout, what
            time.sleep(0.05)
        return time.monotonic() - start

    def ask(self, **command: Any) -> dict[str, Any]:
        """Sends ``command`` (with an ``id``) and waits for Pi's response to it."""
        self.send(**command)

        def response() -> dict[str, Any] | None:
            return next((e for e in self.events if e.get("type") == "response" and e.get("id") == command["id"]), None)

        self.wait_for(f"the response to {command}", response)
        found = response()
        assert found is not None
        return found

    def prompt(self, message: str, **command: Any) -> None:
        """Sends a prompt and waits for the end of the run it starts."""
        ends = self.count("agent_end")
        self.send(type="prompt", message=message, **command)
        self.wait_for(f"the run of {message!r}", lambda: self.count("agent_end") > ends)

    def count(self, kind: str) -> int:
        return sum(1 for e in self.events if e.get("type") == kind)

    def notices(self) -> list[str]:
        return [str(e.get("message")) for e in self.events if e.get("method") == "notify"]


def texts(value: Any) -> list[str]:
    """Every string inside a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in texts(v)]
    return []

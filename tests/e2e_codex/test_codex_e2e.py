"""End to end through the real Codex CLI (``codex exec``, from npm) pointed at ``ctxos proxy``
(the real command) as a Responses API provider. Only the model is scripted
(tests/proxy/upstream.py): Codex, its shell tool, the proxy and the SQLite store are real, on real
files in a temp workspace. Codex is provisioned by provision.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from context_os.context.frames import frame_docs, verify_frame
from context_os.store.sqlite import SqliteStore
from tests.helpers import Unavailable, unavailable
from tests.proxy.running import proxy_command
from tests.proxy.upstream import Upstream, call, upstream

from .provision import CodexInstall, provision

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CTXOS = str(Path(sys.executable).parent / "ctxos")
READS = 24
"""Reads of a long file: Codex keeps about 10 kB of each output, so the conversation passes the
50,000 tokens context_os manages from at about the 19th."""


@pytest.fixture(scope="module")
def codex() -> CodexInstall:
    try:
        return provision()
    except Unavailable as e:  # pragma: no cover - depends on the machine
        unavailable("the Codex CLI", e)


@dataclass
class Proxied:
    url: str
    """The proxy's OpenAI base URL."""
    store: Path
    up: Upstream
    """The scripted model, with the requests it received."""


@pytest.fixture
def proxied(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Proxied]:
    """``ctxos proxy`` (the command) in front of a scripted model replying ``request.param``."""
    with upstream(replies=request.param) as up:
        store = tmp_path / "proxy.db"
        with proxy_command(store, up.url) as url:
            yield Proxied(url, store, up)


SCRIPT = [call("exec_command", cmd="cat big.txt")] * 4 + [call("pin", id="r3")]
SCRIPT += [call("exec_command", cmd="cat big.txt")] * (READS - 4) + ["Done: big.txt has 700 lines."]


@pytest.mark.parametrize("proxied", [SCRIPT], indirect=True)
def test_codex_through_the_proxy_is_managed_and_never_sees_our_tools(
    codex: CodexInstall, proxied: Proxied, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    home = tmp_path / "codex-home"
    work.mkdir()
    home.mkdir()
    (work / "big.txt").write_text("".join(f"line {i}: some text of the file to read\n" for i in range(700)))
    provider = f'{{name="ctxos", base_url="{proxied.url}", wire_api="responses", env_key="CTXOS_E2E_KEY"}}'
    options = ["-c", "model_provider=ctxos", "-c", f"model_providers.ctxos={provider}", "-c", "model=gpt-5.1-codex"]
    env = {
        **os.environ,
        "PATH": codex.path_env(),
        "CODEX_HOME": str(home),
        "CTXOS_E2E_KEY": "sk-e2e",
        "RUST_LOG": "error",
    }
    proc = subprocess.run(
        codex.command("exec", "--skip-git-repo-check", "--sandbox", "read-only", *options, "how long is big.txt?"),
        cwd=work, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Done: big.txt has 700 lines." in proc.stdout
    # what went upstream: one request more than Codex made (our pin, run inside the proxy)
    requests = list(proxied.up.requests)
    assert len(requests) == READS + 2
    sizes = [len(json.dumps(r["input"])) for r in requests]
    outputs = [[i for i in r["input"] if i.get("type") == "function_call_output"] for r in requests]
    # Codex never saw our tool: none of its outputs says it cannot run one
    assert not any("unsupported call" in o["output"] for r in outputs for o in r)
    # small at first: passed through whole; past 50k tokens: old outputs collapsed, the input shrinks
    assert not any("collapsed" in o["output"] for o in outputs[5])
    managed = next(k for k, r in enumerate(outputs) if any("collapsed" in o["output"] for o in r))
    assert sizes[managed] < 0.5 * sizes[managed - 1]
    assert sum("collapsed" in o["output"] for o in outputs[-1]) >= 10
    # one session, a frame per upstream call, each re-rendered to its hash
    with SqliteStore(proxied.store) as s:
        [session] = [v.id.removeprefix("session:") for v in s.find("session")]
        frames = frame_docs(s, session)
        assert len(frames) == len(requests) and all(verify_frame(s, f).ok for f in frames)

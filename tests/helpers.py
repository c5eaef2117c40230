"""Builders for OpenAI-format conversations used across tests, a ``ctxos serve --http`` runner, and
``wait_for`` (tests of threads and processes wait on conditions, never on sleeps)."""

from __future__ import annotations

import fcntl
import hashlib
import http.client
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import pytest

from context_os.context.view import INDEX_HEADER

EAGER: dict[str, Any] = {"manage_from_tokens": 0, "cache_break_percent": None}
"""Policy settings that manage a session from its first call and take every change when it is
due: what tests of the retention rules themselves use. The defaults wait for the session to grow
and for cache breaks that pay (tests/context/test_economy.py)."""


T = TypeVar("T")


def disk_tools(root: Path) -> tuple[Callable[[str], str], Callable[[str, str, str], str]]:
    """``read(path)`` and ``edit(path, oldText, newText)`` (Pi's names for them) on the files
    below ``root``, for a framework's tool decorator to make its tools of: what an agent a test
    runs reads and edits on disk."""

    def read(path: str) -> str:
        """Read a file."""
        return (root / path).read_text()

    def edit(path: str, oldText: str, newText: str) -> str:  # noqa: N803 - Pi's names for them
        """Replace a text in a file."""
        (root / path).write_text((root / path).read_text().replace(oldText, newText))
        return f"Edited {path}."

    return read, edit


def replayed(file: Path, store: Path) -> dict[str, Any]:
    """What ``ctxos replay FILE --json`` reports of the file's (first) session, replayed into the
    store at ``store``; the command must succeed."""
    from click.testing import CliRunner

    from context_os.cli import cli

    run = CliRunner().invoke(cli, ["--store", str(store), "replay", str(file), "--json"])
    assert run.exit_code == 0, run.output
    got: dict[str, Any] = json.loads(run.stdout)
    return got["sessions"][0] if "sessions" in got else got


@contextmanager
def hashed_per_call(hook: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many messages ``hook`` (a harness hook: its ``adapter`` and ``transform_context``, which
    ``atransform_context`` runs too) hashes at each of its calls in the block: the list yielded,
    filled when the block ends, one count per call."""
    hashed = [0]
    marks: list[int] = []
    read = hook.adapter.hash_message
    transform = hook.transform_context

    def counting(message: Any) -> Any:
        hashed[0] += 1
        return read(message)

    def counted(messages: Any) -> Any:
        marks.append(hashed[0])
        return transform(messages)

    monkeypatch.setattr(hook.adapter, "hash_message", counting)
    monkeypatch.setattr(hook, "transform_context", counted)
    counts: list[int] = []
    yield counts
    marks.append(hashed[0])
    counts += [b - a for a, b in zip(marks, marks[1:], strict=False)]


def eager_hook(hook_class: Callable[[Any], T], store: Any, sid: str, harness: str, **policy: Any) -> T:
    """``hook_class``'s hook of a new session ``sid`` of ``harness`` in ``store``, under ``EAGER``
    and ``policy``: what the harness tests drive."""
    from context_os import RetentionPolicy, Session

    return hook_class(Session.open(store, sid, harness=harness, policy=RetentionPolicy(**{**EAGER, **policy})))


def unavailable(what: str, why: object) -> NoReturn:
    """A real part a test needs (a node, a browser, a peer, data) could not be had: under
    ``CI=true`` that fails the test (CI runs everything), elsewhere it skips it, naming what and why."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} could not be had under CI=true: {why}")
    pytest.skip(f"{what} not available: {why}")


class Unavailable(Exception):
    """A real part a test needs could not be provisioned; the message says exactly why."""


def provisioned(what: str, provision: Callable[[], T]) -> T:
    """``provision()``'s real part, or the test ``unavailable`` when it raises ``Unavailable``.
    One provisioning at a time (``provisioning``)."""
    try:
        with provisioning():
            return provision()
    except Unavailable as e:  # pragma: no cover - depends on the machine
        unavailable(what, e)


@contextmanager
def provisioning() -> Iterator[None]:
    """Held while a real part is installed (an npm package, Node): the workers of a parallel run
    (``make test``'s) take turns, where two would install into one directory at once. The next
    finds it installed."""
    root = str(Path(__file__).resolve().parent.parent).encode()
    path = Path(tempfile.gettempdir()) / f"ctxos-tests-{hashlib.sha256(root).hexdigest()[:12]}.lock"
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_step(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run one provisioning step (an install, a version check) and return its stdout; raise
    ``Unavailable`` naming the command and its output if it cannot run, times out or fails."""
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError as e:
        raise Unavailable(f"{cmd[0]}: {e}") from None
    except subprocess.TimeoutExpired:
        raise Unavailable(f"{' '.join(cmd)} did not finish within {timeout} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise Unavailable(f"{' '.join(cmd)} (in {cwd}) exited with {proc.returncode}:\n{tail}")
    return proc.stdout


ROOT = Path(__file__).resolve().parents[1]
"""The repository."""
APP = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(40))
"""The app.py the end-to-end tests have a real agent fix (its f7 to return 'seven')."""


def node_bin() -> Path:
    """The directory of a Node new enough for the npm-installed CLIs (``scripts/node.sh``)."""
    out = run_step(["bash", str(ROOT / "scripts" / "node.sh")], cwd=ROOT).strip()
    found = Path(out.splitlines()[-1]) if out else Path()
    if not (found / "node").is_file():
        raise Unavailable(f"scripts/node.sh printed {out!r}, which is not a directory holding node")
    return found


def npm_package(cli: Path, package: str) -> tuple[Path, Path, str]:
    """An npm-installed CLI for an end-to-end test: (the directory of its Node, the installed
    package's directory, its version). ``npm ci`` of ``cli``'s lockfile runs when its
    ``node_modules`` is missing or holds another version than the lockfile names (the first time
    needs the npm registry; later runs are offline). A package with no dependency but optional
    ones (a bundled CLI) may instead be named at an exact version in ``cli``'s package.json with
    no lockfile: it alone is installed (a lockfile would need its optional dependencies for every
    platform, which a registry may lack). Raises ``Unavailable`` naming what failed."""
    node = node_bin()
    lock = cli / "package-lock.json"
    command = ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]
    try:
        if lock.exists():
            want = str(json.loads(lock.read_text())["packages"][f"node_modules/{package}"]["version"])
        else:
            want = str(json.loads((cli / "package.json").read_text())["dependencies"][package])
            command[1:2] = ["install", "--no-package-lock", "--omit=optional", "--ignore-scripts"]
    except (OSError, ValueError, KeyError):
        raise Unavailable(f"neither {lock} nor its package.json names {package}") from None
    installed = cli / "node_modules" / package

    def have() -> str | None:
        try:
            return str(json.loads((installed / "package.json").read_text())["version"])
        except (OSError, ValueError, KeyError):
            return None

    if have() != want:
        print(f"[e2e] installing {package} {want} into {cli / 'node_modules'} (npm {command[1]})", file=sys.stderr)
        env = {**os.environ, "PATH": f"{node}{os.pathsep}{os.environ.get('PATH', '')}"}
        run_step(command, cwd=cli, env=env)
        if have() != want:
            raise Unavailable(f"npm {command[1]} finished but {package} {want} is not in {cli / 'node_modules'}")
    return node, installed, want


def check_version(command: list[str], want: str, *, cwd: Path, env: dict[str, str] | None = None) -> None:
    """``command`` (a CLI's ``--version``) names ``want`` as one of its words, else ``Unavailable``."""
    reported = run_step(command, cwd=cwd, env=env).strip()
    if want not in reported.split():
        raise Unavailable(f"{' '.join(command)} says {reported!r}, expected {want}")


@dataclass(frozen=True)
class NodeCli:
    """An npm-installed CLI run with the Node of ``scripts/node.sh``."""

    node_bin: Path
    entry: Path
    """The package's bin script."""
    version: str

    def command(self, *args: str) -> list[str]:
        return [str(self.node_bin / "node"), str(self.entry), *args]

    def path_env(self) -> str:
        return f"{self.node_bin}{os.pathsep}{os.environ.get('PATH', '')}"


ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
"""Node's names of this machine's architectures (``process.arch``)."""


@dataclass(frozen=True)
class NativeCli:
    """A CLI's native binary, shipped by its npm package as an optional dependency per platform."""

    binary: Path
    version: str

    def command(self, *args: str) -> list[str]:
        return [str(self.binary), *args]


def native_cli(cli: Path, package: str, native: str, binary: str) -> NativeCli:
    """``npm_package``'s native binary for this platform, run directly (the package's install
    script, which only links or copies it, is not needed): ``binary`` (a path) inside the package
    ``native`` (``{platform}`` and ``{arch}`` filled in as Node names them), checked to report the
    lockfile's version."""
    _, _, want = npm_package(cli, package)
    arch = ARCH.get(platform.machine().lower(), platform.machine())
    name = native.format(platform=sys.platform, arch=arch)
    found = cli / "node_modules" / name / binary
    if not found.is_file():
        raise Unavailable(f"{found} is missing: npm installed no {name} for this platform")
    install = NativeCli(found, want)
    check_version(install.command("--version"), want, cwd=cli)
    return install


def node_cli(cli: Path, package: str, bin_name: str) -> NodeCli:
    """``npm_package``'s CLI ``bin_name``, checked to report the lockfile's version."""
    node, installed, want = npm_package(cli, package)
    entry = installed / json.loads((installed / "package.json").read_text())["bin"][bin_name]
    found = NodeCli(node, entry, want)
    check_version(found.command("--version"), want, cwd=cli, env={**os.environ, "PATH": found.path_env()})
    return found


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def call(call_id: str, name: str = "bash", **args: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}],
    }


def result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def coding_session(steps: int, output_chars: int = 4000) -> list[dict[str, Any]]:
    """system, user, then ``steps`` x (tool call, long result); no final answer."""
    msgs = [{"role": "system", "content": "You are a coding agent."}, user("fix the bug")]
    for n in range(steps):
        msgs.append(call(f"c{n}", "bash", command=f"cat file{n}.py"))
        msgs.append(result(f"c{n}", f"line {n}\n" + ("x" * output_chars)))
    return msgs


def blocks_text(out: list[dict[str, Any]]) -> str:
    """The context_os blocks (one per active object, then the object index) of an OpenAI-format
    context, joined: where each block stands depends on when it last changed."""
    return "\n".join(
        m["content"] for m in out if m["role"] == "user" and str(m.get("content", "")).startswith("<context_os>")
    )


_BLOCK = re.compile(r"<context_os>\n.*?\n</context_os>", re.S)
_OBJECT = re.compile(r'<object id="([^"]+)"([^>]*)>\n(.*?)\n</object>', re.S)
_CHANGED = re.compile(
    r"(\S+)(?: \((?:now version \d+|still version \d+(?:; version \d+ is newer)?)\))? changed: "
    r"(this replaces its block above|a patch of its block above, the rest of it stands):"
)
_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def objects_shown(out: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Object id → (the attributes of its tag, its text) as a context (of any harness's messages)
    shows it last: the newest block showing it, which may replace an older block or patch it
    (``@@ -a,b +c,d @@`` hunks over the older block's lines)."""
    blocks: list[list[str]] = []
    holder: dict[str, int] = {}  # object id → the block that shows it
    for m in out:
        content = m.get("content")
        parts = (
            [content] if isinstance(content, str) else [b.get("text", "") for b in content or () if isinstance(b, dict)]
        )
        for block in (b.group(0) for part in parts for b in _BLOCK.finditer(part)):
            lines = block.split("\n")
            change = _CHANGED.fullmatch(lines[1])
            if change is not None and change.group(2).startswith("a patch") and change.group(1) in holder:
                k = holder[change.group(1)]
                blocks[k] = _patched(blocks[k], lines[2:-1])
                continue
            if change is not None and change.group(1) in holder:  # its lines as a later patch counts them:
                lines = [lines[0], blocks[holder[change.group(1)]][1], *lines[2:]]  # under the block's heading
            blocks.append(lines)
            for oid, _, _ in _OBJECT.findall(block):
                holder[oid] = len(blocks) - 1
    return {
        oid: next((attrs, text) for found, attrs, text in _OBJECT.findall("\n".join(blocks[k])) if found == oid)
        for oid, k in holder.items()
    }


def _patched(old: list[str], hunks: list[str]) -> list[str]:
    """``old`` with the unified-diff ``hunks`` applied (line numbers from 1)."""
    out: list[str] = []
    at = 0  # lines of old taken
    for line in hunks:
        if (h := _HUNK.fullmatch(line)) is not None:
            start = int(h.group(1)) - (0 if h.group(2) == "0" else 1)
            out += old[at:start]
            at = start
        elif line.startswith(" "):
            assert old[at] == line[1:], (old[at], line)
            out.append(line[1:])
            at += 1
        elif line.startswith("-"):
            assert old[at] == line[1:], (old[at], line)
            at += 1
        elif line.startswith("+"):
            out.append(line[1:])
        else:
            raise AssertionError(f"not a patch line: {line!r}")
    return out + old[at:]


def assert_frames_verify(store: Any, session_id: str) -> None:
    """Every frame of the session re-renders to its hash (naming the first that does not)."""
    from context_os.context.frames import frame_docs, verify_frame

    for f in frame_docs(store, session_id):
        check = verify_frame(store, f)
        assert check.ok, (f["id"], check.problems)


class HttpServer:
    """A running ``ctxos serve --http`` subprocess and a raw HTTP client for it."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, token_file: Path):
        self.proc, self.port, self.token_file = proc, port, token_file
        self.token = token_file.read_text().strip()

    def request(
        self,
        method: str,
        body: bytes,
        *,
        headers: dict[str, str] | None = None,
        token: str | None = "",
        path: str = "/",
    ) -> tuple[int, bytes]:
        """One request to ``path``; by default with the right token, Host and Content-Type
        (``headers`` replaces or adds headers; ``token=None`` sends none)."""
        sent = {"Host": f"127.0.0.1:{self.port}", "Content-Type": "application/json"}
        if token is not None:
            sent["Authorization"] = f"Bearer {token or self.token}"
        sent.update(headers or {})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers={k: v for k, v in sent.items() if v is not None})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def post(self, body: bytes, **kwargs: Any) -> tuple[int, bytes]:
        return self.request("POST", body, **kwargs)

    def rpc(self, method: str, **params: Any) -> Any:
        status, body = self.post(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode())
        assert status == 200, (status, body)
        return json.loads(body)


@contextmanager
def http_server(tmp_path: Path, *args: str, store: Path | None = None) -> Iterator[HttpServer]:
    """``ctxos serve --http 0`` on ``store`` (default: a new file in ``tmp_path``) with extra ``args``."""
    token_file = tmp_path / "serve" / "token"
    ctxos = str(Path(sys.executable).parent / "ctxos")
    cmd = [ctxos, "--store", str(store or tmp_path / "s.db"), "serve", "--http", "0", "--token-file", str(token_file)]
    # (faulthandler: a server that does not stop is made to say where each of its threads stands)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen([*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+) \(token in (.+)\)$", line.strip())
        assert m is not None, line + proc.stderr.read().decode()
        assert Path(m.group(2)) == token_file
        yield HttpServer(proc, int(m.group(1)), token_file)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # its threads' stacks on stderr, then it ends
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            said = err.decode(errors="replace")
            raise AssertionError(f"ctxos serve did not stop within 30 s of SIGTERM:\n{said}") from None
        finally:
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


STUB = re.compile(r'^\[(?P<name>[\w.-]+) output(?: \(error\))?, \d+ tokens, collapsed: activate\("(?P<ref>r\d+)"\)\]')
"""A collapsed tool result's stub: ``[bash output, 1234 tokens, collapsed: activate("r12")] "first…"``."""


def stub_ref(text: str) -> str | None:
    """The short ref a collapsed result's stub names (``r12``), or None if ``text`` is no stub."""
    m = STUB.match(text or "")
    return m.group("ref") if m else None


_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def apply_patch(old: str, diff: list[str]) -> str:
    """``old`` with a unified diff's hunks (``@@ … @@`` lines and their ``' '``/``-``/``+`` lines)
    applied, as a reader of a patch block does; fails if a line it keeps or drops is not there."""
    src, out, pos, i = old.split("\n"), [], 0, 0
    while i < len(diff):
        m = _HUNK.match(diff[i])
        assert m is not None, f"not a hunk header: {diff[i]!r}"
        start, length = int(m.group(1)), int(m.group(2) or 1)
        begin = start - 1 if length else start
        out.extend(src[pos:begin])
        pos, i = begin, i + 1
        while i < len(diff) and not _HUNK.match(diff[i]):
            tag, text = diff[i][:1], diff[i][1:]
            if tag in (" ", "-"):
                assert src[pos] == text, (pos, src[pos], text)
                pos += 1
            if tag in (" ", "+"):
                out.append(text)
            i += 1
    out.extend(src[pos:])
    return "\n".join(out)


def shown_blocks(texts: list[str]) -> dict[str, str]:
    """What the context_os blocks among ``texts`` (message texts, in order) show per object (and
    ``index``), as a model reads them: a block, then the patches or replacements that follow it.
    Each value is the whole text of the object's block as it stands now."""
    shown: dict[str, str] = {}
    for text in texts:
        if not text.startswith("<context_os>\n"):
            continue
        lines = text.split("\n")
        head = lines[1]
        if head == "Active content:":
            m = re.match(r'<object id="([^"]+)"', lines[2])
            assert m is not None, lines[2]
            shown[m.group(1)] = text
        elif head.startswith("Objects in this session"):
            shown["index"] = text
        else:
            m = re.match(r"(The object index|\S+)(?: \((?:now|still) version [^)]*\))? changed: (.*)$", head)
            assert m is not None, head
            key = "index" if m.group(1) == "The object index" else m.group(1)
            if m.group(2).startswith("this replaces"):
                heading = INDEX_HEADER if key == "index" else "Active content:"
                shown[key] = "\n".join(["<context_os>", heading, *lines[2:]])
            else:
                shown[key] = apply_patch(shown[key], lines[2:-1])
    return shown


def stop_process(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until every thread of it is stopped. ``kill`` returns once the
    signal is queued; the stop begins when one of the process's threads is next scheduled, and
    on a busy machine its other threads went on for milliseconds meanwhile (a cluster test's
    node "stopped" answered the request sent right after)."""
    os.kill(pid, signal.SIGSTOP)

    def stopped() -> bool:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                stat = (task / "stat").read_text()
            except OSError:  # a thread that ended meanwhile
                continue
            states.append(stat.rpartition(")")[2].split()[0])
        return all(state in "TtZX" for state in states)

    wait_for(stopped, f"process {pid} to stop")


def wait_for(check: Callable[[], T], what: str = "condition", timeout: float = 10.0) -> T:
    """Poll ``check`` until it returns something truthy (returned); fail naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.01)


def _gemini_refused(body: dict[str, Any]) -> str | None:
    """What the Gemini API says of contents with an empty turn, a function response turn that does
    not follow a call turn or answers another number of calls, or (Gemini 3) a call of the current
    turn (since the user's last text) sent back without the signature the model gave its turn's
    first call; None: accepted."""
    contents: list[dict[str, Any]] = body.get("contents") or []
    current = max((k for k, c in enumerate(contents) if c.get("role") == "user" and
                   any("text" in p for p in c.get("parts") or ())), default=0)  # fmt: skip
    for k, c in enumerate(contents):
        parts = c.get("parts") or []
        if not parts:
            return f"contents.{k}.parts: must not be empty"
        responses = sum("functionResponse" in p for p in parts)
        calls = [p for p in parts if "functionCall" in p]
        if responses:
            before = contents[k - 1] if k else {}
            asked = sum("functionCall" in p for p in before.get("parts") or ()) if before.get("role") == "model" else 0
            if not asked:
                return "Please ensure that function response turn comes immediately after a function call turn."
            if asked != responses:
                return (
                    "Please ensure that the number of function response parts is equal to the number of"
                    " function call parts of the function call turn."
                )
        if calls and k > current and "thoughtSignature" not in calls[0]:
            name = calls[0]["functionCall"].get("name")
            return f"Function call `{name}` in the {k + 1}. content block is missing a `thought_signature`."
    return None


def pairing_refused(api: str, body: dict[str, Any]) -> str | None:
    """What each API (``openai`` chat completions, ``anthropic`` messages, ``responses``, ``gemini``) says of a
    request whose tool calls and results do not pair, or (Anthropic) that holds an empty text
    block, a text before a tool result in a user message, more than four cache breakpoints or one
    on a thinking block; None: accepted. The
    scripted models of the proxy and Pi tests refuse it, as the providers do."""
    if api == "gemini":
        return _gemini_refused(body)
    if api == "responses":
        items: list[Any] = body["input"] if isinstance(body.get("input"), list) else []
        called: set[Any] = set()
        for i in items:
            kind = i.get("type") if isinstance(i, dict) else None
            if kind in ("function_call", "custom_tool_call", "shell_call", "local_shell_call", "apply_patch_call",
                        "tool_search_call"):  # fmt: skip
                called.add(i.get("call_id"))
            elif kind in ("function_call_output", "custom_tool_call_output") and i.get("call_id") not in called:
                return f"No tool call found for function call output with call_id {i.get('call_id')}."
            elif kind == "tool_search_output" and i.get("execution") == "client" and i.get("call_id") not in called:
                return f"No tool search call found for tool search output with call_id {i.get('call_id')}."
        return None
    messages: list[dict[str, Any]] = body.get("messages") or []
    if api == "anthropic":
        system: list[Any] = body["system"] if isinstance(body.get("system"), list) else []
        parts = [*system, *(body.get("tools") or [])]
        parts += [b for m in messages if isinstance(m.get("content"), list) for b in m["content"]]
        marks = sum(isinstance(b, dict) and "cache_control" in b for b in parts)
        if marks > 4:
            return f"A maximum of 4 blocks with cache_control may be provided. Found {marks}."
        if any(isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking") and "cache_control" in b
               for b in parts):  # fmt: skip
            return "cache_control cannot be set for thinking blocks"
        ids = [b.get("id") for b in parts if isinstance(b, dict) and b.get("type") in ("tool_use", "server_tool_use")]
        twice = next((u for u in ids if ids.count(u) > 1), None)
        if twice is not None:
            return f"`tool_use` ids must be unique: {twice}"
        for k, m in enumerate(messages):  # a server tool's result follows its call, in the same message
            given = m.get("content")
            blocks = [b for b in given if isinstance(b, dict)] if isinstance(given, list) else []
            for j, b in enumerate(blocks):
                kind = str(b.get("type", ""))
                if kind.endswith("_tool_result") and kind != "tool_result":
                    called = {c.get("id") for c in blocks[:j] if c.get("type") == "server_tool_use"}
                    if b.get("tool_use_id") not in called:
                        return f"messages.{k}.content.{j}: `{kind}` block without its `server_tool_use` before it"
    for k, m in enumerate(messages):
        content = m.get("content")
        blocks = content if isinstance(content, list) else []
        if api == "anthropic":
            if any(b.get("type") == "text" and not b.get("text") for b in blocks):
                return f"messages.{k}: text content blocks must be non-empty"
            if content in ("", []) and k != len(messages) - 1:
                return f"messages.{k}: all messages must have non-empty content"
            kinds = [b.get("type") for b in blocks]
            last = len(kinds) - 1 - kinds[::-1].index("tool_result") if "tool_result" in kinds else 0
            if any(kind != "tool_result" for kind in kinds[:last]):
                return f"messages.{k}: tool_result blocks must come first in a user message, before any text"
            uses = [b["id"] for b in blocks if m["role"] == "assistant" and b.get("type") == "tool_use"]
            if uses and k + 1 < len(messages):
                after = messages[k + 1].get("content")
                answered = (
                    {b.get("tool_use_id") for b in after if isinstance(b, dict)} if isinstance(after, list) else set()
                )
                if not set(uses) <= answered:
                    missing = ", ".join(u for u in uses if u not in answered)
                    said = "`tool_use` ids were found without `tool_result` blocks immediately after"
                    return f"messages.{k + 1}: {said}: {missing}"
            results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
            before = messages[k - 1].get("content") if k else None
            used = {b.get("id") for b in before if isinstance(b, dict)} if isinstance(before, list) else set()
            if any(r not in used for r in results):
                return f"messages.{k}.content: unexpected `tool_use_id` found in `tool_result` blocks"
        elif m.get("role") == "tool":
            prev: dict[str, Any] = next((p for p in reversed(messages[:k]) if p.get("role") != "tool"), {})
            if m.get("tool_call_id") not in {c.get("id") for c in prev.get("tool_calls") or ()}:
                return "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
        elif m.get("role") == "function":  # legacy function calling
            prev = messages[k - 1] if k else {}
            if not isinstance(prev.get("function_call"), dict) or prev["function_call"].get("name") != m.get("name"):
                return "messages with role 'function' must be a response to a preceding message with 'function_call'."
        elif m.get("role") == "assistant" and m.get("tool_calls") and m.get("function_call"):
            return f"messages.{k}: 'function_call' and 'tool_calls' cannot both be given"
        elif m.get("role") == "assistant" and m.get("tool_calls"):
            answered = set()
            for later in messages[k + 1 :]:
                if later.get("role") != "tool":
                    break
                answered.add(later.get("tool_call_id"))
            unanswered = [str(c.get("id")) for c in m["tool_calls"] if c.get("id") not in answered]
            if unanswered and k + 1 < len(messages):
                said = "An assistant message with 'tool_calls' must be followed by tool messages responding to each"
                return (
                    f"{said} 'tool_call_id'. The following tool_call_ids did not have response messages: "
                    + ", ".join(unanswered)
                )
    return None


def png(width: int, height: int) -> bytes:
    """The first bytes of a PNG image of that size (its signature and header chunk): what an image
    token estimate reads of it."""
    import struct
    import zlib

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + header
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(header)) + chunk + struct.pack(">I", zlib.crc32(chunk))


def whole_png(width: int, height: int) -> bytes:
    """A whole PNG image of that size, one grey, that a decoder reads (``png`` is its first bytes)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = zlib.compress((b"\x00" + b"\x80" * 3 * width) * height)
    return png(width, height) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def pdf(pages: int) -> bytes:
    """A real PDF of that many pages, each with a line of text (matplotlib's PDF writer)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    out = io.BytesIO()
    with PdfPages(out) as document:
        for n in range(pages):
            figure = plt.figure()
            figure.text(0.1, 0.5, f"page {n + 1}")
            document.savefig(figure)
            plt.close(figure)
    return out.getvalue()


def overfill(port: int, request_head: str, slots: int = 4) -> tuple[bytes, bytes]:
    """Fill a bounded server's ``slots`` with connections that send ``request_head`` (a request
    line and some headers, never their end), then connect once more: (head, body) of the answer
    to that one, after which each slow connection must be closed by the server with nothing
    answered (its headers overdue)."""
    import socket

    slow = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(slots)]
    for sock in slow:
        sock.sendall(request_head.encode())  # and no more
    with socket.create_connection(("127.0.0.1", port), timeout=30) as one_more:
        answer = b""
        while chunk := one_more.recv(65536):
            answer += chunk
    for sock in slow:
        with sock:
            assert sock.recv(65536) == b""
    head, _, body = answer.partition(b"\r\n\r\n")
    return head, body


@contextmanager
def ctrl_c_after(seconds: float) -> Iterator[None]:
    """Ctrl-C in this (the main) thread ``seconds`` into the block, with Python's own SIGINT
    handler set for it: a run started in the background ignores SIGINT, and Python then installs
    none (the signal would do nothing)."""
    import signal
    import threading

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    ctrl_c = threading.Timer(seconds, signal.pthread_kill, (threading.get_ident(), signal.SIGINT))
    try:
        ctrl_c.start()
        yield
        ctrl_c.join()
    finally:
        ctrl_c.cancel()
        signal.signal(signal.SIGINT, before)


def unsplit_keyword_index(path: Path) -> None:
    """Make the keyword index of the SQLite store at ``path`` as a context_os of before
    2026-12-03 made it: FTS5 over ``text_parts`` itself, a CJK run one token."""
    import sqlite3

    from context_os.store.text_index import TOKENIZER

    conn = sqlite3.connect(path)
    try:
        conn.execute("DROP TABLE text_fts")
        conn.execute("DROP VIEW text_fts_src")
        conn.execute(
            "CREATE VIRTUAL TABLE text_fts USING fts5(text, content='text_parts', content_rowid='seq',"
            f" tokenize='{TOKENIZER}')"
        )
        conn.execute("INSERT INTO text_fts (text_fts) VALUES ('rebuild')")  # every part is in it now
        conn.execute(
            "UPDATE text_meta SET value = (SELECT coalesce(max(seq), 0) FROM text_parts) WHERE key = 'fts_seq'"
        )
        conn.execute("DELETE FROM text_meta WHERE key = 'split'")
        conn.commit()
    finally:
        conn.close()


def stderr_on_a_terminal(cmd: list[str], *, cwd: Path, timeout: float = 120) -> tuple[int, bytes]:
    """Run ``cmd`` with its stderr on a pseudo-terminal (progress bars draw only on one): its exit
    status and all it wrote there. Its stdout is a pipe. For short outputs: the terminal's buffer
    is read once the command has ended."""
    import pty

    main, side = pty.openpty()
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=side,
            env={**os.environ, "COLUMNS": "120"},
            timeout=timeout,
        )
        os.close(side)
        side = -1
        shown = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # (Linux: EIO once the writer is gone and all is read)
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(main)
        if side != -1:
            os.close(side)
    return proc.returncode, shown


@contextmanager
def serving(handler: type[Any]) -> Iterator[str]:
    """``handler`` (a ``BaseHTTPRequestHandler``) served on 127.0.0.1, a free port, in a thread of
    its own until the block ends: its base URL."""
    import threading
    from http.server import ThreadingHTTPServer

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key, as PEM files in
    ``directory``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file

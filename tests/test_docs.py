"""The documentation's code still matches the library: README.md's and docs/*.md's snippets run.

* Every ```python block is a case named ``file:line`` (the line of its fence). A file's blocks are
  read in order, as a reader runs them: a case runs the blocks above its own in the same file, in
  one namespace, then its own. Each case starts in a fresh temp working directory (also ``HOME``),
  with a temp user data dir and a temp default store (``CTXOS_STORE``). Tracebacks name the
  markdown file and line.
* A block that cannot run here says so in the markdown, on the line just before its fence:
  ``<!-- not run: needs a model provider -->``. Its case is skipped with that reason, but its
  imports still run (later blocks use the names, and an import is what breaks first when code
  moves). Any other block that raises fails its case.
* A block that needs what the dev venv cannot hold names the test that runs it, on the line just
  before its fence: ``<!-- run by tests/adk/test_adk.py: needs google-adk -->``. Its case here
  checks that the test exists and reads this file's blocks; neither it nor its imports run here,
  and later blocks do not run it.
* Names the docs leave to the reader (``messages``, a ``model``, a repository's ``src/app.py``) are
  supplied per file by ``GIVEN`` before the file's first block.
* ```sh blocks are never run. Every line with ``ctxos`` among its words (so also after
  ``VAR=value`` assignments, or as another command's argument: ``claude mcp add x -- ctxos mcp``)
  is parsed by click against ``context_os.cli.cli`` without invoking anything: each command and
  option must exist, required arguments must be there, and values must convert to their type. The
  command ends at a pipe, ``;``, ``&&``, ``||``, ``&``, a redirection or a comment. A placeholder
  word (``<session>``, ``$SESSION``) goes to click as its literal text: it stands for any string
  argument or option value; where an option takes a number, the doc shows a number. ``--help``
  and ``--version`` end the parse there, as they end the command.

Nothing here may reach the network or a user's files: a block that would is marked not run.
"""

from __future__ import annotations

import ast
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import CodeType
from typing import Any

import click
import pytest

from context_os.cli import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(.+?)\s*-->\s*$")
RUN_BY = re.compile(r"^\s*<!--\s*run by\s+(\S+?):\s*(.+?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    """1-based line of the opening fence."""
    lang: str
    code: str
    skip: str | None
    """The reason from a ``<!-- not run: ... -->`` line just before the fence."""
    run_by: str | None = None
    """The test file from a ``<!-- run by FILE: ... -->`` line just before the fence."""

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def compiled(self, code: str | None = None) -> CodeType:
        # padded so that line numbers in a traceback are the markdown file's
        return compile("\n" * self.line + (self.code if code is None else code), str(self.path), "exec")


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    k = 0
    while k < len(lines):
        m = FENCE.match(lines[k])
        if m is None:
            k += 1
            continue
        indent, lang, start = m.group(1), m.group(2), k
        k += 1
        body: list[str] = []
        while k < len(lines) and lines[k].strip() != "```":
            body.append(lines[k].removeprefix(indent))
            k += 1
        k += 1
        skip = NOT_RUN.match(lines[start - 1]) if start else None
        by = RUN_BY.match(lines[start - 1]) if start else None
        code = "\n".join(body) + "\n"
        found.append(Block(path, start + 1, lang, code, skip.group(1) if skip else None, by.group(1) if by else None))
    return found


ALL = {path: blocks(path) for path in DOCS}
PYTHON = [b for bs in ALL.values() for b in bs if b.lang == "python"]
SH = [b for bs in ALL.values() for b in bs if b.lang in ("sh", "bash", "shell")]


def _messages() -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "Fix the failing test"}]}


def _adapters() -> dict[str, Any]:
    from pydantic_ai.models.test import TestModel

    return {
        **_messages(),
        "name": "history",
        "arguments": {},
        "model": TestModel(),
        "chat_model": _chat_model(),
        "agents_model": _agents_model(),
        "gemini_client": _gemini_client(),
    }


def _gemini_client() -> Any:
    """A google-genai client whose model answers "done" (over an httpx transport that answers in
    place of Google's API: nothing reaches the network)."""
    import httpx
    from google import genai
    from google.genai import types

    def done(request: httpx.Request) -> httpx.Response:
        candidate = {"content": {"role": "model", "parts": [{"text": "done"}]}, "finishReason": "STOP", "index": 0}
        return httpx.Response(200, json={"candidates": [candidate]})

    transport = httpx.Client(transport=httpx.MockTransport(done))
    return genai.Client(api_key="docs", http_options=types.HttpOptions(httpx_client=transport))


def _agents_model() -> Any:
    """An OpenAI Agents SDK model that answers "done"."""
    from agents import ModelResponse, Usage
    from agents.models.interface import Model
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    class Done(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:  # type: ignore[override]
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            reply = ResponseOutputMessage(type="message", id="m1", role="assistant", status="completed", content=[text])
            return ModelResponse(output=[reply], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    return Done()


def _chat_model() -> Any:
    """A LangChain chat model that answers "done" (the LLM is the one part a test may script)."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class Done(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "done"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Done:  # type: ignore[override]
            return self

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
            return ChatResult(generations=[ChatGeneration(message=AIMessage("done"))])

    return Done()


def _files() -> dict[str, Any]:
    Path("src").mkdir()
    Path("src/app.py").write_text("print('hello')\n")
    return _messages()


def _recall() -> dict[str, Any]:
    from context_os.sources.memory import trust_workspace

    trust_workspace(".")  # the step the doc shows further down (ctxos memory trust)
    return {"query": "which command runs the tests?"}


def _replay() -> dict[str, Any]:
    shutil.copy(ROOT / "tests" / "replay" / "data" / "claude-code.jsonl", "session.jsonl")
    return {}


GIVEN: dict[str, Callable[[], dict[str, Any]]] = {
    "docs/adapters.md": _adapters,
    "docs/files.md": _files,
    "docs/recall.md": _recall,
    "docs/replay.md": _replay,
}
"""What a file's snippets take as the reader's own, made in the working directory."""


def _imports(code: str) -> str:
    """Only ``code``'s top-level imports, each on its own line (blank lines for the rest)."""
    lines = code.splitlines()
    kept = [""] * len(lines)
    for node in ast.parse(code).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            kept[node.lineno - 1 : node.end_lineno] = lines[node.lineno - 1 : node.end_lineno]
    return "\n".join(kept) + "\n"


def _run(block: Block, namespace: dict[str, Any]) -> None:
    if block.run_by:
        return
    exec(block.compiled(_imports(block.code) if block.skip else None), namespace)
    # what it named, kept for _close: a later snippet may name another by the same name
    opened = namespace.setdefault(_OPENED, [])
    opened += [v for k, v in namespace.items() if k != _OPENED and type(v).__module__.startswith("context_os.")]


_OPENED = "__opened_by_snippets__"


@pytest.fixture
def reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory and home (for ``~``), with its own default store (the user data
    dir is already a temp dir: conftest)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CTXOS_STORE", f"sqlite://{tmp_path / 'default-store.db'}")
    return tmp_path


@pytest.mark.parametrize("block", PYTHON, ids=[b.name for b in PYTHON])
def test_python_block(block: Block, reader: Path) -> None:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    if block.run_by:
        test = ROOT / block.run_by
        assert test.is_file() and str(block.path.relative_to(ROOT)) in test.read_text(), block.run_by
        return
    if block.skip:
        _run(block, namespace)
        pytest.skip(f"not run: {block.skip}")
    given = GIVEN.get(str(block.path.relative_to(ROOT)))
    if given is not None:
        namespace.update(given())
    try:
        for earlier in ALL[block.path]:
            if earlier.line == block.line:
                break
            if earlier.lang == "python":
                _run(earlier, namespace)
        _run(block, namespace)
    finally:
        _close(namespace)


def _close(namespace: dict[str, Any]) -> None:
    """Close what the snippets opened and named (stores, sessions, recall), a name given again
    too, the latest first, then the stores they reach (``Session.open(open_store(), ...)``:
    ``session.store``), as the end of a reader's script would. What a snippet never names (an
    inline ``open_recall(...)``) is left to the garbage collector: the docs name what they open."""
    named = list({id(v): v for v in reversed(namespace.get(_OPENED, []))}.values())
    sessions = [getattr(v, "session", None) for v in named]
    stores = [getattr(v, "store", None) for v in [*named, *sessions]]
    for value in [*named, *stores]:
        if value is not None and callable(getattr(value, "close", None)):
            value.close()


SHELL_END = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1"}


def ctxos_args(line: str) -> list[str] | None:
    """The arguments after ``ctxos`` on one shell line, or None when it does not call ctxos."""
    words = shlex.split(line, comments=True)
    if "ctxos" not in words:
        return None
    args = words[words.index("ctxos") + 1 :]
    ends = [k for k, w in enumerate(args) if w in SHELL_END]
    return args[: ends[0]] if ends else args


def parse(args: list[str]) -> None:
    """Parse ``ctxos ARGS`` down to the last command, as click would before invoking it."""
    command: click.Command = cli
    try:
        ctx = command.make_context("ctxos", list(args))
        while isinstance(command, click.Group):
            # what the group left for its subcommand: click keeps the subcommand's name in
            # _protected_args from 8.2 on (as its own Group.invoke reads it), protected_args before
            protected = getattr(ctx, "_protected_args", None)
            rest = [*(ctx.protected_args if protected is None else protected), *ctx.args]
            if not rest:
                return
            name, sub, rest = command.resolve_command(ctx, rest)
            assert sub is not None and name is not None
            command = sub
            ctx = command.make_context(name, rest, parent=ctx)
    except click.exceptions.Exit as e:  # --help, --version: printed, and done
        if e.exit_code != 0:
            raise


SH_LINES = [
    (b, b.line + k + 1, args)
    for b in SH
    for k, line in enumerate(b.code.splitlines())
    if (args := ctxos_args(line)) is not None
]


@pytest.mark.parametrize(
    ("block", "line", "args"), SH_LINES, ids=[f"{b.path.relative_to(ROOT)}:{line}" for b, line, _ in SH_LINES]
)
def test_sh_ctxos_line(block: Block, line: int, args: list[str]) -> None:
    try:
        parse(args)
    except click.ClickException as e:
        pytest.fail(f"{block.path.relative_to(ROOT)}:{line}: ctxos {shlex.join(args)}: {e.format_message()}")


def test_snippets_are_found() -> None:
    """Every python fence a reader sees is a case (else a broken pattern would pass with none)."""
    fences = [line for path in DOCS for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(PYTHON) == sum(line.strip() == "```python" for line in fences) > 0
    assert all(b.code.strip() for b in PYTHON) and SH_LINES

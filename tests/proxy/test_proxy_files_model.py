"""An agent's files through ``ctxos proxy --workspace``, drawn by hypothesis: Claude Code (its
``Read``, the numbered text of the disk; its ``Edit``), Codex (``sed -n`` through its shell; its
``apply_patch``) or Gemini CLI (``read_file``, ``replace``; its calls signed) reads files and edits
them (the disk changes, then the result says so), talks (the model may read a file first with
context_os's own ``read``, in a round the agent never sees), goes back to an earlier turn, and the
user changes files no call names (an edit, a file deleted, then written again); the proxy may be
restarted over the same store, and the client may give its conversation a key or not. Every text a
file ever held carries a stamp of its own, so what the provider is shown of each file can be told
apart.

At every call, once the proxy's tracker has recorded what changed on disk, of what the provider
is shown (the agent's calls aside, which name the old text of a line they change):

* a file's text that is not on disk now is shown only in its block marked stale (the ``stale``
  mark names a newer version), never in a result as it came; a deleted file's not at all;
* a file whose newest change the conversation still holds is the agent's own (its read or its
  edit, after every change made outside) shows no text but the disk's, and the file the agent
  just read or edited shows it;

and every frame of every session verifies at the end.
"""

from __future__ import annotations

import base64
import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from google.genai import types
from hypothesis import Phase, given, settings

from context_os.store.sqlite import SqliteStore
from tests.helpers import objects_shown, wait_for
from tests.proxy.running import Running, verified_frames
from tests.proxy.upstream import ToolCall, Upstream, upstream
from tests.reliability._adversarial import FUZZ, examples

FILES = 3
LINES = 40
STAMP = re.compile(r"\bS(\d+)x\b")
BLOCKS = re.compile(r"<context_os>\n.*?\n</context_os>", re.S)
# (going back and restarting are rarer: each opens the files anew, which the other steps exercise)
STEP = st.tuples(
    st.sampled_from(
        ["read"] * 3
        + ["part"] * 2
        + ["edit"] * 3
        + ["outside"] * 3
        + ["ours", "delete", "restore", "talk", "rewind", "restart"]
    ),
    st.integers(0, 1000),
)
CLAUDE_TOOLS = [
    {"name": name, "description": name, "input_schema": {"type": "object", "properties": {}}}
    for name in ("Read", "Edit", "Bash")
]
CODEX_TOOLS = [
    {"type": "function", "name": "shell_command", "parameters": {"type": "object", "properties": {}}},
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch."},
]


Window = tuple[int, int] | None
"""The lines a read asks for (first and last, from 1), or none: the whole file."""


def lines_of(text: str, window: Window) -> list[tuple[int, str]]:
    """The lines a read of ``window`` gets of ``text``, with their numbers."""
    first, last = window or (1, LINES)
    return [(k, t) for k, t in enumerate(text.split("\n"), 1) if first <= k <= last]


def _claude_read(n: int, path: Path, text: str, window: Window) -> list[dict[str, Any]]:
    args: dict[str, Any] = {"file_path": str(path)}
    if window:
        args |= {"offset": window[0], "limit": window[1] - window[0] + 1}
    return _claude_use(n, "Read", args, "\n".join(f"{k:>6}\u2192{t}" for k, t in lines_of(text, window)))


@dataclass
class Agent:
    """How an agent's conversation holds its reads, edits and talk, and how it sends it."""

    name: str
    start: Callable[[Path], list[dict[str, Any]]]
    """The conversation's first messages in workspace ``ws``."""
    read: Callable[[int, Path, str, Window], list[dict[str, Any]]]
    """Call ``n`` of the agent's read of ``path`` (of a window of its lines or whole) and its
    result (the file's text given)."""
    edit: Callable[[int, Path, str, str], list[dict[str, Any]]]
    """Call ``n`` of the agent's edit of ``path``'s line ``old`` into ``new`` and its result."""
    say: Callable[[str], dict[str, Any]]
    ask: Callable[[str], dict[str, Any]]
    send: Callable[[Running, Path, list[dict[str, Any]], bool], str]
    """The conversation sent with the API's own client (with a key for it or not): the answer's text."""
    sent: Callable[[dict[str, Any]], list[dict[str, Any]]]
    """The messages of a request."""
    texts: Callable[[list[dict[str, Any]], bool], str]
    """Every text of the messages (with the agent's calls' arguments if asked)."""
    blocks: Callable[
        [
            list[dict[str, Any]],
        ],
        list[dict[str, Any]],
    ] = lambda msgs: msgs
    """The messages as ``objects_shown`` reads them (each with its ``content``)."""


def _claude_texts(msgs: list[dict[str, Any]], calls: bool) -> str:
    out: list[str] = []
    for m in msgs:
        content = m["content"]
        for b in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            if b["type"] == "text":
                out.append(b["text"])
            elif b["type"] == "tool_result":
                inner = b["content"]
                out += [inner] if isinstance(inner, str) else [x.get("text", "") for x in inner]
            elif b["type"] == "tool_use" and calls:
                out.append(repr(b["input"]))
    return "\n".join(out)


def _claude_use(n: int, name: str, args: dict[str, Any], result: str) -> list[dict[str, Any]]:
    """(Its ids are not the scripted model's, ``toolu_N`` of the N-th request.)"""
    use = {"type": "tool_use", "id": f"toolu_agent{n}", "name": name, "input": args}
    done = {"type": "tool_result", "tool_use_id": f"toolu_agent{n}", "content": result}
    return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [done]}]


def _claude_send(running: Running, ws: Path, msgs: list[dict[str, Any]], keyed: bool) -> str:
    system = f"You are Claude Code.\n<env>\nPrimary working directory: {ws}\n</env>"
    key = {"metadata": {"user_id": "conversation-1"}} if keyed else {}
    got = running.anthropic().messages.create(
        model="m", max_tokens=100, system=system, messages=msgs, tools=CLAUDE_TOOLS, **key
    )  # type: ignore[call-overload]
    assert [b.type for b in got.content] == ["text"]
    return "".join(b.text for b in got.content)


CLAUDE = Agent(
    name="Claude Code",
    start=lambda ws: [{"role": "user", "content": "fix the values"}],
    read=_claude_read,
    edit=lambda n, path, old, new: _claude_use(
        n, "Edit", {"file_path": str(path), "old_string": old, "new_string": new}, f"The file {path} has been updated."
    ),
    say=lambda text: {"role": "assistant", "content": text},
    ask=lambda text: {"role": "user", "content": text},
    send=_claude_send,
    sent=lambda body: body["messages"],
    texts=_claude_texts,
)


def _codex_message(role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def _codex_texts(items: list[dict[str, Any]], calls: bool) -> str:
    out: list[str] = []
    for i in items:
        if i.get("type", "message") == "message":  # (a message the proxy adds may be one of role and content)
            content = i["content"]
            out += [content] if isinstance(content, str) else [c.get("text", "") for c in content]
        elif i["type"] in ("function_call_output", "custom_tool_call_output"):
            given = i["output"]
            out += [given] if isinstance(given, str) else [c.get("text", "") for c in given]
        elif calls:
            out.append(i.get("arguments") or i.get("input") or "")
    return "\n".join(out)


def _codex_send(running: Running, ws: Path, items: list[dict[str, Any]], keyed: bool) -> str:
    key = {"prompt_cache_key": "conversation-1"} if keyed else {}
    got = running.openai().responses.create(
        model="m", instructions="You are Codex.", input=items, tools=CODEX_TOOLS, store=False, **key
    )  # type: ignore[call-overload]
    assert [i.type for i in got.output] == ["message"]
    return str(got.output_text)


def _codex_patch(n: int, path: Path, old: str, new: str) -> list[dict[str, Any]]:
    patch = f"*** Begin Patch\n*** Update File: {path.name}\n@@\n-{old}\n+{new}\n*** End Patch"
    done = f"Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated the following files:\nM {path.name}\n"
    return [
        {"type": "custom_tool_call", "status": "completed", "call_id": f"p{n}", "name": "apply_patch", "input": patch},
        {"type": "custom_tool_call_output", "call_id": f"p{n}", "output": done},
    ]


def _codex_read(n: int, path: Path, text: str, window: Window) -> list[dict[str, Any]]:
    # the whole file: asking for more lines than it has (its end is known)
    first, last = window or (1, LINES + 20)
    arguments = json.dumps({"command": f"sed -n '{first},{last}p' {path.name}", "workdir": str(path.parent)})
    text = "\n".join(t for _, t in lines_of(text, window))
    return [
        {"type": "function_call", "name": "shell_command", "arguments": arguments, "call_id": f"r{n}"},
        {
            "type": "function_call_output",
            "call_id": f"r{n}",
            "output": f"Exit code: 0\nWall time: 0 seconds\nOutput:\n{text}\n",
        },
    ]


CODEX = Agent(
    name="Codex",
    start=lambda ws: [
        _codex_message("user", f"<environment_context>\n  <cwd>{ws}</cwd>\n</environment_context>"),
        _codex_message("user", "fix the values"),
    ],
    read=_codex_read,
    edit=_codex_patch,
    say=lambda text: _codex_message("assistant", text),
    ask=lambda text: _codex_message("user", text),
    send=_codex_send,
    sent=lambda body: body["input"],
    texts=_codex_texts,
)


def _gemini_texts(contents: list[dict[str, Any]], calls: bool) -> str:
    out: list[str] = []
    for c in contents:
        for part in c.get("parts") or ():
            if "text" in part:
                out.append(part["text"])
            elif "functionResponse" in part:
                out.append(json.dumps(part["functionResponse"].get("response")))
            elif "functionCall" in part and calls:
                out.append(repr(part["functionCall"].get("args")))
    return "\n".join(out)


def _gemini_call(n: int, name: str, args: dict[str, Any], output: str) -> list[dict[str, Any]]:
    """Gemini CLI's call (signed, as Gemini 3 signs a turn's first call; no id) and its response
    (under Gemini CLI's own call id)."""
    signature = base64.b64encode(f"turn {n}".encode()).decode()
    response = {"id": f"{name}-{n}", "name": name, "response": {"output": output}}
    return [
        {"role": "model", "parts": [{"functionCall": {"name": name, "args": args}, "thoughtSignature": signature}]},
        {"role": "user", "parts": [{"functionResponse": response}]},
    ]


def _gemini_send(running: Running, ws: Path, contents: list[dict[str, Any]], keyed: bool) -> str:
    """(Gemini gives a conversation no key.)"""
    client = running.gemini()
    tools = [types.FunctionDeclaration(name=name, description=name) for name in ("read_file", "replace")]
    config = types.GenerateContentConfig(
        system_instruction="You are Gemini CLI, an interactive CLI agent.",
        tools=[types.Tool(function_declarations=tools)],
    )
    got = client.models.generate_content(model="m", contents=contents, config=config)  # type: ignore[arg-type]
    assert not got.function_calls
    return str(got.text)


def _gemini_read(n: int, path: Path, text: str, window: Window) -> list[dict[str, Any]]:
    if window is None:
        return _gemini_call(n, "read_file", {"file_path": str(path)}, text)
    first, last = window
    note = (
        "IMPORTANT: The file content has been truncated.\n"
        f"Status: Showing lines {first}-{last} of {LINES} total lines.\n"
        "Action: To read more of the file, you can use the 'offset' and 'limit' parameters in a subsequent"
        f" 'read_file' call. For example, to read the next section of the file, use offset: {last}.\n\n"
        "--- FILE CONTENT (truncated) ---\n"
    )
    args = {"file_path": str(path), "offset": first - 1, "limit": last - first + 1}
    return _gemini_call(n, "read_file", args, note + "\n".join(t for _, t in lines_of(text, window)))


GEMINI = Agent(
    name="Gemini CLI",
    start=lambda ws: [
        {"role": "user", "parts": [{"text": f"<session_context>\nToday's date is Monday.\n{ws}\n</session_context>"}]},
        {"role": "user", "parts": [{"text": "fix the values"}]},
    ],
    read=_gemini_read,
    edit=lambda n, path, old, new: _gemini_call(
        n,
        "replace",
        {"file_path": str(path), "old_string": old, "new_string": new},
        f"Successfully modified file: {path} (1 replacements).",
    ),
    say=lambda text: {"role": "model", "parts": [{"text": text}]},
    ask=lambda text: {"role": "user", "parts": [{"text": text}]},
    send=_gemini_send,
    sent=lambda body: body["contents"],
    texts=_gemini_texts,
    blocks=lambda contents: [{"content": c.get("parts") or []} for c in contents],
)
AGENTS = {a.name: a for a in (CLAUDE, CODEX, GEMINI)}


@dataclass
class World:
    tmp: Path
    up: Upstream
    agent: Agent
    keyed: bool
    running: Running = field(init=False)
    n: int = 0
    stamps: dict[int, int] = field(default_factory=dict)
    """Each stamp → the file whose text it is in."""
    outside: set[int] = field(default_factory=set)
    """The files changed outside the conversation since its last read or edit of them."""
    msgs: list[dict[str, Any]] = field(default_factory=list)
    bounds: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ws = self.tmp / "ws"
        self.ws.mkdir()
        for i in range(FILES):
            self.write(i)
        self.start()
        self.msgs = self.agent.start(self.ws)
        self.bounds = [len(self.msgs)]

    def start(self) -> None:
        self.running = Running(self.tmp, self.up, workspace=self.ws, gemini_upstream=self.up.url)

    def path(self, i: int) -> Path:
        return self.ws / f"f{i}.py"

    def write(self, i: int) -> str:
        """A new text of file ``i`` on disk (its stamp line changed): the old stamp's line."""
        self.n += 1
        self.stamps[self.n] = i
        old = self.path(i).read_text().split("\n")[3] if self.path(i).exists() else ""
        lines = [f"# f{i}, line {k}" for k in range(LINES)]
        lines[3] = f"stamp of f{i}: S{self.n}x"
        self.path(i).write_text("\n".join(lines))
        return old

    def settled(self) -> None:
        """Wait until the store holds the disk's text of every file the proxy knows, if a tracker
        watches the workspace (none does while no conversation in it is open: one started when it
        opens records what changed before that, ``FileTracker.start``)."""
        trackers = self.running.proxy.trackers
        if trackers is None or not trackers.running():
            return
        for i in range(FILES):
            disk = self.path(i).read_text() if self.path(i).exists() else None

            def recorded(i: int = i, disk: str | None = disk) -> bool:
                found = [v for v in self.running.store.find("file", {"abs_path": str(self.path(i))}) if v.doc]
                docs = [v.doc for v in map(self.running.store.get, (v.id for v in found)) if v is not None and v.doc]
                if disk is None:  # every object of the path says it is missing
                    return all(d["meta"].get("missing") for d in docs)
                return not docs or any(d["content"] == disk and not d["meta"].get("missing") for d in docs)

            wait_for(recorded, what=f"the tracker's version of f{i}.py")

    def call(self, touched: int | None = None, ours: int | None = None) -> None:
        """The conversation as it stands, sent, then the model's answer and the user's next
        message; what the provider got, checked (``touched``: the file the agent's call just
        read or edited). ``ours``: the model first reads that file with context_os's ``read``,
        in a round the agent never sees (when it is offered: with a workspace, always)."""
        self.settled()
        first = len(self.up.requests)
        replies = self.up.replies  # (the n-th request's reply is its n-th)
        replies[first:] = ["ok"] * (first - len(replies))
        replies += [] if ours is None else [ToolCall("read", {"path": f"f{ours}.py"}), "ok"]
        answer = self.agent.send(self.running, self.ws, self.msgs, self.keyed)
        sent = self.up.requests[first:]
        assert len(sent) == (1 if ours is None else 2)
        for body in sent[:-1]:  # the round of our read
            self.check(self.agent.sent(body), None)
        # after it, the file it read is shown as it is (a deleted one: not at all)
        read = ours if ours is not None and self.path(ours).exists() else touched
        self.check(self.agent.sent(sent[-1]), read)
        self.msgs += [self.agent.say(answer), self.agent.ask("next")]
        self.bounds.append(len(self.msgs))

    def check(self, sent: list[dict[str, Any]], touched: int | None) -> None:
        newest = {
            i: int(STAMP.findall(self.path(i).read_text())[0]) if self.path(i).exists() else None for i in range(FILES)
        }
        # each file as the blocks of context_os show it last (a patch applied to its block), and
        # the results the provider gets as they came
        shown: list[tuple[int, str, str]] = [
            (int(s), attrs, f"the block of {oid}")
            for oid, (attrs, text) in objects_shown(self.agent.blocks(sent)).items()
            for s in STAMP.findall(text)
        ]
        shown += [
            (int(s), "", "a result as it came") for s in STAMP.findall(BLOCKS.sub("", self.agent.texts(sent, False)))
        ]
        known = self.known()
        for s, attrs, where in shown:
            i = self.stamps[s]
            if s == newest[i]:
                continue
            said = f"f{i}.py: S{s}x in {where}, " + (f"S{newest[i]}x on disk" if newest[i] else "deleted")
            assert newest[i] is not None, said
            assert i not in known, f"{said}, the agent's own change"
            assert re.search(r'stale="version \d+ is newer', attrs), f"{said}, not marked stale"
        if touched is not None:  # the file the agent just read or edited is shown as it is now
            assert newest[touched] in {s for s, _, _ in shown}, f"f{touched}.py: S{newest[touched]}x not shown"

    def known(self) -> set[int]:
        """The files whose newest change, in the conversation as it stands, is the agent's own."""
        held = self.agent.texts(self.msgs, True)
        return {i for i in range(FILES) if i not in self.outside and f"f{i}.py" in held}


def step(world: World, what: str, k: int) -> None:
    i, agent = k % FILES, world.agent
    # a part of the file: from one of its first lines, 2 to 9 of them (its stamp's, the 4th, or not)
    first = 1 + k // FILES % 6
    window = (first, first + 1 + k // (FILES * 6) % 8) if what == "part" else None
    if what in ("read", "part", "edit", "outside", "delete") and not world.path(i).exists():
        return  # (the agent's tools fail on it: no call, here)
    if what in ("read", "part"):
        world.n += 1
        world.msgs += agent.read(world.n, world.path(i), world.path(i).read_text(), window)
        world.outside.discard(i)
    elif what == "edit":
        old = world.write(i)
        new = world.path(i).read_text().split("\n")[3]
        world.n += 1
        world.msgs += agent.edit(world.n, world.path(i), old, new)
        world.outside.discard(i)
    elif what in ("outside", "restore", "delete"):
        if what == "delete":
            world.path(i).unlink()
        elif what == "outside" or not world.path(i).exists():
            world.write(i)
        world.outside.add(i)
        return
    elif what in ("talk", "ours"):
        world.msgs += [agent.say("On it."), agent.ask("go on")]
    elif what == "rewind":
        keep = world.bounds[k % len(world.bounds)]
        gone = world.msgs[keep:]
        del world.msgs[keep:]
        world.bounds = [b for b in world.bounds if b <= keep]
        world.msgs += [agent.say("Back."), agent.ask("again")]
        # a file whose read or edit went is not the agent's own newest change any more
        world.outside |= {i for i in range(FILES) if f"f{i}.py" in agent.texts(gone, True)}
    elif what == "restart":
        world.running.close()
        world.start()
        return
    shows_stamp = what in ("read", "edit") or (window is not None and window[0] <= 4 <= window[1])
    world.call(i if shows_stamp else None, i if what == "ours" else None)


# (not shrunk: an example takes seconds; the failing example is printed as drawn)
@settings(FUZZ, max_examples=examples(20), phases=[Phase.generate], deadline=None)
@given(steps=st.lists(STEP, min_size=2, max_size=16), agent=st.sampled_from(sorted(AGENTS)), keyed=st.booleans())
def test_the_provider_is_shown_each_file_as_it_is_or_marked_stale(
    steps: list[tuple[str, int]], agent: str, keyed: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp, upstream(replies=[]) as up:
        world = World(Path(tmp), up, AGENTS[agent], keyed)
        try:
            world.call()
            for what, k in steps:
                step(world, what, k)
        finally:
            world.running.close()
        with SqliteStore(Path(tmp) / "proxy.db") as db:
            for v in db.find("session"):
                verified_frames(db, v.id.removeprefix("session:"))

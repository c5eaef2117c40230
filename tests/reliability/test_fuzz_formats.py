"""Bad session files: ``read_sessions`` reads them or raises ``InputError``, never anything else.

Every format ``replay/transcripts.py`` reads is covered: Pi session JSONL (versions 1, 2 and 3),
Claude Code JSONL (with a sidechain), Codex CLI rollouts, SWE-agent trajectories (function calling, and actions in
text), OpenHands event lists and ``output.jsonl`` records, and OpenAI JSON lists. Inputs are real
session files (cut to their first messages) with their entries mutated (see ``_adversarial``),
then often damaged as bytes on disk (cut off mid-write, a line cut short, bytes that are not
UTF-8, noise, a line nested 100,000 deep or 3 MB long), plus files of random bytes; the format
is detected, or forced (also to the wrong one).

What a file yields must be usable: the transcript's fields have their types, and each message
translates with its harness's adapter or is refused with ``MalformedMessage``. Some files are
also replayed whole (``replay_transcript`` into an SQLite store), where anything wrong must
come out as an error of ``context_os.errors``.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_os import Session
from context_os.errors import ContextOSError, InputError, InvalidOutput, MalformedMessage
from context_os.harness.pi import in_context
from context_os.harness.registry import harness
from context_os.replay.run import replay_transcript
from context_os.replay.transcripts import Transcript, read_session, read_sessions
from context_os.store.sqlite import SqliteStore
from tests.reliability._adversarial import FUZZ, SCALAR, TEXT, as_json, damaged_bytes, examples, jsonl, mutated
from tests.reliability.conftest import Counts
from tests.replay.test_codex import rollout_lines

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DATA = Path(__file__).resolve().parents[1] / "replay" / "data"
SESSIONS = Path(__file__).resolve().parents[2] / "bench" / "sessions"
EXAMPLES = examples(600)
REPLAYS = examples(200)


def _entries(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def _v2(v3: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The v3 file as version 2 wrote it: ``hookMessage`` was v3's ``custom`` role."""
    out = copy.deepcopy(v3)
    out[0]["version"] = 2
    out.insert(
        5,
        {
            "type": "message",
            "id": "h1",
            "parentId": out[4]["id"],
            "message": {"role": "hookMessage", "customType": "x", "content": "a hook said so", "timestamp": 1},
        },
    )
    out[6]["parentId"] = "h1"
    return out


def _v1(v3: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A linear version 1 file: no ids, compactions name their first kept entry by index."""
    out = [{"type": "session", "id": "sess-v1", "timestamp": "2025-12-01T10:00:00.000Z", "cwd": "/repo"}]
    for e in v3[1:]:
        if e["type"] == "message":
            out.append({"type": "message", "timestamp": e["timestamp"], "message": e["message"]})
    out.insert(4, {"type": "model_change", "provider": "anthropic", "modelId": "claude-sonnet-4-5"})
    out.insert(6, {"type": "compaction", "summary": "earlier", "firstKeptEntryIndex": 3, "tokensBefore": 99})
    return out


def _trajectory(name: str, keep: int) -> dict[str, Any]:
    """A real SWE-agent trajectory, cut to its first ``keep`` history messages."""
    data = json.loads((SESSIONS / "check" / "swe-agent" / name).read_text())
    return {"history": data["history"][:keep], "trajectory": data["trajectory"][:2], "info": {}}


def _records(keep: int) -> list[dict[str, Any]]:
    """Two real OpenHands ``output.jsonl`` records, cut to their first ``keep`` events."""
    path = SESSIONS / "check" / "openhands" / "multi_swe_bench.examples.output.jsonl"
    lines = path.read_text().splitlines()[:2]
    return [{"instance_id": r["instance_id"], "history": r["history"][:keep]} for r in map(json.loads, lines)]


def _mini(keep: int) -> dict[str, Any]:
    """A real mini-swe-agent trajectory, cut to its first ``keep`` messages and its exit record."""
    doc = json.loads((SESSIONS / "check" / "mini-swe-agent" / "astropy__astropy-12907.traj.json").read_text())
    return {**doc, "info": {}, "messages": [*doc["messages"][:keep], doc["messages"][-1]]}


def _anthropic() -> list[dict[str, Any]]:
    """The Claude Code session of tests/replay/data as Anthropic Messages API messages."""
    return [
        e["message"] if e["type"] == "user" else {"role": "assistant", "content": e["message"]["content"]}
        for e in _entries("claude-code.jsonl")
        if not e.get("isSidechain")
    ]


def _stream() -> list[dict[str, Any]]:
    """The same session as ``claude -p --output-format stream-json`` prints it."""
    init = {"type": "system", "subtype": "init", "cwd": "/repo", "session_id": "s", "tools": ["Read"]}
    lines = [
        {"type": e["type"], "message": e["message"], "parent_tool_use_id": "t9" if e.get("isSidechain") else None,
         "session_id": "s", "uuid": e["uuid"]}
        for e in _entries("claude-code.jsonl")
    ]  # fmt: skip
    return [init, *lines, {"type": "result", "subtype": "success", "session_id": "s"}]


_V3 = _entries("branch-v3.jsonl")
BASES: dict[str, Any] = {
    "pi-v1": _v1(_V3),
    "pi-v2": _v2(_V3),
    "pi-v3": _V3,
    "claude-code": _entries("claude-code.jsonl"),
    "codex": rollout_lines(),
    "openai": json.loads((DATA / "openai.json").read_text()),
    "swe-agent": _trajectory("pydantic__pydantic.acb0f10f.pr_8316.traj", 10),
    "swe-agent-text": _trajectory("pydicom__pydicom-1458.traj", 9),
    "openhands": json.loads((SESSIONS / "check" / "openhands" / "runtime_trajs.wrong_initial_state.json").read_text()),
    "openhands-records": _records(14),
    "mini-swe-agent": _mini(12),
    "anthropic": _anthropic(),
    "claude-code-stream": _stream(),
    "openhands-v1": [
        json.loads(f.read_text()) for f in sorted((DATA / "openhands-v1" / "sdk-terminal" / "events").iterdir())
    ],
}
DOCUMENTS = ("openai", "swe-agent", "swe-agent-text", "openhands", "mini-swe-agent", "anthropic", "openhands-v1")
"""Bases written as one JSON document; the others as JSON lines."""
_FORCED = [
    None, None, None, "pi", "claude-code", "codex", "swe-agent", "mini-swe-agent", "openhands", "openai", "anthropic",
    "bogus",
]  # fmt: skip


@st.composite
def session_files(draw: st.DrawFn) -> tuple[str, bytes, str | None]:
    """(base format, file bytes, forced format or None)."""
    name = draw(st.sampled_from(sorted(BASES)))
    base = BASES[name]
    entries = draw(st.one_of(st.just(base), mutated([base]), mutated([base], TEXT), mutated([base], SCALAR)))
    data = as_json(entries) if name in DOCUMENTS else jsonl(entries)
    if draw(st.booleans()):
        data = draw(damaged_bytes(data))
    return name, data, draw(st.sampled_from(_FORCED))


FILES = st.one_of(
    session_files(),
    session_files(),
    session_files(),
    st.tuples(st.just("random"), st.binary(max_size=300), st.sampled_from(_FORCED)),
)

_paths = itertools.count()


@pytest.fixture
def write(tmp_path: Path) -> Iterator[Any]:
    def put(data: bytes) -> Path:
        p = tmp_path / f"session-{next(_paths)}.jsonl"
        p.write_bytes(data)
        return p

    yield put


def _check_transcript(t: Transcript) -> int:
    """The transcript's fields have their types; each message translates or is refused cleanly.
    Returns how many messages translated."""
    assert isinstance(t.messages, list) and all(isinstance(m, dict) for m in t.messages)
    assert t.session_id is None or isinstance(t.session_id, str)
    assert t.cwd is None or isinstance(t.cwd, str)
    assert isinstance(t.skipped_lines, int) and all(isinstance(n, int) for n in t.skipped_line_numbers)
    for c in t.compactions:
        assert isinstance(c.at, int) and isinstance(c.first_kept, int) and isinstance(c.summary, str)
        assert c.tokens_before is None or isinstance(c.tokens_before, int)
    adapter = harness(t.harness).adapter()
    ok = 0
    for k, m in enumerate(t.messages):
        if t.harness == "pi" and not in_context(m):
            continue
        try:
            adapter.translate(m, k)
            ok += 1
        except MalformedMessage:
            pass
    return ok


@settings(FUZZ, max_examples=EXAMPLES)
@given(file=FILES)
def test_fuzz_session_files(write: Any, reliability: Counts, timed: None, file: tuple[str, bytes, str | None]) -> None:
    name, data, forced = file
    path = write(data)
    try:
        ts = read_sessions(path, forced)
    except InputError as e:
        assert str(path) in str(e) or "unknown format" in str(e), e  # names the file
        reliability.add("fuzz: session_files", inputs=1, typed_errors=1)
        reliability.add("fuzz: session_files (errors)", **{type(e).__name__: 1})
    else:
        assert ts and ts[0].label is None or all(t.label for t in ts)
        translated = sum(_check_transcript(t) for t in ts)
        reliability.add("fuzz: session_files", inputs=1, accepted=1, messages_translated=translated)
    finally:
        path.unlink()
    reliability.add("fuzz: session_files (inputs by base)", **{name: 1})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "replay.db")
    yield s
    s.close()


_sessions = itertools.count()


@settings(FUZZ, max_examples=REPLAYS)
@given(file=session_files())
def test_fuzz_replay_session_files(
    write: Any, store: SqliteStore, reliability: Counts, timed: None, file: tuple[str, bytes, str | None]
) -> None:
    """Read, then replay whole: ``ctxos replay`` on a bad file fails with a typed error."""
    _, data, _ = file
    path = write(data)
    try:
        for t in read_sessions(path):
            session = Session.open(store, f"replay-{next(_sessions)}", harness=t.harness, workspace=t.cwd)
            replay_transcript(t, session, verify="last")
    except InvalidOutput:
        raise  # an assembled context that fails validation is our bug, whatever the input
    except ContextOSError as e:
        reliability.add("fuzz: replay_session_files", inputs=1, typed_errors=1)
        reliability.add("fuzz: replay_session_files (errors)", **{type(e).__name__: 1})
    else:
        reliability.add("fuzz: replay_session_files", inputs=1, accepted=1)
    finally:
        path.unlink()


# -- what the fuzz found, pinned ---------------------------------------------------------------------


def test_line_separators_inside_json_strings_do_not_split_lines(tmp_path: Path) -> None:
    """JSON writers (JavaScript's JSON.stringify too) leave U+2028, U+2029 and U+0085 unescaped."""
    entries = [e for e in BASES["pi-v3"]]
    entries[1] = copy.deepcopy(entries[1]) | {"message": {"role": "user", "content": "a\u2028b\u2029c\x85d"}}
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(json.dumps(e, ensure_ascii=False) for e in entries) + "\n", encoding="utf-8")
    t = read_session(p)
    assert t.format == "pi-v3" and t.messages[0]["content"] == "a\u2028b\u2029c\x85d"


def test_a_first_line_longer_than_64k_is_still_recognised(tmp_path: Path) -> None:
    first = dict(BASES["claude-code"][0])
    first["message"] = {"role": "user", "content": "x" * 100_000}
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(json.dumps(e) for e in [first, *BASES["claude-code"][1:]]) + "\n")
    t = read_session(p)
    assert t.format == "claude-code" and t.messages[0]["content"][0]["text"] == "x" * 100_000


@pytest.mark.parametrize(
    ("data", "match"),
    [
        # bytes that are not UTF-8 read as U+FFFD, as Pi's loader (Node) reads them: a line not JSON, skipped
        (b'{"type":"session","version":3}\n\xff\n', None),
        (b'{"type":"session"}\n' + b"[" * 100_000 + b"\n", None),  # a line that cannot be read: skipped
        (b'{"history": ' + b"[" * 100_000, "not JSON"),
        (b'{"history": [{"role": "assistant", "tool_calls": 5}]}', "tool_calls must be a list"),
        (b'[{"action": "run", "tool_call_metadata": {"model_response": 3}}]', "without a model response message"),
        (b'{"type":"session","version":"3"}\n', "version must be an integer"),
        (b'{"type":"session","version":1}\n{"type":"compaction","firstKeptEntryIndex":"x"}\n', "firstKeptEntryIndex"),
        (b'{"type":"user","uuid":"a","message":{"content":5}}\n', "content must be a string or a list"),
        (b'{"type":"assistant","uuid":{"x":1},"message":{"content":[]}}\n', None),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_damaged_files_get_an_input_error(tmp_path: Path, data: bytes, match: str | None) -> None:
    p = tmp_path / "s.jsonl"
    p.write_bytes(data)
    if match is None:
        read_session(p)  # an odd but harmless field: read
        return
    with pytest.raises(InputError, match=match):
        read_session(p)

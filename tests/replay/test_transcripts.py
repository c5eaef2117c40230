"""Session files: format detection and parsing (Pi v1 on the real session, v3 with a branch and a
compaction, Claude Code, OpenAI JSON), and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.errors import InputError
from context_os.harness.pi import PiAdapter
from context_os.replay.run import replay_transcript
from context_os.replay.transcripts import detect_format, read_session
from context_os.store.sqlite import SqliteStore

DATA = Path(__file__).parent / "data"
REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "pi-sessions" / "before-compaction.jsonl"


@pytest.fixture(scope="module")
def real() -> Path:
    if not REAL.exists():  # pragma: no cover - the shared data sits beside the repository
        pytest.skip(f"the real Pi session is not at {REAL}")
    return REAL


def test_the_real_v1_session(real: Path) -> None:
    assert detect_format(real) == "pi"
    t = read_session(real)
    assert (t.format, t.harness, t.tool_names) == ("pi-v1", "pi", "pi")
    roles = [m["role"] for m in t.messages]
    assert len(roles) == 990
    assert (roles.count("user"), roles.count("assistant"), roles.count("toolResult"), roles.count("bashExecution")) == (
        55,
        484,
        448,
        3,
    )
    assert t.cwd == "/Users/badlogic/workspaces/pi-mono" and t.session_id == "ffae836b-9420-4060-ac13-7745215f90ff"
    # compactions name their first kept entry by index (the header is entry 0)
    lines = [json.loads(x) for x in real.read_text().splitlines()]
    first = [e for e in lines if e["type"] == "compaction"][0]
    assert len(t.compactions) == 2
    kept = lines[first["firstKeptEntryIndex"]]
    assert t.messages[t.compactions[0].first_kept] == kept["message"]
    assert t.compactions[0].at < t.compactions[1].at and t.compactions[0].tokens_before == first["tokensBefore"]
    adapter = PiAdapter()
    for k, m in enumerate(t.messages):  # every message translates
        adapter.translate(m, k)


def test_v3_follows_the_leafs_branch_and_records_the_compaction() -> None:
    t = read_session(DATA / "branch-v3.jsonl")
    assert (t.format, t.cwd, t.session_id) == ("pi-v3", "/repo", "sess-v3")
    roles = [m["role"] for m in t.messages]
    assert roles == [
        "user",
        "assistant",
        "toolResult",
        "branchSummary",
        "assistant",
        "toolResult",
        "user",
        "assistant",
        "toolResult",
        "assistant",
    ]
    assert "Plan A: rewrite the module." not in json.dumps(t.messages)  # the abandoned branch
    assert t.messages[3]["summary"].startswith("Plan A (a rewrite)")
    (c,) = t.compactions
    assert (c.at, c.first_kept, c.tokens_before) == (6, 4, 1234)
    assert t.messages[c.first_kept]["content"][0]["name"] == "edit"


def test_v3_with_a_forced_format_and_a_broken_tree(tmp_path: Path) -> None:
    assert read_session(DATA / "branch-v3.jsonl", "pi").format == "pi-v3"
    bad = tmp_path / "cycle.jsonl"
    bad.write_text(
        '{"type":"session","version":3,"id":"s"}\n'
        '{"type":"message","id":"a","parentId":"b","message":{"role":"user","content":"x"}}\n'
        '{"type":"message","id":"b","parentId":"a","message":{"role":"user","content":"y"}}\n'
    )
    with pytest.raises(InputError, match="cycle"):
        read_session(bad)


@pytest.mark.parametrize("format", ["pi", "claude-code", "codex", "gemini-cli", "swe-agent", "mini-swe-agent"])
def test_a_file_forced_into_a_format_whose_shape_it_lacks_names_its_own(format: str) -> None:
    """Read in a ``--format`` whose shape it lacks (a JSON list of messages as JSON lines of a
    session), a file is refused naming the format it reads as, as one that finds no message is."""
    with pytest.raises(InputError, match=r"\(it reads as openai\)$"):
        read_session(DATA / "openai.json", format)


def test_a_list_of_one_apis_messages_forced_as_the_others_is_refused(tmp_path: Path) -> None:
    # read as the other API's, a list of messages gives numbers that mean nothing (3 calls, 9 tokens)
    with pytest.raises(InputError, match="a list of OpenAI messages, not Anthropic's: it reads as openai"):
        read_session(DATA / "openai.json", "anthropic")
    anthropic = tmp_path / "a.json"
    call = {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a.py"}}
    anthropic.write_text(json.dumps([{"role": "user", "content": "go"}, {"role": "assistant", "content": [call]}]))
    with pytest.raises(InputError, match="not OpenAI's: it reads as anthropic"):
        read_session(anthropic, "openai")
    assert read_session(anthropic, "anthropic").format == "anthropic"
    with pytest.raises(Exception, match="or an OpenHands V1 conversation directory"):
        read_session(tmp_path)  # a directory that is no conversation

    path = DATA / "claude-code.jsonl"
    assert detect_format(path) == "claude-code"
    t = read_session(path)
    assert (t.format, t.harness, t.tool_names, t.cwd, t.session_id) == (
        "claude-code",
        "pi",
        "claude-code",
        "/repo",
        "cc-1",
    )
    assert [m["role"] for m in t.messages] == [
        "user",
        "assistant",
        "toolResult",
        "assistant",
        "toolResult",
        "assistant",
    ]
    streamed = t.messages[1]["content"]  # one reply streamed as two entries
    assert [b["type"] for b in streamed] == ["thinking", "toolCall"] and streamed[0]["thinkingSignature"] == "s1"
    assert streamed[1]["arguments"] == {"file_path": "/repo/calc.py"}
    assert t.messages[2]["toolName"] == "Read" and t.messages[2]["content"][0]["text"].startswith("     1\t")
    assert "a sidechain" not in json.dumps(t.messages)


def test_openai_json_lists(tmp_path: Path) -> None:
    path = DATA / "openai.json"
    assert detect_format(path) == "openai"
    t = read_session(path)
    assert (t.format, t.harness, t.tool_names, len(t.messages)) == ("openai", "openai", "canonical", 7)

    # a list whose calls are another harness's tools: its preset, so its files are followed
    def call(n: int, name: str, **args: Any) -> dict[str, Any]:
        function = {"name": name, "arguments": json.dumps(args)}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"c{n}", "type": "function", "function": function}],
        }

    openhands = [
        {"role": "user", "content": "fix it"},
        call(1, "str_replace_editor", command="view", path="/w/a.py"),
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "Here's the result of running `cat -n` on /w/a.py:\n     1\tx = 1\n",
        },
        call(2, "execute_bash", command="pytest"),
        {"role": "tool", "tool_call_id": "c2", "content": "1 passed"},
    ]
    (tmp_path / "oh.json").write_text(json.dumps(openhands))
    assert read_session(tmp_path / "oh.json").tool_names == "openhands"
    # one logged model call (OpenHands' llm_completions, LiteLLM's logs): its messages, its reply
    messages = json.loads(path.read_text())
    response = {"id": "chatcmpl-1", "choices": [{"index": 0, "message": {**messages[-1], "tool_calls": None}}]}
    log = {"messages": messages[:-1], "response": response, "kwargs": {"tools": []}, "timestamp": 1733339462.4}
    for name, text in (("log.json", json.dumps(log, indent=1)), ("log1.json", json.dumps(log))):  # any layout
        (tmp_path / name).write_text(text)
        assert detect_format(tmp_path / name) == "openai" and read_session(tmp_path / name).messages == messages
    bad = tmp_path / "obj.json"
    bad.write_text('[{"role": "user"}, 3]')
    with pytest.raises(InputError, match="list of message objects"):
        read_session(bad)


def test_a_json_list_of_anthropic_messages(tmp_path: Path) -> None:
    """A dump of the Messages API's ``messages`` (Cline and Roo Code keep one per task): its
    tool_use and tool_result blocks are calls and results through the Anthropic adapter (read as
    chat completions, they were dropped)."""

    def use(n: str, name: str, **args: str) -> dict[str, Any]:
        return {"role": "assistant", "content": [{"type": "tool_use", "id": n, "name": name, "input": args}]}

    def answer(n: str, text: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": n, "content": text}]}

    messages = [
        {"role": "user", "content": [{"type": "text", "text": "fix calc.py"}]},
        use("t1", "Read", file_path="/r/calc.py"),
        answer("t1", "     1\tx = 1\n"),
        use("t2", "Edit", file_path="/r/calc.py", old_string="x = 1", new_string="x = 2"),
        answer("t2", "The file has been updated."),
        {"role": "assistant", "content": "Fixed."},
    ]
    path = tmp_path / "api_conversation_history.json"
    path.write_text(json.dumps(messages))
    assert detect_format(path) == "anthropic"
    t = read_session(path)
    assert (t.format, t.harness, t.tool_names) == ("anthropic", "anthropic", "claude-code")
    with SqliteStore(tmp_path / "s.db") as store:
        r = replay_transcript(t, Session.open(store, "a", harness=t.harness))
    assert (r.turns, r.frames_verified, r.orphaned_tool_results) == (3, 3, 0)
    assert (r.files, r.edits_total, r.edits_with_target_active) == (1, 1, 1)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not json at all\n", "not JSON, neither a JSON document nor JSON lines"),
        ('{"hello": 1}\n', r"one JSON object with keys \['hello'\]: not a session this reads \(Pi, Claude Code,"),
        ('{"hello": 1}\n{"bye": 2}\n', r"2 JSON lines, line 1 one JSON object with keys \['hello'\]: not a session"),
        (  # what `codex exec --json` prints: its rollout holds the session
            '{"type": "thread.started", "thread_id": "t"}\n{"type": "item.completed", "item": {"type": "x"}}\n',
            r"the events `codex exec --json` prints, .*replay the rollout Codex wrote",
        ),
    ],
)
def test_unknown_files_are_refused_with_a_reason(tmp_path: Path, text: str, match: str) -> None:
    p = tmp_path / "x.jsonl"
    p.write_text(text)
    with pytest.raises(InputError, match=match):
        read_session(p)

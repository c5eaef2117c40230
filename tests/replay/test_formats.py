"""Every common transcript format, read the way its own tool reads it: Pi's skipped lines, Claude
Code detected from any line and its sidechains as sessions of their own, SWE-agent trajectories
(1.x function calling, 0.x actions in text), OpenHands event streams and ``output.jsonl`` records,
and a JSON file of the wrong shape named for what it is. Real files from ``bench/sessions``."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.errors import FileUnreadable, InputError
from context_os.harness.openai import OPENAI_PAIRING
from context_os.harness.pairing import check_pairs
from context_os.harness.pi import PI_PAIRING
from context_os.replay.formats.common import Compaction
from context_os.replay.formats.swe_agent import text_action
from context_os.replay.run import replay_transcript
from context_os.replay.transcripts import Transcript, detect_format, read_session, read_sessions

SESSIONS = Path(__file__).resolve().parents[2] / "bench" / "sessions"
DATA = Path(__file__).parent / "data"
FA812 = SESSIONS / "check" / "claude-code" / "fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl"


def calls(t: Transcript) -> int:
    return sum(1 for k, m in enumerate(t.messages) if k and m.get("role") == "assistant")


def paired(t: Transcript) -> bool:
    """Every tool call answered right after its message, every result answering one (the last
    message may leave its calls open: nothing was sent after it)."""
    pairing = PI_PAIRING if t.harness == "pi" else OPENAI_PAIRING
    problems, _ = check_pairs(pairing, t.messages)
    return not problems


def write(path: Path, entries: list[Any]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


# -- Pi: a line that is not JSON is skipped and counted ------------------------------------------


@pytest.mark.parametrize(("name", "line", "model_calls"), [("session.jsonl", 440, 219), ("compact.jsonl", 1013, 503)])
def test_pi_skips_a_line_holding_two_objects_as_pi_does(name: str, line: int, model_calls: int) -> None:
    t = read_session(SESSIONS / "check" / "pi" / name)
    assert (t.format, t.skipped_lines, t.skipped_line_numbers) == ("pi-v1", 1, [line])
    assert calls(t) == model_calls and t.source == str(SESSIONS / "check" / "pi" / name)


def test_a_branch_goes_on_over_an_entry_lost_on_a_line_that_is_not_json(tmp_path: Path) -> None:
    # a real Pi file: an assistant entry whose text a redaction broke (an invalid escape); the next
    # entry names it as parent. Pi's loader would stop the branch there; the replay goes on
    def entry(id: str, parent: str | None, role: str, text: str) -> dict[str, Any]:
        return {"type": "message", "id": id, "parentId": parent, "message": {"role": role, "content": text}}

    lines = [
        json.dumps({"type": "session", "version": 3, "id": "s", "cwd": "/r"}),
        json.dumps(entry("u1", None, "user", "first question")),
        json.dumps(entry("a1", "u1", "assistant", "first answer")),
        json.dumps(entry("u2", "a1", "user", "second question")),
        '{"type": "message", "id": "a2", "parentId": "u2", "message": {"role": "assistant", "content": "x\\*@y"}}'[:-3]
        + '\\q"}}',
        json.dumps(entry("u3", "a2", "user", "third question")),
        json.dumps(entry("a3", "u3", "assistant", "third answer")),
    ]
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(lines) + "\n")
    t = read_session(p)
    assert t.skipped_line_numbers == [5]
    assert [m["content"] for m in t.messages] == [
        "first question",
        "first answer",
        "second question",
        "third question",
        "third answer",
    ]
    assert t.notes == [
        "line 5 is not JSON: the entry on line 6 names its lost entry as parent; the branch goes on from the "
        "entry on line 4, as the session was recorded (Pi's own loader stops the branch there)"
    ]
    # without its header line, a file of entries with ids is still a tree: version 2 on
    p.write_text("\n".join(lines[1:4]) + "\n")
    assert read_session(p).format == "pi-v2"


def test_skipped_lines_are_counted_and_the_first_ones_named(tmp_path: Path) -> None:
    lines = [json.dumps({"type": "session", "version": 3, "id": "s", "cwd": "/r"})]
    parent = None
    for n in range(14):
        lines.append(
            json.dumps(
                {"type": "message", "id": f"m{n}", "parentId": parent, "message": {"role": "user", "content": "x"}}
            )
        )
        parent = f"m{n}"
        lines.append('{"type": "message", "id": "cut sho')  # a line cut short by a crash
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(lines) + "\n")
    t = read_session(p)
    assert (t.format, len(t.messages), t.skipped_lines) == ("pi-v3", 14, 14)
    assert t.skipped_line_numbers == [3, 5, 7, 9, 11, 13, 15, 17, 19, 21]


def pi_lines(*texts: str) -> list[bytes]:
    """A Pi v3 session's lines: its header, then a user message of each text, one after the other."""
    lines = [json.dumps({"type": "session", "version": 3, "id": "s", "cwd": "/r"})]
    for n, text in enumerate(texts):
        parent = f"m{n - 1}" if n else None
        message = {"role": "user", "content": [{"type": "text", "text": text}]}
        lines.append(json.dumps({"type": "message", "id": f"m{n}", "parentId": parent, "message": message}))
    return [line.encode() for line in lines]


@pytest.mark.parametrize("summary", ["", "Tried the other branch: it failed."])
def test_a_branch_summary_is_a_message_when_pi_sends_one(tmp_path: Path, summary: str) -> None:
    # Pi's buildSessionContext adds a branch_summary entry only when its summary is not empty
    lines = pi_lines("go", "again")
    summarised = {"type": "branch_summary", "id": "bs", "parentId": "m0", "fromId": "m0", "summary": summary}
    lines.insert(2, json.dumps(summarised).encode())
    lines[3] = lines[3].replace(b'"parentId": "m0"', b'"parentId": "bs"')
    t = read_session(write(tmp_path / "s.jsonl", [json.loads(line) for line in lines]))
    assert [(m["role"], m.get("summary")) for m in t.messages] == [
        ("user", None),
        *([("branchSummary", summary)] if summary else []),
        ("user", None),
    ]


@pytest.mark.parametrize("keep", [1, 0], ids=["in-a-character", "at-an-ascii-byte"])
def test_a_last_line_cut_inside_a_character_is_a_line_cut_short(tmp_path: Path, keep: int) -> None:
    # a crash that cut the last line inside "é" (2 bytes) refused the whole session (not UTF-8
    # text), where a cut at an ASCII byte lost that line alone: Pi reads both as the latter
    lines = pi_lines("first", "second", "third é")
    lines[-1] = json.dumps(json.loads(lines[-1]), ensure_ascii=False).encode()
    text = b"\n".join(lines)
    path = tmp_path / "cut.jsonl"
    path.write_bytes(text[: text.rindex("é".encode()) + keep])
    t = read_session(path)
    assert [m["content"][0]["text"] for m in t.messages] == ["first", "second"]
    assert (t.skipped_lines, t.skipped_line_numbers, t.notes) == (1, [4], [])


def test_bytes_that_are_not_utf8_are_read_as_node_reads_them_and_said(tmp_path: Path) -> None:
    # Pi, Claude Code, Gemini CLI and Cline read their files with Node's utf8 decoding: a bad
    # byte is U+FFFD, and the line is read; the replay does the same, and says so
    lines = pi_lines("first", "BAD", "third", "BAD")
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"BAD", b"a\xffb\xe2\x80") for line in lines) + b"\n")
    t = read_session(path)
    assert [m["content"][0]["text"] for m in t.messages] == ["first", "a\ufffdb\ufffd", "third", "a\ufffdb\ufffd"]
    assert t.skipped_lines == 0
    assert t.notes == [
        "2 line(s) held bytes that are not UTF-8 (line 3, 5): read as U+FFFD, as Node's utf8 decoding reads them"
    ]


def test_pi_context_edits_rewrite_the_messages_they_target_as_pi_projects_them(tmp_path: Path) -> None:
    """Pi 1.5's ``context_edit`` entries (its ``projectContextEntry``): null leaves the message
    out, else its content is replaced (a string as a text block for an assistant message or a tool
    result), the newest edit of an entry counting; they were ignored."""
    header = {"type": "session", "version": 3, "id": "s", "cwd": "/r"}
    call = {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "seq 1 9999"}}
    said = [
        {"role": "user", "content": "count"},
        {"role": "assistant", "content": [], "stopReason": "error", "errorMessage": "503 overloaded"},
        {"role": "assistant", "content": [call], "stopReason": "toolUse"},
        {"role": "toolResult", "toolCallId": "c1", "toolName": "bash", "content": [{"type": "text", "text": "1\n2"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}], "stopReason": "stop"},
    ]
    entries: list[dict[str, Any]] = [header]
    for n, m in enumerate(said):
        entries.append({"type": "message", "id": f"m{n}", "parentId": entries[-1].get("id"), "message": m})

    def edit(target: str, replacement: Any) -> None:
        entries.append(
            {
                "type": "context_edit",
                "id": f"x{len(entries)}",
                "parentId": entries[-1]["id"],
                "targetId": target,
                "replacement": replacement,
            }
        )

    edit("m1", None)
    edit("m3", {"content": "first"})
    edit("m3", {"content": "[output cleared]"})  # the newest counts
    edit("m0", {"content": [{"type": "text", "text": "count to 9999"}]})
    edit("m4", {"text": "no content"})  # not what Pi writes: not applied
    t = read_session(write(tmp_path / "s.jsonl", entries))
    assert [m["content"] for m in t.messages] == [
        [{"type": "text", "text": "count to 9999"}],
        [call],
        [{"type": "text", "text": "[output cleared]"}],
        [{"type": "text", "text": "done"}],
    ]
    assert t.info == [
        "3 message(s) edited by Pi's context edits (1 left out), as Pi rebuilds the session: every"
        " call is replayed with them as edited"
    ]
    assert t.notes == [
        "1 context edit(s) without a replacement Pi reads (null, or a content string or list) not applied: line 11"
    ]


def test_pi_sends_a_compactions_system_message_before_its_summary(tmp_path: Path) -> None:
    """Pi 1.5 keeps its system prompt as system messages in the session (``sections``), and a
    compaction its ``systemMessage``, the prompt as it stood: Pi sends it before the summary
    (``buildSessionContext``), which what Pi sent over the compacted calls left out."""
    prompt = {"role": "system", "content": "", "sections": {"base": "You are Pi." * 300, "date": "Today."}}
    said = [prompt, {"role": "user", "content": "first " * 500}, {"role": "user", "content": "then"}]
    entries: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": "s", "cwd": "/r"}]
    for n, m in enumerate(said):
        entries.append({"type": "message", "id": f"m{n}", "parentId": entries[-1].get("id"), "message": m})
    kept = {"firstKeptEntryId": "m2", "tokensBefore": 2_000, "systemMessage": {**prompt, "timestamp": 1}}
    compaction = {"type": "compaction", "id": "c", "parentId": "m2", "summary": "Said first.", **kept}
    entries += [
        compaction,
        {"type": "message", "id": "m3", "parentId": "c", "message": {"role": "user", "content": "and"}},
    ]
    t = read_session(write(tmp_path / "s.jsonl", entries))
    (c,) = t.compactions
    assert c.system_chars == len("You are Pi.") * 300 + len("Today.")
    tokens = [1_000, 800, 1, 1]
    bare = Compaction(c.at, c.first_kept, c.summary, c.tokens_before)  # as read before
    without = Transcript(t.format, t.harness, t.tool_names, t.messages, compactions=[bare])
    assert t.compacted_tokens(tokens, [4]) == without.compacted_tokens(tokens, [4]) + 827  # 3,306 characters


def test_a_pi_message_without_content_is_empty_and_one_of_a_role_pi_does_not_know_is_left_out(
    tmp_path: Path, db
) -> None:
    """Pi's convertToLlm sends no message of a role it does not know; a message whose content is
    null or missing is empty. Either refused the whole session (``unknown role 'weird'``,
    ``content must be a list of blocks, not NoneType``)."""
    header = {"type": "session", "version": 3, "id": "s", "cwd": "/r"}
    said = [
        {"role": "user", "content": None},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "stopReason": "stop"},
        {"role": "weird", "content": "not for the model"},
        {"role": "user"},
        {"role": "assistant", "content": None, "stopReason": "stop"},
        {"content": "no role"},
        {"role": "bashExecution", "command": "ls", "output": "a.py", "exitCode": 0, "cancelled": False},
        {"role": "user", "content": "go on"},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}], "stopReason": "stop"},
    ]
    entries = [header] + [
        {"type": "message", "id": f"m{n}", "parentId": f"m{n - 1}" if n else None, "message": m}
        for n, m in enumerate(said)
    ]
    t = read_session(write(tmp_path / "s.jsonl", entries))
    assert [(m["role"], m["content"]) for m in t.messages[:2]] == [("user", []), ("assistant", said[1]["content"])]
    roles = ["user", "assistant", "user", "assistant", "bashExecution", "user", "assistant"]
    assert [m["role"] for m in t.messages] == roles
    assert "content" not in t.messages[4]  # (it holds none, and is no message without content)
    assert t.notes == [
        "2 message(s) of a role Pi does not know left out, as Pi's convertToLlm leaves them out of what the model"
        " is sent: 'weird' (1), None (1)",
        "3 message(s) without content (null or missing) read as empty",
    ]
    r = replay_transcript(t, Session.open(db, "s", harness=t.harness, workspace=t.cwd), verify="all")
    assert r.frames_verified == r.turns == 3


@pytest.mark.parametrize(
    ("codec", "said", "iconv"),
    [
        ("utf-16", "UTF-16LE", "-f UTF-16 "),
        ("utf-16-le", "UTF-16LE", "-f UTF-16LE "),
        ("utf-16-be", "UTF-16BE", "-f UTF-16BE "),
        ("utf-32", "UTF-32LE", "-f UTF-32 "),
    ],
)
def test_a_session_in_utf16_or_utf32_is_refused_naming_its_encoding(
    tmp_path: Path, codec: str, said: str, iconv: str
) -> None:
    # PowerShell's `>` writes UTF-16: read as UTF-8 every line was "not JSON" and nothing was
    # said of why; a JSON file read as UTF-8 with its NULs was "not JSON" at byte 0
    text = b"\n".join(pi_lines("first", "second")).decode() + "\n"
    for name in ("s.jsonl", "s.json"):
        path = tmp_path / name
        path.write_bytes(text.encode(codec))
        with pytest.raises(InputError, match=f"the file is {said} text, not UTF-8") as e:
            read_session(path)
        assert iconv in str(e.value) and "-t UTF-8" in str(e.value)


# -- Claude Code ----------------------------------------------------------------------------------


def test_claude_code_is_detected_from_a_later_line(tmp_path: Path) -> None:
    assert (
        detect_format(SESSIONS / "check" / "claude-code" / "tool_heavy.jsonl") == "claude-code"
    )  # real: a snapshot first
    entries = [json.loads(x) for x in (DATA / "claude-code.jsonl").read_text().splitlines()]
    head = [
        {"type": "summary", "summary": "Fixing calc", "leafUuid": "u7"},
        {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}},
        {"type": "progress", "data": {"type": "hook_progress"}},
        {"type": "system", "subtype": "local_command", "content": "/model"},
    ]
    for k in range(len(head)):
        p = write(tmp_path / f"cc{k}.jsonl", head[k:] + entries)
        assert detect_format(p) == "claude-code"
        assert calls(read_session(p)) == 3


def test_claude_code_sessions_are_the_main_chain_and_each_sidechain(tmp_path: Path) -> None:
    main, side = read_sessions(DATA / "claude-code.jsonl")
    assert (main.label, side.label) == (None, "sidechain-1")
    assert "a sidechain" not in json.dumps(main.messages) and "a sidechain" in json.dumps(side.messages)
    # inline sidechains of two agents, told apart by agentId
    entries = [json.loads(x) for x in (DATA / "claude-code.jsonl").read_text().splitlines()]
    for agent in ("ab12", "cd34"):
        first = {"parentUuid": None, "isSidechain": True, "agentId": agent, "sessionId": "cc-1", "uuid": f"{agent}-1"}
        entries.append({**first, "type": "user", "message": {"role": "user", "content": f"task {agent}"}})
        reply = {"id": f"r-{agent}", "role": "assistant", "content": [{"type": "text", "text": f"done {agent}"}]}
        entries.append(
            {**first, "type": "assistant", "parentUuid": f"{agent}-1", "uuid": f"{agent}-2", "message": reply}
        )
    ts = read_sessions(write(tmp_path / "s.jsonl", entries))
    assert [t.label for t in ts] == [None, "sidechain-1", "ab12", "cd34"]
    assert [m["role"] for m in ts[2].messages] == ["user", "assistant"] and calls(ts[3]) == 1
    assert [t.label for t in read_sessions(tmp_path / "s.jsonl", sidechains=False)] == [None]


def test_claude_code_results_written_before_their_call_stay_with_it(tmp_path: Path) -> None:
    """Claude Code 2.1 sometimes writes a tool result a line before the entry holding its call
    (the next part of the same streamed reply); the links say the order. Both are kept, the
    result after its call, as Claude Code itself sends them."""
    entries = [json.loads(x) for x in (DATA / "claude-code.jsonl").read_text().splitlines()]
    result = entries.pop(3)  # t1's result, written before the reply part that calls t1
    entries.insert(2, result)
    t = read_session(write(tmp_path / "early.jsonl", entries))
    assert t.messages == read_session(DATA / "claude-code.jsonl").messages and paired(t)
    read_call = [b for m in t.messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "toolCall"]
    assert read_call[0]["id"] == "t1"


def test_half_an_emoji_escaped_in_a_string_is_read_as_a_replacement_character(tmp_path: Path, db) -> None:
    """A JavaScript harness that cuts a tool's output inside an emoji writes the half left as
    ``\\ud83d`` (``JSON.stringify``), which no UTF-8 text holds: the adapter refused that message
    (``not valid Unicode text``) and with it the whole session, though the harness resumed it.
    The half is read as U+FFFD; a whole pair escaped stays the character it is."""
    lines = (DATA / "branch-v3.jsonl").read_text().splitlines()
    cut = [line.replace("return 1\\n", "return 1  # \\ud83d\\ude00 \\ud83d\\n") for line in lines]
    assert cut != lines
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(cut) + "\n")
    t = read_session(path)
    texts = [b["text"] for m in t.messages if m["role"] == "toolResult" for b in m["content"]]
    assert any("return 1  # \U0001f600 \ufffd\n" in x for x in texts)
    r = replay_transcript(t, Session.open(db, "cut", harness=t.harness, workspace=t.cwd), verify="all")
    assert r.frames_verified == r.turns == 4


def test_a_claude_code_redacted_thinking_block_is_kept_as_pi_holds_it(tmp_path: Path, db) -> None:
    """A reply's ``redacted_thinking`` block (reasoning the API encrypted) was dropped: the reply
    was replayed without it, though Claude Code sent it back with every later request, and the
    full side did not count it. It is now the ``thinking`` block pi-ai makes of it (its data the
    signature), counted as Pi counts it."""
    entries = [json.loads(x) for x in (DATA / "claude-code.jsonl").read_text().splitlines()]
    entries[1]["message"]["content"].append({"type": "redacted_thinking", "data": "EuYBCkQYAiJA" * 40})
    t = read_session(write(tmp_path / "redacted.jsonl", entries))
    plain = read_session(DATA / "claude-code.jsonl")
    assert t.messages[1]["content"][1] == {
        "type": "thinking",
        "thinking": "[Reasoning redacted]",
        "thinkingSignature": "EuYBCkQYAiJA" * 40,
        "redacted": True,
    }
    assert t.messages[0] == plain.messages[0] and t.messages[2:] == plain.messages[2:] and paired(t)
    replayed = replay_transcript(t, Session.open(db, "r", harness=t.harness, workspace=t.cwd), verify="all")
    base = replay_transcript(plain, Session.open(db, "p", harness=plain.harness, workspace=plain.cwd), verify="none")
    assert replayed.frames_verified == replayed.turns == base.turns
    assert replayed.tokens_full > base.tokens_full


def test_a_claude_code_read_of_an_image_or_a_pdf_is_no_file_text(tmp_path: Path, db) -> None:
    """Claude Code's Read of an image answers with the image alone (no text block), and of a PDF
    with a document block: neither shows the file's text, so neither is a version of the file
    (it was recorded as an empty file, shown active as such)."""
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

    def entry(uuid: str, parent: str | None, role: str, content: Any, **more: Any) -> dict[str, Any]:
        return {
            "type": role,
            "uuid": uuid,
            "parentUuid": parent,
            "sessionId": "s",
            "cwd": "/w",
            "timestamp": f"2026-08-06T01:31:0{uuid[-1]}.000Z",
            "message": {"role": role, "content": content},
            **more,
        }

    def read(uuid: str, parent: str, call: str, path: str) -> dict[str, Any]:
        block = {"type": "tool_use", "id": call, "name": "Read", "input": {"file_path": path}}
        return entry(uuid, parent, "assistant", [block])

    def result(uuid: str, parent: str, call: str, content: list[Any], tool_result: Any) -> dict[str, Any]:
        block = {"type": "tool_result", "tool_use_id": call, "content": content}
        return entry(uuid, parent, "user", [block], toolUseResult=tool_result)

    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
    document = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}
    entries = [
        entry("u1", None, "user", "what do these show?"),
        read("u2", "u1", "r1", "/w/shot.png"),
        result("u3", "u2", "r1", [image], {"type": "image", "file": {"base64": png, "type": "image/png"}}),
        read("u4", "u3", "r2", "/w/spec.pdf"),
        result("u5", "u4", "r2", [document], {"type": "pdf", "file": {"filePath": "/w/spec.pdf"}}),
        entry("u6", "u5", "assistant", [{"type": "text", "text": "A red dot, and a spec."}]),
    ]
    t = read_session(write(tmp_path / "media.jsonl", entries))
    assert calls(t) == 3 and paired(t)
    session = Session.open(db, "media", harness=t.harness, workspace=t.cwd)
    r = replay_transcript(t, session, verify="all")
    assert r.orphaned_tool_results == 0 and r.frames_verified == r.frames == 3
    assert (r.files, r.file_versions) == (0, 0)
    assert not [o for o in session.view.objects.values() if o.kind == "file"]


def _attachment(uuid: str, parent: str, kind: str, *texts: str) -> dict[str, Any]:
    """An ``attachment`` entry as Claude Code 2.1.3xx writes it: ``rendered`` what it sent (one
    ``{"content": text}`` per part), none when it sent nothing."""
    e = {"isSidechain": False, "cwd": "/repo", "sessionId": "cc-1", "type": "attachment", "uuid": uuid,
         "parentUuid": parent, "attachment": {"type": kind}, "timestamp": "2025-12-01T10:00:00.500Z"}  # fmt: skip
    return {**e, "rendered": [{"content": t} for t in texts], "renderedRole": "system"} if texts else e


def test_claude_code_attachments_go_where_claude_code_sends_them(tmp_path: Path) -> None:
    """What Claude Code adds to a turn (a file named with @, the date, reminders) is an
    ``attachment`` entry on the chain; its text goes where Claude Code 2.1.332 sends it (the
    end-to-end test checks this against its requests): before the user's text it follows, the
    last ending in a newline; at the end of a tool result's text it follows (the result's end's
    blanks off); a user message of its own with nothing before it in the turn. An attachment
    with no ``rendered`` sent nothing; one off the chain (after the last message) was never sent."""
    entries = [json.loads(x) for x in (DATA / "claude-code.jsonl").read_text().splitlines()]
    at = {e["uuid"]: k for k, e in enumerate(entries)}
    entries[at["u2"]]["parentUuid"] = "a3"
    entries[at["u5"]]["parentUuid"] = "a5"
    entries[at["u1"]]["parentUuid"] = "a0"
    entries[at["u4"] + 1 : at["u4"] + 1] = [_attachment("a4", "u4", "total_tokens_reminder", "<r>tokens</r>"),
                                            _attachment("a5", "a4", "todo_reminder", "<r>todos</r>")]  # fmt: skip
    entries[at["u1"] + 1 : at["u1"] + 1] = [
        _attachment("a1", "u1", "file", "<r>Called the Read tool</r>", "<r>Result: 1\tx = 1</r>"),
        _attachment("a2", "a1", "session_context"),  # nothing sent
        _attachment("a3", "a2", "date", "<r>date</r>"),
    ]
    entries[0:0] = [_attachment("a0", None, "environment", "<r>env</r>")]  # type: ignore[arg-type]
    entries.append(_attachment("a6", "u7", "date", "<r>never sent</r>"))
    t = read_session(write(tmp_path / "attached.jsonl", entries))
    plain = read_session(DATA / "claude-code.jsonl")
    texts = [[b["text"] for b in m["content"] if b["type"] == "text"] for m in t.messages]
    assert texts[0] == ["<r>env</r>"]  # nothing before it in the turn: a user message of its own
    assert texts[1] == ["<r>Called the Read tool</r>", "<r>Result: 1\tx = 1</r>", "<r>date</r>\n", "fix calc.py"]
    (result,) = [m for m in t.messages if m["role"] == "toolResult" and m["toolCallId"] == "t1"]
    assert result["content"] == [
        {"type": "text", "text": "     1\tdef add(a, b):\n     2\t    return a - b\n\n<r>tokens</r>\n\n<r>todos</r>"}
    ]
    assert len(t.messages) == len(plain.messages) + 1 and t.messages[3:] == [
        m if m is not plain.messages[2] else result for m in plain.messages[2:]
    ] and paired(t)  # fmt: skip
    assert t.notes == []


def test_claude_code_attachments_without_their_text_are_noted(tmp_path: Path) -> None:
    """Releases before 2.1.3xx write attachments without the text sent (``rendered``): what they
    added is not known, and the replay says so."""
    entries = [json.loads(x) for x in (DATA / "claude-code.jsonl").read_text().splitlines()]
    entries.insert(1, _attachment("a1", "u1", "edited_text_file"))
    entries[2]["parentUuid"] = "a1"
    t = read_session(write(tmp_path / "old.jsonl", entries))
    assert t.messages == read_session(DATA / "claude-code.jsonl").messages
    assert t.notes == [
        "1 attachment entry (edited_text_file) holds no text as Claude Code sent it (the release that wrote"
        " the file records none): what they added to the turns is not counted"
    ]


def test_replies_after_an_api_error_claude_code_noted_late_are_kept(tmp_path: Path) -> None:
    """Claude Code retries a request that failed; the note of the failure (``system``,
    ``api_error``) can be written after the replies that followed the retry, and the next entry
    link to it: those replies are off the chain, though the model saw them. They are kept."""
    entries = [json.loads(x) for x in (DATA / "claude-code.jsonl").read_text().splitlines()]
    base = {"isSidechain": False, "cwd": "/repo", "sessionId": "cc-1"}
    note = {**base, "type": "system", "subtype": "api_error", "parentUuid": "u4", "uuid": "e1", "level": "error"}
    again = {**base, "type": "user", "parentUuid": "e1", "uuid": "u8", "message": {"role": "user", "content": "next"}}
    t = read_session(write(tmp_path / "retried.jsonl", [*entries, note, again]))
    before = read_session(DATA / "claude-code.jsonl").messages
    assert t.messages[: len(before)] == before and t.messages[-1]["content"][0]["text"] == "next" and paired(t)


@pytest.mark.parametrize("snapshot", [True, False], ids=["after-a-snapshot", "after-a-message"])
def test_a_link_lost_after_a_line_without_uuid_goes_on_at_the_entry_before_it(tmp_path: Path, snapshot: bool) -> None:
    # a lost parentUuid goes on at the entry written before; right after a file-history-snapshot
    # line (no uuid, no parent) the chain stopped there, and everything before was silently cut
    entries = [json.loads(x) for x in (DATA / "claude-code.jsonl").read_text().splitlines()]
    k = next(k for k, e in enumerate(entries) if e["uuid"] == "u6")
    entries[k]["parentUuid"] = "lost"
    if snapshot:
        entries.insert(
            k, {"type": "file-history-snapshot", "messageId": "u6", "snapshot": {}, "isSnapshotUpdate": False}
        )
    t = read_session(write(tmp_path / "lost.jsonl", entries))
    assert t.messages == read_session(DATA / "claude-code.jsonl").messages


def test_a_resumed_session_s_copied_history_is_not_replayed_twice(tmp_path: Path) -> None:
    """Resuming a session, Claude Code (2.0) may write its history again: new uuids, a root of its
    own, the same message ids. The chain runs through the copy; the first copy is no branch of it,
    and a reply on it is not a second model call."""
    entries = [json.loads(x) for x in (DATA / "claude-code.jsonl").read_text().splitlines()]
    main = [e for e in entries if not e.get("isSidechain")]
    copy = [{**e, "uuid": "c-" + e["uuid"], "parentUuid": e["parentUuid"] and "c-" + e["parentUuid"]} for e in main]
    base = {"isSidechain": False, "cwd": "/repo", "sessionId": "cc-1"}
    later = [
        {**base, "type": "user", "parentUuid": "c-u7", "uuid": "u8", "message": {"role": "user", "content": "and?"}},
        {**base, "type": "assistant", "parentUuid": "u8", "uuid": "u9",
         "message": {"id": "msg_9", "role": "assistant", "content": [{"type": "text", "text": "Done."}]}},
    ]  # fmt: skip
    resumed = [*entries, {"type": "summary", "summary": "Fixing calc", "leafUuid": "u7"}, *copy, *later]
    t = read_session(write(tmp_path / "resumed.jsonl", resumed))
    once = read_session(DATA / "claude-code.jsonl")
    assert calls(t) == calls(once) + 1 and t.messages[: len(once.messages)] == once.messages and paired(t)


def test_sub_agents_mirrored_in_progress_entries_are_sessions_of_their_own() -> None:
    """Claude Code 2.1.37 to 2.1.49 mirrors each message of a sub-agent into the main file as an
    ``agent_progress`` entry; where no sidechain or sub-agent file holds it, that is its copy."""
    path = SESSIONS / "tuning" / "claude-code" / "subagent.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    mirrored = [
        r["data"]["message"] for r in rows if r.get("type") == "progress" and r["data"].get("type") == "agent_progress"
    ]
    replies = {m["message"]["id"] for m in mirrored if m["type"] == "assistant"}
    main, side = read_sessions(path)
    assert (main.label, side.label) == (None, "afb92ff") and calls(side) == len(replies) > 0 and paired(side)
    assert (
        side.messages[0]["role"] == "user"
        and side.messages[0]["content"][0]["text"] == mirrored[0]["message"]["content"][0]["text"]
    )


def test_claude_codes_stream_json_output_is_its_session(tmp_path: Path) -> None:
    """``claude -p --output-format stream-json``: the messages in the order they happened, no
    links; a sub-agent's are those of its Task call; an API error shown as a reply is none."""
    entries = [json.loads(x) for x in (DATA / "claude-code.jsonl").read_text().splitlines()]
    init = {"type": "system", "subtype": "init", "cwd": "/repo", "session_id": "cc-1", "tools": ["Read", "Edit"]}
    stream = [init]
    for e in entries:
        parent = "toolu_task" if e.get("isSidechain") else None
        stream.append(
            {
                "type": e["type"],
                "message": e["message"],
                "parent_tool_use_id": parent,
                "session_id": "cc-1",
                "uuid": e["uuid"],
            }
        )
    failed = {"role": "assistant", "content": [{"type": "text", "text": "API Error: overloaded"}], "id": "msg_x"}
    stream.insert(
        3,
        {
            "type": "assistant",
            "message": failed,
            "parent_tool_use_id": None,
            "session_id": "cc-1",
            "error": "overloaded",
        },
    )
    stream.append({"type": "result", "subtype": "success", "is_error": False, "num_turns": 3, "session_id": "cc-1"})
    path = write(tmp_path / "stream.jsonl", stream)
    assert detect_format(path) == "claude-code"
    main, side = read_sessions(path)
    linked = read_session(DATA / "claude-code.jsonl")

    def untimed(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:  # a stream's lines have no time
        return [{k: v for k, v in m.items() if k != "timestamp"} for m in messages]

    assert untimed(main.messages) == untimed(linked.messages) and paired(main)
    assert (main.session_id, main.cwd) == ("cc-1", "/repo")
    assert side.label == "toolu_task" and "a sidechain" in json.dumps(side.messages)


def test_a_real_session_with_its_sub_agents_files() -> None:
    ts = read_sessions(FA812)
    assert [(t.label, calls(t)) for t in ts] == [(None, 157), ("a93ccab", 11), ("aa84377", 9), ("acompact-70d8e7", 1)]
    assert all(t.session_id == "fa812bfe-b295-4cca-9c2f-fdf01028cb46" and paired(t) for t in ts)
    assert ts[1].source is not None and ts[1].source.endswith("subagents/agent-a93ccab.jsonl")
    main = json.dumps(ts[0].messages)
    # the compaction is crossed (the replay is uncompacted) and its summary message left out
    assert "This session is being continued from a previous conversation" not in main
    assert "Your task is to create a detailed summary" in json.dumps(ts[3].messages)  # the summariser's call
    # a sub-agent's file given alone is one session
    (alone,) = read_sessions(FA812.with_suffix("") / "subagents" / "agent-aa84377.jsonl")
    assert (alone.label, calls(alone)) == (None, 9)


# -- gzip: a compressed session file reads as the text it holds ----------------------------------


def test_a_gzip_compressed_session_reads_as_the_file_it_holds(tmp_path: Path) -> None:
    plain = read_sessions(FA812, sidechains=False)
    packed = tmp_path / "session.jsonl.gz"
    packed.write_bytes(gzip.compress(FA812.read_bytes()))
    assert detect_format(packed) == "claude-code"
    (got,) = read_sessions(packed, sidechains=False)
    assert got.messages == plain[0].messages and got.session_id == plain[0].session_id
    # known by its first bytes, not its name; several members read as one text, as gzip -d does
    data = FA812.read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    renamed = tmp_path / "session.log"
    renamed.write_bytes(gzip.compress(data[:cut]) + gzip.compress(data[cut:]))
    assert read_session(renamed).messages == plain[0].messages
    # the sub-agents' files beside a compressed main file are found as beside a plain one
    beside = tmp_path / "fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl.gz"
    beside.write_bytes(gzip.compress(data))
    (tmp_path / "fa812bfe-b295-4cca-9c2f-fdf01028cb46").symlink_to(FA812.with_suffix(""))
    assert [t.label for t in read_sessions(beside)] == [t.label for t in read_sessions(FA812)]


def test_a_compressed_sessions_compressed_sub_agents_files_are_found(tmp_path: Path) -> None:
    # a session kept compressed whole (gzip -r): its sub-agents' files are agent-*.jsonl.gz
    plain = read_sessions(FA812)
    packed = tmp_path / (FA812.name + ".gz")
    packed.write_bytes(gzip.compress(FA812.read_bytes()))
    (tmp_path / FA812.stem / "subagents").mkdir(parents=True)
    for sub in (FA812.with_suffix("") / "subagents").glob("agent-*.jsonl"):
        (tmp_path / FA812.stem / "subagents" / (sub.name + ".gz")).write_bytes(gzip.compress(sub.read_bytes()))
    got = read_sessions(packed)
    assert [t.label for t in got] == [t.label for t in plain] == [None, "a93ccab", "aa84377", "acompact-70d8e7"]
    assert [t.messages for t in got] == [t.messages for t in plain]


def test_a_sub_agents_file_that_cannot_be_read_is_left_out_with_a_note(tmp_path: Path) -> None:
    # one sub-agent's file left empty (a crash before its first line was written) refused the
    # whole read: the main session and every other sub-agent with it
    import shutil

    main = tmp_path / FA812.name
    shutil.copy(FA812, main)
    shutil.copytree(FA812.with_suffix("") / "subagents", tmp_path / FA812.stem / "subagents")
    (tmp_path / FA812.stem / "subagents" / "agent-acompact-70d8e7.jsonl").write_bytes(b"")
    got = read_sessions(main)
    plain = read_sessions(FA812)
    assert [t.label for t in got] == [None, "a93ccab", "aa84377"]
    assert [t.messages for t in got] == [t.messages for t in plain[:3]]
    (note,) = got[0].notes
    assert note.startswith("a sub-agent's file was left out: ") and "agent-acompact-70d8e7.jsonl" in note


def test_a_gzip_file_is_held_to_the_limit_as_it_inflates(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(b"\n" * 5_000_000))  # 5 MB of text in a few kB
    assert bomb.stat().st_size < 10_000
    with pytest.raises(InputError, match=r"larger than 1,000,000 bytes, the limit for a session file"):
        read_sessions(bomb, max_bytes=1_000_000)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (gzip.compress(b'{"type": "user"}\n' * 1000)[:-20], "a gzip file cut short"),
        (b"\x1f\x8b\x08\x00" + b"\xff" * 40, "not a readable gzip file"),
    ],
    ids=["truncated", "corrupt"],
)
def test_a_damaged_gzip_file_gets_an_input_error(tmp_path: Path, data: bytes, match: str) -> None:
    path = tmp_path / "s.jsonl.gz"
    path.write_bytes(data)
    with pytest.raises(InputError, match=match):
        read_sessions(path)


@pytest.mark.parametrize(
    "path",
    [
        DATA / "branch-v3.jsonl",  # Pi: its header line (the session's id, cwd and version) was lost
        SESSIONS / "tuning" / "openhands" / "resolver.mock_output.output.jsonl",  # its first record was
        SESSIONS / "check" / "swe-agent" / "pydicom__pydicom-1458.traj",  # refused: not JSON
    ],
    ids=["pi", "openhands-records", "swe-agent"],
)
def test_a_byte_order_mark_before_the_text_is_no_part_of_it(tmp_path: Path, path: Path) -> None:
    marked = tmp_path / path.name
    marked.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())  # as an editor saving "UTF-8 with BOM" puts it
    plain = read_sessions(path)
    got = read_sessions(marked)
    assert [(t.format, t.session_id, t.cwd, t.label, t.skipped_lines) for t in got] == [
        (t.format, t.session_id, t.cwd, t.label, t.skipped_lines) for t in plain
    ]
    assert [t.messages for t in got] == [t.messages for t in plain]


@pytest.mark.parametrize(
    "name",
    [
        "check/mini-swe-agent/astropy__astropy-12907.traj.json",
        "check/swe-agent/pydicom__pydicom-1458.traj",
        "check/gemini-cli/aim-matrix-flash-run4-success.json.gz",
    ],
)
def test_a_json_document_cut_short_is_refused_for_what_is_wrong_with_it(tmp_path: Path, name: str) -> None:
    # a pretty-printed document whose end is lost (a run killed while it wrote): its first line
    # "{" is no JSON line, so it is no file of JSON lines whose line 1 (or a later one) is broken
    data = (SESSIONS / name).read_bytes()
    data = gzip.decompress(data) if name.endswith(".gz") else data
    path = tmp_path / Path(name).name.removesuffix(".gz")
    path.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: not JSON \(.*: line \d+ column \d+"):
        read_sessions(path)


def test_claude_code_links_lost_by_claude_code_are_bridged() -> None:
    """4d5611e5: its compaction boundary names a parent the file lacks; every reply is still read,
    and the results of parallel tool calls (off the chain) follow their call."""
    path = SESSIONS / "tuning" / "claude-code" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    t = read_session(path)
    entries = [json.loads(x) for x in path.read_text().splitlines()]
    replies = {e["message"]["id"] for e in entries if e["type"] == "assistant"}
    assert calls(t) == len(replies) == 139 and paired(t)


# -- SWE-agent ------------------------------------------------------------------------------------


def test_swe_agent_function_calling_trajectory() -> None:
    t = read_session(SESSIONS / "check" / "swe-agent" / "pydantic__pydantic.acb0f10f.pr_8316.traj")
    assert (t.format, t.harness, t.tool_names, t.cwd, calls(t)) == ("swe-agent", "openai", "swe-agent", "/testbed", 22)
    assert [m["role"] for m in t.messages[:4]] == ["system", "user", "assistant", "tool"] and paired(t)
    names = [c["function"]["name"] for m in t.messages for c in m.get("tool_calls") or ()]
    assert set(names) == {"bash", "str_replace_editor", "submit"}
    assert t.messages[3]["content"].startswith("OBSERVATION:\n")  # the text of its content blocks


def test_a_swe_agent_step_its_history_lacks_is_a_call_all_the_same(tmp_path: Path) -> None:
    """Some SWE-agent 1.x runs leave the last step (the ``submit`` call) out of ``history``; the
    trajectory has it, and the model was called for it, with the whole history as its input."""
    doc = json.loads((SESSIONS / "check" / "swe-agent" / "pydantic__pydantic.acb0f10f.pr_8316.traj").read_text())
    while doc["history"][-1]["role"] != "assistant":
        doc["history"].pop()
    doc["history"].pop()  # the submit reply, and its answer before it
    path = tmp_path / "short.traj"
    path.write_text(json.dumps(doc))
    t = read_session(path)
    assert calls(t) == 22 and paired(t)
    last = t.messages[-2]
    assert last["role"] == "assistant" and [c["function"]["name"] for c in last["tool_calls"]] == ["submit"]


def test_a_mini_swe_agent_trajectory_is_read_without_its_exit_message() -> None:
    """mini-swe-agent 2.x: its one tool, ``bash``; the final ``exit`` message (the submission) was
    never sent, and the fields the API does not take (``extra``) are left out."""
    path = SESSIONS / "check" / "mini-swe-agent" / "astropy__astropy-12907.traj.json"
    t = read_session(path)
    assert (detect_format(path), t.format, t.harness, t.tool_names) == (
        "mini-swe-agent", "mini-swe-agent", "openai", "swe-agent"
    )  # fmt: skip
    raw = json.loads(path.read_text())["messages"]
    assert raw[-1]["role"] == "exit" and calls(t) == sum(m["role"] == "assistant" for m in raw) == 64 and paired(t)
    assert {k for m in t.messages for k in m} <= {"role", "content", "tool_calls", "tool_call_id"}
    assert {c["function"]["name"] for m in t.messages for c in m.get("tool_calls") or ()} == {"bash"}


def test_mini_swe_agent_actions_in_text_become_tool_calls(tmp_path: Path) -> None:
    """Its text mode: one bash block per reply is the call, the next ``<returncode>`` message its
    result; a reply the agent refused (no block, or two) stays a message, its answer the user's."""
    messages = json.loads((SESSIONS / "check" / "mini-swe-agent" / "github_issue.traj.json").read_text())
    two = {"role": "assistant", "content": "Two:\n\n```bash\nls\n```\n\n```bash\npwd\n```"}
    refused = {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks."}
    doc = {
        "info": {},
        "trajectory_format": "mini-swe-agent-1",
        "messages": [*messages[:2], two, refused, *messages[2:]],
    }
    path = tmp_path / "text.traj.json"
    path.write_text(json.dumps(doc))
    t = read_session(path)
    assert (
        t.format == "mini-swe-agent"
        and paired(t)
        and calls(t) == sum(m["role"] == "assistant" for m in doc["messages"])
    )
    assert [m["role"] for m in t.messages[:7]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    first = t.messages[4]
    assert first["content"].startswith("I'll help you solve this issue.") and "```" not in first["content"]
    (call,) = first["tool_calls"]
    assert json.loads(call["function"]["arguments"])["command"].startswith("cat /Users/")
    assert t.messages[5]["content"].startswith("<returncode>1</returncode>")


@pytest.mark.parametrize(
    ("version", "fence", "answer"),
    [
        (
            "mini-swe-agent-1",
            "bash",
            "The last command <command>pytest</command> timed out and has been killed.\n"
            "The output of the command was:\n <output>\n\n</output>\nPlease try another command.",
        ),
        (
            "mini-swe-agent-1.1",
            "mswea_bash_command",
            "<exception>Command 'pytest' timed out after 60 seconds</exception>\n"
            "<returncode>-1</returncode>\n<output>\n\n</output>",
        ),
    ],
    ids=["1.x-timeout", "2.x-exception"],
)
def test_a_mini_swe_agent_command_that_timed_out_is_a_call_answered_by_its_note(
    tmp_path: Path, version: str, fence: str, answer: str
) -> None:
    # the answer to a one-block reply is its result whatever it says: a command that timed out
    # (its answer no <returncode> first) was dropped, the reply left a message of its text alone
    messages = [
        {"role": "system", "content": "You can run commands."},
        {"role": "user", "content": "Please solve this issue: fix a.py"},
        {"role": "assistant", "content": f"THOUGHT: test it.\n\n```{fence}\npytest\n```"},
        {"role": "user", "content": answer},
        {
            "role": "assistant",
            "content": f"THOUGHT: done.\n\n```{fence}\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
        },
        {
            "role": "user",
            "content": "<returncode>0</returncode>\n<output>\nCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n</output>",
        },
        {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}},
    ]
    path = tmp_path / "t.traj.json"
    path.write_text(json.dumps({"info": {}, "trajectory_format": version, "messages": messages}))
    t = read_session(path)
    assert [m["role"] for m in t.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    (call,) = t.messages[2]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"command": "pytest"}
    assert (t.messages[3]["tool_call_id"], t.messages[3]["content"]) == (call["id"], answer) and paired(t)


@pytest.mark.timeout(120)
def test_a_mini_swe_agent_reply_of_many_unclosed_blocks_is_read_in_linear_time(tmp_path: Path) -> None:
    """Each opening fence with no closing one after it was looked for to the end of the reply: a
    reply of 150,000 of them (a model's looping output) took about half an hour before the replay
    began, 72 kB 7.6 s. It is read as before: no block in it, so a message, not a call."""
    messages = json.loads((SESSIONS / "check" / "mini-swe-agent" / "github_issue.traj.json").read_text())
    looping = {"role": "assistant", "content": "Again:\n" + "```bash\n x" * 150_000}
    doc = {"info": {}, "trajectory_format": "mini-swe-agent-1", "messages": [*messages[:2], looping]}
    path = tmp_path / "looping.traj.json"
    path.write_text(json.dumps(doc))
    t = read_session(path)
    assert t.format == "mini-swe-agent" and t.messages[2] == looping


def test_swe_agent_0x_actions_parsed_from_text_become_tool_calls() -> None:
    t = read_session(SESSIONS / "check" / "swe-agent" / "pydicom__pydicom-1458.traj")
    assert (t.format, t.cwd, calls(t)) == ("swe-agent-text", "/pydicom__pydicom", 12) and paired(t)
    names = [c["function"]["name"] for m in t.messages for c in m.get("tool_calls") or ()]
    assert names[:5] == ["create", "edit", "bash", "find_file", "open"] and names[-1] == "submit"
    assert t.messages[4]["role"] == "tool" and t.messages[4]["content"].startswith("[File: /pydicom__pydicom/")
    assert "```" not in t.messages[3]["content"]  # the reply's thought; the action is the call


@pytest.mark.parametrize(
    ("action", "call"),
    [
        ("open pydicom/x.py 293\n", ("open", {"path": "pydicom/x.py", "line_number": 293})),
        ('find_file "numpy_handler.py"', ("find_file", {"file_name": "numpy_handler.py"})),
        (
            "edit 3:4\n    a = 1\nb = 2\nend_of_edit\n",
            ("edit", {"start_line": 3, "end_line": 4, "replacement_text": "    a = 1\nb = 2"}),
        ),
        ("scroll_down", ("scroll_down", {})),
        ("python reproduce.py", ("bash", {"command": "python reproduce.py"})),
        ("open 'unbalanced", ("open", {"path": "'unbalanced"})),
        ("submit", ("submit", {})),
        ("set_cursors 3 4", ("set_cursors", {"start_line": 3, "end_line": 4})),
        ("edit\n    a = 1\nend_of_edit\n", ("edit", {"replacement_text": "    a = 1"})),
        ("edit", ("bash", {"command": "edit"})),
    ],
)
def test_text_actions(action: str, call: tuple[str, dict[str, Any]]) -> None:
    assert text_action(action) == call


def test_a_swe_agent_0x_cursors_trajectory_reads_its_windows_and_edits_the_selection(db) -> None:
    # a real 0.x run of a cursors configuration (tests/replay/data/swe-agent-cursors): its windows
    # mark the selection with lines of their own, set_cursors shows a window, and an edit without
    # a range replaces the selection (refused once for a syntax error, then made)
    t = read_session(DATA / "swe-agent-cursors" / "marshmallow-code__marshmallow-1867.traj")
    names = [c["function"]["name"] for m in t.messages for c in m.get("tool_calls") or ()]
    assert names == ["create", "edit", "open", "set_cursors", "edit", "edit"] and paired(t)
    args = [json.loads(c["function"]["arguments"]) for m in t.messages for c in m.get("tool_calls") or ()]
    assert args[3] == {"start_line": 1475, "end_line": 1475} and set(args[5]) == {"replacement_text"}
    session = Session.open(db, "cursors", harness=t.harness, workspace=t.cwd)
    r = replay_transcript(t, session, verify="all")
    assert r.orphaned_tool_results == 0 and r.frames_verified == r.frames == r.turns == 6
    assert (r.files, r.edits_total, r.edits_with_target_active) == (2, 3, 3)
    files = {o.meta["path"]: o for o in session.view.objects.values() if o.kind == "file"}
    fields = files["src/marshmallow/fields.py"].content or ""
    assert "<<<<<" not in fields and "\n1475:" not in fields
    assert "repro" not in fields and files["reproduce.py"].content == (
        "from marshmallow.fields import TimeDelta\nfrom datetime import timedelta\n\n"
        'td_field = TimeDelta(precision="milliseconds")\n\nobj = dict()\n'
        'obj["td_field"] = timedelta(milliseconds=345)\n\nprint(td_field.serialize("td_field", obj))'
    )


def swe_trajectory(path: Path) -> Path:
    def call(k: int, **args: Any) -> dict[str, Any]:
        return {
            "id": f"c{k}",
            "type": "function",
            "function": {"name": "str_replace_editor", "arguments": json.dumps(args)},
        }

    view = (
        "OBSERVATION:\nHere's the result of running `cat -n` on /testbed/a.py:\r\n"
        "     1\tdef f():\r\n     2\t    return 1\r\n     3\n"
    )
    history = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": [{"type": "text", "text": "<uploaded_files>\n/testbed\n</uploaded_files>\nfix f"}]},
        {"role": "assistant", "content": "look", "tool_calls": [call(1, command="view", path="/testbed/a.py")]},
        {"role": "tool", "content": [{"type": "text", "text": view}], "tool_call_ids": ["c1"]},
        {
            "role": "assistant",
            "content": "fix",
            "tool_calls": [
                call(2, command="str_replace", path="/testbed/a.py", old_str="return 1", new_str="return 2")
            ],
        },
        {
            "role": "tool",
            "content": "OBSERVATION:\nThe file /testbed/a.py has been edited. Here's ...",
            "tool_call_ids": ["c2"],
        },
        {
            "role": "assistant",
            "content": "add",
            "tool_calls": [call(3, command="insert", path="/testbed/a.py", insert_line=0, new_str="import os")],
        },
        {
            "role": "tool",
            "content": "OBSERVATION:\nThe file /testbed/a.py has been edited. Here's ...",
            "tool_call_ids": ["c3"],
        },
        {"role": "assistant", "content": "done"},
    ]
    path.write_text(json.dumps({"trajectory": [], "history": history, "info": {}}, indent=2))
    return path


def test_a_str_replace_editor_edit_becomes_a_file_version(db, tmp_path: Path) -> None:
    t = read_session(swe_trajectory(tmp_path / "x.traj"))
    assert (t.format, t.cwd, t.session_id) == ("swe-agent", "/testbed", "x")
    session = Session.open(db, "swe", harness=t.harness, workspace=t.cwd)
    r = replay_transcript(t, session, verify="all")
    assert r.orphaned_tool_results == 0 and r.frames_verified == r.frames == r.turns == 4
    assert (r.edits_total, r.edits_with_target_active, r.files, r.file_versions) == (2, 2, 1, 3)
    (f,) = [o for o in session.view.objects.values() if o.kind == "file"]
    assert f.meta["path"] == "a.py" and f.content == "import os\ndef f():\n    return 2\n"


def test_swe_agent_demonstrations_in_its_history_are_input_not_model_calls(db, tmp_path: Path) -> None:
    # put_demos_in_history: SWE-agent puts a solved example's messages (is_demo) in the history
    # before the task; they were sent with every call, but no model was called for their replies,
    # and their edits (of another repository) are not the session's
    path = swe_trajectory(tmp_path / "x.traj")
    doc = json.loads(path.read_text())
    edit = {"command": "str_replace", "path": "/demo/fields.py", "old_str": "round(", "new_str": "int(round("}
    call = {"id": "d1", "type": "function", "function": {"name": "str_replace_editor", "arguments": json.dumps(edit)}}
    demo = [
        {"role": "user", "content": "<uploaded_files>\n/demo\n</uploaded_files>\nDEMO ISSUE"},
        {"role": "assistant", "content": "fix the rounding", "tool_calls": [call]},
        {"role": "tool", "content": "OBSERVATION:\nThe file /demo/fields.py has been edited.", "tool_call_ids": ["d1"]},
        {"role": "assistant", "content": "done"},
    ]
    doc["history"][1:1] = [{**m, "is_demo": True} for m in demo]
    path.write_text(json.dumps(doc))
    t = read_session(path)
    assert (t.inherited, t.cwd, t.messages[t.inherited]["role"]) == (5, "/testbed", "user")
    assert t.info == [
        "its first 5 messages are the system prompt and the demonstrations SWE-agent put in its history "
        "(put_demos_in_history): the input of its calls, whose own replies are no model calls of it"
    ]
    r = replay_transcript(t, Session.open(db, "swe", harness=t.harness, workspace=t.cwd), verify="all")
    assert r.orphaned_tool_results == 0 and r.frames_verified == r.frames == r.turns == 4
    assert (r.edits_total, r.edits_with_target_active) == (2, 2)


# -- OpenHands ------------------------------------------------------------------------------------


def test_openhands_output_records_are_sessions_of_their_own() -> None:
    ts = read_sessions(SESSIONS / "check" / "openhands" / "multi_swe_bench.examples.output.jsonl")
    assert [(t.label, calls(t)) for t in ts] == [
        ("ponylang__ponyc-4595", 23),
        ("ponylang__ponyc-4593", 33),
        ("ponylang__ponyc-4588", 49),
    ]
    t = ts[0]
    assert (t.format, t.harness, t.tool_names, t.cwd) == (
        "openhands",
        "openai",
        "openhands",
        "/workspace/ponylang__ponyc__0.1",
    )
    assert all(paired(t) for t in ts)
    assert t.messages[0]["role"] == "system" and t.messages[1]["role"] == "user"
    run = next(m for m in t.messages if m["role"] == "tool" and "[Command finished with exit code" in m["content"])
    assert "[Current working directory: /workspace/ponylang__ponyc__0.1]" in run["content"]
    assert t.messages[-1]["role"] == "assistant" and not t.messages[-1].get("tool_calls")  # finish: its text


def test_openhands_event_lists_and_the_older_format() -> None:
    t = read_session(SESSIONS / "check" / "openhands" / "runtime_trajs.basic_interactions.json")
    assert [m["role"] for m in t.messages] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert (t.label, calls(t)) == (None, 3)
    old = read_sessions(SESSIONS / "tuning" / "openhands" / "resolver.mock_output.output.jsonl")
    assert [(t.label, calls(t)) for t in old] == [("issue-5", 4), ("issue-1", 22)]
    names = {c["function"]["name"] for m in old[1].messages for c in m.get("tool_calls") or ()}
    assert names == {"execute_bash", "execute_ipython_cell"} and all(paired(t) for t in old)


def test_opendevins_records_of_action_observation_pairs(tmp_path: Path) -> None:
    """OpenDevin (mid 2024) kept a record's history as ``[action, observation]`` pairs, its id in
    ``id``: the same events, in the same order."""
    path = SESSIONS / "check" / "openhands" / "runtime_trajs.basic_interactions.json"
    events = json.loads(path.read_text())
    null = {"message": "No observation", "observation": "null", "content": "", "extras": {}}
    pairs = [[e, null] for e in events]
    (tmp_path / "output.jsonl").write_text(json.dumps({"id": "ProntoQA_1", "history": pairs}) + "\n")
    (t,) = read_sessions(tmp_path / "output.jsonl")
    assert t.label == "ProntoQA_1" and t.messages == read_session(path).messages


V1 = DATA / "openhands-v1"


def test_an_openhands_v1_conversation_directory_is_its_session(db) -> None:
    """OpenHands V1 (the software agent SDK) keeps a conversation as a directory of events, one
    file each: the messages the SDK sends its model (its ``events_to_messages``), replayed."""
    t = read_session(V1 / "sdk-terminal")
    assert (t.format, t.tool_names, t.session_id, t.cwd) == (
        "openhands", "openhands", "cd945624-03b9-487e-bdd4-018e3f531dfd", "/workspace/project/software-agent-sdk"
    )  # fmt: skip
    assert [m["role"] for m in t.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",
        "assistant",
    ]
    assert paired(t) and calls(t) == 3
    ran = t.messages[3]["content"]  # a command's output as the SDK sends it: its metadata after it
    assert ran.endswith("[Command finished with exit code 0]") and "[Current working directory: " in ran
    # the SDK's first schema (LiteLLM calls, observations' `output`): the same reading
    first = read_session(V1 / "benchmarks-swebench" / "events")
    names = {c["function"]["name"] for m in first.messages for c in m.get("tool_calls") or ()}
    assert names == {"think", "str_replace_editor", "execute_bash"} and paired(first) and calls(first) == 23
    r = replay_transcript(first, Session.open(db, "v1", harness=first.harness, workspace=first.cwd))
    assert r.frames_verified == r.turns == 23 and r.orphaned_tool_results == 0 and r.files > 0


def test_openhands_v1_events_as_a_list_or_lines(tmp_path: Path) -> None:
    events = [json.loads(f.read_text()) for f in sorted((V1 / "sdk-terminal" / "events").glob("event-*.json"))]
    (tmp_path / "events.json").write_text(json.dumps(events))
    listed = read_session(tmp_path / "events.json")
    lines = read_session(write(tmp_path / "events.jsonl", events))
    assert listed.messages == lines.messages == read_session(V1 / "sdk-terminal").messages
    not_one = tmp_path / "empty"
    not_one.mkdir()
    with pytest.raises(FileUnreadable, match="is a directory"):
        read_session(not_one)
    damaged = tmp_path / "conversation" / "events"
    damaged.mkdir(parents=True)
    (damaged / "event-00000-a.json").write_text(json.dumps(events[0]))
    (damaged / "event-00001-b.json").write_text('{"kind": "MessageEvent", ')
    with pytest.raises(InputError, match=r"event-00001-b\.json: not JSON"):
        read_session(damaged.parent)
    with pytest.raises(InputError, match="larger than 100 bytes, the limit"):
        read_sessions(V1 / "sdk-terminal", max_bytes=100)


def test_a_symlink_to_an_openhands_v1_conversation_directory_reads_as_it(tmp_path: Path) -> None:
    """A link to a conversation directory was refused (``is a directory``), where a link to a
    session file reads as the file."""
    (tmp_path / "conversation").symlink_to((V1 / "sdk-terminal").resolve(), target_is_directory=True)
    (tmp_path / "events").symlink_to((V1 / "sdk-terminal" / "events").resolve(), target_is_directory=True)
    plain = read_session(V1 / "sdk-terminal").messages
    assert read_session(tmp_path / "conversation").messages == plain
    assert read_session(tmp_path / "events").messages == plain


def test_an_openhands_condensation_is_no_model_call(tmp_path: Path) -> None:
    """The condenser's ``condensation`` action (events forgotten from then on, a summary in their
    place) is no message: the replay is uncompacted, every call's input all that came before."""
    path = SESSIONS / "check" / "openhands" / "runtime_trajs.basic_interactions.json"
    events = json.loads(path.read_text())
    condensed = {
        "id": 99,
        "timestamp": "2025-05-14T03:14:13.869422",
        "source": "agent",
        "message": "Summary: the user said hello",
        "action": "condensation",
        "args": {"forgotten_events_start_id": 1, "forgotten_events_end_id": 2, "summary": "hello", "summary_offset": 1},
    }
    (tmp_path / "condensed.json").write_text(json.dumps([*events[:3], condensed, *events[3:]]))
    t = read_session(tmp_path / "condensed.json")
    assert t.messages == read_session(path).messages


def test_an_openhands_str_replace_edit_becomes_a_file_version(db, tmp_path: Path) -> None:
    def action(k: int, rid: str, thought: str, **args: Any) -> dict[str, Any]:
        call = {
            "id": f"t{k}",
            "type": "function",
            "function": {"name": "str_replace_editor", "arguments": json.dumps(args)},
        }
        message = {"role": "assistant", "content": thought, "tool_calls": [call]}
        response = {"id": rid, "choices": [{"message": message}]}
        tcm = {"function_name": "str_replace_editor", "tool_call_id": f"t{k}", "model_response": response}
        return {"id": 2 * k, "source": "agent", "action": "edit", "args": args, "tool_call_metadata": tcm}

    def observation(k: int, content: str) -> dict[str, Any]:
        tcm = {"function_name": "str_replace_editor", "tool_call_id": f"t{k}", "model_response": {"id": "x"}}
        return {
            "id": 2 * k + 1,
            "source": "agent",
            "cause": 2 * k,
            "observation": "edit",
            "content": content,
            "tool_call_metadata": tcm,
        }

    events = [
        {"id": 0, "source": "user", "action": "message", "args": {"content": "fix a.py"}},
        action(1, "r1", "look", command="view", path="/w/a.py"),
        {"id": 9, "source": "environment", "observation": "agent_state_changed", "content": ""},
        observation(1, "Here's the result of running `cat -n` on /w/a.py:\n     1\tx = 1\n     2\t\n"),
        action(2, "r2", "fix", command="str_replace", path="/w/a.py", old_str="x = 1", new_str="x = 2"),
        observation(2, "The file /w/a.py has been edited. Here's the result of running `cat -n` on a snippet"),
        action(3, "r3", "again", command="str_replace", path="/w/a.py", old_str="y", new_str="z"),
        observation(3, "ERROR:\nNo replacement was performed, old_str `y` did not appear verbatim in /w/a.py."),
        {"id": 20, "source": "agent", "action": "finish", "args": {"thought": "Done."}},
    ]
    p = tmp_path / "events.json"
    p.write_text(json.dumps(events))
    t = read_session(p)
    assert [m["role"] for m in t.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    session = Session.open(db, "oh", harness=t.harness, workspace=t.cwd)
    r = replay_transcript(t, session, verify="all")
    assert r.orphaned_tool_results == 0 and r.frames_verified == r.frames == r.turns == 4
    assert (r.edits_total, r.files, r.file_versions) == (2, 1, 2)  # the failed edit left the file as it was
    (f,) = [o for o in session.view.objects.values() if o.kind == "file"]
    assert f.content == "x = 2\n"


# -- the wrong shape ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fmt", "match"),
    [
        (
            '{\n  "model": "x",\n  "messages": []\n}\n',
            None,
            r"one JSON object with keys \['messages', 'model'\]: not a session this reads "
            r"\(Pi, Claude Code, Codex CLI, Gemini CLI, SWE-agent, mini-swe-agent, OpenHands, Cline, OpenCode, "
            r"OpenAI, Anthropic or LangChain messages\)",
        ),
        ('"just text"', None, "one JSON string: not a session this reads"),
        ("null", None, "one JSON null: not a session this reads"),
        ("[1, 2]", None, r"a JSON list of 2 items \(number\): expected a JSON list of message objects"),
        (
            '[{"ts": 1, "type": "say", "say": "task", "text": "hi"}, {"ts": 2, "type": "ask", "ask": "tool"}]',
            None,
            r"a JSON list of 2 items \(object\): Cline's ui_messages.json \(what its window shows, not what the model "
            r"was sent\), not the session: replay api_conversation_history.json beside it",
        ),
        (
            '{\n  "files_in_context": [],\n  "model_usage": [],\n  "environment_history": []\n}\n',
            None,
            r"model_usage'\]: Cline's task_metadata.json, not the session: replay api_conversation_history.json beside",
        ),
        ('[{"kind": "request", "parts": []}]', None, r"a JSON list of 1 items \(object\): not a session this reads"),
        ('{"history": [{"role": "user", "content": 5}]}', None, r"history\[0\]: content must be a string or a list"),
        ('{"history": [{"role": "wizard"}]}', None, "unknown role 'wizard'"),
        ('[{"action": "run", "args": {}}, 7]', None, "event 1: expected an event object, got number"),
        ('{"type": "session", "version": 3}\n', "swe-agent", r"\['type', 'version'\]: not a SWE-agent trajectory"),
        ("[]", "pi", r"a JSON list of 0 items \(empty\): not a Pi session"),
        ('{"instance_id": "a", "history": 3}\n{"instance_id": "b"}\n', "openhands", "not an OpenHands record"),
    ],
)
def test_a_file_of_the_wrong_shape_names_what_it_found(tmp_path: Path, text: str, fmt: str | None, match: str) -> None:
    p = tmp_path / "x.json"
    p.write_text(text)
    with pytest.raises(InputError, match=match) as e:
        read_sessions(p, fmt)
    assert str(p) in str(e.value)


def lines(*rows: Any) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


CC_ASK = {
    "parentUuid": None,
    "sessionId": "s",
    "uuid": "u1",
    "type": "user",
    "message": {"role": "user", "content": "hi"},
}


def cc_reply(message_id: Any, content: list[Any]) -> dict[str, Any]:
    message = {"id": message_id, "role": "assistant", "content": content}
    return {"parentUuid": "u1", "sessionId": "s", "uuid": "u2", "type": "assistant", "message": message}


def tool_use(call_id: Any, name: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": {}}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (lines(CC_ASK, cc_reply(["msg_1"], [])), r": entry 'u2': message.id must be a string, not list$"),
        (
            lines(CC_ASK, cc_reply("msg_1", [tool_use({}, "Read")])),
            r": entry 'u2': a tool_use block's id must be a string, not object$",
        ),
        (
            lines(
                CC_ASK,
                cc_reply("msg_1", [tool_use("t1", "Read")]),
                {
                    "parentUuid": "u2",
                    "sessionId": "s",
                    "uuid": "u3",
                    "type": "user",
                    "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": ["t1"]}]},
                },
            ),
            r": entry 'u3': a tool_result block's tool_use_id must be a string, not list$",
        ),
        (
            lines(
                {"sessionId": "s", "projectHash": "h"},
                {"id": "u", "type": "user", "content": "go"},
                {
                    "id": "g",
                    "type": "gemini",
                    "content": "",
                    "toolCalls": [
                        {
                            "id": "c1",
                            "name": "read_file",
                            "args": {},
                            "result": [{"functionResponse": {"id": ["c1"], "name": "read_file", "response": {}}}],
                        }
                    ],
                },
            ),
            r":3: message 'g': a functionResponse's id must be a string, not list$",
        ),
        (
            json.dumps(
                [
                    {"role": "user", "content": [{"type": "text", "text": "read a.py"}]},
                    {"role": "assistant", "content": [tool_use("t1", "read_file"), tool_use("t2", [None])]},
                    {"role": "user", "content": [{"type": "text", "text": "[read_file for 'a.py'] Result:\nx"}]},
                ]
            ),
            r": message 1: a tool_use block's name must be a string, not list$",
        ),
        (
            json.dumps([{"kind": "MessageEvent", "source": "user", "llm_message": {"role": "user", "content": 7}}]),
            r": event 0: llm_message.content must be a string or a list of content parts, not number$",
        ),
    ],
    ids=[
        "claude-code-message-id",
        "claude-code-tool-use-id",
        "claude-code-tool-use-id-of-a-result",
        "gemini-cli-function-response-id",
        "cline-tool-use-name",
        "openhands-v1-content",
    ],
)
def test_a_field_of_the_wrong_type_is_an_input_error_naming_it(tmp_path: Path, text: str, match: str) -> None:
    # each raised a TypeError from deep in its reader (unhashable type: 'list'; 'int' object is not
    # iterable): a traceback, where every other malformed field is an InputError naming it
    p = tmp_path / "x.json"
    p.write_text(text)
    with pytest.raises(InputError, match=match) as e:
        read_sessions(p)
    assert str(e.value).startswith(str(p))


def test_a_qwen_code_session_is_refused_not_read_as_claude_codes(tmp_path: Path) -> None:
    """Qwen Code's session lines have Claude Code's envelope around Gemini API messages: read as
    Claude Code's, they replayed calls of nothing; refused, saying what they are."""
    envelope = {"uuid": "u1", "parentUuid": None, "sessionId": "s", "cwd": "/work", "version": "0.24.4"}
    lines = [
        {**envelope, "type": "user", "message": {"role": "user", "parts": [{"text": "fix f7"}]}},
        {**envelope, "uuid": "u2", "parentUuid": "u1", "type": "assistant", "message": {"role": "model", "parts": []}},
    ]  # fmt: skip
    path = tmp_path / "qwen.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(InputError, match=r"qwen\.jsonl:1: a Qwen Code session .*not a format ctxos replay reads yet"):
        read_sessions(path)

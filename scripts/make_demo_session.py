"""Build the demo session that ``ctxos demo`` replays, from a real Pi coding-agent session.

Usage::

    .venv/bin/python scripts/make_demo_session.py path/to/before-compaction.jsonl

The source is ``packages/coding-agent/test/fixtures/before-compaction.jsonl`` from the pi-mono
repository (MIT, Mario Zechner), in Pi session format v1: one JSON entry per line, messages as
``{"type": "message", "message": {"role": ...}}``. This script turns a prefix of it into a list of
OpenAI chat-completions messages and writes ``src/context_os/data/demo_session.json`` and the
licence file beside it. It is run by hand when the demo changes, never by the library or tests.

What the conversion keeps and drops:

* user text, assistant text and tool calls, tool results (text blocks only);
* thinking blocks, ``bashExecution`` messages (user-run shell commands), compaction, model and
  thinking-level entries are dropped, as are assistant turns left empty by that (aborted ones);
* a tool call without its result (or a result without its call) is dropped, so the output obeys
  the provider rule that every tool call is answered;
* the author's workspace path is replaced by ``/workspace/pi-mono``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "src" / "context_os" / "data"

USER_TURNS = 10
"""How many user turns of the source to keep; the cut falls just before the next user message."""

ORIGINAL_ROOT = "/Users/badlogic/workspaces/pi-mono"
DEMO_ROOT = "/workspace/pi-mono"

SYSTEM_PROMPT = f"""\
You are an expert coding assistant working in the repository at {DEMO_ROOT}, a TypeScript \
monorepo (packages: ai, agent, tui, coding-agent, ...).

Tools:
- read(path, offset?, limit?): read a file; long files are truncated, use offset/limit to page.
- edit(path, oldText, newText): replace exactly one occurrence of oldText in a file.
- write(path, content): create or overwrite a file.
- bash(command): run a shell command in the repository (grep, git, npm run check, tests).

Guidelines:
- Read the code before you change it; prefer small, exact edits over rewriting files.
- Run `npm run check` after changes and fix what it reports.
- Be concise. Show file paths clearly when you refer to code.
"""


def _fix_paths(value: Any) -> Any:
    """Replace the author's workspace path in every string inside ``value``."""
    if isinstance(value, str):
        return value.replace(ORIGINAL_ROOT, DEMO_ROOT)
    if isinstance(value, dict):
        return {k: _fix_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fix_paths(v) for v in value]
    return value


def _text_of(content: Any) -> str:
    """The text of a Pi content field: a string, or a list of blocks of which text is kept."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if block.get("type") == "text":
            parts.append(block["text"])
        elif block.get("type") == "image":
            parts.append("[image omitted]")
    return "\n\n".join(parts)


def convert(entries: list[dict[str, Any]], user_turns: int) -> list[dict[str, Any]]:
    """OpenAI messages for the first ``user_turns`` user turns of a Pi v1 session."""
    out: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    users = 0
    for entry in entries:
        if entry.get("type") != "message":
            continue
        msg = entry["message"]
        role = msg.get("role")
        if role == "user":
            users += 1
            if users > user_turns:
                break
            text = _text_of(msg["content"])
            if text:
                out.append({"role": "user", "content": text})
        elif role == "assistant":
            text = "\n\n".join(b["text"] for b in msg["content"] if b["type"] == "text" and b["text"])
            calls = [
                {
                    "id": b["id"],
                    "type": "function",
                    "function": {
                        "name": b["name"],
                        "arguments": json.dumps(b["arguments"], ensure_ascii=False),
                    },
                }
                for b in msg["content"]
                if b["type"] == "toolCall"
            ]
            if not text and not calls:
                continue  # only thinking, or aborted before any output
            out_msg: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                out_msg["tool_calls"] = calls
            out.append(out_msg)
        elif role == "toolResult":
            out.append({"role": "tool", "tool_call_id": msg["toolCallId"], "content": _text_of(msg["content"])})
        # bashExecution and any other role: not part of the model's conversation here
    fixed: list[dict[str, Any]] = _fix_paths(_pair_tool_calls(out))
    return fixed


def _pair_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop tool calls that have no result after them and results that have no call before them."""
    called: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        if m["role"] == "assistant":
            called.update(c["id"] for c in m.get("tool_calls", []))
        elif m["role"] == "tool" and m["tool_call_id"] in called:
            answered.add(m["tool_call_id"])
    result = []
    for m in messages:
        if m["role"] == "assistant" and "tool_calls" in m:
            calls = [c for c in m["tool_calls"] if c["id"] in answered]
            m = {k: v for k, v in m.items() if k != "tool_calls"}
            if calls:
                m["tool_calls"] = calls
            elif m["content"] is None:
                continue
        elif m["role"] == "tool" and m["tool_call_id"] not in answered:
            continue
        result.append(m)
    return result


def dumps(messages: list[dict[str, Any]]) -> str:
    """One message per line, so that a change to the demo reads well in a diff."""
    return "[\n" + ",\n".join(json.dumps(m, ensure_ascii=False) for m in messages) + "\n]\n"


def stats(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts and sizes: roles, tool calls by name, transcript size vs naive full-history cost."""
    sizes = [len(json.dumps(m, ensure_ascii=False)) for m in messages]
    naive = 0
    model_calls = 0
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            model_calls += 1
            naive += sum(sizes[:i])
    return {
        "messages": len(messages),
        "by_role": dict(Counter(m["role"] for m in messages)),
        "tool_calls": dict(Counter(c["function"]["name"] for m in messages for c in m.get("tool_calls", []))),
        "model_calls": model_calls,
        "transcript_chars": sum(sizes),
        "transcript_tokens_est": sum(sizes) // 4,
        "naive_input_chars": naive,
        "naive_input_tokens_est": naive // 4,
        "largest_tool_output_chars": max(len(m["content"]) for m in messages if m["role"] == "tool"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="Pi v1 session file (before-compaction.jsonl)")
    parser.add_argument("--licence", type=Path, help="pi-mono's MIT licence (default: LICENSE-pi-mono beside source)")
    parser.add_argument("--user-turns", type=int, default=USER_TURNS)
    parser.add_argument("--out-dir", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)

    entries = [json.loads(line) for line in args.source.read_text("utf-8").splitlines() if line.strip()]
    messages = convert(entries, args.user_turns)
    text = dumps(messages)
    licence = (args.licence or args.source.parent / "LICENSE-pi-mono").read_text("utf-8").rstrip("\n")

    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "demo_session.json").write_text(text, "utf-8")
    (args.out_dir / "LICENSE-demo-session").write_text(
        "demo_session.json is derived from a real session of the Pi coding agent:\n"
        "packages/coding-agent/test/fixtures/before-compaction.jsonl in https://github.com/badlogic/pi-mono\n"
        f"(first {args.user_turns} user turns, converted to OpenAI chat messages by "
        "scripts/make_demo_session.py; system prompt added).\n"
        "It is distributed under the pi-mono licence:\n\n" + licence + "\n",
        "utf-8",
    )
    report = stats(messages)
    report["file_bytes"] = len(text.encode("utf-8"))
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Secrets never reach the store, in every session, by default: without a workspace, through each
place a message carries text (content parts, tool arguments as JSON or as objects, thinking), and
through ``ctxos replay``. Opting out is explicit."""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.harness.openai import OpenAIHook
from context_os.harness.pi import PiHook
from context_os.store.sqlite import SqliteStore
from tests._reliability import Counts
from tests.helpers import call, result, user
from tests.test_redact import AWS_KEY_ID, GITHUB, JWT, PEM

SECRETS = (
    GITHUB,
    JWT,
    JWT.rsplit(".", 1)[1],
    AWS_KEY_ID,
    "hunter2-Secret",
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0t",
)


def stored_text(store: SqliteStore, db: Path) -> str:
    """Every version of every document, as JSON, and the database files' bytes as text."""
    docs = [json.dumps(v.doc) for v in store.iter_versions()]
    docs += [json.dumps(v.doc) for v in store.find()]
    raw = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    return "\n".join(docs) + raw.decode("utf-8", "replace")


def assert_no_secret(text: str) -> None:
    leaked = [s[:12] + "…" for s in SECRETS if s in text]
    assert not leaked, f"stored in plain text: {leaked}"


def count_stored(reliability: Counts, stored: str) -> None:
    """For the reliability report: the secrets sought in one store's text, and how many were there."""
    leaked = sum(s in stored for s in SECRETS)
    reliability.add("attack: secret sent to the store", attempts=len(SECRETS), leaked_into_store=leaked)


def openai_conversation() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a coding agent."},
        user(f"use my token {GITHUB}; the password is hunter2-Secret."),
        {"role": "user", "content": [{"type": "text", "text": f"and this key:\n{PEM}"}]},
        call("c1", "bash", command=f"curl -H 'Authorization: Bearer {JWT}' https://api.example.com/me"),
        result("c1", f'{{"user": "me", "aws": "{AWS_KEY_ID}"}}'),
    ]


def test_a_session_without_a_workspace_stores_no_secret(tmp_path: Path, reliability: Counts) -> None:
    db = tmp_path / "s.db"
    with SqliteStore(db) as store:
        hook = OpenAIHook(Session.open(store, "s1", harness="openai"))
        out = hook.transform_context(openai_conversation())
        assert_no_secret(json.dumps(out))
        assert "[REDACTED:github-token]" in json.dumps(out)
        for f in frame_docs(hook.session.store, hook.session.id):
            assert verify_frame(store, f).ok
        assert store.doc("toolcall:s1:c1")["meta"]["redacted"] == 1
        stored = stored_text(store, db)
        count_stored(reliability, stored)
        assert_no_secret(stored)


def test_pi_tool_arguments_thinking_and_results_are_redacted_and_images_left_alone(
    tmp_path: Path, reliability: Counts
) -> None:
    # encoded bytes are never scanned, even where they happen to read like a key id
    data = base64.b64encode(random.Random(3).randbytes(3000)).decode() + "AKIA" + "Q2W3E4R5T6Y7U8I9" + "AAAA"
    image = {"type": "image", "data": data, "mimeType": "image/png"}
    signature = base64.b64encode(random.Random(4).randbytes(400)).decode()
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": f"deploy with {GITHUB}", "timestamp": 1},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": f"I will send {JWT}", "thinkingSignature": signature},
                {
                    "type": "toolCall",
                    "id": "c1",
                    "name": "bash",
                    "arguments": {"command": f"curl -H 'Authorization: Bearer {JWT}' x"},
                },
            ],
            "timestamp": 2,
        },
        {
            "role": "toolResult",
            "toolCallId": "c1",
            "toolName": "bash",
            "content": [{"type": "text", "text": f"AWS_ACCESS_KEY_ID={AWS_KEY_ID}"}, image],
            "isError": False,
            "timestamp": 3,
        },
    ]
    db = tmp_path / "s.db"
    with SqliteStore(db) as store:
        hook = PiHook(Session.open(store, "p1", harness="pi"))
        out = hook.transform_context(msgs)
        assert_no_secret(json.dumps(out))
        blocks = store.doc("toolcall:p1:c1")["meta"]["blocks"]["content"]
        assert blocks[1] == image  # image data is never scanned or changed
        stored = stored_text(store, db)
        count_stored(reliability, stored)
        assert_no_secret(stored)
        assert signature in stored  # the thinking signature is kept as it came


def test_opting_out_stores_text_as_it_comes(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "s.db") as store:
        hook = OpenAIHook(Session.open(store, "raw", redact=False))
        hook.transform_context([user(f"token {GITHUB}"), call("c1", "bash", command="env"), result("c1", GITHUB)])
        assert GITHUB in store.doc("toolcall:raw:c1")["content"]


def test_a_redact_function_replaces_the_default(tmp_path: Path) -> None:
    def shout(text: str) -> tuple[str, int]:
        return text.replace("quiet", "[REDACTED:quiet]"), text.count("quiet")

    with SqliteStore(tmp_path / "s.db") as store:
        hook = OpenAIHook(Session.open(store, "own", redact=shout))
        hook.transform_context([user("x"), call("c1", "bash", command="env"), result("c1", f"quiet {GITHUB}")])
        doc = store.doc("toolcall:own:c1")
        assert doc["content"] == f"[REDACTED:quiet] {GITHUB}" and doc["meta"]["redacted"] == 1


def test_a_short_string_found_clean_is_not_scanned_again_and_secrets_still_are(tmp_path: Path) -> None:
    seen: list[str] = []

    def counting(text: str) -> tuple[str, int]:
        seen.append(text)
        return text.replace("hunter2", "[REDACTED:pw]"), text.count("hunter2")

    with SqliteStore(tmp_path / "s.db") as store:
        hook = OpenAIHook(Session.open(store, "memo", redact=counting))
        msgs = [user("go")]
        for n in range(3):  # the same command three times, the same short secret-bearing output
            msgs += [call(f"c{n}", "bash", command="ls"), result(f"c{n}", "pw hunter2")]
            hook.transform_context(msgs)
        assert seen.count('{"command": "ls"}') == 1  # clean: scanned once
        assert seen.count("pw hunter2") == 3  # a string with a secret in it is scanned each time
        for n in range(3):
            doc = store.doc(f"toolcall:memo:c{n}")
            assert doc["content"] == "pw [REDACTED:pw]" and doc["meta"]["redacted"] == 1


def pi_session_file(path: Path) -> Path:
    """A small Pi session (format v3) whose messages carry a GitHub token and a JWT bearer header."""
    entries: list[dict[str, Any]] = [
        {"type": "session", "version": 3, "id": "sess-secret", "timestamp": "2025-12-01T10:00:00.000Z", "cwd": "/repo"}
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"push with GITHUB_TOKEN={GITHUB}", "timestamp": 1764583201000},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "toolCall",
                    "id": "c1",
                    "name": "bash",
                    "arguments": {"command": f"curl -H 'Authorization: Bearer {JWT}' https://api.example.com"},
                }
            ],
            "stopReason": "toolUse",
            "timestamp": 1764583202000,
        },
        {
            "role": "toolResult",
            "toolCallId": "c1",
            "toolName": "bash",
            "content": [{"type": "text", "text": f"remote: using {GITHUB}\nAuthorization: Bearer {JWT}\n"}],
            "isError": False,
            "timestamp": 1764583203000,
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Pushed."}],
            "stopReason": "stop",
            "timestamp": 1764583204000,
        },
    ]
    parent = None
    for k, m in enumerate(messages, 1):
        entries.append(
            {
                "type": "message",
                "id": f"m{k}",
                "parentId": parent,
                "timestamp": "2025-12-01T10:00:01.000Z",
                "message": m,
            }
        )
        parent = f"m{k}"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


@pytest.mark.e2e
def test_ctxos_replay_stores_neither_a_github_token_nor_a_jwt(tmp_path: Path, reliability: Counts) -> None:
    session_file = pi_session_file(tmp_path / "session.jsonl")
    db = tmp_path / "replay.db"
    cmd = [
        str(Path(sys.executable).parent / "ctxos"),
        "--store",
        f"sqlite:///{db}",
        "replay",
        "--json",
        str(session_file),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["turns"] == 2
    with SqliteStore(db) as store:
        stored = stored_text(store, db)
        assert "[REDACTED:github-token]" in stored and "[REDACTED:json-web-token]" in stored
    count_stored(reliability, stored)
    assert_no_secret(stored)


def test_url_safe_base64_is_encoded_bytes_too(tmp_path: Path) -> None:
    # pydantic-ai dumps bytes (an image a tool returned) as URL-safe base64: "-" and "_" for
    # "+" and "/"; read as text, a run of it may look like a key id, and redacting it would break
    # the image (the model would get the JSON of a broken one as text)
    from pydantic_ai.messages import BinaryContent, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart

    data = random.Random(3).randbytes(3000) + base64.urlsafe_b64decode("AKIAQ2W3E4R5T6Y7U8I9AAAA")
    image = BinaryContent(data=data, media_type="image/png")
    msgs = [
        ModelRequest.user_text_prompt(f"deploy with {GITHUB}"),
        ModelResponse(parts=[ToolCallPart("screenshot", {}, tool_call_id="c1")]),
        ModelRequest(parts=[ToolReturnPart("screenshot", image, tool_call_id="c1")]),
    ]
    from context_os.harness.pydantic_ai import PydanticAIHook

    with SqliteStore(tmp_path / "s.db") as store:
        hook = PydanticAIHook(Session.open(store, "p1", harness="pydantic-ai"))
        out = hook.transform_context(msgs)
        assert GITHUB not in repr(out)
        shown = out[-1].parts[0]
        assert isinstance(shown.content, BinaryContent) and shown.content.data == data
        assert "redacted" not in store.doc("toolcall:p1:c1")["meta"]


@pytest.mark.parametrize("where", ["across the cut", "its id past the cut"])
def test_a_message_cut_to_the_cap_is_redacted_whole_before(tmp_path: Path, where: str) -> None:
    """A message over ``max_message_chars`` that a session cuts to it (the proxy's) is redacted as
    it came, then cut: cut first, a token the cut went through left its first characters in the
    store (no detector knows the shape any more), and a bare AWS secret key whose key id came
    after the cut was stored whole."""
    from context_os.context.ingest import cut_text
    from context_os.context.policy import RetentionPolicy
    from tests.test_redact import AWS_SECRET

    cap = 1_000
    if where == "across the cut":  # the cut falls 20 characters into the token
        at = len(cut_text("x" * 2 * cap, cap).split("\n")[0]) - 20
        secret, text = GITHUB[:20], "x" * (at - 1) + f" {GITHUB} " + "y" * 400
    else:
        secret, text = AWS_SECRET, "x" * (cap - 300) + f" {AWS_SECRET} " + "y" * 400 + f" id {AWS_KEY_ID}"
    db = tmp_path / "s.db"
    with SqliteStore(db) as store:
        s = Session.open(store, "s1", harness="openai", policy=RetentionPolicy(max_message_chars=cap))
        s.ingest.cut_over_cap = True
        hook = OpenAIHook(s)
        out = hook.transform_context([user("print it"), call("c1", "bash", command="cat log"), result("c1", text)])
        assert s.ingest.cuts == [(2, len(text))]
        stored = store.doc("toolcall:s1:c1")
        assert len(stored["content"]) <= cap and "cut by context_os" in stored["content"]
        assert secret not in json.dumps(out)
        assert secret not in stored_text(store, db)
        s.close()


def test_a_recall_query_holding_a_secret_is_redacted_in_the_hits_it_stores(tmp_path: Path) -> None:
    # The recall tool runs on the model's arguments as the harness gives them, before its call is
    # ingested (and redacted): each hit it stored kept the query in its provenance (meta.query)
    # unredacted, so a token the model searched for was in the store in clear.
    from context_os.context.source_tools import SourceTools
    from context_os.sources.recall import open_recall
    from tests.helpers import say

    db = tmp_path / "s.db"
    with SqliteStore(db) as store:
        s = Session.open(store, "s1", harness="openai")
        hook = OpenAIHook(s)
        SourceTools(s, recall=open_recall(store, None)).register(hook.registry)
        msgs = [
            user("deploy notes"),
            call("c1", "bash", command="cat notes"),
            result("c1", "the deploy token is vaulted"),
        ]
        hook.transform_context(msgs)
        query = f"deploy token {GITHUB}"
        out = hook.call_tool("recall", {"query": query})
        assert json.loads(out)["hits"], "the recall found the tool output"
        hook.transform_context([*msgs, call("c2", "recall", query=query), result("c2", out), say("ok"), user("go")])
        hits = [v.doc for v in store.find("recall", {"object": "toolcall:s1:c1"}) if v.doc is not None]
        assert hits and hits[0]["meta"]["query"] == "deploy token [REDACTED:github-token]"
        s.close()
        assert_no_secret(stored_text(store, db))

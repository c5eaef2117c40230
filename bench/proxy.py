"""``ctxos proxy``: what it adds before the first byte of a streamed reply.

A scripted provider on loopback streams each reply; the same requests go to it directly (the
baseline) and through the proxy (which assembles the context, records the frame, and relays the
stream chunk by chunk). Four conversation shapes: a short one (a few messages: passed through
unmanaged), a coding session that grows by one tool call per request up to 120 calls (managed
once it passes 50k tokens, its 45th call or so: collapsed results, blocks), the same session
as Responses API input items (Codex CLI's API: reasoning items, shell calls and their outputs),
the same as a Responses chain the provider keeps (each request only its new items and the
``previous_response_id`` it continues, as the Agents SDK's chaining sends them: the proxy sends
the whole conversation, managed; the direct baseline's provider is sent the new items alone)
and as Gemini API contents (Gemini CLI's: signed calls, function responses). Reported: time to
the first content chunk, p50 and p99, and what the proxy added. Aim: the first byte no later
than the provider's plus a few milliseconds, taken here as p50 added ≤ 10 ms on the short
conversation.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from tests.proxy.upstream import upstream

from context_os.cli._common import ready_to_serve
from context_os.server.proxy import Proxy, make_proxy_server
from context_os.store.sqlite import SqliteStore

from ._report import command_line, pct, sized, write_section

ROUNDS = sized(120, 60)
AIM_MS = 10.0


def first_byte_ms(client: httpx.Client, url: str, conversation: list[dict[str, Any]], session: str | None) -> float:
    """The time to the first content chunk of a streamed request of ``conversation``, the stream
    read to its end: the connection is kept alive for the next request, as SDKs keep it (and the
    proxy keeps a response before its end goes out)."""
    return _first_byte(client, url, conversation, session)[0]


def _first_byte(
    client: httpx.Client, url: str, conversation: list[dict[str, Any]], session: str | None, **more: Any
) -> tuple[float, str | None]:
    """``first_byte_ms`` (``more``: further fields of the body), and the id of a Responses
    response (its ``response.created`` event)."""
    headers = {"Authorization": "Bearer sk-bench"} | ({"X-Context-OS-Session": session} if session else {})
    responses = url.endswith("/responses")
    key = "contents" if ":streamGenerateContent" in url else "input" if responses else "messages"
    body = {"model": "m", "stream": True, key: conversation, **more}
    t = time.perf_counter()
    first: float | None = None
    rid = None
    with client.stream("POST", url, json=body, headers=headers) as r:
        for line in r.iter_lines():
            if first is None and (
                (responses and line.startswith("event: response.output_text.delta"))
                or (not responses and line.startswith("data: {"))
            ):
                first = (time.perf_counter() - t) * 1000
            elif responses and rid is None and line.startswith("data: ") and '"response.created"' in line:
                rid = json.loads(line[6:])["response"]["id"]
    if first is None:
        raise RuntimeError("no chunk came")
    return first, rid


def chain(client: httpx.Client, url: str, session: str | None) -> list[float]:
    """The coding session of ``coding_items`` as a chain of ``ROUNDS`` requests: each sends the call
    and output of its step (the first, the task too)."""
    items = coding_items(ROUNDS)
    times: list[float] = []
    previous = None
    for i in range(ROUNDS):
        step = items[: 1 + 3 * (i + 1)] if i == 0 else items[1 + 3 * i : 1 + 3 * (i + 1)]
        ms, previous = _first_byte(
            client, url, step, session, **({"previous_response_id": previous} if previous else {})
        )
        times.append(ms)
    return times


def coding(n: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "fix the failing test"},
    ]
    for i in range(n):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"c": i})}}
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"# out {i}\n" + "line of output\n" * 300})
    return msgs


def coding_items(n: int) -> list[dict[str, Any]]:
    """The coding session as Responses input items, as Codex sends them."""
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the failing test"}]}
    ]
    for i in range(n):
        items.append({"type": "reasoning", "summary": [], "encrypted_content": f"gAAAA{i:04d}" + "Q" * 400})
        items.append(
            {
                "type": "function_call",
                "name": "exec_command",
                "arguments": json.dumps({"cmd": f"c {i}"}),
                "call_id": f"c{i}",
            }
        )
        items.append(
            {"type": "function_call_output", "call_id": f"c{i}", "output": f"# out {i}\n" + "line of output\n" * 300}
        )
    return items


def coding_contents(n: int) -> list[dict[str, Any]]:
    """The coding session as Gemini API contents, as Gemini CLI sends them."""
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "fix the failing test"}]}]
    for i in range(n):
        call = {
            "functionCall": {"name": "run_shell_command", "args": {"command": f"c {i}"}},
            "thoughtSignature": "c2ln",
        }
        output = {"output": f"# out {i}\n" + "line of output\n" * 300}
        contents.append({"role": "model", "parts": [call]})
        contents.append(
            {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command", "response": output}}]}
        )
    return contents


def main() -> int:
    rows: list[tuple[str, float, float, float, float, float, float]] = []
    with tempfile.TemporaryDirectory() as d, upstream(replies=[]) as up, httpx.Client(timeout=60) as client:
        store = SqliteStore(Path(d) / "proxy.db")
        proxy = Proxy(store, up.url, gemini_upstream=up.url)
        server = make_proxy_server(proxy, 0)
        ready_to_serve()  # as `ctxos proxy` does before it serves
        threading.Thread(target=server.serve_forever, daemon=True).start()
        via = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            for shape, path, make in (
                (
                    "short (3 messages, unmanaged)",
                    "/v1/chat/completions",
                    lambda i: [{"role": "user", "content": f"question {i}"}],
                ),
                (
                    "coding session, 1 to 120 tool calls (managed past 50k tokens)",
                    "/v1/chat/completions",
                    lambda i: coding(i + 1),
                ),
                ("the same as Responses API items (Codex's API)", "/v1/responses", lambda i: coding_items(i + 1)),
                (
                    "the same as Gemini API contents (Gemini CLI's API)",
                    "/v1beta/models/m:streamGenerateContent?alt=sse",
                    lambda i: coding_contents(i + 1),
                ),
            ):
                base, through = [], []
                session = f"bench-{len(rows)}"
                for i in range(ROUNDS):
                    msgs = make(i)
                    base.append(first_byte_ms(client, up.url + path, msgs, None))
                    # the short shape is a new conversation each time; the coding ones, one session each
                    through.append(first_byte_ms(client, via + path, msgs, None if len(rows) == 0 else session))
                rows.append(_row(shape, base, through))
            shape = "the same as a Responses chain the provider keeps (`previous_response_id`: sent whole, managed)"
            base = chain(client, up.url + "/v1/responses", None)
            through = chain(client, via + "/v1/responses", f"bench-{len(rows)}")
            if proxy.counts["continued"] != ROUNDS - 1:
                raise RuntimeError(f"{proxy.counts['continued']} of {ROUNDS - 1} chained requests were sent whole")
            rows.insert(3, _row(shape, base, through))
        finally:
            server.shutdown()
            server.server_close()
            proxy.close()
            store.close()
    short_added = rows[0][5]
    ok = short_added <= AIM_MS
    body = (
        f"{ROUNDS} streamed requests per shape, loopback, a scripted provider; time to the first content chunk, "
        "each stream read to its end on a connection kept alive, as the SDKs keep theirs. "
        "The proxy is made ready as `ctxos proxy` makes it before it serves (`ready_to_serve`: the default "
        "redaction built, the objects of the imported libraries moved out of the collector's sight).\n\n"
        "| conversation | direct p50 ms | direct p99 | through the proxy p50 | p99 | added p50 | added p99 |\n"
        "|---|---|---|---|---|---|---|\n"
        + "".join(
            f"| {r[0]} | {r[1]:.2f} | {r[2]:.2f} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.2f} | {r[6]:.2f} |\n" for r in rows
        )
        + f"\nAim: the proxy adds at most {AIM_MS:.0f} ms (p50) before the first byte of a short conversation: "
        f"{'met' if ok else 'MISSED'} ({short_added:.2f} ms). A managed session adds what assembling its turn costs "
        "(it grows with what changed, not with the history: docs/benchmarks.md, Core).\n"
    )
    write_section("Proxy", body)
    print(body)
    return 0 if ok else 1


def _row(shape: str, base: list[float], through: list[float]) -> tuple[str, float, float, float, float, float, float]:
    added = [t - b for t, b in zip(through, base, strict=True)]
    return shape, pct(base, 50), pct(base, 99), pct(through, 50), pct(through, 99), pct(added, 50), pct(added, 99)


if __name__ == "__main__":
    command_line(__doc__, main)

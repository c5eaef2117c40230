"""A scripted model behind the OpenAI chat-completions API, on 127.0.0.1: the only fake in the Pi tests.

It answers the n-th request with the n-th scripted reply (a tool call, a text, or an HTTP error
as OpenAI sends one), streamed as server-sent events when the request asks for ``stream: true``
(Pi always does), and records every request body it received, so a test can assert what the
model was actually shown.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.helpers import pairing_refused

__all__ = ["Reply", "ScriptedModel", "error", "text", "tool_call", "scripted_model"]


@dataclass(frozen=True)
class Reply:
    """One assistant turn: a text, or one tool call; or the request refused with HTTP status
    ``status`` and ``text`` as the error's message."""

    text: str | None = None
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    status: int | None = None


def text(value: str) -> Reply:
    return Reply(text=value)


def tool_call(name: str, **arguments: Any) -> Reply:
    return Reply(tool=name, arguments=arguments)


def error(status: int, message: str) -> Reply:
    return Reply(text=message, status=status)


class ScriptedModel:
    """The script and what was received; thread-safe (the HTTP server is threaded)."""

    def __init__(self, script: list[Reply], on_request: Callable[[int], None] | None = None):
        self.script = list(script)
        self.on_request = on_request
        """Called with n before the n-th request is answered (e.g. to break something mid-run)."""
        self.requests: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def refuse(self, why: str) -> None:
        """A request refused as OpenAI would refuse it: an error the test sees."""
        with self._lock:
            self.errors.append(f"refused as OpenAI would: {why}")

    def next_reply(self, body: dict[str, Any]) -> tuple[int, Reply]:
        with self._lock:
            self.requests.append(body)
            n = len(self.requests)
            if self.on_request is not None:
                self.on_request(n)
            if n > len(self.script):
                self.errors.append(f"request {n} but the script has {len(self.script)} replies")
                return n, text("(the scripted model has nothing more to say)")
            return n, self.script[n - 1]


def _chunks(n: int, reply: Reply, model: str) -> list[dict[str, Any]]:
    base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    if reply.tool is not None:
        delta: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "index": 0,
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": reply.tool, "arguments": json.dumps(reply.arguments)},
                }
            ],
        }
        finish = "tool_calls"
    else:
        delta = {"role": "assistant", "content": reply.text}
        finish = "stop"
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    return [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {**base, "choices": [], "usage": usage},
    ]


def _completion(n: int, reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool is not None:
        fn = {"name": reply.tool, "arguments": json.dumps(reply.arguments)}
        message["tool_calls"] = [{"id": f"call_{n}", "type": "function", "function": fn}]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.tool else "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _handler(model: ScriptedModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures
            pass

        def _json(self, status: int, value: Any) -> None:
            body = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self._json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})

        def do_POST(self) -> None:  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self.send_error(404, f"no route {self.path}")
                return
            body = json.loads(raw)
            refused = pairing_refused("openai", body)
            if refused is not None:  # as OpenAI answers it
                model.refuse(refused)
                self._json(400, {"error": {"message": refused, "type": "invalid_request_error"}})
                return
            n, reply = model.next_reply(body)
            if reply.status is not None:
                self._json(reply.status, {"error": {"message": reply.text, "type": "server_error"}})
                return
            name = str(body.get("model", "scripted"))
            if not body.get("stream"):
                self._json(200, _completion(n, reply, name))
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for chunk in _chunks(n, reply, name):
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler


@contextmanager
def scripted_model(
    script: list[Reply], on_request: Callable[[int], None] | None = None
) -> Iterator[tuple[ScriptedModel, str]]:
    """Serve ``script`` on a free loopback port; yields the model and its base URL (``…/v1``)."""
    model = ScriptedModel(script, on_request)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(model))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="scripted-model", daemon=True)
    thread.start()
    try:
        yield model, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)

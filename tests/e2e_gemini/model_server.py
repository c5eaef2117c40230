"""A scripted model behind the Gemini API (``streamGenerateContent``), and behind Google's Code
Assist API (its requests and answers in envelopes of their own), on 127.0.0.1: the only fake in
the Gemini CLI test. The n-th request that offers tools (a turn of the session) is answered
with the n-th scripted reply, a text or one function call, as one server-sent event; a request
without tools (a check Gemini CLI makes on the side) with a JSON text. Every request is recorded."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.helpers import serving

__all__ = ["GeminiModel", "gemini_model"]

Reply = str | tuple[str, dict[str, Any]]
"""A text, or a function call: (name, args)."""


@dataclass
class GeminiModel:
    replies: list[Reply]
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    """The bodies of the requests that offered tools, in order."""
    side: list[str] = field(default_factory=list)
    """The paths of the other requests."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.startswith("/v1internal:"):  # Google's Code Assist API (Gemini CLI logged in with an account)
            return self._code_assist(path.split(":", 1)[1].split("?")[0], body)
        if ":countTokens" in path:
            with self.lock:
                self.side.append(path)
            return {"totalTokens": 10}
        with self.lock:
            if not body.get("tools"):
                self.side.append(path)
                reply: Reply = '{"reasoning": "the model answered", "next_speaker": "user"}'
            else:
                self.requests.append(body)
                n = len(self.requests)
                reply = self.replies[n - 1] if n <= len(self.replies) else "ok"
        part = {"text": reply} if isinstance(reply, str) else {"functionCall": {"name": reply[0], "args": reply[1]}}
        usage = {"promptTokenCount": 100, "candidatesTokenCount": 5, "totalTokenCount": 105}
        return {
            "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage,
        }

    def _code_assist(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        """A model call's request and answer in their envelopes; the account on the free tier,
        its project set up; any other method answered with nothing."""
        if method in ("generateContent", "streamGenerateContent"):
            return {"response": self.answer(f"/v1beta/models/m:{method}", body["request"]), "traceId": "e2e-trace"}
        with self.lock:
            self.side.append(method)
        if method == "loadCodeAssist":
            tier = {"id": "free-tier", "name": "Gemini Code Assist for individuals"}
            return {
                "currentTier": tier,
                "allowedTiers": [{**tier, "isDefault": True}],
                "cloudaicompanionProject": "e2e-project",
            }
        return {}


def _handler(model: GeminiModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            answer = model.answer(self.path, body)
            if ":streamGenerateContent" in self.path:
                self._send(b"data: " + json.dumps(answer).encode() + b"\r\n\r\n", "text/event-stream")
            else:
                self._send(json.dumps(answer).encode(), "application/json")

        def _send(self, data: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def gemini_model(replies: list[Reply]) -> Iterator[GeminiModel]:
    model = GeminiModel(replies)
    with serving(_handler(model)) as model.url:
        yield model

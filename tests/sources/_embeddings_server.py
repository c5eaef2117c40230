"""A small real HTTP server that answers like OpenAI's ``POST /v1/embeddings``: each text's vector
is derived from its blake3, so the same text always gets the same vector. It records every request
it got (path, headers, body) for the tests to read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import blake3
import numpy as np

from tests.helpers import serving


def vector_of(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(blake3.blake3(text.encode()).digest(8), "little")
    return [float(x) for x in np.random.default_rng(seed).standard_normal(dim)]


@dataclass
class Server:
    url: str
    dim: int
    requests: list[dict[str, Any]] = field(default_factory=list)
    fail_with: int | None = None
    """Answer every request with this HTTP status instead."""
    short_by: int = 0
    """Answer with this many embeddings fewer than asked for."""


@contextmanager
def embeddings_server(dim: int = 8) -> Iterator[Server]:
    state = Server("", dim)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            if state.fail_with is not None:
                self.send_response(state.fail_with)
                self.end_headers()
                self.wfile.write(b'{"error": {"message": "down for maintenance"}}')
                return
            texts = body["input"][: max(0, len(body["input"]) - state.short_by)]
            data = [{"object": "embedding", "index": i, "embedding": vector_of(t, dim)} for i, t in enumerate(texts)]
            # answered in reverse: a client must order by "index"
            out = json.dumps({"object": "list", "data": data[::-1], "model": body["model"]}).encode()
            self.send_response(200 if self.path == "/v1/embeddings" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        state.url = url + "/v1"
        yield state

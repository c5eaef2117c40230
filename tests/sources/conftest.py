"""Fixtures of the source tests: the real WordLlama embedder (loaded once per module) and a
fresh embedded store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from context_os.sources.embed import WordLlamaEmbedder
from context_os.store import Store, open_store


@pytest.fixture(scope="module")
def model() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    yield s
    s.close()

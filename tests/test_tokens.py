"""Token estimates of what has no characters the model reads: documents (images are tested
through the adapters that count them)."""

from __future__ import annotations

import base64
import time
import zlib

import pytest

from context_os.tokens import PAGE_TOKENS, document_tokens
from tests.helpers import pdf


@pytest.mark.parametrize("pages", [1, 3])
def test_a_pdf_costs_a_page_s_tokens_a_page_however_it_is_given(pages: int) -> None:
    data = pdf(pages)
    b64 = base64.b64encode(data).decode()
    for given in (data, b64, "data:application/pdf;base64," + b64):
        assert document_tokens(given) == pages * PAGE_TOKENS


def test_pages_inside_a_compressed_object_stream_are_counted() -> None:
    # PDF 1.5 on keeps most objects in compressed object streams: the page objects are not in
    # the file's bytes as they are
    objects = b"".join(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >> " for _ in range(4))
    objects = b"<< /Type /Pages /Kids [3 0 R 4 0 R 5 0 R 6 0 R] /Count 4 >> " + objects
    packed = zlib.compress(objects)
    document = (
        b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
        + b"7 0 obj\n<< /Type /ObjStm /N 5 /First 20 /Filter /FlateDecode /Length %d >>\nstream\n" % len(packed)
        + packed
        + b"\nendstream\nendobj\n%%EOF\n"
    )
    assert b"/Type /Page " not in document
    assert document_tokens(document) == 4 * PAGE_TOKENS


def test_text_documents_cost_their_text_and_what_cannot_be_read_one_page() -> None:
    text = "x" * 400
    assert document_tokens("data:text/plain;base64," + base64.b64encode(text.encode()).decode()) == 100
    assert document_tokens(text.encode(), "text/plain") == 100
    assert document_tokens("data:text/plain," + text) == 100
    for unknown in (None, "https://example.com/a.pdf", b"PK\x03\x04 a zip", "not base64 at all!"):
        assert document_tokens(unknown) == PAGE_TOKENS


def test_a_page_tree_s_count_stands_for_pages_not_found() -> None:
    # its count before or after its type, in its dictionary; not one of another dictionary
    for tree in (b"<< /Type /Pages /Kids [3 0 R] /Count 7 >>", b"<< /Count 7 /Kids [3 0 R] /Type /Pages >>"):
        assert document_tokens(b"%PDF-1.4\n2 0 obj\n" + tree + b"\nendobj\n") == 7 * PAGE_TOKENS
    apart = b"%PDF-1.4\n<< /Type /Pages /Kids [] >> << /Count 9 >>\n"
    assert document_tokens(apart) == PAGE_TOKENS


@pytest.mark.parametrize(
    "repeated",
    [b"/Count 1 ", b"/Type /Pages ", b"/Type /ObjStm ", b"/Type /ObjStm >> stream\n", b"<< /Type /ObjStm >>"],
    ids=["counts", "trees", "streams", "stream-starts", "stream-dicts"],
)
def test_a_crafted_megabyte_is_counted_in_linear_time(repeated: bytes) -> None:
    """A document of one phrase over and over (no ``>`` to end a dictionary, no ``endstream``):
    each look for a page tree's count or an object stream read on to the end from every match,
    and 360 KB of ``/Count 1`` took 85 s."""
    document = b"%PDF-1.7\n" + repeated * (1_000_000 // len(repeated))
    started = time.monotonic()
    assert document_tokens(document) >= PAGE_TOKENS
    assert time.monotonic() - started < 2

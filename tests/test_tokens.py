"""Token estimates of what has no characters the model reads: documents and images (each image
format written by Pillow, as the real encoders write it; the adapters that count them are tested
beside them)."""

from __future__ import annotations

import base64
import io
import time
import zlib

import pytest
from PIL import Image

from context_os.tokens import IMAGE_TOKENS, PAGE_TOKENS, document_tokens, image_tokens
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
def test_a_crafted_document_is_counted_in_linear_time(repeated: bytes) -> None:
    """A document of one phrase over and over (no ``>`` to end a dictionary, no ``endstream``):
    each look for a page tree's count or an object stream read on to the end from every match,
    and 360 KB of ``/Count 1`` took 85 s."""

    def fastest(size: int) -> float:
        """The quickest of a few counts of a document of ``size`` bytes (3 at least, 20 at most,
        within a second): a busy machine slows some, seldom all."""
        document = b"%PDF-1.7\n" + repeated * (size // len(repeated))
        took: list[float] = []
        while len(took) < 3 or (len(took) < 20 and sum(took) < 1.0):
            started = time.perf_counter()
            assert document_tokens(document) >= PAGE_TOKENS
            took.append(time.perf_counter() - started)
        return min(took)

    # eight times the bytes: eight times the time when linear (3.5-9.1× measured), 64× when
    # quadratic; a ratio of two times of this run, no time of its own asserted
    assert fastest(160_000) / fastest(20_000) < 24


def _image(fmt: str, size: tuple[int, int], mode: str = "RGB", **options: object) -> bytes:
    """An image of ``size`` as Pillow's encoder for ``fmt`` writes it."""
    out = io.BytesIO()
    Image.new(mode, size, (200, 40, 40, 128) if mode == "RGBA" else (200, 40, 40)).save(out, fmt, **options)
    return out.getvalue()


# Each format's way of writing its size: a PNG's IHDR; a GIF's screen; a JPEG's frame header,
# baseline or progressive (a start-of-frame marker after the segments before it); a WebP's lossy
# frame (VP8), lossless header (VP8L: 14 bits each, less one) or extended canvas (VP8X: 24 bits
# each, less one, written for an image with alpha)
_FORMATS: dict[str, tuple[str, str, dict[str, object], bytes | None]] = {  # the last: a WebP's chunk meant
    "png": ("PNG", "RGB", {}, None),
    "gif": ("GIF", "RGB", {}, None),
    "jpeg": ("JPEG", "RGB", {}, None),
    "jpeg-progressive": ("JPEG", "RGB", {"progressive": True}, None),
    "webp-lossy": ("WEBP", "RGB", {}, b"VP8 "),
    "webp-lossless": ("WEBP", "RGB", {"lossless": True}, b"VP8L"),
    "webp-alpha": ("WEBP", "RGBA", {}, b"VP8X"),
}


@pytest.mark.parametrize("name", list(_FORMATS))
def test_an_image_costs_its_pixels_over_750_however_it_is_given(name: str) -> None:
    fmt, mode, options, chunk = _FORMATS[name]
    assert chunk is None or _image(fmt, (4, 4), mode, **options)[12:16] == chunk
    # pixels a multiple of 750, and one more: a dimension read one too many or one too few
    # moves the estimate
    for size, tokens in (((50, 45), 3), ((19, 79), 3), ((45, 50), 3), ((600, 500), 400)):
        data = _image(fmt, size, mode, **options)
        b64 = base64.b64encode(data).decode()
        for given in (data, b64, f"data:image/{fmt.lower()};base64,{b64}"):
            assert image_tokens(given) == tokens, (size, type(given))
    assert image_tokens(_image(fmt, (51, 46), mode, **options)) == 4
    assert image_tokens(_image(fmt, (18, 78), mode, **options)) == 2
    # past the API's largest size an image is scaled down to it: it costs the most one can
    assert image_tokens(_image(fmt, (2000, 1500), mode, **options)) == IMAGE_TOKENS


def test_a_jpeg_s_frame_header_is_read_after_its_metadata_within_the_first_64_kb() -> None:
    # a camera's EXIF comes before the frame header: 40 kB of it is read past; a header past the
    # bytes read (two segments of 60 kB) costs what an image of unknown size does
    exif = b"Exif\x00\x00" + bytes(40_000)
    assert image_tokens(_image("JPEG", (50, 45), exif=exif)) == 3
    late = _image("JPEG", (50, 45), exif=b"Exif\x00\x00" + bytes(60_000), icc_profile=bytes(60_000))
    assert late.index(b"\xff\xc0") > 65_536
    assert image_tokens(late) == IMAGE_TOKENS


def _segments(jpeg: bytes) -> tuple[list[bytes], bytes]:
    """A JPEG's marker segments up to its scan, and the rest (the scan on)."""
    out, i = [], 2
    while jpeg[i + 1] != 0xDA:  # start of scan
        end = i + 2 + int.from_bytes(jpeg[i + 2 : i + 4], "big")
        out.append(jpeg[i:end])
        i = end
    return out, jpeg[i:]


def test_a_jpeg_s_tables_before_its_frame_header_are_not_taken_for_it() -> None:
    # Huffman tables (0xC4) share the frame headers' range of markers; an encoder may write them
    # first (libjpeg writes them after): a decoder reads such a file as any other
    segments, scan = _segments(_image("JPEG", (50, 45)))
    tables = [s for s in segments if s[1] == 0xC4]
    assert tables and segments.index(tables[0]) > [s[1] for s in segments].index(0xC0)
    # and fill bytes (0xFF) before a marker, which the standard allows any number of
    moved = b"\xff\xd8" + b"".join(b"\xff\xff" + s for s in tables + [s for s in segments if s[1] != 0xC4]) + scan
    decoded = Image.open(io.BytesIO(moved))
    decoded.load()
    assert decoded.size == (50, 45)
    assert image_tokens(moved) == 3


def test_an_image_whose_size_cannot_be_read_costs_the_most_one_can() -> None:
    png = _image("PNG", (50, 45))
    for unknown in (
        None,
        "https://example.com/cat.png",
        "data:image/png,not-base64",
        png[:20],  # cut before the size
        b"BM" + png[2:],  # a format not read (a bitmap's magic)
        b"\xff\xd8" + bytes(40),  # a JPEG's start, then no marker
        b"RIFF\x00\x00\x00\x00WEBPVP8Q" + bytes(20),  # a WebP chunk not read
        "not base64 at all!",
    ):
        assert image_tokens(unknown) == IMAGE_TOKENS, unknown

"""The one token estimate: every count context_os reports (assembled, full transcript, objects,
files, benchmarks against other strategies) uses it on both sides of a comparison.

Characters / 4, rounded up: no tokenizer, so no model download and the same number everywhere.
An image costs what the Anthropic API charges for it, width × height / 750 tokens, at most
``IMAGE_TOKENS`` (what it costs once scaled to the API's largest size); one whose size cannot be
read from its first bytes (a URL, an unknown format) costs ``IMAGE_TOKENS``. Adapters count it as
``image_tokens(...) * CHARS_PER_TOKEN`` characters of the message (``extra_chars``). A
document costs ``PAGE_TOKENS`` a PDF page (``document_tokens``), a text document its characters.
This module must never import from the rest of the package.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
import struct
import zlib
from collections.abc import Iterator

__all__ = [
    "CHARS_PER_TOKEN",
    "IMAGE_TOKENS",
    "PAGE_TOKENS",
    "document_tokens",
    "estimate_tokens",
    "image_tokens",
    "value_chars",
]

CHARS_PER_TOKEN = 4

IMAGE_TOKENS = 1600
"""The most one image costs (Anthropic: about 1.15 megapixels), and the cost of one of unknown size."""

PAGE_TOKENS = 2300
"""What one PDF page costs (Anthropic sends the model each page's text and an image of it: about
2,100-2,500 tokens a page of text, 1,600 a scanned one), and a document of unknown size."""

_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
_PAGES = re.compile(rb"/Type\s*/Pages\b")
_COUNT = re.compile(rb"/Count\s+(\d+)")

_OBJECT_STREAM = re.compile(rb"/Type\s*/ObjStm\b")
_STREAM_START = re.compile(rb"\s*stream\r?\n")
_OBJECT_STREAM_MAX = 1 << 24
"""The most bytes of one object stream decompressed to count the pages in it."""
_OBJECT_STREAMS_MAX = 1 << 26
"""The most bytes of all of a document's object streams decompressed to count its pages."""

_HEAD = 65536
"""Bytes of an image read for its size (a JPEG's frame header may follow its metadata)."""


def estimate_tokens(chars: int) -> int:
    """Estimated tokens of a text of ``chars`` characters: ``ceil(chars / 4)``."""
    return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def value_chars(value: object, key: str = "") -> int:
    """What a model reads of a structured block (a provider's tool's call or result, as JSON): the
    characters of its keys and strings, numbers and the like as written, its JSON's punctuation
    and escapes aside. An encrypted page (a string under ``encrypted_content``, base64) counts as
    the bytes it decodes to."""
    if isinstance(value, str):
        return len(value) * 3 // 4 if key == "encrypted_content" else len(value)
    if isinstance(value, dict):
        return sum(len(str(k)) + value_chars(v, str(k)) for k, v in value.items() if k != "cache_control")
    if isinstance(value, list | tuple):
        return sum(value_chars(v) for v in value)
    return 0 if value is None else len(str(value))


def image_tokens(data: bytes | str | None) -> int:
    """Estimated tokens of one image: ``data`` its bytes, or their base64 text (a ``data:`` URL
    too); None or anything unreadable (a URL) costs ``IMAGE_TOKENS``."""
    head = _image_head(data)
    size = _image_size(head) if head else None
    if size is None:
        return IMAGE_TOKENS
    width, height = size
    return max(1, min(IMAGE_TOKENS, -(-width * height // 750)))


def document_tokens(data: bytes | str | None, media_type: str | None = None) -> int:
    """Estimated tokens of one document: ``data`` its bytes, or their base64 text (a ``data:`` URL
    too, which may name ``media_type``). A PDF costs ``PAGE_TOKENS`` a page (its pages counted in
    its page objects, or its page tree's count when they are compressed); a ``text/*`` document
    its text's tokens; None or anything else (a URL, a file id, another format) ``PAGE_TOKENS``.
    (A document given as plain text, an Anthropic text source, is counted by its text.)"""
    raw: bytes | bytearray | None = data if isinstance(data, bytes | bytearray) else None
    if isinstance(data, str):
        if data.startswith("data:"):
            meta, _, data = data.partition(",")
            media_type = meta[5:].split(";")[0] or media_type
            if not meta.endswith(";base64"):
                return estimate_tokens(len(data)) if (media_type or "").startswith("text/") else PAGE_TOKENS
        try:
            raw = base64.b64decode(data[: len(data) // 4 * 4], validate=False)
        except (binascii.Error, ValueError):
            return PAGE_TOKENS
    if raw is None:
        return PAGE_TOKENS
    if (media_type or "").startswith("text/"):
        return estimate_tokens(len(bytes(raw).decode("utf-8", "replace")))
    if not raw.startswith(b"%PDF"):
        return PAGE_TOKENS
    return max(1, _pdf_pages(bytes(raw))) * PAGE_TOKENS


def _pdf_pages(pdf: bytes) -> int:
    """A PDF's pages: its page objects, and those inside its compressed object streams (PDF 1.5
    on keeps most objects there), else its page tree's count; 0 when none of those is readable.
    Each look is linear in the bytes: a crafted document costs no more than a real one."""
    pages = len(_PAGE.findall(pdf))
    counts = _tree_counts(pdf)
    budget = _OBJECT_STREAMS_MAX
    for packed in _object_streams(pdf):
        if budget <= 0:
            break
        try:
            objects = zlib.decompressobj().decompress(packed, min(budget, _OBJECT_STREAM_MAX))
        except zlib.error:
            continue
        budget -= len(objects)
        pages += len(_PAGE.findall(objects))
        counts += _tree_counts(objects)
    return pages or max(counts, default=0)


def _tree_counts(data: bytes) -> list[int]:
    """The ``/Count`` of each page tree node (``/Type /Pages``) in ``data``: the count next to it,
    before or after, with no ``>`` between them (in its dictionary)."""
    kinds = [(m.start(), m.end()) for m in _PAGES.finditer(data)]
    if not kinds:
        return []
    counts = [(m.start(), m.end(), int(m[1])) for m in _COUNT.finditer(data)]
    closes = [m.start() for m in re.finditer(rb">", data)]
    starts = [c[0] for c in counts]
    ends = [c[1] for c in counts]

    def open_between(a: int, b: int) -> bool:  # no ``>`` in data[a:b]
        k = bisect.bisect_left(closes, a)
        return k == len(closes) or closes[k] >= b

    found = []
    for start, end in kinds:
        after = bisect.bisect_left(starts, end)
        if after < len(counts) and open_between(end, counts[after][0]):
            found.append(counts[after][2])
        before = bisect.bisect_right(ends, start) - 1
        if before >= 0 and open_between(counts[before][1], start):
            found.append(counts[before][2])
    return found


def _object_streams(pdf: bytes) -> Iterator[bytes]:
    """The packed bytes of each object stream of ``pdf`` (``/Type /ObjStm``, its dictionary
    closed by ``>>``, then ``stream``), the first of several in one dictionary once."""
    after = 0  # where the last stream found ends: what follows it only
    seen = -1  # the ``>`` of the dictionary of the last one tried
    for m in _OBJECT_STREAM.finditer(pdf):
        if m.start() < after or m.end() <= seen:
            continue
        close = pdf.find(b">", m.end())
        if close < 0:
            return
        seen = close
        if pdf[close : close + 2] != b">>":
            continue
        head = _STREAM_START.match(pdf, close + 2)
        if head is None:
            continue
        end = pdf.find(b"endstream", head.end())
        if end < 0:
            return
        after = end
        yield pdf[head.end() : end]


def _image_head(data: bytes | str | None) -> bytes:
    if isinstance(data, bytes | bytearray):
        return bytes(data[:_HEAD])
    if not isinstance(data, str):
        return b""
    if data.startswith("data:"):
        meta, _, data = data.partition(",")
        if not meta.endswith(";base64"):
            return b""
    text = data[: _HEAD // 3 * 4]
    try:
        return base64.b64decode(text[: len(text) // 4 * 4], validate=False)
    except (binascii.Error, ValueError):
        return b""


def _image_size(b: bytes) -> tuple[int, int] | None:
    """(width, height) from the header of a PNG, GIF, JPEG or WebP image, else None."""
    if b[:8] == b"\x89PNG\r\n\x1a\n" and len(b) >= 24:
        return struct.unpack(">II", b[16:24])
    if b[:6] in (b"GIF87a", b"GIF89a") and len(b) >= 10:
        return struct.unpack("<HH", b[6:10])
    if b[:4] == b"RIFF" and b[8:12] == b"WEBP" and len(b) >= 30:
        kind = b[12:16]
        if kind == b"VP8 ":
            w, h = struct.unpack("<HH", b[26:30])
            return w & 0x3FFF, h & 0x3FFF
        if kind == b"VP8L":
            bits = int.from_bytes(b[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if kind == b"VP8X":
            return int.from_bytes(b[24:27], "little") + 1, int.from_bytes(b[27:30], "little") + 1
        return None
    if b[:2] == b"\xff\xd8":
        i = 2
        while i + 9 <= len(b):
            if b[i] != 0xFF:
                return None
            marker = b[i + 1]
            if marker == 0xFF:  # fill byte
                i += 1
                continue
            length = int.from_bytes(b[i + 2 : i + 4], "big")
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start-of-frame
                h, w = struct.unpack(">HH", b[i + 5 : i + 9])
                return w, h
            i += 2 + length
    return None

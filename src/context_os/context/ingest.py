"""Taking in a harness's messages: only what lies past the cursor, validated before anything changes.

``Ingest.sync`` is what a hook calls with the harness's whole message list every turn: the
cursor is checked by message hashes (every message before it); if the harness rewrote its history
(compaction, restore), the entries past the common prefix are retired (no longer visible, kept in
the store). New messages are translated, checked (roles, sizes, pairing ids, what the store can
hold), scrubbed of secrets, and appended: a tool result becomes a ``toolcall`` object, active in
its place. Nothing is written here: the session's writer queues it all for the turn's transaction.

This module never reads the store and never knows a harness format.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ContentTooLarge, HashError, MalformedMessage
from ..hashing import canonical_json, sorted_keys
from ..objects import ToolcallDoc
from ..scrub import RedactFunction
from ..tokens import estimate_tokens
from .entries import ROLES, Entry, Incoming, ToolCall, msg_chars
from .persist import PAGE_SIZE, SessionWriter
from .view import ObjInfo, SessionView

__all__ = ["Ingest", "RedactFunction", "SyncReport", "check_incoming", "check_storable"]


_ENCODED = re.compile(r"data:.*|[A-Za-z0-9+/]{256,}={0,2}|[A-Za-z0-9_-]{256,}={0,2}", re.DOTALL)
"""Strings that are encoded bytes, never redacted: a data URI, or a long run of base64, plain or
URL-safe (image data, a thinking block's signature that the provider checks byte for byte; the
bytes of a pydantic-ai message in JSON form). No secret detector reads them, and scanning a
megabyte image would cost more than the whole message."""
_CLEAN_MEMO_CHARS = 200
"""A string this short that the redactor found nothing in is not passed to it again."""
_CLEAN_MEMO_SIZE = 4096
"""At most this many such strings are remembered (then the memory starts over)."""


@dataclass
class SyncReport:
    """What one ``sync`` did with the harness's message list."""

    new: int
    rewritten: bool
    retired: int = 0
    """Entries no longer visible because the harness rewrote its history (kept in the store)."""
    gone: list[int] = field(default_factory=list)
    """Those entries (``Entry["i"]``), in order."""


def _shown_before(visible: list[int], entry: int, keep: int) -> bool:
    """Whether chat entry ``entry`` is among the first ``keep`` visible ones."""
    k = bisect_left(visible, entry)
    return k < min(keep, len(visible)) and visible[k] == entry


def check_storable(m: Incoming, index: int) -> None:
    """Refuse what the store cannot hold (text that is not Unicode, NaN, non-string keys) before
    anything changes: a message that failed only when its chat page is written would be in the
    session's memory but never in the store. Names the failing field."""
    for key, value in m.items():
        parts = value.items() if key == "extra" and isinstance(value, dict) else [(key, value)]
        for name, v in parts:
            if isinstance(v, str):
                if v.isascii():  # (no copy of a long text to check it)
                    continue
                try:
                    v.encode("utf-8")  # lone surrogates: the one way a str is not text
                    continue
                except UnicodeEncodeError as e:
                    problem = f"not valid Unicode text ({e.reason} at position {e.start})"
            elif v is None or isinstance(v, bool | int):
                continue
            else:
                try:
                    canonical_json(v)
                    continue
                except HashError as e:
                    problem = f"cannot be stored: {e}"
            raise MalformedMessage(problem, index=index, field={"text": "content"}.get(name, name))


def _preview(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line[:120]
    return ""


def cut_text(text: str, cap: int) -> str:
    """``text`` cut to ``cap`` characters, ending with a note that says how long it was."""
    note = f"\n… [cut by context_os: {len(text):,} characters, a message keeps at most {cap:,}]"
    return text[: max(0, cap - len(note))] + note


def _cut_parts(extra: dict[str, Any], text: str) -> dict[str, Any]:
    """``extra`` of a message whose text was cut to ``text``: the text parts that its content parts
    and a tool output's blocks keep (``extra["content"]``, ``extra["full"]["content"]``: what is
    rendered in place of the text) hold ``text`` in the first of them, the others dropped, and
    the rest of the parts (images) as they were."""

    def cut(parts: Any) -> Any:
        if not isinstance(parts, list):
            return parts
        texts = [p for p in parts if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)]
        if not texts:
            return parts
        first, dropped = texts[0], {id(p) for p in texts[1:]}
        return [{**p, "text": text} if p is first else p for p in parts if id(p) not in dropped]

    out = dict(extra)
    if "content" in out:
        out["content"] = cut(out["content"])
    full = out.get("full")
    if isinstance(full, dict) and "content" in full:
        out["full"] = {**full, "content": cut(full["content"])}
    return out


def check_incoming(m: Incoming, index: int, cap: int) -> None:
    """Refuse a translated message that ``sync`` would refuse, before anything changes: what the
    store cannot hold, an unknown role, a field over ``cap`` characters (``ContentTooLarge``), a
    tool result without its call's id, tool calls without ids or sharing one. Names ``index``
    and the field."""
    check_storable(m, index)
    if m.get("role") not in ROLES:
        raise MalformedMessage(f"unknown role {m.get('role')!r}", index=index, field="role")
    text = m.get("text")
    if text is not None and not isinstance(text, str):
        raise MalformedMessage("text content must be a string", index=index, field="content")
    if text is not None and len(text) > cap:
        raise ContentTooLarge(f"{len(text):,} characters exceeds the cap of {cap:,}", index=index, field="content")
    if m["role"] == "tool" and not m.get("tool_call_id"):
        raise MalformedMessage("a tool result needs the id of its call", index=index, field="tool_call_id")
    seen: list[Any] = []
    for c in m.get("tool_calls") or ():
        if not c.get("id") or not c.get("name"):
            raise MalformedMessage("a tool call needs an id and a name", index=index, field="tool_calls")
        if c["id"] in seen:  # its results could not be told apart
            raise MalformedMessage(f"two tool calls share the id {c['id']!r}", index=index, field="tool_calls")
        seen.append(c["id"])
        if msg_chars({"role": "assistant", "text": None, "tool_calls": [c]}) > cap:
            raise ContentTooLarge("tool call arguments exceed the size cap", index=index, field="tool_calls")


class Ingest:
    """The ingest side of one session: its view grows here, its writer queues what to store."""

    def __init__(
        self,
        view: SessionView,
        writer: SessionWriter,
        *,
        redact: RedactFunction | None,
        retired: list[list[int]],
    ):
        self.view = view
        self.writer = writer
        self.redact = redact
        self._clean: set[str] = set()
        """Short strings the redactor found nothing in (a harness repeats its part kinds, tool
        names and timestamps in every message): not scanned again."""
        self.retired = retired
        """Runs ``[first, end)`` of entries retired by history rewrites (the session doc keeps them)."""
        self.cut_over_cap = False
        """A message text over the policy's ``max_message_chars`` is cut to it, with a note saying
        so, rather than refused (``ContentTooLarge``): what the proxy sets, which cannot ask its
        client to send less (the message is the session's as cut; its hash is the one it came
        with, so the next call finds it held)."""
        self.cuts: list[tuple[int, int]] = []
        self.syncs = 0
        """How many syncs were taken in (or tried): a caller that vouches for the messages of its
        last sync (``same``) may do so only while no other sync came since (another hook of the
        session, which may have rewritten the history meanwhile)."""
        self.on_rewrite: Callable[[int, int, Callable[[int], str], Callable[[int], Incoming]], None] | None = None
        """Called as ``on_rewrite(start, count, hash_at, translate)`` when a list no longer starts with what
        was ingested, before anything changes (``start``: its first message that differs): it may
        raise to refuse the list (the proxy: another conversation that starts alike)."""
        """The messages cut so (their index and length), for the caller to say so."""
        # size of the unmanaged transcript (what the harness would have sent), kept incrementally
        self.full = sum(view.entries[i].get("ft", 0) for i in view.visible)
        self.call_names: dict[str, str] = {}
        self.call_objects: dict[str, str] = {}
        self.call_entries: dict[str, int] = {}
        self._rearmed: dict[str, tuple[int, ToolCall]] = {}
        """Calls still shown whose result a history rewrite retired: (their entry, the call), to
        name the result that comes in its place."""
        for e in view.entries:
            for c in e.get("tool_calls") or ():
                self.call_names[c["id"]] = c["name"]
                if c.get("object") and c["object"] not in view.objects:  # result still to come
                    self.call_objects[c["id"]] = c["object"]
                    self.call_entries[c["id"]] = e["i"]

    def sync(
        self, count: int, hash_at: Callable[[int], str], translate: Callable[[int], Incoming], same: int | None = None
    ) -> SyncReport:
        """Take in the harness's message list: only what lies past the cursor is read.

        ``hash_at(k)`` hashes harness message k; ``translate(k)`` turns it into an ``Incoming``
        (raising ``MalformedMessage`` that names k); each entry keeps ``hash_at(k)`` as its hash,
        whatever ``h`` the translation carried (the next sync compares the list with those). If
        the list no longer starts with what was already ingested (compaction, restore, one message
        changed anywhere), the cursor is reset to the common prefix: the entries past it stop
        being visible but stay in the store.

        With ``same`` (a number), every message before the cursor is compared with the hash its
        entry keeps, but for the first ``same``: the caller vouches that they are the messages it
        passed at the last sync of this session, unchanged (the same objects: what the hook knows),
        which were compared then (a caller that did not make the last sync, ``syncs``, vouches
        for none). The first and middle of those are compared all the same (a harness may
        change a message in place). Without it (None), the first, middle and last messages
        before the cursor are compared, a flat cost: a change elsewhere goes unnoticed (proving
        every message unchanged costs a pass over the whole history at every call: 0.6 ms of
        identity checks at 50,000 messages, or hashing them all).
        """
        self.syncs += 1
        view = self.view
        cursor = len(view.visible)
        limit = min(count, cursor)

        def kept(k: int) -> bool:
            return hash_at(k) == view.entries[view.visible[k]]["h"]

        if same is None:
            start = cursor
            if count < cursor or not all(kept(k) for k in {0, cursor // 2, cursor - 1} if 0 <= k < cursor):
                start = 0
                while start < limit and kept(start):
                    start += 1
        else:
            start = min(same, limit)
            if not all(kept(k) for k in {0, start // 2} if k < start):
                start = 0
            while start < limit and kept(start):
                start += 1
        rewritten = start < cursor
        retired = cursor - start
        if rewritten and self.on_rewrite is not None:
            self.on_rewrite(start, count, hash_at, translate)
        # translate and validate everything before changing anything: a bad message stores nothing
        incoming = [translate(k) for k in range(start, count)]
        cut = [self._check(k, m) for k, m in zip(range(start, count), incoming, strict=True)]
        for k, m in zip(range(start, count), incoming, strict=True):
            m["h"] = hash_at(k)  # adapters leave it empty: the one place that sets it
        gone = view.visible[start:]
        if rewritten:
            self._retire(start)
        for m, over in zip(incoming, cut, strict=True):
            self._append(m, cut=over)
        return SyncReport(new=len(incoming), rewritten=rewritten, retired=retired, gone=gone)

    def _check(self, index: int, m: Incoming) -> bool:
        """Refuse ``m`` as ``check_incoming`` does; True when its text is to be cut to the cap
        (``cut_over_cap``): checked as it will be held, cut once redacted whole (``_append``)."""
        cap = self.view.policy.max_message_chars
        text = m.get("text")
        if self.cut_over_cap and isinstance(text, str) and len(text) > cap:
            check_incoming({**m, "text": cut_text(text, cap)}, index, cap)
            self.cuts.append((index, len(text)))
            return True
        check_incoming(m, index, cap)
        return False

    def _toolcall_id(self, call_id: str, entry_index: int) -> str:
        oid = f"toolcall:{self.view.session_id}:{call_id}"
        if oid in self.view.objects:
            oid = f"{oid}~{entry_index}"  # the harness reused a call id
        return oid

    def _scrub(self, m: Incoming) -> tuple[Incoming, int]:
        """The message with secrets redacted from every string it carries: its text, its tool
        calls' arguments (a JSON string or an object) and what the adapter keeps verbatim in
        ``extra`` (content parts, thinking, a tool output's blocks); encoded bytes (``_ENCODED``)
        are left alone. ``extra``'s objects come back with their keys in sorted order, as the
        store gives them back: a session resumed from the store then renders the blocks it keeps
        verbatim (a server tool's input, a provider's fields) as the live one did, and a provider's
        prompt cache is not lost at a resume."""
        redact = self.redact
        if redact is None:
            if m.get("extra"):
                m = {**m, "extra": sorted_keys(m["extra"])}
            return m, 0
        total = 0
        known = self._clean

        def clean(value: Any) -> Any:
            nonlocal total
            if isinstance(value, str):
                if value in known or _ENCODED.fullmatch(value):
                    return value
                text, n = redact(value)
                if n:
                    total += n
                elif len(value) <= _CLEAN_MEMO_CHARS and text == value:
                    if len(known) >= _CLEAN_MEMO_SIZE:
                        known.clear()
                    known.add(value)
                return text
            if isinstance(value, dict):
                return {k: clean(value[k]) for k in sorted(value)}
            if isinstance(value, list):
                return [clean(v) for v in value]
            return value

        m = dict(m)  # type: ignore[assignment]
        if m.get("text"):
            m["text"] = clean(m["text"])
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "arguments": clean(c["arguments"])} for c in m["tool_calls"]]
        if m.get("extra"):
            m["extra"] = clean(m["extra"])
        return m, total

    def _append(self, m: Incoming, *, cut: bool = False) -> None:
        # redacted whole, then cut: cut first, a secret the cut went through, or one a detector
        # knows by what follows it (an AWS secret key by its key id), would be stored
        m, redacted = self._scrub(m)
        cap = self.view.policy.max_message_chars
        if cut and isinstance(m.get("text"), str) and len(m["text"] or "") > cap:
            m = {**m, "text": cut_text(m["text"] or "", cap)}
            if m.get("extra"):  # its parts hold the text as it came: they hold it as cut
                m["extra"] = _cut_parts(m["extra"], m["text"] or "")
        view = self.view
        i = len(view.entries)
        entry: Entry = {"i": i, "role": m["role"], "text": m.get("text"), "h": m["h"]}
        if m.get("ts") is not None:
            entry["ts"] = m["ts"]
        extra = dict(m.get("extra") or {})
        # A tool output as the harness gave it (images, several blocks) belongs to the tool-call
        # object, so that evicting the object erases it: the chat entry keeps the rest.
        blocks = extra.pop("full", None) if m["role"] == "tool" else None
        if extra:
            entry["extra"] = extra
        if m.get("extra_chars"):
            entry["extra_chars"] = m["extra_chars"]
        if m.get("block_chars"):
            entry["block_chars"] = m["block_chars"]
        entry["ft"] = estimate_tokens(msg_chars(m))
        if m.get("tool_calls"):
            calls: list[ToolCall] = []
            for c in m["tool_calls"]:
                oid = self._toolcall_id(c["id"], i)
                self.call_names[c["id"]] = c["name"]
                self.call_objects[c["id"]] = oid
                self.call_entries[c["id"]] = i
                calls.append({"id": c["id"], "name": c["name"], "arguments": c["arguments"], "object": oid})
            entry["tool_calls"] = calls
        if m["role"] == "tool":
            call_id = m.get("tool_call_id", "")
            oid = self.call_objects.pop(call_id, "") or self._toolcall_id(call_id, i)
            text = m.get("text") or ""
            entry["text"] = None
            entry["tool_call_id"] = call_id
            entry["object"] = oid
            obj = ObjInfo(
                id=oid,
                kind="toolcall",
                meta={
                    "session": view.session_id,
                    "name": m.get("tool_name") or self.call_names.get(call_id, "tool"),
                    "call_id": call_id,
                    "turn": view.turn + 1,
                    "tokens": estimate_tokens(len(text) + int(m.get("extra_chars") or 0)),  # images too
                    "preview": _preview(text),
                    "is_error": bool(m.get("is_error", False)),
                    **({"redacted": redacted} if redacted else {}),
                    **({"blocks": blocks} if blocks is not None else {}),
                },
                content=text,
                state="active",
                seq=i,
                since=view.turn + 1,
                entry=i,
                call_entry=self.call_entries.pop(call_id, None),
            )
            call = self._rearmed.pop(call_id, None)
            if call is not None and obj.call_entry == call[0]:
                # the result anew of a call still shown (the harness rewrote the result alone):
                # the call names it, not the one retired
                call[1]["object"] = oid
                self.writer.forget_entry(call[0])
                self.writer.dirty_pages.add(call[0] // PAGE_SIZE)
                view.reset_render(entries_changed=True)
            view.add_object(obj)
            doc, encoded = ToolcallDoc(id=oid, content=text, meta=obj.meta).encode()
            # arriving, a result is active in its place: only later changes are state versions
            self.writer.queue(doc, ("obj", obj), encoded)
        view.entries.append(entry)
        view.visible.append(i)
        self.full += entry["ft"]
        self.writer.dirty_pages.add(i // PAGE_SIZE)

    def _retire(self, keep: int) -> None:
        view = self.view
        gone = view.visible[keep:]
        if gone:
            self.retired.append([gone[0], gone[-1] + 1])
        for i in gone:
            oid = view.entries[i].get("object")
            obj = view.objects.get(oid) if oid else None
            if obj is not None and obj.call_entry is not None and _shown_before(view.visible, obj.call_entry, keep):
                # its call stays shown: the result that comes in its place is that call's
                call_id = view.entries[i].get("tool_call_id", "")
                for c in view.entries[obj.call_entry].get("tool_calls") or ():
                    if c["id"] == call_id and c.get("object") == oid:
                        self.call_entries[call_id] = obj.call_entry
                        self._rearmed[call_id] = (obj.call_entry, c)
            if obj is not None and obj.state == "active":
                view.set_state(obj, state="inactive", collapsed=True)
                self.writer.record_state(obj, "system", "history rewritten by the harness")
        self.full -= sum(view.entries[i].get("ft", 0) for i in gone)
        del view.visible[keep:]
        view.reset_render()
        self.writer.queue_session_doc()

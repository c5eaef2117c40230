"""The adapter protocol and the hook that runs it before every model call.

An adapter translates a harness's message format to neutral ``Incoming`` messages and neutral
rendered messages back, validates the result, and nothing else. ``ContextHook`` drives it:
cursor-based ingestion (only messages past the cursor are translated), assembly, validation.
It accepts sync and async harness loops through one implementation.

Some harnesses pack several neutral messages into one of theirs (Anthropic and pydantic-ai put
every tool result of a turn, and maybe some text, in one user message). Their adapters override
``count`` and return a list from ``translate``; the hook then presents the session with the flat
list of neutral messages (the session's cursor counts those), derives each one's hash from its
harness message's hash, and names the harness message in errors. Rendering goes the other way
one neutral message at a time; ``finalize`` then merges what the harness wants merged.

No module here may reach into the store directly: everything goes through ``Session``.
"""

from __future__ import annotations

import asyncio
import operator
import re
import threading
from abc import ABC, abstractmethod
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import ValidationError

from ..context.entries import Entry, Incoming, Msg
from ..context.ingest import SyncReport
from ..context.session import Assembly, Session
from ..context.tools import ToolRegistry, context_tools
from ..context.view import TAIL_OPEN, Rendered, SessionView, stub_text

if TYPE_CHECKING:
    from ..files.file_tools import FileTools
from .. import hashing
from ..errors import HashError, InvalidOutput, MalformedMessage, StateError, StoreError
from ..hashing import hash_value
from .file_ops import written_keys
from .pairing import Pairing, check_end, check_pairs, left_open

__all__ = [
    "Adapter",
    "ContextHook",
    "MergeCache",
    "check_message_list",
    "fallback_hash",
    "invalid",
    "message_of",
    "piece_hash",
    "reuse_equal",
    "renamed",
    "sorted_keys",
]

M = TypeVar("M")


class Adapter(ABC, Generic[M]):
    """Translates one harness's messages. Stateless apart from caches."""

    name: str = "generic"

    def hash_message(self, message: M) -> str:
        """A stable hash of one raw harness message (cursor checks). The default suits JSON-like
        messages; one that cannot be hashed still gets a hash, and ``translate`` rejects it."""
        try:
            return hash_value(message)
        except (HashError, TypeError, ValueError):
            return fallback_hash(message)

    def resume(self, entries: Sequence[Entry]) -> None:  # noqa: B027 - optional hook, most adapters need none
        """Learn what a caching adapter knew of the session's history before this process: the
        visible chat entries of a resumed session (each with the hash ``hash_message`` gave its
        harness message, ``"<hash>/<piece>"`` for a piece of a split one)."""

    @abstractmethod
    def translate(self, message: M, index: int) -> Incoming | list[Incoming]:
        """Harness message → ``Incoming``, or the ``count(message)`` neutral messages it holds, in
        order; raise ``MalformedMessage`` naming ``index``. (``Session.sync`` sets the ``h`` of each.)"""

    def count(self, message: M) -> int:
        """How many neutral messages ``translate`` makes of ``message`` (at least one), judged
        from its structure alone: it is called for every message on every call, so keep it cheap.
        Adapters that override it are *splitting* adapters."""
        return 1

    def requested(self, message: M) -> bool:
        """Whether an assistant ``message`` came from a model call (a harness may write an answer
        in place of a call it never made: Pi, for a run aborted between calls). Default: yes."""
        return True

    def sent(self, message: M) -> bool:
        """Whether the harness sends ``message`` to the model at all (a message it keeps only for
        its own UI is left out of the context and of the full-transcript count). Default: yes."""
        return True

    @abstractmethod
    def render_msg(self, msg: Msg) -> M:
        """Neutral rendered message → harness message."""

    @property
    @abstractmethod
    def pairing(self) -> Pairing[M]:
        """How the harness's messages pair tool calls with results (``pairing.py``), declared
        once per adapter as a class attribute (``pairing = OPENAI_PAIRING``). The hook checks
        the rendered list with it: every call answered, every result answering a call, and the
        list ending where the provider expects."""

    def finalize(self, messages: list[M]) -> list[M]:
        """The rendered list as the harness must receive it, e.g. consecutive messages of one role
        merged. Called once per turn on the whole list, after the pairing check and before the
        check of how the list ends; must not change what each message says. Default:
        unchanged."""
        return messages

    def tool_definitions(self, tools: list[dict[str, Any]]) -> list[Any]:
        """Neutral tool schemas (``{name, description, parameters}``) in the harness's format."""
        return list(tools)


def piece_hash(message_hash: str, pieces: int, piece: int) -> str:
    """The hash of piece ``piece`` of a harness message that holds ``pieces`` neutral messages:
    the message's own hash for one, ``"<hash>/<piece>"`` for more (so rewriting the message
    changes the hash of everything it holds); ``message_of`` reads it back."""
    return message_hash if pieces == 1 else f"{message_hash}/{piece}"


def message_of(entry_hash: str) -> str:
    """The hash of the harness message a chat entry came from (``piece_hash``'s first part)."""
    return entry_hash.split("/", 1)[0]


def fallback_hash(message: Any) -> str:
    """A hash for a message that has no canonical JSON form (``translate`` rejects it): of its
    repr, or of its type if even that recurses too deep."""
    try:
        return hash_value(repr(message))
    except RecursionError:
        return hash_value(f"<{type(message).__name__} nested too deeply>")


def renamed(e: MalformedMessage, index: int | None, field: str | None) -> MalformedMessage:
    """The same error (same type, same detail) naming another message index and field."""
    where = []
    if e.index is not None:
        where.append(f"message {e.index}")
    if e.field is not None:
        where.append(f"field {e.field!r}")
    detail = str(e).removeprefix(", ".join(where) + ": ") if where else str(e)
    return type(e)(detail, index=index, field=field)


def sorted_keys(value: Any, *, index: int | None = None, field: str | None = None) -> Any:
    """``value`` with every object's keys in sorted order, as the store gives it back: tool call
    arguments that are objects are taken in this form, so that a live session and one rebuilt from
    the store show the same call text. ``index`` and ``field`` name the value in errors."""
    try:
        return hashing.sorted_keys(value)
    except RecursionError:
        raise MalformedMessage("nested too deeply", index=index, field=field) from None
    except TypeError:  # keys that do not sort (not all strings): the store refuses them anyway
        raise MalformedMessage("object keys must be strings", index=index, field=field) from None


class MergeCache(Generic[M]):
    """What ``finalize`` built from the last list it merged, and from each run of messages in it.

    The hook hands ``finalize`` the same message objects for the unchanged part of the history
    every turn. A merge goes on from the last place a run started in the last list before which
    the new list holds the same objects (``resume``), so a turn merges what came since, not the
    whole list; runs it merges anew are looked up by the identity of their messages (``get``), so
    a run is built once. Entries not used in a turn are dropped at the next; each entry holds its
    inputs, so an id is never reused while cached.
    """

    def __init__(self) -> None:
        self._prev: dict[tuple[Any, ...], tuple[list[M], M]] = {}
        self._next: dict[tuple[Any, ...], tuple[list[M], M]] = {}
        # the last list merged to its end (``done``): what it became, where its runs started
        # (index, messages out before it, ``len(log)`` there) and what its merge learned
        self._input: list[M] = []
        self._output: list[M] = []
        self._cuts: list[tuple[int, int, int]] = []
        self._log: list[Any] = []
        self._pending: list[tuple[int, int, int]] = []
        self.log: list[Any] = []
        """What the merge under way learns as it reads and needs later on (pydantic-ai: the tool
        name of each call): the last list's, up to where ``resume`` goes on from."""

    def resume(self, messages: Sequence[M]) -> tuple[int, list[M]]:
        """Where a merge of ``messages`` goes on from, and what it put out before that: the last
        place a run started in the last list merged such that ``messages`` holds the same objects
        up to it and at it (0 and nothing when there is none), with ``log`` as it was there.
        Nothing of the last list is changed until ``done``: a merge that fails leaves it whole."""
        same = 0
        for a, b in zip(messages, self._input, strict=False):
            if a is not b:
                break
            same += 1
        k = bisect_right(self._cuts, (same,))  # the cuts before index ``same``
        if k == 0:
            self._pending, self.log = [], []
            return 0, []
        index, produced, logged = self._cuts[k - 1]
        self._pending, self.log = self._cuts[: k - 1], self._log[:logged]  # the merge marks its first run again
        return index, self._output[:produced]

    def cut(self, index: int, produced: int) -> None:
        """A run starts at ``index`` of the list being merged, ``produced`` messages out before it."""
        self._pending.append((index, produced, len(self.log)))

    def done(self, messages: Sequence[M], out: list[M]) -> None:
        """The list merged to its end and what it became (copied: the caller may change its list)."""
        self._input, self._output = list(messages), list(out)
        self._cuts, self._log = self._pending, self.log

    def get(self, run: list[M], build: Callable[[list[M]], M], also: tuple[Any, ...] = ()) -> M:
        """The merge of ``run``, built by ``build`` unless the same objects were merged before;
        ``also``: what else the merge depends on (pydantic-ai: the names of earlier calls)."""
        key = (*map(id, run), *also)
        hit = self._next.get(key) or self._prev.get(key)
        merged = hit[1] if hit is not None and all(a is b for a, b in zip(hit[0], run, strict=True)) else build(run)
        self._next[key] = (list(run), merged)
        return merged

    def turn(self) -> None:
        """Call once per finalized list: what that list did not use is forgotten next time."""
        self._prev, self._next = self._next, {}


def _incoming_list(translated: Incoming | list[Incoming]) -> list[Incoming]:
    return translated if isinstance(translated, list) else [translated]


def reuse_equal(last: list[M], messages: list[M]) -> list[M]:
    """``messages`` with each one equal to the one at its place in ``last`` (those of the last
    call) taken as that one: a harness that copies its whole history for every call (the Agents
    SDK's items, google-genai's contents dumped again) then has the hook read what came since, not
    all of it by hash (comparing them is a pass over the list, but no hashing)."""
    kept = [old if old == new else new for old, new in zip(last, messages, strict=False)]
    return kept + messages[len(kept) :]


def invalid(e: ValidationError, index: int | None = None) -> MalformedMessage:
    """pydantic's first complaint about a harness message as a ``MalformedMessage`` naming the
    message (``index``, or the list index its location begins with) and the field."""
    err = e.errors(include_url=False, include_input=False)[0]
    loc = list(err["loc"])
    if index is None and loc and isinstance(first := loc[0], int):
        index = first
        del loc[0]
    return MalformedMessage(err["msg"], index=index, field=".".join(map(str, loc)) or None)


def check_utf8(value: str, index: int, field: str) -> str:
    """``value`` if it is text every encoder agrees on (no lone surrogates); else an error that
    names the harness message and field."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise MalformedMessage(
            f"not valid UTF-8 text ({e.reason} at position {e.start})", index=index, field=field
        ) from None
    return value


def _block_texts(rendered: Rendered) -> frozenset[str]:
    """The texts of the ``<context_os>`` blocks of one rendering (standing in the history or at
    its end): no harness message holds one, unless it is the context fed back."""
    msgs = [*(m for _, unit in rendered.spliced for m in unit.msgs), *rendered.volatile]
    return frozenset(
        text
        for m in msgs
        if m["role"] == "user" and isinstance(text := m.get("text"), str) and text.startswith(TAIL_OPEN)
    )


def check_message_list(messages: Any) -> None:
    """Refuse a ``messages`` argument that is not a list of messages (a harness bug, reported as
    bad input rather than a crash deep inside)."""
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes | bytearray):
        raise MalformedMessage(f"messages must be a list of messages, not {type(messages).__name__}")


class _Miscounted(InvalidOutput):
    """A message translated into another number of neutral messages than it was counted as: a
    message of an earlier call changed in place (its reading, kept by identity, is stale), or an
    adapter whose ``count`` and ``translate`` disagree."""


WINDOW = 256
"""The newest harness messages a hook compares by identity with those its last sync took in, to
see a message changed among them (``ContextHook.every_message`` off): older ones are sampled."""


_SCALARS = frozenset({str, int, float, bool, type(None)})
_MISSING = object()


class _Unfit(Exception):
    """A message ``_FlatHashes`` does not keep: it holds objects other than dicts, lists and
    scalars (an SDK object can change in place), or too many."""


def _snapshot(value: Any, budget: list[int], depth: int = 0) -> Any:
    """The objects ``value`` is made of: a scalar itself, a dict or list as ``(it, its items'
    snapshots)`` (``_Unfit`` past ``_FlatHashes.NODES`` items or 16 levels, or another type)."""
    t = type(value)
    if t in _SCALARS:
        return value
    if (t is not dict and t is not list) or depth >= 16 or budget[0] < len(value):
        raise _Unfit
    budget[0] -= len(value)
    if t is dict:
        return (value, tuple((k, _snapshot(v, budget, depth + 1)) for k, v in value.items()))
    return (value, tuple(_snapshot(v, budget, depth + 1) for v in value))


def _unchanged(value: Any, snap: Any) -> bool:
    """Whether ``value`` is still made of the objects of ``snap`` (``_snapshot``): a container
    can change in place, a scalar cannot."""
    if type(snap) is not tuple:  # (a scalar: a snapshot holds no tuple but its own)
        return value is snap
    obj, items = snap
    if value is not obj or len(value) != len(items):
        return False
    if type(obj) is dict:
        return all(_unchanged(value.get(k, _MISSING), s) for k, s in items)
    return all(_unchanged(v, s) for v, s in zip(value, items, strict=True))


class _FlatHashes:
    """The hashes of the first and newest harness messages hashed at the hook's last calls (the
    next call compares those again), by the message object, with the objects each was made of
    (``_snapshot``): dicts and lists of strings, numbers, booleans and null. Such a message found
    made of the same objects is unchanged (a string or a number cannot change in place; a dict or
    list that did holds another object or another count). The hook compares the first, middle and
    newest messages read before at every call, and hashed them anew: a system prompt of 30 KB
    serialised and hashed at every call. An SDK object (which can change in place) is hashed anew
    each time."""

    SIZE = 256
    NODES = 4096

    def __init__(self) -> None:
        self._hashes: dict[int, tuple[Any, str]] = {}

    def get(self, message: Any) -> str | None:
        hit = self._hashes.get(id(message))
        return hit[1] if hit is not None and _unchanged(message, hit[0]) else None

    def put(self, message: Any, h: str) -> None:
        try:
            snap = _snapshot(message, [self.NODES])
        except _Unfit:
            return
        if type(snap) is tuple:  # (held: its id names no other object)
            if len(self._hashes) >= self.SIZE:
                self._hashes.clear()
            self._hashes[id(message)] = (snap, h)


class _Layout(Generic[M]):
    """One call's harness messages seen as the flat list of neutral messages they hold.

    Flat position ``k`` is piece ``k - starts[i]`` of harness message ``i``. A message that holds
    one neutral message keeps its own hash; piece ``j`` of a larger one hashes as ``"<hash>/<j>"``,
    so rewriting a harness message still changes the hash of everything it holds.
    """

    def __init__(
        self,
        adapter: Adapter[M],
        messages: Sequence[M],
        starts: list[int] | None = None,
        total: int = 0,
        *,
        hashed: _FlatHashes | None = None,
    ):
        """For an adapter that splits messages (``Adapter.count``), ``starts`` and ``total`` are
        the flat position of each message and the neutral messages they hold, as ``_Seen``
        counted them; otherwise each message is one neutral message. ``hashed``: the messages
        hashed at the hook's last calls (None: none is remembered)."""
        self.adapter = adapter
        self.hashed = hashed
        self.messages = messages
        self.split = starts is not None
        self.starts = starts or []
        self.total = total if self.split else len(messages)
        self._hashes: dict[int, str] = {}
        self._translated: dict[int, list[Incoming]] = {}
        self._adapter_error: MalformedMessage | None = None
        self.returned: Sequence[M] = ()
        """What the hook returned at its last call (the caller may have appended to that list
        since: its first ``returned_count`` are the hook's): a message to translate that is the
        one it returned at the same place is refused (``pieces``)."""
        self.returned_count = 0
        self.blocks: frozenset[str] = frozenset()
        """The texts of the ``<context_os>`` blocks the hook returned at its last call: a user
        message to translate that holds one holds that block fed back (a copy of the returned list,
        made by saving it as JSON, say, which ``returned`` cannot tell by identity)."""
        self.view: SessionView | None = None
        """The session's view: a tool message to translate whose text is the stub of one of its
        results (``is_stub``) is that stub fed back, the same mistake through a copy, in a
        context that held no ``<context_os>`` block."""

    def locate(self, k: int) -> tuple[int, int]:
        """(harness index, piece) of flat position ``k``."""
        if not self.split:
            return k, 0
        i = bisect_right(self.starts, k) - 1
        return i, k - self.starts[i]

    def _count_of(self, i: int) -> int:
        if not self.split:
            return 1
        end = self.starts[i + 1] if i + 1 < len(self.starts) else self.total
        return end - self.starts[i]

    def _harness_hash(self, i: int) -> str:
        h = self._hashes.get(i)
        if h is None:
            message, hashed = self.messages[i], self.hashed
            h = hashed.get(message) if hashed is not None else None
            if h is None:
                h = self.adapter.hash_message(message)
                if hashed is not None and (i == 0 or i == len(self.messages) - 1):
                    hashed.put(message, h)  # (the next call compares the first and this last again)
            self._hashes[i] = h
        return h

    def flat(self, i: int) -> int:
        """The flat position of harness message ``i`` (``len(messages)``: the end)."""
        if not self.split:
            return i
        return self.starts[i] if i < len(self.starts) else self.total

    def hash_at(self, k: int) -> str:
        i, j = self.locate(k)
        return piece_hash(self._harness_hash(i), self._count_of(i), j)

    def pieces(self, i: int) -> list[Incoming]:
        """The neutral messages of harness message ``i``, translated once per call."""
        got = self._translated.get(i)
        if got is None:
            if i < self.returned_count and self.messages[i] is self.returned[i]:
                raise self._fed_back(i)
            try:
                got = _incoming_list(self.adapter.translate(self.messages[i], i))
            except MalformedMessage as e:
                self._adapter_error = e  # names the harness message already
                raise
            if self.blocks and any(p["role"] == "user" and self._holds_block(p.get("text")) for p in got):
                raise self._fed_back(i)
            if self.view is not None and any(p["role"] == "tool" and is_stub(self.view, p.get("text")) for p in got):
                raise self._fed_back(i)
            if len(got) != self._count_of(i):
                raise _Miscounted(
                    f"adapter {self.adapter.name!r} translated message {i} into {len(got)} messages "
                    f"but counted {self._count_of(i)} (an adapter bug: please report)"
                )
            self._translated[i] = got
        return got

    def _holds_block(self, text: str | None) -> bool:
        """Whether a user message's ``text`` holds a block of the last call (whole, or joined with
        others: Anthropic merges them into the user message of tool results before them)."""
        return text is not None and TAIL_OPEN in text and any(b in text for b in self.blocks)

    def _fed_back(self, i: int) -> MalformedMessage:
        self._adapter_error = MalformedMessage(
            "this message is one the hook returned at its last call: the history passed in must be the "
            "harness's own (its messages as they came, the replies and tool results appended to "
            "it), never the assembled context, whose stubs and <context_os> blocks would be taken "
            "in as new messages",
            index=i,
        )
        return self._adapter_error

    def translate(self, k: int) -> Incoming:
        i, j = self.locate(k)
        return self.pieces(i)[j]

    def harness_error(self, e: MalformedMessage) -> MalformedMessage:
        """``e`` naming the harness message: the session names flat positions."""
        if e is self._adapter_error or not self.split or e.index is None or not 0 <= e.index < self.total:
            return e
        i, _ = self.locate(e.index)
        return e if i == e.index else renamed(e, i, e.field)


_STUB_REF = re.compile(r', collapsed: activate\("r(\d+)"\)\]')


def is_stub(view: SessionView, text: str | None) -> bool:
    """Whether ``text`` is the stub the session shows in place of one of its collapsed results
    (which names the result's entry, ``r<entry>``): no harness holds one in its history, unless
    it kept the assembled context, or a copy of it, as its history."""
    if text is None or not text.startswith("[") or (m := _STUB_REF.search(text)) is None:
        return False
    k = int(m.group(1))
    if k >= len(view.entries):
        return False
    obj = view.objects.get(view.entries[k].get("object", ""))
    return obj is not None and text == stub_text(obj, view.layout)


def _same_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many of the first messages of ``a`` and ``b`` are the same objects."""
    if all(map(operator.is_, a, b)):
        return min(len(a), len(b))
    return next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x is not y)


class _Seen(Generic[M]):
    """What a hook made of the harness's message list at its last call: the messages it sends
    (``Adapter.sent``) and the flat position of each (``Adapter.count``), so that a call reads
    only the messages that came since, not the whole list again: a harness appends to one list.
    A list where a message read before is no longer the same object (rewritten, compacted, or
    built anew for each call) is read whole again; the last message is always read again (a
    harness may still be changing it in place). Which messages read before are compared follows
    the hook's ``every_message``: all of them, or the first, the middle one and the newest
    ``WINDOW``, as the session's own sync compares them (until 2026-12-04 every one, and a copy
    of the list kept at every call: the Anthropic, Pi and pydantic-ai hooks cost 1.4-2.3 times
    more a call at 20,000 messages than at 1,000)."""

    def __init__(self) -> None:
        self.raw = 0
        """Harness messages whose reading is kept: all but the last of the last call's."""
        self.marks: tuple[tuple[int, M], ...] = ()
        """Kept messages and their index: a list where any of them is another object is read whole."""
        self.sent: list[M] = []
        """The messages sent among them, then (until the next call) those of the rest."""
        self.kept = 0
        """How many of ``sent`` come from the kept messages."""
        self.starts: list[int] = []
        self.total = 0
        """Neutral messages the kept ones hold."""
        self.hashed = _FlatHashes()

    def layout(self, adapter: Adapter[M], messages: Sequence[M], *, every: bool = False) -> _Layout[M]:
        filters = type(adapter).sent is not Adapter.sent
        split = type(adapter).count is not Adapter.count
        if not filters and not split:
            return _Layout(adapter, messages, hashed=self.hashed)
        n = len(messages)
        # the kept reading must end before the last message (it is read again): a list no longer
        # than what was kept lost its last messages, and is read whole
        if self.raw >= n or not all(messages[i] is m for i, m in self.marks):
            self.raw, self.kept, self.total = 0, 0, 0
        sent, starts, total, raw = self.sent, self.starts, self.total, self.raw
        del sent[self.kept :], starts[self.kept :]
        self.raw, self.kept, self.total, self.marks = 0, 0, 0, ()  # nothing is kept if reading fails
        kept = (0, 0)
        for k in range(raw, n):
            m = messages[k]
            if k == n - 1:
                kept = (len(sent), total)
            if filters and not adapter.sent(m):
                continue
            sent.append(m)
            if split:
                starts.append(total)
                total += max(1, adapter.count(m))
        self.raw = max(0, n - 1)
        self.kept, self.total = kept
        raw = self.raw
        marked = range(raw) if every else sorted(i for i in {0, raw // 2, *range(max(0, raw - WINDOW), raw)} if i < raw)
        self.marks = tuple((i, messages[i]) for i in marked)
        return _Layout(adapter, sent, starts if split else None, total, hashed=self.hashed)


_NONE_OPEN: frozenset[str] = frozenset()


class _Output(Generic[M]):
    """Converted history units and the pairing state after each, reused across turns for the
    prefix of units the view reports unchanged: a turn converts and checks only what changed."""

    def __init__(self) -> None:
        self.messages: list[M] = []
        self.offsets: list[int] = []
        self.pending: list[frozenset[str]] = []
        self.render_no = 0
        """The view's committed render these units are of (``Rendered.render_no``)."""

    def update(self, adapter: Adapter[M], rendered: Rendered) -> list[str]:
        # units kept from this hook's last render, if the view's last committed one was that one
        # (another hook of the session may have rendered since: the prefix counts from its render)
        follows = rendered.render_no and rendered.render_no == self.render_no + 1
        self.render_no = rendered.render_no
        keep = min(rendered.stable_prefix, len(self.offsets)) if follows else 0
        if keep < len(self.offsets):
            del self.messages[self.offsets[keep] :]
            del self.offsets[keep:], self.pending[keep:]
        problems: list[str] = []
        state = self.pending[-1] if self.pending else frozenset()
        for unit in rendered.units_from(keep):
            converted = [adapter.render_msg(m) for m in unit.msgs]
            found, after = check_pairs(adapter.pairing, converted, state)
            state = _NONE_OPEN if not after else state if after == state else after  # shared while unchanged
            problems += found
            self.offsets.append(len(self.messages))
            self.pending.append(state)
            self.messages.extend(converted)
        return problems

    @property
    def open_calls(self) -> frozenset[str]:
        return self.pending[-1] if self.pending else frozenset()


class ContextHook(Generic[M]):
    """``transform_context`` for one session: call it with the harness's full message list
    before every model call and send what it returns instead.

    Returned message objects are shared with an internal cache: treat them as read-only.
    """

    adapter_class: ClassVar[type[Adapter[Any]] | None] = None
    """The adapter the hook of one harness makes for itself (``OpenAIHook``: ``OpenAIAdapter``)."""

    def __init__(
        self,
        session: Session,
        adapter: Adapter[M] | None = None,
        *,
        files: FileTools | None = None,
        on_sync: Callable[[Session, SyncReport], None] | None = None,
    ):
        """``adapter``: the harness's adapter (default: a new ``adapter_class``). ``files``: the
        file tools, registered with the context tools. ``on_sync(session, report)``, if given,
        runs after the new messages are ingested and before the context is assembled: e.g. to
        show the files that new tool results touched; its entries are the last ``report.new``
        visible ones. One that raises (the store out of reach while it records an edit) gets
        those entries again at the next call, before the new ones: an ``on_sync`` skips what it
        applied of them, by their ``Entry["i"]`` (``VirtualFiles.observe`` and
        ``host_tool_observer`` do). A session recorded with another harness is
        refused (``StateError``), its lease given back until its next write (``Session.lend``) unless
        a hook of its own took it."""
        if adapter is None:
            if self.adapter_class is None:
                raise TypeError(f"{type(self).__name__} needs an adapter")
            adapter = self.adapter_class()
        if "generic" not in (session.harness, adapter.name) and session.harness != adapter.name:
            # its history is in another format: every message would read as a rewrite of it
            refusal = StateError(
                f"session {session.id!r} was recorded with harness {session.harness!r}, not {adapter.name!r}: "
                "use its own hook, or another session id"
            )
            # and the session's lease is given back: kept, it would keep every other process out
            # of the session until this one ends (its own hook takes it again at its first write);
            # not while a hook of its own uses it (another process could take it from under that)
            if session.hooked:
                raise refusal
            try:
                session.lend()
            except (StoreError, StateError) as e:
                raise refusal from e
            raise refusal
        session.hooked = True
        self.session = session
        self.adapter = adapter
        adapter.resume([session.view.entries[i] for i in session.view.visible])
        self.files = files
        self.registry: ToolRegistry = files.registry if files is not None else context_tools(session)
        """The session's tools: the one dispatcher every tool call of this hook goes through."""
        self.on_sync = on_sync
        self._unobserved: list[int] = []
        """The entries (``Entry["i"]``) of the last ``on_sync`` call, while it has not returned:
        the next call hands them to it again (``_observed``). Kept in memory only: a process that
        ends with some leaves them unobserved (a new one observes what its syncs take in)."""
        self.last: Assembly | None = None
        self._lock = threading.Lock()
        self._output: _Output[M] = _Output()
        self._seen: _Seen[M] = _Seen()
        self._returned: tuple[list[M], int] = ([], 0)
        self._blocks: frozenset[str] = frozenset()
        """The texts of the ``<context_os>`` blocks of the last call's context (``_Layout.blocks``)."""
        self.every_message = False
        """Compare every message of the history with what the session holds at each call, to see
        a change anywhere (``Session.sync``'s ``same``): the JSON-RPC server does, whose clients
        send the whole history as JSON at every call; in a process the history is the harness's
        own list, and proving all of it unchanged costs a pass over it at every call (0.6 ms at
        50,000 messages), so by default the first, middle and last messages are compared."""
        self._synced: tuple[M, ...] = ()
        """The messages the last sync took in (``_Layout.messages``), when ``every_message``; else
        the newest ``WINDOW`` of them, from ``_synced_from``."""
        self._synced_from = 0
        self._synced_at = -1
        """The session's sync count (``Ingest.syncs``) after that sync: another hook's sync since
        (two hooks of one session, called in turn) may have rewritten the history, and the
        messages this one took in vouch for nothing then."""
        self._volatile: list[M] = []
        """The volatile messages the last call returned after the history's (``_Output``): a
        retry returns that list again, made anew as this class made it (a subclass, or the
        caller, may change the list it got in place). A copy of the whole list at every call,
        for the retry that seldom comes, cost 13% of a call at 30,000 messages."""

    def transform_context(self, messages: Sequence[M]) -> list[M]:
        """Ingest what is new in ``messages``, assemble the context, return it validated."""
        check_message_list(messages)
        adapter = self.adapter
        with self._lock:
            try:
                layout, report = self._sync(messages)
            except _Miscounted:
                # a message read at an earlier call changed in place: the list is read whole again
                self._seen = _Seen()
                layout, report = self._sync(messages)
            if self.files is not None:
                self._mark_writes(report)
            if self.on_sync is not None:
                observed = self._observed(report)
                self.on_sync(self.session, observed)
                self._unobserved = []
            repeat = self.session.again(report)
            if repeat is not None and repeat is self.last:
                # the same call again (a retry): the same context, no new turn (not after a call
                # that failed once its turn was assembled: that one returned nothing)
                # (the history's messages are as that call left them: only a new turn changes them)
                same = adapter.finalize(self._output.messages + self._volatile)
                self._returned = (same, len(same))
                return same
            # the same call again after a restart (this hook has returned nothing yet) is its last
            # frame's assembly, rendered anew; after a call that failed once assembled, a new turn
            assembly = repeat if repeat is not None and self.last is None else self.session.assemble(report)
            rendered = assembly.rendered
            try:
                problems = self._output.update(adapter, rendered)
                volatile = [adapter.render_msg(m) for m in rendered.volatile]
                found, open_calls = check_pairs(adapter.pairing, volatile, self._output.open_calls)
                problems += found + left_open(adapter.pairing, open_calls)
                out = adapter.finalize(self._output.messages + volatile)
                last_role = layout.pieces(len(layout.messages) - 1)[-1]["role"] if layout.messages else None
                problems += check_end(adapter.pairing, out, last_input_role=last_role)
                if problems:
                    raise InvalidOutput("assembled context failed validation: " + "; ".join(problems[:5]))
            except BaseException:
                # what it made of a render it did not return is no base for the next: its units,
                # kept, would not be checked again (a retry returned the context just refused)
                self._output = _Output()
                raise
            self.last = assembly
            self._returned = (out, len(out))
            self._blocks = _block_texts(rendered)
            self._volatile = volatile
            return out

    def _sync(self, messages: Sequence[M]) -> tuple[_Layout[M], SyncReport]:
        """Take in what is new in ``messages`` (``Session.sync``)."""
        # messages the harness never sends are left out; only what is new is read
        layout = self._seen.layout(self.adapter, messages, every=self.every_message)
        layout.returned, layout.returned_count = self._returned
        layout.blocks = self._blocks
        layout.view = self.session.view
        prior, start = self._synced, self._synced_from
        self._synced, self._synced_from = (), 0
        if self._synced_at != self.session.ingest.syncs:
            prior = ()  # another hook synced since: it may have rewritten what this one took in
        # the messages that are the objects the last sync took in (but its last one, which a
        # harness may still be changing in place) need no hashing: they were compared then
        end = start + max(0, len(prior) - 1)
        vouched: int | None = None
        same: int | None = None  # where the messages stop being the objects the last sync took in
        if self.every_message:
            same = _same_prefix(layout.messages, prior)
            vouched = layout.flat(min(same, end))
        elif start < len(layout.messages) and start < end:
            # the newest ones that are not those objects (a harness that rewound and ran again,
            # a message edited) are compared by hash from the first of them on: the session's own
            # sample (the first, middle and last message) may find those three unchanged
            same = start + _same_prefix(layout.messages[start:end], prior)
            if same < min(end, len(layout.messages)):
                vouched = layout.flat(same)
        elif not prior and self.session.view.visible:
            # this hook took in nothing of the history yet (its first call: a process that resumed
            # the session, a restarted proxy; or another hook synced since): it vouches for none,
            # and every message is compared, once (the session's sample of three would miss a
            # message changed elsewhere: an earlier prompt edited while nothing watched)
            vouched = 0
        if same is not None and same < min(end, len(layout.messages)):
            # objects made anew for this call (a client that sends its history as JSON, the
            # proxy's requests): none would be found again, remembering them only costs
            layout.hashed = None
        try:
            report = self.session.sync(layout.total, layout.hash_at, layout.translate, vouched)
        except MalformedMessage as e:
            again = layout.harness_error(e)
            if again is e:
                raise
            raise again from None
        self._synced_from = 0 if self.every_message else max(0, len(layout.messages) - WINDOW)
        self._synced = tuple(layout.messages[self._synced_from :])
        self._synced_at = self.session.ingest.syncs
        return layout, report

    def _observed(self, report: SyncReport) -> SyncReport:
        """What ``on_sync`` is to observe: the new entries of ``report``, after those of a call
        whose ``on_sync`` raised (``_unobserved``). Its sync took them in, so no later sync
        reports them new: a harness that retries the call would never have them observed (an
        edit missed, the file shown at its text before it). The entries since the first of them
        the history still shows: the others are all new (entries are only appended); those a
        rewrite of the history retired meanwhile are not observed."""
        visible = self.session.view.visible
        start = len(visible) - report.new
        for i in self._unobserved:
            k = bisect_left(visible, i)
            if k < len(visible) and visible[k] == i:
                start = min(start, k)
                break
        self._unobserved = visible[start:]
        if start == len(visible) - report.new:
            return report
        return SyncReport(len(visible) - start, report.rewritten, report.retired)

    def _mark_writes(self, report: SyncReport) -> None:
        """The new results of ``write`` calls (the file tools', or a host's of that name that the
        file tools observe): the text they wrote is a file object's now, kept current, so their
        call never shows it collapsed (``Session.mark_file_text``)."""
        view = self.session.view
        for i in view.visible[len(view.visible) - report.new :]:
            e = view.entries[i]
            obj = view.objects.get(e.get("object", "")) if e["role"] == "tool" else None
            call = view.call_of(obj) if obj is not None and obj.meta.get("name") == "write" else None
            if obj is not None and call is not None and not obj.meta.get("is_error"):
                self.session.mark_file_text(obj.id, written_keys(call["arguments"]))

    def held(self, messages: Sequence[M]) -> int:
        """How many of ``messages``, from the first, the session holds already as its history
        (the same messages, by their hashes): a replay of a longer recording goes on after them."""
        return self._match(messages)[0]

    def departs(self, messages: Sequence[M]) -> int | None:
        """The index of the first of ``messages`` that differs from the history the session holds
        while the session holds more (``messages`` are not a recording of this session, or of
        another branch of it), else None: they begin with all of it, or it with all of them."""
        held, within = self._match(messages)
        return held if within else None

    def _match(self, messages: Sequence[M]) -> tuple[int, bool]:
        adapter, view = self.adapter, self.session.view
        flat = 0
        for i, m in enumerate(messages):
            if not adapter.sent(m):
                continue
            n, h = adapter.count(m), adapter.hash_message(m)
            for j in range(n):
                if flat + j >= len(view.visible):
                    return i, False
                if view.entries[view.visible[flat + j]]["h"] != piece_hash(h, n, j):
                    return i, True
            flat += n
        return len(messages), False

    async def atransform_context(self, messages: Sequence[M]) -> list[M]:
        """The same, for async loops: store work runs in a thread, off the event loop."""
        return await asyncio.to_thread(self.transform_context, list(messages))

    @property
    def tools(self) -> list[Any]:
        """Tool definitions to register with the model, in the harness's format: activate,
        deactivate, pin, unpin; with ``files``, the file tools (read, write, edit, ls, find,
        grep) whose activate/deactivate/pin/unpin also take paths."""
        return self.adapter.tool_definitions(self.registry.schemas)

    def handles(self, tool_name: str) -> bool:
        return self.registry.handles(tool_name)

    def call_tool(self, name: str, arguments: str | dict[str, Any]) -> str:
        """Execute one of our tools (``ToolRegistry.call``); returns the tool output text."""
        with self._lock:
            return self.registry.call(name, arguments)

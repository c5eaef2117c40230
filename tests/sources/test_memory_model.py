"""Markdown memory scopes (sources/memory.py) against a model of the files on disk, driven by
hypothesis: random writes, appends, deletions and archiving of ``MEMORY.md`` and topic files in
the global scope and in the project scopes of a repository and of a folder inside it, the
repository or the folder trusted and untrusted, scope folders removed, and ``remember`` by two
``MemoryScopes`` (one on the repository, one on its folder), each kept for the whole run.

What each must answer, from the files alone:

* ``items``: one item per used scope whose index exists and holds more than whitespace, its text
  the index whole, or its head cut at a line boundary within the caps and a note, or a note for a
  file with NUL bytes; the same items a fresh ``MemoryScopes`` gives;
* ``ended``: the used scopes whose index is missing or blank, and every topic file an earlier
  ``items`` saw that is gone from a scope read now (until it comes back);
* ``changed``: whether an index's bytes or the scopes used changed since the last look;
* ``passages``: every line that is not blank of every memory file of the used scopes, once, in
  paragraphs cut only where a rule says (a blank line, a heading, six lines, 1,200 characters), as
  a fresh ``MemoryScopes`` cuts them;
* ``outdated``: of the copies of passages taken at any earlier step, those whose file in a scope
  used now no longer holds their lines between their first and last line;
* ``remember``: appends exactly its line (and a topic's pointer the first time), or refuses and
  writes nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import blake3
import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from context_os.errors import InputError
from context_os.sources.memory import (
    MAX_FACT_CHARS,
    PASSAGE_CHARS,
    PASSAGE_LINES,
    MemoryScopes,
    trust_workspace,
    untrust_workspace,
)
from tests.reliability._adversarial import FUZZ, examples

INDEX = "MEMORY.md"
NAMES = [INDEX, "a.md", "b.md", "notes.txt"]
"""Files a test writes in a scope folder (``notes.txt`` is no memory file)."""
SCOPES = ["G", "R", "S"]
"""The global scope, the repository's project scope, the folder's."""
CAPS = {"root": (4, 80), "sub": (3, 50)}
"""(max_lines, max_bytes) of each ``MemoryScopes``: small, so that caps are hit."""
WHICH = st.sampled_from(["root", "sub"])
HEADING = re.compile(r"\s{0,3}#{1,6}\s")

line_text = st.one_of(
    st.text(alphabet=" #-xé\t\r", max_size=14),
    st.sampled_from(["- a fact", "x", "## topic", "- é" * 30]),
)
contents = st.builds(
    lambda lines, end, extra: "\n".join(lines).encode() + (b"\n" if end else b"") + extra,
    st.lists(line_text, max_size=12),
    st.booleans(),
    st.sampled_from([b""] * 6 + [b"\x00", b"\xff", b"\xff\xfe"]),
)
facts = st.one_of(
    st.text(alphabet="ab é-*+\n\t", max_size=14),
    st.sampled_from(["x\x01y", "x\u009by", "a" * (MAX_FACT_CHARS + 1), "- [a](a.md) is not a pointer"]),
)
topics = st.sampled_from([None, None, "a", "b.md", "c", "MEMORY", "../x", "archive"])


def lines_of(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def fold(text: str) -> str | None:
    """The fact ``remember`` writes, None when it is refused (the documented rule)."""
    fact = " ".join(p.strip() for p in text.splitlines() if p.strip())
    fact = re.sub(r"\A[-*+](?:\s+|\Z)", "", fact)
    if not fact or re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", fact):
        return None
    return fact


class MemoryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="ctxos-memory-model-"))
        self.data = self.tmp / "data"
        self.root = self.tmp / "repo"
        self.sub = self.root / "pkg"
        self.sub.mkdir(parents=True)
        (self.root / ".git").mkdir()
        self.dirs = {
            "G": self.data / "memory",
            "R": self.root / ".context_os" / "memory",
            "S": self.sub / ".context_os" / "memory",
        }
        self.files: dict[tuple[str, str], bytes] = {}
        """(scope key, name) → bytes: the model of every file in a scope folder."""
        self.archived: dict[str, int] = dict.fromkeys(SCOPES, 0)
        self.made: set[str] = set()
        """Scope folders that exist."""
        self.trusted: set[str] = set()
        """Of ``root`` and ``sub``, those listed as trusted."""
        self.ws = {"root": self.root, "sub": self.sub}
        self.mem = {k: self.fresh(k) for k in self.ws}
        self.seen_topics: dict[str, set[str]] = {k: set() for k in self.ws}
        self.ended_topics: dict[str, set[str]] = {k: set() for k in self.ws}
        self.looked: dict[str, Any] = dict.fromkeys(self.ws)
        """The fingerprint each instance's last ``items`` or ``changed`` saw (None: never)."""
        self.copies: dict[str, tuple[str, tuple[int, int], str]] = {}

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def fresh(self, which: str) -> MemoryScopes:
        lines, size = CAPS[which]
        return MemoryScopes(self.ws[which], data_dir=self.data, include_pi=False, max_lines=lines, max_bytes=size)

    # -- what the model says

    def is_trusted(self, which: str) -> bool:
        return "root" in self.trusted or which in self.trusted

    def project_key(self, which: str) -> str:
        """The folder a workspace's project scope lives in (``MemoryScopes._project_base``)."""
        if which == "root":
            return "R"
        chain = ["S", "R"]
        if self.is_trusted(which):
            chain = [k for k in chain if "root" in self.trusted or (k == "S" and "sub" in self.trusted)]
        return next((k for k in chain if k in self.made), chain[-1])

    def base(self, key: str) -> Path:
        return {"G": self.data, "R": self.root, "S": self.sub}[key]

    def used(self, which: str) -> list[tuple[str, str, str]]:
        """(scope, scope key, id prefix) of each used scope, in order."""
        out = [("global", "G", "memory:global:")]
        if self.is_trusted(which):
            key = self.project_key(which)
            tag = blake3.blake3(str(self.base(key)).encode()).hexdigest()[:16]
            out.append(("project", key, f"memory:project:{tag}:"))
        return out

    def memory_files(self, key: str) -> list[str]:
        names = sorted(n for (k, n) in self.files if k == key and n.endswith(".md"))
        return sorted(names, key=lambda n: n != INDEX)

    def fingerprint(self, which: str) -> list[tuple[str, str | None]]:
        out = []
        for _, key, prefix in self.used(which):
            data = self.files.get((key, INDEX))
            out.append((prefix + INDEX, None if data is None else "b3:" + blake3.blake3(data).hexdigest()))
        return out

    # -- writing files

    def write(self, key: str, name: str, data: bytes) -> None:
        d = self.dirs[key]
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
        self.made.add(key)
        self.files[(key, name)] = data

    @rule(key=st.sampled_from(SCOPES), name=st.sampled_from(NAMES), data=contents)
    def write_file(self, key: str, name: str, data: bytes) -> None:
        self.write(key, name, data)

    @rule(key=st.sampled_from(SCOPES), name=st.sampled_from(NAMES), data=contents)
    def append_file(self, key: str, name: str, data: bytes) -> None:
        self.write(key, name, self.files.get((key, name), b"") + data)

    @rule(key=st.sampled_from(SCOPES), name=st.sampled_from(NAMES))
    def delete_file(self, key: str, name: str) -> None:
        if (key, name) in self.files:
            (self.dirs[key] / name).unlink()
            del self.files[(key, name)]

    @rule(key=st.sampled_from(SCOPES), name=st.sampled_from(["a.md", "b.md"]))
    def archive_topic(self, key: str, name: str) -> None:
        if (key, name) in self.files:
            archive = self.dirs[key] / "archive"
            archive.mkdir(exist_ok=True)
            self.archived[key] += 1
            os.replace(self.dirs[key] / name, archive / f"{self.archived[key]}-{name}")
            del self.files[(key, name)]

    @rule(key=st.sampled_from(["R", "S"]))
    def remove_scope(self, key: str) -> None:
        shutil.rmtree(self.dirs[key], ignore_errors=True)
        self.made.discard(key)
        self.archived[key] = 0
        self.files = {k: v for k, v in self.files.items() if k[0] != key}

    @rule(which=WHICH, trust=st.booleans())
    def set_trust(self, which: str, trust: bool) -> None:
        if trust:
            trust_workspace(self.ws[which], data_dir=self.data)
            self.trusted.add(which)
        else:
            assert untrust_workspace(self.ws[which], data_dir=self.data) == (which in self.trusted)
            self.trusted.discard(which)

    @rule(which=WHICH, scope=st.sampled_from(["global", "project"]), text=facts, topic=topics)
    def remember(self, which: str, scope: str, text: str, topic: str | None) -> None:
        fact = fold(text)
        name = None
        if topic is not None:
            plain = topic.removesuffix(".md")
            name = None if plain in ("MEMORY", "archive", "../x") else plain + ".md"
        key = "G" if scope == "global" else self.project_key(which)
        index = self.files.get((key, INDEX), b"")
        target = self.files.get((key, name or INDEX), b"")

        def text_file(data: bytes) -> bool:
            return b"\x00" not in data and not data.startswith((b"\xff\xfe", b"\xfe\xff"))

        refused = (
            fact is None
            or (topic is not None and name is None)
            or (name is None and len(fact) > MAX_FACT_CHARS)
            or (scope == "project" and not self.is_trusted(which))
            or not text_file(index)
            or not text_file(target)
        )
        before = dict(self.files)
        try:
            done = self.mem[which].remember(text, scope, topic)  # type: ignore[arg-type]
        except InputError:
            assert refused, (text, scope, topic)
            assert self.disk() == before
            return
        assert not refused, (text, scope, topic)
        assert fact is not None
        line = f"- {fact}"
        assert done.line == line

        def append(file: str, line: str) -> None:
            there = self.files.get((key, file), b"")
            sep = b"\n" if there and not there.endswith(b"\n") else b""
            self.write(key, file, there + sep + line.encode() + b"\n")

        append(name or INDEX, line)
        pointer = None
        if name is not None and f"]({name})".encode() not in index:
            pointer = f"- [{name[:-3]}]({name})"
            append(INDEX, pointer)
        assert done.pointer == pointer
        assert done.path == self.dirs[key] / (name or INDEX)

    # -- reading

    def disk(self) -> dict[tuple[str, str], bytes]:
        out = {}
        for key, d in self.dirs.items():
            if d.is_dir():
                for p in d.iterdir():
                    if p.is_file():
                        out[(key, p.name)] = p.read_bytes()
        return out

    @invariant()
    def the_disk_is_the_model(self) -> None:
        assert self.disk() == self.files
        assert {k for k, d in self.dirs.items() if d.is_dir()} == self.made

    @rule(which=WHICH)
    def items(self, which: str) -> None:
        lines, size = CAPS[which]
        mem = self.mem[which]
        got = mem.items("any query", 10)
        expected = []
        ended = []
        for scope, key, prefix in self.used(which):
            data = self.files.get((key, INDEX))
            text = None if data is None else self.item_text(data, lines, size)
            if text is None or not text.strip():
                ended.append(prefix + INDEX)
                continue
            expected.append((prefix + INDEX, scope, str(self.dirs[key] / INDEX), text))
        assert [(i.id, i.meta["scope"], i.meta["path"]) for i in got] == [e[:3] for e in expected]
        for item, (*_, text) in zip(got, expected, strict=True):
            # the note on a capped or binary index is checked up to its pointer to the read tool
            assert (
                item.text == text
                if not text.startswith("[memory: ") and "\n[memory: " not in text
                else (item.text.startswith(text))
            )
        assert [(i.id, i.text, i.meta) for i in got] == [(i.id, i.text, i.meta) for i in self.fresh(which).items("", 1)]
        # topic files seen by an earlier look and gone from a scope read now are ended until they come back
        now = {prefix + n for _, key, prefix in self.used(which) for n in self.memory_files(key) if n != INDEX}
        read = tuple(prefix for _, _, prefix in self.used(which))
        gone = {t for t in self.seen_topics[which] if t.startswith(read) and t not in now}
        self.seen_topics[which] = (self.seen_topics[which] - gone) | now
        self.ended_topics[which] = (self.ended_topics[which] - now) | gone
        assert mem.ended() == ended + sorted(self.ended_topics[which])
        self.looked[which] = self.fingerprint(which)

    def item_text(self, data: bytes, max_lines: int, max_bytes: int) -> str:
        if b"\x00" in data:
            return "[memory: "  # a note, checked by its start below
        if len(data) <= max_bytes and lines_of(data) <= max_lines:
            return data.decode("utf-8", errors="replace")
        head = b""
        for piece in data.split(b"\n")[:-1][:max_lines]:
            if len(head) + len(piece) + 1 > max_bytes:
                break
            head += piece + b"\n"
        shown = len(head.split(b"\n")) - 1
        return head.decode("utf-8", errors="replace") + (
            f"[memory: {INDEX} is longer than the {max_lines}-line / {max_bytes:,}-byte cap: shown are its first "
            f"{shown} of {lines_of(data):,} lines ({len(head):,} of {len(data):,} bytes)"
        )

    @rule(which=WHICH)
    def changed(self, which: str) -> None:
        now = self.fingerprint(which)
        assert self.mem[which].changed() == (now != self.looked[which])
        self.looked[which] = now

    @rule(which=WHICH)
    def passages(self, which: str) -> None:
        got = self.mem[which].passages()
        assert got == self.fresh(which).passages()
        expected_files = [
            (prefix + n, scope, key, n)
            for scope, key, prefix in self.used(which)
            for n in self.memory_files(key)
            if b"\x00" not in self.files[(key, n)]
        ]
        by_file: dict[str, list[Any]] = {}
        for p in got:
            by_file.setdefault(p.id, []).append(p)
        assert list(by_file) == [f for f, _, key, n in expected_files if self.nonblank(self.files[(key, n)])]
        for file, scope, key, name in expected_files:
            data = self.files[(key, name)]
            rows = [r.removesuffix("\r") for r in data.decode("utf-8", errors="replace").split("\n")]
            found = by_file.get(file, [])
            covered = []
            for i, p in enumerate(found):
                sha = "b3:" + blake3.blake3(data).hexdigest()
                assert (p.scope, p.path, p.sha) == (scope, self.dirs[key] / name, sha)
                assert p.text == "\n".join(rows[p.start - 1 : p.end])
                body = rows[p.start - 1 : p.end]
                assert all(r.strip() for r in body)
                assert len(body) <= PASSAGE_LINES
                assert len(body) == 1 or sum(len(r) + 1 for r in body) - 1 <= PASSAGE_CHARS
                assert not any(HEADING.match(r) for r in body[1:]), "a heading starts a passage"
                covered += range(p.start, p.end + 1)
                nxt = found[i + 1] if i + 1 < len(found) else None
                if nxt is not None and nxt.start == p.end + 1:  # cut with no blank line: a rule says why
                    first = rows[nxt.start - 1]
                    assert (
                        HEADING.match(first)
                        or len(body) == PASSAGE_LINES
                        or sum(len(r) + 1 for r in body) + len(first) > PASSAGE_CHARS
                    )
                self.copies[f"{file}#{p.part}"] = (file, (p.start, p.end), p.text)
            assert covered == [n for n, r in enumerate(rows, 1) if r.strip()]

    @staticmethod
    def nonblank(data: bytes) -> bool:
        return bool(data.decode("utf-8", errors="replace").strip())

    @rule(which=WHICH)
    def outdated(self, which: str) -> None:
        got = self.mem[which].outdated(self.copies)
        expected = set()
        for copy, (file, (first, last), text) in self.copies.items():
            used = self.used(which)
            where = next(((key, file[len(prefix) :]) for _, key, prefix in used if file.startswith(prefix)), None)
            if where is None:
                continue  # not a scope used now: not judged
            data = self.files.get(where)
            rows = [] if data is None or b"\x00" in data else data.decode("utf-8", errors="replace").split("\n")
            held = {r.strip() for r in rows[first - 1 : last]}
            if not all(x.strip() in held for x in text.split("\n") if x.strip()):
                expected.add(copy)
        assert got == expected


def test_memory_scopes_agree_with_the_files_on_disk() -> None:
    steps = settings(FUZZ, max_examples=examples(150), stateful_step_count=30)
    run_state_machine_as_test(MemoryMachine, settings=steps)

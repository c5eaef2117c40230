"""The MCP server (server/mcp.py) against the disk and the clock, driven by hypothesis: a client
reads files, activates and deactivates them, asks for their lines and for what they held at an
earlier time, while the user writes them, restores backups over them with their old times
(``cp -p``) or moves such a backup in (``mv``), deletes and re-creates them, and the server
restarts (its session reopened, a new tracker started). After each step the tracker has recorded
the disk (the test waits for the store to hold what the disk holds), and:

* ``read`` gives the disk's text, under the one object id its path has had since it was first
  read (deleted and re-created, restarted: the same object); of a file not there, an error;
* ``activate`` of an id gives the disk's text, or, the file gone, says it is missing;
* ``lines`` of an id shows the disk's lines;
* ``inspect`` as of the time of every earlier step gives what the file held then (its text, or
  that it was missing): a later version is never valid from before it came.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from context_os.server.mcp import ContextOsMcp
from context_os.store.base import Store, now_ms
from context_os.store.sqlite import SqliteStore
from context_os.store.xtdb import XtdbStore
from tests.files.conftest import WATCHDOG_RACE_WARNING, restore
from tests.helpers import wait_for
from tests.reliability._adversarial import FUZZ, examples

pytestmark = [pytest.mark.filterwarnings(WATCHDOG_RACE_WARNING), pytest.mark.timeout(600)]

FILES = ["a.py", "pkg/b.py"]
CLIENT = ["read", "read", "activate", "activate", "lines", "deactivate", "past", "past", "past"]
USER = ["write", "write", "restore", "restore", "move_in", "delete", "restart"]
steps = st.lists(st.tuples(st.sampled_from(CLIENT + USER), st.sampled_from(FILES)), min_size=4, max_size=24)


class Model:
    """The disk as the user left it, what the client knows, and what every step found."""

    def __init__(self, tmp: Path, store: Store) -> None:
        self.tmp, self.ws, self.store = tmp, tmp / "ws", store
        self.session = f"s-{uuid.uuid4().hex[:8]}"
        (self.ws / "pkg").mkdir(parents=True)
        self.n = 0
        self.disk: dict[str, str | None] = {f: None for f in FILES}
        for f in FILES:
            self.put(f)
        self.app = ContextOsMcp(self.store, session=self.session, workspace=self.ws)
        self.ids: dict[str, str] = {}
        """path → its object's id, once read"""
        self.looks: list[tuple[int, dict[str, str | None]]] = []
        """(a time after a step, object id → the text its file held then, None: missing)"""

    def close(self) -> None:
        self.app.close()

    def stamp(self) -> str:
        self.n += 1
        return f"S{self.n}x = {self.n}\n" * (1 + self.n % 3)

    def put(self, f: str) -> None:
        self.disk[f] = self.stamp()
        (self.ws / f).write_text(self.disk[f])  # type: ignore[arg-type]

    def call(self, name: str, **args: object) -> tuple[dict | str, bool]:
        out, err = self.app.call(name, args)
        try:
            return json.loads(out), err
        except ValueError:
            return out, err

    # -- the user

    def user(self, what: str, f: str) -> None:
        if what == "write":
            self.put(f)
        elif what in ("restore", "move_in"):
            text = self.disk[f] = self.stamp()
            restore(self.tmp / "backup", self.ws / f, text, move=what == "move_in")
        elif what == "delete" and self.disk[f] is not None:
            (self.ws / f).unlink()
            self.disk[f] = None
        elif what == "restart":
            self.app.close()
            self.app = ContextOsMcp(self.store, session=self.session, workspace=self.ws)

    # -- the client

    def client(self, what: str, f: str) -> None:
        text, oid = self.disk[f], self.ids.get(f)
        if what == "read":
            out, err = self.call("read", path=f)
            if text is None:
                assert err, out
                return
            assert isinstance(out, dict) and not err and out["text"] == text, (f, out)
            assert out["id"] == self.ids.setdefault(f, out["id"]), (f, out["id"], self.ids)
        elif oid is None:
            return
        elif what == "activate":
            out, err = self.call("activate", id=oid)
            assert isinstance(out, dict) and not err, out
            if text is None:
                assert "missing" in out, out
            else:
                assert out["text"] == text and "missing" not in out, (f, out)
        elif what == "lines" and text is not None:
            out, err = self.call("lines", id=oid)
            assert isinstance(out, str) and not err, out
            assert out.split("\n")[1:] == text.split("\n")[:-1], (f, out)
        elif what == "deactivate":
            out, err = self.call("deactivate", id=oid)
            assert not err, out
        elif what == "past":  # as of every earlier step
            for t, seen in self.looks:
                if oid not in seen:  # (not read yet then: what it held was not recorded)
                    continue
                out, err = self.call("inspect", id=oid, as_of=t)
                assert isinstance(out, dict) and not err, out
                doc = out["version"]["doc"]
                held = None if doc["meta"].get("missing") else doc["content"]
                assert held == seen[oid], ("as of an earlier step", f, t, held, seen[oid])

    # -- after each step

    def settle(self) -> None:
        """Wait until the store holds what the disk does for every file read so far; then note
        the time (in a millisecond of its own, past the kernel clock's tick)."""

        def recorded(oid: str, text: str | None) -> bool:
            v = self.store.get(oid)
            assert v is not None and v.doc is not None
            return v.doc["content"] == text if text is not None else bool(v.doc["meta"].get("missing"))

        for f, oid in self.ids.items():
            wait_for(lambda: recorded(oid, self.disk[f]), what=f"the tracker's record of {f}")  # noqa: B023
        self.looks.append((now_ms(), {oid: self.disk[f] for f, oid in self.ids.items()}))
        time.sleep(0.02)


@settings(FUZZ, max_examples=examples(20))
@given(steps=steps)
def test_what_the_mcp_server_gives_of_files_is_the_disk_now_and_then(steps: list[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as d, SqliteStore(Path(d) / "store.db") as store:
        run(steps, store)


@pytest.mark.xtdb
def test_what_the_mcp_server_gives_of_files_is_the_disk_now_and_then_on_xtdb(xtdb_url: str, xtdb_sidecar: Path) -> None:
    """As above on a real XTDB node, whose transaction times come from its own clock."""
    with XtdbStore(xtdb_url, text_index_path=xtdb_sidecar) as store:

        @settings(FUZZ, max_examples=examples(8))
        @given(steps=steps)
        def on_xtdb(steps: list[tuple[str, str]]) -> None:
            run(steps, store)

        on_xtdb()


def run(steps: list[tuple[str, str]], store: Store) -> None:
    m = Model(Path(tempfile.mkdtemp(prefix="ctxos-mcp-model-")), store)
    done: list[tuple[str, str]] = []
    try:
        for what, f in steps:
            done.append((what, f))
            if what in USER:
                m.user(what, f)
            else:
                m.client(what, f)
            m.settle()
    except AssertionError as e:
        raise AssertionError(f"{e}\nsteps: {done}") from None
    finally:
        m.close()
        shutil.rmtree(m.tmp, ignore_errors=True)

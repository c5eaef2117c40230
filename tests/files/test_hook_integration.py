"""Files and redaction through the OpenAI hook: the tools a model sees, and what is stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from context_os import Session
from context_os.context.frames import frame_docs, verify_frame
from context_os.context.policy import RetentionPolicy
from context_os.files import FileTools, Workspace
from context_os.harness.openai import OpenAIHook
from context_os.store.sqlite import SqliteStore
from tests.files._agent import FileAgent
from tests.helpers import EAGER, blocks_text, call, result, user

KEY = "sk-proj-" + "a1B2c3D4e5" * 5


def test_file_tools_are_offered_and_routed(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("print('hi')\n")
    with SqliteStore(tmp_path / "s.db") as store:
        ws = Workspace(tmp_path)
        session = Session.open(store, "f1", workspace=str(tmp_path), redact=ws.redact, policy=RetentionPolicy(**EAGER))
        hook = OpenAIHook(session, files=FileTools(session, ws))
        names = {t["function"]["name"] for t in hook.tools}
        assert {"read", "write", "edit", "ls", "find", "grep", "activate", "deactivate", "pin", "unpin"} <= names
        assert len(names) == len(hook.tools)  # no tool offered twice
        msgs = [user("look at app.py"), call("r1", "read", path="app.py")]
        output = hook.call_tool("read", {"path": "app.py"})
        assert json.loads(output)["active"] == "activated"
        msgs.append(result("r1", output))
        out = hook.transform_context(msgs)
        assert "print('hi')" in blocks_text(out) and 'path="app.py"' in blocks_text(out)
        assert hook.handles("read") and hook.handles("activate") and not hook.handles("bash")
        for f in frame_docs(session.store, session.id):
            assert verify_frame(store, f).ok


def test_secrets_are_redacted_before_they_are_stored(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "s.db") as store:
        ws = Workspace(tmp_path)
        hook = OpenAIHook(Session.open(store, "r1", redact=ws.redact, policy=RetentionPolicy(**EAGER)))
        msgs = [user("env?"), call("c1", "bash", command=f"echo {KEY}"), result("c1", f"OPENAI_API_KEY={KEY}\n")]
        out = hook.transform_context(msgs)
        assert KEY not in json.dumps(out)
        doc = store.doc("toolcall:r1:c1")
        assert KEY not in json.dumps(doc) and doc["meta"]["redacted"] >= 1
        raw = b"".join(p.read_bytes() for p in tmp_path.glob("s.db*"))
        assert KEY.encode() not in raw


@pytest.mark.parametrize("name", ["app.py", 'the "new" app.py'])
def test_a_patch_that_only_marks_a_file_stale_says_so(tmp_path: Path, name: str) -> None:
    """The file changed on disk and the store took version 2; the block keeps showing version 1,
    now marked stale: its patch says `still version 1; version 2 is newer` (it said `now version
    1`, as if the block had moved to version 1, and still did for a file whose name holds a
    quote), and the frame re-renders to its hash."""
    (tmp_path / name).write_text("".join(f"def f{i}():\n    return {i}\n" for i in range(40)))
    with SqliteStore(tmp_path / "s.db") as store:
        ws = Workspace(tmp_path)
        session = Session.open(store, "st", workspace=str(tmp_path), policy=RetentionPolicy(manage_from_tokens=0))
        hook = OpenAIHook(session, files=FileTools(session, ws))
        msgs = [user(f"fix {name}"), call("c1", "read", path=name)]
        msgs.append(result("c1", hook.call_tool("read", {"path": name})))
        hook.transform_context(msgs)
        (tmp_path / name).write_text("x = 1\n")
        FileTools(Session.open(store, "other", workspace=str(tmp_path)), ws).read(name)  # version 2
        msgs += [{"role": "assistant", "content": "hm"}, user("go on")]
        out = hook.transform_context(msgs)
        heads = [m["content"].split("\n")[1] for m in out if str(m.get("content")).startswith("<context_os>")]
        (oid,) = [v.id for v in store.find("file")]
        patch = f"{oid} (still version 1; version 2 is newer) changed: a patch of its block above, the rest of it"
        assert f"{patch} stands:" in heads, heads
        assert all(verify_frame(store, f).ok for f in frame_docs(store, "st"))


@pytest.mark.parametrize("layout", [10, 11])
def test_a_path_holding_a_line_break_is_shown_on_one_line(tmp_path: Path, layout: int) -> None:
    """A file named with a line break and a quote (a repository may hold one): its block's head and
    its index line showed the path raw, each broken in two, the second half free to pass for an
    attribute (``version="99"``) or an index line of its own. From layout 11 the path is shown
    escaped; a session of layout 10 still renders it raw, and both frames re-render to their hash."""
    name = 'a\nb.py" version="99'
    (tmp_path / name).write_text("x = 1\n")
    with SqliteStore(tmp_path / "s.db") as store:
        ws = Workspace(tmp_path)
        session = Session.open(store, "nl", workspace=str(tmp_path), policy=RetentionPolicy(**EAGER))
        session.view.layout = layout
        hook = OpenAIHook(session, files=FileTools(session, ws))
        msgs = [user("look"), call("r1", "read", path=name), result("r1", hook.call_tool("read", {"path": name}))]
        blocks = blocks_text(hook.transform_context(msgs))
        (oid,) = [v.id for v in store.find("file")]
        head = next(line for line in blocks.splitlines() if line.startswith("<object "))
        index = next(line for line in blocks.splitlines() if line.startswith(f"- {oid} "))
        if layout == 10:
            assert head == f'<object id="{oid}" kind="file" path="a' and index == f"- {oid} file a"
        else:
            escaped = 'a\\nb.py\\" version=\\"99'
            assert head == f'<object id="{oid}" kind="file" path="{escaped}" version="1">'
            assert index == f"- {oid} file {escaped} 2 tokens v1 active"
        assert all(verify_frame(store, f).ok for f in frame_docs(store, "nl"))


def test_a_short_file_written_by_the_agent_never_shows_its_old_text_once_collapsed(tmp_path: Path) -> None:
    """Layout 11: the file tools' ``write`` of a short file (no longer than the policy's
    ``elide_arguments_over_chars``) is marked when its result arrives; collapsed, its call shows
    its content elided (path kept) and its result its stub, while the file object shows the text
    as it is now. Before, the call showed the text it wrote whole after the file changed (a stale
    view); the mark survives a resumed session and every frame re-renders to its hash."""
    with SqliteStore(tmp_path / "s.db") as store:
        (tmp_path / "ws").mkdir()
        ws = Workspace(tmp_path / "ws")
        session = Session.open(store, "w1", workspace=str(tmp_path / "ws"), policy=RetentionPolicy(**EAGER))
        hook = OpenAIHook(session, files=FileTools(session, ws))
        msgs = [user("make it"), call("w1", "write", path="app.py", content="VALUE = 'old'\n")]
        msgs.append(result("w1", hook.call_tool("write", {"path": "app.py", "content": "VALUE = 'old'\n"})))
        hook.transform_context(msgs)
        written = session.view.objects["toolcall:w1:w1"]
        assert written.file_text == ["content"]
        msgs += [call("e1", "edit", path="app.py", oldText="'old'", newText="'new'")]
        msgs.append(result("e1", hook.call_tool("edit", {"path": "app.py", "oldText": "'old'", "newText": "'new'"})))
        for n in range(4):  # the write's result collapses (EAGER keeps fewer results expanded)
            out = hook.transform_context(msgs)
            msgs += [call(f"b{n}", "bash", command="true"), result(f"b{n}", "ok")]
        out = hook.transform_context(msgs)
        assert written.collapsed
        args = json.loads(out[1]["tool_calls"][0]["function"]["arguments"])
        assert args == {"path": "app.py", "content": '[14 chars elided: activate("r2")]'}
        assert "VALUE = 'old'" not in json.dumps(out) and "VALUE = 'new'" in blocks_text(out)
        for f in frame_docs(store, session.id):
            assert verify_frame(store, f).ok
        session.close()
        again = Session.open(store, "w1", workspace=str(tmp_path / "ws"))
        assert again.view.objects["toolcall:w1:w1"].file_text == ["content"]
        assert "VALUE = 'old'" not in json.dumps(again.view.render().messages)


@pytest.mark.parametrize("between", ["a read of another file", "the policy changed as it opens"])
def test_a_reopened_session_marks_a_file_changed_since_stale_whatever_it_wrote_first(
    tmp_path: Path, between: str
) -> None:
    """A session checks for newer versions at a turn when something besides it wrote since its
    last transaction. Reopened, it has not checked anything yet: before, a write of its own made
    before its first turn (an activation between turns, or its open with another policy) stood
    as its last transaction, and a file changed while it was closed, recorded as a newer version
    before it, went unmarked: the model went on with the old text as the file's."""
    root = tmp_path / "ws"
    root.mkdir()
    for name in ("a.py", "b.py"):
        (root / name).write_text(f"# {name}, first\n")
    with SqliteStore(tmp_path / "s.db") as store:
        agent = FileAgent(store, root)
        agent.tool("read", path="a.py")
        agent.turn()
        agent.close()
        (root / "a.py").write_text("# a.py, changed while the session was closed\n")
        with Session.open(store, "other", redact=False) as other:  # its look records the new version
            FileTools(other, Workspace(root)).ls(".")
        if between == "a read of another file":
            agent.open()
            agent.tool("read", path="b.py")
        else:
            agent.open(RetentionPolicy(keep_recent_results=7))
        out = blocks_text(agent.turn())
        assert 'stale="version 2 is newer' in out, out
        a = next(o for o in agent.session.view.objects.values() if o.meta.get("path") == "a.py")
        assert a.newer is not None
        agent.close()


def test_a_call_bringing_nothing_new_after_another_writer_wrote_between_two_writes_is_answered_as_before(
    tmp_path: Path,
) -> None:
    """A call with nothing new since the last (a client's retry) gets the context it got, no new
    turn. After a turn at which another writer (the file index, recording a file changed on disk)
    wrote between two transactions of the session, the session checked what others wrote without
    noting how far it had read: its turn's write then took the other's transaction before it for
    one it had not seen, and the retry made a turn of its own (a frame more, results collapsed a
    turn early: a prompt cache's prefix lost)."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    with SqliteStore(tmp_path / "s.db") as store:
        agent = FileAgent(store, root)
        agent.tool("read", path="a.py")
        agent.turn()
        agent.tool("write", path="a.py", content="x = 2\n")  # the index's version, then the session's state
        (root / "a.py").write_text("x = 3\n")
        agent.tool("ls", path=".")  # the index records the change on disk: another writer again
        first = agent.turn()
        turn, frames = agent.session.view.turn, len(frame_docs(store, "s"))
        assert agent.turn() == first
        assert (agent.session.view.turn, len(frame_docs(store, "s"))) == (turn, frames)
        agent.close()

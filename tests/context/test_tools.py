"""The one tool registry and dispatcher (context/tools.py): the context tools and the file tools
answer bad input the same way, whichever harness calls them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from context_os import Session
from context_os.context.tools import CONTEXT_TOOLS, context_tools
from context_os.files import FileTools, Workspace
from context_os.harness import OpenAIHook
from context_os.store.sqlite import SqliteStore
from tests.helpers import call, result, user


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    with SqliteStore(tmp_path / "s.db") as store:
        s = Session.open(store, "s1")
        OpenAIHook(s).transform_context([user("go"), call("c1"), result("c1", "out")])
        yield s


def test_context_tools_and_file_tools_share_one_error_shape(session: Session, tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    plain = context_tools(session)
    with_files = FileTools(session, Workspace(tmp_path / "ws")).registry
    for registry in (plain, with_files):
        bad_json = json.loads(registry.call("activate", "{not json"))
        assert bad_json["type"] == "InputError" and "not valid JSON" in bad_json["error"]
        wrong_type = json.loads(registry.call("activate", {"id": 3}))
        assert wrong_type == {"error": "activate: argument 'id' must be string, got int", "type": "InputError"}
        unknown_arg = json.loads(registry.call("pin", {"id": "x", "force": True}))
        assert unknown_arg["type"] == "InputError" and "unknown argument" in unknown_arg["error"]
        unknown = json.loads(registry.call("nope", {}))
        assert unknown["type"] == "InputError" and "unknown tool 'nope'" in unknown["error"]
        not_object = json.loads(registry.call("unpin", "[1, 2]"))
        assert not_object["type"] == "InputError"
        assert json.loads(registry.call("deactivate", {"id": "toolcall:s1:c1"}))["status"] in (
            "deactivated",
            "already inactive",
        )


def test_empty_and_non_object_arguments_are_answered_in_json_terms(session: Session, tmp_path: Path) -> None:
    """Some providers send `""` as the arguments of a call without any: that is no argument, not
    invalid JSON. Arguments that are no object (`null`, an array, as text or as a value) are named
    as JSON names them; before, a value that was no object answered with Python's own words
    (`'NoneType' object is not iterable`, `dictionary update sequence element #0`)."""
    (tmp_path / "ws").mkdir()
    for registry in (context_tools(session), FileTools(session, Workspace(tmp_path / "ws")).registry):
        assert registry.call("history", "") == registry.call("history", {}) == registry.call("history", " \n")
        assert json.loads(registry.call("activate", "")) == {
            "error": "activate: missing required argument(s) ['id']",
            "type": "InputError",
        }
        for args, named in (("null", "null"), (None, "null"), ("[1]", "an array"), ([1], "an array"), (5, "a number")):
            assert json.loads(registry.call("history", args)) == {  # type: ignore[arg-type]
                "error": f"history takes a JSON object of arguments, got {named}",
                "type": "InputError",
            }


def test_the_file_tools_replace_the_context_tools_not_declare_them_twice(session: Session, tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    registry = FileTools(session, Workspace(tmp_path / "ws")).registry
    names = [s["name"] for s in registry.schemas]
    assert len(names) == len(set(names))
    assert set(CONTEXT_TOOLS) <= set(names) and {"read", "write", "edit", "ls", "find", "grep"} <= set(names)
    for name in CONTEXT_TOOLS:  # the same arguments, one declaration; the description says paths work
        assert registry[name].parameters == CONTEXT_TOOLS[name][1]
        assert ("file path" in registry[name].description) == (name != "history")


def test_a_hook_runs_every_tool_through_its_registry(session: Session) -> None:
    hook = OpenAIHook(session)
    assert {t["function"]["name"] for t in hook.tools} == set(CONTEXT_TOOLS)
    assert hook.handles("pin") and not hook.handles("read")
    assert json.loads(hook.call_tool("pin", '{"id": "toolcall:s1:c1"}'))["status"] == "pinned"


def test_arguments_json_cannot_hold_are_answered_not_raised(session: Session, tmp_path: Path) -> None:
    """A model's arguments that are JSON but that Python will not read (a number of thousands of
    digits, a model's degenerate output; arrays nested deeper than the parser's recursion) and a
    short ref of thousands of digits are answered as any bad input is. Before, ``ValueError`` and
    ``RecursionError`` escaped the dispatcher into the harness (the proxy's request failed)."""
    (tmp_path / "ws").mkdir()
    digits = "1" * 5000
    for registry in (context_tools(session), FileTools(session, Workspace(tmp_path / "ws")).registry):
        for name, args in (
            ("history", f'{{"start": {digits}}}'),
            ("lines", f'{{"id": "r2", "start": 1, "end": {digits}}}'),
            ("activate", '{"id": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        ):
            answer = json.loads(registry.call(name, args))
            assert answer["type"] == "InputError" and answer["error"].startswith(f"{name}: arguments cannot be read")
        for name in ("activate", "lines", "pin"):
            answer = json.loads(registry.call(name, {"id": "r" + digits}))
            assert answer["type"] == "NotFound" and "no object 'r111" in answer["error"]


def test_numbers_outside_their_schema_bounds_are_refused(session: Session, tmp_path: Path) -> None:
    """The schemas give ``limit`` a ``minimum`` of 1 (``recall``'s ``k`` a maximum too), and the
    registry holds a call to them as it holds it to the argument types. Before, the bounds were
    only told to the model: ``ls(limit=-1)`` listed all entries but the last and said one more
    than were left out, ``grep(limit=0)`` showed a match after saying it "stopped at 0 matches"."""
    (tmp_path / "ws").mkdir()
    for name in "abc":
        (tmp_path / "ws" / f"{name}.txt").write_text(f"hit {name}\n")
    registry = FileTools(session, Workspace(tmp_path / "ws")).registry
    for name, args in (
        ("ls", {"limit": -1}),
        ("find", {"pattern": "*", "limit": 0}),
        ("grep", {"pattern": "hit", "limit": 0}),
    ):
        assert json.loads(registry.call(name, args)) == {
            "error": f"{name}: argument 'limit' must be at least 1, got {args['limit']}",
            "type": "InputError",
        }
    assert registry.call("ls", {"limit": 1}).startswith("a.txt\n[... 2 more entries")


def test_a_whole_number_written_with_a_fraction_is_an_integer(session: Session, tmp_path: Path) -> None:
    """JSON has one number type, and JSON Schema's ``integer`` is any number whose fraction is
    zero: a model that writes ``"start": 1.0`` (as some do) was refused (`must be integer, got
    float`), which cost it a turn. It is the integer 1 now; 1.5 is still refused."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("x\ny\nz\n")
    registry = FileTools(session, Workspace(tmp_path / "ws")).registry
    registry.call("read", {"path": "a.txt"})
    whole = registry.call("lines", '{"id": "a.txt", "start": 2.0, "end": 2.0, "column": 1.0}')
    assert whole == registry.call("lines", {"id": "a.txt", "start": 2, "end": 2}) and whole.endswith("\ny")
    for bad in ("1.5", "1e400"):  # a fraction; a number too large for a float (infinity)
        assert json.loads(registry.call("lines", f'{{"id": "a.txt", "start": {bad}}}')) == {
            "error": "lines: argument 'start' must be integer, got float",
            "type": "InputError",
        }
    assert json.loads(registry.call("ls", {"limit": 0.0}))["error"] == "ls: argument 'limit' must be at least 1, got 0"


def test_null_for_an_optional_argument_is_its_default(session: Session, tmp_path: Path) -> None:
    """Models often write an optional argument they do not use as null (``"end": null``). That
    was refused as a wrong type, in Python's words (`must be integer, got NoneType`), and cost
    the agent a turn. Null for an optional argument is now its default; for a required one it
    is still refused, in JSON's words."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("x\ny\n")
    registry = FileTools(session, Workspace(tmp_path / "ws")).registry
    registry.call("read", {"path": "a.txt"})
    assert registry.call("lines", '{"id": "a.txt", "start": 2, "end": null, "column": null}').endswith("\ny")
    assert registry.call("grep", {"pattern": "y", "glob": None, "ignoreCase": None, "limit": None}) == "a.txt:2:y"
    assert json.loads(registry.call("read", {"path": None})) == {
        "error": "read: argument 'path' must be string, got null",
        "type": "InputError",
    }


def test_a_json_result_holding_a_name_that_is_not_utf8_is_json() -> None:
    """A tool's JSON result naming a file that is not UTF-8 (``caf\\udce9.txt`` as Python reads
    it) had the byte's escape written into the JSON bare (``caf\\xe9.txt``): no JSON escape, so
    the result was no JSON. It is the text ``caf\\xe9.txt`` now, as a text result shows it."""
    from context_os.context.tools import Tool, ToolRegistry

    named = Tool("named", "a file's name", {"type": "object", "properties": {}}, lambda: {"path": "caf\udce9.txt"})
    registry = ToolRegistry({"named": named})
    out = registry.call("named", {})
    out.encode("utf-8")  # a harness can send it
    assert json.loads(out) == {"path": "caf\\xe9.txt"}

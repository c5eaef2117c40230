"""How ``ctxos`` reports a failed command: the one line on stderr (``Error: <Type>: <message>``),
and with ``--json`` also one JSON document on stdout, so a script that reads stdout always gets
JSON. Light (click only): the root group uses it before any command module is imported."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

OUTAGE_EXIT = 3
"""The exit status of a check (``verify``, ``frames verify|show|diff``) the store's outage cut
short or kept from starting: not the 1 of damage found, as nothing says the store is damaged."""


_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")


def printable(text: str) -> str:
    """``text`` from a session, to print: its control characters but a newline, a tab and the
    CR of a CRLF shown as escapes (``\\x1b``). What a tool output, a file or a message holds is
    anyone's: printed raw, an escape sequence in it would drive the terminal (retitle it, write
    its clipboard with OSC 52, move the cursor back over the lines printed before it)."""
    return _CONTROLS.sub(_escape, text)


_LINE_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: str) -> str:
    """``printable`` for text that must stay on its line (a table's cell, a row of a list): its
    newlines, tabs and carriage returns shown as escapes too (``\\x0a``). A file may be named
    with a newline or a tab, a reason may hold several lines: printed as they are, they broke the
    row, and the table's columns, in two."""
    return _LINE_CONTROLS.sub(_escape, text)


def _escape(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


class LibraryError(click.ClickException):
    """A library error (``ContextOSError``) as the command line reports it: exit status 1.
    ``reported``: the command printed its own JSON report, which names the error (no second JSON
    document follows it)."""

    def __init__(self, error: Exception, *, reported: bool = False) -> None:
        # the line on stderr escaped: an id or a path in it may come from a damaged store, or
        # hold a newline (a --store path, a session id), which broke the one line in two
        super().__init__(one_line(f"{type(error).__name__}: {error}"))
        self.kind = type(error).__name__
        self.detail = str(error)
        self.reported = reported


class CheckOutage(LibraryError):
    """The store out of reach (``StoreUnavailable``) in a check: exit status ``OUTAGE_EXIT``."""

    exit_code = OUTAGE_EXIT


class DamageThenOutage(CheckOutage):
    """A check that found damage before the store went out of reach: exit status 1, the damage's."""

    exit_code = 1


class Interrupted(click.ClickException):
    """Ctrl-C in a command that does not handle it itself: exit status 130, as a shell reports
    a process SIGINT ended (never 1, which ``verify`` and ``frames verify`` give for damage, nor
    their ``OUTAGE_EXIT``)."""

    exit_code = 130

    def __init__(self, message: str = "interrupted") -> None:
        super().__init__(message)


class OutputRefused(click.ClickException):
    """Stdout refused what a command printed (a full disk, an I/O error): exit status 1, the error
    on stderr only (stdout takes nothing more, no JSON either)."""

    def __init__(self, error: OSError) -> None:
        said = error.strerror or error
        super().__init__(f"OSError: stdout refused the output ({said}): what it printed is cut short")


JSON_META = "context_os.json"
"""``ctx.meta`` key (shared by every context of one command line): it asks for JSON."""


def stop_interrupted(said: str) -> NoReturn:
    """End a command that Ctrl-C stopped on its own terms (``replay``, ``recall``, ``index
    rebuild``): ``said`` on stderr, exit status 130, and with ``--json`` the ``Interrupted`` error
    saying it as the JSON document on stdout, as for any other command."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.meta.get(JSON_META):
        emit_error_json(Interrupted(said.strip()))
    click.echo(said, err=True)
    raise SystemExit(Interrupted.exit_code)


def asks_json(args: Sequence[str]) -> bool:
    """Whether the command line asks for JSON: ``--json`` before any ``--`` (after it, an argument)."""
    for arg in args:
        if arg == "--":
            return False
        if arg == "--json":
            return True
    return False


def error_document(e: click.ClickException) -> dict[str, Any]:
    """What ``--json`` prints on stdout for a failed command: ``{"error": {type, message,
    exit_status}}``, and for a usage error (a bad option, a missing argument) the command's
    ``usage`` line."""
    if isinstance(e, LibraryError):
        kind, message = e.kind, e.detail
    elif isinstance(e, Interrupted):
        kind, message = "Interrupted", e.format_message()
    elif isinstance(e, click.UsageError):
        kind, message = "UsageError", e.format_message()
    else:
        kind, message = type(e).__name__, e.format_message()
    error: dict[str, Any] = {"type": kind, "message": message, "exit_status": e.exit_code}
    if isinstance(e, click.UsageError) and e.ctx is not None:
        error["usage"] = e.ctx.get_usage()
    return {"error": error}


def json_text(value: Any) -> str:
    """``value`` as the JSON document a command prints: its text as it is where stdout's encoding
    holds every character of it, else escaped (``\\u2192``), so a terminal in another encoding
    (Latin-1) or a name that is not UTF-8 (a path's raw bytes) still gives valid JSON, never a
    failed write."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    try:
        text.encode(getattr(sys.stdout, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return json.dumps(value, indent=2)
    return text


def emit_error_json(e: click.ClickException) -> None:
    click.echo(json_text(error_document(e)))

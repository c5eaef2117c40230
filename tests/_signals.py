"""The signal state of a process, as its children inherit it: for the suite's check that no test
leaves its worker's changed (tests/conftest.py), and for the tests of a signal sent in a process
of their own to say it when the signal is lost; and a Ctrl-C pending as a handler is set
(``pending_ctrl_c``). Standard library only: such a process imports it first."""

from __future__ import annotations

import signal
import threading
import traceback
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

_pthread_sigmask = signal.pthread_sigmask
_CALLS: deque[str] = deque(maxlen=20)
"""The last calls of ``signal.pthread_sigmask`` that changed a mask, once ``record_calls`` ran."""


def state() -> tuple[object, ...]:
    """What the main thread's children inherit of its signals: the ones it blocks, the ones the
    process ignores, and its handlers of SIGINT and SIGTERM."""
    handlers = tuple(signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM))
    return (sorted(_pthread_sigmask(signal.SIG_BLOCK, [])), _ignored(), handlers)


def restore(state: tuple[object, ...]) -> None:
    """The main thread's blocked signals and handlers of SIGINT and SIGTERM as in ``state`` (the
    process's ignored ones are left as they are)."""
    blocked, _, handlers = state
    _pthread_sigmask(signal.SIG_SETMASK, blocked)  # type: ignore[arg-type]
    for sig, handler in zip((signal.SIGINT, signal.SIGTERM), handlers, strict=True):  # type: ignore[call-overload]
        signal.signal(sig, handler)


def said() -> str:
    """The signals this thread blocks, the process ignores, and those pending (Linux: the kernel's
    own words, from ``/proc``; elsewhere Python's), on one line."""
    with suppress(OSError):
        status = Path("/proc/thread-self/status").read_text().splitlines()
        return "signals: " + ", ".join(line.replace("\t", " ") for line in status if line.startswith(("Sig", "ShdPnd")))
    return f"signals: blocked {sorted(_pthread_sigmask(signal.SIG_BLOCK, []))}"


def _ignored() -> list[int]:
    """The signals this process ignores (Linux; elsewhere none known)."""
    with suppress(OSError):
        status = Path("/proc/self/status").read_text()
        mask = int(next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16)
        return [n for n in range(1, 65) if mask >> (n - 1) & 1]
    return []


def record_calls() -> None:
    """From here on, each call of ``signal.pthread_sigmask`` in Python that changes a mask is
    noted with its thread and where it was made (``calls``): a signal state left changed names the
    code that changed it."""

    def pthread_sigmask(how: int, mask: object) -> set[signal.Signals]:
        previous = _pthread_sigmask(signal.SIG_BLOCK, ())
        try:
            return _pthread_sigmask(how, mask)  # type: ignore[arg-type]
        finally:  # (a handler Python runs as the mask is set may raise: the change is made then)
            now = _pthread_sigmask(signal.SIG_BLOCK, ())
            if now != previous:
                thread, stack = threading.current_thread().name, "".join(traceback.format_stack(limit=8)[:-1])
                _CALLS.append(f"{thread}: blocked {sorted(previous)} -> {sorted(now)} at\n{stack}")

    signal.pthread_sigmask = pthread_sigmask


def calls() -> str:
    """The calls ``record_calls`` noted, latest last."""
    return "\n".join(_CALLS) or "no call of signal.pthread_sigmask noted"


def pending_ctrl_c(
    monkeypatch: pytest.MonkeyPatch, when: Callable[[int, object], bool], raised_at: str = "set"
) -> None:
    """``signal.signal`` made to raise KeyboardInterrupt once, at the first call ``when`` picks, as
    the handler of a pending Ctrl-C that Python runs there: before the change, which then is not
    made (``"set"``), or after it (``"after set"``)."""
    real, raised = signal.signal, []

    def set_with_a_ctrl_c_pending(signum: int, handler: object) -> object:
        if not raised and when(signum, handler):
            raised.append(signum)
            if raised_at == "after set":
                real(signum, handler)  # type: ignore[arg-type]
            raise KeyboardInterrupt
        return real(signum, handler)  # type: ignore[arg-type]

    monkeypatch.setattr(signal, "signal", set_with_a_ctrl_c_pending)

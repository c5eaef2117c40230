"""Signal handlers set for a while and put back after, whatever is raised where.

Python runs the handlers of the signals pending when one is set, inside ``signal.signal``:
before the change (which then is not made) or as it returns. A Ctrl-C raising there interrupts
whatever sets or puts back handlers, and code that sets one, then another, or puts one back in a
``finally``, left a handler set for good (a server's SIGTERM on its stop flag, a replay's SIGINT
held, a stdio server's SIGTERM asking a stop that nobody waits for any more). ``handling`` is the
one way the package sets handlers for a while.

This module must never import anything from the package.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

__all__ = ["handling"]


@contextmanager
def handling(signums: Iterable[int], handler: Callable[[int, Any], object]) -> Iterator[None]:
    """``handler`` handles each of ``signums`` while inside; each handler it replaced is put back
    after, whatever is raised where. Each is noted before it is replaced, so one whose setting a
    pending handler interrupted is put back too."""
    with ExitStack() as handlers:
        for signum in signums:
            handlers.callback(_put_back, signum, signal.getsignal(signum))
            signal.signal(signum, handler)
        yield


def _put_back(signum: int, handler: Any) -> None:
    """``signal.signal(signum, handler)``, made even where the handler of a signal pending runs
    and raises first (Python runs them before it sets one, then sets nothing): set again once it
    ran, and what it raised raised after."""
    try:
        signal.signal(signum, handler)
    except BaseException:
        if signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)
        raise

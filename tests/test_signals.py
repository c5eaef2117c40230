"""``signals.handling``: handlers set for a while are put back, whatever a pending signal's
handler raises as they are set or put back (Python runs those handlers inside ``signal.signal``,
before the change, which is then not made, or as it returns)."""

from __future__ import annotations

import signal
import threading

import pytest

from context_os.server.transports import StdioStop
from context_os.signals import handling
from tests._signals import pending_ctrl_c

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals need the main thread"
)


def _found() -> tuple[object, object]:
    return signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)


@pytest.mark.parametrize("raised_at", ["set", "after set"])
@pytest.mark.parametrize("step", ["replace", "put back"])
def test_a_ctrl_c_handled_as_handlers_are_set_or_put_back_leaves_them_as_they_were(
    monkeypatch: pytest.MonkeyPatch, raised_at: str, step: str
) -> None:
    before = _found()

    def new(signum: int, frame: object) -> None:
        pass

    def picked(signum: int, handler: object) -> bool:
        # the second replacement (SIGTERM's), or SIGINT's handler put back (the first put back)
        return (handler is new and signum == signal.SIGTERM) if step == "replace" else handler is before[0]

    pending_ctrl_c(monkeypatch, picked, raised_at)
    with pytest.raises(KeyboardInterrupt), handling((signal.SIGINT, signal.SIGTERM), new):
        assert _found() == (new, new)
    monkeypatch.undo()
    assert _found() == before


def test_handling_puts_back_what_it_found_after_an_exception_inside() -> None:
    before = _found()
    with pytest.raises(RuntimeError), handling((signal.SIGTERM,), signal.SIG_IGN):
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        raise RuntimeError("inside")
    assert _found() == before


@pytest.mark.parametrize("raised_at", ["set", "after set"])
def test_a_ctrl_c_handled_as_a_stdio_stop_s_handler_is_put_back_leaves_sigterm_as_it_was(
    monkeypatch: pytest.MonkeyPatch, raised_at: str
) -> None:
    """``ctxos serve`` (stdio) asks its stop on SIGTERM while it serves: a Ctrl-C handled as the
    handler found was put back left SIGTERM asking a stop that nobody waits for any more (a
    later SIGTERM did nothing)."""
    before = signal.getsignal(signal.SIGTERM)
    pending_ctrl_c(monkeypatch, lambda signum, handler: signum == signal.SIGTERM and handler is before, raised_at)
    stop = StdioStop()
    with pytest.raises(KeyboardInterrupt), stop.on_signal():
        signal.raise_signal(signal.SIGTERM)
        assert stop.asked
    monkeypatch.undo()
    assert signal.getsignal(signal.SIGTERM) is before

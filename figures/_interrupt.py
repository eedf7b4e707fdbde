"""Ctrl-C while the figures are made: never swallowed, never a traceback from a finaliser.

Python raises ``KeyboardInterrupt`` wherever the main thread is when SIGINT
arrives. Inside a finaliser (``__del__``), a weakref or garbage-collector
callback, the exception cannot propagate: Python prints "Exception ignored
in ..." with a traceback and the run goes on, to exit 0. While
:func:`interrupts` is active, SIGINT is remembered as well as raised, such
swallowed interrupts are not printed, and :meth:`Interrupts.check` (called
between figures, on progress and while waiting for worker processes)
raises ``KeyboardInterrupt`` again.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading


class Interrupts:
    """Whether SIGINT arrived since :func:`interrupts` began; :meth:`check` raises if so."""

    def __init__(self, active):
        #: Whether SIGINT is watched (main thread, default handler); else :meth:`check` never raises.
        self.active = active
        self.pending = False

    def check(self):
        """Raise ``KeyboardInterrupt`` if SIGINT arrived (and was maybe swallowed)."""
        if self.pending:
            raise KeyboardInterrupt

    def on_signal(self, signum, frame):
        self.pending = True
        raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts():
    """Watch SIGINT for the duration; yields an :class:`Interrupts`.

    Only from the main thread and while SIGINT has Python's default handler:
    a caller's own handler, or SIGINT ignored (a background job, ``nohup``),
    is left as it is (and :meth:`Interrupts.check` never raises).
    """
    watch = (threading.current_thread() is threading.main_thread()
             and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    state = Interrupts(watch)
    if not watch:
        yield state
        return
    hook = sys.unraisablehook

    def unraisable(info):
        if isinstance(info.exc_value, KeyboardInterrupt) and state.pending:
            return  # raised again by the next check
        hook(info)

    signal.signal(signal.SIGINT, state.on_signal)
    sys.unraisablehook = unraisable
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.unraisablehook = hook

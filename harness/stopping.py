"""Stopping a run from outside: SIGTERM as Ctrl-C, and no child outliving its parent.

Note [SIGTERM is an interrupt]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A CI timeout, ``docker stop`` or a batch scheduler ends a run with SIGTERM, whose default
action kills the process on the spot: no results file, no line saying what happened. The
plugin installs :func:`install`'s handler in the session's controller, which turns the
first SIGTERM into the ``KeyboardInterrupt`` a Ctrl-C raises, so the session ends the way
an interrupted one does (Note [Only a completed session records] in
:mod:`harness.session`): the results so far are written marked ``complete: false``, the
baseline is not touched, and one line of the terminal summary says so (:data:`MESSAGE`). A second SIGTERM kills at once
(the handler is gone by then), so a scheduler's escalation still works.

Child processes (distributed ranks, benchmark runs, fault runs) are started with
:func:`die_with_parent` (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``): the kernel kills
them when the process that started them ends, however it ends, ``kill -9`` included.
Where ``prctl`` is not available the callers' own ``finally`` blocks (which kill their
children on the ``KeyboardInterrupt``) are what remains.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Callable, Optional

PR_SET_PDEATHSIG = 1
MESSAGE = ("harness: SIGTERM received: stopping; the results so far are written marked "
           "incomplete and the baseline is left unchanged")

_previous: dict[int, Any] = {}


_received: list[int] = []


def _on_sigterm(signum, frame) -> None:
    signal.signal(signal.SIGTERM, _previous.get(id(_on_sigterm), signal.SIG_DFL))
    _received.append(signum)  # the plugin's summary prints MESSAGE (stderr is captured)
    raise KeyboardInterrupt("SIGTERM")


def received() -> bool:
    """Whether this process was stopped by SIGTERM (the summary then says so)."""
    return bool(_received)


def install() -> bool:
    """Handle SIGTERM as an interrupt in this process (main thread only). True when this
    call installed the handler: only then may :func:`uninstall` remove it (a pytest run
    inside a pytest run must leave the outer one's handler in place)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(signal.SIGTERM)
    if current is _on_sigterm:
        return False
    _previous[id(_on_sigterm)] = current if current is not None else signal.SIG_DFL
    _received.clear()
    signal.signal(signal.SIGTERM, _on_sigterm)
    return True


def uninstall() -> None:
    """Put back the SIGTERM handler :func:`install` replaced."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, _previous.pop(id(_on_sigterm), signal.SIG_DFL))


def die_with_parent(parent: Optional[int] = None) -> None:
    """In a child: SIGKILL this process when its parent ends (Linux; a no-op elsewhere).

    ``parent`` is the pid the parent had before it started the child: when it is gone
    already (the parent ended before ``prctl`` took effect), the child leaves at once.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def child_preexec(*, new_session: bool = False) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess``: the child ends with this process (and, with
    ``new_session``, leads a process group of its own, so its whole group can be killed)."""
    parent = os.getpid()

    def preexec() -> None:
        if new_session:
            os.setsid()
        die_with_parent(parent)

    return preexec

"""The process's one fork server, for callers that start many fresh Python processes.

Note [One fork server]
~~~~~~~~~~~~~~~~~~~~~~
Most of a fresh Python process's time in this project is start-up: importing torch is
about 1 s, and ``torch._dynamo`` (which the first ``torch.optim`` optimizer of a process
imports) another 1 s. Two callers start many such processes: fault runs
(:mod:`harness.faults.check`, Note [Fault runs from a fork server]) and the CPU ranks of a
distributed launch (:mod:`harness.distributed.launcher`, Note [Ranks from a fork
server]). Where the platform has ``fork``, they start them from :mod:`multiprocessing`'s
``forkserver``: a server process that imports the modules a caller names once, has run no
torch op (so no intra-op thread pool exists for ``fork`` to break), and forks a child per
request, already past those imports.

multiprocessing keeps *one* fork server per process, whose preload list is fixed when it
starts. So :func:`context` hands it out to the first caller's preload list only: a later
caller asking for another list gets None and starts its processes as fresh interpreters.
No process ever runs with modules imported that its caller did not ask for, before its own
environment was set (a preloaded module that reads the environment at import would read
the server's). Each caller's environment variable (``HARNESS_FAULTS_SUBPROCESS=1``,
``HARNESS_DIST_SUBPROCESS=1``) turns it off for that caller.

A forked child must end with the process that asked for it, as a fresh interpreter
started with :func:`harness.stopping.die_with_parent` does. Its parent is the server,
which leaves when its client is gone: it waits for the end of a pipe whose write end the
client holds, and multiprocessing hands every child a copy of that end too (for servers of
their own). A child that kept it would keep the server, and so itself, alive after its
client was killed; :func:`forked_child` closes it, and asks for SIGKILL when the server
ends.
"""

from __future__ import annotations

import contextlib
import os
from typing import Optional, Sequence

_claimed: Optional[tuple[str, ...]] = None


def context(preload: Sequence[str], *, off_variable: str):
    """multiprocessing's ``forkserver`` context preloading ``preload``; None where there is
    no fork, where ``off_variable`` is ``1``, or where the process's fork server was
    already given another preload list (Note [One fork server])."""
    global _claimed
    if os.environ.get(off_variable) == "1":
        return None
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    wanted = tuple(preload)
    if _claimed is not None and _claimed != wanted:
        return None
    server = multiprocessing.get_context("forkserver")
    if _claimed is None:
        server.set_forkserver_preload(list(wanted))
        _claimed = wanted
    return server


def forked_child() -> None:
    """In a child the server forked: close the child's copy of the client's liveness pipe
    and die with the server (Note [One fork server])."""
    from multiprocessing import forkserver as mp_forkserver

    from harness import stopping

    server = getattr(mp_forkserver, "_forkserver", None)
    alive = getattr(server, "_forkserver_alive_fd", None)
    if alive is not None:
        with contextlib.suppress(OSError):
            os.close(alive)
        server._forkserver_alive_fd = None
    stopping.die_with_parent(os.getppid())

"""Slow child-process work started at collection, so that it runs beside the other tests.

Note [Early jobs]
~~~~~~~~~~~~~~~~~
A few fixtures spend their time waiting on child processes: the fault matrix (one pytest
run per fault), the SimNPU probe and its CANN-upgrade rehearsal. Run in order, they left one
of the two cores idle for minutes. So a test module lists such work as
``EARLY = (Job(...), ...)``; when collection selects a test of that module,
``tests/conftest.py`` starts its jobs on one background lane (one job at a time, in
collection order) and moves the module's tests to the end of the session; a fixture then
takes ``result(job)``, which waits for the job (or runs it now when nothing started it, as
under ``--collect-only`` or in an xdist worker).

A job's function runs on the lane's thread and gets the environment as it was at
collection (``env``), so no test's monkeypatched environment reaches it; it should only
start child processes and read what they write. That environment sets
``OMP_NUM_THREADS=1`` (unless it names a count; :func:`job_env`): a job's processes run
beside the in-process tests, whose torch uses every core, and each of their intra-op
threads beyond one only contends with those (on 2 cores the fault matrix took 126 s
instead of 154-172 s). A job records and compares within itself, so its children agree
with each other on the thread count; none compares against a committed baseline.
(./run-tests also makes this process's OpenMP threads wait passively, not spin, for the
same reason.) ``stop()`` (at unconfigure) kills the child processes of a job still
running, so an interrupted session leaves none behind.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Optional, Sequence


@dataclasses.dataclass(frozen=True)
class Job:
    """``fn(env)``: the work; ``name``: unique, for the session's messages."""

    name: str
    fn: Callable[[dict], Any]


class Lane:
    """One background thread running jobs one after another."""

    def __init__(self) -> None:
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._futures: dict[str, concurrent.futures.Future] = {}
        self._lock = threading.Lock()

    def start(self, jobs: Sequence[Job], env: Optional[dict] = None) -> None:
        """Queue the jobs not started yet, with the environment as it is now."""
        snapshot = job_env(os.environ if env is None else env)
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="early-job")
            for job in jobs:
                if job.name not in self._futures:
                    self._futures[job.name] = self._pool.submit(job.fn, snapshot)

    def result(self, job: Job) -> Any:
        """The job's return value (its exception re-raised); waits, or runs it now when
        nothing started it."""
        with self._lock:
            future = self._futures.get(job.name)
        if future is None:
            return job.fn(job_env(os.environ))
        return future.result()

    def stop(self) -> None:
        """Drop the queued jobs (the running one's children: :func:`stop`)."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._futures.clear()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def job_env(env) -> dict:
    """A copy of ``env`` for a job: ``OMP_NUM_THREADS=1`` unless it names a count (Note
    [Early jobs])."""
    return {"OMP_NUM_THREADS": "1", **env}


def in_temp_dir(name: str, fn: Callable[[dict, Path], Any]) -> Job:
    """A :class:`Job` that runs ``fn(env, path)`` in a fresh temporary folder ``path``
    (removed afterwards): a test's ``tmp_path``, for work that runs on the lane."""

    def job(env: dict) -> Any:
        with tempfile.TemporaryDirectory(prefix="harness-early-") as tmp:
            return fn(env, Path(tmp))

    return Job(name, job)


LANE = Lane()
"""The session's lane: tests/conftest.py starts the selected modules' jobs on it."""
_RUNNING: set[subprocess.Popen] = set()
_LOCK = threading.Lock()


def start(jobs: Sequence[Job], env: Optional[dict] = None) -> None:
    LANE.start(jobs, env)


def result(job: Job) -> Any:
    return LANE.result(job)


def run(args: Sequence[str], *, env: dict, timeout: float, cwd=None) -> subprocess.CompletedProcess:
    """``subprocess.run`` in a session of its own, remembered so ``stop()`` can kill it."""
    proc = subprocess.Popen(list(args), cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    with _LOCK:
        _RUNNING.add(proc)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        stdout, stderr = proc.communicate()
        stderr += f"\n[early job] killed after {timeout:.0f} s"
    finally:
        with _LOCK:
            _RUNNING.discard(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _kill(proc: subprocess.Popen) -> None:
    try:  # the whole session: a pytest run's own children too
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop() -> None:
    """Drop the session's queued jobs and kill the running children (the session is over)."""
    LANE.stop()
    with _LOCK:
        running = list(_RUNNING)
    for proc in running:
        _kill(proc)

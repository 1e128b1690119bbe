"""Start a check's ranks on this host, watch them, and kill the ones that hang.

:func:`launch` starts ``world_size`` processes, each running ``python -m
harness.distributed --spec FILE --out DIR`` with the environment torchrun would give it
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` on a free
port): one process per device on accelerators, 2 or 4 on the CPU (gloo). It reads what
the ranks write (Note [Rank results on disk] in :mod:`harness.distributed.rankfiles`),
never a pipe, and returns a :class:`~harness.distributed.outcome.LaunchResult`.

Note [No process outlives its test]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Ranks stay in the launcher's process group (so whoever kills the test's group kills
them too), are killed one by one by pid and reaped when the launch ends for any reason,
and ask the kernel to kill them when their parent dies (``PR_SET_PDEATHSIG`` on Linux),
which covers a launcher that is itself killed with SIGKILL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from harness import stopping
from harness.distributed.outcome import LaunchResult, RankReport
from harness.distributed.rankfiles import read_json, tail
from harness.distributed.subcheck import SubCheck
from harness.results import pid_alive

ROOT = Path(__file__).resolve().parents[2]
"""The folder holding the ``harness`` package (a checkout's root): the ranks' working
directory and first ``PYTHONPATH`` entry."""
SPEC_ENV = "HARNESS_DIST_LAUNCHER"  # set in ranks started by launch(): "<launcher pid>"
ADDRESS_IN_USE = ("EADDRINUSE", "Address already in use", "address already in use")
LAUNCH_DIR_PREFIX = "harness-dist-"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (the OS picks it; a new one every call)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def remove_stale_launch_dirs(root: Optional[str] = None) -> list[Path]:
    """Delete ``harness-dist-<pid>-*`` temp folders whose launching process is gone.

    A launch folder is removed when its launch ends; a launcher killed with SIGKILL cannot
    clean up, so the next launch on the machine removes what it left.
    """
    base = Path(root or tempfile.gettempdir())
    removed = []
    for folder in base.glob(f"{LAUNCH_DIR_PREFIX}*"):
        pid = folder.name[len(LAUNCH_DIR_PREFIX):].split("-", 1)[0]
        if folder.is_dir() and pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def launch(checks: Union[Callable, str, SubCheck, Sequence[Union[Callable, str, SubCheck]]],
           world_size: int, device, *, timeout: float = 120.0, seed: int = 0,
           out_dir: Union[str, Path, None] = None, env: Optional[dict] = None,
           threads_per_rank: Optional[int] = None, port_attempts: int = 2,
           startup_timeout: float = 60.0,
           background: Optional[Background] = None) -> LaunchResult:
    """Run sub-checks on ``world_size`` local ranks with ``device``'s backend.

    Args:
        checks: one or more top-level functions ``fn(ctx, **kwargs)``, ``module:function``
            strings, built-in names (``collective``) or :class:`SubCheck` (name + kwargs;
            Note [Naming a sub-check]); every rank runs them in order.
        world_size: number of ranks; on accelerators at most ``device.count`` (one
            process per device, rank ``r`` on device ``r``).
        device: the DUT (:class:`harness.device.Device`).
        timeout: kill the ranks when none made progress (finished a sub-check) for this
            long, and report which hung (Note [Rank results on disk]).
        startup_timeout: the same limit until every rank has joined the process group
            (process start, ``import torch``, rendezvous); at least ``timeout``.
        out_dir: where ranks write results; a temporary folder (removed) when None.
        threads_per_rank: torch intra-op threads per rank; default: the host's cores
            shared out between ranks (ranks oversubscribing a small host crawl).
        background: a launch run beside other work, on a thread of its own
            (:class:`Background`); None for a launch its caller waits for.
    Returns:
        A :class:`LaunchResult`; ``result.outcome(name)`` for each sub-check.
    """
    plan = _as_plan(checks)
    names = [c.name for c in plan]
    if len(set(names)) != len(names):
        raise ValueError(f"sub-check names must be unique, got {names}")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if device.is_accelerator and world_size > device.count:
        raise ValueError(f"world_size {world_size} > {device.count} {device.type} devices; "
                         "one process per device")
    with contextlib.ExitStack() as stack:
        if out_dir is None:
            remove_stale_launch_dirs()
            out_dir = stack.enter_context(tempfile.TemporaryDirectory(
                prefix=f"{LAUNCH_DIR_PREFIX}{os.getpid()}-"))
        base = Path(out_dir)
        for attempt in range(max(1, port_attempts)):
            run_dir = base / f"launch{attempt}" if port_attempts > 1 else base
            result = _launch_once(plan, world_size, device, timeout=timeout, seed=seed,
                                  out=run_dir, env=env, threads_per_rank=threads_per_rank,
                                  startup_timeout=startup_timeout, background=background)
            if not _port_clash(result):
                return result
        return result


def _as_plan(checks) -> list[SubCheck]:
    if isinstance(checks, (str, SubCheck)) or callable(checks):
        checks = [checks]
    return [c if isinstance(c, SubCheck) else SubCheck.of(c) for c in checks]


def _port_clash(result: LaunchResult) -> bool:
    """Someone took the free port between choosing and binding it: worth one retry."""
    return any(r.state in ("starting", "crashed", "missing")
               and any(word in (r.log_tail + json.dumps(r.results)) for word in ADDRESS_IN_USE)
               for r in result.ranks)


def _launch_once(plan: list[SubCheck], world_size: int, device, *, timeout: float, seed: int,
                 out: Path, env: Optional[dict], threads_per_rank: Optional[int],
                 startup_timeout: float,
                 background: Optional[Background] = None) -> LaunchResult:
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / "spec.json"
    spec = {"checks": [c.to_json() for c in plan], "device": device.type, "seed": seed,
            "timeout": timeout}
    spec_path.write_text(json.dumps(spec))
    port = free_port()
    threads = threads_per_rank or max(1, (os.cpu_count() or 1) // world_size)
    base_env = dict(os.environ)
    base_env.update(env or {})
    python_path = [str(ROOT)] + [p for p in base_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    base_env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                     "WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE": str(world_size),
                     "GROUP_RANK": "0", "OMP_NUM_THREADS": str(threads),
                     "PYTHONPATH": os.pathsep.join(python_path),
                     SPEC_ENV: str(os.getpid()), "PYTHONUNBUFFERED": "1"})
    argv = ["--spec", str(spec_path), "--out", str(out)]
    server = _fork_context(device, env)
    procs: list = []
    logs = []
    start, began = time.monotonic(), time.time()
    timed_out, why = False, None
    killed: set[int] = set()
    try:
        for rank in range(world_size):
            rank_env = dict(base_env, RANK=str(rank), LOCAL_RANK=str(rank))
            if server is not None:  # Note [Ranks from a fork server]
                procs.append(_Forked.start(server, argv, rank_env, threads,
                                           out / f"rank{rank}.log"))
            else:
                log = open(out / f"rank{rank}.log", "wb")  # noqa: SIM115 - closed in finally
                logs.append(log)
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "harness.distributed", *argv], cwd=str(ROOT),
                    env=rank_env, stdout=log, stderr=subprocess.STDOUT,
                    preexec_fn=stopping.child_preexec()))
            if background is not None:  # before it has imported the harness
                background.lower_priority(procs[-1].pid)
        why = _watch(procs, out, timeout, max(timeout, startup_timeout), background)
        timed_out = why is not None
        if timed_out:
            if why not in (STOPPED, STARVED):
                _dump_stacks(procs, out)
            killed = {rank for rank, proc in enumerate(procs) if proc.poll() is None}
    finally:
        for proc in procs:  # Note [No process outlives its test]
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
                pass
        for log in logs:
            log.close()
    reports = [_rank_report(out, rank, proc, rank in killed) for rank, proc in enumerate(procs)]
    return LaunchResult(world_size, device.dist_backend, port, reports, [c.name for c in plan],
                        timed_out, timeout, time.monotonic() - start, str(out), why or "",
                        began)


# Note [Ranks from a fork server]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A rank started as ``python -m harness.distributed`` spends about 2 s importing torch
# and ``torch._dynamo`` (its first optimizer imports it) before its first collective; four
# ranks on two cores are 4 s of every launch. CPU ranks are therefore forked from the
# process's fork server (Note [One fork server] in harness/forkserver.py), which has
# imported torch, torch.distributed and torch._dynamo and nothing of the harness, and has
# run no torch op. The child then does what the fresh interpreter would have: the rank's
# environment replaces the server's (read by torch.distributed and the harness, which the
# child imports, from then on), its intra-op threads are set as OMP_NUM_THREADS would have
# set them, stdout and stderr go to the rank's log, it dies with its parent (the server,
# which leaves when the launcher does), and runs the same rank program
# (harness.distributed.__main__.main with the same arguments). What differs is what the
# rank inherits that a fresh interpreter draws anew: the server's hash seed and Python's
# own ``random`` state (the checks seed torch, and draw from nothing else). Accelerator
# ranks are never forked (a device runtime does not survive fork), nor a launch given
# environment overrides (torch may read them at import), nor where
# HARNESS_DIST_SUBPROCESS=1; those start fresh interpreters, as torchrun would. So are
# ranks of a program whose main module multiprocessing would run again in every child
# (a script of the user's that calls launch(): its unguarded top level would launch
# again); a module run with ``python -m`` (pytest, the harness's CLI), ``python -c`` and
# a console script pip wrote (``pytest``: its call is behind ``if __name__ ==
# "__main__"``) are safe.

RANK_PRELOAD = ("torch", "torch.distributed", "torch._dynamo")
"""What the ranks' fork server imports (nothing of the harness: Note [One fork server])."""


def _main_reruns_safely() -> bool:
    """Whether multiprocessing may prepare a child from this program's main module
    (Note [Ranks from a fork server])."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None:  # `python -m NAME`: a package's __main__ is never run again
        return spec.name == "__main__" or spec.name.endswith(".__main__")
    path = getattr(main, "__file__", None)
    if path is None:  # python -c, an interactive session
        return True
    import sysconfig

    scripts = sysconfig.get_path("scripts")
    return bool(scripts) and os.path.dirname(os.path.abspath(path)) == os.path.abspath(scripts)


def _fork_context(device, env: Optional[dict]):
    if device.type != "cpu" or env or not _main_reruns_safely():
        return None
    from harness import forkserver

    return forkserver.context(RANK_PRELOAD, off_variable="HARNESS_DIST_SUBPROCESS")


def forks_ranks(device) -> bool:
    """Whether a launch on ``device`` now forks its ranks from the fork server (Note
    [Ranks from a fork server]) rather than starting fresh interpreters."""
    return _fork_context(device, None) is not None


def warm_up(device) -> bool:
    """Start the ranks' fork server now, so that its imports overlap the tests run before
    the first launch (it is started by the first launch otherwise); True when it runs."""
    if not forks_ranks(device):
        return False
    from multiprocessing import forkserver as mp_forkserver

    mp_forkserver.ensure_running()
    return True


def _forked_rank(argv: list[str], env: dict, threads: int, log: str) -> None:
    """A rank forked from the fork server (Note [Ranks from a fork server])."""
    from harness import forkserver

    forkserver.forked_child()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(env, **{SPEC_ENV: str(os.getppid())})  # its parent is the server
    os.chdir(ROOT)
    import torch

    torch.set_num_threads(threads)
    from harness.distributed.__main__ import main

    code = 3
    try:
        code = main(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # Note [Rank exit] in harness.distributed.rank


class _Forked:
    """A forked rank, answering the part of ``subprocess.Popen`` the launcher uses."""

    def __init__(self, process) -> None:
        self._process = process
        self.pid = process.pid

    @classmethod
    def start(cls, server, argv: list[str], env: dict, threads: int, log: Path) -> _Forked:
        process = server.Process(target=_forked_rank, args=(argv, env, threads, str(log)),
                                 daemon=False)
        process.start()
        return cls(process)

    @property
    def returncode(self) -> Optional[int]:
        return self._process.exitcode

    def poll(self) -> Optional[int]:
        return self._process.exitcode

    def send_signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: Optional[float] = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired("rank", timeout)
        return self._process.exitcode


def _progress_key(out: Path, world_size: int) -> tuple:
    key = []
    for rank in range(world_size):
        try:
            key.append(os.stat(out / f"rank{rank}.json").st_mtime_ns)
        except OSError:
            key.append(None)
    return tuple(key)


STOPPED = "stopped: the run ended before the launch's outcome was needed"
"""The reason of a launch its :class:`Background` stopped."""
STARVED = ("starved: no rank made progress since a test began waiting, and this session "
           "may not give the ranks their priority back")
"""The reason of a background launch ended for the launcher to run again at its own
priority (Note [Launches ahead of their tests] in :mod:`harness.distributed.cases`)."""


@dataclasses.dataclass
class Background:
    """What a launch run beside other work needs (Note [Launches ahead of their tests] in
    :mod:`harness.distributed.cases`): its processes at a higher niceness while nobody
    waits for them, so that they take only the cores the other work leaves idle, and at
    the launcher's own once somebody does (:meth:`wait`); hang clocks that start only
    then (until then a rank that made no progress may simply have had no core); and a
    way to end it early."""

    nice: int = 19
    starved_after: float = 15.0
    """Seconds without progress, once someone waits, after which a launch whose priority
    could not be given back ends as :data:`STARVED` instead of running on at +19."""
    needed: threading.Event = dataclasses.field(default_factory=threading.Event)
    """Set (by :meth:`wait`) when someone waits for the launch: its processes are back at
    the launcher's priority (where :attr:`restored`), and the hang clocks run."""
    restored: bool = False
    """Whether :meth:`wait` gave the processes their priority back (it needs
    :func:`restores_priority`)."""
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    """Set to kill the ranks and end the launch at once (:data:`STOPPED`)."""
    _lowered: list = dataclasses.field(default_factory=list)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def lower_priority(self, pid: int, group: bool = False) -> None:
        """Add :attr:`nice` to process ``pid``'s niceness (``group``: to every process of
        the process group ``pid`` leads), unless somebody waits already."""
        with self._lock:
            if self.needed.is_set():
                return
            which = os.PRIO_PGRP if group else os.PRIO_PROCESS
            with contextlib.suppress(OSError):  # a process gone already needs none
                os.setpriority(which, pid, os.getpriority(which, pid) + self.nice)
                self._lowered.append((pid, group))

    def wait(self) -> None:
        """Somebody waits for the launch now: its processes get the launcher's priority
        back (every thread of each, on Linux a thread's own) where this session may give
        it, and the hang clocks run."""
        with self._lock:
            if self.needed.is_set():
                return  # given back already; nothing is lowered after that
            self.restored = restores_priority()  # before needed: the watch reads both
            self.needed.set()
            if not self.restored:
                return  # they stay at +19; starved, the launch ends (STARVED)
            own = os.getpriority(os.PRIO_PROCESS, 0)
            for pid, group in self._lowered:
                targets = ([(os.PRIO_PGRP, pid)] if group else
                           [(os.PRIO_PROCESS, int(tid)) for tid in _threads(pid)])
                for which, who in targets:
                    with contextlib.suppress(OSError):  # gone meanwhile
                        os.setpriority(which, who, own)


def _threads(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return [str(pid)]


@functools.cache
def restores_priority() -> bool:
    """Whether this process may give a lowered priority back (CAP_SYS_NICE, or an
    RLIMIT_NICE that allows it; an unprivileged process usually may not): tried on a
    thread of its own, whose niceness is its own on Linux (elsewhere a process's)."""
    if not sys.platform.startswith("linux"):
        return False
    result = []

    def probe() -> None:
        tid = threading.get_native_id()
        own = os.getpriority(os.PRIO_PROCESS, tid)
        try:
            os.setpriority(os.PRIO_PROCESS, tid, min(own + 1, 19))
            os.setpriority(os.PRIO_PROCESS, tid, own)
            result.append(os.getpriority(os.PRIO_PROCESS, tid) == own and own < 19)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return bool(result and result[0])


def _watch(procs: list[subprocess.Popen], out: Path, timeout: float,
           startup_timeout: float, background: Optional[Background] = None) -> Optional[str]:
    """Wait for every rank; a reason when the ranks stopped making progress, else None.

    Progress is a rank rewriting its results file (it does so around every sub-check),
    so ``timeout`` bounds one sub-check, not the whole launch. Until every rank has
    joined the process group the limit is ``startup_timeout`` instead: starting a
    process and importing torch on a loaded host is slow, and is not a hang. A rank that
    exits with an error while others still run cannot be waited out: its peers would
    block in the next collective, so the launch ends a timeout after the last progress.
    """
    last_key = _progress_key(out, len(procs))
    last_progress = time.monotonic()
    started = False
    while [proc.poll() for proc in procs].count(None):  # poll every one: returncodes
        if background is None:
            time.sleep(0.05)
        elif background.stop.wait(0.05):
            return STOPPED
        elif not background.needed.is_set():
            last_progress = time.monotonic()  # nobody waits: no hang clock runs
        for rank, proc in enumerate(procs):
            if proc.returncode not in (None, 0):
                data = read_json(out / f"rank{rank}.json") or {}
                if data.get("state") != "finished":  # died: its peers would wait forever
                    time.sleep(1.0)  # let the others write what they finished
                    where = f" in {data['current']!r}" if data.get("current") else ""
                    return (f"rank {rank} died (exit code {proc.returncode}, state "
                            f"{data.get('state', 'missing')}){where}; the others were stopped")
        key = _progress_key(out, len(procs))
        if key != last_key:
            last_key, last_progress = key, time.monotonic()
            if not started:
                states = [(read_json(out / f"rank{r}.json") or {}).get("state", "starting")
                          for r in range(len(procs))]
                started = all(state != "starting" for state in states)
        elif (background is not None and background.needed.is_set()
              and not background.restored
              and time.monotonic() - last_progress > background.starved_after):
            return STARVED  # at +19 still: the launcher runs it again at its own priority
        elif time.monotonic() - last_progress > (timeout if started else startup_timeout):
            return (f"no rank made progress for {timeout:.0f} s (--dist-timeout)" if started
                    else f"the ranks did not all join the process group within "
                         f"{startup_timeout:.0f} s (start-up limit)")
    return None


def _dump_stacks(procs: list[subprocess.Popen], out: Path) -> None:
    """Ask every still-running rank for its Python stack (faulthandler on SIGUSR1)."""
    asked = False
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGUSR1)
                asked = True
    if asked:
        time.sleep(0.5)


def _rank_report(out: Path, rank: int, proc: subprocess.Popen, killed: bool) -> RankReport:
    data = read_json(out / f"rank{rank}.json") or {}
    state = data.get("state", "missing")
    if state != "finished" and not killed and proc.returncode not in (None, 0):
        state = "crashed" if state != "missing" else "missing"
    stack = ""
    if killed:
        with contextlib.suppress(OSError):
            stack = (out / f"rank{rank}.stack").read_text(errors="replace")
    log_tail = "" if state == "finished" and proc.returncode == 0 else tail(out / f"rank{rank}.log")
    return RankReport(rank=rank, pid=proc.pid, exit_code=proc.returncode, state=state,
                      current=data.get("current"), results=data.get("results", {}),
                      killed=killed, stack=stack, log_tail=log_tail,
                      device=str(data.get("device") or ""), notes=data.get("notes", {}),
                      fallback_ops=_fallback_ops(out / f"rank{rank}.log", data.get("device")))


# Note [Fallbacks on every rank]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# torch_npu prints its CPU-fallback warning on stderr only, and only where RANK is unset
# or 0 (OptionsManager::ShouldPrintWarning, read once per process): a rank > 0 would
# never say that an op fell back. So the launcher passes each rank its number as
# HARNESS_RANK as well, and the rank program (harness.distributed.rank) removes RANK from
# its environment before torch (and torch_npu) load, once it has read it (the process
# group gets rank and world size explicitly); the launcher then reads every rank's whole
# output for the warning. TORCH_NPU_WARNING_DISABLE=1 silences every rank: the doctor says
# so. Under torchrun the same happens in the rank program.


def _fallback_ops(log: Path, device: Optional[str]) -> list[str]:
    """The ops a rank's output reports falling back to the CPU."""
    from harness import fallback

    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    device_type = str(device).split(":", 1)[0] if device else None
    return fallback.parse(text, device_type)

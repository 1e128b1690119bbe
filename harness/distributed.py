"""Run a check across ranks with the device's collective backend, on one host or many.

Two ways in, one rank program:

- :func:`launch` (one host): starts ``world_size`` processes, each running
  ``python -m harness.distributed --spec FILE --out DIR`` with the environment torchrun
  would give it (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
  ``MASTER_PORT`` on a free port). One process per device on accelerators, 2 or 4 on the
  CPU (gloo).
- ``torchrun ... -m harness.distributed CHECK --out DIR`` (many hosts): torch's own
  launcher starts the ranks; each writes its results under ``DIR`` and rank 0 gathers
  every rank's results into ``DIR/summary.json`` (see ``docs/distributed.md``).

A rank makes its device current first (``set_device(local_rank)``), then joins the
process group (``Device.dist_backend``: gloo, nccl, hccl, xccl), then runs a list of
*sub-checks* in order: importable top-level functions ``fn(ctx, **kwargs)`` returning
JSON-able values. Several sub-checks share one launch because starting a rank (a process
plus ``import torch``) costs seconds. The DUT work inside a check runs in
``ctx.device.scope()`` so injected faults apply (faults reach the ranks through the
``HARNESS_FAULTS`` environment variable).

Note [Rank results on disk]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
Each rank rewrites ``DIR/rank<N>.json`` atomically before and after every sub-check:
its state, the sub-check it is in, and each finished sub-check's value or exception
(type, message, traceback). The launcher reads these files, never a pipe, so a rank
that hangs or is killed still leaves everything it finished, and the file says where it
stopped. On a hang (no rank made progress for ``timeout`` seconds) the launcher asks the
unfinished ranks for their Python stacks (``faulthandler`` on SIGUSR1, into
``rank<N>.stack``), kills them, and reports which ranks hung in which sub-check.

Note [No process outlives its test]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Ranks stay in the launcher's process group (so whoever kills the test's group kills
them too), are killed one by one by pid and reaped when the launch ends for any reason,
and ask the kernel to kill them when their parent dies (``PR_SET_PDEATHSIG`` on Linux),
which covers a launcher that is itself killed with SIGKILL.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as _dt
import importlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence, Union

from harness.results import pid_alive

ROOT = Path(__file__).resolve().parent.parent
SPEC_ENV = "HARNESS_DIST_LAUNCHER"  # set in ranks started by launch(): "<launcher pid>"
ADDRESS_IN_USE = ("EADDRINUSE", "Address already in use", "address already in use")


class DistributedError(AssertionError):
    """A distributed check did not complete: rank exceptions or hung ranks, all named."""


# ------------------------------------------------------------------------ the plan

@dataclasses.dataclass(frozen=True)
class SubCheck:
    """One function every rank runs: ``target`` is ``module:function`` (or a function)."""

    name: str
    target: str
    kwargs: dict = dataclasses.field(default_factory=dict)
    file: Optional[str] = None  # the module's file, for modules imported by path (pytest)

    @classmethod
    def of(cls, fn: Union[Callable, str], name: Optional[str] = None, **kwargs) -> SubCheck:
        """A sub-check from a top-level function (or ``module:function`` string)."""
        if isinstance(fn, str):
            module, _, attr = fn.partition(":")
            if not attr:
                raise ValueError(f"check {fn!r} must be 'module:function'")
            return cls(name or attr, fn, dict(kwargs))
        if "<" in fn.__qualname__ or "." in fn.__qualname__:
            raise ValueError(f"{fn.__qualname__} is not a top-level function; ranks import "
                             "checks by name, so define it at module level")
        module = sys.modules.get(fn.__module__)
        file = getattr(module, "__file__", None)
        return cls(name or fn.__name__, f"{fn.__module__}:{fn.__qualname__}", dict(kwargs),
                   os.path.abspath(file) if file else None)

    def to_json(self) -> dict:
        return {"name": self.name, "target": self.target, "kwargs": self.kwargs,
                "file": self.file}


@dataclasses.dataclass
class RankContext:
    """What a sub-check gets: where it runs, and the DUT (``device``) for ``scope()``."""

    rank: int
    world_size: int
    local_rank: int
    device: Any  # harness.device.Device, made current before the group was joined
    backend: str
    seed: int = 0

    @property
    def torch_device(self):
        return self.device.torch_device


# --------------------------------------------------------------------------- ports

def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (the OS picks it; a new one every call)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------------- outcomes

@dataclasses.dataclass
class RankError:
    """An exception raised on one rank, with its traceback."""

    rank: int
    type: str
    message: str
    traceback: str

    def describe(self) -> str:
        return (f"rank {self.rank} raised {self.type}: {self.message}\n"
                + _indent(self.traceback.rstrip()))


@dataclasses.dataclass
class RankReport:
    """Everything one rank left behind (Note [Rank results on disk])."""

    rank: int
    pid: int
    exit_code: Optional[int]
    state: str  # starting | ready | running | finished | crashed | missing
    current: Optional[str]
    results: dict[str, dict]
    killed: bool = False
    stack: str = ""
    log_tail: str = ""


@dataclasses.dataclass
class CheckOutcome:
    """One sub-check across ranks: each rank's value, each rank's error, who never finished."""

    name: str
    world_size: int
    values: dict[int, Any]
    errors: dict[int, RankError]
    hung: list[int]           # ranks still inside this sub-check when they were killed
    not_reached: list[int]    # ranks that stopped (hung, crashed) before reaching it
    context: str = ""         # launch-level detail (timeouts, crashed ranks, logs)

    @property
    def ok(self) -> bool:
        return not (self.errors or self.hung or self.not_reached)

    @property
    def finished(self) -> list[int]:
        return sorted(self.values) + sorted(self.errors)

    def problem(self) -> str:
        """Why this sub-check is not complete ("" when every rank returned a value)."""
        if self.ok:
            return ""
        lines = [f"distributed check {self.name!r} (world size {self.world_size}):"]
        if self.hung:
            lines.append(f"ranks {self.hung} hung in {self.name!r} and were killed; ranks "
                         f"{sorted(self.values) + sorted(self.errors)} finished it")
        if self.not_reached:
            lines.append(f"ranks {self.not_reached} never reached {self.name!r}")
        for error in self.errors.values():
            lines.append(error.describe())
        if self.context:
            lines.append(self.context)
        return "\n".join(lines)

    def raise_if_failed(self) -> None:
        __tracebackhide__ = True
        if not self.ok:
            raise DistributedError(self.problem())


@dataclasses.dataclass
class LaunchResult:
    """A launch: every rank's report, and whether the watchdog had to kill it."""

    world_size: int
    backend: str
    port: int
    ranks: list[RankReport]
    checks: list[str]
    timed_out: bool
    timeout: float
    seconds: float
    out_dir: str
    why: str = ""  # why the watchdog killed the ranks

    @property
    def hung(self) -> list[int]:
        """Ranks that had not finished every sub-check when they were killed."""
        return sorted(r.rank for r in self.ranks if r.killed and r.state != "finished")

    @property
    def finished(self) -> list[int]:
        return sorted(r.rank for r in self.ranks if r.state == "finished")

    def summary(self) -> str:
        lines = []
        if self.timed_out:
            lines.append(f"{self.why}: killed; ranks {self.hung} hung, ranks "
                         f"{self.finished} finished")
        for report in self.ranks:
            where = f" in {report.current!r}" if report.current else ""
            if report.state != "finished" or report.exit_code not in (0, None):
                lines.append(f"rank {report.rank} (pid {report.pid}): {report.state}{where}, "
                             f"exit code {report.exit_code}"
                             + (" (killed by the launcher)" if report.killed else ""))
                if report.stack:
                    lines.append(f"  rank {report.rank} stack when killed:\n"
                                 + _indent(_trim_stack(report.stack), 4))
                if report.log_tail:
                    lines.append(f"  rank {report.rank} output ends:\n"
                                 + _indent(report.log_tail, 4))
        return "\n".join(lines)

    def outcome(self, name: str) -> CheckOutcome:
        """The outcome of one sub-check (by name) across every rank."""
        if name not in self.checks:
            raise KeyError(f"sub-check {name!r} was not part of this launch; it ran "
                           f"{self.checks}")
        values: dict[int, Any] = {}
        errors: dict[int, RankError] = {}
        hung: list[int] = []
        not_reached: list[int] = []
        for report in self.ranks:
            result = report.results.get(name)
            if result is not None and result.get("ok"):
                values[report.rank] = result.get("value")
            elif result is not None:
                errors[report.rank] = RankError(report.rank, result.get("type", "?"),
                                                result.get("message", ""),
                                                result.get("traceback", ""))
            elif report.current == name and report.state == "running" and report.killed:
                hung.append(report.rank)
            elif report.current == name:
                errors[report.rank] = RankError(
                    report.rank, "RankDied", f"the rank process ended (exit code "
                    f"{report.exit_code}, state {report.state}) inside {name!r}",
                    report.log_tail)
            else:
                not_reached.append(report.rank)
        context = "" if not (hung or not_reached) else self.summary()
        return CheckOutcome(name, self.world_size, values, errors, sorted(hung),
                            sorted(not_reached), context)

    def outcomes(self) -> dict[str, CheckOutcome]:
        return {name: self.outcome(name) for name in self.checks}

    def to_json(self) -> dict:
        return {"world_size": self.world_size, "backend": self.backend, "port": self.port,
                "timed_out": self.timed_out, "seconds": round(self.seconds, 2),
                "hung": self.hung, "finished": self.finished,
                "ranks": [dataclasses.asdict(r) for r in self.ranks]}


def _indent(text: str, n: int = 2) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


def _trim_stack(text: str, keep: int = 40) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-keep:])


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ----------------------------------------------------------------------- launching

LAUNCH_DIR_PREFIX = "harness-dist-"


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
           startup_timeout: float = 60.0) -> LaunchResult:
    """Run sub-checks on ``world_size`` local ranks with ``device``'s backend.

    Args:
        checks: one or more top-level functions ``fn(ctx, **kwargs)``, ``module:function``
            strings, or :class:`SubCheck` (name + kwargs); every rank runs them in order.
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
                                  startup_timeout=startup_timeout)
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
                 startup_timeout: float) -> LaunchResult:
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
    procs: list[subprocess.Popen] = []
    logs = []
    start = time.monotonic()
    timed_out, why = False, None
    killed: set[int] = set()
    try:
        for rank in range(world_size):
            rank_env = dict(base_env, RANK=str(rank), LOCAL_RANK=str(rank))
            log = open(out / f"rank{rank}.log", "wb")  # noqa: SIM115 - closed in finally
            logs.append(log)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "harness.distributed", "--spec", str(spec_path),
                 "--out", str(out)], cwd=str(ROOT), env=rank_env, stdout=log,
                stderr=subprocess.STDOUT))
        why = _watch(procs, out, timeout, max(timeout, startup_timeout))
        timed_out = why is not None
        if timed_out:
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
                        timed_out, timeout, time.monotonic() - start, str(out), why or "")


def _progress_key(out: Path, world_size: int) -> tuple:
    key = []
    for rank in range(world_size):
        try:
            key.append(os.stat(out / f"rank{rank}.json").st_mtime_ns)
        except OSError:
            key.append(None)
    return tuple(key)


def _watch(procs: list[subprocess.Popen], out: Path, timeout: float,
           startup_timeout: float) -> Optional[str]:
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
        time.sleep(0.05)
        for rank, proc in enumerate(procs):
            if proc.returncode not in (None, 0):
                data = _read_json(out / f"rank{rank}.json") or {}
                if data.get("state") != "finished":  # died: its peers would wait forever
                    time.sleep(1.0)  # let the others write what they finished
                    where = f" in {data['current']!r}" if data.get("current") else ""
                    return (f"rank {rank} died (exit code {proc.returncode}, state "
                            f"{data.get('state', 'missing')}){where}; the others were stopped")
        key = _progress_key(out, len(procs))
        if key != last_key:
            last_key, last_progress = key, time.monotonic()
            if not started:
                states = [(_read_json(out / f"rank{r}.json") or {}).get("state", "starting")
                          for r in range(len(procs))]
                started = all(state != "starting" for state in states)
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
    data = _read_json(out / f"rank{rank}.json") or {}
    state = data.get("state", "missing")
    if state != "finished" and not killed and proc.returncode not in (None, 0):
        state = "crashed" if state != "missing" else "missing"
    stack = ""
    if killed:
        with contextlib.suppress(OSError):
            stack = (out / f"rank{rank}.stack").read_text(errors="replace")
    log_tail = "" if state == "finished" and proc.returncode == 0 else _tail(out / f"rank{rank}.log")
    return RankReport(rank=rank, pid=proc.pid, exit_code=proc.returncode, state=state,
                      current=data.get("current"), results=data.get("results", {}),
                      killed=killed, stack=stack, log_tail=log_tail)


# ---------------------------------------------------------- many checks, few launches

@dataclasses.dataclass(frozen=True)
class DistCase:
    """One sub-check at one world size: what a parametrised test asks the planner for."""

    world_size: int
    check: SubCheck

    @property
    def id(self) -> str:
        return f"ws{self.world_size}-{self.check.name}"


class Planner:
    """Runs every wanted case of a world size in one launch, on first demand.

    Note [One launch per world size]: starting a rank costs a process and ``import
    torch`` (seconds on a small host), so the first test that needs world size ``n``
    launches *every* case of size ``n`` that the session selected (``wanted()``), and the
    other tests read their outcome from it. Selecting one test launches only its case.
    """

    def __init__(self, device, wanted: Callable[[], Sequence[DistCase]], *, timeout: float,
                 seed: int = 0) -> None:
        self.device = device
        self.wanted = wanted
        self.timeout = timeout
        self.seed = seed
        self.launches: dict[int, LaunchResult] = {}

    def outcome(self, case: DistCase) -> CheckOutcome:
        launched = self.launches.get(case.world_size)
        if launched is None or case.check.name not in launched.checks:
            plan = {c.check.name: c.check for c in self.wanted()
                    if c.world_size == case.world_size}
            plan.setdefault(case.check.name, case.check)
            launched = launch(list(plan.values()), case.world_size, self.device,
                              timeout=self.timeout, seed=self.seed)
            self.launches[case.world_size] = launched
        return launched.outcome(case.check.name)


# ---------------------------------------------------------------------- the rank side

def _die_with_parent(parent_pid: int) -> None:
    """Linux: have the kernel SIGKILL this rank when the launcher dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - best effort
        return
    if os.getppid() != parent_pid:  # the launcher died before prctl took effect
        os._exit(1)


def _env_int(name: str, default: Optional[int] = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise SystemExit(f"harness.distributed: {name} is not set; run me under torchrun "
                             "or through harness.distributed.launch()")
        return default
    return int(value)


class _RankWriter:
    """Rewrites ``rank<N>.json`` atomically (Note [Rank results on disk])."""

    def __init__(self, out: Path, rank: int, world_size: int) -> None:
        self.path = out / f"rank{rank}.json"
        self.data: dict[str, Any] = {"rank": rank, "world_size": world_size, "pid": os.getpid(),
                                     "host": socket.gethostname(), "state": "starting",
                                     "current": None, "results": {}}

    def update(self, **fields) -> None:
        self.data.update(fields)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, default=_jsonable))
        os.replace(tmp, self.path)


def _jsonable(value: Any) -> Any:
    """Turn numpy / torch scalars into plain JSON (a check may return them)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    return repr(value)


def _load_target(target: str, file: Optional[str]) -> Callable:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        if not file:
            raise
        spec = importlib.util.spec_from_file_location(module_name, file)
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part)
    return fn


def _error(exc: BaseException) -> dict:
    return {"ok": False, "type": type(exc).__name__, "message": str(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))}


def run_rank(checks: Sequence[SubCheck], out: Union[str, Path], *, device_type: str = "auto",
             seed: int = 0, timeout: float = 120.0, gather: bool = False) -> int:
    """The rank program: join the group, run every sub-check, write results (env:// init).

    Reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` as
    torchrun sets them. With ``gather``, rank 0 also collects every rank's results into
    ``out/summary.json`` (multi-node: the other nodes' files are on other hosts).
    Returns the process exit code: 0 when every sub-check returned on this rank.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rank, world_size = _env_int("RANK"), _env_int("WORLD_SIZE")
    local_rank = _env_int("LOCAL_RANK", rank)
    writer = _RankWriter(out, rank, world_size)
    writer.update()
    import faulthandler

    stack_file = open(out / f"rank{rank}.stack", "w")  # noqa: SIM115 - lives as long as the rank
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)

    import torch
    import torch.distributed as dist

    from harness.device import Device, select

    try:
        if device_type == "auto":
            found, _ = select("auto", index=local_rank)
            device = Device(found.type, local_rank % max(found.count, 1), found.count)
        else:
            device = select(device_type, index=local_rank)[0]
            device = Device(device.type, local_rank if device.is_accelerator else 0, device.count)
        device.set_current()  # before the group and before any model (NPU_NOTES: Distributed)
        backend = device.dist_backend
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size,
                                timeout=_dt.timedelta(seconds=max(timeout, 30.0)))
    except Exception as exc:  # noqa: BLE001 - reported per rank, never swallowed
        writer.update(state="crashed", results={"<init>": _error(exc)})
        traceback.print_exc()
        return 2
    ctx = RankContext(rank, world_size, local_rank, device, backend, seed)
    writer.update(state="ready", backend=backend, device=str(device.torch_device))
    all_ok = True
    for check in checks:
        writer.update(state="running", current=check.name)
        began = time.perf_counter()
        torch.manual_seed(seed)
        try:
            value = _load_target(check.target, check.file)(ctx, **check.kwargs)
            result = {"ok": True, "value": json.loads(json.dumps(value, default=_jsonable))}
        except Exception as exc:  # noqa: BLE001 - a check's exception is its result
            result = _error(exc)
            all_ok = False
        result["seconds"] = round(time.perf_counter() - began, 3)
        writer.data["results"][check.name] = result
        writer.update(current=None)
    writer.update(state="finished")
    if gather:
        gathered: list = [None] * world_size
        dist.all_gather_object(gathered, writer.data)
        if rank == 0:
            summary = {"world_size": world_size, "backend": backend, "ranks": gathered}
            (out / "summary.json").write_text(json.dumps(summary, indent=1))
            print(format_summary(summary), flush=True)
        dist.barrier()  # nobody leaves while a peer still needs its half of the gather
    # Note [Rank exit]: no destroy_process_group: a rank tearing gloo down while a peer
    # is still shutting down sometimes aborts in C++ ("terminate called without an
    # active exception", SIGABRT) after every result was written; main() leaves with
    # os._exit once the files are flushed, so the exit code is the checks' verdict.
    return 0 if all_ok else 1


def format_summary(summary: dict) -> str:
    """One line per sub-check: which ranks (on which hosts) returned, which raised.

    Returning is not passing: the values are metrics, judged where records are made
    (``suites/distributed/judge.py``; ``summary.json`` holds every rank's values).
    """
    ranks = summary["ranks"]
    names = list(dict.fromkeys(n for r in ranks for n in r.get("results", {})))
    hosts = sorted({r.get("host", "?") for r in ranks})
    lines = [f"harness.distributed: world size {summary['world_size']} "
             f"({summary['backend']}) on {', '.join(hosts)}"]
    for name in names:
        ok = [r["rank"] for r in ranks if r["results"].get(name, {}).get("ok")]
        bad = [r["rank"] for r in ranks if not r["results"].get(name, {}).get("ok")]
        errors = {r["rank"]: r["results"].get(name, {}).get("type", "missing") for r in ranks
                  if r["rank"] in bad}
        lines.append(f"  {name}: returned on ranks {ok}"
                     + (f"; FAILED on ranks {bad} ({errors})" if bad else "")
                     + f" [{max((r['results'].get(name, {}).get('seconds', 0) for r in ranks), default=0):.2f} s]")
    return "\n".join(lines)


def collect(out: Union[str, Path]) -> dict:
    """Read a results folder (one host): ``summary.json`` if rank 0 wrote it, else the
    ``rank<N>.json`` files found there."""
    out = Path(out)
    summary = _read_json(out / "summary.json")
    if summary is not None:
        return summary
    ranks = sorted((d for d in (_read_json(p) for p in out.glob("rank*.json")) if d),
                   key=lambda d: d["rank"])
    return {"world_size": ranks[0]["world_size"] if ranks else 0,
            "backend": ranks[0].get("backend", "?") if ranks else "?", "ranks": ranks}


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    here = os.getcwd()
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(here)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.distributed",
        description="Run distributed sub-checks as one rank (under torchrun, or started by "
                    "harness.distributed.launch). Reads RANK, WORLD_SIZE, LOCAL_RANK, "
                    "MASTER_ADDR and MASTER_PORT from the environment.")
    parser.add_argument("checks", nargs="*", metavar="CHECK",
                        help="module:function to run on every rank, in order")
    parser.add_argument("--kwargs", default="{}", metavar="JSON",
                        help="Keyword arguments for every CHECK. Default: %(default)r")
    parser.add_argument("--spec", default=None, metavar="FILE",
                        help="JSON plan written by launch() (replaces CHECK). "
                             "Default: %(default)r")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="Folder for rank<N>.json (and rank 0's summary.json)")
    parser.add_argument("--device", default="auto", metavar="TYPE",
                        help="Device type of the ranks (auto, cpu, npu, cuda, xpu). "
                             "Default: %(default)r")
    parser.add_argument("--seed", type=int, default=0, metavar="N",
                        help="Seed set before every sub-check. Default: %(default)r")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                        help="Process-group timeout for collectives. Default: %(default)r")
    args = parser.parse_args(argv)
    # launch() names itself; under torchrun the parent is its agent (which starts workers
    # in their own sessions, so only this keeps them from outliving a killed agent)
    _die_with_parent(int(os.environ.get(SPEC_ENV) or os.getppid()))
    if args.spec:
        spec = json.loads(Path(args.spec).read_text())
        checks = [SubCheck(c["name"], c["target"], c.get("kwargs") or {}, c.get("file"))
                  for c in spec["checks"]]
        device_type, seed, timeout = spec["device"], spec["seed"], spec["timeout"]
        gather = False
    else:
        if not args.checks:
            parser.error("give at least one CHECK (module:function) or --spec FILE")
        kwargs = json.loads(args.kwargs)
        checks = [SubCheck.of(c, **kwargs) for c in args.checks]
        device_type, seed, timeout, gather = args.device, args.seed, args.timeout, True
    with _cwd_on_path():
        return run_rank(checks, args.out, device_type=device_type, seed=seed,
                        timeout=timeout, gather=gather)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # Note [Rank exit]

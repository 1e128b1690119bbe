"""Many checks, few launches: the cases a pytest session asks for, grouped by world size.

Note [One launch per world size]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Starting a rank costs a process and ``import torch`` (seconds on a small host), so the
first test that needs world size ``n`` launches *every* case of size ``n`` that the
session selected (``wanted()``), and the other tests read their outcome from it.
Selecting one test launches only its case. A case that was not in ``wanted()`` when its
world size launched (a test building its :class:`DistCase` in its body, not as a
parameter) gets a launch of its own and of the other wanted cases not launched yet;
nothing is ever launched twice. Two cases of one world size with one name and different
sub-checks are refused: the planner finds outcomes by name.

Note [Distributed launches under xdist]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Under ``pytest -n N`` every worker collects the whole selection but runs only the tests
the controller sends it, so each worker's planner would launch every case of a world
size: N launches of the same ranks, at the same time, on the same devices (ranks use
devices 0..ws-1 whatever the worker's own device). So the workers share one store, a
folder under the run's base temporary directory (the parent of each worker's
``--basetemp``, fresh per run), and a file lock in it (``filelock``): a worker takes the
lock, reads the launches the other workers stored there, and launches only when the case
is in none of them, storing the result (:meth:`LaunchResult.to_json`) before it lets go.
So the family still starts its ranks once per world size per run, whichever worker asks
first, and no two distributed launches overlap (the multinode check takes the same lock,
:func:`one_at_a_time`): a launch's ranks have every device and every core the other
workers leave them, and its timeouts measure the backend, not a second launch. The other
alternative, routing the family to one worker (``xdist_group`` + ``--dist loadgroup``),
works only when the user passes ``--dist loadgroup``; the lock works with any ``--dist``
mode. The price: a worker that needs a world size another is launching waits for it.
Single-device checks on other workers keep running meanwhile, sharing devices 0..ws-1
with the ranks (Note [One device per xdist worker] in :mod:`harness.device`).

Note [Launches ahead of their tests]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A launch keeps the session waiting for seconds while its ranks, waiting on each other in
the backend, leave a small host's cores partly idle (the family alone kept 2 cores 62%
busy on an Intel Xeon), and the single-device families leave one idle too (the op
catalog ran at 1.2 of 2). So on the CPU in one process, with the ranks forked from the
fork server (Note [Ranks from a fork server] in :mod:`harness.distributed.launcher`),
:meth:`Planner.start_ahead` runs every wanted world size's launch, one after the other,
and then the wanted :class:`DistJob` (the torchrun check), on a thread of its own as
soon as collection is done; the family's tests run last (suites/distributed/conftest.py)
and find their outcomes ready, or wait for the rest.

What a launch measures does not change: the ranks are the same processes running the
same sub-checks, and no other launch overlaps one (:meth:`Planner.exclusive` waits for
them). What they share is the cores, as single-device checks share them with ranks under
xdist (above), and on these terms (:class:`launcher.Background`): the ranks run at
niceness +19, so they take the cores the session's checks leave idle and barely slow
those checks (the AMP family took 9.1 s beside them, 9.4 s alone; at +10 the ranks still
took a core from its two-thread convolutions, 11.3 s, and the run gained 4 s instead of
10; at 0, 19.6 s). A rank may therefore go without a core while the session computes on
both, so the launcher's hang clocks start only when a test waits for the outcome (until
then no progress is not a hang), and a case whose verdict reads the wall clock against a
timeout is ``alone``, launched when its test asks, with the session waiting. When a test
waits, the ranks get the session's priority back (``Background.wait``): on a host that
other work keeps busy, a rank at +19 would run only in that work's gaps, and a launch
waited for must go as fast as one started then. Giving a priority back needs
CAP_SYS_NICE or an RLIMIT_NICE that allows it (``launcher.restores_priority``, tried
once). Where the session has neither (an unprivileged user, usually; a container
without that capability), the launches still run ahead, and their ranks stay at +19
when a test waits: on an otherwise idle host the session's wait leaves them the cores,
as at its own priority. On a host other work keeps busy they may starve instead: a launch
waited for whose ranks make no progress for ``Background.starved_after`` (15 s) ends
(``launcher.STARVED``), and its cases are launched again when their tests ask, at the
session's priority, so a busy host costs time, never a false hang. Launches the thread
ahead starts after a test waits take the session's priority from the start. A
:class:`DistJob` starts its processes its own way and cannot tell a starved node from a
hung one, so it runs ahead only where the priority can be given back. (An AMD EPYC Zen 4
with CAP_SYS_NICE dropped ran the default run in 49.7 s with the family launched when its
tests asked, 43.3 and 43.7 s with its launches ahead; docs/benchmarks.md.) What bounds
a rank's wait for a starved peer before a test waits is the collectives' own timeout
(the group's: ``--dist-timeout``, 120 s by default and never under 30 s): at +19 a rank
gets about 1.5% of a core whose threads the session keeps busy, so a peer would need
nearly two seconds of its own work between two collectives (half a second at 30 s) in
such a stretch to exceed it; the family's sub-checks do milliseconds to a few hundred.

Not ahead: an accelerator (the ranks would share the session's device and its memory
with the checks measured on it), xdist workers (the shared store above decides who
launches), ranks started as fresh interpreters (a thread beside torch must not fork and
exec), and ``alone`` cases. A launch that
fails raises in every test that reads it; a session that ends first (``-x``, Ctrl-C,
SIGTERM) stops the launch and kills its ranks (:meth:`Planner.close`).
``HARNESS_DIST_SUBPROCESS=1`` (fresh interpreters) turns it off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional, Sequence, Union

from harness.distributed import launcher
from harness.distributed.outcome import CheckOutcome, LaunchResult
from harness.distributed.subcheck import SubCheck

LOCK_NAME = "launch.lock"
STORED_GLOB = "launch-*.json"


@dataclasses.dataclass(frozen=True)
class DistCase:
    """One sub-check at one world size: what a parametrised test asks the planner for."""

    world_size: int
    check: SubCheck
    alone: bool = False
    """Launched by itself, when its test asks: a case whose correct ending may be the
    backend's watchdog ending every rank, which would take the other cases of a shared
    launch with it, or whose verdict reads the wall clock against a timeout (Note [Rank
    skew] in :mod:`harness.distributed.judge`), which no launch run beside other work may
    (Note [Launches ahead of their tests])."""

    @property
    def id(self) -> str:
        return f"ws{self.world_size}-{self.check.name}"


@dataclasses.dataclass(frozen=True)
class DistJob:
    """A distributed check that starts its processes its own way (torch's launcher, say),
    what a parametrised test asks the planner for like a :class:`DistCase`: the planner
    runs it ahead of its test where launches run ahead (Note [Launches ahead of their
    tests]), else when the test asks, and never beside a launch.

    ``run(background)`` does the work and returns what the test judges; ``background``
    is None when the test waits for it, else the :class:`launcher.Background` whose
    niceness its processes take, whose ``needed`` starts its deadlines and whose
    ``stop`` ends it."""

    name: str
    run: Callable[[Optional[launcher.Background]], Any]

    @property
    def id(self) -> str:
        return self.name


def one_at_a_time(shared: Optional[Path]) -> ContextManager:
    """Hold the workers' launch lock (Note [Distributed launches under xdist]); nothing
    to hold without a shared store (one process)."""
    if shared is None:
        return contextlib.nullcontext()
    from filelock import FileLock

    return FileLock(str(shared / LOCK_NAME))


def stored_launches(shared: Path) -> list[dict]:
    """The launches the run's workers stored, in the order they began (their
    :meth:`LaunchResult.to_json` plus the launching ``worker``)."""
    found = [json.loads(path.read_text()) for path in sorted(shared.glob(STORED_GLOB))]
    return sorted(found, key=lambda data: data.get("began", 0.0))


class Planner:
    """Runs every wanted case of a world size in one launch, on first demand
    (Note [One launch per world size]) or ahead of the tests (:meth:`start_ahead`, Note
    [Launches ahead of their tests]); with ``shared``, once across the xdist workers
    that share that folder (Note [Distributed launches under xdist])."""

    def __init__(self, device, wanted: Callable[[], Sequence[Union[DistCase, DistJob]]], *,
                 timeout: float, seed: int = 0, shared: Optional[Path] = None) -> None:
        self.device = device
        self.wanted = wanted
        self.timeout = timeout
        self.seed = seed
        self.shared = shared
        self.launches: list[LaunchResult] = []
        """The launches this process made or read, in order."""
        self._by_case: dict[tuple[int, str], LaunchResult] = {}
        self._ahead: Optional[threading.Thread] = None
        self._ahead_keys: set[tuple[int, str]] = set()
        self._starved: set[tuple[int, str]] = set()
        """Cases of a launch ahead that ended :data:`launcher.STARVED`."""
        self._ahead_error: Optional[BaseException] = None
        self._background = launcher.Background()
        self._jobs: dict[str, tuple[bool, Any]] = {}
        """job name -> (True, what it returned) or (False, what it raised)."""

    @staticmethod
    def runs_ahead(device, shared: Optional[Path]) -> bool:
        """Whether a planner for ``device`` (``shared``: the xdist workers' store) may
        launch ahead of its tests (Note [Launches ahead of their tests])."""
        return shared is None and launcher.forks_ranks(device)

    def start_ahead(self) -> bool:
        """Start every wanted world size's launch now, on a thread (Note [Launches ahead
        of their tests]); False (nothing started) where they would not be independent of
        the session's checks."""
        if self._ahead is not None or not self.runs_ahead(self.device, self.shared):
            return False
        plans = {}
        for case in self._cases():
            if not case.alone:
                plans.setdefault(case.world_size, case)
        jobs = {job.name: job for job in self.wanted()
                if isinstance(job, DistJob) and launcher.restores_priority()}
        if not plans and not jobs:
            return False
        batches = [(size, self._plan(case)) for size, case in sorted(plans.items())]
        self._ahead_keys = {(size, check.name) for size, plan in batches for check in plan}
        self._ahead = threading.Thread(target=self._run_ahead, args=(batches, list(jobs.values())),
                                       name="harness-dist-ahead", daemon=True)
        self._ahead.start()
        return True

    def _run_ahead(self, batches: list[tuple[int, list[SubCheck]]], jobs: list[DistJob]) -> None:
        try:
            for world_size, plan in batches:
                if self._background.stop.is_set():
                    return
                launched = launcher.launch(plan, world_size, self.device,
                                           timeout=self.timeout, seed=self.seed,
                                           background=self._background)
                if launched.why == launcher.STARVED:  # launched again when asked
                    self._starved |= {(world_size, check.name) for check in plan}
                elif not self._background.stop.is_set():
                    self._add(launched)
        except BaseException as exc:  # noqa: BLE001 - raised again in the tests that read it
            self._ahead_error = exc
            return
        for job in jobs:
            if self._background.stop.is_set():
                return
            self._run_job(job, self._background)

    def _run_job(self, job: DistJob, background: Optional[launcher.Background]) -> None:
        try:
            self._jobs[job.name] = (True, job.run(background))
        except Exception as exc:  # noqa: BLE001 - raised again in the test that reads it
            self._jobs[job.name] = (False, exc)

    def _cases(self) -> list[DistCase]:
        return [case for case in self.wanted() if isinstance(case, DistCase)]

    def job(self, job: DistJob) -> Any:
        """What ``job.run`` returned (or raises what it raised): from the run ahead of the
        test where there was one, else run now, with no launch beside it."""
        if job.name not in self._jobs:
            with self.exclusive():  # waits for the thread ahead, which may have run it
                if job.name not in self._jobs:
                    self._run_job(job, None)
        ok, value = self._jobs[job.name]
        if not ok:
            raise value
        return value

    def _wait_ahead(self) -> None:
        """Until the launches started ahead have ended (their thread gone)."""
        if self._ahead is not None:
            self._background.wait()
            self._ahead.join()

    def exclusive(self) -> ContextManager:
        """``with planner.exclusive():`` a launch of a test's own that no other launch may
        overlap: the ones started ahead end first, and under xdist the workers' lock is
        held (Note [Distributed launches under xdist])."""
        self._wait_ahead()
        return one_at_a_time(self.shared)

    def close(self) -> None:
        """Stop a launch started ahead that is still running (its ranks are killed)."""
        self._background.stop.set()
        self._wait_ahead()

    def outcome(self, case: DistCase) -> CheckOutcome:
        key = (case.world_size, case.check.name)
        if key in self._ahead_keys:
            self._wait_ahead()
            if key not in self._by_case and key not in self._starved:
                why = (f"{type(self._ahead_error).__name__}: {self._ahead_error}"
                       if self._ahead_error is not None else "it was stopped")
                raise RuntimeError(
                    f"the distributed launch of world size {case.world_size}, started "
                    f"ahead of its tests, ended without an outcome ({why}); rerun with "
                    "HARNESS_DIST_SUBPROCESS=1 to launch when the tests ask (Note "
                    "[Launches ahead of their tests])") from self._ahead_error
        if key not in self._by_case:
            with self.exclusive():
                if self.shared is not None:
                    self._read_stored()
                if key not in self._by_case:
                    self._launch(case)
        return self._by_case[key].outcome(case.check.name)

    def _plan(self, case: DistCase) -> list[SubCheck]:
        """The wanted cases of ``case``'s world size not launched yet, and ``case``."""
        plan: dict[str, SubCheck] = {}
        for other in ([case] if case.alone else [*self._cases(), case]):
            if other.world_size != case.world_size or other.alone != case.alone:
                continue
            known = plan.setdefault(other.check.name, other.check)
            if known != other.check:
                raise ValueError(
                    f"two distributed cases of world size {case.world_size} are named "
                    f"{other.check.name!r} but differ ({known.target} {known.kwargs} and "
                    f"{other.check.target} {other.check.kwargs}); outcomes are found by "
                    "name, so give each its own name (SubCheck.of(..., name=...))")
        return [check for name, check in plan.items()
                if (case.world_size, name) not in self._by_case]

    def _launch(self, case: DistCase) -> None:
        launched = launcher.launch(self._plan(case), case.world_size, self.device,
                                   timeout=self.timeout, seed=self.seed)
        if self.shared is not None:
            data = dict(launched.to_json(), worker=os.environ.get("PYTEST_XDIST_WORKER", ""))
            name = f"launch-ws{case.world_size}-{len(list(self.shared.glob(STORED_GLOB)))}"
            tmp = self.shared / f"{name}.tmp"
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.shared / f"{name}.json")  # readers see it whole or not
        self._add(launched)

    def _read_stored(self) -> None:
        seen = {(launch.world_size, launch.began) for launch in self.launches}
        for data in stored_launches(self.shared):
            if (data["world_size"], data["began"]) not in seen:
                self._add(LaunchResult.from_json(data))

    def _add(self, launched: LaunchResult) -> None:
        self.launches.append(launched)
        for name in launched.checks:
            self._by_case.setdefault((launched.world_size, name), launched)

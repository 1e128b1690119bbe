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
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from pathlib import Path
from typing import Callable, ContextManager, Optional, Sequence

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
    """Launched by itself: a case whose correct ending may be the backend's watchdog
    ending every rank (Note [Rank skew] in :mod:`harness.distributed.judge`), which would
    take the other cases of a shared launch with it."""

    @property
    def id(self) -> str:
        return f"ws{self.world_size}-{self.check.name}"


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
    (Note [One launch per world size]); with ``shared``, once across the xdist workers
    that share that folder (Note [Distributed launches under xdist])."""

    def __init__(self, device, wanted: Callable[[], Sequence[DistCase]], *, timeout: float,
                 seed: int = 0, shared: Optional[Path] = None) -> None:
        self.device = device
        self.wanted = wanted
        self.timeout = timeout
        self.seed = seed
        self.shared = shared
        self.launches: list[LaunchResult] = []
        """The launches this process made or read, in order."""
        self._by_case: dict[tuple[int, str], LaunchResult] = {}

    def outcome(self, case: DistCase) -> CheckOutcome:
        key = (case.world_size, case.check.name)
        if key not in self._by_case:
            with one_at_a_time(self.shared):
                if self.shared is not None:
                    self._read_stored()
                if key not in self._by_case:
                    self._launch(case)
        return self._by_case[key].outcome(case.check.name)

    def _plan(self, case: DistCase) -> list[SubCheck]:
        """The wanted cases of ``case``'s world size not launched yet, and ``case``."""
        plan: dict[str, SubCheck] = {}
        for other in ([case] if case.alone else [*self.wanted(), case]):
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

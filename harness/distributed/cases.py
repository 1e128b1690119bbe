"""Many checks, few launches: the cases a pytest session asks for, grouped by world size.

Note [One launch per world size]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Starting a rank costs a process and ``import torch`` (seconds on a small host), so the
first test that needs world size ``n`` launches *every* case of size ``n`` that the
session selected (``wanted()``), and the other tests read their outcome from it.
Selecting one test launches only its case.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from harness.distributed import launcher
from harness.distributed.outcome import CheckOutcome, LaunchResult
from harness.distributed.subcheck import SubCheck


@dataclasses.dataclass(frozen=True)
class DistCase:
    """One sub-check at one world size: what a parametrised test asks the planner for."""

    world_size: int
    check: SubCheck

    @property
    def id(self) -> str:
        return f"ws{self.world_size}-{self.check.name}"


class Planner:
    """Runs every wanted case of a world size in one launch, on first demand
    (Note [One launch per world size])."""

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
            launched = launcher.launch(list(plan.values()), case.world_size, self.device,
                                       timeout=self.timeout, seed=self.seed)
            self.launches[case.world_size] = launched
        return launched.outcome(case.check.name)

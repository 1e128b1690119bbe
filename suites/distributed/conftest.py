"""Glue of the distributed family: one launch per world size for the selected checks.

Tests are parametrised with :class:`harness.distributed.DistCase` values; the ``dist``
fixture returns a case's :class:`~harness.distributed.CheckOutcome`. The first test of a
world size launches every selected case of that size at once (Note [One launch per world
size] in :mod:`harness.distributed.cases`).
"""

from __future__ import annotations

import pytest

from harness.distributed import DistCase, Planner


def _selected_cases(session: pytest.Session) -> list[DistCase]:
    cases = []
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None:
            cases += [value for value in callspec.params.values() if isinstance(value, DistCase)]
    return cases


@pytest.fixture(scope="session")
def dist_planner(request: pytest.FixtureRequest, device, settings) -> Planner:
    def wanted() -> list[DistCase]:
        return [case for case in _selected_cases(request.session)
                if not device.is_accelerator or case.world_size <= device.count]

    return Planner(device, wanted, timeout=settings.dist_timeout, seed=settings.seed)


@pytest.fixture
def dist(dist_planner: Planner, device):
    """``dist(case)`` -> the case's outcome on every rank (skips past the device count)."""

    def outcome(case: DistCase):
        if device.is_accelerator and case.world_size > device.count:
            pytest.skip(f"world size {case.world_size} needs {case.world_size} "
                        f"{device.type} devices; {device.count} visible")
        return dist_planner.outcome(case)

    return outcome

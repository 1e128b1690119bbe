"""Glue of the distributed family: one launch per world size for the selected checks.

Tests are parametrised with :class:`harness.distributed.DistCase` values; the ``dist``
fixture returns a case's :class:`~harness.distributed.CheckOutcome`. The first test of a
world size launches every selected case of that size at once (Note [One launch per world
size] in :mod:`harness.distributed.cases`); on the CPU in one process those launches start
as soon as collection is done (Note [Launches ahead of their tests]); under pytest-xdist
the workers share them and take turns (Note [Distributed launches under xdist]).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import pytest

from harness.distributed import DistCase, DistJob, Planner, launcher
from harness.plugin import STATE

SHARED_FOLDER = "harness-dist-launches"
AHEAD = pytest.StashKey[Planner]()


def _selected_cases(session: pytest.Session) -> list[Union[DistCase, DistJob]]:
    cases = []
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None:
            cases += [value for value in callspec.params.values()
                      if isinstance(value, (DistCase, DistJob))]
    return cases


def pytest_configure(config: pytest.Config) -> None:
    """Start the ranks' fork server (Note [Ranks from a fork server] in
    harness/distributed/launcher.py) when this folder is collected: its imports then run
    on the second core while collection, one core's work, goes on (pytest calls a
    conftest's ``pytest_configure`` when it loads the conftest)."""
    state = config.stash.get(STATE, None)
    if state is not None and not config.option.collectonly:
        launcher.warm_up(state.device)


def _planner(session: pytest.Session, device, settings, shared: Optional[Path]) -> Planner:
    def wanted() -> list[Union[DistCase, DistJob]]:
        return [case for case in _selected_cases(session) if not device.is_accelerator
                or isinstance(case, DistJob) or case.world_size <= device.count]

    return Planner(device, wanted, timeout=settings.dist_timeout, seed=settings.seed,
                   shared=shared)


def _ahead(config: pytest.Config):
    """The run's state where this family's launches start ahead of its tests, else None
    (Note [Launches ahead of their tests] in harness/distributed/cases.py)."""
    state = config.stash.get(STATE, None)
    if state is None or config.option.collectonly or hasattr(config, "workerinput"):
        return None
    return state if Planner.runs_ahead(state.device, None) else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Where the launches start ahead, the family's tests run last: its ranks then use
    the cores the other families leave idle, and its tests find their outcomes ready."""
    if _ahead(config) is not None:
        here = Path(__file__).parent
        items.sort(key=lambda item: item.path.is_relative_to(here))  # stable


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the selected launches now (Note [Launches ahead of their tests])."""
    state = _ahead(session.config)
    if state is not None:
        planner = _planner(session, state.device, state.settings, None)
        if planner.start_ahead():
            session.config.stash[AHEAD] = planner


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """A launch started ahead and still running when the session ends is stopped."""
    planner = session.config.stash.get(AHEAD, None)
    if planner is not None:
        planner.close()


@pytest.fixture(scope="session")
def dist_shared(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Optional[Path]:
    """The launches' store the xdist workers of this run share (None in one process):
    beside the workers' own base temporary folders, under the controller's."""
    if not hasattr(request.config, "workerinput"):
        return None
    shared = tmp_path_factory.getbasetemp().parent / SHARED_FOLDER
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session")
def dist_planner(request: pytest.FixtureRequest, device, settings, dist_shared) -> Planner:
    ahead = request.config.stash.get(AHEAD, None)
    return ahead or _planner(request.session, device, settings, dist_shared)


@pytest.fixture
def dist(dist_planner: Planner, device, results):
    """``dist(case)`` -> the case's outcome on every rank (skips past the device count).
    The test's records name the devices its ranks ran on (``info["rank_devices"]``).
    ``dist(job)`` -> what the :class:`~harness.distributed.DistJob` returned."""

    def outcome(case: Union[DistCase, DistJob]):
        if isinstance(case, DistJob):
            return dist_planner.job(case)
        if device.is_accelerator and case.world_size > device.count:
            pytest.skip(f"world size {case.world_size} needs {case.world_size} "
                        f"{device.type} devices; {device.count} visible")
        found = dist_planner.outcome(case)
        results.context["rank_devices"] = [found.devices.get(rank, "")
                                           for rank in range(case.world_size)]
        return found

    return outcome

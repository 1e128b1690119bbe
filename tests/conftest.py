"""Shared fixtures for the harness's own tests."""

import os

import early
import pytest
import torch._dynamo  # noqa: F401 - see the note below

import harness.store.db  # noqa: F401 - SQLAlchemy, kept across pytester runs (the note below)

# Note [pytester and torch's lazy imports]: pytester's in-process runs restore
# sys.modules afterwards, so a torch module first imported inside one (torch.manual_seed
# lazily imports torch._dynamo) would be imported again by the next run and re-register
# its operator library, which torch refuses. Importing it here keeps it for all runs.
# SQLAlchemy is the same: imported again by a later run (the store, written at every
# session's end), its compiled internals fail ("'InternalTraversal' object is not callable").

pytest_plugins = ["pytester"]
_STARTED_EARLY = pytest.StashKey[bool]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the selected modules' early jobs and run those modules last (Note [Early
    jobs] in tests/early.py). Not under --collect-only, nor in an xdist worker (each
    worker would start every job; there the fixtures run them when they need them)."""
    jobs = [job for module in dict.fromkeys(item.module for item in items
                                            if getattr(item, "module", None))
            for job in getattr(module, "EARLY", ())]
    if not jobs or config.option.collectonly or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    items.sort(key=lambda item: bool(getattr(getattr(item, "module", None), "EARLY", ())))
    early.start(jobs)
    config.stash[_STARTED_EARLY] = True


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_STARTED_EARLY, False):  # not an inner pytest run's end
        early.stop()


@pytest.fixture(scope="session")
def pg_cluster():
    """A throw-away PostgreSQL cluster (tests/pg.py), stopped at the end; None where none
    can be started (:func:`pg.unavailable` decides skip or fail)."""
    import pg

    cluster, reason = pg.start()
    yield cluster if cluster is not None else reason
    if cluster is not None:
        cluster.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """A fresh, empty store of each backend: a SQLite file, a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'harness.db'}"
    import pg

    cluster = request.getfixturevalue("pg_cluster")
    if isinstance(cluster, str):
        pg.unavailable(cluster)
    return cluster.fresh()


@pytest.fixture
def fingerprint():
    """A CPU fingerprint as the plugin would build it (no probing)."""
    return {"device_type": "cpu", "device_name": "Test CPU", "device_slug": "x86-64-avx2",
            "stack_id": "torch-2.4.0", "torch": "2.4.0", "device_count": 1}


@pytest.fixture(autouse=True)
def _isolated_fallback_memory(monkeypatch):
    """harness.fallback remembers, per process, the ops seen falling back to the CPU; a
    test that fakes a fallback warning must not leave them to the conformance run that
    follows in the same process (they would turn green cases into ``fallback``)."""
    from harness import fallback

    monkeypatch.setattr(fallback, "KNOWN", set())


@pytest.fixture
def cpu():
    """The CPU as a device under test."""
    from harness.device import Device

    return Device("cpu")


@pytest.fixture(autouse=True)
def _faults_restored():
    """Tests that activate faults must not leave them active for the tests after them."""
    from harness import faults

    before = [fault.name for fault in faults.active()]
    yield
    faults.set_active(before)

"""Glue of the benchmark family: the bench context (baseline, sibling runs) and a summary.

Logic lives in :mod:`harness.bench`; see Note [K process runs] in
:mod:`harness.bench.runs` for ``--bench-runs``.
"""

from __future__ import annotations

import contextlib

import pytest

from harness.bench import runs as bench_runs
from harness.bench.runner import BenchContext
from harness.bench.timing import bench_threads

BENCH_DIR = "suites/bench/"


@pytest.fixture(scope="session")
def bench(request: pytest.FixtureRequest, harness_state) -> BenchContext:
    """The session's :class:`BenchContext`; starts the ``--bench-runs`` children first."""
    settings, device = harness_state.settings, harness_state.device
    selection = harness_state.selection
    baseline = selection.results if selection is not None else None
    context = BenchContext(device, settings.training_scale, baseline,
                           selection.stack_id if selection is not None and selection.path
                           else "")
    if settings.bench_runs > 1 and hasattr(request.config, "workerinput"):
        harness_state.errors.append("--bench-runs needs one process (-n0): pytest-xdist "
                                    "workers would time each other")
    elif settings.bench_runs > 1 and not bench_runs.is_child():
        nodeids = [item.nodeid for item in request.session.items
                   if item.nodeid.startswith(BENCH_DIR) and item.get_closest_marker("benchmark")
                   and not item.get_closest_marker("skip")]
        plugins = request.config.pluginmanager
        reporter = plugins.get_plugin("terminalreporter")
        capture = plugins.get_plugin("capturemanager")

        def say(line: str) -> None:  # progress on long runs, past pytest's capture
            if reporter is None:
                return
            with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
                reporter.write_line(f"[harness] {line}")

        say(f"--bench-runs {settings.bench_runs}: {settings.bench_runs - 1} child run(s) of "
            f"{len(nodeids)} benchmarks first, then this process")
        context.child_runs, problems = bench_runs.spawn(
            nodeids, settings.bench_runs - 1, root=request.config.rootpath, device=device.type,
            seed=settings.seed, scale=settings.training_scale, faults=settings.faults,
            progress=say)
        harness_state.errors.extend(problems)
    request.config.stash[CONTEXT] = context
    return context


CONTEXT = pytest.StashKey[BenchContext]()


@pytest.fixture(autouse=True)
def _bench_threads(device):
    """One intra-op thread on the CPU for the benchmark's duration (timing.bench_threads)."""
    import torch

    threads = bench_threads(device)
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    yield
    torch.set_num_threads(before)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    context = config.stash.get(CONTEXT, None)
    if context is None or not context.verdicts:
        return
    terminalreporter.section("benchmark verdicts")
    for record_id, verdict in sorted(context.verdicts.items()):
        text = verdict.summary() if verdict is not None else (
            "not compared (no baseline record); as a baseline: "
            + context.detectable_lines.get(record_id, "?"))
        terminalreporter.write_line(f"{record_id}: {text}")

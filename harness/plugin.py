"""The pytest plugin: options, markers, fixtures and hooks. Glue only.

Logic lives in plain modules that take values: :mod:`harness.options` (the options
table, their values as Settings), :mod:`harness.session` (the session's start, header
and end), :mod:`harness.recorder` (what a check records), :mod:`harness.checkrun` (what
a test's records mean for its report: Note [Records travel with reports]) and
:mod:`harness.hypothesis_profiles`. This file reads pytest's objects, hands their values
to those modules, keeps the run state in ``config.stash`` and applies what comes back.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import inspect
import os
import random
import shlex
import sys
from pathlib import Path
from typing import Iterator, Optional

import pytest


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside (as it was after)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


with _collector_paused():  # Note [Collected objects frozen]: torch's import walked by none
    from harness import (
        checkrun,
        guards,
        hypothesis_profiles,
        known_failures,
        layout,
        options,
        stopping,
    )
    from harness import session as harness_session
    from harness.device import Device, xdist_worker_index
    from harness.memory.collect import keep_frozen as young_gc_keeps_frozen
    from harness.recorder import Recorder, seed_for, suite_area
    from harness.session import RunState, Settings
if gc.isenabled():
    gc.freeze()  # what the imports made


def _nanobind_loaded() -> bool:
    """Whether an extension module built with nanobind is loaded: one whose functions or
    types are nanobind's (``nanobind.nb_func``, ``nanobind.nb_type_0``...)."""
    for module in list(sys.modules.values()):
        if not str(getattr(module, "__file__", None) or "").endswith((".so", ".pyd")):
            continue
        values = getattr(module, "__dict__", {}).values()
        if any(type(value).__module__ == "nanobind" for value in list(values)):
            return True
    return False


@atexit.register
def _exit_collections() -> None:
    """Note [Collected objects frozen]: the exit's collections walk none of what is alive,
    unless a nanobind extension is loaded: then they collect all of it, as without us."""
    if _nanobind_loaded():
        gc.unfreeze()
    else:
        gc.freeze()

PROPERTY = "harness"
SUITE_PROPERTY = "harness-suite"
MARKERS = {
    "npu": "a device-under-test conformance check (applied to everything under suites/)",
    "slow": "a long check (large sweeps); skipped unless --run-slow or -m slow",
    "distributed": "runs several ranks with the device's collective backend",
    "memory": "measures peak memory, OOM thresholds or leaks",
    "benchmark": "measures throughput or latency (noise-aware comparison); skipped unless "
                 "--run-benchmarks or -m benchmark",
}

STATE = pytest.StashKey[RunState]()
RECORDER = pytest.StashKey[Recorder]()
SEED = pytest.StashKey[int]()
SIGTERM_HANDLER = pytest.StashKey[bool]()
GC_PAUSED = pytest.StashKey[bool]()
YOUNG_GC_KEPT_FROZEN = pytest.StashKey[bool]()  # young_gc's setting before the session

hypothesis_profiles.register()  # at import: hypothesis' plugin loads its option early


# ------------------------------------------------------------------ options, session

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness", "NPU conformance harness")
    for flags, kwargs in options.OPTIONS:
        group.addoption(*flags, **(kwargs() if callable(kwargs) else kwargs))


# Note [Path options without '=']
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# pytest picks its rootdir and configuration file from the command line before it loads
# the plugins of entry points, so there it reads the value of ``--baseline-dir /tmp/B``
# as a test path: with no test path given, /tmp/B (or a folder above it) becomes the
# rootdir, the project's configuration is not read and its suites/ is not found. No hook
# runs before that choice. So when the values of this plugin's options changed it
# (:func:`_rootdir_misled`), the plugin runs pytest again in this process with every
# option of its own written ``--name=value`` (nothing else changes) and returns that
# run's exit status: the run the command meant. ``python -m harness run`` loads the
# plugin before pytest reads the command line, so its first choice is already right.

_VALUE_FLAGS = tuple(flag for flags, kwargs in options.OPTIONS for flag in flags
                     if (kwargs() if callable(kwargs) else kwargs).get("action")
                     not in ("store_true", "store_false", "count"))
_rerunning = False


def _joined(args: list[str]) -> list[str]:
    """The arguments with this plugin's ``--name value`` pairs written ``--name=value``."""
    out: list[str] = []
    index = 0
    while index < len(args):
        if args[index] in _VALUE_FLAGS and index + 1 < len(args):
            out.append(f"{args[index]}={args[index + 1]}")
            index += 2
        else:
            out.append(args[index])
            index += 1
    return out


def _setup_for(config: pytest.Config, paths: list[str]) -> Optional[tuple[Path, object]]:
    """pytest's (rootdir, configuration file) for these test paths and this command's
    ``-c``/``--rootdir``; None where this pytest has no such function (private API)."""
    try:
        from _pytest.config.findpaths import determine_setup

        ns = config.known_args_namespace
        given = dict(inifile=ns.inifilename, override_ini=ns.override_ini, args=paths,
                     rootdir_cmd_arg=ns.rootdir or None,
                     invocation_dir=config.invocation_params.dir)
        accepted = inspect.signature(determine_setup).parameters
        found = determine_setup(**{k: v for k, v in given.items() if k in accepted})
    except Exception:  # noqa: BLE001 - another pytest: keep its choice
        return None
    return Path(found[0]), found[1]


def _rootdir_misled(config: pytest.Config) -> bool:
    """Whether the values of this plugin's options, read as test paths, changed pytest's
    rootdir or configuration file (Note [Path options without '='])."""
    tokens = [*shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
              *config.invocation_params.args]
    values = [tokens[i + 1] for i, token in enumerate(tokens[:-1]) if token in _VALUE_FLAGS]
    if not values:
        return False
    paths = list(getattr(config.option, "file_or_dir", None) or [])
    meant = _setup_for(config, paths)
    return (meant is not None and meant != (Path(config.rootpath), config.inipath)
            and _setup_for(config, paths + values) != meant)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> Optional[int]:
    """Rerun a command whose option values misled pytest's rootdir (Note [Path options
    without '=']); refuse an unknown ``--hypothesis-profile`` before hypothesis' own plugin
    crashes on it."""
    global _rerunning
    if not _rerunning and _rootdir_misled(config):
        args = list(config.invocation_params.args)
        joined = _joined(args)
        if joined == args:  # the values came from PYTEST_ADDOPTS
            raise pytest.UsageError(
                f"pytest chose the rootdir {config.rootpath} from the value of an option of "
                "the harness (it picks the rootdir before it knows which arguments are "
                "option values); write those options as --name=value in PYTEST_ADDOPTS, "
                "or name the test paths")
        _rerunning = True
        try:
            return int(pytest.main(joined, plugins=list(config.invocation_params.plugins or ())))
        finally:
            _rerunning = False
    _check_profile(config.getoption("hypothesis_profile", None))
    return None


def _check_profile(name: Optional[str]) -> None:
    try:
        if name is not None:
            hypothesis_profiles.check_registered(name)
    except hypothesis_profiles.ProfileError as exc:
        raise pytest.UsageError(str(exc)) from None


def _xdist_workers(config: pytest.Config) -> Optional[int]:
    """How many pytest-xdist workers the run has: in a worker, what xdist told it; in the
    controller, its ``--tx`` specs (``-n N`` is N ``popen``; ``3*popen`` is 3). None
    without xdist (``-n 0``, or xdist not installed)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return int(workerinput.get("workercount") or 0) or None
    if getattr(config.option, "dist", "no") == "no":
        return None
    count = 0
    for spec in getattr(config.option, "tx", None) or ():
        times, star, _ = str(spec).partition("*")
        count += int(times) if star and times.isdigit() else 1
    return count or None


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    try:
        hypothesis_profiles.load_default(config.getoption("hypothesis_profile", None))
        settings = options.settings_of_config(
            config, layout.outputs_home(config.rootpath, config.invocation_params.dir))
        state = harness_session.start(
            settings, worker=xdist_worker_index(), controller=not hasattr(config, "workerinput"),
            workers=_xdist_workers(config))
        state.run.selection = harness_session.selection_of(
            settings, config.getoption("markexpr", "") or "",
            config.getoption("keyword", "") or "", tuple(config.args))
    except (hypothesis_profiles.ProfileError, options.OptionsError,
            harness_session.SetupError) as exc:
        raise pytest.UsageError(str(exc)) from None
    if state.controller:
        try:
            guards.check_session(state)  # Note [Outputs never overwrite inputs]
        except guards.GuardError as exc:
            harness_session.finish(state)
            raise pytest.UsageError(str(exc)) from None
        config.stash[SIGTERM_HANDLER] = stopping.install()  # Note [SIGTERM is an interrupt]
    config.stash[STATE] = state


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(SIGTERM_HANDLER, False):
        stopping.uninstall()
    if YOUNG_GC_KEPT_FROZEN in config.stash:  # an in-process run leaves it as it found it
        young_gc_keeps_frozen(config.stash[YOUNG_GC_KEPT_FROZEN])
    state = config.stash.get(STATE, None)
    if state is not None:
        harness_session.finish(state)


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = config.stash.get(STATE, None)
    return harness_session.header_lines(state) if state is not None else []


def settings_of(config: pytest.Config) -> Optional[Settings]:
    """The run's Settings at collection time (``pytest_generate_tests``), before fixtures."""
    state = config.stash.get(STATE, None)
    return state.settings if state is not None else None


# ------------------------------------------------------------------------ collection

def _in_suites(item: pytest.Item) -> bool:
    return suite_area(item.path, item.config.rootpath) is not None


def _refuse_installed_suites_elsewhere(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The installed suites run with the package as rootdir (Note [Installed suites] in
    harness/layout.py); from any other rootdir (``pytest --pyargs harness.suites``) their
    node ids, seeds and record ids would differ from a checkout's, and they would not be
    judged as checks: refuse, naming the command that runs them."""
    installed = layout.installed_suites()
    if installed is None or layout.is_installed_root(config.rootpath):
        return
    for item in items:
        try:
            Path(item.path).resolve().relative_to(installed)
        except ValueError:
            continue
        raise pytest.UsageError(
            f"{item.nodeid}: the installed suites ({installed}) run with the package as "
            f"pytest's rootdir, not {config.rootpath}; run them with `python -m harness run "
            "[pytest arguments]` (e.g. python -m harness run suites/example -k add)")


# Note [Collected objects frozen]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# After collection the process holds about 600,000 objects that live until it exits:
# torch's modules, the OpInfo database, the catalog, pytest's items. Every full collection
# of Python's cyclic garbage collector walks all of them again, and a profiler charges it to
# whatever function happened to allocate then (the harness's, mostly). So:
#
# * the plugin's imports (torch among them) run with the collector paused, and what they
#   made is frozen (moved to the permanent generation) when they are done;
# * collection runs with the collector paused too (a harness session only); when it is
#   done, one full collection frees its garbage and ``gc.freeze()`` moves the rest to the
#   permanent generation: the collector walks only what the checks create;
# * the run's end (its verdict, results file and store write, and the terminal summary's
#   report: hundreds of thousands of short-lived containers, no cycles) runs with the
#   collector paused.
#
# Nothing a check measures changes but the pauses the harness's own objects added to it (a
# memory check's ``gc.collect()`` still frees every cycle its steps made; a frozen object is
# still freed when its last reference goes). They stay frozen until the process exits
# (pytest's own collection at its exit then walks only what the run made).
# In a default run on an AMD EPYC (family 26, model 2) the full collections of import and
# collection went from 14 (2.4 s) to 8 (0.7 s).
#
# A memory check's ``harness.memory.young_gc`` block collects and freezes what is alive
# when it starts, so that its own collections walk only what its steps make; on its own it
# unfreezes every object when the block ends, the session's frozen ones too, and then each
# later full collection (each block's entry among them) walked torch's objects again
# (0.4-0.9 s each). In a harness session it leaves frozen what it froze
# (``harness.memory.collect.keep_frozen``, set at collection's end): what was alive at a
# block's entry, after a full collection, the same kind of objects as collection's, never
# the block's model or steps, which are younger and collected as before. What a check
# measures is unchanged (its readings are levels and peaks within its block; the memory
# family's records were the same, metric for metric). On the AMD EPYC Zen 3 (family 25
# model 1), quiet: the memory family's tests 5.1 -> 2.7 s, the op catalog's after it
# 21.2-21.5 -> 18.6-19.0 s, the default run to its verdict 51.2-51.8 -> 49.4-50.0 s.
# (Freezing what is alive at a block's *end* would keep the cycles of its model from ever
# being collected; and a young_gc that froze nothing in a session made the family's own 85
# collections walk what the checks before it imported lazily, Dynamo's and Inductor's
# objects: 3.6 -> 9.2 s. Neither is done.)
#
# At the process's exit an ``atexit`` handler freezes whatever is still alive: the
# interpreter's finalization runs full collections of its own, which would walk the
# ~920,000 objects a default run leaves (torch's among them again, after young_gc). On an
# AMD EPYC Zen 3 (family 25, model 1) the default run's last 6.9 s, from its last
# ``atexit`` handler to the process's end, became 1.4 s. What is alive then is freed, or
# not, as Python's exit always does it (it promises no ``__del__`` at exit): the harness's
# files and stores are written and closed before the verdict, and no check runs after.
# Except where an extension built with nanobind is loaded (Triton's ``libtriton`` from
# torch 2.15 on, which a graph check imports): nanobind counts, at the exit, its objects
# that nothing freed, and prints each as a leak ("nanobind: leaked 4 instances! ... likely
# caused by a reference counting issue"), so a frozen exit made every torch 2.15.0 default
# run end in 30 lines of false alarms. There the handler unfreezes instead, and the exit
# collects everything as it would without the harness (the frozen objects of import and
# collection too), at the walk's cost.


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    if session.config.stash.get(STATE, None) is not None and gc.isenabled():
        gc.disable()  # Note [Collected objects frozen]
        session.config.stash[GC_PAUSED] = True


@pytest.hookimpl(tryfirst=True)  # before any hook starts a thread (the launches ahead)
def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.stash.get(STATE, None) is not None:
        gc.collect()  # Note [Collected objects frozen]: collection's garbage freed,
        gc.freeze()   # the rest moved to the permanent generation
        session.config.stash[YOUNG_GC_KEPT_FROZEN] = young_gc_keeps_frozen(True)
        if session.config.stash.get(GC_PAUSED, False):
            session.config.stash[GC_PAUSED] = False
            gc.enable()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _refuse_installed_suites_elsewhere(config, items)
    state = config.stash.get(STATE, None)
    opt_in = {"slow": (state.settings.run_slow if state else False, "--run-slow (or -m slow)"),
              "benchmark": (state.settings.run_benchmarks if state else False,
                            "--run-benchmarks (or -m benchmark)")}
    problem = guards.check_model_selected(
        state.settings.models if state else (), (item.path for item in items),
        config.rootpath)
    if problem is not None and state is not None and state.controller:
        raise pytest.UsageError(problem)
    for item in items:
        if _in_suites(item):
            item.add_marker(pytest.mark.npu)
        for marker, (enabled, how) in opt_in.items():
            if not enabled and item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=f"{marker} check: run with {how}"))
    known_failures.apply(items, state.run.fingerprint if state else None)


# -------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def harness_state(pytestconfig: pytest.Config) -> RunState:
    return pytestconfig.stash[STATE]


@pytest.fixture(scope="session")
def device(harness_state: RunState) -> Device:
    """The device under test (session-wide)."""
    return harness_state.device


@pytest.fixture(scope="session")
def settings(harness_state: RunState) -> Settings:
    """The run's options as plain values."""
    return harness_state.settings


@pytest.fixture
def results(request: pytest.FixtureRequest, harness_state: RunState) -> Recorder:
    """Record measurements: ``results.check(id, ok, message, metrics=..., rules=...)``
    (:mod:`harness.recorder`)."""
    node = request.node
    recorder = Recorder(node.nodeid, harness_state.device, harness_state.settings,
                        seed=node.stash.get(SEED, harness_state.settings.seed))
    node.stash[RECORDER] = recorder
    return recorder


@pytest.fixture(autouse=True)
def _harness_seed(request: pytest.FixtureRequest, pytestconfig: pytest.Config) -> int:
    state = pytestconfig.stash.get(STATE, None)
    seed = seed_for(state.settings.seed if state else 0, request.node.nodeid)
    request.node.stash[SEED] = seed
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    if state is not None:
        state.device.seed(seed)
    return seed


# ---------------------------------------------------------------------------- hooks

def _fail(report: pytest.TestReport, text: str) -> None:
    if report.passed:
        report.outcome = "failed"
        report.longrepr = text
    else:
        report.sections.append(("harness", text))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    state = item.config.stash.get(STATE, None)
    if state is None or not _in_suites(item):
        return report
    report.user_properties.append((SUITE_PROPERTY, "1"))
    if not (report.when == "call" or (report.when == "setup" and not report.passed)):
        return report
    recorder = item.stash.get(RECORDER, None)
    end = checkrun.conclude_check(
        item.nodeid, recorder.records if recorder else [],
        call.excinfo.value if call.excinfo is not None else None, outcome=report.outcome,
        when=report.when, wasxfail=getattr(report, "wasxfail", None), state=state)
    if end.skip is not None:
        path, lineno, _ = item.location
        report.outcome, report.longrepr = "skipped", (path, (lineno or 0) + 1, end.skip)
    for text in end.failures:
        _fail(report, text)
    report.user_properties.append((PROPERTY, end.payload(local=state.controller)))
    return report


class _Collector:
    """Gathers records and outcomes from reports (Note [Records travel with reports] in
    harness/checkrun.py)."""

    def __init__(self, state: RunState) -> None:
        self.state = state

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not any(key == SUITE_PROPERTY for key, _ in report.user_properties):
            return  # not a conformance check (the harness's own tests)
        durations = self.state.durations  # for the next shard plan (pytest-split)
        durations[report.nodeid] = durations.get(report.nodeid, 0.0) + report.duration
        checkrun.collect(self.state, report.nodeid, report.when, report.outcome,
                         [value for key, value in report.user_properties if key == PROPERTY])


def pytest_sessionstart(session: pytest.Session) -> None:
    state = session.config.stash.get(STATE, None)
    if state is not None and state.controller:
        session.config.pluginmanager.register(_Collector(state), "harness-collector")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(STATE, None)
    if state is None or not state.controller:
        return
    complete = exitstatus not in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR)
    with _collector_paused():  # Note [Collected objects frozen]
        verdict = harness_session.conclude(state, complete)
    if verdict.exit_failed(state.settings.fail_on) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None or not state.controller or state.verdict is None:
        return
    if not state.run.records and not state.run.outcomes and not state.errors:
        return  # no conformance check ran (the harness's own tests, --collect-only)
    terminalreporter.section("harness")
    if stopping.received():  # Note [SIGTERM is an interrupt]
        terminalreporter.write_line(stopping.MESSAGE, yellow=True, bold=True)
    with _collector_paused():  # Note [Collected objects frozen]
        lines = harness_session.summary_lines(state)
    for text, markup in lines:
        terminalreporter.write_line(text, **markup)


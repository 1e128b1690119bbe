"""The pytest plugin: options, markers, fixtures and hooks. Glue only.

Logic lives in plain modules that take values (:mod:`harness.device`,
:mod:`harness.baselines`, :mod:`harness.regress`, ...); this file reads the pytest
``Config`` once, turns it into a :class:`Settings` and a run state kept in
``config.stash``, and wires records into reports.

Note [Records travel with reports]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A test's records are compared with the baseline where the test ran (so a regression
fails *that* test), then attached to its report as a ``user_properties`` entry. The
process that writes results (the only one without ``workerinput``: the xdist
controller, or the single process) collects them in ``pytest_runtest_logreport``;
xdist serialises ``user_properties``, so records reach the controller unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import zlib
from pathlib import Path
from typing import Any, Callable, Optional, Union

import pytest

from harness import baselines, faults, kinds, known_failures, regress
from harness import session as harness_session
from harness.argtypes import non_negative_int, positive_float, positive_int
from harness.device import (
    Device,
    DeviceUnavailable,
    Unsupported,
    missing_kernel,
    select,
    xdist_worker_index,
)
from harness.results import Record, RunResults
from harness.session import BASELINE_MODES, FAIL_ON, RunState, Settings
from harness.stack import fingerprint as make_fingerprint
from harness.stack import split_stack_id

SUITES_DIR = "suites"
PROPERTY = "harness"
SUITE_PROPERTY = "harness-suite"
HYPOTHESIS_PROFILES = {
    # ci: fast and derandomised, so CI is reproducible; nightly: many more examples.
    "ci": {"max_examples": 40, "derandomize": True, "deadline": None,
           "print_blob": True},
    "nightly": {"max_examples": 1000, "deadline": None, "print_blob": True},
}
HYPOTHESIS_ENV = "HARNESS_HYPOTHESIS_PROFILE"
MARKERS = {
    "npu": "a device-under-test conformance check (applied to everything under suites/)",
    "slow": "a long check (large sweeps); skipped unless --run-slow or -m slow",
    "distributed": "runs several ranks with the device's collective backend",
    "memory": "measures peak memory, OOM thresholds or leaks",
    "benchmark": "measures throughput or latency (noise-aware comparison); skipped unless "
                 "--run-benchmarks or -m benchmark",
}


# --------------------------------------------------------------------------- options

def _stack_id(text: str) -> str:
    try:
        split_stack_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {exc}") from None
    return text


def _model_factory(text: str) -> str:
    from harness.model.spec import SpecError, check_factory

    try:
        return check_factory(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _model_input(text: str) -> str:
    from harness.model.spec import SpecError, parse_tensor_specs

    try:
        parse_tensor_specs(text, source="--model-input")
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


# Every option in one table: (flags, argparse keyword arguments, or a function returning
# them when they are read from another table: --device's from harness.kinds' rows).
OptionKwargs = Union[dict[str, Any], Callable[[], dict[str, Any]]]
OPTIONS: list[tuple[tuple[str, ...], OptionKwargs]] = [
    (("--device",), kinds.device_option),
    (("--baseline",), dict(default="compare", choices=BASELINE_MODES, metavar="MODE",
                           help="What to do with the baseline: compare (fail on regressions "
                                "against it; say NOT COMPARED when there is none), require "
                                "(compare, and a usage error when there is none: nightly CI), "
                                "record (store this run as its stack's baseline) or off. "
                                "Default: %(default)r")),
    (("--fail-on",), dict(default="no-go", choices=FAIL_ON, metavar="VERDICT",
                          help="Exit non-zero on this verdict or worse: no-go, or review "
                               "(metrics moved beyond their baseline rule while every check "
                               "passes also fails the checks that moved). Default: %(default)r")),
    (("--keep-results",), dict(default=20, type=non_negative_int, metavar="N",
                               help="Keep the newest N run files in the results folder (0: "
                                    "all). Default: %(default)r")),
    (("--baseline-dir",), dict(default=None, metavar="PATH",
                               help="Baseline store (<PATH>/<device_type>/<device_slug>/"
                                    "<stack_id>.json). Default: baselines/ in the rootdir")),
    (("--baseline-against",), dict(default=None, metavar="STACK_ID", type=_stack_id,
                                   help="Compare against this stored stack (e.g. "
                                        "cann-8.0.RC3) instead of the same or newest older "
                                        "one. Default: %(default)r")),
    (("--results-dir",), dict(default=None, metavar="PATH",
                              help="Where each run writes <UTC time>-<device>.json. "
                                   "Default: results/ in the rootdir")),
    (("--alerts",), dict(default=None, metavar="PATH",
                         help="Write regressions and improvements to PATH (JSON) and "
                              "PATH's .md sibling (Markdown). Default: %(default)r")),
    (("--report",), dict(default=None, metavar="PATH",
                         help="Write the go/no-go report to PATH (self-contained HTML) and "
                              "PATH's .md sibling (Markdown). Default: %(default)r")),
    (("--inject-fault",), dict(action="append", default=[], metavar="NAME",
                               help="Activate a fault for the whole run (repeatable); NAME "
                                    "or package.module:NAME. Default: none")),
    (("--seed",), dict(default=0, type=non_negative_int, metavar="N",
                       help="Global seed; each test is seeded with N + crc32(nodeid). "
                            "Default: %(default)r")),
    (("--run-slow",), dict(action="store_true", default=False,
                           help="Run checks marked slow (large sweeps). Default: %(default)r")),
    (("--run-benchmarks",), dict(action="store_true", default=False,
                                 help="Run checks marked benchmark (timings, compared "
                                      "noise-aware). Default: %(default)r")),
    (("--op-filter",), dict(default=None, metavar="REGEX", type=_regex,
                            help="Only op cases whose id matches REGEX (re.search). "
                                 "Default: %(default)r")),
    (("--op-budget",), dict(default=600.0, metavar="SECONDS", type=positive_float,
                            help="Time budget of the OpInfo sweep; cases past it are "
                                 "skipped. Default: %(default)r")),
    (("--training-scale",), dict(default="small", choices=("small", "full"), metavar="SCALE",
                                 help="Training scale: small (CPU-sized models and step "
                                      "counts) or full (ResNet-18 proper, longer runs). "
                                      "Default: %(default)r")),
    (("--dist-timeout",), dict(default=120.0, metavar="SECONDS", type=positive_float,
                               help="Kill a distributed check's ranks after this long and "
                                    "fail naming the hung ranks. Default: %(default)r")),
    (("--bench-runs",), dict(default=1, metavar="K", type=positive_int,
                             help="Repeat the selected benchmarks in K fresh processes (this "
                                  "one and K-1 children) and judge all K runs (record: store "
                                  "all K). Default: %(default)r")),
    (("--model",), dict(action="append", default=[], metavar="PKG.MOD:FACTORY",
                        type=_model_factory,
                        help="Capture this model's training step and check every aten call "
                             "it makes (repeatable; suites/model). Default: none")),
    (("--model-input",), dict(default=None, metavar="SHAPE[:DTYPE]", type=_model_input,
                              help="Input shape(s) for --model, e.g. 8x3x32x32 or "
                                   "8x3x32x32:float16. Default: the factory's example "
                                   "inputs")),
]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness", "NPU conformance harness")
    for flags, kwargs in OPTIONS:
        group.addoption(*flags, **(kwargs() if callable(kwargs) else kwargs))


def _names_marker(markexpr: str, marker: str) -> bool:
    """Whether ``-m`` asks for an opt-in marker (``-m slow``, not ``-m "not slow"``)."""
    return bool(re.search(rf"\b{marker}\b", markexpr)) and f"not {marker}" not in markexpr


def _settings(config: pytest.Config) -> Settings:
    opt = config.getoption
    root, here = config.rootpath, config.invocation_params.dir

    def place(value: Optional[str], default: str) -> Path:
        return root / default if value is None else (here / value).resolve()

    if opt("baseline") == "record" and opt("baseline_against"):
        raise pytest.UsageError("--baseline record writes this stack's own baseline and "
                                "cannot be combined with --baseline-against; drop one")
    markexpr = config.getoption("markexpr", "") or ""
    alerts = (here / opt("alerts")).resolve() if opt("alerts") else None
    if alerts is not None:
        alerts = harness_session.alerts_paths(alerts)[0]
    return Settings(
        device_request=opt("device"), baseline_mode=opt("baseline"),
        baseline_dir=place(opt("baseline_dir"), "baselines"),
        baseline_against=opt("baseline_against"),
        results_dir=place(opt("results_dir"), "results"),
        alerts=alerts,
        report=(here / opt("report")).resolve() if opt("report") else None,
        faults=tuple(opt("inject_fault")), seed=opt("seed"),
        run_slow=bool(opt("run_slow")) or _names_marker(markexpr, "slow"),
        run_benchmarks=bool(opt("run_benchmarks")) or _names_marker(markexpr, "benchmark"),
        op_filter=opt("op_filter"), op_budget=opt("op_budget"),
        training_scale=opt("training_scale"), dist_timeout=opt("dist_timeout"),
        fail_on=opt("fail_on"), keep_results=opt("keep_results"),
        bench_runs=opt("bench_runs"),
        models=tuple(opt("model")), model_input=opt("model_input"),
    )


# ------------------------------------------------------------------------ run state

STATE = pytest.StashKey[RunState]()
RECORDER = pytest.StashKey["Recorder"]()
SEED = pytest.StashKey[int]()
PREVIOUS_FAULTS = pytest.StashKey[list]()


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    _load_hypothesis_profile(config)
    settings = _settings(config)
    previous = [fault.name for fault in faults.active()]
    try:
        faults.set_active(settings.faults)
    except faults.FaultError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[PREVIOUS_FAULTS] = previous
    worker = xdist_worker_index()
    try:
        device, probes = select(settings.device_request, index=worker or 0)
    except DeviceUnavailable as exc:
        raise pytest.UsageError(str(exc)) from None
    why = [f"{p.type} not used: {p.reason}" for p in probes if not p.available]
    run = RunResults(fingerprint=make_fingerprint(device), started=harness_session.utc_now(), seed=settings.seed,
                     faults=list(settings.faults))
    selection = None
    if settings.compares:
        selection = baselines.select(settings.baseline_dir, run.fingerprint,
                                     settings.baseline_against)
        run.baseline = str(selection.path) if selection.path else None
    state = RunState(settings, device, why, run, selection,
                     controller=not hasattr(config, "workerinput"))
    if selection is not None and selection.error:
        state.errors.append(f"baseline error: {selection.error}")
    elif settings.baseline_mode == "require" and selection is not None and selection.path is None:
        raise pytest.UsageError(f"--baseline require: NOT COMPARED: "
                                f"{harness_session.not_compared_reason(state)}. Record one on this "
                                "machine with --baseline record, or point --baseline-dir at "
                                "the store that has it")
    config.stash[STATE] = state


def pytest_unconfigure(config: pytest.Config) -> None:
    previous = config.stash.get(PREVIOUS_FAULTS, None)
    if previous is not None:  # in-process runs (pytester) must not leak faults
        faults.set_active(previous)


def _register_hypothesis_profiles() -> None:
    # At import: hypothesis' own plugin loads --hypothesis-profile in its pytest_configure.
    from hypothesis import settings as hsettings

    for name, values in HYPOTHESIS_PROFILES.items():
        hsettings.register_profile(name, **values)


_register_hypothesis_profiles()


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Refuse an unknown ``--hypothesis-profile`` before hypothesis' own plugin crashes on it."""
    name = config.getoption("hypothesis_profile", None)
    if name is None:
        return None
    from hypothesis import settings as hsettings

    try:
        hsettings.get_profile(name)
    except Exception:  # noqa: BLE001 - hypothesis raises InvalidArgument for an unknown name
        raise pytest.UsageError(f"--hypothesis-profile {name!r} is not a registered profile; "
                                f"this harness registers {sorted(HYPOTHESIS_PROFILES)} (or "
                                f"register your own in a conftest.py)") from None
    return None


def _load_hypothesis_profile(config: pytest.Config) -> None:
    from hypothesis import settings as hsettings

    if config.getoption("hypothesis_profile", None) is None:  # hypothesis' own option wins
        name = os.environ.get(HYPOTHESIS_ENV, "ci")
        if name not in HYPOTHESIS_PROFILES:
            raise pytest.UsageError(f"{HYPOTHESIS_ENV}={name!r} (from the environment) is not "
                                    f"a profile; choose from {sorted(HYPOTHESIS_PROFILES)}")
        hsettings.load_profile(name)


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = config.stash.get(STATE, None)
    if state is None:
        return []
    fp = state.run.fingerprint
    how = "requested" if state.settings.device_request != "auto" else "auto"
    lines = [f"harness: device {state.device.type}:{state.device.index} "
             f"({fp['device_name']}) [{how}]"]
    lines += [f"harness:   {reason}" for reason in state.why]
    versions = ", ".join(f"{k} {fp[k]}" for k in ("torch", "torch_npu", "cann", "cuda_runtime",
                                                   "driver", "python") if fp.get(k))
    lines.append(f"harness: stack {fp['stack_id']} ({versions}); "
                 f"{fp['device_type']}/{fp['device_slug']}")
    lines.append(f"harness: {harness_session.baseline_line(state)}")
    lines.append(f"harness: seed {state.settings.seed} (+ crc32(nodeid) per test)")
    for feature, reason in state.device.missing_features().items():
        lines.append(f"harness: unsupported here: {feature}: {reason}")
    if state.settings.faults:
        lines.append(f"harness: INJECTED FAULTS: {', '.join(state.settings.faults)}")
    return lines


# ------------------------------------------------------------------------ collection

def _suite_area(item: pytest.Item) -> Optional[str]:
    """``suites/<area>/...`` -> area; None for tests outside ``suites/``."""
    try:
        rel = Path(item.path).resolve().relative_to(item.config.rootpath.resolve())
    except ValueError:
        return None
    parts = rel.parts
    return parts[1] if len(parts) > 2 and parts[0] == SUITES_DIR else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash.get(STATE, None)
    opt_in = {"slow": (state.settings.run_slow if state else False, "--run-slow (or -m slow)"),
              "benchmark": (state.settings.run_benchmarks if state else False,
                            "--run-benchmarks (or -m benchmark)")}
    for item in items:
        if _suite_area(item) is not None:
            item.add_marker(pytest.mark.npu)
        for marker, (enabled, how) in opt_in.items():
            if not enabled and item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=f"{marker} check: run with {how}"))
    known_failures.apply(items, state.run.fingerprint if state else None)


# -------------------------------------------------------------------------- fixtures

class Recorder:
    """What the ``results`` fixture hands a check: record what you measured."""

    def __init__(self, item: pytest.Item, state: RunState) -> None:
        self.nodeid = item.nodeid
        self.device = state.device
        self.settings = state.settings
        self.records: list[Record] = []
        self.seed = item.stash.get(SEED, state.settings.seed)

    @property
    def reproduce(self) -> str:
        """A one-line command that runs this check alone, same device and seed."""
        return (f"python -m pytest '{self.nodeid}' --device {self.device.type} "
                f"--seed {self.settings.seed}")

    def record(self, record_id: str, *, status: str = "pass",
               metrics: Optional[dict] = None, rules: Optional[dict] = None,
               message: str = "", info: Optional[dict] = None) -> Record:
        """Record one measurement. A ``fail``/``error`` status fails the test with ``message``."""
        rec = Record(id=record_id, status=status, metrics=dict(metrics or {}),
                     rules=dict(rules or {}), test=self.nodeid, message=message,
                     info=dict(info or {}))
        if any(r.id == record_id for r in self.records):
            raise ValueError(f"record id {record_id!r} recorded twice by {self.nodeid}")
        self.records.append(rec)
        return rec

    def check(self, record_id: str, ok: bool, message: str = "", *,
              metrics: Optional[dict] = None, rules: Optional[dict] = None,
              info: Optional[dict] = None) -> Record:
        """Record a check's outcome: status ``pass`` when ``ok``, else ``fail`` with
        ``message`` and the reproduce line (which failing the test prints)."""
        if not ok:
            message = f"{message}\nreproduce: {self.reproduce}" if message else \
                f"reproduce: {self.reproduce}"
        return self.record(record_id, status="pass" if ok else "fail", metrics=metrics,
                           rules=rules, message=message, info=info)


def settings_of(config: pytest.Config) -> Optional[Settings]:
    """The run's Settings at collection time (``pytest_generate_tests``), before fixtures."""
    state = config.stash.get(STATE, None)
    return state.settings if state is not None else None


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
    """Record measurements: ``results.record(id, status=..., metrics=..., rules=...)``."""
    recorder = Recorder(request.node, harness_state)
    request.node.stash[RECORDER] = recorder
    return recorder


def seed_for(global_seed: int, nodeid: str) -> int:
    """The seed of one test: the global seed plus crc32 of its node id (never hash())."""
    return (global_seed + zlib.crc32(nodeid.encode("utf-8"))) & 0xFFFFFFFF


@pytest.fixture(autouse=True)
def _harness_seed(request: pytest.FixtureRequest, pytestconfig: pytest.Config) -> int:
    state = pytestconfig.stash.get(STATE, None)
    base = state.settings.seed if state else 0
    seed = seed_for(base, request.node.nodeid)
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

def auto_record_id(nodeid: str) -> str:
    """``suites/norm/test_bn.py::TestX::test_y[fp16]`` -> ``norm/test_bn/TestX/test_y[fp16]``."""
    path, _, rest = nodeid.partition("::")
    parts = Path(path).with_suffix("").parts
    if parts and parts[0] == SUITES_DIR:
        parts = parts[1:]
    return "/".join([*parts, *rest.split("::")])


def _status_of(report: pytest.TestReport) -> str:
    if report.passed:
        return "pass"
    if report.skipped:
        return "fail" if hasattr(report, "wasxfail") else "skip"
    return "fail" if report.when == "call" else "error"


def _unsupported(item: pytest.Item, report: pytest.TestReport, reason: str,
                 failed: bool) -> Record:
    """A check that raised :class:`Unsupported`: skipped (unless it recorded a failure
    first), recorded ``unsupported`` (Note [Missing features of older stacks])."""
    if not failed:
        path, lineno, _ = item.location
        report.outcome = "skipped"
        report.longrepr = (path, (lineno or 0) + 1, f"unsupported: {reason}")
    return Record(id=auto_record_id(item.nodeid), status="unsupported", test=item.nodeid,
                  message=reason, info={"reason": reason})


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
    if state is None or _suite_area(item) is None:
        return report
    report.user_properties.append((SUITE_PROPERTY, "1"))
    if not (report.when == "call" or (report.when == "setup" and not report.passed)):
        return report
    recorder = item.stash.get(RECORDER, None)
    records = list(recorder.records) if recorder else []
    if call.excinfo is not None and missing_kernel(call.excinfo.value):
        exc = call.excinfo.value
        reason = str(exc) if isinstance(exc, Unsupported) else \
            f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        records.append(_unsupported(item, report, reason,
                                    failed=any(r.status in ("fail", "error") for r in records)))
    if not records:
        records = [Record(id=auto_record_id(item.nodeid), status=_status_of(report),
                          test=item.nodeid)]
    if getattr(report, "wasxfail", None):  # a known failure (harness.known_failures)
        for rec in records:
            rec.info.setdefault("known_failure", report.wasxfail)
    failing = [r for r in records if r.status in ("fail", "error")]
    if failing and report.passed:
        _fail(report, "\n".join(f"{r.id}: {r.message or r.status}" for r in failing))
    findings: list[regress.Finding] = []
    selection = state.selection
    if selection is not None and selection.results is not None:
        for rec in records:
            base = selection.results.records.get(rec.id)
            if base is not None:
                findings.extend(regress.compare_record(rec, base, selection.stack_id or ""))
    failing_kinds = ("regression", "review") if state.settings.fail_on == "review" else \
        ("regression",)  # Note [Review or regression]
    regressions = [f for f in findings if f.kind in failing_kinds]
    if regressions:
        reproduce = recorder.reproduce if recorder else f"python -m pytest '{item.nodeid}'"
        _fail(report, regress.failure_message(regressions, reproduce))
    payload = {"records": {r.id: r.to_json() for r in records},
               "findings": [f.to_json() for f in findings]}
    report.user_properties.append((PROPERTY, json.dumps(payload)))
    return report


class _Collector:
    """Gathers records and outcomes from reports (Note [Records travel with reports])."""

    def __init__(self, state: RunState) -> None:
        self.state = state

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not any(key == SUITE_PROPERTY for key, _ in report.user_properties):
            return  # not a conformance check (the harness's own tests)
        if report.when == "call" or not report.passed:
            if report.when == "call" or report.nodeid not in self.state.run.outcomes:
                self.state.run.outcomes[report.nodeid] = report.outcome
        for key, value in report.user_properties:
            if key != PROPERTY:
                continue
            payload = json.loads(value)
            for record_id, data in payload["records"].items():
                self.state.run.add(Record.from_json(record_id, data))
            self.state.findings.extend(regress.Finding(**{k: v for k, v in f.items()
                                                          if k != "message"})
                                       for f in payload["findings"])


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
    for text, markup in harness_session.summary_lines(state):
        terminalreporter.write_line(text, **markup)

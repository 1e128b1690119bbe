"""One conformance session as plain values: its settings, its state and its end.

:mod:`harness.plugin` turns pytest's options into a :class:`Settings`
(:func:`harness.options.settings_from`), starts the session with :func:`start` (faults,
device, baseline choice: a :class:`RunState`), prints :func:`header_lines`, and at the
end of the session calls :func:`conclude`, which judges the run (:mod:`harness.verdict`),
writes the results, the baseline and the alerts, and returns what the terminal summary
prints (:func:`summary_lines`). What happens to each test in between is
:mod:`harness.checkrun`. Nothing here imports pytest, so all of it is testable with plain
values.

Note [Only a completed session records]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A baseline is what later runs are judged against, so a partial run must never become
one: an interrupted (Ctrl-C) or crashed session writes its results (marked
``complete: false``) and the alerts, but does not touch the baseline, and says so.
Concurrent record runs of one stack merge under a file lock
(:func:`harness.baselines.record`).

Note [Only honest runs record]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A run with an injected fault (``--inject-fault`` or ``HARNESS_FAULTS``) measures the
fault. ``--baseline record`` with one is a usage error before anything runs, so the
stored baseline stays as it was; the run's results name their faults (``faults``), and
comparisons and ``history`` leave such runs out and say so (Note [Honest comparisons] in
:mod:`harness.verdict`). ``python -m harness faults check`` records its clean baseline
without the fault and compares the faulted run against it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
from pathlib import Path
from typing import Optional

from harness import baselines, regress, verdict
from harness import results as results_mod
from harness.results import RunResults

BASELINE_MODES = ("compare", "require", "record", "off")
FAIL_ON = ("no-go", "review")
SHOWN = 10
"""Findings listed per kind in the terminal; the rest are in the alerts file."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """The run's options as plain values (what fixtures hand to the suites)."""

    device_request: str = "auto"
    baseline_mode: str = "compare"
    baseline_dir: Path = Path("baselines")
    baseline_against: Optional[str] = None
    results_dir: Path = Path("results")
    alerts: Optional[Path] = None
    report: Optional[Path] = None
    faults: tuple[str, ...] = ()
    seed: int = 0
    run_slow: bool = False
    run_benchmarks: bool = False
    op_filter: Optional[str] = None
    op_budget: float = 600.0
    training_scale: str = "small"
    dist_timeout: float = 120.0
    fail_on: str = "no-go"
    keep_results: int = 20
    bench_runs: int = 1
    models: tuple[str, ...] = ()
    model_input: Optional[str] = None
    model_compile: bool = False
    graph_backend: Optional[str] = None
    store: str = ""
    """The store URL (harness.store.url_for): every run is kept there too."""
    run_id: str = ""
    shard: str = "1/1"

    @property
    def compares(self) -> bool:
        return self.baseline_mode in ("compare", "require")


@dataclasses.dataclass
class RunState:
    """What one session knows: its device, run, baseline choice and what it found."""

    settings: Settings
    device: object
    why: list[str]
    run: RunResults
    selection: Optional[baselines.Selection]
    controller: bool
    findings: list[regress.Finding] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    written: list[str] = dataclasses.field(default_factory=list)
    verdict: Optional[verdict.RunVerdict] = None
    report: object = None  # the harness.report model, when --report wrote one
    previous_faults: list[str] = dataclasses.field(default_factory=list)
    """The faults active before this session (:func:`finish` restores them)."""
    workers: Optional[int] = None
    """The run's pytest-xdist workers (None without xdist)."""
    durations: dict[str, float] = dataclasses.field(default_factory=dict)
    """Seconds per test node (all phases): stored for the next shard plan."""
    store_problem: str = ""
    """Why the run could not be stored (Note [Nothing deletes history]), or empty."""
    _ids_by_test: Optional[dict[str, list[str]]] = dataclasses.field(default=None, repr=False)

    @property
    def base(self) -> Optional[RunResults]:
        """The selected baseline's results (None: no baseline to compare with)."""
        return self.selection.results if self.selection is not None else None

    def baseline_ids(self, nodeid: str) -> list[str]:
        """The record ids the selected baseline holds for test ``nodeid`` (sorted), from an
        index built once (every check's end asks, :func:`harness.checkrun.conclude_check`)."""
        if self._ids_by_test is None:
            records = self.base.records if self.base is not None else {}
            self._ids_by_test = {}
            for rid, rec in sorted(records.items()):
                self._ids_by_test.setdefault(rec.test, []).append(rid)
        return list(self._ids_by_test.get(nodeid, ()))

    @property
    def base_name(self) -> str:
        """The selected baseline's stack id ("" without one)."""
        return (self.selection.stack_id or "") if self.selection is not None else ""


class SetupError(Exception):
    """A setting this machine or store cannot honour (the plugin: a usage error)."""


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def alerts_paths(path: Path) -> tuple[Path, Path]:
    """``--alerts PATH`` -> (JSON, Markdown): ``x.json`` -> x.json + x.md; ``x.md`` -> x.json +
    x.md (the JSON never lands in a ``.md`` file)."""
    if path.suffix == ".md":
        return path.with_suffix(".json"), path
    return path, path.with_suffix(".md")


# ------------------------------------------------------------------------ the start

def start(settings: Settings, *, worker: Optional[int], controller: bool,
          workers: Optional[int] = None) -> RunState:
    """Activate the faults, pick the device and the baseline: the session's state.

    Args:
        settings: the run's options.
        worker: the xdist worker index (None outside xdist): which device index to use.
        controller: whether this process writes the results (not an xdist worker).
        workers: how many xdist workers the run has (None without xdist): more than
            the accelerator's devices is an error (Note [One device per xdist worker]
            in :mod:`harness.device`).

    Raises:
        SetupError: an unknown fault, an unusable device, more xdist workers than
            devices, or ``--baseline require`` without a baseline; the faults active before are active again.
    """
    from harness import faults

    try:
        previous = [fault.name for fault in faults.active()]
    except faults.FaultError as exc:
        raise SetupError(faults.env_error(exc)) from None
    from_env = [n for n in os.environ.get(faults.ENV_VAR, "").split(",") if n]
    if settings.baseline_mode == "record" and (settings.faults or previous or from_env):
        # Note [Only honest runs record]
        active = ", ".join(dict.fromkeys([*settings.faults, *previous, *from_env]))
        source = "--inject-fault" if settings.faults else f"{faults.ENV_VAR} in the environment"
        raise SetupError(f"--baseline record with an injected fault ({active}, from {source}): "
                         "a baseline must measure the stack, not a fault; the stored baseline "
                         f"is unchanged. Drop {source} to record, or compare with --baseline "
                         "compare")
    try:
        faults.set_active(settings.faults)
    except faults.FaultError as exc:
        raise SetupError(str(exc)) from None
    try:
        return _started(settings, worker, controller, previous, workers)
    except BaseException:
        faults.set_active(previous)
        raise


def _started(settings: Settings, worker: Optional[int], controller: bool,
             previous_faults: list[str], workers: Optional[int] = None) -> RunState:
    from harness.device import DeviceUnavailable, select, worker_problem
    from harness.stack import fingerprint

    try:
        device, probes = select(settings.device_request, index=worker or 0)
    except DeviceUnavailable as exc:
        raise SetupError(str(exc)) from None
    problem = worker_problem(device, workers)
    if problem is not None:
        raise SetupError(problem)
    if worker is not None:
        device.set_current()  # Note [One device per xdist worker]: this worker's device
    why = [f"{p.type} not used: {p.reason}" for p in probes if not p.available]
    if settings.op_filter:
        from harness.ops import filter_matches

        if not filter_matches(settings.op_filter):
            raise SetupError(
                f"--op-filter {settings.op_filter!r} matches no op case, so every op check "
                "would be skipped and the run would check nothing. It is a regular "
                "expression searched in case ids such as 'exp-float16-fwd-odd257' (the "
                "catalog) and 'opinfo/add/float32' (the OpInfo sweep); a failing case's "
                "reproduce line prints its own")
    run = RunResults(fingerprint=fingerprint(device), started=utc_now(), seed=settings.seed,
                     faults=list(settings.faults))
    selection = None
    if settings.compares:
        selection = baselines.select(settings.baseline_dir, run.fingerprint,
                                     settings.baseline_against)
        run.baseline = str(selection.path) if selection.path else None
    state = RunState(settings, device, why, run, selection, controller=controller,
                     previous_faults=previous_faults, workers=workers)
    if selection is not None and selection.error:
        state.errors.append(f"baseline error: {selection.error}")
    elif settings.baseline_mode == "require" and selection is not None and selection.path is None:
        raise SetupError(f"--baseline require: NOT COMPARED: {not_compared_reason(state)}. "
                         "Record one on this machine with --baseline record, or point "
                         "--baseline-dir at the store that has it")
    return state


def finish(state: RunState) -> None:
    """Undo what :func:`start` changed in this process (in-process runs, e.g. pytester,
    must not leak faults into the next session)."""
    from harness import faults

    faults.set_active(state.previous_faults)


def header_lines(state: RunState) -> list[str]:
    """The session header: device and why others were not used, stack, baseline, seed,
    what is unsupported here and the injected faults."""
    fp = state.run.fingerprint
    how = "requested" if state.settings.device_request != "auto" else "auto"
    lines = [f"device {state.device.type}:{state.device.index} ({fp['device_name']}) [{how}]"]
    lines += [f"  {reason}" for reason in state.why]
    if state.workers:  # Note [One device per xdist worker] in harness/device.py
        kind = state.device.type
        lines.append(f"xdist: {state.workers} workers, worker gwK on {kind}:K "
                     f"(gw0..gw{state.workers - 1} -> {kind}:0..{state.workers - 1})"
                     if state.device.is_accelerator else
                     f"xdist: {state.workers} workers share the cpu")
    versions = ", ".join(f"{k} {fp[k]}" for k in ("torch", "torch_npu", "cann", "cuda_runtime",
                                                   "driver", "python") if fp.get(k))
    lines.append(f"stack {fp['stack_id']} ({versions}); {fp['device_type']}/{fp['device_slug']}")
    lines.append(baseline_line(state))
    lines.append(f"seed {state.settings.seed} (+ crc32(nodeid) per test)")
    for feature, reason in state.device.missing_features().items():
        lines.append(f"unsupported here: {feature}: {reason}")
    if state.settings.faults:
        lines.append(f"INJECTED FAULTS: {', '.join(state.settings.faults)}")
    base = state.base
    if base is not None:
        ok, why = verdict.usable_baseline(base)
        lines += [f"NOTE {note}" for note in verdict.comparability(
            dataclasses.replace(state.run, faults=[]), base)] if ok else \
            [f"NOT COMPARED: {why}"]
    return [f"harness: {line}" for line in lines]


def selection_of(settings: Settings, markexpr: str = "", keyword: str = "",
                 args: tuple[str, ...] = ()) -> dict:
    """What the run selected, as stored in its results (``RunResults.selection``)."""
    out = {"markexpr": markexpr, "keyword": keyword, "op_filter": settings.op_filter,
           "run_slow": settings.run_slow, "run_benchmarks": settings.run_benchmarks,
           "graph_backend": settings.graph_backend, "args": list(args)}
    return {k: v for k, v in out.items() if v}


# ------------------------------------------------------------------- baseline choice

def not_compared_reason(state: RunState) -> str:
    """Why nothing was compared, with what is stored (empty when compared)."""
    selection = state.selection
    if selection is not None and selection.results is not None:
        return ""
    fp = state.run.fingerprint
    if selection is None:
        return f"--baseline {state.settings.baseline_mode}"
    if selection.error:
        return "the baseline is unusable (the ERROR line says why)"
    stored = baselines.stored_anywhere(state.settings.baseline_dir)
    listing = ", ".join(stored[:8]) + (f" and {len(stored) - 8} more" if len(stored) > 8 else "")
    return (f"no baseline for {fp['device_type']}/{fp['device_slug']}/{fp['stack_id']} or an "
            f"older stack of it in {state.settings.baseline_dir}; stored: {listing or 'none'}")


def baseline_line(state: RunState) -> str:
    """The chosen baseline and why (printed in the header and, for -q, the summary)."""
    settings, selection = state.settings, state.selection
    if settings.baseline_mode == "record":
        return f"baseline: recording to {baselines.path_for(settings.baseline_dir, state.run.fingerprint)}"
    if selection is None:
        return "baseline: off"
    if selection.error:
        return f"baseline: ERROR {selection.error}"
    if selection.path is None:
        return f"baseline: NOT COMPARED: {not_compared_reason(state)}"
    return f"baseline: {selection.path} — {selection.reason}"


# ------------------------------------------------------------------------- the end

def conclude(state: RunState, complete: bool) -> verdict.RunVerdict:
    """Judge the run (:func:`harness.verdict.judge` on its stored values), then write
    results, baseline and alerts; never raises for I/O.

    Errors (unwritable paths, an unusable baseline, a duplicate record id) land in
    ``state.errors`` (and the results' ``errors``) and make the verdict NO-GO; what was
    written lands in ``state.written``.
    """
    run, settings = state.run, state.settings
    run.finished = utc_now()
    run.complete = complete
    base = state.base

    def judge() -> verdict.RunVerdict:
        run.errors = list(state.errors)
        judged = verdict.judge(run, base, baseline_name=state.base_name,
                               not_compared=not_compared_reason(state))
        state.findings = list(judged.findings)
        run.findings = [f.to_json() for f in judged.findings
                        if f.kind in ("regression", "review", "improvement", "lost")]
        run.verdict = judged.to_json()
        return judged

    state.verdict = judged = judge()
    if not run.records and not run.outcomes:
        return judged  # nothing ran (e.g. --collect-only): write nothing
    _write_results(state)
    if settings.baseline_mode == "record":
        _record_baseline(state, complete)
    if settings.alerts is not None:
        _write_alerts(state)
    if settings.report is not None:
        _write_report(state)
    if len(state.errors) > len(judged.errors):
        # errors while writing come after the verdict: judge again so they count
        state.verdict = judged = judge()
    return judged


def _write_results(state: RunState) -> None:
    settings, run = state.settings, state.run
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    try:
        encoded = results_mod.encode(run)  # once, for the file and the store
        path = results_mod.write(run, settings.results_dir /
                                 f"{stamp}-{state.device.type}{results_mod.RESULTS_SUFFIX}",
                                 encoded=encoded)
        state.written.append(f"results: {path}")
        if not _write_store(state, path, encoded):
            return  # Note [Nothing deletes history]: the JSON is the only copy
        pruned = results_mod.prune(settings.results_dir, settings.keep_results)
        if pruned:
            state.written.append(f"results: removed {len(pruned)} older results file(s) "
                                 f"(--keep-results {settings.keep_results}; their runs stay "
                                 "in the store)")
    except OSError as exc:
        state.errors.append(f"cannot write results to {settings.results_dir}: {exc}; free "
                            "space there or pass a writable --results-dir")


# Note [Nothing deletes history]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Every run is kept in the store (harness.store); the results folder keeps the newest
# ``--keep-results`` JSON files, the artefacts CI uploads. Pruning deletes only those JSON
# files, and only after this run was stored: when the store cannot be written, the run's
# JSON file is its only copy, so nothing is pruned and the summary says how to import the
# files later. The verdict is the stack's: a store that is down does not change it.


def _write_store(state: RunState, path: Path, encoded: results_mod.Encoded) -> bool:
    """Keep the run in the store; False (and a line saying how to import it later) when
    the store cannot be written. ``encoded``: the run's JSON (Note [A run encoded once])."""
    from harness.store import StoreError, mask, open_store

    settings = state.settings
    try:
        store = open_store(settings.store)
        try:
            store.put(state.run, run_id=settings.run_id, shard=settings.shard,
                      source=str(path), durations=state.durations, encoded=encoded)
        finally:
            store.close()
    except StoreError as exc:
        state.store_problem = (
            f"STORE NOT WRITTEN: {exc}. The run's results are in {path} (no results file "
            f"was pruned); store them later with: python -m harness store import {path} "
            f"--store '{mask(settings.store)}' --run-id {settings.run_id}")
        return False
    state.written.append(f"store: {mask(settings.store)} (run {settings.run_id}, shard "
                         f"{settings.shard})")
    return True


def _record_baseline(state: RunState, complete: bool) -> None:
    run, settings = state.run, state.settings
    if not complete:  # Note [Only a completed session records]
        state.errors.append("baseline NOT recorded: the session did not complete (interrupted "
                            "or crashed); the stored baseline is unchanged. Rerun to record")
        return
    try:
        path = baselines.record(settings.baseline_dir, run)
        state.written.append(f"baseline recorded: {path} ({len(run.records)} records)")
    except baselines.BaselineError as exc:
        state.errors.append(f"baseline not recorded: {exc}")
    except OSError as exc:  # a full disk, a read-only store: the old file is unchanged
        target = baselines.path_for(settings.baseline_dir, run.fingerprint)
        state.errors.append(f"baseline not recorded to {target}: {exc.strerror or exc}; the "
                            "stored baseline is unchanged. Free space or make the store "
                            "writable (or pass another --baseline-dir) and record again")


def _write_alerts(state: RunState) -> None:
    run, selection = state.run, state.selection
    context = {"device": f"{state.device.type} ({run.fingerprint['device_name']})",
               "stack_id": run.fingerprint["stack_id"],
               "baseline": str(selection.path) if selection and selection.path else None,
               "started": run.started, "finished": run.finished}
    try:
        for written in regress.write_alerts(state.settings.alerts, state.verdict, context):
            state.written.append(f"alerts: {written}")
    except OSError as exc:
        state.errors.append(f"cannot write alerts to {state.settings.alerts}: {exc}; pass a "
                            "writable --alerts path")


def _write_report(state: RunState) -> None:
    """``--report PATH`` (:mod:`harness.report`); one that cannot be written is an error."""
    from harness import report

    base = state.base
    try:
        model, paths = report.write_for_session(
            state.run, base, state.verdict, state.settings.report,
            baseline_name=state.base_name, alerts=state.settings.alerts,
            baseline_reason=state.selection.reason if base is not None else "")
        state.report = model
        state.written += [f"report: {p}" for p in paths]
    except Exception as exc:  # noqa: BLE001 - the run's results are written; say what failed
        state.errors.append(f"report not written to {state.settings.report}: "
                            f"{type(exc).__name__}: {exc}")


# ----------------------------------------------------------------------- terminal

def _grouped_lines(state: RunState) -> list[str]:
    """The probable common cause and the top groups (one per subject, worst first) of the
    report model (:func:`harness.report.terminal_lines`), without the lines the summary
    prints itself (verdict, baseline, suites, report path)."""
    from harness import report

    model = state.report
    if model is None:
        model = report.build(state.run, state.base, state.verdict,
                             baseline_name=state.base_name)
    lines = report.terminal_lines(model, limit=SHOWN)
    return [line for line in lines[3:] if not line.startswith("report: ")]


def summary_lines(state: RunState) -> list[tuple[str, dict]]:
    """The terminal summary as (text, markup) pairs: the verdict line first, then the
    baseline, counts per suite, the first findings of each kind, errors and files."""
    judged = state.verdict
    out: list[tuple[str, dict]] = []
    if judged is not None:
        colour = {"NO-GO": {"red": True}, "REVIEW": {"yellow": True}, "GO": {"green": True}}
        out.append((judged.headline, {"bold": True, **colour[judged.level]}))
    if judged is not None and not judged.compared and state.settings.baseline_mode != "record":
        out.append((f"NOT COMPARED: {judged.not_compared}", {"yellow": True, "bold": True}))
    else:
        out.append((baseline_line(state), {}))
    for suite, counts in verdict.status_counts(state.run).items():
        text = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        out.append((f"  {suite}: {sum(counts.values())} records ({text})", {}))
    by_kind: dict[str, list[regress.Finding]] = {}
    for finding in state.findings:
        by_kind.setdefault(finding.kind, []).append(finding)
    out += [(line, {}) for line in _grouped_lines(state)]
    if judged is not None and judged.still_failing:
        out.append((f"{len(judged.still_failing)} check(s) failed in the baseline too (still "
                    f"failing): {', '.join(judged.still_failing[:5])}"
                    + (" ..." if len(judged.still_failing) > 5 else ""), {}))
    counts = ", ".join(f"{len(by_kind.get(k, []))} {k}"
                       for k in ("regression", "review", "improvement", "new", "lost",
                                 "not-run"))
    if state.selection is not None and state.selection.results is not None:
        out.append((f"{len(state.run.records)} records; vs baseline "
                    f"{state.selection.stack_id}: {counts}", {}))
    else:
        out.append((f"{len(state.run.records)} records; not compared", {}))
    out += [(f"ERROR {error}", {"red": True, "bold": True}) for error in state.errors]
    if state.store_problem:
        out.append((state.store_problem, {"red": True, "bold": True}))
    out += [(line, {}) for line in state.written]
    return out

"""``python -m harness faults check``: prove every fault turns a green run red.

1. A clean run of the union of every selected fault's checks (one per distinct set of
   extra options), recording a fresh baseline in a temporary folder (so drift faults that pass every absolute standard are
   caught through the baseline, exactly as after a real upgrade).
2. One run per fault: only its checks, with ``--inject-fault NAME``, compared against
   that baseline. The fault is *caught* when at least one of its checks fails.

Each run is a separate pytest process (torch's global state never leaks between
faults), started in its own process group and killed whole on timeout.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

from harness import forkserver, stopping
from harness.faults import ENV_VAR, Fault


@dataclasses.dataclass
class RunOutcome:
    exit_code: int
    outcomes: dict[str, str]
    seconds: float
    output: str
    mdes: tuple = ()
    """The minimum detectable effect of each benchmark compare the run judged (None: its
    run counts give no regression at all, or it measured nothing usable), Note [A miss
    beyond the host's power]."""

    @property
    def failed(self) -> list[str]:
        return sorted(n for n, o in self.outcomes.items() if o == "failed")


@dataclasses.dataclass
class FaultResult:
    fault: Fault
    run: RunOutcome
    parity: Optional[object] = None
    """Parity mode (:func:`check_parity`): the faulted run's
    :class:`~harness.parity.model.Parity` against the clean run of the reference device."""

    @property
    def caught_by(self) -> list[str]:
        if self.parity is not None:  # Note [Parity faults]
            return [f"{d.section}: {d.id}" for d in self.parity.differences
                    if d.section == self.fault.parity]
        return self.run.failed

    @property
    def caught(self) -> bool:
        return bool(self.caught_by)

    @property
    def applicable(self) -> bool:
        """False when every check of the fault was skipped on this device (e.g. a
        world size 4 distributed check on a host with 2 devices): then the fault can
        be neither caught nor missed here, and is reported as not applicable."""
        if self.parity is not None:
            return True
        outcomes = self.run.outcomes.values()
        return not outcomes or any(o != "skipped" for o in outcomes)  # nothing ran: a miss

    @property
    def beyond_power(self) -> bool:
        """A timing fault missed where no compare of its run could see a slow-down of its
        size (Note [A miss beyond the host's power])."""
        return (self.parity is None and self.fault.effect > 0 and not self.caught
                and bool(self.run.mdes)
                and all(m is not None and m > self.fault.effect for m in self.run.mdes))

    @property
    def ok(self) -> bool:
        return self.caught or not self.applicable or self.beyond_power

    def power_text(self) -> str:
        """The compares' MDEs against the fault's effect: ``MDE 11.2%, 14.0% vs 8%``."""
        shown = ", ".join("none" if m is None else f"{m:.1%}" for m in sorted(
            self.run.mdes, key=lambda m: math.inf if m is None else m))
        return f"MDE {shown} vs {self.fault.effect:.0%}"

    def to_json(self) -> dict:
        out = {"name": self.fault.name, "family": self.fault.family,
               "description": self.fault.description, "caught": self.caught,
               "applicable": self.applicable, "beyond_power": self.beyond_power,
               "caught_by": self.caught_by, "exit_code": self.run.exit_code,
               "seconds": round(self.run.seconds, 1)}
        if self.fault.effect:
            out["effect"] = self.fault.effect
            out["mdes"] = list(self.run.mdes)
        if not self.caught and self.applicable:  # what a user needs to see why
            out["output_tail"] = self.run.output[-OUTPUT_TAIL:]
        return out


# Note [A miss beyond the host's power]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A timing fault (``Fault.effect``: the fraction it slows its work by) is caught when a
# benchmark compare of its run says ``regression``. The engine promises to see a slow-down
# only down to each compare's minimum detectable effect, from the runs' own pooled spread
# and counts (Note [Minimum detectable effect] in :mod:`harness.bench.stats`; every verdict
# prints it). Where every compare of the fault's run had an MDE above the fault's effect,
# the run could not have seen it on this host: the miss is reported apart, as beyond the
# host's power, with the MDEs, and does not fail the command (a check that fails on a
# correct detector is a defect of the check). Where any compare could have seen it, a
# miss is the detector breaking its promise: NOT caught, exit 1; so is a compare with no
# MDE (its run counts cannot give a regression, or it measured nothing usable: the run's
# set-up, or the fault, broke the measurement, which no host's noise excuses). The MDE is
# the compare's own, from both sides' runs, so the 15% and 30% faults keep the detector
# to its word on any host whose spread allows them.


OUTPUT_TAIL = 3000
"""Characters of a run's output the JSON report keeps for a missed fault or a red clean
run."""


# Note [Fault runs from a fork server]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Each fault needs a fresh process (a patched torch API or a dispatch mode must not leak
# into the next fault's run), and most of a fresh pytest process's time is start-up:
# importing torch, pytest, hypothesis and the harness. So on platforms with ``fork``, runs
# start from a *fork server* (:mod:`multiprocessing`'s ``forkserver`` context) that imports
# those modules once and has run no torch op (so no intra-op thread pool exists to be
# broken by ``fork``); every run is a fork of it: a fresh process in its own session,
# already past the imports. ``HARNESS_FAULTS_SUBPROCESS=1`` (or a platform without
# ``fork``) runs ``python -m pytest`` per run instead; outcomes are the same either way,
# read from the results file each run writes.

PRELOAD = ("torch", "torch._dynamo", "numpy", "pytest", "hypothesis", "harness.plugin",
           "harness.ops.catalog", "harness.training", "harness.memory", "harness.distributed")
"""Modules the fork server imports once (Note [Fault runs from a fork server])."""


def _fork_context():
    """The fork server's context (Note [One fork server] in :mod:`harness.forkserver`);
    None where runs start as fresh interpreters."""
    return forkserver.context(PRELOAD, off_variable="HARNESS_FAULTS_SUBPROCESS")


def _pytest_args(args: Sequence[str], results_dir: Path) -> list[str]:
    return ["-q", "-p", "no:cacheprovider", "--results-dir", str(results_dir),
            "--fail-on", "review", *args]


def _child(args: list[str], root: str, env: dict, log: str) -> None:
    """A forked run: own session, the run's environment and folder, pytest in-process."""
    os.setsid()
    forkserver.forked_child()  # Note [One fork server]: ends with the fork server
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(root)
    sys.path.insert(0, root)  # what `python -m pytest` does
    import pytest

    code = 3
    try:
        code = int(pytest.main(args))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # a fork leaves without the server's atexit handlers


def run_pytest(args: Sequence[str], results_dir: Path, *, root: Path, timeout: float,
               env: Optional[dict] = None) -> RunOutcome:
    """Run pytest in a fresh process of its own session (Note [Fault runs from a fork
    server]); outcomes come from the results file it writes.

    A run that ends without writing its results file, and was not stopped by ``timeout``,
    measured nothing (Note [A run that died]); it runs once more, and its output says so.
    """
    start = time.monotonic()
    notes = ""
    for attempt in range(2):
        results_dir.mkdir(parents=True, exist_ok=True)  # the plugin creates no missing folder
        exit_code, output = _run_once(args, results_dir, root=root, timeout=timeout, env=env)
        outcomes, mdes = _read_run(results_dir)
        if outcomes or KILLED_MARK in output or attempt:
            break
        notes = (f"{SAY} the first run ended without writing its results "
                 f"({_exit_text(exit_code)}); its output ended:\n"
                 f"{output[-OUTPUT_TAIL // 2:]}\n{SAY} ran it once more:\n")
    return RunOutcome(exit_code, outcomes, time.monotonic() - start, notes + output,
                      tuple(mdes))


# Note [A run that died]
# ~~~~~~~~~~~~~~~~~~~~~~
# A fault run whose pytest ends without writing its results file (killed by a signal from
# outside, e.g. the kernel's OOM killer on a host running other work beside it; a crash in
# the interpreter) judged nothing: counting it as "not caught" would blame the check, and
# counting it as caught would be a lie. It runs once more; the report keeps what the first
# run printed and its exit code, so a run that dies repeatedly is seen, not hidden. A run
# stopped by ``--timeout`` is not rerun: a hang is what the distributed faults provoke.

SAY = "[faults check]"
KILLED_MARK = f"{SAY} killed after"


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def _run_once(args: Sequence[str], results_dir: Path, *, root: Path, timeout: float,
              env: Optional[dict]) -> tuple[int, str]:
    child_env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    child_env.update(env or {})
    context = _fork_context()
    if context is None:
        return _run_subprocess(_pytest_args(args, results_dir), root, timeout, child_env)
    return _run_forked(context, _pytest_args(args, results_dir), root, timeout, child_env)


def _read_run(results_dir: Path) -> tuple[dict[str, str], list[Optional[float]]]:
    """The run's outcomes by node id, and the MDE of each benchmark compare it judged
    (Note [A miss beyond the host's power])."""
    outcomes: dict[str, str] = {}
    mdes: list[Optional[float]] = []
    from harness import results

    for path in results.results_files(results_dir):
        try:
            doc = results.read_document(path)
            outcomes.update(doc.get("outcomes", {}))
            verdicts = [rec.get("info", {}).get("verdict")
                        for rec in doc.get("records", {}).values()]
            mdes += [v.get("mde") for v in verdicts if isinstance(v, dict)]
        except (results.SchemaError, AttributeError, TypeError, ValueError):
            continue
    return outcomes, mdes


def _kill_group(pid: int) -> None:
    try:  # no process outlives its run, grandchildren included
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _run_forked(context, args: list[str], root: Path, timeout: float,
                env: dict) -> tuple[int, str]:
    with tempfile.NamedTemporaryFile(prefix="harness-fault-run-", suffix=".log",
                                     delete=False) as handle:
        log = handle.name
    try:
        proc = context.Process(target=_child, args=(args, str(root), env, log), daemon=False)
        proc.start()
        proc.join(timeout)
        killed = proc.exitcode is None
        _kill_group(proc.pid)
        if killed:
            proc.join()
        output = Path(log).read_text(errors="replace")
        if killed:
            output += f"\n{KILLED_MARK} {timeout:.0f} s"
        return (proc.exitcode if proc.exitcode is not None else -9), output
    finally:
        with contextlib.suppress(OSError):
            os.unlink(log)


def _run_subprocess(args: list[str], root: Path, timeout: float, env: dict) -> tuple[int, str]:
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            preexec_fn=stopping.child_preexec(new_session=True))
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        output, _ = proc.communicate()
        output += f"\n{KILLED_MARK} {timeout:.0f} s"
    finally:
        _kill_group(proc.pid)
    return proc.returncode, output


def check(selected: Sequence[Fault], *, root: Path, device: str = "cpu", jobs: int = 2,
          timeout: float = 900.0, progress=None) -> tuple[RunOutcome, list[FaultResult]]:
    """Clean baseline run(s), then one run per fault (``jobs`` at a time).

    Faults that need extra pytest options (``pytest_args``, e.g. a shorter distributed
    timeout or opt-in benchmarks) get a clean run of their own with the same options, so
    each fault is compared against a clean run of exactly what it runs. ``exclusive``
    faults (timing) and their clean run go last, one run at a time: a parallel run would
    slow what they time, and the benchmark verdict would (rightly) call the host busy.
    """
    say = progress or (lambda _msg: None)
    groups: dict[tuple[str, ...], list[Fault]] = {}
    for fault in selected:
        groups.setdefault(tuple(fault.pytest_args), []).append(fault)
    exclusive = {args for args, members in groups.items() if any(f.exclusive for f in members)}
    with tempfile.TemporaryDirectory(prefix="harness-faults-") as tmp:
        work = Path(tmp)
        group_dirs = {args: work / f"group{i}" for i, args in enumerate(groups)}
        for folder in group_dirs.values():
            (folder / "baselines").mkdir(parents=True)

        def clean_run(args: tuple[str, ...]) -> RunOutcome:
            checks = list(dict.fromkeys(c for fault in groups[args] for c in fault.checks))
            outcome = run_pytest([*checks, *args, "--device", device, "--baseline", "record",
                                  "--baseline-dir", str(group_dirs[args] / "baselines")],
                                 group_dirs[args] / "clean", root=root, timeout=timeout)
            say(f"clean run {' '.join(args) or '(default options)'}: exit {outcome.exit_code}, "
                f"{len(outcome.outcomes)} tests, {outcome.seconds:.0f} s")
            return outcome

        def one(index_fault: tuple[int, Fault]) -> FaultResult:
            index, fault = index_fault
            base_dir = group_dirs[tuple(fault.pytest_args)] / "baselines"
            outcome = run_pytest([*fault.checks, *fault.pytest_args, "--device", device,
                                  "--inject-fault", fault.name, "--baseline", "compare",
                                  "--baseline-dir", str(base_dir)], work / f"fault{index}",
                                 root=root, timeout=timeout)
            result = FaultResult(fault, outcome)
            state = ("caught" if result.caught else
                     f"beyond this host's power, {result.power_text()}" if result.beyond_power
                     else "NOT CAUGHT")
            say(f"{fault.name}: {state} ({len(result.caught_by)} failing, "
                f"{outcome.seconds:.0f} s)")
            return result

        indexed = list(enumerate(selected))
        shared = [item for item in indexed if tuple(item[1].pytest_args) not in exclusive]
        alone = [item for item in indexed if tuple(item[1].pytest_args) in exclusive]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            cleans = list(pool.map(clean_run, [g for g in groups if g not in exclusive]))
            results = dict(zip([i for i, _ in shared], pool.map(one, shared)))
        cleans += [clean_run(args) for args in groups if args in exclusive]
        results.update({item[0]: one(item) for item in alone})
        found = [results[i] for i, _ in indexed]
    return _merge(cleans), found


# Note [Parity faults]
# ~~~~~~~~~~~~~~~~~~~~
# A parity fault (``Fault.parity``: a section) must show where a person migrating would
# look: in that section of a parity comparison (harness.parity) of a faulted run on this
# device with a clean run on another device type. ``faults check --parity-reference TYPE``
# proves it: the fault's checks run clean on TYPE and clean on ``--device`` (the two clean
# runs must be at PARITY: a "clean" pair that already differs proves nothing), then with
# the fault on ``--device``; the fault is caught when the comparison of the faulted run with
# TYPE's clean run has a difference in the fault's section. Runs record no baseline
# (``--baseline off``): parity reads the runs' own results files.


def _load_run(results_dir: Path):
    """The results file a run wrote in ``results_dir`` (None when it wrote none)."""
    from harness import results

    files = results.results_files(results_dir)
    try:
        return results.load(files[-1]) if files else None
    except results.SchemaError:
        return None


def _parity_of(reference, here) -> tuple[Optional[object], str]:
    """The parity comparison of two loaded runs (None for a run that wrote no results), or
    None and why they cannot be compared."""
    from harness.parity import ParityError, compare

    if reference is None or here is None:
        return None, ""
    try:
        return compare(reference, here), ""
    except ParityError as exc:
        return None, str(exc)


def check_parity(selected: Sequence[Fault], *, root: Path, device: str, reference: str,
                 jobs: int = 2, timeout: float = 900.0,
                 progress=None) -> tuple[RunOutcome, list[FaultResult]]:
    """Prove each parity fault (those with ``Fault.parity``) shows in its section of a
    parity comparison (Note [Parity faults]). The returned clean outcome is green when the
    clean pair is at PARITY."""
    say = progress or (lambda _msg: None)
    faults = [f for f in selected if f.parity]
    groups: dict[tuple[str, ...], list[Fault]] = {}
    for fault in faults:
        groups.setdefault(tuple(fault.pytest_args), []).append(fault)
    with tempfile.TemporaryDirectory(prefix="harness-parity-faults-") as tmp:
        work = Path(tmp)

        def clean(item: tuple[int, tuple[str, ...], str]) -> RunOutcome:
            index, args, on = item
            checks = list(dict.fromkeys(c for f in groups[args] for c in f.checks))
            outcome = run_pytest([*checks, *args, "--device", on, "--baseline", "off"],
                                 work / f"clean{index}-{on}", root=root, timeout=timeout)
            say(f"clean run on {on} {' '.join(args) or '(default options)'}: exit "
                f"{outcome.exit_code}, {len(outcome.outcomes)} tests, {outcome.seconds:.0f} s")
            return outcome

        def one(item: tuple[int, Fault]) -> FaultResult:
            index, fault = item
            outcome = run_pytest([*fault.checks, *fault.pytest_args, "--device", device,
                                  "--inject-fault", fault.name, "--baseline", "off"],
                                 work / f"fault{index}", root=root, timeout=timeout)
            ref = refs[list(groups).index(tuple(fault.pytest_args))]
            parity, why = _parity_of(ref, _load_run(work / f"fault{index}"))
            if why:
                outcome.output += f"\n{SAY} parity: {why}"
            result = FaultResult(fault, outcome, parity)
            if parity is None:  # nothing to compare: a miss, with the run's output
                result.parity = _NO_PARITY
            say(f"{fault.name}: {'caught' if result.caught else 'NOT CAUGHT'} in "
                f"{fault.parity} ({result.parity.verdict}, {outcome.seconds:.0f} s)")
            return result

        # timing faults (Fault.exclusive) and their clean runs run alone, one at a time
        alone = {args for args, members in groups.items() if any(f.exclusive for f in members)}
        items = [(i, args, on) for i, args in enumerate(groups) for on in (reference, device)]
        numbered = list(enumerate(faults))
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            cleans = list(pool.map(clean, [item for item in items if item[1] not in alone]))
            cleans += [clean(item) for item in items if item[1] in alone]
            refs = [_load_run(work / f"clean{i}-{reference}") for i in range(len(groups))]
            shared = [item for item in numbered if not item[1].exclusive]
            results = dict(zip([i for i, _ in shared], pool.map(one, shared)))
            results.update({i: one((i, f)) for i, f in numbered if f.exclusive})
            found = [results[i] for i, _ in numbered]
        merged = _merge(cleans)
        for index, ref in enumerate(refs):
            pair, why = _parity_of(ref, _load_run(work / f"clean{index}-{device}"))
            if why:
                merged.output += f"\n{SAY} clean pair: {why}"
            if pair is None or pair.verdict != "PARITY":
                merged.exit_code = merged.exit_code or 1
                merged.output += (f"\n{SAY} the clean pair is not at PARITY: " + (
                    "; ".join(d.summary for d in pair.differences) if pair else "no results"))
    return merged, found


@dataclasses.dataclass(frozen=True)
class _NoParity:
    """What a faulted run that could not be compared reports (caught by nothing)."""

    verdict: str = "NOT COMPARED"
    differences: tuple = ()


_NO_PARITY = _NoParity()


def _merge(runs: Sequence[RunOutcome]) -> RunOutcome:
    """Several clean runs as one: worst exit code, all outcomes, summed time."""
    outcomes: dict[str, str] = {}
    for run in runs:
        for nodeid, outcome in run.outcomes.items():
            outcomes[nodeid] = outcome if outcomes.get(nodeid) in (None, "passed") \
                else outcomes[nodeid]
    exit_code = next((r.exit_code for r in runs if r.exit_code != 0), 0)
    return RunOutcome(exit_code, outcomes, sum(r.seconds for r in runs),
                      "\n".join(r.output for r in runs))


def clean_ok(clean: RunOutcome) -> bool:
    """The clean run passed; one whose every check was skipped on this device (its
    verdict says NOTHING CHECKED, exit 1) is clean too: its faults are not applicable."""
    outcomes = clean.outcomes.values()
    every_skip = bool(outcomes) and all(o == "skipped" for o in outcomes)
    return bool(clean.outcomes) and (clean.exit_code == 0 or every_skip)


def report_json(clean: RunOutcome, found: Sequence[FaultResult]) -> dict:
    out = {"clean_ok": clean_ok(clean), "clean_seconds": round(clean.seconds, 1),
           "clean_failed": clean.failed, "faults": [r.to_json() for r in found]}
    if not out["clean_ok"]:
        out["clean_output_tail"] = clean.output[-OUTPUT_TAIL:]
    return out


def report_text(clean: RunOutcome, found: Sequence[FaultResult]) -> str:
    parity = any(r.parity is not None for r in found)  # Note [Parity faults]
    what = ("clean pair: PARITY" if clean_ok(clean) else "clean pair: NOT AT PARITY") \
        if parity else f"clean run: {'green' if clean_ok(clean) else 'NOT GREEN'}"
    lines = [f"{what} ({len(clean.outcomes)} tests, {clean.seconds:.0f} s)"]
    if parity and not clean_ok(clean):
        lines += [f"  {line}" for line in clean.output.splitlines()
                  if line.startswith(SAY)]
    lines += [f"  failed clean: {n}" for n in clean.failed]
    if not clean.outcomes:
        lines.append("  the clean run ran no test; its output ends:")
        lines += [f"    {line}" for line in clean.output.splitlines()[-15:]]
    width = max([len(r.fault.name) for r in found] + [5])
    lines.append(f"{'fault':<{width}}  {'family':<12} caught  caught by")
    for r in found:
        first = r.caught_by[0] if r.caught_by else "-"
        more = f" (+{len(r.caught_by) - 1} more)" if len(r.caught_by) > 1 else ""
        if r.caught:
            caught, why = "yes", first + more
        elif not r.applicable:
            caught, why = "n/a", "every check skipped on this device"
        elif r.beyond_power:
            caught, why = "beyond", f"beyond this host's power: {r.power_text()}"
        elif r.fault.effect and r.run.mdes:
            caught, why = "NO", f"- (a compare could see it: {r.power_text()})"
        else:
            caught, why = "NO", "-"
        lines.append(f"{r.fault.name:<{width}}  {r.fault.family:<12} {caught:<7} {why}")
    missed = [r.fault.name for r in found if not r.ok]
    na = [r.fault.name for r in found if not r.caught and not r.applicable]
    beyond = [r for r in found if r.beyond_power]
    judged = len(found) - len(na) - len(beyond)
    lines.append(f"{judged - len(missed)}/{judged} faults caught"
                 + (f"; NOT caught: {', '.join(missed)}" if missed else "")
                 + (f"; {len(na)} not applicable here (their checks skip on this device): "
                    f"{', '.join(na)}" if na else "")
                 + (f"; {len(beyond)} beyond this host's power (missed where every compare's "
                    f"minimum detectable effect exceeds the slow-down; a quieter host or more "
                    f"--bench-runs sees them): "
                    + ", ".join(f"{r.fault.name} ({r.power_text()})" for r in beyond)
                    if beyond else ""))
    return "\n".join(lines)

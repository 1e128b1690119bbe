"""``python -m harness``: doctor | baseline list/show/diff | report | history | store |
verdict | bench-eval |
faults list/check/mutate | ops keywords | ops nan | optim options | localize | model | scan |
parity.

``run`` (pytest over the conformance suites, :mod:`harness.layout`) takes pytest's
arguments as given, so :func:`main` dispatches it before parsing.

Nothing heavy is imported at module level: ``doctor`` must run (and explain) even where
``import torch`` fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from harness import argtypes, kinds
from harness.results import is_results_file

ROOT = Path(__file__).resolve().parent.parent


def _cmd_doctor(args: argparse.Namespace) -> int:
    from harness import doctor

    return doctor.main(device=args.device, as_json=args.json, baseline_dir=args.baseline_dir,
                       rank_table=args.rank_table, dist_timeout=args.dist_timeout,
                       deep=args.deep, fault=args.stack_fault)


# -------------------------------------------------------------------------- baseline

def _find_baseline(root: Path, name: str) -> Path:
    path = Path(name)
    if is_results_file(path) and path.is_file():
        return path
    matches = sorted(root.glob(f"*/*/{name}.json"))
    if not matches:
        raise SystemExit(f"error: no baseline {name!r} under {root} (give a stack id such as "
                         "torch-2.4.0, or a path to a .json file; see `baseline list`)")
    if len(matches) > 1:
        listing = "\n  ".join(str(m) for m in matches)
        raise SystemExit(f"error: {name!r} is stored for several devices; give the path:\n  "
                         f"{listing}")
    return matches[0]


def _load(path: Path):
    from harness import results

    try:
        return results.load(path)
    except results.SchemaError as exc:
        raise SystemExit(f"error: {exc}") from None


def _cmd_baseline(args: argparse.Namespace) -> int:
    from harness import results
    from harness.baselines import BaselineError, check_agrees
    from harness.stack import stack_sort_key

    root = Path(args.dir) if args.dir is not None else ROOT / "baselines"
    if args.action == "list":
        from harness.baselines import unreadable

        problems = unreadable(root)
        for problem in problems:
            print(f"error: {problem}")
        paths = sorted((p for p in root.glob("*/*/*.json") if _stack_like(p.stem)),
                       key=lambda p: (p.parent.parent.name, p.parent.name, stack_sort_key(p.stem)))
        if not paths and not problems:
            print(f"no baselines under {root}")
        if problems:
            return 1
        bad = 0
        for path in paths:
            try:
                run = results.load(path)
                check_agrees(path, run.fingerprint)
            except (results.SchemaError, BaselineError) as exc:
                bad += 1
                print(f"{path.parent.parent.name}/{path.parent.name}  {path.stem:<20} "
                      f"BAD: {exc}")
                continue
            statuses: dict[str, int] = {}
            for rec in run.records.values():
                statuses[rec.status] = statuses.get(rec.status, 0) + 1
            summary = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
            print(f"{path.parent.parent.name}/{path.parent.name}  {path.stem:<20} "
                  f"{len(run.records):>6} records ({summary})  {run.finished}")
        if bad:
            print(f"{bad} of {len(paths)} baseline file(s) are unusable (marked BAD above)")
        return 1 if bad else 0
    if args.action == "show":
        run = _load(_find_baseline(root, args.a))
        if args.json:
            print(json.dumps(run.to_json(), indent=1))
            return 0
        for key, value in run.fingerprint.items():
            print(f"{key:>16}: {value}")
        suites: dict[str, int] = {}
        for rec in run.records.values():
            suites[rec.suite] = suites.get(rec.suite, 0) + 1
        print(f"{'records':>16}: {len(run.records)} "
              f"({', '.join(f'{s} {n}' for s, n in sorted(suites.items()))})")
        return 0
    return _cmd_diff(args)


def _stack_like(name: str) -> bool:
    from harness.stack import split_stack_id

    try:
        split_stack_id(name)
    except ValueError:
        return False
    return True


def _store_of(path: Path) -> Optional[Path]:
    """The store root of ``<root>/<device_type>/<device_slug>/<stack_id>.json``."""
    return path.resolve().parent.parent.parent if path.suffix == ".json" else None


def _check_report_outputs(args: argparse.Namespace, *inputs: Optional[str]) -> None:
    """``--html``/``--md`` checked before anything is read: a file path in an existing,
    writable folder, and none of the files the command reads (Note [Outputs never
    overwrite inputs] in harness/guards.py)."""
    from harness.guards import GuardError, check_output_file

    reads = {os.path.realpath(p) for p in inputs if p}
    for flag, value in (("--html", getattr(args, "html", None)),
                        ("--md", getattr(args, "md", None))):
        if not value:
            continue
        if os.path.realpath(value) in reads:
            raise SystemExit(f"error: {flag} {value} is a file this command reads; write "
                             "the report to another path")
        try:
            check_output_file(flag, Path(value))
        except GuardError as exc:
            raise SystemExit(f"error: {exc}") from None


def _cmd_diff(args: argparse.Namespace) -> int:
    """``baseline diff A B``: the report of B against A (Note in harness.report)."""
    _check_report_outputs(args, args.a, args.b)
    given = {name: Path(name) for name in (args.a, args.b)
             if is_results_file(name) and Path(name).is_file()}
    if args.dir is not None:
        root = Path(args.dir)
    else:  # the store the runs used: beside a named file, or the one a results file names
        stores = [_store_of(p) for p in given.values()]
        used = [_load(p).baseline for p in given.values()]
        stores += [_store_of(Path(u)) for u in used if u]
        root = next((s for s in stores if s is not None), ROOT / "baselines")
    old_path = given.get(args.a) or _find_baseline(root, args.a)
    new_path = given.get(args.b) or _find_baseline(root, args.b)
    return _write_report(_load(new_path), _load(old_path), old_path.stem, args)


def _write_report(run, base, base_name: str, args: argparse.Namespace,
                  not_compared: str = "", reason: str = "") -> int:
    from harness import report
    from harness.verdict import NO_GO, judge

    judged = judge(run, base, baseline_name=base_name,  # the one judgement (harness.verdict)
                   not_compared=not_compared or "no baseline given")
    model = report.build(run, base, judged, baseline_name=base_name, baseline_reason=reason)
    try:
        written = report.write(model, args.html, args.md) if (args.html or args.md) else []
    except OSError as exc:
        raise SystemExit(f"error: cannot write the report ({exc}); give --html/--md a file "
                         "path in a writable folder") from None
    if args.html:
        model.path = str(args.html)
    for line in report.terminal_lines(model, limit=args.limit):
        print(line)
    for path in written:
        if str(path) != model.path:
            print(f"report: {path}")
    return 1 if model.verdict.level == NO_GO else 0


# ---------------------------------------------------------------------------- report

def _cmd_report(args: argparse.Namespace) -> int:
    from harness import baselines

    if args.matrix:
        return _cmd_matrix(args)
    if args.results is None:
        raise SystemExit("error: report needs RESULTS.json (or --matrix for the store's "
                         "fleet matrix)")
    if args.against and args.stack:
        raise SystemExit("error: give --against FILE or --stack STACK_ID, not both")
    _check_report_outputs(args, args.results, args.against)
    run = _load(Path(args.results))
    if args.against:
        path = Path(args.against)
        if not path.is_file():
            root = Path(args.baseline_dir) if args.baseline_dir else ROOT / "baselines"
            path = _find_baseline(root, args.against)
        return _write_report(run, _load(path), path.stem, args)
    root = Path(args.baseline_dir) if args.baseline_dir else None
    if root is None and run.baseline:  # the store the run itself compared against
        root = _store_of(Path(run.baseline))
    if root is None:
        if args.stack:
            root = ROOT / "baselines"
        else:
            return _write_report(run, None, "", args, "the results name no baseline; give "
                                 "--against, --stack or --baseline-dir")
    selection = baselines.select(root, run.fingerprint, args.stack)
    if selection.error:  # baselines speaks of the pytest option; this command's is --stack
        raise SystemExit("error: " + selection.error.replace("--baseline-against", "--stack"))
    if selection.results is None:
        return _write_report(run, None, "", args, selection.reason)
    return _write_report(run, selection.results, selection.stack_id or "", args,
                         reason=selection.reason)


def _cmd_matrix(args: argparse.Namespace) -> int:
    from harness.report import matrix
    from harness.store import StoreError

    if args.results:
        raise SystemExit("error: --matrix reads the store, not RESULTS.json; drop one")
    if not (args.html or args.md):
        raise SystemExit("error: --matrix writes a page: give --html FILE and/or --md FILE")
    _check_report_outputs(args)
    store = _open_store(args)
    try:
        written = matrix.render(store, _masked(store.url), args.html, args.md)
    except StoreError as exc:
        raise SystemExit(f"error: {exc}") from None
    for path in written:
        print(f"matrix: {path}")
    return 0


# ---------------------------------------------------------------------------- faults

def _cmd_mutate(args: argparse.Namespace) -> int:
    """``faults mutate``: generated conditional mutants of the op catalog's ops
    (harness/faults/mutate.py, Note [Mutant runs])."""
    from harness import device as dev
    from harness.faults import mutate

    if args.family and args.family != ["ops"]:
        raise SystemExit(f"error: faults mutate mutates the op catalog's ops (--family ops), "
                         f"not {args.family}")
    if args.limit < 1 or args.jobs < 1:
        raise SystemExit(f"error: --limit {args.limit} and --jobs {args.jobs} must be >= 1")
    device, _ = dev.select(args.device)
    report = mutate.mutate(device, limit=args.limit, seed=args.seed, jobs=args.jobs,
                           timeout=min(args.timeout, 300.0),
                           progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(mutate.render(report))
    return 0


def _cmd_faults(args: argparse.Namespace) -> int:
    from harness import faults
    from harness.faults import check as fault_check

    if args.action == "mutate":
        return _cmd_mutate(args)
    try:
        known = faults.registry()
        selected = [faults.resolve(n) for n in args.fault] if args.fault else list(known.values())
    except faults.FaultError as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.family:
        selected = [f for f in selected if f.family in args.family]
        if not selected:
            families = sorted({f.family for f in known.values()})
            raise SystemExit(f"error: no fault in family {args.family}; families: {families}")
    if args.action == "list":
        if args.json:
            print(json.dumps([{"name": f.name, "family": f.family, "description": f.description,
                               "checks": list(f.checks)} for f in selected], indent=1))
            return 0
        width = max(len(f.name) for f in selected)
        for fault in selected:
            print(f"{fault.name:<{width}}  [{fault.family}] {fault.description}")
        return 0
    progress = None if args.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    if args.parity_reference:
        if args.parity_reference == args.device:
            raise SystemExit(f"error: --parity-reference {args.parity_reference} is --device "
                             "too: parity compares two device types (e.g. --device npu "
                             "--parity-reference cpu)")
        selected = [f for f in selected if f.parity]
        if not selected:
            raise SystemExit("error: no parity fault selected (faults with a parity "
                             "section: " + ", ".join(f.name for f in known.values()
                                                       if f.parity) + ")")
        clean, found = fault_check.check_parity(selected, root=ROOT, device=args.device,
                                                reference=args.parity_reference,
                                                jobs=args.jobs, timeout=args.timeout,
                                                progress=progress)
    else:
        clean, found = fault_check.check(selected, root=ROOT, device=args.device,
                                         jobs=args.jobs, timeout=args.timeout,
                                         progress=progress)
    if args.json:
        print(json.dumps(fault_check.report_json(clean, found), indent=1))
    else:
        print(fault_check.report_text(clean, found))
    ok = fault_check.clean_ok(clean) and all(r.ok for r in found)
    return 0 if ok else 1


# ------------------------------------------------------------------------------- ops

def _cmd_ops(args: argparse.Namespace) -> int:
    """``ops keywords``: the catalog's keyword coverage (harness.ops.keywords); exit 1 when a
    documented keyword is neither exercised nor explained. ``ops nan``: the catalog's
    NaN/Inf coverage (harness.ops.specials); exit 1 when a row is neither covered nor
    explained."""
    import warnings

    if args.action == "nan":
        from harness.ops import specials

        rows = specials.coverage()
        if args.json:
            print(json.dumps([{"row": r.row, "covered": r.covered, "detail": r.detail,
                               "samples": list(r.samples), "missing": r.missing}
                              for r in rows], indent=1))
        else:
            print(specials.table(rows))
        return 1 if any(r.missing for r in rows) else 0

    from harness.ops import keywords

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the samples' own warnings (var on 1 element...)
        rows, no_api = keywords.coverage()
    if args.json:
        print(json.dumps([{"op": r.api, "rows": r.rows, "source": r.source,
                           "keywords": sorted(r.keywords), "exercised": sorted(r.exercised),
                           "reasons": r.reasons, "missing": r.missing} for r in rows],
                         indent=1))
    else:
        print(keywords.table(rows, no_api))
    return 1 if any(r.missing for r in rows) else 0


# ----------------------------------------------------------------------------- optim

def _cmd_optim(args: argparse.Namespace) -> int:
    """``optim options``: the optimizer family's option coverage
    (harness.training.optim_options); exit 1 when an option is neither exercised nor
    explained."""
    from harness.training import optim_options

    rows = optim_options.coverage()
    if args.json:
        print(json.dumps([{"subject": r.api, "kind": r.kind, "available": r.available,
                           "cases": r.cases, "options": sorted(r.options),
                           "exercised": sorted(r.exercised), "reasons": r.reasons,
                           "missing": r.missing} for r in rows], indent=1))
    else:
        print(optim_options.table(rows))
    return 1 if any(r.missing for r in rows) else 0


# --------------------------------------------------------------------------- history

def _cmd_history(args: argparse.Namespace) -> int:
    from harness.bench import history

    if args.results_dir is not None and args.store is None:  # the files of a folder
        return history.main(args.results_dir, stack=args.stack, as_json=args.json,
                            metrics=not args.benchmarks_only, min_effect=args.min_effect)
    return history.store_main(_store_url(args), stack=args.stack, device=args.device,
                              as_json=args.json, metrics=not args.benchmarks_only,
                              min_effect=args.min_effect)


def _store_url(args: argparse.Namespace) -> str:
    """``--store``, else ``HARNESS_STORE``, else the project's results/harness.db."""
    from harness.store import url_for

    return url_for(getattr(args, "store", None), ROOT / "results")


def _add_store_option(parser) -> None:
    from harness.store import ENV

    parser.add_argument("--store", default=None, metavar="URL",
                        help=f"The store of runs: sqlite:///PATH or postgresql://USER:PASSWORD"
                             f"@HOST:PORT/DB. Default: ${ENV}, else sqlite:///results/"
                             "harness.db")


def _add_history(sub) -> None:
    history = sub.add_parser("history", help="Change points per benchmark and metric over "
                             "the stored runs of one device and stack kind, in time order")
    history.add_argument("results_dir", nargs="?", default=None, metavar="RESULTS_DIR",
                         help="Read the results files of this folder instead of the store. "
                              "Default: the store")
    _add_store_option(history)
    history.add_argument("--device", default=None, metavar="TYPE/SLUG",
                         help="Only runs of this device (store). Default: the newest run's")
    history.add_argument("--stack", default=None, metavar="STACK_ID",
                         help="Only runs of this stack id. Default: every stack of the "
                              "newest run's kind")
    history.add_argument("--benchmarks-only", action="store_true",
                         help="Only benchmark records, not every numeric metric")
    history.add_argument("--min-effect", type=float, default=0.05, metavar="FRACTION",
                         help="Smallest relative change reported. Default: 0.05")
    history.add_argument("--json", action="store_true", help="Machine-readable output")
    history.set_defaults(func=_cmd_history)


# ----------------------------------------------------------------- store, verdict

def _open_store(args: argparse.Namespace):
    from harness.store import StoreError, open_store

    try:
        return open_store(_store_url(args))
    except StoreError as exc:
        raise SystemExit(f"error: {exc}") from None


def _cmd_store(args: argparse.Namespace) -> int:
    from harness.store import StoreError, import_paths

    store = _open_store(args)
    try:
        if args.action == "import":
            if not args.paths:
                raise SystemExit("error: store import needs results files or folders")
            stored, present, problems = import_paths(
                store, args.paths, run_id=args.run_id,
                role="baseline" if args.as_baseline else "run",
                progress=None if args.quiet else print)
            for problem in problems:
                print(f"error: {problem}")
            print(f"store {store.url and _masked(store.url)}: {stored} run(s) stored, "
                  f"{present} already there, {len(problems)} unreadable")
            return 1 if problems else 0
        if args.action == "durations":
            durations = store.durations()
            text = json.dumps(dict(sorted(durations.items())), indent=1) + "\n"
            if args.out:
                from harness.results import atomic_write_text

                atomic_write_text(args.out, text)
                print(f"{len(durations)} test durations -> {args.out} (pytest-split's "
                      f"--durations-path)")
            else:
                print(text, end="")
            return 0 if durations else 1
        for row in store.runs(role=None):
            print(f"{row.pk:>5} {row.run_id:<28} {row.shard:<5} {row.role:<8} "
                  f"{row.device_type}/{row.device_slug} {row.stack_id} {row.host} "
                  f"{row.started} {row.verdict or '-'} {row.n_records} records"
                  + ("" if row.honest else " (faulted)" if row.faulted else " (incomplete)"))
        return 0
    except StoreError as exc:
        raise SystemExit(f"error: {exc}") from None


def _masked(url: str) -> str:
    from harness.store import mask

    return mask(url)


def _cmd_verdict(args: argparse.Namespace) -> int:
    """``verdict RUN_ID``: the shards of one run merged and judged once."""
    from harness import baselines
    from harness.store import StoreError
    from harness.store.shards import merged
    from harness.verdict import NO_GO, judge

    store = _open_store(args)
    try:
        run, problems = merged(store, args.run_id)
    except StoreError as exc:
        raise SystemExit(f"error: {exc}") from None
    if run is None:
        known = sorted({row.run_id for row in store.runs()})[-5:]
        raise SystemExit(f"error: no run {args.run_id!r} in the store {_masked(store.url)} "
                         f"(newest run ids: {', '.join(known) or 'none'}); give the --run-id "
                         "the shards ran with")
    base, name, why = None, "", "no baseline"
    root = Path(args.baseline_dir) if args.baseline_dir else \
        (_store_of(Path(run.baseline)) if run.baseline else None)
    if root is not None:
        selection = baselines.select(root, run.fingerprint, None)
        base, name, why = selection.results, selection.stack_id or "", selection.reason
    judged = judge(run, base, baseline_name=name, not_compared=why)
    shards = sorted({row.shard for row in store.runs(run_id=args.run_id)})
    if args.json:
        print(json.dumps({"run_id": args.run_id, "shards": shards, "problems": problems,
                          **judged.to_json()}, indent=1))
    else:
        print(judged.line)
        print(f"run {args.run_id}: {len(shards)} shard(s) stored ({', '.join(shards)}), "
              f"{len(run.records)} records")
        for problem in problems:
            print(f"  {problem}")
    return 1 if judged.level == NO_GO else 0


def _add_store(sub) -> None:
    store = sub.add_parser("store", help="The store of runs: import results files, list "
                           "runs, write the shard durations")
    store.add_argument("action", choices=("import", "list", "durations"),
                       help="import PATH...: store results files (folders too); list: the "
                            "stored runs; durations: each test's seconds for pytest-split")
    store.add_argument("paths", nargs="*", metavar="PATH", help="Results files or folders")
    _add_store_option(store)
    store.add_argument("--run-id", default=None, metavar="ID",
                       help="Store the imported files under this run id. Default: each "
                            "file's name")
    store.add_argument("--as-baseline", action="store_true",
                       help="Import as baselines (the store answers the baseline of a stack)")
    store.add_argument("--out", default=None, metavar="FILE",
                       help="durations: write them here. Default: print them")
    store.add_argument("-q", "--quiet", action="store_true", help="Print only the summary")
    store.set_defaults(func=_cmd_store)
    verdict = sub.add_parser("verdict", help="The verdict of one run from its stored shards "
                             "(a missing, duplicated or crashed shard is NO-GO)")
    verdict.add_argument("run_id", metavar="RUN_ID", help="The run id the shards ran with")
    _add_store_option(verdict)
    verdict.add_argument("--baseline-dir", default=None, metavar="PATH",
                         help="Baseline store. Default: the one the shards compared with")
    verdict.add_argument("--json", action="store_true", help="Machine-readable output")
    verdict.set_defaults(func=_cmd_verdict)


# ------------------------------------------------------------------------ bench-eval

def _cmd_bench_eval(args: argparse.Namespace) -> int:
    from harness.bench import evaluate

    return evaluate.main(runs=args.runs, effects=tuple(args.effect or evaluate.EFFECTS),
                         load=args.load, as_json=args.json, root=ROOT, device=args.device,
                         select=args.select, scale=args.training_scale,
                         compare_runs=args.compare_runs,
                         keep_dir=Path(args.keep_dir) if args.keep_dir else None)


def _effect(text: str) -> float:
    from harness.bench import evaluate

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--effect {text!r}: not a number (e.g. 0.08)") from None
    try:
        evaluate.fault_for(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _add_bench_eval(sub) -> None:
    from harness.bench.stats import COMPARE_RUNS

    ev = sub.add_parser("bench-eval", help="Measure the benchmark detector: N baseline, N A/A "
                        "and N slowed-down process runs per effect (quiet, and with --load "
                        "under a one-core load), this engine beside pytest-benchmark")
    ev.add_argument("--runs", type=int, required=True, metavar="N",
                    help="Process runs per phase (baseline, A/A, each effect)")
    ev.add_argument("--effect", type=_effect, action="append", metavar="FRACTION",
                    help="Slow-down of the fault runs (0.08, 0.10, 0.15 or 0.30); repeat "
                         "for several. Default: 0.08 and 0.15")
    ev.add_argument("--load", action="store_true",
                    help="Also run the A/A and slowed compares under a background load "
                         "spinning on the benchmarks' CPU (only while they run), judged "
                         "against the quiet baseline")
    ev.add_argument("--compare-runs", type=int, default=COMPARE_RUNS, metavar="K",
                    help="Process runs per compare (as --bench-runs K). Default: %(default)s")
    ev.add_argument("--select", default=None, metavar="EXPR",
                    help="Only benchmarks matching this -k expression. Default: all")
    ev.add_argument("--device", default="cpu", choices=kinds.choices(), metavar="TYPE",
                    help="Device: %(choices)s. Default: cpu")
    ev.add_argument("--training-scale", default="small", choices=("small", "full"),
                    metavar="SCALE", help="Training scale. Default: small")
    ev.add_argument("--keep-dir", default=None, metavar="PATH",
                    help="Keep every run's results here (run again: re-judges them). "
                         "Default: a temporary folder")
    ev.add_argument("--json", action="store_true", help="Machine-readable output")
    ev.set_defaults(func=_cmd_bench_eval)


# ---------------------------------------------------------------------------- parity

USAGE_ERROR = 4
"""``parity``'s exit code for a usage error: 0, 1 and 2 are its verdicts (docs/parity.md)."""


class _ParityUsage(Exception):
    """A bad argument of ``parity``: printed as ``error: ...``, exit :data:`USAGE_ERROR`."""


def _parity_run(name: str, root: Path):
    """``(path, RunResults)`` of a results file, or of a stored baseline named
    ``<type>/<slug>/<stack>`` (or a stack id stored for one device) in ``root``."""
    from harness import results
    from harness.baselines import BaselineError, check_agrees, stored_anywhere

    path = Path(name)
    stored = False
    if not path.is_file():
        candidates = [root / f"{name}.json"] + sorted(root.glob(f"*/*/{name}.json"))
        found = [p for p in dict.fromkeys(candidates) if p.is_file()]
        if len(found) != 1:
            listing = ", ".join(stored_anywhere(root)) or "none"
            what = "is stored for several devices; give <type>/<slug>/<stack>" if found else \
                "is neither a results file nor a baseline in the store"
            raise _ParityUsage(f"{name!r} {what} (store {root}: {listing}). Give a results "
                               "file (results/<time>-<device>.json) or a stored baseline "
                               "<type>/<slug>/<stack>, e.g. cuda/<slug>/cuda-12.4; "
                               "--baseline-dir names another store")
        path, stored = found[0], True
    try:
        run = results.load(path)
        if stored:
            check_agrees(path, run.fingerprint)
    except (results.SchemaError, BaselineError) as exc:
        raise _ParityUsage(str(exc)) from None
    return path, run


def _cmd_parity(args: argparse.Namespace) -> int:
    """``parity REFERENCE HERE``: the parity verdict of HERE against REFERENCE (exit 0
    PARITY, 1 BLOCKERS, 2 DIFFERENCES, 4 a usage error)."""
    from harness.parity import ParityError, compare

    root = Path(args.baseline_dir) if args.baseline_dir else ROOT / "baselines"
    try:
        try:
            _check_report_outputs(args, args.reference, args.here)
        except SystemExit as exc:
            raise _ParityUsage(str(exc).removeprefix("error: ")) from None
        ref_path, reference = _parity_run(args.reference, root)
        here_path, here = _parity_run(args.here, root)
        parity = compare(reference, here, reference_path=str(ref_path),
                         here_path=str(here_path))
    except (_ParityUsage, ParityError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    from harness.report import parity as report

    try:
        written = report.write(parity, args.html, args.md) if (args.html or args.md) else []
    except OSError as exc:
        print(f"error: cannot write the report ({exc}); give --html/--md a file path in a "
              "writable folder", file=sys.stderr)
        return USAGE_ERROR
    if args.json:
        print(json.dumps(parity.to_json(), indent=1))
    else:
        for line in report.terminal_lines(parity, limit=args.limit):
            print(line)
        for path in written:
            print(f"report: {path}")
    return parity.exit_code


def _add_parity(sub) -> None:
    parity = sub.add_parser(
        "parity", help="Will training behave here as on the reference device? Compare two "
        "stored runs of different device types (exit 0 PARITY, 1 BLOCKERS, 2 DIFFERENCES)",
        description="Compares two stored runs of different device types on the same checks "
        "(docs/parity.md): op error ratios (msprobe's 3-way standard), training, memory, "
        "speed and model inventories. Exit 0: PARITY; 1: BLOCKERS; 2: DIFFERENCES; 4: a "
        "usage error")
    parity.add_argument("reference", metavar="REFERENCE",
                        help="The reference device's run (e.g. the GPU's): a results file "
                             "or a stored baseline <type>/<slug>/<stack>")
    parity.add_argument("here", metavar="HERE",
                        help="This device's run (e.g. the NPU's): a results file or a stored "
                             "baseline <type>/<slug>/<stack>")
    parity.add_argument("--baseline-dir", default=None, metavar="PATH",
                        help="Store the baseline names are looked up in. Default: the "
                             "project's baselines/")
    parity.add_argument("--json", action="store_true", help="Machine-readable output")
    _report_outputs(parity)

    def usage_error(message: str):
        parity.print_usage(sys.stderr)
        print(f"{parity.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(USAGE_ERROR)

    parity.error = usage_error  # argparse's own exit 2 would read as DIFFERENCES
    parity.set_defaults(func=_cmd_parity)


# ----------------------------------------------------------------------------- model

def _cmd_model(args: argparse.Namespace) -> int:
    from harness.model import check

    return check.main(args)


# ------------------------------------------------------------------------------ scan

def _cmd_scan(args: argparse.Namespace) -> int:
    """``scan PATH...``: what ties training code to CUDA (harness.scan); exit 1 on a
    blocker, 2 when a file does not parse or a path is not there."""
    from harness import scan

    try:
        paths = scan.files(args.paths)
        findings = scan.scan_files(paths)
    except scan.UsageError as exc:
        args.parser.error(str(exc))
    if args.json:
        print(json.dumps([f.as_dict() for f in findings], indent=1))
    else:
        print(scan.text(findings, len(paths)))
    return scan.exit_code(findings)


def _add_scan(sub) -> None:
    scan = sub.add_parser("scan", help="Will my training script run on an NPU? List what "
                          "ties it to CUDA, file:line:col, with the device-generic and "
                          "torch_npu equivalents (exit 1 on a blocker)",
                          description="Parses each file (ast) and lists the CUDA-only code "
                          "it holds with the device-generic and torch_npu equivalents "
                          "(docs/migration.md). Exit 0: no blocker; 1: a blocker (fails "
                          "outright on an NPU); 2: a file does not parse, or a path is "
                          "not there")
    scan.add_argument("paths", nargs="+", metavar="PATH",
                      help="Python files, or folders whose .py files are scanned")
    scan.add_argument("--json", action="store_true", help="Machine-readable output")
    scan.set_defaults(func=_cmd_scan, parser=scan)


# ------------------------------------------------------------------------------ main

def _report_outputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--html", default=None, metavar="PATH", help="Write the HTML report")
    parser.add_argument("--md", default=None, metavar="PATH", help="Write the Markdown report")
    parser.add_argument("--limit", default=10, type=int, metavar="N",
                        help="Groups printed on the terminal. Default: 10")


def _stack_faults() -> list[str]:
    from harness.deep import STACK_FAULTS

    return list(STACK_FAULTS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    doctor = sub.add_parser("doctor", help="Check the environment a conformance run needs")
    doctor.add_argument("--device", **kinds.device_option(
        "Device you intend to test (exit 1 if unusable)"))
    doctor.add_argument("--json", action="store_true", help="Machine-readable output")
    doctor.add_argument("--baseline-dir", default=str(ROOT / "baselines"), metavar="PATH",
                        help="Baseline store to look in (default: the checkout's baselines/)")
    doctor.add_argument("--rank-table", default=None, metavar="PATH",
                        help="HCCL rank table to validate (default: $RANK_TABLE_FILE)")
    doctor.add_argument("--dist-timeout", default=120.0, metavar="SECONDS",
                        type=argtypes.seconds_up_to(argtypes.DAY),
                        help="The distributed timeout the run will use, to compare the "
                             "HCCL_* timeouts with. Default: %(default)r")
    doctor.add_argument("--deep", action="store_true",
                        help="Also try every assumption the suite makes about the stack on "
                             "the device (under 2 min; harness/deep.py)")
    doctor.add_argument("--stack-fault", default=None, metavar="NAME",
                        choices=sorted(_stack_faults()),
                        help="With --deep: probe a deliberately broken stack "
                             f"({', '.join(sorted(_stack_faults()))}). Default: none")
    doctor.set_defaults(func=_cmd_doctor)

    baseline = sub.add_parser("baseline", help="List, show or diff stored baselines")
    baseline.add_argument("action", choices=("list", "show", "diff"))
    baseline.add_argument("a", nargs="?", metavar="A", help="Stack id or path (show, diff)")
    baseline.add_argument("b", nargs="?", metavar="B", help="Stack id or path (diff: the newer)")
    baseline.add_argument("--dir", default=None, metavar="PATH",
                          help="Baseline store. Default: for diff, the store the named files "
                               "live in or their runs used; else the project's baselines/")
    baseline.add_argument("--json", action="store_true", help="show: print the whole file")
    _report_outputs(baseline)
    baseline.set_defaults(func=_cmd_baseline)

    report = sub.add_parser("report", help="The go/no-go report of a stored run (HTML, "
                            "Markdown, terminal), offline")
    report.add_argument("results", nargs="?", default=None, metavar="RESULTS.json",
                        help="A results or baseline file (not with --matrix)")
    report.add_argument("--matrix", action="store_true",
                        help="The fleet matrix of the store instead: device slug x stack x "
                             "check family, the latest verdicts, the last 30 nights")
    _add_store_option(report)
    report.add_argument("--against", default=None, metavar="BASELINE",
                        help="Compare with this baseline file (or stack id in the store). "
                             "Default: the baseline the run compared against")
    report.add_argument("--stack", default=None, metavar="STACK_ID",
                        help="Compare with this stack's baseline in the store")
    report.add_argument("--baseline-dir", default=None, metavar="PATH",
                        help="Baseline store. Default: the one the run used")
    _report_outputs(report)
    report.set_defaults(func=_cmd_report)

    faults = sub.add_parser("faults", help="List faults, prove each is caught, or measure "
                                           "the op checks' power with generated mutants")
    faults.add_argument("action", choices=("list", "check", "mutate"))
    faults.add_argument("--limit", type=int, default=240, metavar="N",
                        help="faults mutate: mutants drawn. Default: %(default)r")
    faults.add_argument("--seed", type=int, default=0, metavar="N",
                        help="faults mutate: the draw's seed. Default: %(default)r")
    faults.add_argument("--json", action="store_true", help="Machine-readable output")
    faults.add_argument("--family", action="append", default=[], metavar="NAME",
                        help="Only faults of this family (repeatable)")
    faults.add_argument("--fault", action="append", default=[], metavar="NAME",
                        help="Only this fault (repeatable; package.module:NAME allowed)")
    faults.add_argument("--device", default="cpu", choices=kinds.choices(), metavar="TYPE",
                        help="Device the checks run on: %(choices)s. Default: cpu")
    faults.add_argument("--jobs", type=int, default=2, metavar="N",
                        help="Fault runs in parallel. Default: 2")
    faults.add_argument("--timeout", type=float, default=900.0, metavar="SECONDS",
                        help="Kill one run after this long. Default: 900")
    faults.add_argument("--parity-reference", default=None, choices=kinds.choices(),
                        metavar="TYPE",
                        help="Prove the parity faults instead: each shows in its section "
                             "of a parity comparison with a clean run on this device type "
                             "(docs/parity.md). Default: off")
    faults.set_defaults(func=_cmd_faults)

    ops = sub.add_parser("ops", help="Op catalog tables: keyword coverage, NaN/Inf coverage")
    ops.add_argument("action", choices=("keywords", "nan"),
                     help="keywords: documented keywords exercised; nan: rows with "
                          "special-value samples")
    ops.add_argument("--json", action="store_true", help="Machine-readable output")
    ops.set_defaults(func=_cmd_ops)
    optim = sub.add_parser("optim", help="Optimizer family tables: option coverage of the "
                           "optimizers, LR schedulers and clipping functions")
    optim.add_argument("action", choices=("options",))
    optim.add_argument("--json", action="store_true", help="Machine-readable output")
    optim.set_defaults(func=_cmd_optim)
    _add_history(sub)
    _add_store(sub)
    _add_bench_eval(sub)
    _add_scan(sub)
    _add_parity(sub)
    model = sub.add_parser("model", help="Capture a model's training step; inventory and "
                           "check every aten call it makes on the DUT")
    from harness.model.options import add_arguments as add_model_arguments

    add_model_arguments(model)
    model.set_defaults(func=_cmd_model)

    # dispatched in main(), their arguments untouched; listed here for --help
    sub.add_parser("run", help="Run the conformance suites from any folder: pytest with "
                   "these arguments over the installed (or checkout's) suites/ "
                   "(harness/layout.py)")
    sub.add_parser("localize", help="Find the first layer where DUT and CPU diverge "
                   "(python -m harness localize --help)")
    return parser


RUNS_FAULTS = ("faults", "model", "bench-eval")
"""Commands that run the DUT, so a bad ``HARNESS_FAULTS`` is their usage error."""


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "run":  # pytest's arguments, as given
        from harness import layout

        return layout.main(argv[1:])
    if argv and argv[0] == "localize":  # its own parser: options may come first
        from harness.training import localize

        return int(localize.main(argv[1:]) or 0)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "baseline":
        if args.action in ("show", "diff") and not args.a:
            parser.error(f"baseline {args.action} needs a stack id or path")
        if args.action == "diff" and not args.b:
            parser.error("baseline diff needs two: A (older) and B (newer)")
    if args.command in RUNS_FAULTS and os.environ.get("HARNESS_FAULTS"):
        from harness import faults

        try:
            faults.check_env()
        except faults.FaultError as exc:
            parser.error(str(exc))
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # the reader went away (`| head`): not an error of this command; stdout is
        # pointed at /dev/null so the interpreter's final flush does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a tool killed by the broken pipe exits with

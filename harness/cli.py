"""``python -m harness``: doctor | baseline list/show/diff | faults list/check | localize | model.

Nothing heavy is imported at module level: ``doctor`` must run (and explain) even where
``import torch`` fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent


def _cmd_doctor(args: argparse.Namespace) -> int:
    from harness import doctor

    return doctor.main(device=args.device, as_json=args.json)


# -------------------------------------------------------------------------- baseline

def _find_baseline(root: Path, name: str) -> Path:
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
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
    from harness import regress
    from harness.stack import stack_sort_key

    root = Path(args.dir)
    if args.action == "list":
        paths = sorted(root.glob("*/*/*.json"),
                       key=lambda p: (p.parent.parent.name, p.parent.name, stack_sort_key(p.stem)))
        if not paths:
            print(f"no baselines under {root}")
        for path in paths:
            run = _load(path)
            statuses: dict[str, int] = {}
            for rec in run.records.values():
                statuses[rec.status] = statuses.get(rec.status, 0) + 1
            summary = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
            print(f"{path.parent.parent.name}/{path.parent.name}  {path.stem:<20} "
                  f"{len(run.records):>6} records ({summary})  {run.finished}")
        return 0
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
    old_path, new_path = _find_baseline(root, args.a), _find_baseline(root, args.b)
    findings = regress.compare(_load(new_path), _load(old_path), old_path.stem)
    for finding in findings:
        if args.all or finding.kind in ("regression", "improvement"):
            print(finding.message)
    counts = {k: sum(f.kind == k for f in findings)
              for k in ("regression", "improvement", "new", "missing")}
    print(f"{old_path.stem} -> {new_path.stem}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return 1 if counts["regression"] else 0


# ---------------------------------------------------------------------------- faults

def _cmd_faults(args: argparse.Namespace) -> int:
    from harness import faultcheck, faults

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
    clean, found = faultcheck.check(selected, root=ROOT, device=args.device, jobs=args.jobs,
                                    timeout=args.timeout, progress=progress)
    if args.json:
        print(json.dumps(faultcheck.report_json(clean, found), indent=1))
    else:
        print(faultcheck.report_text(clean, found))
    ok = faultcheck.clean_ok(clean) and all(r.caught for r in found)
    return 0 if ok else 1


# ----------------------------------------------------------------------------- model

def _cmd_model(args: argparse.Namespace) -> int:
    from harness.model import check

    return check.main(args)


# ------------------------------------------------------------------------------ main

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    doctor = sub.add_parser("doctor", help="Check the environment a conformance run needs")
    doctor.add_argument("--device", default="auto", metavar="TYPE",
                        choices=("auto", "npu", "cuda", "xpu", "mps", "cpu"),
                        help="Device you intend to test (exit 1 if unusable). Default: auto")
    doctor.add_argument("--json", action="store_true", help="Machine-readable output")
    doctor.set_defaults(func=_cmd_doctor)

    baseline = sub.add_parser("baseline", help="List, show or diff stored baselines")
    baseline.add_argument("action", choices=("list", "show", "diff"))
    baseline.add_argument("a", nargs="?", metavar="A", help="Stack id or path (show, diff)")
    baseline.add_argument("b", nargs="?", metavar="B", help="Stack id or path (diff: the newer)")
    baseline.add_argument("--dir", default=str(ROOT / "baselines"), metavar="PATH",
                          help="Baseline store. Default: the project's baselines/")
    baseline.add_argument("--json", action="store_true", help="show: print the whole file")
    baseline.add_argument("--all", action="store_true", help="diff: also new/missing records")
    baseline.set_defaults(func=_cmd_baseline)

    faults = sub.add_parser("faults", help="List faults, or prove each is caught")
    faults.add_argument("action", choices=("list", "check"))
    faults.add_argument("--json", action="store_true", help="Machine-readable output")
    faults.add_argument("--family", action="append", default=[], metavar="NAME",
                        help="Only faults of this family (repeatable)")
    faults.add_argument("--fault", action="append", default=[], metavar="NAME",
                        help="Only this fault (repeatable; package.module:NAME allowed)")
    faults.add_argument("--device", default="cpu", metavar="TYPE",
                        help="Device the checks run on. Default: cpu")
    faults.add_argument("--jobs", type=int, default=2, metavar="N",
                        help="Fault runs in parallel. Default: 2")
    faults.add_argument("--timeout", type=float, default=900.0, metavar="SECONDS",
                        help="Kill one run after this long. Default: 900")
    faults.set_defaults(func=_cmd_faults)

    model = sub.add_parser("model", help="Capture a model's training step; inventory and "
                           "check every aten call it makes on the DUT")
    from harness.model.options import add_arguments as add_model_arguments

    add_model_arguments(model)
    model.set_defaults(func=_cmd_model)

    # dispatched in main() to harness.localize's own parser; listed here for --help
    sub.add_parser("localize", help="Find the first layer where DUT and CPU diverge "
                   "(python -m harness localize --help)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "localize":  # its own parser: options may come first
        from harness import localize

        return int(localize.main(argv[1:]) or 0)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "baseline":
        if args.action in ("show", "diff") and not args.a:
            parser.error(f"baseline {args.action} needs a stack id or path")
        if args.action == "diff" and not args.b:
            parser.error("baseline diff needs two: A (older) and B (newer)")
    return int(args.func(args) or 0)

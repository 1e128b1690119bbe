"""One run from its shards: the stored parts of a run id merged into one
:class:`harness.results.RunResults` for :func:`harness.verdict.judge`.

Note [Shards of one run]
~~~~~~~~~~~~~~~~~~~~~~~~
A nightly split over hosts (pytest-split's ``--splits N --group I``) stores one part per
host under one run id, each labelled ``I/N``. The run is whole only when every group 1..N
is stored exactly once and each completed; otherwise the merged run is incomplete and
carries one harness error per problem, naming the shard (``shard 2/3 is missing``), so
the verdict is NO-GO and says why, never a smaller green run. pytest-xdist's workers (one
card each) are one process's run and need nothing here.
"""

from __future__ import annotations

import re
from typing import Optional

from harness.results import Record, RunResults

SHARD = re.compile(r"^(\d+)/(\d+)$")


CI_RUN_IDS = (("GITHUB_RUN_ID", "GITHUB_RUN_ATTEMPT"), ("CI_PIPELINE_ID", None),
              ("BUILD_TAG", None))
"""CI variables a run id is derived from (GitHub Actions, GitLab CI, Jenkins), with the one
that tells attempts or jobs apart; the shards of one pipeline share them."""


def derive_run_id(env: Optional[dict] = None, now: Optional[str] = None) -> str:
    """The run id from CI variables, else one of this session alone (``local-<time>-<pid>``)."""
    import datetime as _dt
    import os

    env = os.environ if env is None else env
    for name, detail in CI_RUN_IDS:
        if env.get(name):
            extra = env.get(detail, "") if detail else ""
            return f"{name.split('_')[0].lower()}-{env[name]}" + (f"-{extra}" if extra else "")
    now = now or _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    return f"local-{now}-{os.getpid()}"


def label(group: Optional[int], splits: Optional[int]) -> str:
    """A shard's label, ``I/N`` (``1/1`` for a run that is not split)."""
    return f"{group or 1}/{splits or 1}"


def unstable_order(splits: Optional[int], shuffled_by: Optional[str]) -> Optional[str]:
    """Why the shards of this run would not partition its tests, or None.

    pytest-split takes its part of the collected tests in the order it gets them, so every
    shard must see one order. ``shuffled_by`` names what reorders the tests in each
    process on its own (pytest-randomly without one ``--randomly-seed`` for every shard),
    None when nothing does. Shards ordered apart overlap and leave tests out, which the
    merged run's verdict finds only afterwards, as NO-GO (a test in two shards)."""
    if not splits or splits < 2 or shuffled_by is None:
        return None
    return (f"--splits {splits}: {shuffled_by} shuffles the tests in each shard's process "
            "with a seed of its own, before pytest-split takes its part, so the shards would "
            "overlap and leave tests out; add -p no:randomly (or --randomly-dont-reorganize, "
            "or the same --randomly-seed N on every shard)")


def problems_of(rows) -> list[str]:
    """What keeps the stored parts (:class:`harness.store.StoredRun`) from being one run."""
    problems: list[str] = []
    seen: dict[str, list] = {}
    totals = set()
    for row in rows:
        match = SHARD.match(row.shard)
        if not match:
            problems.append(f"shard {row.shard!r} (stored run {row.pk}) is not I/N")
            continue
        seen.setdefault(row.shard, []).append(row)
        totals.add(int(match.group(2)))
    if len(totals) > 1:
        problems.append(f"the shards disagree on how many there are: {sorted(totals)} "
                        "(one --splits N for every shard)")
    total = max(totals, default=0)
    for group in range(1, total + 1):
        name = f"{group}/{total}"
        parts = seen.get(name, [])
        if not parts:
            problems.append(f"shard {name} is missing (never stored: killed, or its store "
                            "write failed; rerun it with the same --run-id, or import its "
                            "results with python -m harness store import)")
        elif len(parts) > 1:
            hosts = ", ".join(f"run {p.pk} on {p.host or '?'} at {p.started}" for p in parts)
            problems.append(f"shard {name} is stored {len(parts)} times ({hosts}): one run id "
                            "per night, one shard each")
    for row in rows:
        if not row.complete:
            problems.append(f"shard {row.shard} (run {row.pk} on {row.host or '?'}) did not "
                            "complete (interrupted or crashed)")
    return problems


def merge(parts: list[RunResults], problems: list[str]) -> RunResults:
    """The shards as one run: records and outcomes united, complete only when every part
    completed and nothing is wrong, each problem a harness error (Note [Shards of one
    run]); the verdict is for :func:`harness.verdict.judge` to give."""
    first = parts[0]
    problems = list(problems)
    records: dict[str, Record] = {}
    outcomes: dict[str, str] = {}
    for part in parts:
        if (part.fingerprint.get("device_type"), part.fingerprint.get("stack_id"),
                part.fingerprint.get("device_slug")) != (
                first.fingerprint.get("device_type"), first.fingerprint.get("stack_id"),
                first.fingerprint.get("device_slug")):
            problems.append(f"a shard measured {part.fingerprint.get('device_type')}/"
                            f"{part.fingerprint.get('device_slug')} "
                            f"{part.fingerprint.get('stack_id')}, another "
                            f"{first.fingerprint.get('device_type')}/"
                            f"{first.fingerprint.get('device_slug')} "
                            f"{first.fingerprint.get('stack_id')}: one run id per stack")
        for rid, rec in part.records.items():
            if rid in records:
                problems.append(f"record {rid} is in two shards ({records[rid].test} and "
                                f"{rec.test})")
            records[rid] = rec
        outcomes.update(part.outcomes)
    errors = list(dict.fromkeys([e for part in parts for e in part.errors] + problems))
    return RunResults(
        fingerprint=dict(first.fingerprint), records=records,
        started=min(p.started for p in parts), finished=max(p.finished for p in parts),
        seed=first.seed, outcomes=outcomes, baseline=first.baseline,
        faults=sorted({f for p in parts for f in p.faults}),
        complete=all(p.complete for p in parts) and not problems,
        selection=first.selection, errors=errors)


def merged(store, run_id: str) -> tuple[Optional[RunResults], list[str]]:
    """The run ``run_id`` from its stored shards, and the problems found (None: no shard
    of it is stored)."""
    rows = store.runs(run_id=run_id)
    if not rows:
        return None, []
    problems = problems_of(rows)
    return merge([store.load(row.pk) for row in rows], problems), problems

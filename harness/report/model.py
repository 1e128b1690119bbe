"""The report's data model: one run (and its baseline) as ranked subjects, built from files.

Everything here takes plain values (:class:`~harness.results.RunResults`, findings, a
:class:`~harness.verdict.RunVerdict`) and returns plain dataclasses; the renderers
(:mod:`harness.report.render`) and the terminal summary read only this model.

Note [Report subjects]
~~~~~~~~~~~~~~~~~~~~~~
A person decides per *subject*, not per metric line: one op case, one model check, one
collective, one memory case. A subject is a record id with its per-direction or
per-criterion tail dropped, by a rule per suite (:func:`harness.ids.subject_of`):

* ``ops/<op>/<dtype>/<fwd|bwd>/<sample>`` -> ``ops/<op>/<dtype>/<sample>``: the catalog's
  case (op x dtype x sample, what :func:`harness.ops.run_case` runs); forward and
  backward and every output or gradient (``grad0.``, ``out1.``) fold into it;
* ``opinfo/<op>/<dtype>/<fwd|bwd>/<digest>`` -> ``opinfo/<op>/<dtype>``: the OpInfo case
  (what ``--op-filter`` selects in the sweep);
* ``amp/convergence/<dtype>/<model>/<criterion>`` -> ``amp/convergence/<dtype>/<model>``:
  one training run, judged by five criteria;
* everything else: the record id itself (collectives, memory cases, optimizer checks and
  BatchNorm checks already name one subject per record).

Metrics of the folded records are compared per record and the subject keeps the worst.

Note [Report ranking]
~~~~~~~~~~~~~~~~~~~~~
Subjects are ranked by what a person must do about them:

0. *capability lost*: a record went pass -> fail/error/unsupported/fallback
   (:data:`harness.ids.LOST`; a benchmark judged ``slower`` still runs: rank 1);
1. *fails its standard*: a record fails, errors or is slower now (also when its baseline
   failed);
2. *beyond its baseline rule*: a metric moved more than its rule allows while every
   check passes (``review``; a ``regression`` where the rule's severity says the change
   itself is a loss, e.g. a lower max batch);
3. *within its rule*: the "top movers", worse than the baseline but inside the rule, by
   at least :data:`MOVED` (half a percent; less is rounding).

Within a rank, by the worst metric's ratio (how many times worse than the baseline).
Movers are computed from the two runs' metrics, not from the findings (findings name
only changes beyond a rule).
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any, Iterable, Optional

from harness import ids, standard_limits
from harness.recorder import reproduce_command
from harness.regress import Finding, judge
from harness.results import NON_FINITE, Record, Rule, RunResults

RANKS = ("capability lost", "fails its standard", "beyond its baseline rule", "within its rule")
CAPABILITY_LOST, FAILS, BEYOND_RULE, WITHIN_RULE = range(4)
subject_of = ids.subject_of

# Metrics shown next to a metric: the standard's view of it (compare.STANDARDS "relative").
STANDARD_SUFFIX = "_ratio"

# Which fingerprint keys the stack diff shows first (then any other key, sorted).
STACK_KEYS = ("stack_id", "torch", "torch_npu", "cann", "cann_components", "driver",
              "cuda_runtime", "cudnn", "device_type", "device_name", "device_count",
              "device_slug", "cpu", "cpu_capability", "cpu_threads", "arch", "python", "os",
              "host")


# ----------------------------------------------------------------------------- model

@dataclasses.dataclass
class Change:
    """One metric of one record: old -> new under its rule."""

    record_id: str
    metric: Optional[str]          # None: the status
    old: Any
    new: Any
    rule: Optional[Rule] = None
    kind: Optional[str] = None     # regression | review | improvement | None (within rule)
    ratio: Optional[float] = None  # how many times worse than the baseline (>1 worse)
    standard: str = ""             # the standard's limit and whether it still holds

    @property
    def metric_label(self) -> str:
        return self.metric if self.metric is not None else "status"

    def describe(self) -> str:
        if self.metric is None:
            return f"status {self.old} -> {self.new}"
        ratio = f" ({fmt_ratio(self.ratio)})" if self.ratio is not None else ""
        return f"{self.metric} {fmt(self.old)} -> {fmt(self.new)}{ratio}"


@dataclasses.dataclass
class Subject:
    """One subject (Note [Report subjects]) and everything the report says about it."""

    id: str
    suite: str
    rank: int
    records: list[str]
    status: str                    # worst status now
    old_status: Optional[str]      # worst status in the baseline (None: not there)
    worst: Optional[Change]
    changes: list[Change]          # beyond-rule (and status) changes, worst first
    lines: int                     # how many finding lines fold into this subject
    passes: bool                   # every record passes its own check now
    reproduce: str                 # "" for a subject listed nowhere (nothing moved or failed)
    message: str = ""
    kinds: dict[str, int] = dataclasses.field(default_factory=dict)
    standard: str = ""             # the standard's limit and whether the subject meets it
                                   # ("" for a subject listed nowhere)
    known: str = ""                # why it fails, where every failing record is a listed
                                   # known failure (harness.known_failures), else ""

    @property
    def rank_label(self) -> str:
        return RANKS[self.rank]


@dataclasses.dataclass
class Cause:
    """A kernel the affected subjects share and the unchanged ones do not."""

    token: str                     # "aten.clamp_min backward"
    affected: int
    affected_total: int
    unchanged: int
    unchanged_total: int
    op_filter: str = ""
    ops: list[str] = dataclasses.field(default_factory=list)

    tied: bool = False             # as likely as the candidate before it (same counts)
    new_since_baseline: int = 0    # affected records that did not dispatch it in the baseline
    also: list[str] = dataclasses.field(default_factory=list)  # the same records' other names

    @property
    def line(self) -> str:
        text = (f"{self.token}: in {self.affected} of {self.affected_total} affected cases, "
                f"{self.unchanged} of {self.unchanged_total} unchanged")
        if self.also:
            text += (f"; the same records dispatch {', '.join(self.also)}: one cause, "
                     f"{len(self.also) + 1} names")
        if self.new_since_baseline:
            text += (f"; dispatched only since the baseline in {self.new_since_baseline} of "
                     f"{self.affected_total}")
        if self.tied:
            text += " (tied with the one above: the records cannot tell them apart)"
        if self.op_filter:
            text += f"; isolate it with --op-filter '{self.op_filter}'"
        return text


@dataclasses.dataclass
class StackRow:
    key: str
    old: Any
    new: Any

    @property
    def differs(self) -> bool:
        return self.old != self.new


@dataclasses.dataclass
class Report:
    """The whole report: verdict, groups, movers, counts, cause, stack diff, and the runs."""

    verdict: Any                   # harness.verdict.RunVerdict
    run: RunResults
    baseline: Optional[RunResults]
    baseline_name: str
    subjects: list[Subject]        # ranks 0-2, ranked
    movers: dict[str, list[Subject]]   # suite -> rank-3 subjects, worst ratio first
    counts: dict[str, dict[str, int]]  # suite -> status and finding-kind counts
    causes: list[Cause]
    cause_note: str
    dispatch_changes: list[str]    # aten ops the affected records gained / lost since the baseline
    stack: list[StackRow]
    new: list[str]
    lost: list[str]                # baseline records whose check ran and did not record them
    not_run: list[str]             # baseline records whose check was not selected
    findings: list[Finding]
    path: str = ""                 # where the HTML was written (for the terminal)
    not_compared: str = ""
    baseline_reason: str = ""      # why this baseline (baselines.Selection.reason)

    @property
    def finding_lines(self) -> int:
        return sum(f.kind in ("regression", "review") for f in self.findings)


# ---------------------------------------------------------------------------- values

def number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in NON_FINITE:
        return float(value)
    return None


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if value == 0 or 1e-3 <= abs(value) < 1e5 else f"{value:.2e}"
    return str(value)


def fmt_ratio(ratio: Optional[float]) -> str:
    if ratio is None:
        return "-"
    if math.isinf(ratio):
        return "new nonzero"
    return f"{ratio:.3g}x"


MOVED = 1.005
"""A metric within its rule is a mover when it is worse by at least this ratio: what
:func:`fmt_ratio` shows as more than ``1x``. Less is the rounding of float64 sums, which
moves with the build and the summation order: a default run on an AMD Zen 5 against that
CPU's baseline had 1717 metrics worse by less than 1e-12 relative, and none by more, and
listed 1254 subjects as moved, every ratio ``1x``."""


def worse_ratio(old: Any, new: Any, rule: Optional[Rule]) -> Optional[float]:
    """How many times worse ``new`` is than ``old`` under ``rule`` (1.0: same; <1 better)."""
    a, b = number(old), number(new)
    if rule is None or rule.better == "equal" or a is None or b is None:
        return None
    if math.isnan(a) or math.isnan(b) or a < 0 or b < 0:
        return None
    if rule.better == "higher":
        a, b = b, a
    if a == 0:
        return 1.0 if b == 0 else math.inf
    return b / a


MESSAGE_CHARS = 400  # a bench verdict's reason fits; a traceback's first line is clipped


def _clip(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` shortened to ``limit`` characters, marked when it was."""
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _standard_text(rec: Record, metric: Optional[str]) -> str:
    """What the precision standard says about ``metric`` of ``rec`` (where it applies)."""
    if metric is None:
        return ""
    head, _, base = metric.rpartition(".")
    ratio = rec.metrics.get(f"{head + '.' if head else ''}{base}{STANDARD_SUFFIX}")
    limit = standard_limits.RELATIVE.get(base)
    value = number(ratio)
    if value is None or limit is None:
        return ""
    verdict = "passes" if value <= limit else "FAILS"
    return f"{value:.3g}x the CPU reference's error (limit {limit:g}x): {verdict}"


def _subject_standard(recs: list[Record]) -> str:
    """The metric of ``recs`` nearest its precision-standard limit, e.g.
    ``grad1.max_rel_err 1.2x the CPU reference's error (limit 10x): passes``."""
    limits = standard_limits.RELATIVE
    worst: Optional[tuple[float, str]] = None
    for rec in recs:
        for name, value in rec.metrics.items():
            if not name.endswith(STANDARD_SUFFIX):
                continue
            metric = name[:-len(STANDARD_SUFFIX)]
            limit = limits.get(metric.rpartition(".")[2])
            ratio = number(value)
            if limit is None or ratio is None or math.isnan(ratio):
                continue
            if worst is None or ratio / limit > worst[0]:
                worst = (ratio / limit, f"{metric} {_standard_text(rec, metric)}")
    return worst[1] if worst else ""


# ---------------------------------------------------------------------- reproduce line

def op_filter_for(record_ids: Iterable[str]) -> str:
    cases = sorted({c for c in (ids.op_case_of(r) for r in record_ids) if c})
    return "|".join(ids.filter_regex(c) for c in cases)


def reproduce_line(records: list[Record], run: RunResults) -> str:
    """``python -m pytest '<nodeid>' --device <type> --seed <seed>`` (+ ``--op-filter``)."""
    tests = sorted({r.test for r in records if r.test})
    if not tests:
        return ""
    seed = run.seed if run.seed is not None else 0
    store = Path(run.baseline).parent.parent.parent if run.baseline else None
    line = reproduce_command(tests, run.fingerprint.get("device_type", "cpu"), seed,
                             faults=run.faults, baseline_dir=store)
    regex = op_filter_for(r.id for r in records)
    if regex:
        line += f" --op-filter '{regex}'"
    bench = [r for r in records if r.id.startswith("bench/")]
    if bench:  # opt-in, and judged over process runs
        from harness.bench.stats import reproduce_args

        line += " " + reproduce_args(max(len(r.info.get("runs") or ()) for r in bench))
    return line


# ----------------------------------------------------------------------------- build

def build(run: RunResults, baseline: Optional[RunResults] = None, verdict: Any = None,
          baseline_name: str = "", not_compared: str = "", baseline_reason: str = "",
          errors: Iterable[str] = ()) -> Report:
    """The report of ``run`` against ``baseline`` (None: the run alone).

    The verdict and the findings are :func:`harness.verdict.judge`'s (``verdict``: one
    already judged, e.g. by the session; else judged here); the report only groups, ranks
    and renders them.
    """
    from harness.verdict import judge

    if verdict is None:
        verdict = judge(run, baseline, baseline_name=baseline_name, errors=errors,
                        not_compared=not_compared or "no baseline given")
    if not verdict.compared:
        baseline = None  # judge refused it (Note [Honest comparisons]) or there is none
    findings = list(verdict.findings)
    groups: dict[str, list[Record]] = {}
    for rec in run.records.values():
        groups.setdefault(subject_of(rec.id, rec.suite), []).append(rec)
    by_record: dict[str, list[Finding]] = {}
    for finding in findings:
        by_record.setdefault(finding.record_id, []).append(finding)

    subjects = [_subject(sid, recs, baseline, by_record, run) for sid, recs in groups.items()]
    ranked = sorted((s for s in subjects if s.rank <= BEYOND_RULE), key=_sort_key)
    movers: dict[str, list[Subject]] = {}
    for subject in sorted((s for s in subjects if s.rank == WITHIN_RULE), key=_sort_key):
        movers.setdefault(subject.suite, []).append(subject)
    causes, note = common_cause(run, subjects, baseline=baseline)
    changes = dispatch_changes(run, baseline, {c.record_id for s in subjects
                                               if s.rank <= BEYOND_RULE for c in s.changes})
    return Report(
        verdict=verdict, run=run, baseline=baseline, baseline_name=baseline_name,
        subjects=ranked, movers=movers, counts=_counts(run, findings), causes=causes,
        cause_note=note, dispatch_changes=changes, stack=stack_diff(baseline.fingerprint if baseline else None,
                                          run.fingerprint),
        new=sorted(f.record_id for f in findings if f.kind == "new"),
        lost=sorted(f.record_id for f in findings if f.kind == "lost"),
        not_run=sorted(f.record_id for f in findings if f.kind == "not-run"),
        findings=findings, not_compared="" if baseline is not None else verdict.not_compared,
        baseline_reason=baseline_reason)


def _sort_key(subject: Subject) -> tuple:
    ratio = subject.worst.ratio if subject.worst and subject.worst.ratio is not None else 0.0
    return (subject.rank, -ratio if not math.isnan(ratio) else 0.0, subject.id)


def _subject(sid: str, recs: list[Record], baseline: Optional[RunResults],
             by_record: dict[str, list[Finding]], run: RunResults) -> Subject:
    changes: list[Change] = []
    movers: list[Change] = []
    kinds: dict[str, int] = {}
    lost = False
    for rec in sorted(recs, key=lambda r: r.id):
        base = baseline.records.get(rec.id) if baseline is not None else None
        for finding in by_record.get(rec.id, []):
            kinds[finding.kind] = kinds.get(finding.kind, 0) + 1
            if finding.kind not in ("regression", "review"):
                continue
            rule = Rule.from_json(finding.rule) if finding.rule else rec.rules.get(
                finding.metric or "")
            if finding.metric is None:
                lost = lost or finding.new in ids.LOST
            changes.append(Change(rec.id, finding.metric, finding.old, finding.new, rule,
                                  finding.kind, worse_ratio(finding.old, finding.new, rule),
                                  _standard_text(rec, finding.metric)))
        if base is None:
            continue
        flagged = {f.metric for f in by_record.get(rec.id, [])}
        for metric, rule in {**base.rules, **rec.rules}.items():
            if metric in flagged or metric not in rec.metrics or metric not in base.metrics:
                continue
            old, new = base.metrics[metric], rec.metrics[metric]
            if judge(old, new, rule) is not None:
                continue  # judged beyond the rule elsewhere (or an improvement)
            ratio = worse_ratio(old, new, rule)
            if ratio is not None and ratio >= MOVED and not math.isinf(ratio):
                movers.append(Change(rec.id, metric, old, new, rule, None, ratio,
                                     _standard_text(rec, metric)))
    status = ids.worst(r.status for r in recs)
    old_status = None
    if baseline is not None:
        olds = [baseline.records[r.id].status for r in recs if r.id in baseline.records]
        old_status = ids.worst(olds) if olds else None
    if lost:
        rank = CAPABILITY_LOST
    elif status in ids.FAILING:
        rank = FAILS
    elif changes:
        rank = BEYOND_RULE
    elif movers:
        rank = WITHIN_RULE
    else:
        rank = WITHIN_RULE + 1
    listed = changes or movers
    listed.sort(key=lambda c: (c.metric is not None,
                               -(c.ratio if c.ratio is not None and not math.isnan(c.ratio)
                                 else 0.0), not c.standard, c.record_id, c.metric_label))
    failing = [r for r in recs if r.status in ids.FAILING]
    message = (failing[0].headline or failing[0].status) if failing else ""
    known = (str(failing[0].info["known_failure"])
             if failing and all(r.info.get("known_failure") for r in failing) else "")
    shown = [r for r in recs if r.id in {c.record_id for c in listed}] or failing or recs
    listed_somewhere = rank <= WITHIN_RULE  # the others (most of a run) are listed nowhere
    return Subject(
        id=sid, suite=recs[0].suite, rank=rank, records=sorted(r.id for r in recs),
        status=status, old_status=old_status, worst=listed[0] if listed else None,
        changes=listed, lines=len(changes), passes=status not in ids.FAILING,
        reproduce=reproduce_line(shown, run) if listed_somewhere else "",
        message=_clip(message), kinds=kinds,
        standard=_subject_standard(recs) if listed_somewhere else "", known=known)


def _counts(run: RunResults, findings: list[Finding]) -> dict[str, dict[str, int]]:
    from harness.verdict import status_counts

    counts = {suite: {"records": sum(row.values()), **row}
              for suite, row in status_counts(run).items()}
    suite_of = {rid: rec.suite for rid, rec in run.records.items()}
    for finding in findings:
        suite = suite_of.get(finding.record_id) or finding.record_id.split("/", 1)[0]
        row = counts.setdefault(suite, {})
        row[finding.kind] = row.get(finding.kind, 0) + 1
    return dict(sorted(counts.items()))


def stack_diff(old: Optional[dict], new: dict) -> list[StackRow]:
    """Old and new fingerprints side by side, CANN components flattened, in a fixed order."""
    def flat(fp: Optional[dict]) -> dict:
        out: dict = {}
        for key, value in (fp or {}).items():
            if isinstance(value, dict):
                for sub, item in value.items():
                    out[f"{key}.{sub}"] = item
            else:
                out[key] = value
        return out

    a, b = flat(old), flat(new)
    keys = list(dict.fromkeys(
        [k for base in STACK_KEYS for k in sorted(set(a) | set(b))
         if k == base or k.startswith(base + ".")]
        + sorted(set(a) | set(b))))
    return [StackRow(k, a.get(k), b.get(k)) for k in keys
            if a.get(k) is not None or b.get(k) is not None]


# ------------------------------------------------------------------------ common cause

TRIVIAL_OPS = frozenset({"aten._to_copy", "aten.detach", "aten.randn", "aten.ones_like",
                         "aten.empty", "aten.empty_like", "aten.zeros_like", "aten.copy_",
                         "aten.expand", "aten.view", "aten._unsafe_view", "aten.alias",
                         "aten.lift_fresh", "aten.scalar_tensor", "aten.t"})


def aten_tokens(rec: Record) -> Optional[set[str]]:
    """What a record's DUT computation dispatched, as cause candidates (None: not captured).

    A backward record's candidates are the *derivatives* of its forward ops
    (``aten.clamp_min backward``) and the kernels its backward dispatched; a forward
    record's are its forward ops.
    """
    ops = rec.info.get("aten_ops") if isinstance(rec.info, dict) else None
    if not isinstance(ops, dict):
        return None
    fwd = {o for o in ops.get("fwd", ()) if o not in TRIVIAL_OPS}
    bwd = {o for o in ops.get("bwd", ()) if o not in TRIVIAL_OPS}
    direction = ids.direction_of(rec.id)
    if direction == "bwd":
        return {f"{o} backward" for o in fwd} | {f"{o} (in backward)" for o in bwd}
    if direction == "fwd":
        return set(fwd)
    return fwd | {f"{o} backward" for o in fwd} | {f"{o} (in backward)" for o in bwd}


# Note [One cause, several names]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A kernel often has two names among the candidates: the derivative of a forward op
# (``aten.native_layer_norm backward``) and the backward kernel that derivative dispatches
# (``aten.native_layer_norm_backward (in backward)``). Every record that dispatches one
# dispatches the other, so the evidence cannot tell them apart, and listed apart they took
# two of the three places (an ``OMP_NUM_THREADS=1`` run against a two-thread baseline
# listed layer_norm's backward twice). Candidates dispatched by exactly the same records
# (and new since the baseline in as many) are one cause: the best-ranked name, the others
# in ``Cause.also``. Candidates with equal counts but different records stay apart, marked
# ``tied``.


def common_cause(run: RunResults, subjects: list[Subject], limit: int = 3,
                 baseline: Optional[RunResults] = None) -> tuple[list[Cause], str]:
    """Kernels shared by the affected records that unchanged records lack.

    Affected: the records with a beyond-rule or status change, or failing (subjects of
    ranks 0-2), but for listed known failures (their entry names their cause).
    Unchanged: records of the other subjects (within their rules). A candidate must be in
    at least half of the affected records and at most a quarter as common among the
    unchanged; candidates rank by (share among affected -
    share among unchanged), then by how many affected records dispatch it only since the
    baseline, then by fewest unchanged. Candidates that exactly the same records dispatch
    are one cause under several names (Note [One cause, several names]). Returns at most
    ``limit`` causes and a note (why there is none, when there is none). A record without
    ``info["aten_ops"]`` uses its baseline record's, if that has them (a baseline recorded
    with the capture).
    """
    # a listed known failure has its cause written down already (its entry's reason)
    affected_ids = {c.record_id for s in subjects if s.rank <= BEYOND_RULE and not s.known
                    for c in s.changes}
    affected_ids |= {rid for s in subjects if s.rank <= FAILS and not s.known
                     for rid in s.records if run.records[rid].status in ids.FAILING}
    if not affected_ids:
        return [], ""
    quiet = {rid for s in subjects if s.rank >= WITHIN_RULE for rid in s.records}
    tokens = {rid: aten_tokens(rec) for rid, rec in run.records.items()}
    if baseline is not None:
        for rid, found in tokens.items():
            if found is None and rid in baseline.records:
                tokens[rid] = aten_tokens(baseline.records[rid])
    hit = [tokens[r] for r in sorted(affected_ids) if tokens.get(r) is not None]
    calm = [tokens[r] for r in sorted(quiet) if tokens.get(r) is not None]
    if not hit:
        return [], (f"no common kernel named: the {len(affected_ids)} affected records carry "
                    "no info['aten_ops'] (the op runner's dispatch capture); "
                    + _shared_fields(affected_ids))
    candidates = set().union(*hit)
    before = {rid: aten_tokens(baseline.records[rid]) if baseline is not None
              and rid in baseline.records else None for rid in affected_ids}
    scored = []
    for token in candidates:
        a = sum(token in t for t in hit)
        u = sum(token in t for t in calm)
        share, calm_share = a / len(hit), (u / len(calm) if calm else 0.0)
        if a * 2 < len(hit) or calm_share > share / 4:
            continue  # in too few affected records, or too common among the unchanged
        fresh = sum(bool(tokens.get(rid) and before[rid] is not None and token in tokens[rid]
                         and token not in before[rid]) for rid in affected_ids)
        scored.append((-(share - calm_share), -fresh, u, token, a))
    scored.sort()
    causes: list[Cause] = []
    named: dict[tuple[frozenset, int], Cause] = {}  # Note [One cause, several names]
    last: Optional[tuple] = None  # the score of the last cause listed
    for score, fresh, u, token, a in scored:
        if len(causes) == limit and (score, fresh, u) != last:
            break  # another name of a listed cause has its counts, so sorts beside it
        where = frozenset(rid for rid, t in tokens.items() if t is not None and token in t)
        if (where, fresh) in named:
            named[where, fresh].also.append(token)
            continue
        if len(causes) == limit:
            continue
        last = (score, fresh, u)
        ops = sorted({rid.split("/")[1] for rid in where if rid.split("/")[0] in ("ops",)})
        tied = bool(causes) and (causes[-1].affected, causes[-1].unchanged,
                                 causes[-1].new_since_baseline) == (a, u, -fresh)
        causes.append(Cause(token, a, len(hit), u, len(calm), _cause_filter(token, ops), ops,
                            tied, -fresh))
        named[where, fresh] = causes[-1]
    note = "" if causes else "the affected records share no kernel the unchanged ones lack"
    return causes, note


def dispatch_changes(run: RunResults, baseline: Optional[RunResults],
                     affected: set[str]) -> list[str]:
    """Aten ops the affected records dispatch now but not in the baseline (``+``), or the
    reverse (``-``), with how many of them: a kernel's derivative that switched ops (a
    ``ge`` that became a ``gt``) shows here directly."""
    if baseline is None:
        return []
    gained: dict[str, int] = {}
    lost: dict[str, int] = {}
    pairs = 0
    for rid in sorted(affected):
        old = baseline.records.get(rid)
        now = aten_tokens(run.records[rid]) if rid in run.records else None
        before = aten_tokens(old) if old is not None else None
        if now is None or before is None:
            continue
        pairs += 1
        for token in now - before:
            gained[token] = gained.get(token, 0) + 1
        for token in before - now:
            lost[token] = lost.get(token, 0) + 1
    return ([f"+ {t}: in {n} of {pairs}" for t, n in sorted(gained.items(), key=lambda x: -x[1])]
            + [f"- {t}: in {n} of {pairs}" for t, n in sorted(lost.items(), key=lambda x: -x[1])])


def _cause_filter(token: str, ops: list[str]) -> str:
    if not ops or len(ops) > 12:
        return ""
    direction = "bwd" if " backward" in token or "(in backward)" in token else "fwd"
    names = "|".join(re.escape(o) for o in ops)
    return f"^({names})-[^-]+-{direction}-" if len(ops) > 1 else f"^{names}-[^-]+-{direction}-"


def _shared_fields(record_ids: set[str]) -> str:
    """Without aten ops: what the affected op records have in common (op, dtype, direction)."""
    parts = [rid.split("/") for rid in record_ids]
    if not all(p[0] in ("ops", "opinfo") and len(p) >= 4 for p in parts):
        return "they are not all op records"
    shared = [name for index, name in ((1, "op"), (2, "dtype"), (3, "direction"))
              if len({p[index] for p in parts}) == 1]
    if not shared:
        return "they share no op, dtype or direction"
    first = parts[0]
    index = {"op": 1, "dtype": 2, "direction": 3}
    return "all are " + ", ".join(f"{name} {first[index[name]]}" for name in shared)


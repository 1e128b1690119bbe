"""Compare two stored runs of different device types on the same checks: the parity verdict.

:func:`compare` is a pure function of two :class:`~harness.results.RunResults` (it reads
no file and no device): records with the same id measured the same check with the same
inputs, each device against its own up-cast CPU reference, so the two records can be set
side by side. Per section (:data:`harness.parity.model.SECTIONS`):

* **ops** (``ops``, ``opinfo``, ``edge``, ``determinism`` records): per record, this
  device's error over the reference device's for RMSE, maximum and mean relative error,
  small-value error and error balance, judged three ways (Note [Three-way error ratios]
  in :mod:`harness.parity.thresholds`); an *error* is a difference.
* **training** (``amp``, ``optim``, ``norm``, ``distributed`` and any other suite): each
  metric against the other device's under the record's own rule
  (:func:`harness.regress.compare_record`, the judgement a baseline comparison makes), and
  both devices' AMP loss curves.
* **memory**: max batch under the same cap and peak bytes per step, as ratios.
* **speed**: benchmark throughput ratios at the same batch size and precision.
* **model**: the ``pytest --model`` inventories side by side, and the model's op cases as
  in the ops section.

In every section a record that passes on the reference device and is ``unsupported``,
``error`` or ``fallback`` here is a *blocker* (the migration must work around it); one
that fails its own check here is a difference. The verdict: BLOCKERS when there is a
blocker, else DIFFERENCES when there is a difference, else PARITY.

Note [Parity is between device types]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Two runs of one device type are an upgrade or a nightly: the ordinary comparison
(``python -m harness report RUN --against BASELINE``, ``baseline diff``) judges them with
every rule a check stores and its baselines' history. Parity answers another question
(will training behave here as it did there?) with looser, cross-device thresholds, so
comparing one device with itself through it would hide what a baseline comparison shows;
it is refused with a pointer to the ordinary compare.

One pair of one device type is a migration too: from eager to graph mode. A run whose
graph family compiled with another backend (``--graph-backend``, stored in the run's
``selection``) than the other run's is the other side of that question (will training
behave compiled as it did eager?), so two runs of one device type are compared when their
graph backends differ (:func:`mode_of`): ``--graph-backend eager`` (capture only, the eager
kernels) against the device kind's backend. Their ``graph/...`` records share ids (the
backend is in each record's ``info``), every other record of the two runs measured the
same eager computation.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from harness import ids
from harness.ids import Status
from harness.parity import thresholds as th
from harness.parity.model import SECTIONS, Difference, Parity, RunSide
from harness.results import Record, RunResults

SECTION_OF_SUITE = {"ops": "ops", "opinfo": "ops", "edge": "ops", "determinism": "ops",
                    "memory": "memory", "bench": "speed", "model": "model"}
"""Suite -> section; every other suite (amp, optim, norm, distributed, ...) is training."""

PER_DEVICE = {
    "amp/autocast_policy/": "each device is checked against its own documented autocast "
                            "policy (Note [Autocast policy by device type] in "
                            "suites/amp/test_autocast.py): the CPU's keeps softmax, norms, "
                            "exp, cumsum and sums in the low precision where CUDA's and "
                            "torch_npu's widen them to fp32, so their output dtypes and "
                            "errors differ by design; compared by status only",
}
"""Record id prefixes whose metrics are judged against an expectation of each device type
(so they differ between device types by design): only their status is compared, and the
section says how many differ and why (Note [Per-device expectations])."""

# Note [Per-device expectations]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Most records measure one thing two devices should agree on (an error against the same
# CPU reference, a loss, a dtype an optimizer keeps). A few measure whether a device follows
# *its own* documented behaviour: the autocast policy check expects fp32 from softmax under
# autocast on CUDA and torch_npu, the low precision on the CPU. Two devices that both follow
# their own policy pass; setting their output dtypes side by side would call the policies'
# difference a defect of one device. So those records (PER_DEVICE) are compared by status (a
# device that stops following its policy is a difference as anywhere), and the training
# section says how many of them differ in their numbers and why.

BLOCKING = (Status.UNSUPPORTED, Status.ERROR, Status.FALLBACK)
"""Statuses here that block a migration when the reference device passes."""
MEASURED = (Status.PASS, Status.FAIL, Status.SLOWER)
"""Statuses whose metrics measured something."""

JUDGEMENTS = ("pass", "warning", "error")
"""The three-way judgements, mildest first (a record shows its worst metric)."""
PRECISIONS = ("float32", "float16", "bfloat16", "float64", "float16-amp", "bfloat16-amp")


class ParityError(ValueError):
    """Two runs that cannot be compared for parity; the message names the cause and the fix."""


def section_of(record_id: str) -> str:
    return SECTION_OF_SUITE.get(ids.suite_of(record_id), "training")


def side_of(run: RunResults, path: str) -> RunSide:
    fp = run.fingerprint
    return RunSide(path=path, device_type=str(fp.get("device_type", "")),
                   device_slug=str(fp.get("device_slug", "")),
                   stack_id=str(fp.get("stack_id", "")), started=run.started,
                   fingerprint=dict(fp))


def mode_of(run: RunResults) -> str:
    """The graph backend a run's graph family compiled with (``--graph-backend``); empty for
    the device kind's own (Note [Parity is between device types])."""
    return str((run.selection or {}).get("graph_backend") or "")


def check_pair(reference: RunResults, here: RunResults) -> None:
    """Raise :class:`ParityError` for a pair of one device type and one graph backend (Note
    [Parity is between device types])."""
    a, b = reference.fingerprint.get("device_type"), here.fingerprint.get("device_type")
    if a == b and mode_of(reference) == mode_of(here):
        raise ParityError(
            f"both runs measured device type {a!r}: parity compares two device types (e.g. "
            "cuda -> npu). To compare runs of one device, use the ordinary comparison: "
            "`python -m harness report HERE.json --against REFERENCE.json` (or `python -m "
            "harness baseline diff REFERENCE HERE`); for eager vs graph mode on one device, "
            "run the reference with --graph-backend eager")


# ------------------------------------------------------------------------------ main

def compare(reference: RunResults, here: RunResults, *, reference_path: str = "",
            here_path: str = "") -> Parity:
    """The parity of ``here`` with ``reference`` (see the module docstring).

    Raises :class:`ParityError` when both runs are of one device type, or when they share
    no record that both measured.
    """
    check_pair(reference, here)
    ctx = _Context(reference, here)
    common = sorted(set(reference.records) & set(here.records))
    for record_id in common:
        ctx.add(reference.records[record_id], here.records[record_id])
    if not sum(ctx.compared.values()):
        raise ParityError(
            f"the two runs share no record both measured ({len(reference.records)} records "
            f"in the reference run, {len(here.records)} here, {len(common)} ids in common, "
            "every one skipped on one side or the other): run the same selection on both "
            "devices (the same test paths, -m, -k and --op-filter)")
    ctx.explain_uncompared(common)
    differences = [d for _, d in sorted(ctx.differences, key=_rank)]
    blockers = any(d.severity == "blocker" for d in differences)
    verdict = "BLOCKERS" if blockers else "DIFFERENCES" if differences else "PARITY"
    return Parity(verdict=verdict, reference=side_of(reference, reference_path),
                  here=side_of(here, here_path), differences=differences,
                  compared={s: ctx.compared.get(s, 0) for s in SECTIONS},
                  not_compared=ctx.not_compared, thresholds=th.as_data(),
                  op_ratios=ctx.op_ratios, curves=ctx.curves, memory=ctx.memory,
                  speed=ctx.speed, models=ctx.models, notes=notes(reference, here))


def notes(reference: RunResults, here: RunResults) -> list[str]:
    """How the two runs differ in what they measured (compared all the same, and said):
    seeds, selections, injected faults, incomplete sessions."""
    from harness.verdict import comparability

    out = [n.replace("the baseline", "the reference run")
           for n in comparability(here, reference) if not n.startswith("different device types")]
    if mode_of(reference) != mode_of(here):
        default = "the device kind's"
        out.append(f"graph backends: the reference run {mode_of(reference) or default}, "
                   f"this run {mode_of(here) or default} (graph mode vs eager: "
                   "the graph/ records differ in what compiled, every other record measured "
                   "the same eager computation)")
    if reference.faults:
        out.append(f"FAULTS INJECTED in the reference run: {', '.join(reference.faults)} (it "
                   "measured the faults, not the reference device)")
    from harness import simnpu

    for run, what in ((reference, "the reference run"), (here, "this device's run")):
        if run.fingerprint.get("device_name") == simnpu.DEVICE_NAME:
            out.append(f"{what} is on SimNPU, a simulator: its numbers are the CPU's kernels "
                       "and its speed is the host's (the CPU's kernels, timed as the CPU is), "
                       "not a device's (docs/simnpu.md)")
        if not run.complete:
            out.append(f"{what} did not complete: records of checks it did not reach are "
                       "not compared")
    return out


def _rank(item: tuple[float, Difference]) -> tuple:
    """Blockers first, then how far beyond its threshold a difference is (a status that
    fails here is the worst), then section order and id."""
    badness, diff = item
    return (diff.severity != "blocker", -badness, SECTIONS.index(diff.section), diff.id)


# ------------------------------------------------------------------------ per record

class _Context:
    """What one comparison accumulates, section by section."""

    def __init__(self, reference: RunResults, here: RunResults) -> None:
        self.reference, self.here = reference, here
        self.ref_name = reference.fingerprint.get("device_type", "reference")
        self.here_name = here.fingerprint.get("device_type", "here")
        self.differences: list[tuple[float, Difference]] = []  # (badness, difference)
        self.compared: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        self.not_compared: dict[str, str] = {}
        self.op_ratios: list[dict] = []
        self.curves: list[dict] = []
        self.memory: list[dict] = []
        self.speed: list[dict] = []
        self.models: list[dict] = []
        self.per_device: dict[str, list[str]] = {}  # prefix -> ids whose numbers differ

    # ---- shared
    def add(self, ref: Record, here: Record) -> None:
        section = section_of(ref.id)
        if ref.status == Status.SKIP or here.status == Status.SKIP:
            self.skipped[section] = self.skipped.get(section, 0) + 1
            return
        self.compared[section] = self.compared.get(section, 0) + 1
        if ids.suite_of(ref.id) == "model" and "/inventory" in ref.id:
            self.models.append(_inventory_row(ref, here))
        if self.status_difference(section, ref, here):
            return
        if ref.status not in MEASURED or here.status not in MEASURED:
            return
        if section in ("ops", "model"):
            self.op_record(section, ref, here)
        elif section == "memory":
            self.memory_record(ref, here)
        elif section == "speed":
            self.speed_record(ref, here)
        else:
            self.training_record(ref, here)

    def reproduce(self, rec: Record) -> str:
        from harness.recorder import reproduce_command

        if not rec.test:
            return ""
        line = reproduce_command(rec.test, self.here_name, self.here.seed or 0,
                                 faults=self.here.faults)
        case = ids.op_case_of(rec.id)
        if case is not None:
            line += f" --op-filter '{ids.filter_regex(case)}'"
        return line

    def difference(self, section: str, rec: Record, severity: str, summary: str,
                   reference: dict, here: dict, ratio: Optional[float],
                   badness: float = math.inf) -> None:
        self.differences.append((badness, Difference(
            section=section, id=rec.id, severity=severity, summary=summary,
            reference=reference, here=here, ratio=ratio, reproduce=self.reproduce(rec))))

    def status_difference(self, section: str, ref: Record, here: Record) -> bool:
        """A capability the reference device has and this one lacks (a blocker), or a
        check that passes there and fails here; True when one was added."""
        if ref.status != Status.PASS or here.status in (Status.PASS, Status.SLOWER):
            return False  # slower: than this device's own baseline; speed compares the two
        blocker = here.status in BLOCKING
        if not blocker and section in ("ops", "model") and \
                self.op_record(section, ref, here, failing=True):
            return True  # a failing op with its ratios
        why = _first_line(here.message)
        self.difference(section, here, "blocker" if blocker else "difference",
                        f"passes on {self.ref_name}, {here.status} here"
                        + (f": {why}" if why else ""),
                        {"status": str(ref.status)}, {"status": str(here.status)}, None)
        return True

    # ---- ops and model cases
    def op_record(self, section: str, ref: Record, here: Record, failing: bool = False) -> bool:
        """Three-way ratios of one op record; True when it added a difference."""
        worst = None  # (badness, metric, ratio, judgement, key)
        for key, value in here.metrics.items():
            prefix, _, metric = key.rpartition(".")
            prefix = f"{prefix}." if prefix else ""
            if metric not in th.OP_METRICS or key not in ref.metrics:
                continue
            ratio = error_ratio(metric, ref.metrics[key], value, _floor(ref, prefix, metric))
            if ratio is None:
                continue
            judgement = th.judge_ratio(metric, ratio)
            badness = ratio / th.OP_METRICS[metric]["error"]
            order = (JUDGEMENTS.index(judgement), badness)
            if worst is None or order > worst[0]:
                worst = (order, metric, ratio, judgement, key)
        if worst is None:
            return False
        (_, badness), metric, ratio, judgement, key = worst
        op, dtype = _op_and_dtype(ref)
        self.op_ratios.append({"op": op, "dtype": dtype, "ratio": ratio, "id": ref.id,
                               "metric": key, "judgement": judgement,
                               "direction": ids.direction_of(ref.id)})
        if judgement != "error" and not failing:
            return False
        limit = th.OP_METRICS[metric]["error"]
        status = f"; {here.status} here: {_first_line(here.message)}" if failing else ""
        self.difference(section, here, "difference",
                        f"{key} {_fmt(here.metrics[key])} is {_fmt(ratio)}x {self.ref_name}'s "
                        f"{_fmt(ref.metrics[key])} (3-way error: above {limit:g}x){status}"
                        + self.kernels(ref, here),
                        _error_metrics(ref, key), _error_metrics(here, key), ratio, badness)
        return True

    def kernels(self, ref: Record, here: Record) -> str:
        """``; other kernels: cpu ran X, here Y`` when the two records' DUT computations
        dispatched different aten ops (``info["aten_ops"]`` of the op checks), the likely
        cause of a ratio: another kernel, not the same kernel less accurate."""
        direction = ids.direction_of(ref.id) or "fwd"
        a = (ref.info.get("aten_ops") or {}).get(direction)
        b = (here.info.get("aten_ops") or {}).get(direction)
        if not isinstance(a, list) or not isinstance(b, list) or set(a) == set(b):
            return ""
        return (f"; other kernels: {self.ref_name} ran {', '.join(_short(a))}, here "
                f"{', '.join(_short(b))}")

    # ---- memory
    def memory_record(self, ref: Record, here: Record) -> None:
        beyond = []  # (badness, text, metric, old, new, ratio)
        for metric, value in sorted(here.metrics.items()):
            is_batch, is_peak = metric == "max_batch", metric.startswith("peak_bytes")
            old = ref.metrics.get(metric)
            if not (is_batch or is_peak) or not _positive(old) or not _number(value):
                continue
            ratio = float(value) / float(old)
            self.memory.append({"id": ref.id, "metric": metric, "reference": old,
                                "here": value, "ratio": ratio})
            if is_batch and ratio < th.MAX_BATCH_RATIO:
                beyond.append((th.MAX_BATCH_RATIO / ratio,
                               f"max batch under the same cap {value} here, {old} on "
                               f"{self.ref_name} ({_fmt(ratio)}x, below "
                               f"{th.MAX_BATCH_RATIO:g}x)", metric, old, value, ratio))
            elif is_peak and ratio > th.PEAK_RATIO:
                beyond.append((ratio / th.PEAK_RATIO,
                               f"{metric} {_bytes(value)} here, {_bytes(old)} on "
                               f"{self.ref_name} ({_fmt(ratio)}x, above {th.PEAK_RATIO:g}x)",
                               metric, old, value, ratio))
        if not beyond:
            return
        beyond.sort(key=lambda b: (-b[0], b[2]))
        self.difference("memory", here, "difference", "; ".join(b[1] for b in beyond),
                        {b[2]: b[3] for b in beyond}, {b[2]: b[4] for b in beyond},
                        beyond[0][5], beyond[0][0])

    # ---- speed
    def speed_record(self, ref: Record, here: Record) -> None:
        old, new = ref.metrics.get("value"), here.metrics.get("value")
        if not (_positive(old) and _positive(new)):
            return
        ratio = float(old) / float(new)  # throughput here / throughput there
        self.speed.append({"id": ref.id, "precision": _precision(ref.id), "reference": old,
                           "here": new, "ratio": ratio, "unit": "ms"})
        if ratio < th.THROUGHPUT_RATIO:
            self.difference("speed", here, "difference",
                            f"throughput {_fmt(ratio)}x {self.ref_name}'s ({_fmt(new)} ms "
                            f"here, {_fmt(old)} ms there; below {th.THROUGHPUT_RATIO:g}x)",
                            {"ms": old}, {"ms": new}, ratio, th.THROUGHPUT_RATIO / ratio)

    # ---- training
    def training_record(self, ref: Record, here: Record) -> None:
        from harness.regress import compare_record

        self.curve(ref, here)
        found = [f for f in compare_record(here, ref)
                 if f.metric is not None and f.kind in ("regression", "review")]
        prefix = next((p for p in PER_DEVICE if ref.id.startswith(p)), None)
        if prefix is not None:  # Note [Per-device expectations]
            if found:
                self.per_device.setdefault(prefix, []).append(ref.id)
            return
        if not found:
            return
        first = found[0]
        parts = [_finding_text(f) for f in found]
        ratio = _ratio_of(first.old, first.new)
        self.difference("training", here, "difference",
                        "; ".join(parts) + f" (the record's rule; {self.ref_name} -> here)",
                        {f.metric: f.old for f in found}, {f.metric: f.new for f in found},
                        ratio, badness=1.0 + len(found) / 100)

    def curve(self, ref: Record, here: Record) -> None:
        a, b = ref.info.get("dut_loss"), here.info.get("dut_loss")
        if not (isinstance(a, list) and isinstance(b, list)):
            return
        parts = ref.id.split("/")
        label = " ".join(parts[2:4]) if len(parts) >= 4 else ref.id
        subject = ids.subject_of(ref.id)
        self.curves.append({"id": subject, "label": label, "reference": a, "here": b,
                            **self.convergence_numbers(subject)})

    def convergence_numbers(self, subject: str) -> dict:
        """Both devices' final-window loss, held-out accuracy (and the difference in points),
        skipped steps and oscillation ratio of one convergence check, from its records."""
        out: dict[str, Any] = {}
        for key, (criterion, metric) in CONVERGENCE_NUMBERS.items():
            rid = f"{subject}/{criterion}"
            a, b = self.reference.records.get(rid), self.here.records.get(rid)
            if a is not None and b is not None and metric in a.metrics and metric in b.metrics:
                out[key] = {"reference": a.metrics[metric], "here": b.metrics[metric]}
        accuracy = out.get("accuracy")
        if accuracy and _number(accuracy["here"]) is not None \
                and _number(accuracy["reference"]) is not None:
            out["accuracy_points"] = _number(accuracy["here"]) - _number(accuracy["reference"])
        return out

    # ---- what was not compared
    def explain_uncompared(self, common: list[str]) -> None:
        only_ref = {section_of(r) for r in set(self.reference.records) - set(common)}
        only_here = {section_of(r) for r in set(self.here.records) - set(common)}
        for section in SECTIONS:
            why = []
            if not self.compared.get(section):
                why.append(NOTHING.get(section, "no record of this section in both runs"))
            if self.skipped.get(section):
                why.append(f"{self.skipped[section]} record(s) skipped in one run or both")
            n_ref = sum(1 for r in self.reference.records if r not in self.here.records
                        and section_of(r) == section) if section in only_ref else 0
            n_here = sum(1 for r in self.here.records if r not in self.reference.records
                         and section_of(r) == section) if section in only_here else 0
            if n_ref or n_here:
                why.append(f"{n_ref} record(s) only in the reference run, {n_here} only here "
                           "(recorded under another id on the other device, e.g. its "
                           "preferred AMP dtype, or not run there: run the same selection on "
                           "both)")
            if section == "training":
                for prefix, differ in self.per_device.items():
                    why.append(f"{len(differ)} {prefix}* record(s) differ in their numbers: "
                               f"{PER_DEVICE[prefix]} (e.g. {differ[0]})")
            if why:
                self.not_compared[section] = "; ".join(why)


CONVERGENCE_NUMBERS = {"final_loss": ("loss_falls", "final_window_loss"),
                       "accuracy": ("accuracy", "accuracy"),
                       "skipped_steps": ("skipped_steps", "skipped_steps"),
                       "oscillation_ratio": ("oscillation", "oscillation_ratio")}
"""What a loss curve carries besides the two curves: name -> (the convergence check's
criterion record, its metric) (suites/amp/test_convergence.py)."""

NOTHING = {
    "ops": "no op record measured on both devices",
    "training": "no training record (amp, optim, norm, distributed) measured on both devices",
    "memory": "no memory record measured on both devices",
    "speed": "no benchmark measured on both devices: benchmarks are opt-in, run both with "
             "--run-benchmarks (--bench-runs 3 for steadier numbers)",
    "model": "no model records: run `python -m pytest -m npu --model PKG.MOD:FACTORY` on "
             "both devices (`python -m harness model` prints an inventory but stores no "
             "results)",
}


# --------------------------------------------------------------------------- helpers

def error_ratio(metric: str, reference: Any, here: Any, floor: float) -> Optional[float]:
    """``here / max(reference, floor)`` (Note [Ratio floors]); None for a value that is not
    a number, inf when only the denominator is 0."""
    a, b = _number(reference), _number(here)
    if a is None or b is None or math.isnan(a) or math.isnan(b):
        return None
    a, b = abs(a), abs(b)
    denominator = max(a, floor)
    if denominator == 0:
        return 0.0 if b == 0 else math.inf
    return b / denominator


def _floor(ref: Record, prefix: str, metric: str) -> float:
    """The ratio floor of one metric of the reference record (Note [Ratio floors])."""
    eps = _rule_floor(ref, prefix + "max_rel_err") or _rule_floor(ref, prefix + "mean_rel_err")
    if eps is None:
        eps = th.EPS.get(_op_and_dtype(ref)[1], 0.0)
    if metric in ("max_rel_err", "mean_rel_err"):
        return eps
    if metric == "rmse":
        return _rule_floor(ref, prefix + "rmse") or 0.0
    if metric == "small_abs_err":
        dtype = next((d for d, e in th.EPS.items() if e == eps), None)
        return th.SMALL_VALUE_ATOL.get(dtype or "", 0.0)
    numel = _number(ref.metrics.get(prefix + "numel")) or 1.0
    return eps / math.sqrt(max(numel, 1.0))  # err_balance


def _rule_floor(rec: Record, key: str) -> Optional[float]:
    rule = rec.rules.get(key)
    return float(rule.abs) if rule is not None and rule.abs > 0 else None


MODEL_COLUMN = "model "
"""What a model op case has where an op record has its dtype (the heat map's column)."""


def _op_and_dtype(rec: Record) -> tuple[str, str]:
    parts = rec.id.split("/")
    if parts[0] == "model" and len(parts) >= 3:
        return parts[2], f"{MODEL_COLUMN}{parts[1]}"  # the model's own column, not a dtype
    if len(parts) >= 3:
        return parts[1], parts[2]
    return rec.id, "-"


def _error_metrics(rec: Record, key: str) -> dict:
    prefix = key.rpartition(".")[0]
    prefix = f"{prefix}." if prefix else ""
    return {prefix + m: rec.metrics[prefix + m] for m in th.OP_METRICS
            if prefix + m in rec.metrics}


def _inventory_row(ref: Record, here: Record) -> dict:
    parts = ref.id.split("/")
    return {"op": parts[3] if len(parts) > 3 else ref.id, "model": parts[1],
            "reference": str(ref.status), "here": str(here.status), "id": ref.id}


def _short(ops: list, limit: int = 6) -> list[str]:
    """The aten ops of a computation, without the bookkeeping ones, at most ``limit``."""
    shown = [o for o in ops if o not in ("aten.detach", "aten.view", "aten._unsafe_view",
                                         "aten.expand", "aten.transpose")]
    return shown[:limit] + ([f"... {len(shown) - limit} more"] if len(shown) > limit else [])


def _precision(record_id: str) -> str:
    return next((p for p in record_id.split("/") if p in PRECISIONS), "-")


def _finding_text(f) -> str:
    from harness.results import Rule

    text = f"{f.metric} {_fmt(f.old)} -> {_fmt(f.new)}"
    if f.metric in ("accuracy", "ref_accuracy") and _number(f.old) is not None \
            and _number(f.new) is not None:
        text += f" ({_number(f.new) - _number(f.old):+.2f} points)"
    rule = Rule.from_json(f.rule).describe() if f.rule else ""
    return text + (f" [{rule}]" if rule else "")


def _ratio_of(old: Any, new: Any) -> Optional[float]:
    a, b = _number(old), _number(new)
    if a is None or b is None or a == 0:
        return None
    return b / a


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)
    return None


def _positive(value: Any) -> bool:
    number = _number(value)
    return number is not None and math.isfinite(number) and number > 0


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip() and not line.startswith("reproduce:"):
            return line.strip()[:160]
    return ""


def _fmt(value: Any) -> str:
    number = _number(value)
    return f"{number:.3g}" if number is not None else str(value)


def _bytes(value: Any) -> str:
    number = _number(value) or 0.0
    return f"{number / 2**20:.2f} MiB"

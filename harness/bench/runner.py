"""One benchmark from workload to record: time it, add the other runs, judge, record.

The bench test compares with the baseline itself (the plugin's per-metric comparison
would judge one number without the runs): it reads the selected baseline's record,
computes the verdict (:func:`harness.bench.stats.judge`) and records status ``slower``
(Note [One status type] in harness/ids.py) for a regression (the message names the medians, ratio, CI, p-values, rule and the
reproduce line) or ``pass`` with ``info["bench_verdict"]`` in ok / suspicious /
unreliable / improvement / not compared. Timings carry no metric rules, so the generic
comparison does not alert on noise a second time; ``info["runs"]`` holds the per-run
statistics (all ``--bench-runs`` runs), which ``--baseline record`` appends to the
stored ones.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Optional

from harness.bench.stats import (
    COMPARE_RUNS,
    BenchVerdict,
    Policy,
    baseline_mde,
    detectable_text,
    judge,
    reproduce_args,
)
from harness.bench.timing import (
    RunStat,
    backward_in_caller,
    bench_rounds,
    freed_memory_kept,
    pinned,
    run_controls,
    run_values,
)
from harness.bench.workloads import Prepared, Workload, WorkloadUnsupported
from harness.ids import Status


@dataclasses.dataclass
class BenchContext:
    """What a bench test needs besides its workload: device, baseline, the other runs."""

    device: object
    scale: str
    baseline: Optional[object] = None     # harness.results.RunResults
    baseline_name: str = ""
    child_runs: dict = dataclasses.field(default_factory=dict)
    verdicts: dict = dataclasses.field(default_factory=dict)  # record id -> BenchVerdict
    detectable_lines: dict = dataclasses.field(default_factory=dict)  # record id -> MDE text

    def runs_for(self, record_id: str, own: RunStat) -> list[dict]:
        return [*self.child_runs.get(record_id, []), own.to_json()]

    def verdict(self, record_id: str, runs: list[dict], policy: Policy
                ) -> Optional[BenchVerdict]:
        base = self.baseline.records.get(record_id) if self.baseline is not None else None
        if base is None:
            return None
        stored = base.info.get("runs")
        return judge(run_values(stored), run_values(runs), policy,
                     controls=(run_controls(stored), run_controls(runs)))

    def detectable(self, record_id: str, runs: list[dict], policy: Policy) -> dict:
        """What the baseline can detect with :data:`COMPARE_RUNS` compare runs (Note
        [Minimum detectable effect]): the stored baseline's runs when there is one, else
        this invocation's (the baseline ``--baseline record`` would write)."""
        base = self.baseline.records.get(record_id) if self.baseline is not None else None
        stored = base.info.get("runs") if base is not None else None
        source = stored if stored else runs
        found, spread, nb = baseline_mde(run_values(source), run_controls(source),
                                         COMPARE_RUNS, policy)
        return {"mde": found, "spread": spread, "baseline_runs": nb,
                "compare_runs": COMPARE_RUNS, "of": "baseline" if stored else "this run",
                "text": detectable_text(found, spread, nb, COMPARE_RUNS, policy)}

    def record(self, recorder, record_id: str, own: RunStat, *, policy: Policy,
               metrics: Optional[dict] = None, info: Optional[dict] = None,
               per_unit: Optional[tuple[float, str]] = None) -> BenchVerdict:
        """Judge this run (and its siblings) and record it (see the module docstring)."""
        runs = self.runs_for(record_id, own)
        values = run_values(runs)
        centre = statistics.median(values)
        out_metrics = {"value": centre, "runs": len(values), **(metrics or {})}
        if per_unit is not None and per_unit[1]:
            out_metrics[f"{per_unit[1]}_per_s"] = per_unit[0] * 1e3 / centre
        verdict = self.verdict(record_id, runs, policy)
        full_info = {"runs": runs, "mde": self.detectable(record_id, runs, policy),
                     **(info or {})}
        if verdict is None:
            full_info["bench_verdict"] = "not compared"
        else:
            full_info["bench_verdict"] = verdict.verdict
            full_info["verdict"] = verdict.to_json()
        summary = verdict.summary() if verdict is not None else "not compared"
        slower = verdict is not None and verdict.alerts
        recorder.outcome(record_id, Status.SLOWER if slower else Status.PASS,
                         f"benchmark regression against baseline {self.baseline_name}: "
                         f"{summary}", metrics=out_metrics, info=full_info,
                         reproduce_args=reproduce_args(len(values)))
        self.verdicts[record_id] = verdict
        self.detectable_lines[record_id] = full_info["mde"]["text"]
        return verdict

    def run(self, workload: Workload, benchmark, recorder, record_id: str):
        """Build, time and record one workload (``unsupported`` with the reason)."""
        if getattr(benchmark, "disabled", False):
            recorder.record(record_id, status="skip", message="pytest-benchmark is disabled "
                            "(--benchmark-disable, or pytest-xdist is active): nothing timed",
                            info={"bench_verdict": "skip"})
            return None
        try:
            prepared: Prepared = workload.build(self.device, self.scale)
        except WorkloadUnsupported as exc:
            benchmark.skipped = True  # pytest-benchmark: not timed on purpose (no warning)
            recorder.record(record_id, status="unsupported", message=str(exc),
                            info={"bench_verdict": "unsupported", "reason": str(exc)})
            return None
        try:
            with pinned(self.device, workload.clock) as cpu, \
                    freed_memory_kept(self.device) as kept, backward_in_caller(self.device):
                host_work = self.device.host_timed or workload.clock == "host"
                ratio = workload.kind == "ratio"
                own, flags = bench_rounds(benchmark, prepared.step, self.device,
                                          budget_s=workload.budget_s, clock=workload.clock,
                                          control=host_work,  # Note [Host control]
                                          reference=prepared.reference if ratio else None)
                metrics = {"ms": own.value}
                if ratio:
                    metrics = {"ms": own.device_ms, "reference_ms": flags.pop("reference_ms")}
            if cpu is not None:
                flags["pinned_cpu"] = cpu
            if kept:
                flags["freed_memory_kept"] = True
        finally:
            prepared.close()
        return self.record(recorder, record_id, own, policy=workload.policy, metrics=metrics,
                           info=flags,
                           per_unit=None if workload.kind == "ratio"
                           else (prepared.units, prepared.unit))

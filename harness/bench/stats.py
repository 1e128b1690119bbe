"""The statistical verdict of one benchmark: this run's process runs against the baseline's.

Note [Bench verdict]
~~~~~~~~~~~~~~~~~~~~
A benchmark's unit of evidence is a *process run*: one pytest process, whose statistic
is the median of its timed rounds (lower is better: ms per step, a time ratio).
Rounds within one process do not see between-process modes (allocation alignment, the
thread placement a process got, a neighbour on a shared runner), so the baseline keeps
the per-run statistics of several runs (``info["runs"]``, the last 10, see
:func:`harness.baselines._merge_runs`) and a compare run brings one or more
(``--bench-runs K``). Everything is judged on the log scale (a ratio is a difference):

* every value is first *adjusted for the host* where each run has a host control
  (Note [Host adjustment]); everything below is of the adjusted values.
* ``spread``: the baseline runs' robust standard deviation (1.4826 x MAD of the log
  run medians), floored at :data:`SPREAD_FLOOR` (3%): a baseline is recorded within
  minutes, and runs of the same benchmark in another hour of the same day sat 5-15%
  slower on this VM with the host control barely moved (ResNet-18 fp32: 10 baseline runs
  within 0.6%, A/A runs an hour later 1.04-1.28x). With a 1% floor that was 18 false
  alarms in 320 A/A comparisons of one N=20 measurement; with 3%, 6 (detections
  294 -> 287/320); on two other measurements 4 -> 1 and 1 -> 1 (detections 254 -> 247
  and 282 -> 274).
* ``unreliable`` (reported, never alerting): fewer than :data:`MIN_BASELINE_RUNS`
  baseline runs, or a spread above ``max_spread`` (default 5%): with that much noise
  between processes a 15% slow-down cannot be told from the noise with two runs.
* a run *violates* when its median is slower than the baseline centre by more than
  both the minimum effect and ``sigmas`` (2.5) prediction-interval spreads.
* ``regression`` only when all of: the ratio of medians is at least ``1 + min_effect``
  (default 5%, per benchmark ``min_effect=``); the one-sided t-test of the log run
  medians against the baseline (robust centre and spread, ``n_base - 1`` degrees of
  freedom) gives p < ``alpha`` (0.01), i.e. the ``1 - 2 alpha`` confidence interval of
  the ratio excludes 1 from below; at least two runs violate (PyTorch HUD's rule: one
  violation is a notice, two are a regression); and, with three or more runs, the
  Mann-Whitney U test of the run medians agrees (p < 0.05).
* ``suspicious`` (reported, never alerting): a run violates but the rest does not
  hold, typically one compare run (a second run decides: ``--bench-runs 2`` or more);
  or everything holds but the host was slower than the adjustment can vouch for: the
  runs' host control more than ``host_slow`` (25%) beyond the slowest baseline run's.
* ``improvement`` mirrors a regression (one faster run suffices; it never alerts).

False-alarm rate implied: under normally distributed log run medians, two runs both
beyond 2.5 prediction sigmas happen with probability ~(0.006 x heavier t tails)^2 <
1e-4 per comparison, and the t-test alone caps it at 1%; what is left is the
non-normal part (a process in a slow mode), which ``bench-eval`` measures
(docs/benchmarks.md).

Note [Host adjustment]
~~~~~~~~~~~~~~~~~~~~~~
A shared host has slow periods that slow every CPU benchmark of a run together (Note
[Host control] in :mod:`harness.bench.timing`), each benchmark by its own share: on this
project's VM, over 40 runs without a change, the log run median of a benchmark followed
the log host control with correlation 0.6-0.98 and a slope of 0.3 (mm, in the L2 cache)
to 1.1 (embedding backward, the DataLoader: memory traffic). Used as a guard (a slow
host withholds the alert) that noise cost a fifth of the detections; ignored, it is
false alarms. So the verdict judges values adjusted for it, the regression adjustment of
a covariate (ANCOVA; CUPED in A/B testing):

    adjusted log value = log value - slope x (log control - baseline's median log control)

``slope`` is the common within-group slope of log value on log control: each group (the
baseline runs; this invocation's runs) centred on its own medians, so a shift of the
group (the regression being looked for) does not enter it; estimated with Theil-Sen
(:func:`scipy.stats.theilslopes`, robust to a run in a slow mode of its own) and kept
within [0, :data:`MAX_HOST_SLOPE`] (a slow host does not make the DUT faster). This
invocation's runs matter: where the baseline's host hardly varied, its own runs alone
gave ResNet-18 fp32 a slope of 1.5 (the bound) and turned a 15% slow-down on a busy host
into an "improvement". (Weighting each pair of runs by how much its host differed, the
least-absolute-deviations slope, gave fewer false alarms on the same runs, 2/300
against 4/340, but far fewer detections, 196/300 against 254/320, and three benchmarks
unreliable instead of one.) It applies only when every run has a
control (baselines recorded before the control existed have none: their values are
judged as they are). The slope is only known over the host conditions the baseline
saw: when the runs' control lies more than ``host_slow`` (25%) beyond the slowest
baseline run's, a regression is only ``suspicious`` (the adjustment would extrapolate).
docs/benchmarks.md has what the adjustment did to the measured false alarms and
detections.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Optional, Sequence

DEFAULT_MIN_EFFECT = 0.05
DEFAULT_MAX_SPREAD = 0.05
DEFAULT_ALPHA = 0.01
VIOLATION_SIGMAS = 2.5
SPREAD_FLOOR = 0.03  # the least between-run spread assumed (Note [Bench verdict])
MIN_BASELINE_RUNS = 3
MWU_ALPHA = 0.05
HOST_SLOW = 0.25  # control beyond the slowest baseline run's: extrapolated (Note [Host adjustment])
MIN_SLOPE_RUNS = 2  # a group of fewer runs does not enter the slope
MAX_HOST_SLOPE = 1.5
MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution -> its standard deviation
VERDICTS = ("ok", "suspicious", "unreliable", "improvement", "regression")


@dataclasses.dataclass(frozen=True)
class Policy:
    """Thresholds of the verdict (Note [Bench verdict]); a benchmark may override them."""

    min_effect: float = DEFAULT_MIN_EFFECT
    max_spread: float = DEFAULT_MAX_SPREAD
    alpha: float = DEFAULT_ALPHA
    sigmas: float = VIOLATION_SIGMAS
    min_runs: int = MIN_BASELINE_RUNS
    host_slow: float = HOST_SLOW

    def describe(self) -> str:
        return (f"regression when ratio >= {1 + self.min_effect:g}, t-test p < {self.alpha:g} "
                f"and >= 2 runs beyond max({self.min_effect:.0%}, {self.sigmas:g} sigma); "
                f"unreliable when the baseline's between-run spread > {self.max_spread:.0%} "
                f"or it holds < {self.min_runs} runs")


@dataclasses.dataclass
class BenchVerdict:
    """The verdict of one benchmark and the numbers behind it."""

    verdict: str
    reason: str
    old_median: Optional[float] = None
    new_median: Optional[float] = None
    ratio: Optional[float] = None
    ci: Optional[tuple[float, float]] = None
    p_value: Optional[float] = None
    p_mwu: Optional[float] = None
    spread: Optional[float] = None
    n_base: int = 0
    n_new: int = 0
    violations: int = 0
    host_ratio: Optional[float] = None   # the runs' host control / the baseline's
    host_slope: Optional[float] = None   # Note [Host adjustment]; None: not adjusted
    raw_ratio: Optional[float] = None    # the ratio of medians before the adjustment
    policy: Policy = dataclasses.field(default_factory=Policy)

    @property
    def alerts(self) -> bool:
        return self.verdict == "regression"

    def summary(self) -> str:
        """One line: verdict, medians, ratio, CI, p-values, spread and run counts."""
        parts = [self.verdict]
        if self.old_median is not None and self.new_median is not None:
            parts.append(f"median {self.old_median:.4g} -> {self.new_median:.4g}")
        if self.ratio is not None and self.host_slope is not None:
            parts.append(f"host-adjusted ratio {self.ratio:.3f} (raw {self.raw_ratio:.3f}, "
                         f"slope {self.host_slope:.2f})")
        elif self.ratio is not None:
            parts.append(f"ratio {self.ratio:.3f}")
        if self.ci is not None:
            level = 1 - 2 * self.policy.alpha
            parts.append(f"{level:.0%} CI [{self.ci[0]:.3f}, {self.ci[1]:.3f}]")
        if self.p_value is not None:
            parts.append(f"t-test p={self.p_value:.2g}")
        if self.p_mwu is not None:
            parts.append(f"Mann-Whitney p={self.p_mwu:.2g}")
        if self.spread is not None:
            parts.append(f"baseline spread {self.spread:.1%}")
        if self.host_ratio is not None:
            parts.append(f"host control ratio {self.host_ratio:.3f}")
        parts.append(f"{self.n_new} run(s) vs {self.n_base} baseline run(s), "
                     f"{self.violations} violating")
        return ", ".join(parts) + f" ({self.reason})"

    def to_json(self) -> dict:
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "policy"}
        out["ci"] = list(self.ci) if self.ci else None
        out["rule"] = self.policy.describe()
        return out


def reproduce_args(runs: int) -> str:
    """What a benchmark's reproduce line adds: benchmarks are opt-in, and one process run
    is at most ``suspicious``, so at least two runs."""
    return f"--run-benchmarks --bench-runs {max(2, runs)}"


def robust_spread(logs: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation (a standard deviation robust to one outlier)."""
    if len(logs) < 2:
        return 0.0
    centre = statistics.median(logs)
    return MAD_TO_SIGMA * statistics.median(abs(x - centre) for x in logs)


Controls = tuple[Sequence[Optional[float]], Sequence[Optional[float]]]


def host_ratio(controls: Optional[Controls], min_runs: int = MIN_BASELINE_RUNS
               ) -> Optional[float]:
    """Median host control of the current runs over the baseline runs' (None when either
    side lacks them: baselines recorded before the control, the all_reduce ranks)."""
    if not controls:
        return None
    base = [c for c in controls[0] if c]
    cur = [c for c in controls[1] if c]
    if len(base) < min_runs or not cur:
        return None
    return statistics.median(cur) / statistics.median(base)


def host_slope(groups: Sequence[tuple[Sequence[float], Sequence[float]]]) -> float:
    """The common within-group Theil-Sen slope of log values on log controls (Note [Host
    adjustment]): ``groups`` of (log values, log controls), each centred on its medians."""
    from scipy import stats as sps

    xs, cs = [], []
    for values, controls in groups:
        if len(values) < MIN_SLOPE_RUNS:
            continue  # a single run's centre is itself: it says nothing about the slope
        mv, mc = statistics.median(values), statistics.median(controls)
        xs += [v - mv for v in values]
        cs += [c - mc for c in controls]
    if len(xs) < 3 or max(cs) - min(cs) < 1e-9:
        return 0.0
    slope = float(sps.theilslopes(xs, cs).slope)
    return min(max(slope, 0.0), MAX_HOST_SLOPE)


def _logs(values: Sequence[float], controls: Optional[Sequence[Optional[float]]]
          ) -> tuple[list[float], Optional[list[float]]]:
    """Log values of the usable runs, and their log controls when every one has one."""
    pairs = [(v, None if controls is None or i >= len(controls) else controls[i])
             for i, v in enumerate(values)]
    pairs = [(v, c) for v, c in pairs if v and v > 0]
    logs = [math.log(v) for v, _ in pairs]
    if controls is None or not pairs or not all(c and c > 0 for _, c in pairs):
        return logs, None
    return logs, [math.log(c) for _, c in pairs]


def judge(baseline: Sequence[float], current: Sequence[float],
          policy: Policy = Policy(), *,
          controls: Optional[Controls] = None) -> BenchVerdict:
    """The verdict of ``current`` run statistics against ``baseline`` ones (lower is better).

    Args:
        baseline: one value per baseline process run (its median ms, or a time ratio).
        current: one value per process run of this invocation.
        policy: the thresholds (Note [Bench verdict]).
        controls: the host control (ms) of each baseline and each current run, in the
            same order (None where a run has none): Note [Host adjustment].
    """
    from scipy import stats as sps

    base, base_ctl = _logs(baseline, controls[0] if controls else None)
    cur, cur_ctl = _logs(current, controls[1] if controls else None)
    out = BenchVerdict("ok", "", n_base=len(base), n_new=len(cur), policy=policy)
    if not cur:
        out.verdict, out.reason = "unreliable", "this run measured nothing usable"
        return out
    new_centre = statistics.median(cur)
    out.new_median = math.exp(new_centre)
    if len(base) < policy.min_runs:
        out.verdict = "unreliable"
        out.reason = (f"the baseline holds {len(base)} run(s), the verdict needs >= "
                      f"{policy.min_runs}: record with --bench-runs {policy.min_runs}")
        if base:
            out.old_median = math.exp(statistics.median(base))
            out.ratio = out.new_median / out.old_median
        return out
    out.old_median = math.exp(statistics.median(base))
    out.raw_ratio = out.new_median / out.old_median
    if base_ctl is not None and cur_ctl is not None:  # Note [Host adjustment]
        slope = host_slope(((base, base_ctl), (cur, cur_ctl)))
        ref = statistics.median(base_ctl)
        base = [v - slope * (c - ref) for v, c in zip(base, base_ctl)]
        cur = [v - slope * (c - ref) for v, c in zip(cur, cur_ctl)]
        out.host_slope = slope
        new_centre = statistics.median(cur)
    centre = statistics.median(base)
    raw_spread = robust_spread(base)
    spread = max(raw_spread, SPREAD_FLOOR)
    out.spread = raw_spread
    log_ratio = new_centre - centre
    out.ratio = math.exp(log_ratio)
    nb, nc = len(base), len(cur)
    se = spread * math.sqrt(1 / nc + 1 / nb)
    df = nb - 1
    t_value = log_ratio / se
    out.p_value = float(sps.t.sf(t_value, df))
    half = float(sps.t.ppf(1 - policy.alpha, df)) * se
    out.ci = (math.exp(log_ratio - half), math.exp(log_ratio + half))
    if nc >= 2:
        out.p_mwu = float(sps.mannwhitneyu(cur, base, alternative="greater").pvalue)
    bound = max(math.log1p(policy.min_effect), policy.sigmas * spread * math.sqrt(1 + 1 / nb))
    out.violations = sum(c - centre > bound for c in cur)
    faster = sum(centre - c > bound for c in cur)
    if raw_spread > policy.max_spread:
        out.verdict = "unreliable"
        out.reason = (f"the baseline's between-run spread {raw_spread:.1%} exceeds "
                      f"{policy.max_spread:.0%}: too noisy to decide (more runs or a quieter "
                      "machine)")
        return out
    big = out.ratio >= 1 + policy.min_effect
    mwu_ok = nc < 3 or (out.p_mwu is not None and out.p_mwu < MWU_ALPHA)
    out.host_ratio = host_ratio(controls, policy.min_runs)
    host_slow = (base_ctl is not None and cur_ctl is not None and statistics.median(cur_ctl)
                 > max(base_ctl) + math.log1p(policy.host_slow))  # logs: beyond the slowest
    significant = big and out.p_value < policy.alpha and out.violations >= 2 and mwu_ok
    if significant and host_slow:
        out.verdict = "suspicious"
        out.reason = (f"slower, but the host was too: its control workload ran "
                      f"{out.host_ratio - 1:.0%} slower than in the baseline runs, more than "
                      f"{policy.host_slow:.0%} beyond the slowest of them, where the host "
                      "adjustment would extrapolate; run again on a quiet host")
    elif significant:
        out.verdict, out.reason = "regression", policy.describe()
    elif big and out.violations >= 1:
        out.verdict = "suspicious"
        out.reason = ("slower beyond the bound in " + (
            "one run: a second run decides (--bench-runs 2 or more)" if nc == 1 else
            f"{out.violations} of {nc} runs, not significant"))
    elif (out.ratio <= 1 / (1 + policy.min_effect) and float(sps.t.cdf(t_value, df))
          < policy.alpha and faster >= 1):
        out.verdict, out.reason = "improvement", "faster beyond the minimum effect, significant"
    else:
        out.reason = "within noise and the minimum effect"
    return out

"""The statistical verdict of one benchmark: this run's process runs against the baseline's.

Note [Bench verdict]
~~~~~~~~~~~~~~~~~~~~
A benchmark's unit of evidence is a *process run*: one pytest process, whose statistic
is the median of its timed rounds (lower is better: ms per step, a time ratio).
Rounds within one process do not see between-process modes (allocation alignment, the
thread placement a process got, a neighbour on a shared runner), so the baseline keeps
the per-run statistics of several runs (``info["runs"]``, the last 10, see
:func:`harness.baselines._merge_runs`) and a compare run brings one or more
(``--bench-runs K``, 3 by advice). Everything is judged on the log scale (a ratio is a
difference), after the host adjustment (Note [Host adjustment]). The noise model has two
parts, which more runs treat differently:

* *run-to-run noise* ``spread``: how much one process run's median scatters. It shrinks
  with more runs. Estimated from both groups, pooled (each group around its own median,
  so the shift looked for does not enter it): the baseline's robust standard deviation
  (1.4826 x MAD, robust to a run in a slow mode) and this invocation's standard
  deviation (so a compare made on a noisier host widens its own interval), floored at
  :data:`SPREAD_FLOOR` (0.5%). ``nb + nc - 2`` degrees of freedom.
* *drift between sessions*: a baseline is recorded within minutes; runs of the same
  benchmark hours later sat a few percent away with the host control barely moved. It
  does not shrink with more runs, so it is not noise to average but a *margin*: the
  ``min_effect`` (default 5%, per benchmark). The test is one-sided against the margin,
  H0: ratio <= 1 + min_effect, so a drift within the margin alerts with probability
  <= ``alpha`` however many runs there are. (Until issue 38 the drift was a 3% floor
  on the spread, which set the per-run bound at 2.5 x 3% = 8% whatever the benchmark's
  own noise: an 8% slow-down was found 2 times in 9 on benchmarks whose runs scatter
  0.5%.)

The verdict:

* ``unreliable`` (reported, never alerting): fewer than :data:`MIN_BASELINE_RUNS`
  baseline runs, or a baseline spread above ``max_spread`` (5%), unless the slow-down is
  a regression beyond the compare's own minimum detectable effect (Note [A slow-down
  beyond the noise]).
* ``regression`` when all of: the one-sided t-test of the log ratio of medians against
  the margin, ``t = (log ratio - log(1 + min_effect)) / (spread x sqrt(1/nb + 1/nc))``,
  gives p < ``alpha`` (0.01); at least two runs are slower than the baseline centre by
  more than the margin (PyTorch HUD's rule: one violation is a notice, two are a
  regression); and, with three or more runs, the Mann-Whitney U test of the run medians
  agrees (p < 0.05). The ratio of medians is then beyond the margin by the test's
  interval.
* ``suspicious`` (reported, never alerting): a run beyond the margin but the rest does
  not hold (typically one compare run: a second run decides); or everything holds but
  the runs' host control is more than ``host_slow`` (25%) beyond the slowest baseline
  run's (Note [Host adjustment]).
* ``improvement`` mirrors a regression (one faster run suffices; it never alerts).

Note [Minimum detectable effect]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Every verdict (and every recorded baseline) states the smallest slow-down the verdict
finds with probability :data:`POWER` (90%) at its false-alarm rate ``alpha``, from the
benchmark's own spread and the run counts (:func:`mde`):

    log(1 + MDE) = log(1 + min_effect) + (t(1 - alpha) + t(POWER)) x spread x sqrt(1/nb + 1/nc)

(t quantiles at ``nb + nc - 2`` degrees of freedom), and at least the effect at which
two runs in ``nc`` clear the margin with that probability. With fewer runs than the
Mann-Whitney test needs to reach p < 0.05 nothing is detectable (None). A benchmark whose
MDE exceeds :data:`TARGET_EFFECT` (15%) says so, and what would bring it there
(:func:`detectable_text`): more compare runs, where they suffice, else a quieter machine
or a bigger workload (run-to-run noise of a short step). ``bench-eval`` measures what the
formula promises (docs/benchmarks.md).

Note [A slow-down beyond the noise]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A baseline whose runs scatter more than ``max_spread`` cannot tell a few percent from its
noise, so its compares are ``unreliable`` and never alert. But a slow-down far beyond
that noise is not in doubt: on an AMD EPYC Zen 3 VM, the fp32 training step's baseline
scattered 5.9% and a step 74% slower (4 of 4 runs beyond the margin, t-test p = 4e-5,
Mann-Whitney p = 0.014, 98% CI [1.47, 2.06]) was reported ``unreliable``, a miss of the
parity fault ``bench.fp32_step_slow_60``. So a noisy baseline still gives ``regression``
where every condition of one holds *and* the ratio exceeds the compare's own MDE (from
the pooled spread of both sides and their run counts): there the log ratio clears the
margin by ``t(1 - alpha) + t(POWER)`` standard errors, not only ``t(1 - alpha)``, so
noise alone reaches it less often than a regression's ``alpha`` allows. Anything less
stays ``unreliable``; improvements stay ``unreliable`` too.

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
import functools
import math
import statistics
from typing import Optional, Sequence

DEFAULT_MIN_EFFECT = 0.05  # the margin of drift between sessions (Note [Bench verdict])
DEFAULT_MAX_SPREAD = 0.05
DEFAULT_ALPHA = 0.01
SPREAD_FLOOR = 0.005  # the least run-to-run spread assumed (Note [Bench verdict])
MIN_BASELINE_RUNS = 3
MIN_VIOLATIONS = 2
MWU_ALPHA = 0.05
HOST_SLOW = 0.25  # control beyond the slowest baseline run's: extrapolated (Note [Host adjustment])
MIN_SLOPE_RUNS = 2  # a group of fewer runs does not enter the slope
MAX_HOST_SLOPE = 1.5
MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution -> its standard deviation
POWER = 0.90  # Note [Minimum detectable effect]
TARGET_EFFECT = 0.15  # a benchmark that cannot see this says so
COMPARE_RUNS = 3  # the advised --bench-runs of a compare: what a baseline's MDE assumes
MAX_ADVISED_RUNS = 10
BASELINE_RUNS_KEPT = 10  # harness.baselines.DEFAULT_KEEP_RUNS (not imported: no torch here)
VERDICTS = ("ok", "suspicious", "unreliable", "improvement", "regression")


@dataclasses.dataclass(frozen=True)
class Policy:
    """Thresholds of the verdict (Note [Bench verdict]); a benchmark may override them."""

    min_effect: float = DEFAULT_MIN_EFFECT
    max_spread: float = DEFAULT_MAX_SPREAD
    alpha: float = DEFAULT_ALPHA
    min_runs: int = MIN_BASELINE_RUNS
    host_slow: float = HOST_SLOW

    def describe(self) -> str:
        return (f"regression when the ratio of medians exceeds {1 + self.min_effect:g} "
                f"(the drift margin) at t-test p < {self.alpha:g}, with >= {MIN_VIOLATIONS} "
                f"runs beyond it; unreliable when the baseline's between-run spread > "
                f"{self.max_spread:.0%} (unless the ratio is beyond its MDE) or it holds "
                f"< {self.min_runs} runs")


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
    mde: Optional[float] = None          # Note [Minimum detectable effect]; None: none
    mde_runs: int = 0                    # the compare runs the MDE assumes
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
        if self.n_base:
            parts.append(self.detectable())
        return ", ".join(parts) + f" ({self.reason})"

    def detectable(self) -> str:
        """``detects >= 6.1% (MDE)``, or why it cannot see a 15% slow-down and the fix."""
        return detectable_text(self.mde, self.spread, self.n_base, self.mde_runs, self.policy)

    def to_json(self) -> dict:
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "policy"}
        out["ci"] = list(self.ci) if self.ci else None
        out["rule"] = self.policy.describe()
        out["detectable"] = self.detectable() if self.n_base else None
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
    spread, df = pooled_spread(base, cur)
    out.spread = raw_spread
    log_ratio = new_centre - centre
    out.ratio = math.exp(log_ratio)
    nb, nc = len(base), len(cur)
    margin = math.log1p(policy.min_effect)
    se = spread * math.sqrt(1 / nc + 1 / nb)
    t_value = (log_ratio - margin) / se
    out.p_value = float(sps.t.sf(t_value, df))
    half = float(sps.t.ppf(1 - policy.alpha, df)) * se
    out.ci = (math.exp(log_ratio - half), math.exp(log_ratio + half))
    out.mde, out.mde_runs = mde(spread, nb, nc, policy), nc
    if nc >= 2:
        out.p_mwu = float(sps.mannwhitneyu(cur, base, alternative="greater").pvalue)
    out.violations = sum(c - centre > margin for c in cur)
    faster = sum(centre - c > margin for c in cur)
    big = out.ratio > 1 + policy.min_effect
    mwu_ok = nc < 3 or (out.p_mwu is not None and out.p_mwu < MWU_ALPHA)
    significant = (out.p_value < policy.alpha and out.violations >= MIN_VIOLATIONS
                   and mwu_ok)
    if raw_spread > policy.max_spread and not (  # Note [A slow-down beyond the noise]
            significant and out.mde is not None and out.ratio > 1 + out.mde):
        out.verdict = "unreliable"
        out.reason = (f"the baseline's between-run spread {raw_spread:.1%} exceeds "
                      f"{policy.max_spread:.0%}: too noisy to decide (more runs or a quieter "
                      "machine)")
        return out
    out.host_ratio = host_ratio(controls, policy.min_runs)
    host_slow = (base_ctl is not None and cur_ctl is not None and statistics.median(cur_ctl)
                 > max(base_ctl) + math.log1p(policy.host_slow))  # logs: beyond the slowest
    if significant and host_slow:
        out.verdict = "suspicious"
        out.reason = (f"slower, but the host was too: its control workload ran "
                      f"{out.host_ratio - 1:.0%} slower than in the baseline runs, more than "
                      f"{policy.host_slow:.0%} beyond the slowest of them, where the host "
                      "adjustment would extrapolate; run again on a quiet host")
    elif significant:
        out.verdict, out.reason = "regression", policy.describe()
        if raw_spread > policy.max_spread:
            out.reason += (f"; the baseline's spread {raw_spread:.1%} is above "
                           f"{policy.max_spread:.0%}, but the ratio is beyond what that noise "
                           f"hides (MDE {out.mde:.1%})")
    elif big and out.violations >= 1:
        out.verdict = "suspicious"
        out.reason = ("slower beyond the margin in " + (
            "one run: a second run decides (--bench-runs 2 or more)" if nc == 1 else
            f"{out.violations} of {nc} runs, not significant"))
    elif (float(sps.t.cdf((log_ratio + margin) / se, df)) < policy.alpha and faster >= 1):
        out.verdict, out.reason = "improvement", "faster beyond the margin, significant"
    else:
        out.reason = "within noise and the drift margin"
    return out


def pooled_spread(base: Sequence[float], cur: Sequence[float]) -> tuple[float, int]:
    """The run-to-run spread of Note [Bench verdict] and its degrees of freedom: the
    baseline's robust spread and this invocation's standard deviation (each group around
    its own centre), pooled, floored at :data:`SPREAD_FLOOR`."""
    nb, nc = len(base), len(cur)
    s_base = max(robust_spread(base), SPREAD_FLOOR)
    if nc < 2:
        return s_base, max(nb - 1, 1)
    s_cur = max(statistics.stdev(cur), SPREAD_FLOOR)
    pooled = math.sqrt(((nb - 1) * s_base ** 2 + (nc - 1) * s_cur ** 2) / (nb + nc - 2))
    return pooled, nb + nc - 2


def mwu_can_reach(nb: int, nc: int) -> bool:
    """Whether Mann-Whitney U of ``nc`` runs against ``nb`` can give p < MWU_ALPHA at
    all (its smallest p-value, every run slower than every baseline run, is 1/C(nb+nc,nc))."""
    return nc < 3 or 1 / math.comb(nb + nc, nc) < MWU_ALPHA


def mde(spread: float, nb: int, nc: int, policy: Policy = Policy()) -> Optional[float]:
    """The minimum detectable slow-down of Note [Minimum detectable effect] (a fraction,
    0.061 for 6.1%); None when these run counts cannot give a regression at all."""
    if nb < policy.min_runs or nc < MIN_VIOLATIONS or not mwu_can_reach(nb, nc):
        return None
    s = max(spread, SPREAD_FLOOR)
    df = max(nb + nc - 2, 1)
    margin = math.log1p(policy.min_effect)
    test = (_t_quantile(1 - policy.alpha, df) + _t_quantile(POWER, df)) * s \
        * math.sqrt(1 / nb + 1 / nc)
    # two of nc runs beyond the margin with probability POWER: each with probability q
    q = _binomial_share(nc, MIN_VIOLATIONS, POWER)
    runs = _t_quantile(q, 10 ** 6) * s * math.sqrt(1 + 1 / nb)  # a normal quantile
    return math.expm1(margin + max(test, runs))


@functools.lru_cache(maxsize=256)
def _t_quantile(q: float, df: int) -> float:
    from scipy import stats as sps

    return float(sps.t.ppf(q, df))


@functools.lru_cache(maxsize=64)
def _binomial_share(n: int, k: int, power: float) -> float:
    """The per-run probability q with P(at least k of n runs) = power."""
    from scipy import optimize
    from scipy import stats as sps

    return float(optimize.brentq(lambda q: sps.binom.sf(k - 1, n, q) - power, 1e-9,
                                 1 - 1e-12))


def runs_for(spread: float, nb: int, effect: float, policy: Policy = Policy(),
             limit: int = MAX_ADVISED_RUNS) -> Optional[int]:
    """The fewest compare runs whose MDE is within ``effect`` (None: more than ``limit``)."""
    for nc in range(MIN_VIOLATIONS, limit + 1):
        found = mde(spread, nb, nc, policy)
        if found is not None and found <= effect:
            return nc
    return None


def detectable_text(found: Optional[float], spread: Optional[float], nb: int, nc: int,
                    policy: Policy = Policy()) -> str:
    """What a benchmark can detect, in words (Note [Minimum detectable effect])."""
    if found is not None and found <= TARGET_EFFECT:
        return f"detects >= {found:.1%} (MDE, {nc} runs vs {nb})"
    head = ("detects nothing" if found is None else f"detects only >= {found:.1%}") + \
        f" with {nc} run(s) vs {nb}: too noisy for {TARGET_EFFECT:.0%}"
    if nb < policy.min_runs:
        return f"{head}; record >= {policy.min_runs} baseline runs"
    s = max(spread or 0.0, SPREAD_FLOOR)
    needed = runs_for(s, nb, TARGET_EFFECT, policy)
    if needed is not None:
        return f"{head}; --bench-runs {needed} would reach it"
    full = runs_for(s, BASELINE_RUNS_KEPT, TARGET_EFFECT, policy)
    if nb < BASELINE_RUNS_KEPT and full is not None:
        return (f"{head}; a baseline of {BASELINE_RUNS_KEPT} runs (record again: --baseline "
                f"record --bench-runs {BASELINE_RUNS_KEPT - nb}) and --bench-runs {full} "
                "would reach it")
    return (f"{head}; its runs scatter {s:.1%}: a bigger workload (longer rounds) or a "
            "quieter machine would fix it")


def baseline_mde(values: Sequence[float], controls: Optional[Sequence[Optional[float]]] = None,
                 nc: int = COMPARE_RUNS, policy: Policy = Policy()
                 ) -> tuple[Optional[float], float, int]:
    """What a baseline of these runs will detect with ``nc`` compare runs: (MDE, its
    spread, its run count), host-adjusted within its runs like the verdict."""
    logs, ctl = _logs(values, controls)
    if ctl is not None and len(logs) >= MIN_SLOPE_RUNS:
        slope = host_slope(((logs, ctl),))
        ref = statistics.median(ctl)
        logs = [v - slope * (c - ref) for v, c in zip(logs, ctl)]
    spread = robust_spread(logs)
    # the compare's own spread is unknown: assume the baseline's
    found = mde(max(spread, SPREAD_FLOOR), len(logs), nc, policy)
    return found, spread, len(logs)

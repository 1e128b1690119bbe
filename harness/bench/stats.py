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

* ``spread``: the baseline runs' robust standard deviation (1.4826 x MAD of the log
  run medians), floored at :data:`SPREAD_FLOOR` so three near-identical baseline runs
  do not make every wobble significant.
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
  or everything holds but the host itself was slow: the median of the runs' host
  control (Note [Host control] in :mod:`harness.bench.timing`) is slower than the
  baseline runs' by at least ``host_slow`` (20%). A busy host slows both; a fault or a
  slower kernel in the DUT slows the control a little (up to 8% measured, through the
  caches it leaves), hence 20% and not the minimum effect.
* ``improvement`` mirrors a regression (one faster run suffices; it never alerts).

False-alarm rate implied: under normally distributed log run medians, two runs both
beyond 2.5 prediction sigmas happen with probability ~(0.006 x heavier t tails)^2 <
1e-4 per comparison, and the t-test alone caps it at 1%; what is left is the
non-normal part (a process in a slow mode), which ``bench-eval`` measures
(docs/benchmarks.md).
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
SPREAD_FLOOR = 0.01
MIN_BASELINE_RUNS = 3
MWU_ALPHA = 0.05
HOST_SLOW = 0.20  # the host control this much slower: a busy host (Note [Host control])
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
    policy: Policy = dataclasses.field(default_factory=Policy)

    @property
    def alerts(self) -> bool:
        return self.verdict == "regression"

    def summary(self) -> str:
        """One line: verdict, medians, ratio, CI, p-values, spread and run counts."""
        parts = [self.verdict]
        if self.old_median is not None and self.new_median is not None:
            parts.append(f"median {self.old_median:.4g} -> {self.new_median:.4g}")
        if self.ratio is not None:
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


def robust_spread(logs: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation (a standard deviation robust to one outlier)."""
    if len(logs) < 2:
        return 0.0
    centre = statistics.median(logs)
    return MAD_TO_SIGMA * statistics.median(abs(x - centre) for x in logs)


def host_ratio(controls: Optional[tuple[Sequence[Optional[float]],
                                          Sequence[Optional[float]]]],
               min_runs: int = MIN_BASELINE_RUNS) -> Optional[float]:
    """Median host control of the current runs over the baseline runs' (None when either
    side lacks them: baselines recorded before the control, the all_reduce ranks)."""
    if not controls:
        return None
    base = [c for c in controls[0] if c]
    cur = [c for c in controls[1] if c]
    if len(base) < min_runs or not cur:
        return None
    return statistics.median(cur) / statistics.median(base)


def judge(baseline: Sequence[float], current: Sequence[float],
          policy: Policy = Policy(), *,
          controls: Optional[tuple[Sequence[Optional[float]],
                                   Sequence[Optional[float]]]] = None) -> BenchVerdict:
    """The verdict of ``current`` run statistics against ``baseline`` ones (lower is better).

    Args:
        baseline: one value per baseline process run (its median ms, or a time ratio).
        current: one value per process run of this invocation.
        policy: the thresholds (Note [Bench verdict]).
        controls: the host control (ms) of each baseline and each current run, in the
            same order (None where a run has none): the guard of Note [Bench verdict].
    """
    from scipy import stats as sps

    base = [math.log(v) for v in baseline if v and v > 0]
    cur = [math.log(v) for v in current if v and v > 0]
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
    centre = statistics.median(base)
    raw_spread = robust_spread(base)
    spread = max(raw_spread, SPREAD_FLOOR)
    out.old_median, out.spread = math.exp(centre), raw_spread
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
    host_slow = out.host_ratio is not None and out.host_ratio >= 1 + policy.host_slow
    significant = big and out.p_value < policy.alpha and out.violations >= 2 and mwu_ok
    if significant and host_slow:
        out.verdict = "suspicious"
        out.reason = (f"slower, but so was the host: its control workload ran "
                      f"{out.host_ratio - 1:.0%} slower than in the baseline runs (a busy "
                      "host, not the DUT); run again on a quiet host")
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

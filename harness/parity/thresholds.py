"""The parity thresholds, as data with their sources (one place; :mod:`harness.parity.compare`
reads them and the report prints them).

Note [Three-way error ratios]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
An op record stores this device's error against an up-cast CPU reference (fp16/bf16 ->
fp32, fp32 -> fp64). Two devices' records of the same check measured the same inputs
against the same kind of reference, so the ratio of their errors says whether this device
is less accurate than the reference device on that op: Ascend msprobe's "benchmark
method" of ``api_precision_compare`` (NPU error / GPU error, each against a high-precision
CPU run). Its judgement per ratio: ``<= 1`` pass, ``1 .. 2`` warning, ``> 2`` error for
RMSE, mean relative error, small-value error and error balance; ``<= 1`` pass, ``1 .. 10``
warning, ``> 10`` error for the maximum relative error (one element's rounding moves a
maximum far more than a mean). An *error* is a parity difference; a *warning* is shown
(heat map, ratio table) but does not change the verdict, as in msprobe, where the API's
result is "warning" and not "error".

msprobe leaves the error balance out of the API's result "for now"; here it counts, since
every ratio has a floor (below): the balance of a correctly rounding kernel is noise
around zero, and without the floor the ratio of two noises would decide.

Note [Ratio floors]
~~~~~~~~~~~~~~~~~~~
A reference device that computes an op exactly (error 0) would make any rounding here an
infinite ratio. So every denominator is at least a floor, the one the op checks themselves
use (Note [Reference error floor] in :mod:`harness.compare`): one machine epsilon of the
dtype for relative errors, the record's own RMSE rule floor (epsilon x the reference
output's RMS), msprobe's small-value tolerance for small-value errors, and
``eps / sqrt(n)`` for the error balance. An error below its floor on both devices is a
ratio of at most 1: parity.
"""

from __future__ import annotations

MSPROBE_SOURCE = ("Ascend mstt, msprobe: debug/accuracy_tools/msprobe/docs/"
                  "07.accuracy_checker_PyTorch.md, section 5 (api_precision_compare_details: "
                  "the benchmark method's ratios NPU error / GPU error against a CPU "
                  "high-precision run); https://gitee.com/ascend/mstt")

OP_METRICS: dict[str, dict] = {
    "rmse": {"warning": 1.0, "error": 2.0, "source": MSPROBE_SOURCE + ": RMSE ratio"},
    "max_rel_err": {"warning": 1.0, "error": 10.0,
                    "source": MSPROBE_SOURCE + ": maximum relative error ratio"},
    "mean_rel_err": {"warning": 1.0, "error": 2.0,
                     "source": MSPROBE_SOURCE + ": mean relative error ratio"},
    "small_abs_err": {"warning": 1.0, "error": 2.0,
                      "source": MSPROBE_SOURCE + ": small-value error ratio"},
    "err_balance": {"warning": 1.0, "error": 2.0,
                    "source": MSPROBE_SOURCE + ": error balance ratio (msprobe reports it "
                              "without deciding with it; here it decides, with the floor "
                              "eps/sqrt(n): Note [Three-way error ratios])"},
}
"""Per error metric of an op record: ratio (here / reference device) above ``warning`` is a
warning, above ``error`` an error (Note [Three-way error ratios])."""

EPS: dict[str, float] = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10,
                         "bfloat16": 2.0**-7}
"""Machine epsilon per dtype: the floor of relative errors (Note [Ratio floors]). The same
numbers as :data:`harness.dtypes.EPS`, repeated so that comparing two stored runs never
imports torch (tests/test_parity.py checks they agree)."""

SMALL_VALUE_ATOL: dict[str, float] = {"float16": 1e-5, "bfloat16": 1e-5, "float32": 1e-9,
                                      "float64": 1e-18}
"""msprobe's small-value absolute tolerance per dtype: the floor of small-value errors (the
``small_value_atol`` of :data:`harness.compare.DTYPE_LIMITS`; checked equal by the tests)."""

MAX_BATCH_RATIO = 0.9
"""Memory: a max batch under the same cap below 0.9x the reference device's is a difference."""

PEAK_RATIO = 1.2
"""Memory: a peak (bytes allocated by one step) above 1.2x the reference device's is a
difference."""

THROUGHPUT_RATIO = 0.8
"""Speed: a benchmark whose throughput here is below 0.8x the reference device's (at the same
batch size and precision: the same record id) is a difference."""

MEMORY_SOURCE = (
    "this suite: the max batch is found by bisection to one sample under the same cap "
    "(memory/oom_threshold, info.cap_bytes), and allocators round differently (the CPU "
    "tracker counts bytes, caching allocators 512-byte blocks; a clean SimNPU step peaked "
    "at 0.78x the CPU's, its max batch 1.30x); a batch 10% smaller already changes a recipe "
    "tuned on the reference device (global batch, learning-rate scaling, accumulation "
    "steps), a peak 20% higher is the smallest gap not explained by the allocator's rounding")
SPEED_SOURCE = (
    "this suite: the two devices' benchmarks are recorded on different hosts at different "
    "times, and on one shared VM the same benchmark moved 5-15% between hours with nothing "
    "changed (Note [Bench verdict] in harness/bench/stats.py); a throughput gap under 20% "
    "cannot be told from that")
TRAINING_SOURCE = (
    "each record's own baseline rule (harness.results.Rule), the change its check allows "
    "between two runs: held-out accuracy 2 points, final-loss relative difference 2x above "
    "0.03, skipped steps 1.5x or 2 steps, oscillation ratio 1.5x above 0.3, optimizer-state "
    "and BatchNorm dtypes equal, BatchNorm errors 4x above their floor; a status the "
    "reference passes and this device does not (Note [Review or regression] in "
    "harness/regress.py)")


def as_data() -> dict:
    """Every threshold with its source: what :attr:`harness.parity.model.Parity.thresholds`
    holds, for the report."""
    return {
        "ops": {name: dict(limits) for name, limits in OP_METRICS.items()},
        "ops_floors": {"relative errors": {"value": "eps of the dtype", "eps": dict(EPS),
                                           "source": "Note [Reference error floor] in "
                                                     "harness/compare.py"},
                       "rmse": {"value": "the record's rmse rule floor (eps x RMS of the "
                                         "reference output)",
                                "source": "Note [Reference error floor] in harness/compare.py"},
                       "small_abs_err": {"value": dict(SMALL_VALUE_ATOL),
                                         "source": MSPROBE_SOURCE + ", section 4.2"},
                       "err_balance": {"value": "eps / sqrt(numel)",
                                       "source": "Note [Error balance] in harness/compare.py"}},
        "memory": {"max_batch_ratio": {"below": MAX_BATCH_RATIO, "source": MEMORY_SOURCE},
                   "peak_ratio": {"above": PEAK_RATIO, "source": MEMORY_SOURCE}},
        "speed": {"throughput_ratio": {"below": THROUGHPUT_RATIO, "source": SPEED_SOURCE}},
        "training": {"record rules": {"value": "per record", "source": TRAINING_SOURCE}},
    }


def judge_ratio(metric: str, ratio: float) -> str:
    """``"pass"``, ``"warning"`` or ``"error"`` for one op metric's ratio (Note [Three-way
    error ratios])."""
    limits = OP_METRICS[metric]
    if ratio > limits["error"]:
        return "error"
    if ratio > limits["warning"]:
        return "warning"
    return "pass"

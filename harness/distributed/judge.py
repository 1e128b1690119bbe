"""Verdicts of the distributed family: every rank's returned values -> one record.

Plain functions over plain values (the ranks' JSON), so the judgement is testable
without launching anything. Each ``judge_*`` returns a :class:`DistVerdict`, which
:func:`record_verdict` records as is.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Optional

from harness.results import Rule, equal, lower

# Largest allowed max|DUT - reference| / max|reference| for gradients and parameters,
# per dtype the DDP model trains in (fp64 reference on the full batch). Float32 and
# float64: a few hundred ulps of accumulated rounding over 5 steps; autocast dtypes: the
# reduced-precision matmuls (measured ~6e-3 for bfloat16 on the CPU, 3e-2 allowed).
DDP_TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-2, "bfloat16": 3e-2}


@dataclasses.dataclass
class DistVerdict:
    status: str  # pass | fail | error (the ranks disagree on what happened) | unsupported
    metrics: dict[str, Any]
    rules: dict[str, Rule]
    message: str = ""
    info: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, problems: list[str], metrics: dict[str, Any], rules: dict[str, Rule],
           info: Optional[dict[str, Any]] = None) -> DistVerdict:
        """``pass`` when nothing is wrong, else ``fail`` saying every problem."""
        return cls("fail" if problems else "pass", metrics, rules, "; ".join(problems),
                   dict(info or {}))


def record_error(results, record_id: str, message: str) -> None:
    """Record that a check could not measure (``error``), with the reproduce line
    (``results.outcome`` adds it)."""
    results.outcome(record_id, "error", message)


def record_problem(results, record_id: str, outcome) -> bool:
    """Record a launch problem (rank exception, hang) as an error; True when there was one.

    Every rank raising ``Unsupported`` (the stack lacks a feature the check needs, Note
    [Missing features of older stacks] in harness/device.py) is ``unsupported`` instead.
    """
    if outcome.ok:
        return False
    refused = {error.message for error in outcome.errors.values() if error.type == "Unsupported"}
    if refused and len(outcome.errors) == outcome.world_size and not outcome.hung and \
            all(error.type == "Unsupported" for error in outcome.errors.values()):
        reason = sorted(refused)[0]
        results.record(record_id, status="unsupported", message=reason, info={"reason": reason})
        return True
    record_error(results, record_id, outcome.problem())
    return True


def record_verdict(results, record_id: str, verdict: DistVerdict) -> None:
    """Record a verdict: pass/fail through ``results.check`` (a failure's message ends
    with the reproduce command), an error through :func:`record_error`."""
    if verdict.status in ("pass", "fail"):
        results.check(record_id, verdict.status == "pass", verdict.message,
                      metrics=verdict.metrics, rules=verdict.rules, info=verdict.info)
    elif verdict.status == "error":
        record_error(results, record_id, verdict.message)
    else:
        results.record(record_id, status=verdict.status, metrics=verdict.metrics,
                       rules=verdict.rules, info=verdict.info, message=verdict.message)


def _worst(values: dict[int, dict], key: str) -> tuple[float, Optional[int], Optional[int]]:
    """(max over ranks and steps of values[rank][key], rank, step) for a per-step list."""
    worst, where_rank, where_step = 0.0, None, None
    for rank, value in sorted(values.items()):
        series = value.get(key, [])
        series = series if isinstance(series, list) else [series]
        for step, err in enumerate(series):
            err = float("inf") if err is None else float(err)
            if math.isnan(err) or err > worst:
                worst, where_rank, where_step = (float("inf") if math.isnan(err) else err,
                                                 rank, step)
    return worst, where_rank, where_step


def _disagreeing_steps(values: dict[int, dict], key: str = "param_hash") -> list[int]:
    """Steps after which the ranks that ran them hold different parameters."""
    longest = max(len(v.get(key, [])) for v in values.values())
    bad = []
    for step in range(longest):
        seen = {v[key][step] for v in values.values() if step < len(v.get(key, []))}
        if len(seen) > 1:
            bad.append(step)
    return bad


def judge_ddp(values: dict[int, dict], *, dtype: str, variant: str, steps: int,
              world_size: int) -> DistVerdict:
    """DDP vs single process: gradients, parameters, bit-identical ranks, variant extras."""
    tol = DDP_TOLERANCE[dtype]
    grad, grad_rank, grad_step = _worst(values, "grad_err")
    param, param_rank, param_step = _worst(values, "param_err")
    final, final_rank, _ = _worst(values, "final_param_err")
    disagree = _disagreeing_steps(values)
    final_hashes = {v.get("final_hash") for v in values.values()}
    problems = []
    if grad > tol:
        problems.append(f"gradients differ from one process on the full batch: max "
                        f"normalised error {grad:.3g} > {tol:g} allowed ({dtype}), rank "
                        f"{grad_rank}, step {grad_step}")
    if max(param, final) > tol:
        problems.append(f"parameters differ from the reference: max normalised error "
                        f"{max(param, final):.3g} > {tol:g} (rank {param_rank if param >= final else final_rank}, "
                        f"step {param_step if param >= final else 'final'})")
    if disagree or len(final_hashes) > 1:
        problems.append(f"ranks hold different parameters after steps {disagree}"
                        + (" and after training" if len(final_hashes) > 1 else "")
                        + " (must be bit-identical)")
    expected_steps = {r: (steps - 2 + r if variant == "join" else steps)
                      for r in range(world_size)}
    ran = {r: v.get("steps_run") for r, v in values.items()}
    if ran != expected_steps:
        problems.append(f"steps run per rank {ran}, expected {expected_steps}")
    unused = max(float(v.get("unused_grad_max", 0.0)) for v in values.values())
    if unused != 0.0:
        problems.append(f"the unused parameter got a gradient (max |g| {unused:.3g}); "
                        "it must stay None/zero")
    metrics = {"grad_err": grad, "param_err": max(param, final),
               "ranks_disagree_steps": len(disagree) + (len(final_hashes) > 1),
               "unused_grad_max": unused}
    floor = tol / 10
    rules = {"grad_err": lower(rel=10.0, abs=floor), "param_err": lower(rel=10.0, abs=floor),
             "ranks_disagree_steps": equal(0), "unused_grad_max": equal(0)}
    if variant == "rank_init":  # Note [Rank-different init] in harness/distributed/checks.py
        constructed, constructed_rank, _ = _worst(values, "constructed_err")
        seeds_differ = len({v.get("init_hash") for v in values.values()}) == len(values)
        if constructed != 0.0:
            problems.insert(0, f"after DDP's construction rank {constructed_rank}'s parameters "
                               f"differ from rank 0's initial ones (max normalised error "
                               f"{constructed:.3g}; must be 0): DDP did not broadcast rank 0's "
                               "parameters")
        if not seeds_differ:
            problems.append("the ranks built identical models before DDP, so this check "
                            "could not see a missing broadcast (each rank must seed its own)")
        metrics.update(constructed_err=constructed, seeds_differ=seeds_differ)
        rules.update(constructed_err=equal(0), seeds_differ=equal())
    return DistVerdict.of(problems, metrics, rules, info={
        "grad_err_per_step": {r: v.get("grad_err") for r, v in values.items()}})


def _amp_common(values: dict[int, dict], grad_values: dict[int, dict]):
    """What every DDP + GradScaler judgement asks: gradients (of ``grad_values``) and
    parameters within the autocast tolerance of fp64, the ranks' parameters and scales in
    agreement. ``(amp_dtype, tol, problems, metrics, rules, scales)``."""
    amp_dtype = next(iter(values.values()))["amp_dtype"]
    tol = DDP_TOLERANCE[amp_dtype]
    grad, grad_rank, grad_step = _worst(grad_values, "grad_err")
    param, _, _ = _worst(values, "param_err")
    disagree = _disagreeing_steps(values)
    scales = {tuple(v["scale"]) for v in values.values()}
    problems = []
    if grad > tol:
        problems.append(f"unscaled gradients differ from fp64 full-batch gradients: max "
                        f"normalised error {grad:.3g} > {tol:g} ({amp_dtype} autocast), "
                        f"rank {grad_rank}, step {grad_step}")
    if param > tol:
        problems.append(f"parameters differ from the reference: {param:.3g} > {tol:g}")
    if disagree:
        problems.append(f"ranks hold different parameters after steps {disagree}")
    if len(scales) > 1:
        problems.append(f"ranks' GradScaler scales differ: {sorted(scales)}")
    metrics = {"grad_err": grad, "param_err": param, "ranks_disagree_steps": len(disagree)}
    rules = {"grad_err": lower(rel=4.0, abs=tol / 10), "param_err": lower(rel=4.0, abs=tol / 10),
             "ranks_disagree_steps": equal(0)}
    return amp_dtype, tol, problems, metrics, rules, scales


def judge_amp(values: dict[int, dict]) -> tuple[str, DistVerdict]:
    """DDP + autocast + GradScaler vs fp64 full batch; the ranks' scales must agree."""
    amp_dtype, _, problems, metrics, rules, scales = _amp_common(values, values)
    skipped = max(int(v["skipped_steps"]) for v in values.values())
    if skipped:
        problems.append(f"{skipped} steps skipped for inf/NaN gradients (none expected: "
                        "the loss is small and the initial scale 2^10)")
    metrics["skipped_steps"], rules["skipped_steps"] = skipped, equal(0)
    return amp_dtype, DistVerdict.of(problems, metrics, rules, info={"scale": sorted(scales)})


def judge_amp_found_inf(values: dict[int, dict], inf_step: int) -> tuple[str, DistVerdict]:
    """One rank's loss overflowed at ``inf_step`` (Note [found_inf across ranks] in
    harness/distributed/checks.py): every rank must skip exactly that step, halve its
    scale there, and keep parameters identical to the other ranks and to the reference
    (which skipped it too); the other steps are judged as :func:`judge_amp` judges them."""
    if inf_step < 1:
        raise ValueError(f"inf_step={inf_step}: the scale before the overflow is needed")
    measured = {rank: dict(v, grad_err=[0.0 if e is None else e for e in v["grad_err"]])
                for rank, v in values.items()}  # the overflowed step has no gradient error
    amp_dtype, _, common, metrics, rules, scales = _amp_common(values, measured)
    wrong_skip = {rank: list(v.get("skipped_at", [])) for rank, v in sorted(values.items())
                  if list(v.get("skipped_at", [])) != [inf_step]}
    no_backoff = sorted(rank for rank, v in values.items()
                        if not v["scale"][inf_step] * 2 == v["scale"][inf_step - 1])
    problems = []
    if wrong_skip:
        problems.append(f"one rank's gradients overflowed at step {inf_step}; every rank must "
                        "skip exactly that step: " + ", ".join(
                            f"rank {rank} skipped {at if at else 'no step'}"
                            for rank, at in wrong_skip.items()))
    if no_backoff:
        problems.append(f"ranks {no_backoff} did not halve their GradScaler scale at step "
                        f"{inf_step}")
    metrics.update(ranks_not_skipping=len(wrong_skip), ranks_not_backing_off=len(no_backoff))
    rules.update(ranks_not_skipping=equal(0), ranks_not_backing_off=equal(0))
    return amp_dtype, DistVerdict.of(problems + common, metrics, rules,
                                     info={"scale": sorted(scales)})


def _max_abs_diff(a: list, b: list) -> float:
    worst = 0.0
    for x, y in zip(a, b):
        if isinstance(x, list):
            worst = max(worst, _max_abs_diff(x, y))
        else:
            worst = max(worst, abs(float(x) - float(y)))
    return worst


def judge_buffers(values: dict[int, dict]) -> DistVerdict:
    """broadcast_buffers: at every forward's start all ranks hold rank 0's buffers."""
    tol = DDP_TOLERANCE["float32"]
    ranks = sorted(values)
    steps = len(values[0]["start_buffers"])
    mismatch = 0.0  # across ranks at forward start (after the broadcast)
    stale = 0.0  # forward-start buffers vs rank 0's buffers at the previous step's end
    diverge = 0.0  # across ranks at a step's end (proves the check could see a miss)
    for step in range(steps):
        for rank in ranks[1:]:
            mismatch = max(mismatch, _max_abs_diff(values[rank]["start_buffers"][step],
                                                   values[0]["start_buffers"][step]))
            diverge = max(diverge, _max_abs_diff(values[rank]["end_buffers"][step],
                                                 values[0]["end_buffers"][step]))
        if step:
            for rank in ranks:
                stale = max(stale, _max_abs_diff(values[rank]["start_buffers"][step],
                                                 values[0]["end_buffers"][step - 1]))
    grad, grad_rank, grad_step = _worst(values, "grad_err")
    hashes = {v["param_hash"][-1] for v in values.values()}
    problems = []
    if mismatch or stale:
        problems.append(f"BatchNorm buffers not broadcast from rank 0: at a forward's "
                        f"start ranks differ by {mismatch:.3g} and differ from rank 0's "
                        f"last buffers by {stale:.3g} (both must be 0)")
    if diverge == 0.0:
        problems.append("the ranks' buffers never diverged within a step, so this check "
                        "could not see a missing broadcast (shards must differ)")
    if grad > tol:
        problems.append(f"gradients differ from the mean of per-shard gradients: {grad:.3g}"
                        f" > {tol:g}, rank {grad_rank}, step {grad_step}")
    if len(hashes) > 1:
        problems.append("ranks hold different parameters after training")
    metrics = {"buffer_mismatch": mismatch, "buffer_stale": stale, "grad_err": grad,
               "ranks_disagree": int(len(hashes) > 1)}
    rules = {"buffer_mismatch": equal(0), "buffer_stale": equal(0),
             "grad_err": lower(rel=10.0, abs=tol / 10), "ranks_disagree": equal(0)}
    return DistVerdict.of(problems, metrics, rules,
                          info={"buffer_divergence_within_step": diverge})


def judge_sync_batchnorm(values: dict[int, dict]) -> DistVerdict:
    reasons = {v.get("unsupported") for v in values.values()}
    if reasons != {None}:
        if None in reasons:
            return DistVerdict("error", {}, {}, f"SyncBatchNorm unsupported on some ranks only: "
                                            f"{sorted(r for r in reasons if r)}")
        return DistVerdict("unsupported", {}, {}, f"SyncBatchNorm refused: {sorted(reasons)[0]}")
    tol = DDP_TOLERANCE["float32"]
    stats = max(float(v["stats_err"]) for v in values.values())
    grad = max(float(v["grad_err"]) for v in values.values())
    problems = []
    if stats > tol:
        problems.append(f"SyncBatchNorm running statistics differ from BatchNorm on the full "
                        f"batch: {stats:.3g} > {tol:g}")
    if grad > tol:
        problems.append(f"gradients differ from BatchNorm on the full batch: {grad:.3g} > {tol:g}")
    return DistVerdict.of(problems, {"stats_err": stats, "grad_err": grad},
                          {"stats_err": lower(rel=10.0, abs=tol / 10),
                           "grad_err": lower(rel=10.0, abs=tol / 10)})


def judge_collective(values: dict[int, dict], size: str, *, op: str, dtype: str) -> DistVerdict:
    """One collective at one size, every rank against NumPy."""
    per_rank = {rank: value[size] for rank, value in values.items()}
    refused = {r: v["unsupported"] for r, v in per_rank.items() if "unsupported" in v}
    apis = sorted({v["api"] for v in per_rank.values() if "api" in v})
    api = {"api": apis[0]} if apis else {}  # the torch name the ranks called
    if refused:
        if len(refused) != len(per_rank):
            return DistVerdict("error", {}, {}, f"{op} {dtype}: refused on ranks {sorted(refused)}"
                                            f" only: {refused}")
        return DistVerdict("unsupported", {}, {}, f"{op} {dtype} n={size}: "
                                              f"{next(iter(refused.values()))}", info=api)
    err = max(float(v["max_abs_err"]) for v in per_rank.values())
    bound = max(float(v["bound"]) for v in per_rank.values())
    excess_rank = max(per_rank, key=lambda r: float(per_rank[r]["excess"]))
    worst = per_rank[excess_rank]
    mismatched = sum(int(v.get("mismatched", 0)) for v in per_rank.values())
    problems = []
    if not (float(worst["excess"]) <= 0 and mismatched == 0):  # NaN excess fails too
        allowed = "exact" if bound == 0 else f"within {bound:.3g} (summation bound)"
        problems.append(f"{op} {dtype} n={size}: {mismatched} elements over all ranks differ "
                        f"from NumPy beyond what is allowed ({allowed}); worst on rank "
                        f"{excess_rank} at index {worst.get('worst_index')}: got "
                        f"{worst.get('worst_got')}, expected {worst.get('worst_expected')}"
                        + (f"; shapes {worst['shape']}" if "shape" in worst else ""))
    return DistVerdict.of(problems, {"max_abs_err": err, "mismatched": mismatched},
                          {"max_abs_err": lower(rel=4.0, abs=bound), "mismatched": equal(0)},
                          info={"bound": bound, **api})


PIPELINE_ERRORS = {
    "out_err": "stage outputs differ from the same layers of one process (the activations "
               "it received are wrong)",
    "recv_grad_err": "the output gradients a stage received differ from one process's",
    "grad_err": "parameter gradients differ from one process on the full batch",
    "param_err": "parameters after the SGD step differ from one process's",
    "loss_err": "the last stage's loss differs from one process's",
}
"""What each error of checks.pipeline means when it is too large (Note [Pipeline step])."""


def judge_pipeline(values: dict[int, dict]) -> DistVerdict:
    """A pipeline step vs one process: every stage's errors within float32's tolerance."""
    tol = DDP_TOLERANCE["float32"]
    metrics, problems = {}, []
    for key, meaning in PIPELINE_ERRORS.items():
        worst, rank, step = _worst(values, key)
        metrics[key] = worst
        if not worst <= tol:
            problems.append(f"{meaning}: max normalised error {worst:.3g} > {tol:g} (float32), "
                            f"stage {rank}, step {step}")
    stages = sorted(int(v["stage"]) for v in values.values())
    if stages != list(range(len(values))):
        problems.append(f"ranks ran stages {stages}, expected one each of 0..{len(values) - 1}")
    return DistVerdict.of(problems, metrics,
                          {key: lower(rel=10.0, abs=tol / 10) for key in metrics},
                          info={"transport": next(iter(values.values()))["transport"]})


def judge_barrier(values: dict[int, dict]) -> DistVerdict:
    last_in = max(float(v["entered"]) for v in values.values())
    first_out = min(float(v["left"]) for v in values.values())
    early = max(0.0, last_in - first_out)
    problems = []
    if early > 1e-3:
        problems.append(f"a rank left the barrier {early * 1e3:.1f} ms before the last rank "
                        "entered")
    return DistVerdict.of(problems, {"early_exit_s": early},
                          {"early_exit_s": lower(rel=1.0, abs=1e-3)})


def judge_sampler(values: dict[int, dict], *, drop_last: bool) -> DistVerdict:
    """Shards disjoint and covering; ``set_epoch`` changes the order; ranks agree."""
    ws = len(values)
    length = int(values[0]["length"])
    per_rank = (length // ws) if drop_last else -(-length // ws)
    epochs = sorted(values[0]["epochs"], key=int)
    problems = []
    orders = {}
    for epoch in epochs:
        shards = [values[r]["epochs"][epoch] for r in range(ws)]
        sizes = [len(s) for s in shards]
        if sizes != [per_rank] * ws:
            problems.append(f"epoch {epoch}: shard sizes {sizes}, expected {per_rank} each "
                            f"(length {length}, drop_last={drop_last})")
        flat = [i for s in shards for i in s]
        distinct = set(flat)
        if any(i < 0 or i >= length for i in flat):
            problems.append(f"epoch {epoch}: indices outside range({length})")
        if drop_last:
            if len(distinct) != len(flat):
                problems.append(f"epoch {epoch}: shards overlap ({len(flat) - len(distinct)} "
                                "repeated indices; drop_last shards must be disjoint)")
        else:
            if distinct != set(range(length)):
                problems.append(f"epoch {epoch}: shards miss {length - len(distinct)} of "
                                f"{length} indices")
            if len(flat) - len(distinct) != per_rank * ws - length:
                problems.append(f"epoch {epoch}: {len(flat) - len(distinct)} repeated "
                                f"indices; only the {per_rank * ws - length} padding ones may "
                                "repeat")
        # the global order the ranks' shards interleave (shard r = order[r::ws])
        orders[epoch] = tuple(shards[r][i] for i in range(min(sizes)) for r in range(ws))
    same = [(a, b) for i, a in enumerate(epochs) for b in epochs[i + 1:] if orders[a] == orders[b]]
    if same:
        problems.append(f"set_epoch had no effect: epochs {same} gave the same order")
    replicas = {(int(v["num_replicas"]), int(v["rank"]) == r) for r, v in values.items()}
    if replicas != {(ws, True)}:
        problems.append(f"the sampler read num_replicas/rank wrong: {replicas}")
    return DistVerdict.of(problems, {"problems": len(problems), "same_order_epochs": len(same)},
                          {"problems": equal(0), "same_order_epochs": equal(0)})


# Note [Rank skew]
# ~~~~~~~~~~~~~~~~
# Ranks drift apart (a slow data loader, a slower device after an upgrade), and a
# collective waits for the last one only so long. The check (checks.rank_skew) makes the
# last rank S seconds late at an all_reduce in a group with a short timeout T, after one
# all_reduce that creates the group's communicator with every rank present (HCCL makes it
# lazily inside a group's first collective and waits there for HCCL_CONNECT_TIMEOUT,
# whatever T: without it the "late" rank is simply waited for). What a user can act on:
# S < T: the collective completes on every rank with the right sum; the measured skew and
# the late rank are recorded. S > T, one of two endings, both correct:
# - every rank's call raises in bounded time (gloo; HCCL with
#   TORCH_HCCL_ASYNC_ERROR_HANDLING=0), and the rank whose call ended last is the late one;
# - the backend's watchdog ends the processes (HCCL's default, TORCH_HCCL_ASYNC_ERROR_
#   HANDLING=1, and NCCL's): a rank's output says "taking the entire process down"; the
#   late rank is the one that entered last, or never (each rank notes when it entered).
# Either way the verdict names the late rank and the knob: on HCCL the shorter of the
# process group's timeout (the watchdog's) and HCCL_EXEC_TIMEOUT fired, and Ascend advises
# the group's timeout to stay larger than HCCL_EXEC_TIMEOUT; elsewhere the group's timeout.
# Any other ending (a hang the launcher had to stop, a crash without the watchdog's words,
# a rank that completed although the others gave up) is a failure. A rank later than
# scheduled (the fault distributed.rank_straggles) turns the first case into the second
# and fails it with the same words. The late rank waits S seconds, or less once every other
# rank's call has ended (they say so in the rendezvous store): beyond the timeout it then
# arrives just after they gave up, as an S-late rank would, without waiting out the rest
# of S; within it the others are still waiting in the collective, so it waits all of S.

WATCHDOG_WORDS = ("taking the entire process down",)
"""What torch_npu's (and torch's NCCL) watchdog logs when it ends a process."""
SKEW_SLACK = 3.0  # seconds beyond timeout + skew a failing collective may take (a busy host)


def timeout_variable(backend: str, timeout: float, exec_timeout: Optional[float] = None) -> str:
    """What to raise when a collective times out on ``backend`` (Note [Rank skew])."""
    group = "the process group's timeout (init_process_group(timeout=...))"
    if backend != "hccl":
        return group
    if exec_timeout and exec_timeout < timeout:
        return f"HCCL_EXEC_TIMEOUT (now {exec_timeout:g} s, below the group's {timeout:g} s)"
    said = "" if exec_timeout is None else (f" ({exec_timeout:g} s)" if exec_timeout
                                            else " (0: never)")
    return f"{group}, keeping it larger than HCCL_EXEC_TIMEOUT{said}"


def watchdog_ended(outcome) -> list[int]:
    """Ranks whose output says the backend's watchdog took the process down."""
    return sorted(rank for rank, log in outcome.logs.items()
                  if any(word in log for word in WATCHDOG_WORDS))


def judge_skew(outcome, *, expect_complete: bool) -> Optional[DistVerdict]:
    """Note [Rank skew] over a sub-check's outcome; None when it is neither every rank
    returning nor a watchdog ending (the caller records that as the problem it is)."""
    if outcome.ok:
        return _judge_returned(outcome.values, expect_complete=expect_complete)
    ended = [r for r in watchdog_ended(outcome) if r in outcome.errors or r in outcome.hung]
    notes = outcome.notes
    if not ended or outcome.not_reached or not any("skew" in n for n in notes.values()):
        return None  # not this sub-check's ending (an earlier one's, a crash, a hang)
    any_note = next((n for n in notes.values() if "skew" in n), {})
    skew, timeout = any_note.get("skew", 0.0), any_note.get("timeout", 0.0)
    backend, scheduled = any_note.get("backend", "?"), any_note.get("late_rank")
    ranks = list(range(outcome.world_size))
    entered = {r: notes.get(r, {}).get("entered") for r in ranks}
    missing = [r for r in ranks if entered[r] is None]
    late = (missing[-1] if missing else max(ranks, key=lambda r: entered[r]))
    known = [t for t in entered.values() if t is not None]
    arrival = (max(known) - min(known)) if len(known) > 1 and not missing else None
    variable = timeout_variable(backend, timeout, any_note.get("exec_timeout"))
    diagnosis = (f"the all_reduce timed out and the {backend} watchdog ended ranks {ended} "
                 f"(\"{WATCHDOG_WORDS[0]}\"): rank {late} was late ("
                 + ("never entered it; " if missing else f"entered {arrival:.1f} s after "
                                                          "the first; ")
                 + f"scheduled skew {skew:g} s) beyond the {timeout:g} s timeout; raise "
                 f"{variable} above the ranks' skew")
    problems = []
    if expect_complete:
        problems.append(diagnosis)
    elif scheduled is not None and late != scheduled:
        problems.append(f"named rank {late} late, but rank {scheduled} was")
    info = {"ended_by_watchdog": ended, "late_rank": late, "variable": variable,
            "entered": {str(r): t for r, t in entered.items()}, "diagnosis": diagnosis}
    verdict = DistVerdict.of(problems, {"completed_ranks": len(outcome.values)},
                             {"completed_ranks": equal()}, info)
    if not problems:
        verdict.message = diagnosis
    return verdict


def _judge_returned(values: dict[int, dict], *, expect_complete: bool) -> DistVerdict:
    """Note [Rank skew] when every rank returned: completes within the timeout, fails in
    bounded time beyond it, naming the late rank and the variable to raise."""
    any_value = next(iter(values.values()))
    skew, timeout, backend = any_value["skew"], any_value["timeout"], any_value["backend"]
    ranks = sorted(values)
    completed = [r for r in ranks if values[r]["completed"]]
    failed = [r for r in ranks if not values[r]["completed"]]
    first_in = min(values[r]["entered"] for r in ranks)
    last_out = max(values[r]["left"] for r in ranks)
    arrival_skew = max(values[r]["entered"] for r in ranks) - first_in
    entered_last = max(ranks, key=lambda r: values[r]["entered"])
    # failed: the late rank's call ended last (its peers gave up before it)
    late = max(ranks, key=lambda r: values[r]["left"]) if failed else entered_last
    duration = last_out - first_in
    variable = timeout_variable(backend, timeout, any_value.get("exec_timeout"))
    metrics = {"completed_ranks": len(completed)}
    info = {"duration_s": round(duration, 3), "arrival_skew_s": round(arrival_skew, 3),
            "ranks": {str(r): {k: values[r][k] for k in ("entered", "left", "completed",
                                                         "error", "max_abs_err")}
                      for r in ranks}, "late_rank": late, "variable": variable}
    diagnosis = (f"the all_reduce failed on ranks {failed} after {duration:.1f} s: rank "
                 f"{late} was late (its call ended last, {values[late]['left'] - first_in:.1f} "
                 f"s after the first rank entered; scheduled skew {skew:g} s) beyond the "
                 f"{backend} timeout of {timeout:g} s; raise {variable} above the ranks' skew")
    problems = []
    if expect_complete:
        if failed:
            problems.append(diagnosis + " (" + "; ".join(
                f"rank {r}: {values[r]['error']}" for r in failed) + ")")
        wrong = [r for r in completed
                 if values[r]["max_abs_err"] is None or values[r]["max_abs_err"] > values[r]["bound"]]
        if wrong:
            problems.append(f"ranks {wrong} completed with a wrong sum (max_abs_err "
                            f"{max(values[r]['max_abs_err'] or math.inf for r in wrong):.3g})")
        message = "" if problems else (f"rank {late} {arrival_skew:.1f} s late: completed "
                                       f"within the {timeout:g} s timeout")
    else:
        if completed:
            problems.append(f"ranks {completed} completed although rank "
                            f"{any_value['late_rank']} was {skew:g} s late against a "
                            f"{timeout:g} s timeout: the {backend} group ignores its timeout")
        if duration > timeout + skew + SKEW_SLACK:
            problems.append(f"the failing all_reduce took {duration:.1f} s, more than timeout "
                            f"+ skew + {SKEW_SLACK:g} s: a late rank is not stopped in bounded "
                            "time")
        if failed and late != any_value["late_rank"]:
            problems.append(f"named rank {late} late, but rank {any_value['late_rank']} was")
        message = "" if problems else diagnosis
        info["diagnosis"] = diagnosis
    verdict = DistVerdict.of(problems, metrics, {"completed_ranks": equal()}, info)
    if not problems:
        verdict.message = message
    return verdict


# ------------------------------------------------ FSDP2 and tensor parallel (parallel.py)

BF16_EXACT_LIMIT = 0.9
"""Largest fraction of an FSDP2 mixed-precision gradient bfloat16 may hold exactly: a
float32 reduction over ranks with different data leaves about half (ws 2) to three
quarters (ws 4) of the elements needing more bits; a bfloat16 reduction leaves none
(Note [Seeing the reduction dtype] in harness/distributed/parallel.py)."""

FSDP_DTYPES = {"float32": ("float32", "float32", "float32"),
               "bf16_mixed": ("bfloat16", "float32", "float32")}
"""Per FSDP2 variant: the dtype the forward computes in (the policy's param_dtype), the
sharded parameters' dtype and the gradients' dtype (both the parameters' own, float32)."""


def judge_fsdp(values: dict[int, dict], *, variant: str) -> DistVerdict:
    """FSDP2 vs one process on the full batch: gradients, parameters, dtypes, sharding,
    and under mixed precision the reduction's precision."""
    tol = DDP_TOLERANCE["bfloat16" if variant == "bf16_mixed" else "float32"]
    grad, grad_rank, grad_step = _worst(values, "grad_err")
    param, param_rank, param_step = _worst(values, "param_err")
    problems = []
    if grad > tol:
        problems.append(f"gradients differ from one process on the full batch: max "
                        f"normalised error {grad:.3g} > {tol:g} allowed ({variant}), rank "
                        f"{grad_rank}, step {grad_step}")
    if param > tol:
        problems.append(f"parameters differ from the reference after the optimizer step: "
                        f"{param:.3g} > {tol:g}, rank {param_rank}, step {param_step}")
    want = FSDP_DTYPES[variant]
    seen = {(v["compute_dtype"], v["param_dtype"], v["grad_dtype"]) for v in values.values()}
    if seen != {want}:
        problems.append(f"(compute, sharded parameter, gradient) dtypes {sorted(seen)}, "
                        f"expected {want}")
    unsharded = sorted(r for r, v in values.items() if not v["sharded"])
    if unsharded:
        problems.append(f"ranks {unsharded} hold more than their 1/ws share of a parameter")
    metrics = {"grad_err": grad, "param_err": param, "compute_dtype": want[0] if seen ==
               {want} else str(sorted(seen)), "unsharded_ranks": len(unsharded)}
    rules = {"grad_err": lower(rel=10.0, abs=tol / 10), "param_err": lower(rel=10.0, abs=tol / 10),
             "compute_dtype": equal(), "unsharded_ranks": equal(0)}
    if variant == "bf16_mixed":
        exact, exact_rank, exact_step = _worst(values, "bf16_exact_fraction")
        if exact > BF16_EXACT_LIMIT:
            problems.append(f"the reduced gradients look reduced in bfloat16, not float32: "
                            f"{exact:.0%} of their elements are bfloat16 values (rank "
                            f"{exact_rank}, step {exact_step}; at most {BF16_EXACT_LIMIT:.0%} "
                            "allowed: a float32 mean over ranks with different data needs "
                            "more bits): is the policy's reduce_dtype honoured?")
        metrics["bf16_exact_fraction"] = exact
        rules["bf16_exact_fraction"] = lower(rel=1.0, abs=0.2)
    return DistVerdict.of(problems, metrics, rules, info={
        "grad_err_per_step": {r: v.get("grad_err") for r, v in values.items()}})


def judge_fsdp_round_trip(values: dict[int, dict]) -> DistVerdict:
    """Sharded state saved and loaded into a fresh FSDP2 model: training on is
    bit-identical to the model that never round-tripped."""
    before = min(float(v["differs_before_load"]) for v in values.values())
    loaded = max(float(v["param_diff_after_load"]) for v in values.values())
    diff, diff_rank, diff_step = _worst(values, "param_diff")
    entries = {tuple(v["optim_state_entries"]) for v in values.values()}
    problems = []
    if before == 0.0:
        problems.append("the fresh model already equalled the trained one before loading: "
                        "the round trip proved nothing (it needs another initialisation)")
    if loaded != 0.0:
        problems.append(f"the loaded parameters differ from the saved ones by {loaded:.3g}")
    if diff != 0.0:
        problems.append(f"training on after the round trip differs from training on without "
                        f"it: max |diff| {diff:.3g} (rank {diff_rank}, step {diff_step} after "
                        "loading); the model or optimizer state did not survive")
    if any(len(set(e)) > 1 for e in entries):
        problems.append(f"optimizer state entries (trained, restored) {sorted(entries)}: the "
                        "restored optimizer lacks state")
    metrics = {"param_diff_after_load": loaded, "param_diff": diff}
    return DistVerdict.of(problems, metrics, {"param_diff_after_load": equal(0),
                                              "param_diff": equal(0)},
                          info={"differs_before_load": before,
                                "optim_state_entries": sorted(entries)})


def judge_tp(values: dict[int, dict]) -> DistVerdict:
    """Column-then-row parallel MLP vs the MLP on one process: output, gradients, step."""
    tol = DDP_TOLERANCE["float32"]
    problems = []
    metrics = {}
    for key, what in (("out_err", "the forward output differs"),
                      ("grad_err", "the gradients differ"),
                      ("param_err", "the parameters after one SGD step differ")):
        worst, rank, _ = _worst(values, key)
        metrics[key] = worst
        if not worst <= tol:  # a NaN error is a problem too
            problems.append(f"{what} from the MLP on one process: max normalised "
                            f"error {worst:.3g} > {tol:g} (float32), rank {rank}")
    placements = {json.dumps(v["placements"], sort_keys=True) for v in values.values()}
    return DistVerdict.of(problems, metrics,
                          {key: lower(rel=10.0, abs=tol / 10) for key in metrics},
                          info={"placements": sorted(placements)})

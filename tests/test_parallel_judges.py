"""The FSDP2 and tensor-parallel verdicts can fail, and a missing API is a capability
(harness/distributed/parallel.py, judge.py); the launches are suites/distributed's."""

from __future__ import annotations

import pytest

from harness.device import Unsupported
from harness.distributed import parallel
from harness.distributed.judge import BF16_EXACT_LIMIT, judge_fsdp, judge_fsdp_round_trip, judge_tp


def _fsdp(variant="float32", grad=1e-7, dtypes=("float32", "float32", "float32"),
          sharded=True, exact=0.0):
    return {r: {"grad_err": [grad] * 3, "param_err": [1e-7] * 3, "compute_dtype": dtypes[0],
                "param_dtype": dtypes[1], "grad_dtype": dtypes[2], "sharded": sharded,
                "bf16_exact_fraction": [exact] * 3, "variant": variant} for r in range(2)}


def test_fsdp_verdict_passes_a_clean_run_and_fails_drift_dtypes_and_unsharded():
    assert judge_fsdp(_fsdp(), variant="float32").status == "pass"
    drift = judge_fsdp(_fsdp(grad=2.0), variant="float32")
    assert drift.status == "fail" and "gradients differ" in drift.message
    unsharded = judge_fsdp(_fsdp(sharded=False), variant="float32")
    assert unsharded.status == "fail" and "ranks [0, 1] hold more" in unsharded.message
    # mixed precision: the forward must compute in bfloat16
    fp32_forward = judge_fsdp(_fsdp("bf16_mixed", exact=0.4), variant="bf16_mixed")
    assert fp32_forward.status == "fail" and "dtypes" in fp32_forward.message


def test_fsdp_mixed_precision_verdict_sees_a_bfloat16_reduction():
    mixed = ("bfloat16", "float32", "float32")
    ok = judge_fsdp(_fsdp("bf16_mixed", grad=5e-3, dtypes=mixed, exact=0.45),
                    variant="bf16_mixed")
    assert ok.status == "pass", ok.message
    bf16 = judge_fsdp(_fsdp("bf16_mixed", grad=5e-3, dtypes=mixed, exact=1.0),
                      variant="bf16_mixed")
    assert bf16.status == "fail" and "reduce_dtype" in bf16.message
    assert BF16_EXACT_LIMIT < 1.0


def test_bf16_exact_fraction_counts_what_bfloat16_holds():
    import torch

    exact = torch.tensor([1.0, 0.5, 2.0 ** -8, 3.0])           # bfloat16 values
    inexact = torch.tensor([1.0 + 2.0 ** -9, 1.0 + 2.0 ** -12])  # need more bits
    assert parallel._bf16_exact_fraction([exact]) == 1.0
    assert parallel._bf16_exact_fraction([exact, inexact]) == pytest.approx(4 / 6)


def _round_trip(diff=0.0, before=1.5, entries=(18, 18)):
    return {r: {"differs_before_load": before, "param_diff_after_load": 0.0,
                "param_diff": [0.0, diff], "optim_state_entries": list(entries)}
            for r in range(2)}


def test_round_trip_verdict_demands_bit_identity_and_a_load_that_changed_something():
    assert judge_fsdp_round_trip(_round_trip()).status == "pass"
    lost = judge_fsdp_round_trip(_round_trip(diff=1e-3))
    assert lost.status == "fail" and "did not survive" in lost.message
    pointless = judge_fsdp_round_trip(_round_trip(before=0.0))
    assert pointless.status == "fail" and "proved nothing" in pointless.message
    missing = judge_fsdp_round_trip(_round_trip(entries=(18, 0)))
    assert missing.status == "fail" and "lacks state" in missing.message


def test_tp_verdict_names_what_differs():
    clean = {r: {"out_err": 1e-7, "grad_err": 1e-7, "param_err": 1e-7, "placements": {}}
             for r in range(2)}
    assert judge_tp(clean).status == "pass"
    partial = {r: {**v, "out_err": 0.7} for r, v in clean.items()}
    verdict = judge_tp(partial)
    assert verdict.status == "fail" and verdict.message.startswith("the forward output differs")


def test_a_missing_public_api_is_unsupported_naming_the_torch_that_has_it():
    with pytest.raises(Unsupported, match=r"no public torch\.distributed\.fsdp\.no_such_api "
                                          r"\(public from torch 2\.6"):
        parallel._public_api("torch.distributed.fsdp", ("no_such_api",), parallel.FSDP_SINCE)

"""The parity comparison (harness.parity): two stored runs of different device types.

Unit tests build both runs by hand (one per section and per verdict, the same-device
refusal, bad inputs); the end-to-end test records a small selection with ``--device cpu``,
runs it on the simulated NPU clean and with injected faults (child processes, an early
job: Note [Early jobs] in tests/early.py) and compares.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import early
import pytest

from harness import cli, results, simnpu
from harness.parity import ParityError, compare
from harness.parity import thresholds as th
from harness.results import Record, RunResults, equal, higher, lower

ROOT = Path(__file__).resolve().parents[1]
CPU = {"device_type": "cpu", "device_slug": "x86-64-test", "stack_id": "torch-2.13.0"}
NPU = {"device_type": "npu", "device_slug": "simnpu", "stack_id": "cann-8.0.0"}
EPS32 = 2.0**-23


def run(fingerprint: dict, *records: Record, seed: int = 0, **kw) -> RunResults:
    return RunResults(fingerprint=dict(fingerprint), records={r.id: r for r in records},
                      seed=seed, **kw)


def op(record_id: str = "ops/exp/float32/fwd/typical", *, rmse=1e-8, max_rel=1e-7,
       mean_rel=5e-8, balance=1e-9, small=0.0, numel=1024.0, status="pass",
       prefix="", test="suites/ops/test_catalog.py::test_op[exp-float32]", message=""):
    p = prefix
    metrics = {f"{p}rmse": rmse, f"{p}max_rel_err": max_rel, f"{p}mean_rel_err": mean_rel,
               f"{p}err_balance": balance, f"{p}small_abs_err": small, f"{p}numel": numel,
               f"{p}cosine": 1.0}
    rules = {f"{p}rmse": lower(2.0, 1e-9), f"{p}max_rel_err": lower(2.0, EPS32),
             f"{p}mean_rel_err": lower(2.0, EPS32)}
    return Record(record_id, status=status, metrics=metrics, rules=rules, test=test,
                  message=message)


def convergence(accuracy=91.0, losses=(2.3, 1.0, 0.5)):
    base = "amp/convergence/bfloat16/tinycnn-small"
    test = "suites/amp/test_convergence.py::test_amp_convergence[bfloat16]"
    return [Record(f"{base}/accuracy", metrics={"accuracy": accuracy},
                   rules={"accuracy": higher(1.0, 2.0)}, test=test),
            Record(f"{base}/loss_falls", metrics={"loss_ratio": losses[-1] / losses[0]},
                   rules={"loss_ratio": lower(1.25, 0.05)}, test=test,
                   info={"dut_loss": list(losses), "ref_loss": list(losses)})]


def memory(max_batch=148, peak=892976):
    return Record("memory/oom_threshold/mlp/float32/none",
                  metrics={"max_batch": max_batch, "peak_bytes_b64": peak},
                  rules={"max_batch": higher(1.0, 0), "peak_bytes_b64": lower(1.05, 4096)},
                  test="suites/memory/test_oom.py::test_max_batch_under_cap[mlp-none]")


def bench(record_id="bench/train/simplecnn/float32/step/b32/small", ms=10.0, status="pass"):
    metrics = {"value": ms, "runs": 1} if status != "skip" else {}
    return Record(record_id, status=status, metrics=metrics,
                  test="suites/bench/test_throughput.py::test_benchmark[x]")


def inventory(op_name="aten.mm.default", status="pass"):
    return Record(f"model/sinc_mlp/inventory/{op_name}", status=status,
                  test="suites/model/test_model.py::test_model_inventory[sinc_mlp]")


def full(fp, **over):
    """A run with a record of every section."""
    recs = [op(), *convergence(), memory(), bench(), inventory(),
            Record("optim/adam/bfloat16/foreach/state_dtypes",
                   metrics={"exp_avg_dtype": "bfloat16"}, rules={"exp_avg_dtype": equal()},
                   test="suites/optim/test_optimizer_state.py::test_x")]
    by_id = {r.id: r for r in recs}
    for rec in over.values():
        by_id[rec.id] = rec
    return run(fp, *by_id.values())


# ------------------------------------------------------------------------- verdicts

def test_two_devices_that_measure_the_same_are_at_parity():
    parity = compare(full(CPU), full(NPU), reference_path="gpu.json", here_path="npu.json")
    assert parity.verdict == "PARITY" and parity.exit_code == 0
    assert parity.differences == []
    assert parity.compared == {"ops": 1, "training": 3, "memory": 1, "speed": 1, "model": 1}
    assert parity.reference.name == "cpu/x86-64-test/torch-2.13.0"
    assert parity.here.path == "npu.json"
    assert parity.op_ratios[0]["judgement"] == "pass"
    assert parity.curves and parity.curves[0]["here"] == [2.3, 1.0, 0.5]
    assert parity.thresholds["ops"]["rmse"]["error"] == 2.0
    assert "msprobe" in parity.thresholds["ops"]["rmse"]["source"]
    json.dumps(parity.to_json())  # the report and --json read it


def test_an_op_error_above_twice_the_reference_devices_is_a_difference_in_ops():
    parity = compare(full(CPU), full(NPU, o=op(rmse=3e-8)))
    assert parity.verdict == "DIFFERENCES" and parity.exit_code == 2
    (diff,) = parity.differences
    assert diff.section == "ops" and diff.severity == "difference"
    assert diff.ratio == pytest.approx(3.0) and "rmse" in diff.summary
    assert "--device npu" in diff.reproduce and "--op-filter '^exp-float32-fwd-typical$'" \
        in diff.reproduce
    assert parity.op_ratios[0]["judgement"] == "error"


def test_a_ratio_from_another_kernel_says_which_kernels_ran():
    ref, here = op(), op(rmse=3e-8)
    ref.info = {"aten_ops": {"fwd": ["aten._flash_attention_for_cpu", "aten.detach"]}}
    here.info = {"aten_ops": {"fwd": ["aten.bmm", "aten._safe_softmax", "aten.detach"]}}
    (diff,) = compare(run(CPU, ref), run(NPU, here)).differences
    assert diff.summary.endswith("other kernels: cpu ran aten._flash_attention_for_cpu, here "
                                 "aten.bmm, aten._safe_softmax")


def test_an_op_error_between_one_and_two_times_is_a_warning_not_a_difference():
    parity = compare(full(CPU), full(NPU, o=op(rmse=1.5e-8)))
    assert parity.verdict == "PARITY"
    assert parity.op_ratios[0]["judgement"] == "warning"
    assert parity.op_ratios[0]["ratio"] == pytest.approx(1.5)


def test_max_relative_error_is_judged_with_msprobes_ten():
    ref = full(CPU, o=op(max_rel=2e-7))
    five = compare(ref, full(NPU, o=op(max_rel=1e-6)))
    eleven = compare(ref, full(NPU, o=op(max_rel=2.2e-6)))
    assert five.verdict == "PARITY" and five.op_ratios[0]["judgement"] == "warning"
    assert eleven.verdict == "DIFFERENCES"
    assert "max_rel_err" in eleven.differences[0].summary


def test_an_exact_reference_device_does_not_make_any_rounding_infinite():
    exact = op(rmse=0.0, max_rel=0.0, mean_rel=0.0, balance=0.0)
    rounded = op(rmse=5e-10, max_rel=EPS32 / 2, mean_rel=EPS32 / 4, balance=1e-10)
    assert compare(run(CPU, exact), run(NPU, rounded)).verdict == "PARITY"
    drifted = op(rmse=5e-10, max_rel=EPS32 / 2, mean_rel=3 * EPS32, balance=1e-10)
    parity = compare(run(CPU, exact), run(NPU, drifted))
    assert parity.verdict == "DIFFERENCES"
    assert parity.differences[0].ratio == pytest.approx(3.0)


def test_a_biased_kernel_shows_in_the_error_balance_above_its_noise_floor():
    floor = EPS32 / math.sqrt(1024)
    parity = compare(run(CPU, op(balance=floor / 10)), run(NPU, op(balance=3 * floor)))
    assert parity.verdict == "DIFFERENCES"
    assert "err_balance" in parity.differences[0].summary


def test_output_prefixes_are_compared_per_output():
    ref = op(prefix="grad0.")
    here = op(prefix="grad0.", mean_rel=5e-7)
    parity = compare(run(CPU, ref), run(NPU, here))
    assert parity.differences[0].summary.startswith("grad0.mean_rel_err")
    assert parity.op_ratios[0]["metric"] == "grad0.mean_rel_err"


@pytest.mark.parametrize("status", ["unsupported", "error", "fallback"])
def test_a_capability_the_reference_device_has_and_this_one_lacks_is_a_blocker(status):
    lost = op(status=status, message=f"the op is {status}\nreproduce: ...")
    parity = compare(full(CPU), full(NPU, o=lost))
    assert parity.verdict == "BLOCKERS" and parity.exit_code == 1
    (diff,) = parity.differences
    assert diff.severity == "blocker" and diff.section == "ops"
    assert f"passes on cpu, {status} here: the op is {status}" == diff.summary


def test_a_capability_both_devices_lack_is_no_difference():
    both = op(status="unsupported")
    assert compare(full(CPU, o=both), full(NPU, o=both)).verdict == "PARITY"


def test_a_check_that_fails_here_and_passes_there_is_a_difference():
    parity = compare(full(CPU), full(NPU, o=op(status="fail", message="cosine 0.5")))
    assert parity.verdict == "DIFFERENCES"
    assert "fail here" in parity.differences[0].summary


def test_blockers_rank_before_differences():
    here = full(NPU, o=op(rmse=5e-8), m=memory(max_batch=100), i=inventory(status="fallback"))
    parity = compare(full(CPU), here)
    assert parity.verdict == "BLOCKERS"
    assert [d.severity for d in parity.differences] == ["blocker", "difference", "difference"]
    assert parity.differences[0].section == "model"
    assert parity.models == [{"op": "aten.mm.default", "model": "sinc_mlp",
                              "reference": "pass", "here": "fallback",
                              "id": "model/sinc_mlp/inventory/aten.mm.default"}]


# ------------------------------------------------------------------------ sections

def test_held_out_accuracy_lower_beyond_its_rule_is_a_training_difference():
    acc, loss = convergence(accuracy=88.0, losses=(2.3, 1.4, 0.9))
    parity = compare(full(CPU), full(NPU, a=acc, l=loss))
    assert parity.verdict == "DIFFERENCES"
    diff = next(d for d in parity.differences if d.id.endswith("/accuracy"))
    assert diff.section == "training" and "-3.00 points" in diff.summary
    assert parity.curves[0]["reference"] == [2.3, 1.0, 0.5]
    assert parity.curves[0]["here"] == [2.3, 1.4, 0.9]
    assert parity.curves[0]["accuracy"] == {"reference": 91.0, "here": 88.0}
    assert parity.curves[0]["accuracy_points"] == pytest.approx(-3.0)


def test_an_optimizer_state_dtype_that_differs_is_a_training_difference():
    other = Record("optim/adam/bfloat16/foreach/state_dtypes",
                   metrics={"exp_avg_dtype": "float32"}, rules={"exp_avg_dtype": equal()},
                   test="suites/optim/test_optimizer_state.py::test_x")
    parity = compare(full(CPU), full(NPU, s=other))
    (diff,) = parity.differences
    assert diff.section == "training" and "exp_avg_dtype bfloat16 -> float32" in diff.summary


@pytest.mark.parametrize("max_batch, peak, verdict", [
    (140, 892976, "PARITY"),           # 0.95x the max batch: within 0.9
    (120, 892976, "DIFFERENCES"),      # 0.81x
    (148, 1_200_000, "DIFFERENCES"),   # 1.34x the peak
    (300, 400_000, "PARITY"),          # better here: not a difference
])
def test_memory_ratios_under_the_same_cap(max_batch, peak, verdict):
    parity = compare(full(CPU), full(NPU, m=memory(max_batch, peak)))
    assert parity.verdict == verdict
    rows = {r["metric"]: r["ratio"] for r in parity.memory}
    assert rows["max_batch"] == pytest.approx(max_batch / 148)
    assert all(d.section == "memory" for d in parity.differences)


def test_throughput_ratios_per_benchmark_with_precision_side_by_side():
    amp = "bench/train/simplecnn/bfloat16-amp/step/b32/small"
    ref = full(CPU, x=bench(amp, ms=10.0))
    here = full(NPU, b=bench(ms=20.0), x=bench(amp, ms=11.0))
    parity = compare(ref, here)
    rows = {r["precision"]: r for r in parity.speed}
    assert rows["float32"]["ratio"] == pytest.approx(0.5)
    assert rows["bfloat16-amp"]["ratio"] == pytest.approx(10 / 11)
    (diff,) = parity.differences
    assert diff.section == "speed" and diff.ratio == pytest.approx(0.5)


def test_a_benchmark_slower_than_its_own_baseline_is_judged_by_its_ratio_only():
    parity = compare(full(CPU), full(NPU, b=bench(ms=10.5, status="slower")))
    assert parity.verdict == "PARITY" and parity.speed[0]["ratio"] == pytest.approx(10 / 10.5)


def test_skipped_benchmarks_say_why_speed_was_not_compared():
    parity = compare(full(CPU, b=bench(status="skip")), full(NPU, b=bench(status="skip")))
    assert parity.compared["speed"] == 0
    assert "--run-benchmarks" in parity.not_compared["speed"]


def test_records_of_one_run_only_are_said_not_compared():
    parity = compare(full(CPU), run(NPU, op()))
    assert parity.compared["ops"] == 1
    assert "only in the reference run" in parity.not_compared["memory"]


# --------------------------------------------------------------- refusals, notes

def test_a_pair_of_one_device_type_is_refused_with_the_ordinary_compare():
    with pytest.raises(ParityError, match="python -m harness report") as info:
        compare(full(CPU), full(CPU))
    assert "device type 'cpu'" in str(info.value)


def test_two_runs_that_share_no_measured_record_are_refused():
    with pytest.raises(ParityError, match="same selection"):
        compare(run(CPU, op()), run(NPU, memory()))


def test_different_seeds_and_faults_are_compared_and_said():
    here = full(NPU)
    here.seed, here.faults = 7, ["ops.exp_rel_error"]
    parity = compare(full(CPU), here)
    assert parity.verdict == "PARITY"
    assert any("different seeds" in n and "the reference run" in n for n in parity.notes)
    assert any(n.startswith("FAULTS INJECTED") for n in parity.notes)
    assert all("device types" not in n for n in parity.notes)
    here.fingerprint["device_name"] = simnpu.DEVICE_NAME
    assert any("SimNPU, a simulator" in n for n in compare(full(CPU), here).notes)


def test_the_floors_repeat_the_harness_tables():
    import torch

    from harness import dtypes
    from harness.compare import DTYPE_LIMITS

    assert th.EPS == dtypes.EPS
    for name, atol in th.SMALL_VALUE_ATOL.items():
        assert DTYPE_LIMITS[getattr(torch, name)].small_value_atol == atol


# ----------------------------------------------------------------------------- CLI

def _files(tmp_path, reference: RunResults, here: RunResults):
    a, b = tmp_path / "ref.json", tmp_path / "here.json"
    results.write(reference, a)
    results.write(here, b)
    return str(a), str(b)


def test_cli_exit_code_is_the_verdicts(tmp_path, capsys):
    a, b = _files(tmp_path, full(CPU), full(NPU, o=op(status="unsupported")))
    assert cli.main(["parity", a, b]) == 1
    out = capsys.readouterr().out
    assert "BLOCKERS (exit 1)" in out and "ops/exp/float32/fwd/typical" in out
    assert cli.main(["parity", a, b, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "BLOCKERS" and data["exit_code"] == 1


def test_cli_reads_a_stored_baseline_by_name_and_writes_the_reports(tmp_path, capsys):
    store = tmp_path / "store"
    ref = full({**CPU, "device_type": "cuda", "stack_id": "cuda-12.4", "device_slug": "a100"})
    path = store / "cuda" / "a100" / "cuda-12.4.json"
    path.parent.mkdir(parents=True)
    results.write(ref, path)
    _, here = _files(tmp_path, full(CPU), full(NPU))
    html, md = tmp_path / "p.html", tmp_path / "p.md"
    code = cli.main(["parity", "cuda/a100/cuda-12.4", here, "--baseline-dir", str(store),
                     "--html", str(html), "--md", str(md)])
    assert code == 0, capsys.readouterr()
    assert html.is_file() and md.is_file()
    assert "PARITY" in md.read_text()


@pytest.mark.parametrize("case, words", [
    ("same-device", ("device type 'cpu'", "python -m harness report")),
    ("missing", ("neither a results file nor a baseline", "<type>/<slug>/<stack>")),
    ("not-json", ("not valid JSON",)),
    ("html-is-input", ("--html", "a file this command reads")),
    ("no-arguments", ("required",)),
])
def test_cli_bad_inputs_are_usage_errors_naming_cause_and_fix(tmp_path, capsys, case, words):
    a, b = _files(tmp_path, full(CPU), full(NPU))
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    argv = {"same-device": ["parity", a, a], "missing": ["parity", a, str(tmp_path / "x")],
            "not-json": ["parity", a, str(bad)], "html-is-input": ["parity", a, b, "--html", a],
            "no-arguments": ["parity"]}[case]
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == cli.USAGE_ERROR
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert "Traceback" not in err


# ----------------------------------------------------------------- end to end

ENV = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
OP_CASES = r"^(exp|cumsum|sort)-float32-fwd-typical$"
NODES = ("suites/ops/test_catalog.py::test_op[exp-float32]",
         "suites/ops/test_catalog.py::test_op[cumsum-float32]",
         "suites/ops/test_catalog.py::test_op[sort-float32]",
         "suites/norm/test_batchnorm.py::test_eval_matches_reference[float32]",
         "suites/memory/test_checkpointing.py::test_plain_step_peak[mlp]",
         "suites/model/test_model.py")
PARITY_FAULTS = {"ops.exp_rel_error": ("ops", "ops/exp/float32/fwd/typical", "difference"),
                 "ops.opinfo_cumsum_unsupported": ("ops", "ops/cumsum/float32/fwd/typical",
                                                   "blocker"),
                 "ops.opinfo_sort_cpu_fallback": ("ops", "ops/sort/float32/fwd/typical",
                                                  "blocker"),
                 "memory.mm_hidden_workspace": ("memory", "memory/checkpoint/mlp/float32/none",
                                                "difference"),
                 "model.sinc_unsupported": ("model",
                                            "model/sinc_mlp/aten.sinc.default/6d228429/fwd",
                                            "blocker")}
"""Injected faults -> (section, record, severity) where the parity comparison must show them.
The fifth kind, a slower step (``bench.fp32_step_slow_60``), is a timing fault: like the
bench family it is proven by ``faults check --parity-reference cpu`` on a quiet host
(docs/parity.md), not in a test that times things beside other tests."""


def _recordings(env: dict):
    """cpu clean, SimNPU clean, SimNPU with every parity fault: three results files."""
    import sys

    if simnpu.compiler_missing():
        return None
    out = {}
    with tempfile.TemporaryDirectory(prefix="parity-e2e-") as tmp:
        for name, device, extra in (
                ("cpu", "cpu", []), ("npu", "npu", []),
                ("faulted", "npu", [f"--inject-fault={f}" for f in PARITY_FAULTS])):
            child = {k: v for k, v in env.items() if not k.startswith("HARNESS_SIMNPU")}
            child.update(ENV, PYTHONPATH=str(ROOT))
            if device == "npu":
                child["HARNESS_SIMNPU"] = "1"
            folder = Path(tmp) / name
            proc = early.run([sys.executable, "-m", "pytest", *NODES, "--device", device,
                              "--baseline", "off", "-p", "no:cacheprovider", "-p",
                              "no:randomly", "-q", "--op-filter", OP_CASES,
                              "--model", "harness.models:sinc_mlp",
                              f"--results-dir={folder}", *extra],
                             cwd=ROOT, env=child, timeout=600)
            files = results.results_files(folder)
            out[name] = (proc, results.load(files[-1]) if files else None)
    return out


RECORDINGS = early.Job("parity cpu -> SimNPU recordings", _recordings)
EARLY = (RECORDINGS,)


@pytest.fixture(scope="module")
def recordings():
    if simnpu.compiler_missing():
        pytest.skip(f"SimNPU cannot be built: {simnpu.compiler_missing()}")
    found = early.result(RECORDINGS)
    for name, (proc, loaded) in found.items():
        assert loaded is not None, f"{name}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return {name: loaded for name, (_, loaded) in found.items()}


def test_a_clean_cpu_to_simnpu_pair_is_at_parity(recordings):
    parity = compare(recordings["cpu"], recordings["npu"])
    assert parity.verdict == "PARITY", [d.summary for d in parity.differences]
    assert parity.compared["ops"] == 3 and parity.compared["memory"] == 1
    assert parity.compared["training"] == 1
    assert parity.compared["model"] > 0  # Note [A kernel for every CPU op] in harness.simnpu


def test_each_injected_fault_shows_in_its_section_and_turns_the_verdict(recordings):
    parity = compare(recordings["cpu"], recordings["faulted"])
    assert parity.verdict == "BLOCKERS"
    found = {d.id: (d.section, d.severity) for d in parity.differences}
    for fault, (section, record_id, severity) in PARITY_FAULTS.items():
        assert found.get(record_id) == (section, severity), (fault, found)
    assert any(n.startswith("FAULTS INJECTED") for n in parity.notes)


# ------------------------------------------------------------------- parity faults

def test_every_parity_fault_names_a_section_and_the_five_kinds_are_there():
    from harness import faults
    from harness.parity.model import SECTIONS

    parity_faults = {f.name: f.parity for f in faults.registry().values() if f.parity}
    assert set(parity_faults.values()) <= set(SECTIONS)
    assert set(PARITY_FAULTS) <= set(parity_faults)  # the end-to-end test injects them
    assert parity_faults["bench.fp32_step_slow_60"] == "speed"  # the slower step
    assert faults.resolve("bench.fp32_step_slow_60").exclusive  # timed alone


def test_a_parity_fault_is_caught_only_by_a_difference_in_its_own_section():
    from harness import faults
    from harness.faults.check import FaultResult, RunOutcome

    fault = faults.resolve("memory.mm_hidden_workspace")
    outcome = RunOutcome(0, {"t": "passed"}, 1.0, "")
    elsewhere = compare(full(CPU), full(NPU, o=op(rmse=5e-8)))
    there = compare(full(CPU), full(NPU, m=memory(max_batch=100)))
    assert not FaultResult(fault, outcome, elsewhere).caught
    caught = FaultResult(fault, outcome, there)
    assert caught.caught and caught.caught_by == ["memory: memory/oom_threshold/mlp/float32/none"]


def test_a_device_following_its_own_autocast_policy_is_compared_by_status():
    def policy(dtype, status="pass"):
        return Record("amp/autocast_policy/bfloat16/softmax/in=bfloat16", status=status,
                      metrics={"out_dtype": dtype}, rules={"out_dtype": equal()},
                      test="suites/amp/test_autocast.py::test_autocast_policy[x]")

    parity = compare(full(CPU, p=policy("bfloat16")), full(NPU, p=policy("float32")))
    assert parity.verdict == "PARITY"
    assert "autocast policy" in parity.not_compared["training"]
    failing = compare(full(CPU, p=policy("bfloat16")), full(NPU, p=policy("float16", "fail")))
    assert failing.verdict == "DIFFERENCES"

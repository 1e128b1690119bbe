import os
import subprocess
import sys

import pytest
import torch

from harness import faults


def test_registry_has_the_example_faults_with_checks():
    known = faults.registry()
    assert {"example.add_drift", "example.relu_leaks"} <= set(known)
    for fault in known.values():
        assert fault.checks and fault.description and fault.family


def test_perturb_op_acts_only_inside_the_dut_scope(cpu):
    faults.set_active(["example.add_drift"])
    a, b = torch.ones(4), torch.ones(4)
    with cpu.scope():
        inside = a + b
    outside = a + b
    assert torch.all(inside == 2 * (1 + 1e-3)) and torch.all(outside == 2)


def test_perturb_op_respects_dtype_filter(cpu):
    faults.set_active(["example.add_drift"])
    with cpu.scope():
        assert torch.all(torch.ones(4, dtype=torch.float64) + 1 == 2)


def test_patch_attr_restores_the_original(cpu):
    original = torch.nn.functional.relu
    faults.set_active(["example.relu_leaks"])
    x = torch.tensor([-1.0, 2.0])
    with cpu.scope():
        assert torch.nn.functional.relu(x)[0] == pytest.approx(-0.01)
    assert torch.nn.functional.relu is original and torch.nn.functional.relu(x)[0] == 0


def test_patch_of_inherited_method_is_removed_again(cpu):
    fault = faults.patch_attr("t.sgd", family="t", description="d",
                              target="torch.optim.SGD.zero_grad",
                              replace=lambda orig: (lambda self, set_to_none=True: None),
                              checks=("x",))
    assert "zero_grad" not in vars(torch.optim.SGD)
    with fault.activate(cpu):
        assert "zero_grad" in vars(torch.optim.SGD)
    assert "zero_grad" not in vars(torch.optim.SGD)


def test_unknown_fault_names_the_way_out():
    with pytest.raises(faults.FaultError, match="faults list"):
        faults.resolve("no.such.fault")


def test_user_fault_from_a_module(pytester, cpu):
    pytester.makepyfile(userfaults="""
        from harness.faults import perturb_op
        NEG = perturb_op("user.neg", family="user", description="negates exp",
                         op="aten.exp", transform=lambda out, a, k: -out, checks=("x",))
        NOT_A_FAULT = 3
    """)
    pytester.syspathinsert()
    faults.set_active(["userfaults:NEG"])
    with cpu.scope():
        assert torch.exp(torch.zeros(1)).item() == -1.0
    with pytest.raises(faults.FaultError, match="is not a harness.faults.Fault"):
        faults.resolve("userfaults:NOT_A_FAULT")
    with pytest.raises(faults.FaultError, match="cannot import"):
        faults.resolve("nowhere_module:NEG")


def test_faults_reach_child_processes_through_the_environment():
    code = ("import torch; from harness.device import Device\n"
            "with Device('cpu').scope(): print((torch.ones(1) + torch.ones(1)).item())")
    env = dict(os.environ, **{faults.ENV_VAR: "example.add_drift"})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert float(out.stdout) == pytest.approx(2.002)


def test_a_fault_whose_checks_all_skip_is_not_applicable_not_caught():
    from harness.faults import check as fault_check

    fault = faults.registry()["example.add_drift"]
    skipped = fault_check.FaultResult(fault,
                                      fault_check.RunOutcome(0, {"a::b": "skipped"}, 1, ""))
    crashed = fault_check.FaultResult(fault, fault_check.RunOutcome(3, {}, 1, "boom"))
    assert not skipped.applicable and skipped.ok and not skipped.caught
    assert crashed.applicable and not crashed.ok
    text = fault_check.report_text(fault_check.RunOutcome(0, {"x": "passed"}, 1, ""),
                                   [skipped, crashed])
    assert "0/1 faults caught; NOT caught: example.add_drift; 1 not applicable here" in text
    report = fault_check.report_json(fault_check.RunOutcome(2, {}, 1, "clean exploded"),
                                     [skipped, crashed])
    assert [f.get("output_tail") for f in report["faults"]] == [None, "boom"]  # missed: why
    assert report["clean_output_tail"] == "clean exploded" and not report["clean_ok"]


def test_a_timing_fault_missed_beyond_the_hosts_power_is_said_apart(tmp_path):
    """Note [A miss beyond the host's power]: a miss where every compare's MDE exceeds the
    fault's slow-down is reported apart and does not fail; one a compare could see stays a
    miss, and so does one with no compare, or a fault that is not about time."""
    import json

    from harness.faults import check as fault_check

    step8 = faults.registry()["bench.slow_step_8"]
    assert step8.effect == 0.08 and faults.registry()["example.add_drift"].effect == 0.0

    def result(fault, mdes, outcome="passed"):
        return fault_check.FaultResult(
            fault, fault_check.RunOutcome(0, {"a::b": outcome}, 1, "tail", tuple(mdes)))

    beyond = result(step8, (0.112, 0.14))
    visible = result(step8, (0.112, 0.05))
    uncompared = result(step8, ())
    unmeasured = result(step8, (0.112, None))  # a compare that can give no regression
    not_timing = result(faults.registry()["example.add_drift"], (0.5,))
    caught = result(step8, (0.2,), outcome="failed")
    assert beyond.beyond_power and beyond.ok and not beyond.caught
    assert caught.ok and not caught.beyond_power
    for missed in (visible, uncompared, unmeasured, not_timing):
        assert not missed.beyond_power and not missed.ok
    text = fault_check.report_text(fault_check.RunOutcome(0, {"x": "passed"}, 1, ""),
                                   [beyond, visible, caught])
    assert "beyond this host's power: MDE 11.2%, 14.0% vs 8%" in text
    assert "- (a compare could see it: MDE 5.0%, 11.2% vs 8%)" in text
    assert text.splitlines()[-1].startswith(
        "1/2 faults caught; NOT caught: bench.slow_step_8; 1 beyond this host's power")
    report = fault_check.report_json(fault_check.RunOutcome(0, {"x": "passed"}, 1, ""),
                                     [beyond, visible])
    assert [(f["beyond_power"], f["mdes"], f["output_tail"]) for f in report["faults"]] == [
        (True, [0.112, 0.14], "tail"), (False, [0.112, 0.05], "tail")]
    # what a run's results file says: the MDE of each benchmark compare it judged
    doc = {"outcomes": {"a::b": "passed"},
           "records": {"bench/op/mm": {"info": {"verdict": {"mde": 0.112}}},
                       "bench/op/conv": {"info": {"verdict": {"mde": None}}},
                       "ops/add": {"info": {"aten_ops": []}}, "bench/new": {}}}
    (tmp_path / "run.json").write_text(json.dumps(doc))
    assert fault_check._read_run(tmp_path) == ({"a::b": "passed"}, [0.112, None])


def test_exclusive_faults_run_alone_after_the_others(monkeypatch, tmp_path):
    """Timing faults (``exclusive``) and their clean run get the machine to themselves."""
    import threading
    import time as time_mod

    from harness.faults import Fault
    from harness.faults import check as fault_check

    active, log, lock = [0], [], threading.Lock()

    def fake_run(args, results_dir, *, root, timeout, env=None):
        name = next((args[i + 1] for i, a in enumerate(args) if a == "--inject-fault"),
                    "clean " + " ".join(a for a in args if a == "--bench"))
        with lock:
            active[0] += 1
            log.append((name, active[0]))
        time_mod.sleep(0.05)
        with lock:
            active[0] -= 1
        return fault_check.RunOutcome(0, {"t::x": "failed" if "--inject-fault" in args
                                          else "passed"}, 0.05, "")

    def fault(name, exclusive):
        return Fault(name, "example", "d", ("t::x",), lambda device: None,
                     ("--bench",) if exclusive else (), exclusive=exclusive)

    monkeypatch.setattr(fault_check, "run_pytest", fake_run)
    selected = [fault("timing.a", True), fault("plain.a", False), fault("plain.b", False),
                fault("timing.b", True)]
    clean, found = fault_check.check(selected, root=tmp_path, jobs=2)
    assert [r.fault.name for r in found] == [f.name for f in selected] and clean.exit_code == 0
    names = [name for name, _ in log]
    first_alone = names.index("clean --bench")
    assert set(names[first_alone:]) == {"clean --bench", "timing.a", "timing.b"}
    assert all(concurrent == 1 for _, concurrent in log[first_alone:])


def test_a_run_that_died_without_results_runs_once_more(monkeypatch, tmp_path):
    """Note [A run that died]: no results file and no timeout -> one more run, said in its
    output; a run stopped by the timeout is not rerun; a second death is reported as such."""
    import json as json_mod
    import signal as signal_mod

    from harness.faults import check as fault_check

    calls = []

    def runs(*results):  # each: (exit code, output, outcomes or None: no results file)
        def fake(args, results_dir, *, root, timeout, env):
            code, output, outcomes = results[len(calls)]
            calls.append(args)
            if outcomes is not None:
                (results_dir / "r.json").write_text(json_mod.dumps({"outcomes": outcomes}))
            return code, output
        return fake

    monkeypatch.setattr(fault_check, "_run_once",
                        runs((-signal_mod.SIGKILL, "FFF", None), (1, "3 failed", {"t::x": "failed"})))
    outcome = fault_check.run_pytest(["t"], tmp_path / "a", root=tmp_path, timeout=5)
    assert len(calls) == 2 and outcome.failed == ["t::x"]
    assert "ended without writing its results (killed by SIGKILL)" in outcome.output
    assert outcome.output.endswith("3 failed")

    calls.clear()
    monkeypatch.setattr(fault_check, "_run_once",
                        runs((-9, f"{fault_check.KILLED_MARK} 5 s", None)))
    outcome = fault_check.run_pytest(["t"], tmp_path / "b", root=tmp_path, timeout=5)
    assert len(calls) == 1 and not outcome.outcomes  # a hang is not rerun

    calls.clear()
    monkeypatch.setattr(fault_check, "_run_once", runs((3, "died", None), (3, "died again", None)))
    outcome = fault_check.run_pytest(["t"], tmp_path / "c", root=tmp_path, timeout=5)
    assert len(calls) == 2 and not outcome.outcomes and "exit code 3" in outcome.output


def test_parity_timing_faults_and_their_clean_runs_have_the_machine_to_themselves(monkeypatch,
                                                                                  tmp_path):
    """faults check --parity-reference: an exclusive (timing) fault's clean pair and faulted
    run each run alone: nothing else runs beside them."""
    import threading

    from harness.faults import Fault, check

    def quiet(device):
        raise AssertionError("never activated here")

    shared = Fault("t.shared", "t", "d", ("a",), quiet, parity="ops")
    timing = Fault("t.timing", "t", "d", ("b",), quiet, ("--run-benchmarks",),
                   exclusive=True, parity="speed")
    lock, running, log = threading.Lock(), [], []

    def fake_run(args, results_dir, **kwargs):
        exclusive = "--run-benchmarks" in args
        with lock:
            log.append((exclusive, list(running)))
            running.append(exclusive)
        threading.Event().wait(0.05)
        with lock:
            running.remove(exclusive)
        return check.RunOutcome(0, {"x": "passed"}, 0.0, "")

    monkeypatch.setattr(check, "run_pytest", fake_run)
    monkeypatch.setattr(check, "_load_run", lambda folder: None)
    check.check_parity([timing, shared], root=tmp_path, device="npu", reference="cpu", jobs=2)
    assert sorted(exclusive for exclusive, _ in log) == [False] * 3 + [True] * 3
    assert any(beside for exclusive, beside in log if not exclusive)  # shared: in parallel
    for exclusive, beside in log:  # a timing run started with nothing running, and
        assert not exclusive or beside == []  # nothing started beside a timing run
        assert True not in beside

"""The benchmark engine: verdict statistics, change points, pytest-benchmark glue, K runs."""

import dataclasses
import json
import random
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Optional

import early
import pytest

from harness.bench import evaluate, history, stats
from harness.bench.timing import Timing, bench_rounds, measure, run_values
from harness.device import Device
from harness.results import read_document

ROOT = Path(__file__).resolve().parent.parent


def _runs(centre, jitter, n, rng):
    return [centre * (1 + rng.gauss(0, jitter)) for _ in range(n)]


# ------------------------------------------------------------------- the verdict

def test_noise_alone_never_alerts_over_many_comparisons():
    rng = random.Random(0)
    verdicts = [stats.judge(_runs(10.0, 0.02, 10, rng), _runs(10.0, 0.02, 2, rng)).verdict
                for _ in range(300)]
    assert verdicts.count("regression") == 0
    assert verdicts.count("unreliable") == 0


def test_a_15_percent_slowdown_is_detected_with_two_runs():
    rng = random.Random(1)
    verdicts = [stats.judge(_runs(10.0, 0.02, 10, rng), _runs(11.5, 0.02, 2, rng)).verdict
                for _ in range(100)]
    assert verdicts.count("regression") >= 95


def test_a_single_violating_run_is_only_suspicious():
    base = [10.0, 10.1, 9.9, 10.05, 9.95, 10.0]
    verdict = stats.judge(base, [13.0])
    assert verdict.verdict == "suspicious" and not verdict.alerts
    assert "second run" in verdict.reason


def test_a_noisy_baseline_is_unreliable_within_its_noise():
    rng = random.Random(2)
    base = _runs(10.0, 0.25, 10, rng)
    verdict = stats.judge(base, [13.0, 13.5, 12.8])  # 1.5x, within a 26% spread's MDE (97%)
    assert verdict.verdict == "unreliable" and "spread" in verdict.reason
    assert not verdict.alerts


def test_a_noisy_baseline_still_sees_a_slow_down_beyond_its_noise():
    """Note [A slow-down beyond the noise]: 3x against runs that scatter 26% (MDE 97%) is
    a regression, and says the baseline was noisy; noise alone over noisy baselines stays
    unalarmed through that door (4 runs against 4, as the benchmark faults run)."""
    rng = random.Random(2)
    base = _runs(10.0, 0.25, 10, rng)
    verdict = stats.judge(base, [30.0, 31.0, 29.0])
    assert verdict.verdict == "regression" and verdict.alerts
    assert verdict.ratio > 1 + verdict.mde and "beyond what that noise hides" in verdict.reason
    # the Zen 3's fp32 step: a 74% slow-down over a baseline scattering about 6%
    rng = random.Random(3)
    assert [stats.judge(_runs(10.0, 0.06, 4, rng), _runs(17.4, 0.06, 4, rng)).verdict
            for _ in range(50)] == ["regression"] * 50
    rng = random.Random(7)
    noisy_alarms = 0
    for _ in range(2000):
        verdict = stats.judge(_runs(10.0, 0.1, 4, rng), _runs(10.0, 0.1, 4, rng))
        noisy_alarms += verdict.alerts and verdict.spread > 0.05
    assert noisy_alarms == 0


def test_too_few_baseline_runs_are_unreliable_and_say_how_to_record():
    verdict = stats.judge([10.0, 10.1], [20.0, 20.0])
    assert verdict.verdict == "unreliable" and "--bench-runs 3" in verdict.reason


def test_the_minimum_effect_is_per_benchmark():
    base = [10.0, 10.01, 9.99, 10.0, 10.02, 9.98, 10.0, 10.01]
    current = [11.0, 11.01]  # 10%: significant, beyond the spread floor's bound
    assert stats.judge(base, current).verdict == "regression"
    assert stats.judge(base, current, stats.Policy(min_effect=0.12)).verdict != "regression"


def test_a_speedup_is_an_improvement():
    base = [10.0, 10.1, 9.9, 10.05, 9.95, 10.0]
    assert stats.judge(base, [8.0, 8.1]).verdict == "improvement"


def test_the_regression_summary_names_medians_ratio_ci_and_p():
    base = [10.0, 10.1, 9.9, 10.05, 9.95, 10.0]
    verdict = stats.judge(base, [12.0, 12.1, 11.9])
    text = verdict.summary()
    assert verdict.verdict == "regression"
    for part in ("median 10 -> 12", "ratio 1.2", "CI [", "t-test p=", "Mann-Whitney p="):
        assert part in text


def test_run_values_skips_malformed_entries():
    assert run_values([{"value": 1.0}, {"value": -1}, {"x": 2}, "junk", {"value": 2}]) == [1.0, 2]


def test_a_and_a_never_alerts_with_three_runs_at_any_noise_level():
    rng = random.Random(10)
    for jitter in (0.003, 0.01, 0.03):
        verdicts = [stats.judge(_runs(10.0, jitter, 10, rng), _runs(10.0, jitter, 3, rng))
                    for _ in range(50)]
        assert sum(v.alerts for v in verdicts) == 0, jitter


def test_an_8_percent_slowdown_is_detected_with_three_runs_at_half_a_percent_noise():
    rng = random.Random(11)
    verdicts = [stats.judge(_runs(10.0, 0.005, 10, rng), _runs(10.8, 0.005, 3, rng))
                for _ in range(60)]
    assert sum(v.alerts for v in verdicts) >= 58
    assert all(v.mde is not None and v.mde < 0.08 for v in verdicts)


def test_a_drift_within_the_margin_does_not_alert_however_quiet_the_runs():
    """Drift between sessions is the margin, not noise: 3% slower, 0.3% noise."""
    rng = random.Random(12)
    verdicts = [stats.judge(_runs(10.0, 0.003, 10, rng), _runs(10.3, 0.003, 6, rng))
                for _ in range(60)]
    assert sum(v.alerts for v in verdicts) == 0


def test_the_mde_is_the_slowdown_found_nine_times_in_ten():
    rng = random.Random(13)
    found = stats.mde(0.01, 10, 3)
    assert 0.07 < found < 0.09
    hits = sum(stats.judge(_runs(10.0, 0.01, 10, rng), _runs(10.0 * (1 + found), 0.01, 3, rng)
                           ).alerts for _ in range(200))
    assert 0.78 * 200 <= hits <= 0.97 * 200  # POWER = 0.9, up to the spread's estimate


def test_the_mde_grows_with_noise_and_shrinks_with_runs():
    assert stats.mde(0.005, 10, 3) < stats.mde(0.01, 10, 3) < stats.mde(0.02, 10, 3)
    assert stats.mde(0.02, 10, 6) < stats.mde(0.02, 10, 3) < stats.mde(0.02, 10, 2)
    assert stats.mde(0.0001, 10, 3) == stats.mde(stats.SPREAD_FLOOR, 10, 3)  # the floor
    assert stats.mde(0.01, 10, 1) is None  # one run is at most suspicious
    assert stats.mde(0.01, 3, 3) is None  # Mann-Whitney cannot reach p < 0.05 at 3 vs 3


def test_a_benchmark_too_noisy_for_15_percent_says_what_would_fix_it():
    text = stats.detectable_text(stats.mde(0.045, 10, 3), 0.045, 10, 3)
    assert "too noisy for 15%" in text and "--bench-runs" in text
    assert stats.runs_for(0.045, 10, 0.15) == int(text.split("--bench-runs ")[1].split()[0])
    hopeless = stats.detectable_text(stats.mde(0.2, 10, 3), 0.2, 10, 3)
    assert "bigger workload" in hopeless
    few = stats.detectable_text(None, 0.01, 2, 3)
    assert "record >= 3 baseline runs" in few
    short = stats.detectable_text(stats.mde(0.04, 3, 3), 0.04, 3, 3)  # MWU: 3 vs 3 is blind
    assert "a baseline of 10 runs (record again: --baseline record --bench-runs 7)" in short


def test_a_compare_on_a_noisier_host_widens_its_own_interval():
    base = [10.0 * (1 + d) for d in (-0.004, 0.0, 0.004, -0.002, 0.002, 0.001, -0.001, 0.0)]
    calm = stats.judge(base, [10.9, 10.91, 10.89])
    noisy = stats.judge(base, [10.9, 12.0, 10.0])  # the same median, runs 10% apart
    assert calm.alerts and not noisy.alerts
    assert noisy.ci[1] - noisy.ci[0] > 5 * (calm.ci[1] - calm.ci[0])


def test_every_verdict_summary_says_what_the_benchmark_can_detect():
    base = [10.0, 10.1, 9.9, 10.05, 9.95, 10.0]
    assert "detects >= " in stats.judge(base, [10.0, 10.02, 9.98]).summary()
    assert "detects nothing" in stats.judge(base, [10.0]).summary()


def test_a_baseline_states_its_mde_host_adjusted():
    rng = random.Random(14)
    controls = [1 + rng.uniform(-0.1, 0.1) for _ in range(10)]
    values = [10.0 * c * (1 + rng.gauss(0, 0.003)) for c in controls]  # follows the host
    found, spread, nb = stats.baseline_mde(values, controls)
    raw, raw_spread, _ = stats.baseline_mde(values)
    assert nb == 10 and spread < 0.01 < raw_spread and found < raw


# ---------------------------------------------------------------------- history

def test_history_finds_the_change_at_the_first_slow_run():
    rng = random.Random(3)
    series = _runs(1.0, 0.02, 5, rng) + _runs(1.15, 0.02, 7, rng)
    changes = history.change_points(series)
    assert [c.index for c in changes] == [5]
    assert changes[0].ratio == pytest.approx(1.15, rel=0.05)


def test_history_of_a_noisy_flat_series_has_no_change():
    rng = random.Random(4)
    assert history.change_points(_runs(1.0, 0.05, 20, rng)) == []


def _results_file(path: Path, i: int, value: float, stack: str = "torch-2.13.0",
                  control: Optional[float] = None) -> None:
    run = {"value": value} if control is None else {"value": value, "control_ms": control}
    doc = {"schema_version": 1,
           "fingerprint": {"device_type": "cpu", "device_slug": "x", "stack_id": stack},
           "started": f"2026-12-01T00:{i:02d}:00Z", "finished": "", "seed": 0,
           "records": {"bench/op/mm/float32/n256": {
               "suite": "bench", "status": "pass", "metrics": {"value": value},
               "rules": {}, "info": {"runs": [run]}}}}
    path.write_text(json.dumps(doc))


def test_history_judges_a_benchmark_host_adjusted(tmp_path, capsys):
    """The last clean run on a slow host (its control 1.3x) does not take the change."""
    rng = random.Random(8)
    for i in range(11):
        control = 1.3 if i == 4 else 1 + rng.uniform(-0.08, 0.08)
        value = (1.0 if i < 5 else 1.2) * control ** 0.9 * (1 + rng.gauss(0, 0.005))
        _results_file(tmp_path / f"r{i:02d}.json", i, value, control=control)
    runs, _ = history.load_runs(tmp_path)
    raw = history.change_points([r.values["bench/op/mm/float32/n256"] for r in runs])
    assert [c.index for c in raw] == [4]  # raw: the slow host's run looks like the change
    assert history.main(tmp_path) == 0
    out = capsys.readouterr().out
    assert "change at run 6 (r05.json" in out and "host-adjusted" in out
    assert "change at run 5" not in out


def test_history_command_names_the_first_run_after_the_change(tmp_path, capsys):
    rng = random.Random(5)
    for i in range(12):
        _results_file(tmp_path / f"r{i:02d}.json", i, (1.0 if i < 5 else 1.2) *
                      (1 + rng.gauss(0, 0.01)), stack="torch-2.13.0" if i < 5 else "torch-2.14.0")
    assert history.main(tmp_path) == 0
    out = capsys.readouterr().out
    assert "change at run 6 (r05.json" in out and "stack torch-2.14.0" in out


# ------------------------------------------------------------- bench-eval tables

def _phases(rng, n=12, jitter=0.005, load_jitter=0.01, effects=(0.08, 0.15)):
    """Synthetic bench-eval runs of one benchmark: quiet and loaded phases."""
    values = {"baseline": {"b": _runs(10, jitter, n, rng)}}
    for suffix, j in (("", jitter), ("-load", load_jitter)):
        values["aa" + suffix] = {"b": _runs(10, j, n, rng)}
        for e in effects:
            values[f"slow{round(e * 100)}{suffix}"] = {"b": _runs(10 * (1 + e), j, n, rng)}
    return values


def test_bench_eval_judges_both_engines_quiet_and_loaded_on_the_same_runs():
    values = _phases(random.Random(6))
    (row,) = evaluate.judge_all(values, keep=10, compare_runs=3, effects=(0.08, 0.15))
    assert set(row.cells) == {"quiet", "loaded"}
    quiet = row.cells["quiet"]
    assert quiet.aa == 0 and quiet.detected == {0.08: 12, 0.15: 12}
    assert quiet.pb_detected[0.15] == 12 and quiet.ratio[0.08] == pytest.approx(1.08, rel=0.02)
    assert row.mde is not None and row.mde < 0.08 and "detects >=" in row.detectable_text
    text = evaluate.table([row], effects=(0.08, 0.15), compare_runs=3)
    assert "| `b` | quiet |" in text and "| `b` | loaded |" in text
    assert "MDE (3 runs)" in text and "engine 8% detected" in text


def test_bench_eval_leaves_out_conditions_it_did_not_measure():
    values = {k: v for k, v in _phases(random.Random(7)).items() if not k.endswith("-load")}
    (row,) = evaluate.judge_all(values, keep=10, compare_runs=3, effects=(0.08, 0.15))
    assert set(row.cells) == {"quiet"}


def test_bench_eval_phases_are_the_quiet_baseline_then_each_effect_quiet_and_loaded():
    names = [p.name for p in evaluate.phases_of((0.08, 0.15), load=True)]
    assert names == ["baseline", "aa", "slow8", "slow15", "aa-load", "slow8-load",
                     "slow15-load"]
    assert [p.name for p in evaluate.phases_of((0.08,), load=False)] == ["baseline", "aa",
                                                                          "slow8"]
    assert evaluate.Phase(0.08).fault == "bench.slow_step_8" and evaluate.Phase().fault is None


def test_bench_eval_knows_its_faults():
    assert evaluate.fault_for(0.15) == "bench.slow_step_15"
    assert evaluate.fault_for(0.08) == "bench.slow_step_8"
    with pytest.raises(ValueError, match="0.08, 0.10, 0.15, 0.30"):
        evaluate.fault_for(0.2)


def test_the_background_load_is_stopped_on_errors_and_interrupts():
    import os

    for exc in (RuntimeError, KeyboardInterrupt):
        with pytest.raises(exc):
            with evaluate.background_load(60, cpu=-1) as pid:
                os.kill(pid, 0)  # running
                raise exc("stop")
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reaped: gone, not a zombie


def test_the_background_load_ends_by_itself_after_its_bound():
    with evaluate.background_load(0.05, cpu=-1) as pid:
        time.sleep(1.0)  # the child has stopped by itself; leaving waits for it
    assert pid > 0


def test_bench_eval_cli_takes_effects_load_and_compare_runs(monkeypatch):
    from harness import cli

    seen = {}
    monkeypatch.setattr(evaluate, "main", lambda **kw: seen.update(kw) or 0)
    assert cli.main(["bench-eval", "--runs", "4", "--effect", "0.08", "--load"]) == 0
    assert seen["effects"] == (0.08,) and seen["load"] is True and seen["compare_runs"] == 3
    assert cli.main(["bench-eval", "--runs", "4"]) == 0
    assert seen["effects"] == evaluate.EFFECTS == (0.08, 0.15) and seen["load"] is False


def test_bench_eval_cli_rejects_an_effect_without_a_fault(capsys):
    from harness import cli

    with pytest.raises(SystemExit):
        cli.main(["bench-eval", "--runs", "4", "--effect", "0.2"])
    assert "0.08, 0.10, 0.15, 0.30" in capsys.readouterr().err


# ---------------------------------------------------------------------- faults

def test_the_step_fault_is_proportional_to_the_work_it_slows():
    from harness.faults.catalog.bench import _slower_scope

    device = Device("cpu")
    start = time.process_time()
    with _slower_scope(device, 0.5):
        spin_for = time.process_time() + 0.04
        while time.process_time() < spin_for:
            pass
    assert 0.055 < time.process_time() - start < 0.075  # 0.04 s of work plus half of it


@pytest.mark.parametrize("amp", [True, False], ids=["amp-only", "fp32-only"])
def test_a_precision_fault_slows_only_its_precision(amp):
    """amp=True (bench.amp_slow_15) slows rounds that entered autocast; amp=False
    (bench.fp32_step_half_speed) the others."""
    import torch

    from harness.faults.catalog.bench import _slower_scope, spin

    def timed(autocast: bool) -> float:
        start = time.process_time()
        with _slower_scope(Device("cpu"), 1.0, amp=amp):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                spin(0.03, time.process_time)
        return time.process_time() - start

    slowed, kept = timed(amp), timed(not amp)
    assert kept < 0.045 < slowed


def test_a_simulator_runs_its_backward_in_the_calling_thread_while_timed():
    """Note [A simulator is timed as its host]: SimNPU (host-timed, not the CPU) gets no
    autograd device thread while timed; the CPU and real accelerators keep torch's way."""
    import types

    import torch

    from harness.bench.timing import backward_in_caller

    simulator = types.SimpleNamespace(simulated=True)
    accelerator = types.SimpleNamespace(simulated=False)
    with backward_in_caller(simulator):
        assert not torch.autograd.is_multithreading_enabled()
    assert torch.autograd.is_multithreading_enabled()
    for device in (Device("cpu"), accelerator):
        with backward_in_caller(device):
            assert torch.autograd.is_multithreading_enabled()


# ------------------------------------------------------ pytest-benchmark glue

def test_measure_collects_the_requested_samples():
    calls = []
    timing = measure(lambda: calls.append(1), Device("cpu"), warmup=2, repeat=5)
    assert isinstance(timing, Timing) and len(calls) == 7 and len(timing.samples_ms) == 5


def test_rounds_are_timed_by_pytest_benchmark_with_the_sync_inside(pytester):
    pytester.makepyfile(test_timed="""
        import time
        from harness.bench.timing import bench_rounds
        from harness.device import Device

        class Counting(Device):
            syncs = 0
            def synchronize(self):
                Counting.syncs += 1

        def test_step(benchmark):
            device = Counting("cpu")
            stat, flags = bench_rounds(benchmark, lambda: time.sleep(0.001), device,
                                       budget_s=0.05)
            assert stat.rounds == len(benchmark.stats.stats.data) >= 5
            assert stat.value < 0.9 < flags["host_ms"] < 50  # sleeping costs no CPU time
            assert Counting.syncs >= stat.rounds  # one per round, inside it
            assert benchmark.extra_info["ms_per_step"] == stat.value
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider",
                                           "--benchmark-json", "out.json")
    result.assert_outcomes(passed=1)
    data = json.loads((pytester.path / "out.json").read_text())
    assert data["benchmarks"][0]["extra_info"]["inner"] >= 1


def test_bench_rounds_flags_a_missing_sync():
    class Bench:  # the part of pytest-benchmark's fixture bench_rounds uses
        extra_info: dict = {}

        def pedantic(self, target, rounds, iterations, warmup_rounds):
            for _ in range(rounds):
                target()
            self.stats = type("S", (), {"stats": type("D", (), {"data": [1e-3] * rounds})})

    class Timer:
        def start(self):
            pass

        def stop(self):
            pass

        def elapsed_ms(self):
            return 5.0  # the device took 5 ms; the host saw 1 ms

    class Async(Device):
        is_accelerator = True

        def event_timer(self):
            return Timer()

    stat, flags = bench_rounds(Bench(), lambda: None, Async("cpu"), budget_s=0.001)
    assert "sync_missing" in flags and stat.device_ms > flags["host_ms"]


def test_a_ratio_benchmark_pairs_each_round_with_its_reference():
    """The reference step is timed in the setup before each round (same clock, same
    scope), and the statistic is the median of the per-round ratios."""
    from harness.faults.catalog.bench import spin

    class Bench:  # pytest-benchmark's pedantic with its setup hook
        extra_info: dict = {}

        def pedantic(self, target, rounds, iterations, warmup_rounds, setup=None):
            for _ in range(rounds + warmup_rounds):
                if setup is not None:
                    setup()
                target()
            self.stats = type("S", (), {"stats": type("D", (), {"data": [4e-3] * rounds})})

    stat, flags = bench_rounds(Bench(), lambda: spin(0.004, time.process_time), Device("cpu"),
                               rounds=12, control=True,
                               reference=lambda: spin(0.002, time.process_time))
    assert stat.value == pytest.approx(2.0, rel=0.15)
    assert flags["reference_ms"] == pytest.approx(2.0, rel=0.15) and stat.kept >= 4


# ------------------------------------------------------------ --bench-runs K

LAYER_NORM = "suites/bench/test_throughput.py::test_benchmark[op/layer_norm/float32/fwd/256x1024]"


def _suite(env: dict, *args, tmp):
    return early.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                      LAYER_NORM, "--run-benchmarks", f"--results-dir={tmp / 'results'}",
                      f"--baseline-dir={tmp / 'baselines'}", *args],
                     cwd=ROOT, env=env, timeout=600)


def _stored(tmp):
    (path,) = (tmp / "baselines").glob("*/*/*.json")
    return json.loads(path.read_text())["records"]["bench/op/layer_norm/float32/fwd/256x1024"]


def _record_two_runs_then_compare(env: dict, tmp: Path) -> dict:
    """A benchmark recorded with ``--bench-runs 2``, then one run compared with it (an
    early job: Note [Early jobs] in tests/early.py; three child runs, ~12 s)."""
    first = _suite(env, "--bench-runs", "2", "--baseline", "record", tmp=tmp)
    stored = _stored(tmp) if first.returncode == 0 else None
    return {"first": first, "stored": stored, "compare": _suite(env, tmp=tmp)}


K_PROCESS_RUNS = early.in_temp_dir("bench: --bench-runs 2, then a compare",
                                   _record_two_runs_then_compare)
EARLY = (K_PROCESS_RUNS,)


def test_bench_runs_record_k_process_runs_and_compare_judges_them():
    got = early.result(K_PROCESS_RUNS)
    first, compare = got["first"], got["compare"]
    assert first.returncode == 0, first.stdout[-3000:]
    assert "bench run 1/2 (child)" in first.stdout
    runs = got["stored"]["info"]["runs"]
    assert len(runs) == 2 and len({r["pid"] for r in runs}) == 2  # two processes
    # one run against two: too few to decide, said so
    assert compare.returncode == 0, compare.stdout[-3000:]
    assert "unreliable" in compare.stdout and "1 run(s) vs 2 baseline run(s)" in compare.stdout
    assert "record with --bench-runs 3" in compare.stdout


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="no affinity")
def test_a_cpu_benchmark_is_timed_on_one_cpu_and_gets_every_cpu_back(monkeypatch):
    import os

    from harness.bench.timing import PIN_ENV, pinned

    cpu = Device("cpu")
    allowed = os.sched_getaffinity(0)
    monkeypatch.delenv(PIN_ENV, raising=False)
    with pinned(cpu) as chosen:
        assert chosen == min(allowed) and os.sched_getaffinity(0) == {chosen}
    assert os.sched_getaffinity(0) == allowed
    with pinned(cpu, clock="host") as chosen:  # work in other processes: every CPU
        assert chosen is None and os.sched_getaffinity(0) == allowed
    monkeypatch.setenv(PIN_ENV, "none")
    with pinned(cpu) as chosen:
        assert chosen is None
    monkeypatch.setenv(PIN_ENV, "99999")
    with pytest.raises(ValueError, match="may run on CPUs"):
        with pinned(cpu):
            pass
    monkeypatch.setenv(PIN_ENV, "fast")
    with pytest.raises(ValueError, match="a CPU number"):
        with pinned(cpu):
            pass
    assert os.sched_getaffinity(0) == allowed


def test_freed_memory_stays_in_the_process_while_a_cpu_benchmark_is_timed(monkeypatch):
    from harness.bench import timing

    calls = []
    monkeypatch.setattr(timing, "_mallopt", lambda: lambda option, value: calls.append(
        (option, value)) or 1)
    with timing.freed_memory_kept(Device("cpu")) as kept:
        assert kept and calls == [(timing._M_MMAP_THRESHOLD, timing._KEEP_FREED),
                                  (timing._M_TRIM_THRESHOLD, timing._KEEP_FREED)]
    assert calls[2:] == [(timing._M_MMAP_THRESHOLD, timing._GLIBC_DEFAULT_THRESHOLD),
                         (timing._M_TRIM_THRESHOLD, timing._GLIBC_DEFAULT_THRESHOLD)]
    calls.clear()

    class Accelerator:
        host_timed = False

    with timing.freed_memory_kept(Accelerator()) as kept:  # its allocator caches already
        assert not kept and calls == []
    monkeypatch.setattr(timing, "_mallopt", lambda: None)  # no glibc
    with timing.freed_memory_kept(Device("cpu")) as kept:
        assert not kept


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux")
def test_the_real_mallopt_is_found_and_accepts_the_thresholds():
    from harness.bench import timing

    with timing.freed_memory_kept(Device("cpu")) as kept:
        assert kept


def test_a_training_step_benchmark_repeats_the_same_work():
    """Note [A timed step repeats the same work]: the weights do not move between rounds,
    yet the optimizer runs (its momentum buffers fill)."""
    import torch

    from harness.bench import workloads

    workload = next(w for w in workloads.WORKLOADS if w.id.startswith("bench/train/simplecnn")
                    and "float32" in w.id)
    prepared = workload.build(Device("cpu"), "small")
    model, optimizer = prepared.state["model"], prepared.state["optimizer"]
    before = [p.detach().clone() for p in model.parameters()]
    for _ in range(3):
        prepared.step()
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    buffers = [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
    assert all(b is not None for b in buffers) and any(bool(b.abs().sum() > 0) for b in buffers)


def _hosted(values, host, slope):
    """Runs whose time follows a host factor ``host`` with ``slope``: (values, controls)."""
    return [v * h ** slope for v, h in zip(values, host)], [0.4 * h for h in host]


def test_a_slow_host_is_adjusted_for_and_a_slow_dut_is_not():
    """Note [Host adjustment]: runs slower only because the host was (their control slower
    by the same factor, at this benchmark's slope) are ok; the same slow-down with a
    quiet host is a regression; and a regression is still found on a slow host."""
    rng = random.Random(3)
    base_host = [1.0, 1.02, 0.99, 1.3, 1.0, 1.01, 0.98, 1.25, 1.0, 1.03]
    base, base_ctl = _hosted(_runs(10.0, 0.01, 10, rng), base_host, 0.6)
    slow_host = [1.4, 1.35]
    cur, cur_ctl = _hosted(_runs(10.0, 0.01, 2, rng), slow_host, 0.6)
    assert stats.judge(base, cur).verdict != "ok"  # unadjusted: looks 20% slower
    verdict = stats.judge(base, cur, controls=(base_ctl, cur_ctl))
    assert verdict.verdict == "ok", verdict.summary()
    assert verdict.host_slope == pytest.approx(0.6, abs=0.15)
    assert "host-adjusted ratio" in verdict.summary()
    slower, slower_ctl = _hosted(_runs(11.5, 0.01, 2, rng), slow_host, 0.6)
    assert stats.judge(base, slower, controls=(base_ctl, slower_ctl)).verdict == "regression"
    quiet, quiet_ctl = _hosted(_runs(11.5, 0.01, 2, rng), [1.0, 1.01], 0.6)
    found = stats.judge(base, quiet, controls=(base_ctl, quiet_ctl))
    assert found.verdict == "regression" and found.ratio == pytest.approx(1.15, abs=0.03)


def test_the_host_slope_ignores_a_shift_of_the_group():
    """The slope is learnt within each group: a regression (a shift of the current runs)
    with an unchanged host does not tilt it."""
    base = ([0.0, 0.1, 0.2, 0.3, 0.05], [0.0, 0.2, 0.4, 0.6, 0.1])   # slope 0.5
    shifted = ([0.5, 0.6, 0.7], [0.0, 0.2, 0.4])                    # +0.5, same slope
    assert stats.host_slope([base, shifted]) == pytest.approx(0.5)
    assert stats.host_slope([base, ([9.0], [3.0])]) == pytest.approx(0.5)  # one run: nothing
    flat = ([0.0, 0.01, -0.01], [0.1, 0.1, 0.1])
    assert stats.host_slope([flat]) == 0.0  # no host variation: nothing to learn
    wild = ([0.0, 1.0, 2.0], [0.0, 0.1, 0.2])
    assert stats.host_slope([wild]) == stats.MAX_HOST_SLOPE


def test_a_host_far_slower_than_ever_is_only_suspicious_and_missing_controls_are_not_adjusted():
    rng = random.Random(4)
    base, cur = _runs(10.0, 0.01, 10, rng), _runs(11.5, 0.01, 2, rng)
    busy = ([1.0] * 9 + [1.1], [1.4, 1.45])  # beyond the slowest baseline run's by > 25%
    verdict = stats.judge(base, cur, controls=busy)
    assert verdict.verdict == "suspicious" and "extrapolate" in verdict.reason
    assert verdict.host_ratio == pytest.approx(1.425) and "host control ratio" in verdict.summary()
    seen = ([1.0] * 8 + [1.3, 1.35], [1.4, 1.45])  # the baseline saw such a host
    assert stats.judge(base, cur, controls=seen).verdict == "regression"
    missing = ([None] * 10, [1.2, 1.25])  # a baseline recorded before the control
    verdict = stats.judge(base, cur, controls=missing)
    assert verdict.verdict == "regression" and verdict.host_slope is None


def test_quiet_rounds_drop_the_rounds_a_host_spike_touched():
    """Note [Quiet rounds]: a round is judged by the control before and after it."""
    from harness.bench.timing import quiet_rounds

    controls = [1.0, 1.0, 1.0, 1.6, 1.0, 1.0, 1.0, 1.0, 1.05, 1.0]
    assert quiet_rounds(controls) == [0, 1, 4, 5, 6, 7, 8, 9]  # 2 and 3 saw the spike
    slow = [1.0, 1.0, 1.0] + [2.0] * 12  # mostly slow: the quietest third is kept
    assert quiet_rounds(slow) == [0, 1, 2, 3, 4]
    assert quiet_rounds([1.0, 3.0]) == [0, 1]  # too few rounds to choose from


def test_a_fault_spins_in_the_clock_its_benchmark_is_judged_in():
    """A host-clock benchmark (work in other processes) is slowed by a fraction of its wall
    time, an in-process CPU benchmark by a fraction of its CPU time."""
    from harness.bench.timing import judged_in
    from harness.faults.catalog.bench import _slower_scope, clock_of

    device = Device("cpu")
    assert clock_of(device) is time.process_time
    with judged_in(time.perf_counter):
        assert clock_of(device) is time.perf_counter
        start = time.perf_counter()
        with _slower_scope(device, 0.5):
            time.sleep(0.04)  # waiting on other processes: wall time, no CPU time
        assert 0.055 < time.perf_counter() - start < 0.1
    assert clock_of(device) is time.process_time


def test_bench_eval_uses_the_policy_the_benchmark_test_uses(monkeypatch):
    from harness.bench import workloads

    assert workloads.policy_for(workloads.ALLREDUCE_ID) == workloads.ALLREDUCE_POLICY
    assert workloads.policy_for("bench/train/simplecnn/float32/step/b8/small") == stats.Policy()
    strict = stats.Policy(min_effect=0.2)
    row = dataclasses.replace(workloads.BY_ID["bench/op/mm/float32/n256"], policy=strict)
    monkeypatch.setattr(workloads, "WORKLOADS", [row])
    assert workloads.policy_for(row.id) == strict  # a workload's own override
    assert workloads.policy_for("bench/op/unknown") == stats.Policy()


def _affinity_after(fn, *args):
    """The CPU affinity a forked child has after ``fn(*args)`` (this process keeps its own)."""
    import multiprocessing
    import os

    def child(queue):
        fn(*args)
        queue.put(sorted(os.sched_getaffinity(0)))

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(queue,))
    proc.start()
    got = queue.get(timeout=60)
    proc.join(60)
    return got


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="no affinity")
def test_dataloader_workers_and_ranks_each_get_their_own_cpu(monkeypatch):
    import os

    from harness.bench import workloads
    from harness.bench.timing import PIN_ENV, pin_helper

    allowed = sorted(os.sched_getaffinity(0))
    monkeypatch.delenv(PIN_ENV, raising=False)
    cpu = Device("cpu")
    loader = workloads.BY_ID["bench/dataloader/workers2/pin0"].build(cpu, "small")
    try:
        init = loader.state["loader"].worker_init_fn
        for worker in range(2):  # what worker i runs first: pinned to the i-th allowed CPU
            assert _affinity_after(init, worker) == [allowed[worker % len(allowed)]]
    finally:
        loader.close()
    assert _affinity_after(pin_helper, 5, cpu) == [allowed[5 % len(allowed)]]
    assert pin_helper(0, types.SimpleNamespace(host_timed=False)) is None
    monkeypatch.setenv(PIN_ENV, "none")
    assert pin_helper(0, cpu) is None
    assert sorted(os.sched_getaffinity(0)) == allowed


def test_the_host_control_is_timed_around_each_cpu_benchmark(tmp_path):
    """A benchmark run records each run's host control beside its value."""
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "suites/bench", "-m", "benchmark", "-k", "op and softmax",
                           "--baseline", "off", "--results-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    record = read_document(next(out.glob("*.json.gz")))["records"][
        "bench/op/softmax/float32/fwd/256x1024"]
    (run,) = record["info"]["runs"]
    assert run["control_ms"] > 0 and 3 <= run["kept"] <= run["rounds"]
    assert record["info"].get("freed_memory_kept", False) is sys.platform.startswith("linux")


# ------------------------------------------------- what each benchmark can detect

def test_the_judgement_alerts_and_report_say_what_each_benchmark_can_detect(tmp_path,
                                                                             fingerprint):
    from harness import regress, report
    from harness.report import render
    from harness.results import Record, RunResults
    from harness.verdict import judge

    rid = "bench/op/mm/float32/n256"
    good = {"mde": 0.064, "spread": 0.004, "baseline_runs": 10, "compare_runs": 3,
            "of": "baseline", "text": stats.detectable_text(0.064, 0.004, 10, 3)}
    noisy_text = stats.detectable_text(stats.mde(0.045, 10, 3), 0.045, 10, 3)
    noisy = dict(good, mde=stats.mde(0.045, 10, 3), spread=0.045, text=noisy_text)
    records = {rid: Record(rid, suite="bench", info={"bench_verdict": "ok", "mde": good}),
               "bench/op/bmm/x": Record("bench/op/bmm/x", suite="bench",
                                        info={"bench_verdict": "ok", "mde": noisy})}
    run = RunResults(fingerprint, records)
    judged = judge(run, None, not_compared="no baseline")
    assert [row["record_id"] for row in judged.detectable] == ["bench/op/bmm/x", rid]
    assert judged.to_json()["detectable"][1]["mde"] == 0.064
    paths = regress.write_alerts(tmp_path / "alerts.json", judged, {})
    assert json.loads(paths[0].read_text())["detectable"][1]["text"].startswith("detects >= 6.4%")
    text = paths[1].read_text()
    assert "the smallest slow-down each can detect" in text and "| 6.4% |" in text
    assert "too noisy for 15%" in text and "--bench-runs" in text
    rep = report.build(run, None, verdict=judged)
    assert "| 6.4% |" in render.markdown(rep)
    assert 'id="detectable"' in render.html_page(rep, [], []) and "6.4%" in \
        render.html_page(rep, [], [])


def test_a_bench_record_stores_what_its_baseline_can_detect():
    from harness.bench.runner import BenchContext

    context = BenchContext(device=None, scale="small")
    runs = [{"value": 10.0 * (1 + d), "control_ms": 1.0} for d in
            (0.0, 0.003, -0.003, 0.002, -0.002, 0.001)]
    info = context.detectable("bench/op/mm/float32/n256", runs, stats.Policy())
    assert info["of"] == "this run" and info["baseline_runs"] == 6 and info["compare_runs"] == 3
    assert info["mde"] == pytest.approx(stats.mde(stats.SPREAD_FLOOR, 6, 3))
    assert info["text"].startswith("detects >= ")


def test_the_c_segmentation_cuts_where_ruptures_pelt_l2_cuts():
    """history.segment (ruptures' KernelCPD, linear kernel: C PELT) against ruptures'
    Pelt(model="l2") in Python, the search it replaced (Note [Change points]): the same cuts
    on flat, noisy, stepped and many-stepped series, at the penalty history uses."""
    import math

    import numpy as np
    ruptures = pytest.importorskip("ruptures")

    rng = np.random.default_rng(0)
    cut_somewhere = 0
    for trial in range(120):
        n = int(rng.integers(4, 120))
        z = rng.normal(size=n)
        for _ in range(trial % 4):  # 0..3 level steps
            at = int(rng.integers(1, n))
            z[at:] += rng.choice([-1, 1]) * rng.uniform(0.5, 8)
        pen = history.PENALTY * math.log(n)
        want = ruptures.Pelt(model="l2", min_size=history.MIN_SIZE, jump=1).fit(
            z.reshape(-1, 1)).predict(pen=pen)
        got = history.segment(z, min_size=history.MIN_SIZE, pen=pen)
        assert got == [int(c) for c in want], (trial, n)
        cut_somewhere += len(got) > 1
    assert cut_somewhere > 40  # the comparison covered series that have changes


class _FakeStore:
    """What analyse_store reads of a store: runs of packed series in their layouts."""

    def __init__(self, runs):
        import numpy as np

        self.names = {}
        self.rows = []
        for run in runs:
            names = sorted(run.values)
            ids = np.array([hash(n) & 0x7FFFFFFFFFFF for n in names], dtype="<i8")
            self.names.update(zip(ids.tolist(), names))
            kinds = np.array([ord("b" if n.startswith("bench/") else "m") for n in names],
                             dtype=np.uint8)
            vals = np.array([run.values[n] for n in names])
            ctl = np.array([run.controls.get(n, np.nan) for n in names])
            self.rows.append(("|".join(names), ids, kinds, vals, ctl))

    def scan_series(self, pks, *, controls="all"):
        """As the store yields them: each run as differences from its layout's first stored
        run (which need not be among ``pks``)."""
        from harness.store.db import SeriesRow
        from harness.store.schema import differences

        references = {}
        for layout, _, _, vals, ctl in self.rows:
            references.setdefault(layout, (vals, ctl))
        for index, pk in enumerate(pks):
            layout, ids, kinds, vals, ctl = self.rows[pk]
            ref_vals, ref_ctl = references[layout]
            pos, moved, moved_ctl = differences(ref_vals, ref_ctl, vals, ctl)
            with_ctl = controls == "all" or (controls == "benchmarks" and (kinds == 98).any())
            yield SeriesRow(index, layout, ids, kinds, ref_vals, ref_ctl if with_ctl else None,
                            pos, moved, moved_ctl if with_ctl else None)

    def names_of(self, ids):
        return {int(i): self.names[int(i)] for i in ids}


def test_history_from_stored_differences_equals_history_of_every_value():
    """Runs stored as differences from their layout's first run, read from a later night:
    a series whose reference differs from its first value read (a dip on the first nights
    read) and then returns to the reference, so the difference is empty that night, is
    still seen to move (Note [History from the store])."""
    runs = []
    for night in range(30):
        values, controls = {}, {}
        for k in range(12):
            if k == 3 and night % 3 == 0:
                continue  # two layouts, each stored many nights
            base = 1.0 + k
            if k % 4 == 0:
                value = base * (0.5 if 7 <= night <= 9 else 1.0)  # dips, then as stored first
            elif k % 4 == 1:
                value = base * (1.4 if night >= 19 else 1.0)
            else:
                value = base
            values[f"ops/op{k}/float32/fwd:err"] = value
        values["bench/b"] = 2.0 * (1.3 if night >= 22 else 1.0)
        controls["bench/b"] = 1.0
        runs.append(history.Run(f"night-{night}.json", f"2026-02-{night + 1:02d}",
                                "torch-2.13.0", "cpu/x", values, controls))
    chosen = [types.SimpleNamespace(pk=i, source=r.path, started=r.started,
                                    stack_id=r.stack_id) for i, r in enumerate(runs)]
    for start in (0, 7):
        got = history.analyse_store(_FakeStore(runs), chosen[start:])
        assert got == history.analyse(runs[start:]), start
    assert {r["series"] for r in got} >= {"ops/op0/float32/fwd:err", "ops/op1/float32/fwd:err",
                                          "bench/b"}


def test_history_in_one_pass_equals_history_of_every_value():
    """analyse_store (one pass: a series' values kept from its first change, rebuilt at the
    end) finds what analyse finds holding every value, on series that are constant, move,
    step once, appear late, go missing some nights, and benchmarks with host controls."""
    rng = random.Random(3)
    runs = []
    for night in range(40):
        values, controls = {}, {}
        for k in range(30):
            name = f"ops/op{k}/float32/fwd:err"
            if k % 5 == 0 and rng.random() < 0.3:
                continue  # missing this night
            if k % 7 == 1 and night < 12:
                continue  # appears late
            base = 1.0 + k
            if k % 3 == 0:
                value = base
            elif k % 3 == 1:
                value = base * (1.5 if night >= 20 + k % 10 else 1.0)
            else:
                value = base * (1 + rng.gauss(0, 0.04))
            values[name] = value
        for k in range(3):
            control = 1 + rng.gauss(0, 0.05)
            values[f"bench/b{k}"] = (2.0 + k) * control * (1.3 if k == 1 and night >= 25 else 1)
            controls[f"bench/b{k}"] = control
        runs.append(history.Run(f"night-{night}.json", f"2026-01-{night + 1:02d}",
                                "torch-2.13.0", "cpu/x", values, controls))
    expected = history.analyse(runs)
    chosen = [types.SimpleNamespace(pk=i, source=r.path, started=r.started,
                                    stack_id=r.stack_id) for i, r in enumerate(runs)]
    got = history.analyse_store(_FakeStore(runs), chosen)
    assert got == [dict(r, run=r["run"]) for r in expected]
    assert len({r["series"] for r in got}) >= 5  # steps and the slowed benchmark were found
    # the later nights alone: layouts whose reference (first stored run) is not read
    later = history.analyse_store(_FakeStore(runs), chosen[7:])
    assert later == [dict(r, run=r["run"]) for r in history.analyse(runs[7:])]
    assert later != got and later

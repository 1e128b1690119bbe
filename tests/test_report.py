"""The go/no-go report: grouping, ranking, common cause, stack diff, renderers, CLI, browser."""

import copy
import json
import re
from pathlib import Path

import pytest
from browser import dump_dom, needs_chromium

from harness import baselines, cli, report, results
from harness.report import model, plots, render
from harness.results import Record, RunResults, equal, lower

ERR = {"better": "lower", "rel": 2.0, "abs": 1e-6}
BWD = {"fwd": ["aten.sub", "aten.norm", "aten.clamp_min", "aten.mean"],
       "bwd": ["aten.where", "aten.ge", "aten.mul"]}
PLAIN = {"fwd": ["aten.sub", "aten.norm", "aten.mean"], "bwd": ["aten.mul", "aten.div"]}


def _op(op, dtype, direction, sample, err, aten=PLAIN, status="pass", ratio=1.0):
    rid = f"ops/{op}/{dtype}/{direction}/{sample}"
    metrics = {f"grad{i}.max_rel_err": err * (i + 1) for i in range(3)}
    metrics.update({f"grad{i}.max_rel_err_ratio": ratio for i in range(3)})
    rules = {f"grad{i}.max_rel_err": ERR for i in range(3)}
    return Record(rid, status=status, metrics=metrics, rules=rules,
                  test=f"suites/ops/test_catalog.py::test_op[{op}-{dtype}]",
                  info={"aten_ops": aten} if aten is not None else {})


def _runs(fingerprint, aten=True):
    """A baseline and a run: triplet bf16 bwd x3 moved 5x (beyond rule), sinh moved 1.5x
    (within rule), mm lost capability, bn fails (as in the baseline), max batch fell,
    20 other ops unchanged."""
    b, c = {}, {}
    hinge = BWD if aten else None
    plain = PLAIN if aten else None
    for sample in ("typical", "odd257", "swap"):
        b[sample] = _op("triplet_margin_loss", "bfloat16", "bwd", sample, 1e-2, hinge)
        c[sample] = _op("triplet_margin_loss", "bfloat16", "bwd", sample, 5e-2, hinge)
        fwd = _op("triplet_margin_loss", "bfloat16", "fwd", sample, 1e-2, hinge)
        b[sample + "f"], c[sample + "f"] = fwd, fwd
    b["sinh"] = _op("sinh", "float32", "fwd", "typical", 1e-6, plain)
    c["sinh"] = _op("sinh", "float32", "fwd", "typical", 1.5e-6, plain)
    for index in range(20):
        same = _op(f"op{index}", "float32", "bwd", "typical", 1e-6, plain)
        b[f"u{index}"], c[f"u{index}"] = same, same
    b["mm"] = Record("ops/mm/float32/fwd/typical", test="suites/ops/test_catalog.py::test_op[mm]")
    c["mm"] = Record("ops/mm/float32/fwd/typical", status="unsupported",
                     test="suites/ops/test_catalog.py::test_op[mm]")
    b["bn"] = Record("norm/bn/float32/eval", status="fail", metrics={"rel_err": 1e-6},
                     rules={"rel_err": ERR}, test="suites/norm/test_bn.py::test_eval")
    c["bn"] = Record("norm/bn/float32/eval", status="fail", metrics={"rel_err": 1e-6},
                     rules={"rel_err": ERR}, message="eval uses batch statistics\nmore",
                     test="suites/norm/test_bn.py::test_eval")
    c["mem"] = Record("memory/oom/mlp/float32/none", metrics={"max_batch": 140},
                      rules={"max_batch": equal()}, test="suites/memory/test_oom.py::test_x")
    b["mem"] = Record("memory/oom/mlp/float32/none", metrics={"max_batch": 148},
                      rules={"max_batch": equal()}, test="suites/memory/test_oom.py::test_x")
    old = dict(fingerprint, stack_id="torch-2.3.0", torch="2.3.0")
    new = dict(fingerprint, torch="2.4.0", cpu="AMD EPYC 9004")
    base = RunResults(old, {r.id: r for r in b.values()}, seed=0)
    run = RunResults(new, {r.id: r for r in c.values()}, seed=3)
    run.outcomes = {r.test: "passed" for r in c.values()}
    return base, run


def test_subjects_fold_direction_and_outputs_by_suite_rule():
    assert model.subject_of("ops/exp/float16/bwd/odd257") == "ops/exp/float16/odd257"
    assert model.subject_of("opinfo/add/float32/fwd/0d1949c7") == "opinfo/add/float32"
    assert model.subject_of("amp/convergence/bfloat16/tinycnn-small/loss_falls") == \
        "amp/convergence/bfloat16/tinycnn-small"
    assert model.subject_of("distributed/all_gather/bfloat16/n=1/ws2") == \
        "distributed/all_gather/bfloat16/n=1/ws2"


def test_groups_are_ranked_capability_fails_beyond_rule_then_movers(fingerprint):
    base, run = _runs(fingerprint)
    rep = report.build(run, base, baseline_name="torch-2.3.0")
    ranks = [(s.id, s.rank_label) for s in rep.subjects]
    assert ranks[0] == ("ops/mm/float32/typical", "capability lost")
    assert ranks[1] == ("norm/bn/float32/eval", "fails its standard")
    # 3 records x 3 gradients = 9 finding lines fold into 3 groups, plus max_batch
    triplet = [s for s in rep.subjects if "triplet" in s.id]
    assert len(triplet) == 3 and all(s.lines == 3 and s.passes for s in triplet)
    assert {s.rank_label for s in triplet} == {"beyond its baseline rule"}
    worst = triplet[0].worst
    assert worst.metric == "grad2.max_rel_err" and worst.ratio == pytest.approx(5.0)
    assert "limit 10x): passes" in triplet[0].standard
    assert worst.rule.describe() == "lower is better, ratio 2, floor 1e-06"
    mem = next(s for s in rep.subjects if s.suite == "memory")
    assert mem.worst.kind == "regression" and mem.worst.describe() == "max_batch 148 -> 140"
    assert rep.verdict.level == "NO-GO"
    # within the rule: a mover, computed from the metrics (no finding names it)
    [sinh] = rep.movers["ops"]
    assert sinh.id == "ops/sinh/float32/typical" and sinh.worst.ratio == pytest.approx(1.5)
    assert rep.counts["ops"]["review"] == 9 and rep.counts["ops"]["regression"] == 1


@pytest.mark.parametrize("factor,moved", [(1 + 1e-13, False), (1.004, False),
                                            (1.006, True), (1.5, True)])
def test_a_mover_is_worse_by_what_the_report_can_show_not_by_rounding(fingerprint, factor,
                                                                       moved):
    """model.MOVED: a metric within its rule worse by the rounding of a float64 sum (a
    last bit) or by less than half a percent (shown as ``1x``) is not a mover; the run's
    line then counts no subject moved."""
    base, run = _runs(fingerprint)
    sinh = "ops/sinh/float32/fwd/typical"
    for name, value in base.records[sinh].metrics.items():
        run.records[sinh].metrics[name] = value * factor  # every metric: ratios too
    rep = report.build(run, base, baseline_name="torch-2.3.0")
    assert [s.id for s in rep.movers.get("ops", [])] == (
        ["ops/sinh/float32/typical"] if moved else [])
    assert render._summary(rep).endswith(
        f"; {int(moved)} subject(s) moved within their rules.")


def test_a_slower_benchmark_fails_its_standard_and_a_broken_one_lost_capability(fingerprint):
    old = {"info": {"runs": [{"value": 1.0}]}, "test": "suites/bench/t.py::test_b"}
    base = RunResults(fingerprint, {rid: Record(rid, suite="bench", **old) for rid in
                                    ("bench/op/mm/float32/n256", "bench/op/bmm/float32/b8n128")})
    run = RunResults(fingerprint, {
        "bench/op/mm/float32/n256": Record("bench/op/mm/float32/n256", suite="bench",
                                           status="slower", message="regression, median 1 -> "
                                           "1.2, " + "the numbers behind it " * 40, **old),
        "bench/op/bmm/float32/b8n128": Record("bench/op/bmm/float32/b8n128", suite="bench",
                                              status="error", message="RuntimeError", **old)})
    subjects = {s.id: s for s in report.build(run, base).subjects}
    assert {sid: s.rank_label for sid, s in subjects.items()} == {
        "bench/op/mm/float32/n256": "fails its standard",
        "bench/op/bmm/float32/b8n128": "capability lost"}
    message = subjects["bench/op/mm/float32/n256"].message  # long: clipped, and says so
    assert len(message) == model.MESSAGE_CHARS and message.endswith("\u2026")
    assert message.startswith("regression, median 1 -> 1.2")


def test_a_failing_subjects_line_says_what_went_wrong_not_only_where(fingerprint):
    """A distributed problem's first line only names the check; its cause is the next."""
    rid = "distributed/barrier/none/ws2"
    problem = ("distributed check 'barrier' (world size 2):\n"
               "rank 1 raised RuntimeError: Connection closed by peer\n  Traceback ...")
    run = RunResults(fingerprint, {
        rid: Record(rid, suite="distributed", status="error", message=problem),
        "norm/bn/float32/eval": Record("norm/bn/float32/eval", status="fail",
                                       message="eval uses batch statistics\nmore")})
    subjects = {s.id: s for s in report.build(run, None).subjects}
    assert subjects[rid].message == ("distributed check 'barrier' (world size 2): rank 1 "
                                     "raised RuntimeError: Connection closed by peer")
    assert subjects["norm/bn/float32/eval"].message == "eval uses batch statistics"


def test_a_listed_known_failure_reads_as_known_not_as_failing(fingerprint):
    """A GO run whose only failing record is a listed known failure says so on its group's
    line and in its state, not ``FAILS`` beside a GO; a failure nobody listed still says
    FAILS."""
    why = "known failure on cpu/*: fused SGD skips blocks (https://x/191763)"
    known = Record("optim/sgd/bfloat16/fused/params", status="fail", message="off",
                   info={"known_failure": why})
    run = RunResults(fingerprint, {known.id: known})
    rep = report.build(run, None)
    assert rep.verdict.level == "GO"
    line = next(x for x in report.terminal_lines(rep) if known.id in x)
    assert line.endswith("KNOWN FAILURE") and "FAILS" not in line
    assert render._state(rep.subjects[0]) == f"fail ({why})"
    plain = Record("optim/sgd/float16/fused/params", status="fail", message="off")
    rep = report.build(RunResults(fingerprint, {known.id: known, plain.id: plain}), None)
    lines = report.terminal_lines(rep)
    assert next(x for x in lines if plain.id in x).endswith(" FAILS")
    assert next(x for x in lines if known.id in x).endswith("KNOWN FAILURE")


def test_harness_errors_make_the_report_no_go(fingerprint):
    base, run = _runs(fingerprint)
    for rid in ("ops/mm/float32/fwd/typical", "norm/bn/float32/eval",
                "memory/oom/mlp/float32/none"):
        del run.records[rid], base.records[rid]
    assert report.build(run, base).verdict.level == "REVIEW"
    rep = report.build(run, base, errors=["baseline error: corrupt"])
    assert rep.verdict.level == "NO-GO" and "baseline error: corrupt" in rep.verdict.line


def test_reproduce_line_names_node_device_seed_and_op_filter(fingerprint):
    base, run = _runs(fingerprint)
    rep = report.build(run, base)
    subject = next(s for s in rep.subjects if s.id == "ops/triplet_margin_loss/bfloat16/swap")
    assert subject.reproduce == (
        "python -m pytest 'suites/ops/test_catalog.py::test_op[triplet_margin_loss-bfloat16]' "
        "--device cpu --seed 3 --op-filter '^triplet_margin_loss-bfloat16-bwd-swap$'")
    assert re.search(subject.reproduce.split("--op-filter ")[1].strip("'"),
                     "triplet_margin_loss-bfloat16-bwd-swap")


def test_a_benchmark_reproduce_line_opts_in_and_brings_several_runs(fingerprint):
    from harness.report.model import reproduce_line
    from harness.results import Record

    base, run = _runs(fingerprint)
    rec = Record(id="bench/op/mm/float32/n256", status="fail", test=(
        "suites/bench/test_throughput.py::test_benchmark[op/mm/float32/n256]"),
        info={"runs": [{"value": 1.0}] * 3})
    assert reproduce_line([rec], run).endswith(" --run-benchmarks --bench-runs 3")


def test_common_cause_names_the_kernel_the_affected_share(fingerprint):
    base, run = _runs(fingerprint)
    rep = report.build(run, base)
    cause = rep.causes[0]
    assert cause.token == "aten.clamp_min backward"
    assert (cause.affected, cause.affected_total) == (3, 3)
    assert cause.unchanged == 0
    assert cause.op_filter == "^triplet_margin_loss-[^-]+-bwd-"
    assert cause.line.startswith("aten.clamp_min backward: in 3 of 3 affected cases, 0 of ")
    assert "aten.sub backward" not in {c.token for c in rep.causes}  # the unchanged have it
    # clamp_min's derivative dispatches ge and where: the same three records, one cause
    assert cause.also == ["aten.ge (in backward)", "aten.where (in backward)"]
    assert "the same records dispatch aten.ge (in backward), aten.where (in backward): " \
           "one cause, 3 names" in cause.line
    assert len(rep.causes) == 1


def test_common_cause_keeps_kernels_of_different_records_apart_though_tied(fingerprint):
    """Note [One cause, several names]: a kernel's derivative and its backward kernel are
    one cause (layer_norm's, once listed twice); equal counts in other records are two."""
    base, run = _runs(fingerprint)
    for sample in ("typical", "odd257", "swap"):  # triplet unmoved: only the four below are
        rid = f"ops/triplet_margin_loss/bfloat16/bwd/{sample}"
        run.records[rid] = base.records[rid]
    layer_norm = {"fwd": ["aten.native_layer_norm"], "bwd": ["aten.native_layer_norm_backward"]}
    softmax = {"fwd": ["aten._softmax"], "bwd": ["aten._softmax_backward_data"]}
    for index, aten in enumerate((layer_norm, layer_norm, softmax, softmax)):
        rec = _op(f"moved{index}", "float32", "bwd", "typical", 1e-6, aten, status="fail")
        run.records[rec.id] = rec
        run.outcomes[rec.test] = "failed"
    rep = report.build(run, base)
    causes = {c.token: c for c in rep.causes}
    norm = causes["aten.native_layer_norm backward"]
    assert norm.also == ["aten.native_layer_norm_backward (in backward)"]
    assert norm.ops == ["moved0", "moved1"] and norm.affected == 2
    soft = causes["aten._softmax backward"]
    assert soft.also == ["aten._softmax_backward_data (in backward)"]
    assert "aten.native_layer_norm_backward (in backward)" not in causes
    assert soft.tied != norm.tied  # the second of the two equal counts is marked tied
    assert "tied with the one above" in (soft if soft.tied else norm).line
    (first,), _ = model.common_cause(run, rep.subjects, limit=1, baseline=base)
    assert len(first.also) == 1 and first.token in causes  # its other name, not a new cause
    assert model.common_cause(run, rep.subjects, limit=0, baseline=base)[0] == []


def test_common_cause_without_aten_ops_says_why_and_what_is_shared(fingerprint):
    base, run = _runs(fingerprint, aten=False)
    for rid in ("ops/mm/float32/fwd/typical", "norm/bn/float32/eval",
                "memory/oom/mlp/float32/none"):
        del run.records[rid], base.records[rid]
    rep = report.build(run, base)
    assert rep.causes == []
    assert "carry no info['aten_ops']" in rep.cause_note
    assert "op triplet_margin_loss, dtype bfloat16, direction bwd" in rep.cause_note


def test_common_cause_reads_the_baselines_aten_ops_when_the_run_lacks_them(fingerprint):
    base, run = _runs(fingerprint)
    run = copy.deepcopy(run)  # unchanged records are shared with the baseline
    for rec in run.records.values():
        rec.info = {}
    cause = report.build(run, base).causes[0]
    assert (cause.token, cause.affected, cause.unchanged) == ("aten.clamp_min backward", 3, 0)


def test_dispatch_changes_name_the_ops_the_affected_gained_and_lost(fingerprint):
    base, run = _runs(fingerprint)
    now = {"fwd": BWD["fwd"], "bwd": ["aten.where", "aten.gt", "aten.mul"]}
    for rec in run.records.values():
        if rec.id.startswith("ops/triplet_margin_loss/bfloat16/bwd/"):
            rec.info = {"aten_ops": now}
    rep = report.build(run, base)
    assert rep.dispatch_changes == ["+ aten.gt (in backward): in 3 of 3",
                                    "- aten.ge (in backward): in 3 of 3"]
    gt = next(c for c in rep.causes if c.token == "aten.gt (in backward)")
    assert gt.new_since_baseline == 3 and "dispatched only since the baseline in 3 of 3" in gt.line
    assert "dispatched differently since the baseline: + aten.gt" in "\n".join(
        report.terminal_lines(rep))


def test_stack_diff_marks_differences_and_flattens_cann_components(fingerprint):
    old = dict(fingerprint, device_type="npu", cann="8.0.RC3",
               cann_components={"CANN": "8.0.RC3", "HCCL": "8.0.RC3"})
    new = dict(old, cann="8.0.0", cann_components={"CANN": "8.0.0", "HCCL": "8.0.RC3"})
    rows = {r.key: r for r in model.stack_diff(old, new)}
    assert rows["cann"].differs and rows["cann_components.CANN"].differs
    assert not rows["cann_components.HCCL"].differs and not rows["torch"].differs
    keys = [r.key for r in model.stack_diff(old, new)]
    assert keys.index("torch") < keys.index("cann") < keys.index("device_name")


def test_report_without_baseline_shows_the_run(fingerprint, tmp_path):
    _, run = _runs(fingerprint)
    rep = report.build(run, None, not_compared="no baseline for torch-2.4.0")
    assert rep.verdict.level == "NO-GO" and "NOT COMPARED" in rep.verdict.line
    assert [s.rank_label for s in rep.subjects] == ["fails its standard"]
    html_path, md_path = report.write(rep, tmp_path / "r.html", tmp_path / "r.md")
    assert "NOT COMPARED (no baseline for torch-2.4.0)" in md_path.read_text()


def _no_remote_urls(page: str) -> list[str]:
    """URLs a browser would fetch: in src/href/url(...), not namespaces or text."""
    page = re.sub(r'xmlns(:\w+)?="[^"]*"', "", page)
    return re.findall(r'(?:src|href)\s*=\s*"(?:https?:)?//[^"]*"|url\(\s*[\'"]?https?:', page)


def test_html_is_self_contained_with_inline_svg(fingerprint, tmp_path):
    pytest.importorskip("matplotlib")
    base, run = _runs(fingerprint)
    rep = report.build(run, base, baseline_name="torch-2.3.0")
    [path, _] = report.write(rep, tmp_path / "r.html", tmp_path / "r.md")
    page = path.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert _no_remote_urls(page) == []
    for section in ("cause", "groups", "counts", "movers", "stack", "plots", "presence"):
        assert f'id="{section}"' in page
    assert "aten.clamp_min backward" in page and "(changed)" in page


def test_markdown_has_the_same_sections_and_no_images(fingerprint, tmp_path):
    base, run = _runs(fingerprint)
    rep = report.build(run, base)
    text = render.markdown(rep, "see HTML")
    for heading in ("## Counts per suite", "## Probable common cause", "## Groups, ranked (6)",
                    "## Top movers within their rules", "## Stack", "## Pictures"):
        assert heading in text
    assert "| torch **(changed)** | 2.3.0 | 2.4.0 |" in text
    assert "<svg" not in text and "![" not in text


def test_without_matplotlib_the_report_is_text_with_a_clear_message(fingerprint, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setattr(plots, "available", lambda: False)
    base, run = _runs(fingerprint)
    html_path, md_path = report.write(report.build(run, base), tmp_path / "r.html",
                                      tmp_path / "r.md")
    assert "<svg" not in html_path.read_text()
    assert "pip install matplotlib" in html_path.read_text()
    assert "pip install matplotlib" in md_path.read_text()


def test_terminal_lines_verdict_counts_top_groups_path_nothing_twice(fingerprint):
    base, run = _runs(fingerprint)
    rep = report.build(run, base)
    rep.path = "/tmp/r.html"
    lines = report.terminal_lines(rep, limit=2)
    assert lines[0].startswith("VERDICT: NO-GO")
    assert lines[2] == ("suites: memory 1 (1 regression); norm 1 (1 fail); "
                        "ops 28 (1 regression, 9 review)")
    assert lines[3].startswith("NOTE different seeds: this run 3, the baseline 0")
    assert lines[4] == "LOST (1): capabilities and records the baseline had:"
    assert lines[5].startswith("  ops/mm/float32/fwd/typical: pass -> unsupported")
    assert lines[6].startswith("probable common cause: aten.clamp_min backward")
    assert "  ... 4 more in the report" in lines and lines[-1] == "report: /tmp/r.html"
    assert sum("ops/mm/float32/typical" in line for line in lines) == 1


def test_capture_aten_ops_splits_forward_and_backward():
    torch = pytest.importorskip("torch")
    x = torch.tensor([0.0, 1.0, -1.0], requires_grad=True)

    def step():
        y = torch.clamp_min(x, 0.0).sum()
        return torch.autograd.grad(y, [x])

    (grad,), ops = report.capture_aten_ops(step)
    assert grad.tolist() == [grad[0].item(), 1.0, 0.0]
    assert "aten.clamp_min" in ops["fwd"] and "aten.clamp_min" not in ops["bwd"]
    assert ops["bwd"] and "aten.sum" not in ops["bwd"]


# ------------------------------------------------------------------------------ CLI

@pytest.fixture
def store(tmp_path, fingerprint):
    base, run = _runs(fingerprint)
    root = tmp_path / "store"
    paths = [results.write(base, baselines.path_for(root, base.fingerprint)),
             results.write(run, baselines.path_for(root, run.fingerprint))]
    results.write(run, tmp_path / "results" / "run.json")  # a run's results, outside the store
    return root, paths


def test_cli_report_on_two_stored_files(store, tmp_path, capsys):
    root, (old, new) = store
    code = cli.main(["report", str(new), "--against", str(old), "--html",
                     str(tmp_path / "o.html"), "--md", str(tmp_path / "o.md")])
    out = capsys.readouterr().out.splitlines()
    assert code == 1 and out[0].startswith("VERDICT: NO-GO")
    assert out[1] == "torch-2.3.0 -> torch-2.4.0 on cpu/x86-64-avx2; baseline torch-2.3.0"
    assert f"report: {tmp_path / 'o.html'}" in out and f"report: {tmp_path / 'o.md'}" in out
    assert (tmp_path / "o.html").stat().st_size > 1000


def test_cli_report_imports_no_torch_and_reads_the_standards_limits(store, tmp_path):
    """``harness report`` reads records, not tensors: it builds without importing torch
    (a second of every report), and the limits it quotes are the ``relative`` standard's
    own (harness/standard_limits.py, one table for both)."""
    import subprocess
    import sys

    from harness.compare import STANDARDS

    assert model.standard_limits.RELATIVE == STANDARDS["relative"].limits
    _, (old, new) = store
    code = ("import sys\nfrom harness import cli\n"
            f"code = cli.main(['report', {str(new)!r}, '--against', {str(old)!r}, '--md', "
            f"{str(tmp_path / 'o.md')!r}])\n"
            "print('torch imported:', 'torch' in sys.modules)\nsys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("VERDICT: NO-GO")
    assert "torch imported: False" in done.stdout
    assert "(limit 10x)" in (tmp_path / "o.md").read_text()


def test_cli_report_picks_the_older_stack_in_the_store(store, tmp_path, capsys):
    root, _ = store
    (root / "cpu" / "x86-64-avx2" / "torch-2.4.0.json").unlink()  # only the older stack
    assert cli.main(["report", str(tmp_path / "results" / "run.json"),
                     "--baseline-dir", str(root)]) == 1
    assert ("torch-2.3.0 -> torch-2.4.0 on cpu/x86-64-avx2; baseline torch-2.3.0 (newest "
            "stack older than torch-2.4.0: upgrade comparison)") in capsys.readouterr().out


def test_cli_report_alone_says_not_compared(store, capsys):
    _, (_, new) = store
    cli.main(["report", str(new)])
    assert "NOT COMPARED" in capsys.readouterr().out


def test_baseline_diff_is_the_report_from_the_files_own_store(store, capsys, monkeypatch):
    root, (old, _) = store
    monkeypatch.setattr(cli, "ROOT", Path("/nonexistent"))  # not the checkout's baselines/
    assert cli.main(["baseline", "diff", str(old), "torch-2.4.0"]) == 1
    out = capsys.readouterr().out
    assert "torch-2.3.0 -> torch-2.4.0" in out and "probable common cause" in out


def test_baseline_diff_counts_lost_only_for_tests_that_ran(store, capsys):
    root, (old, new) = store
    doc = json.loads(old.read_text())
    doc["records"]["bench/slow/never_ran"] = {"suite": "bench", "status": "pass",
                                              "test": "suites/bench/test_slow.py::test_x"}
    test = "suites/ops/test_catalog.py::test_op[op99-float32]"
    doc["records"]["ops/op99/float32/bwd/dropped"] = {"suite": "ops", "status": "pass",
                                                      "test": test}
    old.write_text(json.dumps(doc))
    rep = report.from_files(new, old)  # neither test ran (outcomes): not run, not lost
    assert rep.lost == [] and {"bench/slow/never_ran", "ops/op99/float32/bwd/dropped"} <= \
        set(rep.not_run)
    data = results.load(new)
    data.outcomes[test] = "passed"
    results.write(data, new)
    rep = report.from_files(new, old)
    assert rep.lost == ["ops/op99/float32/bwd/dropped"] and rep.verdict.level == "NO-GO"


# --------------------------------------------------------------------------- browser

@needs_chromium
def test_report_renders_in_headless_chromium(fingerprint, tmp_path):
    pytest.importorskip("matplotlib")
    base, run = _runs(fingerprint)
    [path, _] = report.write(report.build(run, base, baseline_name="torch-2.3.0"),
                             tmp_path / "r.html", tmp_path / "r.md")
    dom = dump_dom(path)
    assert "VERDICT: NO-GO" in dom
    for section in ("cause", "groups", "counts", "movers", "stack", "plots"):
        assert f'id="{section}"' in dom
    assert dom.count("<svg") >= 2  # outcomes and heat-map, parsed as elements
    assert "This page" not in dom and "ERR_" not in dom


def test_rule_lower_is_a_review_not_a_regression():
    # the model's ranking relies on Note [Review or regression]
    assert lower().alerts_as == "review" and equal().alerts_as == "regression"


def test_markdown_beside_the_html_never_takes_the_alerts_markdown(tmp_path):
    assert report.markdown_path(tmp_path / "r.html") == tmp_path / "r.md"
    assert report.markdown_path(tmp_path / "x.html", tmp_path / "x.md") == tmp_path / "x.report.md"


CHECK = """
from harness.results import lower

def test_metric(results):
    results.record("demo/metric/float32", metrics={{"err": {value!r}}},
                   rules={{"err": lower(rel=2.0, abs=1e-6)}})
"""


def test_report_option_writes_html_and_markdown_at_session_end(pytester):
    pytester.makeconftest('pytest_plugins = ["harness.plugin"]')
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    (pytester.path / "suites" / "demo").mkdir(parents=True)
    check = pytester.path / "suites" / "demo" / "test_demo.py"
    check.write_text(CHECK.format(value=1e-3))
    pytester.runpytest("--device", "cpu", "--baseline", "record").assert_outcomes(passed=1)
    check.write_text(CHECK.format(value=5e-3))
    (pytester.path / "out").mkdir()  # an output folder is never created by the run
    result = pytester.runpytest("--device", "cpu", "--report", "out/r.html", "--alerts",
                                "out/r.json")
    result.assert_outcomes(passed=1)  # a review: the check passes, the run is REVIEW
    html_text = (pytester.path / "out" / "r.html").read_text()
    assert "VERDICT: REVIEW" in html_text and "demo/metric/float32" in html_text
    md_text = (pytester.path / "out" / "r.report.md").read_text()  # r.md is the alerts'
    assert "| 1 | `demo/metric/float32` | beyond its baseline rule |" in md_text
    result.stdout.fnmatch_lines(["*report: *r.html", "*report: *r.report.md"])


def test_html_escapes_what_a_run_wrote_through_the_template(fingerprint, tmp_path):
    """The page is templates/report.html.j2 with autoescaping: a message, a record id and
    a stack field holding markup are text on the page; the CSS and our own SVG stay raw."""
    base, run = _runs(fingerprint)
    hostile = "<script>alert(1)</script>&"
    run.records["norm/bn/float32/eval"].message = hostile
    run.fingerprint["torch"] = "2.4.0<b>"
    rid = "ops/<img src=x>/float32/fwd/typical"
    run.records[rid] = Record(rid, status="fail", metrics={"rel_err": 1.0},
                              rules={"rel_err": ERR}, test="suites/ops/test_catalog.py::x")
    rep = report.build(run, base, baseline_name="torch-2.3.0")
    page = render.html_page(rep, [("a plot", '<svg xmlns="http://www.w3.org/2000/svg"></svg>')],
                            ["a note <i>"])
    assert "<script>" not in page and "<img src=x>" not in page and "2.4.0<b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&amp;" in page
    assert "ops/&lt;img src=x&gt;/float32/fwd/typical" in page and "2.4.0&lt;b&gt;" in page
    assert "a note &lt;i&gt;" in page
    assert '<svg xmlns="http://www.w3.org/2000/svg"></svg>' in page  # our plot, raw
    assert '"Segoe UI"' in page  # the CSS, raw inside <style>


def test_a_known_failure_is_not_an_affected_record_of_the_common_cause(fingerprint):
    """A listed known failure's cause is its entry's reason: it neither gets a probable
    common cause box of its own nor dilutes the cause of the records that did move."""
    known = Record("optim/sgd/bfloat16/fused/params", status="fail",
                   info={"known_failure": "known failure on cpu/*: x (https://x/1)"})
    rep = report.build(RunResults(fingerprint, {known.id: known}), None)
    assert rep.causes == [] and rep.cause_note == ""
    unlisted = Record("optim/sgd/float16/fused/params", status="fail")
    rep = report.build(RunResults(fingerprint, {known.id: known, unlisted.id: unlisted}), None)
    assert "the 1 affected records" in rep.cause_note

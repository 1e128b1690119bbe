"""The parity report: verdict, runs, sections, ranked differences with their reproduce
commands, thresholds, pictures; terminal, Markdown, HTML, and a real browser render."""

import re

import pytest
from browser import dump_dom, needs_chromium

from harness.parity.model import SECTIONS, Difference, Parity, RunSide
from harness.report import parity as report

REPRO = "python -m pytest '{node}' --device npu --seed 0 -p no:randomly"


def _side(device_type, slug, path):
    return RunSide(path=path, device_type=device_type, device_slug=slug,
                   stack_id="torch-2.13.0", started="2026-12-02T05:00:00")


def _diff(section, rid, severity="difference", ratio=3.0, node="suites/x.py::test_y"):
    return Difference(section=section, id=rid, severity=severity,
                      summary=f"{rid} differs", reference={"max_rel_err": 1e-3},
                      here={"max_rel_err": 3e-3}, ratio=ratio,
                      reproduce=REPRO.format(node=node))


THRESHOLDS = {  # the shape of harness.parity.thresholds.as_data()
    "ops": {"rmse": {"warning": 1.0, "error": 2.0, "source": "msprobe 3-way: RMSE ratio"},
            "max_rel_err": {"warning": 1.0, "error": 10.0,
                            "source": "msprobe 3-way: maximum relative error ratio"}},
    "memory": {"max_batch_ratio": {"below": 0.9, "source": "this suite: bisection"}},
    "speed": {"throughput_ratio": {"below": 0.8, "source": "this suite: noise"}},
    "training": {"record rules": {"value": "per record", "source": "each record's rule"}},
}


def _parity(verdict="PARITY", differences=(), compared=None, not_compared=None,
            plots=True):
    op_ratios = curves = memory = speed = models = []
    if plots:
        op_ratios = [{"op": op, "dtype": dt, "ratio": r, "id": f"ops/{op}/{dt}/fwd/typical",
                      "metric": "out0.rmse"}
                     for op, dt, r in (("add", "float16", 1.0), ("add", "bfloat16", 1.4),
                                       ("mm", "float16", 2.6), ("exp", "float32", 0.8))]
        curves = [{"id": "amp/convergence/float16/mlp", "label": "float16 mlp",
                   "reference": [2.0, 1.5, 1.1, 0.9], "here": [2.0, 1.6, 1.2, 1.0]}]
        memory = [{"id": "memory/oom_threshold/mlp/float32/none", "metric": "max_batch",
                   "reference": 512, "here": 256, "ratio": 0.5}]
        speed = [{"id": "bench/train/mlp/float32/step/b8", "precision": "float32",
                  "reference": 8.0, "here": 10.0, "ratio": 0.8, "unit": "ms"},
                 {"id": "bench/train/mlp/float16-amp/step/b2", "precision": "float16-amp",
                  "reference": 4.2, "here": 4.0, "ratio": 1.05, "unit": "ms"}]
        models = [{"op": "aten.addmm.default", "model": "mlp", "reference": "pass",
                   "here": "pass", "id": "model/mlp/inventory/aten.addmm.default"},
                  {"op": "aten.relu.default", "model": "mlp", "reference": "pass",
                   "here": "fallback", "id": "model/mlp/inventory/aten.relu.default"}]
    return Parity(verdict=verdict, reference=_side("cpu", "xeon-avx512", "ref/cpu.json"),
                  here=_side("npu", "simnpu", "here/npu.json"),
                  differences=list(differences),
                  compared=compared if compared is not None else {s: 4 for s in SECTIONS},
                  not_compared=not_compared or {}, thresholds=THRESHOLDS,
                  op_ratios=op_ratios, curves=curves, memory=memory, speed=speed,
                  models=models)


def _blockers():
    return _parity("BLOCKERS", [
        _diff("ops", "ops/mm/float16/fwd/typical", "blocker", None,
              node="suites/ops/test_catalog.py::test_op[mm-float16]"),
        _diff("memory", "memory/oom_threshold/mlp/float32/none", ratio=0.5,
              node="suites/memory/test_oom.py::test_max_batch"),
        _diff("ops", "ops/add/bfloat16/fwd/typical", ratio=2.6),
    ], not_compared={"model": "no `harness model` inventory in either run"})


# --------------------------------------------------------------------------- terminal

def test_terminal_lines_verdict_exit_code_sides_sections_and_reproduce_commands():
    parity = _blockers()
    lines = report.terminal_lines(parity)
    assert lines[0].startswith("PARITY: BLOCKERS (exit 1)")
    assert "1 blocker(s)" in lines[0] and "2 difference(s)" in lines[0]
    text = "\n".join(lines)
    assert "reference: cpu/xeon-avx512/torch-2.13.0 (ref/cpu.json" in text
    assert "here: npu/simnpu/torch-2.13.0 (here/npu.json" in text
    for section in SECTIONS:
        assert any(line.startswith(f"{section}: ") for line in lines), section
    assert "model: 4 compared; NOT COMPARED: no `harness model` inventory" in text
    for diff in parity.differences:
        assert diff.id in text and diff.reproduce in text
    # worst first, as the comparison ranked them
    assert text.index("ops/mm/float16") < text.index("memory/oom") < text.index("ops/add")


def test_terminal_lines_clean_pair_says_parity_and_what_was_compared():
    lines = report.terminal_lines(_parity())
    assert lines[0] == ("PARITY: PARITY (exit 0): no difference beyond the thresholds in 20 "
                        "compared subject(s)")
    assert not any("worst first" in line for line in lines)


def test_terminal_lines_cut_at_limit_and_point_to_the_report():
    diffs = [_diff("ops", f"ops/op{i}/float16/fwd/typical") for i in range(14)]
    lines = report.terminal_lines(_parity("DIFFERENCES", diffs), limit=5)
    assert lines[0].startswith("PARITY: DIFFERENCES (exit 2)")
    assert sum("[difference]" in line for line in lines) == 5
    assert "... 9 more group(s) in the report" in lines[-1]


def _fallback_op():
    """One op falling back to the host: 12 blocker records (dtype x direction x sample),
    then a difference on another op."""
    diffs = [_diff("ops", f"ops/exp/{dt}/{direction}/{sample}", "blocker", None,
                   node=f"suites/ops/test_catalog.py::test_op[exp-{dt}]")
             for dt in ("float32", "bfloat16") for direction in ("fwd", "bwd")
             for sample in ("typical", "odd257", "scalar")]
    return _parity("BLOCKERS", diffs + [_diff("ops", "ops/add/float16/fwd/typical")])


def test_the_records_of_one_op_are_one_group_with_its_worst_records_command():
    lines = report.terminal_lines(_fallback_op())
    assert "12 blocker(s) in 1 group(s), the migration must work around them: ops/exp (12)" \
        in lines[0]
    assert "13 difference(s) in 2 group(s), worst first:" in lines
    line = next(x for x in lines if "[blocker]" in x)
    assert "ops/exp (12 records: bfloat16, float32) worst ops/exp/float32/fwd/typical:" in line
    assert sum("[blocker]" in x for x in lines) == 1 and sum("[difference]" in x for x in lines) == 1


def test_html_and_markdown_list_every_record_of_a_group_with_its_command():
    parity = _fallback_op()
    page, text = report.html_page(parity), report.markdown(parity)
    assert "Differences (13 records in 2 groups), worst first" in page
    assert "<details><summary>the 12 records, each with its reproduce command" in page
    assert "#### Every record (13)" in text
    for diff in parity.differences:
        assert f"<code>{diff.id}</code>" in page and f"`{diff.id}`" in text
        assert diff.reproduce.replace("'", "&#x27;") in page and diff.reproduce in text


def test_notes_on_how_the_runs_differ_are_shown_with_the_verdict():
    parity = _parity()
    parity.notes = ["FAULTS INJECTED here: ops.add_rel_drift"]
    assert "NOTE FAULTS INJECTED here: ops.add_rel_drift" in report.terminal_lines(parity)
    assert "- **NOTE** FAULTS INJECTED here: ops.add_rel_drift" in report.markdown(parity)
    banner = report.html_page(parity).split('<section id="verdict"')[1].split("</section>")[0]
    assert "<b>NOTE</b> FAULTS INJECTED here: ops.add_rel_drift" in banner


# --------------------------------------------------------------------------- markdown

def test_markdown_has_verdict_runs_sections_in_order_differences_and_thresholds():
    parity = _blockers()
    text = report.markdown(parity)
    assert text.startswith("# PARITY: BLOCKERS (exit 1)\n")
    assert "| results file | ref/cpu.json | here/npu.json |" in text
    positions = [text.index(f"\n## {report.SECTION_TITLES[s]}\n") for s in SECTIONS]
    assert positions == sorted(positions)
    for diff in parity.differences:
        assert f"`{diff.id}`" in text and f"`{diff.reproduce}`" in text
    ops = text[positions[0]:positions[1]]
    assert ops.index("ops/mm/float16") < ops.index("ops/add/bfloat16")  # ranked as given
    assert "memory/oom_threshold" in text[positions[2]:positions[3]]
    assert "> NOT COMPARED: no `harness model` inventory in either run" in text
    assert "| `ops.max_rel_err` | warning=1, error=10 | msprobe 3-way: maximum relative " \
           "error ratio |" in text
    assert "| `training.record rules` | per record | each record's rule |" in text
    assert "<svg" not in text


def test_markdown_carries_the_compared_values_as_tables():
    text = report.markdown(_parity())
    assert "| `mm` | float16 | 2.6x | ops/mm/float16/fwd/typical |" in text
    assert "| `float16 mlp` | 4 / 4 | 0.9 | 1 |" in text
    assert "| `memory/oom_threshold/mlp/float32/none` | max_batch | 512 | 256 | 0.5x |" in text
    # fp32 beside fp16 for one benchmark, fp32 first, with the unit of the stored values
    assert "| `bench/train/mlp/float32/step/b8` | float32 | 8 ms | 10 ms | 0.8x |" in text
    assert text.index("mlp/float32/step") < text.index("mlp/float16-amp/step")
    assert "| `aten.addmm.default` | mlp | pass | pass |" in text
    # the inventories side by side: the op whose status differs first, marked in the HTML
    assert text.index("`aten.relu.default` | mlp | pass | fallback |") < text.index("addmm")
    page = report.html_page(_parity())
    assert '<tr class="changed"><td><code>aten.relu.default</code>' in page
    assert '<tr><td><code>aten.addmm.default</code>' in page


def test_clean_pair_says_no_difference_in_every_section():
    text = report.markdown(_parity())
    assert text.startswith("# PARITY: PARITY (exit 0)\n")
    assert text.count("No difference beyond the thresholds.") == len(SECTIONS)
    assert "Differences (" not in text and "NOT COMPARED" not in text


def test_empty_sections_say_nothing_was_compared_and_why():
    parity = _parity(compared={s: 0 for s in SECTIONS}, plots=False,
                     not_compared={"speed": "no benchmark records in either run"})
    text = report.markdown(parity)
    assert "> NOT COMPARED: no benchmark records in either run" in text
    assert text.count("> NOT COMPARED: nothing compared (the comparison gave no reason)") == 4
    page = report.html_page(parity)
    assert page.count('class="missing"') == 5 and "<svg" not in page


def test_a_pipe_in_an_id_does_not_break_the_markdown_table():
    parity = _parity("DIFFERENCES", [_diff("ops", "ops/a|b/float16/fwd/typical")])
    line = next(x for x in report.markdown(parity).splitlines() if "ops/a" in x and "| 1 |" in x)
    assert "ops/a\\|b" in line
    assert len(re.findall(r"(?<!\\)\|", line)) == 9  # 8 cells: the id's pipe is escaped


# ------------------------------------------------------------------------------- html

def test_html_escapes_ids_summaries_and_commands():
    nasty = "ops/<script>alert(1)</script>&amp/float16/fwd/<img src=x>"
    parity = _parity("DIFFERENCES", [_diff("ops", nasty, node="suites/a.py::test[<x>&y]")])
    parity.op_ratios.append({"op": "<script>", "dtype": "float16", "ratio": 5.0, "id": nasty})
    page = report.html_page(parity)
    assert "<script" not in page and "<img" not in page and "<x>" not in page
    assert "ops/&lt;script&gt;alert(1)&lt;/script&gt;&amp;amp/float16/fwd/&lt;img src=x&gt;" \
        in page
    assert "test[&lt;x&gt;&amp;y]" in page


def test_html_has_banner_runs_sections_every_reproduce_and_thresholds():
    parity = _blockers()
    page = report.html_page(parity)
    assert '<section id="verdict" class="verdict BLOCKERS"><h1>PARITY: BLOCKERS (exit 1)' in page
    for anchor in ("runs",) + SECTIONS + ("thresholds",):
        assert f'<section id="{anchor}">' in page and f'href="#{anchor}"' in page
    for diff in parity.differences:
        assert f'<tr class="{diff.severity}">' in page
        assert diff.reproduce.replace("'", "&#x27;") in page
    assert "msprobe 3-way: RMSE ratio" in page


def test_html_folds_the_groups_beyond_the_first_ones_and_keeps_every_command():
    diffs = [_diff("ops", f"ops/op{i}/float16/fwd/typical", node=f"suites/x.py::test[{i}]")
             for i in range(report.VISIBLE_GROUPS + 5)]
    page = report.html_page(_parity("DIFFERENCES", diffs))
    visible, folded = page.split("<details><summary>5 more group(s)")
    assert f"test[{report.VISIBLE_GROUPS - 1}]" in visible
    assert f"test[{report.VISIBLE_GROUPS}]" not in visible
    assert f"test[{report.VISIBLE_GROUPS + 4}]" in folded
    assert folded.index("</table></details>") < folded.index("Error ratios above 1")


def test_long_ids_are_shown_whole_in_tables_and_shortened_in_pictures(tmp_path):
    pytest.importorskip("matplotlib")
    long_op = "very_long_operator_name_" * 4
    rid = f"ops/{long_op}/float16/fwd/" + "sample" * 20
    parity = _parity("DIFFERENCES", [_diff("ops", rid)])
    parity.op_ratios.append({"op": long_op, "dtype": "float16", "ratio": 3.0, "id": rid})
    [html, md] = report.write(parity, tmp_path / "p.html", tmp_path / "p.md")
    page = html.read_text()
    assert f"<code>{rid}</code>" in page and f"`{rid}`" in md.read_text()
    assert long_op[:31] + "~" in page  # the heat map's row label


def test_write_draws_a_picture_per_section_with_data_and_markdown_names_them(tmp_path):
    pytest.importorskip("matplotlib")
    [html, md] = report.write(_blockers(), tmp_path / "p.html", tmp_path / "p.md")
    page, text = html.read_text(), md.read_text()
    assert page.count("<svg") == 4  # heat map, curves, memory bars, speed bars
    for anchor, title in (("ops", "Error-ratio heat map"), ("training", "Loss curves"),
                          ("memory", "Memory ratios"), ("speed", "Throughput ratios")):
        section = page[page.index(f'<section id="{anchor}">'):]
        section = section[:section.index("</section>")]
        assert title in section and "<svg" in section
    assert "Pictures: 4 in the HTML report, p.html" in text
    assert "Picture in the HTML report: Error-ratio heat map" in text
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temp file


def test_html_page_alone_draws_its_pictures():
    pytest.importorskip("matplotlib")
    assert report.html_page(_blockers()).count("<svg") == 4
    assert "<svg" not in report.html_page(_blockers(), pictures={})


def test_without_matplotlib_the_report_renders_and_says_why(tmp_path, monkeypatch):
    from harness.report import parity_plots

    monkeypatch.setattr(parity_plots, "available", lambda: False)
    [html, md] = report.write(_blockers(), tmp_path / "p.html", tmp_path / "p.md")
    assert "<svg" not in html.read_text()
    assert "matplotlib is not installed" in html.read_text()
    assert "Pictures: matplotlib is not installed" in md.read_text()


def test_a_failing_picture_is_named_and_the_others_still_drawn(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from harness.report import parity_plots

    def broken(parity):
        raise ValueError("bad data")

    monkeypatch.setitem(parity_plots.PLOTS, "ops", (broken,))
    [html] = report.write(_blockers(), tmp_path / "p.html")
    page = html.read_text()
    assert "picture broken failed: ValueError: bad data" in page and page.count("<svg") == 3


def test_markdown_alone_points_to_the_html_option(tmp_path):
    [md] = report.write(_parity(), md_path=tmp_path / "p.md")
    assert "the HTML report draws them" in md.read_text() and "--html PATH" in md.read_text()


def test_heat_map_cells_above_one_carry_their_ratio():
    pytest.importorskip("matplotlib")
    from harness.report import parity_plots

    title, svg = parity_plots.op_heatmap(_parity())
    assert title.startswith("Error-ratio heat map (3 ops")
    assert ">2.6<" in svg and ">1.4<" in svg and ">0.8<" not in svg  # ratios above 1 only


def test_heat_map_draws_every_metric_in_its_own_bands():
    from harness.report.parity_plots import band_position

    parity = _parity()

    def at(ratio, metric, judgement=None):
        row = {"ratio": ratio, "metric": f"grad0.{metric}"}
        if judgement:
            row["judgement"] = judgement
        return band_position(parity, row)

    assert at(0.5, "rmse") == 0.5 and at(1.5, "rmse") == 1.5 and at(3.0, "rmse") == 3.0
    assert 1 < at(5.0, "max_rel_err") < 2  # a warning of max_rel_err (error above 10)
    assert at(10.0, "max_rel_err") == pytest.approx(2.0) and at(20.0, "max_rel_err") > 2
    assert at(1.5, "unknown_metric") == 1.5  # bands 1 and 2 where thresholds say nothing
    assert at(1.5, "rmse", "error") > 2 and at(3.0, "rmse", "warning") <= 2  # the judgement
    assert at(None, "rmse") is None and at(float("nan"), "rmse") is None


def test_heat_map_shows_status_blockers_and_bars_show_their_thresholds():
    pytest.importorskip("matplotlib")
    from harness.report import parity_plots

    parity = _fallback_op()
    parity.differences[0] = Difference(
        section="ops", id="ops/exp/float32/fwd/typical", severity="blocker",
        summary="passes on cpu, fallback here", reference={"status": "pass"},
        here={"status": "fallback"}, ratio=None, reproduce="python -m pytest x")
    assert parity_plots.status_cells(parity)[("exp", "float32")] == "fallback"
    title, svg = parity_plots.op_heatmap(parity)
    assert ">fallback<" in svg and "dark: blocker, fallback here where the reference passes" \
        in title
    assert svg.index(">exp<") < svg.index(">mm<")  # blockers are the top rows
    _, bars = parity_plots.speed_bars(parity)
    _, memory = parity_plots.memory_bars(parity)
    assert "threshold 0.8" in bars and "threshold 0.9" in memory


def test_heat_map_keeps_room_for_the_worst_ratios_when_blockers_are_many():
    pytest.importorskip("matplotlib")
    from harness.report import parity_plots

    diffs = [_diff("ops", f"ops/blocked{i:02d}/float16/fwd/typical", "blocker", None)
             for i in range(60)]
    parity = _parity("BLOCKERS", diffs)
    title, svg = parity_plots.op_heatmap(parity, limit=10)
    assert title.startswith("Error-ratio heat map (10 of 63 ops: those with a blocker, then")
    assert ">mm<" in svg and ">add<" in svg and ">exp<" in svg  # every op with a ratio
    assert ">blocked04<" in svg and ">blocked08<" not in svg


# --------------------------------------------------------------------------- browser

@needs_chromium
def test_parity_report_renders_in_headless_chromium(tmp_path):
    pytest.importorskip("matplotlib")
    [path] = report.write(_blockers(), tmp_path / "p.html")
    dom = dump_dom(path)
    assert "PARITY: BLOCKERS (exit 1)" in dom
    for section in ("runs",) + SECTIONS + ("thresholds",):
        assert f'id="{section}"' in dom
    assert dom.count("<svg") == 4  # parsed as elements: the inline SVG is well formed
    assert "This page" not in dom and "ERR_" not in dom

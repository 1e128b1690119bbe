"""The report's pictures: matplotlib figures rendered to inline SVG text.

matplotlib is optional (the ``report`` extra). :func:`available` says whether it imports;
without it every function here returns None and the report says so once, in text.
Each function takes the :class:`~harness.report.model.Report` and returns
``(title, svg_text)`` or None when its records are absent (a run without memory records
has no memory plot), so a report of any selection renders.
"""

from __future__ import annotations

import ast
import io
import math
import re
from typing import Any, Callable, Optional

from harness.report.model import Report, number
from harness.verdict import KNOWN_STATUS

Plot = Optional[tuple[str, str]]
MISSING = ("matplotlib is not installed: the report has no plots. "
           "Install it with: pip install 'npu-conformance[report]' (or pip install matplotlib)")
_LABELS = "#333333"


def available() -> bool:
    try:
        import matplotlib  # noqa: F401 - probing only
    except ImportError:
        return False
    return True


def pyplot():
    """matplotlib's pyplot on the Agg backend with the reports' fonts (every report's plots)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.titlesize": 10,
                         "figure.dpi": 96, "svg.hashsalt": "harness-report"})
    return plt


def to_svg(fig) -> str:
    """``fig`` as inline SVG text (no prolog, no metadata, reproducible ids); closes it."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: it is inline
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)


def _info_value(info: dict, key: str) -> Any:
    """An ``info`` entry; tolerates values stored as their repr (older results files)."""
    value = info.get(key)
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
    return value


# ------------------------------------------------------------------------------ plots

def suite_outcomes(report: Report) -> Plot:
    """Pass / fail / other records and regression / review findings per suite."""
    if not report.counts:
        return None
    plt = pyplot()
    suites = list(report.counts)
    series = [("pass", "#4c9a2a"), ("fail", "#c0392b"), (KNOWN_STATUS, "#e6b0aa"),
              ("error", "#7b241c"), ("unsupported", "#b9770e"), ("fallback", "#d4ac0d"),
              ("skip", "#aab7b8")]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 0.35 * len(suites) + 1.2),
                                      gridspec_kw={"width_ratios": [3, 2]})
    start = [0.0] * len(suites)
    for status, colour in series:
        values = [report.counts[s].get(status, 0) for s in suites]
        if any(values):
            left.barh(suites, values, left=start, color=colour, label=status)
            start = [a + b for a, b in zip(start, values)]
    left.set_xscale("symlog")
    left.set_title("records by status (log scale)")
    left.legend(fontsize=7, loc="lower right")
    left.invert_yaxis()
    for kind, colour, offset in (("regression", "#c0392b", -0.2), ("review", "#e67e22", 0.2)):
        values = [report.counts[s].get(kind, 0) for s in suites]
        right.barh([i + offset for i in range(len(suites))], values, height=0.4, color=colour,
                   label=kind)
    right.set_yticks(range(len(suites)), [""] * len(suites))
    right.invert_yaxis()
    right.set_title("findings vs baseline" if report.baseline is not None else
                    "findings (not compared)")
    right.legend(fontsize=7, loc="lower right")
    return "Outcomes per suite", to_svg(fig)


def op_heatmap(report: Report, limit: int = 30) -> Plot:
    """Op x dtype: DUT error / CPU-reference error, and the change against the baseline."""
    cells: dict[tuple[str, str], list[float]] = {}
    deltas: dict[tuple[str, str], float] = {}
    base = report.baseline
    for rec in report.run.records.values():
        parts = rec.id.split("/")
        if rec.suite not in ("ops", "opinfo") or len(parts) < 4:
            continue
        key = (parts[1], parts[2])
        ratios = [number(v) for k, v in rec.metrics.items()
                  if k.endswith("max_rel_err_ratio")]
        ratios = [r for r in ratios if r is not None and math.isfinite(r)]
        if ratios:
            cells.setdefault(key, []).append(max(ratios))
        if base is not None and rec.id in base.records:
            old = base.records[rec.id].metrics
            for k, v in rec.metrics.items():
                if not k.endswith("max_rel_err") or k not in old:
                    continue
                a, b = number(old[k]), number(v)
                if a is not None and b is not None and a > 0 and math.isfinite(b):
                    deltas[key] = max(deltas.get(key, 0.0), b / a)
    if not cells:
        return None
    plt = pyplot()
    import numpy as np

    worst = {k: max(v) for k, v in cells.items()}

    def moved(op: str) -> float:
        return max(abs(math.log(deltas.get(k, 1.0))) for k in worst if k[0] == op)

    def nearest(op: str) -> float:
        return max(worst[k] for k in worst if k[0] == op)

    # the ops that moved against the baseline (>= 1.25x either way), then those whose DUT
    # error is the largest multiple of the CPU reference's; rows of ratio ~1 say nothing
    everything = sorted({k[0] for k in worst})
    shifted = sorted((o for o in everything if moved(o) >= math.log(1.25)),
                     key=lambda o: (-moved(o), o))
    near = sorted((o for o in everything if o not in shifted and nearest(o) > 1.5),
                  key=lambda o: (-nearest(o), o))
    ops = (shifted + near)[:limit] or sorted(everything, key=lambda o: (-nearest(o), o))[:10]
    dtypes = sorted({k[1] for k in worst})
    grid = np.full((len(ops), len(dtypes)), np.nan)
    dgrid = np.full((len(ops), len(dtypes)), np.nan)
    for i, op in enumerate(ops):
        for j, dt in enumerate(dtypes):
            if (op, dt) in worst:
                grid[i, j] = max(worst[(op, dt)], 1e-3)
            if (op, dt) in deltas:
                dgrid[i, j] = deltas[(op, dt)]
    panels = 2 if deltas else 1
    fig, axes = plt.subplots(1, panels, figsize=(3.2 * panels + 1.8, 0.22 * len(ops) + 1.4),
                             squeeze=False)
    from matplotlib.colors import LogNorm

    ax = axes[0][0]
    image = ax.imshow(grid, aspect="auto", cmap="viridis", norm=LogNorm(0.1, 10.0))
    ax.set_xticks(range(len(dtypes)), dtypes, rotation=30)
    ax.set_yticks(range(len(ops)), ops, fontsize=7)
    ax.set_title("max rel err: DUT / CPU reference\n(limit 10x under 'relative')")
    fig.colorbar(image, ax=ax, shrink=0.8)
    if panels == 2:
        ax = axes[0][1]
        image = ax.imshow(dgrid, aspect="auto", cmap="RdYlGn_r", norm=LogNorm(0.25, 4.0))
        ax.set_xticks(range(len(dtypes)), dtypes, rotation=30)
        ax.set_yticks(range(len(ops)), [""] * len(ops))
        ax.set_title(f"max rel err: new / baseline\n({report.baseline_name or 'baseline'})")
        for i in range(len(ops)):
            for j in range(len(dtypes)):
                value = dgrid[i, j]
                if not np.isnan(value) and (value >= 1.25 or value <= 0.8):
                    ax.text(j, i, f"{value:.2g}", ha="center", va="center", fontsize=6,
                            color="white" if value >= 2.5 or value <= 0.4 else "black")
        fig.colorbar(image, ax=ax, shrink=0.8)
    shown = (f"{len(ops)} of {len(everything)} ops: those that moved >= 1.25x against the "
             "baseline, then those with DUT error > 1.5x the CPU reference's")
    return f"Op error heat-map ({shown})", to_svg(fig)


def amp_curves(report: Report) -> Plot:
    """AMP loss curves, DUT vs the fp32 CPU reference, from the convergence records."""
    curves = []
    for rec in sorted(report.run.records.values(), key=lambda r: r.id):
        if not rec.id.startswith("amp/convergence/"):
            continue
        dut, ref = _info_value(rec.info, "dut_loss"), _info_value(rec.info, "ref_loss")
        if isinstance(dut, list) and isinstance(ref, list) and dut:
            curves.append((rec.id.split("/")[2] + " " + rec.id.split("/")[3], dut, ref,
                           _info_value(rec.info, "skipped") or []))
    if not curves:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 2.8), squeeze=False)
    for ax, (name, dut, ref, skipped) in zip(axes[0], curves):
        ax.plot(range(len(ref)), ref, color="#bbbbbb", lw=3.0, label="reference (fp32 CPU)")
        ax.plot(range(len(dut)), dut, color="#1f77b4", lw=0.9, label="DUT (AMP)")
        for step in skipped if isinstance(skipped, list) else []:
            ax.axvline(step, color="#c0392b", lw=0.5, alpha=0.4)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.legend(fontsize=7)
    return "AMP loss curves: DUT vs reference", to_svg(fig)


def memory_curves(report: Report) -> Plot:
    """Peak memory vs batch, with and without checkpointing, and the max batch under the cap."""
    models: dict[str, list] = {}
    for rec in sorted(report.run.records.values(), key=lambda r: r.id):
        parts = rec.id.split("/")
        if not rec.id.startswith("memory/oom_threshold/") or len(parts) < 5:
            continue
        peaks = _info_value(rec.info, "peaks_by_batch")
        if not isinstance(peaks, dict) or not peaks:
            continue
        points = sorted((int(b), float(p)) for b, p in peaks.items())
        models.setdefault(parts[2], []).append(
            (parts[4], points, number(rec.metrics.get("max_batch")),
             number(_info_value(rec.info, "cap_bytes"))))
    if not models:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(models), figsize=(4.4 * len(models), 3.0), squeeze=False)
    for ax, (model, rows) in zip(axes[0], sorted(models.items())):
        cap = None
        for variant, points, max_batch, cap_bytes in rows:
            xs, ys = zip(*points)
            line, = ax.plot(xs, [y / 2**20 for y in ys], marker="o", ms=3, label=(
                f"{variant} (max batch {int(max_batch)})" if max_batch else variant))
            if max_batch:
                ax.axvline(max_batch, color=line.get_color(), lw=0.7, ls=":")
            cap = cap_bytes or cap
        if cap:
            ax.axhline(cap / 2**20, color="#c0392b", lw=1.0, ls="--", label="memory cap")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{model}: peak memory vs batch")
        ax.set_xlabel("batch")
        ax.set_ylabel("peak MiB")
        ax.legend(fontsize=7)
    return "Peak memory vs batch (checkpointing on/off), max batch under the cap", to_svg(fig)


def bench_deltas(report: Report) -> Plot:
    """Benchmark change against the baseline, with confidence intervals where recorded."""
    rows = []
    for rec in sorted(report.run.records.values(), key=lambda r: r.id):
        verdict = _info_value(rec.info, "bench_verdict")
        if not isinstance(verdict, dict):
            continue
        delta = number(verdict.get("delta") if "delta" in verdict else verdict.get("change"))
        ci = verdict.get("ci") or verdict.get("delta_ci")
        if delta is None:
            continue
        low, high = (number(ci[0]), number(ci[1])) if isinstance(ci, (list, tuple)) and \
            len(ci) == 2 else (None, None)
        rows.append((rec.id, delta, low, high, str(verdict.get("verdict", ""))))
    if not rows:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1.0))
    for i, (_, delta, low, high, word) in enumerate(rows):
        colour = "#c0392b" if "slow" in word or "regress" in word else "#4c9a2a" \
            if "fast" in word or "improv" in word else "#555555"
        err = [[delta - low], [high - delta]] if low is not None and high is not None else None
        ax.errorbar([delta * 100], [i], xerr=None if err is None else [[e[0] * 100] for e in err],
                    fmt="o", color=colour, capsize=3)
    ax.axvline(0, color="#999999", lw=0.8)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("change vs baseline (%), with confidence interval")
    return "Benchmark deltas", to_svg(fig)


PLOTS: tuple[Callable[[Report], Plot], ...] = (suite_outcomes, op_heatmap, amp_curves,
                                                 memory_curves, bench_deltas)


def draw(plot: Callable[[Any], Plot], subject: Any, notes: list[str],
         word: str = "plot") -> Plot:
    """``plot(subject)``; one that raises is named in ``notes`` and gives None, so one bad
    plot does not lose the report."""
    try:
        return plot(subject)
    except Exception as exc:  # noqa: BLE001 - one bad plot must not lose the report
        notes.append(f"{word} {plot.__name__} failed: {type(exc).__name__}: {exc}")
        return None


def render_all(report: Report) -> tuple[list[tuple[str, str]], list[str]]:
    """Every plot that has data: ``([(title, svg)], notes)``; notes say what is missing."""
    if not available():
        return [], [MISSING]
    out, notes = [], []
    for plot in PLOTS:
        made = draw(plot, report, notes)
        if made is not None:
            out.append(made)
    return out, notes

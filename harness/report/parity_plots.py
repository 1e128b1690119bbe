"""The parity report's pictures: matplotlib figures as inline SVG, one per section.

Each function takes the :class:`~harness.parity.model.Parity` and returns
``(title, svg_text)``, or None when the comparison holds no values for it (a pair of runs
without memory records has no memory bars), so a report of any selection renders. The
figure machinery (backend, fonts, SVG text) is the go/no-go report's
(:func:`harness.report.plots.pyplot`, :func:`harness.report.plots.to_svg`).

Note [Parity pictures]
~~~~~~~~~~~~~~~~~~~~~~
Every picture is a ratio *this device / reference device*, so 1 is "behaves the same"
everywhere and one eye reads them all:

* the heat map colours op x dtype by the error ratio on a log scale, in the three bands of
  the 3-way standard (<= 1 pass: greens, 1-2 warning: ambers, > 2 error: reds; Note [One
  scale for every metric's bands]), the band edges drawn on the colour bar, and writes
  the ratio in every cell above 1; it shows the worst ops first (a full run compares
  hundreds) and says how many it left out;
* the loss curves of both devices share one panel per curve (the reference thick and
  grey, this device thin on top), so a divergence or an oscillation shows where it starts;
* memory and speed are bars of the ratio around a line at 1 and the comparison's
  threshold (dashed): a max batch or a throughput below 1 is worse here, a peak per step
  above 1 is worse here; a memory bar is red beyond its threshold; throughput bars of one
  benchmark stand side by side per precision (fp32 beside fp16/bf16), because "slower in
  fp32 than fp16" is one of the things a migration fears.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Optional

from harness.parity.compare import MODEL_COLUMN
from harness.parity.model import Parity
from harness.report.plots import MISSING, available, draw, pyplot, to_svg

Plot = Optional[tuple[str, str]]

BANDS = (1.0, 2.0)
"""The 3-way standard's band edges on the error ratio (msprobe's accuracy checker: <= 1
pass, 1-2 warning, > 2 error); the report draws these, the comparison judges."""

HEATMAP_OPS = 40
PRECISION_COLOURS = {"float32": "#5b7fa6", "fp32": "#5b7fa6", "float16": "#e08a2e",
                     "fp16": "#e08a2e", "bfloat16": "#8e5ba6", "bf16": "#8e5ba6"}
REFERENCE_GREY = "#b0b0b0"
STATUS_COLOUR = "#2e2a4f"
HERE_BLUE = "#1f5f8b"


def _finite(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _ratio(value: Any) -> Optional[float]:
    """A plotted ratio: finite and positive; +inf (an error where the reference had none)
    is kept as inf so the heat map shows it at the top of its scale."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value == math.inf:
            return math.inf
        if math.isfinite(value) and value > 0:
            return float(value)
    return None


# ------------------------------------------------------------------------------ ops

def _limits(parity: Parity, row: dict[str, Any]) -> tuple[float, float]:
    """``(warning, error)``: the ratios that start the warning and error bands of the row's
    metric (``grad0.max_rel_err`` -> ``max_rel_err``) in the comparison's thresholds;
    :data:`BANDS` when the thresholds do not name it."""
    metric = str(row.get("metric") or "").rpartition(".")[2]
    ops = parity.thresholds.get("ops") if isinstance(parity.thresholds, dict) else None
    entry = ops.get(metric) if isinstance(ops, dict) else None
    if isinstance(entry, dict):
        warning, error = _finite(entry.get("warning")), _finite(entry.get("error"))
        if warning is not None and error is not None and 0 < warning < error:
            return warning, error
    return BANDS


def band_position(parity: Parity, row: dict[str, Any]) -> Optional[float]:
    """Where a row's ratio sits on the heat map's colour scale, on which every metric's
    warning band is 1..2 (Note [One scale for every metric's bands]); None: no ratio."""
    ratio = _ratio(row.get("ratio"))
    if ratio is None:
        return None
    warning, error = _limits(parity, row)
    if ratio <= warning:
        position = BANDS[0] * ratio / warning
    elif ratio <= error:
        position = BANDS[0] * (BANDS[1] / BANDS[0]) ** (math.log(ratio / warning)
                                                         / math.log(error / warning))
    else:
        position = BANDS[1] * ratio / error
    # the comparison's judgement is the owner of the band; the position only shades it
    judgement = row.get("judgement")
    if judgement == "pass":
        position = min(position, BANDS[0])
    elif judgement == "warning":
        position = min(max(position, BANDS[0] * (1 + 1e-6)), BANDS[1])
    elif judgement == "error":
        position = max(position, BANDS[1] * (1 + 1e-6))
    return position


# Note [One scale for every metric's bands]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The 3-way standard's bands are not the same for every metric: a ratio above 2 is an
# error for the RMSE, the mean relative error, the small-value error and the error
# balance, above 10 for the maximum relative error (one element's rounding moves a
# maximum far more than a mean). A heat-map cell shows one record's worst metric, so a
# colour scale in raw ratios would paint a max-relative-error ratio of 5 (a warning) red.
# The colour is therefore the ratio placed on one scale where every metric's warning band
# runs from 1 to 2: unchanged in the pass band and for the metrics whose bands are 1 and 2;
# inside a wider warning band log-linearly (10 of max_rel_err sits at 2); beyond it by the
# ratio to its error limit. The band is the comparison's judgement when the row carries
# one; the number written in the cell is always the raw ratio.


def op_heatmap(parity: Parity, limit: int = HEATMAP_OPS) -> Plot:
    """Op x dtype, coloured by the worst error ratio of its records in the 3-way bands."""
    worst: dict[tuple[str, str], tuple[float, float]] = {}  # (position, raw ratio)
    for row in parity.op_ratios:
        position = band_position(parity, row)
        if position is None:
            continue
        key = (str(row.get("op")), str(row.get("dtype")))
        if key not in worst or position > worst[key][0]:
            worst[key] = (position, float(row["ratio"]))
    statuses = status_cells(parity)
    if not worst and not statuses:
        return None
    plt = pyplot()
    import numpy as np
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Rectangle

    def op_worst(op: str) -> float:
        return max(v[0] for (o, _), v in worst.items() if o == op)

    everything = sorted({op for op, _ in worst} | {op for op, _ in statuses})
    # the ops with a status difference (blockers) first, but in at most half the rows when
    # ops with ratios would be left out: the worst ratios must stay in the picture
    blocked = sorted({op for op, _ in statuses})
    rated = sorted((o for o in everything if o not in blocked), key=lambda o: (-op_worst(o), o))
    room = max(limit - len(rated), limit // 2)
    ops = (blocked[:room] + rated)[:limit]
    dtypes = sorted({dt for _, dt in worst} | {dt for _, dt in statuses},
                    key=lambda dt: (dt.startswith(MODEL_COLUMN), dt in ("-", "None", ""),
                                    dt))  # no dtype, then the model's cases: last
    top = 16.0
    # a band's bins are [low, high): nudge the edges so that a ratio of exactly 1 (or 2)
    # takes the colour of the band it belongs to (<= 1 pass, <= 2 warning)
    up = 1 + 1e-9
    edges = [1 / 16, 1 / 4, 1 / 2, BANDS[0] * up, 1.41, BANDS[1] * up, 4.0, 8.0, top]
    colours = ["#1a7f3c", "#4c9a2a", "#8cc269", "#f5d36b", "#e8a33d", "#e06c3c", "#c0392b",
               "#7b241c"]
    cmap, norm = ListedColormap(colours), BoundaryNorm(edges, len(colours))
    grid = np.full((len(ops), len(dtypes)), np.nan)
    for i, op in enumerate(ops):
        for j, dt in enumerate(dtypes):
            if (op, dt) in worst:
                grid[i, j] = min(max(worst[(op, dt)][0], edges[0]), top * 0.999)
    fig, ax = plt.subplots(figsize=(max(1.1 * len(dtypes) + 3.6, 7.0), 0.24 * len(ops) + 1.9))
    ax.set_facecolor("#dcdcdc")  # no record of the op in that dtype
    image = ax.imshow(grid, aspect="auto", cmap=cmap, norm=norm, interpolation="nearest")
    ax.set_xticks(range(len(dtypes)), dtypes, rotation=30, ha="right")
    ax.set_yticks(range(len(ops)), [o if len(o) <= 32 else o[:31] + "~" for o in ops],
                  fontsize=7)
    for i, op in enumerate(ops):
        for j, dt in enumerate(dtypes):
            if (op, dt) in statuses:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, color=STATUS_COLOUR))
                ax.text(j, i, statuses[(op, dt)][:11], ha="center", va="center", fontsize=6,
                        color="white")
                continue
            if (op, dt) not in worst:
                continue
            position, ratio = worst[(op, dt)]
            if position > BANDS[0]:
                ax.text(j, i, "inf" if ratio == math.inf else f"{ratio:.2g}", ha="center",
                        va="center", fontsize=6,
                        color="white" if position > BANDS[1] else "black")
    bar = fig.colorbar(image, ax=ax, shrink=0.9, ticks=[1 / 4, 1 / 2, 1, 2, 4, 8])
    bar.ax.set_yticklabels(["1/4", "1/2", "1 warning", "2 error", "4", "8"])
    for edge in BANDS:
        bar.ax.axhline(edge, color="black", lw=1.2)
    ax.set_title(f"worst error ratio per op x dtype: {parity.here.device_type} error / "
                 f"{parity.reference.device_type} error\n(same CPU reference; 3-way bands: "
                 "<= 1 pass, 1-2 warning, > 2 error;\nmax relative error: 1-10 warning, "
                 "> 10 error, drawn on the same scale)", fontsize=9)
    shown = (f"{len(ops)} of {len(everything)} ops: those with a blocker, then the worst "
             "ratios" if len(ops) < len(everything) else f"{len(ops)} ops")
    dark = (f"; dark: {', '.join(sorted({v for v in statuses.values()}))} here where the "
            "reference passes" if statuses else "")
    return (f"Error-ratio heat map ({shown}; the number: the ratio, shown above 1{dark}; "
            "grey: not recorded in that dtype)", to_svg(fig))


def status_cells(parity: Parity) -> dict[tuple[str, str], str]:
    """Op x dtype cells where an op record has a status difference (it passes on the
    reference device, falls back, is unsupported or errors here): the blockers of the
    ops section, which have no error ratio. The word is this device's status."""
    cells: dict[tuple[str, str], str] = {}
    for diff in parity.differences:
        parts = diff.id.split("/")
        if diff.section != "ops" or diff.ratio is not None or len(parts) < 3:
            continue
        status = diff.here.get("status") if isinstance(diff.here, dict) else None
        cells.setdefault((parts[1], parts[2]), str(status or diff.severity))
    return cells


# ------------------------------------------------------------------------- training

def loss_curves(parity: Parity, per_row: int = 3) -> Plot:
    """Both devices' loss curves overlaid, one panel per curve."""
    curves = [c for c in parity.curves
              if isinstance(c.get("reference"), list) and isinstance(c.get("here"), list)
              and (c["reference"] or c["here"])]
    if not curves:
        return None
    plt = pyplot()
    cols = min(per_row, len(curves))
    rows = math.ceil(len(curves) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.3 * cols, 2.9 * rows), squeeze=False)
    for ax in axes.flat[len(curves):]:
        ax.set_visible(False)
    ref_name, here_name = parity.reference.device_type, parity.here.device_type
    for ax, curve in zip(axes.flat, curves):
        ref = [_finite(v) for v in curve["reference"]]
        here = [_finite(v) for v in curve["here"]]
        ax.plot(range(len(ref)), [math.nan if v is None else v for v in ref],
                color=REFERENCE_GREY, lw=3.0, label=f"reference ({ref_name})")
        ax.plot(range(len(here)), [math.nan if v is None else v for v in here],
                color=HERE_BLUE, lw=1.0, label=f"here ({here_name})")
        lost = [i for i, v in enumerate(here) if v is None]
        if lost:  # a non-finite loss on this device: mark where it happened
            ax.axvline(lost[0], color="#c0392b", lw=0.8, ls="--",
                       label=f"non-finite from step {lost[0]}")
        label = str(curve.get("label") or curve.get("id"))
        ax.set_title(label if len(label) <= 48 else label[:47] + "~", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return f"Loss curves, {ref_name} and {here_name} overlaid ({len(curves)})", to_svg(fig)


# --------------------------------------------------------------------------- memory

def memory_bars(parity: Parity, per_row: int = 2) -> Plot:
    """Memory ratios (here / reference) per case, one panel per metric (max batch, peaks);
    red beyond the comparison's threshold (a difference), blue within it."""
    metrics: dict[str, list[tuple[str, float]]] = {}
    for row in parity.memory:
        ratio = _finite(row.get("ratio"))
        if ratio is not None:
            rid = str(row.get("id"))
            metrics.setdefault(str(row.get("metric")), []).append(
                (rid[len("memory/"):] if rid.startswith("memory/") else rid, ratio))
    if not metrics:
        return None
    plt = pyplot()
    names = sorted(metrics, key=lambda m: (m != "max_batch", m))  # max batch first
    cols = min(per_row, len(names))
    grid_rows = math.ceil(len(names) / cols)
    # each row of panels as tall as its longest panel (in cases), so that a bar is equally
    # thick everywhere and a panel of two cases is not stretched to the height of ten
    heights = [max(len(metrics[m]) for m in names[r * cols:(r + 1) * cols])
               for r in range(grid_rows)]
    fig, axes = plt.subplots(grid_rows, cols, squeeze=False,
                             figsize=(5.6 * cols, sum(0.32 * h + 1.4 for h in heights)),
                             gridspec_kw={"height_ratios": [0.32 * h + 1.4 for h in heights]})
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for index, (ax, metric) in enumerate(zip(axes.flat, names)):
        rows = metrics[metric]
        height = heights[index // cols]
        lower_is_worse = "batch" in metric
        limit = (_threshold(parity, "memory", "max_batch_ratio", "below") if lower_is_worse
                 else _threshold(parity, "memory", "peak_ratio", "above"))
        colours = [_bar_colour(r, lower_is_worse, limit) for _, r in rows]
        ax.barh(range(len(rows)), [r for _, r in rows], color=colours)
        for i, (_, r) in enumerate(rows):
            ax.text(r, i, f" {r:.2g}", va="center", fontsize=7)
        ax.axvline(1.0, color="black", lw=0.8)
        top = max([1.3] + [r * 1.2 for _, r in rows] + ([limit * 1.1] if limit else []))
        if limit is not None:
            ax.axvline(limit, color="#c0392b", lw=0.9, ls="--")
            ax.text(limit, -0.6, f"threshold {limit:g}", color="#c0392b", fontsize=7,
                    ha="center", va="bottom")
        ax.set_yticks(range(len(rows)), [_short(i) for i, _ in rows], fontsize=7)
        ax.set_ylim(height - 0.5, -0.9)  # inverted, with room for the threshold's label
        ax.set_xlim(0, top)
        ax.set_title(f"{metric}: here / reference "
                     f"({'below' if lower_is_worse else 'above'} 1 is worse here)", fontsize=9)
    fig.tight_layout()
    return "Memory ratios under the same cap", to_svg(fig)


def _bar_colour(ratio: float, lower_is_worse: bool, limit: Optional[float]) -> str:
    """Red beyond the comparison's threshold, the neutral blue within it: the colour says
    what the comparison decided, the bar's length by how much."""
    beyond = limit is not None and (ratio < limit if lower_is_worse else ratio > limit)
    return "#c0392b" if beyond else "#5b7fa6"


# ---------------------------------------------------------------------------- speed

def benchmark_of(row: dict[str, Any]) -> str:
    """The benchmark a speed row measures: its id without the precision part and the batch
    size (``bench/train/simplecnn/float16-amp/step/b8/small`` ->
    ``bench/train/simplecnn/step/small``), so that the precisions of one benchmark stand
    side by side even where each runs at its own batch size (both devices ran the same)."""
    rid, precision = str(row.get("id")), str(row.get("precision"))
    parts = [p for p in rid.split("/") if p != precision and not re.fullmatch(r"b\d+", p)]
    return "/".join(parts) or rid


def _batch_of(row: dict[str, Any]) -> str:
    return next((p for p in str(row.get("id")).split("/") if re.fullmatch(r"b\d+", p)), "")


def speed_bars(parity: Parity) -> Plot:
    """Throughput ratios per benchmark, the precisions of one benchmark side by side."""
    cells: dict[str, dict[str, tuple[float, str]]] = {}
    for row in parity.speed:
        ratio = _finite(row.get("ratio"))
        if ratio is not None:
            cells.setdefault(benchmark_of(row), {})[str(row.get("precision"))] = (
                ratio, _batch_of(row))
    if not cells:
        return None
    plt = pyplot()
    benches = sorted(cells)
    precisions = sorted({p for row in cells.values() for p in row}, key=precision_order)
    width = 0.8 / len(precisions)
    fig, ax = plt.subplots(figsize=(8.5, 0.3 * len(benches) * len(precisions) + 1.5))
    top = 1.2
    for k, precision in enumerate(precisions):
        ys, xs, batches = [], [], []
        for i, bench in enumerate(benches):
            if precision in cells[bench]:
                ys.append(i - 0.4 + width * (k + 0.5))
                xs.append(cells[bench][precision][0])
                batches.append(cells[bench][precision][1])
        ax.barh(ys, xs, height=width * 0.92, label=precision,
                color=PRECISION_COLOURS.get(precision.split("-")[0], None))
        for y, x, batch in zip(ys, xs, batches):
            ax.text(x, y, f" {x:.2g}" + (f" ({batch})" if batch else ""), va="center",
                    fontsize=7)
        top = max([top] + [x * 1.3 for x in xs])
    ax.axvline(1.0, color="black", lw=0.8)
    limit = _threshold(parity, "speed", "throughput_ratio", "below")
    if limit is not None:
        ax.axvline(limit, color="#c0392b", lw=0.9, ls="--", label=f"threshold {limit:g}")
        top = max(top, limit * 1.1)
    ax.set_xlim(0, top)
    ax.set_yticks(range(len(benches)), [_short(b) for b in benches], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("throughput here / reference (below 1: slower here)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("throughput ratio per benchmark, precisions side by side")
    return "Throughput ratios at the same batch size and precision", to_svg(fig)


def precision_order(precision: str) -> tuple:
    """fp32 first, then the lower precisions (fp16/bf16, with or without AMP)."""
    return precision.split("-")[0] not in ("float32", "fp32"), precision


def _threshold(parity: Parity, section: str, name: str, key: str) -> Optional[float]:
    """A ratio threshold from the comparison's thresholds (``memory.max_batch_ratio.below``),
    drawn on its bars; None when the thresholds do not hold it."""
    group = parity.thresholds.get(section) if isinstance(parity.thresholds, dict) else None
    entry = group.get(name) if isinstance(group, dict) else None
    return _finite(entry.get(key)) if isinstance(entry, dict) else None


def _short(text: str, limit: int = 44) -> str:
    return text if len(text) <= limit else "~" + text[-(limit - 1):]


# ------------------------------------------------------------------------------ all

PLOTS: dict[str, tuple[Callable[[Parity], Plot], ...]] = {
    "ops": (op_heatmap,), "training": (loss_curves,), "memory": (memory_bars,),
    "speed": (speed_bars,), "model": ()}


def render_all(parity: Parity) -> tuple[dict[str, list[tuple[str, str]]], list[str]]:
    """Every picture that has data, by section: ``({section: [(title, svg)]}, notes)``;
    the notes say what is missing (matplotlib, or a picture that failed)."""
    if not available():
        return {}, [MISSING]
    out: dict[str, list[tuple[str, str]]] = {}
    notes = []
    for section, plots in PLOTS.items():
        for plot in plots:
            made = draw(plot, parity, notes, "picture")
            if made is not None:
                out.setdefault(section, []).append(made)
    return out, notes

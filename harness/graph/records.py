"""Graph-mode measurements -> records (:class:`~harness.ops.outcome.OpOutcome`), one builder
per question, used by ``suites/graph`` and by ``python -m harness model --compile`` alike,
so a model's graph records mean what the family's do.
"""

from __future__ import annotations

from harness import ids
from harness.graph.capture import Graphs, GuardFallback, Recompiles
from harness.graph.step import StepResult
from harness.ops.outcome import OpOutcome
from harness.results import lower

COUNT = lower(rel=1.0, abs=0.0, severity="regression")
"""A rise of a graph, break or recompile count is a capability lost
(Note [Graph breaks and the user's line] in :mod:`harness.graph.capture`)."""

DYNAMO = "dynamo"
"""The backend part of the ids of what Dynamo decides whatever compiles."""


CHEAP, DEVICE = "cheap", "device"
"""The backend part of a step record's id: :data:`harness.graph.backends.CHEAP`, or the
device kind's (or ``--graph-backend``'s); which one ran is the record's ``info.backend``,
so a compiled run and an eager run of one stack share ids (``harness parity``)."""


def step_outcomes(model: str, dtype: str, result: StepResult,
                  which: str = DEVICE) -> list[OpOutcome]:
    """``.../<which>/compiled`` (did the backend compile every graph) and one record per
    tensor group (``forward``, ``loss``, ``grad``, ``param``) of the compiled step."""
    backend, counting = result.backend, result.counting
    info = {"backend": backend, "graph_ops": [g.ops for g in counting.graphs]}
    compiled = OpOutcome(ids.graph_record(model, dtype, which, "compiled"), info=info,
                         metrics={"graphs_compiled": float(counting.compiled)},
                         rules={"graphs_compiled": COUNT})
    if result.fell_back:
        compiled.status = "fallback"
        compiled.message = (f"{backend} raised compiling {len(counting.errors)} of "
                            f"{len(counting.graphs)} graph(s) and the step ran eagerly: "
                            f"{counting.errors[0]}")
    elif not counting.compiled:
        compiled.status = "fail"
        compiled.message = f"{backend} was handed no graph: the compiled step ran eagerly"
    out = [compiled]
    for group in result.groups:
        out.append(OpOutcome(ids.graph_record(model, dtype, which, group.group),
                             status="pass" if group.passed else "fail", standard="relative",
                             metrics=group.metrics, rules=group.rules, message=group.message,
                             info={"worst": group.worst, "failing": group.failing,
                                   "backend": backend}))
    return out


def graphs_outcome(model: str, graphs: Graphs) -> OpOutcome:
    """``.../dynamo/graphs``: graphs and breaks (each with reason and the user's line)."""
    return OpOutcome(ids.graph_record(model, "float32", DYNAMO, "graphs"),
                     metrics={"graphs": float(graphs.graphs),
                              "graph_breaks": float(len(graphs.breaks))},
                     rules={"graphs": COUNT, "graph_breaks": COUNT},
                     info={"breaks": [b.to_json() for b in graphs.breaks], "ops": graphs.ops})


def dynamic_label(dynamic) -> str:
    return "unset" if dynamic is None else str(dynamic).lower()


def recompiles_outcome(model: str, got: Recompiles) -> OpOutcome:
    """``.../dynamo/recompiles/dynamic=<unset|true|false>``."""
    return OpOutcome(ids.graph_record(model, "float32", DYNAMO, "recompiles",
                                      f"dynamic={dynamic_label(got.dynamic)}"),
                     metrics={"recompiles": float(got.recompiles)},
                     rules={"recompiles": COUNT},
                     info={"compiles": got.compiles, "first_call": got.first, "shapes": [list(s) for s in got.shapes]})


def guard_outcome(model: str, got: GuardFallback) -> OpOutcome:
    """``.../dynamo/guard_fallback``: past the recompile limit the call ran eagerly."""
    message = "" if got.ok else (
        f"with {got.limit}=1, a call of another shape "
        + (f"raised instead of running eagerly: {got.error}" if got.error else
           f"compiled {got.compiles} time(s) (expected 1); matched eager: {got.matches_eager}"))
    return OpOutcome(ids.graph_record(model, "float32", DYNAMO, "guard_fallback"),
                     status="pass" if got.ok else "fail", message=message,
                     info={"matches_eager": got.matches_eager, "compiles": got.compiles,
                           "limit": got.limit})

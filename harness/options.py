"""The harness's command-line options as data, and their values as :class:`Settings`.

:data:`OPTIONS` is every option in one table (flags, argparse keyword arguments): the
plugin adds them to pytest's parser as one group. :func:`settings_from` turns the parsed
values into the run's :class:`harness.session.Settings`. Nothing here imports pytest.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

from harness import argtypes, kinds
from harness.session import BASELINE_MODES, FAIL_ON, Settings, alerts_paths


class OptionsError(ValueError):
    """Options that contradict each other (the plugin reports it as a usage error)."""


# Every option in one table: (flags, argparse keyword arguments, or a function returning
# them when they are read from another table: --device's from harness.kinds' rows).
OptionKwargs = Union[dict[str, Any], Callable[[], dict[str, Any]]]
OPTIONS: list[tuple[tuple[str, ...], OptionKwargs]] = [
    (("--device",), kinds.device_option),
    (("--baseline",), dict(default="compare", choices=BASELINE_MODES, metavar="MODE",
                           help="What to do with the baseline: compare (fail on regressions "
                                "against it; say NOT COMPARED when there is none), require "
                                "(compare, and a usage error when there is none: nightly CI), "
                                "record (store this run as its stack's baseline) or off. "
                                "Default: %(default)r")),
    (("--fail-on",), dict(default="no-go", choices=FAIL_ON, metavar="VERDICT",
                          help="Exit non-zero on this verdict or worse: no-go, or review "
                               "(metrics moved beyond their baseline rule while every check "
                               "passes also fails the checks that moved). Default: %(default)r")),
    (("--keep-results",), dict(default=20, type=argtypes.non_negative_int, metavar="N",
                               help="Keep the newest N run files in the results folder (0: "
                                    "all). Default: %(default)r")),
    (("--baseline-dir",), dict(default=None, metavar="PATH",
                               help="Baseline store (<PATH>/<device_type>/<device_slug>/"
                                    "<stack_id>.json). Default: baselines/ in the rootdir (the "
                                    "installed suites: in the current folder)")),
    (("--baseline-against",), dict(default=None, metavar="STACK_ID", type=argtypes.stack_id,
                                   help="Compare against this stored stack (e.g. "
                                        "cann-8.0.RC3) instead of the same or newest older "
                                        "one. Default: %(default)r")),
    (("--results-dir",), dict(default=None, metavar="PATH",
                              help="Where each run writes <UTC time>-<device>.json. "
                                   "Default: results/ in the rootdir (the installed suites: "
                                   "in the current folder)")),
    (("--alerts",), dict(default=None, metavar="PATH",
                         help="Write regressions and improvements to PATH (JSON) and "
                              "PATH's .md sibling (Markdown). Default: %(default)r")),
    (("--report",), dict(default=None, metavar="PATH",
                         help="Write the go/no-go report to PATH (self-contained HTML) and "
                              "PATH's .md sibling (Markdown). Default: %(default)r")),
    (("--inject-fault",), dict(action="append", default=[], metavar="NAME",
                               help="Activate a fault for the whole run (repeatable); NAME "
                                    "or package.module:NAME. Default: none")),
    (("--seed",), dict(default=0, type=argtypes.non_negative_int, metavar="N",
                       help="Global seed; each test is seeded with N + crc32(nodeid). "
                            "Default: %(default)r")),
    (("--run-slow",), dict(action="store_true", default=False,
                           help="Run checks marked slow (large sweeps). Default: %(default)r")),
    (("--run-benchmarks",), dict(action="store_true", default=False,
                                 help="Run checks marked benchmark (timings, compared "
                                      "noise-aware). Default: %(default)r")),
    (("--op-filter",), dict(default=None, metavar="REGEX", type=argtypes.regular_expression,
                            help="Only op cases whose id matches REGEX (re.search). "
                                 "Default: %(default)r")),
    (("--op-budget",), dict(default=600.0, metavar="SECONDS", type=argtypes.positive_float,
                            help="Time budget of the OpInfo sweep; cases past it are "
                                 "skipped. Default: %(default)r")),
    (("--training-scale",), dict(default="small", choices=("small", "full"), metavar="SCALE",
                                 help="Training scale: small (CPU-sized models and step "
                                      "counts) or full (ResNet-18 proper, longer runs). "
                                      "Default: %(default)r")),
    (("--dist-timeout",), dict(default=120.0, metavar="SECONDS",
                               type=argtypes.seconds_up_to(argtypes.DAY),
                               help="Kill a distributed check's ranks after this long and "
                                    "fail naming the hung ranks (at most 86400). Default: "
                                    "%(default)r")),
    (("--bench-runs",), dict(default=1, metavar="K", type=argtypes.positive_int,
                             help="Repeat the selected benchmarks in K fresh processes (this "
                                  "one and K-1 children) and judge all K runs (record: store "
                                  "all K). Default: %(default)r")),
    (("--model",), dict(action="append", default=[], metavar="PKG.MOD:FACTORY",
                        type=argtypes.model_factory,
                        help="Capture this model's training step and check every aten call "
                             "it makes (repeatable; suites/model). Default: none")),
    (("--model-input",), dict(default=None, metavar="SHAPE[:DTYPE]", type=argtypes.model_input,
                              help="Input shape(s) for --model, e.g. 8x3x32x32 or "
                                   "8x3x32x32:float16. Default: the factory's example "
                                   "inputs")),
    (("--graph-backend",), dict(default=None, metavar="NAME",
                                help="torch.compile backend of the graph family's device "
                                     "cases: a name Dynamo registers (eager: capture only, "
                                     "nothing compiled; a run with it is parity's eager side). "
                                     "Default: the device kind's (harness/kinds.py)")),
    (("--model-compile",), dict(action="store_true", default=False,
                                help="Also compile each --model with the device's graph "
                                     "backend: graphs, breaks, recompiles, the compiled step "
                                     "vs eager (records graph/<model>/...). Default: "
                                     "%(default)r")),
    (("--store",), dict(default=None, metavar="URL",
                        help="The store every run is kept in: sqlite:///PATH or postgresql://"
                             "USER:PASSWORD@HOST:PORT/DB (docs/nightly.md). Default: "
                             "$HARNESS_STORE, else sqlite:///<results dir>/harness.db")),
    (("--run-id",), dict(default=None, metavar="ID",
                         help="The run this session is (a shard of): shards of one run share "
                              "it. Default: from CI variables (GITHUB_RUN_ID, CI_PIPELINE_ID, "
                              "BUILD_TAG), else one per session")),
]

DESTS = tuple(flags[0].lstrip("-").replace("-", "_") for flags, _ in OPTIONS)
"""Each option's name in the parsed values (``--baseline-dir`` -> ``baseline_dir``)."""
SHARD_DESTS = ("splits", "group")
"""pytest-split's options (``--splits N --group I``), read when that plugin is loaded: a
shard of a run is labelled ``I/N`` in the store (Note [Shards of one run])."""


def settings_of_config(config, root: Path) -> Settings:
    """The run's Settings from a pytest ``Config`` (read through ``getoption`` only).

    Raises:
        OptionsError: as :func:`settings_from`, and for shards whose tests would be
            ordered apart (:func:`harness.store.shards.unstable_order`).
    """
    from harness.store.shards import unstable_order

    markexpr = config.getoption("markexpr", "") or ""
    values = {dest: config.getoption(dest) for dest in DESTS}
    values.update({dest: config.getoption(dest, None) for dest in SHARD_DESTS})
    problem = unstable_order(values.get("splits"), _shuffled_by(config))
    if problem is not None:
        raise OptionsError(problem)
    return settings_from(values, root=root, here=config.invocation_params.dir,
                         markexpr=markexpr)


def _shuffled_by(config) -> Optional[str]:
    """``"pytest-randomly"`` when it reorders the tests with a seed each process draws for
    itself (its default, or ``last``: each host's own cache); None otherwise. The seed as
    given is read from the arguments parsed before plugins configure (pytest-randomly's
    configure replaces ``default`` with the seed it drew)."""
    if config.pluginmanager.get_plugin("randomly") is None:
        return None
    if not config.getoption("randomly_reorganize", True):
        return None
    seed = getattr(config.known_args_namespace, "randomly_seed", "default")
    return "pytest-randomly" if seed in ("default", "last") else None


def names_marker(markexpr: str, marker: str) -> bool:
    """Whether ``-m`` asks for an opt-in marker (``-m slow``, not ``-m "not slow"``)."""
    return bool(re.search(rf"\b{marker}\b", markexpr)) and f"not {marker}" not in markexpr


def settings_from(values: Mapping[str, Any], *, root: Path, here: Path,
                  markexpr: str = "") -> Settings:
    """The run's Settings from parsed option values (keyed by :data:`DESTS`).

    Args:
        values: option name -> parsed value.
        root: where ``baselines/`` and ``results/`` default to (the rootdir, or the
            invocation folder for the installed suites: :func:`harness.layout.outputs_home`).
        here: the invocation directory (what relative paths are relative to).
        markexpr: the ``-m`` expression (``-m slow`` turns ``--run-slow`` on).

    Raises:
        OptionsError: for options that contradict each other, saying which to drop.
    """
    def place(value: Optional[str], default: str) -> Path:
        return root / default if value is None else (here / value).resolve()

    if values["baseline"] == "record" and values["baseline_against"]:
        raise OptionsError("--baseline record writes this stack's own baseline and cannot "
                           "be combined with --baseline-against; drop one")
    if values["baseline"] == "off" and values["baseline_against"]:
        raise OptionsError("--baseline-against names a baseline to compare with, but "
                           "--baseline off compares nothing; drop one")
    if values["model_input"] and not values["model"]:
        raise OptionsError("--model-input gives the input shapes of --model, and no --model "
                           "was given; add --model PKG.MOD:FACTORY or drop --model-input")
    if values["model_compile"] and not values["model"]:
        raise OptionsError("--model-compile compiles each --model, and no --model was "
                           "given; add --model PKG.MOD:FACTORY or drop --model-compile")
    alerts = alerts_paths((here / values["alerts"]).resolve())[0] if values["alerts"] else None
    from harness.store import StoreError, check_url, url_for
    from harness.store.shards import derive_run_id, label

    results_dir = place(values["results_dir"], "results")
    store = url_for(values.get("store"), results_dir)
    try:
        check_url(store)
    except StoreError as exc:
        raise OptionsError(str(exc)) from None
    return Settings(
        device_request=values["device"], baseline_mode=values["baseline"],
        baseline_dir=place(values["baseline_dir"], "baselines"),
        baseline_against=values["baseline_against"],
        results_dir=results_dir, store=store,
        run_id=values.get("run_id") or derive_run_id(),
        shard=label(values.get("group"), values.get("splits")),
        alerts=alerts,
        report=(here / values["report"]).resolve() if values["report"] else None,
        faults=tuple(values["inject_fault"]), seed=values["seed"],
        run_slow=bool(values["run_slow"]) or names_marker(markexpr, "slow"),
        run_benchmarks=bool(values["run_benchmarks"]) or names_marker(markexpr, "benchmark"),
        op_filter=values["op_filter"], op_budget=values["op_budget"],
        training_scale=values["training_scale"], dist_timeout=values["dist_timeout"],
        fail_on=values["fail_on"], keep_results=values["keep_results"],
        bench_runs=values["bench_runs"],
        models=tuple(values["model"]), model_input=values["model_input"],
        model_compile=values["model_compile"], graph_backend=values["graph_backend"],
    )

"""Option coverage of the optimizer family: optimizers, LR schedulers, gradient clipping.

A backend whose SGD ignores ``nesterov=True``, whose fused Adam ignores ``amsgrad``, or
whose schedule is one step late passes every check that leaves the option at its default.
So every documented option of every optimizer, scheduler and clipping function of the
family is either set to a non-default value by a case here, or has a reason
(:data:`REASONS`, :data:`OPTION_REASONS`) why not. ``python -m harness optim options``
prints the table; ``tests/test_optim_options.py`` fails on an unexplained option, and on a
case whose option the reference cannot tell from its default (Note [Option sensitivity]).
The checks are ``suites/optim/test_optimizer_options.py``.

Note [Documented options]
~~~~~~~~~~~~~~~~~~~~~~~~~
The documented options of an optimizer or scheduler are the parameters *with a default*
of its constructor's ``inspect.signature`` (of the function, for clipping), read from the
installed torch: an option a new torch adds appears in the table by itself (as missing,
until a case or a reason covers it), and one an older torch lacks is simply not listed
there. A case that sets an option this torch lacks is recorded ``unsupported`` with
torch's own refusal as the reason, never ``fail`` (Note [Missing features of older
stacks] in ``harness/device.py``). Required parameters (``params``, ``step_size``,
``T_max``, ``max_norm``) are set by every case and not counted, as for op keywords
(Note [Documented keywords] in ``harness/ops/keywords.py``).

An option is *exercised* when a case passes it with a value that differs from the
default; for optimizers the implementation sweep (:data:`IMPLS`: ``foreach=False``,
``foreach=True``, ``fused=True`` where the constructor has ``fused``) is merged into every
case, so ``foreach`` and ``fused`` count through it.

Note [Option sensitivity]
~~~~~~~~~~~~~~~~~~~~~~~~~
A case that sets an option the reference cannot tell from its default cannot catch a
backend that ignores it (Adam's ``eps=1e-7`` next to gradients of size 1). So each case
is built to make its options matter, and the harness test proves it: for every exercised
option that changes the math (all but :data:`PATHS`, which select an implementation of
the same math), the fp64 reference run with that one option put back to its default must
move the result by more than :data:`SENSITIVITY` (relative), or be refused by torch (a
combination the default makes invalid, such as ``nesterov`` without ``momentum``).

Note [Which schedulers]
~~~~~~~~~~~~~~~~~~~~~~~
The family holds the schedulers training recipes use: warm-up (``LinearLR``,
``ConstantLR``), decay (``StepLR``, ``MultiStepLR``, ``ExponentialLR``,
``PolynomialLR``, ``CosineAnnealingLR``, ``CosineAnnealingWarmRestarts``), their
composition (``SequentialLR`` for warm-up then decay, ``ChainedScheduler``), one-cycle
and cyclic schedules (``OneCycleLR``, ``CyclicLR``, which also cycle the momentum), the
custom ones (``LambdaLR``, as Hugging Face's warm-up schedules are built, and
``MultiplicativeLR``) and the metric-driven ``ReduceLROnPlateau``: every scheduler of
``torch.optim.lr_scheduler`` today. A scheduler computes on the host; what it does to the
DUT is the learning rate (and momentum) every step of the DUT's optimizer uses, so each
case runs a DUT optimizer with the scheduler inside the DUT scope and compares the
schedule *and* the parameters with an fp64 reference optimizer driven by the same
scheduler outside it: a fused kernel that keeps the lr it was built with is caught as
well as a wrong schedule.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any, Callable, Optional

import torch

# ------------------------------------------------------------------------------ values

@dataclasses.dataclass(frozen=True)
class TensorValue:
    """An option passed as a 0-dim tensor (``lr=torch.tensor(0.01)``): on the DUT a
    float32 tensor on the parameters' device; the reference gets the plain number."""

    value: float


@dataclasses.dataclass(frozen=True)
class OnOptimizer:
    """A scheduler option built from the optimizer (``SequentialLR``'s ``schedulers``)."""

    build: Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class Case:
    """One check: a subject (optimizer name, scheduler or clipping function) with options.

    Attributes:
        subject: a key of :data:`OPTIMIZERS`, :data:`SCHEDULERS` or :data:`CLIPPING`.
        label: the case's name in node and record ids.
        kwargs: the options (values may be :class:`TensorValue` / :class:`OnOptimizer`).
        impls: optimizer implementations the case runs with (optimizers only).
        nonfinite: clipping only: one gradient element is +inf.
        optimizer: schedulers only: the optimizer the schedule drives (name, options).
        metric: ``ReduceLROnPlateau`` only: the metric it is stepped with, per step
            (default :data:`PLATEAU_METRIC`).
    """

    subject: str
    label: str
    kwargs: dict
    impls: tuple[str, ...] = ("forloop", "foreach", "fused")
    nonfinite: bool = False
    optimizer: tuple[str, dict] = ("sgd", {"lr": 0.05, "momentum": 0.9})
    metric: tuple[float, ...] = ()


PATHS = frozenset({"foreach", "fused", "capturable", "differentiable"})
"""Options that select an implementation of the same math (Note [Option sensitivity])."""

SENSITIVITY = 1e-2
"""Least relative change of the reference result when one option goes back to its default
(Note [Option sensitivity]): 100x the limit a check allows (:data:`PARAM_LIMIT`)."""

PARAM_LIMIT = 1e-4
"""|p_dut - p_ref| / max |p_ref - p_0|: an fp32 optimizer against an fp64 one fed the same
gradients stays near 1e-6 (as in ``suites/optim/test_optimizer_state.py``)."""

SCHEDULE_LIMIT = 1e-6
"""Relative lr/momentum difference allowed: the schedule is host float64 arithmetic on
both sides (an lr kept in a float32 tensor rounds at 6e-8)."""

CLIP_LIMIT = 1e-5
"""Relative error of clipped fp32 gradients and norms against fp64 (a norm of a few
hundred fp32 elements stays near 1e-7)."""

STEPS = 6
SCHEDULE_STEPS = 12
SHAPES = ((16, 8), (8,), (3, 3, 3))


# ------------------------------------------------------------------------- optimizers

OPTIMIZERS: dict[str, str] = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW",
                              "rmsprop": "RMSprop", "adagrad": "Adagrad"}
"""The family's optimizers (``torch.optim.<class>``), as in ``test_optimizer_state.py``."""

IMPLS: dict[str, dict] = {"forloop": {"foreach": False}, "foreach": {"foreach": True},
                          "fused": {"fused": True}}
"""Implementation variants; ``fused`` only where the constructor has the option."""

_T = TensorValue
_DIFF = ("forloop",)   # differentiable=True: torch's for-loop path only (foreach/fused refuse)
_CAPT = ("forloop", "foreach", "fused")  # fused takes capturable too (Adam, AdamW)

OPTIMIZER_CASES: tuple[Case, ...] = (
    Case("sgd", "lr_tensor", {"lr": _T(0.05), "momentum": 0.9}),
    Case("sgd", "momentum", {"lr": 0.05, "momentum": 0.9}),
    Case("sgd", "dampening", {"lr": 0.05, "momentum": 0.9, "dampening": 0.5}),
    Case("sgd", "nesterov", {"lr": 0.05, "momentum": 0.9, "nesterov": True}),
    Case("sgd", "weight_decay", {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.5}),
    Case("sgd", "maximize", {"lr": 0.05, "momentum": 0.9, "maximize": True}),
    Case("sgd", "differentiable", {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.5,
                                   "differentiable": True}, impls=_DIFF),
    Case("adam", "lr_tensor", {"lr": _T(0.01)}),
    Case("adam", "betas", {"lr": 0.01, "betas": (0.5, 0.9)}),
    Case("adam", "eps", {"lr": 0.01, "eps": 0.1}),
    Case("adam", "weight_decay", {"lr": 0.01, "weight_decay": 0.5}),
    Case("adam", "decoupled_weight_decay", {"lr": 0.01, "weight_decay": 0.5,
                                            "decoupled_weight_decay": True}),
    Case("adam", "amsgrad", {"lr": 0.01, "betas": (0.5, 0.9), "amsgrad": True}),
    Case("adam", "maximize", {"lr": 0.01, "maximize": True}),
    Case("adam", "capturable", {"lr": 0.01, "capturable": True}, impls=_CAPT),
    Case("adam", "differentiable", {"lr": 0.01, "weight_decay": 0.5,
                                    "differentiable": True}, impls=_DIFF),
    Case("adamw", "lr_tensor", {"lr": _T(0.01)}),
    Case("adamw", "betas", {"lr": 0.01, "betas": (0.5, 0.9)}),
    Case("adamw", "eps", {"lr": 0.01, "eps": 0.1}),
    Case("adamw", "weight_decay", {"lr": 0.01, "weight_decay": 5.0}),
    Case("adamw", "amsgrad", {"lr": 0.01, "betas": (0.5, 0.9), "amsgrad": True}),
    Case("adamw", "maximize", {"lr": 0.01, "maximize": True}),
    Case("adamw", "capturable", {"lr": 0.01, "capturable": True}, impls=_CAPT),
    Case("adamw", "differentiable", {"lr": 0.01, "differentiable": True}, impls=_DIFF),
    Case("rmsprop", "lr_tensor", {"lr": _T(0.02)}),
    Case("rmsprop", "alpha", {"lr": 0.02, "alpha": 0.5}),
    Case("rmsprop", "eps", {"lr": 0.02, "eps": 0.1}),
    Case("rmsprop", "weight_decay", {"lr": 0.02, "weight_decay": 0.5}),
    Case("rmsprop", "momentum", {"lr": 0.02, "momentum": 0.9}),
    Case("rmsprop", "centered", {"lr": 0.02, "alpha": 0.5, "centered": True}),
    Case("rmsprop", "maximize", {"lr": 0.02, "maximize": True}),
    Case("rmsprop", "capturable", {"lr": 0.02, "momentum": 0.9, "capturable": True},
         impls=_CAPT),
    Case("rmsprop", "differentiable", {"lr": 0.02, "weight_decay": 0.5,
                                       "differentiable": True}, impls=_DIFF),
    Case("adagrad", "lr_tensor", {"lr": _T(0.05)}),
    Case("adagrad", "lr_decay", {"lr": 0.05, "lr_decay": 0.5}),
    Case("adagrad", "weight_decay", {"lr": 0.05, "weight_decay": 0.5}),
    Case("adagrad", "initial_accumulator_value", {"lr": 0.05,
                                                  "initial_accumulator_value": 1.0}),
    Case("adagrad", "eps", {"lr": 0.05, "eps": 0.1}),
    Case("adagrad", "maximize", {"lr": 0.05, "maximize": True}),
    Case("adagrad", "differentiable", {"lr": 0.05, "weight_decay": 0.5,
                                       "differentiable": True}, impls=_DIFF),
)
"""Every documented option of every optimizer of the family, set to a value that matters
(Note [Option sensitivity])."""


# ------------------------------------------------------------------------- schedulers

def _sched(name: str) -> Callable[..., Any]:
    return lambda *a, **k: getattr(torch.optim.lr_scheduler, name)(*a, **k)


_O = OnOptimizer
_ADAM_TENSOR_LR = ("adam", {"lr": TensorValue(0.01), "fused": True})
PLATEAU_METRIC = (1.0, 0.99, 0.985, 0.9, 0.9, 0.9, 0.6, 0.59, 0.585, 0.58, 0.58, 0.58)
"""The metric ``ReduceLROnPlateau`` is stepped with: improvements, small ones, plateaus."""

SCHEDULER_CASES: tuple[Case, ...] = (
    Case("StepLR", "gamma", {"step_size": 3, "gamma": 0.5}),
    Case("StepLR", "resume", {"step_size": 3, "gamma": 0.5, "last_epoch": 4}),
    Case("MultiStepLR", "gamma", {"milestones": [2, 5, 9], "gamma": 0.3}),
    Case("ExponentialLR", "gamma", {"gamma": 0.8}),
    Case("CosineAnnealingLR", "t_max", {"T_max": 10}),
    Case("CosineAnnealingLR", "eta_min", {"T_max": 8, "eta_min": 0.005}),
    Case("CosineAnnealingLR", "lr_tensor", {"T_max": 10}, optimizer=_ADAM_TENSOR_LR),
    Case("CosineAnnealingWarmRestarts", "t_mult", {"T_0": 3, "T_mult": 2, "eta_min": 0.001}),
    Case("OneCycleLR", "total_steps", {"max_lr": 0.1, "total_steps": 16}),
    Case("OneCycleLR", "three_phase", {
        "max_lr": 0.1, "epochs": 4, "steps_per_epoch": 4, "pct_start": 0.4,
        "anneal_strategy": "linear", "three_phase": True, "div_factor": 10.0,
        "final_div_factor": 2.0}),
    Case("OneCycleLR", "momentum", {"max_lr": 0.1, "total_steps": 16, "base_momentum": 0.5,
                                    "max_momentum": 0.99}),
    Case("OneCycleLR", "no_cycle_momentum", {"max_lr": 0.1, "total_steps": 16,
                                             "cycle_momentum": False}),
    Case("CyclicLR", "triangular2", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 3,
                                     "step_size_down": 2, "mode": "triangular2",
                                     "base_momentum": 0.5, "max_momentum": 0.99}),
    Case("CyclicLR", "exp_range", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 3,
                                   "mode": "exp_range", "gamma": 0.9,
                                   "cycle_momentum": False}),
    Case("CyclicLR", "scale_fn", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 2,
                                  "scale_fn": lambda x: 0.7 ** x, "scale_mode": "iterations"}),
    Case("LinearLR", "factors", {"start_factor": 0.1, "end_factor": 0.5, "total_iters": 6}),
    Case("ConstantLR", "factor", {"factor": 0.2, "total_iters": 4}),
    Case("PolynomialLR", "power", {"total_iters": 8, "power": 2.0}),
    Case("LambdaLR", "warmup", {"lr_lambda": lambda t: min(1.0, (t + 1) / 4) / (1 + 0.1 * t)}),
    Case("MultiplicativeLR", "factor", {"lr_lambda": lambda t: 0.85}),
    Case("SequentialLR", "warmup_cosine", {
        "schedulers": _O(lambda opt: [_sched("LinearLR")(opt, start_factor=0.1, total_iters=3),
                                      _sched("CosineAnnealingLR")(opt, T_max=9)]),
        "milestones": [3]}),
    Case("ChainedScheduler", "constant_exponential", {
        "schedulers": _O(lambda opt: [_sched("ConstantLR")(opt, factor=0.5, total_iters=3),
                                      _sched("ExponentialLR")(opt, gamma=0.9)])}),
    Case("ReduceLROnPlateau", "min_rel", {"factor": 0.5, "patience": 1, "threshold": 0.05,
                                          "cooldown": 1, "min_lr": 0.001}),
    Case("ReduceLROnPlateau", "max_abs", {"mode": "max", "threshold_mode": "abs",
                                          "threshold": 0.02, "patience": 2, "factor": 0.3},
         metric=tuple(-m for m in PLATEAU_METRIC)),
    Case("ReduceLROnPlateau", "eps", {"factor": 0.5, "patience": 0, "min_lr": 0.04,
                                      "eps": 0.02}),
)
"""Every scheduler of ``torch.optim.lr_scheduler`` (Note [Which schedulers])."""

SCHEDULERS: tuple[str, ...] = tuple(dict.fromkeys(c.subject for c in SCHEDULER_CASES))


# --------------------------------------------------------------------------- clipping

CLIPPING: dict[str, str] = {
    "clip_grad_norm_": "nn.utils.clip_grad_norm_",
    "clip_grad_value_": "nn.utils.clip_grad_value_",
    "get_total_norm": "nn.utils.get_total_norm",          # torch >= 2.6
    "clip_grads_with_norm_": "nn.utils.clip_grads_with_norm_",  # torch >= 2.6
}
"""The clipping paths of a training step (``torch.<path>``)."""

_INF = float("inf")
CLIPPING_CASES: tuple[Case, ...] = (
    Case("clip_grad_norm_", "l2", {"max_norm": 1.0}),
    Case("clip_grad_norm_", "l1", {"max_norm": 1.0, "norm_type": 1.0}),
    Case("clip_grad_norm_", "inf", {"max_norm": 0.5, "norm_type": _INF}),
    Case("clip_grad_norm_", "p3", {"max_norm": 1.0, "norm_type": 3.0}),
    Case("clip_grad_norm_", "foreach", {"max_norm": 1.0, "foreach": True}),
    Case("clip_grad_norm_", "forloop", {"max_norm": 1.0, "foreach": False}),
    Case("clip_grad_norm_", "nonfinite", {"max_norm": 1.0}, nonfinite=True),
    Case("clip_grad_norm_", "error_if_nonfinite", {"max_norm": 1.0, "error_if_nonfinite": True},
         nonfinite=True),
    Case("clip_grad_value_", "value", {"clip_value": 0.1}),
    Case("clip_grad_value_", "foreach", {"clip_value": 0.1, "foreach": True}),
    Case("clip_grad_value_", "forloop", {"clip_value": 0.1, "foreach": False}),
    Case("get_total_norm", "inf", {"norm_type": _INF}),
    Case("get_total_norm", "l1_foreach", {"norm_type": 1.0, "foreach": True}),
    Case("get_total_norm", "forloop", {"foreach": False}),
    Case("get_total_norm", "error_if_nonfinite", {"error_if_nonfinite": True}, nonfinite=True),
    Case("clip_grads_with_norm_", "foreach", {"max_norm": 0.5, "foreach": True}),
    Case("clip_grads_with_norm_", "forloop", {"max_norm": 0.5, "foreach": False}),
)
"""Norm types 1, 2, 3, inf; foreach on and off; non-finite gradients with and without
``error_if_nonfinite``."""


# ---------------------------------------------------------------------------- reasons

OPTION_REASONS: dict[str, str] = {
    "last_epoch": "resuming mid-schedule (each group's initial_lr, the step count offset) "
                  "is LRScheduler's one code path for every scheduler: exercised on StepLR "
                  "(the case 'resume')",
    "verbose": "prints the lr on each step (deprecated); no effect on the schedule",
}
"""Reasons that hold for an option whichever subject has it."""

REASONS: dict[str, dict[str, str]] = {
    "ChainedScheduler": {
        "optimizer": "only checked against the schedulers' own optimizer (a mismatch "
                     "raises); no effect on the schedule"},
}
"""Per subject: why a documented option is not exercised."""


# ------------------------------------------------------------------------ the subjects

def subject_api(subject: str) -> Any:
    """The torch object a subject names, or None when this torch lacks it."""
    if subject in OPTIMIZERS:
        return getattr(torch.optim, OPTIMIZERS[subject], None)
    if subject in CLIPPING:
        obj: Any = torch
        for part in CLIPPING[subject].split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                return None
        return obj
    return getattr(torch.optim.lr_scheduler, subject, None)


def subject_name(subject: str) -> str:
    """``torch.optim.SGD``, ``torch.optim.lr_scheduler.StepLR``, ``torch.nn.utils...``."""
    if subject in OPTIMIZERS:
        return f"torch.optim.{OPTIMIZERS[subject]}"
    if subject in CLIPPING:
        return f"torch.{CLIPPING[subject]}"
    return f"torch.optim.lr_scheduler.{subject}"


_NO_DEFAULT = inspect.Parameter.empty


def documented(subject: str) -> dict[str, Any]:
    """Option -> default of a subject on this torch (Note [Documented options]); empty
    when this torch lacks the subject."""
    api = subject_api(subject)
    if api is None:
        return {}
    sig = inspect.signature(api.__init__ if inspect.isclass(api) else api)
    return {name: p.default for name, p in sig.parameters.items()
            if p.default is not _NO_DEFAULT
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def differs(value: Any, default: Any) -> bool:
    """Whether an option value differs from its default (a tensor always does)."""
    if isinstance(value, (TensorValue, OnOptimizer, torch.Tensor)) or callable(value):
        return True
    try:
        return bool(value != default)
    except Exception:  # noqa: BLE001 - incomparable values differ
        return True


def case_options(case: Case, impl: Optional[str] = None) -> dict:
    """The options a case passes (with its implementation's, for optimizers)."""
    return {**case.kwargs, **(IMPLS[impl] if impl else {})}


def impls_for(case: Case) -> tuple[str, ...]:
    """The implementations a case runs with on this torch: ``fused`` only where the
    constructor has the option (a fused variant of RMSprop does not exist to be missed)."""
    if case.subject not in OPTIMIZERS:
        return ()
    options = documented(case.subject)
    return tuple(i for i in case.impls if all(k in options for k in IMPLS[i]))


def exercised(subject: str, cases: Optional[tuple[Case, ...]] = None) -> set[str]:
    """Documented options some case of ``subject`` sets to a non-default value."""
    defaults = documented(subject)
    found: set[str] = set()
    for case in ALL_CASES if cases is None else cases:
        if case.subject != subject:
            continue
        for impl in impls_for(case) or (None,):
            for name, value in case_options(case, impl).items():
                if name in defaults and differs(value, defaults[name]):
                    found.add(name)
    return found


ALL_CASES: tuple[Case, ...] = OPTIMIZER_CASES + SCHEDULER_CASES + CLIPPING_CASES


def outside_family() -> dict[str, list[str]]:
    """Optimizers and schedulers of this torch that the family does not hold."""
    opt_base = torch.optim.Optimizer
    optimizers = sorted(name for name, obj in vars(torch.optim).items()
                        if inspect.isclass(obj) and issubclass(obj, opt_base)
                        and obj is not opt_base and name not in OPTIMIZERS.values())
    lrs = torch.optim.lr_scheduler
    bases = tuple(c for c in (getattr(lrs, "LRScheduler", None),
                              getattr(lrs, "_LRScheduler", None), lrs.ReduceLROnPlateau)
                  if c is not None)
    schedulers = sorted(name for name, obj in vars(lrs).items()
                        if inspect.isclass(obj) and issubclass(obj, bases)
                        and not name.startswith("_") and name != "LRScheduler"
                        and name not in SCHEDULERS)
    return {"optimizers": optimizers, "schedulers": schedulers}


# ----------------------------------------------------------------------------- running

class Refused(Exception):
    """Torch refused the case (constructor or step): the message says why."""


def refusal(exc: BaseException) -> Optional[str]:
    """The reason when ``exc`` is torch refusing an option or path (the one exception
    classifier, :mod:`harness.classify`, says ``unsupported``), else None."""
    from harness.classify import classify_exception

    status, reason = classify_exception(exc)
    return reason if status == "unsupported" else None


def _materialize(value: Any, device: Optional[torch.device], opt: Any = None) -> Any:
    if isinstance(value, TensorValue):
        return (value.value if device is None
                else torch.tensor(value.value, dtype=torch.float32, device=device))
    if isinstance(value, OnOptimizer):
        return value.build(opt)
    return value


def _grads(seed: int, step: int, dtype: torch.dtype, scale: float = 1.0) -> list:
    gen = torch.Generator().manual_seed(seed * 1000 + step + 1)
    return [(torch.randn(s, generator=gen, dtype=torch.float64) * scale).to(dtype)
            for s in SHAPES]


def initial_params(seed: int) -> list:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen, dtype=torch.float64) for s in SHAPES]


@dataclasses.dataclass
class Run:
    """What a case produced: parameters (fp64 on the CPU) and whatever else it measures."""

    params: list
    leaf_grads: Optional[list] = None     # differentiable: d(sum w*p_final)/d(p_0)
    state: Optional[dict] = None          # {key: dtype name}, wrong/nonfinite/misplaced counts
    lrs: Optional[list] = None            # schedulers: lr (and momentum) per step
    momenta: Optional[list] = None
    values: Optional[list] = None         # clipping: norm and clipped gradients
    raised: Optional[str] = None          # clipping: the exception type it raised


def _state(opt, params) -> dict:
    dtypes, wrong, nonfinite, misplaced = {}, 0, 0, 0
    for param in params:
        for key, value in opt.state.get(param, {}).items():
            if not isinstance(value, torch.Tensor):
                continue
            dtypes[key] = str(value.dtype).removeprefix("torch.")
            if key == "step":
                continue
            wrong += value.dtype != param.dtype
            nonfinite += int((~torch.isfinite(value)).sum()) if value.is_floating_point() else 0
            misplaced += value.device != param.device
    return {"dtypes": ",".join(f"{k}:{v}" for k, v in sorted(dtypes.items())),
            "wrong_dtype": wrong, "nonfinite": nonfinite, "misplaced": misplaced}


def _optimizer(name: str, params, options: dict, device, opt_for=None):
    cls = getattr(torch.optim, OPTIMIZERS[name])
    kwargs = {k: _materialize(v, device) for k, v in options.items()}
    return _step(lambda: cls(params, **kwargs), f"{cls.__name__}({describe(options)})")


def describe(options: dict) -> str:
    """``lr=0.05, nesterov=True``: a case's options as a person reads them."""
    return ", ".join(f"{k}={v.value if isinstance(v, TensorValue) else v!r}"
                     for k, v in options.items() if not isinstance(v, OnOptimizer))


def _step(fn: Callable[[], Any], what: str) -> Any:
    """``fn()``; torch refusing it (Note [Missing features of older stacks]) raises
    :class:`Refused`, anything else propagates (an error of the run)."""
    try:
        return fn()
    except (TypeError, ValueError, RuntimeError, AssertionError, NotImplementedError) as exc:
        why = refusal(exc)
        if why is None:
            raise
        raise Refused(f"{what}: {why}") from exc


def run_optimizer(case: Case, impl: Optional[str], *, device: Optional[torch.device],
                  seed: int, options: Optional[dict] = None, steps: int = STEPS) -> Run:
    """``case`` for ``steps`` steps on fixed gradients. ``device=None`` is the fp64
    reference (CPU, for-loop, options as plain numbers); else float32 on ``device`` with
    the implementation ``impl``. The caller owns the DUT scope."""
    options = dict(case_options(case, impl) if options is None else options)
    reference = device is None
    dtype = torch.float64 if reference else torch.float32
    if reference:  # the reference is torch's for-loop path in fp64
        for key in ("foreach", "fused", "capturable"):
            options.pop(key, None)
        options["foreach"] = False
    differentiable = bool(options.get("differentiable"))
    leaves = [p.to(dtype).to(device or "cpu").requires_grad_() for p in initial_params(seed)]
    params = [p.clone() for p in leaves] if differentiable else leaves
    opt = _optimizer(case.subject, params, options, device)
    for step in range(steps):
        for param, grad in zip(params, _grads(seed, step, dtype)):
            param.grad = grad.to(param.device)
        _step(opt.step, f"{case.subject} ({impl or 'reference'}) step")
    run = Run([p.detach().cpu().double() for p in params], state=_state(opt, params))
    if differentiable:
        weights = _grads(seed, 999, dtype)
        total = sum((p * w.to(p.device)).sum() for p, w in zip(params, weights))
        run.leaf_grads = [g.cpu().double() for g in torch.autograd.grad(total, leaves)]
    return run


def _momentum(group: dict) -> Optional[float]:
    if "betas" in group:
        return float(group["betas"][0])
    return float(group["momentum"]) if "momentum" in group else None


def run_scheduler(case: Case, *, device: Optional[torch.device], seed: int,
                  options: Optional[dict] = None, steps: int = SCHEDULE_STEPS) -> Run:
    """``case``'s scheduler driving its optimizer for ``steps`` steps: the lr and momentum
    each step used, and the parameters. ``device=None`` is the fp64 reference."""
    options = dict(case.kwargs if options is None else options)
    reference = device is None
    dtype = torch.float64 if reference else torch.float32
    opt_name, opt_options = case.optimizer
    opt_options = dict(opt_options)
    if reference:
        opt_options.pop("fused", None)
        opt_options["foreach"] = False
    params = [p.to(dtype).to(device or "cpu").requires_grad_() for p in initial_params(seed)]
    opt = _optimizer(opt_name, params, opt_options, device)
    if "last_epoch" in options:  # resuming: torch reads each group's initial_lr
        for group in opt.param_groups:
            group.setdefault("initial_lr", float(group["lr"]))
    cls = subject_api(case.subject)
    if cls is None:
        raise Refused(f"torch {torch.__version__} has no {subject_name(case.subject)}")
    kwargs = {k: _materialize(v, device, opt) for k, v in options.items()}
    if documented(case.subject).get("optimizer", _NO_DEFAULT) is _NO_DEFAULT:
        kwargs["optimizer"] = opt
    sched = _step(lambda: cls(**kwargs), f"{case.subject}({describe(options)})")
    lrs, momenta = [], []
    for step in range(steps):
        group = opt.param_groups[0]
        lrs.append(float(group["lr"]))
        momenta.append(_momentum(group))
        for param, grad in zip(params, _grads(seed, step, dtype)):
            param.grad = grad.to(param.device)
        _step(opt.step, f"{opt_name} step under {case.subject}")
        if case.subject == "ReduceLROnPlateau":
            metric = case.metric or PLATEAU_METRIC
            sched.step(metric[step % len(metric)])
        else:
            sched.step()
    lrs.append(float(opt.param_groups[0]["lr"]))  # where the schedule ends
    momenta.append(_momentum(opt.param_groups[0]))
    return Run([p.detach().cpu().double() for p in params], lrs=lrs, momenta=momenta)


def run_clipping(case: Case, *, device: Optional[torch.device], seed: int,
                 options: Optional[dict] = None) -> Run:
    """``case``'s clipping function on fixed gradients (scaled so clipping is active):
    the norm it returns (if any) and the gradients after it, or the exception it raised.
    ``device=None`` is the fp64 reference."""
    options = dict(case.kwargs if options is None else options)
    dtype = torch.float64 if device is None else torch.float32
    fn = subject_api(case.subject)
    if fn is None:
        raise Refused(f"torch {torch.__version__} has no {subject_name(case.subject)}")
    grads = _grads(seed, 0, dtype, scale=3.0)
    if case.nonfinite:
        grads[1][2] = float("inf")
    params = [torch.nn.Parameter(torch.zeros(g.shape, dtype=dtype, device=device or "cpu"))
              for g in grads]
    for param, grad in zip(params, grads):
        param.grad = grad.to(param.device)
    try:
        if case.subject in ("clip_grad_norm_", "clip_grad_value_"):
            out = fn(params, **options)
        elif case.subject == "get_total_norm":
            out = fn([p.grad for p in params], **options)
        else:  # clip_grads_with_norm_: the norm it is given comes from get_total_norm
            total = subject_api("get_total_norm")([p.grad for p in params])
            fn(params, total_norm=total, **options)
            out = total
    except (RuntimeError, TypeError, ValueError, NotImplementedError) as exc:
        if refusal(exc):
            raise Refused(f"{case.subject}({describe(options)}): {refusal(exc)}") from exc
        if not isinstance(exc, RuntimeError):
            raise
        return Run([], raised=type(exc).__name__)  # error_if_nonfinite's RuntimeError
    values = [out.detach().cpu().double().reshape(1)] if isinstance(out, torch.Tensor) else []
    if case.subject != "get_total_norm":
        values += [p.grad.detach().cpu().double() for p in params]
    return Run([], values=values)


def run(case: Case, impl: Optional[str], *, device: Optional[torch.device], seed: int,
        options: Optional[dict] = None) -> Run:
    """Run any case (optimizer, scheduler or clipping)."""
    if case.subject in OPTIMIZERS:
        return run_optimizer(case, impl, device=device, seed=seed, options=options)
    if case.subject in CLIPPING:
        return run_clipping(case, device=device, seed=seed, options=options)
    return run_scheduler(case, device=device, seed=seed, options=options)


def reference(case: Case, impl: Optional[str], *, seed: int,
              options: Optional[dict] = None) -> Run:
    """The fp64 reference run of a case (call it outside the DUT scope). The reference is
    this torch's own for-loop implementation on the CPU, so whatever stops it is a limit
    of this torch (an option it lacks; torch 2.4's differentiable Adam, whose in-place
    state updates autograd refuses across steps), raised as :class:`Refused`."""
    try:
        return run(case, impl, device=None, seed=seed, options=options)
    except Refused:
        raise
    except (TypeError, ValueError, RuntimeError, AssertionError, NotImplementedError) as exc:
        text = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise Refused(f"the fp64 reference (torch {torch.__version__}'s for-loop "
                      f"{subject_name(case.subject)} on the CPU) cannot run the case "
                      f"{case.label!r}: {text}") from exc


# ------------------------------------------------------------------------ closed forms

def _warm_restarts(t: int, base: float, kw: dict) -> float:
    t_i, t_cur = kw["T_0"], t
    while t_cur >= t_i:
        t_cur, t_i = t_cur - t_i, t_i * kw.get("T_mult", 1)
    eta_min = kw.get("eta_min", 0.0)
    return eta_min + (base - eta_min) * (1 + math.cos(math.pi * t_cur / t_i)) / 2


def _cosine(t: int, base: float, kw: dict) -> float:
    eta_min = kw.get("eta_min", 0.0)
    return eta_min + (base - eta_min) * (1 + math.cos(math.pi * t / kw["T_max"])) / 2


def _linear(t: int, base: float, kw: dict) -> float:
    start, end, total = (kw.get("start_factor", 1 / 3), kw.get("end_factor", 1.0),
                         kw.get("total_iters", 5))
    return base * (start + (end - start) * min(t, total) / total)


CLOSED_FORMS: dict[str, Callable[[int, float, dict], float]] = {
    "StepLR": lambda t, base, kw: base * kw.get("gamma", 0.1) ** (t // kw["step_size"]),
    "MultiStepLR": lambda t, base, kw: base * kw.get("gamma", 0.1) ** sum(
        m <= t for m in kw["milestones"]),
    "ExponentialLR": lambda t, base, kw: base * kw["gamma"] ** t,
    "CosineAnnealingLR": _cosine,
    "CosineAnnealingWarmRestarts": _warm_restarts,
    "LinearLR": _linear,
    "ConstantLR": lambda t, base, kw: base * (kw.get("factor", 1 / 3)
                                              if t < kw.get("total_iters", 5) else 1.0),
    "PolynomialLR": lambda t, base, kw: base * (
        1 - min(t, kw.get("total_iters", 5)) / kw.get("total_iters", 5)) ** kw.get("power", 1.0),
    "LambdaLR": lambda t, base, kw: base * kw["lr_lambda"](t),
    "MultiplicativeLR": lambda t, base, kw: base * math.prod(
        kw["lr_lambda"](k) for k in range(1, t + 1)),
}
"""The lr at step ``t`` as torch's documentation writes it, for the schedulers that have
a closed form (Note [Closed forms])."""

# Note [Closed forms]
# ~~~~~~~~~~~~~~~~~~~
# The scheduler check's reference is the same torch scheduler driving the fp64 optimizer
# outside the DUT scope: it sees a defect of the DUT (a patched scheduler, a kernel that
# keeps its first lr), not one of torch itself, which both sides share. Where the
# documentation gives the schedule in closed form, the DUT's schedule is also compared
# with that formula (:data:`CLOSED_FORMS`), so a torch upgrade that changes a documented
# schedule is caught as well. Resumed schedules (``last_epoch``) are left out: torch
# computes them from the groups' current lr, which the closed form does not know.


def closed_form(case: Case, steps: int = SCHEDULE_STEPS) -> Optional[list]:
    """The documented lr sequence of a case (lr used at steps 0..steps), or None."""
    form = CLOSED_FORMS.get(case.subject)
    if form is None or "last_epoch" in case.kwargs:
        return None
    base = case.optimizer[1]["lr"]
    base = base.value if isinstance(base, TensorValue) else base
    return [form(t, base, case.kwargs) for t in range(steps + 1)]


# ---------------------------------------------------------------------------- judging

def _rel(a: list, b: list) -> float:
    """max |a - b| / max |b| over finite values; inf when NaN/Inf positions differ."""
    worst, scale = 0.0, 0.0
    for x, y in zip(a, b):
        if not torch.equal(torch.isfinite(x), torch.isfinite(y)) or not torch.equal(
                torch.isnan(x), torch.isnan(y)):
            return math.inf
        finite = torch.isfinite(y)
        if not finite.any():
            continue
        if not torch.equal(x[~finite & ~torch.isnan(y)], y[~finite & ~torch.isnan(y)]):
            return math.inf  # +inf where -inf
        worst = max(worst, float((x[finite] - y[finite]).abs().max()))
        scale = max(scale, float(y[finite].abs().max()))
    return worst / max(scale, 1e-30)


def update_error(dut: Run, ref: Run, seed: int) -> float:
    """|p_dut - p_ref| / max |p_ref - p_0| (:data:`PARAM_LIMIT`)."""
    start = initial_params(seed)
    change = max(float((r - s).abs().max()) for r, s in zip(ref.params, start))
    err = max(float((d - r).abs().max()) for d, r in zip(dut.params, ref.params))
    return err / max(change, 1e-30)


def seq_error(a: list, b: list) -> float:
    """max |a_t - b_t| / max |b_t|: relative to the sequence's scale, so a cosine
    schedule's lr of ~0 at its end compares by its absolute difference."""
    if len(a) != len(b) or any((x is None) != (y is None) for x, y in zip(a, b)):
        return math.inf
    pairs = [(x, y) for x, y in zip(a, b) if y is not None]
    if not pairs:
        return 0.0
    scale = max(abs(y) for _, y in pairs)
    return max(abs(x - y) for x, y in pairs) / max(scale, 1e-30)


def schedule_error(a: Run, b: Run) -> float:
    """Largest relative difference of the lr and momentum sequences of two runs."""
    return max(seq_error(a.lrs, b.lrs), seq_error(a.momenta, b.momenta))


def distance(a: Run, b: Run, seed: int) -> float:
    """How far run ``a`` is from run ``b`` in the case's own measure (relative)."""
    if a.raised or b.raised:
        return 0.0 if a.raised == b.raised else math.inf
    if a.values is not None:
        return _rel(a.values, b.values)
    out = update_error(a, b, seed)
    if a.lrs is not None:
        out = max(out, schedule_error(a, b))
    if a.leaf_grads is not None and b.leaf_grads is not None:
        out = max(out, _rel(a.leaf_grads, b.leaf_grads))
    return out


def sensitivity(case: Case, seed: int = 0) -> dict[str, float]:
    """Per exercised option that changes the math: how far the fp64 reference moves when
    that one option goes back to its default (Note [Option sensitivity]); ``inf`` when
    torch refuses the default in this combination."""
    defaults = documented(case.subject)
    impl = (impls_for(case) or (None,))[0]
    options = case_options(case, impl)
    try:
        base = reference(case, impl, seed=seed)
    except Refused:  # this torch lacks the case (recorded unsupported by the check)
        return {}
    out = {}
    for name, value in options.items():
        if name in PATHS or name not in defaults or not differs(value, defaults[name]):
            continue
        changed = {k: v for k, v in options.items() if k != name}
        if defaults[name] is not None:
            changed[name] = defaults[name]
        try:
            other = run(case, impl, device=None, seed=seed, options=changed)
        except (Refused, ValueError, TypeError, RuntimeError):
            out[name] = math.inf
            continue
        out[name] = distance(other, base, seed)
    return out


def option_sensitivity(subject: str, seed: int = 0) -> dict[str, float]:
    """Per exercised option of ``subject`` that changes the math, the largest
    :func:`sensitivity` over the cases that set it: an option ignored by a backend is
    caught when some case moves by more than :data:`SENSITIVITY`."""
    out: dict[str, float] = {}
    for case in ALL_CASES:
        if case.subject == subject:
            for name, moved in sensitivity(case, seed).items():
                out[name] = max(out.get(name, 0.0), moved)
    return out


# ---------------------------------------------------------------------------- coverage

@dataclasses.dataclass
class Coverage:
    """One subject's options: exercised, explained, missing."""

    subject: str
    api: str
    kind: str                 # optimizer / scheduler / clipping
    cases: list[str]
    options: dict[str, Any]
    exercised: set[str]
    reasons: dict[str, str]
    available: bool = True    # False: this torch lacks the subject

    @property
    def missing(self) -> list[str]:
        return sorted(k for k in self.options if k not in self.exercised
                      and k not in self.reasons)


def _kind(subject: str) -> str:
    return ("optimizer" if subject in OPTIMIZERS else
            "clipping" if subject in CLIPPING else "scheduler")


def coverage(cases: Optional[tuple[Case, ...]] = None) -> list[Coverage]:
    """Per subject of the family, its option coverage on this torch."""
    cases = ALL_CASES if cases is None else cases
    subjects = list(dict.fromkeys(c.subject for c in cases))
    rows = []
    for subject in subjects:
        options = documented(subject)
        done = exercised(subject, cases)
        reasons = {}
        for name in options:
            why = REASONS.get(subject, {}).get(name) or OPTION_REASONS.get(name)
            if name not in done and why:
                reasons[name] = why
        rows.append(Coverage(subject, subject_name(subject), _kind(subject),
                             [c.label for c in cases if c.subject == subject], options,
                             done, reasons, subject_api(subject) is not None))
    return rows


def table(rows: list[Coverage]) -> str:
    """The coverage table a person reads, with totals."""
    width = max([len(r.api) for r in rows] + [10])
    lines = [f"{'subject':<{width}}  {'opt':>3} {'run':>4} {'why':>4} {'MISS':>4}  "
             "missing / cases"]
    for r in rows:
        miss = r.missing
        note = (f"not in torch {torch.__version__}" if not r.available
                else ", ".join(miss) if miss else "-")
        lines.append(f"{r.api:<{width}}  {len(r.options):>3} {len(r.exercised):>4} "
                     f"{len(r.reasons):>4} {len(miss):>4}  {note}  [{len(r.cases)} cases]")
    by_kind = {k: [r for r in rows if r.kind == k and r.available]
               for k in ("optimizer", "scheduler", "clipping")}
    opts = sum(len(r.options) for r in rows)
    run_ = sum(len(r.exercised) for r in rows)
    why = sum(len(r.reasons) for r in rows)
    miss = sum(len(r.missing) for r in rows)
    outside = outside_family()
    lines.append(
        f"total: {len(by_kind['optimizer'])} optimizers, {len(by_kind['scheduler'])} "
        f"schedulers, {len(by_kind['clipping'])} clipping functions "
        f"({sum(len(r.cases) for r in rows)} cases), {opts} documented options: {run_} "
        f"exercised with a non-default value, {why} with a reason, {miss} missing; "
        f"outside the family: {', '.join(outside['optimizers']) or '-'} (optimizers), "
        f"{', '.join(outside['schedulers']) or '-'} (schedulers)")
    return "\n".join(lines)


__all__ = ["ALL_CASES", "CLIPPING", "CLIPPING_CASES", "CLOSED_FORMS", "Case", "closed_form", "Coverage", "IMPLS",
           "OPTIMIZERS", "OPTIMIZER_CASES", "OPTION_REASONS", "OnOptimizer", "PATHS",
           "REASONS", "Refused", "Run", "SCHEDULERS", "SCHEDULER_CASES", "SENSITIVITY",
           "TensorValue", "coverage", "describe", "distance", "documented", "exercised", "impls_for", "option_sensitivity",
           "outside_family", "reference", "refusal", "run", "schedule_error", "seq_error", "update_error", "sensitivity", "table"]

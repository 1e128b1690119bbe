"""Breadth from PyTorch's OpInfo database: every ``op_db`` entry, per dtype, on the DUT.

The curated catalog (:mod:`harness.ops`) checks the ops training uses in depth; this
sweep checks *breadth*: each entry of ``op_db`` from
``torch.testing._internal.common_methods_invocations`` for the installed torch, a few of
its own sample inputs per dtype (float32, float16, bfloat16 where the CPU reference
supports them), forward and, where the op has autograd, backward. Every case becomes a
record, so the results double as the DUT's capability matrix:

* ``pass`` / ``fail``: judged by :func:`harness.ops.policy.judge` against the CPU up-cast
  reference and the CPU low-precision reference (docs/standards.md), under the op's standard from
  the one standards table (:func:`harness.ops.policy.standard_for`, shared with the
  catalog);
* ``unsupported``: the DUT raised "no kernel for this op/dtype"
  (:func:`harness.ops.policy.classify_exception`, shared with the catalog);
* ``fallback``: the numbers are right but the DUT ran the op on the host CPU
  (:mod:`harness.fallback`);
* ``error``: the DUT crashed in another way; ``skip``: out of budget, the reference
  itself cannot run the sample, or the op is random (:data:`SKIP_OPS`).

``pass -> unsupported`` and ``pass -> fallback`` are regressions for
:mod:`harness.regress`, so an upgrade that drops a kernel is reported.

Note [OpInfo record ids]
~~~~~~~~~~~~~~~~~~~~~~~~
``opinfo/<op>[:<variant>]/<dtype>/<fwd|bwd>/<digest>``, e.g.
``opinfo/nn.functional.pad:reflect/float16/bwd/3f9a01c2``. ``<variant>`` is the OpInfo's
``variant_test_name``. ``<digest>`` is 8 hex digits of a SHA-1 over the sample's
*structure*: tensor shapes, non-default strides, non-float dtypes, and the non-tensor
arguments (the tested dtype is written as ``D``, so one sample has one digest in every
dtype). Tensor *values* are not part of it. Samples with the same structure get ``~2``,
``~3``... in generation order. Samples are generated under a seed derived from the case
id (``zlib.crc32``), so they do not depend on test order or ``--seed``.

Note [OpInfo reference]
~~~~~~~~~~~~~~~~~~~~~~~
The reference runs the op on the CPU with every floating input of the tested dtype
up-cast (fp16/bf16 -> fp32, fp32 -> fp64). Where the op does not support the up-cast
dtype on the CPU the reference is fp32 for fp16/bf16; where the up-cast run raises (some
ops reject mixed dtypes) the DUT is judged against the CPU in the tested dtype, as every
pipeline does (Note [One executor] in :mod:`harness.ops.runner`); the record's
``info.reference`` says which was used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import random
import re
import time
import warnings
import zlib
from typing import Any, Callable, Iterable, Optional

import torch

from harness import dtypes, ids
from harness.ops import policy
from harness.ops.outcome import OpOutcome
from harness.ops.runner import Side, execute
from harness.results import lower

DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
SAMPLES_PER_CASE = 2
"""Samples per (op, dtype): the first ones the OpInfo generator yields."""
MAX_SAMPLE_NUMEL = 1 << 20
"""Samples with more input elements than this are passed over (they cost, not cover)."""
MAX_OUTPUTS = 4
"""Output (and gradient) tensors compared per sample; metrics are per tensor."""

# Ops whose output is random or undefined, so a DUT and a reference cannot agree by design.
# Data, with reasons; a case here is recorded as ``skip``.
SKIP_OPS: dict[str, str] = {
    "bernoulli": "random: samples a Bernoulli distribution",
    "cauchy": "random: samples a Cauchy distribution",
    "exponential": "random: samples an exponential distribution",
    "geometric": "random: samples a geometric distribution",
    "log_normal": "random: samples a log-normal distribution",
    "multinomial": "random: samples a multinomial distribution",
    "normal": "random: samples a normal distribution",
    "normal:in_place": "random: samples a normal distribution",
    "normal:number_mean": "random: samples a normal distribution",
    "uniform": "random: samples a uniform distribution",
    "rand_like": "random: uniform random tensor",
    "randn_like": "random: normal random tensor",
    "randint_like": "random: integer random tensor",
    "randint": "random: integer random tensor",
    "randn": "random: normal random tensor",
    "nn.functional.dropout": "random: dropout mask",
    "nn.functional.dropout2d": "random: dropout mask",
    "nn.functional.dropout3d": "random: dropout mask",
    "nn.functional.alpha_dropout": "random: dropout mask",
    "nn.functional.feature_alpha_dropout:with_train": "random: dropout mask",
    "nn.functional.rrelu": "random: slopes sampled in training mode",
    "nn.functional.fractional_max_pool2d": "random: pooling regions sampled",
    "nn.functional.fractional_max_pool3d": "random: pooling regions sampled",
    "empty": "undefined output: uninitialised memory",
    "empty_like": "undefined output: uninitialised memory",
    "empty_strided": "undefined output: uninitialised memory",
    "empty_permuted": "undefined output: uninitialised memory",
    "new_empty": "undefined output: uninitialised memory",
    "new_empty_strided": "undefined output: uninitialised memory",
    "torch.ops.aten._flash_attention_forward": "nondeterministic output (OpInfo says so)",
    "torch.ops.aten._efficient_attention_forward": "nondeterministic output (OpInfo says so)",
}

# The default (non-slow) slice: these ops in float32 run in the ordinary CI selection, so
# the sweep itself is exercised on every run; the full sweep (marked slow) takes the rest.
SLICE_OPS: tuple[str, ...] = (
    "add", "sub", "mul", "div:no_rounding_mode", "exp", "log", "sqrt", "rsqrt", "sin",
    "tanh", "sigmoid", "pow", "clamp", "where", "masked_fill", "sum", "mean", "amax",
    "cumsum", "prod", "var", "sort", "topk", "argmax", "mm", "bmm", "addmm", "matmul",
    "softmax", "log_softmax", "nn.functional.relu", "nn.functional.gelu",
    "nn.functional.silu", "nn.functional.linear", "nn.functional.conv2d",
    "nn.functional.layer_norm", "nn.functional.cross_entropy", "nn.functional.mse_loss",
    "nn.functional.embedding", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "gather", "index_select", "scatter_add", "cat", "stack", "permute", "flip",
)
SLICE_DTYPE = "float32"

# ------------------------------------------------------------------------ op_db access

_OP_DB: Optional[list] = None
_OP_DB_REASON = ""


def load_op_db() -> tuple[Optional[list], str]:
    """``(op_db, "")``, or ``(None, reason)`` when the OpInfo database cannot be imported.

    The import is slow (~5 s) and touches global state (warning filters, an environment
    variable), which is restored afterwards; its result is cached.
    """
    global _OP_DB, _OP_DB_REASON
    if _OP_DB is not None or _OP_DB_REASON:
        return _OP_DB, _OP_DB_REASON
    env = dict(os.environ)
    try:
        with warnings.catch_warnings():
            from torch.testing._internal.common_methods_invocations import op_db
        _OP_DB = list(op_db)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        hint = " (pip install expecttest)" if "expecttest" in str(exc) else ""
        _OP_DB_REASON = (f"PyTorch's OpInfo database (torch.testing._internal."
                         f"common_methods_invocations) cannot be imported with torch "
                         f"{torch.__version__}: {missing}{hint}")
    except Exception as exc:  # noqa: BLE001 - a broken test-only module is a skip reason
        _OP_DB_REASON = (f"PyTorch's OpInfo database failed to import with torch "
                         f"{torch.__version__}: {type(exc).__name__}: {exc}")
    finally:
        for key in set(os.environ) - set(env):
            del os.environ[key]
    return _OP_DB, _OP_DB_REASON


def op_key(op) -> str:
    """``name`` or ``name:variant_test_name`` (Note [OpInfo record ids])."""
    return f"{op.name}:{op.variant_test_name}" if op.variant_test_name else op.name


@dataclasses.dataclass(frozen=True)
class OpInfoCase:
    """One (op, dtype) of the sweep; its samples each give a fwd and a bwd record."""

    key: str      # op_key of the OpInfo
    dtype: str    # "float32" | "float16" | "bfloat16"

    @property
    def id(self) -> str:
        return ids.opinfo_case(self.key, self.dtype)

    @property
    def param_id(self) -> str:
        """The pytest parameter id: ``nn.functional.pad:reflect-float16``."""
        return f"{self.key}-{self.dtype}"

    @property
    def skip_reason(self) -> Optional[str]:
        return SKIP_OPS.get(self.key)

    @property
    def in_slice(self) -> bool:
        return self.key in SLICE_OPS and self.dtype == SLICE_DTYPE


def torch_dtype(name: str) -> torch.dtype:
    return dtypes.BY_NAME[name]


def dtype_name(dtype: torch.dtype) -> str:
    return dtypes.name(dtype)


def cases(op_db: Iterable, dtypes: Iterable[str] = DTYPES) -> list[OpInfoCase]:
    """Every (op, dtype) the sweep covers: the dtypes the op supports on the CPU.

    The CPU must support the dtype because the low-precision reference runs there.
    Entries with the same key (none in current torch) are kept once.
    """
    out: dict[tuple[str, str], OpInfoCase] = {}
    for op in op_db:
        try:
            supported = op.supported_dtypes("cpu")
        except Exception:  # noqa: BLE001 - a malformed OpInfo is not a case
            continue
        for name in dtypes:
            if torch_dtype(name) in supported:
                out.setdefault((op_key(op), name), OpInfoCase(op_key(op), name))
    return list(out.values())


def select(all_cases: Iterable[OpInfoCase], op_filter: Optional[str]) -> list[OpInfoCase]:
    """The cases whose id (``opinfo/<op>/<dtype>``) matches ``op_filter`` (re.search)."""
    if not op_filter:
        return list(all_cases)
    pattern = re.compile(op_filter)
    return [c for c in all_cases if pattern.search(c.id)]


def find_op(op_db: Iterable, key: str):
    """The OpInfo with this key."""
    for op in op_db:
        if op_key(op) == key:
            return op
    raise KeyError(f"no OpInfo {key!r} in op_db of torch {torch.__version__}")


# --------------------------------------------------------------------- sample identity

def _walk(value: Any, dtype: torch.dtype) -> str:
    """A canonical text of a sample argument's structure (Note [OpInfo record ids])."""
    if isinstance(value, torch.Tensor):
        parts = [f"T{tuple(value.shape)}"]
        if value.dtype != dtype:
            parts.append(dtype_name(value.dtype))
        if value.layout != torch.strided:
            parts.append(str(value.layout).replace("torch.", ""))
        elif value.numel() > 1 and not value.is_contiguous():
            parts.append(f"s{tuple(value.stride())}")
        if value.requires_grad:
            parts.append("g")
        return ":".join(parts)
    if isinstance(value, torch.dtype):
        return "D" if value == dtype else dtype_name(value)
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return repr(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, complex):
        return f"({value.real:.6g}{value.imag:+.6g}j)"
    if isinstance(value, (list, tuple)):
        inner = ",".join(_walk(v, dtype) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}={_walk(value[k], dtype)}" for k in sorted(value)) + "}"
    if isinstance(value, slice):
        return f"slice({value.start},{value.stop},{value.step})"
    if isinstance(value, (torch.device, torch.memory_format, torch.layout, torch.Size)):
        return str(value)
    if callable(value):
        return getattr(value, "__name__", type(value).__name__)
    return type(value).__name__  # never a repr with an address in it


def sample_signature(sample, dtype: torch.dtype) -> str:
    """The structure of one OpInfo ``SampleInput``: input, args and kwargs."""
    return (f"{_walk(sample.input, dtype)}|{_walk(tuple(sample.args), dtype)}|"
            f"{_walk(dict(sample.kwargs), dtype)}")


def sample_digest(sample, dtype: torch.dtype) -> str:
    """8 hex digits of SHA-1 over :func:`sample_signature` (stable across runs)."""
    return hashlib.sha1(sample_signature(sample, dtype).encode("utf-8")).hexdigest()[:8]


def unique_digests(signatures: Iterable[str]) -> list[str]:
    """Digests for a sequence of signatures; repeats get ``~2``, ``~3`` in order."""
    seen: dict[str, int] = {}
    out = []
    for sig in signatures:
        digest = hashlib.sha1(sig.encode("utf-8")).hexdigest()[:8]
        seen[digest] = seen.get(digest, 0) + 1
        out.append(digest if seen[digest] == 1 else f"{digest}~{seen[digest]}")
    return out


def case_seed(case_id: str) -> int:
    return zlib.crc32(case_id.encode("utf-8"))


def samples(op, case: OpInfoCase, *, limit: int = SAMPLES_PER_CASE, requires_grad: bool = False):
    """The first ``limit`` samples of ``op`` in the case's dtype, on the CPU, seeded."""
    seed = case_seed(case.id)
    torch.manual_seed(seed)
    random.seed(seed)
    dtype = torch_dtype(case.dtype)
    out = []
    for sample in op.sample_inputs("cpu", dtype, requires_grad=requires_grad):
        if _numel(sample) > MAX_SAMPLE_NUMEL:
            continue
        out.append(sample)
        if len(out) >= limit:
            break
    return out


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for k in sorted(value) for t in _tensors(value[k])]
    return []


def _numel(sample) -> int:
    return sum(t.numel() for t in _tensors([sample.input, list(sample.args),
                                            dict(sample.kwargs)]))


# -------------------------------------------------------------------------- budget

class Budget:
    """A run-time budget for the sweep: started by the first case, shared by all."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self.started: Optional[float] = None

    def start(self) -> None:
        if self.started is None:
            self.started = self.clock()

    @property
    def elapsed(self) -> float:
        return 0.0 if self.started is None else self.clock() - self.started

    def exhausted(self) -> bool:
        return self.started is not None and self.elapsed > self.seconds


# ------------------------------------------------------------------------- running

def _convert(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list):
        return [_convert(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(_convert(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _convert(v, fn) for k, v in value.items()}
    return value


def _copier(device: torch.device, from_dtype: torch.dtype, to_dtype: torch.dtype,
            grads: bool, leaves: list, magnitude: bool = False):
    """A tensor copier: tested-dtype floats cast to ``to_dtype`` (their absolute values with
    ``magnitude``: Note [Condition of products and reductions]); grad leaves collected."""

    def copy(t: torch.Tensor) -> torch.Tensor:
        dtype = to_dtype if t.dtype == from_dtype else t.dtype
        with torch.no_grad():
            if t.layout == torch.strided:
                out = t.detach().to(device=device, dtype=dtype, copy=True)
            else:
                out = t.detach().to(device=device, dtype=dtype)
            if magnitude and out.is_floating_point() and out.layout == torch.strided:
                out = out.abs()
        if grads and t.requires_grad and out.is_floating_point():
            out.requires_grad_(True)
            leaves.append(out)
        return out

    return copy


def _flatten(value: Any) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    if isinstance(value, dict):
        return [x for k in sorted(value) for x in _flatten(value[k])]
    return [value]


def _diff_outputs(sample, out) -> list[torch.Tensor]:
    processed = sample.output_process_fn_grad(out) if sample.output_process_fn_grad else out
    return [t for t in _flatten(processed) if isinstance(t, torch.Tensor)
            and t.requires_grad and (t.is_floating_point() or t.is_complex())]


def _cotangents(like: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
    """Fixed cotangents (fp64 on the CPU) for the differentiable outputs."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in like:
        dtype = torch.complex128 if t.is_complex() else torch.float64
        out.append(torch.randn(t.shape, generator=gen, dtype=dtype))
    return out


def _run(op, sample, *, device: torch.device, from_dtype: torch.dtype, to_dtype: torch.dtype,
         backward: bool, cotangent_seed: int,
         scope: Callable[[], Any] = contextlib.nullcontext,
         seen: Optional[policy.Watch] = None, magnitude: bool = False) -> Side:
    """Run the op (and its backward) on converted copies of the sample inside ``scope``;
    ``seen`` (the DUT's :class:`~harness.ops.policy.Watch`) notes the op call as ``fwd`` and
    the backward call as ``bwd``, not the harness's copies and cotangents."""
    leaves: list[torch.Tensor] = []
    copy = _copier(device, from_dtype, to_dtype, backward, leaves, magnitude)
    run = Side()
    try:
        inp = _convert(sample.input, copy)
        args = _convert(tuple(sample.args), copy)
        kwargs = _convert(dict(sample.kwargs), copy)
    except Exception as exc:  # noqa: BLE001 - the device cannot hold the inputs
        run.error = exc
        return run
    with scope():
        try:
            with torch.set_grad_enabled(backward), _noting(seen, "fwd"):
                run.outs = op(inp, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - classified by the caller
            run.error = exc
            return run
        if backward and leaves:
            try:
                outs = _diff_outputs(sample, run.outs)
                if outs:
                    cots = [(c.abs() if magnitude else c).to(device=o.device, dtype=o.dtype)
                            for c, o in zip(_cotangents(outs, cotangent_seed), outs)]
                    with _noting(seen, "bwd"):
                        run.grads = list(torch.autograd.grad(outs, leaves, cots,
                                                             allow_unused=True))
            except Exception as exc:  # noqa: BLE001 - classified by the caller
                run.grad_error = exc
    return run


@contextlib.contextmanager
def _noting(seen: Optional[policy.Watch], phase: str):
    """Note the block's aten ops under ``phase`` in ``seen`` (Note [Aten ops of a record])."""
    if seen is None:
        yield
        return
    seen.phase = phase
    try:
        yield
    finally:
        seen.phase = None


def classify_error(exc: BaseException) -> str:
    """``unsupported`` or ``error``: :func:`harness.ops.policy.classify_exception`."""
    return policy.classify_exception(exc)[0]


def _short(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def _comparable(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        t = t.detach()
        if t.layout != torch.strided:
            t = t.to_dense()
        t = t.cpu()
        if t.is_complex():
            t = torch.view_as_real(t.resolve_conj())
        return t
    return t


def compare_values(dut: list, ref: list, lowp: list, standard: str, prefix: str = "out",
                   scales: Optional[list] = None):
    """Compare flattened outputs; returns (ok, metrics, rules, messages, notes).

    Metrics of the i-th tensor are named ``<prefix><i>.<metric>`` when there are several
    (``out`` for outputs, ``grad`` for input gradients: the catalog's names), plain
    ``<metric>`` for a single one. Each tensor is judged by
    :func:`harness.ops.policy.judge`, so its metrics are the catalog's for the same input.
    """
    metrics: dict = {}
    rules: dict = {}
    messages: list[str] = []
    notes: list[str] = []
    if not (len(dut) == len(ref) == len(lowp)):
        return False, {"outputs_mismatch": 1.0}, {"outputs_mismatch": lower(1.0, 0.0)}, [
            f"the DUT returned {len(dut)} values, the reference {len(ref)}"], notes
    tensor_index = 0
    ok = True
    for i, (d, r, lp) in enumerate(zip(dut, ref, lowp)):
        d, r, lp = _comparable(d), _comparable(r), _comparable(lp)
        if not isinstance(d, torch.Tensor) or not isinstance(lp, torch.Tensor):
            if isinstance(d, torch.Tensor) != isinstance(lp, torch.Tensor) or (
                    not isinstance(d, torch.Tensor) and _plain(d) != _plain(lp)):
                ok = False
                messages.append(f"output {i}: DUT {_plain(d)!r} != reference {_plain(lp)!r}")
            continue
        if tensor_index >= MAX_OUTPUTS:
            continue
        name_prefix = f"{prefix}{tensor_index}." if len(dut) > 1 else ""
        tensor_index += 1
        if not isinstance(r, torch.Tensor) or r.shape != lp.shape:
            r = lp  # the up-cast run returned something else: judge against the CPU
            notes.append(f"output {i}: the up-cast run gave no comparable value; judged "
                         "against the CPU in the tested dtype")
        if d.dtype != lp.dtype:
            ok = False
            messages.append(f"output {i}: DUT dtype {dtype_name(d.dtype)} != reference dtype "
                            f"{dtype_name(lp.dtype)}")
            continue
        scale = _comparable(scales[i]) if scales is not None and i < len(scales) else None
        verdict, std = policy.judge(d, r, lp, standard,
                                    scale if isinstance(scale, torch.Tensor) else None)
        for name, value in verdict.metrics.items():
            metrics[name_prefix + name] = value
        for name, rule in verdict.rules.items():
            if name_prefix + name in metrics:
                rules[name_prefix + name] = rule
        if not verdict.passed:
            ok = False
            messages.append(f"output {i} ({std}): {verdict.message}")
    return ok, metrics, rules, messages, notes


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Size):
        return tuple(value)
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, (int, float, bool, str, tuple, type(None))):
        return value
    return type(value).__name__


def _upcast(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float32 else torch.float32


def run_case(op, case: OpInfoCase, device, *, limit: int = SAMPLES_PER_CASE,
             budget: Optional[Budget] = None) -> list[OpOutcome]:
    """Every record of one case: per sample a ``fwd`` and (with autograd) a ``bwd``."""
    if case.skip_reason:
        return [OpOutcome(f"{case.id}/fwd", status="skip", message=case.skip_reason)]
    if budget is not None:
        budget.start()
        if budget.exhausted():
            return [OpOutcome(f"{case.id}/fwd", status="skip",
                              message=f"op budget of {budget.seconds:g} s spent "
                                      f"(--op-budget); case not run")]
    dtype = torch_dtype(case.dtype)
    backward = bool(op.supports_autograd) and dtype in op.supported_backward_dtypes("cpu")
    try:
        picked = samples(op, case, limit=limit, requires_grad=backward)
    except Exception as exc:  # noqa: BLE001 - a generator broken on this torch
        return [OpOutcome(f"{case.id}/fwd", status="skip",
                          message=f"OpInfo sample generation failed on the CPU: {_short(exc)}")]
    if not picked:
        return [OpOutcome(f"{case.id}/fwd", status="skip", message="OpInfo yields no sample")]
    digests = unique_digests(sample_signature(s, dtype) for s in picked)
    up = _upcast(dtype)
    if not op.supports_dtype(up, "cpu"):
        up = torch.float32 if op.supports_dtype(torch.float32, "cpu") else dtype
    out: list[OpOutcome] = []
    for sample, digest in zip(picked, digests):
        if budget is not None and budget.exhausted():
            out.append(OpOutcome(ids.opinfo_record(case.key, case.dtype, "fwd", digest),
                                 status="skip",
                                 message=f"op budget of {budget.seconds:g} s spent (--op-budget)"))
            continue
        out.extend(_run_sample(op, case, sample, digest, device, dtype, up, backward))
    return out


def _run_sample(op, case: OpInfoCase, sample, digest: str, device, dtype: torch.dtype,
                up: torch.dtype, backward: bool) -> list[OpOutcome]:
    fwd_id, bwd_id = (ids.opinfo_record(case.key, case.dtype, d, digest) for d in ("fwd", "bwd"))
    standard = policy.standard_for(case.key, dtype)
    grad_standard = policy.standard_for(case.key, dtype, "bwd")
    cot_seed = zlib.crc32(bwd_id.encode("utf-8"))
    info = {"signature": sample_signature(sample, dtype)[:500]}
    wants_grad = backward and any(t.requires_grad for t in _tensors(
        [sample.input, list(sample.args), dict(sample.kwargs)]))

    def run(where: torch.device, to_dtype: torch.dtype, noting: Optional[policy.Watch],
            magnitudes: bool) -> Side:
        return _run(op, sample, device=where, from_dtype=dtype, to_dtype=to_dtype,
                    backward=wants_grad, cotangent_seed=cot_seed, seen=noting,
                    magnitude=magnitudes)

    # OpInfo's generators draw samples the CPU itself may reject in this dtype: those are
    # left out (skip), not run; the rest follow Note [One executor] in harness/ops/runner.py
    lowp = run(torch.device("cpu"), dtype, None, False)
    if lowp.error is not None:
        return [OpOutcome(fwd_id, status="skip", standard=standard, info=info,
                          message=f"the CPU reference cannot run this sample in {case.dtype}: "
                                  f"{_short(lowp.error)}")]
    done = execute(device, run, dtype, up, magnitudes=policy.sums_products(case.key),
                   low=lowp)
    seen = done.seen
    info["aten_ops"] = seen.info()
    where = f" [{device.type}, {case.dtype}, {standard}]"
    if done.status is not None:
        if done.dut.error is None:
            return [OpOutcome(fwd_id, status=done.status, standard=standard, info=info,
                              message=f"{fwd_id}{where}: {done.message}")]
        return [OpOutcome(fwd_id, status=done.status, standard=standard,
                          info={**info, "exception": _short(done.dut.error, 1000)},
                          message=f"{fwd_id}{where}: the DUT raised {_short(done.dut.error)}")]
    dut, ref, mag = done.dut, done.ref, done.mag
    info["reference"] = done.reference
    fell_back = list(seen.fallback.ops)

    def finish(record_id: str, direction: str, ok: bool, metrics: dict, rules: dict,
               messages: list[str], notes: list[str], standard: str) -> OpOutcome:
        outcome = OpOutcome(record_id, direction, standard=standard, metrics=metrics,
                            rules=rules, info={**info, **({"notes": notes} if notes else {})},
                            fallback=fell_back)
        if not ok:
            outcome.status = "fail"
            outcome.message = f"{record_id}{where}:\n" + "\n".join(messages)
        elif fell_back:
            outcome.status = "fallback"
            outcome.message = (f"{record_id}: the DUT ran {', '.join(fell_back)} on the host "
                               "CPU (torch_npu CPU fallback)")
        return outcome

    results = []
    ok, metrics, rules, messages, notes = compare_values(
        _flatten(dut.outs), _flatten(ref.outs), _flatten(lowp.outs), standard, scales=_flatten(mag.outs) if mag is not None else None)
    results.append(finish(fwd_id, "fwd", ok, metrics, rules, messages, notes, standard))
    if not wants_grad or lowp.grads is None:
        return results
    if lowp.grad_error is not None:
        return results
    if dut.grad_error is not None:
        status = classify_error(dut.grad_error)
        results.append(OpOutcome(bwd_id, "bwd", status, grad_standard,
                                 info={**info, "exception": _short(dut.grad_error, 1000)},
                                 message=f"{bwd_id}{where}: the DUT's backward raised "
                                         f"{_short(dut.grad_error)}"))
        return results
    ref_grads = ref.grads if ref.grads is not None and ref.grad_error is None else lowp.grads
    pairs = [(d, r, lp) for d, r, lp in zip(dut.grads or [], ref_grads, lowp.grads)
             if not (d is None and lp is None)]
    if not pairs:
        return results
    d_list, r_list, lp_list = (list(x) for x in zip(*pairs))
    mag_grads = None
    if mag is not None and mag.grads is not None and mag.grad_error is None:
        mag_grads = [m for d, m, lp in zip(dut.grads or [], mag.grads, lowp.grads)
                     if not (d is None and lp is None)]
    ok, metrics, rules, messages, notes = compare_values(d_list, r_list, lp_list, grad_standard,
                                                         "grad", scales=mag_grads)
    results.append(finish(bwd_id, "bwd", ok, metrics, rules, messages, notes, grad_standard))
    return results


def slice_and_rest(all_cases: Iterable[OpInfoCase]) -> tuple[list[OpInfoCase], list[OpInfoCase]]:
    """Split cases into the default slice and the slow rest (disjoint, same record ids)."""
    all_cases = list(all_cases)
    return [c for c in all_cases if c.in_slice], [c for c in all_cases if not c.in_slice]


def distinct_ops(all_cases: Iterable[OpInfoCase]) -> int:
    """Distinct op_db names (not variants) among the cases."""
    return len({c.key.split(":", 1)[0] for c in all_cases})


__all__ = ["Budget", "OpInfoCase", "DTYPES", "SKIP_OPS", "SLICE_OPS",
           "cases", "classify_error", "compare_values", "distinct_ops", "find_op",
           "load_op_db", "op_key", "run_case", "sample_digest", "sample_signature",
           "samples", "select", "slice_and_rest", "unique_digests"]

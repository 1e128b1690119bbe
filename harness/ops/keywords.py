"""Keyword-argument coverage of the op catalog (issue 10, "semantics of keyword arguments").

A kernel that ignores an option (``descending``, ``eps``, ``label_smoothing``) passes every
sample that leaves the option at its default. So every documented keyword of every
catalog op is either exercised with a non-default value by a default-run sample, or has a
reason here (:data:`REASONS`, :data:`KEYWORD_REASONS`) why it is not.
``python -m harness ops keywords`` prints the table; ``tests/test_ops_keywords.py`` fails
when an op leaves a keyword unexercised without a reason.

Note [Documented keywords]
~~~~~~~~~~~~~~~~~~~~~~~~~~
The documented keywords of an op are the parameters *with a default* of its public
signature, in this order of sources:

1. ``inspect.signature`` for Python functions (most of ``torch.nn.functional``);
2. the signature lines of the builtin's docstring, which is what the documentation shows
   (``sort(input, dim=-1, descending=False, *, stable=False, out=None) -> ...``; every
   ``name(...)`` line, so ``max(input)`` and ``max(input, dim, keepdim=False)`` both count);
3. the JIT schemas of ``aten::<name>`` (``torch._C._jit_get_schemas_for_operator``) for
   builtins without a docstring (``torch._foreach_add``), named-tensor (``Dimname``)
   overloads left out.

Parameters without a default are required, so every sample exercises them.

Note [Exercised keywords]
~~~~~~~~~~~~~~~~~~~~~~~~~
What a row passes is observed, not read from its samples: each default-run sample runs
once (forward, CPU, its first dtype) under a ``TorchFunctionMode`` that notes the
outermost call of the row's public op with its arguments bound to the documented
signature, so adapters (``_layer_norm(x, w, b, eps)`` calling ``F.layer_norm``) and
positional options (``torch.sort(x, 1, True)``) count the same as keywords. An option is
exercised when its bound value differs from the default. Ops that do not take part in
``__torch_function__`` (``clip_grad_norm_``) are read from their samples' keyword
arguments instead.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from typing import Any, Iterable, Optional

import torch

from harness.ops.spec import OpEntry, materialize

# --------------------------------------------------------------------------- reasons

KEYWORD_REASONS: dict[str, str] = {
    "out": "out= writes the same kernel's result into a given tensor; the catalog compares "
           "returned tensors (an out= bug is an allocation bug, not a numeric one)",
    "inplace": "in-place variants run the same kernel into the input; the catalog keeps "
               "inputs intact so the references see the same values",
    "memory_format": "layout hint only; non-contiguous inputs are covered by the "
                     "noncontig samples",
    "generator": "random ops are judged statistically with the DUT's global generator",
    "layout": "sparse layouts are out of scope (dense training ops only)",
    "device": "the DUT is chosen by --device, never per call",
    "pin_memory": "host-memory option, no kernel behind it",
    "requires_grad": "set by the harness for the backward, not by the op",
    "_stacklevel": "warning bookkeeping, no numeric effect",
    "size_average": "deprecated alias of reduction (torch warns); reduction is exercised",
    "reduce": "deprecated alias of reduction (torch warns); reduction is exercised",
    "names": "named tensors are out of scope",
    "sparse_grad": "sparse gradients are out of scope (dense training ops only)",
}
"""Reasons that hold for a keyword whichever op has it."""

_FIXED = "the row's adapter fixes it (see the row)"
REASONS: dict[str, dict[str, str]] = {
    "torch.nn.functional.batch_norm": {
        "momentum": "only moves running_mean/var, which the catalog does not compare; "
                    "suites/norm checks the running statistics with momentum"},
    "torch.nn.functional.dropout": {"training": "training=False is the identity; the "
                                                "random judge needs training=True"},
    "torch.nn.functional.dropout1d": {"training": "as for dropout"},
    "torch.nn.functional.dropout2d": {"training": "as for dropout"},
    "torch.nn.functional.dropout3d": {"training": "as for dropout"},
    "torch.nn.functional.rrelu": {
        "training": "training=True samples random slopes: no reference can agree",
        "lower": "only with training=True (random)", "upper": "only with training=True"},
    "torch.nn.functional.embedding": {
        "max_norm": "renormalises the weight in place (a side effect on the input, which "
                    "the reference copy does not share)",
        "norm_type": "only with max_norm", "sparse": "sparse gradients are out of scope",
        "scale_grad_by_freq": "exercised by the row embedding_scale_grad"},
    "torch.nn.functional.embedding_bag": {
        "max_norm": "as for embedding", "norm_type": "only with max_norm",
        "sparse": "sparse gradients are out of scope",
        "offsets": "2-D inputs (fixed-size bags) are what training code uses here",
        "per_sample_weights": "only with mode='sum' and offsets",
        "include_last_offset": "only with offsets", "padding_idx": "as for embedding",
        "scale_grad_by_freq": "as for embedding"},
    "torch.nn.functional.interpolate": {
        "recompute_scale_factor": "changes the output size only, not a kernel's values",
        "antialias": "a different kernel only for down-sampling bilinear/bicubic; "
                     "exercised by interpolate_bilinear_antialias"},
    "torch.nn.functional.scaled_dot_product_attention": {
        "dropout_p": "random: no reference can agree",
        "enable_gqa": "grouped-query attention needs a head-count mismatch: see the row "
                      "scaled_dot_product_attention_gqa",
    },
    "torch.nn.functional.one_hot": {"num_classes": "given positionally by every sample"},
    "torch.nn.functional.pad": {"value": "exercised by pad_constant_value"},
    "torch.nn.functional.normalize": {"eps": "only matters for rows of norm < eps; the "
                                             "small-domain rows are elsewhere"},
    "torch.nn.functional.cosine_similarity": {"eps": "only for near-zero vectors"},
    "torch.nn.functional.pairwise_distance": {"eps": "added to the difference: shifts "
                                                     "results by 1e-6 only"},
    "torch.clone": {},
    "torch.Tensor.float": {},
    "torch.nn.functional.lp_pool2d": {},
    "torch.nn.functional.local_response_norm": {},
    "torch.cdist": {"compute_mode": "selects mm-based or direct distance: both are "
                                    "judged through p=2 rows"},
    "torch.einsum": {},
    "torch.tensordot": {"out": KEYWORD_REASONS["out"]},
    "torch.nn.functional.gaussian_nll_loss": {"full": "adds a constant to the loss"},
    "torch.nn.functional.poisson_nll_loss": {"full": "Stirling term for targets > 1 only"},
    "torch.nn.functional.l1_loss": {
        "weight": "passed by the row's 'weight' sample, but torch's F.l1_loss does not "
                  "forward weight to __torch_function__, so the coverage mode cannot see it"},
    "torch.nn.utils.clip_grad_norm_": {
        "error_if_nonfinite": "raises on a non-finite norm; no numeric effect otherwise"},
    "torch.topk": {"sorted": "sorted=False leaves the order unspecified: no reference order "
                             "to compare against"},
    "torch.linalg.cross": {"dim": "the last dim of size 3 is the only one the samples "
                                  "have; dim=None picks it"},
    "torch.linalg.vector_norm": {"dtype": "exercised through sum/mean/softmax dtype= rows; "
                                          "vector_norm casts before reducing the same way"},
}
"""Per public op: why a documented keyword is not exercised."""

ADAPTED: dict[str, str] = {
    "batch_norm": "torch.nn.functional.batch_norm",
    "layer_norm": "torch.nn.functional.layer_norm",
    "rms_norm": "torch.nn.functional.rms_norm",
    "clip_grad_norm_": "torch.nn.utils.clip_grad_norm_",
    "clip_grad_value_": "torch.nn.utils.clip_grad_value_",
    "embedding_bag": "torch.nn.functional.embedding_bag",
    "scaled_dot_product_attention": "torch.nn.functional.scaled_dot_product_attention",
    "prelu": "torch.nn.functional.prelu",
    "fold_col2im": "torch.nn.functional.fold",
    "split": "torch.split", "chunk": "torch.chunk", "unbind": "torch.unbind",
    **{name: f"torch.{name}" for name in (
        "_foreach_mul_", "_foreach_add_", "_foreach_addcmul_", "_foreach_addcdiv_",
        "_foreach_lerp_", "_foreach_sqrt_")},
}
"""Rows whose callable is an adapter: the public op it calls."""

NO_API: dict[str, str] = {
    "getitem_advanced": "indexing syntax (x[idx]): no keywords",
    "getitem_slice": "indexing syntax (x[:, 1::3]): no keywords",
    "permute_contiguous": "x.permute(...).contiguous(): dims are positional",
    "transpose_contiguous": "x.transpose(0, 1).contiguous(): no keywords",
    "expand_contiguous": "x.expand(...).contiguous(): no keywords",
}
"""Rows without a public op with keywords."""


# ------------------------------------------------------------------- documented keywords

def resolve(path: str) -> Any:
    """``torch.nn.functional.conv2d`` -> the object."""
    import importlib

    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            obj = getattr(obj, part)
        return obj
    raise LookupError(path)


def api_of(entry: OpEntry) -> Optional[str]:
    """The dotted name of the public op a row tests, or None (:data:`NO_API`)."""
    if entry.name in NO_API:
        return None
    if entry.name in ADAPTED:
        return ADAPTED[entry.name]
    qual = getattr(entry.fn, "__qualname__", "")
    match = re.fullmatch(r"late_bound\((.+)\)", qual)
    if match:
        name = match.group(1)
        return f"torch.{name}" if name.startswith("Tensor.") else name
    fn = entry.fn
    for namespace in ("torch.nn.functional", "torch.linalg", "torch.special", "torch"):
        module = resolve(namespace)
        for attr in dir(module):
            if not attr.startswith("__") and getattr(module, attr, None) is fn:
                return f"{namespace}.{attr}"
    return None


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    default: Any
    positional: bool   # may be passed by position
    index: int         # position among the positional parameters (-1: keyword only)


_NO_DEFAULT = object()


def _split_params(text: str) -> list[str]:
    out, depth, current = [], 0, ""
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        out.append(current.strip())
    return out


def _literal(text: str) -> Any:
    import ast

    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return {"inf": math.inf, "True": True, "False": False}.get(text, text)


def _from_text(signatures: Iterable[str]) -> list[list[Param]]:
    overloads = []
    for params_text in signatures:
        params, keyword_only, index = [], False, 0
        for raw in _split_params(params_text):
            raw = raw.split(":", 1)[0] if "=" not in raw else raw
            if raw in ("*", "/"):
                keyword_only = keyword_only or raw == "*"
                continue
            if raw.startswith("*"):
                keyword_only = True
                continue
            name, _, default = raw.partition("=")
            name = name.split(":")[0].strip()
            if not name.isidentifier():
                continue
            params.append(Param(name, _literal(default) if default else _NO_DEFAULT,
                                not keyword_only, -1 if keyword_only else index))
            if not keyword_only:
                index += 1
        overloads.append(params)
    return overloads


def _doc_signatures(fn: Any, name: str) -> list[str]:
    doc = getattr(fn, "__doc__", None) or ""
    pattern = re.compile(rf"^\s*(?:\.\. function:: )?(?:[\w.]+\.)?{re.escape(name)}\((.*?)\)"
                         r"\s*(?:->.*)?$")
    return [m.group(1) for line in doc.splitlines()[:60]
            if "return_types" not in line and (m := pattern.match(line))]


def _schema_signatures(name: str) -> list[list[Param]]:
    overloads = []
    for schema in torch._C._jit_get_schemas_for_operator(f"aten::{name}"):
        if any("Dimname" in str(arg.type) for arg in schema.arguments):
            continue
        params, index = [], 0
        for arg in schema.arguments:
            default = arg.default_value if arg.has_default_value() else _NO_DEFAULT
            params.append(Param(arg.name, default, not arg.kwarg_only,
                                -1 if arg.kwarg_only else index))
            if not arg.kwarg_only:
                index += 1
        overloads.append(params)
    return overloads


def signatures(path: str) -> tuple[list[list[Param]], str]:
    """The overloads of a public op and where they came from (Note [Documented keywords])."""
    fn = resolve(path)
    name = path.rsplit(".", 1)[-1]
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    if sig is not None and sig.parameters and not (
            len(sig.parameters) == 2 and set(sig.parameters) == {"args", "kwargs"}):
        params, index = [], 0
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            positional = p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            default = p.default if p.default is not p.empty else _NO_DEFAULT
            params.append(Param(p.name, default, positional, index if positional else -1))
            if positional:
                index += 1
        return [params], "inspect.signature"
    doc_name = {"linalg.vector_norm": "vector_norm"}.get(name, name)
    texts = _doc_signatures(fn, doc_name)
    if not texts and "." in path and path.startswith("torch.linalg."):
        texts = _doc_signatures(fn, f"linalg.{name}")
    if texts:
        return _from_text(texts), "docstring"
    schema_name = {"vector_norm": "linalg_vector_norm"}.get(name, name)
    return _schema_signatures(schema_name), "jit schema"


def documented(path: str) -> dict[str, Any]:
    """Keyword -> default over every overload (Note [Documented keywords])."""
    out: dict[str, Any] = {}
    overloads, _ = signatures(path)
    for params in overloads:
        for p in params:
            if p.default is not _NO_DEFAULT and p.name not in ("input", "self"):
                out.setdefault(p.name, p.default)
    return out


# --------------------------------------------------------------------- exercised keywords

def _differs(value: Any, default: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True  # a tensor where the default is a number or None
    if isinstance(default, str) and not isinstance(value, str):
        return value is not None  # a schema default like 'None' as text
    try:
        if isinstance(value, float) and isinstance(default, (int, float)):
            return not (value == default or (math.isnan(value) and math.isnan(default)))
        return bool(value != default)
    except Exception:  # noqa: BLE001 - incomparable values differ
        return True


def _bind(overloads: list[list[Param]], args: tuple, kwargs: dict) -> dict[str, Any]:
    """Best overload's binding: the one that explains every keyword and the positionals."""
    best: dict[str, Any] = {}
    for params in overloads:
        positional = [p for p in params if p.positional]
        names = {p.name for p in params}
        if not set(kwargs) <= names or len(args) > len(positional):
            continue
        bound = {p.name: value for p, value in zip(positional, args)}
        bound.update(kwargs)
        if len(bound) > len(best):
            best = bound
    return best or dict(kwargs)


def _matches(func: Any, path: str) -> bool:
    name = path.rsplit(".", 1)[-1]
    return getattr(func, "__name__", None) in (name, f"linalg_{name}", f"special_{name}")


def exercised(entries: Iterable[OpEntry], path: str) -> tuple[set[str], list[str]]:
    """Documented keywords the rows' default-run samples pass with a non-default value
    (Note [Exercised keywords]), and the rows that exercised something."""
    from torch.overrides import TorchFunctionMode

    defaults = documented(path)
    overloads, _ = signatures(path)
    found: set[str] = set()
    by_rows: list[str] = []
    calls: list[tuple[tuple, dict]] = []

    class _Calls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if _matches(func, path):
                calls.append((tuple(args), dict(kwargs)))
            return func(*args, **kwargs)

    for entry in entries:
        before = set(found)
        for sample in entry.samples:
            if sample.slow:
                continue
            dtype = entry.dtypes[0]
            values = materialize(sample, dtype, torch.Generator().manual_seed(0))
            del calls[:]
            try:
                with torch.no_grad(), _Calls():
                    entry.fn(*values, **sample.kwargs)
            except Exception:  # noqa: BLE001 - coverage reads calls, judging is elsewhere
                pass
            # not a __torch_function__ op: its sample's own keyword arguments
            seen = list(calls) or [((), dict(sample.kwargs))]
            for args, kwargs in seen:
                if calls and path.startswith("torch.Tensor."):
                    args = args[1:]  # the method's self: its documented signature has none
                bound = _bind(overloads, args, kwargs)
                for name, value in bound.items():
                    if name in defaults and _differs(value, defaults[name]):
                        found.add(name)
        if found - before:
            by_rows.append(entry.name)
    return found, by_rows


# ---------------------------------------------------------------------------- coverage

@dataclasses.dataclass
class Coverage:
    """One public op's keywords: exercised, explained, missing."""

    api: str
    rows: list[str]
    source: str
    keywords: dict[str, Any]
    exercised: set[str]
    reasons: dict[str, str]

    @property
    def missing(self) -> list[str]:
        return sorted(k for k in self.keywords if k not in self.exercised
                      and k not in self.reasons)


def coverage(catalog: Optional[Iterable[OpEntry]] = None) -> tuple[list[Coverage], dict]:
    """Per public op of the catalog, its keyword coverage; and the rows without one."""
    from harness.ops.catalog import CATALOG

    rows = list(CATALOG if catalog is None else catalog)
    by_api: dict[str, list[OpEntry]] = {}
    no_api: dict[str, str] = {}
    for entry in rows:
        api = api_of(entry)
        if api is None:
            no_api[entry.name] = NO_API.get(entry.name, "no public op found")
        else:
            by_api.setdefault(api, []).append(entry)
    out = []
    for api, entries in sorted(by_api.items()):
        keywords = documented(api)
        _, source = signatures(api)
        done, _ = exercised(entries, api)
        reasons = {}
        for name in keywords:
            if name in done:
                continue
            why = REASONS.get(api, {}).get(name) or KEYWORD_REASONS.get(name)
            if why:
                reasons[name] = why
        out.append(Coverage(api, [e.name for e in entries], source, keywords, done, reasons))
    return out, no_api


def table(rows: list[Coverage], no_api: dict[str, str]) -> str:
    """The coverage table a person reads, with totals."""
    width = max([len(r.api) for r in rows] + [10])
    lines = [f"{'op':<{width}}  {'kw':>3} {'run':>4} {'why':>4} {'MISS':>4}  missing / source"]
    for r in rows:
        miss = r.missing
        lines.append(f"{r.api:<{width}}  {len(r.keywords):>3} {len(r.exercised):>4} "
                     f"{len(r.reasons):>4} {len(miss):>4}  "
                     f"{', '.join(miss) if miss else '-'}  [{r.source}]")
    kw = sum(len(r.keywords) for r in rows)
    run = sum(len(r.exercised) for r in rows)
    why = sum(len(r.reasons) for r in rows)
    miss = sum(len(r.missing) for r in rows)
    lines.append(f"total: {len(rows)} public ops ({sum(len(r.rows) for r in rows)} catalog "
                 f"rows), {kw} documented keywords: {run} exercised with a non-default "
                 f"value, {why} with a reason, {miss} missing; {len(no_api)} rows without "
                 f"a keyword-taking op ({', '.join(sorted(no_api))})")
    return "\n".join(lines)


__all__ = ["ADAPTED", "Coverage", "KEYWORD_REASONS", "NO_API", "REASONS", "api_of",
           "coverage", "documented", "exercised", "signatures", "table"]

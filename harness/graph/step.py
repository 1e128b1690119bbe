"""One training step compiled on the DUT against the same step eager.

Note [Compiled vs eager under the op standards]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The step is forward, loss, backward and one SGD step with momentum; the model is compiled
(``torch.compile(model)``: Dynamo captures the forward, AOTAutograd derives the backward,
the backend compiles both), the loss and the optimizer stay eager, as in most training
scripts. Each tensor it produces (the output, the loss, every gradient, every parameter and
float buffer after the step) is judged by the op family's one policy
(:func:`harness.ops.policy.judge`, the ``relative`` standard: model outputs are
compositions, "everything else" in the standards table) with three computations:

* the DUT: the compiled step on the device, in the checked dtype (fp32, or under the
  device's autocast), inside ``device.scope()`` (faults act there);
* the reference: the eager step on the CPU up-cast (fp64 for fp32; fp32 without autocast
  for an autocast step), outside the scope;
* the low-precision reference: the *eager* step on the same device in the same dtype and
  autocast, outside the scope.

So the ratio the standard judges is the compiled step's error over the eager step's, both
against the same up-cast reference: a compiled kernel that rounds differently (another
reduction order, a fused multiply-add) is within the standard's factors, a wrong lowering
is not.

Errors are measured relative to the tensor's RMS (the ``scale`` of
:func:`harness.compare.compare_outputs`), not element by element. Every tensor of a
step is a sum of products (a weight's gradient sums over the batch and the positions), and
the op family measures those against their condition (Note [Condition of products and
reductions]); a step's condition per element has no closed form, so it is bounded
normwise. Element-wise, cancellation decides: inductor's fused LayerNorm backward on the
transformer block gives a ``ln2.weight`` gradient whose *mean* element-wise relative error
is 2.9x eager's (both about 30 ulps; RMSE 1.0x), a correct kernel the element-wise
``mean_rel_err <= 2x`` would fail (measured Dec 2026, torch 2.13, CPU).

Normwise is not enough for the CNNs: BatchNorm's weight and bias gradients (and the
parameters the step writes from them) are sums over the batch and the image whose terms
cancel, and inductor's reordered reductions give them 2-3.5x eager's RMSE against fp64
(SimpleCNN, the small ResNet, fp32), while under bf16 autocast a gradient's cosine lands
a hair below eager's own (0.979 vs 0.981). Those are correct compilers. A tensor the op
policy fails is therefore also judged by the rule PyTorch's own compiled-vs-eager
benchmark uses (``torch._dynamo.utils.same``, the relative standard's second source):
RMSE against fp64 at most 2x eager's (3x in fp16/bf16) plus ``tol / 10`` (``tol`` 1e-4,
1e-2 under autocast: :data:`DYNAMO_RULE`), absolute as Dynamo has it: SimpleCNN's
``conv2.bias`` feeds a BatchNorm, so its exact gradient is 0 and any computed value is
cancellation noise (inductor's 3.7x eager's, 4e-8). Passing that, it passes, with
``op_standard_failed`` in its metrics. A wrong lowering is far beyond both:
``graph.softmax_drift`` moves the transformer block's output by about 1e-3. Dropout is off (the compiled and the eager RNG streams differ by design);
BatchNorm trains (its running statistics are buffers after the step, judged too).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from harness import models
from harness.graph import backends


@dataclasses.dataclass(frozen=True)
class GraphModel:
    """A model of the family: how to build it, its input, its loss."""

    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    classes: int = 0  # > 0: integer labels and cross-entropy; 0: an MSE target of the output


MODELS: dict[str, GraphModel] = {
    "simplecnn": GraphModel(lambda: models.SimpleCNN(dropout=0.0), (4, 3, 32, 32), 10),
    "resnet18_small": GraphModel(lambda: models.resnet("small"), (4, 3, 32, 32), 10),
    "transformer_block": GraphModel(lambda: models.TransformerBlock(dim=64, heads=4),
                                    (2, 16, 64)),
}
"""The family's models (``harness/models.py``): SimpleCNN, the small ResNet-18, the
transformer block."""

LR, MOMENTUM = 0.05, 0.9


def build(name: str, seed: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The model ``name`` with seeded weights, its input and its target (on the CPU)."""
    spec = MODELS[name]
    torch.manual_seed(seed)
    model = spec.build()
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(spec.input_shape, generator=gen)
    if spec.classes:
        target = torch.randint(0, spec.classes, (spec.input_shape[0],), generator=gen)
    else:
        with torch.no_grad():
            target = torch.randn(model(x).shape, generator=gen)
    return model, x, target


def loss_of(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The model family's loss rule (cross-entropy on integer labels of an ``(N, C, ...)``
    output, else MSE) in fp32, or in fp64 for the fp64 reference (whose gradients would
    otherwise start from an fp32-rounded loss)."""
    dtype = torch.float64 if output.dtype == torch.float64 else torch.float32
    target = target.to(output.device)
    if target.dtype in (torch.int64, torch.int32) and output.dim() >= 2:
        return F.cross_entropy(output.to(dtype), target.long())
    return F.mse_loss(output.to(dtype), target.to(dtype))


def train_step(model: nn.Module, forward: Callable, inputs: tuple, target: torch.Tensor,
               autocast=None) -> dict[str, torch.Tensor]:
    """One step of ``model`` called through ``forward`` (the compiled or the plain module):
    every tensor it produces, by name (``forward``, ``loss``, ``grad/<param>``,
    ``param/<param>``, ``buffer/<buffer>``)."""
    from harness.model.capture import _first_output

    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    opt.zero_grad(set_to_none=True)
    with autocast if autocast is not None else contextlib.nullcontext():
        out = _first_output(forward(*inputs))
    loss = loss_of(out, target)
    loss.backward()
    grads = {f"grad/{n}": p.grad.detach().clone() for n, p in model.named_parameters()
             if p.grad is not None}
    opt.step()
    tensors = {"forward": out.detach(), "loss": loss.detach(), **grads}
    tensors.update({f"param/{n}": p.detach() for n, p in model.named_parameters()})
    tensors.update({f"buffer/{n}": b.detach() for n, b in model.named_buffers()
                    if b.is_floating_point()})
    return tensors


GROUPS = ("forward", "loss", "grad", "param")
"""The records of one step: a tensor ``buffer/...`` is judged with the parameters."""


def group_of(name: str) -> str:
    head = name.split("/", 1)[0]
    return "param" if head == "buffer" else head


@dataclasses.dataclass
class Judged:
    """Every tensor of one group judged: the worst one's verdict stands for the group."""

    group: str
    passed: bool
    worst: str
    metrics: dict[str, float]
    rules: dict
    message: str
    failing: list[str]
    tensors: int


def _badness(verdict) -> float:
    ratios = [v for k, v in verdict.metrics.items() if k.endswith("_ratio")]
    return max(ratios) if ratios else verdict.metrics.get("max_rel_err", 0.0)


def normwise(reference: torch.Tensor) -> Optional[torch.Tensor]:
    """The magnitude a step tensor's errors are relative to: its RMS, for every element
    (Note [Compiled vs eager under the op standards]); None for a non-float tensor."""
    if not reference.is_floating_point() or not reference.numel():
        return None
    rms = reference.detach().double().pow(2).mean().sqrt()
    return torch.full(reference.shape, float(rms), dtype=torch.float64)


DYNAMO_RULE = {"multiplier": (2.0, 3.0), "tol": (1e-4, 1e-2)}
"""``torch._dynamo.utils.same``'s accuracy rule (fp32, fp16/bf16): RMSE against fp64 at
most ``multiplier`` times eager's plus ``tol / 10`` (Note [Compiled vs eager under the op
standards])."""


def within_dynamo_rule(verdict, reference: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether a tensor the op policy failed is within Dynamo's compiled-vs-eager rule (and
    has no NaN/Inf the reference lacks)."""
    m = verdict.metrics
    if "ref_rmse" not in m or m.get("nan_inf_mismatch", 0.0) or m.get("shape_mismatch"):
        return False
    low = dtype in (torch.float16, torch.bfloat16)
    allowed = DYNAMO_RULE["multiplier"][low] * m["ref_rmse"] + DYNAMO_RULE["tol"][low] / 10
    m["dynamo_rmse_allowed"] = allowed
    return m["rmse"] <= allowed


def judge_groups(dut: dict, reference: dict, lowp: dict, amp: Optional[torch.dtype] = None
                 ) -> list[Judged]:
    """Each group's tensors judged by the op policy, and where it fails, by Dynamo's rule
    (Note [Compiled vs eager under the op standards])."""
    from harness.ops import policy

    verdicts: dict[str, dict] = {g: {} for g in GROUPS}
    for name, value in dut.items():
        ref = reference[name]
        verdict, _ = policy.judge(value, ref, lowp.get(name), "relative", normwise(ref))
        if not verdict.passed and value.is_floating_point() and within_dynamo_rule(
                verdict, ref, amp or value.dtype):
            verdict = dataclasses.replace(verdict, passed=True, message="")
            verdict.metrics["op_standard_failed"] = 1.0
        verdicts[group_of(name)][name] = verdict
    out = []
    for group, judged in verdicts.items():
        if not judged:
            continue
        failing = [n for n, v in judged.items() if not v.passed]
        worst = failing[0] if failing else max(judged, key=lambda n: _badness(judged[n]))
        verdict = judged[worst]
        metrics = {**verdict.metrics, "tensors": float(len(judged)),
                   "failing": float(len(failing))}
        message = "" if verdict.passed else (
            f"{len(failing)} of {len(judged)} {group} tensor(s) of the compiled step differ "
            f"from the eager step beyond the op standard; worst {worst}:\n{verdict.message}")
        out.append(Judged(group, not failing, worst, metrics, dict(verdict.rules), message,
                          failing, len(judged)))
    return out


@dataclasses.dataclass
class StepResult:
    """The compiled step on the DUT judged against eager, and what the backend did."""

    backend: str
    groups: list[Judged]
    counting: backends.Counting

    @property
    def fell_back(self) -> bool:
        """Whether some captured graph ran eagerly because the backend raised."""
        return bool(self.counting.errors)


def _upcast(dtype: Optional[torch.dtype]) -> torch.dtype:
    return torch.float32 if dtype is not None else torch.float64


def _cast(inputs: tuple, dtype: Optional[torch.dtype], dev) -> tuple:
    return tuple(t.to(dev, dtype) if t.is_floating_point() and dtype else t.to(dev)
                 for t in inputs)


def compiled_vs_eager(name: str, device, *, backend: str, amp: Optional[torch.dtype] = None,
                      seed: int = 0) -> StepResult:
    """The step of the family's model ``name`` (:data:`MODELS`) compiled with ``backend`` on
    ``device`` vs eager; ``amp``: under the device's autocast."""
    model, x, target = build(name, seed)
    return compare_step(model, (x,), target, device, backend=backend, amp=amp)


def compare_step(model: nn.Module, inputs: tuple, target: torch.Tensor, device, *,
                 backend: str, amp: Optional[torch.dtype] = None) -> StepResult:
    """One training step of ``model`` (on the CPU, left untouched) compiled with
    ``backend`` on ``device`` vs eager (Note [Compiled vs eager under the op standards])."""
    why = backends.unsupported()
    if why:
        from harness.device import Unsupported

        raise Unsupported(why)
    dev = device.torch_device

    def autocast():
        return device.autocast(amp) if amp is not None else None

    autocast()  # raises Unsupported before any work where the stack lacks this autocast
    up = _upcast(amp)
    ref_model = copy.deepcopy(model).to(up)
    reference = train_step(ref_model, ref_model, _cast(inputs, up, "cpu"), target)
    eager_model = copy.deepcopy(model).to(dev)
    lowp = train_step(eager_model, eager_model, _cast(inputs, None, dev), target,
                      autocast())
    dut_model = copy.deepcopy(model).to(dev)
    counting = backends.Counting(backend)
    backends.reset()
    try:
        compiled = torch.compile(dut_model, backend=counting)
        with device.scope():
            dut = train_step(dut_model, compiled, _cast(inputs, None, dev), target,
                             autocast())
            device.synchronize()
    finally:
        backends.reset()
    return StepResult(backend, judge_groups(dut, reference, lowp, amp), counting)

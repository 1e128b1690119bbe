"""The one exception classifier: what an exception a check (or the DUT inside it) raised
means, ``unsupported`` (this stack lacks a kernel, a dtype, an API or a feature: a
capability, and ``pass -> unsupported`` is a regression) or ``error`` (a wrong or broken
run). Every check asks it: the op pipelines (catalog, OpInfo sweep, model cases) through
:mod:`harness.ops.policy`, the distributed rank programs, and the plugin for any check's
exception (:func:`harness.device.missing_kernel`, Note [Missing features of older stacks]),
so the same exception is the same status everywhere.
"""

from __future__ import annotations

import re

__all__ = ["UNSUPPORTED_PATTERNS", "classify_exception", "is_unsupported"]


# What a backend says when it has no kernel for an op / dtype / reduction: a capability
# (recorded ``unsupported``; ``pass -> unsupported`` is a regression), not a wrong answer.
# One table for every pipeline; each row says where its wording comes from.
UNSUPPORTED_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"not (currently )?implemented", "no kernel (torch: 'not implemented for <dtype>')"),
    (r"Currently, Autocast\w* only supports? ", "this autocast lacks the dtype (torch 2.1's "
     "CPU autocast: bfloat16 only)"),
    # an older torch's Python API without a keyword the catalog exercises (F.mse_loss's
    # weight=, _foreach_norm's dtype=): a missing feature of that stack, not a wrong answer
    (r"got an unexpected keyword argument|takes from \d+ to \d+ positional arguments but "
     r"\d+ were given", "this torch's API lacks the argument"),
    (r"could not run '[^']*' with arguments from the", "no kernel for this dispatch key"),
    (r"could not run", "no kernel for this dispatch key"),
    (r"not supported|unsupported|no support", "the backend says it is not supported"),
    (r"does not support", "the backend says it does not support it"),
    (r"doesn't support|not yet supported", "torch says it does not support it (yet)"),
    # torch.optim's capturable / fused paths on a device torch has none for ("params and
    # state_steps must be on supported devices", "Tensors of supported devices"; torch
    # 2.1: "params and state_steps must be CUDA or XLA tensors")
    (r"(on|of) supported devices|state_steps must be CUDA",
     "torch.optim has no such path for this device"),
    (r"no kernel|is not available for|not compiled with", "the build has no kernel"),
    (r"no (npu|cuda|xpu|mps) implementation", "no device implementation"),
    (r"cannot use reduceop", "the collective backend lacks this reduction"),
    (r"invalid.*\b(type|dtype|op)\b", "the backend rejects this dtype / op"),
    # gloo's AVG on int64 fails casting its float quotient back
    (r"can't be cast to the desired output type", "the backend refuses this dtype combination"),
    # torch's SyncBatchNorm refuses CPU modules
    (r"only work with GPU", "the op needs an accelerator"),
    (r"expected input tensor to be on", "the op needs another device"),
)
_UNSUPPORTED = [(re.compile(p, re.IGNORECASE), why) for p, why in UNSUPPORTED_PATTERNS]


def classify_exception(exc: BaseException) -> tuple[str, str]:
    """``("unsupported", reason)`` for "no kernel for this op/dtype", else ``("error", ...)``.

    The reason is ``"<why>: <ExcType>: <first line>"``, short enough for a record.
    """
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    text = f"{type(exc).__name__}: {first}"
    if isinstance(exc, NotImplementedError):
        return "unsupported", f"NotImplementedError: {text}"
    from harness.device import Unsupported

    if isinstance(exc, Unsupported):  # Note [Missing features of older stacks]
        return "unsupported", f"this stack lacks it: {first}"
    message = str(exc)
    for pattern, why in _UNSUPPORTED:
        if pattern.search(message):
            return "unsupported", f"{why}: {text}"
    return "error", text


def is_unsupported(exc: BaseException) -> bool:
    """Whether :func:`classify_exception` calls ``exc`` ``unsupported``."""
    return classify_exception(exc)[0] == "unsupported"

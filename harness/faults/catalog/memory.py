"""Memory faults, caught by ``suites/memory``.

- ``memory.checkpoint_keeps_activations``: ``torch.utils.checkpoint.checkpoint`` just calls
  the function: the same numbers, no saving (a backend whose recomputation silently
  falls back to storing everything).
- ``memory.retains_tensor_per_step``: ``Optimizer.zero_grad`` keeps a clone of every
  gradient in a hidden list: live memory grows each step (a leak in a runtime cache).
- ``memory.mm_hidden_workspace``: ``aten.mm`` allocates (and writes) a workspace 16x its
  output for the op's duration: a kernel whose workspace grew in an upgrade. The CPU
  tracker sees it because it sits below the fault's mode (Note [Mode order] in
  :mod:`harness.memory.meter`); allocators see it anyway.
"""

from __future__ import annotations

import torch

from harness.faults import patch_attr, perturb_op

_CKPT = "suites/memory/test_checkpointing.py"
_OOM = "suites/memory/test_oom.py"
_LEAKS = "suites/memory/test_leaks.py"


def _no_checkpoint(original):
    def checkpoint(function, *args, use_reentrant=None, context_fn=None,
                   determinism_check=None, debug=None, preserve_rng_state=True, **kwargs):
        return function(*args, **kwargs)
    return checkpoint


CHECKPOINT_KEEPS_ACTIVATIONS = patch_attr(
    "memory.checkpoint_keeps_activations", family="memory",
    description="torch.utils.checkpoint.checkpoint runs the function plainly: same numbers, "
                "every activation kept",
    target="torch.utils.checkpoint.checkpoint", replace=_no_checkpoint,
    checks=(f"{_CKPT}::test_checkpoint_saving[mlp-non_reentrant]",
            f"{_OOM}::test_checkpointing_raises_max_batch[mlp-non_reentrant]"),
)

_RETAINED: list = []  # the hidden list a leaking runtime would keep


def _zero_grad_retains(original):
    def zero_grad(self, set_to_none: bool = True):
        with torch.no_grad():
            _RETAINED.extend(p.grad.clone() for group in self.param_groups
                             for p in group["params"] if p.grad is not None)
        return original(self, set_to_none)
    return zero_grad


RETAINS_TENSOR_PER_STEP = patch_attr(
    "memory.retains_tensor_per_step", family="memory",
    description="Optimizer.zero_grad keeps a clone of every gradient in a hidden list "
                "(a leak of one model's gradients per step)",
    target="torch.optim.Optimizer.zero_grad", replace=_zero_grad_retains,
    checks=(f"{_LEAKS}::test_no_leak_per_step[plain]",),
)

WORKSPACE_FACTOR = 16


def _with_workspace(out, args, kwargs):
    workspace = torch.empty(out.numel() * out.element_size() * WORKSPACE_FACTOR,
                            dtype=torch.uint8, device=out.device)
    workspace.fill_(0)  # a kernel writes its workspace; freed when the op returns
    del workspace
    return out


MM_HIDDEN_WORKSPACE = perturb_op(
    "memory.mm_hidden_workspace", family="memory",
    description=f"aten.mm allocates a {WORKSPACE_FACTOR}x-output workspace for the op's "
                "duration (numbers unchanged, peak memory up)",
    op="aten.mm", transform=_with_workspace,
    checks=(f"{_CKPT}::test_plain_step_peak[mlp]",
            f"{_CKPT}::test_checkpoint_saving[mlp-non_reentrant]",
            f"{_OOM}::test_max_batch_under_cap[mlp-none]"),
    parity="memory",
)

FAULTS = [CHECKPOINT_KEEPS_ACTIVATIONS, RETAINS_TENSOR_PER_STEP, MM_HIDDEN_WORKSPACE]

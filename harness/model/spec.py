"""What a user names on the command line: a model factory and its input shapes.

* ``PKG.MOD:FACTORY``: :func:`load_factory` imports ``PKG.MOD`` and calls ``FACTORY()``,
  which returns an ``nn.Module``, or ``(module, example_inputs)``, or
  ``(module, example_inputs, target)``. ``example_inputs`` is a tensor or a tuple of
  tensors passed positionally to ``module(...)``.
* ``--input 8x3x32x32[:float32]``: :func:`parse_tensor_spec` turns it into a
  :class:`TensorSpec` (shape and dtype); several inputs are separated by commas
  (``4x16:int64,4x16``). Given, it replaces the factory's example inputs.
* ``--target 8[:int64]``: the loss target (class labels when integer, a regression
  target when float); the default is derived from the model's output (:func:`default_target`).

Errors are :class:`SpecError` (a ``ValueError``) naming the bad value, where it came from
and what is allowed.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from typing import Any, Optional, Sequence

import torch
from torch import nn

from harness import dtypes

DTYPE_NAMES: dict[str, torch.dtype] = {
    name: dtypes.BY_NAME[name]
    for name in ("float32", "float16", "bfloat16", "float64", "int64", "int32", "bool")}
"""The dtypes an input or target may name (``--input 8x3x32x32:float16``)."""

AMP_DTYPES: dict[str, torch.dtype] = {
    name: dtypes.BY_NAME[dtypes.canonical(name)] for name in ("bf16", "bfloat16", "fp16", "float16")}
"""``--amp`` values: the autocast dtype (short and long names)."""

_FACTORY = re.compile(r"^(?P<module>[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*):(?P<attr>[A-Za-z_]\w*)$")
_SHAPE = re.compile(r"^\d+(x\d+)*$")


class SpecError(ValueError):
    """A malformed or unloadable model factory, input or target specification."""


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One input tensor: its shape and dtype name."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    def text(self) -> str:
        return "x".join(str(s) for s in self.shape) + f":{self.dtype}"


@dataclasses.dataclass
class ModelSpec:
    """A loaded model: the module, its example inputs and the loss target (or None)."""

    name: str
    factory: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    target: Optional[torch.Tensor] = None
    target_spec: Optional[TensorSpec] = None


def check_factory(text: str) -> str:
    """Validate the ``PKG.MOD:FACTORY`` syntax (no import); returns ``text``."""
    if not _FACTORY.match(text or ""):
        raise SpecError(f"model {text!r} is not PKG.MOD:FACTORY (a module path, a colon and a "
                        "callable, e.g. harness.models:resnet18 or mypkg.nets:build)")
    return text


def factory_name(text: str) -> str:
    """The model's name in record ids: the factory's name (``harness.models:resnet18`` ->
    ``resnet18``)."""
    return check_factory(text).rsplit(":", 1)[1]


def parse_tensor_spec(text: str, *, source: str = "--input") -> TensorSpec:
    """``8x3x32x32`` or ``8x3x32x32:float16`` -> :class:`TensorSpec`."""
    shape_text, _, dtype = text.strip().partition(":")
    if not _SHAPE.match(shape_text):
        raise SpecError(f"{source} {text!r}: the shape must be sizes joined by 'x' "
                        "(e.g. 8x3x32x32), optionally ':DTYPE'")
    dtype = dtype or "float32"
    if dtype not in DTYPE_NAMES:
        raise SpecError(f"{source} {text!r}: unknown dtype {dtype!r}; choose from "
                        f"{', '.join(DTYPE_NAMES)}")
    return TensorSpec(tuple(int(s) for s in shape_text.split("x")), dtype)


def parse_tensor_specs(text: str, *, source: str = "--input") -> tuple[TensorSpec, ...]:
    """Comma-separated :func:`parse_tensor_spec`: one spec per positional input."""
    parts = [p for p in (text or "").split(",")]
    if not parts or any(not p.strip() for p in parts):
        raise SpecError(f"{source} {text!r}: give one or more shapes separated by commas "
                        "(e.g. 8x3x32x32 or 4x16:int64,4x16)")
    return tuple(parse_tensor_spec(p, source=source) for p in parts)


def parse_amp(text: Optional[str]) -> Optional[torch.dtype]:
    """``--amp`` value -> autocast dtype; None or ``off``/``none`` -> None."""
    if text is None or text in ("off", "none", "float32", "fp32"):
        return None
    if text not in AMP_DTYPES:
        raise SpecError(f"--amp {text!r}: choose from {', '.join(AMP_DTYPES)} (or off)")
    return AMP_DTYPES[text]


def make_tensor(spec: TensorSpec, gen: torch.Generator, *, high: int = 10) -> torch.Tensor:
    """A seeded tensor for a spec: normal floats, integers in ``[0, high)``, random bools."""
    dtype = DTYPE_NAMES[spec.dtype]
    if dtype.is_floating_point:
        return torch.randn(spec.shape, generator=gen).to(dtype)
    if dtype == torch.bool:
        return torch.rand(spec.shape, generator=gen) < 0.5
    return torch.randint(0, max(high, 1), spec.shape, generator=gen, dtype=dtype)


def _as_tuple(value: Any, what: str, factory: str) -> tuple[torch.Tensor, ...]:
    items = (value,) if isinstance(value, torch.Tensor) else tuple(value)
    if not all(isinstance(t, torch.Tensor) for t in items):
        raise SpecError(f"{factory} returned {what} that are not all tensors "
                        f"({[type(t).__name__ for t in items]})")
    return items


def resolve_factory(text: str):
    """Import ``PKG.MOD`` and return its callable ``FACTORY`` (not called yet)."""
    check_factory(text)
    module_name, attr = text.rsplit(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"model {text}: cannot import {module_name!r} ({exc}); is its "
                        "directory on PYTHONPATH?") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise SpecError(f"model {text}: {module_name} has no callable {attr!r}"
                        + (f" (it is a {type(factory).__name__})" if factory is not None else ""))
    return factory


def load_factory(text: str, inputs: Optional[Sequence[TensorSpec]] = None,
                 target: Optional[TensorSpec] = None, *, seed: int = 0) -> ModelSpec:
    """Import ``PKG.MOD``, call ``FACTORY()`` (seeded) and build the example inputs.

    Args:
        text: ``PKG.MOD:FACTORY``.
        inputs: replaces the factory's example inputs (required when it returns a bare
            module).
        target: the loss target's spec (default: derived from the output, see
            :func:`default_target`).
        seed: seeds the weights (``torch.manual_seed``) and the inputs.
    """
    factory = resolve_factory(text)
    torch.manual_seed(seed)
    made = factory()
    example, made_target = None, None
    if isinstance(made, tuple):
        if not 2 <= len(made) <= 3:
            raise SpecError(f"model {text}: the factory returned a tuple of {len(made)}; "
                            "return a module, (module, inputs) or (module, inputs, target)")
        made_target = made[2] if len(made) > 2 else None
        made, example = made[0], made[1]
    if not isinstance(made, nn.Module):
        raise SpecError(f"model {text}: the factory returned {type(made).__name__}, not an "
                        "nn.Module (or a tuple starting with one)")
    gen = torch.Generator().manual_seed(seed + 1)
    if inputs:
        tensors = tuple(make_tensor(s, gen) for s in inputs)
    elif example is not None:
        tensors = _as_tuple(example, "example inputs", text)
    else:
        raise SpecError(f"model {text}: the factory returns a bare module, so the input "
                        "shape must be given (--input 8x3x32x32 / --model-input 8x3x32x32)")
    if target is not None:
        made_target = None  # made from the output's shape: labels in [0, classes)
    elif made_target is not None and not isinstance(made_target, torch.Tensor):
        raise SpecError(f"model {text}: the factory's target is a {type(made_target).__name__}, "
                        "not a tensor")
    return ModelSpec(factory_name(text), text, made, tensors, made_target, target)


def make_target(output: torch.Tensor, spec: Optional[TensorSpec],
                gen: torch.Generator) -> torch.Tensor:
    """The loss target for a model output.

    With a spec: integer labels of its shape in ``[0, C)`` (C: the output's last size),
    or a float tensor of its shape. Without: class labels for an ``(N, C)`` output
    (cross-entropy), else a float target of the output's shape (mean squared error).
    """
    if spec is not None:
        if DTYPE_NAMES[spec.dtype].is_floating_point:
            return make_tensor(spec, gen)
        return make_tensor(spec, gen, high=int(output.shape[-1]) if output.dim() else 2)
    if output.dim() == 2 and output.is_floating_point():
        return torch.randint(0, output.shape[1], (output.shape[0],), generator=gen)
    return torch.randn(output.shape, generator=gen)


def empty_inputs(inputs) -> Optional[str]:
    """Why a step on these inputs checks nothing (an input without elements: every captured
    case would compare empty tensors), or None; the model command and ``pytest --model``
    both ask it, so both call such a run NOTHING CHECKED."""
    empty = [f"input {i} has shape {'x'.join(map(str, t.shape))}" for i, t in
             enumerate(inputs) if isinstance(t, torch.Tensor) and t.numel() == 0]
    if not empty:
        return None
    return (f"{'; '.join(empty)}: no elements, so no case compares anything; give input "
            "shapes with elements (--input / --model-input)")

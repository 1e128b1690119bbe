"""Dtypes by name: the one table every option, record id and check reads.

Record ids, metrics and options name dtypes the way torch prints them without the
``torch.`` prefix (``float16``, ``bfloat16``); the short forms users type (``fp16``,
``bf16``) are aliases accepted where a person types a dtype (``--amp``, ``--input``).
"""

from __future__ import annotations

from typing import Iterable, Optional

import torch

BY_NAME: dict[str, torch.dtype] = {
    "float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
    "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
    "complex64": torch.complex64, "complex128": torch.complex128,
}
"""Every dtype the harness names, by its canonical name."""

ALIASES: dict[str, str] = {"fp64": "float64", "fp32": "float32", "fp16": "float16",
                           "half": "float16", "bf16": "bfloat16", "float": "float32",
                           "double": "float64", "long": "int64", "int": "int32"}
"""Short names a person types, to the canonical name."""

FLOATS: tuple[str, ...] = ("float32", "float16", "bfloat16")
"""The floating dtypes a DUT is tested in (float64 is the reference's, not the DUT's)."""

LOW_PRECISION: tuple[str, ...] = ("float16", "bfloat16")
"""The reduced-precision floating dtypes (autocast's, and the error-balance standard's)."""

AMP: dict[str, torch.dtype] = {name: BY_NAME[name] for name in LOW_PRECISION}
"""Autocast dtypes by name."""

UPCAST: dict[str, str] = {"float16": "float32", "bfloat16": "float32", "float32": "float64",
                          "float64": "float64"}
"""The reference's dtype per DUT dtype (docs/standards.md: fp16/bf16 -> fp32, fp32 -> fp64)."""

EPS: dict[str, float] = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10,
                         "bfloat16": 2.0**-7}
"""Unit roundoff (2^-p, p the significand's bits after the point) per floating dtype."""


def name(dtype: Optional[torch.dtype]) -> str:
    """``torch.float16`` -> ``"float16"`` (``None`` -> ``"float32"``: no autocast)."""
    if dtype is None:
        return "float32"
    return str(dtype).replace("torch.", "")


def canonical(text: str) -> str:
    """A typed name or alias -> the canonical name (``"bf16"`` -> ``"bfloat16"``), unchecked."""
    key = text.strip().lower()
    return ALIASES.get(key, key)


def parse(text: str, *, allowed: Optional[Iterable[str]] = None, source: str = "dtype"
          ) -> torch.dtype:
    """A typed dtype name -> the dtype; a ``ValueError`` naming the choices otherwise."""
    choices = tuple(allowed) if allowed is not None else tuple(BY_NAME)
    key = canonical(text)
    if key not in choices or key not in BY_NAME:
        raise ValueError(f"{source}: unknown dtype {text!r}; choose from {', '.join(choices)} "
                         f"(aliases: {', '.join(a for a, c in ALIASES.items() if c in choices)})")
    return BY_NAME[key]


def ids(dtype: torch.dtype) -> str:
    """A pytest parametrisation id (``ids=dtypes.ids``)."""
    return name(dtype)

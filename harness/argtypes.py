"""``type=`` functions for argparse (pytest options and the CLI alike).

Each one is named for what it accepts, and its error names the bad value and what is
allowed, so a usage error says how to fix it. Heavy imports (torch, for the model specs)
happen inside the function that needs them.
"""

from __future__ import annotations

import argparse
import math
import re


def non_negative_int(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (``inf`` and ``nan`` are refused: nothing downstream can wait
    or budget forever)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def seconds_up_to(limit: float):
    """A ``type=`` for a timeout: a number of seconds in (0, ``limit``]. A timeout past
    what the waiting code can represent (``threading.TIMEOUT_MAX``, a C ``double`` turned
    into nanoseconds) fails inside the child processes, far from the option."""
    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not 0 < value <= limit:  # nan fails this too
            raise argparse.ArgumentTypeError(f"{text!r} is out of range: give seconds in "
                                             f"(0, {limit:g}]")
        return value

    seconds.__name__ = "seconds"  # argparse's "invalid <name> value" message
    return seconds


DAY = 86400.0


def stack_id(text: str) -> str:
    """A stored stack's id, ``<kind>-<version>`` (``cann-8.0.RC3``)."""
    from harness.stack import split_stack_id

    try:
        split_stack_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def regular_expression(text: str) -> str:
    """A Python regular expression (kept as text; ``re.search`` it later)."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {exc}") from None
    return text


def model_factory(text: str) -> str:
    """A model factory, ``PKG.MOD:FACTORY``."""
    from harness.model.spec import SpecError, check_factory

    try:
        return check_factory(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def model_input(text: str) -> str:
    """``--model-input``'s shapes, ``SHAPE[:DTYPE]`` joined by commas (kept as text)."""
    from harness.model.spec import SpecError, parse_tensor_specs

    try:
        parse_tensor_specs(text, source="--model-input")
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text

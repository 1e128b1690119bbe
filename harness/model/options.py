"""The ``python -m harness model`` options (imports no torch: ``harness.cli`` builds its
parser for every command, ``doctor`` included, which must run where torch is broken)."""

from __future__ import annotations

import argparse

from harness import kinds

OPTIMIZER_NAMES = ("adamw", "sgd")
"""Keys of :data:`harness.model.capture.OPTIMIZERS` (a test keeps the two in step)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``model`` subcommand's options to ``parser``."""
    parser.add_argument("factory", metavar="PKG.MOD:FACTORY",
                        help="The model factory: returns an nn.Module or (module, "
                             "example_inputs[, target])")
    parser.add_argument("--input", default=None, metavar="SHAPE[:DTYPE]",
                        help="Input shape(s), e.g. 8x3x32x32 or 8x3x32x32:float16; commas "
                             "for several inputs. Default: the factory's example inputs")
    parser.add_argument("--target", default=None, metavar="SHAPE[:DTYPE]",
                        help="Loss target: integer class labels (e.g. 8:int64) or a float "
                             "tensor. Default: labels for an (N, C) output, else MSE")
    parser.add_argument("--amp", default=None, metavar="DTYPE",
                        help="Capture under autocast: bf16 or fp16 (fp16 adds a GradScaler). "
                             "Default: off")
    parser.add_argument("--optimizer", default="sgd", choices=OPTIMIZER_NAMES,
                        metavar="NAME", help="Optimizer of the step: %(choices)s. "
                                             "Default: %(default)r")
    parser.add_argument("--device", **kinds.device_option())
    parser.add_argument("--seed", default=0, type=int, metavar="N",
                        help="Seed of weights, inputs and cases. Default: %(default)r")
    parser.add_argument("--compile", action="store_true",
                        help="Also compile the model with the device's graph backend: graphs, "
                             "breaks (reason, your file:line), recompiles, the compiled step "
                             "vs eager (docs/graph.md)")
    parser.add_argument("--no-cases", action="store_true",
                        help="Capture and inventory only; run no case")
    parser.add_argument("--inject-fault", action="append", default=[], metavar="NAME",
                        help="Activate a fault on the DUT side (repeatable). Default: none")
    parser.add_argument("--json", action="store_true", help="Machine-readable output")

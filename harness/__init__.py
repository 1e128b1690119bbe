"""NPU conformance harness: device layer, records, baselines, regressions and faults.

Importing this package imports nothing heavy (no torch, no torch_npu): the CLI's
``doctor`` must be able to explain an environment where ``import torch`` itself fails.
"""

__version__ = "0.1.0"

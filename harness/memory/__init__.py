"""Device-generic memory measurement (moved from harness/memory.py; split in the next commit)."""

from harness.memory.meter import *  # noqa: F401,F403 - the module as it was
from harness.memory.meter import __all__  # noqa: F401

"""The memory family's fixtures; tables and fixtures moved to harness/memory/cases.py (the next
commit leaves only the fixtures here)."""

from harness.memory.cases import *  # noqa: F401,F403 - tables and fixtures as they were

"""Fixtures of the memory family; its data (models, caps, stated ratios) is
:mod:`harness.memory.cases`."""

from __future__ import annotations

import pytest

from harness.memory import cases as memory_cases


@pytest.fixture(scope="session")
def cases(settings) -> dict[str, memory_cases.MemoryModel]:
    return memory_cases.CASES[settings.training_scale]


@pytest.fixture(scope="session")
def thresholds(settings) -> dict[str, memory_cases.ThresholdCase]:
    return memory_cases.THRESHOLDS[settings.training_scale]


@pytest.fixture(scope="session")
def memory_limits(settings) -> memory_cases.MemoryLimits:
    return memory_cases.LIMITS[settings.training_scale]


@pytest.fixture(scope="session")
def memory_cache() -> dict:
    """Measurements shared by several checks of one session (each computed once)."""
    return {}

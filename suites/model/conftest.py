"""Without ``--model`` the model suite has nothing to check: its tests are deselected
(counted as "deselected" in the summary) instead of showing as empty parameter sets; so is
``test_model_compile`` without ``--model-compile``."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    compiled = config.getoption("model_compile", False)
    if config.getoption("model", None):
        mine = [item for item in items if Path(item.path).resolve().parent == HERE
                and item.originalname == "test_model_compile" and not compiled]
    else:
        mine = [item for item in items if Path(item.path).resolve().parent == HERE]
    if mine:
        config.hook.pytest_deselected(items=mine)
        items[:] = [item for item in items if item not in mine]

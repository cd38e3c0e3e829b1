"""Options shared by every test directory: the long soak tests are opt-in (`make soak`).

(The NVIDIA driver's real-GPU checks have their own ``--run-gpu`` switch in
drivers/nvidia/tests/conftest.py; `make gpu-check` passes it.)
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="run the long soak tests (make soak)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="long soak test: run `make soak`")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)

"""Fixtures for the NVIDIA driver tests, and the ``--run-gpu`` switch for real-GPU checks.

Tests marked ``gpu`` need a real NVIDIA GPU and driver. They are skipped unless pytest
runs with ``--run-gpu`` (``make gpu-check`` runs ``pytest -m gpu --run-gpu
drivers/nvidia``); with it they still skip, saying why, where NVML finds no GPU.

Every other test runs the driver on the simulated NVML that ships in the package, over a
fake sysfs/dev tree under ``fake_root``: the only fakes are at the hardware edge.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from devicehost_nvidia import NvidiaDriver, SimNode, SimulatedNvml, default_node
from devicehost_nvidia.simtree import build_tree
from nvidia_helpers import MakeDriver

from devicehost.testing import FakeRoot

RUN_GPU_HINT = (
    "needs a real NVIDIA GPU: run `pytest -m gpu --run-gpu drivers/nvidia` "
    "(make gpu-check) on a GPU node"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-gpu",
        action="store_true",
        default=False,
        help="run the tests marked gpu: they need a real NVIDIA GPU and driver",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The option exists only when this conftest was loaded at start-up (drivers/nvidia on
    # the command line); a run over the whole repository never has it, and skips.
    if config.getoption("run_gpu", default=False):
        return
    skip = pytest.mark.skip(reason=RUN_GPU_HINT)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def make_driver(fake_root: FakeRoot) -> Iterator[MakeDriver]:
    """``make_driver(config=None, node=None, lay_out=True)``: a driver configured on a
    simulated node (default: 8 GPUs) whose files are laid out under ``fake_root`` (unless
    the test laid them out itself); shut down after the test."""
    made: list[NvidiaDriver] = []

    def make(
        config: Mapping[str, Any] | None = None, node: SimNode | None = None, lay_out: bool = True
    ) -> NvidiaDriver:
        node = node or default_node()
        if lay_out:
            build_tree(fake_root.path, node)
        driver = NvidiaDriver(nvml=SimulatedNvml(node))
        driver.devicehost_configure(config=dict(config or {}), root=fake_root.path, simulated=True)
        made.append(driver)
        return driver

    yield make
    for driver in made:
        driver.devicehost_shutdown()

"""Helpers shared by the rdma driver's tests (fixtures live in conftest.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devicehost_rdma.driver import RdmaDriver

from devicehost import Device
from devicehost.testing import FakeRoot

IB_PFS = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5"]
IB_HCAS = [*IB_PFS, "mlx5_8", "mlx5_9"]
ROCE_HCAS = ["mlx5_6", "mlx5_7"]


def configured(
    root: FakeRoot | Path, config: Mapping[str, Any] | None = None, *, simulated: bool = False
) -> RdmaDriver:
    """A driver configured on ``root``, as the host would configure it."""
    driver = RdmaDriver()
    path = root.path if isinstance(root, FakeRoot) else root
    driver.devicehost_configure(config=dict(config or {}), root=path, simulated=simulated)
    return driver


def listed(driver: RdmaDriver, resource: str) -> dict[str, Device]:
    """The devices ``enumerate`` returns, by ID."""
    return {d.id: d for d in driver.devicehost_enumerate(resource=resource)}


def health(driver: RdmaDriver, resource: str) -> dict[str, str]:
    return {i: str(d.health) for i, d in listed(driver, resource).items()}


def exclusive_pool(name: str = "rdma/hca", **selectors: Any) -> dict[str, Any]:
    pool: dict[str, Any] = {"resourceName": name, "mode": "exclusive"}
    if selectors:
        pool["selectors"] = selectors
    return pool


def shared_pool(name: str = "rdma/hca_shared", slots: int = 4, **selectors: Any) -> dict[str, Any]:
    pool: dict[str, Any] = {"resourceName": name, "mode": "shared", "slots": slots}
    if selectors:
        pool["selectors"] = selectors
    return pool

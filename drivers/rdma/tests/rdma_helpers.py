"""Helpers shared by the rdma driver's tests (fixtures live in conftest.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devicehost_rdma.driver import RdmaDriver

from devicehost import ContainerEdits, Device
from devicehost.edits.compose import compose
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


def named(driver: RdmaDriver, resource: str) -> dict[str, Device]:
    """The devices ``enumerate`` returns, an exclusive device keyed by the RDMA device
    name it gives (its ``RDMA_DEVICES`` value; IDs are PCI addresses), a slot by its ID."""
    return {
        d.id if d.id.startswith("slot-") else d.edits.envs.get("RDMA_DEVICES", d.id): d
        for d in driver.devicehost_enumerate(resource=resource)
    }


def health(driver: RdmaDriver, resource: str) -> dict[str, str]:
    """Health by RDMA device name (by slot ID for a shared pool)."""
    return {i: str(d.health) for i, d in named(driver, resource).items()}


def id_of(driver: RdmaDriver, name: str) -> str:
    """The device ID (PCI address) of the HCA named ``name``."""
    return next(h.key for h in driver._hcas() if h.name == name)


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


def composed(driver: RdmaDriver, resource: str, device_ids: list[str]) -> ContainerEdits:
    """What the host would answer Allocate with: the resource's and the devices' edits,
    composed by the host's own code (the driver has no allocate hook)."""
    [spec] = [s for s in driver.devicehost_resources() if s.name == resource]
    return compose(spec, listed(driver, resource), device_ids)


def ids(driver: RdmaDriver, resource: str) -> dict[str, str]:
    """Device ID → the RDMA device name it gives (its RDMA_DEVICES value)."""
    return {i: d.edits.envs.get("RDMA_DEVICES", "") for i, d in listed(driver, resource).items()}

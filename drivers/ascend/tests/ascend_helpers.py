"""Helpers for the Ascend tests: a node opened on the simulated DCMI over a fake tree.

(A uniquely named module rather than conftest.py: test directories of several
distributions share one pytest run.)
"""

from __future__ import annotations

from typing import Any

from devicehost_ascend.config import parse_config
from devicehost_ascend.dcmi_sim import SimChip, SimulatedDcmi
from devicehost_ascend.node import AscendNode, open_node

from devicehost.testing import FakeRoot


def open_simulated(root: FakeRoot, sim: SimulatedDcmi, **config: Any) -> AscendNode:
    """Build ``sim``'s tree under ``root`` and open the node through it, as on hardware."""
    sim.build_tree(root.path)
    return open_node(parse_config(config), root.path, sim)


def chip(phys_id: int, name: str = "910A", numa: int = 0, **kw: Any) -> SimChip:
    return SimChip(
        phys_id=phys_id,
        name=name,
        pci_address=f"0000:{0x10 + phys_id:02x}:00.0",
        numa_node=numa,
        **kw,
    )

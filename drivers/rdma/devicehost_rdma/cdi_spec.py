"""Keep the driver's CDI spec in step with the node's HCAs.

One device per HCA (named after it, e.g. ``devicehost.io/rdma=mlx5_0``) carrying its
character devices; the spec's common edits carry ``rdma_cm``, which every container with
any of these devices needs. The directory is read under ``root``, like every host path,
so the DaemonSet writes the host's ``/var/run/cdi`` through its ``/host`` mount.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from devicehost import Allocation, DeviceNode
from devicehost.cdi import write_spec
from devicehost_rdma.allocation import device_node, hca_nodes
from devicehost_rdma.discovery import RDMA_CM, DevNodes
from devicehost_rdma.hca import Hca

log = logging.getLogger(__name__)

_Key = tuple[tuple[tuple[str, tuple[DeviceNode, ...]], ...], bool]


class CdiSpec:
    """Writes ``<root><dir>/devicehost-<vendor>-<class>.json`` whenever its content changes."""

    def __init__(self, directory: Path, kind: str) -> None:
        self.directory = directory
        self.kind = kind
        self._lock = threading.Lock()
        self._written: _Key | None = None
        self.path: Path | None = None

    def update(self, hcas: Sequence[Hca], nodes: DevNodes) -> None:
        """Rewrite the spec if the HCAs or their present character devices changed.

        HCAs without any are left out: CDI refuses a device with no edits.
        """
        per_hca = [(h.name, hca_nodes(h, nodes)) for h in hcas]
        usable = tuple((name, found) for name, found in per_hca if found)
        key: _Key = (usable, nodes.rdma_cm)
        with self._lock:
            if key == self._written:
                return
            devices = {name: Allocation(devices=found) for name, found in usable}
            common = Allocation(devices=(device_node(RDMA_CM),)) if nodes.rdma_cm else None
            try:
                self.path = write_spec(self.directory, self.kind, devices, common)
            except OSError as exc:
                log.error("cannot write the CDI spec in %s: %s", self.directory, exc)
                return
            self._written = key
            log.info("CDI spec %s lists %d HCAs", self.path, len(devices))

"""Start-up checks: things an operator must fix that no device list would show.

Each finding is one plain sentence that says what is wrong, what it breaks and what to do;
the host shows them in ``devicehost drivers`` / ``devicehost devices`` and logs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from devicehost_rdma.config import RdmaConfig
from devicehost_rdma.discovery import (
    DEV_DIR,
    NETNS_MODE,
    RDMA_CM,
    dev_nodes,
    netns_mode,
)
from devicehost_rdma.hca import Hca
from devicehost_rdma.pools import members, overlaps, unclaimed, why_empty


def _describe(hca: Hca) -> str:
    ids = f"{hca.vendor}:{hca.device_id}" if hca.vendor and hca.device_id else "no PCI IDs"
    return f"{hca.label} [{ids}, {hca.driver or 'no driver'}]"


def pool_notes(config: RdmaConfig, hcas: Sequence[Hca]) -> list[str]:
    """Pools that select nothing (and why), HCAs that two pools hand out, HCAs no pool
    claims."""
    notes = [why_empty(pool, hcas) for pool in config.pools if not members(pool, hcas)]
    left = unclaimed(config.pools, hcas)
    if left:
        notes.append(
            f"RDMA devices no pool claims, served to no pod: {', '.join(map(_describe, left))}; "
            "add a pool whose selectors match them if workloads should get them"
        )
    for name, resources in overlaps(config.pools, hcas).items():
        notes.append(
            f"{name} is in pools {', '.join(resources)}: it can be given to two pods "
            "at once; narrow the selectors so the pools do not overlap"
        )
    return notes


def netns_note(root: Path, config: RdmaConfig) -> list[str]:
    """A shared pool cannot work while the kernel keeps each RDMA device in one namespace."""
    shared = [p.resource_name for p in config.pools if p.shared]
    if not shared or netns_mode(root) != "exclusive":
        return []
    return [
        f"RDMA namespace mode is exclusive (/{NETNS_MODE} is N): shared pools "
        f"{', '.join(shared)} are unusable, because each RDMA device is visible in one "
        "network namespace only and pods run in their own, so their slots are advertised "
        "Unhealthy; run `rdma system set netns shared` or load ib_core with netns_mode=1"
    ]


def char_device_notes(root: Path, config: RdmaConfig, hcas: Sequence[Hca]) -> list[str]:
    """Character devices a container given these HCAs would need but the node lacks."""
    used = {h.name: h for pool in config.pools for h in members(pool, hcas) if not h.away}
    notes = []
    no_verbs = [
        name for name, h in used.items() if not any(c.startswith("uverbs") for c in h.char_devices)
    ]
    if no_verbs:
        notes.append(
            f"no uverbs device for {', '.join(no_verbs)} in "
            "/sys/class/infiniband_verbs: containers given them cannot use verbs; "
            "load ib_uverbs"
        )
    nodes = dev_nodes(root)
    missing = [c for h in used.values() for c in h.char_devices if not nodes.present(c)]
    if nodes.rdma_cm_loaded and not nodes.present(RDMA_CM):
        missing.append(RDMA_CM)
    if missing:
        notes.append(
            f"character devices missing under {DEV_DIR}: {', '.join(missing)}; containers "
            "get their HCAs without them: load ib_uverbs/ib_umad/rdma_ucm, or if they exist "
            f"on the host, mount its /dev at {root / 'dev'}"
        )
    if used and not nodes.rdma_cm_loaded:
        notes.append(
            f"{DEV_DIR}/{RDMA_CM} is absent (rdma_ucm not loaded): containers get no "
            "RDMA connection manager, so librdmacm connections fail; load rdma_ucm"
        )
    return notes


def startup_notes(root: Path, config: RdmaConfig, hcas: Sequence[Hca]) -> list[str]:
    """Every start-up finding, in the order an operator would fix them."""
    return [
        *netns_note(root, config),
        *char_device_notes(root, config, hcas),
        *pool_notes(config, hcas),
    ]

"""Which HCAs belong to a pool, which of their ports it uses, and why a pool got none.

A pool's selectors are ANDed, each selector's values ORed. ``linkTypes`` also decides
which *ports* a pool uses: a pool of InfiniBand HCAs judges a mixed-port HCA by its
InfiniBand ports only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from devicehost_rdma.config import Pool, Selectors
from devicehost_rdma.hca import Hca, Port, link_layer_key

#: Per selector key: the values an HCA offers for it (any one listed value matches).
_OFFERS: dict[str, Callable[[Hca], tuple[str, ...]]] = {
    "vendors": lambda h: (h.vendor,) if h.vendor else (),
    "deviceIDs": lambda h: (h.device_id,) if h.device_id else (),
    "drivers": lambda h: (h.driver,) if h.driver else (),
    "ifNames": lambda h: h.netdevs,
    # The SR-IOV network device plugin's pfNames (README, "Config parameters"): a VF by
    # its PF's interface, which stays on the host when the VF's own netdev moves into a
    # pod, so a VF pool keeps every VF at a start where some are already inside pods.
    "pfNames": lambda h: h.pf_netdevs if h.is_vf else h.netdevs,
    "linkTypes": lambda h: h.link_layers,
    "pciAddresses": lambda h: (h.pci_address,) if h.pci_address else (),
    "functionTypes": lambda h: ("vf",) if h.is_vf else ("pf",),
}


def selector_matches(key: str, values: Sequence[str], hca: Hca) -> bool:
    return any(offer in values for offer in _OFFERS[key](hca))


def matches(selectors: Selectors, hca: Hca) -> bool:
    """True when ``hca`` passes every selector given (no selectors: every HCA)."""
    return all(selector_matches(key, values, hca) for key, values in selectors.given())


def members(pool: Pool, hcas: Sequence[Hca]) -> list[Hca]:
    """The HCAs of ``pool`` among ``hcas``, in the order given."""
    return [hca for hca in hcas if matches(pool.selectors, hca)]


def used_ports(pool: Pool, hca: Hca) -> tuple[Port, ...]:
    """The ports of ``hca`` that ``pool`` uses: those of its link types, or all."""
    wanted = pool.selectors.link_types
    if not wanted:
        return hca.ports
    return tuple(p for p in hca.ports if link_layer_key(p.link_layer) in wanted)


def why_empty(pool: Pool, hcas: Sequence[Hca]) -> str:
    """An operator-facing explanation of why ``pool`` selected no HCA."""
    if not hcas:
        return f"pool {pool.resource_name!r} advertises nothing: this node has no HCA"
    parts = []
    for key, values in pool.selectors.given():
        passing = sum(selector_matches(key, values, h) for h in hcas)
        offered = sorted({v for h in hcas for v in _OFFERS[key](h)})
        parts.append(
            f"{key} {list(values)} matches {passing} "
            f"(this node has: {', '.join(offered) or 'none'})"
        )
    return (
        f"pool {pool.resource_name!r} advertises nothing: none of the {len(hcas)} HCAs "
        f"matches every selector; " + "; ".join(parts)
    )


def unclaimed(pools: Sequence[Pool], hcas: Sequence[Hca]) -> list[Hca]:
    """The HCAs no pool selects: served to nobody, which an operator should know (a
    management NIC left out on purpose, or a pool whose selectors miss a card)."""
    return [hca for hca in hcas if not any(matches(p.selectors, hca) for p in pools)]


def overlaps(pools: Sequence[Pool], hcas: Sequence[Hca]) -> dict[str, list[str]]:
    """HCA label → the resources of every pool it is in, for HCAs in more than one pool.

    Such an HCA can be handed to two pods at once (say, exclusively to one and through a
    shared slot to another); the driver allows it but says so.
    """
    found: dict[str, list[str]] = {}
    for hca in hcas:
        names = [p.resource_name for p in pools if matches(p.selectors, hca)]
        if len(names) > 1:
            found[hca.label] = names
    return found

"""Node feature labels describing the node's RDMA hardware, in the shared vocabulary.

The host writes each as ``devicehost.feature.node.kubernetes.io/rdma.<key>=<value>`` in a
node-feature-discovery local feature file. Keys: ``present``, ``count`` (every RDMA
device, including one inside a pod's namespace), ``product`` and ``firmware-version`` (of
the most common product), ``vendor`` (its PCI vendor ID), ``link-layer`` (``InfiniBand``,
``Ethernet`` or ``mixed``), ``infiniband.count`` / ``ethernet.count``, ``netns-mode``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from devicehost_rdma.hca import Hca

#: Product names by PCI ``vendor:device``, transcribed from the PCI ID Repository
#: (pci.ids, https://pci-ids.ucw.cz, vendors 15b3 and 8086), shortened to the family name.
PRODUCTS = {
    "15b3:1017": "ConnectX-5",
    "15b3:1018": "ConnectX-5-VF",
    "15b3:1019": "ConnectX-5-Ex",
    "15b3:101b": "ConnectX-6",
    "15b3:101c": "ConnectX-6-VF",
    "15b3:101d": "ConnectX-6-Dx",
    "15b3:101e": "ConnectX-VF",
    "15b3:101f": "ConnectX-6-Lx",
    "15b3:1021": "ConnectX-7",
    "15b3:1023": "ConnectX-8",
    "15b3:a2d6": "BlueField-2",
    "15b3:a2dc": "BlueField-3",
    "8086:1592": "E810-C-QSFP",
    "8086:1593": "E810-C-SFP",
    "8086:159b": "E810-XXV-SFP",
}

_LINK_LAYER_NAMES = {"infiniband": "InfiniBand", "ethernet": "Ethernet"}
_BAD_VALUE = re.compile(r"[^A-Za-z0-9._-]+")


def product(hca: Hca) -> str:
    """``ConnectX-7``; an unknown device as ``<vendor>-<device>``."""
    key = f"{hca.vendor}:{hca.device_id}"
    return PRODUCTS.get(key, f"{hca.vendor or 'unknown'}-{hca.device_id or 'unknown'}")


def _value(text: str) -> str:
    return _BAD_VALUE.sub("-", text).strip("-._")[:63]


def node_labels(hcas: Sequence[Hca], netns_mode: str | None) -> dict[str, str]:
    """The labels for ``hcas`` (every RDMA device of the node); empty when there is none."""
    if not hcas:
        return {}
    labels = {"present": "true", "count": str(len(hcas))}
    by_product = Counter(product(h) for h in hcas)
    top = max(by_product, key=lambda name: (by_product[name], name))
    labels["product"] = _value(top)
    first = next(h for h in hcas if product(h) == top)
    if first.vendor:
        labels["vendor"] = first.vendor
    firmware = Counter(h.fw_ver for h in hcas if product(h) == top and h.fw_ver)
    if firmware:
        labels["firmware-version"] = _value(firmware.most_common(1)[0][0])
    layers = Counter(layer for h in hcas for layer in h.link_layers[:1])
    for layer, count in sorted(layers.items()):
        labels[f"{layer}.count"] = str(count)
    if len(layers) == 1:
        only = next(iter(layers))
        labels["link-layer"] = _LINK_LAYER_NAMES.get(only, _value(only))
    elif layers:
        labels["link-layer"] = "mixed"
    if netns_mode:
        labels["netns-mode"] = netns_mode
    return labels

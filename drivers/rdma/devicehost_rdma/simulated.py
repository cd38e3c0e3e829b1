"""Simulated RDMA hardware: fake sysfs and /dev trees laid out as the kernel lays them out.

The driver reads nothing but sysfs and /dev, so simulating a node means writing those
files; the driver then runs exactly the code it runs on hardware. Tests and
``devicehost demo`` share these builders::

    node = SimulatedNode(fake_root)
    bus = node.pcie_switch("pci0000:4a", "0000:4a:00.0", "0000:4b:00.0", "0000:4c:00.0")
    mlx5_0 = node.hca("0000:4d:00.0", bus=bus, numa_node=0)
    set_link(fake_root.path, mlx5_0, up=False)       # pull the cable

Layout written for each HCA (``<fn>`` = ``/sys/devices/<bus>/<address>``)::

    <fn>/{vendor,device,class,numa_node,driver→}, <fn>/physfn→ (a VF), <fn>/virtfnN→ (a PF)
    <fn>/infiniband/<ibdev>/{device→<fn>, node_type, ports/<n>/{state,phys_state,link_layer}}
    <fn>/infiniband_verbs/uverbsN/ibdev, <fn>/infiniband_mad/{umadN,issmN}/{ibdev,port}
    <fn>/net/<ifname>/{operstate,type,dev_port}
    /sys/class/{infiniband,infiniband_verbs,infiniband_mad,net}/… → links into <fn>
    /dev/infiniband/{uverbsN,umadN,issmN,rdma_cm}, /sys/class/misc/rdma_cm
    /sys/module/ib_core/parameters/netns_mode
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from devicehost.testing import FakeRoot
from devicehost_rdma.discovery import INFINIBAND_CLASS, NETNS_MODE

MELLANOX = "0x15b3"
CONNECTX5, CONNECTX5_VF = "0x1017", "0x1018"
CONNECTX6, CONNECTX6_VF = "0x101b", "0x101c"
MLX5_DRIVER = "mlx5_core"
BRIDGE_CLASS = "0x060400"
INFINIBAND_CLASS_CODE = "0x020700"
ETHERNET_CLASS_CODE = "0x020000"
INFINIBAND = "InfiniBand"
ETHERNET = "Ethernet"

PORT_UP = ("4: ACTIVE", "5: LinkUp")
#: What a port shows with its cable pulled: down, physically polling for a peer.
PORT_DOWN = ("1: DOWN", "2: Polling")


class SimulatedNode:
    """Adds PCIe bridges, HCAs and SR-IOV VFs to a fake root, numbering char devices as
    the kernel does (one uverbs per HCA, one umad and one issm per port)."""

    def __init__(
        self, root: FakeRoot | Path | str, *, netns_mode: str = "Y", rdma_cm: bool = True
    ) -> None:
        self.fake = root if isinstance(root, FakeRoot) else FakeRoot(root)
        self._uverbs = 0
        self._umad = 0
        self._ibdevs = 0
        self._vfs: dict[str, int] = {}
        self._bridges: set[str] = set()
        self.fake.write(f"/{NETNS_MODE}", netns_mode)
        for cls in ("infiniband_verbs", "infiniband_mad"):
            self.fake.write(f"/sys/class/{cls}/abi_version", "6" if "verbs" in cls else "5")
        self.fake.mkdir(f"/{INFINIBAND_CLASS}")
        self.fake.mkdir("/dev/infiniband")
        if rdma_cm:
            self.fake.write("/sys/devices/virtual/misc/rdma_cm/dev", "10:58")
            self.fake.symlink("/sys/class/misc/rdma_cm", "/sys/devices/virtual/misc/rdma_cm")
            self.fake.char_device("/dev/infiniband/rdma_cm")

    # -- PCIe ---------------------------------------------------------------------------

    def bridge(
        self,
        address: str,
        bus: str,
        *,
        vendor: str = "0x10b5",
        device: str = "0x8747",
        numa_node: int = -1,
    ) -> str:
        """A PCIe bridge (root port or switch port); returns the bus path below it."""
        if address in self._bridges:
            return f"{bus}/{address}"
        self._bridges.add(address)
        self.fake.pci_device(
            address,
            vendor=vendor,
            device=device,
            numa_node=numa_node,
            device_class=BRIDGE_CLASS,
            bus=bus,
        )
        return f"{bus}/{address}"

    def pcie_switch(
        self,
        root_complex: str,
        root_port: str,
        upstream: str,
        downstream: str,
        *,
        numa_node: int = -1,
    ) -> str:
        """Root port → switch upstream port → one downstream port; returns its bus path."""
        bus = self.bridge(
            root_port, root_complex, vendor="0x8086", device="0x2030", numa_node=numa_node
        )
        bus = self.bridge(upstream, bus, numa_node=numa_node)
        return self.bridge(downstream, bus, numa_node=numa_node)

    # -- HCAs -----------------------------------------------------------------------------

    def hca(
        self,
        address: str,
        *,
        bus: str = "pci0000:00",
        numa_node: int = -1,
        device: str = CONNECTX6,
        link_layer: str = INFINIBAND,
        ports: int = 1,
        ifnames: Sequence[str] | None = None,
        physfn: str | None = None,
        driver: str = MLX5_DRIVER,
        char_devices: bool = True,
    ) -> str:
        """Add one RDMA device on its own PCI function; returns its name (``mlx5_N``).

        ``physfn``: the PF's PCI address, making this function one of its SR-IOV VFs.
        """
        name = f"mlx5_{self._ibdevs}"
        self._ibdevs += 1
        code = INFINIBAND_CLASS_CODE if link_layer == INFINIBAND else ETHERNET_CLASS_CODE
        fn = self.fake.pci_device(
            address,
            vendor=MELLANOX,
            device=device,
            numa_node=numa_node,
            driver=driver,
            device_class=code,
            bus=bus,
        )
        if physfn is not None:
            self._add_vf_links(fn, physfn)
        ib = f"{fn}/infiniband/{name}"
        self.fake.symlink(f"{ib}/device", fn)
        self.fake.write(f"{ib}/node_type", "1: CA")
        self.fake.symlink(f"/{INFINIBAND_CLASS}/{name}", ib)
        for port in range(1, ports + 1):
            self.fake.write(f"{ib}/ports/{port}/state", PORT_UP[0])
            self.fake.write(f"{ib}/ports/{port}/phys_state", PORT_UP[1])
            self.fake.write(f"{ib}/ports/{port}/link_layer", link_layer)
        if char_devices:
            self._char_devices(fn, name, ports)
        for index, ifname in enumerate(ifnames or ()):
            self._netdev(fn, ifname, index, link_layer)
        return name

    def _add_vf_links(self, fn: str, physfn: str) -> None:
        pf = self.fake.at(f"/sys/bus/pci/devices/{physfn}").resolve()
        pf_rel = "/" + str(pf.relative_to(self.fake.path.resolve()))
        index = self._vfs.get(physfn, 0)
        self._vfs[physfn] = index + 1
        self.fake.symlink(f"{fn}/physfn", pf_rel)
        self.fake.symlink(f"{pf_rel}/virtfn{index}", fn)
        self.fake.write(f"{pf_rel}/sriov_numvfs", str(index + 1))

    def _char_devices(self, fn: str, name: str, ports: int) -> None:
        uverbs = f"uverbs{self._uverbs}"
        self._uverbs += 1
        self.fake.write(f"{fn}/infiniband_verbs/{uverbs}/ibdev", name)
        self.fake.symlink(
            f"/sys/class/infiniband_verbs/{uverbs}", f"{fn}/infiniband_verbs/{uverbs}"
        )
        self.fake.char_device(f"/dev/infiniband/{uverbs}")
        for port in range(1, ports + 1):
            for prefix in ("umad", "issm"):
                mad = f"{prefix}{self._umad}"
                self.fake.write(f"{fn}/infiniband_mad/{mad}/ibdev", name)
                self.fake.write(f"{fn}/infiniband_mad/{mad}/port", str(port))
                self.fake.symlink(f"/sys/class/infiniband_mad/{mad}", f"{fn}/infiniband_mad/{mad}")
                self.fake.char_device(f"/dev/infiniband/{mad}")
            self._umad += 1

    def _netdev(self, fn: str, ifname: str, index: int, link_layer: str) -> None:
        net = f"{fn}/net/{ifname}"
        self.fake.write(f"{net}/operstate", "up")
        self.fake.write(f"{net}/type", "32" if link_layer == INFINIBAND else "1")
        self.fake.write(f"{net}/dev_port", str(index))
        self.fake.symlink(f"/sys/class/net/{ifname}", net)


def set_link(root: Path, ibdev: str, *, up: bool, port: int | None = None) -> bool:
    """Bring a port of ``ibdev`` (every port when ``port`` is None) up or down, as a cable
    plugged in or pulled would; also the netdevs' ``operstate``. False if no such HCA."""
    ports_dir = root / INFINIBAND_CLASS / ibdev / "ports"
    if not ports_dir.is_dir():
        return False
    state, phys_state = PORT_UP if up else PORT_DOWN
    for entry in sorted(ports_dir.iterdir()):
        if port is None or entry.name == str(port):
            (entry / "state").write_text(state + "\n")
            (entry / "phys_state").write_text(phys_state + "\n")
    net = root / INFINIBAND_CLASS / ibdev / "device" / "net"
    if net.is_dir():
        for ifdir in net.iterdir():
            (ifdir / "operstate").write_text(("up" if up else "down") + "\n")
    return True


# -- scenarios ---------------------------------------------------------------------------


def two_port_hca(
    root: FakeRoot | Path | str,
    *,
    link_layer: str = INFINIBAND,
    device: str = CONNECTX6,
    numa_node: int = 0,
) -> list[str]:
    """One dual-port ConnectX-style card: two PCI functions (``.0``, ``.1``) behind one
    bridge, one RDMA device and one netdev each. Returns the two HCA names."""
    node = SimulatedNode(root)
    bus = node.pcie_switch(
        "pci0000:3a", "0000:3a:00.0", "0000:3b:00.0", "0000:3c:00.0", numa_node=numa_node
    )
    prefix = "ib" if link_layer == INFINIBAND else "ens1f"
    return [
        node.hca(
            f"0000:3d:00.{fn}",
            bus=bus,
            numa_node=numa_node,
            device=device,
            link_layer=link_layer,
            ifnames=[f"{prefix}{fn}"],
        )
        for fn in (0, 1)
    ]


def eight_hca_node(root: FakeRoot | Path | str, *, netns_mode: str = "Y") -> SimulatedNode:
    """A GPU-server layout: eight HCAs over two NUMA nodes, each HCA behind its own
    downstream port of a PCIe switch that holds two of them.

    ============  ========  ==============  =================  ============================
    HCA           NUMA      switch (root)   link layer         what
    ============  ========  ==============  =================  ============================
    mlx5_0, _1    0         pci0000:4a      InfiniBand         ConnectX-6 (0x101b)
    mlx5_2, _3    0         pci0000:6a      InfiniBand         ConnectX-6
    mlx5_4, _5    1         pci0000:aa      InfiniBand         ConnectX-6
    mlx5_6, _7    1         pci0000:da      Ethernet (RoCE)    dual-port ConnectX-5 (0x1017)
    mlx5_8, _9    1         pci0000:aa      InfiniBand         SR-IOV VFs of mlx5_4 (0x101c)
    ============  ========  ==============  =================  ============================
    """
    node = SimulatedNode(root, netns_mode=netns_mode)
    # Bus numbers 4a-4e, 6a-6e, aa-ae and da-dd stay clear of the PCI addresses the other
    # drivers' simulated nodes use: ``devicehost demo`` builds them all under one root.
    layout = (("4a", 0), ("6a", 0), ("aa", 1))
    buses: list[str] = []
    for rc, numa in layout:
        bus = int(rc, 16)
        for slot in range(2):
            down = node.pcie_switch(
                f"pci0000:{rc}",
                f"0000:{rc}:00.0",
                f"0000:{bus + 1:02x}:00.0",
                f"0000:{bus + 2:02x}:{slot * 4:02x}.0",
                numa_node=numa,
            )
            node.hca(
                f"0000:{bus + 3 + slot:02x}:00.0",
                bus=down,
                numa_node=numa,
                device=CONNECTX6,
                ifnames=[f"ib{len(buses)}"],
            )
            buses.append(down)
    roce = node.pcie_switch(
        "pci0000:da", "0000:da:00.0", "0000:db:00.0", "0000:dc:00.0", numa_node=1
    )
    for fn in (0, 1):
        node.hca(
            f"0000:dd:00.{fn}",
            bus=roce,
            numa_node=1,
            device=CONNECTX5,
            link_layer=ETHERNET,
            ifnames=[f"ens2f{fn}np{fn}"],
        )
    for fn in (1, 2):  # VFs sit beside their PF (mlx5_4, 0000:ad:00.0), below its port
        node.hca(
            f"0000:ad:00.{fn}",
            bus=buses[4],
            numa_node=1,
            device=CONNECTX6_VF,
            physfn="0000:ad:00.0",
            ifnames=[f"ib4v{fn - 1}"],
        )
    return node


def sriov_hca(
    root: FakeRoot | Path | str, *, vfs: int = 4, link_layer: str = ETHERNET, numa_node: int = 0
) -> list[str]:
    """One ConnectX-5 PF with ``vfs`` SR-IOV VFs, each its own RDMA device. Returns the
    names, PF first."""
    node = SimulatedNode(root)
    bus = node.pcie_switch(
        "pci0000:5d", "0000:5d:00.0", "0000:5e:00.0", "0000:5f:00.0", numa_node=numa_node
    )
    names = [
        node.hca(
            "0000:60:00.0",
            bus=bus,
            numa_node=numa_node,
            device=CONNECTX5,
            link_layer=link_layer,
            ifnames=["ens3f0"],
        )
    ]
    for vf in range(vfs):
        fn = vf + 2  # VFs start after the PF's functions, as mlx5 lays them out
        names.append(
            node.hca(
                f"0000:60:{fn // 8:02x}.{fn % 8}",
                bus=bus,
                numa_node=numa_node,
                device=CONNECTX5_VF,
                link_layer=link_layer,
                physfn="0000:60:00.0",
                ifnames=[f"ens3f0v{vf}"],
            )
        )
    return names


def build_default_node(root: FakeRoot | Path | str) -> SimulatedNode:
    """What ``devicehost demo`` and ``run --simulate`` serve: ``eight_hca_node``."""
    return eight_hca_node(root)

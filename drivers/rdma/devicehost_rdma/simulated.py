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
    <fn>/mlx5_core.rdma.N/driver→  (the auxiliary device mlx5_ib binds; ice.roce.N for irdma)
    <fn>/infiniband/<ibdev>/{device→<fn>, node_type, fw_ver,
                             ports/<n>/{state,phys_state,link_layer}}
      (irdma: <fn>/ice.roce.N/infiniband/<ibdev>, device→ the auxiliary device)
    <fn>/infiniband_verbs/uverbsN/ibdev, <fn>/infiniband_mad/{umadN,issmN}/{ibdev,port}
    <fn>/net/<ifname>/{operstate,type,dev_port}
    /sys/class/{infiniband,infiniband_verbs,infiniband_mad,net}/… → links into <fn>
    /sys/bus/auxiliary/devices/<aux> → links to the auxiliary devices
    /dev/infiniband/{uverbsN,umadN,issmN,rdma_cm}, /sys/class/misc/rdma_cm
    /sys/module/ib_core/parameters/netns_mode
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devicehost.testing import FakeRoot
from devicehost_rdma.discovery import INFINIBAND_CLASS, NETNS_MODE

MELLANOX = "0x15b3"
INTEL = "0x8086"
CONNECTX5, CONNECTX5_VF = "0x1017", "0x1018"
CONNECTX6, CONNECTX6_VF = "0x101b", "0x101c"
CONNECTX7 = "0x1021"
E810_XXV = "0x159b"
MLX5_DRIVER = "mlx5_core"
#: (PCI driver, its auxiliary RDMA device's prefix, the RDMA driver bound to it, the
#: kernel's RDMA device name prefix): mlx5_core/mlx5_ib name devices mlx5_N; irdma,
#: bound to the ice driver's auxiliary device, names them irdmaN.
MLX5 = ("mlx5_core", "mlx5_core.rdma", "mlx5_ib.rdma", "mlx5_")
IRDMA = ("ice", "ice.roce", "irdma", "irdma")
#: fw_ver of a ConnectX-7 on a current firmware line (28.x is ConnectX-7's).
CX7_FIRMWARE = "28.39.1002"
BRIDGE_CLASS = "0x060400"
INFINIBAND_CLASS_CODE = "0x020700"
ETHERNET_CLASS_CODE = "0x020000"
INFINIBAND = "InfiniBand"
ETHERNET = "Ethernet"

_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

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
        self._ibdevs: dict[str, int] = {}
        self._aux: dict[str, int] = {}
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
        vendor: str = MELLANOX,
        stack: tuple[str, str, str, str] = MLX5,
        name: str | None = None,
        fw_ver: str | None = None,
    ) -> str:
        """Add one RDMA device on its own PCI function; returns its name (``mlx5_N``).

        ``physfn``: the PF's PCI address, making this function one of its SR-IOV VFs.
        ``stack``: which driver stack (``MLX5`` or ``IRDMA``) lays out the RDMA device.
        ``name``: the RDMA device's name, if not the kernel's next one.
        """
        _, aux_prefix, rdma_driver, name_prefix = stack
        if name is None:
            index = self._ibdevs.get(name_prefix, 0)
            self._ibdevs[name_prefix] = index + 1
            name = f"{name_prefix}{index}"
        code = INFINIBAND_CLASS_CODE if link_layer == INFINIBAND else ETHERNET_CLASS_CODE
        fn = self.fake.pci_device(
            address,
            vendor=vendor,
            device=device,
            numa_node=numa_node,
            driver=driver,
            device_class=code,
            bus=bus,
        )
        if physfn is not None:
            self._add_vf_links(fn, physfn)
        aux_index = self._aux.get(aux_prefix, 0)
        self._aux[aux_prefix] = aux_index + 1
        aux = f"{fn}/{aux_prefix}.{aux_index}"
        self.fake.mkdir(f"/sys/bus/auxiliary/drivers/{rdma_driver}")
        self.fake.symlink(f"{aux}/driver", f"/sys/bus/auxiliary/drivers/{rdma_driver}")
        self.fake.symlink(f"/sys/bus/auxiliary/devices/{aux_prefix}.{aux_index}", aux)
        # mlx5_ib parents its RDMA device on the PCI function; irdma on the aux device.
        parent = fn if stack is MLX5 else aux
        ib = f"{parent}/infiniband/{name}"
        self.fake.symlink(f"{ib}/device", parent)
        self.fake.write(f"{ib}/node_type", "1: CA")
        if fw_ver:
            self.fake.write(f"{ib}/fw_ver", fw_ver)
        self.fake.symlink(f"/{INFINIBAND_CLASS}/{name}", ib)
        for port in range(1, ports + 1):
            self.fake.write(f"{ib}/ports/{port}/state", PORT_UP[0])
            self.fake.write(f"{ib}/ports/{port}/phys_state", PORT_UP[1])
            self.fake.write(f"{ib}/ports/{port}/link_layer", link_layer)
        if char_devices:
            self._char_devices(parent, name, ports)
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


def _ibdev_dir(fake: FakeRoot, ibdev: str) -> tuple[str, str]:
    """(the RDMA device's root-relative real directory, its parent device's)."""
    real = fake.at(f"/{INFINIBAND_CLASS}/{ibdev}").resolve(strict=True)
    rel = "/" + str(real.relative_to(fake.path.resolve()))
    return rel, rel.rsplit("/infiniband/", 1)[0]


def _class_entries(fake: FakeRoot, parent: str, ibdev: str) -> list[str]:
    """The verbs/mad class entries (``uverbs3``, ``umad3``…) of ``ibdev`` under ``parent``."""
    found = []
    for cls in ("infiniband_verbs", "infiniband_mad"):
        directory = fake.at(f"{parent}/{cls}")
        for entry in sorted(directory.iterdir()) if directory.is_dir() else []:
            ibdev_file = entry / "ibdev"
            if ibdev_file.is_file() and ibdev_file.read_text().strip() == ibdev:
                found.append(f"{cls}/{entry.name}")
    return found


def move_to_pod_netns(root: FakeRoot | Path, ibdev: str) -> None:
    """What the host's sysfs shows after RDMA CNI moves ``ibdev`` into a pod's network
    namespace in exclusive mode (``rdma dev set <dev> netns <ns>``): the RDMA device and
    its verbs/mad class entries leave the host's view, and so does the netdev, which
    SR-IOV CNI moves alongside; the PCI function and its auxiliary device stay."""
    fake = root if isinstance(root, FakeRoot) else FakeRoot(root)
    rel, parent = _ibdev_dir(fake, ibdev)
    for entry in _class_entries(fake, parent, ibdev):
        fake.remove(f"/sys/class/{entry}")
        fake.remove(f"{parent}/{entry}")
    pci_function = (
        parent if _PCI_ADDRESS.match(parent.rsplit("/", 1)[-1]) else parent.rsplit("/", 1)[0]
    )
    net = fake.at(f"{pci_function}/net")
    for ifdir in sorted(net.iterdir()) if net.is_dir() else []:
        fake.remove(f"/sys/class/net/{ifdir.name}")
        fake.remove(f"{pci_function}/net/{ifdir.name}")
    fake.remove(f"/{INFINIBAND_CLASS}/{ibdev}")
    fake.remove(rel)


def rename_ibdev(root: FakeRoot | Path, old: str, new: str) -> None:
    """Give an RDMA device another kernel name, as when its VF is destroyed and
    re-created (``sriov_numvfs`` 0 then N) and the kernel numbers it afresh."""
    fake = root if isinstance(root, FakeRoot) else FakeRoot(root)
    rel, parent = _ibdev_dir(fake, old)
    for entry in _class_entries(fake, parent, old):
        fake.write(f"{parent}/{entry}/ibdev", new)
    new_rel = f"{parent}/infiniband/{new}"
    fake.at(rel).rename(fake.at(new_rel))
    fake.remove(f"/{INFINIBAND_CLASS}/{old}")
    fake.symlink(f"/{INFINIBAND_CLASS}/{new}", new_rel)


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
    root: FakeRoot | Path | str,
    *,
    vfs: int = 4,
    link_layer: str = ETHERNET,
    numa_node: int = 0,
    netns_mode: str = "Y",
) -> list[str]:
    """One ConnectX-5 PF with ``vfs`` SR-IOV VFs, each its own RDMA device. Returns the
    names, PF first."""
    node = SimulatedNode(root, netns_mode=netns_mode)
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


#: The eight compute NICs of an NVIDIA DGX H100: (RDMA device, netdev, PCI address, NUMA
#: node / CPU, GPU whose PCIe switch it sits behind). Transcribed from the NVIDIA DGX
#: H100/H200 User Guide, "Network Ports" / Table 6 "Network Modules" (port, ConnectX,
#: CPU, GPU, default netdev ``ibp<bus>s0``, RDMA device); the netdev names give the PCI
#: buses, which the NVIDIA DGX BasePOD Deployment Guide lists too (its SR-IOV section
#: queries ``mlxconfig -d <bus>:00.0`` for buses dc 9a ce c0 4f 40 5e 18).
DGX_H100_COMPUTE = (
    ("mlx5_0", "ibp24s0", "0000:18:00.0", 0, 0),
    ("mlx5_3", "ibp64s0", "0000:40:00.0", 0, 1),
    ("mlx5_4", "ibp79s0", "0000:4f:00.0", 0, 2),
    ("mlx5_5", "ibp94s0", "0000:5e:00.0", 0, 3),
    ("mlx5_6", "ibp154s0", "0000:9a:00.0", 1, 4),
    ("mlx5_9", "ibp192s0", "0000:c0:00.0", 1, 5),
    ("mlx5_10", "ibp206s0", "0000:ce:00.0", 1, 6),
    ("mlx5_11", "ibp220s0", "0000:dc:00.0", 1, 7),
)
#: The two dual-port ConnectX-7 storage/in-band cards (slot 1 on CPU 0, slot 2 on CPU 1),
#: one PCI function and RDMA device per port, set to Ethernet as the DGX BasePOD guide
#: configures them. Their RDMA names are the four the user guide's table leaves between
#: the compute NICs (mlx5 numbers devices in PCI order); the buses 0x29 and 0xaa are
#: those of DGX OS's ``enp41s0f*np*`` / ``enp170s0f*np*`` interface names.
DGX_H100_STORAGE = (
    ("mlx5_1", "enp41s0f0np0", "0000:29:00.0", 0),
    ("mlx5_2", "enp41s0f1np1", "0000:29:00.1", 0),
    ("mlx5_7", "enp170s0f0np0", "0000:aa:00.0", 1),
    ("mlx5_8", "enp170s0f1np1", "0000:aa:00.1", 1),
)
#: A dual-port Intel E810-XXV as the management NIC, served by irdma (RDMA devices
#: irdma0/irdma1). Its slot and bus are this simulation's choice, not a published layout.
DGX_H100_MANAGEMENT = (("eno1", "0000:08:00.0"), ("eno2", "0000:08:00.1"))
#: A ConnectX-7 VF's PCI device ID ("ConnectX Family mlx5Gen Virtual Function", pci.ids).
CONNECTX_VF = "0x101e"


def dgx_h100(
    root: FakeRoot | Path | str, *, netns_mode: str = "Y", vfs_per_compute_nic: int = 0
) -> SimulatedNode:
    """The RDMA part of an NVIDIA DGX H100: eight single-port ConnectX-7 400G InfiniBand
    compute NICs, each behind the PCIe switch of one GPU (see ``DGX_H100_COMPUTE``), two
    dual-port ConnectX-7 storage NICs on Ethernet (RoCE), and an Intel E810 management
    NIC whose irdma devices no default pool may take.

    The PCIe bridges above each device are modelled (root port → switch upstream port →
    downstream port for a GPU's switch; a root port for a slot card) with bus numbers
    just below the device's; real bridge addresses differ, the grouping is what counts.
    ``vfs_per_compute_nic``: SR-IOV VFs per compute NIC (the BasePOD guide sets 8), each
    its own RDMA device, named after the PFs (``mlx5_12`` on).
    """
    node = SimulatedNode(root, netns_mode=netns_mode)
    # Devices are added in PCI order, as the kernel probes them, so uverbsN/umadN are
    # numbered as on the machine.
    devices: dict[str, dict[str, Any]] = {}
    vf_names = iter(range(len(DGX_H100_COMPUTE) + len(DGX_H100_STORAGE), 1000))
    for name, ifname, address, numa, _gpu in DGX_H100_COMPUTE:
        bus = int(address[5:7], 16)
        down = node.pcie_switch(
            f"pci0000:{bus - 3:02x}",
            f"0000:{bus - 3:02x}:01.0",
            f"0000:{bus - 2:02x}:00.0",
            f"0000:{bus - 1:02x}:00.0",
            numa_node=numa,
        )
        common = {"bus": down, "numa_node": numa, "fw_ver": CX7_FIRMWARE}
        devices[address] = {**common, "device": CONNECTX7, "name": name, "ifnames": [ifname]}
        for vf in range(vfs_per_compute_nic):
            fn = vf + 1  # a single-function PF's first VF follows it (VF offset 1)
            devices[f"{address[:8]}{fn // 8:02x}.{fn % 8}"] = {
                **common,
                "device": CONNECTX_VF,
                "physfn": address,
                "name": f"mlx5_{next(vf_names)}",
                "ifnames": [f"{ifname}v{vf}"],
            }
    for name, ifname, address, numa in DGX_H100_STORAGE:
        bus = int(address[5:7], 16)
        root_port = node.bridge(
            f"0000:{bus - 1:02x}:01.0",
            f"pci0000:{bus - 1:02x}",
            vendor="0x8086",
            device="0x2030",
            numa_node=numa,
        )
        devices[address] = {
            "bus": root_port,
            "numa_node": numa,
            "device": CONNECTX7,
            "name": name,
            "link_layer": ETHERNET,
            "ifnames": [ifname],
            "fw_ver": CX7_FIRMWARE,
        }
    root_port = node.bridge(
        "0000:07:01.0", "pci0000:07", vendor="0x8086", device="0x2030", numa_node=0
    )
    for ifname, address in DGX_H100_MANAGEMENT:
        devices[address] = {
            "bus": root_port,
            "numa_node": 0,
            "vendor": INTEL,
            "device": E810_XXV,
            "driver": "ice",
            "stack": IRDMA,
            "link_layer": ETHERNET,
            "ifnames": [ifname],
        }
    # A VF's PF must exist first: PFs sort before their VFs at the same bus.
    for address in sorted(devices):
        node.hca(address, **devices[address])
    return node


#: Simulated machines this driver knows (``devicehost run --simulate --node NAME``),
#: with what each holds of RDMA hardware. The Atlas servers' RoCE ports belong to their
#: Ascend NPUs and are driven by the Ascend driver (``hccn_tool``), never through the
#: kernel's RDMA subsystem, so this driver builds nothing there.
NODES = {
    "": "eight_hca_node: eight ConnectX-6/-5 HCAs and two VFs on two NUMA nodes",
    "dgx-h100": "dgx_h100: 8 ConnectX-7 IB compute NICs, 2 dual-port ConnectX-7 RoCE, E810",
    "atlas-800-9000": "no RDMA devices",
    "atlas-800t-a2": "no RDMA devices",
    "atlas-800-3000": "no RDMA devices",
}


def build_node(root: FakeRoot | Path | str, node: str = "") -> SimulatedNode | None:
    """Build the simulated machine ``node`` (see ``NODES``); None when it has no RDMA
    device. Raises ValueError naming the known nodes for an unknown name."""
    if node not in NODES:
        known = ", ".join(repr(n) for n in NODES)
        raise ValueError(f"unknown simulated node {node!r}; the rdma driver knows {known}")
    if node == "dgx-h100":
        return dgx_h100(root)
    if node == "":
        return eight_hca_node(root)
    return None


def build_default_node(root: FakeRoot | Path | str) -> SimulatedNode:
    """What ``devicehost demo`` and ``run --simulate`` serve: ``eight_hca_node``."""
    return eight_hca_node(root)

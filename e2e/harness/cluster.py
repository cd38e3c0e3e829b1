"""A Kubernetes cluster on one machine: the control plane in a network namespace of its
own, each node in its own network and mount namespaces with its own containerd and kubelet.

Why namespaces: the kubelet's device-plugin, plugin and pod-resources paths are fixed
(/var/lib/kubelet/...), so two kubelets share a machine only when each sees its own
directory there (a bind mount inside its mount namespace); and no packet may leave the
machine, so every address lives in a namespace the tier creates and removes. Every process
is recorded (pid and namespace) in the state directory, so ``down`` — or ``python -m
harness.cluster down STATE`` after a crash — stops exactly what this cluster started.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.pki import Pki

CP_ADDRESS = "10.200.0.1"
APISERVER = f"https://{CP_ADDRESS}:6443"
OTLP_ENDPOINT = f"{CP_ADDRESS}:4317"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
# Host paths each node sees a directory of its own at (bind mounts in its mount namespace):
# the kubelet's fixed root, its pod logs, the runtime's CDI directory, NFD's feature files,
# the simulated machine's name (e2e only; docs/e2e.md) and where devicehost makes that
# machine's tree (components/simulation).
NODE_PRIVATE_PATHS = (
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/var/run/cdi",
    "/etc/kubernetes/node-feature-discovery/features.d",
    "/run/devicehost-e2e",
    "/var/lib/devicehost-simulation",
)


@dataclass
class NodeSpec:
    """A node: its name, the simulated machine its devicehost serves ("" for none) and the
    labels its kubelet registers it with (node-feature-discovery's, as NFD would set them)."""

    name: str
    machine: str = ""
    labels: dict[str, str] = field(default_factory=dict)


DGX = NodeSpec(
    "dgx",
    "dgx-h100",
    {
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.node.kubernetes.io/pci-15b3.present": "true",
    },
)
ATLAS = NodeSpec("atlas", "atlas-800-9000", {"feature.node.kubernetes.io/pci-19e5.present": "true"})
# No accelerator, so no NFD label of the base's affinity; the e2e overlay selects it by this one.
PLAIN = NodeSpec("plain", "", {"e2e.devicehost.io/plain": "true"})


@dataclass
class Binaries:
    """Where the built components are (e2e/build.sh's cache)."""

    kubernetes: Path
    containerd: Path
    runc: Path
    etcd: Path
    jaeger: Path

    @classmethod
    def from_cache(cls, cache: Path, versions: dict[str, str]) -> Binaries:
        def one(component: str, key: str) -> Path:
            path = cache / f"{component}-{versions[key]}"
            if not (path / ".complete").exists():
                raise FileNotFoundError(f"{path}: not built; run e2e/build.sh")
            return path

        return cls(
            kubernetes=one("kubernetes", "KUBERNETES_VERSION"),
            containerd=one("containerd", "CONTAINERD_VERSION"),
            runc=one("runc", "RUNC_VERSION"),
            etcd=one("etcd", "ETCD_VERSION"),
            jaeger=one("jaeger", "JAEGER_VERSION"),
        )


def read_versions(path: Path) -> dict[str, str]:
    """versions.env as a dict (KEY=VALUE lines, # comments)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
    return out


@dataclass
class Record:
    """What ``down`` needs, kept as JSON in the state directory as it grows."""

    run_id: str
    netns: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)
    created_dirs: list[str] = field(default_factory=list)


class Cluster:
    """Brought up by ``up()``, torn down by ``down()`` whatever state ``up`` reached."""

    def __init__(self, state: Path, nodes: list[NodeSpec], bins: Binaries, images: Path) -> None:
        self.state = state
        self.nodes = nodes
        self.bins = bins
        self.images = images
        self.logs = state / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.record = Record(run_id=f"{os.getpid() % 0x10000:04x}")
        self.cp_netns = f"dhe2e-{self.record.run_id}-cp"
        self.pki = Pki(state / "pki")
        self.admin_kubeconfig = state / "admin.kubeconfig"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._kubelet_argv: dict[str, list[str]] = {}
        self._save()

    # -- bring-up -------------------------------------------------------------------------

    def up(self) -> None:
        """Control plane, Jaeger, then every node; returns once every node is Ready."""
        self._make_netns(self.cp_netns)
        # The control plane's one address, on its loopback: served before any node exists.
        _run("ip", "-n", self.cp_netns, "addr", "add", f"{CP_ADDRESS}/32", "dev", "lo")
        self._certificates()
        self._start_etcd()
        self._start_apiserver()
        self._start_controllers()
        self._start_jaeger()
        for index, node in enumerate(self.nodes):
            self._start_node(index, node)
        wait_for(
            lambda: all(self.node_ready(n.name) for n in self.nodes),
            240,
            "every node Ready",
        )

    def _certificates(self) -> None:
        self.pki.issue(
            "apiserver",
            "kube-apiserver",
            dns=("kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost"),
            ips=(CP_ADDRESS, "127.0.0.1", "10.96.0.1"),
        )
        self.pki.issue(
            "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"
        )
        self.pki.issue("admin", "admin", "system:masters")
        self.pki.issue("controller-manager", "system:kube-controller-manager")
        self.pki.issue("scheduler", "system:kube-scheduler")
        self._kubeconfig(self.admin_kubeconfig, "admin")
        self._kubeconfig(self.state / "controller-manager.kubeconfig", "controller-manager")
        self._kubeconfig(self.state / "scheduler.kubeconfig", "scheduler")

    def _kubeconfig(self, path: Path, cert: str) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": APISERVER, "certificate-authority": str(self.pki.ca)},
                }
            ],
            "users": [
                {
                    "name": cert,
                    "user": {
                        "client-certificate": str(self.pki.cert(cert)),
                        "client-key": str(self.pki.key(cert)),
                    },
                }
            ],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": cert}}],
            "current-context": "e2e",
        }
        path.write_text(json.dumps(config, indent=2))

    def _start_etcd(self) -> None:
        url = "http://127.0.0.1:2379"
        peer = "http://127.0.0.1:2380"
        self._spawn(
            "etcd",
            [
                str(self.bins.etcd / "etcd"),
                *("--name", "e2e", "--data-dir", str(self.state / "etcd")),
                *("--listen-client-urls", url, "--advertise-client-urls", url),
                *("--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer),
                *("--initial-cluster", f"e2e={peer}", "--log-level", "warn"),
            ],
            netns=self.cp_netns,
        )

    def _start_apiserver(self) -> None:
        p = self.pki
        self._spawn(
            "kube-apiserver",
            [
                str(self.bins.kubernetes / "kube-apiserver"),
                "--etcd-servers=http://127.0.0.1:2379",
                f"--advertise-address={CP_ADDRESS}",
                "--secure-port=6443",
                f"--tls-cert-file={p.cert('apiserver')}",
                f"--tls-private-key-file={p.key('apiserver')}",
                f"--client-ca-file={p.ca}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--service-account-key-file={p.sa_pub}",
                f"--service-account-signing-key-file={p.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--allow-privileged=true",
                f"--kubelet-client-certificate={p.cert('apiserver-kubelet-client')}",
                f"--kubelet-client-key={p.key('apiserver-kubelet-client')}",
                f"--kubelet-certificate-authority={p.ca}",
                "--kubelet-preferred-address-types=InternalIP",
                "--profiling=false",
            ],
            netns=self.cp_netns,
        )
        wait_for(
            lambda: self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0,
            120,
            "kube-apiserver /readyz",
        )

    def _start_controllers(self) -> None:
        p = self.pki
        k8s = self.bins.kubernetes
        self._spawn(
            "kube-controller-manager",
            [
                str(k8s / "kube-controller-manager"),
                f"--kubeconfig={self.state / 'controller-manager.kubeconfig'}",
                "--controllers=*",
                "--use-service-account-credentials",
                f"--root-ca-file={p.ca}",
                f"--cluster-signing-cert-file={p.ca}",
                f"--cluster-signing-key-file={p.ca_key}",
                f"--service-account-private-key-file={p.sa_key}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                # What the DaemonSet controller decides during a rolling update.
                "--vmodule=daemon_controller=4,update=5",
            ],
            netns=self.cp_netns,
        )
        self._spawn(
            "kube-scheduler",
            [
                str(k8s / "kube-scheduler"),
                f"--kubeconfig={self.state / 'scheduler.kubeconfig'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
            ],
            netns=self.cp_netns,
        )

    def _start_jaeger(self) -> None:
        """Jaeger v2 all-in-one, its OTLP receivers on the control plane's address (nodes
        and pods reach it over their veth), the query API on loopback."""
        self._spawn(
            "jaeger",
            [
                str(self.bins.jaeger / "jaeger"),
                f"--config={Path(__file__).resolve().parents[1] / 'jaeger.yaml'}",
            ],
            netns=self.cp_netns,
        )

    def _start_node(self, index: int, node: NodeSpec) -> None:
        netns = self.node_netns(node.name)
        address = node_address(index)
        self._make_netns(netns)
        self._link_to_control_plane(index, netns, address)
        root = self.node_dir(node.name)
        for sub in (
            "kubelet",
            "containerd",
            "cni",
            "ipam",
            *(f"private{i}" for i in range(len(NODE_PRIVATE_PATHS))),
        ):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "private5" / "machine").write_text(node.machine)
        # A process holding the node's own mount namespace; the node's bind mounts live there.
        holder = self._spawn(
            f"{node.name}-mountns",
            ["unshare", "--mount", "--propagation", "private", "sleep", "infinity"],
        )
        wait_for(
            lambda: os.readlink(f"/proc/{holder}/ns/mnt") != os.readlink("/proc/self/ns/mnt"),
            10,
            f"{node.name}'s mount namespace",
        )
        for i, path in enumerate(NODE_PRIVATE_PATHS):
            self._ensure_host_dir(Path(path))
            self.in_node(node.name, ["mount", "--bind", str(root / f"private{i}"), path])
        self._write_cni(index, node, root)
        self._start_containerd(node, root)
        self._start_kubelet(node, root, address)

    def _write_cni(self, index: int, node: NodeSpec, root: Path) -> None:
        conf = {
            "cniVersion": "1.0.0",
            "name": f"e2e-{node.name}",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(root / "ipam"),
                        "ranges": [[{"subnet": pod_subnet(index)}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                }
            ],
        }
        (root / "cni" / "10-e2e.conflist").write_text(json.dumps(conf, indent=2))

    def _start_containerd(self, node: NodeSpec, root: Path) -> None:
        c = root / "containerd"
        runtime = "plugins.'io.containerd.cri.v1.runtime'"
        config = f"""version = 3
root = "{c}/root"
state = "{c}/state"
[grpc]
  address = "{c}/containerd.sock"
[{runtime}]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  restrict_oom_score_adj = true
  # Pods' network namespaces under the node's own state, not in the machine's /run/netns.
  netns_mounts_under_state_dir = true
[{runtime}.containerd]
  default_runtime_name = "runc"
[{runtime}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{runtime}.containerd.runtimes.runc.options]
  BinaryName = "{self.bins.runc / "runc"}"
  SystemdCgroup = false
[{runtime}.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "{root / "cni"}"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{PAUSE_IMAGE}"
"""
        (c / "config.toml").write_text(config)
        self._spawn(
            f"{node.name}-containerd",
            [str(self.bins.containerd / "containerd"), "--config", str(c / "config.toml")],
            node=node.name,
        )
        sock = c / "containerd.sock"
        wait_for(lambda: self._ctr(node.name, "version").returncode == 0, 60, "containerd")
        for image, base in (
            ("pause", "registry.k8s.io/pause"),
            ("busybox", "docker.io/library/busybox"),
            ("devicehost", "docker.io/library/devicehost"),
            # devicehost plus a third-party driver (deploy/examples/extra-driver).
            ("devicehost-acme", "docker.io/library/devicehost-acme"),
            # the DRA benchmark's Go floor (bench/dra-floor), built for make bench-e2e only
            ("dra-floor", "docker.io/library/dra-floor"),
        ):
            if not (self.images / f"{image}.tar").exists():
                continue
            self._ctr(
                node.name,
                "-n",
                "k8s.io",
                "images",
                "import",
                "--base-name",
                base,
                str(self.images / f"{image}.tar"),
                check=True,
            )
        del sock

    def tag_image(self, node: str, source: str, target: str) -> None:
        """Give an imported image a second name in the node's containerd (a new tag, as a
        release brings, without a registry)."""
        self._ctr(node, "-n", "k8s.io", "images", "tag", "--force", source, target, check=True)

    def _ctr(self, node: str, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        sock = self.node_dir(node) / "containerd" / "containerd.sock"
        return subprocess.run(
            [str(self.bins.containerd / "ctr"), "--address", str(sock), *args],
            capture_output=True,
            text=True,
            check=check,
        )

    def _start_kubelet(self, node: NodeSpec, root: Path, address: str) -> None:
        p = self.pki
        name = f"node-{node.name}"
        p.issue(name, f"system:node:{node.name}", "system:nodes", dns=(node.name,), ips=(address,))
        kubeconfig = root / "kubelet.kubeconfig"
        self._kubeconfig(kubeconfig, name)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "authentication": {
                "x509": {"clientCAFile": str(p.ca)},
                "webhook": {"enabled": False},
                "anonymous": {"enabled": False},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "resolvConf": "",
            "containerRuntimeEndpoint": f"unix://{root / 'containerd' / 'containerd.sock'}",
            "tlsCertFile": str(p.cert(name)),
            "tlsPrivateKeyFile": str(p.key(name)),
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "maxPods": 200,
            "serializeImagePulls": False,
            "tracing": {"endpoint": OTLP_ENDPOINT, "samplingRatePerMillion": 1000000},
        }
        (root / "kubelet-config.json").write_text(json.dumps(config, indent=2))
        labels = ",".join(f"{k}={v}" for k, v in node.labels.items())
        self._kubelet_argv[node.name] = [
            str(self.bins.kubernetes / "kubelet"),
            f"--config={root / 'kubelet-config.json'}",
            f"--kubeconfig={kubeconfig}",
            f"--hostname-override={node.name}",
            f"--node-ip={address}",
            *([f"--node-labels={labels}"] if labels else []),
            "--v=2",
            # Its log lines around each call to a DRA plugin ("Calling/Done calling
            # NodePrepareResources rpc"): the DRA benchmark times both drivers from them.
            "--vmodule=dra_plugin=4",
        ]
        self.start_kubelet(node.name)

    def start_kubelet(self, node: str) -> None:
        self._spawn(f"{node}-kubelet", self._kubelet_argv[node], node=node)

    def stop_kubelet(self, node: str) -> None:
        """SIGKILL, as a crash would: the restart scenario must not rely on a clean exit."""
        self._kill(f"{node}-kubelet", signal.SIGKILL)

    # -- running things -------------------------------------------------------------------

    def node_netns(self, node: str) -> str:
        return f"dhe2e-{self.record.run_id}-{node}"

    def node_dir(self, node: str) -> Path:
        return self.state / "nodes" / node

    def _enter(self, netns: str | None, node: str | None) -> list[str]:
        if node is not None:
            holder = self.record.pids[f"{node}-mountns"]
            net = f"/run/netns/{self.node_netns(node)}"
            return ["nsenter", f"--net={net}", f"--mount=/proc/{holder}/ns/mnt", "--wd=/", "--"]
        if netns is not None:
            return ["nsenter", f"--net=/run/netns/{netns}", "--"]
        return []

    def in_node(self, node: str, argv: list[str], check: bool = True) -> str:
        """Run argv in the node's namespaces; its stdout."""
        done = subprocess.run(
            [*self._enter(None, node), *argv], capture_output=True, text=True, check=False
        )
        if check and done.returncode:
            raise RuntimeError(f"{argv} on {node}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def in_control_plane(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self._enter(self.cp_netns, None), *argv], capture_output=True, text=True, check=False
        )

    def kubectl_argv(self) -> list[str]:
        """kubectl as the cluster's admin, run in the control plane's namespace."""
        return [
            *self._enter(self.cp_netns, None),
            str(self.bins.kubernetes / "kubectl"),
            f"--kubeconfig={self.admin_kubeconfig}",
        ]

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        argv = [*self.kubectl_argv(), *args]
        done = subprocess.run(argv, capture_output=True, text=True, input=input, check=False)
        if check and done.returncode:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def node_ready(self, node: str) -> bool:
        done = self.kubectl("get", "node", node, "-o", "json", check=False)
        if done.returncode:
            return False
        conditions = json.loads(done.stdout)["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _spawn(
        self, name: str, argv: list[str], netns: str | None = None, node: str | None = None
    ) -> int:
        log = (self.logs / f"{name}.log").open("ab")
        env = dict(os.environ)
        env["PATH"] = f"{self.bins.containerd}:{self.bins.runc}:{env.get('PATH', '')}"
        proc = subprocess.Popen(
            [*self._enter(netns, node), *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        log.close()
        self._procs[name] = proc
        self.record.pids[name] = proc.pid
        self._save()
        return proc.pid

    def _kill(self, name: str, sig: signal.Signals = signal.SIGTERM, wait: float = 15) -> None:
        pid = self.record.pids.pop(name, None)
        self._save()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        proc = self._procs.pop(name, None)
        deadline = time.monotonic() + wait
        while _alive(pid, proc) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid, proc):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            if proc is not None:
                proc.wait()

    # -- network --------------------------------------------------------------------------

    def _make_netns(self, name: str) -> None:
        _run("ip", "netns", "add", name)
        self.record.netns.append(name)
        self._save()
        _run("ip", "-n", name, "link", "set", "lo", "up")

    def _link_to_control_plane(self, index: int, netns: str, address: str) -> None:
        """A veth pair, one end in the control plane's namespace and one in the node's, a /32
        on each end and routes both ways (the node's pod subnet too): nothing else is
        reachable from either side."""
        cp_end, node_end = f"dh{self.record.run_id}c{index}", f"dh{self.record.run_id}n{index}"
        _run("ip", "link", "add", cp_end, "type", "veth", "peer", "name", node_end)
        self.record.links.append(cp_end)
        self._save()
        _run("ip", "link", "set", cp_end, "netns", self.cp_netns)
        _run("ip", "link", "set", node_end, "netns", netns)
        cp = ("ip", "-n", self.cp_netns)
        _run(*cp, "link", "set", cp_end, "up")
        _run(*cp, "route", "add", f"{address}/32", "dev", cp_end, "src", CP_ADDRESS)
        _run(*cp, "route", "add", pod_subnet(index), "via", address, "dev", cp_end)
        nd = ("ip", "-n", netns)
        _run(*nd, "addr", "add", f"{address}/32", "dev", node_end)
        _run(*nd, "link", "set", node_end, "up")
        _run(*nd, "route", "add", f"{CP_ADDRESS}/32", "dev", node_end)
        _run(*nd, "route", "add", "default", "via", CP_ADDRESS, "dev", node_end)
        _run("nsenter", f"--net=/run/netns/{netns}", "sysctl", "-qw", "net.ipv4.ip_forward=1")

    def _ensure_host_dir(self, path: Path) -> None:
        """A mount point for the nodes' bind mounts; removed at teardown if this made it."""
        missing = []
        p = path
        while not p.exists():
            missing.append(p)
            p = p.parent
        path.mkdir(parents=True, exist_ok=True)
        for m in missing:
            if str(m) not in self.record.created_dirs:
                self.record.created_dirs.append(str(m))
        self._save()

    # -- teardown -------------------------------------------------------------------------

    def down(self) -> None:
        teardown(self.state)

    def _save(self) -> None:
        (self.state / "record.json").write_text(json.dumps(asdict(self.record), indent=2))


def teardown(state: Path) -> None:
    """Stop everything the record names: every process in a node's mount namespace (the
    kubelet, containerd, shims and their containers), the recorded processes, then the
    namespaces (their bind mounts go with them), links and directories made."""
    path = state / "record.json"
    if not path.exists():
        return
    record = Record(**json.loads(path.read_text()))
    holders = {n: p for n, p in record.pids.items() if n.endswith("-mountns")}
    namespaces = set()
    for pid in holders.values():
        with contextlib.suppress(OSError):
            namespaces.add(os.readlink(f"/proc/{pid}/ns/mnt"))
    # Kubelets first and at once, so nothing restarts containers while they are stopped;
    # then everything else together, each given 10 s to exit before SIGKILL.
    kubelets = [p for n, p in record.pids.items() if n.endswith("-kubelet")]
    _stop_all(kubelets, grace=0)
    _stop_all([p for n, p in record.pids.items() if not n.endswith(("-kubelet", "-mountns"))])
    # containerd's shims live in the node's mount namespace, their containers in
    # namespaces of their own below them: the shims and all their descendants.
    for pid in _with_descendants(_pids_in_mount_namespaces(namespaces)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _stop_all(list(holders.values()))
    _remove_container_cgroups(state)
    for name in record.netns:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
    for link in record.links:
        subprocess.run(["ip", "link", "delete", link], capture_output=True, check=False)
    for d in sorted(record.created_dirs, key=len, reverse=True):
        with contextlib.suppress(OSError):
            Path(d).rmdir()
    path.unlink()


def _remove_container_cgroups(state: Path) -> None:
    """The cgroups runc made for this run's containers (named by container ID under
    containerd's k8s.io parent): a killed shim leaves them behind, empty."""
    tasks = state.glob("nodes/*/containerd/state/io.containerd.runtime.v2.task/k8s.io/*")
    ids = {t.name for t in tasks}
    for controller in Path("/sys/fs/cgroup").iterdir():
        for cid in ids:
            with contextlib.suppress(OSError):
                (controller / "k8s.io" / cid).rmdir()


def _pids_in_mount_namespaces(namespaces: set[str]) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(entry / "ns" / "mnt") in namespaces:
                    out.append(int(entry.name))
    return out


def _with_descendants(pids: list[int]) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found = set(pids)
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    return sorted(found)


def _stop_all(pids: list[int], grace: float = 10) -> None:
    """SIGTERM to each process group (SIGKILL at once with no grace), then SIGKILL to
    whatever is still alive after ``grace`` seconds."""
    first = signal.SIGTERM if grace else signal.SIGKILL
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, first)
    deadline = time.monotonic() + max(grace, 5)
    while any(_alive(p, None) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid, None):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def _alive(pid: int, proc: subprocess.Popen[bytes] | None) -> bool:
    if proc is not None:
        return proc.poll() is None
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return False
    return True


def node_address(index: int) -> str:
    return f"10.200.0.{10 + index}"


def pod_subnet(index: int) -> str:
    return f"10.244.{index}.0/24"


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def wait_for(condition: Callable[[], object], timeout: float, what: str, every: float = 0.5) -> Any:
    """Poll until condition() is truthy (its value), or fail naming what was awaited."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as e:  # a condition may fail while things come up
            last = e
        time.sleep(every)
    raise TimeoutError(
        f"waited {timeout:.0f} s for {what}" + (f"; last error: {last}" if last else "")
    )


@contextlib.contextmanager
def running(state: Path, nodes: list[NodeSpec], bins: Binaries, images: Path) -> Iterator[Cluster]:
    """A cluster that is torn down however the block ends (SIGTERM and SIGINT included)."""
    cluster = Cluster(state, nodes, bins, images)
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()
        signal.signal(signal.SIGTERM, previous)
        # The logs stay; the data (etcd, images and snapshots) goes.
        shutil.rmtree(state / "etcd", ignore_errors=True)
        for node in nodes:
            shutil.rmtree(cluster.node_dir(node.name) / "containerd", ignore_errors=True)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    # `python -m harness.cluster down STATE`: stop what a crashed run left (its record).
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "down":
        sys.exit("usage: python -m harness.cluster down STATE_DIR")
    teardown(Path(sys.argv[2]))

"""What the devicehost pod must mount from the host, and nothing more: ``devicehost mounts``.

Each driver declares the host paths it may read on any node (``devicehost_host_paths``,
callable without ``configure``); the host adds its own: the kubelet's device-plugin
directory, the PodResources socket's directory, the CDI spec directory when the host writes
CDI specs, and NFD's ``features.d`` directory when node labels are on. This module turns
that union into a mount plan — one hostPath volume per path, a path inside a declared
parent folded into it — that an operator reads as a table and a manifest generator takes
as JSON or as a kustomize strategic-merge patch. The manifests under deploy/ are checked
against this plan by tests/test_deploy.py.

Where each path appears in the pod: a driver path under the host root (``/host`` + path,
the ``DEVICEHOST_ROOT`` the drivers read through), and also at its real path when the
driver asks (``at_real_path``, for vendor libraries that find their files by absolute
path); the host's own paths at their real path, since the HostConfig names them so. Driver
paths are read-only; only the host's own writable directories are writable.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from devicehost.drivers.discovery import DRIVER_GROUP, DriverInfo
from devicehost.drivers.process import WorkerExited, WorkerProcess
from devicehost.drivers.validation import Invalid, host_paths_from_plain
from devicehost.drivers.zygote import Zygote
from devicehost.errors import DriverError, DriverUnavailable

if TYPE_CHECKING:
    from devicehost.config.host_config import HostConfig

log = logging.getLogger(__name__)

HOOK = "devicehost_host_paths"
#: Parts of /sys and /proc that every kernel provides. A path below them may exist only once
#: a module is loaded (``/sys/class/infiniband``, ``/proc/driver/nvidia``), and a hostPath
#: whose source is missing makes the container runtime create it (containerd runs
#: ``mkdir -p``), which sysfs and procfs refuse: the pod would never start on a node without
#: that module — in a mixed fleet, on every other vendor's node. Such a path is mounted
#: through the ancestor that always exists; it is read-only, and the container's own
#: ``/sys`` already shows the same kernel objects.
ALWAYS_PRESENT = ("/sys/class", "/sys/bus", "/sys/module", "/proc/driver")
#: Where driver paths appear in the pod (the DaemonSet's DEVICEHOST_ROOT).
HOST_ROOT = "/host"
HOST = "devicehost"


@dataclass(frozen=True)
class Declared:
    """One host path someone needs: a driver (by name) or the host itself."""

    owner: str
    path: str
    purpose: str
    at_real_path: bool = False
    writable: bool = False
    #: For the host's own paths: the Kubernetes hostPath type that fits.
    host_path_type: str = ""
    #: Declared by nobody: the always-present ancestor a kernel path is mounted through.
    carrier: bool = False

    def targets(self) -> tuple[str, ...]:
        """Where the path appears inside the pod."""
        if self.owner == HOST:
            return (self.path,)
        under_root = HOST_ROOT + self.path if self.path != "/" else HOST_ROOT
        return (self.path, under_root) if self.at_real_path else (under_root,)


@dataclass
class PlannedMount:
    """One hostPath volume and where the container mounts it."""

    host_path: str
    targets: tuple[str, ...]
    read_only: bool
    host_path_type: str
    declared: list[Declared] = field(default_factory=list)

    @property
    def volume(self) -> str:
        return volume_name(self.host_path)

    def covers(self, other: Declared) -> bool:
        """True when this mount already gives ``other`` everything it needs."""
        inside = PurePosixPath(other.path).is_relative_to(self.host_path)
        if not inside or (other.writable and self.read_only):
            return False
        rest = other.path[len(self.host_path.rstrip("/")) :]
        reachable = {t.rstrip("/") + rest for t in self.targets}
        return set(other.targets()) <= reachable

    def to_json(self) -> dict[str, Any]:
        return {
            "hostPath": self.host_path,
            "mountPaths": list(self.targets),
            "readOnly": self.read_only,
            "volume": self.volume,
            "declaredBy": [
                {"owner": d.owner, "path": d.path, "purpose": d.purpose} for d in self.declared
            ],
        }


def volume_name(path: str) -> str:
    """A DNS-1123 volume name for a host path, stable across runs: ``/sys`` → ``host-sys``."""
    slug = re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "root"
    return f"host-{slug}"[:63].rstrip("-")


def host_own_paths(config: HostConfig) -> list[Declared]:
    """The host's own paths under ``config``."""
    own = [
        Declared(
            HOST,
            str(config.plugin_dir),
            "the kubelet's device-plugin directory: our sockets and kubelet.sock",
            writable=True,
            host_path_type="Directory",
        )
    ]
    if config.pod_resources_socket:
        own.append(
            Declared(
                HOST,
                str(config.pod_resources_socket.parent),
                "the kubelet's PodResources socket: which pod got which device, for spans",
                host_path_type="DirectoryOrCreate",
            )
        )
    dra = config.serves_dra
    if dra:
        for part, why in (
            ("plugins", "DRA drivers' sockets and prepared-claim checkpoints"),
            ("plugins_registry", "DRA drivers' registration sockets, for the plugin watcher"),
        ):
            own.append(
                Declared(
                    HOST,
                    str(config.kubelet_dir / part),
                    f"the kubelet's {part}/: {why}",
                    writable=True,
                    host_path_type="DirectoryOrCreate",
                )
            )
    # The CDI directory the host writes its k8s.devicehost.io specs to, only when CDI is
    # on (cdi.dir has a default even when it is off) or a claim may be prepared (DRA).
    if config.cdi_enabled or dra:
        own.append(
            Declared(
                HOST,
                str(config.cdi_dir),
                "CDI specs the host writes (vendor k8s.devicehost.io), per resource or claim",
                writable=True,
                host_path_type="DirectoryOrCreate",
            )
        )
    # Where simulated trees are made, when the config names a place (a hostPath, so the
    # container runtime finds the device nodes and files an answer names there).
    if config.simulate_dir:
        own.append(
            Declared(
                HOST,
                str(config.simulate_dir),
                "simulated nodes' trees (simulateDir), seen by the runtime at the same path",
                writable=True,
                host_path_type="DirectoryOrCreate",
            )
        )
    if config.feature_file:
        own.append(
            Declared(
                HOST,
                str(config.feature_file.parent),
                "node-feature-discovery features.d: the drivers' node labels",
                writable=True,
                host_path_type="DirectoryOrCreate",
            )
        )
    return own


def clean_declarations(driver: str, answer: Any) -> list[Declared]:
    """A driver's ``devicehost_host_paths`` answer (plain data from its worker) rebuilt as
    ``Declared``; anything that is not a valid HostPath is dropped with a log line."""
    if answer is None:
        return []
    if not isinstance(answer, list):
        log.error(
            "driver %r, hook %s: returned %r, expected a sequence of HostPath; ignored",
            driver,
            HOOK,
            answer,
        )
        return []
    declared: list[Declared] = []
    for item in answer:
        try:
            (path,) = host_paths_from_plain([item])
        except Invalid as exc:
            log.error(
                "driver %r, hook %s: %r is not a devicehost.HostPath (%s); dropped",
                driver,
                HOOK,
                item,
                exc,
            )
            continue
        where = path.path.rstrip("/") or "/"
        declared.append(Declared(driver, where, path.purpose, path.at_real_path))
    return declared


def always_present_ancestor(path: str) -> str | None:
    """The part of /sys or /proc every kernel has that ``path`` lies strictly below."""
    for parent in ALWAYS_PRESENT:
        if path != parent and PurePosixPath(path).is_relative_to(parent):
            return parent
    return None


def _carriers(declarations: Sequence[Declared]) -> list[Declared]:
    carriers: dict[tuple[str, bool], Declared] = {}
    for item in declarations:
        parent = always_present_ancestor(item.path)
        if parent is not None and item.owner != HOST:
            key = (parent, item.at_real_path)
            carriers.setdefault(
                key, Declared(item.owner, parent, "", item.at_real_path, carrier=True)
            )
    return list(carriers.values())


def plan(declarations: Sequence[Declared]) -> list[PlannedMount]:
    """One mount per path that no other declared path already covers, in path order; a
    driver path that may be absent from /sys or /proc goes through ``ALWAYS_PRESENT``."""
    mounts: list[PlannedMount] = []
    everything = [*declarations, *_carriers(declarations)]
    # Parents before children, so a child finds the mount that covers it.
    for item in sorted(everything, key=lambda d: (len(PurePosixPath(d.path).parts), d.path)):
        home = next((m for m in mounts if m.covers(item)), None)
        if home is None:
            same = next((m for m in mounts if m.host_path == item.path), None)
            if same is not None:  # the same path, wanted in more places or writable
                same.targets = tuple(dict.fromkeys(same.targets + item.targets()))
                same.read_only = same.read_only and not item.writable
                if not item.carrier:
                    same.declared.append(item)
                continue
            home = PlannedMount(
                item.path,
                item.targets(),
                read_only=not item.writable,
                host_path_type=item.host_path_type,
            )
            mounts.append(home)
        if not item.carrier:
            home.declared.append(item)
    return sorted(mounts, key=lambda m: m.host_path)


async def declared_by_drivers(
    drivers: Sequence[DriverInfo], timeout: float, start_timeout: float
) -> tuple[list[Declared], list[str]]:
    """Every driver's declarations, asked of each in its own worker without ``configure``,
    and the names of drivers that declare none (not implemented, or it could not load:
    nothing can be said about what they read)."""
    zygote = Zygote()
    try:
        answers = await asyncio.gather(*(_ask(d, zygote, timeout, start_timeout) for d in drivers))
    finally:
        await zygote.close()
    declared: list[Declared] = []
    silent: list[str] = []
    for driver, answer in zip(drivers, answers, strict=True):
        if answer is None:
            silent.append(driver.name)
        else:
            declared += clean_declarations(driver.name, answer)
    return declared, silent


async def _ask(driver: DriverInfo, zygote: Zygote, timeout: float, start_timeout: float) -> Any:
    process = WorkerProcess(
        driver.name, driver.distribution, DRIVER_GROUP, zygote, lambda _: None, lambda _r, _m: None
    )
    try:
        await process.start(start_timeout)
        if HOOK not in process.hooks:
            return None
        return await process.call(HOOK, timeout)
    except (DriverError, DriverUnavailable, WorkerExited) as exc:
        log.error("driver %r: %s; its paths are left out", driver.name, exc)
        return None
    finally:
        await process.stop(1.0)


def table(mounts: Sequence[PlannedMount]) -> str:
    """The plan for a person: host path, where in the pod, mode, who needs it and why."""
    rows = [("HOST PATH", "IN THE POD", "MODE", "NEEDED BY")]
    for m in mounts:
        needed = "; ".join(_needed_by(m, d) for d in m.declared)
        rows.append((m.host_path, ", ".join(m.targets), "ro" if m.read_only else "rw", needed))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip()
        for r in rows
    )


def _needed_by(mount: PlannedMount, declared: Declared) -> str:
    """``owner: purpose``, naming the declared path when it lies inside the mount."""
    what = declared.purpose
    if declared.path != mount.host_path:
        what = f"{declared.path} ({what})" if what else declared.path
    return f"{declared.owner}: {what}" if what else declared.owner


def kustomize_patch(
    mounts: Sequence[PlannedMount], daemonset: str = "devicehost", container: str = "devicehost"
) -> dict[str, Any]:
    """A strategic-merge patch adding the plan's volumes and mounts to the DaemonSet;
    keyed by container and volume name, so it composes with any other patch."""
    volume_mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    for m in mounts:
        host_path: dict[str, Any] = {"path": m.host_path}
        if m.host_path_type:
            host_path["type"] = m.host_path_type
        volumes.append({"name": m.volume, "hostPath": host_path})
        for target in m.targets:
            entry: dict[str, Any] = {"name": m.volume, "mountPath": target}
            if m.read_only:
                entry["readOnly"] = True
            volume_mounts.append(entry)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": daemonset},
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": container, "volumeMounts": volume_mounts}],
                    "volumes": volumes,
                }
            }
        },
    }


def by_owner(mounts: Sequence[PlannedMount]) -> Mapping[str, list[str]]:
    """Host paths per owner, for docs and checks."""
    owners: dict[str, list[str]] = {}
    for m in mounts:
        for d in m.declared:
            owners.setdefault(d.owner, []).append(d.path)
    return owners


async def mounts_command(config: HostConfig, output: str, drivers_only: bool) -> int:
    """``devicehost mounts``: load the drivers (no configure), print the plan."""
    import json

    import yaml

    from devicehost.drivers.discovery import load_plugins

    plugins = load_plugins(allow=config.enabled_drivers, deny=config.disabled_drivers)
    declared, silent = await declared_by_drivers(
        plugins.drivers, config.hook_timeout, config.driver_start_timeout
    )
    if not drivers_only:
        declared = host_own_paths(config) + declared
    mounts = plan(declared)
    if output == "json":
        print(json.dumps([m.to_json() for m in mounts], indent=2))
    elif output == "kustomize":
        print(yaml.safe_dump(kustomize_patch(mounts), sort_keys=False), end="")
    else:
        print(table(mounts))
    for name in silent:
        print(
            f"devicehost: driver {name!r} declares no host paths (devicehost_host_paths); "
            "see its README for what it reads",
            file=sys.stderr,
        )
    return 0

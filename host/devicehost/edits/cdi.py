"""Container Device Interface (CDI) specs, written by the host from the edits drivers declare.

With ``cdi.enabled``, the host keeps one spec file per resource in ``cdi.dir`` and answers
Allocate with CDI device names; a CDI-enabled runtime (containerd, CRI-O) then applies the
device nodes, mounts and env from the spec. The rules followed here come from the CDI
project (github.com/cncf-tags/container-device-interface):

- ``SPEC.md``: a spec is ``{cdiVersion, kind, devices[{name, containerEdits}],
  containerEdits}``; spec-level edits apply once when any device of the spec is requested.
- ``pkg/parser/parser.go``: the syntax of vendor, class and device names.
- ``specs-go/version.go``: ``MinimumRequiredVersion``, the lowest ``cdiVersion`` that
  allows the fields a spec uses (we choose ours the same way rather than hard-coding one).
- ``pkg/cdi/spec.go`` and ``pkg/cdi/device.go``: a spec with no devices, or a device
  with empty edits, makes the whole file invalid.
- ``pkg/cdi/spec-dirs.go``: only ``*.json`` and ``*.yaml`` files are read, so temporary
  files end in ``.tmp``.
- ``pkg/cdi/cache.go``: two specs of one priority defining one qualified device are a
  conflict and the device is dropped. So every kind we write is under our own vendor,
  ``k8s.devicehost.io``, never a kind a vendor's tooling writes (``nvidia.com/gpu``).

What CDI cannot carry stays in the Allocate answer: env variables several devices join
(``ResourceSpec.joined_envs``; CDI appends env entries, so two devices would set one
variable twice) or number (``ResourceSpec.indexed_envs``: a device's number depends on
the container's request), container annotations (CDI's ``annotations`` are metadata about the
spec, never applied to the container), CDI names the devices declare themselves, and the
driver's ``allocate`` answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicehost.model import (
    Allocation,
    ContainerEdits,
    Device,
    DeviceNode,
    Mount,
    ResourceSpec,
)
from devicehost.system.node_files import Refused, open_regular, read_at_most

log = logging.getLogger(__name__)

VENDOR = "k8s.devicehost.io"
DEFAULT_CDI_DIR = Path("/var/run/cdi")
#: Released spec versions, oldest first (specs-go/version.go, ``validSpecVersions``).
SPEC_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
#: The kind name segment's limit (SPEC.md, "Kind").
MAX_CLASS_LENGTH = 63
_READ_ONLY_BIND = ["ro", "nosuid", "nodev", "bind"]
_BIND = ["nosuid", "nodev", "bind"]

# pkg/parser/parser.go: a device name starts and ends with a letter or digit, with
# letters, digits, '_', '-', '.' and ':' between.
_DEVICE_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.:\-]*[A-Za-z0-9])?$")
_FORBIDDEN_IN_DEVICE_NAME = re.compile(r"[^A-Za-z0-9_.:\-]")


class CdiUnavailable(Exception):
    """The spec a CDI answer would name is not on disk with the devices' current edits
    (it could not be written: see the host's log for the directory and the error)."""


def class_name(resource: str) -> str:
    """The CDI class for a resource name: ``nvidia.com/gpu`` → ``nvidia.com_gpu``.

    A resource's domain is lower-case DNS and holds no ``_``, so the first ``_`` marks where
    its name starts and the plain form is one-to-one. A class must start with a letter and
    have at most 63 characters (parser.go, SPEC.md); a resource whose plain form breaks
    either rule (a domain starting with a digit, a long name) gets ``R<hash>_<tail>``
    instead: it starts with an upper-case letter, which no plain form does.
    """
    plain = resource.replace("/", "_", 1)
    if plain[:1].isalpha() and plain.isascii() and len(plain) <= MAX_CLASS_LENGTH:
        return plain
    digest = hashlib.sha256(resource.encode()).hexdigest()[:16]
    tail = plain[-(MAX_CLASS_LENGTH - len(digest) - 2) :].lstrip("_.-")
    return f"R{digest}_{tail}"


def kind(resource: str) -> str:
    """The CDI kind of the host's spec for ``resource``: ``k8s.devicehost.io/<class>``."""
    return f"{VENDOR}/{class_name(resource)}"


def device_name(device_id: str) -> str:
    """The CDI device name for a device ID: the ID itself where CDI allows it.

    Otherwise the ID with each forbidden character replaced by ``_``, then ``-`` and the
    SHA-256 of the ID in hex: at least 65 characters, longer than any device ID may be
    (63), so it can never equal another device's name, and two IDs only share it if
    their SHA-256 does.
    """
    if _DEVICE_NAME_RE.match(device_id):
        return device_id
    readable = _FORBIDDEN_IN_DEVICE_NAME.sub("_", device_id).strip("_.:-") or "device"
    return f"{readable}-{hashlib.sha256(device_id.encode()).hexdigest()}"


def qualified_name(resource: str, device_id: str) -> str:
    """``k8s.devicehost.io/<class>=<device>``, the name an Allocate answer carries."""
    return f"{kind(resource)}={device_name(device_id)}"


def spec_file_name(resource: str) -> str:
    """``k8s.devicehost.io-<class>.json``: vendor tooling names its files after its own
    vendor (``nvidia.yaml``, CDI's ``GenerateSpecName`` gives ``<vendor>-<class>``), so
    ours cannot collide with theirs."""
    return f"{VENDOR}-{class_name(resource)}.json"


# -- the spec document --------------------------------------------------------------------


def _device_node(node: DeviceNode) -> dict[str, Any]:
    return {
        "path": node.container_path,
        "hostPath": node.host_path,
        "permissions": node.permissions,
    }


def _mount(mount: Mount) -> dict[str, Any]:
    return {
        "hostPath": mount.host_path,
        "containerPath": mount.container_path,
        "options": list(_READ_ONLY_BIND if mount.read_only else _BIND),
    }


def answer_envs(spec: ResourceSpec) -> frozenset[str]:
    """The env variables of ``spec`` no spec entry can hold, so the answer carries them:
    the joined ones (CDI would append a device's value twice) and the numbered ones (a
    device's number depends on the container's request)."""
    return frozenset(spec.joined_envs) | frozenset(spec.indexed_envs)


def container_edits(edits: ContainerEdits, leave_out: Collection[str] = ()) -> dict[str, Any]:
    """CDI ``containerEdits`` for what CDI can apply: env (without ``leave_out``), device
    nodes, mounts. Annotations and CDI names stay in the Allocate answer."""
    out: dict[str, Any] = {}
    env = [f"{k}={v}" for k, v in sorted(edits.envs.items()) if k not in leave_out]
    if env:
        out["env"] = env
    if edits.devices:
        out["deviceNodes"] = [_device_node(d) for d in edits.devices]
    if edits.mounts:
        out["mounts"] = [_mount(m) for m in edits.mounts]
    return out


def _marker(resource: str, name: str) -> dict[str, Any]:
    """Edits for a device that needs none in the spec: CDI refuses a device with empty edits
    (pkg/cdi/device.go), so it gets one env variable of its own, naming it."""
    qualified = f"{kind(resource)}={name}"
    key = "DEVICEHOST_DEVICE_" + hashlib.sha256(qualified.encode()).hexdigest()[:16].upper()
    return {"env": [f"{key}={qualified}"]}


def minimum_version(document: Mapping[str, Any]) -> str:
    """The lowest ``cdiVersion`` that allows what ``document`` uses, as CDI's
    ``MinimumRequiredVersion`` decides it (specs-go/version.go) for the fields we write:
    a dot in the class or annotations (0.6.0), a device name starting with a digit or a
    device node ``hostPath`` (0.5.0), a mount ``type`` (0.4.0); else 0.3.0."""
    devices = document.get("devices", [])
    edits = [document.get("containerEdits", {})] + [d.get("containerEdits", {}) for d in devices]
    if "." in document.get("kind", "").partition("/")[2] or (
        document.get("annotations") or any(d.get("annotations") for d in devices)
    ):
        return "0.6.0"
    if any(d["name"][:1].isdigit() for d in devices) or any(
        "hostPath" in n for e in edits for n in e.get("deviceNodes", [])
    ):
        return "0.5.0"
    if any("type" in m for e in edits for m in e.get("mounts", [])):
        return "0.4.0"
    return "0.3.0"


def spec_document(spec: ResourceSpec, devices: Iterable[Device]) -> dict[str, Any] | None:
    """The CDI spec for a resource's devices, or None when it has none (CDI refuses a spec
    without devices). Devices keep the snapshot's order."""
    in_answer = answer_envs(spec)
    entries = []
    for device in devices:
        name = device_name(device.id)
        edits = container_edits(device.edits, in_answer) or _marker(spec.name, name)
        entries.append({"name": name, "containerEdits": edits})
    if not entries:
        return None
    document: dict[str, Any] = {"cdiVersion": "", "kind": kind(spec.name), "devices": entries}
    common = container_edits(spec.edits, in_answer)
    if common:
        document["containerEdits"] = common
    document["cdiVersion"] = minimum_version(document)
    return document


# -- files --------------------------------------------------------------------------------


def write_atomically(path: Path, text: str) -> bool:
    """Replace ``path`` with ``text`` (mode 0644) unless it holds that already; return
    whether it was written. A reader sees the old file or the new one, never half of one:
    the text goes to a ``.tmp`` file in the same directory, which is then renamed. What
    lies at ``path`` now is compared only if it is a regular file, and read no further than
    the new text's length: a FIFO or a link to ``/dev/zero`` there is simply replaced."""
    data = text.encode()
    with contextlib.suppress(OSError, Refused), open_regular(path) as (fd, _):
        if read_at_most(fd, len(data)) == data:
            return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), 0o644)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return True


def _spec_kind(path: Path) -> str | None:
    """The ``kind`` of a spec file, or None when it cannot be read as one."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    try:
        document = json.loads(text)
    except ValueError:
        import yaml  # only for a YAML file, which is never one of ours

        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError:
            return None
    found = document.get("kind") if isinstance(document, dict) else None
    return found if isinstance(found, str) else None


def remove_specs(directory: Path) -> list[Path]:
    """Remove every spec in ``directory`` whose kind is under ``k8s.devicehost.io`` (and our
    leftover temporary files); return what was removed. A vendor's spec is left alone,
    whatever its file name. For an uninstall step, and for the host's own shutdown."""
    removed: list[Path] = []
    try:
        entries = sorted(directory.iterdir())
    except FileNotFoundError:
        return removed
    for path in entries:
        ours = False
        if path.suffix in (".json", ".yaml") and path.is_file():
            found = _spec_kind(path)
            ours = found is not None and found.partition("/")[0] == VENDOR
        elif path.name.startswith(f".{VENDOR}-") and path.suffix == ".tmp":
            ours = True
        if ours:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


# -- the host's writer ----------------------------------------------------------------------


@dataclass
class _Written:
    """What is on disk for one resource: each device's edits and qualified name."""

    path: Path
    edits: dict[str, ContainerEdits]
    names: dict[str, str]
    error: str = ""
    #: what a failed write was for, written again by ``retry_failed``
    wanted: tuple[ResourceSpec, Mapping[str, Device]] | None = None


#: A failed spec write is tried again after this long, doubling up to the cap.
FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 60.0


class CdiWriter:
    """Keeps one spec per resource in ``directory`` current with the resource's snapshot.

    ``refresh`` runs on the event loop right after a snapshot changes, before any
    Allocate can see the new devices, so a name in an answer is always on disk (or the
    answer is refused). ``drivers`` limits CDI to those drivers (empty: every driver).
    """

    def __init__(
        self,
        directory: Path,
        drivers: Collection[str] = (),
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.directory = directory
        self.drivers = frozenset(drivers)
        self.on_error = on_error
        self._written: dict[str, _Written] = {}
        self._closed = False
        self._failed = asyncio.Event()

    def errors(self) -> dict[str, str]:
        """Resource → why its spec could not be written (only resources whose last write
        failed)."""
        return {name: w.error for name, w in self._written.items() if w.error}

    async def retry_failed(self) -> None:
        """Write every failed spec again, with back-off, until each is written: a full
        disk that frees up heals without waiting for a device change."""
        delay = FIRST_RETRY_SECONDS
        while True:
            if not self.errors():
                delay = FIRST_RETRY_SECONDS
                self._failed.clear()
                await self._failed.wait()
            await asyncio.sleep(delay)
            for written in list(self._written.values()):
                if written.error and written.wanted is not None:
                    self.refresh(*written.wanted)
            delay = min(delay * 2, MAX_RETRY_SECONDS)

    def covers(self, driver: str) -> bool:
        """Whether the resources of the driver named ``driver`` are served through CDI."""
        return not self.drivers or driver in self.drivers

    def refresh(self, spec: ResourceSpec, devices: Mapping[str, Device]) -> None:
        """Write the resource's spec if what CDI applies changed (health alone does not);
        remove it when the resource has no devices. A failed write is logged and makes
        Allocate refuse the resource's changed devices until a write succeeds."""
        if self._closed:
            return
        edits = {i: d.edits for i, d in devices.items()}
        before = self._written.get(spec.name)
        if before is not None and not before.error and before.edits == edits:
            return
        path = self.directory / spec_file_name(spec.name)
        document = spec_document(spec, devices.values())
        try:
            if document is None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            elif write_atomically(path, json.dumps(document, indent=2) + "\n"):
                log.info("CDI spec %s written (%d devices)", path, len(edits))
        except OSError as exc:
            error = f"cannot write the CDI spec {path}: {exc.strerror or exc}"
            if before is None or before.error != error:
                log.error("resource %r: %s; trying again with back-off", spec.name, error)
            if self.on_error is not None:
                self.on_error(path.name)
            kept = before or _Written(path, {}, {})
            self._written[spec.name] = _Written(
                path, kept.edits, kept.names, error, (spec, dict(devices))
            )
            self._failed.set()
            return
        if before is not None and before.error:
            log.info("resource %r: CDI spec %s written again", spec.name, path)
        names = {i: qualified_name(spec.name, i) for i in devices}
        self._written[spec.name] = _Written(path, edits, names)

    def names(self, resource: str, devices: Mapping[str, Device], ids: Sequence[str]) -> list[str]:
        """The qualified names of ``ids``, once their spec is on disk with their current
        edits; else ``CdiUnavailable``."""
        written = self._written.get(resource)
        if written is None:
            raise CdiUnavailable(f"no CDI spec is written for resource {resource!r}")
        names = []
        for device_id in ids:
            if written.edits.get(device_id, None) != devices[device_id].edits:
                reason = written.error or "not written yet"
                raise CdiUnavailable(
                    f"the CDI spec of resource {resource!r} does not hold device "
                    f"{device_id!r} as it is now ({reason})"
                )
            names.append(written.names[device_id])
        return names

    def allocation(
        self,
        spec: ResourceSpec,
        devices: Mapping[str, Device],
        ids: Sequence[str],
        composed: ContainerEdits,
    ) -> ContainerEdits:
        """The Allocate answer in CDI mode, from ``composed`` (the composed edits, after
        the driver's ``allocate`` answer and the policies): the devices' CDI names first;
        without what the spec applies (the declared device nodes, mounts and env other
        than joined and indexed env); with everything else (joined and numbered env,
        annotations, declared CDI names, and what ``allocate`` or a policy added, which no
        spec holds)."""
        names = self.names(spec.name, devices, ids)
        declared = [spec.edits, *(devices[i].edits for i in ids)]
        in_answer = answer_envs(spec)
        in_spec_env = {(k, v) for e in declared for k, v in e.envs.items() if k not in in_answer}
        in_spec_nodes = {n for e in declared for n in e.devices}
        in_spec_mounts = {m for e in declared for m in e.mounts}
        return ContainerEdits(
            envs={k: v for k, v in composed.envs.items() if (k, v) not in in_spec_env},
            annotations=composed.annotations,
            devices=tuple(n for n in composed.devices if n not in in_spec_nodes),
            mounts=tuple(m for m in composed.mounts if m not in in_spec_mounts),
            cdi_devices=tuple(dict.fromkeys([*names, *composed.cdi_devices])),
        )

    def write_again(self, resources: Iterable[tuple[ResourceSpec, Mapping[str, Device]]]) -> None:
        """Write these resources' specs whatever this writer wrote before: the devicehost
        this one replaces on the node (a rolling update's old pod) removed them as it
        stopped."""
        self._written.clear()
        for spec, devices in resources:
            self.refresh(spec, devices)

    def remove_all(self) -> None:
        """Remove every spec this writer wrote, and write no more (clean shutdown)."""
        self._closed = True
        for written in self._written.values():
            try:
                written.path.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:  # a stop must finish: say what is left behind
                log.warning("cannot remove the CDI spec %s: %s", written.path, exc.strerror)
                continue
            log.info("CDI spec %s removed", written.path)
        self._written.clear()


# -- kept for drivers that still write their own specs ----------------------------------------


def cdi_name(kind: str, device: str) -> str:
    """The fully qualified CDI device name: ``vendor.com/class=device``."""
    return f"{kind}={device}"


def write_spec(
    directory: Path, kind: str, devices: Mapping[str, Allocation], common: Allocation | None = None
) -> Path:
    """Deprecated: drivers no longer write CDI specs; the host does (``cdi.enabled``).

    Kept only until the bundled drivers stop calling it. Writes
    ``<directory>/devicehost-<vendor>-<class>.json`` atomically, when its content changed.
    """
    document: dict[str, Any] = {
        "cdiVersion": "",
        "kind": kind,
        "devices": [{"name": n, "containerEdits": container_edits(a)} for n, a in devices.items()],
    }
    if common is not None:
        document["containerEdits"] = container_edits(common)
    document["cdiVersion"] = minimum_version(document)
    path = directory / ("devicehost-" + kind.replace("/", "-") + ".json")
    write_atomically(path, json.dumps(document, indent=2) + "\n")
    return path
